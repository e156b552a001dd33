//! fp8 attention forward and backward on the GPU (issue 20): `sdpa` and `sdpa_backward` with
//! `fp8 = e4m3`, causal (top-left) and not, as `shared/bench/anchor_cudnn_frontend.py --only
//! sdpa_fp8` measures cudnn-frontend's `sdpa_fp8` and `sdpa_fp8_backward` (cases
//! `sdpa_fp8_fwd_b4_h16_s4096_d128[_causal]`, `sdpa_fp8_bwd_b4_h16_s4096_d128[_causal]`): Q, K, V,
//! O (and dO, dQ, dK, dV) e4m3 in BSHD memory (logical `[B, H, S, D]`, strides
//! `[S·H·D, D, H·D, 1]`), the scales `f32[1, 1, 1, 1]` on the device, the amaxes written; the
//! forward without Stats, the backward with `Stats: f32[B, H, S, 1]`. FLOPs `4·B·H·S²·D` forward
//! and 2.5 times that backward (half of each causal), the anchor's counts. See
//! `docs/benchmarks.md`.
//!
//! ```text
//! cargo run --release --example bench_fp8_sdpa -- [--json PATH] [--b 4] [--h 16] [--s 4096] [--d 128]
//!     [--layout bshd|bhsd] [--pass fwd|bwd]
//! ```
//!
//! `--layout bhsd` lays every `[B, H, S, D]` tensor out head-major instead (strides
//! `[H·S·D, S·D, D, 1]`, case names ending `_bhsd`); `--pass` times one direction only.
//!
//! Each graph is timed with [`measure`] (CUDA events around batches of back-to-back executes, the
//! median of stable samples, on scratch buffers of random values) two ways:
//!
//! - `cudnn-graph`: the heuristics' pick (default `BuildOptions`);
//! - `cudnn-graph-autotuned`: every candidate of heuristics A, B and fallback built and
//!   [`autotune`]d;
//!
//! and `cudnn-graph-best` is the faster. Every figure is one JSON object per line on stdout (and
//! in `--json PATH`), in the schema of `examples/bench.rs` and the anchor script (`case`, `impl`,
//! `gpu_ms`, `tflops`, `engine`, ...), so the rows sit beside cudnn-frontend's.

use cudnn_graph::backend::Cudnn;
use cudnn_graph::ops::AttrValue;
use cudnn_graph::{DataType, Graph, GraphBuilder, GraphError, Operand};
use serde_json::json;

#[path = "common/json_lines.rs"]
mod json_lines;
#[path = "common/tuning.rs"]
mod tuning;
use json_lines::Out;
use tuning::{pick_and_autotune, Best, Result};

/// `[b, h, s, d]`, the memory layout, and which passes.
struct Args {
    json: Option<String>,
    shape: [i64; 4],
    bhsd: bool,
    pass: Option<String>,
}

fn args() -> Result<Args> {
    let mut a = Args { json: None, shape: [4, 16, 4096, 128], bhsd: false, pass: None };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut dim = |i: usize| -> Result<()> {
            a.shape[i] = it.next().ok_or_else(|| format!("{arg} needs a number"))?.parse()?;
            Ok(())
        };
        match arg.as_str() {
            "--b" => dim(0)?,
            "--h" => dim(1)?,
            "--s" => dim(2)?,
            "--d" => dim(3)?,
            "--json" => a.json = Some(it.next().ok_or("--json needs a path")?),
            "--layout" => match it.next().as_deref() {
                Some("bshd") => a.bhsd = false,
                Some("bhsd") => a.bhsd = true,
                _ => return Err("--layout needs bshd or bhsd".into()),
            },
            "--pass" => match it.next() {
                Some(p) if p == "fwd" || p == "bwd" => a.pass = Some(p),
                _ => return Err("--pass needs fwd or bwd".into()),
            },
            other => return Err(format!("unknown argument {other}; see the top of examples/bench_fp8_sdpa.rs").into()),
        }
    }
    Ok(a)
}

/// The strides of a `[B, H, S, D]` tensor: BSHD (`bhsd` false) or BHSD memory.
fn strides([_, h, s, d]: [i64; 4], bhsd: bool) -> [i64; 4] {
    if bhsd {
        [h * s * d, s * d, d, 1]
    } else {
        [s * h * d, d, h * d, 1]
    }
}

