//! On the GPU: autotuning, one plan executed from several threads on different streams at once,
//! the variant-pack cache under rotating buffers, CUDA-graph replay, and warm starts from the
//! plan cache; every result compared with the CPU reference engine.
//!
//! Without a GPU each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_GPU=1` (set by the
//! GPU bundle's `run-tests`), which makes that a failure. Figures are printed for the log.

#![cfg(feature = "cudnn")]

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{random, relative_error};
use cudnn_graph::backend::cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use cudnn_graph::backend::{BackendError, BuildOptions, Cudnn, DeviceBuffer, ExecutionPlan, GraphMode, HeuristicMode};
use cudnn_graph::engines::{autotune, AutotuneOptions, CacheSource, PlanCache};
use cudnn_graph::ops::PointwiseMode;
use cudnn_graph::payload::plan::Expect;
use cudnn_graph::reference::{self, HostSlice};
use cudnn_graph::{DataType, Graph, GraphBuilder};
use half::bf16;

const TOLERANCE: f64 = 2e-2;

/// Counts this thread's Rust heap allocations, to check that executes make none.
struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a const-initialized thread-local
// `Cell`, which never allocates.
unsafe impl std::alloc::GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's layout, passed on.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: allocated by `alloc` above with this layout.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn allocations() -> usize {
    ALLOCATIONS.with(std::cell::Cell::get)
}

/// GPU 0's context, or `None` (after saying why) when there is no GPU and that is allowed.
fn gpu() -> Option<Arc<CudaContext>> {
    let skip = |why: String| {
        assert!(std::env::var("CUDNN_GRAPH_REQUIRE_GPU").as_deref() != Ok("1"), "CUDNN_GRAPH_REQUIRE_GPU=1 but {why}");
        println!("skipped: {why}");
        None
    };
    if !cudnn_graph::backend::libraries_present() {
        return skip("libcuda or libcudnn cannot be loaded".into());
    }
    match cudnn_graph::backend::cuda_context(0) {
        Ok(ctx) => Some(ctx),
        Err(e) => skip(format!("no CUDA device: {e}")),
    }
}

/// `y = relu(a · b + bias)`, bf16, [1, m, k] x [1, k, n].
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

/// Host inputs (a fixed seed per set), their device copies, the reference output.
struct Case {
    inputs: Vec<Vec<bf16>>,
    want: Vec<bf16>,
}

impl Case {
    fn new(graph: &Graph, seed: u64) -> Self {
        let inputs: Vec<Vec<bf16>> = graph
            .inputs()
            .iter()
            .enumerate()
            .map(|(i, id)| random::<bf16>(seed * 10 + i as u64, graph.tensor(*id).storage_len()))
            .collect();
        let names: Vec<String> = graph.inputs().iter().map(|id| graph.tensor(*id).name.clone()).collect();
        let named: Vec<(&str, HostSlice<'_>)> =
            names.iter().zip(&inputs).map(|(n, v)| (n.as_str(), HostSlice::from(v))).collect();
        let out = reference::run(graph, &named).unwrap();
        let want = reference::scatter(graph.tensor(graph.outputs()[0]), &out[0]);
        Case { inputs, want }
    }
}

/// Device buffers for a [`Case`]: inputs, a NaN-poisoned output, a workspace.
struct Buffers {
    inputs: Vec<CudaSlice<bf16>>,
    output: CudaSlice<bf16>,
    workspace: CudaSlice<u8>,
}

impl Buffers {
    fn new(stream: &Arc<CudaStream>, case: &Case, workspace: usize) -> Self {
        Buffers {
            inputs: case.inputs.iter().map(|v| stream.clone_htod(v).unwrap()).collect(),
            output: stream.clone_htod(&vec![bf16::NAN; case.want.len()]).unwrap(),
            workspace: stream.alloc_zeros::<u8>(workspace.max(1)).unwrap(),
        }
    }

    fn execute(&mut self, plan: &ExecutionPlan, cudnn: &Cudnn) {
        let mut io: Vec<DeviceBuffer<'_>> = self.inputs.iter().map(DeviceBuffer::input).collect();
        io.push(DeviceBuffer::output(&mut self.output));
        plan.execute(cudnn, &mut io, Some(&mut self.workspace)).unwrap();
    }

    fn raw(&self, stream: &Arc<CudaStream>) -> (Vec<u64>, u64) {
        let mut io: Vec<u64> = self.inputs.iter().map(|b| b.device_ptr(stream).0).collect();
        io.push(self.output.device_ptr(stream).0);
        (io, self.workspace.device_ptr(stream).0)
    }

