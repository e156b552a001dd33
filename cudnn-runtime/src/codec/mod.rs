//! The cudnn-frontend JSON vocabulary that the op families' codecs (`ops/<family>/codec.rs`) and
//! the document-level reader and writer (`serialize/`) share: a JSON tree that keeps duplicate
//! keys ([`json`]), floats as hex bit patterns ([`float`]), cudnn-frontend's data-type spellings
//! ([`names`]), and [`CodecError`]. It sits below `ops/` (it imports nothing of the crate but
//! [`DataType`](crate::DataType)), so the families can use it while `serialize/` uses them.

mod error;
pub mod float;
pub(crate) mod json;
pub(crate) mod names;

pub(crate) use error::CodecError;

use float::{hex_to_f32, hex_to_f64};
use json::{wrong_type, Json};

/// A list of integers.
pub(crate) fn ints(values: &[i64]) -> Json {
    Json::Arr(values.iter().map(|&v| Json::Int(v)).collect())
}

/// An optional f32 in cudnn-frontend's hex encoding (`null` when unset).
pub(crate) fn f32_or_null(v: Option<f64>) -> Json {
    v.map_or(Json::Null, |x| Json::str(float::f32_to_hex(x as f32)))
}

/// An f32 written in cudnn-frontend's hex encoding, or as a plain number.
pub(crate) fn f32_value(v: &Json, path: &str) -> Result<f32, CodecError> {
    match v {
        Json::Str(s) => hex_to_f32(s).ok_or_else(|| CodecError::BadFloat {
            path: path.to_string(),
            value: s.clone(),
            expected: "a 32-bit float bit pattern in hex such as \"3DCCCCCD\"",
        }),
        Json::Float(x) => Ok(*x as f32),
        Json::Int(x) => Ok(*x as f32),
        Json::UInt(x) => Ok(*x as f32),
        other => Err(wrong_type(path, "a float (hex bit pattern or number)", other)),
    }
}

/// An f64 written as our hex encoding, or as a plain number.
pub(crate) fn f64_value(v: &Json, path: &str) -> Result<f64, CodecError> {
    match v {
        Json::Str(s) => hex_to_f64(s).ok_or_else(|| CodecError::BadFloat {
            path: path.to_string(),
            value: s.clone(),
            expected: "a 64-bit float bit pattern in hex such as \"0x3fe0000000000000\"",
        }),
        Json::Float(x) => Ok(*x),
        Json::Int(x) => Ok(*x as f64),
        Json::UInt(x) => Ok(*x as f64),
        other => Err(wrong_type(path, "a float (hex bit pattern or number)", other)),
    }
}
