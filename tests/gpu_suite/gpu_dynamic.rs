//! On the GPU: dynamic-shape plans (issue 19). Graph types with a `dyn` dim are built through a
//! plan cache with dynamic shapes ([`PlanCache::dynamic_shapes`]), one shape after another, so
//! every shape after the first is planned with the first's engine and finds its kernels in the
//! structure's kernel cache; each is executed on random non-zero inputs (outputs poisoned with
//! NaN) and compared with the CPU reference. Then a CUDA graph of a cached plan keeps its entry
//! pinned while a workload of other shapes evicts everything else.
//!
//! cuDNN 9.19 has no execute-time shape overrides (the variant pack's override attributes need
//! cudnn-frontend's `set_override_shape_enabled`, cuDNN 9.21), so each shape runs its own plan:
//! what these tests check is that a plan made from the kernel cache computes what the graph
//! says, at every shape. Figures (host time per new shape, plan build, engine) are printed.
//!
//! The specialization policies (eager, lazy, none) each serve plans that compute what the graph
//! says; the lazy policy's swap, timed for real (autotuning's `measure` on the worker's own
//! stream) and forced (timings injected), leaves a CUDA graph of the dynamic-shape plan it
//! replaced replaying correctly.
//!
//! Without a GPU each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_GPU=1` (set by the
//! GPU bundle's runner), which makes that a failure.

#![cfg(feature = "cudnn")]

use crate::common;

use std::time::Duration;

use common::{check, random, uniform};
use cudnn_graph::backend::{BuildOptions, GraphMode};
use cudnn_graph::engines::{CacheSource, PlanCache, DEFAULT_BUDGET_BYTES};
use cudnn_graph::graph;
use half::bf16;

graph! {
    /// `y = relu(a · b + bias)`, M rows.
    pub DynMbr<dyn M>(a: bf16[1, M, 256], b: bf16[1, 256, 128], bias: bf16[1, 1, 128]) -> (y: bf16[1, M, 128]) {
        y = relu(add(matmul(a, b), bias));
    }

    /// Layer norm (inference) of N rows of 1024.
    pub DynLn<dyn N>(x: bf16[N, 1024], scale: bf16[1, 1024], bias: bf16[1, 1024]) -> (y: bf16[N, 1024]) {
        y = layernorm(x, scale, bias, 1e-5);
    }

    /// Causal attention forward at sequence length S.
    pub DynSdpa<dyn S>(q: bf16[1, 4, S, 64], k: bf16[1, 4, S, 64], v: bf16[1, 4, S, 64]) -> (o: bf16[1, 4, S, 64]) {
        o = sdpa(q, k, v, causal = true);
    }
}

fn dynamic_cache() -> PlanCache {
    PlanCache::in_memory().dynamic_shapes(DEFAULT_BUDGET_BYTES)
}

/// Prints one shape's figures: host time, whether cuDNN planned it dynamic-shape (deviceless it
/// does, for these three), and whether the structure's engine planned it without heuristics.
fn report(what: &str, shape: usize, outcome: &cudnn_graph::CacheOutcome, plan: &cudnn_graph::backend::ExecutionPlan) {
    println!(
        "{what} {shape}: {:?} host, dynamic {}, heuristics skipped {}, engine {} ({:?})",
        outcome.elapsed,
        plan.is_dynamic_shape(),
        plan.timings().heuristics == Duration::ZERO,
        plan.selected().tag(),
        plan.timings(),
    );
    assert_eq!(outcome.source, CacheSource::Built, "{what} {shape}");
}

#[needs_gpu]
#[test]
fn gpu_dynamic_matmul_bias_relu_at_every_shape_matches_the_reference() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let cache = dynamic_cache();
    let b = random::<bf16>(2, 256 * 128);
    let bias = random::<bf16>(3, 128);
    let (b_d, bias_d) = (stream.clone_htod(&b).unwrap(), stream.clone_htod(&bias).unwrap());
    for (i, m) in [128usize, 64, 200, 1000, 4096, 8].into_iter().enumerate() {
        let g = DynMbr::new(m);
        let a = random::<bf16>(10 + i as u64, m * 256);
        let want = g.reference(DynMbrInputs { a: &a, b: &b, bias: &bias }).unwrap().y;
        let (plan, outcome) = g.build_cached(&cache, &cudnn, &BuildOptions::default()).unwrap();
        report("matmul+bias+relu M", m, &outcome, plan.plan());
        let a_d = stream.clone_htod(&a).unwrap();
        let mut y_d = stream.clone_htod(&vec![bf16::NAN; m * 128]).unwrap();
        let mut ws = common::workspace(&stream, plan.workspace_size());
        plan.execute(&cudnn, DynMbrArgs { a: &a_d, b: &b_d, bias: &bias_d, y: &mut y_d }, Some(&mut ws)).unwrap();
        check(&format!("matmul+bias+relu M = {m}"), "y", &stream.clone_dtoh(&y_d).unwrap(), &want);
    }
    println!("{:?}", cache.stats());
}

