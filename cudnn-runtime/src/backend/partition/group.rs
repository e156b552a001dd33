//! Grouping nodes into parts: the fusion table's partition ([`group`]), a refused part split
//! around its anchor ([`split`]), the candidates [`Fusion::Measure`](crate::backend::Fusion::Measure)
//! times ([`measured_cuts`], [`retype_epilogue_cut`]), a partition recorded by node names
//! ([`from_names`]), and one part's own graph ([`extract`]).

use super::cut::{node_ref, Cut, CutReason};
use super::views::{producers, stored_type, Alias};
use crate::ir::{Graph, Node, Tensor, TensorId};
use crate::ops::{FusionRule, Op};
use crate::DataType;

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

/// Groups the nodes by the table of known patterns. With `alias` given, views that are aliases
/// belong to no group (their readers read memory); without, every view is a node that fuses as an
/// elementwise op (the graph as one kernel sees it).
// Long because the fusion table is one walk over the nodes in graph order; its match arms are the
// table's rules, which read best together.
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
            // An elementwise op broadcasting a smaller value computed in the kernel (`x - log(s)`
            // with `log(s)` of `[N, 1]` beside it) starts a kernel of its own.
            (FusionRule::Elementwise, Some((_, g)))
                if broadcasts_in_kernel(graph, &producer, &groups[g].nodes, node) =>
            {
                None
            }
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

/// Whether pointwise `node` reads a tensor computed by one of `members` (its would-be kernel)
/// with fewer elements than its output: a broadcast of an in-kernel value.
fn broadcasts_in_kernel(graph: &Graph, producer: &[Option<usize>], members: &[usize], node: &Node) -> bool {
    let Some(out) = node.outputs.first() else { return false };
    let count = graph.tensor(*out).element_count();
    matches!(node.op, Op::Pointwise(_))
        && node
            .inputs
            .iter()
            .any(|t| producer[t.0].is_some_and(|p| members.contains(&p)) && graph.tensor(*t).element_count() < count)
}

/// [`Carve`] for anchor node `n` and group `g`.
///
/// The prologue is what `n` reads through the group's ops, less the ops whose outputs are also
/// read elsewhere (by a later op or as a graph output) and that `n` does not read directly: those
/// stay in the elementwise kernel, which writes them. On the H100 (cuDNN 9.19, 2026-12-07) the
/// log-softmax `y = d - log(Σ exp(d))` with `d = x - max` computed `y` wrongly from the kernels
/// `[d, exp, Σ]` and `[log, y]`; it computes right with `d` written by a kernel of its own and
/// `y` not broadcasting `log` computed beside it ([`broadcasts_in_kernel`]).
fn prologue_carve(graph: &Graph, producer: &[Option<usize>], groups: &[Group], g: usize, n: usize) -> Carve {
    let members = &groups[g].nodes;
    let direct: Vec<usize> = graph.nodes[n].inputs.iter().filter_map(|t| producer[t.0]).collect();
    let outputs = graph.outputs();
    let escapes = |m: usize| {
        graph.nodes[m].outputs.iter().any(|t| {
            outputs.contains(t)
                || graph
                    .nodes
                    .iter()
                    .enumerate()
                    .any(|(k, node)| k != n && !members.contains(&k) && node.inputs.contains(t))
        })
    };
    // The group's ops `n` reads through ops of the group that are its own.
    let mut feeds: Vec<usize> = Vec::new();
    let mut stack = direct.clone();
    while let Some(m) = stack.pop() {
        if members.contains(&m) && !feeds.contains(&m) && (direct.contains(&m) || !escapes(m)) {
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

/// The group of each node (`None` for an alias, which is in none).
pub(super) fn group_index(graph: &Graph, groups: &[Group]) -> Vec<Option<usize>> {
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
pub(super) fn materialized(graph: &Graph, group_of: &[Option<usize>], alias: &[Option<Alias>]) -> Vec<bool> {
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
