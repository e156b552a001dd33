//! Class graphs (issue 19): one graph made at a `dyn` dim's class bound serves every length of
//! that shape class, with no new plan. "Class" is the user's word (a `dyn` dim's
//! [`ShapeClass`](crate::shape_class::ShapeClass)); "padded" names the mechanism (a shorter call
//! runs on the class plan with its tensors padded to the class extents).
//!
//! cuDNN 9.19 runs a plan only at the shape it was made for (execute-time shape overrides are
//! cuDNN 9.21's), and its dynamic-shape attention plans ran the first shape's kernel at every
//! shape (`OpFamily::dynamic_shape_refusal`), so every new sequence length cost a plan (61–71 ms
//! on the H200); a layer norm's dynamic-shape plan still finalizes per shape (10–22 ms). Two
//! kinds of graph can run a shorter call on a longer plan instead:
//!
//! - **Attention**, through its padding mask: with `padding_mask`, query rows at or past
//!   `SEQ_LEN_Q[b]` and key columns at or past `SEQ_LEN_KV[b]` are masked. So a call at
//!   `S = 300` runs the class plan made at `S = 512`: its tensors copied into buffers of the
//!   class extents, the sequence lengths set to 300, and the outputs' first 300 rows copied
//!   back. Rows past the call's length never reach the call's rows: masked keys get probability
//!   0, masked queries are rows of their own.
//! - **Row-wise graphs** (layer, RMS and instance norms and their backward, batch norm
//!   inference, pointwise ops): each row along axis 0 is computed from that row alone, so a call
//!   of 300 rows runs the plan of 512 with its rows padded, nothing masked. The one sum over rows,
//!   a backward norm's DSCALE and DBIAS, gets 0 from a padded row when its inputs are the
//!   graph's own (padded with zeros: DY is 0, and X, MEAN and INV_VARIANCE of 0 keep the
//!   normalized row finite); a backward norm reading a computed tensor is refused.
//!
//! This module is the graph side, with no device: [`ClassGraph::new`] checks that a graph may be
//! padded and rewrites it with padding masks ([`ClassGraph::masked`], the graph the plan is made
//! of: each attention node gets `padding_mask` and two `i32[B, 1, 1, 1]` inputs of its own), and
//! [`ClassGraph::bind`] checks a call's graph against it and gives the copies
//! ([`PadCopy`]) and sequence lengths of that call. [`crate::backend::PaddedPlan`] runs them on the
//! GPU; [`PadCopy::pad_host`] and [`PadCopy::unpad_host`] are the same copies on host memory.
//!
//! What attention may be padded: graphs whose every node is attention (`sdpa`, `sdpa_backward`)
//! without a padding mask of its own, bias, dropout, fp8, sliding window or bottom-right alignment
//! (each would see the padding or shift with the extents). The sequence axis (2 of `[B, H, S, D]`)
//! of `Q`, `O`, `dO`, `Stats` and `dQ` is `S_q`, of `K`, `V`, `dK` and `dV` is `S_kv`. A row-wise
//! graph's I/O tensors have its rows or 1 along axis 0 (the parameters: SCALE, BIAS, DSCALE,
//! DBIAS), and only those of its rows are padded. Every other dim of a call must equal the
//! class's, and every padded tensor must be packed in the class tensor's dim order (BHSD, BSHD,
//! row-major, ...).
//!
//! ```
//! # use cudnn_runtime as cudnn_graph;
//! use cudnn_graph::ir::ClassGraph;
//! use cudnn_graph::{DataType, Graph, GraphBuilder};
//! fn attention(s: i64) -> Graph {
//!     let mut g = GraphBuilder::new("attention");
//!     let qkv: Vec<_> =
//!         ["q", "k", "v"].iter().map(|n| g.input(n, DataType::BF16, &[2, 4, s, 64]).unwrap().into()).collect();
//!     let o = g.op("sdpa", &qkv, &[("causal".into(), true.into())]).unwrap()[0];
//!     g.output(o, "o", DataType::BF16).unwrap();
//!     g.build().unwrap()
//! }
//! let class = ClassGraph::new(&attention(512))?;
//! assert_eq!(class.masked().inputs().len(), 5); // q, k, v and the two sequence lengths
//! let call = class.bind(&attention(300))?;
//! assert_eq!(call.seq_lens, [(300, 300)]);
//! // q: 2 · 4 rows of 300 · 64 elements, in rows of 512 · 64.
//! let q = call.copies[0].unwrap();
//! assert_eq!((q.rows, q.call_row, q.class_row), (8, 300 * 64, 512 * 64));
//! assert!(class.bind(&attention(513)).is_err()); // past the class bound
//! # Ok::<(), cudnn_graph::ir::PadError>(())
//! ```

