//! Typed errors. Each names what it is about (graph, node, op, port, tensor, dims) so a message
//! says what to fix without a debugger.

use crate::ops::{AttrError, ShapeError};
use crate::DataType;

/// A graph that breaks a rule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    /// Two tensors (or two nodes) share a name.
    #[error("the name `{name}` is used twice")]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// Two tensors share a uid.
    #[error("uid {uid} is used by both `{first}` and `{second}`")]
    DuplicateUid {
        /// The uid.
        uid: i64,
        /// The first tensor with it.
        first: String,
        /// The second.
        second: String,
    },
    /// A uid that is not positive, or past [`crate::ir::MAX_UID`].
    #[error("tensor `{tensor}` has uid {uid}; uids must be in 1..=2^62 (lowering numbers the tensors it adds above the graph's largest uid)")]
    BadUid {
        /// The tensor.
        tensor: String,
        /// Its uid.
        uid: i64,
    },
    /// Dims that are empty or not positive.
    #[error("tensor `{tensor}` has dims {dims:?}; every tensor needs at least one dim and every dim must be positive")]
    BadDims {
        /// The tensor.
        tensor: String,
        /// Its dims.
        dims: Vec<i64>,
    },
    /// More dims than any graph may have ([`crate::dim::MAX_RANK`]).
    #[error("tensor `{tensor}` has {rank} dims; a graph's tensors have at most {max} (cuDNN's own limit is 8)")]
    RankTooHigh {
        /// The tensor.
        tensor: String,
        /// Its rank.
        rank: usize,
        /// The limit.
        max: usize,
    },
    /// Strides of the wrong count or not positive.
    #[error("tensor `{tensor}` has dims {dims:?} but strides {strides:?}; give one positive stride per dim")]
    BadStrides {
        /// The tensor.
        tensor: String,
        /// Its dims.
        dims: Vec<i64>,
        /// Its strides.
        strides: Vec<i64>,
    },
    /// A tensor with more elements, or a storage span of more bytes, than [`crate::dim::MAX_BYTES`].
    #[error(
        "tensor `{tensor}` ({data_type} {dims:?}{}) spans more than i64::MAX bytes, the most a tensor may address",
        .strides.as_ref().map(|s| format!(" with strides {s:?}")).unwrap_or_default()
    )]
    TooLarge {
        /// The tensor.
        tensor: String,
        /// Its dims.
        dims: Vec<i64>,
        /// Its strides, if they were set (packed otherwise).
        strides: Option<Vec<i64>>,
        /// Its element type.
        data_type: DataType,
    },
    /// A dim parameter (a `graph!` const generic or runtime dim) past `i64::MAX`, the largest
    /// extent cuDNN and the IR express.
    #[error("dim `{dim}` = {value} is larger than i64::MAX, the largest extent a tensor can have")]
    DimTooLarge {
        /// The dim's name.
        dim: String,
        /// Its value.
        value: u64,
    },
    /// A dim order that is not a permutation of the tensor's dims.
    #[error("tensor `{tensor}` has {rank} dims, so its dim order must list 0..{rank} once each; got {order:?}")]
    BadOrder {
        /// The tensor.
        tensor: String,
        /// Its rank.
        rank: usize,
        /// The order given.
        order: Vec<usize>,
    },
    /// Channels-last asked of a tensor whose rank has no channel dim between a batch dim and
    /// spatial dims.
    #[error(
        "tensor `{tensor}` has dims {dims:?}; channels-last needs 3 to 5 dims ([N, C, W], [N, C, H, W] or \
         [N, C, D, H, W]); give another rank an explicit dim order"
    )]
    ChannelsLastRank {
        /// The tensor.
        tensor: String,
        /// Its dims.
        dims: Vec<i64>,
    },
    /// A by-value scalar that is virtual or not all-1 dims.
    #[error("by-value tensor `{tensor}` must be non-virtual with every dim 1")]
    BadScalar {
        /// The tensor.
        tensor: String,
    },
    /// A node refers to a tensor index outside the graph.
    #[error("node `{node}` refers to tensor #{index}, which the graph does not have")]
    UnknownTensor {
        /// The node.
        node: String,
        /// The index.
        index: usize,
    },
    /// A virtual tensor no node produces.
    #[error("virtual tensor `{tensor}` is produced by no node")]
    NeverProduced {
        /// The tensor.
        tensor: String,
    },
    /// A tensor that two nodes write.
    #[error("tensor `{tensor}` is produced by two nodes")]
    ProducedTwice {
        /// The tensor.
        tensor: String,
    },
    /// Nodes out of topological order.
    #[error("node `{node}` reads `{tensor}` before any node produces it")]
    UsedBeforeProduced {
        /// The tensor.
        tensor: String,
        /// The node.
        node: String,
    },
    /// An op's shape or type rule failed.
    #[error("node `{node}` ({op}){}: {source}", .port.map(|p| format!(", port {p}")).unwrap_or_default())]
    Shape {
        /// The node.
        node: String,
        /// The op.
        op: &'static str,
        /// The port at fault, if one is.
        port: Option<&'static str>,
        /// What the rule said.
        source: ShapeError,
    },
    /// A bad attribute.
    #[error("node `{node}`: {source}")]
    Attr {
        /// The node.
        node: String,
        /// What is wrong.
        source: AttrError,
    },
    /// A node with the wrong number of outputs.
    #[error("node `{node}` has {found} outputs; its op produces {expected}")]
    OutputCount {
        /// The node.
        node: String,
        /// What the op produces.
        expected: usize,
        /// What the node lists.
        found: usize,
    },
    /// A tensor whose stored dims differ from what its op infers.
    #[error("tensor `{tensor}` is declared {declared} but node `{node}` produces {inferred}")]
    DeclaredDims {
        /// The tensor.
        tensor: String,
        /// The node producing it.
        node: String,
        /// The declared dims.
        declared: String,
        /// The inferred dims.
        inferred: String,
    },
    /// A tensor whose type differs from what its op produces.
    #[error("tensor `{tensor}` is declared {declared} but its op produces {required}")]
    DeclaredType {
        /// The tensor.
        tensor: String,
        /// The node producing it.
        node: String,
        /// The declared type.
        declared: DataType,
        /// The type the op produces.
        required: DataType,
    },
    /// A literal where the port takes only tensors.
    #[error("node `{node}` ({op}): port {port} cannot take a scalar")]
    ScalarNotAllowed {
        /// The node.
        node: String,
        /// The op.
        op: &'static str,
        /// The port.
        port: &'static str,
    },
    /// No outputs.
    #[error("graph `{graph}` has no outputs")]
    NoOutputs {
        /// The graph.
        graph: String,
    },
    /// A computed intermediate nothing reads.
    #[error("virtual tensor `{tensor}` is computed but never used; make it an output or remove it")]
    Unused {
        /// The tensor.
        tensor: String,
    },
}

