//! Plan control, the plan cache and engine routing against real cuDNN, without a GPU: a
//! deviceless [`Cudnn`] for the H200 (and an A100, for SM keying).
//!
//! Needs libcudnn 9 and a libcuda.so.1 (on CI, the stand-in): `export LD_LIBRARY_PATH=$(bash
//! .ci/setup-cudnn.sh DIR | tail -1)`. Without them each test is ignored (as it was built), unless
//! `CUDNN_GRAPH_REQUIRE_CUDNN=1`, which turns a missing library into a failure.
#![cfg(feature = "cudnn")]

use std::path::PathBuf;
use std::sync::Arc;

use cudnn_runtime::backend::{
    BackendError, BehaviorNote, BuildOptions, Candidate, CandidateState, Cudnn, CudnnError, ExecutionPlan, Filter,
    HeuristicMode, Knob, NumericalNote, Rejection,
};
use cudnn_runtime::engines::engine::{EngineId, Router};
use cudnn_runtime::engines::{CacheSource, PlanCache, PlanKey};
use cudnn_runtime::ops::PointwiseMode;
use cudnn_runtime::payload::plan::{parse_payload, write_payload, Expect, PlanOrigin, SerializeOptions};
use cudnn_runtime::{DataType, Error, Graph, GraphBuilder};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures");
const ALL_MODES: [HeuristicMode; 3] = [HeuristicMode::A, HeuristicMode::B, HeuristicMode::Fallback];

fn context(device: &str) -> Option<Cudnn> {
    let path = format!("{FIXTURES}/{device}-devprop.json");
    let json = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    match Cudnn::deviceless(&json) {
        Ok(cudnn) => Some(cudnn),
        Err(e @ CudnnError::LibraryMissing { .. }) => {
            if std::env::var("CUDNN_GRAPH_REQUIRE_CUDNN").as_deref() == Ok("1") {
                panic!("CUDNN_GRAPH_REQUIRE_CUDNN=1 but {e}");
            }
            println!("skipped: {e}");
            None
        }
        Err(e) => panic!("deviceless cuDNN context: {e}"),
    }
}

fn h200() -> Option<Cudnn> {
    context("h200")
}

