//! Capture with inputs on the GPU (issue 34): a plan's first executes have their inputs saved
//! (`CaptureOptions::inputs`), bit for bit as given, the later ones not; the entry replays with
//! its captured engines and inputs to the reference's results.
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

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the test above.
gpu_guard!();
