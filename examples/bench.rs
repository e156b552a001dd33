//! Benchmarks on the GPU: build phases (cold, warm, cache hits, payload loads), host time per
//! execute against raw `cudnnBackendExecute`, and device time of the heuristics' pick and the
//! autotuned plan. See `docs/benchmarks.md`.
//!
//! ```text
//! cargo run --release --example bench -- [--json PATH] [--quick] [--only SECTIONS] [--sizes 2048,4096]
//!     SECTIONS: comma-separated of build, host, device, layernorm, partition (default: all)
//! ```
//!
//! Every figure is one JSON object per line on stdout (and in `--json PATH`), in the schema of
//! `shared/bench/anchor_cudnn_frontend.py` (`case`, `impl`, then figures such as `gpu_ms`,
//! `tflops`, `gbps`, `host_us`, `build_ms`), so `scripts/plot_bench.py` can put both side by side.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudnn_graph::backend::cudarc::cudnn::sys;
use cudnn_graph::backend::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use cudnn_graph::backend::{BuildOptions, Cudnn, DeviceBuffer, ExecutionPlan, GraphMode, HeuristicMode};
use cudnn_graph::engines::{autotune, measure, AutotuneOptions, CacheSource, PlanCache, Timing};
use cudnn_graph::graph;
use cudnn_graph::ops::{AttrValue, PointwiseMode};
use cudnn_graph::payload::plan::{
    load_payload, parse_payload, read_payload, write_payload, Expect, PlanOrigin, SerializeOptions,
};
use cudnn_graph::rng::SplitMix64;
use cudnn_graph::{Context, DataType, Graph, GraphBuilder, TensorId};
use half::bf16;
use serde_json::{json, Value};

graph! {
    /// The typed form of the tiny host-overhead graph.
    pub TypedMbr<dyn M, dyn N, dyn K>(a: bf16[1, M, K], b: bf16[1, K, N], bias: bf16[1, 1, N]) -> (y: bf16[1, M, N]) {
        y = relu(add(matmul(a, b), bias));
    }

    /// The transformer MLP of the `partition` section, one graph that plans as two kernels:
    /// y = gelu(x·W1 + b1)·W2 + b2 + x.
    #[intermediate(bf16)]
    pub PartMlp<dyn T, dyn E, dyn F>(
        x: bf16[1, T, E],
        w1: bf16[1, E, F],
        b1: bf16[1, 1, F],
        w2: bf16[1, F, E],
        b2: bf16[1, 1, E],
    ) -> (y: bf16[1, T, E]) {
        let h = gelu(add(matmul(x, w1), b1));
        y = add(add(matmul(h, w2), b2), x);
    }

    /// The MLP split by hand, first kernel: h = gelu(x·W1 + b1).
    #[intermediate(bf16)]
    pub MlpUp<dyn T, dyn E, dyn F>(x: bf16[1, T, E], w1: bf16[1, E, F], b1: bf16[1, 1, F]) -> (h: bf16[1, T, F]) {
        h = gelu(add(matmul(x, w1), b1));
    }

    /// The MLP split by hand, second kernel: y = h·W2 + b2 + x.
    #[intermediate(bf16)]
    pub MlpDown<dyn T, dyn E, dyn F>(h: bf16[1, T, F], w2: bf16[1, F, E], b2: bf16[1, 1, E], x: bf16[1, T, E])
        -> (y: bf16[1, T, E])
    {
        y = add(add(matmul(h, w2), b2), x);
    }

    /// The attention block split by hand: the RMS norm.
    #[intermediate(bf16)]
    pub SplitRmsNorm<dyn T, dyn E>(x: bf16[1, T, E], g: bf16[1, 1, E]) -> (h: bf16[1, T, E]) {
        h = rmsnorm(x, g, 1e-5);
    }

    /// The attention block split by hand: a projection (Q, K or V).
    #[intermediate(bf16)]
    pub SplitProjection<dyn T, dyn E, dyn N>(a: bf16[1, T, E], w: bf16[1, E, N]) -> (c: bf16[1, T, N]) {
        c = matmul(a, w);
    }

    /// The attention block split by hand: causal GQA attention reading the projections' outputs
    /// as they lie, [B, S, H, D] (BSHD), and writing O the same way.
    #[intermediate(bf16)]
    pub SplitAttention<dyn B, dyn HQ, dyn HKV, dyn S, dyn D>(
        q: bf16[B, HQ, S, D] order [0, 2, 1, 3],
        k: bf16[B, HKV, S, D] order [0, 2, 1, 3],
        v: bf16[B, HKV, S, D] order [0, 2, 1, 3],
    ) -> (o: bf16[B, HQ, S, D] order [0, 2, 1, 3]) {
        o = sdpa(q, k, v, causal = true);
    }

    /// The attention block split by hand: the output projection and the residual.
    #[intermediate(bf16)]
    pub SplitOutput<dyn T, dyn E>(a: bf16[1, T, E], w: bf16[1, E, E], x: bf16[1, T, E]) -> (y: bf16[1, T, E]) {
        y = add(matmul(a, w), x);
    }
}

#[path = "common/json_lines.rs"]
mod json_lines;
use json_lines::Out;
#[path = "common/timing.rs"]
mod timing;
use timing::{device_time, host_time, median};

type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

struct Args {
    json: Option<String>,
    quick: bool,
    only: Option<Vec<String>>,
    sizes: Vec<i64>,
}

fn args() -> Result<Args> {
    let mut a = Args { json: None, quick: false, only: None, sizes: vec![2048, 4096, 8192] };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--json" => a.json = Some(it.next().ok_or("--json needs a path")?),
            "--quick" => a.quick = true,
            "--only" => a.only = Some(it.next().ok_or("--only needs sections")?.split(',').map(String::from).collect()),
            "--sizes" => {
                a.sizes =
                    it.next().ok_or("--sizes needs a list")?.split(',').map(str::parse).collect::<Result<_, _>>()?
            }
            other => return Err(format!("unknown argument {other}; see the top of examples/bench.rs").into()),
        }
    }
    if a.quick && a.sizes == [2048, 4096, 8192] {
        a.sizes = vec![2048];
    }
    Ok(a)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `y = relu(a · b + bias)`, bf16, [1, m, k] x [1, k, n].
