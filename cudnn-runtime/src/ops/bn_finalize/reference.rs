//! The CPU reference of `bn_finalize`, in f64, per channel `c` with `n = ACCUM_COUNT`:
//!
//! - `mean = sum / n`, `var = sq_sum / n − mean²` (the biased variance, what the batch is
//!   normalized with), `inv_var = 1 / sqrt(var + eps)`;
//! - `eq_scale = scale · inv_var`, `eq_bias = bias − mean · eq_scale`, so that
//!   `eq_scale · x + eq_bias = scale · (x − mean) · inv_var + bias`;
//! - `next_mean = (1 − m) · prev_mean + m · mean`,
//!   `next_var = (1 − m) · prev_var + m · var · n / (n − 1)` (for `n > 1`; `var` for `n = 1`).
//!
//! Which variance the running variance takes is stated nowhere in cuDNN's or cudnn-frontend's
//! documentation or source for this descriptor: cudnn-frontend's node (`node/bn_finalize.h`) only
//! wires the ports, its samples (`samples/cpp/norm/batchnorm.cpp`, the legacy `run_bn_finalize`)
//! execute without checking values, and the frontend docs' batch-norm formula says "current
//! running variance" without saying biased or unbiased. The unbiased variance is what cuDNN's
//! own batch norm uses (`cudnnBatchNormalizationForwardTraining` documents it, and this crate's
//! `batchnorm`, `NORM_FORWARD` with running statistics, matches it on the H200), and what PyTorch
//! uses, so the reference takes it here too. The device agrees: on the H200 with cuDNN 9.19
//! (2026-12-04), `tests/gpu_suite/gpu_ops_bn_finalize.rs` measured the running variance 1.2e-7 from this
//! rule and 9.6e-5 from the biased one (count 2048, 64 channels).

use crate::array::Array;

/// The value of a scalar port (a by-value scalar or an all-1 tensor).
fn scalar(a: &Array) -> f64 {
    a.data.first().copied().unwrap_or(0.0)
}

/// The six outputs from the nine inputs (in the signature's order: SUM, SQ_SUM, SCALE, BIAS,
/// PREV_RUNNING_MEAN, PREV_RUNNING_VAR, EPSILON, MOMENTUM, ACCUM_COUNT).
pub(super) fn finalize(inputs: &[&Array]) -> [Array; 6] {
    let [sum, sq_sum, scale, bias, prev_mean, prev_var, eps, momentum, count] = inputs else {
        // `Op::reference` checks the arity first.
        let empty = Array::zeros(&[0]);
        return std::array::from_fn(|_| empty.clone());
    };
    let (eps, m, n) = (scalar(eps), scalar(momentum), scalar(count));
    let unbiased = if n > 1.0 { n / (n - 1.0) } else { 1.0 };
    let dims = &sum.dims;
    let mut out: [Array; 6] = std::array::from_fn(|_| Array::zeros(dims));
    for c in 0..sum.data.len() {
        let mean = sum.data[c] / n;
        let var = sq_sum.data[c] / n - mean * mean;
        let inv_var = 1.0 / (var + eps).sqrt();
        let eq_scale = scale.data[c] * inv_var;
        let values = [
            eq_scale,
            bias.data[c] - mean * eq_scale,
            mean,
            inv_var,
            (1.0 - m) * prev_mean.data[c] + m * mean,
            (1.0 - m) * prev_var.data[c] + m * var * unbiased,
        ];
        for (o, v) in out.iter_mut().zip(values) {
            o.data[c] = v;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(dims: &[i64], data: &[f64]) -> Array {
        Array { dims: dims.to_vec(), data: data.to_vec() }
    }

    /// Sums of the channel values [1, 2, 3, 6] (mean 3, biased variance 3.5, unbiased 14/3).
    #[test]
    fn finalizes_known_sums() {
        let c = [1, 1, 1, 1];
        let (sum, sq_sum) = (a(&c, &[12.0]), a(&c, &[50.0]));
        let (scale, bias) = (a(&c, &[2.0]), a(&c, &[0.5]));
        let (prev_mean, prev_var) = (a(&c, &[1.0]), a(&c, &[2.0]));
        let (eps, m, n) = (a(&c, &[0.5]), a(&c, &[0.25]), a(&c, &[4.0]));
        let out = finalize(&[&sum, &sq_sum, &scale, &bias, &prev_mean, &prev_var, &eps, &m, &n]);
        let inv = 0.5; // 1 / sqrt(3.5 + 0.5)
        assert_eq!(out[0].data, [2.0 * inv]);
        assert_eq!(out[1].data, [0.5 - 3.0 * 2.0 * inv]);
        assert_eq!(out[2].data, [3.0]);
        assert_eq!(out[3].data, [inv]);
        assert_eq!(out[4].data, [0.75 * 1.0 + 0.25 * 3.0]);
        assert!((out[5].data[0] - (0.75 * 2.0 + 0.25 * 14.0 / 3.0)).abs() < 1e-12);
    }
}
