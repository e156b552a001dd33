//! Partitioning a graph that cuDNN will not plan as one kernel into parts that it will.
//!
//! cuDNN fuses one *anchor* op (a matmul, convolution, normalization, attention, reduction) with
//! the elementwise ops around it, within rules that depend on the version and the GPU. Each op
//! family states its part of those rules ([`FusionRule`]); [`group`] walks the nodes in order and
//! puts each into the kernel (part) it can share, starting a new part where the table says it
//! cannot, and records why ([`Cut`]). The backend builds each part; a part cuDNN refuses is split
//! further ([`split`]) and the refusal is remembered per cuDNN version and GPU ([`Refusals`]), so
//! the next build goes straight to the split.
//!
//! Between parts, tensors the graph keeps virtual are *materialized*: written by their part and
//! read by later ones from one arena at the front of the workspace ([`Layout`]), slots reused
//! when lifetimes do not overlap. A view (reshape, transpose, slice) whose output is read across
//! a boundary is no kernel at all: its readers get the memory of its input described again
//! ([`Alias`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};

use crate::cudnn::ALIGNMENT;
use crate::dim::packed_strides;
use crate::dim::Concrete;
use crate::ir::{Graph, Node, Tensor, TensorId};
use crate::ops::{FusionRule, Op, TensorMeta};
use crate::DataType;

/// Where a partitioned plan's arena slots start: every slot offset is a multiple of this, so a
/// workspace allocation (256-byte aligned by CUDA) keeps every tensor aligned for any engine.
pub(crate) const SLOT_ALIGNMENT: u64 = 256;

/// Why a part does not share the previous part's kernel: the op pair and the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// The node before the boundary (whose output the next part reads, where one does), and its
    /// op.
    pub before: (String, &'static str),
    /// The first node of the part, and its op.
    pub after: (String, &'static str),
    /// The rule.
    pub reason: CutReason,
}

/// The rule behind a [`Cut`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CutReason {
    /// Both are anchors: cuDNN fuses one per kernel.
    SecondAnchor,
    /// The op before takes no elementwise epilogue.
    NoEpilogue,
    /// The op after takes no elementwise prologue.
    NoPrologue,
    /// The op after reads the memory a view (reshape, transpose, slice) of an earlier part's
    /// output describes, so it runs after that part.
    AfterView,
    /// Nothing connects the two: the op after reads only memory.
    Independent,
    /// The op before is a fill ([`crate::Graph::is_fill`]), which is a kernel of its own: cuDNN
    /// 9.19 plans a fill fused into the kernel reading it (as a matmul's prologue), but on the
    /// H200 that kernel computed wrong results (a bias gradient's matmul by ones: relative error
    /// 1.0, 2026-12-05).
    AfterFill,
    /// cuDNN refused the fused part (at this build, or at an earlier one of the same part with
    /// the same cuDNN version and GPU): the message says how.
    Refused(String),
    /// cuDNN fuses the two, but this partitioning cuts an anchor's elementwise epilogue (or
    /// prologue) off into a kernel of its own so that autotuning can time it against the fused
    /// plan ([`Fusion::Measure`](super::Fusion::Measure)); it has not been timed yet.
    ToMeasure,
    /// cuDNN fuses the two, and autotuning measured them faster as separate kernels
    /// ([`Fusion::Measure`](super::Fusion::Measure)): the message gives the times.
    MeasuredFaster(String),
}

impl fmt::Display for Cut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ((a, a_op), (b, b_op)) = (&self.before, &self.after);
        write!(f, "`{a}` ({a_op}) | `{b}` ({b_op}): ")?;
        match &self.reason {
            CutReason::SecondAnchor => {
                write!(f, "both are anchor ops, and cuDNN fuses one (matmul, convolution, normalization, attention) per kernel")
            }
            CutReason::NoEpilogue => write!(f, "cuDNN fuses no elementwise op after a {a_op}"),
            CutReason::NoPrologue => write!(f, "cuDNN fuses no elementwise op before a {b_op}"),
            CutReason::AfterView => write!(f, "`{b}` reads a view of memory an earlier part writes"),
            CutReason::Independent => write!(f, "`{b}` reads only memory, nothing computed in the kernel before"),
            CutReason::AfterFill => {
                write!(f, "a fill is its own kernel (cuDNN 9.19 computed one fused into its reader wrongly)")
            }
            CutReason::Refused(why) => write!(f, "cuDNN refused them fused: {why}"),
            CutReason::ToMeasure => {
                write!(f, "cuDNN fuses them; cut so that autotuning times them apart (not timed yet)")
            }
            CutReason::MeasuredFaster(why) => write!(f, "measured faster as separate kernels: {why}"),
        }
    }
}

/// A view node whose output is its input's memory described again: the base tensor (never
/// itself an alias) and the offset into it, in elements (bytes follow from the type the base is
/// stored in, [`stored_type`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Alias {
    pub(crate) base: TensorId,
    pub(crate) elements: u64,
}

/// The nodes of one part, in graph order, and why it starts a new kernel.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Group {
    pub(crate) nodes: Vec<usize>,
    pub(crate) cut: Option<Cut>,
    anchor: Option<FusionRule>,
    /// The node of its anchor.
    anchor_node: Option<usize>,
    /// The anchor that ended the epilogue (a reduction after a matmul): nothing reading it
    /// fuses, and no other anchor; an elementwise op on the epilogue's other tensors still does
    /// (an fp8 matmul's scale beside the `amax` of the same values, whichever comes first).
    closed_by: Option<usize>,
}

/// The graph's views as aliases, where they can be: indexed by tensor, the alias of each
/// view output. A view is an alias when its output is virtual (a graph output must be written
/// by a kernel), its strides are exactly the view of its input's (`Layout::view_strides`: a
/// reshape's input packed, or strided with runs the reshape keeps whole), and a slice starts
/// at an aligned byte.
pub(crate) fn aliases(graph: &Graph) -> Vec<Option<Alias>> {
    let mut alias: Vec<Option<Alias>> = vec![None; graph.tensors.len()];
    for node in &graph.nodes {
        let Op::Layout(layout) = &node.op else { continue };
        if node.op.fusion() != FusionRule::View {
            continue;
        }
        let (Some(&x), Some(&y)) = (node.inputs.first(), node.outputs.first()) else { continue };
        let (xt, yt) = (graph.tensor(x), graph.tensor(y));
        // The view's strides as its rule gives them from X's (a reshape that cannot be a view of
        // X's memory is none).
        let view = layout.view_strides(&xt.dims, &xt.strides, &yt.dims).ok();
        if !yt.is_virtual || xt.is_by_value() || view.as_ref() != Some(&yt.strides) {
            continue;
        }
        let Ok(offset) = u64::try_from(layout.offset(&xt.strides)) else { continue };
        let within = alias[x.0].unwrap_or(Alias { base: x, elements: 0 });
        let elements = within.elements + offset;
        // Aligned whatever the type the base is stored in: a multiple of 16 elements.
        if !elements.is_multiple_of(ALIGNMENT) {
            continue;
        }
        alias[y.0] = Some(Alias { base: within.base, elements });
    }
    alias
}

