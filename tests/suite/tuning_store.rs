//! A `graph!` type's `build_autotuned` through the tuning store: the one its options name
//! (`AutotuneOptions::tuning_store`) and the one `CUDNN_GRAPH_TUNING_STORE` names (in a child
//! process: the variable is process-wide). Deviceless, against the H200's properties: a
//! deviceless context cannot measure, so a build that succeeds measured nothing, and its outcome
//! says so (`candidates_timed() == 0`).

#![cfg(feature = "cudnn")]

use crate::common;

use cudnn_graph::backend::{BackendError, BuildOptions, ExecutionPlan};
use cudnn_graph::engines::{AutotuneOptions, AutotuneReport, Timing, TuneSource, TuningFile, TuningStore};
use cudnn_graph::Error;

cudnn_graph::graph! {
    /// A matmul with its epilogue.
    pub Epilogue<dyn M>(a: bf16[1, M, 32], b: bf16[1, 32, 64], bias: bf16[1, 1, 64]) -> (y: bf16[1, M, 64]) {
        y = relu(add(matmul(a, b), bias));
    }
}

/// What a tuner on a GPU would do, without one: every part keeps its last built candidate (so
/// the choice is not the heuristics'), each timed 1 µs.
fn pick_last(plan: &mut ExecutionPlan) -> Result<AutotuneReport, BackendError> {
    let mut timings = Vec::new();
    let (mut selected, mut previous) = (Vec::new(), Vec::new());
    for part in 0..plan.parts().len() {
        previous.push(plan.parts()[part].selected().index);
        let last = plan.parts()[part].built().last().copied().unwrap_or(0);
        plan.select_in(part, last)?;
        selected.push(last);
        let tag = plan.parts()[part].selected().tag();
        timings.push(Timing { part, candidate: last, tag, median_us: 1.0, min_us: 1.0, runs: 1, samples: 1, batch: 1 });
    }
    Ok(AutotuneReport {
        timings,
        failures: Vec::new(),
        selected: selected[0],
        previous: previous[0],
        selected_parts: selected,
        previous_parts: previous,
        partitionings: Vec::new(),
        partitioning: 0,
        elapsed: std::time::Duration::ZERO,
    })
}

/// A store at `path` holding `g`'s tuned plan, as a tuning run would leave it.
fn fill(path: &std::path::Path, g: &Epilogue) -> Vec<String> {
    let cudnn = common::deviceless().unwrap();
    let file = TuningFile::open(path).unwrap();
    let defaults = BuildOptions::default();
    let options = Epilogue::build_options(&defaults);
    let built = file.plan_with(&cudnn, &g.graph().unwrap(), &g.expectation(), &options, pick_last).unwrap();
    assert_eq!(built.source, TuneSource::Measured);
    built.plan.parts().iter().map(|p| p.selected().tag()).collect()
}

fn temp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cudnn-graph-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[needs_cudnn]
#[test]
fn build_autotuned_builds_the_store_entry_its_options_name() {
    let Some(cudnn) = common::deviceless() else { return };
    let dir = temp("typed-store");
    let path = dir.join("tuning.json");
    let g = Epilogue::new(128);
    let tags = fill(&path, &g);
    let tuning = AutotuneOptions::default().tuning_store(TuningFile::open(&path).unwrap());
    let (plan, outcome) = g.build_autotuned(&cudnn, &BuildOptions::default(), &tuning).unwrap();
    assert_eq!((outcome.source, outcome.candidates_timed()), (TuneSource::Store, 0));
    assert!(outcome.report.is_none() && outcome.warnings.is_empty(), "{outcome}");
    assert!(outcome.to_string().contains("nothing timed"), "{outcome}");
    assert_eq!(plan.plan().parts().iter().map(|p| p.selected().tag()).collect::<Vec<_>>(), tags);
    // Another binding of the type is another key: a miss, which a deviceless context cannot
    // measure (a typed error, the store unchanged).
    match Epilogue::new(256).build_autotuned(&cudnn, &BuildOptions::default(), &tuning) {
        Err(Error::Backend(BackendError::DevicelessPlan { .. })) => {}
        other => panic!("expected DevicelessPlan, got {:?}", other.map(|(_, o)| o.source)),
    }
    assert_eq!(TuningStore::read(&path).unwrap().len(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The child of the test below: run with `CUDNN_GRAPH_TUNING_STORE` set and
/// `CUDNN_GRAPH_CHILD_PROBE=1`, it builds with the default options and prints what happened; in
/// the suite's own process (no probe variable) it does nothing.
#[needs_cudnn]
#[test]
fn child_builds_through_the_environment_store() {
    if std::env::var_os("CUDNN_GRAPH_CHILD_PROBE").is_none() {
        return;
    }
    let Some(cudnn) = common::deviceless() else { return };
    let tuning = AutotuneOptions::default();
    match tuning.store() {
        Ok(store) => println!("store: {} entries", store.map_or(0, |s| s.snapshot().len())),
        Err(e) => println!("store error: {e}"),
    }
    match Epilogue::new(128).build_autotuned(&cudnn, &BuildOptions::default(), &tuning) {
        Ok((plan, outcome)) => println!(
            "built: {:?}, {} timed, tags {:?}",
            outcome.source,
            outcome.candidates_timed(),
            plan.plan().parts().iter().map(|p| p.selected().tag()).collect::<Vec<_>>()
        ),
        Err(e) => println!("error: {e}"),
    }
}

fn test_name(test: &str) -> String {
    match module_path!().split_once("::") {
        Some((_crate, module)) => format!("{module}::{test}"),
        None => test.to_string(),
    }
}

/// `CUDNN_GRAPH_TUNING_STORE=PATH`: a process whose options name no store builds the entry
/// recorded there and times nothing; a file there that is not a store is a typed error from
/// `AutotuneOptions::store`, and the build measures without it (deviceless: the typed error of
/// a measurement), never a panic.
#[needs_cudnn]
#[test]
fn the_environment_names_the_store() {
    if common::deviceless().is_none() {
        return;
    }
    let dir = temp("env-store");
    let path = dir.join("tuning.json");
    let tags = fill(&path, &Epilogue::new(128));
    let child = |store: &std::path::Path| {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &test_name("child_builds_through_the_environment_store"), "--nocapture"])
            .args(["--test-threads", "1", "--include-ignored"])
            .env("CUDNN_GRAPH_CHILD_PROBE", "1")
            .env("CUDNN_GRAPH_TUNING_STORE", store)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "child failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        stdout
    };
    let hit = child(&path);
    assert!(hit.contains("store: 1 entries"), "{hit}");
    assert!(hit.contains(&format!("built: Store, 0 timed, tags {tags:?}")), "{hit}");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, b"{\"cudnn_graph_tuning\": 1, \"entries\": [").unwrap();
    let refused = child(&bad);
    assert!(refused.contains("store error: not a cudnn-graph tuning store"), "{refused}");
    assert!(refused.contains("error: ") && refused.contains("deviceless"), "{refused}");
    assert_eq!(std::fs::read(&bad).unwrap(), b"{\"cudnn_graph_tuning\": 1, \"entries\": [", "left as it was");
    std::fs::remove_dir_all(&dir).unwrap();
}