use super::rewrite::Names;
use super::{Graph, GraphError, Node, Tensor, TensorId};
use crate::dim::strides_in_order_of;
use crate::ops::{Alignment, NormKind, Op, Sdpa};
use crate::DataType;

/// The axis of `[B, H, S, D]` that padding extends.
const SEQUENCE_AXIS: usize = 2;

/// The axis of a row-wise graph's tensors that padding extends.
const ROW_AXIS: usize = 0;

/// Why a graph cannot be padded, or a call cannot run on a class graph.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PadError {
    /// The class graph breaks a graph rule.
    #[error("{0}")]
    Graph(Box<GraphError>),
    /// A node that cannot be padded: only attention (through its padding mask) and row-wise
    /// graphs (layer and RMS norms, pointwise ops) can.
    #[error(
        "graph `{graph}` cannot be padded: node `{node}` is `{op}`; padded class graphs are attention (`sdpa`, \
         `sdpa_backward`, masked by their padding mask) or row-wise (layer, RMS and instance norms and their \
         backward, batch norm inference, pointwise ops: rows along axis 0 computed apart); {why}"
    )]
    NotPaddable {
        /// The graph.
        graph: String,
        /// The node.
        node: String,
        /// Its op.
        op: &'static str,
        /// Why this node is not one of them.
        why: &'static str,
    },
    /// A node with something that the padding would reach.
    #[error("graph `{graph}` cannot be padded: node `{node}` has {what}")]
    Unsupported {
        /// The graph.
        graph: String,
        /// The node.
        node: String,
        /// What it has, and why that is refused.
        what: &'static str,
    },
    /// A call whose graph is not the class graph's at other sequence lengths.
    #[error("graph `{graph}`: the call's graph is not the class graph at other sequence lengths: {what}")]
    Structure {
        /// The graph.
        graph: String,
        /// The first difference.
        what: String,
    },
    /// A plan given for a class graph that was made for another graph.
    #[error(
        "graph `{graph}`: the plan given was made for graph `{plan}`, not for its masked class graph \
         (`ClassGraph::masked`: the class graph with its padding masks)"
    )]
    PlanMismatch {
        /// The class graph.
        graph: String,
        /// The graph the plan was made for.
        plan: String,
    },
    /// A call's dim that the class cannot serve.
    #[error("graph `{graph}`: tensor `{tensor}` has {call} at axis {axis} where the class graph has {class}; {rule}")]
    Extent {
        /// The graph.
        graph: String,
        /// The tensor.
        tensor: String,
        /// The axis.
        axis: usize,
        /// The call's extent.
        call: i64,
        /// The class graph's.
        class: i64,
        /// The rule broken.
        rule: &'static str,
    },
    /// A call's tensor that is not packed in the class tensor's dim order.
    #[error(
        "graph `{graph}`: tensor `{tensor}` has strides {strides:?}, and a padded call needs it packed in the class \
         tensor's dim order ({expected:?} for its dims)"
    )]
    Layout {
        /// The graph.
        graph: String,
        /// The tensor.
        tensor: String,
        /// Its strides.
        strides: Vec<i64>,
        /// The packed strides it needs.
        expected: Vec<i64>,
    },
}

impl From<GraphError> for PadError {
    fn from(e: GraphError) -> Self {
        PadError::Graph(Box::new(e))
    }
}