fn matmul_bias_relu(m: i64, n: i64, k: i64) -> Graph {
    TypedMbr::new(m as usize, n as usize, k as usize).graph().expect("a valid graph")
}

/// `out = relu(x + y)`, bf16, [1, 64, 64].
fn add_relu() -> Graph {
    let mut g = GraphBuilder::new("add_relu");
    let build = || -> Result<Graph, cudnn_graph::GraphError> {
        let x = g.input("x", DataType::BF16, &[1, 64, 64])?;
        let y = g.input("y", DataType::BF16, &[1, 64, 64])?;
        let s = g.pointwise(PointwiseMode::Add, &[x.into(), y.into()])?;
        let r = g.pointwise(PointwiseMode::Relu, &[s.into()])?;
        g.output(r, "out", DataType::BF16)?;
        g.build()
    };
    build().expect("a valid graph")
}

/// Layer norm, inference, bf16, cudnn-frontend's `[N, H, 1, 1]` layout.
fn layernorm(rows: i64, hidden: i64) -> Result<Graph, cudnn_graph::GraphError> {
    let mut g = GraphBuilder::new("layernorm");
    let x = g.input("x", DataType::BF16, &[rows, hidden, 1, 1])?;
    let scale = g.input("scale", DataType::BF16, &[1, hidden, 1, 1])?;
    let bias = g.input("bias", DataType::BF16, &[1, hidden, 1, 1])?;
    let y = g.op("layernorm", &[x.into(), scale.into(), bias.into(), 1e-5.into()], &[])?[0];
    g.output(y, "y", DataType::BF16)?;
    g.build()
}

fn phases(plan: &ExecutionPlan) -> Value {
    let t = plan.timings();
    json!({
        "validate_ms": ms(t.validate), "lower_ms": ms(t.lower), "heuristics_ms": ms(t.heuristics),
        "check_support_ms": ms(t.check_support), "plan_build_ms": ms(t.plan_build), "build_ms": ms(t.total()),
        "engine": plan.selected().tag(), "candidates": plan.candidates().len(),
    })
}

/// Build phases cold and warm, cache hits (memory, disk) and payload write/read.
fn bench_build(out: &mut Out, cudnn: &Cudnn, quick: bool) -> Result<()> {
    let reps = if quick { 3 } else { 5 };
    for (case, graph) in [
        ("build_matmul_bias_relu_bf16_64", matmul_bias_relu(64, 64, 64)),
        ("build_matmul_bias_relu_bf16_4096", matmul_bias_relu(4096, 4096, 4096)),
        ("build_add_relu_bf16_64", add_relu()),
    ] {
        let options = BuildOptions::default();
        let first = Instant::now();
        let plan = ExecutionPlan::build(cudnn, &graph, &options)?;
        let wall = ms(first.elapsed());
        out.record(case, "cudnn-graph-cold", merge(phases(&plan), json!({"wall_ms": wall})));
        let mut walls = Vec::new();
        let mut last = None;
        for _ in 0..reps {
            let t = Instant::now();
            let p = ExecutionPlan::build(cudnn, &graph, &options)?;
            walls.push(ms(t.elapsed()));
            last = Some(p);
        }
        if let Some(p) = &last {
            out.record(
                case,
                "cudnn-graph-warm",
                merge(phases(p), json!({"wall_ms_median": median(&mut walls), "n": reps})),
            );
        }

        // The plan cache: memory hits, disk hits (a fresh cache on a directory each time, as a
        // new process would be), and payload write / read. A memory hit shares the plan already
        // loaded (an `Arc` clone); `reload_ms_median` is what one cost before plans were shared:
        // loading the payload held in memory into a new plan.
        let cache = PlanCache::in_memory();
        let built = cache.get_or_build(cudnn, &graph, &Expect::default(), &options)?;
        let mut memory = Vec::new();
        for _ in 0..20 {
            let hit = cache.get_or_build(cudnn, &graph, &Expect::default(), &options)?;
            assert_eq!(hit.source, CacheSource::Memory);
            assert!(Arc::ptr_eq(&hit.plan, &built.plan));
            memory.push(ms(hit.elapsed));
        }
        let payload = parse_payload(&write_payload(
            &built.plan,
            &PlanOrigin::of(cudnn),
            SerializeOptions { structure: false },
            &Expect::default(),
        )?)?;
        let mut reload = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            drop(load_payload(cudnn, &payload, Some(graph.clone()), &Expect::default())?);
            reload.push(ms(t.elapsed()));
        }
        let memory_ms = median(&mut memory);
        out.record(
            case,
            "cudnn-graph-cache-memory",
            json!({"load_ms_median": memory_ms, "load_ms_min": memory[0], "n": memory.len(), "cold_ms": ms(built.elapsed),
                   "load_us_median": memory_ms * 1e3, "shared": true, "reload_ms_median": median(&mut reload),
                   "note": "memory hits share the loaded plan (Arc); reload_ms_median is the former cost, a payload load per hit"}),
        );
        let dir = std::env::temp_dir().join(format!("cudnn-graph-bench-{}-{case}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        PlanCache::with_dir(&dir)?.insert(cudnn, &built.plan, &Expect::default());
        let mut disk = Vec::new();
        for _ in 0..reps {
            let hit = PlanCache::with_dir(&dir)?.get_or_build(cudnn, &graph, &Expect::default(), &options)?;
            assert_eq!(hit.source, CacheSource::Disk);
            disk.push(ms(hit.elapsed));
        }
        let _ = std::fs::remove_dir_all(&dir);
        out.record(case, "cudnn-graph-cache-disk", json!({"load_ms_median": median(&mut disk), "n": disk.len()}));
        let origin = PlanOrigin::of(cudnn);
        let (mut ser, mut de) = (Vec::new(), Vec::new());
        let mut bytes = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            bytes = write_payload(&built.plan, &origin, SerializeOptions::default(), &Expect::default())?;
            ser.push(ms(t.elapsed()));
            let t = Instant::now();
            let (loaded, _) = read_payload(cudnn, &bytes, None, &Expect::default())?;
            de.push(ms(t.elapsed()));
            drop(loaded);
        }
        let plan_only = write_payload(&built.plan, &origin, SerializeOptions { structure: false }, &Expect::default())?;
        out.record(
            case,
            "cudnn-graph-payload",
            json!({"serialize_ms_median": median(&mut ser), "deserialize_ms_median_of_5": median(&mut de),
                   "deserialize_ms_first": de.first().copied(), "payload_bytes": bytes.len(), "plan_only_bytes": plan_only.len()}),
        );
    }
    Ok(())
}

fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// Device buffers for every I/O tensor of a graph (bf16 inputs of non-zero data) and a
/// workspace.
struct Buffers {
    io: Vec<CudaSlice<bf16>>,
    outputs_from: usize,
    workspace: CudaSlice<u8>,
}

impl Buffers {
    fn new(stream: &Arc<CudaStream>, plan: &ExecutionPlan) -> Result<Self> {
        let graph = plan.graph();
        let mut io = Vec::new();
        for id in graph.io() {
            let n = graph.tensor(id).storage_len();
            let data: Vec<bf16> =
                (0..n).map(|i| bf16::from_f64(((i * 7919 % 2003) as f64 + 1.0) / 2003.0 - 0.5)).collect();
            io.push(stream.clone_htod(&data)?);
        }
        Ok(Buffers {
            io,
            outputs_from: graph.inputs().len(),
            workspace: stream.alloc_zeros(plan.workspace_size().max(1))?,
        })
    }

    fn raw(&self, stream: &Arc<CudaStream>) -> (Vec<u64>, u64) {
        (self.io.iter().map(|b| b.device_ptr(stream).0).collect(), self.workspace.device_ptr(stream).0)
    }
}

/// A variant pack made by hand with raw cuDNN calls, as a C++ user with a prebuilt pack has it.
struct RawPack(sys::cudnnBackendDescriptor_t);

impl RawPack {
    fn new(plan: &ExecutionPlan, io: &[u64], workspace: u64) -> Result<Self> {
        let layout = plan.layout();
        let mut pointers = vec![std::ptr::null_mut::<c_void>(); layout.uids().len()];
        // The bench graph has no slices: every I/O tensor has its place in the pack.
        for (address, position) in io.iter().zip(layout.io_positions()) {
            pointers[position.ok_or("a graph input read only through a slice")?] = *address as *mut c_void;
        }
        for s in layout.scalars() {
            pointers[s.position] = s.bytes().as_ptr().cast_mut().cast();
        }
        let check = |what: &str, s: sys::cudnnStatus_t| -> Result<()> {
            if s == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
                Ok(())
            } else {
                Err(format!("{what}: {s:?}").into())
            }
        };
        use sys::cudnnBackendAttributeName_t as A;
        use sys::cudnnBackendAttributeType_t as T;
        let mut raw = std::ptr::null_mut();
        let ws = [workspace as *mut c_void];
        // SAFETY: plain backend-API calls on a descriptor created here, with arrays of the
        // element types the attributes take; the pointers are the benchmark's live buffers and
        // the plan's scalar storage.
        unsafe {
            check(
                "create",
                sys::cudnnBackendCreateDescriptor(
                    sys::cudnnBackendDescriptorType_t::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR,
                    &mut raw,
                ),
            )?;
            let pack = RawPack(raw);
            let uids = layout.uids();
            check(
                "uids",
                sys::cudnnBackendSetAttribute(
                    raw,
                    A::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                    T::CUDNN_TYPE_INT64,
                    uids.len() as i64,
                    uids.as_ptr().cast(),
                ),
            )?;
            check(
                "pointers",
                sys::cudnnBackendSetAttribute(
                    raw,
                    A::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                    T::CUDNN_TYPE_VOID_PTR,
                    pointers.len() as i64,
                    pointers.as_ptr().cast(),
                ),
            )?;
            check(
                "workspace",
                sys::cudnnBackendSetAttribute(
                    raw,
                    A::CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                    T::CUDNN_TYPE_VOID_PTR,
                    1,
                    ws.as_ptr().cast(),
                ),
            )?;
            check("finalize", sys::cudnnBackendFinalize(raw))?;
            Ok(pack)
        }
    }
}

impl Drop for RawPack {
    fn drop(&mut self) {
        // SAFETY: created above, destroyed once.
        let _ = unsafe { sys::cudnnBackendDestroyDescriptor(self.0) };
    }
}