/// The graph with its materializable intermediates laid out so the views between parts are
/// aliases: where `reshape(transpose(b))` would reshape an unpacked view, and `b` is a virtual
/// tensor computed by an op and read only by the transpose, `b` is stored in the order that
/// makes the transpose packed (attention's O stored BSHD, so `reshape(transpose(o))` back to
/// `[1, T, H·D]` is the memory the next matmul reads). Only the strides of virtual tensors
/// change, which the graph's I/O and results never see.
pub(crate) fn restride(graph: &Graph) -> Graph {
    let mut out = graph.clone();
    let producer = producers(graph);
    for node in &graph.nodes {
        let Op::Layout(reshape @ crate::ops::Layout::Reshape { .. }) = &node.op else { continue };
        let (Some(&t_out), Some(&y)) = (node.inputs.first(), node.outputs.first()) else { continue };
        let packed = packed_strides(&out.tensor(t_out).dims);
        let (x, y) = (out.tensor(t_out), out.tensor(y));
        if reshape.view_strides(&x.dims, &x.strides, &y.dims).is_ok() {
            continue;
        }
        let Some(t) = producer[t_out.0].map(|p| &graph.nodes[p]) else { continue };
        let Op::Layout(layout @ crate::ops::Layout::Transpose { .. }) = &t.op else { continue };
        let Some(&b) = t.inputs.first() else { continue };
        let readers = graph.nodes.iter().filter(|n| n.inputs.contains(&b)).count();
        let computed = producer[b.0].is_some_and(|p| graph.nodes[p].op.fusion() != FusionRule::View);
        if !graph.tensor(b).is_virtual || readers != 1 || !computed || !graph.tensor(t_out).is_virtual {
            continue;
        }
        // Transposing `b` with strides `s` gives strides `s[p[i]]`: setting `s[p[i]]` to the
        // packed strides of the transpose's output makes it packed.
        let rank = packed.len();
        let mut strides = vec![0i64; rank];
        let mut ok = true;
        for (i, &stride) in packed.iter().enumerate() {
            let unit = vec![0i64; rank];
            // The axis `i` of the transpose's output reads: where a unit stride at `i` comes from.
            let mut probe = unit.clone();
            probe[i] = 1;
            match (0..rank).find(|&a| {
                let mut s = unit.clone();
                s[a] = 1;
                layout.output_strides(&graph.tensor(b).dims, &s, &out.tensor(t_out).dims) == probe
            }) {
                Some(a) => strides[a] = stride,
                None => ok = false,
            }
        }
        if !ok {
            continue;
        }
        out.tensors[b.0].strides = strides;
        out.tensors[t_out.0].strides = packed;
    }
    out
}

/// The type a materialized tensor is stored in. Its own, except where an anchor op reads it
/// beside operands of one narrower floating type of the same rank (a matmul's B, a
/// convolution's W, attention's K and V): cuDNN's engines take such operands in one type (f32 ×
/// f16 matmul: no engine configuration), so a tensor whose type no op forced (the graph's
/// intermediate type) is stored in theirs, as a split written by hand would store it. The whole
/// graph's CPU reference rounds it to its own type, so results differ by that rounding.
pub(crate) fn stored_type(graph: &Graph, t: TensorId, alias: &[Option<Alias>]) -> DataType {
    let tensor = graph.tensor(t);
    let own = tensor.data_type;
    // Graph inputs and outputs are the caller's buffers, in their declared types.
    if !own.is_float() || !tensor.is_virtual {
        return own;
    }
    let producer = producers(graph);
    let Some(p) = producer[t.0].map(|p| &graph.nodes[p]) else { return own };
    // A type the producing op forces (attention's statistics, a norm's f32 statistics) stays.
    let metas: Vec<TensorMeta<i64>> = p
        .inputs
        .iter()
        .map(|i| TensorMeta { dims: graph.tensor(*i).dims.clone(), dtype: graph.tensor(*i).data_type })
        .collect();
    let index = p.outputs.iter().position(|o| *o == t);
    let forced = p.op.infer(&metas, &mut Concrete).ok().and_then(|outs| index.and_then(|i| outs.get(i)?.dtype));
    if forced.is_some() {
        return own;
    }
    let reads = |n: &Node| n.inputs.iter().any(|i| *i == t || alias[i.0].is_some_and(|a| a.base == t));
    let mut wanted: Option<DataType> = None;
    for n in graph.nodes.iter().filter(|n| reads(n) && matches!(n.op.fusion(), FusionRule::Anchor { .. })) {
        let peers: Vec<DataType> = n
            .inputs
            .iter()
            .filter(|i| **i != t && alias[i.0].is_none_or(|a| a.base != t))
            .map(|i| graph.tensor(*i))
            .filter(|o| !o.is_by_value() && o.dims.len() == tensor.dims.len() && o.data_type.is_float())
            .map(|o| o.data_type)
            .collect();
        let Some(&first) = peers.first() else { continue };
        if peers.iter().any(|d| *d != first) || first.size_bytes() >= own.size_bytes() {
            continue;
        }
        match wanted {
            None => wanted = Some(first),
            Some(w) if w == first => {}
            // Readers that disagree: keep the tensor's own type.
            Some(_) => return own,
        }
    }
    wanted.unwrap_or(own)
}

/// The node producing each tensor.
pub(crate) fn producers(graph: &Graph) -> Vec<Option<usize>> {
    let mut producer = vec![None; graph.tensors.len()];
    for (n, node) in graph.nodes.iter().enumerate() {
        for o in &node.outputs {
            producer[o.0].get_or_insert(n);
        }
    }
    producer
}

pub(crate) fn node_ref(node: &Node) -> (String, &'static str) {
    (node.name.clone(), node.op.call_name())
}