    fn check(&self, stream: &Arc<CudaStream>, case: &Case, what: &str) -> f64 {
        let got = stream.clone_dtoh(&self.output).unwrap();
        let err = relative_error(&got, &case.want);
        assert!(err <= TOLERANCE, "{what}: relative error {err}");
        err
    }
}

#[needs_gpu]
#[test]
fn gpu_autotune_times_every_built_candidate_and_selects_the_fastest() {
    let Some(ctx) = gpu() else { return };
    let stream = ctx.default_stream();
    let cudnn = Cudnn::new(stream.clone()).unwrap();
    let graph = matmul_bias_relu(512, 512, 512);
    let options =
        BuildOptions::default().modes(&[HeuristicMode::A, HeuristicMode::B, HeuristicMode::Fallback]).all_plans();
    let mut plan = ExecutionPlan::build(&cudnn, &graph, &options).unwrap();
    println!("built {:?} of {} candidates in {:?}", plan.built(), plan.candidates().len(), plan.timings());
    let progress = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = progress.clone();
    let tune = AutotuneOptions::default().on_progress(move |p| {
        seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        println!("  {}/{} #{}: {:?}", p.done, p.total, p.candidate, p.timing.map(|t| t.median_us));
    });
    let report = autotune(&cudnn, &mut plan, &tune).unwrap();
    print!("{report}");
    assert_eq!(progress.load(std::sync::atomic::Ordering::Relaxed), plan.built().len());
    assert_eq!(report.timings.len() + report.failures.len(), plan.built().len());
    assert_eq!(plan.selected().index, report.selected);
    let fastest = report.timings.iter().map(|t| t.median_us).fold(f64::INFINITY, f64::min);
    let (kept, own) = (report.timing(report.selected).unwrap().median_us, report.timing(report.previous));
    common::assert_tuned("matmul_bias_relu", kept, own.map(|t| t.median_us), fastest, tune.min_gain);
    for t in &report.timings {
        assert!(t.median_us > 0.0 && t.min_us <= t.median_us && t.runs >= t.samples, "{t}");
    }
    assert!(report.speedup().unwrap() >= 1.0);
    // The tuned plan computes the right thing.
    let case = Case::new(&graph, 1);
    let mut buffers = Buffers::new(&stream, &case, plan.workspace_size());
    buffers.execute(&plan, &cudnn);
    let err = buffers.check(&stream, &case, "autotuned");
    println!("autotuned {}: relative error {err:.2e}", plan.selected().tag());

    // A deviceless plan cannot be tuned: a typed error.
    let json = std::fs::read_to_string(common::DEVPROP).unwrap();
    let offline = Cudnn::deviceless(&json).unwrap();
    let mut p = ExecutionPlan::build(&offline, &graph, &BuildOptions::default()).unwrap();
    assert!(matches!(autotune(&cudnn, &mut p, &AutotuneOptions::default()), Err(BackendError::DevicelessPlan { .. })));
}

/// One plan shared by threads (a plan is `Sync`): four threads borrow it, each with its own
/// stream and `Cudnn` on the same device, and execute it at the same time with inputs of their
/// own — first one buffer set each (four pointer sets: the plan's cached variant packs), then
/// rotating through three sets each (twelve: packs made and replaced under contention). Every
/// output of every thread must match the CPU reference.
#[needs_gpu]
#[test]
fn gpu_one_plan_many_threads() {
    const THREADS: u64 = 4;
    const SETS: usize = 3;
    const EXECUTES: usize = 100;
    let Some(ctx) = gpu() else { return };
    let graph = matmul_bias_relu(256, 192, 128);
    let plan = {
        // Built on the default stream by a context that is gone before the threads start: the
        // plan keeps its handle alive, and executes on whichever `Cudnn` it is given.
        let cudnn = Cudnn::new(ctx.default_stream()).unwrap();
        ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap()
    };
    println!("plan {}", plan.selected());
    let barrier = std::sync::Barrier::new(THREADS as usize);
    let (ctx, graph, plan, barrier) = (&ctx, &graph, &plan, &barrier);
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                scope.spawn(move || {
                    let stream = ctx.new_stream().unwrap();
                    let cudnn = Cudnn::new(stream.clone()).unwrap();
                    let cases: Vec<Case> = (0..SETS as u64).map(|i| Case::new(graph, 1000 + t * 10 + i)).collect();
                    let mut buffers: Vec<Buffers> =
                        cases.iter().map(|c| Buffers::new(&stream, c, plan.workspace_size())).collect();
                    stream.synchronize().unwrap();
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..EXECUTES {
                        buffers[0].execute(plan, &cudnn);
                    }
                    stream.synchronize().unwrap();
                    let cached = start.elapsed();
                    buffers[0].check(&stream, &cases[0], &format!("thread {t}, one set"));
                    for (b, c) in buffers.iter_mut().zip(&cases) {
                        b.output = stream.clone_htod(&vec![bf16::NAN; c.want.len()]).unwrap();
                    }
                    stream.synchronize().unwrap();
                    barrier.wait();
                    let start = Instant::now();
                    for i in 0..EXECUTES {
                        buffers[i % SETS].execute(plan, &cudnn);
                    }
                    stream.synchronize().unwrap();
                    let rotating = start.elapsed();
                    let worst = buffers
                        .iter()
                        .zip(&cases)
                        .enumerate()
                        .map(|(i, (b, c))| b.check(&stream, c, &format!("thread {t}, set {i}")))
                        .fold(0.0, f64::max);
                    (cached, rotating, worst)
                })
            })
            .collect();
        for (t, h) in threads.into_iter().enumerate() {
            let (cached, rotating, worst) = h.join().unwrap();
            println!(
                "thread {t}: {EXECUTES} executes with one set in {cached:?}, {EXECUTES} rotating {SETS} sets in \
                 {rotating:?}; worst relative error {worst:.2e}"
            );
        }
    });
}