#[needs_gpu]
#[test]
fn gpu_dynamic_layernorm_at_every_shape_matches_the_reference() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let cache = dynamic_cache();
    let scale = uniform::<bf16>(2, 1024, 0.5, 1.5);
    let bias = random::<bf16>(3, 1024);
    let (scale_d, bias_d) = (stream.clone_htod(&scale).unwrap(), stream.clone_htod(&bias).unwrap());
    for (i, n) in [256usize, 512, 100, 4096, 3].into_iter().enumerate() {
        let g = DynLn::new(n);
        let x = random::<bf16>(10 + i as u64, n * 1024);
        let want = g.reference(DynLnInputs { x: &x, scale: &scale, bias: &bias }).unwrap().y;
        let (plan, outcome) = g.build_cached(&cache, &cudnn, &BuildOptions::default()).unwrap();
        report("layernorm N", n, &outcome, plan.plan());
        let x_d = stream.clone_htod(&x).unwrap();
        let mut y_d = stream.clone_htod(&vec![bf16::NAN; n * 1024]).unwrap();
        let mut ws = common::workspace(&stream, plan.workspace_size());
        plan.execute(&cudnn, DynLnArgs { x: &x_d, scale: &scale_d, bias: &bias_d, y: &mut y_d }, Some(&mut ws))
            .unwrap();
        check(&format!("layernorm N = {n}"), "y", &stream.clone_dtoh(&y_d).unwrap(), &want);
    }
}

#[needs_gpu]
#[test]
fn gpu_dynamic_sdpa_forward_at_every_shape_matches_the_reference() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let cache = dynamic_cache();
    for (i, s) in [256usize, 128, 512, 384, 1024].into_iter().enumerate() {
        let g = DynSdpa::new(s);
        let n = 4 * s * 64;
        let [q, k, v] = [0, 1, 2].map(|j| random::<bf16>(100 * i as u64 + j, n));
        let want = g.reference(DynSdpaInputs { q: &q, k: &k, v: &v }).unwrap().o;
        let (plan, outcome) = g.build_cached(&cache, &cudnn, &BuildOptions::default()).unwrap();
        report("sdpa forward S", s, &outcome, plan.plan());
        let [q_d, k_d, v_d] = [&q, &k, &v].map(|h| stream.clone_htod(h).unwrap());
        let mut o_d = stream.clone_htod(&vec![bf16::NAN; n]).unwrap();
        let mut ws = common::workspace(&stream, plan.workspace_size());
        plan.execute(&cudnn, DynSdpaArgs { q: &q_d, k: &k_d, v: &v_d, o: &mut o_d }, Some(&mut ws)).unwrap();
        check(&format!("sdpa forward S = {s}"), "o", &stream.clone_dtoh(&o_d).unwrap(), &want);
    }
}