/// Groups the nodes by the table of known patterns. With `alias` given, views that are aliases
/// belong to no group (their readers read memory); without, every view is a node that fuses as an
/// elementwise op (the graph as one kernel sees it).
pub(crate) fn group(graph: &Graph, alias: Option<&[Option<Alias>]>) -> Vec<Group> {
    let producer = producers(graph);
    let is_alias = |t: TensorId| alias.and_then(|a| a[t.0]);
    let mut group_of: Vec<Option<usize>> = vec![None; graph.nodes.len()];
    let mut groups: Vec<Group> = Vec::new();
    for (n, node) in graph.nodes.iter().enumerate() {
        if node.outputs.iter().any(|y| is_alias(*y).is_some()) {
            continue;
        }
        // The latest part computing an input in the kernel (a fusion link), and the earliest
        // part this node may run in.
        let (mut link, mut floor, mut after_view) = (None::<(usize, usize)>, 0usize, None::<usize>);
        for &t in &node.inputs {
            if let Some(a) = is_alias(t) {
                if let Some(g) = producer[a.base.0].and_then(|p| group_of[p]) {
                    if g + 1 > floor {
                        floor = g + 1;
                        after_view = producer[a.base.0];
                    }
                }
                continue;
            }
            if let Some((p, g)) = producer[t.0].and_then(|p| group_of[p].map(|g| (p, g))) {
                floor = floor.max(g);
                if link.is_none_or(|(_, l)| g > l) {
                    link = Some((p, g));
                }
            }
        }
        let link = link.filter(|&(_, g)| g >= floor);
        let rule = match node.op.fusion() {
            FusionRule::View => FusionRule::Elementwise,
            rule => rule,
        };
        let joined = match (rule, link) {
            // A fill (`Graph::is_fill`) is a kernel of its own, and nothing joins it
            // ([`CutReason::AfterFill`]).
            (FusionRule::Elementwise, None) if graph.is_fill(node) => None,
            (_, Some((p, _))) if graph.is_fill(&graph.nodes[p]) => None,
            (FusionRule::Elementwise, Some((_, g))) => {
                let to = &groups[g];
                let reads_closer = to.closed_by.is_some_and(|c| node.inputs.iter().any(|t| producer[t.0] == Some(c)));
                (!reads_closer && to.anchor.is_none_or(|a| matches!(a, FusionRule::Anchor { epilogue: true, .. })))
                    .then_some(g)
            }
            (FusionRule::Elementwise, None) => {
                // Elementwise ops on memory share the last elementwise-only kernel.
                groups.len().checked_sub(1).filter(|&g| {
                    g >= floor
                        && groups[g].anchor.is_none()
                        && !groups[g].nodes.iter().any(|&n| graph.is_fill(&graph.nodes[n]))
                })
            }
            (FusionRule::Anchor { follows: true, .. }, Some((_, g)))
                if groups[g].closed_by.is_none()
                    && matches!(groups[g].anchor, Some(FusionRule::Anchor { epilogue: true, .. })) =>
            {
                Some(g)
            }
            (FusionRule::Anchor { prologue: true, .. }, Some((_, g))) if groups[g].anchor.is_none() => {
                // Its prologue is the part of the elementwise kernel that computes its inputs:
                // elementwise ops beside it in one kernel that do not feed it are not a prologue
                // (the softmax cross-entropy's `log(s) + m` beside `Σ onehot · logits`: cuDNN 9.19
                // planned that kernel and computed the loss wrongly on the H100, 2026-12-07).
                match prologue_carve(graph, &producer, &groups, g, n) {
                    Carve::Whole => Some(g),
                    Carve::Move(moved) => {
                        groups[g].nodes.retain(|m| !moved.contains(m));
                        let first = moved[0];
                        let before = groups.last().and_then(|last| last.nodes.last().copied()).unwrap_or(first);
                        let cut = Cut {
                            before: node_ref(&graph.nodes[before]),
                            after: node_ref(&graph.nodes[first]),
                            reason: CutReason::Independent,
                        };
                        let index = groups.len();
                        for &m in &moved {
                            group_of[m] = Some(index);
                        }
                        groups.push(Group {
                            nodes: moved,
                            cut: Some(cut),
                            anchor: None,
                            anchor_node: None,
                            closed_by: None,
                        });
                        Some(index)
                    }
                    Carve::No => None,
                }
            }
            _ => None,
        };
        if let Some(g) = joined {
            let to = &mut groups[g];
            to.nodes.push(n);
            if let FusionRule::Anchor { follows, .. } = rule {
                if to.anchor.is_some() && follows {
                    to.closed_by = Some(n);
                } else {
                    to.anchor = Some(rule);
                    to.anchor_node = Some(n);
                }
            }
            group_of[n] = Some(g);
            continue;
        }
        let cut = groups.last().map(|last| {
            let reason_and_before = match (link, after_view) {
                (Some((p, g)), _) => {
                    // The pair: the anchor that takes no more, or the op this one cannot follow.
                    let before = &groups[g];
                    match (before.anchor, before.anchor_node, rule) {
                        _ if graph.is_fill(&graph.nodes[p]) => (CutReason::AfterFill, p),
                        (Some(_), Some(a), FusionRule::Anchor { .. }) => (CutReason::SecondAnchor, a),
                        (Some(_), Some(a), _) => (CutReason::NoEpilogue, a),
                        _ => (CutReason::NoPrologue, p),
                    }
                }
                (None, Some(p)) => (CutReason::AfterView, p),
                (None, None) => match (last.anchor_node, rule) {
                    (Some(a), FusionRule::Anchor { .. }) => (CutReason::SecondAnchor, a),
                    _ => (CutReason::Independent, last.nodes.last().copied().unwrap_or(0)),
                },
            };
            let (reason, before) = reason_and_before;
            Cut { before: node_ref(&graph.nodes[before]), after: node_ref(node), reason }
        });
        let anchor = matches!(rule, FusionRule::Anchor { .. }).then_some(rule);
        let closed_by = matches!(rule, FusionRule::Anchor { epilogue: false, follows: true, .. }).then_some(n);
        groups.push(Group { nodes: vec![n], cut, anchor, anchor_node: anchor.map(|_| n), closed_by });
        group_of[n] = Some(groups.len() - 1);
    }
    groups
}

/// How a prologue anchor (a reduction) joins the elementwise-only group `g` that computes its
/// input.
enum Carve {
    /// Every op of the group feeds it: it joins the group.
    Whole,
    /// Only these ops (in order) feed it: they leave the group for a new one with the anchor (no
    /// op left behind and no later group reads them).
    Move(Vec<usize>),
    /// Its prologue cannot be separated from the rest: it starts a kernel of its own.
    No,
}

