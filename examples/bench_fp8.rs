//! fp8 matmul on the GPU (issue 20): e4m3 · e4m3 with per-tensor descales → bf16, plain and with
//! a bias + relu epilogue, as `shared/bench/anchor_cudnn_frontend.py --only fp8_matmul` measures
//! cudnn-frontend and `torch._scaled_mm` (A `[1, M, K]` row-major, B `[1, K, N]` column-major,
//! descales `f32[1, 1, 1]` on the device). See `docs/benchmarks.md`.
//!
//! ```text
//! cargo run --release --example bench_fp8 -- [--json PATH] [--size 8192] [--max-cfg 48]
//! ```
//!
//! Each graph is timed several ways, every one with [`measure`] (CUDA events around batches of
//! back-to-back executes, the median of stable samples, on scratch buffers of random values):
//!
//! - `cudnn-graph`: the heuristics' pick (default `BuildOptions`);
//! - `cudnn-graph-autotuned`: every candidate of heuristics A, B and fallback built and
//!   [`autotune`]d;
//! - `cudnn-graph-kernel-cfg`: cuDNN 9.19 plans fp8 matmuls on engine 7 alone (runtime-compiled),
//!   whose `KERNEL_CFG` knob picks the kernel configuration; every value up to `--max-cfg` is
//!   built explicitly (`BuildOptions::engine_config`) and timed, one row each;
//! - for the bias + relu form, two kernels: the GEMM with the descales (and the bias) writing
//!   bf16, then the rest of the epilogue (`cudnn-graph-split-*`), each kernel's best time summed,
//!   as the autotuner times a partitioned plan's parts (the intermediate is stored in bf16, as
//!   `torch._scaled_mm(bias)` + `relu` stores it);
//! - `cudnn-graph-auto-bias_relu`: the runtime's own choice for the bias + relu form, nothing
//!   chosen by hand: built with `Fusion::Measure` (the fused plan and the partitionings that cut
//!   the epilogue off, every candidate of heuristics A, B and fallback of every part), autotuned
//!   across engines and partitionings, and the plan it keeps timed whole (both kernels back to
//!   back when it keeps a split) with [`measure`], like every other row; with the partitioning
//!   kept, each partitioning's time, and the build and tune times Measure costs;
//! - `cudnn-graph-best`: the fastest of the above for the case.
//!
//! Every figure is one JSON object per line on stdout (and in `--json PATH`), in the schema of
//! `examples/bench.rs` and the anchor script (`case`, `impl`, `gpu_ms`, `tflops`, `engine`, ...);
//! case names are the anchor's, so the rows sit beside cudnn-frontend's and torch's.

use cudnn_graph::backend::{BuildOptions, Cudnn, ExecutionPlan, HeuristicMode, Knob};
use cudnn_graph::engines::{autotune, measure, AutotuneOptions};
use cudnn_graph::ops::PointwiseMode;
use cudnn_graph::{DataType, Graph, GraphBuilder, GraphError, TensorId};
use serde_json::json;

#[path = "common/json_lines.rs"]
mod json_lines;
#[path = "common/tuning.rs"]
mod tuning;
use json_lines::Out;
use tuning::{figures, merge, ms, pick_and_autotune, Best, Result};

struct Args {
    json: Option<String>,
    size: i64,
    max_cfg: i64,
}

fn args() -> Result<Args> {
    let mut a = Args { json: None, size: 8192, max_cfg: 48 };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--json" => a.json = Some(it.next().ok_or("--json needs a path")?),
            "--size" => a.size = it.next().ok_or("--size needs a number")?.parse()?,
            "--max-cfg" => a.max_cfg = it.next().ok_or("--max-cfg needs a number")?.parse()?,
            other => return Err(format!("unknown argument {other}; see the top of examples/bench_fp8.rs").into()),
        }
    }
    Ok(a)
}

/// What follows the GEMM and its descales.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Epilogue {
    None,
    Bias,
    BiasRelu,
}

/// `(A·B)·descale_a·descale_b [+ bias [, relu]]` → bf16: A e4m3 `[1, m, k]` row-major, B e4m3
/// `[1, k, n]` column-major, as the anchor's `fe_fp8_matmul`.
fn fp8_matmul(name: &str, m: i64, n: i64, k: i64, epilogue: Epilogue) -> Result<Graph, GraphError> {
    let mut g = GraphBuilder::new(name);
    let a = g.input("a", DataType::Fp8E4M3, &[1, m, k])?;
    let b = g.input("b", DataType::Fp8E4M3, &[1, k, n])?;
    g.set_dim_order(b, &[0, 2, 1])?;
    let da = g.input("descale_a", DataType::F32, &[1, 1, 1])?;
    let db = g.input("descale_b", DataType::F32, &[1, 1, 1])?;
    let c = g.matmul(a, b)?;
    let c = g.pointwise(PointwiseMode::Mul, &[c.into(), da.into()])?;
    let mut y = g.pointwise(PointwiseMode::Mul, &[c.into(), db.into()])?;
    if epilogue != Epilogue::None {
        let bias = g.input("bias", DataType::BF16, &[1, 1, n])?;
        y = g.pointwise(PointwiseMode::Add, &[y.into(), bias.into()])?;
    }
    if epilogue == Epilogue::BiasRelu {
        y = g.pointwise(PointwiseMode::Relu, &[y.into()])?;
    }
    g.output(y, "y", DataType::BF16)?;
    g.build()
}

