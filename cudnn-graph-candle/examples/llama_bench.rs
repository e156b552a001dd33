//! Times the Llama layer's forward (`examples/llama/layer.rs`) at Llama 3 8B's sizes (E = 4096,
//! 32 heads over 8 KV heads of 128, MLP 14336, bf16) on a GPU: candle's own CUDA implementation
//! against the same layer with its attention and GEMM epilogues as cudnn-graph types, for a decode
//! step (B = 1, one token after 4095 cached positions) and a prefill (B · S = 4096). One JSON
//! line per (phase, implementation); `docs/bench/llama_layer_torch.py` times PyTorch eager on the
//! same shapes.
//!
//! With `--rounds N`, each forward is timed N times, the implementations taking turns (so a
//! drift of the GPU's clocks falls on all of them alike), and `ms` is the median (`min_ms`,
//! `max_ms` the spread).
//!
//! With `--stages`, the prefill is also timed stage by stage, for both implementations: `rms_norm`
//! (before the attention), `qkv`, `rope` (of q and k), `attention`, `o_proj_residual` (the
//! attention's output back to `[B, S, E]`, its projection and the residual), `rms_norm2`, `swiglu`
//! (gate and up projections with the activation) and `down_residual`, each on inputs computed once
//! by a real forward pass, timed as the forward is (5 warm-up calls, then the mean of `--iters`
//! calls between two synchronizations). One JSON line per (implementation, stage), `tflops` on the
//! GEMM and attention stages (2·M·N·K per GEMM; the causal attention's 2·2·B·H·S·S·D/2), then a
//! `"stage":"sum"` line with the stages' total next to the whole forward's time
//! (`docs/bench/llama_layer_torch.py --stages` splits PyTorch eager the same way).
//!
//! With `--autotune`, a third implementation, `cudnn-graph-autotuned`: the same graphs through
//! `Runner::with_autotune` (every plan's candidates timed on the GPU at its first call, the
//! fastest kept), its first call (the tuning) reported as `first_call_ms`. `--measure` makes
//! those builds `BuildOptions::measure_partitionings()`: autotuning then also times each graph
//! with its epilogues cut off into kernels of their own, and keeps the faster (the lines say
//! `"fusion":"measure"`). `--tuning-store PATH` keeps what autotuning learned in a tuning store
//! (`AutotuneOptions::tuning_store`; `CUDNN_GRAPH_TUNING_STORE=PATH` does the same): the first
//! process measures and records, a later one with the filled store builds the recorded plans and
//! times nothing, so its `first_call_ms` is a heuristics build's, not a tuning's. `--trace` prints
//! the library's debug events (each plan built, each autotuning's choice, each store hit) on
//! stderr.
//!
//! ```text
//! cargo build --release -p cudnn-graph-candle --features cuda --example llama_bench
//! target/release/examples/llama_bench [--iters 50] [--rounds 5] [--stages] [--autotune [--measure] [--tuning-store PATH]] [--trace]
//! ```

// Shared with llama_layer and the tests; the training half is not timed here.
#[path = "llama/layer.rs"]
#[allow(dead_code)]
mod layer;

use std::time::Instant;

use candle_core::{Device, Tensor};
use cudnn_graph::backend::BuildOptions;
use cudnn_graph::engines::{AutotuneOptions, PlanCache, TuningFile};
use cudnn_graph_candle::Runner;
use layer::{random, Cache, Config, Layer};

struct Case {
    phase: &'static str,
    batch: usize,
    tokens: usize,
    past: usize,
}

const CASES: [Case; 2] = [
    Case { phase: "decode", batch: 1, tokens: 1, past: 4095 },
    Case { phase: "prefill", batch: 1, tokens: 4096, past: 0 },
];

/// The mean time of `f` in milliseconds: 5 warm-up calls, then `iters` calls between two
/// synchronizations of `device`.
fn time<T>(device: &Device, iters: usize, f: impl Fn() -> candle_core::Result<T>) -> candle_core::Result<f64> {
    for _ in 0..5 {
        f()?;
    }
    device.synchronize()?;
    let start = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    device.synchronize()?;
    Ok(start.elapsed().as_secs_f64() * 1e3 / iters as f64)
}