/// `y = relu(a · b + bias)` in bf16, [1, m, k] x [1, k, n].
fn matmul_bias_relu(m: i64, n: i64, k: i64) -> Graph {
    let mut g = GraphBuilder::new("mbr");
    let a = g.input("a", DataType::BF16, &[1, m, k]).unwrap();
    let b = g.input("b", DataType::BF16, &[1, k, n]).unwrap();
    let bias = g.input("bias", DataType::BF16, &[1, 1, n]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let d = g.pointwise(PointwiseMode::Add, &[c.into(), bias.into()]).unwrap();
    let y = g.pointwise(PointwiseMode::Relu, &[d.into()]).unwrap();
    g.output(y, "y", DataType::BF16).unwrap();
    g.build().unwrap()
}

/// `out = relu(x + y)` in f16, [rows, 256].
fn add_relu(rows: i64) -> Graph {
    let mut g = GraphBuilder::new("add_relu");
    let x = g.input("x", DataType::F16, &[rows, 256]).unwrap();
    let y = g.input("y", DataType::F16, &[rows, 256]).unwrap();
    let s = g.pointwise(PointwiseMode::Add, &[x.into(), y.into()]).unwrap();
    let r = g.pointwise(PointwiseMode::Relu, &[s.into()]).unwrap();
    g.output(r, "out", DataType::F16).unwrap();
    g.build().unwrap()
}

/// The filter semantics, written independently of the library: the first filter (in
/// `BuildOptions` field order) that bars a candidate with these notes and this engine.
fn oracle(o: &BuildOptions, c: &Candidate) -> Option<Filter> {
    for n in &o.select_behavior_notes {
        if !c.behavior_notes.contains(n) {
            return Some(Filter::LacksBehaviorNote(*n));
        }
    }
    for n in &o.deselect_behavior_notes {
        if c.behavior_notes.contains(n) {
            return Some(Filter::HasBehaviorNote(*n));
        }
    }
    for n in &o.select_numerical_notes {
        if !c.numerical_notes.contains(n) {
            return Some(Filter::LacksNumericalNote(*n));
        }
    }
    for n in &o.deselect_numerical_notes {
        if c.numerical_notes.contains(n) {
            return Some(Filter::HasNumericalNote(*n));
        }
    }
    c.engine_id.filter(|id| o.deselect_engines.contains(id)).map(Filter::DeselectedEngine)
}

/// Builds with `options` and returns the candidate list, from the plan or from the `NoPlan`
/// error.
fn candidates(cudnn: &Cudnn, graph: &Graph, options: &BuildOptions) -> (Vec<Candidate>, bool) {
    match ExecutionPlan::build(cudnn, graph, options) {
        Ok(plan) => (plan.candidates().to_vec(), true),
        Err(BackendError::NoPlan { candidates, .. }) => (candidates, false),
        Err(e) => panic!("{e}"),
    }
}

#[needs_cudnn]
#[test]
fn note_filters_keep_all_of_select_and_drop_any_of_deselect() {
    let Some(cudnn) = h200() else { return };
    let graph = matmul_bias_relu(128, 256, 64);
    let base = BuildOptions::default().modes(&ALL_MODES);
    let (unfiltered, _) = candidates(&cudnn, &graph, &base);
    for c in &unfiltered {
        println!("  {c}");
    }
    assert!(unfiltered.len() >= 2, "need a real list");
    let has_rc = unfiltered.iter().any(|c| c.behavior_notes.contains(&BehaviorNote::RuntimeCompilation));
    let other_engine = unfiltered.iter().any(|c| {
        c.engine_id != unfiltered[0].engine_id && matches!(c.state, CandidateState::Untried | CandidateState::Built)
    });
    let cases: Vec<(&str, BuildOptions, bool)> = vec![
        // Notes every candidate here has: nothing is barred.
        ("select tensor cores", base.clone().tensor_cores(), true),
        ("deterministic", base.clone().deterministic(), true),
        // ALL: has RUNTIME_COMPILATION but lacks CUBLASLT_DEPENDENCY → barred.
        (
            "select two behavior notes",
            base.clone()
                .select_behavior(BehaviorNote::RuntimeCompilation)
                .select_behavior(BehaviorNote::CublasltDependency),
            false,
        ),
        // ANY: lacks CUBLASLT_DEPENDENCY but has RUNTIME_COMPILATION → barred.
        (
            "deselect two behavior notes",
            base.clone()
                .deselect_behavior(BehaviorNote::CublasltDependency)
                .deselect_behavior(BehaviorNote::RuntimeCompilation),
            !has_rc,
        ),
        ("no runtime compilation", base.clone().no_runtime_compilation(), !has_rc),
        (
            "select two numerical notes",
            base.clone().select_numerical(NumericalNote::TensorCore).select_numerical(NumericalNote::Fft),
            false,
        ),
        (
            "deselect two numerical notes",
            base.clone()
                .deselect_numerical(NumericalNote::Nondeterministic)
                .deselect_numerical(NumericalNote::TensorCore),
            false,
        ),
        // Plans where heuristics proposed another engine too (cuDNN 9.28: engine 7 after
        // engine 4; 9.19 proposes engine 7 alone).
        ("deselect an engine", base.clone().deselect_engine(unfiltered[0].engine_id.unwrap()), other_engine),
    ];
    for (name, options, expect_plan) in cases {
        let (list, planned) = candidates(&cudnn, &graph, &options);
        assert_eq!(planned, expect_plan, "{name}");
        assert_eq!(list.len(), unfiltered.len(), "{name}: same heuristics, same list");
        for (c, u) in list.iter().zip(&unfiltered) {
            assert_eq!(c.tag(), u.tag(), "{name}");
            if matches!(c.state, CandidateState::Rejected(Rejection::Duplicate { .. })) {
                continue;
            }
            match (oracle(&options, c), &c.state) {
                (Some(want), CandidateState::Rejected(Rejection::Filtered(got))) => {
                    assert_eq!(*got, want, "{name}: {c}")
                }
                (Some(want), state) => panic!("{name}: {c} should be barred by {want}, is {state:?}"),
                (None, CandidateState::Rejected(Rejection::Filtered(f))) => panic!("{name}: {c} wrongly barred by {f}"),
                (None, _) => {}
            }
        }
        if !planned {
            // The error names the filter of every barred candidate.
            let e = ExecutionPlan::build(&cudnn, &graph, &options).unwrap_err().to_string();
            let filter = oracle(&options, &list[0]).unwrap();
            assert!(e.contains(&format!("barred by {}: {filter}", filter.name())), "{name}: {e}");
        }
    }
}

#[needs_cudnn]
#[test]
fn shared_memory_cap_bars_by_reported_size() {
    let Some(cudnn) = h200() else { return };
    let graph = matmul_bias_relu(128, 256, 64);
    let base = BuildOptions::default().modes(&ALL_MODES);
    let (unfiltered, _) = candidates(&cudnn, &graph, &base);
    let sizes: Vec<usize> = unfiltered.iter().filter_map(|c| c.shared_memory_bytes).collect();
    let (Some(&lo), Some(&hi)) = (sizes.iter().min(), sizes.iter().max()) else {
        println!("cuDNN reports no shared-memory sizes here; nothing to cap");
        return;
    };
    let limit = if lo < hi { lo } else { lo.saturating_sub(1) };
    let (list, planned) = candidates(&cudnn, &graph, &base.clone().shared_memory_limit(limit));
    assert_eq!(planned, lo <= limit);
    for c in &list {
        if matches!(c.state, CandidateState::Rejected(Rejection::Duplicate { .. })) {
            continue;
        }
        match (c.shared_memory_bytes, &c.state) {
            (Some(s), CandidateState::Rejected(Rejection::SharedMemory { required, limit: l })) => {
                assert!(s > limit && *required == s && *l == limit, "{c}")
            }
            (Some(s), _) => assert!(s <= limit, "{c} should be barred"),
            (None, state) => assert!(!matches!(state, CandidateState::Rejected(Rejection::SharedMemory { .. }))),
        }
    }
    // A workspace cap of zero bars nothing here (these engines need none) but is checked.
    let (list, planned) = candidates(&cudnn, &graph, &base.workspace_limit(0));
    assert!(planned || list.iter().all(|c| c.workspace_bytes.unwrap_or(0) > 0));
}

#[needs_cudnn]
#[test]
fn build_one_candidate_by_index_and_select_by_index() {
    let Some(cudnn) = h200() else { return };
    let graph = matmul_bias_relu(128, 256, 64);
    let base = BuildOptions::default().modes(&ALL_MODES);
    let (unfiltered, _) = candidates(&cudnn, &graph, &base);
    let target =
        unfiltered.iter().rposition(|c| !matches!(c.state, CandidateState::Rejected(_))).expect("a viable candidate");
    let mut plan = ExecutionPlan::build(&cudnn, &graph, &base.clone().candidate_index(target)).unwrap();
    assert_eq!(plan.built(), [target]);
    assert_eq!(plan.selected().index, target);
    for c in plan.candidates() {
        if c.index != target {
            assert!(!matches!(c.state, CandidateState::Built), "{c}");
        }
    }
    assert!(plan.select(target).is_ok());
    let other = (0..unfiltered.len()).find(|&i| i != target).unwrap();
    assert!(matches!(plan.select(other), Err(BackendError::NotBuilt { index, .. }) if index == other));
    // Past the end: a typed error, nothing built.
    match ExecutionPlan::build(&cudnn, &graph, &base.clone().candidate_index(99)) {
        Err(BackendError::CandidateIndex { index: 99, count }) => assert_eq!(count, unfiltered.len()),
        other => panic!("{other:?}"),
    }
    // A duplicate asked for by index: nothing to build, and the list says why.
    if let Some(dup) =
        unfiltered.iter().find(|c| matches!(c.state, CandidateState::Rejected(Rejection::Duplicate { .. })))
    {
        let (list, planned) = candidates(&cudnn, &graph, &base.candidate_index(dup.index));
        assert!(!planned);
        assert!(list.iter().all(|c| c.state != CandidateState::Built));
    }
}

#[needs_cudnn]
#[test]
fn explicit_engine_and_knobs_build_exactly_that_config() {
    let Some(cudnn) = h200() else { return };
    let graph = matmul_bias_relu(128, 256, 64);
    let (unfiltered, _) = candidates(&cudnn, &graph, &BuildOptions::default().modes(&ALL_MODES));
    // The last distinct config with knobs: not the heuristics' first choice.
    let want = unfiltered
        .iter()
        .rfind(|c| !c.knobs.is_empty() && !matches!(c.state, CandidateState::Rejected(_)))
        .expect("a config with knobs");
    let id = want.engine_id.unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default().engine_config(id, &want.knobs)).unwrap();
    assert_eq!(plan.candidates().len(), 1);
    let got = plan.selected();
    println!("asked {want}\n  got {got}");
    assert_eq!((got.mode, got.engine_id), (None, Some(id)));
    for k in &want.knobs {
        assert!(got.knobs.contains(k), "knob {k} missing from {got}");
    }
    assert_eq!(got.shared_memory_bytes, want.shared_memory_bytes);
    assert_eq!(plan.timings().heuristics, std::time::Duration::ZERO, "no heuristics asked");
    assert!(plan.timings().plan_build > std::time::Duration::ZERO);

    // Filters still apply to an explicit config.
    let barred = BuildOptions::default().engine_config(id, &want.knobs).select_numerical(NumericalNote::Fft);
    let (list, planned) = candidates(&cudnn, &graph, &barred);
    assert!(!planned);
    assert_eq!(
        list[0].state,
        CandidateState::Rejected(Rejection::Filtered(Filter::LacksNumericalNote(NumericalNote::Fft)))
    );

    // An engine cuDNN does not have, or a knob it refuses: rejected with cuDNN's status.
    for (engine, knobs) in [(99_999, vec![]), (id, vec![Knob { kind: 24, value: 1_000_000 }])] {
        let (list, planned) = candidates(&cudnn, &graph, &BuildOptions::default().engine_config(engine, &knobs));
        assert!(!planned, "engine {engine} {knobs:?} built");
        assert_eq!(list.len(), 1);
        match &list[0].state {
            CandidateState::Rejected(Rejection::Cudnn { status, .. }) => println!("engine {engine}: {status}"),
            other => panic!("engine {engine}: {other:?}"),
        }
    }
}

