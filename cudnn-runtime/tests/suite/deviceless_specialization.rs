//! The plan cache's specialization policy (issue 19: eager, lazy, none) with real cuDNN 9.19 and
//! no GPU, for the H200 of `tests/fixtures/h200-devprop.json`: which plan each policy serves a
//! new shape, the lazy policy's background build completing on its worker thread (its own
//! deviceless cuDNN context), the swap rule (timings injected through
//! `PlanCache::time_plans_with`, since timing a plan needs a GPU), and that a swap never takes a
//! plan from whoever holds it (a CUDA graph holds the plan it captured).
//!
//! Without libcudnn each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_CUDNN=1`.
#![cfg(feature = "cudnn")]

use std::sync::Arc;

use cudnn_runtime::backend::{BackendError, BuildOptions, Cudnn, ExecutionPlan};
use cudnn_runtime::engines::{
    CacheSource, PlanCache, PlanKey, ServeReason, Serving, Specialization, DEFAULT_BUDGET_BYTES,
};
use cudnn_runtime::ops::PointwiseMode;
use cudnn_runtime::payload::plan::Expect;
use cudnn_runtime::{DataType, Graph, GraphBuilder};

use crate::common;

/// `y = relu(a · b + bias)` in bf16, `[1, m, 64] x [1, 64, 128]`.
fn matmul_bias_relu(m: i64) -> Graph {
    let mut g = GraphBuilder::new("mbr");
    let a = g.input("a", DataType::BF16, &[1, m, 64]).unwrap();
    let b = g.input("b", DataType::BF16, &[1, 64, 128]).unwrap();
    let bias = g.input("bias", DataType::BF16, &[1, 1, 128]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let d = g.pointwise(PointwiseMode::Add, &[c.into(), bias.into()]).unwrap();
    let y = g.pointwise(PointwiseMode::Relu, &[d.into()]).unwrap();
    g.output(y, "y", DataType::BF16).unwrap();
    g.build().unwrap()
}

/// `out = relu(x + y)` in f16: pointwise ops alone, which cuDNN 9.19 plans only statically.
fn add_relu(rows: i64) -> Graph {
    let mut g = GraphBuilder::new("add_relu");
    let x = g.input("x", DataType::F16, &[rows, 256]).unwrap();
    let y = g.input("y", DataType::F16, &[rows, 256]).unwrap();
    let s = g.pointwise(PointwiseMode::Add, &[x.into(), y.into()]).unwrap();
    let r = g.pointwise(PointwiseMode::Relu, &[s.into()]).unwrap();
    g.output(r, "out", DataType::F16).unwrap();
    g.build().unwrap()
}

/// A timer giving the dynamic-shape plan `dynamic_us` and the specialized one `specialized_us`
/// (what `engines::measure` would report on a GPU).
fn timer(dynamic_us: f64, specialized_us: f64) -> impl Fn(&Cudnn, &ExecutionPlan) -> Result<f64, BackendError> {
    move |_, plan| Ok(if plan.is_dynamic_shape() { dynamic_us } else { specialized_us })
}

fn key(cudnn: &Cudnn, graph: &Graph) -> PlanKey {
    PlanKey::new(cudnn, graph, &Expect::default())
}

fn serving(cache: &PlanCache, cudnn: &Cudnn, graph: &Graph) -> Serving {
    cache.serving(&key(cudnn, graph)).expect("an entry")
}

#[needs_cudnn]
#[test]
fn eager_builds_every_new_shape_its_own_plan() {
    let Some(cudnn) = common::deviceless() else { return };
    let (expect, options) = (Expect::default(), BuildOptions::default());
    // Set after dynamic shapes or without them: every shape gets its specialized plan, the
    // kernel caches stay unused, nothing is queued.
    let caches = [
        PlanCache::in_memory(),
        PlanCache::in_memory().dynamic_shapes(DEFAULT_BUDGET_BYTES).specialization(Specialization::Eager),
    ];
    for cache in caches {
        assert_eq!(cache.policy(), Specialization::Eager);
        for m in [64, 128] {
            let got = cache.get_or_build(&cudnn, &matmul_bias_relu(m), &expect, &options).unwrap();
            assert_eq!((got.source, &got.reason), (CacheSource::Built, &ServeReason::Specialized), "m = {m}");
            assert!(!got.plan.is_dynamic_shape(), "m = {m}");
            let again = cache.get_or_build(&cudnn, &matmul_bias_relu(m), &expect, &options).unwrap();
            assert_eq!((again.source, again.reason), (CacheSource::Memory, ServeReason::Specialized));
        }
        let stats = cache.stats();
        assert_eq!((stats.kernel_caches, stats.specializations_queued), (0, 0), "{stats:?}");
        assert_eq!(stats.specialization, Specialization::Eager);
    }
}

#[needs_cudnn]
#[test]
fn none_serves_the_dynamic_shape_plan_and_never_specializes() {
    let Some(cudnn) = common::deviceless() else { return };
    let (expect, options) = (Expect::default(), BuildOptions::default());
    let cache = PlanCache::in_memory().dynamic_shapes(DEFAULT_BUDGET_BYTES);
    assert_eq!(cache.policy(), Specialization::None);
    for m in [64, 192] {
        let got = cache.get_or_build(&cudnn, &matmul_bias_relu(m), &expect, &options).unwrap();
        assert_eq!(got.reason, ServeReason::DynamicByPolicy, "m = {m}");
        assert!(got.plan.is_dynamic_shape(), "m = {m}");
    }
    // A structure cuDNN plans only statically gets its ordinary plan, and says why.
    let got = cache.get_or_build(&cudnn, &add_relu(64), &expect, &options).unwrap();
    assert_eq!((got.reason, got.plan.is_dynamic_shape()), (ServeReason::StaticOnly, false));
    // Options that choose for themselves are honoured, and say so.
    let all = cache.get_or_build(&cudnn, &matmul_bias_relu(256), &expect, &options.clone().all_plans()).unwrap();
    assert_eq!(all.reason, ServeReason::OptionsChoose);
    assert_eq!(cache.wait_for_specializations(), 0);
    let stats = cache.stats();
    assert_eq!((stats.specializations_queued, stats.specializations_pending), (0, 0), "{stats:?}");
    assert_eq!(
        serving(&cache, &cudnn, &matmul_bias_relu(64)),
        Serving { dynamic_shape: Some(true), reason: ServeReason::DynamicByPolicy }
    );
}

#[needs_cudnn]
#[test]
fn lazy_serves_the_dynamic_plan_at_once_and_swaps_in_a_faster_specialized_one() {
    let Some(cudnn) = common::deviceless() else { return };
    let (expect, options) = (Expect::default(), BuildOptions::default());
    let dir = std::env::temp_dir().join(format!("cudnn-graph-lazy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache =
        PlanCache::with_dir(&dir).unwrap().specialization(Specialization::Lazy).time_plans_with(timer(10.0, 5.0));
    assert_eq!(cache.policy(), Specialization::Lazy);
    let graph = matmul_bias_relu(64);
    let first = cache.get_or_build(&cudnn, &graph, &expect, &options).unwrap();
    assert_eq!((first.source, &first.reason), (CacheSource::Built, &ServeReason::LazyPending));
    assert!(first.plan.is_dynamic_shape(), "served the dynamic-shape plan at once");
    assert_eq!(cache.stats().specializations_queued, 1);
    // The caller keeps the dynamic-shape plan, as a CUDA graph that captured it would.
    let held = first.plan.clone();
    let watch = Arc::downgrade(&held);
    drop(first);

    assert_eq!(cache.wait_for_specializations(), 1, "the background build completed");
    let stats = cache.stats();
    assert_eq!((stats.specializations_swapped, stats.specializations_pending), (1, 0), "{stats:?}");
    assert_eq!(
        serving(&cache, &cudnn, &graph),
        Serving {
            dynamic_shape: Some(false),
            reason: ServeReason::LazyFaster { dynamic_us: 10.0, specialized_us: 5.0 }
        }
    );
    let after = cache.get_or_build(&cudnn, &graph, &expect, &options).unwrap();
    assert_eq!(after.source, CacheSource::Memory);
    assert!(!after.plan.is_dynamic_shape(), "the specialized plan serves later calls");
    assert!(!Arc::ptr_eq(&after.plan, &held));
    // It was made by the worker's own context and serves the caller's (the same described device).
    assert_eq!(after.plan.graph(), &graph);
    // The swap took nothing from the holder: its plan is whole, and the cache let it go.
    assert!(held.is_dynamic_shape() && held.json().unwrap().contains("\"isDynamicShapeEnabled\":true"));
    drop(held);
    assert!(watch.upgrade().is_none(), "only the holder kept the dynamic-shape plan");

    // The directory holds the specialized plan too: a new process loads it.
    let next = PlanCache::with_dir(&dir).unwrap().specialization(Specialization::Lazy);
    let loaded = next.get_or_build(&cudnn, &graph, &expect, &options).unwrap();
    assert_eq!((loaded.source, &loaded.reason), (CacheSource::Disk, &ServeReason::Loaded));
    assert!(!loaded.plan.is_dynamic_shape());
    assert_eq!(next.stats().specializations_queued, 0, "a loaded plan is served as loaded");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[needs_cudnn]
#[test]
fn lazy_keeps_the_dynamic_plan_unless_the_specialized_one_is_faster_by_the_margin() {
    let Some(cudnn) = common::deviceless() else { return };
    let (expect, options) = (Expect::default(), BuildOptions::default());
    // Slower, and faster by less than the margin (noise): both keep the dynamic-shape plan.
    for (dynamic_us, specialized_us) in [(5.0, 10.0), (10.0, 9.9)] {
        let cache = PlanCache::in_memory()
            .specialization(Specialization::Lazy)
            .time_plans_with(timer(dynamic_us, specialized_us));
        let graph = matmul_bias_relu(128);
        let first = cache.get_or_build(&cudnn, &graph, &expect, &options).unwrap().plan;
        assert_eq!(cache.wait_for_specializations(), 1);
        let again = cache.get_or_build(&cudnn, &graph, &expect, &options).unwrap();
        assert!(Arc::ptr_eq(&again.plan, &first), "{dynamic_us} vs {specialized_us}: the same plan");
        assert_eq!(again.reason, ServeReason::LazyNotFaster { dynamic_us, specialized_us });
        let stats = cache.stats();
        assert_eq!((stats.specializations_kept_dynamic, stats.specializations_swapped), (1, 0), "{stats:?}");
    }
}

#[needs_cudnn]
#[test]
fn lazy_without_a_gpu_cannot_time_and_keeps_the_dynamic_plan_saying_why() {
    let Some(cudnn) = common::deviceless() else { return };
    let (expect, options) = (Expect::default(), BuildOptions::default());
    // The default timer is autotuning's `measure`, which needs a GPU.
    let cache = PlanCache::in_memory().specialization(Specialization::Lazy);
    let graph = matmul_bias_relu(64);
    let first = cache.get_or_build(&cudnn, &graph, &expect, &options).unwrap().plan;
    assert_eq!(cache.wait_for_specializations(), 1);
    let s = serving(&cache, &cudnn, &graph);
    assert_eq!(s.dynamic_shape, Some(true));
    match &s.reason {
        ServeReason::LazyFailed { reason } => {
            assert!(reason.starts_with("the dynamic-shape plan cannot be timed: "), "{reason}");
            assert!(reason.contains("deviceless"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let again = cache.get_or_build(&cudnn, &graph, &expect, &options).unwrap();
    assert!(Arc::ptr_eq(&again.plan, &first));
    assert_eq!(cache.stats().specializations_failed, 1);
}

#[needs_cudnn]
#[test]
fn lazy_specializes_nothing_cudnn_plans_only_statically_and_drops_stale_results() {
    let Some(cudnn) = common::deviceless() else { return };
    let (expect, options) = (Expect::default(), BuildOptions::default());
    let cache = PlanCache::in_memory().specialization(Specialization::Lazy).time_plans_with(timer(10.0, 5.0));
    let got = cache.get_or_build(&cudnn, &add_relu(64), &expect, &options).unwrap();
    assert_eq!((got.reason, got.plan.is_dynamic_shape()), (ServeReason::StaticOnly, false));
    assert_eq!(cache.stats().specializations_queued, 0);
    // The entry a specialization was for is gone before it finishes: its result is dropped, not
    // swapped into a cache that no longer holds the plan it was timed against.
    let graph = matmul_bias_relu(64);
    drop(cache.get_or_build(&cudnn, &graph, &expect, &options).unwrap());
    cache.clear();
    assert_eq!(cache.wait_for_specializations(), 1);
    let stats = cache.stats();
    assert_eq!((stats.specializations_stale, stats.specializations_swapped, stats.entries), (1, 0, 0), "{stats:?}");
    assert!(cache.serving(&key(&cudnn, &graph)).is_none());
}