/// One stage of a forward: its name, its floating-point operations where it is a GEMM or an
/// attention, and a call of it on inputs computed beforehand.
struct Stage<'a> {
    name: &'static str,
    flops: Option<f64>,
    run: Box<dyn Fn() -> candle_core::Result<()> + 'a>,
}

impl<'a> Stage<'a> {
    fn new<T>(name: &'static str, flops: Option<f64>, run: impl Fn() -> candle_core::Result<T> + 'a) -> Self {
        Stage { name, flops, run: Box::new(move || run().map(|_| ())) }
    }
}

/// The GEMM and attention stages' floating-point operations for a prefill of `x` `[B, S, E]` (no
/// cache): Q/K/V, attention, output projection, SwiGLU, down projection.
struct Flops {
    qkv: f64,
    attention: f64,
    o_proj: f64,
    swiglu: f64,
    down: f64,
}

impl Flops {
    fn prefill(cfg: Config, b: usize, s: usize) -> Self {
        let (t, e, f) = ((b * s) as f64, cfg.hidden as f64, cfg.intermediate as f64);
        let (h, hkv, d) = (cfg.heads as f64, cfg.kv_heads as f64, cfg.head_dim() as f64);
        let (b, s) = (b as f64, s as f64);
        Flops {
            qkv: 2.0 * t * e * (h * d + 2.0 * hkv * d),
            // Q·Kᵀ and P·V, the causal half of each.
            attention: 2.0 * 2.0 * b * h * s * s * d / 2.0,
            o_proj: 2.0 * t * (h * d) * e,
            swiglu: 2.0 * 2.0 * t * e * f,
            down: 2.0 * t * f * e,
        }
    }
}

/// candle's forward of a prefill of `x` (no cache) as stages.
fn candle_stages<'a>(
    layer: &'a Layer,
    x: &'a Tensor,
    cos: &'a Tensor,
    sin: &'a Tensor,
) -> candle_core::Result<Vec<Stage<'a>>> {
    let (b, s, _) = x.dims3()?;
    let flops = Flops::prefill(layer.cfg, b, s);
    let n = layer.attn_norm_candle(x)?;
    let (q, k, v) = layer.qkv_candle(&n)?;
    let (qr, kr) = layer.rope_candle(&q, &k, cos, sin)?;
    let attn = layer.attention_candle(&qr, &kr, &v, None)?;
    let x1 = layer.o_proj_candle(&attn, x)?;
    let n2 = layer.mlp_norm_candle(&x1)?;
    let mlp = layer.swiglu_candle(&n2)?;
    let x1_ = x1.clone();
    Ok(vec![
        Stage::new("rms_norm", None, move || layer.attn_norm_candle(x)),
        Stage::new("qkv", Some(flops.qkv), move || layer.qkv_candle(&n)),
        Stage::new("rope", None, move || layer.rope_candle(&q, &k, cos, sin)),
        Stage::new("attention", Some(flops.attention), move || layer.attention_candle(&qr, &kr, &v, None)),
        Stage::new("o_proj_residual", Some(flops.o_proj), move || layer.o_proj_candle(&attn, x)),
        Stage::new("rms_norm2", None, move || layer.mlp_norm_candle(&x1_)),
        Stage::new("swiglu", Some(flops.swiglu), move || layer.swiglu_candle(&n2)),
        Stage::new("down_residual", Some(flops.down), move || layer.down_candle(&mlp, &x1)),
    ])
}

