//! On the GPU: `bn_finalize` declared with `graph!`, built online through cuDNN, executed, and
//! compared output by output with the CPU reference engine under cudnn-frontend's batch-norm
//! tolerance (`test/python/test_batchnorm.py`: `|got − want| ≤ 1e-3 + 1e-3·|want|`), printing
//! each output's largest absolute and relative error. The running variance is also measured
//! against the biased variance, which says on the device which one cuDNN's finalize uses (the
//! reference takes the unbiased one; see `cudnn-runtime/src/ops/bn_finalize/reference.rs`).
//!
//! Then the split batch-norm training step as a user runs it, three graphs chained on device
//! buffers: convolution + `genstats`, `bn_finalize` of the sums, `relu(eq_scale · y + eq_bias)`,
//! each compared with its reference on the device's inputs, and the step's result with the CPU
//! reference of `batchnorm` + `relu` on the convolution's output.
//!
//! Without a GPU each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_GPU=1`.

#![cfg(feature = "cudnn")]

use crate::common;

use common::{check, poisoned, uniform, upload, workspace};
use cudnn_graph::backend::BuildOptions;
use cudnn_graph::graph;
use half::f16;

graph! {
    /// `bn_finalize` of 64 channels whose sums ran over 8·16·16 = 2048 elements each.
    pub Finalize(
        sum: f32[1, 64, 1, 1],
        sq_sum: f32[1, 64, 1, 1],
        scale: f32[1, 64, 1, 1],
        bias: f32[1, 64, 1, 1],
        running_mean: f32[1, 64, 1, 1],
        running_var: f32[1, 64, 1, 1],
    ) -> (
        eq_scale: f32[1, 64, 1, 1],
        eq_bias: f32[1, 64, 1, 1],
        mean: f32[1, 64, 1, 1],
        inv_var: f32[1, 64, 1, 1],
        next_mean: f32[1, 64, 1, 1],
        next_var: f32[1, 64, 1, 1],
    ) {
        (eq_scale, eq_bias, mean, inv_var, next_mean, next_var) =
            bn_finalize(sum, sq_sum, scale, bias, running_mean, running_var, 1e-5, 0.1, 2048);
    }

    /// Step 1: the convolution and its output's per-channel sums.
    pub ConvGenstats(x: f16[8, 32, 16, 16] channels_last, w: f16[64, 32, 3, 3] channels_last)
        -> (y: f16[8, 64, 16, 16] channels_last, sum: f32[1, 64, 1, 1], sq_sum: f32[1, 64, 1, 1])
    {
        y = conv_fprop(x, w, padding = [1, 1]);
        (sum, sq_sum) = genstats(y);
    }

    /// Step 3: the normalization as the affine map `bn_finalize` computed, and a ReLU.
    pub Apply(y: f16[8, 64, 16, 16] channels_last, eq_scale: f32[1, 64, 1, 1], eq_bias: f32[1, 64, 1, 1])
        -> (out: f16[8, 64, 16, 16] channels_last)
    {
        out = relu(add(mul(y, eq_scale), eq_bias));
    }

    /// What the step computes, as one batch norm (CPU reference only).
    pub BatchNormRelu(
        y: f16[8, 64, 16, 16] channels_last,
        scale: f32[1, 64, 1, 1],
        bias: f32[1, 64, 1, 1],
        running_mean: f32[1, 64, 1, 1],
        running_var: f32[1, 64, 1, 1],
    ) -> (
        out: f16[8, 64, 16, 16] channels_last,
        mean: f32[1, 64, 1, 1],
        inv_var: f32[1, 64, 1, 1],
        next_mean: f32[1, 64, 1, 1],
        next_var: f32[1, 64, 1, 1],
    ) {
        let (normed, m, v, nm, nv) = batchnorm(y, scale, bias, running_mean, running_var, 1e-5, 0.1);
        out = relu(normed);
        mean = m;
        inv_var = v;
        next_mean = nm;
        next_var = nv;
    }
}

const C: usize = 64;
const COUNT: f64 = 2048.0;

/// cudnn-frontend's `torch.testing.assert_close(atol=1e-3, rtol=1e-3)`: prints the largest
/// absolute and relative errors and asserts every value within `1e-3 + 1e-3·|want|` (NaN never
/// passes).
fn close(case: &str, output: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{case}: {output}");
    let (mut abs, mut rel, mut worst) = (0.0f64, 0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        let (g, w) = (f64::from(g), f64::from(w));
        let d = if g.is_nan() || w.is_nan() { f64::INFINITY } else { (g - w).abs() };
        abs = abs.max(d);
        rel = rel.max(d / w.abs().max(f64::MIN_POSITIVE));
        worst = worst.max(d / (1e-3 + 1e-3 * w.abs()));
    }
    println!("{case}: {output} max abs error {abs:.3e}, max rel error {rel:.3e} ({} values)", got.len());
    assert!(worst <= 1.0, "{case}: {output} outside atol 1e-3 + rtol 1e-3 (max abs {abs:.3e}, rel {rel:.3e})");
}

