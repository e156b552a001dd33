//! A Llama-style decoder layer in candle whose attention and GEMM epilogues are cudnn-graph
//! types, against candle's own implementation of the same layer (`examples/llama/layer.rs`).
//!
//! ```text
//! cargo run -p cudnn-graph-candle --example llama_layer               # CPU, small shapes
//! cargo run -p cudnn-graph-candle --features cuda --release --example llama_layer -- --gpu
//! ```
//!
//! It runs a prefill of 6 tokens, then a decode step after a KV cache of 9 positions, and prints
//! each output's largest difference from candle's, relative to candle's largest value; then a
//! training prefill, and the largest difference of each gradient of its loss (input and weights)
//! through the graphs' backward graphs from candle's own autograd of the layer in f32. On the CPU
//! the graphs run on cudnn-graph's reference engine; with `--gpu` (and the `cuda` feature) on
//! cuDNN, at Llama 3 8B's sizes.

#[path = "llama/layer.rs"]
mod layer;

use candle_core::{DType, Device, Tensor, Var};
use cudnn_graph_candle::Runner;
use layer::{random, relative_difference, Config, Layer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = std::env::args().any(|a| a == "--gpu");
    let (device, cfg) = if gpu {
        (Device::new_cuda(0)?, Config::LLAMA3_8B)
    } else {
        (Device::Cpu, Config { hidden: 64, heads: 4, kv_heads: 2, intermediate: 96, eps: 1e-5, rope_theta: 10000.0 })
    };
    let layer = Layer::random(cfg, &device, 7)?;
    let runner = Runner::new();
    let (b, s, past) = (2, 6, 9);

    let x = random(&[b, s, cfg.hidden], 1.0, 1, &device)?;
    let (cos, sin) = layer.rope_tables(0, s, &device)?;
    let want = layer.forward_candle(&x, &cos, &sin, None)?;
    let got = layer.forward_graphs(&runner, &x, &cos, &sin, None)?;
    println!("prefill [{b}, {s}, {}]: relative difference {:.2e}", cfg.hidden, relative_difference(&got, &want)?);

    let (cache_candle, cache_graphs) = layer.random_cache(b, past, &device)?;
    let x = random(&[b, 1, cfg.hidden], 1.0, 2, &device)?;
    let (cos, sin) = layer.rope_tables(past, 1, &device)?;
    let want = layer.forward_candle(&x, &cos, &sin, Some(&cache_candle))?;
    let got = layer.forward_graphs(&runner, &x, &cos, &sin, Some(&cache_graphs))?;
    println!("decode after {past} positions: relative difference {:.2e}", relative_difference(&got, &want)?);

    // Training: loss = Σ y ⊙ r, its gradients by the graphs' backward graphs and by candle's.
    let x = random(&[b, s, cfg.hidden], 1.0, 3, &device)?;
    let (cos, sin) = layer.rope_tables(0, s, &device)?;
    let r = random(&[b, s, cfg.hidden], 1.0, 4, &device)?.to_dtype(DType::F32)?;
    let loss = |y: &Tensor| (y.to_dtype(DType::F32)? * &r)?.sum_all();
    let (graphs, graph_weights) = layer.trainable(DType::BF16)?;
    let xg = Var::from_tensor(&x)?;
    let got = loss(&graphs.forward_graphs_training(&runner, &xg, &cos, &sin)?)?.backward()?;
    let (candle, candle_weights) = layer.trainable(DType::F32)?;
    let xc = Var::from_tensor(&x.to_dtype(DType::F32)?)?;
    let (cos, sin) = (cos.to_dtype(DType::F32)?, sin.to_dtype(DType::F32)?);
    let want = loss(&candle.forward_candle_training(&xc, &cos, &sin)?)?.backward()?;
    let mut line = vec![("x", &xg, &xc)];
    line.extend(graph_weights.iter().zip(&candle_weights).map(|((name, g), (_, c))| (*name, g, c)));
    let missing = |name: &str| format!("no gradient for {name}");
    for (name, g, c) in line {
        let (g, c) = (got.get(g).ok_or_else(|| missing(name))?, want.get(c).ok_or_else(|| missing(name))?);
        println!("training prefill, d_{name}: relative difference {:.2e}", relative_difference(g, c)?);
    }
    Ok(())
}
