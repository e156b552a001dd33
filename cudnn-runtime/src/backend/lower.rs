//! Lowering a [`Graph`] to one finalized cuDNN operation graph: a tensor descriptor per tensor
//! (padded to cuDNN's smallest rank, see `cudnn::node`), then each node through its op family's
//! `lower.rs` (`ops/*/lower.rs`, given a `NodeCx` made here from the graph), then the
//! `CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR` over all operations.

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendDescriptorType_t as K;

use super::BackendError;
use crate::cudnn::{
    padded_layout, Binding, Cudnn, CudnnError, Descriptor, Internals, Label, NodeCx, Port, Record, ALIGNMENT, MAX_RANK,
};
use crate::ir::{Graph, Node, Tensor, TensorId};
use crate::ops::{FusionRule, Layout, Op, Pointwise, PointwiseMode};
use crate::DataType;

/// A finalized operation graph and every descriptor it was built from (kept alive with it).
#[derive(Debug)]
pub(crate) struct LoweredGraph {
    pub(crate) operation_graph: Descriptor,
    /// Tensors the lowering added that the variant pack binds (see [`Internals`]).
    pub(crate) internals: Internals,
    _parts: Vec<Descriptor>,
}

/// The views of `graph` bound by pointer ([`Internals::views`], [`Internals::aliased`]), and,
/// by node, the view tensor V of each view copied into its output ([`lower_view_copy`]). cuDNN
/// 9.19 has no slice operation and no engine for a reshape or transpose (`docs/ops.md`), so:
///
/// - a slice feeding another op is no operation: its Y is bound to graph input X's address plus
///   the offset;
/// - a view whose Y is a graph output (a part's output, in a partitioned plan) is a copy, since
///   the port is laid out as declared (packed unless set, `GraphBuilder::build`), not as the
///   view: V, Y's dims with the view's strides, is bound to X's address plus the offset, and a
///   pointwise identity writes Y. X must be in memory, a graph input (or what an earlier part
///   wrote);
/// - a reshape or transpose of a graph input read only by matmuls is no operation either: its Y,
///   with the view's strides, is bound to X's address;
/// - any other reshape or transpose feeding another op is a reshape operation
///   (`ops::layout::lower`).
// Long because each kind of view (slice by pointer, alias, reshape operation) is one arm of one
// walk over the nodes, sharing the uids and copies it assigns.
fn views(graph: &Graph, next_uid: &mut i64) -> Result<(Internals, Vec<Option<Tensor>>), BackendError> {
    let mut out = Internals::default();
    let mut copies: Vec<Option<Tensor>> = vec![None; graph.nodes.len()];
    let mut by_pointer = vec![false; graph.nodes.len()];
    let unsupported = |node: &Node, reason: String| BackendError::Unsupported {
        node: node.name.clone(),
        op: node.op.call_name(),
        reason,
    };
    for (n, node) in graph.nodes.iter().enumerate() {
        let Op::Layout(layout) = &node.op else { continue };
        let (Some(&x_id), Some(&y_id)) = (node.inputs.first(), node.outputs.first()) else { continue };
        let (x, y) = (graph.tensor(x_id), graph.tensor(y_id));
        let slice = matches!(layout, Layout::Slice { .. });
        let computed = graph.nodes.iter().any(|m| m.outputs.contains(&x_id));
        // A reshape or transpose of a graph input that only matmuls read is that input described
        // again (its view strides), as cuDNN's matmul takes any strides: its engines take no
        // reshape operation before them (a matmul of `transpose(w)` got no engine).
        let matmul_view = !slice
            && y.is_virtual
            && !x.is_virtual
            && !computed
            && !x.is_by_value()
            && layout.view_strides(&x.dims, &x.strides, &y.dims).ok().as_ref() == Some(&y.strides)
            && graph.nodes.iter().filter(|m| m.inputs.contains(&y_id)).all(|m| matches!(m.op, Op::Matmul(_)));
        if !node.op.is_view() || (y.is_virtual && !slice && !matmul_view) {
            continue;
        }
        if x.is_by_value() {
            return Err(unsupported(
                node,
                format!(
                    "cuDNN before 9.22 slices by pointer offset into device memory; `{}` is a by-value scalar",
                    x.name
                ),
            ));
        }
        if x.is_virtual || computed {
            let reason = if y.is_virtual {
                format!(
                    "cuDNN before 9.22 slices by pointer offset, so X must be a graph input; `{}` is computed",
                    x.name
                )
            } else {
                format!(
                    "`{}` is a graph output, delivered packed: a copy of the view, which cuDNN 9.19 makes only from \
                     memory (a graph input, or a tensor an earlier part wrote); `{}` is computed",
                    y.name, x.name
                )
            };
            return Err(unsupported(node, reason));
        }
        let offset = layout.offset(&x.strides) as u64 * x.data_type.size_bytes() as u64;
        if !offset.is_multiple_of(ALIGNMENT) {
            return Err(unsupported(
                node,
                format!("the view starts {offset} bytes into `{}`, which is not {ALIGNMENT}-byte aligned", x.name),
            ));
        }
        let bound = if y.is_virtual {
            y.uid
        } else {
            let strides =
                layout.view_strides(&x.dims, &x.strides, &y.dims).map_err(|e| unsupported(node, e.to_string()))?;
            let uid = *next_uid;
            *next_uid += 1;
            copies[n] = Some(Tensor {
                name: format!("{}.view", y.name),
                uid,
                dims: y.dims.clone(),
                strides,
                data_type: x.data_type,
                is_virtual: false,
                pass_by_value: None,
                host_scalar: false,
            });
            uid
        };
        out.views.push((bound, x_id.0, offset));
        by_pointer[n] = true;
    }
    // A graph input read only by pointer is in no operation: the variant pack leaves it out.
    for (node, _) in graph.nodes.iter().zip(&by_pointer).filter(|(_, &p)| p) {
        let x = node.inputs[0];
        let described = graph.nodes.iter().zip(&by_pointer).any(|(m, &p)| !p && m.inputs.contains(&x));
        if !described && !out.aliased.contains(&x.0) {
            out.aliased.push(x.0);
        }
    }
    Ok((out, copies))
}

