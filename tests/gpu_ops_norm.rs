//! On the GPU: the normalizations declared with `graph!`, built online through cuDNN, executed,
//! and compared output by output with the CPU reference engine (relative error ≤ 2e-2, NaN never
//! passes; the figures are printed). The 16384 × 4096 layer norm is compared on a sample of rows
//! (rows are independent: the reference runs the same graph type bound to the sampled rows).
//!
//! Without a GPU each test prints why and passes, unless `CUDNN_GRAPH_REQUIRE_GPU=1` (set by the
//! GPU bundle's runner), which makes a missing GPU a failure.

#![cfg(feature = "cudnn")]

mod common;

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

    /// RMS norm feeding a matmul: one fused kernel if cuDNN fuses it.
    pub RmsMatmul<dyn M, dyn K, dyn N>(x: bf16[M, K], scale: bf16[1, K], w: bf16[K, N]) -> (y: bf16[M, N]) {
        y = matmul(rmsnorm(x, scale, 1e-5), w);
    }
}

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
