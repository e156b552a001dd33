//! Lowering a [`Graph`] to one finalized cuDNN operation graph: a tensor descriptor per tensor,
//! then each node through its op family's `lower.rs` (`ops/*/lower.rs`), then the
//! `CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR` over all operations.
//!
//! Ranks: cuDNN wants at least 3 dims on every tensor of these ops. A tensor of rank `r < 3` is
//! given `3 - r` leading dims of extent 1 whose stride is `dims[0] * strides[0]` (the span of the
//! whole tensor), the same padding for every tensor, so the tensors of one node keep equal ranks.

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendDescriptorType_t as K;

use super::context::Binding;
pub(crate) use super::descriptor::Descriptor;
use super::descriptor::{Label, Record};
use super::{BackendError, Cudnn};
use crate::ir::{Graph, Node, Tensor, TensorId};
use crate::ops::{Layout, Op};
use crate::DataType;

/// The smallest rank cuDNN accepts for these ops' tensors.
pub(crate) const MIN_RANK: usize = 3;
/// The largest rank cuDNN accepts (`CUDNN_DIM_MAX`).
pub(crate) const MAX_RANK: usize = 8;
/// The byte alignment every tensor descriptor promises.
pub(crate) const ALIGNMENT: u64 = 16;

/// A finalized operation graph and every descriptor it was built from (kept alive with it).
#[derive(Debug)]
pub(crate) struct LoweredGraph {
    pub(crate) operation_graph: Descriptor,
    /// Tensors the lowering added that the variant pack binds (see [`Internals`]).
    pub(crate) internals: Internals,
    _parts: Vec<Descriptor>,
}

/// Tensors a lowering adds beyond the graph's own that the variant pack must bind: by-value
/// scalars (attention's scale and mask constants) and device tensors that live at the front of
/// the workspace (attention backward's softmax sums and dQ accumulator, as cudnn-frontend's
/// "fe workspace"). cuDNN's own workspace follows them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Internals {
    /// By-value scalars: uid, type, value.
    pub(crate) scalars: Vec<(i64, DataType, f64)>,
    /// Workspace tensors: uid and byte offset into the workspace.
    pub(crate) workspace: Vec<(i64, usize)>,
    /// Bytes of workspace they take (a multiple of 256), before cuDNN's own.
    pub(crate) workspace_bytes: usize,
    /// Slices lowered as cudnn-frontend does before cuDNN 9.22: Y's uid, bound to the address
    /// of graph input X plus a byte offset.
    pub(crate) views: Vec<(i64, TensorId, u64)>,
    /// Graph inputs read only through such views: no operation names them, so the variant pack
    /// leaves them out.
    pub(crate) aliased: Vec<TensorId>,
}

impl Internals {
    /// Appends `other`, its workspace tensors placed after these.
    pub(crate) fn extend(&mut self, other: Internals) {
        self.scalars.extend(other.scalars);
        let base = self.workspace_bytes;
        self.workspace.extend(other.workspace.into_iter().map(|(uid, offset)| (uid, base + offset)));
        self.workspace_bytes += other.workspace_bytes;
        self.views.extend(other.views);
        self.aliased.extend(other.aliased);
    }
}

/// The slices of `graph` as pointer offsets ([`Internals::views`], [`Internals::aliased`]).
/// cuDNN 9.19 has no slice operation, so a slice must read a graph input and feed another op.
fn views(graph: &Graph) -> Result<Internals, BackendError> {
    let mut out = Internals::default();
    let unsupported = |node: &Node, reason: String| BackendError::Unsupported {
        node: node.name.clone(),
        op: node.op.call_name(),
        reason,
    };
    for node in &graph.nodes {
        let Op::Layout(slice @ Layout::Slice { .. }) = &node.op else { continue };
        let (x_id, y_id) = (node.inputs[0], node.outputs[0]);
        let (x, y) = (graph.tensor(x_id), graph.tensor(y_id));
        if x.is_virtual || x.pass_by_value.is_some() {
            return Err(unsupported(
                node,
                format!(
                    "cuDNN before 9.22 slices by pointer offset, so X must be a graph input; `{}` is computed",
                    x.name
                ),
            ));
        }
        if !y.is_virtual {
            return Err(unsupported(
                node,
                format!("cuDNN before 9.22 slices by pointer offset, so Y must feed another op; `{}` is a graph output that nothing would write", y.name),
            ));
        }
        let offset = slice.offset(&x.strides) as u64 * x.data_type.size_bytes() as u64;
        if !offset.is_multiple_of(ALIGNMENT) {
            return Err(unsupported(
                node,
                format!("the slice starts {offset} bytes into `{}`, which is not {ALIGNMENT}-byte aligned", x.name),
            ));
        }
        out.views.push((y.uid, x_id, offset));
        let read_elsewhere =
            graph.nodes.iter().any(|n| n.inputs.contains(&x_id) && !matches!(n.op, Op::Layout(Layout::Slice { .. })));
        if !read_elsewhere && !out.aliased.contains(&x_id) {
            out.aliased.push(x_id);
        }
    }
    Ok(out)
}