/// fp8 attention over e4m3 Q, K, V into an e4m3 O (`layout` strides), with both amaxes.
fn fp8_sdpa(name: &str, shape: [i64; 4], layout: [i64; 4], causal: bool) -> Result<Graph, GraphError> {
    let [b, h, s, d] = shape;
    let mut g = GraphBuilder::new(name);
    let mut ins: Vec<Operand> = Vec::new();
    for n in ["q", "k", "v"] {
        let t = g.input(n, DataType::Fp8E4M3, &[b, h, s, d])?;
        g.set_strides(t, &layout)?;
        ins.push(t.into());
    }
    for n in ["descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o"] {
        ins.push(g.input(n, DataType::F32, &[1, 1, 1, 1])?.into());
    }
    let mut attrs: Vec<(String, AttrValue)> = vec![("fp8".into(), "e4m3".into())];
    if causal {
        attrs.push(("causal".into(), true.into()));
    }
    let outs = g.op("sdpa", &ins, &attrs)?;
    let o = g.output(outs[0], "o", DataType::Fp8E4M3)?;
    g.set_strides(o, &layout)?;
    g.output(outs[1], "amax_s", DataType::F32)?;
    g.output(outs[2], "amax_o", DataType::F32)?;
    g.build()
}

/// fp8 attention's backward over e4m3 Q, K, V, O, dO into e4m3 dQ, dK, dV (`layout` strides),
/// with the four amaxes.
fn fp8_sdpa_backward(name: &str, shape: [i64; 4], layout: [i64; 4], causal: bool) -> Result<Graph, GraphError> {
    let [b, h, s, d] = shape;
    let mut g = GraphBuilder::new(name);
    let mut ins: Vec<Operand> = Vec::new();
    for n in ["q", "k", "v", "o", "d_o"] {
        let t = g.input(n, DataType::Fp8E4M3, &[b, h, s, d])?;
        g.set_strides(t, &layout)?;
        ins.push(t.into());
    }
    ins.push(g.input("stats", DataType::F32, &[b, h, s, 1])?.into());
    for n in cudnn_graph::ops::sdpa::FP8_BACKWARD_INPUTS {
        ins.push(g.input(&n.to_lowercase(), DataType::F32, &[1, 1, 1, 1])?.into());
    }
    let mut attrs: Vec<(String, AttrValue)> = vec![("fp8".into(), "e4m3".into())];
    if causal {
        attrs.push(("causal".into(), true.into()));
    }
    let outs = g.op("sdpa_backward", &ins, &attrs)?;
    for (t, n) in outs[..3].iter().zip(["dq", "dk", "dv"]) {
        let t = g.output(*t, n, DataType::Fp8E4M3)?;
        g.set_strides(t, &layout)?;
    }
    for (t, n) in outs[3..].iter().zip(["amax_dq", "amax_dk", "amax_dv", "amax_dp"]) {
        g.output(*t, n, DataType::F32)?;
    }
    g.build()
}

/// Times `graph` both ways (rows under `case`) and records the better.
fn tune(out: &mut Out, cudnn: &Cudnn, case: &str, graph: &Graph, flops: f64) -> Result<()> {
    let mut best = None;
    pick_and_autotune(out, cudnn, case, graph, Some(flops), &mut best)?;
    let Best { us, how } = best.ok_or_else(|| format!("{case}: nothing ran"))?;
    out.record(
        case,
        "cudnn-graph-best",
        json!({"gpu_ms": us * 1e-3, "tflops": flops / (us * 1e-6) / 1e12, "how": how}),
    );
    Ok(())
}

fn main() -> Result<()> {
    let args = args()?;
    let mut out = Out::create(args.json.as_ref())?;
    if !cudnn_graph::backend::libraries_present() {
        return Err("the benchmark needs libcudnn and a GPU driver".into());
    }
    let ctx = cudnn_graph::backend::cuda_context(0)?;
    let cudnn = Cudnn::new(ctx.default_stream())?;
    let [b, h, s, d] = args.shape;
    out.record(
        "env",
        "cudnn-graph",
        json!({"cudnn_version": cudnn.version(), "sm": cudnn.sm(), "gpu": ctx.name().ok(), "shape": args.shape}),
    );
    type Build = fn(&str, [i64; 4], [i64; 4], bool) -> Result<Graph, GraphError>;
    let passes: [(&str, Build, f64); 2] = [("fwd", fp8_sdpa, 1.0), ("bwd", fp8_sdpa_backward, 2.5)];
    let layout = strides(args.shape, args.bhsd);
    for (pass, build, flop_factor) in passes {
        if args.pass.as_ref().is_some_and(|p| p != pass) {
            continue;
        }
        for causal in [false, true] {
            let case = format!(
                "sdpa_fp8_{pass}_b{b}_h{h}_s{s}_d{d}{}{}",
                if causal { "_causal" } else { "" },
                if args.bhsd { "_bhsd" } else { "" }
            );
            let flops = flop_factor * 4.0 * (b * h * s * s * d) as f64 * if causal { 0.5 } else { 1.0 };
            let result = build(&case, args.shape, layout, causal)
                .map_err(Into::into)
                .and_then(|g| tune(&mut out, &cudnn, &case, &g, flops));
            if let Err(e) = result {
                out.record(&case, "cudnn-graph", json!({"error": e.to_string()}));
            }
        }
    }
    Ok(())
}
