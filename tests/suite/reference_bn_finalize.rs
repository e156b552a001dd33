//! `bn_finalize` through `graph!` and the builder on the CPU reference engine: its outputs against
//! the formulas computed here from random non-zero sums, and the split batch-norm training step
//! (`genstats → bn_finalize → eq_scale · x + eq_bias`) against `batchnorm` on the same inputs.

use crate::common;

use common::{random, uniform};
use cudnn_graph::{graph, reference, DataType, GraphBuilder, Operand};

graph! {
    /// `bn_finalize` alone: 16 channels whose sums ran over 100 elements each.
    pub Finalize(
        sum: f32[1, 16, 1, 1],
        sq_sum: f32[1, 16, 1, 1],
        scale: f32[1, 16, 1, 1],
        bias: f32[1, 16, 1, 1],
        running_mean: f32[1, 16, 1, 1],
        running_var: f32[1, 16, 1, 1],
    ) -> (
        eq_scale: f32[1, 16, 1, 1],
        eq_bias: f32[1, 16, 1, 1],
        mean: f32[1, 16, 1, 1],
        inv_var: f32[1, 16, 1, 1],
        next_mean: f32[1, 16, 1, 1],
        next_var: f32[1, 16, 1, 1],
    ) {
        (eq_scale, eq_bias, mean, inv_var, next_mean, next_var) =
            bn_finalize(sum, sq_sum, scale, bias, running_mean, running_var, 1e-3, 0.25, 100);
    }

    /// A batch-norm training step split as cuDNN's fused convolutions run it: per-channel sums
    /// (`genstats`), their statistics (`bn_finalize`), the affine map and a ReLU. The count is
    /// N·H·W = 4·5·5.
    pub SplitBatchNorm(
        x: f32[4, 8, 5, 5],
        scale: f32[1, 8, 1, 1],
        bias: f32[1, 8, 1, 1],
        running_mean: f32[1, 8, 1, 1],
        running_var: f32[1, 8, 1, 1],
    ) -> (
        y: f32[4, 8, 5, 5],
        mean: f32[1, 8, 1, 1],
        inv_var: f32[1, 8, 1, 1],
        next_mean: f32[1, 8, 1, 1],
        next_var: f32[1, 8, 1, 1],
    ) {
        let (sum, sq_sum) = genstats(x);
        let (eq_scale, eq_bias, m, v, nm, nv) =
            bn_finalize(sum, sq_sum, scale, bias, running_mean, running_var, 1e-5, 0.1, 100);
        y = relu(add(mul(x, eq_scale), eq_bias));
        mean = m;
        inv_var = v;
        next_mean = nm;
        next_var = nv;
    }

    /// The same step with cuDNN's one-op batch norm.
    pub FusedBatchNorm(
        x: f32[4, 8, 5, 5],
        scale: f32[1, 8, 1, 1],
        bias: f32[1, 8, 1, 1],
        running_mean: f32[1, 8, 1, 1],
        running_var: f32[1, 8, 1, 1],
    ) -> (
        y: f32[4, 8, 5, 5],
        mean: f32[1, 8, 1, 1],
        inv_var: f32[1, 8, 1, 1],
        next_mean: f32[1, 8, 1, 1],
        next_var: f32[1, 8, 1, 1],
    ) {
        let (out, m, v, nm, nv) = batchnorm(x, scale, bias, running_mean, running_var, 1e-5, 0.1);
        y = relu(out);
        mean = m;
        inv_var = v;
        next_mean = nm;
        next_var = nv;
    }
}

/// Largest |got − want| / max(|want|, 1).
fn scaled_error(got: &[f32], want: &[f64]) -> f64 {
    got.iter().zip(want).map(|(&g, &w)| (f64::from(g) - w).abs() / w.abs().max(1.0)).fold(0.0, f64::max)
}

#[test]
fn bn_finalize_matches_its_formulas() {
    let c = 16;
    let n = 100.0f64;
    // Sums of 100 values per channel: means in [-1, 1), mean squares above the mean's square.
    let mean_in = uniform::<f64>(1, c, -1.0, 1.0);
    let var_in = uniform::<f64>(2, c, 0.1, 2.0);
    let sum: Vec<f32> = mean_in.iter().map(|m| (m * n) as f32).collect();
    let sq_sum: Vec<f32> = mean_in.iter().zip(&var_in).map(|(m, v)| ((v + m * m) * n) as f32).collect();
    let scale = uniform::<f32>(3, c, 0.5, 1.5);
    let bias = random::<f32>(4, c);
    let running_mean = random::<f32>(5, c);
    let running_var = uniform::<f32>(6, c, 0.5, 1.5);
    let out = Finalize::new()
        .reference(FinalizeInputs {
            sum: &sum,
            sq_sum: &sq_sum,
            scale: &scale,
            bias: &bias,
            running_mean: &running_mean,
            running_var: &running_var,
        })
        .unwrap();
    let (eps, m) = (f64::from(1e-3f32), f64::from(0.25f32));
    let mut want: [Vec<f64>; 6] = Default::default();
    for i in 0..c {
        let mean = f64::from(sum[i]) / n;
        let var = f64::from(sq_sum[i]) / n - mean * mean;
        let inv_var = 1.0 / (var + eps).sqrt();
        let eq_scale = f64::from(scale[i]) * inv_var;
        let row = [
            eq_scale,
            f64::from(bias[i]) - mean * eq_scale,
            mean,
            inv_var,
            (1.0 - m) * f64::from(running_mean[i]) + m * mean,
            (1.0 - m) * f64::from(running_var[i]) + m * var * n / (n - 1.0),
        ];
        for (w, v) in want.iter_mut().zip(row) {
            w.push(v);
        }
    }
    let got = [&out.eq_scale, &out.eq_bias, &out.mean, &out.inv_var, &out.next_mean, &out.next_var];
    for ((name, got), want) in
        ["eq_scale", "eq_bias", "mean", "inv_var", "next_mean", "next_var"].iter().zip(got).zip(&want)
    {
        let err = scaled_error(got, want);
        assert!(err < 1e-6, "{name}: error {err:.3e}");
    }
}