/// A graph made at its class bound, checked for padding, and its masked form.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassGraph {
    class: Graph,
    /// Attention's class graph with its padding masks; `None` for a row-wise graph, which is
    /// planned as it is.
    masked: Option<Graph>,
    /// Per I/O tensor of the class graph (inputs, then outputs): its padded axis, if any.
    axes: Vec<Option<usize>>,
    /// Per attention node: the tensors whose sequence axes are its `S_q` and `S_kv` (its `Q` and
    /// `K`), and the masked graph's `SEQ_LEN_Q` and `SEQ_LEN_KV` inputs.
    nodes: Vec<Lengths>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lengths {
    q: TensorId,
    k: TensorId,
    seq_q: TensorId,
    seq_kv: TensorId,
}

/// A call bound to its class graph: the copies each I/O tensor needs, and each attention node's
/// sequence lengths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// Per I/O tensor of the graph (inputs, then outputs): how it is padded into its class
    /// buffer and cut back, or `None` where its extents are the class's on every axis a pad could
    /// change (it is bound as it is).
    pub copies: Vec<Option<PadCopy>>,
    /// Per attention node, in node order: the call's `(S_q, S_kv)`.
    pub seq_lens: Vec<(i32, i32)>,
}

impl Binding {
    /// Whether the call is at the class bound: nothing to copy.
    pub fn is_exact(&self) -> bool {
        self.copies.iter().all(|c| c.is_none_or(|c| c.call_row == c.class_row))
    }
}

/// One tensor's padding, in elements: `rows` blocks (every dim before the sequence axis in
/// memory order), each of `call_row` elements in the call's tensor and `class_row` in the class
/// buffer (the sequence extent times the elements of one position).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PadCopy {
    /// Blocks.
    pub rows: usize,
    /// Elements of a block in the call's tensor.
    pub call_row: usize,
    /// Elements of a block in the class buffer (at least `call_row`).
    pub class_row: usize,
}

impl PadCopy {
    /// Copies the call's tensor `call` into the class buffer `class`, and fills the rest of each
    /// class block with `fill`.
    ///
    /// # Panics
    /// If `call` or `class` is shorter than `rows` blocks of its size.
    pub fn pad_host<T: Copy>(&self, call: &[T], class: &mut [T], fill: T) {
        for r in 0..self.rows {
            let to = &mut class[r * self.class_row..(r + 1) * self.class_row];
            to[..self.call_row].copy_from_slice(&call[r * self.call_row..(r + 1) * self.call_row]);
            to[self.call_row..].fill(fill);
        }
    }

    /// Copies the call's part of the class buffer `class` back into the call's tensor `call`.
    ///
    /// # Panics
    /// If `call` or `class` is shorter than `rows` blocks of its size.
    pub fn unpad_host<T: Copy>(&self, class: &[T], call: &mut [T]) {
        for r in 0..self.rows {
            call[r * self.call_row..(r + 1) * self.call_row]
                .copy_from_slice(&class[r * self.class_row..r * self.class_row + self.call_row]);
        }
    }
}

/// Why attention `op` cannot be padded through its padding mask, if it cannot.
fn unpaddable(op: &Sdpa) -> Option<&'static str> {
    if op.padding_mask {
        return Some("a padding mask of its own (SEQ_LEN_Q, SEQ_LEN_KV): it already runs shorter sequences");
    }
    if op.bias || op.d_bias {
        return Some("a bias, which would be padded along both sequence axes");
    }
    if op.dropout.is_some() {
        return Some("dropout, whose random mask follows the padded extents");
    }
    if op.fp8.is_some() {
        return Some("fp8 attention, whose amax outputs would see the padding");
    }
    if op.window.is_some() {
        return Some("a sliding window");
    }
    if op.causal && op.alignment != Alignment::TopLeft {
        return Some("bottom-right alignment, whose diagonal moves with the padded extents");
    }
    None
}

