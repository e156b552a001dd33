//! How a reduction is described to cuDNN: the one layout cuDNN 9.19's reduction engine plans.
//!
//! Measured deviceless for the H200 (`docs/ops.md`, "Reductions: what cuDNN plans";
//! `tests/deviceless_reductions.rs`): a reduction that is not a matmul's or convolution's epilogue
//! gets an engine (engine 1, alone or after elementwise ops) only as a *channel reduction*: X of
//! rank 3 or 4 laid out channels-last, reduced over axis 1 only, the reduced axis innermost in
//! memory. `f32[N, V]` reduced over V (a softmax's max and sum), `[B, T, N]` over N, rank 2, or a
//! rank-4 X over its last axis get "heuristics proposed no engine configuration", though each
//! reads the same memory a channel reduction does.
//!
//! So a part made of elementwise ops ending in one reduction whose reduced axes are innermost in
//! X's memory is described to cuDNN as that channel reduction: every tensor of the part as
//! `[1, C, 1, W]` with NHWC strides, `C` the reduced extent (its axes merged, innermost in memory)
//! and `W` the kept extent (the other axes merged), a tensor broadcast over the reduced axes or
//! the kept ones with 1 there. Only the tensor descriptors change: every tensor keeps its uid,
//! type and memory (the element at each address is the same one), so buffers bind as before, the
//! CPU reference and emulation compute on the graph as written, and a plan's JSON is checked
//! against this same description when it is loaded.

use std::borrow::Cow;

use crate::ir::Graph;
use crate::ops::Op;

/// `graph` with its tensors described as a channel reduction (see the module documentation), or
/// `graph` itself where it is not a part that one describes: where it has another op than
/// pointwise ones and one reduction, an op that reads the reduction, a tensor of another rank,
/// or a tensor whose reduced or kept axes are not one run of memory each in X's order, or where
/// X's reduced axes are not innermost in its memory.
pub(crate) fn channel_form(graph: &Graph) -> Cow<'_, Graph> {
    match describe(graph) {
        Some(g) => {
            tracing::debug!(graph = %graph.name, "reduction described to cuDNN as a channel reduction [1, C, 1, W]");
            Cow::Owned(g)
        }
        None => Cow::Borrowed(graph),
    }
}

fn describe(graph: &Graph) -> Option<Graph> {
    let mut reductions = graph.nodes.iter().filter(|n| matches!(n.op, Op::Reduction(_)));
    let node = reductions.next()?;
    if reductions.next().is_some() {
        return None;
    }
    let Op::Reduction(r) = &node.op else { return None };
    let others_pointwise = graph.nodes.iter().all(|n| std::ptr::eq(n, node) || matches!(n.op, Op::Pointwise(_)));
    let (&[x], &[y]) = (node.inputs.as_slice(), node.outputs.as_slice()) else { return None };
    if !others_pointwise || graph.nodes.iter().any(|n| n.inputs.contains(&y)) {
        return None;
    }
    let xt = graph.tensor(x);
    let rank = xt.dims.len();
    let axes = r.axes(rank).ok()?;
    // Axes that address memory, outermost in X's memory first.
    let by_stride = |set: &dyn Fn(usize) -> bool| {
        let mut a: Vec<usize> = (0..rank).filter(|&i| set(i) && xt.dims[i] > 1).collect();
        a.sort_by_key(|&i| std::cmp::Reverse(xt.strides[i]));
        a
    };
    let reduced = by_stride(&|i| axes.contains(&i));
    let kept = by_stride(&|i| !axes.contains(&i));
    let extent = |a: &[usize]| a.iter().map(|&i| xt.dims[i]).product::<i64>();
    let (c, w) = (extent(&reduced), extent(&kept));
    // cuDNN reduces only the innermost axis in memory.
    if merged_stride(&xt.dims, &xt.strides, &reduced) != Some(1) {
        return None;
    }
    let mut out = graph.clone();
    for t in &mut out.tensors {
        if t.dims.len() != rank || (0..rank).any(|i| t.dims[i] != 1 && t.dims[i] != xt.dims[i]) {
            return None;
        }
        // Each group is X's extent (its axes one run of memory, in X's order) or broadcast.
        let group = |axes: &[usize], full: i64| -> Option<(i64, Option<i64>)> {
            match axes.iter().filter(|&&i| t.dims[i] > 1).count() {
                0 => Some((1, None)),
                n if n == axes.len() => {
                    let stride = if t.is_virtual { None } else { Some(merged_stride(&t.dims, &t.strides, axes)?) };
                    Some((full, stride))
                }
                _ => None,
            }
        };
        let (tc, cs) = group(&reduced, c)?;
        let (tw, ws) = group(&kept, w)?;
        // Virtual tensors have no memory: packed NHWC.
        let cs = cs.unwrap_or(1);
        let ws = ws.unwrap_or(if tc > 1 { tc * cs } else { 1 });
        let (cs, ws) = match (tc > 1, tw > 1) {
            (false, false) => (1, 1),
            (false, true) => (tw * ws, ws),
            (true, false) => (cs, tc * cs),
            (true, true) => (cs, ws),
        };
        let span = (tc * cs).max(tw * ws);
        t.dims = vec![1, tc, 1, tw];
        t.strides = vec![span, cs, span, ws];
    }
    Some(out)
}

