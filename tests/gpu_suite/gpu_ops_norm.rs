//! On the GPU: the normalizations declared with `graph!`, built online through cuDNN, executed,
//! and compared output by output with the CPU reference engine (relative error ≤ 2e-2, NaN never
//! passes; the figures are printed). The 16384 × 4096 layer norm is compared on a sample of rows
//! (rows are independent: the reference runs the same graph type bound to the sampled rows).
//!
//! Without a GPU each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_GPU=1` (set by the
//! GPU bundle's runner), which makes a missing GPU a failure.

#![cfg(feature = "cudnn")]

use crate::common;

use common::{check, poisoned, uniform, upload, workspace};
use cudnn_graph::backend::{BackendError, BuildOptions};
use cudnn_graph::{graph, Error};
use half::{bf16, f16};

graph! {
    /// Layer norm over the last dim, training: Y and the statistics.
    pub LnTrain<dyn N, dyn D>(x: bf16[N, D], scale: bf16[1, D], bias: bf16[1, D])
        -> (y: bf16[N, D], mean: f32[N, 1], inv_var: f32[N, 1])
    {
        let (out, m, v) = layernorm(x, scale, bias, 1e-5, phase = training);
        y = out;
        mean = m;
        inv_var = v;
    }

    /// Layer norm in cudnn-frontend's layout `[N, D, 1, 1]`, inference: Y only.
    pub LnInfer<dyn N, dyn D>(x: bf16[N, D, 1, 1], scale: bf16[1, D, 1, 1], bias: bf16[1, D, 1, 1])
        -> (y: bf16[N, D, 1, 1])
    {
        y = layernorm(x, scale, bias, 1e-5);
    }

    /// RMS norm, training.
    pub RmsTrain<dyn N, dyn D>(x: bf16[N, D], scale: bf16[1, D]) -> (y: bf16[N, D], inv_var: f32[N, 1]) {
        let (out, v) = rmsnorm(x, scale, 1e-6, phase = training);
        y = out;
        inv_var = v;
    }

    /// RMS norm with a bias, inference, f16.
    pub RmsBiasInfer<dyn N, dyn D>(x: f16[N, D], scale: f16[1, D], bias: f16[1, D]) -> (y: f16[N, D]) {
        y = rmsnorm_bias(x, scale, bias, 1e-6);
    }

    /// Batch norm, training, with running statistics (NCHW).
    pub BatchNormTrain<dyn N, dyn C, dyn H, dyn W>(
        x: f16[N, C, H, W],
        scale: f32[1, C, 1, 1],
        bias: f32[1, C, 1, 1],
        running_mean: f32[1, C, 1, 1],
        running_var: f32[1, C, 1, 1],
    ) -> (
        y: f16[N, C, H, W],
        mean: f32[1, C, 1, 1],
        inv_var: f32[1, C, 1, 1],
        next_mean: f32[1, C, 1, 1],
        next_var: f32[1, C, 1, 1],
    ) {
        let (out, m, v, nm, nv) = batchnorm(x, scale, bias, running_mean, running_var, 1e-5, 0.1);
        y = out;
        mean = m;
        inv_var = v;
        next_mean = nm;
        next_var = nv;
    }

    /// Instance norm, training (NCHW).
    pub InstanceNormTrain<dyn N, dyn C, dyn H, dyn W>(x: bf16[N, C, H, W], scale: f32[1, C, 1, 1], bias: f32[1, C, 1, 1])
        -> (y: bf16[N, C, H, W], mean: f32[N, C, 1, 1], inv_var: f32[N, C, 1, 1])
    {
        let (out, m, v) = instancenorm(x, scale, bias, 1e-5, phase = training);
        y = out;
        mean = m;
        inv_var = v;
    }

    /// Layer norm's backward, on statistics from the CPU reference's forward.
    pub LnBackward<dyn N, dyn D>(
        dy: bf16[N, D, 1, 1],
        x: bf16[N, D, 1, 1],
        scale: f32[1, D, 1, 1],
        mean: f32[N, 1, 1, 1],
        inv_var: f32[N, 1, 1, 1],
    ) -> (dx: bf16[N, D, 1, 1], dscale: f32[1, D, 1, 1], dbias: f32[1, D, 1, 1]) {
        let (a, b, c) = layernorm_backward(dy, x, scale, mean, inv_var);
        dx = a;
        dscale = b;
        dbias = c;
    }

    /// The same statistics' forward, for the backward test's inputs.
    pub LnTrain4<dyn N, dyn D>(x: bf16[N, D, 1, 1], scale: f32[1, D, 1, 1], bias: f32[1, D, 1, 1])
        -> (y: bf16[N, D, 1, 1], mean: f32[N, 1, 1, 1], inv_var: f32[N, 1, 1, 1])
    {
        let (out, m, v) = layernorm(x, scale, bias, 1e-5, phase = training);
        y = out;
        mean = m;
        inv_var = v;
    }

    /// RMS norm's backward, with or without dBias, on statistics computed here.
    pub RmsBackward<dyn N, dyn D>(
        dy: bf16[N, D, 1, 1],
        x: bf16[N, D, 1, 1],
        scale: f32[1, D, 1, 1],
        inv_var: f32[N, 1, 1, 1],
    ) -> (dx: bf16[N, D, 1, 1], dscale: f32[1, D, 1, 1]) {
        (dx, dscale) = rmsnorm_backward(dy, x, scale, inv_var);
    }

    pub RmsBiasBackward<dyn N, dyn D>(
        dy: f16[N, D, 1, 1],
        x: f16[N, D, 1, 1],
        scale: f32[1, D, 1, 1],
        inv_var: f32[N, 1, 1, 1],
    ) -> (dx: f16[N, D, 1, 1], dscale: f32[1, D, 1, 1], dbias: f32[1, D, 1, 1]) {
        (dx, dscale, dbias) = rmsnorm_backward(dy, x, scale, inv_var, dbias = true);
    }

    /// Batch norm's backward (NCHW), per-channel statistics.
    pub BnBackward<dyn N, dyn C, dyn H, dyn W>(
        dy: f16[N, C, H, W],
        x: f16[N, C, H, W],
        scale: f32[1, C, 1, 1],
        mean: f32[1, C, 1, 1],
        inv_var: f32[1, C, 1, 1],
    ) -> (dx: f16[N, C, H, W], dscale: f32[1, C, 1, 1], dbias: f32[1, C, 1, 1]) {
        (dx, dscale, dbias) = batchnorm_backward(dy, x, scale, mean, inv_var);
    }

    /// Instance norm's backward (NCHW), per-sample-and-channel statistics.
    pub InBackward<dyn N, dyn C, dyn H, dyn W>(
        dy: bf16[N, C, H, W],
        x: bf16[N, C, H, W],
        scale: f32[1, C, 1, 1],
        mean: f32[N, C, 1, 1],
        inv_var: f32[N, C, 1, 1],
    ) -> (dx: bf16[N, C, H, W], dscale: f32[1, C, 1, 1], dbias: f32[1, C, 1, 1]) {
        (dx, dscale, dbias) = instancenorm_backward(dy, x, scale, mean, inv_var);
    }

    /// cudnn-frontend's "BN_inference DRelu DBN": the inference batch norm's ReLU gradient,
    /// through batch norm's backward; channels-last, f16 intermediates (the only way cuDNN 9.19
    /// runs a `batchnorm_inference`).
    #[intermediate(f16)]
    pub BnInferDreluDbn<dyn N, dyn C, dyn H, dyn W>(
        x: f16[N, C, H, W] order [0, 2, 3, 1],
        dy: f16[N, C, H, W] order [0, 2, 3, 1],
        scale: f32[1, C, 1, 1],
        bias: f32[1, C, 1, 1],
        mean: f32[1, C, 1, 1],
        inv_var: f32[1, C, 1, 1],
    ) -> (dx: f16[N, C, H, W] order [0, 2, 3, 1], dscale: f32[1, C, 1, 1], dbias: f32[1, C, 1, 1]) {
        let y = batchnorm_inference(x, mean, inv_var, scale, bias);
        (dx, dscale, dbias) = batchnorm_backward(relu_bwd(dy, y), x, scale, mean, inv_var);
    }

    /// A convolution and its output's per-channel sum and sum of squares (the statistics a
    /// following batch norm needs), in one kernel: `y` is a graph output read by `genstats`.
    pub ConvGenstats<dyn N, dyn C, dyn K, dyn H, dyn W>(x: f16[N, C, H, W] channels_last, w: f16[K, C, 3, 3] channels_last)
        -> (y: f16[N, K, H, W] channels_last, sum: f32[1, K, 1, 1] channels_last, sq_sum: f32[1, K, 1, 1] channels_last)
    {
        y = conv_fprop(x, w, padding = [1, 1]);
        (sum, sq_sum) = genstats(y);
    }

    /// RMS norm feeding a matmul: one fused kernel if cuDNN fuses it.
    pub RmsMatmul<dyn M, dyn K, dyn N>(x: bf16[M, K], scale: bf16[1, K], w: bf16[K, N]) -> (y: bf16[M, N]) {
        y = matmul(rmsnorm(x, scale, 1e-5), w);
    }
}