/// The running variance with the biased batch variance, for comparison.
fn next_var_biased(sum: &[f32], sq_sum: &[f32], running_var: &[f32]) -> Vec<f32> {
    let m = f64::from(0.1f32);
    (0..sum.len())
        .map(|c| {
            let mean = f64::from(sum[c]) / COUNT;
            let var = f64::from(sq_sum[c]) / COUNT - mean * mean;
            ((1.0 - m) * f64::from(running_var[c]) + m * var) as f32
        })
        .collect()
}

/// Prints how far the device's running variance is from the biased-variance alternative.
fn report_variance_rule(case: &str, got: &[f32], sum: &[f32], sq_sum: &[f32], running_var: &[f32]) {
    let biased = next_var_biased(sum, sq_sum, running_var);
    let abs = got.iter().zip(&biased).map(|(g, b)| f64::from((g - b).abs())).fold(0.0, f64::max);
    println!("{case}: next_var max abs error against the BIASED running-variance rule {abs:.3e}");
}

/// Random per-channel sums of `COUNT` values with means in [-1, 1) and variances in [0.1, 2).
fn sums() -> (Vec<f32>, Vec<f32>) {
    let mean = uniform::<f64>(1, C, -1.0, 1.0);
    let var = uniform::<f64>(2, C, 0.1, 2.0);
    let sum = mean.iter().map(|m| (m * COUNT) as f32).collect();
    let sq_sum = mean.iter().zip(&var).map(|(m, v)| ((v + m * m) * COUNT) as f32).collect();
    (sum, sq_sum)
}

#[needs_gpu]
#[test]
fn gpu_bn_finalize() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (sum, sq_sum) = sums();
    let scale = uniform::<f32>(3, C, 0.5, 1.5);
    let bias = uniform::<f32>(4, C, -1.0, 1.0);
    let running_mean = uniform::<f32>(5, C, -1.0, 1.0);
    let running_var = uniform::<f32>(6, C, 0.5, 1.5);
    let g = Finalize::new();
    let inputs = FinalizeInputs {
        sum: &sum,
        sq_sum: &sq_sum,
        scale: &scale,
        bias: &bias,
        running_mean: &running_mean,
        running_var: &running_var,
    };
    let want = g.reference(inputs).unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let ins: Vec<_> =
        [&sum, &sq_sum, &scale, &bias, &running_mean, &running_var].iter().map(|v| upload(&stream, v)).collect();
    let mut outs: Vec<_> = (0..6).map(|_| poisoned::<f32>(&stream, C)).collect();
    let mut ws = workspace(&stream, plan.workspace_size());
    let [o0, o1, o2, o3, o4, o5] = &mut outs[..] else { unreachable!() };
    let args = FinalizeArgs {
        sum: &ins[0],
        sq_sum: &ins[1],
        scale: &ins[2],
        bias: &ins[3],
        running_mean: &ins[4],
        running_var: &ins[5],
        eq_scale: o0,
        eq_bias: o1,
        mean: o2,
        inv_var: o3,
        next_mean: o4,
        next_var: o5,
    };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let case = format!("bn_finalize f32 [1, {C}, 1, 1] count {COUNT} engine {}", plan.plan().selected().tag());
    let got: Vec<Vec<f32>> = outs.iter().map(|o| stream.clone_dtoh(o).unwrap()).collect();
    report_variance_rule(&case, &got[5], &sum, &sq_sum, &running_var);
    let names = ["eq_scale", "eq_bias", "mean", "inv_var", "next_mean", "next_var"];
    let wants = [&want.eq_scale, &want.eq_bias, &want.mean, &want.inv_var, &want.next_mean, &want.next_var];
    for ((name, got), want) in names.iter().zip(&got).zip(wants) {
        close(&case, name, got, want);
    }
}

