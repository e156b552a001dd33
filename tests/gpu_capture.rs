//! Capture with inputs on the GPU (issue 34): a plan's first executes have their inputs saved
//! (`CaptureOptions::inputs`), bit for bit as given, the later ones not; the entry replays with
//! its captured engines and inputs to the reference's results; a CUDA graph's launches count as
//! executes.
//!
//! Its own binary, named for the GPU bundle's `gpu_*`: a capture is process-wide.
#![cfg(feature = "cudnn")]

#[macro_use]
extern crate cudnn_graph_testkit;

#[path = "common/mod.rs"]
mod common;

use cudnn_graph::backend::capture::{self, read_captured, CaptureOptions};
use cudnn_graph::backend::{BuildOptions, ExecutionPlan};
use cudnn_graph::engines::repro::{compare_outputs, execute_arrays, random_inputs, read_inputs, reference_outputs};
use cudnn_graph::serialize::structure_from_json;
use cudnn_graph::{DataType, GraphBuilder};

#[needs_gpu]
#[test]
fn gpu_capture_saves_the_first_inputs_and_replays_them() {
    let Some((_stream, cudnn)) = common::gpu() else { return };
    let mut g = GraphBuilder::new("capture_mm_bias");
    let a = g.input("a", DataType::BF16, &[1, 128, 64]).unwrap();
    let b = g.input("b", DataType::BF16, &[1, 64, 96]).unwrap();
    let bias = g.input("bias", DataType::F32, &[1, 1, 96]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let y = g.op("add", &[c.into(), bias.into()], &[]).unwrap()[0];
    g.output(y, "y", DataType::BF16).unwrap();
    let graph = g.build().unwrap();
    let dir = std::env::temp_dir().join(format!("cudnn-graph-gpu-capture-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    capture::start(CaptureOptions { inputs: 2, ..CaptureOptions::new(&dir) }).unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let runs: Vec<_> = (0..3).map(|seed| random_inputs(&graph, seed)).collect();
    for inputs in &runs {
        execute_arrays(&cudnn, &plan, inputs).unwrap();
    }
    let stats = capture::stop().unwrap();
    println!("{stats:?}");
    assert_eq!((stats.graphs, stats.executes, stats.dropped), (1, 2, 0));
    let entry = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    assert!(entry.join("exec-1/inputs.json").is_file() && !entry.join("exec-2").exists());
    let saved = [read_inputs(&entry, &graph).unwrap(), read_inputs(&entry.join("exec-1"), &graph).unwrap()];
    for (got, given) in saved.iter().zip(&runs) {
        for (a, b) in got.iter().zip(given) {
            assert!(a.data.iter().zip(&b.data).all(|(x, y)| x.to_bits() == y.to_bits()), "inputs differ");
        }
    }
    // The entry replays: its graph, its engines, its inputs.
    let replayed_graph = structure_from_json(&std::fs::read_to_string(entry.join("graph.json")).unwrap()).unwrap();
    let record = read_captured(&entry).unwrap();
    assert!(record.online);
    let replayed =
        ExecutionPlan::build_chosen(&cudnn, &replayed_graph, &record.parts, &BuildOptions::default()).unwrap();
    assert_eq!(replayed.selected().engine_id, plan.selected().engine_id);
    let got = execute_arrays(&cudnn, &replayed, &saved[1]).unwrap();
    let want = reference_outputs(&replayed_graph, &saved[1]).unwrap();
    for v in compare_outputs(&replayed_graph, &got, &want) {
        println!("{v}");
        assert!(v.passed(), "{v}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

cudnn_graph::graph! {
    /// An RMS norm whose epsilon is a host scalar: a CUDA graph computes with the value it was
    /// recorded with.
    pub CaptureRms<dyn N>(x: f32[N, 64], scale: f32[1, 64], eps: f32[1, 1] host) -> (y: f32[N, 64]) {
        y = rmsnorm(x, scale, eps);
    }
}

/// A launch of a plan's CUDA graph is an execute: the plan is recorded when the graph is, and
/// the inputs of its first launches are saved as an execute's (the host scalar's value the one
/// the graph was recorded with, even after the caller's variable changed), the later ones not.
#[needs_gpu]
#[test]
fn gpu_capture_counts_cuda_graph_launches_as_executes() {
    use cudnn_graph::backend::cudarc::driver::DevicePtr;
    use cudnn_graph::backend::{Cudnn, GraphMode};
    let Some((default_stream, _)) = common::gpu() else { return };
    // A stream that can be captured (the legacy default stream cannot).
    let stream = default_stream.context().new_stream().unwrap();
    let cudnn = Cudnn::new(stream.clone()).unwrap();
    let graph = CaptureRms::new(8).graph().unwrap();
    let dir = std::env::temp_dir().join(format!("cudnn-graph-gpu-capture-launch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    capture::start(CaptureOptions { inputs: 2, ..CaptureOptions::new(&dir) }).unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let inputs = random_inputs(&graph, 11);
    let named = |name: &str| {
        let k = graph.inputs().iter().position(|id| graph.tensor(*id).name == name).unwrap();
        inputs[k].data.iter().map(|&v| v as f32).collect::<Vec<f32>>()
    };
    let (x, scale) = (common::upload(&stream, &named("x")), common::upload(&stream, &named("scale")));
    let mut eps = named("eps")[0];
    let recorded_eps = eps;
    let y = common::poisoned::<f32>(&stream, 8 * 64);
    let ws = common::workspace(&stream, plan.workspace_size());
    stream.synchronize().unwrap();
    let io: Vec<u64> = plan
        .layout()
        .io()
        .iter()
        .map(|id| match graph.tensor(*id).name.as_str() {
            "x" => x.device_ptr(&stream).0,
            "scale" => scale.device_ptr(&stream).0,
            "eps" => &eps as *const f32 as u64,
            "y" => y.device_ptr(&stream).0,
            other => panic!("unexpected I/O tensor `{other}`"),
        })
        .collect();
    // SAFETY: the buffers and workspace outlive the graph (dropped after it); `eps` is read
    // while the graph is recorded.
    let g = unsafe { plan.cuda_graph(&cudnn, &io, ws.device_ptr(&stream).0, GraphMode::Auto) }.unwrap();
    eps = 1e6;
    assert!(eps != recorded_eps);
    for _ in 0..3 {
        g.launch().unwrap();
    }
    stream.synchronize().unwrap();
    drop(g);
    let stats = capture::stop().unwrap();
    println!("{stats:?}");
    assert_eq!((stats.graphs, stats.executes, stats.dropped), (1, 2, 0));
    let entry = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    assert!(entry.join("exec-1/inputs.json").is_file() && !entry.join("exec-2").exists());
    for saved in [read_inputs(&entry, &graph).unwrap(), read_inputs(&entry.join("exec-1"), &graph).unwrap()] {
        for (got, given) in saved.iter().zip(&inputs) {
            // Each input as the f32 the GPU read: the random inputs are f32 values already.
            let want: Vec<f64> = given.data.iter().map(|&v| f64::from(v as f32)).collect();
            assert_eq!(got.data, want, "a launch's inputs differ from what was uploaded");
        }
    }
    drop((x, scale, y, ws));
    std::fs::remove_dir_all(&dir).unwrap();
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
