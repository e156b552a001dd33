//! The partitioner's unit tests: grouping, splitting, measured cuts, arena slots, and random
//! graphs run part by part on the CPU reference.

use super::arena::{Arena, Place};
use super::cut::CutReason;
use super::group::{extract, group, measured_cuts, retype_epilogue_cut, split, Group};
use super::views::{aliases, restride, stored_type};
use crate::ir::{Graph, GraphBuilder, TensorId};
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
    let layout = Arena::new(&graph, &groups, &alias, &io);
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
    let layout = Arena::new(&graph, &groups, &alias, &io);
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
    let layout = Arena::new(graph, &groups, &alias, &io);
    let mut memory = crate::backend::emulate::Memory::default();
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
