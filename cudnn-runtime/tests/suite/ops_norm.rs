//! The normalizations on the CPU reference engine, through the builder API: every forward op
//! against direct loops written here (random fixed-seed inputs, f64), every backward op against
//! central finite differences of its forward op, the phase deciding the outputs, the shape errors,
//! and the structural JSON (round trips, cudnn-frontend's fields, and their errors).

use cudnn_runtime::error::GraphError;
use cudnn_runtime::ops::AttrValue;
use cudnn_runtime::reference;
use cudnn_runtime::serialize::{structure_from_json, structure_to_json, SerializeError};
use cudnn_runtime::{DataType, Graph, GraphBuilder, Operand, TensorId};

use crate::common;

use common::random;

// ---------------------------------------------------------------------------------------------
// Helpers

fn count(dims: &[i64]) -> usize {
    dims.iter().product::<i64>() as usize
}

fn attrs(list: &[(&str, AttrValue)]) -> Vec<(String, AttrValue)> {
    list.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

fn training() -> Vec<(String, AttrValue)> {
    attrs(&[("phase", "training".into())])
}

/// A graph of one op: inputs `(name, dims)` (f64) or a number, every output made a graph output
/// called `out0`, `out1`, ...
fn one_op(op: &str, inputs: &[(&str, Option<&[i64]>, f64)], attrs: &[(String, AttrValue)]) -> Graph {
    let mut g = GraphBuilder::new(op);
    // f64 compute: the by-value scalars (epsilon, momentum) are exact.
    g.context(cudnn_runtime::Context { compute_data_type: DataType::F64, ..Default::default() });
    let operands: Vec<Operand> = inputs
        .iter()
        .map(|(name, dims, value)| match dims {
            Some(d) => g.input(name, DataType::F64, d).unwrap().into(),
            None => Operand::Scalar(*value),
        })
        .collect();
    let outs = g.op(op, &operands, attrs).unwrap_or_else(|e| panic!("{op}: {e}"));
    for (i, o) in outs.into_iter().enumerate() {
        g.output(o, &format!("out{i}"), DataType::F64).unwrap();
    }
    g.build().unwrap()
}

/// Runs a graph of f64 inputs; returns each output's values.
fn run(graph: &Graph, inputs: &[(&str, &[f64])]) -> Vec<Vec<f64>> {
    let named: Vec<(&str, reference::HostSlice<'_>)> = inputs.iter().map(|(n, d)| (*n, (*d).into())).collect();
    reference::run(graph, &named).unwrap().into_iter().map(|a| a.data).collect()
}

fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}[{i}]: got {g}, want {w}");
    }
}

/// Row-major index of `idx` in `dims`.
fn at(dims: &[i64], idx: &[usize]) -> usize {
    idx.iter().zip(dims).fold(0, |acc, (&i, &d)| acc * d as usize + i)
}

// ---------------------------------------------------------------------------------------------
// Forward ops against direct loops

const EPS: f64 = 1e-5;

/// Layer norm of X [N, C, H, W] over C, H, W (cudnn-frontend's default SCALE [1, C, H, W]).
#[test]
fn layernorm_training_matches_direct_loops() {
    let (n, c, h, w) = (4usize, 3usize, 5usize, 2usize);
    let xd = [n as i64, c as i64, h as i64, w as i64];
    let pd = [1, c as i64, h as i64, w as i64];
    let x = random(1, count(&xd), -2.0, 3.0);
    let scale = random(2, count(&pd), 0.5, 1.5);
    let bias = random(3, count(&pd), -1.0, 1.0);
    let g = one_op(
        "layernorm",
        &[("x", Some(&xd), 0.0), ("scale", Some(&pd), 0.0), ("bias", Some(&pd), 0.0), ("eps", None, EPS)],
        &training(),
    );
    let out = run(&g, &[("x", &x), ("scale", &scale), ("bias", &bias)]);
    assert_eq!(out.len(), 3);
    let row = c * h * w;
    for s in 0..n {
        let xs = &x[s * row..(s + 1) * row];
        let mean = xs.iter().sum::<f64>() / row as f64;
        let var = xs.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / row as f64;
        let inv = 1.0 / (var + EPS).sqrt();
        assert_close("mean", &out[1][s..=s], &[mean], 1e-12);
        assert_close("inv_var", &out[2][s..=s], &[inv], 1e-12);
        let want: Vec<f64> = (0..row).map(|j| scale[j] * (xs[j] - mean) * inv + bias[j]).collect();
        assert_close("y", &out[0][s * row..(s + 1) * row], &want, 1e-12);
    }
    assert_eq!(g.tensor_by_name("out1").unwrap().dims, vec![n as i64, 1, 1, 1]);
}