/// Host time per execute, ours against raw `cudnnBackendExecute`, on tiny graphs.
fn bench_host(out: &mut Out, cudnn: &Cudnn, stream: &Arc<CudaStream>, quick: bool) -> Result<()> {
    let (rounds, batch, calls) = if quick { (10, 100, 1000) } else { (30, 200, 2000) };
    let handle = cudnn.raw_handle().ok_or("no handle")?;
    for (case, graph) in [("host_overhead_64", matmul_bias_relu(64, 64, 64)), ("host_overhead_add_relu_64", add_relu())]
    {
        let plan = ExecutionPlan::build(cudnn, &graph, &BuildOptions::default())?;
        let mut buffers = Buffers::new(stream, &plan)?;
        let (io, ws) = buffers.raw(stream);
        let pack = RawPack::new(&plan, &io, ws)?;
        let raw_plan = plan.raw_descriptor();
        let typed = TypedMbr::new(64, 64, 64);
        let typed_plan =
            if case == "host_overhead_64" { Some(typed.build(cudnn, &BuildOptions::default())?) } else { None };
        let mut results: Vec<(&str, (f64, f64, f64))> = Vec::new();
        let mut raw_prebuilt = || {
            // SAFETY: a live handle, plan and pack over live buffers.
            let s = unsafe { sys::cudnnBackendExecute(handle, raw_plan, pack.0) };
            debug_assert_eq!(s, sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS);
        };
        results.push(("raw-cudnn-prebuilt-pack", host_time(stream, rounds, batch, calls, &mut raw_prebuilt)));
        let mut raw_per_call = || {
            if let Ok(p) = RawPack::new(&plan, &io, ws) {
                // SAFETY: as above.
                let s = unsafe { sys::cudnnBackendExecute(handle, raw_plan, p.0) };
                debug_assert_eq!(s, sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS);
            }
        };
        results.push(("raw-cudnn-pack-per-call", host_time(stream, rounds, batch, calls, &mut raw_per_call)));
        let mut ours_raw = || {
            // SAFETY: the buffers hold the graph's tensors and outlive the work (synchronized).
            let r = unsafe { plan.execute_raw(cudnn, &io, ws) };
            debug_assert!(r.is_ok());
        };
        results.push(("cudnn-graph-execute-raw", host_time(stream, rounds, batch, calls, &mut ours_raw)));
        {
            let mut checked = || {
                let (inputs, outputs) = buffers.io.split_at_mut(buffers.outputs_from);
                let mut bufs: Vec<DeviceBuffer<'_>> = Vec::with_capacity(8);
                bufs.extend(inputs.iter().map(DeviceBuffer::input));
                bufs.extend(outputs.iter_mut().map(DeviceBuffer::output));
                let r = plan.execute(cudnn, &mut bufs, Some(&mut buffers.workspace));
                debug_assert!(r.is_ok());
            };
            results.push(("cudnn-graph-execute", host_time(stream, rounds, batch, calls, &mut checked)));
        }
        if let Some(typed_plan) = &typed_plan {
            let [a, b, bias, y] = &mut buffers.io[..] else { return Err("four buffers expected".into()) };
            let mut typed_call = || {
                let r = typed_plan.execute(cudnn, TypedMbrArgs { a, b, bias, y }, Some(&mut buffers.workspace));
                debug_assert!(r.is_ok());
            };
            results.push(("cudnn-graph-typed", host_time(stream, rounds, batch, calls, &mut typed_call)));
        }
        // A CUDA graph of one execute needs a capturable stream only for stream capture; cuDNN's
        // native population works on any.
        // SAFETY: the buffers outlive the graph (dropped before them, at the end of this scope).
        match unsafe { plan.cuda_graph(cudnn, &io, ws, GraphMode::Auto) } {
            Ok(g) => {
                let native = g.is_native();
                let mut launch = || {
                    let r = g.launch();
                    debug_assert!(r.is_ok());
                };
                results.push((
                    if native { "cudnn-graph-cuda-graph-native" } else { "cudnn-graph-cuda-graph-captured" },
                    host_time(stream, rounds, batch, calls, &mut launch),
                ));
            }
            Err(e) => out.record(case, "cudnn-graph-cuda-graph", json!({"error": e.to_string()})),
        }
        let raw = results[0].1 .0;
        for (name, (med, min, with_sync)) in results {
            out.record(
                case,
                name,
                json!({"host_us": med, "host_us_min": min, "host_us_with_sync": with_sync, "ratio_vs_raw_prebuilt": med / raw,
                       "engine": plan.selected().tag()}),
            );
        }
    }
    Ok(())
}

fn timing_figures(t: &Timing, flops: Option<f64>, bytes: Option<f64>) -> Value {
    let s = t.median_us * 1e-6;
    json!({
        "gpu_ms": t.median_us * 1e-3, "gpu_ms_min": t.min_us * 1e-3, "runs": t.runs, "engine": t.tag,
        "tflops": flops.map(|f| f / s / 1e12), "gbps": bytes.map(|b| b / s / 1e9),
    })
}

/// Device time of the heuristics' pick and of the autotuned plan.
fn bench_device(
    out: &mut Out,
    cudnn: &Cudnn,
    case: &str,
    graph: &Graph,
    flops: Option<f64>,
    bytes: Option<f64>,
) -> Result<()> {
    let tune = AutotuneOptions::default();
    let plan = ExecutionPlan::build(cudnn, graph, &BuildOptions::default())?;
    let pick = measure(cudnn, &plan, &tune)?;
    out.record(
        case,
        "cudnn-graph",
        merge(timing_figures(&pick, flops, bytes), json!({"build_ms": ms(plan.timings().total())})),
    );
    drop(plan);
    let all = BuildOptions::default().modes(&[HeuristicMode::A, HeuristicMode::B, HeuristicMode::Fallback]).all_plans();
    let started = Instant::now();
    let mut plan = ExecutionPlan::build(cudnn, graph, &all)?;
    let build_ms = ms(started.elapsed());
    let report = autotune(cudnn, &mut plan, &tune)?;
    eprint!("{case}: {report}");
    for t in &report.timings {
        out.record(
            case,
            "cudnn-graph-candidate",
            merge(timing_figures(t, flops, bytes), json!({"candidate": t.candidate})),
        );
    }
    if let Some(best) = report.timing(report.selected) {
        out.record(
            case,
            "cudnn-graph-autotuned",
            merge(
                timing_figures(best, flops, bytes),
                json!({"build_all_ms": build_ms, "tune_ms": ms(report.elapsed), "built": plan.built().len(),
                       "failed": report.failures.len(), "speedup_vs_first_built": report.speedup()}),
            ),
        );
    }
    Ok(())
}

/// The most a partitioned plan may take of the same graph split by hand into typed graphs
/// (device time, same method): above it `--only partition` exits non-zero. Both sides run the
/// same kernels; on 2026-12-04 they were within 0.994-1.003 on the H200, and a 2x regression of
/// the decode block went unnoticed for a week because nothing checked.
const MAX_RATIO_VS_HAND_SPLIT: f64 = 1.05;

/// The attention shapes of the `partition` section: B sequences of S tokens, `heads` query heads
/// of `d` over `kv_heads` key/value heads.
#[derive(Debug, Clone, Copy)]
struct AttentionShape {
    b: i64,
    s: i64,
    heads: i64,
    kv_heads: i64,
    d: i64,
}

impl AttentionShape {
    /// Tokens, model width, key/value width.
    fn widths(self) -> (i64, i64, i64) {
        (self.b * self.s, self.heads * self.d, self.kv_heads * self.d)
    }