#[needs_gpu]
#[test]
fn gpu_a_plan_a_cuda_graph_replays_stays_cached_through_a_workload_of_other_shapes() {
    use cudnn_graph::backend::cudarc::driver::DevicePtr;
    let Some((default_stream, _)) = common::gpu() else { return };
    // A stream that can be captured (the legacy default stream cannot).
    let stream = default_stream.context().new_stream().unwrap();
    let cudnn_capture = cudnn_graph::backend::Cudnn::new(stream.clone()).unwrap();
    let options = BuildOptions::default();
    let g = DynMbr::new(256);
    // A budget of about three entries, set by the weight of one.
    let probe = dynamic_cache();
    drop(g.build_cached(&probe, &cudnn_capture, &options).unwrap());
    let budget = probe.stats().bytes * 3;
    let small = PlanCache::in_memory().with_budget(budget).dynamic_shapes(DEFAULT_BUDGET_BYTES);
    let (plan, _) = g.build_cached(&small, &cudnn_capture, &options).unwrap();
    let a = random::<bf16>(1, 256 * 256);
    let b = random::<bf16>(2, 256 * 128);
    let bias = random::<bf16>(3, 128);
    let want = g.reference(DynMbrInputs { a: &a, b: &b, bias: &bias }).unwrap().y;
    let [a_d, b_d, bias_d] = [&a, &b, &bias].map(|h| stream.clone_htod(h).unwrap());
    let y_d = stream.clone_htod(&vec![bf16::NAN; 256 * 128]).unwrap();
    let ws = common::workspace(&stream, plan.workspace_size());
    // The raw pointers in the graph's I/O order (inputs, then outputs), as `cuda_graph` takes them.
    let graph = plan.plan().graph();
    let io: Vec<u64> = graph
        .inputs()
        .into_iter()
        .chain(graph.outputs())
        .map(|id| match graph.tensor(id).name.as_str() {
            "a" => a_d.device_ptr(&stream).0,
            "b" => b_d.device_ptr(&stream).0,
            "bias" => bias_d.device_ptr(&stream).0,
            "y" => y_d.device_ptr(&stream).0,
            other => panic!("unexpected port {other}"),
        })
        .collect();
    // SAFETY: the buffers live until the end of the test, past every launch.
    let recorded =
        unsafe { plan.plan().cuda_graph(&cudnn_capture, &io, ws.device_ptr(&stream).0, GraphMode::Auto) }.unwrap();
    for m in (1..=40).map(|k| 64 * k) {
        drop(DynMbr::new(m).build_cached(&small, &cudnn_capture, &options).unwrap());
    }
    let stats = small.stats();
    println!("after 40 other shapes: {stats:?}");
    assert!(stats.evictions > 0 && stats.pinned_bytes > 0, "{stats:?}");
    assert!(stats.bytes - stats.pinned_bytes <= stats.budget, "{stats:?}");
    let (again, outcome) = g.build_cached(&small, &cudnn_capture, &options).unwrap();
    assert_eq!(outcome.source, CacheSource::Memory, "the replayed plan's entry was never evicted");
    assert!(std::ptr::eq(again.plan(), plan.plan()));
    recorded.launch().unwrap();
    stream.synchronize().unwrap();
    check("CUDA graph of the pinned plan", "y", &stream.clone_dtoh(&y_d).unwrap(), &want);
}

/// Runs `g`'s typed plan on fresh random inputs and checks it against the reference.
fn run_mbr(
    stream: &std::sync::Arc<cudnn_graph::backend::cudarc::driver::CudaStream>,
    cudnn: &cudnn_graph::backend::Cudnn,
    what: &str,
    plan: &DynMbrPlan,
    m: usize,
    seed: u64,
) {
    let (a, b, bias) =
        (random::<bf16>(seed, m * 256), random::<bf16>(seed + 1, 256 * 128), random::<bf16>(seed + 2, 128));
    let want = DynMbr::new(m).reference(DynMbrInputs { a: &a, b: &b, bias: &bias }).unwrap().y;
    let [a_d, b_d, bias_d] = [&a, &b, &bias].map(|h| stream.clone_htod(h).unwrap());
    let mut y_d = stream.clone_htod(&vec![bf16::NAN; m * 128]).unwrap();
    let mut ws = common::workspace(stream, plan.workspace_size());
    plan.execute(cudnn, DynMbrArgs { a: &a_d, b: &b_d, bias: &bias_d, y: &mut y_d }, Some(&mut ws)).unwrap();
    check(what, "y", &stream.clone_dtoh(&y_d).unwrap(), &want);
}

#[needs_gpu]
#[test]
fn gpu_every_specialization_policy_serves_plans_that_match_the_reference() {
    use cudnn_graph::engines::{ServeReason, Specialization};
    let Some((stream, cudnn)) = common::gpu() else { return };
    let options = BuildOptions::default();
    for policy in [Specialization::Eager, Specialization::None, Specialization::Lazy] {
        let cache = PlanCache::in_memory().specialization(policy);
        for (i, m) in [256usize, 100, 1000].into_iter().enumerate() {
            let (plan, outcome) = DynMbr::new(m).build_cached(&cache, &cudnn, &options).unwrap();
            let served = cache
                .serving(&cudnn_graph::engines::PlanKey::new(
                    &cudnn,
                    plan.plan().graph(),
                    &DynMbr::new(m).expectation(),
                ))
                .unwrap();
            println!(
                "{policy} M = {m}: {:?} host, dynamic {}, {}",
                outcome.elapsed,
                plan.plan().is_dynamic_shape(),
                served.reason
            );
            let expected_dynamic = policy != Specialization::Eager;
            assert_eq!(plan.plan().is_dynamic_shape(), expected_dynamic, "{policy} M = {m}");
            run_mbr(&stream, &cudnn, &format!("{policy} M = {m} (first call)"), &plan, m, 10 * i as u64);
        }
        if policy == Specialization::Lazy {
            // Timed for real on the worker's stream: swapped in or kept, with both medians.
            assert_eq!(cache.wait_for_specializations(), 3);
            for (i, m) in [256usize, 100, 1000].into_iter().enumerate() {
                let (plan, outcome) = DynMbr::new(m).build_cached(&cache, &cudnn, &options).unwrap();
                assert_eq!(outcome.source, CacheSource::Memory);
                let served = cache
                    .serving(&cudnn_graph::engines::PlanKey::new(
                        &cudnn,
                        plan.plan().graph(),
                        &DynMbr::new(m).expectation(),
                    ))
                    .unwrap();
                println!("lazy M = {m} settled: {}", served.reason);
                match served.reason {
                    ServeReason::LazyFaster { dynamic_us, specialized_us } => {
                        assert!(!plan.plan().is_dynamic_shape() && specialized_us < dynamic_us)
                    }
                    ServeReason::LazyNotFaster { dynamic_us, specialized_us } => {
                        assert!(plan.plan().is_dynamic_shape() && specialized_us > 0.0 && dynamic_us > 0.0)
                    }
                    other => panic!("lazy M = {m}: {other:?}"),
                }
                run_mbr(&stream, &cudnn, &format!("lazy M = {m} (settled)"), &plan, m, 100 + i as u64);
            }
            println!("{:?}", cache.stats());
        }
    }
}

