//! Tracing: silent without a subscriber; with one, the pipeline's phases show up as spans and
//! events: validation and the reference engine, and cuDNN's phases (lowering per node,
//! heuristics per mode, filters, each candidate's plan build, the plan cache's hits, misses and
//! evictions) on a deviceless context for the H200.

// `#[needs_cudnn]`, `#[needs_gpu]`: ignored, with the reason, where the requirement was missing
// when the tests were built (cudnn-graph-testkit).
#[macro_use]
extern crate cudnn_graph_testkit;

mod common;

use std::sync::{Arc, Mutex};

use cudnn_graph::{DataType, GraphBuilder};

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buffer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Tests here run one at a time: `tracing` caches each callsite's interest process-wide, and a
/// callsite first hit on a thread without a subscriber while another test's subscriber comes or
/// goes can stay disabled for that subscriber.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `f` with a subscriber at trace level and returns what it logged.
fn traced(f: impl FnOnce()) -> String {
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let log = buffer.0.lock().unwrap().clone();
    String::from_utf8(log).unwrap()
}

/// The lines of `log` that contain every one of `parts`.
fn lines<'a>(log: &'a str, parts: &[&str]) -> Vec<&'a str> {
    log.lines().filter(|l| parts.iter().all(|p| l.contains(p))).collect()
}

#[test]
fn phases_are_traced() {
    let _turn = one_at_a_time();
    let log = traced(|| {
        let mut g = GraphBuilder::new("traced");
        let x = g.input("x", DataType::F32, &[2, 3]).unwrap();
        let y = g.op("relu", &[x.into()], &[]).unwrap()[0];
        g.output(y, "y", DataType::F32).unwrap();
        let graph = g.build().unwrap();
        let x = common::random::<f32>(1, 6);
        cudnn_graph::reference::run(&graph, &[("x", x.as_slice().into())]).unwrap();
    });
    assert!(log.contains("validate") && log.contains("graph=traced"), "{log}");
    assert!(log.contains("reference run") && log.contains("elapsed_us"), "{log}");
    assert!(log.contains("op=\"relu\""), "{log}");
}

#[cfg(feature = "cudnn")]
#[needs_cudnn]
#[test]
fn cudnn_phases_are_traced() {
    use cudnn_graph::backend::{BuildOptions, HeuristicMode};
    use cudnn_graph::engines::{CacheSource, PlanCache};
    use cudnn_graph::payload::plan::Expect;

    let _turn = one_at_a_time();
    let Some(cudnn) = common::deviceless() else { return };
    let mut g = GraphBuilder::new("traced_mm");
    let a = g.input("a", DataType::F16, &[1, 64, 32]).unwrap();
    let b = g.input("b", DataType::F16, &[1, 32, 16]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let y = g.op("relu", &[c.into()], &[]).unwrap()[0];
    g.output(y, "y", DataType::F16).unwrap();
    let graph = g.build().unwrap();
    let options = BuildOptions::default().modes(&[HeuristicMode::A, HeuristicMode::Fallback]);
    let cache = PlanCache::in_memory();
    let mut sources = Vec::new();
    let log = traced(|| {
        for _ in 0..2 {
            let cached = cache.get_or_build(&cudnn, &graph, &Expect::default(), &options).unwrap();
            sources.push(cached.source);
        }
    });
    assert_eq!(sources, [CacheSource::Built, CacheSource::Memory]);

    // Lowering: one event per node, saying how many descriptors it made.
    for op in ["matmul", "relu"] {
        let lowered = lines(&log, &["lowered", &format!("op=\"{op}\""), "descriptors="]);
        assert_eq!(lowered.len(), 1, "{op}: {log}");
    }
    assert_eq!(lines(&log, &["operation graph finalized", "operations=2"]).len(), 1, "{log}");
    // Heuristics: one event per mode asked, with its config count and duration.
    for mode in ["mode=A", "mode=fallback"] {
        let found = lines(&log, &["heuristics", mode, "configs=", "elapsed_us="]);
        assert_eq!(found.len(), 1, "{mode}: {log}");
    }
    // A plan built (with its candidate and workspace), the outcome, all inside the build span.
    let built = lines(&log, &["build_plan", "graph=traced_mm", "plan built", "candidate=", "workspace="]);
    assert_eq!(built.len(), 1, "{log}");
    assert_eq!(lines(&log, &["build_plan", "plan ready", "built=1", "selected=eng"]).len(), 1, "{log}");
    // The cache: one miss (then the build), one memory hit.
    assert_eq!(lines(&log, &["plan cache miss"]).len(), 1, "{log}");
    assert_eq!(lines(&log, &["plan cache hit", "tier=\"memory\""]).len(), 1, "{log}");

    // An eviction names the graph and its bytes (here the entry is heavier than the budget).
    let plan = cache.get_or_build(&cudnn, &graph, &Expect::default(), &options).unwrap().plan;
    let small = PlanCache::in_memory().with_budget(1);
    let log = traced(|| assert!(small.insert(&cudnn, &plan, &Expect::default()).is_empty()));
    let evicted = lines(&log, &["plan cache eviction", "fingerprint=0x", "bytes="]);
    assert_eq!(evicted.len(), 1, "{log}");
    assert_eq!(small.stats().evictions, 1);
}

#[cfg(feature = "cudnn")]
#[needs_cudnn]
#[test]
fn filters_and_rejections_are_traced() {
    use cudnn_graph::backend::{BuildOptions, HeuristicMode};

    let _turn = one_at_a_time();
    let Some(cudnn) = common::deviceless() else { return };
    let mut g = GraphBuilder::new("filtered");
    let a = g.input("a", DataType::F16, &[1, 64, 32]).unwrap();
    let b = g.input("b", DataType::F16, &[1, 32, 16]).unwrap();
    let c = g.matmul(a, b).unwrap();
    g.output(c, "c", DataType::F16).unwrap();
    let graph = g.build().unwrap();
    // Every candidate of modes A and B considered, one engine deselected: each of its candidates
    // is filtered out before compiling, naming the filter.
    let options = BuildOptions::default().modes(&[HeuristicMode::A, HeuristicMode::B]).all_plans();
    let plain = cudnn_graph::backend::ExecutionPlan::build(&cudnn, &graph, &options).unwrap();
    let barred = plain.selected().engine_id.unwrap();
    let log = traced(|| {
        let options = options.clone().deselect_engine(barred);
        let _ = cudnn_graph::backend::ExecutionPlan::build(&cudnn, &graph, &options);
    });
    let filtered = lines(&log, &["filtered out"]);
    assert!(!filtered.is_empty(), "{log}");
    for line in filtered {
        assert!(line.contains(&format!("tag=eng{barred}")), "{line}");
        assert!(line.contains(&format!("engine {barred} is deselected")), "{line}");
    }
    assert!(lines(&log, &["plan built", &format!("tag=eng{barred}")]).is_empty(), "{log}");
}
