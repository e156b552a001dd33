//! Why a structural JSON document could not be read. Every variant names where in the document the
//! problem is (a field path such as `tensors["5"].dim`, a node, a port or a tensor), so a message
//! says what to fix without opening a debugger.

use crate::codec::CodecError;
use crate::ir::GraphError;
use crate::ops::codec::ReadError;
use crate::ops::AttrError;

/// A structural JSON document that [`super::structure_from_json`] rejects.
///
/// Paths are written as in the document: `context.compute_data_type`, `tensors["5"].dim`,
/// `nodes[2].inputs.IN_0`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SerializeError {
    /// The input is longer than [`super::MAX_INPUT_BYTES`].
    #[error("the document is {len} bytes; at most {max} are read")]
    InputTooLarge {
        /// Its length in bytes.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// Not JSON (this includes a truncated document).
    #[error("not valid JSON at line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// What the parser said.
        message: String,
    },
    /// More tensors, nodes, dims or JSON values than the reader accepts.
    #[error("`{path}` has {count} {what}; at most {max} are accepted")]
    TooMany {
        /// Where.
        path: String,
        /// What is counted (`tensors`, `nodes`, `dims`, `JSON values`).
        what: &'static str,
        /// How many there are (for JSON values, whose counting stops at the cap: the cap plus one).
        count: usize,
        /// The cap.
        max: usize,
    },
    /// A `json_version` this reader does not know.
    #[error("json_version {found} is not supported; this reader takes \"{supported}\"")]
    UnsupportedVersion {
        /// The version found, as written in the document.
        found: String,
        /// The version read.
        supported: &'static str,
    },
    /// A `cudnn_graph.format` this reader does not know.
    #[error("cudnn_graph.format {found} is not supported; this reader takes {supported}")]
    UnsupportedFormat {
        /// The format found, as written in the document.
        found: String,
        /// The format read.
        supported: u64,
    },
    /// A required field is absent (or `null`).
    #[error("`{path}` is missing")]
    MissingField {
        /// The field's path.
        path: String,
    },
    /// A field of the wrong JSON type.
    #[error("`{path}` must be {expected}, found {found}")]
    WrongType {
        /// The field's path.
        path: String,
        /// What it must be (`an integer`, `a string`, ...).
        expected: &'static str,
        /// What it is.
        found: &'static str,
    },
    /// A number outside the range a field takes.
    #[error("`{path}` is {value}, outside {range}")]
    OutOfRange {
        /// The field's path.
        path: String,
        /// The value, as written.
        value: String,
        /// The accepted range.
        range: &'static str,
    },
    /// A field that neither cudnn-frontend's layout nor our extension defines there (a misspelled
    /// field, or one of a newer cudnn-frontend that may change the meaning: not skipped).
    #[error("`{path}` is not a known field; the fields there are {}", .accepted.join(", "))]
    UnknownField {
        /// The field's path.
        path: String,
        /// The fields accepted there.
        accepted: Vec<&'static str>,
    },
    /// An enum spelling that neither cudnn-frontend nor this reader knows.
    #[error("`{path}` is \"{value}\", which is not a known {kind}")]
    UnknownEnum {
        /// The field's path.
        path: String,
        /// The enum (`data type`, `pointwise mode`, `reduction mode`, `reordering type`).
        kind: &'static str,
        /// The spelling found.
        value: String,
    },
    /// A cudnn-frontend data type that the graph IR has no equivalent for (`INT4`, `FP8_E8M0`, ...).
    #[error("`{path}` is {value}, a cudnn-frontend data type that cudnn-graph does not support")]
    UnsupportedDataType {
        /// The field's path.
        path: String,
        /// The spelling found.
        value: String,
    },
    /// A float that is neither a JSON number nor a hex bit pattern of the right width.
    #[error("`{path}` is \"{value}\", not {expected}")]
    BadFloat {
        /// The field's path.
        path: String,
        /// The text found.
        value: String,
        /// What it must be.
        expected: &'static str,
    },
    /// A key given twice in one JSON object (serde_json and nlohmann would keep only one).
    #[error("`{path}` has the key \"{key}\" twice")]
    DuplicateKey {
        /// The object's path.
        path: String,
        /// The key.
        key: String,
    },
    /// A node whose `tag` names an op this reader does not support.
    #[error("node `{node}` has tag \"{tag}\"; supported tags are {}", .supported.join(", "))]
    UnknownTag {
        /// The node.
        node: String,
        /// The tag found.
        tag: String,
        /// The tags read.
        supported: Vec<&'static str>,
    },
    /// A port that the node's op does not have.
    #[error("node `{node}` has no {direction} port `{port}`; it has {}", .expected.join(", "))]
    UnknownPort {
        /// The node.
        node: String,
        /// `input` or `output`.
        direction: &'static str,
        /// The port found.
        port: String,
        /// The ports of the op, in order.
        expected: Vec<&'static str>,
    },
    /// A port of the op that the node does not feed.
    #[error("node `{node}` does not connect its {direction} port `{port}`")]
    MissingPort {
        /// The node.
        node: String,
        /// `input` or `output`.
        direction: &'static str,
        /// The port.
        port: &'static str,
    },
    /// A port that refers to a tensor the `tensors` map does not have.
    #[error("node `{node}` port `{port}` refers to tensor {reference}, which `tensors` does not have")]
    UnknownTensorRef {
        /// The node.
        node: String,
        /// The port.
        port: String,
        /// The reference, as written (`5` or `"bias"`).
        reference: String,
    },
    /// A tensor that two nodes write.
    #[error("tensor `{tensor}` is an output of both `{first}` and `{second}`")]
    ProducedTwice {
        /// The tensor.
        tensor: String,
        /// The first node writing it.
        first: String,
        /// The second.
        second: String,
    },
    /// Two tensors with the same uid.
    #[error("uid {uid} is used by both `{first}` and `{second}`")]
    DuplicateUid {
        /// The uid.
        uid: i64,
        /// The first tensor's name.
        first: String,
        /// The second tensor's name.
        second: String,
    },
    /// A cudnn-frontend feature the graph IR cannot represent (tensor reordering, ragged offsets,
    /// matmul padding or M/N/K overrides, deterministic reductions, runtime-supplied scalars).
    #[error("`{path}`: {feature} is not supported by cudnn-graph")]
    Unsupported {
        /// The field's path.
        path: String,
        /// What it asks for.
        feature: String,
    },
    /// A by-value scalar that is inconsistent or out of range.
    #[error("tensor `{tensor}`: {reason}")]
    BadScalar {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// A cudnn-frontend attribute that the node's mode does not take (`relu_upper_clip` on `ADD`).
    #[error("node `{node}` ({mode}) does not take `{field}`")]
    AttrNotAccepted {
        /// The node.
        node: String,
        /// The mode (cuDNN spelling).
        mode: &'static str,
        /// The cudnn-frontend field.
        field: &'static str,
    },
    /// The attributes do not make a valid op.
    #[error("node `{node}`: {source}")]
    Attr {
        /// The node.
        node: String,
        /// What the op definition said.
        source: AttrError,
    },
    /// Our extension disagrees with cudnn-frontend's field it refines (cudnn-frontend's fields are
    /// authoritative; the extension only carries bits they cannot hold).
    #[error("`{path}` disagrees with cudnn-frontend's `{field}`")]
    ExtensionMismatch {
        /// The extension field's path.
        path: String,
        /// The cudnn-frontend field it contradicts.
        field: String,
    },
    /// A cudnn-frontend reduction whose reduced dims cannot be told from its input and output.
    #[error("node `{node}`: cannot tell the reduced dims from X {x} and Y {y}")]
    ReductionDims {
        /// The node.
        node: String,
        /// X's dims.
        x: String,
        /// Y's dims.
        y: String,
    },
    /// A cudnn-frontend convolution gradient whose filter extents or output padding cannot be
    /// told from its tensors (cudnn-frontend has no field for them).
    #[error("node `{node}`: cannot tell the convolution's geometry from its inputs {inputs} and output {output}")]
    ConvGeometry {
        /// The node.
        node: String,
        /// The output's dims.
        output: String,
        /// The inputs' dims.
        inputs: String,
    },
    /// `cudnn_graph.tensor_order` is not a permutation of the document's uids.
    #[error("cudnn_graph.tensor_order {reason}")]
    TensorOrder {
        /// What is wrong.
        reason: String,
    },
    /// A tensor whose element count or storage span does not fit in 64 bits.
    #[error("tensor `{tensor}` with dims {dims:?} and strides {strides:?} spans more than 2^63 elements")]
    Overflow {
        /// The tensor.
        tensor: String,
        /// Its dims.
        dims: Vec<i64>,
        /// Its strides (empty when they were to be inferred).
        strides: Vec<i64>,
    },
    /// The fingerprint stored in `cudnn_graph.fingerprint` is not the graph's.
    #[error("the graph's fingerprint is {computed:#018x} but the document says {stored:#018x}")]
    FingerprintMismatch {
        /// The stored fingerprint.
        stored: u64,
        /// The fingerprint of the graph read.
        computed: u64,
    },
    /// The graph read breaks a rule of the IR ([`crate::Graph::validate`]). Boxed: a
    /// [`GraphError`] is large and this error travels through every reader function.
    #[error("the graph read is invalid: {0}")]
    Graph(Box<GraphError>),
}

