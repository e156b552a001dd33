//! The errors of the graph layer: [`GraphError`], a graph that breaks a rule, and
//! [`NotChannelsLast`], a port named in the hint of a graph cuDNN finds no plan for. Each names
//! what it is about (graph, node, op, port, tensor, dims) so a message says what to fix without a
//! debugger.

use std::fmt;

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
    /// An extent a `graph!` computes from its dim parameters (`shape = [B, S, H * D]`) that
    /// overflows `i64` for their values.
    #[error("extent `{extent}` overflows i64 with {}", dims_string(.dims))]
    ExtentOverflow {
        /// The extent, as the graph's canonical form prints it (`D * H`).
        extent: String,
        /// The values of the parameters it depends on.
        dims: Vec<(String, i64)>,
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
    /// A host scalar (supplied at execute) that also holds a value.
    #[error("host scalar `{tensor}` is supplied at execute and cannot also hold a value (pass_by_value)")]
    HostScalarWithValue {
        /// The tensor.
        tensor: String,
    },
    /// A host scalar (supplied at execute) that a node writes.
    #[error("host scalar `{tensor}` is a graph input supplied at execute, but node `{node}` writes it")]
    HostScalarProduced {
        /// The tensor.
        tensor: String,
        /// The node writing it.
        node: String,
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
    #[error(
        "tensor `{tensor}` is declared {declared} but port {port} of its op produces {required}{}",
        reason.map(|r| format!("; {r}")).unwrap_or_default()
    )]
    DeclaredType {
        /// The tensor.
        tensor: String,
        /// The node producing it.
        node: String,
        /// The op's output port that produces it.
        port: &'static str,
        /// The declared type.
        declared: DataType,
        /// The type the op produces.
        required: DataType,
        /// Why the op forces that type, where it is a limit of cuDNN's
        /// ([`crate::ops::OutputMeta::reason`]).
        reason: Option<&'static str>,
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

/// A port of a convolution or pooling node that is not channels-last, which is what cuDNN's
/// fused convolution engines want: named in the hint of a graph cuDNN finds no plan for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotChannelsLast {
    /// The tensor (a graph input or output).
    pub tensor: String,
    /// Its type, as [`type_string`](super::type_string) spells it.
    pub type_string: String,
    /// The convolution or pooling node it is a port of.
    pub node: String,
    /// That node's op.
    pub op: &'static str,
}

impl fmt::Display for NotChannelsLast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` ({}) of node `{}` ({})", self.tensor, self.type_string, self.node, self.op)
    }
}

/// `H = 4, D = 32`.
fn dims_string(dims: &[(String, i64)]) -> String {
    let parts: Vec<String> = dims.iter().map(|(n, v)| format!("{n} = {v}")).collect();
    parts.join(", ")
}