    /// Projections (2·T·E·(2E + 2·E_kv)) and causal attention (half of 4·B·H·S²·D, the anchor's
    /// count).
    fn flops(self) -> f64 {
        let (t, e, ekv) = self.widths();
        let projections = 2.0 * (t * e) as f64 * (2 * e + 2 * ekv) as f64;
        let attention = 4.0 * (self.b * self.heads * self.s * self.s * self.d) as f64 * 0.5;
        projections + attention
    }

    /// Bytes of the block's inputs and output (bf16).
    fn io_bytes(self) -> f64 {
        let (t, e, ekv) = self.widths();
        2.0 * (2 * t * e + e + 2 * e * e + 2 * e * ekv) as f64
    }
}

/// The pre-norm attention block as one graph: rmsnorm → Q/K/V projections → causal GQA attention
/// → output projection + residual, bf16 with bf16 intermediates (`tests/common/blocks.rs`'s
/// `AttentionBlock` at any shape). Built at run time: `graph!`'s `reshape` takes literal shapes.
fn attention_block(shape: AttentionShape) -> Result<Graph, cudnn_graph::GraphError> {
    let AttentionShape { b, s, heads, kv_heads, d } = shape;
    let (t, e, ekv) = shape.widths();
    let mut g = GraphBuilder::new("attention_block");
    g.context(Context { intermediate_data_type: DataType::BF16, compute_data_type: DataType::F32 });
    let x = g.input("x", DataType::BF16, &[1, t, e])?;
    let gain = g.input("g", DataType::BF16, &[1, 1, e])?;
    let wq = g.input("wq", DataType::BF16, &[1, e, e])?;
    let wk = g.input("wk", DataType::BF16, &[1, e, ekv])?;
    let wv = g.input("wv", DataType::BF16, &[1, e, ekv])?;
    let wo = g.input("wo", DataType::BF16, &[1, e, e])?;
    let list = |name: &str, v: &[i64]| (name.to_string(), AttrValue::IntList(v.to_vec()));
    let h = g.op("rmsnorm", &[x.into(), gain.into(), 1e-5.into()], &[])?[0];
    // [1, T, H·D] → [B, S, H, D] → [B, H, S, D]: views of the projection's output.
    let heads_of = |g: &mut GraphBuilder, w: TensorId, n: i64| -> Result<TensorId, cudnn_graph::GraphError> {
        let p = g.matmul(h, w)?;
        let r = g.op("reshape", &[p.into()], &[list("shape", &[b, s, n, d])])?[0];
        Ok(g.op("transpose", &[r.into()], &[list("permutation", &[0, 2, 1, 3])])?[0])
    };
    let q = heads_of(&mut g, wq, heads)?;
    let k = heads_of(&mut g, wk, kv_heads)?;
    let v = heads_of(&mut g, wv, kv_heads)?;
    let o = g.op("sdpa", &[q.into(), k.into(), v.into()], &[("causal".to_string(), AttrValue::Bool(true))])?[0];
    let o = g.op("transpose", &[o.into()], &[list("permutation", &[0, 2, 1, 3])])?[0];
    let merged = g.op("reshape", &[o.into()], &[list("shape", &[1, t, e])])?[0];
    let p = g.matmul(merged, wo)?;
    let y = g.pointwise(PointwiseMode::Add, &[p.into(), x.into()])?;
    g.output(y, "y", DataType::BF16)?;
    g.build()
}

/// Named bf16 device buffers of a `partition` case.
#[derive(Default)]
struct Named(Vec<(String, CudaSlice<bf16>)>);

impl Named {
    /// `n` fixed-seed non-zero values of magnitude in [scale/4, scale) (a pattern of 4093 values,
    /// tiled, as the autotuner fills its scratch buffers).
    fn random(&mut self, stream: &Arc<CudaStream>, name: &str, n: i64, scale: f64, seed: u64) -> Result<()> {
        let mut rng = SplitMix64::new(seed);
        let pattern: Vec<bf16> = (0..4093).map(|_| bf16::from_f64(rng.nonzero(0.25 * scale, scale))).collect();
        let data: Vec<bf16> = pattern.iter().copied().cycle().take(usize::try_from(n)?).collect();
        self.0.push((name.to_string(), stream.clone_htod(&data)?));
        Ok(())
    }

    /// `n` NaNs: an output or intermediate every run must write.
    fn nan(&mut self, stream: &Arc<CudaStream>, name: &str, n: i64) -> Result<()> {
        self.0.push((name.to_string(), stream.clone_htod(&vec![bf16::NAN; usize::try_from(n)?])?));
        Ok(())
    }

    fn get(&self, name: &str) -> Result<&CudaSlice<bf16>> {
        Ok(self.0.iter().find(|(n, _)| n == name).map(|(_, b)| b).ok_or_else(|| format!("no buffer `{name}`"))?)
    }

    fn ptr(&self, stream: &Arc<CudaStream>, name: &str) -> Result<u64> {
        Ok(self.get(name)?.device_ptr(stream).0)
    }

    /// `plan`'s I/O addresses in its order: the buffer named as each tensor.
    fn io_of(&self, stream: &Arc<CudaStream>, plan: &ExecutionPlan) -> Result<Vec<u64>> {
        plan.layout().io().iter().map(|id| self.ptr(stream, &plan.graph().tensor(*id).name)).collect()
    }
}

/// One side of a `partition` case: how to run it once, where its output lands, what to record.
struct Contender<'a> {
    run: Box<dyn FnMut() -> Result<()> + 'a>,
    output: &'a CudaSlice<bf16>,
    about: Value,
}