/// The first uid a lowering may give a tensor of its own: one past the graph's largest (at most
/// [`crate::ir::MAX_UID`] in a validated graph, so the numbering has 2^62 uids of room).
fn first_free_uid(graph: &Graph) -> i64 {
    graph.tensors.iter().map(|t| t.uid).max().unwrap_or(0).max(0) + 1
}

/// One node's operation descriptor and the descriptors it refers to (matmul, pointwise or
/// reduction descriptors), which live as long as the graph.
#[derive(Debug)]
pub(crate) struct LoweredOp {
    pub(crate) operation: Descriptor,
    pub(crate) parts: Vec<Descriptor>,
}

/// What an op family's `lower` gets: the node and the descriptors of its tensors.
pub(crate) struct NodeCx<'a> {
    node: &'a Node,
    graph: &'a Graph,
    tensors: &'a [Option<Descriptor>],
}

impl NodeCx<'_> {
    /// A new descriptor whose errors name this node.
    pub(crate) fn descriptor(&self, kind: K) -> Result<Descriptor, BackendError> {
        Descriptor::labelled(kind, Label { node: Some(self.node.name.clone()), tensor: None })
    }

    /// The node being lowered.
    pub(crate) fn node(&self) -> &Node {
        self.node
    }

    /// The graph it belongs to.
    pub(crate) fn graph(&self) -> &Graph {
        self.graph
    }

    /// The type the node computes in.
    pub(crate) fn compute_type(&self) -> DataType {
        self.node.compute_data_type
    }

    /// The descriptor of input `port`.
    pub(crate) fn input(&self, port: usize) -> Result<&Descriptor, BackendError> {
        self.port(self.node.inputs.get(port).map(|id| id.0), "input", port)
    }

    /// The descriptor of output `port`.
    pub(crate) fn output(&self, port: usize) -> Result<&Descriptor, BackendError> {
        self.port(self.node.outputs.get(port).map(|id| id.0), "output", port)
    }

    fn port(&self, index: Option<usize>, what: &str, port: usize) -> Result<&Descriptor, BackendError> {
        index.and_then(|i| self.tensors.get(i)).and_then(Option::as_ref).ok_or_else(|| BackendError::Unsupported {
            node: self.node.name.clone(),
            op: self.node.op.call_name(),
            reason: format!("it has no {what} #{port}"),
        })
    }

    /// The rank input `port` has in the graph (before padding to [`MIN_RANK`]).
    pub(crate) fn input_rank(&self, port: usize) -> usize {
        self.node.inputs.get(port).and_then(|id| self.graph.tensors.get(id.0)).map_or(0, |t| t.dims.len())
    }

    /// The element type of input `port`, if the node has that input.
    pub(crate) fn input_data_type(&self, port: usize) -> Option<DataType> {
        self.node.inputs.get(port).and_then(|id| self.graph.tensors.get(id.0)).map(|t| t.data_type)
    }

    /// A [`BackendError::Unsupported`] about this node.
    pub(crate) fn unsupported(&self, reason: String) -> BackendError {
        BackendError::Unsupported { node: self.node.name.clone(), op: self.node.op.call_name(), reason }
    }
}

/// The leading dims a tensor of rank `rank` gets (see the module docs).
pub(crate) fn rank_padding(rank: usize) -> usize {
    MIN_RANK.saturating_sub(rank)
}

/// Dims and strides padded to [`MIN_RANK`] with leading 1s.
pub(crate) fn padded_layout(dims: &[i64], strides: &[i64]) -> (Vec<i64>, Vec<i64>) {
    let pad = rank_padding(dims.len());
    let span = match (dims.first(), strides.first()) {
        // The padded dims have extent 1, so their stride addresses nothing: saturating keeps a
        // valid graph's `d * s` (which can pass i64 when the first dim is large and its stride
        // larger than its span needs) from overflowing.
        (Some(d), Some(s)) => d.saturating_mul(*s),
        _ => 1,
    };
    let mut d = vec![1; pad];
    let mut s = vec![span; pad];
    d.extend_from_slice(dims);
    s.extend_from_slice(strides);
    (d, s)
}