#[needs_cudnn]
#[test]
fn build_timings_cover_every_phase() {
    let Some(cudnn) = h200() else { return };
    let plan = ExecutionPlan::build(&cudnn, &add_relu(64), &BuildOptions::default()).unwrap();
    let t = plan.timings();
    println!("{t:?}");
    assert!(t.validate > std::time::Duration::ZERO && t.lower > std::time::Duration::ZERO);
    assert!(t.heuristics > std::time::Duration::ZERO && t.plan_build > std::time::Duration::ZERO);
    assert_eq!(t.total(), t.validate + t.lower + t.heuristics + t.check_support + t.plan_build);
    let loaded = ExecutionPlan::from_json(&cudnn, add_relu(64), &plan.json().unwrap()).unwrap();
    assert_eq!(loaded.timings().heuristics, std::time::Duration::ZERO);
    assert!(loaded.timings().plan_build > std::time::Duration::ZERO);
}

/// A fresh, empty directory under the target's temporary folder.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cudnn-graph-plans-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn binding(b: &str) -> Expect {
    Expect { binding: Some(b.to_string()), ..Expect::default() }
}

#[needs_cudnn]
#[test]
fn cache_hits_skip_heuristics_and_compilation() {
    let Some(cudnn) = h200() else { return };
    let cache = PlanCache::in_memory();
    let graph = add_relu(64);
    let options = BuildOptions::default();
    let cold = cache.get_or_build(&cudnn, &graph, &Expect::default(), &options).unwrap();
    assert_eq!(cold.source, CacheSource::Built);
    assert!(cold.warnings.is_empty(), "{:?}", cold.warnings);
    let warm = cache.get_or_build(&cudnn, &graph, &Expect::default(), &options).unwrap();
    assert_eq!(warm.source, CacheSource::Memory);
    println!("cold {:?} ({:?}), warm {:?}", cold.elapsed, cold.plan.timings(), warm.elapsed);
    // A memory hit shares the plan: the very one built, nothing loaded.
    assert!(Arc::ptr_eq(&warm.plan, &cold.plan));
    assert_eq!(cache.stats().memory_hits, 1);
    assert_eq!(cache.stats().misses, 1);

    // The same device described in other words (another context the plan does not serve): the
    // payload held in memory is loaded for it, without heuristics, and then shared in turn.
    let json = std::fs::read_to_string(format!("{FIXTURES}/h200-devprop.json")).unwrap();
    let other = Cudnn::deviceless(&format!("{json}\n")).unwrap();
    let loaded = cache.get_or_build(&other, &graph, &Expect::default(), &options).unwrap();
    assert_eq!(loaded.source, CacheSource::Memory);
    assert!(!Arc::ptr_eq(&loaded.plan, &cold.plan));
    assert_eq!(loaded.plan.timings().heuristics, std::time::Duration::ZERO);
    assert_eq!(loaded.plan.candidates().len(), 1, "loaded, not planned");
    assert_eq!(loaded.plan.selected().engine_id, cold.plan.selected().engine_id);
    assert_eq!(loaded.plan.layout(), cold.plan.layout());
    let again = cache.get_or_build(&other, &graph, &Expect::default(), &options).unwrap();
    assert!(Arc::ptr_eq(&again.plan, &loaded.plan));
    let first = cache.get_or_build(&cudnn, &graph, &Expect::default(), &options).unwrap();
    assert!(Arc::ptr_eq(&first.plan, &cold.plan), "each context keeps its plan");
    // A graph equal but for its names has the same key, and gets a plan of its own names.
    let renamed = Graph { name: "renamed".into(), ..graph.clone() };
    let named = cache.get_or_build(&cudnn, &renamed, &Expect::default(), &options).unwrap();
    assert_eq!((named.source, named.plan.graph().name.as_str()), (CacheSource::Memory, "renamed"));
    assert_eq!(cache.stats().memory_hits, 5);
    assert_eq!(cache.stats().misses, 1);
    assert_eq!(cache.len(), 1);

    // An entry whose engine the options bar is a miss, and the new plan replaces it.
    let engine = cold.plan.selected().engine_id.unwrap();
    let other = BuildOptions::default().deselect_engine(engine);
    match cache.get_or_build(&cudnn, &graph, &Expect::default(), &other) {
        Ok(p) => {
            assert_eq!(p.source, CacheSource::Built);
            assert_ne!(p.plan.selected().engine_id, Some(engine));
        }
        Err(Error::Backend(BackendError::NoPlan { .. })) => println!("only engine {engine} plans this graph here"),
        Err(e) => panic!("{e}"),
    }
    let (hit, _) = cache.get(&cudnn, &graph, &Expect::default(), &BuildOptions::default().no_runtime_compilation());
    assert!(hit.is_none() || !hit.unwrap().0.selected().behavior_notes.contains(&BehaviorNote::RuntimeCompilation));
}