/// Runs the partitioned plan and the hand split once each (their outputs, NaN before, must be
/// finite; their largest difference is recorded), times both the same way ([`device_time`]; with
/// `host`, also the host time per call), and records a row each, the partitioned one with the
/// ratio of its device time to the hand split's, which it returns.
fn compare_split<'a>(
    out: &mut Out,
    case: &str,
    stream: &Arc<CudaStream>,
    mut partitioned: Contender<'a>,
    mut split: Contender<'a>,
    (flops, bytes): (f64, f64),
    host: bool,
) -> Result<f64> {
    (partitioned.run)()?;
    (split.run)()?;
    stream.synchronize()?;
    let (a, b) = (stream.clone_dtoh(partitioned.output)?, stream.clone_dtoh(split.output)?);
    let finite = a.iter().chain(&b).all(|v| v.is_finite());
    let max_abs_diff = a.iter().zip(&b).map(|(x, y)| (x.to_f64() - y.to_f64()).abs()).fold(0.0, f64::max);
    let mut rows = Vec::new();
    for side in [&mut partitioned, &mut split] {
        let (median_us, min_us, runs, batch) = device_time(stream, &mut *side.run)?;
        let s = median_us * 1e-6;
        let mut figures = json!({
            "gpu_ms": median_us * 1e-3, "gpu_ms_min": min_us * 1e-3, "runs": runs, "batch": batch,
            "tflops": flops / s / 1e12, "gbps": bytes / s / 1e9,
        });
        if host {
            let mut call = || {
                let r = (side.run)();
                debug_assert!(r.is_ok());
            };
            let (host_us, host_us_min, _) = host_time(stream, 10, 50, 500, &mut call);
            figures = merge(figures, json!({"host_us": host_us, "host_us_min": host_us_min}));
        }
        rows.push((median_us, merge(figures, side.about.take())));
    }
    let ratio = rows[0].0 / rows[1].0;
    out.record(
        case,
        "cudnn-graph-partitioned",
        merge(
            rows[0].1.take(),
            json!({"ratio_vs_hand_split": ratio, "max_abs_diff_vs_hand_split": max_abs_diff, "outputs_finite": finite}),
        ),
    );
    out.record(case, "cudnn-graph-hand-split", rows[1].1.take());
    if !finite {
        return Err(format!("{case}: an output holds NaN or infinity after one run").into());
    }
    Ok(ratio)
}

/// What to record of a partitioned plan: its parts' engines, arena, workspace, build time and
/// the library's own timing of it ([`measure`], on scratch buffers).
fn partitioned_about(cudnn: &Cudnn, plan: &ExecutionPlan, build_ms: f64) -> Result<Value> {
    let measured = measure(cudnn, plan, &AutotuneOptions::default())?;
    Ok(json!({
        "kernels": plan.parts().len(),
        "engines": plan.parts().iter().map(|p| p.selected().tag()).collect::<Vec<_>>(),
        "arena_bytes": plan.arena_bytes(), "workspace_bytes": plan.workspace_size(), "build_ms": build_ms,
        "measure_gpu_ms": measured.median_us * 1e-3,
    }))
}

/// The MLP at `t` tokens: [`PartMlp`] partitioned against [`MlpUp`] then [`MlpDown`] with `h`
/// allocated here.
fn partition_mlp(
    out: &mut Out,
    cudnn: &Cudnn,
    stream: &Arc<CudaStream>,
    case: &str,
    t: i64,
    host: bool,
) -> Result<f64> {
    let (e, f) = (4096i64, 16384i64);
    let (tu, eu, fu) = (usize::try_from(t)?, usize::try_from(e)?, usize::try_from(f)?);
    let mut named = Named::default();
    named.random(stream, "x", t * e, 1.0, 1)?;
    named.random(stream, "w1", e * f, 1.0 / (e as f64).sqrt(), 2)?;
    named.random(stream, "b1", f, 0.5, 3)?;
    named.random(stream, "w2", f * e, 1.0 / (f as f64).sqrt(), 4)?;
    named.random(stream, "b2", e, 0.5, 5)?;
    named.nan(stream, "y", t * e)?;
    named.nan(stream, "h", t * f)?;
    named.nan(stream, "y_split", t * e)?;
    let options = BuildOptions::default();
    let started = Instant::now();
    let typed = PartMlp::new(tu, eu, fu).build(cudnn, &options)?;
    let plan = typed.plan();
    let partitioned_about = partitioned_about(cudnn, plan, ms(started.elapsed()))?;
    let started = Instant::now();
    let up = MlpUp::new(tu, eu, fu).build(cudnn, &options)?;
    let down = MlpDown::new(tu, eu, fu).build(cudnn, &options)?;
    let split_build_ms = ms(started.elapsed());
    let ws_partitioned = stream.alloc_zeros::<u8>(plan.workspace_size().max(1))?;
    let ws_split = stream.alloc_zeros::<u8>(up.workspace_size().max(down.workspace_size()).max(1))?;
    let io = named.io_of(stream, plan)?;
    let p = |n: &str| named.ptr(stream, n);
    let (x, w1, b1, w2, b2, h, y) = (p("x")?, p("w1")?, p("b1")?, p("w2")?, p("b2")?, p("h")?, p("y_split")?);
    let (wp, ws) = (ws_partitioned.device_ptr(stream).0, ws_split.device_ptr(stream).0);
    // Both sides' raw executes: every address is a live buffer of its tensor's size on this
    // context (allocated above, freed after `compare_split` has synchronized), and each workspace
    // holds what its plans need.
    let partitioned = Contender {
        // SAFETY: as said above.
        run: Box::new(|| Ok(unsafe { plan.execute_raw(cudnn, &io, wp) }?)),
        output: named.get("y")?,
        about: partitioned_about,
    };
    let split = Contender {
        run: Box::new(|| {
            // SAFETY: as said above.
            unsafe { up.execute_raw(cudnn, MlpUpRawArgs { x, w1, b1, h }, ws) }?;
            // SAFETY: as said above.
            Ok(unsafe { down.execute_raw(cudnn, MlpDownRawArgs { h, w2, b2, x, y }, ws) }?)
        }),
        output: named.get("y_split")?,
        about: json!({
            "kernels": up.plan().parts().len() + down.plan().parts().len(),
            "engines": [up.plan().selected().tag(), down.plan().selected().tag()],
            "intermediate_bytes": t * f * 2, "workspace_bytes": up.workspace_size().max(down.workspace_size()),
            "build_ms": split_build_ms,
        }),
    };
    let flops = 4.0 * (t * e) as f64 * f as f64;
    let bytes = 2.0 * (2 * t * e + 2 * e * f + f + e) as f64;
    compare_split(out, case, stream, partitioned, split, (flops, bytes), host)
}