/// SCALE [1, 1, D] over X [B, S, D]: only the last dim is normalized; the statistics are [B, S, 1].
#[test]
fn layernorm_over_the_last_dim_only() {
    let xd = [2i64, 3, 8];
    let pd = [1i64, 1, 8];
    let x = random(4, count(&xd), -1.0, 1.0);
    let scale = random(5, 8, 0.5, 2.0);
    let bias = random(6, 8, -0.5, 0.5);
    let g = one_op(
        "layernorm",
        &[("x", Some(&xd), 0.0), ("scale", Some(&pd), 0.0), ("bias", Some(&pd), 0.0), ("eps", None, 1e-3)],
        &training(),
    );
    assert_eq!(g.tensor_by_name("out1").unwrap().dims, vec![2, 3, 1]);
    let out = run(&g, &[("x", &x), ("scale", &scale), ("bias", &bias)]);
    for r in 0..6 {
        let xs = &x[r * 8..(r + 1) * 8];
        let mean = xs.iter().sum::<f64>() / 8.0;
        let var = xs.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 8.0;
        let inv = 1.0 / (var + 1e-3).sqrt();
        let want: Vec<f64> = (0..8).map(|j| scale[j] * (xs[j] - mean) * inv + bias[j]).collect();
        assert_close("y", &out[0][r * 8..(r + 1) * 8], &want, 1e-12);
        assert_close("mean", &out[1][r..=r], &[mean], 1e-12);
    }
}

/// The inference phase computes the same Y and produces nothing else.
#[test]
fn inference_phase_produces_y_only() {
    let xd = [3i64, 16];
    let pd = [1i64, 16];
    let x = random(7, 48, -1.0, 1.0);
    let scale = random(8, 16, 0.5, 1.5);
    let bias = random(9, 16, -1.0, 1.0);
    let ins =
        [("x", Some(&xd[..]), 0.0), ("scale", Some(&pd[..]), 0.0), ("bias", Some(&pd[..]), 0.0), ("eps", None, EPS)];
    let inference = one_op("layernorm", &ins, &[]);
    let explicit = one_op("layernorm", &ins, &attrs(&[("phase", "inference".into())]));
    assert_eq!(inference, explicit, "inference is the default");
    assert_eq!(inference.outputs().len(), 1);
    let trained = one_op("layernorm", &ins, &training());
    let data = [("x", &x[..]), ("scale", &scale[..]), ("bias", &bias[..])];
    assert_eq!(run(&inference, &data)[0], run(&trained, &data)[0]);
    let rms = one_op("rmsnorm", &[ins[0], ins[1], ins[3]], &[]);
    assert_eq!(rms.outputs().len(), 1);
}

#[test]
fn rmsnorm_with_and_without_bias() {
    let (rows, d) = (5usize, 12usize);
    let xd = [rows as i64, d as i64];
    let pd = [1i64, d as i64];
    let x = random(10, rows * d, -2.0, 2.0);
    let scale = random(11, d, 0.5, 1.5);
    let bias = random(12, d, -1.0, 1.0);
    let plain = one_op("rmsnorm", &[("x", Some(&xd), 0.0), ("scale", Some(&pd), 0.0), ("eps", None, EPS)], &training());
    let biased = one_op(
        "rmsnorm_bias",
        &[("x", Some(&xd), 0.0), ("scale", Some(&pd), 0.0), ("bias", Some(&pd), 0.0), ("eps", None, EPS)],
        &training(),
    );
    let p = run(&plain, &[("x", &x), ("scale", &scale)]);
    let b = run(&biased, &[("x", &x), ("scale", &scale), ("bias", &bias)]);
    assert_eq!(p.len(), 2, "y and inv_var");
    for r in 0..rows {
        let xs = &x[r * d..(r + 1) * d];
        let inv = 1.0 / (xs.iter().map(|v| v * v).sum::<f64>() / d as f64 + EPS).sqrt();
        assert_close("inv_var", &p[1][r..=r], &[inv], 1e-12);
        assert_close("inv_var (bias)", &b[1][r..=r], &[inv], 1e-12);
        let want: Vec<f64> = (0..d).map(|j| scale[j] * xs[j] * inv).collect();
        assert_close("y", &p[0][r * d..(r + 1) * d], &want, 1e-12);
        let want: Vec<f64> = (0..d).map(|j| scale[j] * xs[j] * inv + bias[j]).collect();
        assert_close("y (bias)", &b[0][r * d..(r + 1) * d], &want, 1e-12);
    }
}