#[needs_gpu]
#[test]
fn gpu_layernorm_bf16_training() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    for (i, &(n, d)) in [(256usize, 768usize), (1000, 1024), (64, 4096)].iter().enumerate() {
        let g = LnTrain::new(n, d);
        let x = uniform::<bf16>(10 + i as u64, n * d, -3.0, 3.0);
        let scale = uniform::<bf16>(20 + i as u64, d, 0.5, 1.5);
        let bias = uniform::<bf16>(30 + i as u64, d, -1.0, 1.0);
        let want = g.reference(LnTrainInputs { x: &x, scale: &scale, bias: &bias }).unwrap();
        let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
        let (x_d, s_d, b_d) = (upload(&stream, &x), upload(&stream, &scale), upload(&stream, &bias));
        let (mut y_d, mut m_d, mut v_d) =
            (poisoned::<bf16>(&stream, n * d), poisoned::<f32>(&stream, n), poisoned::<f32>(&stream, n));
        let mut ws = workspace(&stream, plan.workspace_size());
        let args = LnTrainArgs { x: &x_d, scale: &s_d, bias: &b_d, y: &mut y_d, mean: &mut m_d, inv_var: &mut v_d };
        plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
        let case = format!("layernorm bf16 training [{n}, {d}] engine {}", plan.plan().selected().tag());
        check(&case, "y", &stream.clone_dtoh(&y_d).unwrap(), &want.y);
        check(&case, "mean", &stream.clone_dtoh(&m_d).unwrap(), &want.mean);
        check(&case, "inv_var", &stream.clone_dtoh(&v_d).unwrap(), &want.inv_var);
    }
}

