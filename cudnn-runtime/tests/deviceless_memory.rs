//! Native memory across build/drop cycles against real cuDNN, without a GPU (issue #14).
//!
//! cuDNN opens NVRTC for its runtime-compiled engines and closes it when the last descriptor
//! using it goes; each reload re-ran NVRTC's static initialisers, whose allocations its
//! finalisers never free: ~146 KiB of native heap per reload, 8 reloads per build of a
//! matmul + bias + relu (1.17 MiB per build), one per plan loaded from JSON. The backend now keeps
//! NVRTC loaded once cuDNN has opened it. The measurement program is
//! `cudnn-runtime/examples/rss_cycles.rs`; the figures are in `docs/benchmarks.md` ("Memory").
//!
//! One test in its own binary, so no other test's allocations land in glibc's counters while it
//! measures. Needs libcudnn 9 and a libcuda.so.1 (on CI, the stand-in), like the other
//! deviceless tests; `CUDNN_GRAPH_REQUIRE_CUDNN=1` turns a missing library into a failure.
#![cfg(feature = "cudnn")]

use cudnn_runtime::backend::{BackendError, BuildOptions, Cudnn, ExecutionPlan};
use cudnn_runtime::ops::PointwiseMode;
use cudnn_runtime::{DataType, Graph, GraphBuilder};

// `#[needs_cudnn]`: ignored, with the reason, where libcudnn or libcuda was missing when the test
// was built (cudnn-graph-testkit).
#[macro_use]
extern crate cudnn_graph_testkit;

mod common;

/// `y = relu(a · b + bias)` in bf16: heuristics offer runtime-compiled engines for it, so cuDNN
/// opens NVRTC.
fn graph() -> Graph {
    let mut g = GraphBuilder::new("memory_matmul_bias_relu");
    let dt = DataType::BF16;
    let a = g.input("a", dt, &[1, 256, 128]).unwrap();
    let b = g.input("b", dt, &[1, 128, 512]).unwrap();
    let bias = g.input("bias", dt, &[1, 1, 512]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let d = g.pointwise(PointwiseMode::Add, &[c.into(), bias.into()]).unwrap();
    let y = g.pointwise(PointwiseMode::Relu, &[d.into()]).unwrap();
    g.output(y, "y", dt).unwrap();
    g.build().unwrap()
}

/// Bytes glibc's allocator has handed out and not had back, in every arena.
fn heap_in_use() -> usize {
    // SAFETY: `mallinfo2` takes no arguments and returns a plain struct.
    unsafe { libc::mallinfo2() }.uordblks
}

/// Whether a library whose file name starts with `prefix` is mapped into this process.
fn mapped(prefix: &str) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().filter_map(|l| l.rsplit('/').next()).any(|file| file.starts_with(prefix))
}

/// Lowering and heuristics only: a candidate index past every list stops the build before a plan
/// is finalized, with every descriptor dropped.
fn heuristics_cycle(cudnn: &Cudnn, graph: &Graph) {
    let options = BuildOptions::default().candidate_index(usize::MAX);
    match ExecutionPlan::build(cudnn, graph, &options) {
        Err(BackendError::CandidateIndex { .. }) => {}
        Err(e) => panic!("heuristics cycle: {e}"),
        Ok(_) => panic!("heuristics cycle: candidate index usize::MAX was built"),
    }
}

/// Average growth of the in-use heap over `cycles` runs of `cycle`, in bytes per cycle.
fn growth_per_cycle(cycles: usize, mut cycle: impl FnMut()) -> f64 {
    let before = heap_in_use();
    for _ in 0..cycles {
        cycle();
    }
    (heap_in_use() as f64 - before as f64) / cycles as f64
}

#[needs_cudnn]
#[test]
fn build_and_load_cycles_hold_no_native_memory() {
    let Some(cudnn) = common::deviceless() else { return };
    let graph = graph();
    let json = {
        let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
        plan.json().unwrap()
    };
    // Every descriptor of that build is gone; NVRTC must still be loaded, or the next build
    // reloads it (and leaks its static state again).
    assert!(mapped("libnvrtc.so"), "libnvrtc was unloaded when the last plan was dropped");

    // Warm-up: cuDNN's own one-time state (engine tables, thread-local buffers) is allocated here.
    for _ in 0..5 {
        heuristics_cycle(&cudnn, &graph);
    }
    // Before the fix: +1 200 000 bytes per cycle, steadily. The bound leaves room for the noise
    // of glibc's bookkeeping and for anything cuDNN sizes lazily, not for a leak.
    let heuristics = growth_per_cycle(40, || heuristics_cycle(&cudnn, &graph));
    println!("lowering + heuristics: {heuristics:+.0} B of native heap per cycle");
    assert!(heuristics < 4096.0, "lowering + heuristics keeps {heuristics:.0} B of native heap per cycle");

    let load = || drop(ExecutionPlan::from_json(&cudnn, graph.clone(), &json).unwrap());
    for _ in 0..5 {
        load();
    }
    // Before the fix: +150 000 bytes per cycle.
    let loads = growth_per_cycle(40, load);
    println!("plan load from JSON: {loads:+.0} B of native heap per cycle");
    assert!(loads < 4096.0, "loading a plan from JSON keeps {loads:.0} B of native heap per cycle");
}