/// Attention `op` of `node` with a padding mask, and its inputs: the node's, with the sequence
/// lengths `seq_q` and `seq_kv` among them where the masked op's ports put them (`None` if the
/// mask moved a port away).
fn with_padding_mask(op: &Sdpa, node: &Node, seq_q: TensorId, seq_kv: TensorId) -> Option<(Op, Vec<TensorId>)> {
    let old: Vec<(&str, TensorId)> = node.op.inputs().iter().map(|p| p.name).zip(node.inputs.iter().copied()).collect();
    let mut with_mask = op.clone();
    with_mask.padding_mask = true;
    let with_mask = Op::Sdpa(with_mask);
    let mut inputs = Vec::with_capacity(old.len() + 2);
    for port in with_mask.inputs() {
        inputs.push(match port.name {
            "SEQ_LEN_Q" => seq_q,
            "SEQ_LEN_KV" => seq_kv,
            name => old.iter().find(|(n, _)| *n == name)?.1,
        });
    }
    Some((with_mask, inputs))
}

impl ClassGraph {
    /// Checks that `class` (a graph at its class bound) may be padded, and masks it.
    ///
    /// A graph with an attention node is padded along its sequence axes, masked; any other along
    /// axis 0, its rows.
    pub fn new(class: &Graph) -> Result<Self, PadError> {
        class.validate()?;
        if class.nodes.iter().any(|n| matches!(n.op, Op::Sdpa(_))) {
            Self::attention(class)
        } else {
            Self::rows(class)
        }
    }

    /// A row-wise graph: every node computes each row along axis 0 from that row alone, so a
    /// call of fewer rows runs on the class graph with its rows padded (zeros, which every norm
    /// keeps finite) and nothing masked.
    fn rows(class: &Graph) -> Result<Self, PadError> {
        let graph = class.name.clone();
        let io = class.io();
        for node in &class.nodes {
            let refuse = |why| {
                Err(PadError::NotPaddable {
                    graph: graph.clone(),
                    node: node.name.clone(),
                    op: node.op.call_name(),
                    why,
                })
            };
            match &node.op {
                Op::Pointwise(_) => {}
                Op::Norm(n) => {
                    if matches!(n.kind, NormKind::BatchNorm | NormKind::BatchNormBackward | NormKind::GenStats) {
                        return refuse("batch statistics reduce over the rows");
                    }
                    let port = |name: &str| {
                        node.op.inputs().iter().position(|p| p.name == name).and_then(|i| node.inputs.get(i).copied())
                    };
                    if port("SCALE").is_some_and(|t| class.tensor(t).dims.first() != Some(&1)) {
                        return refuse("its SCALE is not 1 along axis 0, so it normalizes across rows");
                    }
                    if n.kind.is_backward() && node.inputs.iter().any(|&t| class.tensor(t).is_virtual) {
                        // DSCALE and DBIAS sum over the rows: a padded row must add 0, which it
                        // does when its DY, X and statistics are the zeros of a padded input.
                        return refuse(
                            "a backward norm's DSCALE and DBIAS sum over the rows, so its inputs must be the graph's \
                             (padded with zeros), not computed from padded rows",
                        );
                    }
                }
                _ => return refuse("it is neither"),
            }
        }
        let rows = io.iter().map(|&t| class.tensor(t).dims.first().copied().unwrap_or(1)).max().unwrap_or(1);
        let mut axes = vec![None; io.len()];
        for (slot, &t) in axes.iter_mut().zip(&io) {
            let dims = &class.tensor(t).dims;
            match dims.first() {
                Some(&r) if r == rows && rows > 1 => *slot = Some(ROW_AXIS),
                Some(&1) | None => {}
                Some(&r) => {
                    return Err(PadError::Structure {
                        graph,
                        what: format!(
                            "tensor `{}` has {r} rows (axis 0) where the graph's rows are {rows}: a row-wise graph's \
                             tensors have its rows or 1 along axis 0",
                            class.tensor(t).name
                        ),
                    })
                }
            }
        }
        Ok(ClassGraph { class: class.clone(), masked: None, axes, nodes: Vec::new() })
    }

