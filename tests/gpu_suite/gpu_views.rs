//! Strided views on the GPU (issue 17): attention reading Q, K and V as slices of one packed
//! buffer (`tests/common/views.rs`), built online with default options, executed through the
//! typed API on random non-zero inputs and compared with the CPU reference of the whole graph.
//!
//! Outputs and workspaces (where the parts exchange the packed projection) are filled with NaN
//! before the execute, so a part that writes nothing, or reads what no part wrote, cannot pass.
//! An output passes under cudnn-frontend's bf16 tolerance for SDPA's O (every element within
//! `2e-2 + 2e-2·|want|`, `test/python/sdpa/fp16.py`) and the project's relative-error bound
//! ([`common::GPU_TOLERANCE`]).
//!
//! Without a GPU each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_GPU=1` (set by the
//! GPU bundle's `run-tests`), which makes that a failure.

#![cfg(feature = "cudnn")]

use crate::common;
#[path = "../common/views.rs"]
mod views;

use std::sync::Arc;

use cudnn_graph::backend::cudarc::driver::{CudaSlice, CudaStream};
use cudnn_graph::backend::{BuildOptions, ExecutionPlan};
use half::bf16;
use views::{
    PackedAttentionBlock, PackedAttentionBlockArgs, PackedAttentionBlockInputs, PackedHeads, PackedHeadsArgs,
    PackedHeadsInputs,
};

/// cudnn-frontend's bf16 tolerance for attention's O: `|got − want| ≤ atol + rtol·|want|`.
const ATOL: f64 = 2e-2;
const RTOL: f64 = 2e-2;

fn check(case: &str, got: &[bf16], want: &[bf16]) {
    let mut worst = 0usize;
    let mut bad = 0usize;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.to_f64(), w.to_f64());
        // NaN (memory no part wrote) never passes.
        let within = (g - w).abs() <= ATOL + RTOL * w.abs();
        if !within {
            bad += 1;
            worst = i;
        }
    }
    assert_eq!(
        bad,
        0,
        "{case}: {bad} of {} elements outside atol {ATOL} + rtol {RTOL}; e.g. [{worst}]: {} against {}",
        got.len(),
        got[worst],
        want[worst]
    );
    common::check(case, "y", got, want);
}

fn show(case: &str, plan: &ExecutionPlan) {
    println!(
        "{case}: {} parts, arena {} B, workspace {} B",
        plan.parts().len(),
        plan.arena_bytes(),
        plan.workspace_size()
    );
    for (k, p) in plan.parts().iter().enumerate() {
        println!("  part {k}: {p}");
    }
}

fn poisoned_workspace(stream: &Arc<CudaStream>, bytes: usize) -> CudaSlice<u8> {
    stream.clone_htod(&vec![0xffu8; bytes.max(1)]).unwrap()
}

fn packed_block_case<const HQ: usize, const HKV: usize, const D: usize>(b: usize, s: usize, seed: u64) {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let case = format!("packed_attention_b{b}_s{s}_h{HQ}x{D}_kv{HKV}");
    let (t, e, w) = (b * s, HQ * D, (HQ + 2 * HKV) * D);
    let x = common::random::<bf16>(seed, t * e);
    let g: Vec<bf16> = common::uniform(seed + 1, e, 0.9, 1.1);
    let scale = 1.0 / (e as f64).sqrt();
    let wqkv: Vec<bf16> = common::uniform(seed + 2, e * w, -scale, scale);
    let wo: Vec<bf16> = common::uniform(seed + 3, e * e, -scale, scale);
    let graph = PackedAttentionBlock::<HQ, HKV, D>::new(b, s);
    let want = graph.reference(PackedAttentionBlockInputs { x: &x, g: &g, wqkv: &wqkv, wo: &wo }).unwrap().y;
    let plan = graph.build(&cudnn, &BuildOptions::default()).unwrap();
    show(&case, plan.plan());
    assert_eq!(plan.plan().parts().len(), 4, "norm, projection, attention, output projection");
    let (xd, gd, wqkvd, wod) = (
        common::upload(&stream, &x),
        common::upload(&stream, &g),
        common::upload(&stream, &wqkv),
        common::upload(&stream, &wo),
    );
    let mut y = common::poisoned::<bf16>(&stream, want.len());
    let mut ws = poisoned_workspace(&stream, plan.workspace_size());
    let args = PackedAttentionBlockArgs { x: &xd, g: &gd, wqkv: &wqkvd, wo: &wod, y: &mut y };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    stream.synchronize().unwrap();
    check(&case, &stream.clone_dtoh(&y).unwrap(), &want);
}

#[needs_gpu]
#[test]
fn gpu_packed_attention_block_reads_q_k_v_in_place() {
    packed_block_case::<4, 2, 32>(2, 64, 11);
    packed_block_case::<8, 2, 128>(2, 256, 12);
}

#[needs_gpu]
#[test]
fn gpu_packed_heads_attention_over_one_input() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (b, s) = (2, 128);
    let case = format!("packed_heads_b{b}_s{s}_h4x64");
    let qkv = common::random::<bf16>(21, b * s * 3 * 4 * 64);
    let graph = PackedHeads::<4, 64>::new(b, s);
    let want = graph.reference(PackedHeadsInputs { qkv: &qkv }).unwrap().o;
    let plan = graph.build(&cudnn, &BuildOptions::default()).unwrap();
    show(&case, plan.plan());
    let qkvd = common::upload(&stream, &qkv);
    let mut o = common::poisoned::<bf16>(&stream, want.len());
    let mut ws = poisoned_workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, PackedHeadsArgs { qkv: &qkvd, o: &mut o }, Some(&mut ws)).unwrap();
    stream.synchronize().unwrap();
    check(&case, &stream.clone_dtoh(&o).unwrap(), &want);
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
