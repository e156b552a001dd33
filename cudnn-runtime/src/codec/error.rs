//! [`CodecError`]: why a node or field of a structural JSON document could not be read, at the
//! level the codecs work at (below the op families, so they can use it). The public error is
//! `serialize::SerializeError`, which has each of these variants with the same fields and
//! meaning (documented there) and converts from this one variant for variant.

/// A field or node that the codecs reject; `serialize::SerializeError`'s variant of the same
/// name says what each one means.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CodecError {
    MissingField { path: String },
    WrongType { path: String, expected: &'static str, found: &'static str },
    OutOfRange { path: String, value: String, range: &'static str },
    UnknownField { path: String, accepted: Vec<&'static str> },
    UnknownEnum { path: String, kind: &'static str, value: String },
    UnsupportedDataType { path: String, value: String },
    BadFloat { path: String, value: String, expected: &'static str },
    DuplicateKey { path: String, key: String },
    Unsupported { path: String, feature: String },
    AttrNotAccepted { node: String, mode: &'static str, field: &'static str },
    ExtensionMismatch { path: String, field: String },
    ReductionDims { node: String, x: String, y: String },
    ConvGeometry { node: String, output: String, inputs: String },
}
