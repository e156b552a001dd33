//! The CPU reference of the normalizations, in f64.
//!
//! Every norm is one computation over *groups*: the elements of X that share an entry of the
//! statistics (MEAN, INV_VARIANCE). The statistics' dims say which elements those are (a dim of 1
//! is reduced), the parameters' dims (SCALE, BIAS) which parameter an element uses, so the same
//! loops serve layer, RMS, batch and instance norm:
//!
//! - forward: `mean = Σx / n` (0 for RMS norm), `var = Σ(x - mean)² / n`,
//!   `inv_var = 1 / sqrt(var + eps)`, `y = scale · (x - mean) · inv_var + bias`;
//! - backward, with `x̂ = (x - mean) · inv_var` and `g = dy · scale`:
//!   `dx = inv_var · (g - Σg / n - x̂ · Σ(g · x̂) / n)` (no `Σg` term for RMS norm),
//!   `dscale = Σ dy · x̂` and `dbias = Σ dy` over the elements that share a parameter.

use super::{Grouping, Norm, NormKind, NormPhase};
use crate::ops::family::OpFamily;
use crate::array::Array;
use crate::dim::packed_strides;

/// Strides that read an array of `dims` broadcast against a larger shape: 0 where a dim is 1.
fn broadcast_strides(dims: &[i64]) -> Vec<usize> {
    let packed = packed_strides(dims);
    dims.iter().zip(packed).map(|(&d, s)| if d == 1 { 0 } else { s as usize }).collect()
}

/// Calls `f(i, a, b)` for every element `i` of an array of `dims` (row-major), with the offsets `a`
/// and `b` of the same element in arrays of dims `a_dims` and `b_dims` read broadcast.
fn visit(dims: &[i64], a_dims: &[i64], b_dims: &[i64], mut f: impl FnMut(usize, usize, usize)) {
    let n = dims.iter().product::<i64>().max(0) as usize;
    let (sa, sb) = (broadcast_strides(a_dims), broadcast_strides(b_dims));
    debug_assert!(sa.len() == dims.len() && sb.len() == dims.len());
    let mut idx = vec![0i64; dims.len()];
    let (mut a, mut b) = (0usize, 0usize);
    for i in 0..n {
        f(i, a, b);
        for axis in (0..dims.len()).rev() {
            idx[axis] += 1;
            a += sa[axis];
            b += sb[axis];
            if idx[axis] < dims[axis] {
                break;
            }
            a -= sa[axis] * dims[axis] as usize;
            b -= sb[axis] * dims[axis] as usize;
            idx[axis] = 0;
        }
    }
}

/// The value of a scalar port (a by-value scalar or an all-1 tensor).
fn scalar(a: &Array) -> f64 {
    a.data.first().copied().unwrap_or(0.0)
}

/// Elements per group.
fn group_size(x: &Array, stats_dims: &[i64]) -> f64 {
    let groups = stats_dims.iter().product::<i64>().max(1);
    (x.data.len() as i64 / groups) as f64
}

/// Per-group mean (zero when not centering) and biased variance (mean square when not centering).
fn moments(x: &Array, stats_dims: &[i64], center: bool) -> (Array, Array) {
    let n = group_size(x, stats_dims);
    let mut mean = Array::zeros(stats_dims);
    if center {
        visit(&x.dims, stats_dims, stats_dims, |i, g, _| mean.data[g] += x.data[i]);
        for m in &mut mean.data {
            *m /= n;
        }
    }
    let mut var = Array::zeros(stats_dims);
    visit(&x.dims, stats_dims, stats_dims, |i, g, _| {
        let d = x.data[i] - mean.data[g];
        var.data[g] += d * d;
    });
    for v in &mut var.data {
        *v /= n;
    }
    (mean, var)
}

/// `y = scale · (x - mean) · inv_var + bias`.
fn affine(x: &Array, mean: &Array, inv_var: &Array, scale: &Array, bias: Option<&Array>) -> Array {
    let mut y = Array::zeros(&x.dims);
    visit(&x.dims, &mean.dims, &scale.dims, |i, g, p| {
        let b = bias.map_or(0.0, |b| b.data[p]);
        y.data[i] = scale.data[p] * (x.data[i] - mean.data[g]) * inv_var.data[g] + b;
    });
    y
}

/// `dx`, `dscale`, `dbias` (see the module docs).
fn backward(dy: &Array, x: &Array, scale: &Array, mean: Option<&Array>, inv_var: &Array) -> [Array; 3] {
    let stats = &inv_var.dims;
    let n = group_size(x, stats);
    let mean_at = |g: usize| mean.map_or(0.0, |m| m.data[g]);
    let (mut dscale, mut dbias) = (Array::zeros(&scale.dims), Array::zeros(&scale.dims));
    let (mut sum_g, mut sum_gx) = (Array::zeros(stats), Array::zeros(stats));
    visit(&x.dims, stats, &scale.dims, |i, g, p| {
        let xhat = (x.data[i] - mean_at(g)) * inv_var.data[g];
        let grad = dy.data[i] * scale.data[p];
        dbias.data[p] += dy.data[i];
        dscale.data[p] += dy.data[i] * xhat;
        sum_g.data[g] += grad;
        sum_gx.data[g] += grad * xhat;
    });
    let mut dx = Array::zeros(&x.dims);
    let center = mean.is_some();
    visit(&x.dims, stats, &scale.dims, |i, g, p| {
        let xhat = (x.data[i] - mean_at(g)) * inv_var.data[g];
        let grad = dy.data[i] * scale.data[p];
        let shift = if center { sum_g.data[g] / n } else { 0.0 };
        dx.data[i] = inv_var.data[g] * (grad - shift - xhat * sum_gx.data[g] / n);
    });
    [dx, dscale, dbias]
}

