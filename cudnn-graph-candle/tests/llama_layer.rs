//! The Llama layer of `examples/llama/layer.rs` on the CPU: with its attention and GEMM
//! epilogues as cudnn-graph types (the reference engine), against candle's own implementation,
//! for a prefill and a decode step after a KV cache. bf16 storage: the largest difference is
//! bounded relative to candle's largest output value.

// Shared with the examples; each target uses part of it.
#[path = "../examples/llama/layer.rs"]
#[allow(dead_code)]
mod layer;

use candle_core::{DType, Device, Tensor};
use cudnn_graph_candle::Runner;
use layer::{random, Config, Layer};

const SMALL: Config = Config { hidden: 64, heads: 4, kv_heads: 2, intermediate: 96, eps: 1e-5, rope_theta: 10000.0 };

fn relative_difference(a: &Tensor, b: &Tensor) -> f32 {
    let (a, b) = (a.to_dtype(DType::F32).unwrap(), b.to_dtype(DType::F32).unwrap());
    let diff = (a - &b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
    let scale = b.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
    assert!(scale > 0.1, "candle's output is nearly zero ({scale}): the comparison would prove nothing");
    diff / scale
}

#[test]
fn prefill_matches_candle() {
    let layer = Layer::random(SMALL, &Device::Cpu, 3).unwrap();
    let runner = Runner::new();
    let (b, s) = (2, 7);
    let x = random(&[b, s, SMALL.hidden], 1.0, 5, &Device::Cpu).unwrap();
    let (cos, sin) = layer.rope_tables(0, s, &Device::Cpu).unwrap();
    let want = layer.forward_candle(&x, &cos, &sin, None).unwrap();
    let got = layer.forward_graphs(&runner, &x, &cos, &sin, None).unwrap();
    assert_eq!(got.dims(), [b, s, SMALL.hidden]);
    let d = relative_difference(&got, &want);
    assert!(d < 2e-2, "relative difference {d}");
}

#[test]
fn decode_after_a_cache_matches_candle() {
    let layer = Layer::random(SMALL, &Device::Cpu, 4).unwrap();
    let runner = Runner::new();
    let (b, past) = (1, 11);
    let (cache_candle, cache_graphs) = layer.random_cache(b, past, &Device::Cpu).unwrap();
    let x = random(&[b, 1, SMALL.hidden], 1.0, 6, &Device::Cpu).unwrap();
    let (cos, sin) = layer.rope_tables(past, 1, &Device::Cpu).unwrap();
    let want = layer.forward_candle(&x, &cos, &sin, Some(&cache_candle)).unwrap();
    let got = layer.forward_graphs(&runner, &x, &cos, &sin, Some(&cache_graphs)).unwrap();
    let d = relative_difference(&got, &want);
    assert!(d < 2e-2, "relative difference {d}");
    // A prefill of 3 tokens after the same cache: bottom-right causal attention over 14 keys.
    let x = random(&[b, 3, SMALL.hidden], 1.0, 7, &Device::Cpu).unwrap();
    let (cos, sin) = layer.rope_tables(past, 3, &Device::Cpu).unwrap();
    let want = layer.forward_candle(&x, &cos, &sin, Some(&cache_candle)).unwrap();
    let got = layer.forward_graphs(&runner, &x, &cos, &sin, Some(&cache_graphs)).unwrap();
    let d = relative_difference(&got, &want);
    assert!(d < 2e-2, "relative difference {d}");
}