/// The anchor's size, bf16 16384 × 4096 (`[N, D, 1, 1]`, inference, as cudnn-frontend's benchmark
/// runs it) and rank 2 in training; compared with the reference on 128 sampled rows.
#[needs_gpu]
#[test]
fn gpu_layernorm_bf16_16384x4096() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (n, d) = (16384usize, 4096usize);
    let x = uniform::<bf16>(40, n * d, -2.0, 2.0);
    let scale = uniform::<bf16>(41, d, 0.5, 1.5);
    let bias = uniform::<bf16>(42, d, -1.0, 1.0);
    let rows: Vec<usize> = (0..128).map(|i| (i * n / 128 + (i * 37) % (n / 128)).min(n - 1)).collect();
    let sample =
        |full: &[bf16]| -> Vec<bf16> { rows.iter().flat_map(|&r| full[r * d..(r + 1) * d].iter().copied()).collect() };
    let x_rows = sample(&x);
    let (x_d, s_d, b_d) = (upload(&stream, &x), upload(&stream, &scale), upload(&stream, &bias));

    let g = LnInfer::new(n, d);
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let mut y_d = poisoned::<bf16>(&stream, n * d);
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, LnInferArgs { x: &x_d, scale: &s_d, bias: &b_d, y: &mut y_d }, Some(&mut ws)).unwrap();
    let y = stream.clone_dtoh(&y_d).unwrap();
    assert!(y.iter().all(|v| !v.is_nan()), "every element of y is written");
    let want = LnInfer::new(rows.len(), d).reference(LnInferInputs { x: &x_rows, scale: &scale, bias: &bias }).unwrap();
    check(
        &format!("layernorm bf16 inference [{n}, {d}, 1, 1] engine {}", plan.plan().selected().tag()),
        "y (sampled rows)",
        &sample(&y),
        &want.y,
    );

    let g = LnTrain::new(n, d);
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let (mut y_d, mut m_d, mut v_d) =
        (poisoned::<bf16>(&stream, n * d), poisoned::<f32>(&stream, n), poisoned::<f32>(&stream, n));
    let mut ws = workspace(&stream, plan.workspace_size());
    let args = LnTrainArgs { x: &x_d, scale: &s_d, bias: &b_d, y: &mut y_d, mean: &mut m_d, inv_var: &mut v_d };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let want = LnTrain::new(rows.len(), d).reference(LnTrainInputs { x: &x_rows, scale: &scale, bias: &bias }).unwrap();
    let case = format!("layernorm bf16 training [{n}, {d}] engine {}", plan.plan().selected().tag());
    let (y, mean, inv_var) =
        (stream.clone_dtoh(&y_d).unwrap(), stream.clone_dtoh(&m_d).unwrap(), stream.clone_dtoh(&v_d).unwrap());
    check(&case, "y (sampled rows)", &sample(&y), &want.y);
    let pick = |v: &[f32]| -> Vec<f32> { rows.iter().map(|&r| v[r]).collect() };
    check(&case, "mean (sampled rows)", &pick(&mean), &want.mean);
    check(&case, "inv_var (sampled rows)", &pick(&inv_var), &want.inv_var);
}

