//! The Llama layer of `examples/llama/layer.rs` on a GPU (feature `cuda`): attention and GEMM
//! epilogues as cuDNN graphs on candle's CUDA tensors, against candle's own CUDA implementation,
//! at Llama 3 8B's sizes (prefill of 2 × 128 tokens, then a decode step after 300 cached
//! positions), and the gradients of a prefill's loss through the training graphs' backward graphs
//! against candle's CUDA autograd of the same layer in f32. Without a GPU each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_GPU=1`.
//! candle-core links libcuda (cudarc `dynamic-linking`), so this binary needs a libcuda.so.1 to
//! start at all.

#![cfg(feature = "cuda")]

// Shared with the examples; each target uses part of it.
#[path = "../../examples/llama/layer.rs"]
#[allow(dead_code)]
mod layer;

use candle_core::{DType, Device, Tensor, Var};
use cudnn_graph_candle::Runner;
use layer::{random, Config, Layer};

fn gpu() -> Option<Device> {
    match Device::new_cuda(0) {
        Ok(device) => Some(device),
        Err(e) => {
            let required = std::env::var("CUDNN_GRAPH_REQUIRE_GPU").is_ok_and(|v| v == "1");
            assert!(!required, "CUDNN_GRAPH_REQUIRE_GPU=1 but: {e}");
            println!("skipped: {e}");
            None
        }
    }
}

fn relative_difference(a: &Tensor, b: &Tensor) -> f32 {
    let (a, b) = (a.to_dtype(DType::F32).unwrap(), b.to_dtype(DType::F32).unwrap());
    let diff = (a - &b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
    let scale = b.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
    assert!(diff.is_finite() && scale > 0.1, "difference {diff}, scale {scale}");
    diff / scale
}

#[needs_gpu]
#[test]
fn gpu_llama_layer_matches_candle() {
    let Some(device) = gpu() else { return };
    let cfg = Config::LLAMA3_8B;
    let layer = Layer::random(cfg, &device, 3).unwrap();
    let runner = Runner::new();

    let (b, s) = (2, 128);
    let x = random(&[b, s, cfg.hidden], 1.0, 5, &device).unwrap();
    let (cos, sin) = layer.rope_tables(0, s, &device).unwrap();
    let want = layer.forward_candle(&x, &cos, &sin, None).unwrap();
    let got = layer.forward_graphs(&runner, &x, &cos, &sin, None).unwrap();
    let d = relative_difference(&got, &want);
    println!("prefill [{b}, {s}]: relative difference {d:.2e}");
    assert!(d < 3e-2, "prefill: relative difference {d}");

    let past = 300;
    let (cache_candle, cache_graphs) = layer.random_cache(1, past, &device).unwrap();
    let x = random(&[1, 1, cfg.hidden], 1.0, 6, &device).unwrap();
    let (cos, sin) = layer.rope_tables(past, 1, &device).unwrap();
    let want = layer.forward_candle(&x, &cos, &sin, Some(&cache_candle)).unwrap();
    let got = layer.forward_graphs(&runner, &x, &cos, &sin, Some(&cache_graphs)).unwrap();
    let d = relative_difference(&got, &want);
    println!("decode after {past}: relative difference {d:.2e}");
    assert!(d < 3e-2, "decode: relative difference {d}");
}

#[needs_gpu]
#[test]
fn gpu_llama_layer_gradients_match_candle() {
    let Some(device) = gpu() else { return };
    let cfg = Config::LLAMA3_8B;
    let layer = Layer::random(cfg, &device, 4).unwrap();
    let runner = Runner::new();
    let (b, s) = (1, 256);
    let x = random(&[b, s, cfg.hidden], 1.0, 8, &device).unwrap();
    let (cos, sin) = layer.rope_tables(0, s, &device).unwrap();
    let r = random(&[b, s, cfg.hidden], 1.0, 9, &device).unwrap().to_dtype(DType::F32).unwrap();
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
    println!("training prefill [{b}, {s}]: output relative difference {d:.2e}");
    assert!(d < 3e-2, "output: relative difference {d}");
    let mut named = vec![("x", got.get(&xg).unwrap().clone(), want.get(&xc).unwrap().clone())];
    for ((name, g), (_, c)) in graph_weights.iter().zip(&candle_weights) {
        named.push((name, got.get(g).unwrap().clone(), want.get(c).unwrap().clone()));
    }
    for (name, got, want) in named {
        let d = relative_difference(&got, &want);
        println!("d_{name}: relative difference {d:.2e}");
        assert!(d < 5e-2, "d_{name}: relative difference {d}");
    }
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