#[needs_cudnn]
#[test]
fn the_cache_keeps_its_budget_least_recently_used_first_and_never_evicts_a_held_plan() {
    let Some(cudnn) = h200() else { return };
    let options = BuildOptions::default();
    let expect = Expect::default();
    // One entry's weight: its payload plus the plan loaded from it (twice the payload).
    let probe = PlanCache::in_memory();
    drop(probe.get_or_build(&cudnn, &add_relu(8), &expect, &options).unwrap());
    let weight = probe.stats().bytes;
    assert!(weight > 1024, "{weight} bytes");
    assert_eq!(probe.stats().entries, 1);

    // Room for three entries of about that weight (the rows change a few digits of the JSON).
    let cache = PlanCache::in_memory().with_budget(weight * 7 / 2);
    let key = |rows| PlanKey::new(&cudnn, &add_relu(rows), &expect);
    let get = |rows| cache.get_or_build(&cudnn, &add_relu(rows), &expect, &options).unwrap();
    for rows in [8, 16, 24] {
        assert_eq!(get(rows).source, CacheSource::Built);
    }
    assert_eq!(cache.stats().evictions, 0);
    // A use of 8 makes 16 the least recently used: the fourth entry evicts it.
    assert_eq!(get(8).source, CacheSource::Memory);
    assert_eq!(get(32).source, CacheSource::Built);
    assert!(!cache.contains(&key(16)));
    assert!([8, 24, 32].iter().all(|&r| cache.contains(&key(r))));
    let stats = cache.stats();
    assert_eq!((stats.evictions, stats.builds, stats.misses, stats.memory_hits), (1, 4, 4, 1));
    assert!(stats.bytes <= stats.budget, "{stats:?}");
    assert_eq!(stats.pinned_bytes, 0, "nobody holds a plan");

    // A plan held outside the cache (as a CUDA graph of it requires: `PlanGraph` borrows the
    // caller's `Arc`) pins its entry, though it is the least recently used.
    let held = get(24).plan;
    for rows in [40, 48, 56] {
        drop(get(rows));
    }
    assert!(cache.contains(&key(24)), "a held plan is never evicted");
    let stats = cache.stats();
    assert!(stats.pinned_bytes > 0 && stats.bytes - stats.pinned_bytes <= stats.budget, "{stats:?}");
    assert!(Arc::ptr_eq(&get(24).plan, &held), "the entry still shares the held plan");
    // Let go, it is evicted like any other once it is the oldest.
    drop(held);
    for rows in [64, 72, 80] {
        drop(get(rows));
    }
    assert!(!cache.contains(&key(24)));
    let stats = cache.stats();
    assert!(stats.bytes <= stats.budget && stats.pinned_bytes == 0, "{stats:?}");
    assert_eq!(stats.builds, 10);
    assert_eq!(stats.entries, cache.len());

    // An entry heavier than the whole budget is built and handed out, not kept.
    let tiny = PlanCache::in_memory().with_budget(weight / 2);
    let built = tiny.get_or_build(&cudnn, &add_relu(8), &expect, &options).unwrap();
    assert_eq!(built.source, CacheSource::Built);
    assert!(tiny.is_empty());
    assert_eq!((tiny.stats().evictions, tiny.stats().bytes), (1, 0));
}