/// [`Carve`] for anchor node `n` and group `g`.
fn prologue_carve(graph: &Graph, producer: &[Option<usize>], groups: &[Group], g: usize, n: usize) -> Carve {
    let members = &groups[g].nodes;
    // The group's ops `n` reads through ops of the group.
    let mut feeds: Vec<usize> = Vec::new();
    let mut stack: Vec<usize> = graph.nodes[n].inputs.iter().filter_map(|t| producer[t.0]).collect();
    while let Some(m) = stack.pop() {
        if members.contains(&m) && !feeds.contains(&m) {
            feeds.push(m);
            stack.extend(graph.nodes[m].inputs.iter().filter_map(|t| producer[t.0]));
        }
    }
    if feeds.len() == members.len() {
        return Carve::Whole;
    }
    let moved: Vec<usize> = members.iter().copied().filter(|m| feeds.contains(m)).collect();
    let reads_moved =
        |node: usize| graph.nodes[node].inputs.iter().any(|t| producer[t.0].is_some_and(|p| moved.contains(&p)));
    let left_behind = members.iter().copied().filter(|m| !moved.contains(m));
    let later = groups[g + 1..].iter().flat_map(|h| h.nodes.iter().copied());
    if moved.is_empty() || left_behind.chain(later).any(reads_moved) {
        Carve::No
    } else {
        Carve::Move(moved)
    }
}

/// A refused group split around its anchor: the ops before it, the anchor, the ops after it
/// (each non-empty one a group; the second and third cut as refused, with `why`). `None` for a
/// group of one node, which cannot be split.
pub(crate) fn split(graph: &Graph, group: &Group, why: &str) -> Option<Vec<Group>> {
    if group.nodes.len() < 2 {
        return None;
    }
    let anchor_at = group
        .nodes
        .iter()
        .position(|&n| matches!(graph.nodes[n].op.fusion(), FusionRule::Anchor { .. }))
        // An elementwise-only group: each op alone.
        .unwrap_or(0);
    let mut pieces: Vec<Vec<usize>> = Vec::new();
    if group.anchor.is_none() {
        pieces.extend(group.nodes.iter().map(|&n| vec![n]));
    } else {
        let (before, rest) = group.nodes.split_at(anchor_at);
        let (anchor, after) = rest.split_at(1);
        pieces.extend([before.to_vec(), anchor.to_vec(), after.to_vec()].into_iter().filter(|p| !p.is_empty()));
    }
    let mut out: Vec<Group> = Vec::new();
    for nodes in pieces {
        let cut = match out.last() {
            None => group.cut.clone(),
            Some(prev) => Some(Cut {
                before: node_ref(&graph.nodes[*prev.nodes.last()?]),
                after: node_ref(&graph.nodes[nodes[0]]),
                reason: CutReason::Refused(why.to_string()),
            }),
        };
        let anchor_node =
            nodes.iter().copied().find(|&n| matches!(graph.nodes[n].op.fusion(), FusionRule::Anchor { .. }));
        let anchor = anchor_node.map(|n| graph.nodes[n].op.fusion());
        out.push(Group { nodes, cut, anchor, anchor_node, closed_by: None });
    }
    Some(out)
}

/// Whether `node` scales by one value: a multiplication by a tensor of one element (a per-tensor
/// scale or descale, a by-value scalar).
fn scales(graph: &Graph, node: &Node) -> bool {
    matches!(&node.op, Op::Pointwise(p) if p.mode == crate::ops::PointwiseMode::Mul)
        && node.inputs.iter().any(|t| graph.tensor(*t).element_count() == 1)
}

/// A group as nodes, its anchor read from the ops (as [`split`] makes its pieces).
fn group_of_nodes(graph: &Graph, nodes: Vec<usize>, cut: Option<Cut>) -> Group {
    let anchor_node = nodes.iter().copied().find(|&n| matches!(graph.nodes[n].op.fusion(), FusionRule::Anchor { .. }));
    let anchor = anchor_node.map(|n| graph.nodes[n].op.fusion());
    Group { nodes, cut, anchor, anchor_node, closed_by: None }
}

/// The candidate partitionings of [`Fusion::Measure`](super::Fusion::Measure): `groups` (a
/// partition cuDNN plans) with one part cut in two where an anchor's elementwise epilogue or
/// prologue could run as a kernel of its own, one candidate per cut point, the new part's cut
/// [`CutReason::ToMeasure`].
///
/// The cut points of a part with one anchor and elementwise ops around it: before the anchor
/// (where it has a prologue), and before each op of its epilogue except one that [scales by one
/// value](scales) (a descale): cut there, the second kernel would make the same pass over memory
/// as the cut after it, for another build. A part with a second anchor (a reduction closing the
/// epilogue, an fp8 matmul's `amax`) is left whole. Cuts at two points together are not
/// candidates: a graph of several anchors gets each anchor's cuts one at a time.
pub(crate) fn measured_cuts(graph: &Graph, groups: &[Group]) -> Vec<Vec<Group>> {
    let mut out = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        let is_anchor = |n: usize| matches!(graph.nodes[n].op.fusion(), FusionRule::Anchor { .. });
        let anchors: Vec<usize> = (0..group.nodes.len()).filter(|&i| is_anchor(group.nodes[i])).collect();
        let [at] = anchors.as_slice() else { continue };
        // Before the anchor where a prologue precedes it; before each epilogue op but a scale.
        let prologue = (*at > 0).then_some(*at);
        let epilogue = (at + 1..group.nodes.len()).filter(|&i| !scales(graph, &graph.nodes[group.nodes[i]]));
        let points = prologue.into_iter().chain(epilogue);
        for point in points {
            let (first, second) = group.nodes.split_at(point);
            let cut = Cut {
                before: node_ref(&graph.nodes[first[first.len() - 1]]),
                after: node_ref(&graph.nodes[second[0]]),
                reason: CutReason::ToMeasure,
            };
            let mut candidate = groups.to_vec();
            candidate.splice(
                g..=g,
                [
                    group_of_nodes(graph, first.to_vec(), group.cut.clone()),
                    group_of_nodes(graph, second.to_vec(), Some(cut)),
                ],
            );
            out.push(candidate);
        }
    }
    out
}