/// A view copied into its output Y (see [`views`]): a pointwise identity from `view`, the view
/// of X's memory bound by pointer, into Y as the graph lays it out. Describes Y where it is not
/// yet. The result holds the view's descriptor among its parts.
fn lower_view_copy(
    graph: &Graph,
    node: &Node,
    view: &Tensor,
    tensors: &mut [Option<Descriptor>],
    cudnn: &Cudnn,
    next_uid: &mut i64,
) -> Result<Operations, BackendError> {
    let y_id = node.outputs[0];
    let y = graph.tensor(y_id);
    if tensors[y_id.0].is_none() {
        tensors[y_id.0] = Some(tensor_descriptor(y, node)?);
    }
    let view_descriptor = tensor_descriptor(view, node)?;
    let identity = Op::Pointwise(Pointwise::new(PointwiseMode::Identity));
    let cx = NodeCx {
        name: &node.name,
        op: identity.call_name(),
        compute_type: node.compute_data_type,
        intermediate_type: graph.context.intermediate_data_type,
        inputs: vec![lowering_port(view, None, 1)],
        outputs: vec![lowering_port(
            y,
            Some(node.op.call_name()),
            graph.nodes.iter().filter(|n| n.inputs.contains(&y_id)).count(),
        )],
        descriptors: vec![Some(&view_descriptor), tensors[y_id.0].as_ref()],
    };
    let lowered = identity.lower(&cx, cudnn, next_uid)?;
    let mut parts = lowered.parts;
    parts.push(view_descriptor);
    Ok(Operations { operations: lowered.operations, parts, internals: lowered.internals })
}