#[needs_cudnn]
#[test]
fn cache_keys_separate_binding_sm_and_version() {
    let (Some(h200), Some(a100)) = (h200(), context("a100")) else { return };
    let cache = PlanCache::in_memory();
    let graph = add_relu(32);
    let options = BuildOptions::default();
    let get = |cudnn: &Cudnn, expect: &Expect| cache.get_or_build(cudnn, &graph, expect, &options).unwrap().source;
    assert_eq!(get(&h200, &binding("M = 32")), CacheSource::Built);
    assert_eq!(get(&h200, &binding("M = 32")), CacheSource::Memory);
    // Another runtime-dim binding: a miss.
    assert_eq!(get(&h200, &binding("M = 33")), CacheSource::Built);
    assert_eq!(get(&h200, &Expect::default()), CacheSource::Built);
    // Another SM: a miss (and the H200's plan is never offered to the A100).
    assert_eq!((h200.sm(), a100.sm()), (Some(90), Some(80)));
    assert_eq!(get(&a100, &binding("M = 32")), CacheSource::Built);
    assert_eq!(get(&a100, &binding("M = 32")), CacheSource::Memory);
    assert_eq!(cache.len(), 4);
    // Another graph (other dims): another fingerprint, a miss.
    let key = PlanKey::new(&h200, &graph, &binding("M = 32"));
    assert!(cache.contains(&key));
    assert_ne!(PlanKey::new(&h200, &add_relu(33), &binding("M = 32")), key);
    // Another cuDNN version: another key.
    let other = PlanKey { cudnn_version: key.cudnn_version + 100, ..key.clone() };
    assert!(!cache.contains(&other));
    assert_ne!(other.file_name(), key.file_name());
}