#[needs_gpu]
#[test]
fn gpu_rmsnorm() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    for (i, &(n, d)) in [(512usize, 1024usize), (333, 4096)].iter().enumerate() {
        let x = uniform::<bf16>(50 + i as u64, n * d, -2.0, 2.0);
        let scale = uniform::<bf16>(51 + i as u64, d, 0.5, 1.5);
        let g = RmsTrain::new(n, d);
        let want = g.reference(RmsTrainInputs { x: &x, scale: &scale }).unwrap();
        let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
        let (x_d, s_d) = (upload(&stream, &x), upload(&stream, &scale));
        let (mut y_d, mut v_d) = (poisoned::<bf16>(&stream, n * d), poisoned::<f32>(&stream, n));
        let mut ws = workspace(&stream, plan.workspace_size());
        plan.execute(&cudnn, RmsTrainArgs { x: &x_d, scale: &s_d, y: &mut y_d, inv_var: &mut v_d }, Some(&mut ws))
            .unwrap();
        let case = format!("rmsnorm bf16 training [{n}, {d}] engine {}", plan.plan().selected().tag());
        check(&case, "y", &stream.clone_dtoh(&y_d).unwrap(), &want.y);
        check(&case, "inv_var", &stream.clone_dtoh(&v_d).unwrap(), &want.inv_var);

        let x = uniform::<f16>(52 + i as u64, n * d, -2.0, 2.0);
        let scale = uniform::<f16>(53 + i as u64, d, 0.5, 1.5);
        let bias = uniform::<f16>(54 + i as u64, d, -1.0, 1.0);
        let g = RmsBiasInfer::new(n, d);
        let want = g.reference(RmsBiasInferInputs { x: &x, scale: &scale, bias: &bias }).unwrap();
        let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
        let (x_d, s_d, b_d) = (upload(&stream, &x), upload(&stream, &scale), upload(&stream, &bias));
        let mut y_d = poisoned::<f16>(&stream, n * d);
        let mut ws = workspace(&stream, plan.workspace_size());
        plan.execute(&cudnn, RmsBiasInferArgs { x: &x_d, scale: &s_d, bias: &b_d, y: &mut y_d }, Some(&mut ws))
            .unwrap();
        let case = format!("rmsnorm_bias f16 inference [{n}, {d}] engine {}", plan.plan().selected().tag());
        check(&case, "y", &stream.clone_dtoh(&y_d).unwrap(), &want.y);
    }
}

#[needs_gpu]
#[test]
fn gpu_batchnorm_training_with_running_stats() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    for (i, &(n, c, h, w)) in [(8usize, 64usize, 16usize, 16usize), (4, 32, 7, 9)].iter().enumerate() {
        let g = BatchNormTrain::new(n, c, h, w);
        let x = uniform::<f16>(60 + i as u64, n * c * h * w, -1.0, 3.0);
        let scale = uniform::<f32>(61 + i as u64, c, 0.5, 1.5);
        let bias = uniform::<f32>(62 + i as u64, c, -1.0, 1.0);
        let running_mean = uniform::<f32>(63 + i as u64, c, -0.5, 0.5);
        let running_var = uniform::<f32>(64 + i as u64, c, 0.5, 2.0);
        let inputs = BatchNormTrainInputs {
            x: &x,
            scale: &scale,
            bias: &bias,
            running_mean: &running_mean,
            running_var: &running_var,
        };
        let want = g.reference(inputs).unwrap();
        let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
        let (x_d, s_d, b_d) = (upload(&stream, &x), upload(&stream, &scale), upload(&stream, &bias));
        let (rm_d, rv_d) = (upload(&stream, &running_mean), upload(&stream, &running_var));
        let mut y_d = poisoned::<f16>(&stream, x.len());
        let [mut m_d, mut v_d, mut nm_d, mut nv_d] = [0; 4].map(|_| poisoned::<f32>(&stream, c));
        let mut ws = workspace(&stream, plan.workspace_size());
        let args = BatchNormTrainArgs {
            x: &x_d,
            scale: &s_d,
            bias: &b_d,
            running_mean: &rm_d,
            running_var: &rv_d,
            y: &mut y_d,
            mean: &mut m_d,
            inv_var: &mut v_d,
            next_mean: &mut nm_d,
            next_var: &mut nv_d,
        };
        plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
        let case = format!("batchnorm f16 training [{n}, {c}, {h}, {w}] engine {}", plan.plan().selected().tag());
        check(&case, "y", &stream.clone_dtoh(&y_d).unwrap(), &want.y);
        check(&case, "mean", &stream.clone_dtoh(&m_d).unwrap(), &want.mean);
        check(&case, "inv_var", &stream.clone_dtoh(&v_d).unwrap(), &want.inv_var);
        check(&case, "next_running_mean", &stream.clone_dtoh(&nm_d).unwrap(), &want.next_mean);
        check(&case, "next_running_var", &stream.clone_dtoh(&nv_d).unwrap(), &want.next_var);
    }
}