/// Tensor `t` as a lowering reads it, written by `producer` (none for a graph input) and read by
/// `readers` nodes.
fn lowering_port<'a>(t: &'a Tensor, producer: Option<&'static str>, readers: usize) -> Port<'a> {
    Port {
        name: &t.name,
        uid: t.uid,
        dims: t.dims.clone(),
        strides: t.strides.clone(),
        data_type: t.data_type,
        is_virtual: t.is_virtual,
        by_value: t.is_by_value(),
        producer,
        readers,
    }
}

/// The first uid a lowering may give a tensor of its own: one past the graph's largest (at most
/// [`crate::ir::MAX_UID`] in a validated graph, so the numbering has 2^62 uids of room).
fn first_free_uid(graph: &Graph) -> i64 {
    graph.tensors.iter().map(|t| t.uid).max().unwrap_or(0).max(0) + 1
}

/// What `node`'s op family lowering reads of the graph: the node's tensors and their
/// descriptors (every one described by now).
fn node_cx<'a>(graph: &'a Graph, node: &'a Node, tensors: &'a [Option<Descriptor>]) -> NodeCx<'a> {
    let port = |id: &TensorId| {
        lowering_port(
            graph.tensor(*id),
            graph.nodes.iter().find(|n| n.outputs.contains(id)).map(|n| n.op.call_name()),
            graph.nodes.iter().filter(|n| n.inputs.contains(id)).count(),
        )
    };
    NodeCx {
        name: &node.name,
        op: node.op.call_name(),
        compute_type: node.compute_data_type,
        intermediate_type: graph.context.intermediate_data_type,
        inputs: node.inputs.iter().map(port).collect(),
        outputs: node.outputs.iter().map(port).collect(),
        descriptors: node
            .inputs
            .iter()
            .chain(&node.outputs)
            .map(|id| tensors.get(id.0).and_then(Option::as_ref))
            .collect(),
    }
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
                needs: None,
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
    if tensor.is_by_value() {
        d.set_bool(A::CUDNN_ATTR_TENSOR_IS_BY_VALUE, true)?;
    }
    d.finalize()?;
    Ok(d)
}