/// Per-channel statistics over N, H, W; running statistics blended with momentum, the running
/// variance unbiased.
#[test]
fn batchnorm_training_matches_direct_loops() {
    let (n, c, h, w) = (3usize, 4usize, 2usize, 5usize);
    let xd = [n as i64, c as i64, h as i64, w as i64];
    let cd = [1i64, c as i64, 1, 1];
    let x = random(13, count(&xd), -1.0, 4.0);
    let scale = random(14, c, 0.5, 1.5);
    let bias = random(15, c, -1.0, 1.0);
    let run_mean = random(16, c, -0.5, 0.5);
    let run_var = random(17, c, 0.5, 2.0);
    let momentum = 0.1;
    let g = one_op(
        "batchnorm",
        &[
            ("x", Some(&xd), 0.0),
            ("scale", Some(&cd), 0.0),
            ("bias", Some(&cd), 0.0),
            ("running_mean", Some(&cd), 0.0),
            ("running_var", Some(&cd), 0.0),
            ("eps", None, EPS),
            ("momentum", None, momentum),
        ],
        &[],
    );
    let out = run(
        &g,
        &[("x", &x), ("scale", &scale), ("bias", &bias), ("running_mean", &run_mean), ("running_var", &run_var)],
    );
    assert_eq!(out.len(), 5);
    let m = (n * h * w) as f64;
    for ch in 0..c {
        let vals: Vec<(usize, f64)> = (0..n)
            .flat_map(|s| (0..h).flat_map(move |i| (0..w).map(move |j| (s, i, j))))
            .map(|(s, i, j)| {
                let k = at(&xd, &[s, ch, i, j]);
                (k, x[k])
            })
            .collect();
        let mean = vals.iter().map(|v| v.1).sum::<f64>() / m;
        let var = vals.iter().map(|v| (v.1 - mean).powi(2)).sum::<f64>() / m;
        let inv = 1.0 / (var + EPS).sqrt();
        assert_close("mean", &out[1][ch..=ch], &[mean], 1e-12);
        assert_close("inv_var", &out[2][ch..=ch], &[inv], 1e-12);
        assert_close(
            "next_running_mean",
            &out[3][ch..=ch],
            &[(1.0 - momentum) * run_mean[ch] + momentum * mean],
            1e-12,
        );
        let unbiased = var * m / (m - 1.0);
        assert_close(
            "next_running_var",
            &out[4][ch..=ch],
            &[(1.0 - momentum) * run_var[ch] + momentum * unbiased],
            1e-12,
        );
        for (k, v) in vals {
            assert_close("y", &out[0][k..=k], &[scale[ch] * (v - mean) * inv + bias[ch]], 1e-12);
        }
    }
}

#[test]
fn batchnorm_inference_uses_the_given_statistics() {
    let xd = [2i64, 3, 4, 4];
    let cd = [1i64, 3, 1, 1];
    let x = random(18, count(&xd), -1.0, 1.0);
    let mean = random(19, 3, -0.5, 0.5);
    let inv_var = random(20, 3, 0.5, 2.0);
    let scale = random(21, 3, 0.5, 1.5);
    let bias = random(22, 3, -1.0, 1.0);
    let g = one_op(
        "batchnorm_inference",
        &[
            ("x", Some(&xd), 0.0),
            ("mean", Some(&cd), 0.0),
            ("inv_var", Some(&cd), 0.0),
            ("scale", Some(&cd), 0.0),
            ("bias", Some(&cd), 0.0),
        ],
        &[],
    );
    let out = run(&g, &[("x", &x), ("mean", &mean), ("inv_var", &inv_var), ("scale", &scale), ("bias", &bias)]);
    let want: Vec<f64> = (0..x.len())
        .map(|k| {
            let ch = (k / 16) % 3;
            scale[ch] * (x[k] - mean[ch]) * inv_var[ch] + bias[ch]
        })
        .collect();
    assert_close("y", &out[0], &want, 1e-12);
}

