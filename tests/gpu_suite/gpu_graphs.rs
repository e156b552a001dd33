//! On the GPU: `graph!` graphs built online through cuDNN, executed, and compared with the CPU
//! reference engine (relative error ≤ 2e-2 for bf16/f16, NaN never passes). Without a GPU each
//! test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_GPU=1` (set by the GPU bundle's
//! runner), which makes a missing GPU a failure.

#![cfg(feature = "cudnn")]

use crate::common;

use common::{random, relative_error};
use cudnn_graph::backend::{BuildOptions, DeviceBuffer};
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

    /// A bool output (device buffer: packed `Bits`).
    pub Greater(a: f32[16, 104], b: f32[16, 104]) -> (m: bool[16, 104]) {
        m = cmp_gt(a, b);
    }

    /// A bool input (packed `Bits` on the device) selecting between two tensors.
    pub Select(a: f16[16, 104], b: f16[16, 104], m: bool[16, 104]) -> (y: f16[16, 104]) {
        y = binary_select(a, b, m);
    }
}

/// `bool` ports through `graph!`: cuDNN reads and writes them as packed bits (`Bits`), 1664
/// elements in 208 bytes (rows of 104 bits: a bool tensor in memory needs byte-aligned rows);
/// both directions compared with the CPU reference element by element.
#[needs_gpu]
#[test]
fn gpu_bool_ports_are_packed_bits() {
    use cudnn_graph::Bits;
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (a, b) = (random::<f32>(40, 1664), random::<f32>(41, 1664));
    let g = Greater::new();
    let want = g.reference(GreaterInputs { a: &a, b: &b }).unwrap().m;
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let (a_d, b_d) = (stream.clone_htod(&a).unwrap(), stream.clone_htod(&b).unwrap());
    let mut got = Vec::new();
    for fill in [Bits(0), Bits(0xff)] {
        let mut m_d = stream.clone_htod(&vec![fill; Bits::units_for(1664)]).unwrap();
        let mut ws = common::workspace(&stream, plan.workspace_size());
        plan.execute(&cudnn, GreaterArgs { a: &a_d, b: &b_d, m: &mut m_d }, Some(&mut ws)).unwrap();
        got.push(Bits::unpack(&stream.clone_dtoh(&m_d).unwrap(), 1664));
    }
    let wrong = got[0].iter().zip(&got[1]).zip(&want).filter(|((x, y), w)| x != w || y != w).count();
    println!("cmp_gt → bool[16, 104], engine {}: {wrong} of 1664 differ", plan.plan().selected().tag());
    assert_eq!(wrong, 0);
    // One `bool` per element is refused, naming the tensor, before cuDNN writes a byte.
    let mut bytes = stream.clone_htod(&vec![false; 1664]).unwrap();
    let mut ws = common::workspace(&stream, plan.workspace_size());
    let io = &mut [DeviceBuffer::input(&a_d), DeviceBuffer::input(&b_d), DeviceBuffer::output(&mut bytes)];
    match plan.plan().execute(&cudnn, io, Some(&mut ws)).map_err(cudnn_graph::Error::from) {
        Err(cudnn_graph::Error::Arg(cudnn_graph::ArgError::UnpackedBool { tensor })) => assert_eq!(tensor, "m"),
        other => panic!("a bool buffer of bytes: {other:?}"),
    }

    let (x, y) = (random::<f16>(42, 1664), random::<f16>(43, 1664));
    let g = Select::new();
    let want = g.reference(SelectInputs { a: &x, b: &y, m: &want }).unwrap().y;
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let (x_d, y_d) = (stream.clone_htod(&x).unwrap(), stream.clone_htod(&y).unwrap());
    let m_d = stream.clone_htod(&Bits::pack(&got[0])).unwrap();
    let mut out_d = stream.clone_htod(&vec![f16::NAN; 1664]).unwrap();
    let mut ws = common::workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, SelectArgs { a: &x_d, b: &y_d, m: &m_d, y: &mut out_d }, Some(&mut ws)).unwrap();
    let out = stream.clone_dtoh(&out_d).unwrap();
    let wrong = out.iter().zip(&want).filter(|(o, w)| o.to_bits() != w.to_bits()).count();
    println!(
        "binary_select with a bool[16, 104] mask, engine {}: {wrong} of 1664 differ",
        plan.plan().selected().tag()
    );
    assert_eq!(wrong, 0);
}

/// (batch, M, N, K): square, non-square, batched, tall-skinny with K not a power of two.
const SHAPES: &[(usize, usize, usize, usize)] =
    &[(1, 128, 128, 128), (1, 128, 256, 64), (4, 96, 72, 160), (2, 256, 128, 512), (1, 1000, 24, 40)];

const TOLERANCE: f64 = 2e-2;

macro_rules! epilogue_case {
    ($test:ident, $graph:ident, $inputs:ident, $args:ident, $t:ty, [$($bias:ident, $bias_d:ident)?]) => {
        #[needs_gpu]
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

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