#[test]
fn split_batchnorm_equals_batchnorm() {
    let (x, c) = (4 * 8 * 5 * 5, 8);
    let x = uniform::<f32>(10, x, -2.0, 3.0);
    let scale = uniform::<f32>(11, c, 0.5, 1.5);
    let bias = random::<f32>(12, c);
    let running_mean = random::<f32>(13, c);
    let running_var = uniform::<f32>(14, c, 0.5, 1.5);
    let split = SplitBatchNorm::new()
        .reference(SplitBatchNormInputs {
            x: &x,
            scale: &scale,
            bias: &bias,
            running_mean: &running_mean,
            running_var: &running_var,
        })
        .unwrap();
    let fused = FusedBatchNorm::new()
        .reference(FusedBatchNormInputs {
            x: &x,
            scale: &scale,
            bias: &bias,
            running_mean: &running_mean,
            running_var: &running_var,
        })
        .unwrap();
    // The sums are stored as f32 between the two ops, so the split path's variance carries the
    // cancellation of `sq_sum / n − mean²` in f32 sums.
    for (name, got, want) in [
        ("y", &split.y, &fused.y),
        ("mean", &split.mean, &fused.mean),
        ("inv_var", &split.inv_var, &fused.inv_var),
        ("next_mean", &split.next_mean, &fused.next_mean),
        ("next_var", &split.next_var, &fused.next_var),
    ] {
        let want: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
        let err = scaled_error(got, &want);
        println!("split vs batchnorm: {name} error {err:.3e}");
        assert!(err < 1e-5, "{name}: error {err:.3e}");
    }
}

/// The builder takes the count as a run-time number (a graph with `dyn` dims computes it from
/// them) and makes it an i64 by-value scalar; an f32 count tensor is a typed error naming the port.
#[test]
fn the_builder_makes_the_count_an_i64_scalar() {
    let dims = [1i64, 4, 1, 1];
    let mut g = GraphBuilder::new("finalize");
    let mut operands: Vec<Operand> = ["sum", "sq_sum", "scale", "bias", "running_mean", "running_var"]
        .iter()
        .map(|n| g.input(n, DataType::F32, &dims).unwrap().into())
        .collect();
    let n: i64 = 3 * 7 * 7;
    operands.extend([1e-5.into(), 0.1.into(), Operand::Scalar(n as f64)]);
    let mut bad = g.clone();
    let outs = g.op("bn_finalize", &operands, &[]).unwrap();
    assert_eq!(outs.len(), 6);
    for (o, name) in outs.into_iter().zip(["eq_scale", "eq_bias", "mean", "inv_var", "next_mean", "next_var"]) {
        g.output(o, name, DataType::F32).unwrap();
    }
    let graph = g.build().unwrap();
    let count = graph.tensors.iter().find(|t| t.data_type == DataType::I64).expect("an i64 scalar");
    assert_eq!((count.pass_by_value, count.dims.as_slice()), (Some(n as f64), &[1i64, 1, 1, 1][..]));
    let values: Vec<Vec<f32>> = (0..6).map(|i| uniform::<f32>(20 + i, 4, 1.0, 2.0)).collect();
    let names = ["sum", "sq_sum", "scale", "bias", "running_mean", "running_var"];
    let inputs: Vec<(&str, _)> = names.iter().zip(&values).map(|(n, v)| (*n, v.as_slice().into())).collect();
    let out = reference::run(&graph, &inputs).unwrap();
    assert_eq!(out.len(), 6);
    let mean = f64::from(values[0][0]) / n as f64;
    assert!((out[2].data[0] - mean).abs() < 1e-7 * mean.abs(), "mean = sum / n");

    let f32_count = bad.input("count", DataType::F32, &[1, 1, 1, 1]).unwrap();
    operands[8] = f32_count.into();
    let e = bad.op("bn_finalize", &operands, &[]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node `bn_finalize_0` (bn_finalize), port ACCUM_COUNT: `bn_finalize` port ACCUM_COUNT does not take f32; \
         it takes i64 (a count, as cudnn-frontend's int64 scalar)"
    );
}
