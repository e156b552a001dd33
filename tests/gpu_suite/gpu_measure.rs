//! `Fusion::Measure` on the GPU (issue 20): an fp8 e4m3 matmul with per-tensor descales and a
//! bias + relu epilogue into bf16, built with the partitionings that cut the epilogue off, then
//! autotuned: the partitioning it keeps is the fastest it timed, it is what the plan runs, its
//! result matches the CPU reference under cudnn-frontend's fp8 GEMM tolerance for a bf16 output
//! (`atol = rtol = 0.01`, `test/python/fe_api/test_gemm_amax_utils.py`; the epilogue cut rounds
//! one intermediate to bf16, well within it), and its payload reloads as the same parts and
//! computes the same. Outputs and workspaces are filled with NaN before each execute.
//!
//! Without a GPU each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_GPU=1`, which makes
//! that a failure.

#![cfg(feature = "cudnn")]

use crate::common;

use cudnn_graph::backend::{BuildOptions, CutReason, DeviceBuffer, ExecutionPlan};
use cudnn_graph::engines::{autotune, AutotuneOptions};
use cudnn_graph::payload::plan::{read_payload, write_payload, PlanOrigin, SerializeOptions};
use cudnn_graph::{graph, Element, Fp8E4M3};
use half::bf16;

graph! {
    /// `relu((a·b)·descale_a·descale_b + bias)` → bf16, B column-major (the benchmark's graph).
    pub Fp8BiasRelu<dyn M, dyn N, dyn K>(
        a: fp8_e4m3[1, M, K],
        b: fp8_e4m3[1, K, N] order [0, 2, 1],
        descale_a: f32[1, 1, 1],
        descale_b: f32[1, 1, 1],
        bias: bf16[1, 1, N],
    ) -> (y: bf16[1, M, N]) {
        y = relu(add(mul(mul(matmul(a, b), descale_a), descale_b), bias));
    }
}

/// Elements outside `atol + rtol·|want|` (a NaN is outside), and the largest error relative to
/// the largest `|want|`.
fn outside(got: &[bf16], want: &[bf16], atol: f64, rtol: f64) -> (usize, f64) {
    let scale = want.iter().map(|w| w.to_f64_value().abs()).fold(0.0, f64::max).max(f64::MIN_POSITIVE);
    let (mut bad, mut worst) = (0, 0.0f64);
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (g.to_f64_value(), w.to_f64_value());
        let err = (g - w).abs();
        worst = worst.max(err / scale);
        if err.is_nan() || err > atol + rtol * w.abs() {
            bad += 1;
        }
    }
    (bad, worst)
}

#[needs_gpu]
#[test]
fn gpu_measured_partitioning_executes_and_matches_the_reference() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (m, n, k) = (512usize, 768usize, 256usize);
    let a: Vec<Fp8E4M3> = common::uniform(1, m * k, -400.0, 400.0);
    let b: Vec<Fp8E4M3> = common::uniform(2, k * n, -400.0, 400.0);
    let descale = [1.0f32 / 400.0];
    let bias: Vec<bf16> = common::uniform(3, n, -0.5, 0.5);
    let g = Fp8BiasRelu::new(m, n, k);
    let want = g
        .reference(Fp8BiasReluInputs { a: &a, b: &b, descale_a: &descale, descale_b: &descale, bias: &bias })
        .unwrap()
        .y;

    let options = Fp8BiasRelu::build_options(&BuildOptions::default().measure_partitionings()).into_owned();
    let mut plan = ExecutionPlan::build(&cudnn, &g.graph().unwrap(), &options).unwrap();
    println!("built in {:?}, {} alternatives", plan.timings().total(), plan.alternatives().len());
    assert_eq!(plan.alternatives().len(), 2, "cut after the descales, and after the bias");
    let report = autotune(&cudnn, &mut plan, &AutotuneOptions::default()).unwrap();
    print!("{report}");
    assert_eq!(report.partitionings.len(), 3);
    let fastest = report.partitionings.iter().filter_map(|p| p.median_us).fold(f64::INFINITY, f64::min);
    let kept = &report.partitionings[report.partitioning];
    let own = report.partitionings[0].median_us;
    common::assert_tuned("partitionings", kept.median_us.unwrap(), own, fastest, AutotuneOptions::default().min_gain);
    assert!(plan.alternatives().is_empty());
    let nodes: Vec<Vec<String>> = plan.parts().iter().map(|p| p.nodes().to_vec()).collect();
    assert_eq!(nodes, kept.parts, "the plan runs the partitioning kept");
    if report.partitioning > 0 {
        let cut = plan.parts()[1].cut().unwrap();
        assert!(matches!(cut.reason, CutReason::MeasuredFaster(_)), "{cut}");
        println!("kept a split epilogue, {:.2}× faster: {cut}", report.partitioning_speedup().unwrap());
    }

    let (a_d, b_d) = (common::upload(&stream, &a), common::upload(&stream, &b));
    let (da_d, bias_d) = (common::upload(&stream, &descale), common::upload(&stream, &bias));
    let run = |plan: &ExecutionPlan, what: &str| {
        let mut y = common::poisoned::<bf16>(&stream, m * n);
        let mut ws = stream.clone_htod(&vec![0xffu8; plan.workspace_size().max(1)]).unwrap();
        let mut io = [
            ("a", DeviceBuffer::input(&a_d)),
            ("b", DeviceBuffer::input(&b_d)),
            ("descale_a", DeviceBuffer::input(&da_d)),
            ("descale_b", DeviceBuffer::input(&da_d)),
            ("bias", DeviceBuffer::input(&bias_d)),
            ("y", DeviceBuffer::output(&mut y)),
        ];
        plan.execute_named(&cudnn, &mut io, Some(&mut ws)).unwrap();
        let got = stream.clone_dtoh(&y).unwrap();
        let (bad, worst) = outside(&got, &want, 0.01, 0.01);
        println!(
            "{what}: {bad} of {} outside the tolerance, largest error {worst:.3e} of the largest value",
            got.len()
        );
        assert_eq!(bad, 0, "{what}");
    };
    run(&plan, "measured");

    // Its payload reloads as the same parts (and cuts) and computes the same.
    let bytes = write_payload(&plan, &PlanOrigin::of(&cudnn), SerializeOptions::default(), &g.expectation()).unwrap();
    let (loaded, _) = read_payload(&cudnn, &bytes, None, &g.expectation()).unwrap();
    let loaded_nodes: Vec<Vec<String>> = loaded.parts().iter().map(|p| p.nodes().to_vec()).collect();
    assert_eq!(loaded_nodes, nodes);
    for (a, b) in loaded.parts().iter().zip(plan.parts()) {
        assert_eq!(a.cut(), b.cut());
        assert_eq!(a.selected().engine_id, b.selected().engine_id);
    }
    run(&loaded, "measured, reloaded");
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
