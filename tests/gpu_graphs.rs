//! On the GPU: `graph!` graphs built online through cuDNN, executed, and compared with the CPU
//! reference engine (relative error ≤ 2e-2 for bf16/f16, NaN never passes). Without a GPU each
//! test prints why and passes, unless `CUDNN_GRAPH_REQUIRE_GPU=1` (set by the GPU bundle's
//! runner), which makes a missing GPU a failure.

#![cfg(feature = "cudnn")]

mod common;

use common::{random, relative_error};
use cudnn_graph::backend::BuildOptions;
use cudnn_graph::graph;
use half::{bf16, f16};

graph! {
    pub MatmulBiasRelu<dyn B, dyn M, dyn N, dyn K>(
        a: bf16[B, M, K],
        b: bf16[B, K, N],
        bias: bf16[1, 1, N],
    ) -> (y: bf16[B, M, N]) {
        y = relu(add(matmul(a, b), bias));
    }

    /// B broadcast over A's batch.
    pub MatmulBiasReluBcast<dyn B, dyn M, dyn N, dyn K>(
        a: bf16[B, M, K],
        b: bf16[1, K, N],
        bias: bf16[1, 1, N],
    ) -> (y: bf16[B, M, N]) {
        y = relu(add(matmul(a, b), bias));
    }

    pub MatmulGelu<dyn B, dyn M, dyn N, dyn K>(a: bf16[B, M, K], b: bf16[B, K, N]) -> (y: bf16[B, M, N]) {
        y = gelu(matmul(a, b));
    }

    pub MatmulBiasReluF16<dyn B, dyn M, dyn N, dyn K>(
        a: f16[B, M, K],
        b: f16[B, K, N],
        bias: f16[1, 1, N],
    ) -> (y: f16[B, M, N]) {
        y = relu(add(matmul(a, b), bias));
    }

    pub MatmulGeluF16<dyn B, dyn M, dyn N, dyn K>(a: f16[B, M, K], b: f16[B, K, N]) -> (y: f16[B, M, N]) {
        y = gelu(matmul(a, b));
    }
}

/// (batch, M, N, K): square, non-square, batched, tall-skinny with K not a power of two.
const SHAPES: &[(usize, usize, usize, usize)] =
    &[(1, 128, 128, 128), (1, 128, 256, 64), (4, 96, 72, 160), (2, 256, 128, 512), (1, 1000, 24, 40)];

const TOLERANCE: f64 = 2e-2;

macro_rules! epilogue_case {
    ($test:ident, $graph:ident, $inputs:ident, $args:ident, $t:ty, [$($bias:ident, $bias_d:ident)?]) => {
        #[test]
        fn $test() {
            let Some((stream, cudnn)) = common::gpu() else { return };
            for (i, &(batch, m, n, k)) in SHAPES.iter().enumerate() {
                let g = $graph::new(batch, m, n, k);
                let bb = if stringify!($graph).ends_with("Bcast") { 1 } else { batch };
                let a = random::<$t>(10 + i as u64, batch * m * k);
                let b = random::<$t>(20 + i as u64, bb * k * n);
                $(let $bias = random::<$t>(30 + i as u64, n);)?
                let want = g.reference($inputs { a: &a, b: &b, $($bias: &$bias)? }).unwrap().y;
                let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
                let a_d = stream.clone_htod(&a).unwrap();
                let b_d = stream.clone_htod(&b).unwrap();
                $(let $bias_d = stream.clone_htod(&$bias).unwrap();)?
                // Poisoned output: every element must be written.
                let mut y_d = stream.clone_htod(&vec![<$t>::NAN; batch * m * n]).unwrap();
                let mut ws = stream.alloc_zeros::<u8>(plan.workspace_size().max(1)).unwrap();
                plan.execute(&cudnn, $args { a: &a_d, b: &b_d, $($bias: &$bias_d,)? y: &mut y_d }, Some(&mut ws)).unwrap();
                let got = stream.clone_dtoh(&y_d).unwrap();
                let err = relative_error(&got, &want);
                println!(
                    "{}: [{batch},{m},{k}] x [{bb},{k},{n}] engine {} relative error {err:.3e}",
                    stringify!($test),
                    plan.plan().selected().tag(),
                );
                assert!(err <= TOLERANCE, "{} shape #{i}: relative error {err}", stringify!($test));
            }
        }
    };
}

epilogue_case!(
    gpu_matmul_bias_relu_bf16,
    MatmulBiasRelu,
    MatmulBiasReluInputs,
    MatmulBiasReluArgs,
    bf16,
    [bias, bias_d]
);
epilogue_case!(
    gpu_matmul_bias_relu_bf16_broadcast_b,
    MatmulBiasReluBcast,
    MatmulBiasReluBcastInputs,
    MatmulBiasReluBcastArgs,
    bf16,
    [bias, bias_d]
);
epilogue_case!(gpu_matmul_gelu_bf16, MatmulGelu, MatmulGeluInputs, MatmulGeluArgs, bf16, []);
epilogue_case!(
    gpu_matmul_bias_relu_f16,
    MatmulBiasReluF16,
    MatmulBiasReluF16Inputs,
    MatmulBiasReluF16Args,
    f16,
    [bias, bias_d]
);
epilogue_case!(gpu_matmul_gelu_f16, MatmulGeluF16, MatmulGeluF16Inputs, MatmulGeluF16Args, f16, []);
