//! `Fusion::Measure` deviceless on cuDNN 9.19 for the H200 (issue 20): the partitionings that cut
//! an anchor's elementwise epilogue (or prologue) off are made at their cut points, every part of
//! each is planned by cuDNN, and the tensors a cut materializes are stored in the type a split by
//! hand stores them in. Which one autotuning keeps, and what that one computes, is tested with
//! injected times in `engines::autotune`'s own tests; on the GPU by `tests/gpu_suite/gpu_measure.rs`.
#![cfg(feature = "cudnn")]

use crate::common;

use common::deviceless;
use cudnn_runtime::backend::{BuildOptions, CandidateState, CutReason, ExecutionPlan, PlanPart};
use cudnn_runtime::ops::{AttrValue, PointwiseMode};
use cudnn_runtime::{Context, DataType, Graph, GraphBuilder};

use DataType::{Fp8E4M3 as E4, BF16, F32};

/// `(a·b)·da·db [+ bias, relu]` → bf16 (B column-major), as `examples/bench_fp8.rs` builds it,
/// at `[1, 256, 128] · [1, 128, 256]`; with `amax`, also `reduce_amax` of the result.
fn fp8(bias_relu: bool, amax: bool) -> Graph {
    let (m, n, k) = (256, 256, 128);
    let mut g = GraphBuilder::new("fp8_matmul");
    let a = g.input("a", E4, &[1, m, k]).unwrap();
    let b = g.input("b", E4, &[1, k, n]).unwrap();
    g.set_dim_order(b, &[0, 2, 1]).unwrap();
    let da = g.input("descale_a", F32, &[1, 1, 1]).unwrap();
    let db = g.input("descale_b", F32, &[1, 1, 1]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let c = g.pointwise(PointwiseMode::Mul, &[c.into(), da.into()]).unwrap();
    let mut y = g.pointwise(PointwiseMode::Mul, &[c.into(), db.into()]).unwrap();
    if bias_relu {
        let bias = g.input("bias", BF16, &[1, 1, n]).unwrap();
        y = g.pointwise(PointwiseMode::Add, &[y.into(), bias.into()]).unwrap();
        y = g.pointwise(PointwiseMode::Relu, &[y.into()]).unwrap();
    }
    if amax {
        let dims = [("dims".to_string(), AttrValue::IntList(vec![0, 1, 2]))];
        let r = g.op("reduce_amax", &[y.into()], &dims).unwrap()[0];
        g.output(r, "amax", F32).unwrap();
    }
    g.output(y, "y", BF16).unwrap();
    g.build().unwrap()
}

/// `gelu(x·w + bias)`, bf16 `[1, 256, 128] · [1, 128, 256]`, the builder's f32 intermediates.
fn bf16_bias_gelu() -> Graph {
    let mut g = GraphBuilder::new("bf16_bias_gelu");
    let x = g.input("x", BF16, &[1, 256, 128]).unwrap();
    let w = g.input("w", BF16, &[1, 128, 256]).unwrap();
    let bias = g.input("bias", BF16, &[1, 1, 256]).unwrap();
    let h = g.matmul(x, w).unwrap();
    let h = g.op("add", &[h.into(), bias.into()], &[]).unwrap()[0];
    let y = g.op("gelu", &[h.into()], &[]).unwrap()[0];
    g.output(y, "y", BF16).unwrap();
    g.build().unwrap()
}

fn measure() -> BuildOptions {
    BuildOptions::default().measure_partitionings()
}

fn ops(part: &PlanPart) -> Vec<&'static str> {
    part.graph().nodes.iter().map(|n| n.op.call_name()).collect()
}

/// Each alternative's parts by op, after checking what every alternative must be: planned
/// (a built, selected candidate per part), cut where it says [`CutReason::ToMeasure`], and
/// reading the tensor that crosses the cut in `crossing` (the part's inputs that are not the
/// graph's).
fn alternatives(plan: &ExecutionPlan, crossing: DataType) -> Vec<Vec<Vec<&'static str>>> {
    let graph = plan.graph();
    let is_input = |name: &str| graph.inputs().iter().any(|id| graph.tensor(*id).name == name);
    plan.alternatives()
        .iter()
        .map(|alt| {
            for part in alt.parts() {
                println!("{part}");
                assert_eq!(part.selected().state, CandidateState::Built);
            }
            let measured: Vec<&PlanPart> =
                alt.parts().iter().filter(|p| p.cut().is_some_and(|c| c.reason == CutReason::ToMeasure)).collect();
            assert_eq!(measured.len(), 1, "one cut to measure per alternative");
            let cut = measured[0].cut().unwrap();
            assert!(cut.to_string().contains("not timed yet"), "{cut}");
            let sub = measured[0].graph();
            let read: Vec<DataType> = sub
                .inputs()
                .into_iter()
                .map(|id| sub.tensor(id))
                .filter(|t| !is_input(&t.name))
                .map(|t| t.data_type)
                .collect();
            assert_eq!(read, [crossing], "{}", measured[0]);
            assert!(alt.arena_bytes() > 0);
            println!();
            alt.parts().iter().map(ops).collect()
        })
        .collect()
}