/// Lowers a validated graph for `cudnn`: online graphs carry the handle (without it cuDNN 9.19
/// offers engine configs that fail at execute); deviceless ones get the device properties at
/// heuristics and plan time instead. `dynamic_shape` sets cuDNN's dynamic-shape flag.
pub(crate) fn lower(graph: &Graph, cudnn: &Cudnn, dynamic_shape: bool) -> Result<LoweredGraph, BackendError> {
    let Operations { operations, mut parts, internals } = lower_operations(graph, cudnn)?;
    let mut operation_graph = Descriptor::new(K::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
    let refs: Vec<&Descriptor> = operations.iter().collect();
    operation_graph.set_descriptors(A::CUDNN_ATTR_OPERATIONGRAPH_OPS, &refs)?;
    if dynamic_shape {
        operation_graph.set_bool(A::CUDNN_ATTR_OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED, true)?;
    }
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

/// The axes of a tensor that address memory (extent above 1, stride not 0), outermost in memory
/// first (ties in the order of the dims).
fn memory_order(dims: &[i64], strides: &[i64]) -> Vec<usize> {
    let mut axes: Vec<usize> = (0..dims.len()).filter(|&i| dims[i] > 1 && strides.get(i) != Some(&0)).collect();
    axes.sort_by_key(|&i| std::cmp::Reverse(strides.get(i).copied().unwrap_or(0)));
    axes
}

/// Whether a tensor's memory order is one cuDNN's pointwise kernels keep: row-major, or
/// channels-last (the first dim outermost, the second innermost, the rest in order), on the axes
/// that address memory.
fn pointwise_layout(t: &Tensor) -> bool {
    let order = memory_order(&t.dims, &t.strides);
    let row_major = order.windows(2).all(|w| w[0] < w[1]);
    let mut channels_last: Vec<usize> = (0..t.dims.len()).filter(|&i| i != 1).collect();
    if t.dims.len() > 1 {
        channels_last.push(1);
    }
    channels_last.retain(|a| order.contains(a));
    row_major || order == channels_last
}

/// Rule `pointwise.axis_order`: a kernel of elementwise ops alone reads no input laid out in
/// another axis order than the output it writes (a transposed view read elementwise), on the axes
/// both address (a broadcast input is compared on its own axes), and its tensors are row-major or
/// channels-last. Measured on the H200 with cuDNN 9.19 (2026-12-05; `tests/gpu_suite/gpu_ops_layout.rs`,
/// and through cudnn-frontend alone `tests/frontend/probe_cudnn.py`): a pointwise identity from
/// `x.permute(2, 0, 1)`'s strides into a packed output was planned (engine 1) and wrote neither
/// the transpose nor a linear copy (relative error 1.41); the same copy into a port declared in
/// the view's own order (`order [1, 2, 0]`, one order on both sides) was planned and wrote
/// non-finite values; described with the input row-major and the output strided it got no
/// engine. An anchor's fused epilogue (a convolution's channels-last output into an NCHW port) is
/// the anchor engine's and is not concerned.
fn check_axis_order(node: &Node, x: &Tensor, x_named: &str, y: &Tensor) -> Result<(), BackendError> {
    if x.is_by_value() || x.dims.len() != y.dims.len() {
        return Ok(());
    }
    let order = memory_order(&x.dims, &x.strides);
    let shared: Vec<usize> = memory_order(&y.dims, &y.strides).into_iter().filter(|a| order.contains(a)).collect();
    let (x_layout, y_layout) = (pointwise_layout(x), pointwise_layout(y));
    if order == shared && x_layout && y_layout {
        return Ok(());
    }
    let message = if x_layout && y_layout {
        // Both in an order the kernels keep, but not the same one: channels-last against
        // row-major, most often a convolution's output (cuDNN writes it channels-last) read by
        // the elementwise part after it into an NCHW port. No view and no transpose is involved.
        let named = |t: &Tensor| match (is_row_major(t), t.dims.len()) {
            (true, 4) => "row-major (NCHW)",
            (false, 4) => "channels-last (NHWC)",
            (true, _) => "row-major",
            (false, _) => "channels-last",
        };
        format!(
            "{x_named} (strides {:?}) is {} but is read elementwise into `{}` (strides {:?}), which is {}; cuDNN \
             9.19's pointwise kernels computed copies between axis orders wrongly on the H200, so a kernel of \
             elementwise ops alone reads and writes one order: {CHANNELS_LAST_HINT}",
            x.strides,
            named(x),
            y.name,
            y.strides,
            named(y)
        )
    } else {
        format!(
            "{x_named} (strides {:?}) is read elementwise into `{}` (strides {:?}); cuDNN 9.19's pointwise kernels \
             computed such copies wrongly on the H200 (a transposed view into a packed port, and into a port in the \
             view's own order), so a kernel of elementwise ops alone reads and writes one order, row-major or \
             channels-last: read the view with a matmul, or keep the transpose inside the graph",
            x.strides, y.name, y.strides
        )
    };
    Err(CudnnError::SupportRule {
        node: node.name.clone(),
        op: node.op.call_name(),
        rule: "pointwise.axis_order",
        message,
        needs: None,
    }
    .into())
}

/// How rule `pointwise.axis_order` ends where a kernel of elementwise ops mixes channels-last and
/// row-major tensors: [`name_channels_last_ports`] adds the ports to declare.
const CHANNELS_LAST_HINT: &str = "declare its ports alike (`channels_last` on every port of rank 3 to 5, or on none)";

/// Whether a tensor's memory order is row-major on the axes that address memory.
fn is_row_major(t: &Tensor) -> bool {
    memory_order(&t.dims, &t.strides).windows(2).all(|w| w[0] < w[1])
}

/// A refusal by rule `pointwise.axis_order` of a kernel that mixes channels-last and row-major
/// tensors (a part of `graph`, planned apart from the convolution before it), with the ports of
/// `graph`'s convolution and pooling chains that are not channels-last
/// ([`Graph::ports_not_channels_last`]) named: cuDNN's convolutions write channels-last, so the
/// elementwise part after one reads NHWC and writes the NCHW port, and declaring those ports
/// `channels_last` is the fix (the ResNet block of `tests/common/blocks.rs` without
/// `channels_last`). Any other error is returned as it is.
pub(crate) fn name_channels_last_ports(error: BackendError, graph: &Graph) -> BackendError {
    match error {
        BackendError::SupportRule { node, op, rule: "pointwise.axis_order", message, needs }
            if message.ends_with(CHANNELS_LAST_HINT) =>
        {
            let ports = graph.ports_not_channels_last();
            let message = match message.strip_suffix(CHANNELS_LAST_HINT) {
                Some(before) if !ports.is_empty() => {
                    let list: Vec<String> = ports.iter().map(ToString::to_string).collect();
                    format!(
                        "{before}cuDNN's convolutions write channels-last, so declare the convolution ports of graph \
                         `{}` `channels_last` (`x: f16[N, C, H, W] channels_last`, `GraphBuilder::set_channels_last`): \
                         {}",
                        graph.name,
                        list.join(", ")
                    )
                }
                _ => message,
            };
            BackendError::SupportRule { node, op, rule: "pointwise.axis_order", message, needs }
        }
        other => other,
    }
}

fn lower_operations(graph: &Graph, cudnn: &Cudnn) -> Result<Operations, BackendError> {
    // A reduction cuDNN plans only described as a channel reduction (`reduction_layout`).
    let described = super::reduction_layout::channel_form(graph);
    let graph: &Graph = &described;
    let mut tensors: Vec<Option<Descriptor>> = std::iter::repeat_with(|| None).take(graph.tensors.len()).collect();
    let mut operations = Vec::with_capacity(graph.nodes.len());
    let mut parts = Vec::new();
    let mut next_uid = first_free_uid(graph);
    let (mut internals, copies) = views(graph, &mut next_uid)?;
    // A kernel of elementwise ops alone: the pointwise engines, which rule `pointwise.axis_order`
    // is about.
    let elementwise = graph.nodes.iter().all(|n| matches!(n.op.fusion(), FusionRule::Elementwise | FusionRule::View));
    for (node, copy) in graph.nodes.iter().zip(&copies) {
        if elementwise && matches!(node.op, Op::Pointwise(_)) {
            for &y in &node.outputs {
                for &x in &node.inputs {
                    let x = graph.tensor(x);
                    check_axis_order(node, x, &format!("`{}`", x.name), graph.tensor(y))?;
                }
            }
        }
        if let Some(view) = copy {
            let x = graph.tensor(node.inputs[0]);
            check_axis_order(node, view, &format!("the view of `{}`", x.name), graph.tensor(node.outputs[0]))?;
            let copied = lower_view_copy(graph, node, view, &mut tensors, cudnn, &mut next_uid)?;
            operations.extend(copied.operations);
            parts.extend(copied.parts);
            internals.extend(copied.internals);
            continue;
        }
        let y_uid = node.outputs.first().map(|&y| graph.tensor(y).uid);
        if node.op.is_view() && internals.views.iter().any(|&(bound, _, _)| Some(bound) == y_uid) {
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
        let cx = node_cx(graph, node, &tensors);
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
    if let Some(unused) = graph.inputs().into_iter().find(|id| !described(id) && !internals.aliased.contains(&id.0)) {
        return Err(BackendError::UnusedInput { graph: graph.name.clone(), tensor: graph.tensor(unused).name.clone() });
    }
    parts.extend(tensors.into_iter().flatten());
    Ok(Operations { operations, parts, internals })
}
