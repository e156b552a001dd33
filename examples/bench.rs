//! Benchmarks on the GPU: build phases (cold, warm, cache hits, payload loads), host time per
//! execute against raw `cudnnBackendExecute`, and device time of the heuristics' pick and the
//! autotuned plan. See `docs/benchmarks.md`.
//!
//! ```text
//! cargo run --release --example bench -- [--json PATH] [--quick] [--only SECTIONS] [--sizes 2048,4096]
//!     SECTIONS: comma-separated of build, host, device, layernorm (default: all)
//! ```
//!
//! Every figure is one JSON object per line on stdout (and in `--json PATH`), in the schema of
//! `shared/bench/anchor_cudnn_frontend.py` (`case`, `impl`, then figures such as `gpu_ms`,
//! `tflops`, `gbps`, `host_us`, `build_ms`), so `scripts/plot_bench.py` can put both side by side.

use std::ffi::c_void;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudnn_graph::backend::cudarc::cudnn::sys;
use cudnn_graph::backend::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use cudnn_graph::backend::{BuildOptions, Cudnn, DeviceBuffer, ExecutionPlan, GraphMode, HeuristicMode};
use cudnn_graph::engines::{autotune, measure, AutotuneOptions, CacheSource, PlanCache, Timing};
use cudnn_graph::graph;
use cudnn_graph::ops::PointwiseMode;
use cudnn_graph::serialize::plan::{
    load_payload, parse_payload, read_payload, write_payload, Expect, PlanOrigin, SerializeOptions,
};
use cudnn_graph::{DataType, Graph, GraphBuilder};
use half::bf16;
use serde_json::{json, Value};

graph! {
    /// The typed form of the tiny host-overhead graph.
    pub TypedMbr<dyn M, dyn N, dyn K>(a: bf16[1, M, K], b: bf16[1, K, N], bias: bf16[1, 1, N]) -> (y: bf16[1, M, N]) {
        y = relu(add(matmul(a, b), bias));
    }
}

type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

/// Writes each record as a JSON line to stdout and to the `--json` file.
struct Out {
    file: Option<std::fs::File>,
}

impl Out {
    fn record(&mut self, case: &str, implementation: &str, figures: Value) {
        let mut row = json!({"case": case, "impl": implementation});
        if let (Some(row), Value::Object(f)) = (row.as_object_mut(), figures) {
            row.extend(f);
        }
        let line = row.to_string();
        println!("{line}");
        if let Some(f) = &mut self.file {
            // A full disk loses the file, not the run: stdout has every line.
            let _ = writeln!(f, "{line}").and_then(|()| f.flush());
        }
    }
}

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

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
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
        for id in graph.inputs().into_iter().chain(graph.outputs()) {
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

/// Host µs per call of `f`: median and min of `rounds` batches of `batch` calls (the stream is
/// drained between batches, outside the timing), and the anchor's figure: `calls` calls then a
/// synchronize, divided by `calls`.
fn host_time(stream: &CudaStream, rounds: usize, batch: usize, calls: usize, f: &mut dyn FnMut()) -> (f64, f64, f64) {
    for _ in 0..200 {
        f();
    }
    stream.synchronize().ok();
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..batch {
            f();
        }
        samples.push(t.elapsed().as_secs_f64() * 1e6 / batch as f64);
        stream.synchronize().ok();
    }
    let t = Instant::now();
    for _ in 0..calls {
        f();
    }
    stream.synchronize().ok();
    let with_sync = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
    let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
    (median(&mut samples), min, with_sync)
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

fn main() -> Result<()> {
    let args = args()?;
    let wants = |s: &str| args.only.as_ref().is_none_or(|o| o.iter().any(|x| x == s));
    let mut out = Out { file: args.json.as_ref().map(std::fs::File::create).transpose()? };
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
    Ok(())
}