/// The attention block: [`attention_block`] partitioned against five typed graphs executed six
/// times (norm, Q, K, V, attention, output) with the intermediates allocated here.
fn partition_attention(
    out: &mut Out,
    cudnn: &Cudnn,
    stream: &Arc<CudaStream>,
    case: &str,
    shape: AttentionShape,
    host: bool,
    note: Value,
) -> Result<f64> {
    let AttentionShape { b, s, heads, kv_heads, d } = shape;
    let (t, e, ekv) = shape.widths();
    let u = |v: i64| usize::try_from(v);
    let mut named = Named::default();
    named.random(stream, "x", t * e, 1.0, 11)?;
    named.random(stream, "g", e, 1.0, 12)?;
    named.random(stream, "wq", e * e, 1.0 / (e as f64).sqrt(), 13)?;
    named.random(stream, "wk", e * ekv, 1.0 / (e as f64).sqrt(), 14)?;
    named.random(stream, "wv", e * ekv, 1.0 / (e as f64).sqrt(), 15)?;
    named.random(stream, "wo", e * e, 1.0 / (e as f64).sqrt(), 16)?;
    named.nan(stream, "y", t * e)?;
    for (name, n) in [("hn", t * e), ("q", t * e), ("k", t * ekv), ("v", t * ekv), ("o", t * e), ("y_split", t * e)] {
        named.nan(stream, name, n)?;
    }
    let options = BuildOptions::default();
    let started = Instant::now();
    let plan = ExecutionPlan::build(cudnn, &attention_block(shape)?, &options)?;
    let about = merge(partitioned_about(cudnn, &plan, ms(started.elapsed()))?, note);
    let started = Instant::now();
    let norm = SplitRmsNorm::new(u(t)?, u(e)?).build(cudnn, &options)?;
    let proj_q = SplitProjection::new(u(t)?, u(e)?, u(e)?).build(cudnn, &options)?;
    let proj_kv = SplitProjection::new(u(t)?, u(e)?, u(ekv)?).build(cudnn, &options)?;
    let attn = SplitAttention::new(u(b)?, u(heads)?, u(kv_heads)?, u(s)?, u(d)?).build(cudnn, &options)?;
    let output = SplitOutput::new(u(t)?, u(e)?).build(cudnn, &options)?;
    let split_build_ms = ms(started.elapsed());
    let sizes = [
        norm.workspace_size(),
        proj_q.workspace_size(),
        proj_kv.workspace_size(),
        attn.workspace_size(),
        output.workspace_size(),
    ];
    let split_workspace = sizes.into_iter().max().unwrap_or(0);
    // Each kernel's own device time on both sides (the library's `measure` of each hand-split
    // plan; each part of a second build of the partitioned plan as `autotune` times it, at the
    // heuristics' pick): which kernel a regression is in, and whether the parts add up to the
    // whole (gaps between kernels do not show in the parts).
    let split_parts = [norm.plan(), proj_q.plan(), proj_kv.plan(), proj_kv.plan(), attn.plan(), output.plan()]
        .iter()
        .map(|p| Ok(measure(cudnn, p, &AutotuneOptions::default())?.median_us))
        .collect::<Result<Vec<f64>>>()?;
    let mut timed = ExecutionPlan::build(cudnn, &attention_block(shape)?, &options)?;
    let report = autotune(cudnn, &mut timed, &AutotuneOptions::default())?;
    let part_us: Vec<Option<f64>> = (0..timed.parts().len())
        .map(|part| report.part_timing(part, report.previous_parts[part]).map(|t| t.median_us))
        .collect();
    let about = merge(about, json!({"parts_gpu_us": part_us, "parts_tuned": report.selected_parts}));
    let ws_partitioned = stream.alloc_zeros::<u8>(plan.workspace_size().max(1))?;
    let ws_split = stream.alloc_zeros::<u8>(split_workspace.max(1))?;
    let io = named.io_of(stream, &plan)?;
    let p = |n: &str| named.ptr(stream, n);
    let (x, g, wq, wk, wv, wo) = (p("x")?, p("g")?, p("wq")?, p("wk")?, p("wv")?, p("wo")?);
    let (hn, q, k, v, o, y) = (p("hn")?, p("q")?, p("k")?, p("v")?, p("o")?, p("y_split")?);
    let (wp, ws) = (ws_partitioned.device_ptr(stream).0, ws_split.device_ptr(stream).0);
    // Both sides' raw executes: as in `partition_mlp`.
    let partitioned = Contender {
        // SAFETY: as said above.
        run: Box::new(|| Ok(unsafe { plan.execute_raw(cudnn, &io, wp) }?)),
        output: named.get("y")?,
        about,
    };
    let split = Contender {
        // SAFETY (each call): as said above.
        run: Box::new(|| unsafe {
            norm.execute_raw(cudnn, SplitRmsNormRawArgs { x, g, h: hn }, ws)?;
            proj_q.execute_raw(cudnn, SplitProjectionRawArgs { a: hn, w: wq, c: q }, ws)?;
            proj_kv.execute_raw(cudnn, SplitProjectionRawArgs { a: hn, w: wk, c: k }, ws)?;
            proj_kv.execute_raw(cudnn, SplitProjectionRawArgs { a: hn, w: wv, c: v }, ws)?;
            attn.execute_raw(cudnn, SplitAttentionRawArgs { q, k, v, o }, ws)?;
            Ok(output.execute_raw(cudnn, SplitOutputRawArgs { a: o, w: wo, x, y }, ws)?)
        }),
        output: named.get("y_split")?,
        about: json!({
            "kernels": 6,
            "engines": [norm.plan().selected().tag(), proj_q.plan().selected().tag(), proj_kv.plan().selected().tag(),
                        attn.plan().selected().tag(), output.plan().selected().tag()],
            "intermediate_bytes": 2 * (3 * t * e + 2 * t * ekv), "workspace_bytes": split_workspace,
            "build_ms": split_build_ms, "parts_gpu_us": split_parts,
        }),
    };
    compare_split(out, case, stream, partitioned, split, (shape.flops(), shape.io_bytes()), host)
}