/// Threads that each ask one shared cache for the graph get the same plan (the cache's memory
/// tier shares it with every caller on the CUDA context), and execute it at the same time.
#[needs_gpu]
#[test]
fn gpu_concurrent_execution_from_threads_on_different_streams() {
    let Some(ctx) = gpu() else { return };
    let graph = matmul_bias_relu(256, 192, 128);
    let cache = Arc::new(PlanCache::in_memory());
    let first = {
        let cudnn = Cudnn::new(ctx.default_stream()).unwrap();
        let first = cache.get_or_build(&cudnn, &graph, &Expect::default(), &BuildOptions::default()).unwrap();
        assert_eq!(first.source, CacheSource::Built);
        first.plan
    };
    let barrier = Arc::new(std::sync::Barrier::new(4));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (ctx, cache, graph, barrier, first) =
                (ctx.clone(), cache.clone(), graph.clone(), barrier.clone(), first.clone());
            std::thread::spawn(move || {
                let stream = ctx.new_stream().unwrap();
                let cudnn = Cudnn::new(stream.clone()).unwrap();
                let got = cache.get_or_build(&cudnn, &graph, &Expect::default(), &BuildOptions::default()).unwrap();
                assert_eq!(got.source, CacheSource::Memory);
                assert!(Arc::ptr_eq(&got.plan, &first), "thread {t}: another stream of the context shares the plan");
                let case = Case::new(&graph, 100 + t);
                let mut buffers = Buffers::new(&stream, &case, got.plan.workspace_size());
                barrier.wait();
                for _ in 0..200 {
                    buffers.execute(&got.plan, &cudnn);
                }
                stream.synchronize().unwrap();
                let err = buffers.check(&stream, &case, &format!("thread {t}"));
                (got.elapsed, err)
            })
        })
        .collect();
    for (t, h) in threads.into_iter().enumerate() {
        let (load, err) = h.join().unwrap();
        println!("thread {t}: plan from cache in {load:?}, relative error {err:.2e}");
    }
}

/// The variant-pack cache holds the packs of recent pointer sets: rotating more sets than it
/// holds, every execute still reads and writes the buffers it was given.
#[needs_gpu]
#[test]
fn gpu_rotating_buffers_through_the_variant_pack_cache() {
    let Some(ctx) = gpu() else { return };
    let stream = ctx.default_stream();
    let cudnn = Cudnn::new(stream.clone()).unwrap();
    let graph = matmul_bias_relu(128, 128, 64);
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let sets = cudnn_graph::backend::PACK_SLOTS + 2;
    let cases: Vec<Case> = (0..sets as u64).map(|s| Case::new(&graph, 200 + s)).collect();
    let mut buffers: Vec<Buffers> = cases.iter().map(|c| Buffers::new(&stream, c, plan.workspace_size())).collect();
    for round in 0..3 {
        // Forwards, backwards, forwards: more sets than packs kept, in changing order.
        let order: Vec<usize> = if round == 1 { (0..sets).rev().collect() } else { (0..sets).collect() };
        for &i in &order {
            let b = &mut buffers[i];
            b.output = stream.clone_htod(&vec![bf16::NAN; cases[i].want.len()]).unwrap();
            b.execute(&plan, &cudnn);
        }
        for (i, b) in buffers.iter().enumerate() {
            b.check(&stream, &cases[i], &format!("round {round} set {i}"));
        }
    }
    // Raw pointers, same sets again: hits.
    for (i, b) in buffers.iter().enumerate() {
        let (io, ws) = b.raw(&stream);
        // SAFETY: the buffers hold the graph's tensors, live until after the synchronize below.
        unsafe { plan.execute_raw(&cudnn, &io, ws) }.unwrap();
        stream.synchronize().unwrap();
        b.check(&stream, &cases[i], &format!("raw set {i}"));
    }
}

