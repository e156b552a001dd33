//! Strided views of a packed buffer (issue 17): attention reading Q, K and V as slices of one
//! QKV projection. On the CPU reference the packed graphs equal their separate-projection
//! twins exactly; deviceless, cuDNN 9.19 plans the packed block with Q, K and V read in place
//! from the projection's arena slot (no copy, no view kernel).
#![cfg(feature = "cudnn")]

use crate::blocks;
use crate::common;
use crate::view_graphs as views;

use blocks::{AttentionBlock, AttentionBlockInputs};
use cudnn_graph::backend::{BuildOptions, CutReason, ExecutionPlan};
use cudnn_graph::reference::{self, Array};
use cudnn_graph::rng::SplitMix64;
use half::bf16;
use views::{
    FirstColumns, FirstColumnsInputs, PackedAttentionBlock, PackedAttentionBlockInputs, PackedHeads, PackedHeadsInputs,
    SeparateHeads, SeparateHeadsInputs,
};

const HQ: usize = 4;
const HKV: usize = 2;
const D: usize = 32;
const E: usize = HQ * D;
const W: usize = (HQ + 2 * HKV) * D;

fn random(seed: u64, n: usize, scale: f64) -> Vec<bf16> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| bf16::from_f64(rng.uniform(-scale, scale))).collect()
}

/// Columns `from..to` of a row-major `[rows, cols]` matrix.
fn columns(m: &[bf16], cols: usize, from: usize, to: usize) -> Vec<bf16> {
    m.chunks(cols).flat_map(|row| row[from..to].iter().copied()).collect()
}

#[test]
fn packed_projection_equals_separate_projections_on_the_reference() {
    let (b, s) = (2, 24);
    let t = b * s;
    let x = random(1, t * E, 1.0);
    let g: Vec<bf16> = random(2, E, 0.1).iter().map(|v| bf16::from_f64(1.0 + v.to_f64())).collect();
    let wqkv = random(3, E * W, 1.0 / (E as f64).sqrt());
    let wo = random(4, E * E, 1.0 / (E as f64).sqrt());
    let (wq, wk, wv) = (columns(&wqkv, W, 0, E), columns(&wqkv, W, E, E + HKV * D), columns(&wqkv, W, E + HKV * D, W));
    let packed = PackedAttentionBlock::<HQ, HKV, D>::new(b, s)
        .reference(PackedAttentionBlockInputs { x: &x, g: &g, wqkv: &wqkv, wo: &wo })
        .unwrap()
        .y;
    let separate = AttentionBlock::<HQ, HKV, D>::new(b, s)
        .reference(AttentionBlockInputs { x: &x, g: &g, wq: &wq, wk: &wk, wv: &wv, wo: &wo })
        .unwrap()
        .y;
    assert!(packed.iter().any(|v| v.to_f64() != 0.0));
    // Each projected element is the same dot product rounded to bf16 once: equal bit for bit.
    assert_eq!(packed, separate);
}

#[test]
fn packed_heads_equal_separate_heads_on_the_reference() {
    let (h, d, b, s) = (2, 16, 2, 8);
    let qkv = random(5, b * s * 3 * h * d, 1.0);
    // [B, S, 3, H, D] → three [B, S, H, D] (BSHD) buffers.
    let part = |k: usize| -> Vec<bf16> {
        qkv.chunks(3 * h * d).flat_map(|token| token[k * h * d..(k + 1) * h * d].iter().copied()).collect()
    };
    let (q, k, v) = (part(0), part(1), part(2));
    let packed = PackedHeads::<2, 16>::new(b, s).reference(PackedHeadsInputs { qkv: &qkv }).unwrap().o;
    let separate = SeparateHeads::<2, 16>::new(b, s).reference(SeparateHeadsInputs { q: &q, k: &k, v: &v }).unwrap().o;
    assert!(packed.iter().any(|v| v.to_f64() != 0.0));
    assert_eq!(packed, separate);
}

#[test]
fn dyn_slice_bounds_are_checked_when_the_graph_is_built() {
    let x: Vec<f32> = (1..=8).map(|v| v as f32).collect();
    let y = FirstColumns::new(4, 3).reference(FirstColumnsInputs { x: &x }).unwrap().y;
    assert_eq!(y, [1.0, 2.0, 3.0, 5.0, 6.0, 7.0]);
    let e = FirstColumns::new(4, 5).graph().unwrap_err();
    println!("{e}");
    let text = e.to_string();
    assert!(text.contains("`limit` 5 of dim 1 reaches past X [2, 4], whose dim 1 is 4"), "{text}");
}