#[needs_gpu]
#[test]
fn gpu_a_lazy_swap_leaves_a_cuda_graph_of_the_replaced_plan_replaying_correctly() {
    use cudnn_graph::backend::cudarc::driver::DevicePtr;
    use cudnn_graph::backend::ExecutionPlan;
    use cudnn_graph::engines::{ServeReason, Specialization};
    let Some((default_stream, _)) = common::gpu() else { return };
    let stream = default_stream.context().new_stream().unwrap();
    let cudnn = cudnn_graph::backend::Cudnn::new(stream.clone()).unwrap();
    // The swap forced: the specialized plan is reported twice as fast.
    let cache = PlanCache::in_memory()
        .specialization(Specialization::Lazy)
        .time_plans_with(|_, plan: &ExecutionPlan| Ok(if plan.is_dynamic_shape() { 10.0 } else { 5.0 }));
    let m = 512;
    let (plan, _) = DynMbr::new(m).build_cached(&cache, &cudnn, &BuildOptions::default()).unwrap();
    assert!(plan.plan().is_dynamic_shape());
    let (a, b, bias) = (random::<bf16>(1, m * 256), random::<bf16>(2, 256 * 128), random::<bf16>(3, 128));
    let want = DynMbr::new(m).reference(DynMbrInputs { a: &a, b: &b, bias: &bias }).unwrap().y;
    let [a_d, b_d, bias_d] = [&a, &b, &bias].map(|h| stream.clone_htod(h).unwrap());
    let y_d = stream.clone_htod(&vec![bf16::NAN; m * 128]).unwrap();
    let ws = common::workspace(&stream, plan.workspace_size());
    let graph = plan.plan().graph();
    let io: Vec<u64> = graph
        .inputs()
        .into_iter()
        .chain(graph.outputs())
        .map(|id| match graph.tensor(id).name.as_str() {
            "a" => a_d.device_ptr(&stream).0,
            "b" => b_d.device_ptr(&stream).0,
            "bias" => bias_d.device_ptr(&stream).0,
            "y" => y_d.device_ptr(&stream).0,
            other => panic!("unexpected port {other}"),
        })
        .collect();
    // SAFETY: the buffers live until the end of the test, past every launch.
    let recorded = unsafe { plan.plan().cuda_graph(&cudnn, &io, ws.device_ptr(&stream).0, GraphMode::Auto) }.unwrap();
    assert_eq!(cache.wait_for_specializations(), 1);
    let (now, _) = DynMbr::new(m).build_cached(&cache, &cudnn, &BuildOptions::default()).unwrap();
    assert!(!now.plan().is_dynamic_shape(), "the specialized plan serves now");
    let key = cudnn_graph::engines::PlanKey::new(&cudnn, graph, &DynMbr::new(m).expectation());
    assert_eq!(cache.serving(&key).unwrap().reason, ServeReason::LazyFaster { dynamic_us: 10.0, specialized_us: 5.0 });
    // The graph replays the plan it captured, which its holder kept through the swap.
    recorded.launch().unwrap();
    stream.synchronize().unwrap();
    check("CUDA graph of the replaced dynamic-shape plan", "y", &stream.clone_dtoh(&y_d).unwrap(), &want);
    run_mbr(&stream, &cudnn, "the specialized plan swapped in", &now, m, 40);
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