#[needs_cudnn]
#[test]
fn disk_cache_serves_a_new_process_and_ignores_bad_entries_with_a_warning() {
    let Some(cudnn) = h200() else { return };
    let dir = scratch_dir("disk");
    let graph = add_relu(16);
    let options = BuildOptions::default();
    let expect = Expect::default();
    let first = PlanCache::with_dir(&dir).unwrap();
    let built = first.get_or_build(&cudnn, &graph, &expect, &options).unwrap();
    assert_eq!(built.source, CacheSource::Built);
    let key = PlanKey::new(&cudnn, &graph, &expect);
    let path = first.path_of(&key).unwrap();
    let good = std::fs::read(&path).unwrap();
    assert!(parse_payload(&good).is_ok());
    let names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, [key.file_name()], "one entry, no temporaries");

    // A new cache (a new process) on the same directory: a disk hit, then memory.
    let second = PlanCache::with_dir(&dir).unwrap();
    assert_eq!(second.get_or_build(&cudnn, &graph, &expect, &options).unwrap().source, CacheSource::Disk);
    assert_eq!(second.get_or_build(&cudnn, &graph, &expect, &options).unwrap().source, CacheSource::Memory);

    // Bad entries: each is ignored with one warning naming the file, the plan is rebuilt, and the
    // entry is replaced by a good one.
    let text = String::from_utf8(good.clone()).unwrap();
    let other_graph = {
        let c = PlanCache::in_memory();
        let p = c.get_or_build(&cudnn, &add_relu(8), &expect, &options).unwrap().plan;
        write_payload(&p, &PlanOrigin::of(&cudnn), SerializeOptions::default(), &expect).unwrap()
    };
    let uids = parse_payload(&good).unwrap().plan.variant_pack_uids;
    let bad: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"\x00\x01 not json".to_vec()),
        ("truncated", good[..good.len() / 2].to_vec()),
        ("empty", Vec::new()),
        ("another cuDNN version", {
            let loaded = format!("\"cudnn_version\":{}", cudnn.version());
            assert!(text.contains(&loaded), "payload layout changed: {loaded}");
            text.replace(&loaded, &format!("\"cudnn_version\":{}", cudnn.version() - 100)).into_bytes()
        }),
        ("another graph's plan", other_graph),
        ("a tampered variant pack", {
            let from = format!("\"variant_pack_uids\":{}", serde_json::to_string(&uids).unwrap());
            let mut swapped = uids.clone();
            swapped.reverse();
            let to = format!("\"variant_pack_uids\":{}", serde_json::to_string(&swapped).unwrap());
            assert!(text.contains(&from), "payload layout changed: {from}");
            text.replace(&from, &to).into_bytes()
        }),
        ("a corrupted cuDNN plan", {
            // Resealed with a correct digest, so that the plan JSON's own check is what refuses it.
            let envelope: serde_json::Value = serde_json::from_slice(&good).unwrap();
            let mut body = envelope["body"].clone();
            let plan_json = body["plan"]["plan_json"].as_str().unwrap().to_string();
            body["plan"]["plan_json"] = plan_json[..plan_json.len() / 2].into();
            cudnn_runtime::payload::plan::seal(&body.to_string(), None)
        }),
    ];
    for (what, bytes) in bad {
        std::fs::write(&path, &bytes).unwrap();
        let fresh = PlanCache::with_dir(&dir).unwrap();
        let got = fresh.get_or_build(&cudnn, &graph, &expect, &options).unwrap();
        assert_eq!(got.source, CacheSource::Built, "{what}");
        assert_eq!(got.warnings.len(), 1, "{what}: {:?}", got.warnings);
        assert_eq!(got.warnings[0].path.as_deref(), Some(path.as_path()), "{what}");
        println!("{what}: {}", got.warnings[0]);
        assert_eq!(fresh.stats().ignored, 1);
        let again = PlanCache::with_dir(&dir).unwrap();
        let reread = again.get_or_build(&cudnn, &graph, &expect, &options).unwrap();
        assert_eq!((reread.source, reread.warnings.len()), (CacheSource::Disk, 0), "{what}: rewritten");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[needs_cudnn]
#[test]
fn concurrent_writers_and_readers_never_see_a_torn_entry() {
    let Some(cudnn) = h200() else { return };
    let dir = scratch_dir("concurrent");
    let graph = add_relu(24);
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let json = std::fs::read_to_string(format!("{FIXTURES}/h200-devprop.json")).unwrap();
    let key = PlanKey::new(&cudnn, &graph, &Expect::default());
    let path = dir.join(key.file_name());
    drop(plan);
    // Each thread is a "process": its own cache on the shared directory and its own context;
    // writers keep replacing the entry while readers parse it.
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (dir, json, graph, path) = (dir.clone(), json.clone(), graph.clone(), path.clone());
            std::thread::spawn(move || {
                let cudnn = Cudnn::deviceless(&json).unwrap();
                let cache = PlanCache::with_dir(&dir).unwrap();
                let plan = Arc::new(ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap());
                let mut reads = 0;
                for _ in 0..20 {
                    if t % 2 == 0 {
                        assert!(cache.insert(&cudnn, &plan, &Expect::default()).is_empty());
                    }
                    if let Ok(bytes) = std::fs::read(&path) {
                        parse_payload(&bytes).unwrap_or_else(|e| panic!("torn entry: {e}"));
                        reads += 1;
                    }
                }
                reads
            })
        })
        .collect();
    let reads: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    println!("{reads} whole reads");
    let names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, [key.file_name()], "no temporaries left");
    let cache = PlanCache::with_dir(&dir).unwrap();
    let got = cache.get_or_build(&cudnn, &graph, &Expect::default(), &BuildOptions::default()).unwrap();
    assert_eq!((got.source, got.warnings.len()), (CacheSource::Disk, 0));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[needs_cudnn]