/// Statistics per sample and channel, over H and W.
#[test]
fn instancenorm_training_matches_direct_loops() {
    let (n, c, hw) = (2usize, 3usize, 10usize);
    let xd = [n as i64, c as i64, 2, 5];
    let cd = [1i64, c as i64, 1, 1];
    let x = random(23, n * c * hw, -3.0, 1.0);
    let scale = random(24, c, 0.5, 1.5);
    let bias = random(25, c, -1.0, 1.0);
    let g = one_op(
        "instancenorm",
        &[("x", Some(&xd), 0.0), ("scale", Some(&cd), 0.0), ("bias", Some(&cd), 0.0), ("eps", None, EPS)],
        &training(),
    );
    assert_eq!(g.tensor_by_name("out1").unwrap().dims, vec![2, 3, 1, 1]);
    let out = run(&g, &[("x", &x), ("scale", &scale), ("bias", &bias)]);
    for s in 0..n {
        for ch in 0..c {
            let base = (s * c + ch) * hw;
            let xs = &x[base..base + hw];
            let mean = xs.iter().sum::<f64>() / hw as f64;
            let var = xs.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / hw as f64;
            let inv = 1.0 / (var + EPS).sqrt();
            let g_at = s * c + ch;
            assert_close("mean", &out[1][g_at..=g_at], &[mean], 1e-12);
            assert_close("inv_var", &out[2][g_at..=g_at], &[inv], 1e-12);
            let want: Vec<f64> = xs.iter().map(|v| scale[ch] * (v - mean) * inv + bias[ch]).collect();
            assert_close("y", &out[0][base..base + hw], &want, 1e-12);
        }
    }
}

#[test]
fn genstats_sums_per_channel() {
    let xd = [3i64, 4, 2, 3];
    let x = random(26, count(&xd), -1.0, 2.0);
    let g = one_op("genstats", &[("x", Some(&xd), 0.0)], &[]);
    let out = run(&g, &[("x", &x)]);
    for ch in 0..4 {
        let vals: Vec<f64> = (0..x.len()).filter(|k| (k / 6) % 4 == ch).map(|k| x[k]).collect();
        assert_close("sum", &out[0][ch..=ch], &[vals.iter().sum()], 1e-12);
        assert_close("sq_sum", &out[1][ch..=ch], &[vals.iter().map(|v| v * v).sum()], 1e-12);
    }
}