/// The second kernel of a split epilogue: `relu(x [+ bias])`, bf16 `[1, m, n]`.
fn epilogue_kernel(m: i64, n: i64, with_bias: bool) -> Result<Graph, GraphError> {
    let mut g = GraphBuilder::new(if with_bias { "bias_relu" } else { "relu" });
    let x = g.input("x", DataType::BF16, &[1, m, n])?;
    let mut y: TensorId = x;
    if with_bias {
        let bias = g.input("bias", DataType::BF16, &[1, 1, n])?;
        y = g.pointwise(PointwiseMode::Add, &[y.into(), bias.into()])?;
    }
    y = g.pointwise(PointwiseMode::Relu, &[y.into()])?;
    g.output(y, "y", DataType::BF16)?;
    g.build()
}

/// Times `graph` every way the top of this file lists (rows under `case` when `record`), and
/// returns its best time.
fn tune(out: &mut Out, cudnn: &Cudnn, case: &str, graph: &Graph, flops: Option<f64>, max_cfg: i64) -> Result<Best> {
    let tune = AutotuneOptions::default();
    let mut best = None;
    let pick = pick_and_autotune(out, cudnn, case, graph, flops, &mut best)?;

    // Engine 7's kernel configurations, one by one.
    let selected = pick.selected();
    let engine = selected.engine_id;
    let cfg_kind = selected.knobs.iter().find(|k| k.name() == Some("KERNEL_CFG")).map(|k| k.kind);
    if let (Some(engine), Some(kind)) = (engine, cfg_kind) {
        let (mut built, mut refused) = (0, 0);
        for value in 0..max_cfg {
            let options = BuildOptions::default().engine_config(engine, &[Knob { kind, value }]);
            let Ok(p) = ExecutionPlan::build(cudnn, graph, &options) else {
                refused += 1;
                continue;
            };
            built += 1;
            match measure(cudnn, &p, &tune) {
                Ok(t) => {
                    out.record(case, "cudnn-graph-kernel-cfg", merge(figures(&t, flops), json!({"kernel_cfg": value})));
                    Best::offer(&mut best, t.median_us, format!("engine {engine} KERNEL_CFG={value}"));
                }
                Err(e) => {
                    out.record(case, "cudnn-graph-kernel-cfg", json!({"kernel_cfg": value, "error": e.to_string()}))
                }
            }
        }
        eprintln!("{case}: engine {engine}: {built} kernel configurations built, {refused} refused of 0..{max_cfg}");
    }
    best.ok_or_else(|| format!("{case}: nothing ran").into())
}

/// The runtime's own choice for `graph` (row `cudnn-graph-auto-bias_relu`): built with
/// `Fusion::Measure` and every candidate of heuristics A, B and fallback, autotuned across
/// engines and partitionings, the plan kept timed whole.
fn auto(out: &mut Out, cudnn: &Cudnn, case: &str, graph: &Graph, flops: f64) -> Result<Best> {
    let options = BuildOptions::default()
        .modes(&[HeuristicMode::A, HeuristicMode::B, HeuristicMode::Fallback])
        .all_plans()
        .measure_partitionings();
    let started = std::time::Instant::now();
    let mut plan = ExecutionPlan::build(cudnn, graph, &options)?;
    let build_ms = ms(started.elapsed());
    let report = autotune(cudnn, &mut plan, &AutotuneOptions::default())?;
    eprint!("{case} (Fusion::Measure): {report}");
    let t = measure(cudnn, &plan, &AutotuneOptions::default())?;
    let partitionings: Vec<_> = report
        .partitionings
        .iter()
        .map(|p| json!({"parts": p.parts, "sum_of_parts_ms": p.median_us.map(|us| us * 1e-3)}))
        .collect();
    let engines: Vec<String> = plan.parts().iter().map(|p| p.selected().tag()).collect();
    let row = json!({
        "build_ms": build_ms, "tune_ms": ms(report.elapsed), "parts": plan.parts().len(), "engines": engines,
        "kept": report.partitioning, "kept_parts": report.partitionings[report.partitioning].parts,
        "speedup_over_fused": report.partitioning_speedup(), "partitionings": partitionings,
        "cut": plan.parts().get(1).and_then(|p| p.cut()).map(ToString::to_string),
        "method": "the plan autotuning kept, timed whole with measure"
    });
    out.record(case, "cudnn-graph-auto-bias_relu", merge(figures(&t, Some(flops)), row));
    Ok(Best { us: t.median_us, how: format!("Fusion::Measure kept partitioning {}: {}", report.partitioning, t.tag) })
}