#[test]
fn seeding_from_a_directory_of_payloads() {
    let Some(cudnn) = h200() else { return };
    let dir = scratch_dir("seed");
    let (g1, g2) = (add_relu(40), add_relu(48));
    let origin = PlanOrigin::of(&cudnn);
    let p1 = ExecutionPlan::build(&cudnn, &g1, &BuildOptions::default()).unwrap();
    let p2 = ExecutionPlan::build(&cudnn, &g2, &BuildOptions::default()).unwrap();
    let with_structure = write_payload(&p1, &origin, SerializeOptions { structure: true }, &Expect::default()).unwrap();
    let plan_only = write_payload(&p2, &origin, SerializeOptions { structure: false }, &binding("rows = 48")).unwrap();
    std::fs::write(dir.join("first.json"), with_structure).unwrap();
    std::fs::write(dir.join("any name at all"), plan_only).unwrap();
    std::fs::write(dir.join("README.txt"), "not a payload").unwrap();
    std::fs::write(dir.join(".half-written.tmp"), "{").unwrap();
    std::fs::create_dir(dir.join("nested")).unwrap();

    let cache = PlanCache::in_memory();
    let report = cache.seed_from_dir(&dir).unwrap();
    println!("{report:?}");
    assert_eq!(report.seeded, 2);
    assert_eq!(report.warnings.len(), 1);
    assert!(report.warnings[0].path.as_ref().unwrap().ends_with("README.txt"));
    let options = BuildOptions::default();
    let hit = cache.get_or_build(&cudnn, &g1, &Expect::default(), &options).unwrap();
    assert_eq!(hit.source, CacheSource::Memory);
    assert_eq!(hit.plan.selected().engine_id, p1.selected().engine_id);
    // The plan-only payload needs its graph, which the lookup brings; its binding is its key.
    assert_eq!(cache.get_or_build(&cudnn, &g2, &binding("rows = 48"), &options).unwrap().source, CacheSource::Memory);
    assert_eq!(cache.get_or_build(&cudnn, &g2, &Expect::default(), &options).unwrap().source, CacheSource::Built);
    assert!(cache.seed_from_dir(dir.join("missing")).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[needs_cudnn]
#[test]
fn one_cache_shared_by_threads_each_with_its_own_context() {
    let Some(cudnn) = h200() else { return };
    let cache = Arc::new(PlanCache::in_memory());
    let graph = add_relu(72);
    let built = cache.get_or_build(&cudnn, &graph, &Expect::default(), &BuildOptions::default()).unwrap();
    let json = std::fs::read_to_string(format!("{FIXTURES}/h200-devprop.json")).unwrap();
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let (cache, graph, json) = (cache.clone(), graph.clone(), json.clone());
            std::thread::spawn(move || {
                let cudnn = Cudnn::deviceless(&json).unwrap();
                let got = cache.get_or_build(&cudnn, &graph, &Expect::default(), &BuildOptions::default()).unwrap();
                (got.source, got.plan)
            })
        })
        .collect();
    for h in handles {
        let (source, plan) = h.join().unwrap();
        assert_eq!(source, CacheSource::Memory);
        // The same described device: every thread shares the one plan.
        assert!(Arc::ptr_eq(&plan, &built.plan));
    }
}

