//! The Llama layer of `examples/llama/layer.rs` on the CPU: with its attention and GEMM
//! epilogues as cudnn-graph types (the reference engine), against candle's own implementation,
//! for a prefill and a decode step after a KV cache; and for training, the gradients of a prefill's
//! loss with respect to the input and every weight, through the graphs' backward graphs, against
//! candle's own autograd of the same layer. bf16 storage: the largest difference is bounded
//! relative to candle's largest value.

use crate::layer;

use candle_core::{DType, Device, Tensor, Var};
use cudnn_graph_candle::Runner;
use layer::{random, Config, Layer};

const SMALL: Config = Config { hidden: 64, heads: 4, kv_heads: 2, intermediate: 96, eps: 1e-5, rope_theta: 10000.0 };

/// [`layer::relative_difference`], asserting that candle's output is not nearly zero (a
/// comparison with zeros would prove nothing).
pub(crate) fn relative_difference(a: &Tensor, b: &Tensor) -> f32 {
    let scale = b.to_dtype(DType::F32).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap();
    let scale = scale.to_scalar::<f32>().unwrap();
    assert!(scale > 0.1, "candle's output is nearly zero ({scale}): the comparison would prove nothing");
    layer::relative_difference(a, b).unwrap()
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

#[test]
fn prefill_gradients_match_candles_autograd() {
    // The graphs in bf16 (their backward graphs on the reference engine), candle's own autograd
    // of the same layer in f32, on the same weights and input.
    let layer = Layer::random(SMALL, &Device::Cpu, 5).unwrap();
    let runner = Runner::new();
    let (b, s) = (2, 5);
    let x = random(&[b, s, SMALL.hidden], 1.0, 8, &Device::Cpu).unwrap();
    let (cos, sin) = layer.rope_tables(0, s, &Device::Cpu).unwrap();
    let r = random(&[b, s, SMALL.hidden], 1.0, 9, &Device::Cpu).unwrap().to_dtype(DType::F32).unwrap();
    let loss = |y: &Tensor| (y.to_dtype(DType::F32).unwrap() * &r).unwrap().sum_all().unwrap();

    let (graphs, graph_weights) = layer.trainable(DType::BF16).unwrap();
    let xg = Var::from_tensor(&x).unwrap();
    let y = graphs.forward_graphs_training(&runner, &xg, &cos, &sin).unwrap();
    let got = loss(&y).backward().unwrap();

    let (candle, candle_weights) = layer.trainable(DType::F32).unwrap();
    let xc = Var::from_tensor(&x.to_dtype(DType::F32).unwrap()).unwrap();
    let (cos32, sin32) = (cos.to_dtype(DType::F32).unwrap(), sin.to_dtype(DType::F32).unwrap());
    let want_y = candle.forward_candle_training(&xc, &cos32, &sin32).unwrap();
    let want = loss(&want_y).backward().unwrap();

    let d = relative_difference(&y, &want_y);
    println!("output: relative difference {d:.2e}");
    assert!(d < 2e-2, "output: relative difference {d}");
    let mut named = vec![("x", got.get(&xg).unwrap().clone(), want.get(&xc).unwrap().clone())];
    for ((name, g), (_, c)) in graph_weights.iter().zip(&candle_weights) {
        named.push((name, got.get(g).unwrap().clone(), want.get(c).unwrap().clone()));
    }
    for (name, got, want) in named {
        let d = relative_difference(&got, &want);
        println!("d_{name}: relative difference {d:.2e}");
        assert!(d < 3e-2, "d_{name}: relative difference {d}");
    }
}