impl From<CodecError> for SerializeError {
    fn from(e: CodecError) -> Self {
        match e {
            CodecError::MissingField { path } => SerializeError::MissingField { path },
            CodecError::WrongType { path, expected, found } => SerializeError::WrongType { path, expected, found },
            CodecError::OutOfRange { path, value, range } => SerializeError::OutOfRange { path, value, range },
            CodecError::UnknownField { path, accepted } => SerializeError::UnknownField { path, accepted },
            CodecError::UnknownEnum { path, kind, value } => SerializeError::UnknownEnum { path, kind, value },
            CodecError::UnsupportedDataType { path, value } => SerializeError::UnsupportedDataType { path, value },
            CodecError::BadFloat { path, value, expected } => SerializeError::BadFloat { path, value, expected },
            CodecError::DuplicateKey { path, key } => SerializeError::DuplicateKey { path, key },
            CodecError::Unsupported { path, feature } => SerializeError::Unsupported { path, feature },
            CodecError::AttrNotAccepted { node, mode, field } => SerializeError::AttrNotAccepted { node, mode, field },
            CodecError::ExtensionMismatch { path, field } => SerializeError::ExtensionMismatch { path, field },
            CodecError::ReductionDims { node, x, y } => SerializeError::ReductionDims { node, x, y },
            CodecError::ConvGeometry { node, output, inputs } => SerializeError::ConvGeometry { node, output, inputs },
        }
    }
}

impl From<ReadError> for SerializeError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Codec(e) => e.into(),
            ReadError::Attr { node, source } => SerializeError::Attr { node, source },
        }
    }
}

impl From<GraphError> for SerializeError {
    fn from(e: GraphError) -> Self {
        SerializeError::Graph(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_small() {
        // Clippy's `result_large_err` threshold is 128 bytes.
        assert!(std::mem::size_of::<SerializeError>() <= 128, "{}", std::mem::size_of::<SerializeError>());
    }
}