/// bf16 storage: the outputs are rounded to bf16, the statistics (f32 intermediates) to f32.
#[test]
fn low_precision_outputs_are_rounded_like_storage() {
    let mut g = GraphBuilder::new("ln_bf16");
    let x = g.input("x", DataType::BF16, &[4, 64]).unwrap();
    let s = g.input("scale", DataType::BF16, &[1, 64]).unwrap();
    let b = g.input("bias", DataType::BF16, &[1, 64]).unwrap();
    let outs = g.op("layernorm", &[x.into(), s.into(), b.into(), 1e-5.into()], &training()).unwrap();
    g.output(outs[0], "y", DataType::BF16).unwrap();
    g.output(outs[1], "mean", DataType::F32).unwrap();
    g.output(outs[2], "inv_var", DataType::F32).unwrap();
    let graph = g.build().unwrap();
    let to_bf16 = |v: Vec<f64>| v.into_iter().map(half::bf16::from_f64).collect::<Vec<_>>();
    let (xv, sv, bv) =
        (to_bf16(random(27, 256, -1.0, 1.0)), to_bf16(random(28, 64, 0.5, 1.5)), to_bf16(random(29, 64, -1.0, 1.0)));
    let out = reference::run(&graph, &[("x", (&xv).into()), ("scale", (&sv).into()), ("bias", (&bv).into())]).unwrap();
    for v in &out[0].data {
        assert_eq!(half::bf16::from_f64(*v).to_f64(), *v, "y is bf16");
    }
    for v in &out[1].data {
        assert_eq!(f64::from(*v as f32), *v, "mean is f32");
    }
    // Against a direct f64 computation on the bf16 inputs, within bf16 rounding.
    for r in 0..4 {
        let xs: Vec<f64> = xv[r * 64..(r + 1) * 64].iter().map(|v| v.to_f64()).collect();
        let mean = xs.iter().sum::<f64>() / 64.0;
        let inv = 1.0 / (xs.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 64.0 + 1e-5).sqrt();
        for j in 0..64 {
            let want = sv[j].to_f64() * (xs[j] - mean) * inv + bv[j].to_f64();
            assert!((out[0].data[r * 64 + j] - want).abs() <= 1e-2 * (1.0 + want.abs()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Backward ops against finite differences of the forward ops

/// `L = Σ dy · y(x, scale, bias)`; returns L.
fn loss(forward: &Graph, inputs: &[(&str, &[f64])], dy: &[f64]) -> f64 {
    run(forward, inputs)[0].iter().zip(dy).map(|(y, d)| y * d).sum()
}

/// The central difference of `loss` in element `k` of input `which`.
fn finite_difference(forward: &Graph, inputs: &[(&str, Vec<f64>)], which: usize, k: usize, dy: &[f64]) -> f64 {
    let h = 1e-5;
    let at = |delta: f64| {
        let mut ins = inputs.to_vec();
        ins[which].1[k] += delta;
        let borrowed: Vec<(&str, &[f64])> = ins.iter().map(|(n, v)| (*n, v.as_slice())).collect();
        loss(forward, &borrowed, dy)
    };
    (at(h) - at(-h)) / (2.0 * h)
}

/// Checks a backward op: runs the forward in training for the statistics, the backward on them,
/// and compares DX, DSCALE and DBIAS with central differences of the forward.
fn check_backward(forward_op: &str, backward_op: &str, xd: &[i64], pd: &[i64], with_bias: bool, centered: bool) {
    let x = random(30, count(xd), -2.0, 2.0);
    let scale = random(31, count(pd), 0.5, 1.5);
    let bias = random(32, count(pd), -1.0, 1.0);
    let dy = random(33, count(xd), -1.0, 1.0);
    let mut ins = vec![("x", Some(xd), 0.0), ("scale", Some(pd), 0.0)];
    let mut data = vec![("x", x.clone()), ("scale", scale.clone())];
    if with_bias {
        ins.push(("bias", Some(pd), 0.0));
        data.push(("bias", bias.clone()));
    }
    ins.push(("eps", None, EPS));
    let forward = one_op(forward_op, &ins, &training());
    let borrowed: Vec<(&str, &[f64])> = data.iter().map(|(n, v)| (*n, v.as_slice())).collect();
    let stats = run(&forward, &borrowed);
    let (mean, inv_var) = if centered { (Some(&stats[1]), &stats[2]) } else { (None, &stats[1]) };
    let sd = forward.tensor_by_name(if centered { "out2" } else { "out1" }).unwrap().dims.clone();

    let mut bins = vec![("dy", Some(xd), 0.0), ("x", Some(xd), 0.0), ("scale", Some(pd), 0.0)];
    let mut bdata: Vec<(&str, &[f64])> = vec![("dy", &dy), ("x", &x), ("scale", &scale)];
    if let Some(mean) = mean {
        bins.push(("mean", Some(&sd), 0.0));
        bdata.push(("mean", mean));
    }
    bins.push(("inv_var", Some(&sd), 0.0));
    bdata.push(("inv_var", inv_var));
    let battrs = if backward_op == "rmsnorm_backward" && with_bias { attrs(&[("dbias", true.into())]) } else { vec![] };
    let backward = one_op(backward_op, &bins, &battrs);
    let grads = run(&backward, &bdata);
    assert_eq!(grads.len(), if with_bias || centered { 3 } else { 2 }, "{backward_op}");

    for (k, dx) in grads[0].iter().enumerate() {
        let fd = finite_difference(&forward, &data, 0, k, &dy);
        assert!((dx - fd).abs() <= 1e-6 * (1.0 + fd.abs()), "{backward_op} dx[{k}]: {dx} vs {fd}");
    }
    for k in 0..scale.len() {
        let fd = finite_difference(&forward, &data, 1, k, &dy);
        assert!(
            (grads[1][k] - fd).abs() <= 1e-6 * (1.0 + fd.abs()),
            "{backward_op} dscale[{k}]: {} vs {fd}",
            grads[1][k]
        );
        if grads.len() == 3 {
            let want = finite_difference(&forward, &data, 2, k, &dy);
            assert!(
                (grads[2][k] - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "{backward_op} dbias[{k}]: {} vs {want}",
                grads[2][k]
            );
        }
    }
}

#[test]
fn layernorm_backward_is_the_derivative() {
    check_backward("layernorm", "layernorm_backward", &[3, 4, 2, 2], &[1, 4, 2, 2], true, true);
}

#[test]
fn rmsnorm_backward_is_the_derivative() {
    check_backward("rmsnorm", "rmsnorm_backward", &[4, 6], &[1, 6], false, false);
    check_backward("rmsnorm_bias", "rmsnorm_backward", &[4, 6], &[1, 6], true, false);
}

#[test]
fn batchnorm_backward_is_the_derivative() {
    // The derivative of batch norm's Y (with the batch statistics), which `batchnorm` computes
    // in training; its running statistics do not enter Y.
    let xd = [3i64, 2, 2, 2];
    let cd = [1i64, 2, 1, 1];
    let x = random(34, 24, -2.0, 2.0);
    let scale = random(35, 2, 0.5, 1.5);
    let bias = random(36, 2, -1.0, 1.0);
    let rm = random(37, 2, -1.0, 1.0);
    let rv = random(38, 2, 0.5, 1.5);
    let dy = random(39, 24, -1.0, 1.0);
    let forward = {
        let mut g = GraphBuilder::new("bn");
        let ids: Vec<TensorId> = [("x", &xd[..]), ("scale", &cd), ("bias", &cd), ("rm", &cd), ("rv", &cd)]
            .iter()
            .map(|(n, d)| g.input(n, DataType::F64, d).unwrap())
            .collect();
        let mut ops: Vec<Operand> = ids.iter().map(|&i| i.into()).collect();
        ops.extend([Operand::Scalar(EPS), Operand::Scalar(0.1)]);
        g.context(cudnn_runtime::Context { compute_data_type: DataType::F64, ..Default::default() });
        let outs = g.op("batchnorm", &ops, &[]).unwrap();
        for (i, o) in outs.into_iter().enumerate() {
            g.output(o, &format!("out{i}"), DataType::F64).unwrap();
        }
        g.build().unwrap()
    };
    let data = vec![("x", x.clone()), ("scale", scale.clone()), ("bias", bias.clone()), ("rm", rm), ("rv", rv)];
    let borrowed: Vec<(&str, &[f64])> = data.iter().map(|(n, v)| (*n, v.as_slice())).collect();
    let stats = run(&forward, &borrowed);
    let backward = one_op(
        "batchnorm_backward",
        &[
            ("dy", Some(&xd), 0.0),
            ("x", Some(&xd), 0.0),
            ("scale", Some(&cd), 0.0),
            ("mean", Some(&cd), 0.0),
            ("inv_var", Some(&cd), 0.0),
        ],
        &[],
    );
    let grads =
        run(&backward, &[("dy", &dy), ("x", &x), ("scale", &scale), ("mean", &stats[1]), ("inv_var", &stats[2])]);
    for (which, grad) in [(0usize, &grads[0]), (1, &grads[1]), (2, &grads[2])] {
        for (k, got) in grad.iter().enumerate() {
            let fd = finite_difference(&forward, &data, which, k, &dy);
            assert!((got - fd).abs() <= 1e-6 * (1.0 + fd.abs()), "input {which} [{k}]: {got} vs {fd}");
        }
    }
}

#[test]
fn instancenorm_backward_is_the_derivative() {
    check_backward("instancenorm", "instancenorm_backward", &[2, 3, 2, 2], &[1, 3, 1, 1], true, true);
}

// ---------------------------------------------------------------------------------------------
// Errors through the builder

#[test]
fn builder_errors_name_node_op_and_port() {
    let mut g = GraphBuilder::new("bad");
    let x = g.input("x", DataType::F32, &[8, 32]).unwrap();
    let s = g.input("s", DataType::F32, &[1, 16]).unwrap();
    let e = g.op("rmsnorm", &[x.into(), s.into(), 1e-5.into()], &[]).unwrap_err();
    assert!(matches!(e, GraphError::Shape { port: Some("SCALE"), .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "node `rmsnorm_0` (rmsnorm), port SCALE: `rmsnorm` port SCALE must be 1 or X's extent in every dim, its \
         dims that are not 1 being those normalized (X is [8, 32]), found [1, 16]: dim 1 is 16, not 1 or 32"
    );
    let s = g.input("s2", DataType::F32, &[1, 32]).unwrap();
    let e = g.op("rmsnorm", &[x.into(), 1e-5.into(), s.into()], &[]).unwrap_err();
    assert!(e.to_string().contains("port SCALE cannot take a scalar"), "{e}");
    let e = g.op("rmsnorm", &[x.into(), s.into(), x.into()], &[]).unwrap_err();
    assert!(e.to_string().contains("port EPSILON must be a scalar"), "{e}");
    let e = g.op("layernorm", &[x.into(), s.into(), s.into(), 1e-5.into()], &[("phase".into(), "train".into())]);
    assert!(matches!(e, Err(GraphError::Attr { .. })));
}

// ---------------------------------------------------------------------------------------------
// Structural JSON

fn round_trip(g: &Graph) -> String {
    let text = structure_to_json(g);
    let back = structure_from_json(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(&back, g);
    assert_eq!(structure_to_json(&back), text);
    text
}

fn ln_graph(phase: &str) -> Graph {
    let xd = [4i64, 8];
    let pd = [1i64, 8];
    one_op(
        "layernorm",
        &[("x", Some(&xd), 0.0), ("scale", Some(&pd), 0.0), ("bias", Some(&pd), 0.0), ("eps", None, 1e-5)],
        &attrs(&[("phase", phase.into())]),
    )
}

#[test]
fn every_norm_round_trips_through_json() {
    let x = [2i64, 4, 3, 3];
    let c = [1i64, 4, 1, 1];
    let nc = [2i64, 4, 1, 1];
    let r = [2i64, 4, 1, 1];
    let rs = [1i64, 4, 3, 3];
    let st = [2i64, 1, 1, 1];
    let graphs = [
        ln_graph("training"),
        ln_graph("inference"),
        one_op("rmsnorm", &[("x", Some(&x), 0.0), ("s", Some(&rs), 0.0), ("e", None, 1e-6)], &training()),
        one_op(
            "rmsnorm_bias",
            &[("x", Some(&x), 0.0), ("s", Some(&rs), 0.0), ("b", Some(&rs), 0.0), ("e", None, 1e-6)],
            &[],
        ),
        one_op(
            "batchnorm",
            &[
                ("x", Some(&x), 0.0),
                ("s", Some(&c), 0.0),
                ("b", Some(&c), 0.0),
                ("rm", Some(&c), 0.0),
                ("rv", Some(&c), 0.0),
                ("e", None, 1e-3),
                ("m", None, 0.1),
            ],
            &[],
        ),
        one_op(
            "batchnorm_inference",
            &[
                ("x", Some(&x), 0.0),
                ("m", Some(&c), 0.0),
                ("v", Some(&c), 0.0),
                ("s", Some(&c), 0.0),
                ("b", Some(&c), 0.0),
            ],
            &[],
        ),
        one_op(
            "instancenorm",
            &[("x", Some(&x), 0.0), ("s", Some(&c), 0.0), ("b", Some(&c), 0.0), ("e", None, 1e-5)],
            &training(),
        ),
        one_op("genstats", &[("x", Some(&x), 0.0)], &[]),
        one_op(
            "layernorm_backward",
            &[
                ("dy", Some(&x), 0.0),
                ("x", Some(&x), 0.0),
                ("s", Some(&rs), 0.0),
                ("m", Some(&st), 0.0),
                ("v", Some(&st), 0.0),
            ],
            &[],
        ),
        one_op(
            "rmsnorm_backward",
            &[("dy", Some(&x), 0.0), ("x", Some(&x), 0.0), ("s", Some(&rs), 0.0), ("v", Some(&st), 0.0)],
            &attrs(&[("dbias", true.into())]),
        ),
        one_op(
            "rmsnorm_backward",
            &[("dy", Some(&x), 0.0), ("x", Some(&x), 0.0), ("s", Some(&rs), 0.0), ("v", Some(&st), 0.0)],
            &[],
        ),
        one_op(
            "batchnorm_backward",
            &[
                ("dy", Some(&x), 0.0),
                ("x", Some(&x), 0.0),
                ("s", Some(&c), 0.0),
                ("m", Some(&c), 0.0),
                ("v", Some(&c), 0.0),
            ],
            &[],
        ),
        one_op(
            "instancenorm_backward",
            &[
                ("dy", Some(&x), 0.0),
                ("x", Some(&x), 0.0),
                ("s", Some(&c), 0.0),
                ("m", Some(&nc), 0.0),
                ("v", Some(&r), 0.0),
            ],
            &[],
        ),
    ];
    let tags = [
        "LAYER_NORM",
        "LAYER_NORM",
        "RMS_NORM",
        "RMS_NORM",
        "BATCHNORM",
        "BATCHNORM_INFERENCE",
        "INSTANCE_NORM",
        "GENSTATS",
        "LAYER_NORM_BPROP",
        "RMS_NORM_BPROP",
        "RMS_NORM_BPROP",
        "DBN",
        "INSTANCE_NORM_BPROP",
    ];
    for (g, tag) in graphs.iter().zip(tags) {
        let text = round_trip(g);
        assert!(text.contains(&format!(r#""tag": "{tag}""#)), "{}: {text}", g.name);
    }
    let text = round_trip(&graphs[0]);
    assert!(text.contains(r#""forward_phase": "TRAINING""#), "{text}");
    assert!(text.contains(r#""outputs": {"Y": "#), "{text}");
    assert!(round_trip(&graphs[1]).contains(r#""forward_phase": "INFERENCE""#));
    assert!(round_trip(&graphs[4]).contains(r#""peer_stats": []"#));
}

/// Replaces the first occurrence of `from` in `text`, which must be there.
fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} not in\n{text}");
    text.replacen(from, to, 1)
}

/// Removes our `cudnn_graph` extension from the node (what cudnn-frontend writes).
fn without_node_extension(text: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
    for n in v["nodes"].as_array_mut().unwrap() {
        n.as_object_mut().unwrap().remove("cudnn_graph");
    }
    v.as_object_mut().unwrap().remove("cudnn_graph");
    serde_json::to_string_pretty(&v).unwrap()
}

#[test]
fn cudnn_frontend_fields_decide_the_op() {
    // Without our extension, the phase comes from `forward_phase`.
    let g = ln_graph("training");
    let back = structure_from_json(&without_node_extension(&structure_to_json(&g))).unwrap();
    assert_eq!(back.nodes[0].op, g.nodes[0].op);
    // The extension must agree with cudnn-frontend's field.
    let text = structure_to_json(&g);
    let bad = edit(&text, r#""name": "training""#, r#""name": "inference""#);
    assert!(
        matches!(structure_from_json(&bad), Err(SerializeError::ExtensionMismatch { ref field, .. }) if field.ends_with("forward_phase")),
        "{:?}",
        structure_from_json(&bad)
    );
    // cudnn-frontend's phase decides the ports: an inference node has no MEAN.
    let bad = edit(&text, r#""forward_phase": "TRAINING""#, r#""forward_phase": "INFERENCE""#);
    assert!(matches!(structure_from_json(&bad), Err(SerializeError::UnknownPort { port, .. }) if port == "MEAN"));
    // cudnn-frontend requires the phase.
    let plain = without_node_extension(&text);
    let missing = edit(&plain, r#""forward_phase": "TRAINING""#, r#""forward_phase": null"#);
    assert!(
        matches!(structure_from_json(&missing), Err(SerializeError::MissingField { ref path }) if path.ends_with("forward_phase"))
    );
    let unknown = edit(&plain, r#""forward_phase": "TRAINING""#, r#""forward_phase": "TRAIN""#);
    assert!(matches!(
        structure_from_json(&unknown),
        Err(SerializeError::UnknownEnum { kind: "norm forward phase", .. })
    ));
    // Multi-GPU batch norm is not supported.
    let c = [1i64, 4, 1, 1];
    let x = [2i64, 4, 3, 3];
    let bn = one_op(
        "batchnorm",
        &[
            ("x", Some(&x), 0.0),
            ("s", Some(&c), 0.0),
            ("b", Some(&c), 0.0),
            ("rm", Some(&c), 0.0),
            ("rv", Some(&c), 0.0),
            ("e", None, 1e-3),
            ("m", None, 0.1),
        ],
        &[],
    );
    let text = structure_to_json(&bn);
    let peers = edit(&text, r#""peer_stats": []"#, r#""peer_stats": [1]"#);
    assert!(matches!(structure_from_json(&peers), Err(SerializeError::Unsupported { .. })));
    // A field another norm has.
    let stray = edit(&text, r#""peer_stats": []"#, r#""forward_phase": "TRAINING""#);
    assert!(matches!(structure_from_json(&stray), Err(SerializeError::UnknownField { .. })));
}

/// An `RMS_NORM` node with a BIAS input reads as `rmsnorm_bias`; an `RMS_NORM_BPROP` with DBIAS
/// as `rmsnorm_backward(dbias = true)`.
#[test]
fn rms_norm_variants_are_told_by_their_ports() {
    let x = [4i64, 8];
    let p = [1i64, 8];
    let biased = one_op(
        "rmsnorm_bias",
        &[("x", Some(&x), 0.0), ("s", Some(&p), 0.0), ("b", Some(&p), 0.0), ("e", None, 1e-5)],
        &[],
    );
    let back = structure_from_json(&without_node_extension(&structure_to_json(&biased))).unwrap();
    assert_eq!(back.nodes[0].op.call_name(), "rmsnorm_bias");
    let st = [4i64, 1];
    let dbias = one_op(
        "rmsnorm_backward",
        &[("dy", Some(&x), 0.0), ("x", Some(&x), 0.0), ("s", Some(&p), 0.0), ("v", Some(&st), 0.0)],
        &attrs(&[("dbias", true.into())]),
    );
    let back = structure_from_json(&without_node_extension(&structure_to_json(&dbias))).unwrap();
    assert_eq!(back.nodes[0].op, dbias.nodes[0].op);
    assert_eq!(back.nodes[0].outputs.len(), 3);
}