/// The graphs' forward of a prefill of `x` (no cache) as stages, as `Layer::forward_graphs` runs
/// them.
fn graph_stages<'a>(
    layer: &'a Layer,
    runner: &'a Runner,
    x: &'a Tensor,
    cos: &'a Tensor,
    sin: &'a Tensor,
) -> candle_core::Result<Vec<Stage<'a>>> {
    let (b, s, _) = x.dims3()?;
    let (hkv, d) = (layer.cfg.kv_heads, layer.cfg.head_dim());
    let flops = Flops::prefill(layer.cfg, b, s);
    let n = layer.attn_norm_graphs(runner, x)?;
    let [q, k, v] = layer.qkv_graphs(runner, &n)?;
    let (qr, kr) = layer.rope_graphs(&q, &k, cos, sin, b)?;
    let v = v.reshape((b, s, hkv, d))?;
    let o = layer.attention_graphs(runner, &qr, &kr, &v)?;
    let x1 = layer.o_proj_graphs(runner, &o, x)?;
    let n2 = layer.mlp_norm_graphs(runner, &x1)?;
    let mlp = layer.swiglu_graphs(runner, &n2)?;
    let x1_ = x1.clone();
    Ok(vec![
        Stage::new("rms_norm", None, move || layer.attn_norm_graphs(runner, x)),
        Stage::new("qkv", Some(flops.qkv), move || layer.qkv_graphs(runner, &n)),
        Stage::new("rope", None, move || layer.rope_graphs(&q, &k, cos, sin, b)),
        Stage::new("attention", Some(flops.attention), move || layer.attention_graphs(runner, &qr, &kr, &v)),
        Stage::new("o_proj_residual", Some(flops.o_proj), move || layer.o_proj_graphs(runner, &o, x)),
        Stage::new("rms_norm2", None, move || layer.mlp_norm_graphs(runner, &x1_)),
        Stage::new("swiglu", Some(flops.swiglu), move || layer.swiglu_graphs(runner, &n2)),
        Stage::new("down_residual", Some(flops.down), move || layer.down_graphs(runner, &mlp, &x1)),
    ])
}