/// The fp8 GEMM with bias + relu into bf16: cut after the descales (bias + relu a kernel of its
/// own) and after the bias (relu alone), the bench's two hand splits, with the intermediate in
/// bf16; no cut between the matmul and its descales (a scale costs the GEMM nothing).
#[needs_cudnn]
#[test]
fn fp8_bias_relu_has_the_two_hand_splits_as_candidates() {
    let Some(cudnn) = deviceless() else { return };
    let graph = fp8(true, false);
    let plan = ExecutionPlan::build(&cudnn, &graph, &measure()).unwrap();
    assert_eq!(plan.parts().len(), 1, "until autotuning chooses, the plan runs cuDNN's fusion");
    assert_eq!(
        alternatives(&plan, BF16),
        [
            vec![vec!["matmul", "mul", "mul"], vec!["add", "relu"]],
            vec![vec!["matmul", "mul", "mul", "add"], vec!["relu"]]
        ]
    );
    for alt in plan.alternatives() {
        assert_eq!(alt.arena_bytes(), 256 * 256 * 2, "one bf16 [1, 256, 256] intermediate");
    }
    assert!(plan.max_workspace_size() >= plan.alternatives()[0].arena_bytes());
    // The default builds none of them.
    let auto = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    assert!(auto.alternatives().is_empty());
    // The alternatives' builds are counted in the plan's.
    let built: std::time::Duration = plan
        .parts()
        .iter()
        .chain(plan.alternatives().iter().flat_map(|a| a.parts()))
        .map(|p| p.timings().plan_build)
        .sum();
    assert_eq!(plan.timings().plan_build, built);
}

/// bf16 matmul + bias + gelu: cut after the matmul and after the bias, in bf16 (the output's
/// type; the builder's intermediates are f32).
#[needs_cudnn]
#[test]
fn bf16_bias_gelu_cuts_after_the_matmul_and_after_the_bias() {
    let Some(cudnn) = deviceless() else { return };
    let plan = ExecutionPlan::build(&cudnn, &bf16_bias_gelu(), &measure()).unwrap();
    assert_eq!(plan.parts().len(), 1);
    assert_eq!(
        alternatives(&plan, BF16),
        [vec![vec!["matmul"], vec!["add", "gelu"]], vec![vec!["matmul", "add"], vec!["gelu"]]]
    );
}

/// Nothing to measure: a GEMM with descales only, and one whose epilogue a reduction closes
/// (`amax`, a second anchor).
#[needs_cudnn]
#[test]
fn scales_alone_and_closed_epilogues_have_no_candidates() {
    let Some(cudnn) = deviceless() else { return };
    for (name, graph) in [("descales only", fp8(false, false)), ("with amax", fp8(true, true))] {
        let plan = ExecutionPlan::build(&cudnn, &graph, &measure()).unwrap();
        assert!(plan.alternatives().is_empty(), "{name}: {}", plan.alternatives().len());
        assert_eq!(plan.parts().len(), 1, "{name}");
    }
}

/// A prologue cuDNN fuses (tanh before a matmul, bf16 intermediates): one candidate, the tanh as
/// a kernel of its own, its output stored in bf16 (the type the matmul reads it beside).
#[needs_cudnn]
#[test]
fn a_prologue_is_cut_off_before_its_anchor() {
    let Some(cudnn) = deviceless() else { return };
    let mut g = GraphBuilder::new("prologue");
    g.context(Context { intermediate_data_type: BF16, compute_data_type: F32 });
    let x = g.input("x", BF16, &[1, 128, 64]).unwrap();
    let w = g.input("w", BF16, &[1, 64, 128]).unwrap();
    let r = g.op("tanh", &[x.into()], &[]).unwrap()[0];
    let y = g.matmul(r, w).unwrap();
    g.output(y, "y", BF16).unwrap();
    let plan = ExecutionPlan::build(&cudnn, &g.build().unwrap(), &measure()).unwrap();
    assert_eq!(plan.parts().len(), 1);
    assert_eq!(alternatives(&plan, BF16), [vec![vec!["tanh"], vec!["matmul"]]]);
}

/// A graph cuDNN plans as two parts (two matmuls): each part's cut points, one at a time, the
/// other part as it was; a cut whose epilogue feeds the second matmul stores its tensor in the
/// matmuls' operand type.
#[needs_cudnn]
#[test]
fn each_part_of_a_partitioned_plan_is_cut_in_turn() {
    let Some(cudnn) = deviceless() else { return };
    let mut g = GraphBuilder::new("mlp");
    let x = g.input("x", BF16, &[1, 64, 128]).unwrap();
    let w1 = g.input("w1", BF16, &[1, 128, 256]).unwrap();
    let b1 = g.input("b1", BF16, &[1, 1, 256]).unwrap();
    let w2 = g.input("w2", BF16, &[1, 256, 128]).unwrap();
    let h = g.matmul(x, w1).unwrap();
    let h = g.op("add", &[h.into(), b1.into()], &[]).unwrap()[0];
    let h = g.op("relu", &[h.into()], &[]).unwrap()[0];
    let y = g.matmul(h, w2).unwrap();
    let y = g.op("add", &[y.into(), x.into()], &[]).unwrap()[0];
    g.output(y, "y", BF16).unwrap();
    let plan = ExecutionPlan::build(&cudnn, &g.build().unwrap(), &measure()).unwrap();
    assert_eq!(plan.parts().len(), 2);
    assert_eq!(plan.parts()[1].cut().unwrap().reason, CutReason::SecondAnchor);
    assert_eq!(
        alternatives(&plan, BF16),
        [
            vec![vec!["matmul"], vec!["add", "relu"], vec!["matmul", "add"]],
            vec![vec!["matmul", "add"], vec!["relu"], vec!["matmul", "add"]],
            vec![vec!["matmul", "add", "relu"], vec!["matmul"], vec!["add"]],
        ]
    );
    // The cuts of the plan as built stay in every alternative.
    for alt in plan.alternatives() {
        assert!(alt.parts().iter().any(|p| p.cut().is_some_and(|c| c.reason == CutReason::SecondAnchor)));
    }
}
