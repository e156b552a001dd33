//! What a filled tuning store saves (issue 34): the GEMMs of a Llama 3 8B layer's forward (Q/K/V
//! projection, output projection + residual, gate and up projections + SwiGLU, down projection +
//! residual; bf16, `--tokens` rows, 4096 by default) planned three ways, each in a process of its
//! own so that none inherits another's warm cuDNN:
//!
//! - `cold`: heuristics (`BuildOptions::default()`), what a first call costs without tuning;
//! - `tune`: every candidate and partitioning built and timed (`TuningFile::plan` with
//!   `BuildOptions::measure_partitionings()` on an empty store), recorded into the store;
//! - `hit`: the same from the filled store: each part built on its recorded engine, nothing timed.
//!
//! Each phase reports the host time to its plans (`first_call_ms`, the sum over the graphs) and
//! their device time (`device_us`, the sum of each plan's median, timed as autotuning times). One
//! JSON line per phase, then a summary; `--guard` exits 1 unless the hit's planning is within 10 %
//! of the cold one's and its device time within 2 % of the tuned one's (the issue's target).
//!
//! With `--device-properties DEVPROP.json` instead of `--gpu` it runs without a GPU, deviceless:
//! planning only (real cuDNN heuristics and plan compilation for the described GPU), no device
//! times, and the `tune` phase builds every candidate and partitioning but times nothing (it
//! records each part's heuristics' pick): what the planning half of each first call costs.
//!
//! ```text
//! cargo build --release --example tuning_store
//! target/release/examples/tuning_store --gpu [--tokens 4096] [--store PATH] [--guard]
//! target/release/examples/tuning_store --device-properties tests/fixtures/h200-devprop.json
//! ```

use std::process::Command;
use std::time::Instant;

use cudnn_graph::backend::{cuda_context, BuildOptions, Cudnn, ExecutionPlan};
use cudnn_graph::engines::{measure, AutotuneOptions, AutotuneReport, PartitioningTiming, TuneSource, TuningFile};
use cudnn_graph::ops::PointwiseMode;
use cudnn_graph::payload::plan::Expect;
use cudnn_graph::{DataType, Graph, GraphBuilder};
use serde_json::{json, Value};

type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

const E: i64 = 4096;
const KV: i64 = 1024;
const F: i64 = 14336;

/// The layer's GEMM graphs at `t` tokens.
fn graphs(t: i64) -> Result<Vec<Graph>> {
    let bf16 = DataType::BF16;
    let mut out = Vec::new();
    // Q, K and V in one GEMM.
    let mut g = GraphBuilder::new("qkv");
    let x = g.input("x", bf16, &[1, t, E])?;
    let w = g.input("w_qkv", bf16, &[1, E, E + 2 * KV])?;
    let y = g.matmul(x, w)?;
    g.output(y, "qkv", bf16)?;
    out.push(g.build()?);
    // Output projection and the residual.
    let mut g = GraphBuilder::new("o_proj_residual");
    let a = g.input("attn", bf16, &[1, t, E])?;
    let w = g.input("w_o", bf16, &[1, E, E])?;
    let r = g.input("residual", bf16, &[1, t, E])?;
    let y = g.matmul(a, w)?;
    let y = g.pointwise(PointwiseMode::Add, &[y.into(), r.into()])?;
    g.output(y, "y", bf16)?;
    out.push(g.build()?);
    // Gate and up projections, SwiGLU.
    let mut g = GraphBuilder::new("swiglu");
    let h = g.input("h", bf16, &[1, t, E])?;
    let wg = g.input("w_gate", bf16, &[1, E, F])?;
    let wu = g.input("w_up", bf16, &[1, E, F])?;
    let gate = g.matmul(h, wg)?;
    let gate = g.op("swish", &[gate.into()], &[])?[0];
    let up = g.matmul(h, wu)?;
    let y = g.pointwise(PointwiseMode::Mul, &[gate.into(), up.into()])?;
    g.output(y, "act", bf16)?;
    out.push(g.build()?);
    // Down projection and the residual.
    let mut g = GraphBuilder::new("down_residual");
    let a = g.input("act", bf16, &[1, t, F])?;
    let w = g.input("w_down", bf16, &[1, F, E])?;
    let r = g.input("residual", bf16, &[1, t, E])?;
    let y = g.matmul(a, w)?;
    let y = g.pointwise(PointwiseMode::Add, &[y.into(), r.into()])?;
    g.output(y, "y", bf16)?;
    out.push(g.build()?);
    Ok(out)
}

/// Deviceless "autotuning": nothing timed, each part's own choice kept, as a report.
fn untimed(plan: &mut ExecutionPlan) -> std::result::Result<AutotuneReport, cudnn_graph::backend::BackendError> {
    let selected: Vec<usize> = plan.parts().iter().map(|p| p.selected().index).collect();
    let parts = plan.parts().iter().map(|p| p.nodes().to_vec()).collect();
    Ok(AutotuneReport {
        timings: Vec::new(),
        failures: Vec::new(),
        selected: selected[0],
        previous: selected[0],
        selected_parts: selected.clone(),
        previous_parts: selected,
        partitionings: vec![PartitioningTiming { parts, median_us: None, timings: Vec::new() }],
        partitioning: 0,
        elapsed: std::time::Duration::ZERO,
    })
}