    /// An attention graph: each node masked with its padding mask.
    fn attention(class: &Graph) -> Result<Self, PadError> {
        let graph = class.name.clone();
        let io = class.io();
        let mut axes = vec![None; io.len()];
        let mut masked = class.clone();
        let mut nodes = Vec::with_capacity(class.nodes.len());
        let mut names = Names::of(class);
        if let Some(node) = class.nodes.iter().find(|n| !matches!(n.op, Op::Sdpa(_))) {
            return Err(PadError::NotPaddable {
                graph,
                node: node.name.clone(),
                op: node.op.call_name(),
                why: "a graph with attention is padded through its padding masks, so every node must be attention",
            });
        }
        for (index, node) in class.nodes.iter().enumerate() {
            let Op::Sdpa(op) = &node.op else { continue };
            let refuse = |what| Err(PadError::Unsupported { graph: graph.clone(), node: node.name.clone(), what });
            if let Some(what) = unpaddable(op) {
                return refuse(what);
            }
            let ports = node.op.inputs();
            let mut q = None;
            let mut k = None;
            let named = ports.iter().map(|p| p.name).zip(node.inputs.iter().copied());
            let outputs = node.op.outputs().into_iter().zip(node.outputs.iter().copied());
            for (port, tensor) in named.chain(outputs) {
                // S_q of Q, O, dO, Stats, dQ; S_kv of K, V, dK, dV; Attn_scale has none.
                let padded = matches!(port, "Q" | "O" | "dO" | "Stats" | "dQ" | "K" | "V" | "dK" | "dV");
                match port {
                    "Q" => q = Some(tensor),
                    "K" => k = Some(tensor),
                    _ => {}
                }
                let t = class.tensor(tensor);
                if t.is_virtual {
                    return refuse("a virtual tensor between attention nodes: pad each attention graph alone");
                }
                if let Some(slot) = io.iter().position(|&i| i == tensor) {
                    if padded {
                        axes[slot] = Some(SEQUENCE_AXIS);
                    }
                }
            }
            let (Some(q), Some(k)) = (q, k) else {
                return refuse("no Q or K input");
            };
            let batch = class.tensor(q).dims[0];
            let mut length = |port: &str| {
                masked.tensors.push(Tensor {
                    name: names.tensor(&format!("{}_{}", node.name, port.to_ascii_lowercase())),
                    uid: names.uid(),
                    dims: vec![batch, 1, 1, 1],
                    strides: vec![1, 1, 1, 1],
                    data_type: DataType::I32,
                    is_virtual: false,
                    pass_by_value: None,
                    host_scalar: false,
                });
                TensorId(masked.tensors.len() - 1)
            };
            let seq_q = length("SEQ_LEN_Q");
            let seq_kv = length("SEQ_LEN_KV");
            let Some((with_mask, inputs)) = with_padding_mask(op, node, seq_q, seq_kv) else {
                return refuse("a port the padding mask moves");
            };
            masked.nodes[index].inputs = inputs;
            masked.nodes[index].op = with_mask;
            nodes.push(Lengths { q, k, seq_q, seq_kv });
        }
        masked.validate()?;
        Ok(ClassGraph { class: class.clone(), masked: Some(masked), axes, nodes })
    }

    /// The graph at its class bound, as given.
    pub fn class(&self) -> &Graph {
        &self.class
    }

    /// The graph the class plan is made of: the class graph with each attention node's padding
    /// mask and its two sequence-length inputs (after the class graph's inputs); a row-wise
    /// graph itself.
    pub fn masked(&self) -> &Graph {
        self.masked.as_ref().unwrap_or(&self.class)
    }

    /// Per I/O tensor of the class graph (inputs, then outputs): the axis a call may shorten.
    pub fn padded_axes(&self) -> &[Option<usize>] {
        &self.axes
    }

    /// The masked graph's `SEQ_LEN_Q` and `SEQ_LEN_KV` inputs, per attention node.
    pub fn seq_len_inputs(&self) -> Vec<(TensorId, TensorId)> {
        self.nodes.iter().map(|n| (n.seq_q, n.seq_kv)).collect()
    }