#[needs_gpu]
#[test]
fn gpu_instancenorm_training() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (n, c, h, w) = (4usize, 32usize, 16usize, 16usize);
    let g = InstanceNormTrain::new(n, c, h, w);
    let x = uniform::<bf16>(70, n * c * h * w, -2.0, 2.0);
    let scale = uniform::<f32>(71, c, 0.5, 1.5);
    let bias = uniform::<f32>(72, c, -1.0, 1.0);
    let want = g.reference(InstanceNormTrainInputs { x: &x, scale: &scale, bias: &bias }).unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let (x_d, s_d, b_d) = (upload(&stream, &x), upload(&stream, &scale), upload(&stream, &bias));
    let mut y_d = poisoned::<bf16>(&stream, x.len());
    let (mut m_d, mut v_d) = (poisoned::<f32>(&stream, n * c), poisoned::<f32>(&stream, n * c));
    let mut ws = workspace(&stream, plan.workspace_size());
    let args =
        InstanceNormTrainArgs { x: &x_d, scale: &s_d, bias: &b_d, y: &mut y_d, mean: &mut m_d, inv_var: &mut v_d };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let case = format!("instancenorm bf16 training [{n}, {c}, {h}, {w}] engine {}", plan.plan().selected().tag());
    check(&case, "y", &stream.clone_dtoh(&y_d).unwrap(), &want.y);
    check(&case, "mean", &stream.clone_dtoh(&m_d).unwrap(), &want.mean);
    check(&case, "inv_var", &stream.clone_dtoh(&v_d).unwrap(), &want.inv_var);
}

#[needs_gpu]
#[test]
fn gpu_layernorm_backward_bf16() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (n, d) = (1024usize, 768usize);
    let x = uniform::<bf16>(80, n * d, -2.0, 2.0);
    let dy = uniform::<bf16>(81, n * d, -1.0, 1.0);
    let scale = uniform::<f32>(82, d, 0.5, 1.5);
    let bias = uniform::<f32>(83, d, -1.0, 1.0);
    let stats = LnTrain4::new(n, d).reference(LnTrain4Inputs { x: &x, scale: &scale, bias: &bias }).unwrap();
    let g = LnBackward::new(n, d);
    let inputs = LnBackwardInputs { dy: &dy, x: &x, scale: &scale, mean: &stats.mean, inv_var: &stats.inv_var };
    let want = g.reference(inputs).unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let (dy_d, x_d, s_d) = (upload(&stream, &dy), upload(&stream, &x), upload(&stream, &scale));
    let (m_d, v_d) = (upload(&stream, &stats.mean), upload(&stream, &stats.inv_var));
    let mut dx_d = poisoned::<bf16>(&stream, n * d);
    let (mut ds_d, mut db_d) = (poisoned::<f32>(&stream, d), poisoned::<f32>(&stream, d));
    let mut ws = workspace(&stream, plan.workspace_size());
    let args = LnBackwardArgs {
        dy: &dy_d,
        x: &x_d,
        scale: &s_d,
        mean: &m_d,
        inv_var: &v_d,
        dx: &mut dx_d,
        dscale: &mut ds_d,
        dbias: &mut db_d,
    };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let case = format!("layernorm_backward bf16 [{n}, {d}, 1, 1] engine {}", plan.plan().selected().tag());
    check(&case, "dx", &stream.clone_dtoh(&dx_d).unwrap(), &want.dx);
    check(&case, "dscale", &stream.clone_dtoh(&ds_d).unwrap(), &want.dscale);
    check(&case, "dbias", &stream.clone_dtoh(&db_d).unwrap(), &want.dbias);
}

