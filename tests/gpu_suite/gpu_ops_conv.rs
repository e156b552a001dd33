//! On the GPU: convolutions and pooling declared with `graph!` (every port `channels_last`, as
//! cuDNN's fused convolution engines want: host buffers are NHWC), built online through cuDNN,
//! executed, and compared output by output with the CPU reference engine (relative error ≤ 2e-2,
//! NaN never passes; the figures are printed).
//!
//! Without a GPU each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_GPU=1`.

#![cfg(feature = "cudnn")]

use crate::common;

use common::{check, poisoned, uniform, upload, workspace};
use cudnn_graph::backend::BuildOptions;
use cudnn_graph::graph;
use half::f16;

graph! {
    /// conv fprop + bias + relu, NHWC f16 (cudnn-frontend's `conv_bias_relu` pattern).
    pub ConvBiasRelu<dyn N, const C: usize, const K: usize, dyn H, dyn W>(
        x: f16[N, C, H, W] channels_last,
        w: f16[K, C, 3, 3] channels_last,
        bias: f16[1, K, 1, 1] channels_last,
    ) -> (y: f16[N, K, H, W] channels_last) {
        y = relu(add(conv_fprop(x, w, padding = [1, 1]), bias));
    }

    /// A strided, dilated convolution in convolution mode (the filter flipped).
    pub ConvStrided<dyn N, dyn C, dyn K, dyn H, dyn W, dyn P, dyn Q>(x: f16[N, C, H, W] channels_last, w: f16[K, C, 3, 3] channels_last) -> (y: f16[N, K, P, Q] channels_last) {
        y = conv_fprop(x, w, padding = [1, 1], stride = [2, 2], dilation = [2, 2], mode = convolution);
    }

    /// The data gradient through a ReLU: `relu_bwd(conv_dgrad(dy, w), x)`.
    pub DgradDrelu<dyn N, dyn C, dyn K, dyn H, dyn W>(dy: f16[N, K, H, W] channels_last, w: f16[K, C, 3, 3] channels_last, x: f16[N, C, H, W] channels_last)
        -> (dx: f16[N, C, H, W] channels_last)
    {
        dx = relu_bwd(conv_dgrad(dy, w, padding = [1, 1]), x);
    }

    /// The filter gradient, in f32.
    pub Wgrad<dyn N, dyn C, dyn K, dyn H, dyn W>(x: f16[N, C, H, W] channels_last, dy: f16[N, K, H, W] channels_last) -> (dw: f32[K, C, 3, 3] channels_last) {
        dw = conv_wgrad(x, dy, padding = [1, 1], filter = [3, 3]);
    }

    /// 2×2 max pooling.
    pub MaxPool<dyn N, dyn C, dyn H, dyn W, dyn P, dyn Q>(x: f16[N, C, H, W] channels_last) -> (y: f16[N, C, P, Q] channels_last) {
        y = resample(x, mode = maxpool, window = [2, 2]);
    }

    /// 2×2 max pooling with the index of each maximum.
    pub MaxPoolIndex<dyn N, dyn C, dyn H, dyn W, dyn P, dyn Q>(x: f16[N, C, H, W] channels_last) -> (y: f16[N, C, P, Q] channels_last, idx: i8[N, C, P, Q] channels_last) {
        (y, idx) = resample(x, mode = maxpool, window = [2, 2], index = true);
    }

    /// 3×3 average pooling, stride 2, padding 1, padding excluded from the average.
    pub AvgPool<dyn N, dyn C, dyn H, dyn W, dyn P, dyn Q>(x: f16[N, C, H, W] channels_last) -> (y: f16[N, C, P, Q] channels_last) {
        y = resample(x, mode = avgpool_exclude_padding, window = [3, 3], stride = [2, 2], padding = [1, 1]);
    }
}

#[needs_gpu]
#[test]
fn gpu_conv_bias_relu_f16() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (n, h, w) = (8usize, 56usize, 56usize);
    let g = ConvBiasRelu::<64, 128>::new(n, h, w);
    let x = uniform::<f16>(1, n * 64 * h * w, -1.0, 1.0);
    let wt = uniform::<f16>(2, 128 * 64 * 9, -0.1, 0.1);
    let bias = uniform::<f16>(3, 128, -0.5, 0.5);
    let want = g.reference(ConvBiasReluInputs { x: &x, w: &wt, bias: &bias }).unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let (x_d, w_d, b_d) = (upload(&stream, &x), upload(&stream, &wt), upload(&stream, &bias));
    let mut y_d = poisoned::<f16>(&stream, want.y.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, ConvBiasReluArgs { x: &x_d, w: &w_d, bias: &b_d, y: &mut y_d }, Some(&mut ws)).unwrap();
    let case = format!(
        "conv_bias_relu f16 NHWC [{n}, 64, {h}, {w}] * [128, 64, 3, 3], engine {}",
        plan.plan().selected().tag()
    );
    check(&case, "y", &stream.clone_dtoh(&y_d).unwrap(), &want.y);
}

