//! cudnn-frontend's spellings of data types (`DataType_t`: `FLOAT`, `BFLOAT16`, ...), both ways,
//! and the field names every node has.

use super::json::Obj;
use super::CodecError;
use crate::DataType;

/// The key of our extension, at the top level, in nodes and in tensors.
pub(crate) const EXT: &str = "cudnn_graph";

/// Fields every node has (`Attributes`: name, compute type, ports), the tag, and our extension.
pub(crate) const NODE_FIELDS: [&str; 6] = ["compute_data_type", EXT, "inputs", "name", "outputs", "tag"];

/// cudnn-frontend's `DataType_t` spelling of an IR data type.
pub(crate) const fn data_type_name(d: DataType) -> &'static str {
    match d {
        DataType::F32 => "FLOAT",
        DataType::F64 => "DOUBLE",
        DataType::F16 => "HALF",
        DataType::BF16 => "BFLOAT16",
        DataType::I8 => "INT8",
        DataType::U8 => "UINT8",
        DataType::I32 => "INT32",
        DataType::I64 => "INT64",
        DataType::Bool => "BOOLEAN",
        DataType::Fp8E4M3 => "FP8_E4M3",
        DataType::Fp8E5M2 => "FP8_E5M2",
    }
}

/// cudnn-frontend data types the IR has no equivalent for.
const UNSUPPORTED_DATA_TYPES: [&str; 9] = [
    "INT8x4",
    "UINT8x4",
    "INT8x32",
    "FAST_FLOAT_FOR_FP8",
    "FP8_E8M0",
    "FP4_E2M1",
    "INT4",
    "COMPLEX_FP32",
    "COMPLEX_FP64",
];

/// What a data-type spelling is.
pub(crate) enum DataTypeName {
    /// One of ours.
    Known(DataType),
    /// One of cudnn-frontend's that we do not support.
    Unsupported,
    /// Nobody's.
    Unknown,
}

/// Parses cudnn-frontend's spelling of a data type.
pub(crate) fn parse_data_type(s: &str) -> DataTypeName {
    if let Some(d) = DataType::ALL.into_iter().find(|d| data_type_name(*d) == s) {
        DataTypeName::Known(d)
    } else if UNSUPPORTED_DATA_TYPES.contains(&s) {
        DataTypeName::Unsupported
    } else {
        DataTypeName::Unknown
    }
}

/// Reads an optional data-type field.
pub(crate) fn read_data_type(obj: &Obj<'_>, key: &str) -> Result<Option<DataType>, CodecError> {
    let Some(s) = obj.opt_str(key)? else {
        return Ok(None);
    };
    match parse_data_type(s) {
        DataTypeName::Known(d) => Ok(Some(d)),
        DataTypeName::Unsupported => {
            Err(CodecError::UnsupportedDataType { path: obj.field_path(key), value: s.to_string() })
        }
        DataTypeName::Unknown => {
            Err(CodecError::UnknownEnum { path: obj.field_path(key), kind: "data type", value: s.to_string() })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_type_names_agree_with_the_ir_serde_names() {
        for d in DataType::ALL {
            let serde_name = serde_json::to_string(&d).unwrap();
            assert_eq!(serde_name, format!("\"{}\"", data_type_name(d)));
            assert!(matches!(parse_data_type(data_type_name(d)), DataTypeName::Known(x) if x == d));
        }
        assert!(matches!(parse_data_type("INT4"), DataTypeName::Unsupported));
        assert!(matches!(parse_data_type("float"), DataTypeName::Unknown));
    }
}
