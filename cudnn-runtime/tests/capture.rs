//! Capture (issue 34), deviceless: with a capture on, every graph planned is recorded once per
//! selection (its structure and each part's engine config, the cuDNN version and SM), within the
//! directory's byte budget; what it records plans again to the same engines and, run part by part
//! through the plan's memory, agrees with the CPU reference, for every graph of the structure
//! corpus (one or more per op family) cuDNN 9.19 plans for the H200.
//!
//! One test in its own binary: a capture is process-wide, and every plan another test built in
//! the same process while it is on would land in its directory.
#![cfg(feature = "cudnn")]

use std::path::{Path, PathBuf};

use cudnn_runtime::backend::capture::{self, read_captured, CaptureOptions};
use cudnn_runtime::backend::{BuildOptions, ExecutionPlan};
use cudnn_runtime::engines::repro::{random_inputs, Tolerance, Verdict};
use cudnn_runtime::reference;
use cudnn_runtime::serialize::{structure_from_json, structure_to_json};
use cudnn_runtime::Graph;

#[macro_use]
extern crate cudnn_graph_testkit;

mod common;

fn corpus() -> Vec<Graph> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/structure");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files.iter().filter_map(|f| structure_from_json(&std::fs::read_to_string(f).unwrap()).ok()).collect()
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut e: Vec<PathBuf> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    e.sort();
    e
}

fn reference_of(graph: &Graph, inputs: &[reference::Array]) -> Vec<reference::Array> {
    let mut values = vec![None; graph.tensors.len()];
    for (id, a) in graph.inputs().into_iter().zip(inputs) {
        values[id.0] = Some(a.clone());
    }
    reference::run_arrays(graph, values).unwrap()
}

#[needs_cudnn]
#[test]
fn captures_record_each_plan_once_within_budget_and_replay_alike() {
    let Some(cudnn) = common::deviceless() else { return };
    let root = std::env::temp_dir().join(format!("cudnn-graph-capture-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let graphs = corpus();
    assert!(graphs.len() >= 25, "{}", graphs.len());

    // Off: nothing is written.
    assert_eq!(capture::stats(), None);

    let dir = root.join("all");
    capture::start(CaptureOptions::new(&dir)).unwrap();
    let mut planned = Vec::new();
    for graph in &graphs {
        // Graphs cuDNN 9.19 does not plan for the H200 are refused with a typed error, as in
        // `cudnn-graph repro`; the rest are captured.
        if let Ok(plan) = ExecutionPlan::build(&cudnn, graph, &BuildOptions::default()) {
            planned.push((graph.clone(), plan));
        }
    }
    // Planning one again records nothing new.
    let again = ExecutionPlan::build(&cudnn, &planned[0].0, &BuildOptions::default()).unwrap();
    drop(again);
    let stats = capture::stop().unwrap();
    println!("{} graphs planned, {stats:?}", planned.len());
    assert!(planned.len() >= 20, "{}", planned.len());
    assert_eq!((stats.graphs, stats.dropped, stats.executes), (planned.len(), 0, 0));
    let found = entries(&dir);
    assert_eq!(found.len(), planned.len());
    let on_disk: u64 = found
        .iter()
        .flat_map(|e| ["graph.json", "capture.json"].map(|f| std::fs::metadata(e.join(f)).unwrap().len()))
        .sum();
    assert_eq!(on_disk, stats.bytes);

    // Each entry: the graph, bit for bit, and its plan's engines, which build again to the same
    // tags and whose parts agree with the reference through the plan's memory.
    for entry in &found {
        let graph = structure_from_json(&std::fs::read_to_string(entry.join("graph.json")).unwrap()).unwrap();
        let (_, plan) = planned.iter().find(|(g, _)| g.fingerprint() == graph.fingerprint()).expect("a planned graph");
        assert_eq!(structure_to_json(&graph), structure_to_json(plan.graph()));
        let record = read_captured(entry).unwrap();
        assert_eq!((record.cudnn_version, record.sm, record.online), (cudnn.version(), cudnn.sm(), false));
        assert_eq!(record.graph_fingerprint, format!("{:#018x}", graph.fingerprint()));
        let tags: Vec<String> = plan.parts().iter().map(|p| p.selected().tag()).collect();
        assert_eq!(record.tags, tags, "{}", entry.display());
        let replayed = ExecutionPlan::build_chosen(&cudnn, &graph, &record.parts, &BuildOptions::default()).unwrap();
        let nodes = |p: &ExecutionPlan| p.parts().iter().map(|p| p.nodes().to_vec()).collect::<Vec<_>>();
        assert_eq!(nodes(&replayed), nodes(plan));
        let engines = |p: &ExecutionPlan| {
            p.parts().iter().map(|p| (p.selected().engine_id, p.selected().knobs.clone())).collect::<Vec<_>>()
        };
        // cuDNN may report a rebuilt config with its default knobs filled in; the recorded ones
        // are all there.
        for ((id, knobs), (want_id, want_knobs)) in engines(&replayed).into_iter().zip(engines(plan)) {
            assert_eq!(id, want_id);
            assert!(want_knobs.iter().all(|k| knobs.contains(k)), "{knobs:?} lacks {want_knobs:?}");
        }
        let inputs = random_inputs(&graph, 3);
        let want = reference_of(&graph, &inputs);
        let got = replayed.emulate(&inputs).unwrap();
        for ((id, g), w) in graph.outputs().into_iter().zip(&got).zip(&want) {
            let t = graph.tensor(id);
            let v = Verdict::compare(t, g, w, Tolerance::of(t.data_type));
            assert!(v.passed(), "{}: {v}", entry.display());
        }
    }

    // A budget smaller than the corpus: what fits is written, the rest dropped and counted.
    let small = root.join("small");
    let some = &planned[..8];
    let budget: u64 = stats.bytes / planned.len() as u64 * 3;
    capture::start(CaptureOptions { max_bytes: budget, ..CaptureOptions::new(&small) }).unwrap();
    for (graph, _) in some {
        ExecutionPlan::build(&cudnn, graph, &BuildOptions::default()).unwrap();
    }
    let stats = capture::stop().unwrap();
    assert!(stats.bytes <= budget && stats.graphs > 0 && stats.dropped > 0, "{stats:?}");
    assert_eq!(stats.graphs as u64 + stats.dropped, some.len() as u64);
    assert_eq!(entries(&small).len(), stats.graphs);

    // Stopped: nothing more.
    ExecutionPlan::build(&cudnn, &planned[0].0, &BuildOptions::default()).unwrap();
    assert_eq!(entries(&small).len(), stats.graphs);
    std::fs::remove_dir_all(&root).unwrap();
}