#[needs_gpu]
#[test]
fn gpu_cuda_graph_replays_an_execute() {
    let Some(ctx) = gpu() else { return };
    // Stream capture needs a stream other than the legacy default one.
    let stream = ctx.new_stream().unwrap();
    let cudnn = Cudnn::new(stream.clone()).unwrap();
    let graph = matmul_bias_relu(256, 256, 128);
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    println!("plan {}", plan.selected());
    for mode in [GraphMode::Auto, GraphMode::Native, GraphMode::Capture] {
        let case = Case::new(&graph, 300);
        let buffers = Buffers::new(&stream, &case, plan.workspace_size());
        stream.synchronize().unwrap();
        let (io, ws) = buffers.raw(&stream);
        // SAFETY: the buffers outlive the graph (dropped at the end of this iteration, after it).
        let recorded = unsafe { plan.cuda_graph(&cudnn, &io, ws, mode) };
        let g = match (mode, recorded) {
            (_, Ok(g)) => g,
            (GraphMode::Native, Err(e @ BackendError::WrongEngine { .. })) => {
                println!("native: {e}");
                continue;
            }
            (m, Err(e)) => panic!("{m:?}: {e}"),
        };
        println!("{mode:?}: {g:?}");
        for _ in 0..3 {
            g.launch().unwrap();
        }
        stream.synchronize().unwrap();
        buffers.check(&stream, &case, &format!("{mode:?}"));
        let start = Instant::now();
        for _ in 0..1000 {
            g.launch().unwrap();
        }
        let host = start.elapsed();
        stream.synchronize().unwrap();
        println!("{mode:?}: {:.2} µs host per graph launch", host.as_secs_f64() * 1e6 / 1000.0);
        drop(g);
    }
}

/// A graph populated by cuDNN, pointed at other buffers with `PlanGraph::update` (no new
/// recording): the replay computes the second set's result; so is a stream-captured one.
#[needs_gpu]
#[test]
fn gpu_cuda_graph_updates_its_pointers() {
    let Some(ctx) = gpu() else { return };
    let stream = ctx.new_stream().unwrap();
    let cudnn = Cudnn::new(stream.clone()).unwrap();
    let graph = matmul_bias_relu(256, 256, 128);
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let (first, second) = (Case::new(&graph, 310), Case::new(&graph, 311));
    let a = Buffers::new(&stream, &first, plan.workspace_size());
    let b = Buffers::new(&stream, &second, plan.workspace_size());
    stream.synchronize().unwrap();
    let ((io_a, ws_a), (io_b, ws_b)) = (a.raw(&stream), b.raw(&stream));
    // SAFETY: both sets of buffers outlive the graphs (dropped at the end of the test, after them).
    let mut g = match unsafe { plan.cuda_graph(&cudnn, &io_a, ws_a, GraphMode::Native) } {
        Ok(g) => g,
        Err(e @ BackendError::WrongEngine { .. }) => return println!("native graphs unsupported here: {e}"),
        Err(e) => panic!("{e}"),
    };
    g.launch().unwrap();
    stream.synchronize().unwrap();
    a.check(&stream, &first, "recorded");
    let start = Instant::now();
    // SAFETY: as above.
    unsafe { g.update(&cudnn, &io_b, ws_b) }.unwrap();
    let took = start.elapsed();
    g.launch().unwrap();
    stream.synchronize().unwrap();
    b.check(&stream, &second, "updated");
    println!("updated a native graph's pointers in {took:?}");
    drop(g);
    // A stream-captured graph is updated by capturing again (cuGraphExecUpdate in place).
    let c = Buffers::new(&stream, &first, plan.workspace_size());
    stream.synchronize().unwrap();
    let (io_c, ws_c) = c.raw(&stream);
    // SAFETY: as above.
    let mut captured = unsafe { plan.cuda_graph(&cudnn, &io_c, ws_c, GraphMode::Capture) }.unwrap();
    captured.launch().unwrap();
    stream.synchronize().unwrap();
    c.check(&stream, &first, "captured");
    let b2 = Buffers::new(&stream, &second, plan.workspace_size());
    stream.synchronize().unwrap();
    let (io_b2, ws_b2) = b2.raw(&stream);
    let start = Instant::now();
    // SAFETY: as above.
    unsafe { captured.update(&cudnn, &io_b2, ws_b2) }.unwrap();
    let took = start.elapsed();
    captured.launch().unwrap();
    stream.synchronize().unwrap();
    b2.check(&stream, &second, "captured, updated");
    println!("updated a captured graph's pointers in {took:?}");
}