/// The stride of `axes` (outermost first) merged into one axis, if they are one run of memory
/// in that order: each axis's stride the next one's times its extent. `Some(1)` for no axes.
fn merged_stride(dims: &[i64], strides: &[i64], axes: &[usize]) -> Option<i64> {
    let Some(&inner) = axes.last() else { return Some(1) };
    let contiguous = axes.windows(2).all(|p| strides[p[0]] == strides[p[1]] * dims[p[1]]);
    contiguous.then_some(strides[inner])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DataType, GraphBuilder};

    fn dims(v: &[i64]) -> Vec<(String, crate::ops::AttrValue)> {
        vec![("dims".to_string(), v.to_vec().into())]
    }

    #[test]
    fn a_row_reduction_after_pointwise_ops_is_a_channel_reduction() {
        let mut g = GraphBuilder::new("rows");
        let x = g.input("x", DataType::F32, &[6, 40]).unwrap();
        let m = g.input("m", DataType::F32, &[6, 1]).unwrap();
        let d = g.op("sub", &[x.into(), m.into()], &[]).unwrap()[0];
        let e = g.op("exp", &[d.into()], &[]).unwrap()[0];
        let s = g.op("reduce_sum", &[e.into()], &dims(&[-1])).unwrap()[0];
        g.output(s, "s", DataType::F32).unwrap();
        let graph = g.build().unwrap();
        let described = channel_form(&graph);
        let t = |name: &str| {
            let t = described.tensor_by_name(name).unwrap();
            (t.dims.clone(), t.strides.clone())
        };
        assert_eq!(t("x"), (vec![1, 40, 1, 6], vec![240, 1, 240, 40]));
        assert_eq!(t("m"), (vec![1, 1, 1, 6], vec![6, 6, 6, 1]));
        assert_eq!(t("s"), (vec![1, 1, 1, 6], vec![6, 6, 6, 1]));
        // Uids, types and nodes are kept.
        for (a, b) in described.tensors.iter().zip(&graph.tensors) {
            assert_eq!((a.uid, a.data_type, a.is_virtual), (b.uid, b.data_type, b.is_virtual));
        }
        assert_eq!(described.nodes, graph.nodes);
    }

    #[test]
    fn reductions_cudnn_cannot_read_so_are_left_alone() {
        // Over rows: the reduced axis is not innermost.
        let mut g = GraphBuilder::new("cols");
        let x = g.input("x", DataType::F32, &[6, 40]).unwrap();
        let s = g.op("reduce_max", &[x.into()], &dims(&[0])).unwrap()[0];
        g.output(s, "s", DataType::F32).unwrap();
        let graph = g.build().unwrap();
        assert!(matches!(channel_form(&graph), Cow::Borrowed(_)));
        // Over axes 0 and 2 of [B, T, N]: not one run of memory.
        let mut g = GraphBuilder::new("gaps");
        let x = g.input("x", DataType::F32, &[3, 6, 40]).unwrap();
        let s = g.op("reduce_max", &[x.into()], &dims(&[0, 2])).unwrap()[0];
        g.output(s, "s", DataType::F32).unwrap();
        let graph = g.build().unwrap();
        assert!(matches!(channel_form(&graph), Cow::Borrowed(_)));
    }
}