fn tensor_descriptor(tensor: &Tensor, node: &Node) -> Result<Descriptor, BackendError> {
    if tensor.dims.len() > MAX_RANK {
        return Err(BackendError::Unsupported {
            node: node.name.clone(),
            op: node.op.call_name(),
            reason: format!(
                "tensor `{}` has rank {}; cuDNN takes at most {MAX_RANK} dims",
                tensor.name,
                tensor.dims.len()
            ),
        });
    }
    if tensor.data_type == DataType::Bool && !tensor.is_virtual {
        // cuDNN stores booleans as packed bits; heuristics propose no engine for a bool tensor
        // in memory whose rows do not start on a byte (measured deviceless on cuDNN 9.19:
        // [16, 100] none, [16, 104] and every multiple of 8 plan).
        if tensor.strides.iter().zip(&tensor.dims).any(|(&s, &d)| d > 1 && s != 1 && s % 8 != 0) {
            return Err(BackendError::SupportRule {
                node: node.name.clone(),
                op: node.op.call_name(),
                rule: "bool.byte_rows",
                message: format!(
                    "bool tensor `{}` {} with strides {:?} is stored as packed bits, and cuDNN needs each row to \
                     start on a byte: every stride but the unit one must be a multiple of 8 (pad the \
                     innermost dim to a multiple of 8)",
                    tensor.name,
                    crate::dim::shape_string(&tensor.dims),
                    tensor.strides
                ),
            });
        }
    }
    let (dims, strides) = padded_layout(&tensor.dims, &tensor.strides);
    let label = Label { node: Some(node.name.clone()), tensor: Some(tensor.name.clone()) };
    let mut d = Descriptor::labelled(K::CUDNN_BACKEND_TENSOR_DESCRIPTOR, label)?;
    d.set_data_type(A::CUDNN_ATTR_TENSOR_DATA_TYPE, tensor.data_type)?;
    d.set_i64s(A::CUDNN_ATTR_TENSOR_DIMENSIONS, &dims)?;
    d.set_i64s(A::CUDNN_ATTR_TENSOR_STRIDES, &strides)?;
    d.set_i64s(A::CUDNN_ATTR_TENSOR_UNIQUE_ID, &[tensor.uid])?;
    d.set_i64s(A::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &[ALIGNMENT as i64])?;
    d.set_bool(A::CUDNN_ATTR_TENSOR_IS_VIRTUAL, tensor.is_virtual)?;
    if tensor.pass_by_value.is_some() {
        d.set_bool(A::CUDNN_ATTR_TENSOR_IS_BY_VALUE, true)?;
    }
    d.finalize()?;
    Ok(d)
}