/// `matmul(rmsnorm(x, scale), w)`: cuDNN 9.19 does not fuse a norm into a matmul (deviceless it
/// refuses the operation graph with `CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN`); if this cuDNN
/// does, the fused result is compared with the reference instead.
#[needs_gpu]
#[test]
fn gpu_rmsnorm_matmul_fusion() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (m, k, n) = (512usize, 1024usize, 256usize);
    let g = RmsMatmul::new(m, k, n);
    let x = uniform::<bf16>(90, m * k, -2.0, 2.0);
    let scale = uniform::<bf16>(91, k, 0.5, 1.5);
    let w = uniform::<bf16>(92, k * n, -0.1, 0.1);
    match g.build(&cudnn, &BuildOptions::default()) {
        Err(Error::Backend(e @ (BackendError::Cudnn { .. } | BackendError::NoPlan { .. }))) => {
            println!("rmsnorm + matmul [{m}, {k}] x [{k}, {n}]: not fused by cuDNN {}: {e}", cudnn.version());
        }
        Err(e) => panic!("rmsnorm + matmul: not a typed cuDNN refusal: {e}"),
        Ok(plan) => {
            let want = g.reference(RmsMatmulInputs { x: &x, scale: &scale, w: &w }).unwrap();
            let (x_d, s_d, w_d) = (upload(&stream, &x), upload(&stream, &scale), upload(&stream, &w));
            let mut y_d = poisoned::<bf16>(&stream, m * n);
            let mut ws = workspace(&stream, plan.workspace_size());
            plan.execute(&cudnn, RmsMatmulArgs { x: &x_d, scale: &s_d, w: &w_d, y: &mut y_d }, Some(&mut ws)).unwrap();
            let case = format!("rmsnorm + matmul fused, engine {}", plan.plan().selected().tag());
            check(&case, "y", &stream.clone_dtoh(&y_d).unwrap(), &want.y);
        }
    }
}

/// `1 / sqrt(var + 1e-5)` and the mean of each group of `x` (as f64), where `group(i)` is the
/// group of element `i`: the statistics the backward ops take from a forward pass.
fn stats<T: cudnn_graph::Element>(x: &[T], groups: usize, group: impl Fn(usize) -> usize) -> (Vec<f32>, Vec<f32>) {
    let (mut sum, mut sq, mut count) = (vec![0f64; groups], vec![0f64; groups], vec![0f64; groups]);
    for (i, v) in x.iter().enumerate() {
        let (g, v) = (group(i), v.to_f64_value());
        sum[g] += v;
        sq[g] += v * v;
        count[g] += 1.0;
    }
    let mean: Vec<f64> = sum.iter().zip(&count).map(|(s, c)| s / c).collect();
    let inv_var = (0..groups).map(|g| (1.0 / (sq[g] / count[g] - mean[g] * mean[g] + 1e-5).sqrt()) as f32).collect();
    (mean.into_iter().map(|m| m as f32).collect(), inv_var)
}

/// RMS statistics: `1 / sqrt(mean(x²) + 1e-5)` of each row of `d` elements (as f64).
fn rms_inv_var<T: cudnn_graph::Element>(x: &[T], d: usize) -> Vec<f32> {
    let mean_square = |row: &[T]| row.iter().map(|v| v.to_f64_value().powi(2)).sum::<f64>() / d as f64;
    x.chunks(d).map(|row| (1.0 / (mean_square(row) + 1e-5).sqrt()) as f32).collect()
}

#[needs_gpu]
#[test]
fn gpu_rmsnorm_backward() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (n, d) = (1024usize, 768usize);
    let scale = uniform::<f32>(101, d, 0.5, 1.5);
    let s_d = upload(&stream, &scale);

    // bf16, DX and DSCALE.
    let x = uniform::<bf16>(100, n * d, -2.0, 2.0);
    let dy = uniform::<bf16>(102, n * d, -1.0, 1.0);
    let inv_var = rms_inv_var(&x, d);
    let g = RmsBackward::new(n, d);
    let want = g.reference(RmsBackwardInputs { dy: &dy, x: &x, scale: &scale, inv_var: &inv_var }).unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let (dy_d, x_d, v_d) = (upload(&stream, &dy), upload(&stream, &x), upload(&stream, &inv_var));
    let mut dx_d = poisoned::<bf16>(&stream, n * d);
    let mut ds_d = poisoned::<f32>(&stream, d);
    let mut ws = workspace(&stream, plan.workspace_size());
    let args = RmsBackwardArgs { dy: &dy_d, x: &x_d, scale: &s_d, inv_var: &v_d, dx: &mut dx_d, dscale: &mut ds_d };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let case = format!("rmsnorm_backward bf16 [{n}, {d}, 1, 1] engine {}", plan.plan().selected().tag());
    check(&case, "dx", &stream.clone_dtoh(&dx_d).unwrap(), &want.dx);
    check(&case, "dscale", &stream.clone_dtoh(&ds_d).unwrap(), &want.dscale);

    // f16 with DBIAS (the backward of `rmsnorm_bias`).
    let x = uniform::<f16>(103, n * d, -2.0, 2.0);
    let dy = uniform::<f16>(104, n * d, -1.0, 1.0);
    let inv_var = rms_inv_var(&x, d);
    let g = RmsBiasBackward::new(n, d);
    let want = g.reference(RmsBiasBackwardInputs { dy: &dy, x: &x, scale: &scale, inv_var: &inv_var }).unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let (dy_d, x_d, v_d) = (upload(&stream, &dy), upload(&stream, &x), upload(&stream, &inv_var));
    let mut dx_d = poisoned::<f16>(&stream, n * d);
    let (mut ds_d, mut db_d) = (poisoned::<f32>(&stream, d), poisoned::<f32>(&stream, d));
    let mut ws = workspace(&stream, plan.workspace_size());
    let args = RmsBiasBackwardArgs {
        dy: &dy_d,
        x: &x_d,
        scale: &s_d,
        inv_var: &v_d,
        dx: &mut dx_d,
        dscale: &mut ds_d,
        dbias: &mut db_d,
    };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let case = format!("rmsnorm_backward f16 with dbias [{n}, {d}, 1, 1] engine {}", plan.plan().selected().tag());
    check(&case, "dx", &stream.clone_dtoh(&dx_d).unwrap(), &want.dx);
    check(&case, "dscale", &stream.clone_dtoh(&ds_d).unwrap(), &want.dscale);
    check(&case, "dbias", &stream.clone_dtoh(&db_d).unwrap(), &want.dbias);
}