#[needs_gpu]
#[test]
fn gpu_warm_start_from_the_plan_cache() {
    let Some(ctx) = gpu() else { return };
    let stream = ctx.default_stream();
    let cudnn = Cudnn::new(stream.clone()).unwrap();
    let graph = matmul_bias_relu(384, 256, 128);
    let dir = std::env::temp_dir().join(format!("cudnn-graph-gpu-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = PlanCache::with_dir(&dir).unwrap();
    let cold = cache.get_or_build(&cudnn, &graph, &Expect::default(), &BuildOptions::default()).unwrap();
    let mut memory = Vec::new();
    for _ in 0..5 {
        let warm = cache.get_or_build(&cudnn, &graph, &Expect::default(), &BuildOptions::default()).unwrap();
        assert_eq!(warm.source, CacheSource::Memory);
        assert!(Arc::ptr_eq(&warm.plan, &cold.plan), "a memory hit shares the plan");
        memory.push(warm.elapsed);
    }
    let disk = PlanCache::with_dir(&dir)
        .unwrap()
        .get_or_build(&cudnn, &graph, &Expect::default(), &BuildOptions::default())
        .unwrap();
    assert_eq!(disk.source, CacheSource::Disk);
    memory.sort();
    println!(
        "cold {:?} ({:?}); warm from memory median {:?}; from disk {:?}",
        cold.elapsed,
        cold.plan.timings(),
        memory[2],
        disk.elapsed
    );
    // Sharing costs a key, a graph comparison and an `Arc` clone: microseconds, not a load.
    assert!(memory[2] < Duration::from_millis(1), "warm start from memory took {:?}", memory[2]);
    let case = Case::new(&graph, 400);
    let mut buffers = Buffers::new(&stream, &case, disk.plan.workspace_size());
    buffers.execute(&disk.plan, &cudnn);
    buffers.check(&stream, &case, "plan from disk");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The hot path allocates nothing on the Rust heap: checked executes with device buffers and raw
/// executes, once the variant pack of these pointers is cached.
#[needs_gpu]
#[test]
fn gpu_execute_allocates_nothing_per_call() {
    let Some(ctx) = gpu() else { return };
    let stream = ctx.default_stream();
    let cudnn = Cudnn::new(stream.clone()).unwrap();
    let graph = matmul_bias_relu(64, 64, 64);
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let case = Case::new(&graph, 500);
    let mut buffers = Buffers::new(&stream, &case, plan.workspace_size());
    let (io, ws) = buffers.raw(&stream);
    let checked = |buffers: &mut Buffers| {
        let [a, b, bias] = &buffers.inputs[..] else { panic!("three inputs") };
        let mut bufs = [
            DeviceBuffer::input(a),
            DeviceBuffer::input(b),
            DeviceBuffer::input(bias),
            DeviceBuffer::output(&mut buffers.output),
        ];
        plan.execute(&cudnn, &mut bufs, Some(&mut buffers.workspace)).unwrap();
    };
    // First calls make (and cache) the variant packs.
    checked(&mut buffers);
    // SAFETY: the buffers hold the graph's tensors and outlive the work (synchronized below).
    unsafe { plan.execute_raw(&cudnn, &io, ws) }.unwrap();
    let before = allocations();
    for _ in 0..1000 {
        checked(&mut buffers);
    }
    let checked_allocs = allocations() - before;
    let before = allocations();
    for _ in 0..1000 {
        // SAFETY: as above.
        unsafe { plan.execute_raw(&cudnn, &io, ws) }.unwrap();
    }
    let raw_allocs = allocations() - before;
    stream.synchronize().unwrap();
    buffers.check(&stream, &case, "after 2002 executes");
    println!("allocations per 1000 executes: checked {checked_allocs}, raw {raw_allocs}");
    assert_eq!((checked_allocs, raw_allocs), (0, 0));
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