/// Lowers a validated graph for `cudnn`: online graphs carry the handle (without it cuDNN 9.19
/// offers engine configs that fail at execute); deviceless ones get the device properties at
/// heuristics and plan time instead.
pub(crate) fn lower(graph: &Graph, cudnn: &Cudnn) -> Result<LoweredGraph, BackendError> {
    let Operations { operations, mut parts, internals } = lower_operations(graph, cudnn)?;
    let mut operation_graph = Descriptor::new(K::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
    let refs: Vec<&Descriptor> = operations.iter().collect();
    operation_graph.set_descriptors(A::CUDNN_ATTR_OPERATIONGRAPH_OPS, &refs)?;
    match cudnn.binding() {
        Binding::Handle(handle) => operation_graph.set_handle(A::CUDNN_ATTR_OPERATIONGRAPH_HANDLE, handle)?,
        Binding::DeviceProperties(_) => {}
    }
    operation_graph.finalize()?;
    let described = parts.iter().filter(|d| d.kind() == K::CUDNN_BACKEND_TENSOR_DESCRIPTOR).count();
    tracing::debug!(operations = operations.len(), tensors = described, "operation graph finalized");
    parts.extend(operations);
    Ok(LoweredGraph { operation_graph, internals, _parts: parts })
}

/// The operations of a lowered graph, in graph order, with every descriptor they refer to
/// (tensors included) and the [`Internals`]; not yet an operation graph.
struct Operations {
    operations: Vec<Descriptor>,
    parts: Vec<Descriptor>,
    internals: Internals,
}

/// What lowering `graph` describes to cuDNN, as the lowering set it: every tensor an operation
/// refers to (the graph's and the lowering's own; an operation graph holds no other) and every
/// operation with its tensors. A plan's JSON from a payload must describe exactly this before
/// cuDNN is given it (`backend::binding`). Made by the same code as [`lower`], without the
/// operation graph.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Manifest {
    /// Every tensor, by uid (a uid described twice keeps its first description).
    pub(crate) tensors: std::collections::BTreeMap<i64, Record>,
    /// Every operation: its kind's name and the uids of its tensors (sorted, deduplicated).
    pub(crate) operations: Vec<(&'static str, Vec<i64>)>,
    /// The tensors the lowering adds that the variant pack binds (a plan loaded from JSON needs
    /// them for its variant pack; the same lowering decides them for [`lower`]).
    pub(crate) internals: Internals,
}

/// The [`Manifest`] of `graph` lowered for `cudnn`.
pub(crate) fn manifest(graph: &Graph, cudnn: &Cudnn) -> Result<Manifest, BackendError> {
    let Operations { operations, internals, .. } = lower_operations(graph, cudnn)?;
    let mut manifest = Manifest { internals, ..Manifest::default() };
    for op in &operations {
        let mut uids = Vec::with_capacity(op.record().refs.len());
        for tensor in &op.record().refs {
            let Some(uid) = tensor.uid else { continue };
            manifest.tensors.entry(uid).or_insert_with(|| Record { refs: Vec::new(), ..tensor.clone() });
            uids.push(uid);
        }
        uids.sort_unstable();
        uids.dedup();
        manifest.operations.push((op.kind_name(), uids));
    }
    Ok(manifest)
}

fn lower_operations(graph: &Graph, cudnn: &Cudnn) -> Result<Operations, BackendError> {
    let mut tensors: Vec<Option<Descriptor>> = std::iter::repeat_with(|| None).take(graph.tensors.len()).collect();
    let mut operations = Vec::with_capacity(graph.nodes.len());
    let mut parts = Vec::new();
    let mut next_uid = first_free_uid(graph);
    let mut internals = views(graph)?;
    for node in &graph.nodes {
        if let Op::Layout(Layout::Slice { .. }) = node.op {
            // No operation: Y, described as a device tensor, is bound to X's address plus the
            // offset (`views`); X is described only where another op reads it.
            let y = graph.tensor(node.outputs[0]);
            if tensors[node.outputs[0].0].is_none() {
                let bound = Tensor { is_virtual: false, ..y.clone() };
                tensors[node.outputs[0].0] = Some(tensor_descriptor(&bound, node)?);
            }
            continue;
        }
        // Each tensor is described where it is first used, so its errors name that node.
        for id in node.inputs.iter().chain(&node.outputs) {
            let (Some(slot), Some(tensor)) = (tensors.get_mut(id.0), graph.tensors.get(id.0)) else {
                return Err(BackendError::Unsupported {
                    node: node.name.clone(),
                    op: node.op.call_name(),
                    reason: format!("it refers to tensor #{}, which the graph does not have", id.0),
                });
            };
            if slot.is_none() {
                *slot = Some(tensor_descriptor(tensor, node)?);
            }
        }
        let cx = NodeCx { node, graph, tensors: &tensors };
        // One operation, or a subgraph of them with tensors of its own (attention).
        let lowered = node.op.lower(&cx, cudnn, &mut next_uid)?;
        tracing::debug!(
            node = %node.name,
            op = node.op.call_name(),
            operations = lowered.operations.len(),
            descriptors = lowered.operations.len() + lowered.parts.len(),
            "lowered"
        );
        operations.extend(lowered.operations);
        parts.extend(lowered.parts);
        internals.extend(lowered.internals);
    }
    let described = |id: &TensorId| tensors.get(id.0).is_some_and(Option::is_some);
    if let Some(unused) = graph.inputs().into_iter().find(|id| !described(id) && !internals.aliased.contains(id)) {
        return Err(BackendError::UnusedInput { graph: graph.name.clone(), tensor: graph.tensor(unused).name.clone() });
    }
    parts.extend(tensors.into_iter().flatten());
    Ok(Operations { operations, parts, internals })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_ranks_get_leading_ones_spanning_the_tensor() {
        assert_eq!(padded_layout(&[5], &[2]), (vec![1, 1, 5], vec![10, 10, 2]));
        assert_eq!(padded_layout(&[4, 6], &[6, 1]), (vec![1, 4, 6], vec![24, 6, 1]));
        assert_eq!(padded_layout(&[2, 4, 6], &[24, 6, 1]), (vec![2, 4, 6], vec![24, 6, 1]));
        assert_eq!(rank_padding(1), 2);
        assert_eq!(rank_padding(5), 0);
    }
}