impl Norm {
    /// The statistics' dims for X and SCALE (see [`Grouping`]).
    fn stats_dims(&self, x: &[i64], scale: &[i64]) -> Vec<i64> {
        let keep = |i: usize| match self.kind.grouping() {
            Grouping::Normalized => scale.get(i) == Some(&1),
            Grouping::PerChannel => i == 1,
            Grouping::PerInstance => i < 2,
        };
        x.iter().enumerate().map(|(i, &d)| if keep(i) { d } else { 1 }).collect()
    }
}

/// Computes the op on the CPU; the outputs are those of [`OpFamily::outputs`], in order.
pub(super) fn reference(op: &Norm, inputs: &[&Array]) -> Vec<Array> {
    let input = |name: &str| op.kind.port_index(name).and_then(|i| inputs.get(i).copied());
    let empty = Array::zeros(&[0]);
    let x = input("X").unwrap_or(&empty);
    let scale = input("SCALE");
    let mut outs: Vec<Array> = match op.kind {
        NormKind::GenStats => {
            let channels: Vec<i64> = op.stats_dims(&x.dims, &[]);
            let (mut sum, mut sq_sum) = (Array::zeros(&channels), Array::zeros(&channels));
            visit(&x.dims, &channels, &channels, |i, c, _| {
                sum.data[c] += x.data[i];
                sq_sum.data[c] += x.data[i] * x.data[i];
            });
            vec![sum, sq_sum]
        }
        NormKind::BatchNormInference => {
            let (mean, inv_var, scale) = (input("MEAN"), input("INV_VARIANCE"), scale);
            let (Some(mean), Some(inv_var), Some(scale)) = (mean, inv_var, scale) else {
                return Vec::new();
            };
            vec![affine(x, mean, inv_var, scale, input("BIAS"))]
        }
        k if k.is_backward() => {
            let (Some(dy), Some(scale), Some(inv_var)) = (input("DY"), scale, input("INV_VARIANCE")) else {
                return Vec::new();
            };
            backward(dy, x, scale, input("MEAN"), inv_var).into()
        }
        _ => {
            let Some(scale) = scale else { return Vec::new() };
            let stats = op.stats_dims(&x.dims, &scale.dims);
            let eps = input("EPSILON").map_or(0.0, scalar);
            let (mean, var) = moments(x, &stats, op.kind.centers());
            let inv_var =
                Array { dims: var.dims.clone(), data: var.data.iter().map(|v| 1.0 / (v + eps).sqrt()).collect() };
            let y = affine(x, &mean, &inv_var, scale, input("BIAS"));
            let mut outs = vec![y];
            if op.kind.centers() {
                outs.push(mean.clone());
            }
            outs.push(inv_var);
            if op.kind == NormKind::BatchNorm {
                let momentum = input("MOMENTUM").map_or(0.0, scalar);
                let (Some(prev_mean), Some(prev_var)) = (input("PREV_RUNNING_MEAN"), input("PREV_RUNNING_VAR"))
                else {
                    return Vec::new();
                };
                let n = group_size(x, &stats);
                let unbiased = if n > 1.0 { n / (n - 1.0) } else { 1.0 };
                let blend = |prev: &Array, batch: &Array, factor: f64| Array {
                    dims: prev.dims.clone(),
                    data: prev
                        .data
                        .iter()
                        .zip(&batch.data)
                        .map(|(p, b)| (1.0 - momentum) * p + momentum * b * factor)
                        .collect(),
                };
                outs.push(blend(prev_mean, &mean, 1.0));
                outs.push(blend(prev_var, &var, unbiased));
            }
            outs
        }
    };
    debug_assert!(op.kind != NormKind::BatchNorm || op.phase == NormPhase::Training);
    outs.truncate(op.outputs().len());
    outs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visit_reads_broadcast_offsets() {
        let mut seen = Vec::new();
        visit(&[2, 3], &[2, 1], &[1, 3], |i, a, b| seen.push((i, a, b)));
        assert_eq!(seen, vec![(0, 0, 0), (1, 0, 1), (2, 0, 2), (3, 1, 0), (4, 1, 1), (5, 1, 2)]);
    }

    #[test]
    fn layernorm_of_a_row() {
        let x = Array { dims: vec![1, 4], data: vec![1.0, 2.0, 3.0, 6.0] };
        let ones = Array { dims: vec![1, 4], data: vec![1.0; 4] };
        let zeros = Array::zeros(&[1, 4]);
        let eps = Array { dims: vec![1, 1], data: vec![0.0] };
        let mut n = Norm::new(NormKind::LayerNorm);
        n.phase = NormPhase::Training;
        let out = n.reference(&[&x, &ones, &zeros, &eps]);
        assert_eq!(out[1].data, vec![3.0]);
        let inv = 1.0 / 3.5f64.sqrt();
        assert_eq!(out[2].data, vec![inv]);
        assert_eq!(out[0].data, vec![-2.0 * inv, -inv, 0.0, 3.0 * inv]);
    }
}
