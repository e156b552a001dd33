//! Times the Llama layer's forward (`examples/llama/layer.rs`) at Llama 3 8B's sizes (E = 4096,
//! 32 heads over 8 KV heads of 128, MLP 14336, bf16) on a GPU: candle's own CUDA implementation
//! against the same layer with its attention and GEMM epilogues as cudnn-graph types, for a decode
//! step (B = 1, one token after 4095 cached positions) and a prefill (B · S = 4096). One JSON
//! line per (phase, implementation); `docs/bench/llama_layer_torch.py` times PyTorch eager on the
//! same shapes.
//!
//! ```text
//! cargo build --release -p cudnn-graph-candle --features cuda --example llama_bench
//! target/release/examples/llama_bench [--iters 50]
//! ```

// Shared with llama_layer and the tests; the training half is not timed here.
#[path = "llama/layer.rs"]
#[allow(dead_code)]
mod layer;

use std::time::Instant;

use candle_core::{Device, Tensor};
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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let iters: usize = match args.iter().position(|a| a == "--iters") {
        Some(i) => args.get(i + 1).ok_or("--iters needs a count")?.parse()?,
        None => 50,
    };
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
        // The graphs' first call builds their plans (cuDNN heuristics and compilation).
        let start = Instant::now();
        layer.forward_graphs(&runner, &x, &cos, &sin, cache_graphs)?;
        device.synchronize()?;
        let first_call_ms = start.elapsed().as_secs_f64() * 1e3;
        let mut results = Vec::new();
        for implementation in ["candle", "cudnn-graph"] {
            let forward = || -> candle_core::Result<Tensor> {
                match implementation {
                    "candle" => layer.forward_candle(&x, &cos, &sin, cache_candle),
                    _ => layer.forward_graphs(&runner, &x, &cos, &sin, cache_graphs),
                }
            };
            for _ in 0..5 {
                forward()?;
            }
            device.synchronize()?;
            let start = Instant::now();
            for _ in 0..iters {
                forward()?;
            }
            device.synchronize()?;
            let ms = start.elapsed().as_secs_f64() * 1e3 / iters as f64;
            results.push(ms);
            println!(
                "{{\"bench\":\"llama_layer_forward\",\"impl\":\"{implementation}\",\"phase\":\"{}\",\"batch\":{},\"tokens\":{},\"past\":{},\"hidden\":{},\"heads\":{},\"kv_heads\":{},\"intermediate\":{},\"iters\":{iters},\"ms\":{ms:.4}{}}}",
                case.phase,
                case.batch,
                case.tokens,
                case.past,
                cfg.hidden,
                cfg.heads,
                cfg.kv_heads,
                cfg.intermediate,
                if implementation == "cudnn-graph" { format!(",\"first_call_ms\":{first_call_ms:.1}") } else { String::new() },
            );
        }
        println!(
            "{{\"bench\":\"llama_layer_forward\",\"phase\":\"{}\",\"speedup_vs_candle\":{:.3}}}",
            case.phase,
            results[0] / results[1]
        );
    }
    Ok(())
}