/// Times `stages` one by one and prints a JSON line for each, then their sum next to the whole
/// forward's `forward_ms`.
fn time_stages(
    implementation: &str,
    phase: &str,
    stages: &[Stage],
    device: &Device,
    iters: usize,
    forward_ms: f64,
) -> candle_core::Result<()> {
    let mut sum = 0.0;
    for stage in stages {
        let ms = time(device, iters, &stage.run)?;
        sum += ms;
        let tflops = match stage.flops {
            Some(flops) => format!(",\"tflops\":{:.1}", flops / (ms * 1e-3) / 1e12),
            None => String::new(),
        };
        println!(
            "{{\"bench\":\"llama_layer_stage\",\"impl\":\"{implementation}\",\"phase\":\"{phase}\",\"stage\":\"{}\",\"iters\":{iters},\"ms\":{ms:.4}{tflops}}}",
            stage.name,
        );
    }
    println!(
        "{{\"bench\":\"llama_layer_stage\",\"impl\":\"{implementation}\",\"phase\":\"{phase}\",\"stage\":\"sum\",\"iters\":{iters},\"ms\":{sum:.4},\"forward_ms\":{forward_ms:.4}}}"
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let iters: usize = match args.iter().position(|a| a == "--iters") {
        Some(i) => args.get(i + 1).ok_or("--iters needs a count")?.parse()?,
        None => 50,
    };
    let rounds: usize = match args.iter().position(|a| a == "--rounds") {
        Some(i) => args.get(i + 1).ok_or("--rounds needs a count")?.parse::<usize>()?.max(1),
        None => 1,
    };
    let flag = |name: &str| args.iter().any(|a| a == name);
    let stages = flag("--stages");
    if flag("--trace") {
        // The library only emits `tracing` events; showing them is the application's choice.
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(std::io::stderr)
            .with_target(false)
            .init();
    }
    let measure = flag("--measure");
    let tuned_options = if measure { BuildOptions::default().measure_partitionings() } else { BuildOptions::default() };
    let tuning = match args.iter().position(|a| a == "--tuning-store") {
        Some(i) => AutotuneOptions::default()
            .tuning_store(TuningFile::open(args.get(i + 1).ok_or("--tuning-store needs a path")?)?),
        None => AutotuneOptions::default(),
    };
    let tuned = flag("--autotune").then(|| Runner::with_autotune(PlanCache::in_memory(), tuned_options, tuning));
    let fusion = if measure { ",\"fusion\":\"measure\"" } else { "" };
    let device = Device::new_cuda(0)?;
    let cfg = Config::LLAMA3_8B;
    let layer = Layer::random(cfg, &device, 1)?;
    let runner = Runner::new();
    for case in CASES {
        let x = random(&[case.batch, case.tokens, cfg.hidden], 1.0, 5, &device)?;
        let (cos, sin) = layer.rope_tables(case.past, case.tokens, &device)?;
        let caches = if case.past > 0 { Some(layer.random_cache(case.batch, case.past, &device)?) } else { None };
        let (cache_candle, cache_graphs): (Option<&Cache>, Option<&Cache>) = match &caches {
            Some((c, g)) => (Some(c), Some(g)),
            None => (None, None),
        };
        // The graphs' first call builds their plans (cuDNN heuristics and compilation; with
        // autotuning, the timing of every candidate too).
        let mut graphs: Vec<(&str, &Runner, f64)> = Vec::new();
        for (name, r) in [("cudnn-graph", Some(&runner)), ("cudnn-graph-autotuned", tuned.as_ref())] {
            let Some(r) = r else { continue };
            let start = Instant::now();
            layer.forward_graphs(r, &x, &cos, &sin, cache_graphs)?;
            device.synchronize()?;
            graphs.push((name, r, start.elapsed().as_secs_f64() * 1e3));
        }
        let implementations: Vec<(&str, Option<(&Runner, f64)>)> =
            std::iter::once(("candle", None)).chain(graphs.iter().map(|g| (g.0, Some((g.1, g.2))))).collect();
        // Rounds of every implementation in turn; each implementation's median reported.
        let mut times = vec![Vec::with_capacity(rounds); implementations.len()];
        for _ in 0..rounds {
            for (k, (_, graph_runner)) in implementations.iter().enumerate() {
                times[k].push(time(&device, iters, || -> candle_core::Result<Tensor> {
                    match graph_runner {
                        None => layer.forward_candle(&x, &cos, &sin, cache_candle),
                        Some((r, _)) => layer.forward_graphs(r, &x, &cos, &sin, cache_graphs),
                    }
                })?);
            }
        }
        let mut results = Vec::new();
        for ((implementation, graph_runner), mut t) in implementations.into_iter().zip(times) {
            t.sort_by(f64::total_cmp);
            let (ms, min, max) = (t[t.len() / 2], t[0], t[t.len() - 1]);
            results.push(ms);
            println!(
                "{{\"bench\":\"llama_layer_forward\",\"impl\":\"{implementation}\",\"phase\":\"{}\",\"batch\":{},\"tokens\":{},\"past\":{},\"hidden\":{},\"heads\":{},\"kv_heads\":{},\"intermediate\":{},\"iters\":{iters},\"ms\":{ms:.4},\"rounds\":{rounds},\"min_ms\":{min:.4},\"max_ms\":{max:.4}{}}}",
                case.phase,
                case.batch,
                case.tokens,
                case.past,
                cfg.hidden,
                cfg.heads,
                cfg.kv_heads,
                cfg.intermediate,
                match graph_runner {
                    None => String::new(),
                    Some((_, first)) if implementation == "cudnn-graph-autotuned" => {
                        format!(",\"first_call_ms\":{first:.1}{fusion}")
                    }
                    Some((_, first)) => format!(",\"first_call_ms\":{first:.1}"),
                },
            );
        }
        println!(
            "{{\"bench\":\"llama_layer_forward\",\"phase\":\"{}\",\"speedup_vs_candle\":{:.3}}}",
            case.phase,
            results[0] / results[1]
        );
        if stages && case.phase == "prefill" {
            time_stages("candle", case.phase, &candle_stages(&layer, &x, &cos, &sin)?, &device, iters, results[0])?;
            for (k, (name, r, _)) in graphs.iter().enumerate() {
                time_stages(
                    name,
                    case.phase,
                    &graph_stages(&layer, r, &x, &cos, &sin)?,
                    &device,
                    iters,
                    results[1 + k],
                )?;
            }
        }
    }
    Ok(())
}