/// Stores the tensors an epilogue cut materializes in the type a split written by hand stores
/// them in: where part `k` is elementwise ops only, cut off from the anchor of part `k - 1`
/// ([`measured_cuts`]), every virtual float tensor part `k - 1` computes and part `k` reads is
/// retyped to the type of the graph outputs part `k` writes (bf16 for an fp8 matmul's epilogue
/// into bf16), or, where it writes none (its result feeds another anchor), to the type of the
/// anchor's operands; never wider than the tensor's own type, and only where that type is a
/// float type of at least 16 bits. A prologue cut (part `k` holds the anchor) keeps
/// [`stored_type`]'s choice. The same rule runs when a payload is loaded, so the parts bind to
/// the same types.
pub(crate) fn retype_epilogue_cut(graph: &mut Graph, groups: &[Group], k: usize) {
    let Some(before) = k.checked_sub(1).map(|j| &groups[j]) else { return };
    let is_anchor = |n: usize| matches!(graph.nodes[n].op.fusion(), FusionRule::Anchor { .. });
    if groups[k].nodes.iter().any(|&n| is_anchor(n)) {
        return;
    }
    let Some(anchor) = before.nodes.iter().copied().find(|&n| is_anchor(n)) else { return };
    // The one float type of at least 16 bits that all of `types` have.
    let common = |types: Vec<DataType>| -> Option<DataType> {
        let first = *types.first()?;
        types.iter().all(|t| *t == first).then_some(first).filter(|t| t.is_float() && t.size_bytes() >= 2)
    };
    let written: Vec<DataType> = groups[k]
        .nodes
        .iter()
        .flat_map(|&n| &graph.nodes[n].outputs)
        .filter(|t| !graph.tensor(**t).is_virtual)
        .map(|t| graph.tensor(*t).data_type)
        .collect();
    let operands: Vec<DataType> = graph.nodes[anchor]
        .inputs
        .iter()
        .map(|t| graph.tensor(*t))
        .filter(|t| !t.is_by_value() && t.element_count() > 1)
        .map(|t| t.data_type)
        .collect();
    let Some(wanted) = common(written).or_else(|| common(operands)) else { return };
    let producer = producers(graph);
    let computed_before = |t: TensorId| producer[t.0].is_some_and(|p| before.nodes.contains(&p));
    let crossing: Vec<TensorId> = groups[k]
        .nodes
        .iter()
        .flat_map(|&n| graph.nodes[n].inputs.iter().copied())
        .filter(|&t| computed_before(t))
        .collect();
    for t in crossing {
        let tensor = &mut graph.tensors[t.0];
        if tensor.is_virtual && tensor.data_type.is_float() && wanted.size_bytes() < tensor.data_type.size_bytes() {
            tensor.data_type = wanted;
        }
    }
}

/// The groups of a partition recorded by node names (a plan payload's parts): every node of
/// the graph in exactly one part, except views that are aliases (in none), each part in graph
/// order and reading only what earlier parts (or itself) compute. The error says what is wrong.
pub(crate) fn from_names<'a>(
    graph: &Graph,
    parts: impl Iterator<Item = &'a [String]>,
    alias: &[Option<Alias>],
) -> Result<Vec<Group>, String> {
    let mut group_of: Vec<Option<usize>> = vec![None; graph.nodes.len()];
    let mut groups = Vec::new();
    for (g, names) in parts.enumerate() {
        let mut nodes = Vec::with_capacity(names.len());
        for name in names {
            let n = graph
                .nodes
                .iter()
                .position(|node| node.name == *name)
                .ok_or_else(|| format!("part {g} names node `{name}`, which the graph does not have"))?;
            if let Some(other) = group_of[n] {
                return Err(format!("node `{name}` is in parts {other} and {g}"));
            }
            if graph.nodes[n].outputs.iter().any(|y| alias[y.0].is_some()) {
                return Err(format!("node `{name}` is a view between parts, which no part runs"));
            }
            group_of[n] = Some(g);
            nodes.push(n);
        }
        if nodes.is_empty() {
            return Err(format!("part {g} has no nodes"));
        }
        if nodes.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!("part {g} lists its nodes out of graph order"));
        }
        groups.push(Group { nodes, cut: None, anchor: None, anchor_node: None, closed_by: None });
    }
    let producer = producers(graph);
    for (n, node) in graph.nodes.iter().enumerate() {
        if node.outputs.iter().any(|y| alias[y.0].is_some()) {
            continue;
        }
        let Some(g) = group_of[n] else {
            return Err(format!("node `{}` is in no part", node.name));
        };
        for &t in &node.inputs {
            let (base, strict) = alias[t.0].map_or((t, false), |a| (a.base, true));
            if let Some(p) = producer[base.0].and_then(|p| group_of[p]) {
                if p > g || (strict && p == g) {
                    return Err(format!(
                        "node `{}` in part {g} reads `{}`, computed in part {p}",
                        node.name,
                        graph.tensor(t).name
                    ));
                }
            }
        }
    }
    Ok(groups)
}

/// One part's own graph: its nodes, the tensors they touch (in the graph's order), and
/// `is_virtual` cleared on every tensor that crosses its boundary. `tensors[i]` is the graph's
/// id of the part's tensor `i`.
#[derive(Debug, Clone)]
pub(crate) struct Extracted {
    pub(crate) graph: Graph,
    pub(crate) tensors: Vec<TensorId>,
}

/// Extracts part `index` of `groups` (every node of the graph in some group, or an alias).
pub(crate) fn extract(graph: &Graph, groups: &[Group], index: usize, alias: &[Option<Alias>]) -> Extracted {
    let group_of = group_index(graph, groups);
    let producer = producers(graph);
    let here = |n: usize| group_of[n] == Some(index);
    let mut used = vec![false; graph.tensors.len()];
    for &n in &groups[index].nodes {
        for t in graph.nodes[n].inputs.iter().chain(&graph.nodes[n].outputs) {
            used[t.0] = true;
        }
    }
    let tensors: Vec<TensorId> = (0..graph.tensors.len()).filter(|&i| used[i]).map(TensorId).collect();
    let mut remap = vec![usize::MAX; graph.tensors.len()];
    for (i, t) in tensors.iter().enumerate() {
        remap[t.0] = i;
    }
    let materialized = materialized(graph, &group_of, alias);
    let sub_tensors: Vec<Tensor> = tensors
        .iter()
        .map(|&t| {
            let mut tensor = graph.tensor(t).clone();
            let produced_here = producer[t.0].is_some_and(here);
            if tensor.pass_by_value.is_none() && (!produced_here || materialized[t.0]) {
                if tensor.is_virtual {
                    // Materialized here or read from memory: in the type it is stored in (an
                    // alias in its base's).
                    let base = alias[t.0].map_or(t, |a| a.base);
                    tensor.data_type = stored_type(graph, base, alias);
                }
                tensor.is_virtual = false;
            }
            tensor
        })
        .collect();
    let nodes = groups[index]
        .nodes
        .iter()
        .map(|&n| {
            let node = &graph.nodes[n];
            Node {
                inputs: node.inputs.iter().map(|t| TensorId(remap[t.0])).collect(),
                outputs: node.outputs.iter().map(|t| TensorId(remap[t.0])).collect(),
                ..node.clone()
            }
        })
        .collect();
    let name = format!("{}.part{index}", graph.name);
    Extracted { graph: Graph { name, context: graph.context, tensors: sub_tensors, nodes }, tensors }
}

fn group_index(graph: &Graph, groups: &[Group]) -> Vec<Option<usize>> {
    let mut group_of = vec![None; graph.nodes.len()];
    for (g, group) in groups.iter().enumerate() {
        for &n in &group.nodes {
            group_of[n] = Some(g);
        }
    }
    group_of
}