#[needs_gpu]
#[test]
fn gpu_batchnorm_and_instancenorm_backward() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (n, c, h, w) = (8usize, 64usize, 16usize, 16usize);
    let scale = uniform::<f32>(111, c, 0.5, 1.5);
    let s_d = upload(&stream, &scale);

    // Batch norm (NCHW): statistics per channel.
    let x = uniform::<f16>(110, n * c * h * w, -1.0, 3.0);
    let dy = uniform::<f16>(112, n * c * h * w, -1.0, 1.0);
    let (mean, inv_var) = stats(&x, c, |i| (i / (h * w)) % c);
    let g = BnBackward::new(n, c, h, w);
    let want = g.reference(BnBackwardInputs { dy: &dy, x: &x, scale: &scale, mean: &mean, inv_var: &inv_var }).unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let (dy_d, x_d) = (upload(&stream, &dy), upload(&stream, &x));
    let (m_d, v_d) = (upload(&stream, &mean), upload(&stream, &inv_var));
    let mut dx_d = poisoned::<f16>(&stream, x.len());
    let (mut ds_d, mut db_d) = (poisoned::<f32>(&stream, c), poisoned::<f32>(&stream, c));
    let mut ws = workspace(&stream, plan.workspace_size());
    let args = BnBackwardArgs {
        dy: &dy_d,
        x: &x_d,
        scale: &s_d,
        mean: &m_d,
        inv_var: &v_d,
        dx: &mut dx_d,
        dscale: &mut ds_d,
        dbias: &mut db_d,
    };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let case = format!("batchnorm_backward f16 [{n}, {c}, {h}, {w}] engine {}", plan.plan().selected().tag());
    check(&case, "dx", &stream.clone_dtoh(&dx_d).unwrap(), &want.dx);
    check(&case, "dscale", &stream.clone_dtoh(&ds_d).unwrap(), &want.dscale);
    check(&case, "dbias", &stream.clone_dtoh(&db_d).unwrap(), &want.dbias);

    // Instance norm (NCHW): statistics per sample and channel.
    let x = uniform::<bf16>(113, n * c * h * w, -2.0, 2.0);
    let dy = uniform::<bf16>(114, n * c * h * w, -1.0, 1.0);
    let (mean, inv_var) = stats(&x, n * c, |i| i / (h * w));
    let g = InBackward::new(n, c, h, w);
    let want = g.reference(InBackwardInputs { dy: &dy, x: &x, scale: &scale, mean: &mean, inv_var: &inv_var }).unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let (dy_d, x_d) = (upload(&stream, &dy), upload(&stream, &x));
    let (m_d, v_d) = (upload(&stream, &mean), upload(&stream, &inv_var));
    let mut dx_d = poisoned::<bf16>(&stream, x.len());
    let (mut ds_d, mut db_d) = (poisoned::<f32>(&stream, c), poisoned::<f32>(&stream, c));
    let mut ws = workspace(&stream, plan.workspace_size());
    let args = InBackwardArgs {
        dy: &dy_d,
        x: &x_d,
        scale: &s_d,
        mean: &m_d,
        inv_var: &v_d,
        dx: &mut dx_d,
        dscale: &mut ds_d,
        dbias: &mut db_d,
    };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let case = format!("instancenorm_backward bf16 [{n}, {c}, {h}, {w}] engine {}", plan.plan().selected().tag());
    check(&case, "dx", &stream.clone_dtoh(&dx_d).unwrap(), &want.dx);
    check(&case, "dscale", &stream.clone_dtoh(&ds_d).unwrap(), &want.dscale);
    check(&case, "dbias", &stream.clone_dtoh(&db_d).unwrap(), &want.dbias);
}