/// One phase, in this process: its JSON line. `devprop`: deviceless, planning only.
fn phase(name: &str, tokens: i64, store: &str, devprop: Option<&str>) -> Result<Value> {
    let start = Instant::now();
    let cudnn = match devprop {
        Some(path) => Cudnn::deviceless(&std::fs::read_to_string(path)?)?,
        None => Cudnn::new(cuda_context(0)?.default_stream())?,
    };
    let init_ms = start.elapsed().as_secs_f64() * 1e3;
    let tuning = AutotuneOptions::default();
    let file = TuningFile::open(store)?;
    let measured = BuildOptions::default().measure_partitionings();
    let mut plans = Vec::new();
    let (mut first_call_ms, mut device_us) = (0.0, 0.0);
    for graph in graphs(tokens)? {
        let start = Instant::now();
        let (plan, source) = match name {
            "cold" => (ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default())?, "heuristics".to_string()),
            _ => {
                let built = match devprop {
                    Some(_) => file.plan_with(&cudnn, &graph, &Expect::default(), &measured, untimed)?,
                    None => file.plan(&cudnn, &graph, &Expect::default(), &measured, &tuning)?,
                };
                for w in &built.warnings {
                    eprintln!("{}: {w}", graph.name);
                }
                let source = match built.source {
                    TuneSource::Store => "store",
                    TuneSource::Measured => "measured",
                };
                (built.plan, source.to_string())
            }
        };
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let us = match devprop {
            Some(_) => f64::NAN,
            None => measure(&cudnn, &plan, &tuning)?.median_us,
        };
        first_call_ms += ms;
        device_us += us;
        let engines: Vec<String> =
            plan.parts().iter().map(|p| format!("[{}] {}", p.nodes().join(", "), p.selected().tag())).collect();
        let us = (!us.is_nan()).then_some(us);
        plans.push(json!({"graph": graph.name, "build_ms": ms, "device_us": us, "source": source, "parts": engines}));
    }
    let device_us = (!device_us.is_nan()).then_some(device_us);
    Ok(json!({"bench": "tuning_store", "phase": name, "tokens": tokens, "init_ms": init_ms,
              "deviceless": devprop.is_some(), "first_call_ms": first_call_ms, "device_us": device_us, "plans": plans}))
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let tokens: i64 = value("--tokens").map(|t| t.parse()).transpose()?.unwrap_or(4096);
    let devprop = value("--device-properties");
    if !args.iter().any(|a| a == "--gpu") && devprop.is_none() {
        eprintln!("tuning_store times plans on a GPU: run it with --gpu (or plan only, with --device-properties FILE)");
        return Ok(());
    }
    if let Some(name) = value("--phase") {
        let store = value("--store").ok_or("--phase needs --store")?;
        println!("{}", phase(&name, tokens, &store, devprop.as_deref())?);
        return Ok(());
    }
    let store = value("--store").unwrap_or_else(|| {
        std::env::temp_dir().join(format!("tuning-store-{}.json", std::process::id())).display().to_string()
    });
    let _ = std::fs::remove_file(&store);
    let exe = std::env::current_exe()?;
    let mut results = Vec::new();
    for name in ["cold", "tune", "hit"] {
        let target: Vec<&str> = match &devprop {
            Some(path) => vec!["--device-properties", path],
            None => vec!["--gpu"],
        };
        let out = Command::new(&exe)
            .args(target)
            .args(["--phase", name, "--store", &store, "--tokens", &tokens.to_string()])
            .output()?;
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            return Err(format!("phase {name} failed").into());
        }
        let line = String::from_utf8(out.stdout)?;
        println!("{}", line.trim());
        results.push(serde_json::from_str::<Value>(line.trim())?);
    }
    let f = |i: usize, k: &str| results[i][k].as_f64().unwrap_or(f64::NAN);
    let (cold_ms, tune_ms, hit_ms) = (f(0, "first_call_ms"), f(1, "first_call_ms"), f(2, "first_call_ms"));
    let (cold_us, tune_us, hit_us) = (f(0, "device_us"), f(1, "device_us"), f(2, "device_us"));
    let all_hits = results[2]["plans"].as_array().is_some_and(|p| p.iter().all(|p| p["source"] == "store"));
    let summary = json!({"bench": "tuning_store", "phase": "summary", "tokens": tokens,
        "hit_over_cold_first_call": hit_ms / cold_ms, "tune_over_cold_first_call": tune_ms / cold_ms,
        "hit_over_tune_device": hit_us / tune_us, "tune_over_cold_device": tune_us / cold_us, "all_hits": all_hits});
    println!("{summary}");
    let guard = args.iter().any(|a| a == "--guard");
    if guard && (!all_hits || hit_ms > 1.10 * cold_ms || hit_us > 1.02 * tune_us) {
        eprintln!(
            "tuning_store guard failed: hits {all_hits}, first call {hit_ms:.0} ms against cold {cold_ms:.0} ms \
             (≤ 1.10×), device {hit_us:.1} µs against tuned {tune_us:.1} µs (≤ 1.02×)"
        );
        std::process::exit(1);
    }
    Ok(())
}