/// Which virtual tensors must reach memory: those read by a node of another part, and the bases
/// of aliases that are read.
fn materialized(graph: &Graph, group_of: &[Option<usize>], alias: &[Option<Alias>]) -> Vec<bool> {
    let producer = producers(graph);
    let mut out = vec![false; graph.tensors.len()];
    for (n, node) in graph.nodes.iter().enumerate() {
        let Some(g) = group_of[n] else { continue };
        for &t in &node.inputs {
            if let Some(a) = alias[t.0] {
                out[a.base.0] = true;
            } else if producer[t.0].is_some_and(|p| group_of[p] != Some(g)) {
                out[t.0] = true;
            }
        }
    }
    for (t, tensor) in graph.tensors.iter().enumerate() {
        out[t] &= tensor.is_virtual;
    }
    out
}

/// Where a tensor a part reads or writes lives: one of the plan's I/O buffers (by its index in
/// the plan's I/O order) or the arena, at a byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// I/O buffer `index`, `offset` bytes in.
    Io { index: usize, offset: u64 },
    /// `offset` bytes into the workspace.
    Arena { offset: u64 },
}

/// The memory of a partitioned plan: where each materialized or aliased tensor lives, and the
/// arena's size.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Layout {
    places: Vec<Option<Place>>,
    /// Bytes of the arena (a multiple of [`SLOT_ALIGNMENT`]).
    pub(crate) arena_bytes: usize,
}

impl Layout {
    /// Places every tensor the parts exchange: graph I/O in its buffer, materialized virtual
    /// tensors in arena slots (first fit, a slot reused once its tensor's last reader has run),
    /// aliases where their base is.
    pub(crate) fn new(graph: &Graph, groups: &[Group], alias: &[Option<Alias>], io: &[TensorId]) -> Layout {
        let group_of = group_index(graph, groups);
        let producer = producers(graph);
        let materialized = materialized(graph, &group_of, alias);
        let mut places: Vec<Option<Place>> = vec![None; graph.tensors.len()];
        for (index, t) in io.iter().enumerate() {
            places[t.0] = Some(Place::Io { index, offset: 0 });
        }
        // Each materialized tensor's lifetime in parts: [written, last read].
        let mut last_read = vec![0usize; graph.tensors.len()];
        for (n, node) in graph.nodes.iter().enumerate() {
            let Some(g) = group_of[n] else { continue };
            for &t in &node.inputs {
                let base = alias[t.0].map_or(t, |a| a.base);
                last_read[base.0] = last_read[base.0].max(g);
            }
        }
        let mut slots: Vec<(u64, u64, usize, usize)> = Vec::new(); // offset, bytes, first, last
        let mut arena = 0u64;
        for (t, tensor) in graph.tensors.iter().enumerate() {
            if !materialized[t] {
                continue;
            }
            let Some(first) = producer[t].and_then(|p| group_of[p]) else { continue };
            let last = last_read[t].max(first);
            let stored = stored_type(graph, TensorId(t), alias);
            let bytes =
                (tensor.storage_len() as u64 * stored.size_bytes() as u64).div_ceil(SLOT_ALIGNMENT) * SLOT_ALIGNMENT;
            let mut live: Vec<(u64, u64)> =
                slots.iter().filter(|s| s.2 <= last && first <= s.3).map(|s| (s.0, s.0 + s.1)).collect();
            live.sort_unstable();
            let mut offset = 0u64;
            for (start, end) in live {
                if offset + bytes <= start {
                    break;
                }
                offset = offset.max(end);
            }
            slots.push((offset, bytes, first, last));
            arena = arena.max(offset + bytes);
            places[t] = Some(Place::Arena { offset });
        }
        for (t, a) in alias.iter().enumerate() {
            if let Some(a) = a {
                // Graph I/O keeps its type; a materialized base is in its stored type.
                let size = match places[a.base.0] {
                    Some(Place::Io { .. }) => graph.tensor(a.base).data_type.size_bytes(),
                    _ => stored_type(graph, a.base, alias).size_bytes(),
                } as u64;
                places[t] = places[a.base.0].map(|p| match p {
                    Place::Io { index, offset } => Place::Io { index, offset: offset + a.elements * size },
                    Place::Arena { offset } => Place::Arena { offset: offset + a.elements * size },
                });
            }
        }
        Layout { places, arena_bytes: usize::try_from(arena).unwrap_or(usize::MAX) }
    }

    /// Where tensor `t` of the graph lives, if it is exchanged between parts or is graph I/O.
    pub(crate) fn place(&self, t: TensorId) -> Option<Place> {
        self.places.get(t.0).copied().flatten()
    }
}

/// Parts cuDNN refused, by cuDNN version, GPU (compute capability) and the part's fingerprint:
/// a build that meets one again splits it without asking.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    refused: Mutex<HashMap<RefusalKey, String>>,
}

/// cuDNN's version, the GPU's compute capability (`None` where unknown), the part's
/// [`Graph::fingerprint`].
pub(crate) type RefusalKey = (usize, Option<u32>, u64);