#[needs_cudnn]
#[test]
fn one_plan_is_used_by_several_threads_at_once() {
    fn assert_send<T: Send>() {}
    fn assert_sync<T: Sync>() {}
    assert_send::<ExecutionPlan>();
    assert_sync::<ExecutionPlan>();
    assert_send::<Arc<ExecutionPlan>>();
    assert_sync::<PlanCache>();
    let Some(cudnn) = h200() else { return };
    let graph = add_relu(56);
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let json = std::fs::read_to_string(format!("{FIXTURES}/h200-devprop.json")).unwrap();
    // Each thread, with its own context, reads the shared plan's cuDNN descriptor over and over
    // while the others do; every reading loads back into the same engine.
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let own = Cudnn::deviceless(&json).unwrap();
                for _ in 0..10 {
                    let copy = ExecutionPlan::from_json(&own, graph.clone(), &plan.json().unwrap()).unwrap();
                    assert_eq!(copy.selected().engine_id, plan.selected().engine_id);
                    assert_eq!(copy.layout(), plan.layout());
                }
            });
        }
    });
}

#[needs_cudnn]
#[test]
fn router_falls_back_from_cudnn_to_the_reference_engine() {
    let Some(cudnn) = h200() else { return };
    let router = Router::new();
    // cuDNN plans this one.
    let routed = router.plan(Some(&cudnn), &add_relu(8), &BuildOptions::default()).unwrap();
    assert!(routed.engine_id().is_cudnn(), "{:?}", routed.selected());
    assert!(routed.cudnn_plan().is_some());
    let last = routed.candidates().last().unwrap();
    assert_eq!((last.engine_id, &last.state), (Some(EngineId::REFERENCE.0), &CandidateState::Untried));
    assert!(matches!(routed.run_host(&[]), Err(Error::Backend(BackendError::WrongEngine { .. }))));

    // cuDNN's candidates for f64 pointwise math fail to compile: the reference engine runs it,
    // and the list keeps cuDNN's reasons.
    let mut g = GraphBuilder::new("f64_add");
    let x = g.input("x", DataType::F64, &[1, 2, 2]).unwrap();
    let y = g.op("add", &[x.into(), x.into()], &[]).unwrap()[0];
    g.output(y, "y", DataType::F64).unwrap();
    let graph = g.build().unwrap();
    let routed = router.plan(Some(&cudnn), &graph, &BuildOptions::default()).unwrap();
    assert_eq!(routed.engine_id(), EngineId::REFERENCE);
    let (reference, cudnn_part) = routed.candidates().split_last().unwrap();
    assert_eq!(reference.state, CandidateState::Built);
    assert!(!cudnn_part.is_empty());
    assert!(cudnn_part.iter().all(|c| matches!(c.state, CandidateState::Rejected(_))), "{:?}", cudnn_part);
    let out = routed.run_host(&[("x", [1.0f64, -2.0, 0.5, 8.0].as_slice().into())]).unwrap();
    assert_eq!(out[0].data, [2.0, -4.0, 1.0, 16.0]);

    // Pinned to the reference engine: cuDNN is not asked.
    let pinned = BuildOptions::default().engine_config(EngineId::REFERENCE.0, &[]);
    let routed = router.plan(Some(&cudnn), &add_relu(8), &pinned).unwrap();
    assert_eq!(routed.candidates().len(), 1);
    assert_eq!(routed.engine_id(), EngineId::REFERENCE);
}
