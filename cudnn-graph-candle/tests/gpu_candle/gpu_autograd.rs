//! `Runner::run_with_backward` and host scalars on a GPU (feature `cuda`): the forward and
//! backward graphs on cuDNN, on candle's CUDA tensors, against candle's own CUDA autograd of the
//! same computation (in f64); RMSNorm's epsilon is a host scalar (a CPU tensor) throughout.
//! Without a GPU each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_GPU=1`. candle-core
//! links libcuda (cudarc `dynamic-linking`), so this binary needs a libcuda.so.1 to start at all.

#![cfg(feature = "cuda")]

// Shared with tests/suite/autograd.rs.
#[path = "../common/autograd.rs"]
mod cases;

use candle_core::{DType, Device, Tensor};
use cudnn_graph::backend::BuildOptions;
use cudnn_graph::engines::{AutotuneOptions, PlanCache};
use cudnn_graph_candle::Runner;

use cases::{check, tensor, RmsNorm};

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

#[needs_gpu]
#[test]
fn gpu_host_scalars_take_cpu_tensors() {
    let Some(device) = gpu() else { return };
    let (n, c) = (64, 256);
    let x = tensor(&[n, c], 1, DType::F32, &device).unwrap();
    let scale = tensor(&[1, c], 2, DType::F32, &device).unwrap();
    let graph = RmsNorm::new(n, c);
    // The autotuning runner times the plan with the scalar in host memory, where cuDNN reads it.
    let tuned = Runner::with_autotune(PlanCache::in_memory(), BuildOptions::default(), AutotuneOptions::default());
    for (name, runner) in [("plain", Runner::new()), ("autotuned", tuned)] {
        let run = |eps: &Tensor| runner.run(&graph, &[&x, &scale, eps]).unwrap().remove(0);
        // The same plan takes each execute's value.
        for eps in [1e-5f32, 0.5, 100.0] {
            let got = run(&Tensor::new(eps, &Device::Cpu).unwrap());
            let rms = (x.sqr().unwrap().mean_keepdim(1).unwrap() + f64::from(eps)).unwrap().sqrt().unwrap();
            let want = x.broadcast_div(&rms).unwrap().broadcast_mul(&scale).unwrap();
            let d = cases::relative(&got, &want).unwrap();
            println!("rmsnorm ({name} runner), eps {eps}: relative difference {d:.1e}");
            assert!(d < 1e-4, "{name}, eps {eps}: {d}");
        }
    }
    let runner = Runner::new();
    // A host scalar on the device is refused by name (reading it would wait for the device).
    let on_device = Tensor::new(1e-5f32, &device).unwrap();
    let e = runner.run(&graph, &[&x, &scale, &on_device]).unwrap_err().to_string();
    assert!(e.contains("input `eps` is a host scalar: give it a CPU tensor"), "{e}");
}

#[needs_gpu]
#[test]
fn gpu_rmsnorm_gradients_equal_candles_cuda_autograd() {
    let Some(device) = gpu() else { return };
    check("rmsnorm", &cases::rmsnorm(&Runner::new(), &device, 256, 1024).unwrap(), 1e-4);
}

#[needs_gpu]
#[test]
fn gpu_causal_attention_gradients_equal_candles_cuda_autograd() {
    let Some(device) = gpu() else { return };
    // Llama 3 8B's heads (32 over 8, head size 128), 256 positions.
    check("attention", &cases::attention(&Runner::new(), &device, 32, 8, 256, 128).unwrap(), 2e-2);
}

#[needs_gpu]
#[test]
fn gpu_gemm_epilogue_gradients_equal_candles_cuda_autograd() {
    let Some(device) = gpu() else { return };
    // cuDNN's f32 GEMMs may round through TF32 (10 bits of mantissa); the bias gradient is one
    // of them (a matmul by ones: `ir::column_sum_as_matmul`).
    check("dense", &cases::dense(&Runner::new(), &device, 128, 256, 512).unwrap(), 1e-2);
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