/// A wrong argument to an executed graph (reference or GPU).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ArgError {
    /// A buffer whose length does not fit the tensor's storage: a host buffer of another length
    /// than the storage span, or a device buffer shorter than it (a longer device buffer is
    /// accepted: framework arenas hand out larger blocks; only the span is read or written).
    #[error(
        "tensor `{tensor}` needs {expected} elements ({dims:?} {}) but its buffer has {found}",
        crate::ir::MemoryLayout::of(.dims, .strides)
    )]
    Length {
        /// The tensor.
        tensor: String,
        /// Elements needed.
        expected: usize,
        /// Elements given.
        found: usize,
        /// Its dims.
        dims: Vec<i64>,
        /// Its strides.
        strides: Vec<i64>,
    },
    /// A buffer of another element type.
    #[error("tensor `{tensor}` is {expected} but its buffer holds {found}")]
    DType {
        /// The tensor.
        tensor: String,
        /// The tensor's type.
        expected: DataType,
        /// The buffer's type.
        found: DataType,
    },
    /// A `bool` tensor's device buffer of one `bool` per element: cuDNN reads and writes packed
    /// bits.
    #[error(
        "tensor `{tensor}` is bool, which cuDNN stores as packed bits (8 per byte, the lowest bit first); \
         give it a buffer of `Bits` (`Bits::pack`/`Bits::unpack` convert) with `DeviceBuffer::bits_input` or \
         `DeviceBuffer::bits_output`, not one `bool` per element"
    )]
    UnpackedBool {
        /// The tensor.
        tensor: String,
    },
    /// An input the graph does not have, or given twice.
    #[error("`{tensor}` is not an input of graph `{graph}`, or is given twice")]
    Unexpected {
        /// The graph.
        graph: String,
        /// The name given.
        tensor: String,
    },
    /// An input not given.
    #[error("input `{tensor}` of graph `{graph}` is missing")]
    Missing {
        /// The graph.
        graph: String,
        /// The input.
        tensor: String,
    },
    /// A graph given to an engine that breaks a rule (a `Graph` made or edited by hand).
    #[error("graph `{graph}` cannot run: {source}")]
    Graph {
        /// The graph.
        graph: String,
        /// The rule it breaks.
        source: Box<GraphError>,
    },
    /// Dense input arrays for [`crate::reference::run_arrays`] with one slot per tensor missing.
    #[error("graph `{graph}` has {expected} tensors, but {found} value slots were given (one per tensor)")]
    Slots {
        /// The graph.
        graph: String,
        /// Its tensor count.
        expected: usize,
        /// The slots given.
        found: usize,
    },
    /// A runtime dim that breaks a shape rule (wraps the validation error).
    #[error("graph `{graph}` with {binding}: {source}")]
    Binding {
        /// The graph.
        graph: String,
        /// The runtime-dim values, `batch = 3, seq = 7`.
        binding: String,
        /// What failed.
        source: Box<GraphError>,
    },
}

/// Every error of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A graph that breaks a rule.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// A bad execution argument.
    #[error(transparent)]
    Arg(#[from] ArgError),
    /// A payload that cannot be read.
    #[error(transparent)]
    Serialize(#[from] crate::serialize::SerializeError),
    /// A plan payload that cannot be loaded here.
    #[cfg(feature = "cudnn")]
    #[error(transparent)]
    Payload(#[from] crate::serialize::plan::PayloadError),
    /// A cuDNN, CUDA or loading failure.
    #[cfg(feature = "cudnn")]
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