/// A graph's inputs, random and rounded to their types; the whole graph on the reference and
/// the plan emulated part by part through its memory plan: the largest difference.
fn emulated_against_whole(plan: &ExecutionPlan, seed: u64) -> f64 {
    let graph = plan.graph();
    let mut rng = SplitMix64::new(seed);
    let inputs: Vec<Array> = graph
        .inputs()
        .iter()
        .map(|id| {
            let t = graph.tensor(*id);
            let mut a = Array::from_fn(&t.dims, |_| rng.uniform(-1.0, 1.0));
            a.round_to(t.data_type);
            a
        })
        .collect();
    let mut values = vec![None; graph.tensors.len()];
    for (id, a) in graph.inputs().iter().zip(&inputs) {
        values[id.0] = Some(a.clone());
    }
    let want = reference::run_arrays(graph, values).unwrap();
    let got = plan.emulate(&inputs).unwrap();
    let mut worst: f64 = 0.0;
    for (g, w) in got.iter().zip(&want) {
        for (a, b) in g.data.iter().zip(&w.data) {
            assert!(a.is_finite(), "emulated output reads memory no part wrote");
            worst = worst.max((a - b).abs());
        }
    }
    worst
}

#[needs_cudnn]
#[test]
fn packed_attention_block_reads_q_k_v_in_place() {
    let Some(cudnn) = common::deviceless() else { return };
    let (b, s) = (2, 64);
    let t = b * s;
    let graph = PackedAttentionBlock::<HQ, HKV, D>::new(b, s).graph().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    println!(
        "{}: {} parts, arena {} B, workspace {} B",
        graph.name,
        plan.parts().len(),
        plan.arena_bytes(),
        plan.workspace_size()
    );
    for (k, p) in plan.parts().iter().enumerate() {
        println!("  part {k}: {p}");
    }
    let ops: Vec<Vec<&str>> =
        plan.parts().iter().map(|p| p.graph().nodes.iter().map(|n| n.op.call_name()).collect()).collect();
    // Four kernels (the separate projections take six): no slice, reshape or transpose runs.
    assert_eq!(ops, [vec!["rmsnorm"], vec!["matmul"], vec!["sdpa"], vec!["matmul", "add"]]);
    assert_eq!(plan.parts()[2].cut().unwrap().reason, CutReason::AfterView);
    // The projection writes the packed [B·S, (HQ + 2·HKV)·D] bf16 buffer once ...
    assert_eq!(plan.parts()[1].intermediate_bytes(), t * W * 2);
    // ... and attention reads Q, K, V straight from it: its inputs are that memory with the
    // strides of [B, H, S, D] heads inside each token's row of W elements.
    let attention = plan.parts()[2].graph();
    let inputs: Vec<_> = attention.inputs().iter().map(|id| attention.tensor(*id).clone()).collect();
    assert_eq!(inputs.len(), 3);
    let (w, s_, d) = (W as i64, s as i64, D as i64);
    assert_eq!(inputs[0].dims, vec![b as i64, HQ as i64, s_, d]);
    for q_k_v in &inputs {
        assert_eq!(q_k_v.strides, vec![s_ * w, d, w, 1], "`{}`", q_k_v.name);
    }
    // The arena: h (the norm's output) and the packed projection; O reuses h's slot once the
    // projection has read h. Nothing else is materialized.
    let (h, qkv) = (t * E * 2, t * W * 2);
    assert_eq!(plan.arena_bytes(), h + qkv);
    assert_eq!(emulated_against_whole(&plan, 7), 0.0);

    // The same block with three projections: six kernels.
    let separate = AttentionBlock::<HQ, HKV, D>::new(b, s).graph().unwrap();
    let separate = ExecutionPlan::build(&cudnn, &separate, &BuildOptions::default()).unwrap();
    println!("AttentionBlock: {} parts, arena {} B", separate.parts().len(), separate.arena_bytes());
    assert_eq!(separate.parts().len(), 6);

    // The GPU test's larger shape (`tests/gpu_suite/gpu_views.rs`): head dim 128, 8 query heads over 2.
    let large = PackedAttentionBlock::<8, 2, 128>::new(2, 256).graph().unwrap();
    let large = ExecutionPlan::build(&cudnn, &large, &BuildOptions::default()).unwrap();
    assert_eq!(large.parts().len(), 4);
    assert_eq!(large.arena_bytes(), 2 * 256 * (8 * 128 + 12 * 128) * 2);
}

#[needs_cudnn]
#[test]
fn packed_heads_plan_as_one_attention_kernel_over_the_input() {
    let Some(cudnn) = common::deviceless() else { return };
    let graph = PackedHeads::<2, 64>::new(2, 128).graph().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    for (k, p) in plan.parts().iter().enumerate() {
        println!("  part {k}: {p}");
    }
    let ops: Vec<Vec<&str>> =
        plan.parts().iter().map(|p| p.graph().nodes.iter().map(|n| n.op.call_name()).collect()).collect();
    assert_eq!(ops, [vec!["sdpa"]]);
    assert_eq!(plan.arena_bytes(), 0);
    let attention = plan.parts()[0].graph();
    for id in attention.inputs() {
        // [B, H, S, D] over the [B, S, 3, H, D] input: each token's row is 3·H·D = 384 elements.
        assert_eq!(attention.tensor(id).strides, vec![128 * 384, 64, 384, 1]);
    }
    assert_eq!(emulated_against_whole(&plan, 8), 0.0);
}