/// `batchnorm_inference` runs on cuDNN 9.19 only fused like this (cudnn-frontend's
/// "BN_inference DRelu DBN"); buffers are NHWC (the ports' declared order).
#[needs_gpu]
#[test]
fn gpu_batchnorm_inference_drelu_dbn() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (n, c, h, w) = (4usize, 32usize, 16usize, 16usize);
    let x = uniform::<f16>(120, n * c * h * w, -2.0, 2.0);
    let dy = uniform::<f16>(121, n * c * h * w, -1.0, 1.0);
    let scale = uniform::<f32>(122, c, 0.5, 1.5);
    let bias = uniform::<f32>(123, c, -0.5, 0.5);
    // Channels last: channel of element i is i % c.
    let (mean, inv_var) = stats(&x, c, |i| i % c);
    let g = BnInferDreluDbn::new(n, c, h, w);
    let inputs = BnInferDreluDbnInputs { x: &x, dy: &dy, scale: &scale, bias: &bias, mean: &mean, inv_var: &inv_var };
    let want = g.reference(inputs).unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let (x_d, dy_d, s_d, b_d) =
        (upload(&stream, &x), upload(&stream, &dy), upload(&stream, &scale), upload(&stream, &bias));
    let (m_d, v_d) = (upload(&stream, &mean), upload(&stream, &inv_var));
    let mut dx_d = poisoned::<f16>(&stream, x.len());
    let (mut ds_d, mut db_d) = (poisoned::<f32>(&stream, c), poisoned::<f32>(&stream, c));
    let mut ws = workspace(&stream, plan.workspace_size());
    let args = BnInferDreluDbnArgs {
        x: &x_d,
        dy: &dy_d,
        scale: &s_d,
        bias: &b_d,
        mean: &m_d,
        inv_var: &v_d,
        dx: &mut dx_d,
        dscale: &mut ds_d,
        dbias: &mut db_d,
    };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let case =
        format!("batchnorm_inference → relu_bwd → batchnorm_backward f16 NHWC engine {}", plan.plan().selected().tag());
    check(&case, "dx", &stream.clone_dtoh(&dx_d).unwrap(), &want.dx);
    check(&case, "dscale", &stream.clone_dtoh(&ds_d).unwrap(), &want.dscale);
    check(&case, "dbias", &stream.clone_dtoh(&db_d).unwrap(), &want.dbias);
}

/// `genstats` runs on cuDNN 9.19 only after a convolution: the conv's output and its
/// per-channel sum and sum of squares from one kernel (NHWC buffers: the ports are declared
/// `channels_last`; with row-major ports cuDNN 9.19 has no engine).
#[needs_gpu]
#[test]
fn gpu_conv_genstats() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (n, c, k, h, w) = (8usize, 64usize, 32usize, 16usize, 16usize);
    let x = uniform::<f16>(130, n * c * h * w, -0.5, 1.5);
    let wt = uniform::<f16>(131, k * c * 9, -0.05, 0.15);
    let g = ConvGenstats::new(n, c, k, h, w);
    let want = g.reference(ConvGenstatsInputs { x: &x, w: &wt }).unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let (x_d, w_d) = (upload(&stream, &x), upload(&stream, &wt));
    let mut y_d = poisoned::<f16>(&stream, want.y.len());
    let (mut s_d, mut q_d) = (poisoned::<f32>(&stream, k), poisoned::<f32>(&stream, k));
    let mut ws = workspace(&stream, plan.workspace_size());
    let args = ConvGenstatsArgs { x: &x_d, w: &w_d, y: &mut y_d, sum: &mut s_d, sq_sum: &mut q_d };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let case = format!(
        "conv_fprop + genstats f16 NHWC [{n}, {c}, {h}, {w}] * [{k}, {c}, 3, 3] engine {}",
        plan.plan().selected().tag()
    );
    check(&case, "y", &stream.clone_dtoh(&y_d).unwrap(), &want.y);
    check(&case, "sum", &stream.clone_dtoh(&s_d).unwrap(), &want.sum);
    check(&case, "sq_sum", &stream.clone_dtoh(&q_d).unwrap(), &want.sq_sum);
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