impl Refusals {
    /// The process's refusals.
    pub(crate) fn global() -> &'static Refusals {
        static REFUSALS: std::sync::OnceLock<Refusals> = std::sync::OnceLock::new();
        REFUSALS.get_or_init(Refusals::default)
    }

    /// How cuDNN refused this part, if it did.
    pub(crate) fn get(&self, key: RefusalKey) -> Option<String> {
        self.refused.lock().unwrap_or_else(PoisonError::into_inner).get(&key).cloned()
    }

    /// Remembers that cuDNN refused this part, and how.
    pub(crate) fn insert(&self, key: RefusalKey, why: String) {
        self.refused.lock().unwrap_or_else(PoisonError::into_inner).insert(key, why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::GraphBuilder;
    use crate::DataType;

    fn names(graph: &Graph, groups: &[Group]) -> Vec<Vec<String>> {
        groups.iter().map(|g| g.nodes.iter().map(|&n| graph.nodes[n].op.call_name().to_string()).collect()).collect()
    }

    /// y = gelu(x·W1 + b1)·W2 + b2 + x
    fn mlp() -> Graph {
        let mut g = GraphBuilder::new("mlp");
        let x = g.input("x", DataType::BF16, &[1, 64, 32]).unwrap();
        let w1 = g.input("w1", DataType::BF16, &[1, 32, 128]).unwrap();
        let b1 = g.input("b1", DataType::BF16, &[1, 1, 128]).unwrap();
        let w2 = g.input("w2", DataType::BF16, &[1, 128, 32]).unwrap();
        let b2 = g.input("b2", DataType::BF16, &[1, 1, 32]).unwrap();
        let h = g.matmul(x, w1).unwrap();
        let h = g.op("add", &[h.into(), b1.into()], &[]).unwrap()[0];
        let h = g.op("gelu", &[h.into()], &[]).unwrap()[0];
        let y = g.matmul(h, w2).unwrap();
        let y = g.op("add", &[y.into(), b2.into()], &[]).unwrap()[0];
        let y = g.op("add", &[y.into(), x.into()], &[]).unwrap()[0];
        g.output(y, "y", DataType::BF16).unwrap();
        g.build().unwrap()
    }

    #[test]
    fn two_matmuls_are_two_parts_with_their_epilogues() {
        let graph = mlp();
        let alias = aliases(&graph);
        let groups = group(&graph, Some(&alias));
        assert_eq!(names(&graph, &groups), [vec!["matmul", "add", "gelu"], vec!["matmul", "add", "add"]]);
        let cut = groups[1].cut.as_ref().unwrap();
        assert_eq!(cut.reason, CutReason::SecondAnchor);
        assert_eq!(cut.after.1, "matmul");
        assert_eq!(cut.before.1, "matmul");
        // The gelu output crosses the boundary; it alone is in the arena.
        let io = graph.io();
        let layout = Layout::new(&graph, &groups, &alias, &io);
        let h = graph.nodes[2].outputs[0];
        assert_eq!(layout.place(h), Some(Place::Arena { offset: 0 }));
        // Stored in bf16, the type the second matmul's B has (the builder's intermediates are f32).
        assert_eq!(graph.tensor(h).data_type, DataType::F32);
        assert_eq!(stored_type(&graph, h, &alias), DataType::BF16);
        assert_eq!(layout.arena_bytes, 64 * 128 * 2);
        let part = extract(&graph, &groups, 1, &alias);
        assert_eq!(part.graph.inputs().len(), 4, "h, w2, b2, x and nothing else");
        assert!(part.graph.validate().is_ok());
        let first = extract(&graph, &groups, 0, &alias);
        assert_eq!(first.graph.outputs().len(), 1);
        assert!(first.graph.validate().is_ok());
    }

    /// cudnn-frontend's scaled fp8 matmul: `d = (a·b)·da·db`, `amax = reduce_amax(d)`,
    /// `y = d·scale`. cuDNN plans it as one kernel; so does the table, whether the scale is
    /// written before or after the `amax` that ends the epilogue, but not an op reading `amax`.
    #[test]
    fn an_epilogue_op_beside_its_reduction_shares_the_kernel() {
        use crate::ops::{AttrValue, PointwiseMode::Mul};
        let build = |amax_first: bool, read_amax: bool| {
            let mut g = GraphBuilder::new("fp8");
            let a = g.input("a", DataType::Fp8E4M3, &[1, 64, 32]).unwrap();
            let b = g.input("b", DataType::Fp8E4M3, &[1, 32, 16]).unwrap();
            let da = g.input("da", DataType::F32, &[1, 1, 1]).unwrap();
            let scale = g.input("scale", DataType::F32, &[1, 1, 1]).unwrap();
            let c = g.matmul(a, b).unwrap();
            let d = g.pointwise(Mul, &[c.into(), da.into()]).unwrap();
            let dims = [("dims".to_string(), AttrValue::IntList(vec![0, 1, 2]))];
            let amax = |g: &mut GraphBuilder| g.op("reduce_amax", &[d.into()], &dims).unwrap()[0];
            let (y, m) = if amax_first {
                let m = amax(&mut g);
                (g.pointwise(Mul, &[d.into(), if read_amax { m } else { scale }.into()]).unwrap(), m)
            } else {
                let y = g.pointwise(Mul, &[d.into(), scale.into()]).unwrap();
                (y, amax(&mut g))
            };
            g.output(m, "amax", DataType::F32).unwrap();
            g.output(y, "y", DataType::Fp8E4M3).unwrap();
            g.build().unwrap()
        };
        for amax_first in [false, true] {
            let graph = build(amax_first, false);
            assert_eq!(group(&graph, None).len(), 1, "amax first: {amax_first}");
        }
        let graph = build(true, true);
        let groups = group(&graph, None);
        assert_eq!(names(&graph, &groups), [vec!["matmul", "mul", "reduce_amax"], vec!["mul"]]);
        assert_eq!(groups[1].cut.as_ref().unwrap().reason, CutReason::NoEpilogue);
    }

    /// Each anchor's epilogue cut points, one candidate each; the tensor an epilogue cut
    /// materializes is retyped to the type of the outputs its part writes, else to its anchor's
    /// operands' (here bf16 either way, from the builder's f32 intermediates).
    #[test]
    fn measured_cuts_are_made_at_each_epilogue_op_and_typed_like_a_split_by_hand() {
        let graph = mlp();
        let alias = aliases(&graph);
        let groups = group(&graph, Some(&alias));
        let candidates = measured_cuts(&graph, &groups);
        let shapes: Vec<Vec<Vec<String>>> = candidates.iter().map(|c| names(&graph, c)).collect();
        assert_eq!(
            shapes,
            [
                vec![vec!["matmul"], vec!["add", "gelu"], vec!["matmul", "add", "add"]],
                vec![vec!["matmul", "add"], vec!["gelu"], vec!["matmul", "add", "add"]],
                vec![vec!["matmul", "add", "gelu"], vec!["matmul"], vec!["add", "add"]],
                vec![vec!["matmul", "add", "gelu"], vec!["matmul", "add"], vec!["add"]],
            ]
        );
        for candidate in &candidates {
            let k = candidate.iter().position(|g| g.cut.as_ref().is_some_and(|c| c.reason == CutReason::ToMeasure));
            let k = k.expect("one cut to measure");
            let mut retyped = graph.clone();
            retype_epilogue_cut(&mut retyped, candidate, k);
            let before = *candidate[k - 1].nodes.last().unwrap();
            let t = graph.nodes[before].outputs[0];
            assert_eq!(graph.tensor(t).data_type, DataType::F32);
            assert_eq!(retyped.tensor(t).data_type, DataType::BF16, "{:?}", names(&graph, candidate));
            // Nothing else changes.
            let changed = (0..graph.tensors.len()).filter(|&i| graph.tensors[i] != retyped.tensors[i]).count();
            assert_eq!(changed, 1);
        }
    }

    #[test]
    fn split_cuts_around_the_anchor() {
        let graph = mlp();
        let groups = group(&graph, None);
        let pieces = split(&graph, &groups[1], "no engine").unwrap();
        assert_eq!(names(&graph, &pieces), [vec!["matmul"], vec!["add", "add"]]);
        assert_eq!(pieces[1].cut.as_ref().unwrap().reason, CutReason::Refused("no engine".into()));
        assert!(split(&graph, &pieces[0], "x").is_none());
    }

    #[test]
    fn slots_are_reused_once_read() {
        // Three matmuls in a chain: the first intermediate is dead when the third part writes.
        let mut g = GraphBuilder::new("chain");
        let x = g.input("x", DataType::F16, &[1, 64, 64]).unwrap();
        let w = g.input("w", DataType::F16, &[1, 64, 64]).unwrap();
        let a = g.matmul(x, w).unwrap();
        let b = g.matmul(a, w).unwrap();
        let c = g.matmul(b, w).unwrap();
        let d = g.matmul(c, w).unwrap();
        g.output(d, "d", DataType::F16).unwrap();
        let graph = g.build().unwrap();
        let alias = aliases(&graph);
        let groups = group(&graph, Some(&alias));
        assert_eq!(groups.len(), 4);
        let io = graph.io();
        let layout = Layout::new(&graph, &groups, &alias, &io);
        // f16, the weights' type.
        let slot = 64 * 64 * 2;
        let offsets: Vec<u64> = (0..3)
            .map(|n| match layout.place(graph.nodes[n].outputs[0]) {
                Some(Place::Arena { offset }) => offset,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(offsets, [0, slot, 0]);
        assert_eq!(layout.arena_bytes as u64, 2 * slot);
    }
    /// The parts of a grouping run on the CPU reference through the memory plan (I/O, arena slots
    /// with their stored types, alias offsets), as `ExecutionPlan::emulate` runs built parts.
    fn emulate(graph: &Graph, inputs: &[crate::array::Array]) -> Vec<crate::array::Array> {
        let restrided = restride(graph);
        let graph = &restrided;
        let alias = aliases(graph);
        let groups = group(graph, Some(&alias));
        let io = graph.io();
        let layout = Layout::new(graph, &groups, &alias, &io);
        let mut memory = super::super::emulate::Memory::default();
        let n_in = graph.inputs().len();
        for (i, id) in io[..n_in].iter().enumerate() {
            memory.write(Place::Io { index: i, offset: 0 }, graph.tensor(*id), &inputs[i]);
        }
        for k in 0..groups.len() {
            let part = extract(graph, &groups, k, &alias);
            let sub = &part.graph;
            let place = |id: TensorId| layout.place(part.tensors[id.0]).expect("a part's I/O has memory");
            let mut values = vec![None; sub.tensors.len()];
            for id in sub.inputs() {
                values[id.0] = Some(memory.read(place(id), sub.tensor(id)));
            }
            let outs = crate::reference::run_arrays(sub, values).expect("a part runs");
            for (id, a) in sub.outputs().into_iter().zip(outs) {
                memory.write(place(id), sub.tensor(id), &a);
            }
        }
        io[n_in..]
            .iter()
            .enumerate()
            .map(|(k, id)| memory.read(Place::Io { index: n_in + k, offset: 0 }, graph.tensor(*id)))
            .collect()
    }

    /// Random chains of matmuls, elementwise ops, norms and views (bf16, bf16 intermediates): every
    /// grouping, run part by part through its memory plan, computes exactly what the whole graph
    /// computes on the CPU reference.
    #[test]
    fn random_graphs_partition_without_changing_results() {
        use crate::array::Array;
        use crate::rng::SplitMix64;
        use crate::Context;
        let mut rng = SplitMix64::new(16);
        let (mut built, mut split, mut viewed) = (0, 0, 0);
        for case in 0..200 {
            let mut g = GraphBuilder::new(format!("random{case}"));
            g.context(Context { intermediate_data_type: DataType::BF16, compute_data_type: DataType::F32 });
            let (b, s, e) = (2i64, 4i64, 8i64);
            let x = g.input("x", DataType::BF16, &[b, s, e]).unwrap();
            let mut cur = x;
            let mut width = e;
            let mut inputs = 1;
            let mut fresh = |g: &mut GraphBuilder, dims: &[i64]| {
                inputs += 1;
                g.input(&format!("in{inputs}"), DataType::BF16, dims).unwrap()
            };
            for _ in 0..(2 + rng.below(6)) {
                cur = match rng.below(7) {
                    0 | 1 => {
                        let out = [8i64, 16][rng.below(2)];
                        let w = fresh(&mut g, &[1, width, out]);
                        width = out;
                        g.matmul(cur, w).unwrap()
                    }
                    2 => {
                        let bias = fresh(&mut g, &[1, 1, width]);
                        g.op("add", &[cur.into(), bias.into()], &[]).unwrap()[0]
                    }
                    3 => g.op(["relu", "gelu", "tanh"][rng.below(3)], &[cur.into()], &[]).unwrap()[0],
                    4 => {
                        let scale = fresh(&mut g, &[1, 1, width]);
                        g.op("rmsnorm", &[cur.into(), scale.into(), 1e-5.into()], &[]).unwrap()[0]
                    }
                    5 => {
                        // Heads: [B, S, W] -> [B, H, S, W/H] -> back, through views.
                        let h = 2;
                        let shape = [("shape".to_string(), crate::ops::AttrValue::IntList(vec![b, s, h, width / h]))];
                        let r = g.op("reshape", &[cur.into()], &shape).unwrap()[0];
                        let perm = [("permutation".to_string(), crate::ops::AttrValue::IntList(vec![0, 2, 1, 3]))];
                        let t = g.op("transpose", &[r.into()], &perm).unwrap()[0];
                        let act = g.op("relu", &[t.into()], &[]).unwrap()[0];
                        let t2 = g.op("transpose", &[act.into()], &perm).unwrap()[0];
                        let shape = [("shape".to_string(), crate::ops::AttrValue::IntList(vec![b, s, width]))];
                        g.op("reshape", &[t2.into()], &shape).unwrap()[0]
                    }
                    _ => g.op("add", &[cur.into(), cur.into()], &[]).unwrap()[0],
                };
            }
            g.output(cur, "y", DataType::BF16).unwrap();
            let Ok(graph) = g.build() else { continue };
            built += 1;
            let restrided = restride(&graph);
            let alias = aliases(&restrided);
            if group(&restrided, Some(&alias)).len() > 1 {
                split += 1;
                viewed += usize::from(alias.iter().any(Option::is_some));
            }
            let inputs: Vec<Array> = graph
                .inputs()
                .iter()
                .map(|id| {
                    let t = graph.tensor(*id);
                    let mut a = Array::from_fn(&t.dims, |_| rng.nonzero(0.25, 1.0));
                    a.round_to(t.data_type);
                    a
                })
                .collect();
            let mut values = vec![None; graph.tensors.len()];
            for (id, a) in graph.inputs().iter().zip(&inputs) {
                values[id.0] = Some(a.clone());
            }
            let want = crate::reference::run_arrays(&graph, values).unwrap();
            let got = emulate(&graph, &inputs);
            assert_eq!(got, want, "{graph}");
        }
        // The generator must exercise what it is for.
        assert!(built >= 150 && split >= 60 && viewed >= 15, "built {built}, split {split}, with views {viewed}");
    }
}