/// The smallest S (of 1, 2, 4, …, 128) at which cuDNN plans the attention block, one graph, and
/// its attention alone (the hand split's), for B = 1 decode; and what it refused below that.
fn decode_attention_s(cudnn: &Cudnn, heads: i64, kv_heads: i64, d: i64) -> (Option<i64>, Vec<Value>) {
    let mut refused = Vec::new();
    for s in [1, 2, 4, 8, 16, 32, 64, 128] {
        let shape = AttentionShape { b: 1, s, heads, kv_heads, d };
        let built = || -> Result<()> {
            ExecutionPlan::build(cudnn, &attention_block(shape)?, &BuildOptions::default())?;
            let u = |v: i64| usize::try_from(v);
            SplitAttention::new(1, u(heads)?, u(kv_heads)?, u(s)?, u(d)?).build(cudnn, &BuildOptions::default())?;
            Ok(())
        };
        match built() {
            Ok(()) => return (Some(s), refused),
            Err(e) => refused.push(json!({"s": s, "error": e.to_string()})),
        }
    }
    (None, refused)
}

/// Partitioned plans against the same blocks split by hand into typed graphs executed back to
/// back (user-allocated intermediates): the MLP (E = 4096, F = 16384) and the pre-norm attention
/// block (32 query heads of 128 over 8 key/value heads, causal), at prefill (T = B·S = 4096,
/// B = 1) and B = 1 decode (the MLP at T = 1, the attention at the smallest S cuDNN plans).
fn bench_partition(out: &mut Out, cudnn: &Cudnn, stream: &Arc<CudaStream>) -> Vec<String> {
    let (heads, kv_heads, d) = (32, 8, 128);
    // A case that fails records its error and fails the guard; the others still run.
    let mut failed = Vec::new();
    let mut each = |out: &mut Out, case: &str, r: Result<f64>| {
        match r {
        Ok(ratio) if ratio > MAX_RATIO_VS_HAND_SPLIT => failed.push(format!(
            "{case}: the partitioned plan takes {ratio:.3}x the hand split's device time (at most {MAX_RATIO_VS_HAND_SPLIT})"
        )),
        Ok(_) => {}
        Err(e) => {
            out.record(case, "cudnn-graph", json!({"error": e.to_string()}));
            failed.push(format!("{case}: {e}"));
        }
    }
    };
    let case = "partition_mlp_prefill_t4096_e4096_f16384";
    let r = partition_mlp(out, cudnn, stream, case, 4096, false);
    each(out, case, r);
    let case = "partition_mlp_decode_t1_e4096_f16384";
    let r = partition_mlp(out, cudnn, stream, case, 1, true);
    each(out, case, r);
    let prefill = AttentionShape { b: 1, s: 4096, heads, kv_heads, d };
    let case = "partition_attention_prefill_b1_s4096_h32x128_kv8";
    let r = partition_attention(out, cudnn, stream, case, prefill, false, json!({}));
    each(out, case, r);
    match decode_attention_s(cudnn, heads, kv_heads, d) {
        (Some(s), refused) => {
            let case = format!("partition_attention_decode_b1_s{s}_h32x128_kv8");
            let shape = AttentionShape { b: 1, s, heads, kv_heads, d };
            let note = json!({"s": s, "refused_below": refused});
            let r = partition_attention(out, cudnn, stream, &case, shape, true, note);
            each(out, &case, r);
        }
        (None, refused) => {
            let case = "partition_attention_decode_b1_h32x128_kv8";
            let r = Err(format!("cuDNN planned the block at no S up to 128: {refused:?}").into());
            each(out, case, r);
        }
    }
    failed
}

fn main() -> Result<()> {
    let args = args()?;
    let wants = |s: &str| args.only.as_ref().is_none_or(|o| o.iter().any(|x| x == s));
    let mut out = Out::create(args.json.as_ref())?;
    if !cudnn_graph::backend::libraries_present() {
        return Err("the benchmarks need libcudnn and a GPU driver".into());
    }
    let ctx = cudnn_graph::backend::cuda_context(0)?;
    let stream = ctx.default_stream();
    let cudnn = Cudnn::new(stream.clone())?;
    out.record(
        "env",
        "cudnn-graph",
        json!({"cudnn_version": cudnn.version(), "sm": cudnn.sm(), "gpu": ctx.name().ok(),
               "quick": args.quick, "sizes": args.sizes}),
    );
    let run = |out: &mut Out, section: &str, f: &mut dyn FnMut(&mut Out) -> Result<()>| {
        if let Err(e) = f(out) {
            out.record(section, "cudnn-graph", json!({"error": e.to_string()}));
        }
    };
    if wants("build") {
        run(&mut out, "build", &mut |out| bench_build(out, &cudnn, args.quick));
    }
    if wants("host") {
        run(&mut out, "host", &mut |out| bench_host(out, &cudnn, &stream, args.quick));
    }
    if wants("device") {
        for &n in &args.sizes {
            let case = format!("matmul_bias_relu_bf16_{n}");
            let flops = 2.0 * (n as f64).powi(3);
            run(&mut out, &case.clone(), &mut |out| {
                bench_device(out, &cudnn, &case, &matmul_bias_relu(n, n, n), Some(flops), None)
            });
        }
    }
    if wants("layernorm") {
        let (rows, hidden) = (16384, 4096);
        let case = format!("layernorm_{rows}x{hidden}");
        match layernorm(rows, hidden) {
            // X read and Y written, bf16 (cudnn-frontend's anchor counts the same).
            Ok(g) => run(&mut out, &case.clone(), &mut |out| {
                bench_device(out, &cudnn, &case, &g, None, Some(2.0 * (rows * hidden) as f64 * 2.0))
            }),
            Err(e) => out.record(&case, "cudnn-graph", json!({"skipped": e.to_string()})),
        }
    }
    if wants("partition") {
        let failed = bench_partition(&mut out, &cudnn, &stream);
        if !failed.is_empty() {
            return Err(format!("partition guard failed:\n  {}", failed.join("\n  ")).into());
        }
    }
    Ok(())
}