#[needs_gpu]
#[test]
fn gpu_conv_strided_dilated_convolution_mode() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (n, c, k, h, w) = (4usize, 32usize, 64usize, 33usize, 31usize);
    let g = ConvStrided::new(n, c, k, h, w, 16, 15);
    let x = uniform::<f16>(4, n * c * h * w, -1.0, 1.0);
    let wt = uniform::<f16>(5, k * c * 9, -0.2, 0.2);
    let want = g.reference(ConvStridedInputs { x: &x, w: &wt }).unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let (x_d, w_d) = (upload(&stream, &x), upload(&stream, &wt));
    let mut y_d = poisoned::<f16>(&stream, want.y.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, ConvStridedArgs { x: &x_d, w: &w_d, y: &mut y_d }, Some(&mut ws)).unwrap();
    let case = format!("conv_fprop stride 2 dilation 2 convolution mode, engine {}", plan.plan().selected().tag());
    check(&case, "y", &stream.clone_dtoh(&y_d).unwrap(), &want.y);
}

#[needs_gpu]
#[test]
fn gpu_dgrad_drelu_and_wgrad() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (n, c, k, h, w) = (8usize, 32usize, 64usize, 28usize, 28usize);
    let dy = uniform::<f16>(6, n * k * h * w, -1.0, 1.0);
    let wt = uniform::<f16>(7, k * c * 9, -0.2, 0.2);
    let x = uniform::<f16>(8, n * c * h * w, -1.0, 1.0);

    let g = DgradDrelu::new(n, c, k, h, w);
    let want = g.reference(DgradDreluInputs { dy: &dy, w: &wt, x: &x }).unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let (dy_d, w_d, x_d) = (upload(&stream, &dy), upload(&stream, &wt), upload(&stream, &x));
    let mut dx_d = poisoned::<f16>(&stream, want.dx.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, DgradDreluArgs { dy: &dy_d, w: &w_d, x: &x_d, dx: &mut dx_d }, Some(&mut ws)).unwrap();
    let case = format!("dgrad + drelu f16 [{n}, {k}, {h}, {w}], engine {}", plan.plan().selected().tag());
    check(&case, "dx", &stream.clone_dtoh(&dx_d).unwrap(), &want.dx);

    let g = Wgrad::new(n, c, k, h, w);
    let want = g.reference(WgradInputs { x: &x, dy: &dy }).unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let mut dw_d = poisoned::<f32>(&stream, want.dw.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, WgradArgs { x: &x_d, dy: &dy_d, dw: &mut dw_d }, Some(&mut ws)).unwrap();
    let case = format!("wgrad f16 -> f32 [{k}, {c}, 3, 3], engine {}", plan.plan().selected().tag());
    check(&case, "dw", &stream.clone_dtoh(&dw_d).unwrap(), &want.dw);
}

#[needs_gpu]
#[test]
fn gpu_pooling() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (n, c, h, w) = (8usize, 64usize, 56usize, 56usize);
    let x = uniform::<f16>(9, n * c * h * w, -2.0, 2.0);
    let x_d = upload(&stream, &x);

    let g = MaxPool::new(n, c, h, w, 28, 28);
    let want = g.reference(MaxPoolInputs { x: &x }).unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let mut y_d = poisoned::<f16>(&stream, want.y.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, MaxPoolArgs { x: &x_d, y: &mut y_d }, Some(&mut ws)).unwrap();
    check("maxpool 2x2 f16", "y", &stream.clone_dtoh(&y_d).unwrap(), &want.y);

    let g = AvgPool::new(n, c, h, w, 28, 28);
    let want = g.reference(AvgPoolInputs { x: &x }).unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let mut y_d = poisoned::<f16>(&stream, want.y.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, AvgPoolArgs { x: &x_d, y: &mut y_d }, Some(&mut ws)).unwrap();
    check("avgpool 3x3 stride 2 exclude padding f16", "y", &stream.clone_dtoh(&y_d).unwrap(), &want.y);
}

/// The index output: Y checked as always; the indices must equal the reference's (the first
/// maximum, row-major in the window). cuDNN documents no encoding; this is the one it was
/// measured to use.
#[needs_gpu]
#[test]
fn gpu_maxpool_index() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (n, c, h, w) = (2usize, 16usize, 32usize, 32usize);
    let x = uniform::<f16>(11, n * c * h * w, -2.0, 2.0);
    let g = MaxPoolIndex::new(n, c, h, w, 16, 16);
    let want = g.reference(MaxPoolIndexInputs { x: &x }).unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let x_d = upload(&stream, &x);
    let mut y_d = poisoned::<f16>(&stream, want.y.len());
    let mut idx_d = stream.clone_htod(&vec![-1i8; want.idx.len()]).unwrap();
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, MaxPoolIndexArgs { x: &x_d, y: &mut y_d, idx: &mut idx_d }, Some(&mut ws)).unwrap();
    check("maxpool 2x2 with index f16", "y", &stream.clone_dtoh(&y_d).unwrap(), &want.y);
    let got = stream.clone_dtoh(&idx_d).unwrap();
    let same = got.iter().zip(&want.idx).filter(|(a, b)| a == b).count();
    println!(
        "maxpool index, engine {}: {same} of {} equal to the reference's; first 8 cuDNN {:?}, reference {:?}",
        plan.plan().selected().tag(),
        got.len(),
        &got[..8],
        &want.idx[..8]
    );
    // Measured on the H200 with cuDNN 9.19: the same encoding as the reference (the first
    // maximum's position in the window, row-major), every index equal.
    assert_eq!(same, got.len(), "cuDNN's indices differ from the reference's");
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