fn main() -> Result<()> {
    let args = args()?;
    let mut out = Out::create(args.json.as_ref())?;
    if !cudnn_graph::backend::libraries_present() {
        return Err("the benchmark needs libcudnn and a GPU driver".into());
    }
    let ctx = cudnn_graph::backend::cuda_context(0)?;
    let cudnn = Cudnn::new(ctx.default_stream())?;
    let n = args.size;
    out.record(
        "env",
        "cudnn-graph",
        json!({"cudnn_version": cudnn.version(), "sm": cudnn.sm(), "gpu": ctx.name().ok(), "size": n}),
    );
    let flops = 2.0 * (n as f64).powi(3);
    let plain_case = format!("fp8_matmul_e4m3_descale_bf16_{n}x{n}x{n}");
    let epi_case = format!("fp8_matmul_e4m3_descale_bias_relu_bf16_{n}x{n}x{n}");

    let run = |out: &mut Out, case: &str, f: &mut dyn FnMut(&mut Out) -> Result<Best>| -> Option<Best> {
        match f(out) {
            Ok(b) => Some(b),
            Err(e) => {
                out.record(case, "cudnn-graph", json!({"error": e.to_string()}));
                None
            }
        }
    };
    let plain = run(&mut out, &plain_case, &mut |out| {
        tune(out, &cudnn, &plain_case, &fp8_matmul("fp8_matmul", n, n, n, Epilogue::None)?, Some(flops), args.max_cfg)
    });
    // The runtime's own choice first: nothing else is needed to see whether it meets the target.
    let graph = fp8_matmul("fp8_matmul_bias_relu", n, n, n, Epilogue::BiasRelu)?;
    let auto_best = match auto(&mut out, &cudnn, &epi_case, &graph, flops) {
        Ok(b) => Some(b),
        Err(e) => {
            out.record(&epi_case, "cudnn-graph-auto-bias_relu", json!({"error": e.to_string()}));
            None
        }
    };
    let fused = run(&mut out, &epi_case, &mut |out| {
        tune(
            out,
            &cudnn,
            &epi_case,
            &fp8_matmul("fp8_matmul_bias_relu", n, n, n, Epilogue::BiasRelu)?,
            Some(flops),
            args.max_cfg,
        )
    });
    // Two kernels: the GEMM (+ bias) to bf16, then relu (+ bias); each part at its best.
    let gemm_bias = run(&mut out, &format!("{epi_case}/gemm_bias"), &mut |out| {
        let case = format!("{epi_case}/gemm_bias");
        tune(out, &cudnn, &case, &fp8_matmul("fp8_matmul_bias", n, n, n, Epilogue::Bias)?, Some(flops), args.max_cfg)
    });
    let relu = run(&mut out, &format!("{epi_case}/relu"), &mut |out| {
        tune(out, &cudnn, &format!("{epi_case}/relu"), &epilogue_kernel(n, n, false)?, None, 0)
    });
    let bias_relu = run(&mut out, &format!("{epi_case}/bias_relu"), &mut |out| {
        tune(out, &cudnn, &format!("{epi_case}/bias_relu"), &epilogue_kernel(n, n, true)?, None, 0)
    });
    let tflops = |us: f64| flops / (us * 1e-6) / 1e12;
    let mut epi_best = fused.map(|b| (b.us, format!("fused: {}", b.how)));
    if let Some(b) = auto_best {
        if epi_best.as_ref().is_none_or(|(best, _)| b.us < *best) {
            epi_best = Some((b.us, b.how));
        }
    }
    for (name, first, second) in [
        ("cudnn-graph-split-gemm_bias+relu", &gemm_bias, &relu),
        ("cudnn-graph-split-gemm+bias_relu", &plain, &bias_relu),
    ] {
        if let (Some(a), Some(b)) = (first, second) {
            let us = a.us + b.us;
            out.record(
                &epi_case,
                name,
                json!({"gpu_ms": us * 1e-3, "tflops": tflops(us), "kernels": [a.how, b.how],
                       "kernel_ms": [a.us * 1e-3, b.us * 1e-3], "intermediate": "bf16",
                       "method": "sum of each kernel's best median, each timed alone"}),
            );
            if epi_best.as_ref().is_none_or(|(best, _)| us < *best) {
                epi_best = Some((us, format!("{name}: {} | {}", a.how, b.how)));
            }
        }
    }
    for (case, best) in [(&plain_case, plain.map(|b| (b.us, b.how))), (&epi_case, epi_best)] {
        if let Some((us, how)) = best {
            out.record(case, "cudnn-graph-best", json!({"gpu_ms": us * 1e-3, "tflops": tflops(us), "how": how}));
        }
    }
    Ok(())
}