    /// That `call` is the class graph but for extents: the same nodes, and tensors of the same
    /// names, types, ranks and kinds.
    fn check_structure(&self, call: &Graph) -> Result<(), PadError> {
        let class = &self.class;
        let structure = |what: String| PadError::Structure { graph: class.name.clone(), what };
        if call.tensors.len() != class.tensors.len() || call.nodes.len() != class.nodes.len() {
            return Err(structure(format!(
                "it has {} tensors and {} nodes, the class graph {} and {}",
                call.tensors.len(),
                call.nodes.len(),
                class.tensors.len(),
                class.nodes.len()
            )));
        }
        for (a, b) in call.nodes.iter().zip(&class.nodes) {
            if a.name != b.name || a.op != b.op || a.inputs != b.inputs || a.outputs != b.outputs {
                return Err(structure(format!("node `{}` differs from the class graph's `{}`", a.name, b.name)));
            }
        }
        for (a, b) in call.tensors.iter().zip(&class.tensors) {
            if a.name != b.name
                || a.data_type != b.data_type
                || a.dims.len() != b.dims.len()
                || a.is_virtual != b.is_virtual
                || a.host_scalar != b.host_scalar
                || a.pass_by_value != b.pass_by_value
            {
                return Err(structure(format!(
                    "tensor `{}` ({}, rank {}) is `{}` ({}, rank {}) in the class graph",
                    a.name,
                    a.data_type,
                    a.dims.len(),
                    b.name,
                    b.data_type,
                    b.dims.len()
                )));
            }
        }
        Ok(())
    }

    /// Checks `call` (the same graph at sequence lengths up to the class's) against the class
    /// graph, and gives its copies and sequence lengths.
    pub fn bind(&self, call: &Graph) -> Result<Binding, PadError> {
        // A graph built through `GraphBuilder` or `graph!` is valid; one assembled by hand
        // must be too, or its outputs' extents could disagree with the lengths that run.
        call.validate()?;
        self.check_structure(call)?;
        let class = &self.class;
        let io = class.io();
        let mut copies = Vec::with_capacity(io.len());
        for (&id, axis) in io.iter().zip(&self.axes) {
            let (a, b) = (call.tensor(id), class.tensor(id));
            let extent = |axis: usize, rule| PadError::Extent {
                graph: class.name.clone(),
                tensor: a.name.clone(),
                axis,
                call: a.dims[axis],
                class: b.dims[axis],
                rule,
            };
            for d in 0..a.dims.len() {
                if Some(d) == *axis {
                    if a.dims[d] < 1 || a.dims[d] > b.dims[d] {
                        return Err(extent(d, "a padded extent runs from 1 to its class bound"));
                    }
                } else if a.dims[d] != b.dims[d] {
                    return Err(extent(d, "only the padded axis of a class graph may differ from the class graph's"));
                }
            }
            let Some(axis) = *axis else {
                copies.push(None);
                continue;
            };
            let expected = strides_in_order_of(&b.strides, &a.dims);
            if a.strides != expected || b.strides != strides_in_order_of(&b.strides, &b.dims) {
                return Err(PadError::Layout {
                    graph: class.name.clone(),
                    tensor: a.name.clone(),
                    strides: a.strides.clone(),
                    expected,
                });
            }
            // Packed: one position of the sequence axis is `stride` elements (every dim after it in
            // memory order), and the blocks before it are `rows`.
            let position = b.strides[axis] as usize;
            let class_row = b.dims[axis] as usize * position;
            copies.push(Some(PadCopy {
                rows: b.storage_len() / class_row.max(1),
                call_row: a.dims[axis] as usize * position,
                class_row,
            }));
        }
        let seq_lens = self
            .nodes
            .iter()
            .map(|n| (call.tensor(n.q).dims[SEQUENCE_AXIS] as i32, call.tensor(n.k).dims[SEQUENCE_AXIS] as i32))
            .collect();
        Ok(Binding { copies, seq_lens })
    }
}