#[needs_gpu]
#[test]
fn gpu_split_batchnorm_training_step() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (n, c, h, w) = (8usize, 32usize, 16usize, 16usize);
    let x = uniform::<f16>(10, n * c * h * w, -0.5, 1.5);
    let wt = uniform::<f16>(11, C * c * 9, -0.05, 0.15);
    let scale = uniform::<f32>(12, C, 0.5, 1.5);
    let bias = uniform::<f32>(13, C, -1.0, 1.0);
    let running_mean = uniform::<f32>(14, C, -1.0, 1.0);
    let running_var = uniform::<f32>(15, C, 0.5, 1.5);
    let mut ws = workspace(&stream, 1 << 20);

    // 1: convolution + genstats.
    let conv = ConvGenstats::new();
    let conv_plan = conv.build(&cudnn, &BuildOptions::default()).unwrap();
    assert!(conv_plan.workspace_size() <= 1 << 20);
    let (x_d, w_d) = (upload(&stream, &x), upload(&stream, &wt));
    let mut y_d = poisoned::<f16>(&stream, n * C * h * w);
    let (mut sum_d, mut sq_d) = (poisoned::<f32>(&stream, C), poisoned::<f32>(&stream, C));
    let args = ConvGenstatsArgs { x: &x_d, w: &w_d, y: &mut y_d, sum: &mut sum_d, sq_sum: &mut sq_d };
    conv_plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let case = format!("step 1 conv + genstats engine {}", conv_plan.plan().selected().tag());
    let want = conv.reference(ConvGenstatsInputs { x: &x, w: &wt }).unwrap();
    let (y, sum, sq_sum) =
        (stream.clone_dtoh(&y_d).unwrap(), stream.clone_dtoh(&sum_d).unwrap(), stream.clone_dtoh(&sq_d).unwrap());
    check(&case, "y", &y, &want.y);
    check(&case, "sum", &sum, &want.sum);
    check(&case, "sq_sum", &sq_sum, &want.sq_sum);

    // 2: bn_finalize of the device's sums, read in place.
    let fin = Finalize::new();
    let fin_plan = fin.build(&cudnn, &BuildOptions::default()).unwrap();
    let params: Vec<_> = [&scale, &bias, &running_mean, &running_var].iter().map(|v| upload(&stream, v)).collect();
    let mut outs: Vec<_> = (0..6).map(|_| poisoned::<f32>(&stream, C)).collect();
    let [o0, o1, o2, o3, o4, o5] = &mut outs[..] else { unreachable!() };
    let args = FinalizeArgs {
        sum: &sum_d,
        sq_sum: &sq_d,
        scale: &params[0],
        bias: &params[1],
        running_mean: &params[2],
        running_var: &params[3],
        eq_scale: o0,
        eq_bias: o1,
        mean: o2,
        inv_var: o3,
        next_mean: o4,
        next_var: o5,
    };
    fin_plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let case = format!("step 2 bn_finalize engine {}", fin_plan.plan().selected().tag());
    let stats = fin
        .reference(FinalizeInputs {
            sum: &sum,
            sq_sum: &sq_sum,
            scale: &scale,
            bias: &bias,
            running_mean: &running_mean,
            running_var: &running_var,
        })
        .unwrap();
    let got: Vec<Vec<f32>> = outs.iter().map(|o| stream.clone_dtoh(o).unwrap()).collect();
    report_variance_rule(&case, &got[5], &sum, &sq_sum, &running_var);
    let names = ["eq_scale", "eq_bias", "mean", "inv_var", "next_mean", "next_var"];
    let wants = [&stats.eq_scale, &stats.eq_bias, &stats.mean, &stats.inv_var, &stats.next_mean, &stats.next_var];
    for ((name, got), want) in names.iter().zip(&got).zip(wants) {
        close(&case, name, got, want);
    }

    // 3: relu(eq_scale · y + eq_bias) on the device's y and affine map.
    let apply = Apply::new();
    let apply_plan = apply.build(&cudnn, &BuildOptions::default()).unwrap();
    let mut out_d = poisoned::<f16>(&stream, n * C * h * w);
    let args = ApplyArgs { y: &y_d, eq_scale: &outs[0], eq_bias: &outs[1], out: &mut out_d };
    apply_plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let case = format!("step 3 apply engine {}", apply_plan.plan().selected().tag());
    let out = stream.clone_dtoh(&out_d).unwrap();
    let want = apply.reference(ApplyInputs { y: &y, eq_scale: &got[0], eq_bias: &got[1] }).unwrap();
    check(&case, "out", &out, &want.out);

    // The step against one batch norm + relu of the device's convolution output.
    let bn = BatchNormRelu::new()
        .reference(BatchNormReluInputs {
            y: &y,
            scale: &scale,
            bias: &bias,
            running_mean: &running_mean,
            running_var: &running_var,
        })
        .unwrap();
    let case = "split step vs batchnorm + relu (CPU)";
    check(case, "out", &out, &bn.out);
    for (name, got, want) in [
        ("mean", &got[2], &bn.mean),
        ("inv_var", &got[3], &bn.inv_var),
        ("next_mean", &got[4], &bn.next_mean),
        ("next_var", &got[5], &bn.next_var),
    ] {
        close(case, name, got, want);
    }
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
