//! The CPU reference of attention, forward and backward: naive loops, `f64` throughout.
//!
//! Masking follows cudnn-frontend: with `padding_mask`, query rows at or past `SEQ_LEN_Q[b]` and
//! key columns at or past `SEQ_LEN_KV[b]` are masked; causal keeps `j <= i + shift` and a window
//! of `w` keeps `j > i + shift - w`, where `shift` is `S_kv - S_q` (the actual lengths with a
//! padding mask) for bottom-right alignment and 0 for top-left. A row with no visible key has
//! `O = 0`, `Stats = -inf` and no gradient (cuDNN leaves such rows unspecified).
//!
//! A paged node (`paged = true`) is computed over the K and V its page tables gather
//! ([`super::paged`]), a ragged one (`ragged = true`) over the padded batch its packed tensors
//! unpack to, its outputs packed back ([`super::ragged`]).
//!
//! Dropout keeps each score with probability `1 - p` and scales kept ones by `1 / (1 - p)`. The
//! mask here is a documented hash of (seed, offset, position) ([`dropout_keep`]); cuDNN's
//! Philox stream is not reproduced, so dropout results agree with the GPU statistically, not
//! element by element.

use super::{Sdpa, SdpaPass};
use crate::ops::family::OpFamily;
use crate::array::Array;

/// Dims of a 4-d array.
fn dims4(a: &Array) -> [usize; 4] {
    let d = |i: usize| a.dims.get(i).copied().unwrap_or(1).max(0) as usize;
    [d(0), d(1), d(2), d(3)]
}

/// Row-major offset of `[i0, i1, i2, i3]` in an array of `dims`, with dims of extent 1
/// broadcast.
fn at(dims: [usize; 4], idx: [usize; 4]) -> usize {
    let i = |k: usize| if dims[k] == 1 { 0 } else { idx[k] };
    ((i(0) * dims[1] + i(1)) * dims[2] + i(2)) * dims[3] + i(3)
}

/// Whether dropout keeps score `(b, h, i, j)`: a splitmix64 hash of the seed, the offset and the
/// position in the `[B, H_q, S_q, S_kv]` score tensor, compared with `p`.
pub fn dropout_keep(seed: i64, offset: i64, flat: u64, p: f64) -> bool {
    let z = crate::rng::mix(
        (seed as u64)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add((offset as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9))
            .wrapping_add(flat),
    );
    let u = (z >> 11) as f64 / (1u64 << 53) as f64;
    u >= p
}

/// Everything the passes share: dims, the score rule and the masks.
struct Problem<'a> {
    op: &'a Sdpa,
    q: &'a Array,
    k: &'a Array,
    v: &'a Array,
    bias: Option<&'a Array>,
    seq_q: Option<&'a Array>,
    seq_kv: Option<&'a Array>,
    seed_offset: Option<(i64, i64)>,
    /// The attention scale alone.
    attn_scale: f64,
    /// The factor of `Q·Kᵀ` in the scores: the attention scale, times Q's and K's descales in
    /// fp8 attention.
    scale: f64,
    b: usize,
    h_q: usize,
    s_q: usize,
    d_qk: usize,
    h_k: usize,
    s_kv: usize,
    h_v: usize,
    d_v: usize,
}

impl<'a> Problem<'a> {
    fn new(op: &'a Sdpa, inputs: &[&'a Array]) -> Problem<'a> {
        let get = |name: &str| op.input_index(name).and_then(|i| inputs.get(i).copied());
        let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
        let [b, h_q, s_q, d_qk] = dims4(q);
        let [_, h_k, s_kv, _] = dims4(k);
        let [_, h_v, _, d_v] = dims4(v);
        // cuDNN applies the scale as an f32; fp8 attention multiplies by Q's and K's descales
        // after it.
        let attn_scale = match op.literal_scale(d_qk as i64) {
            Some(s) => crate::DataType::F32.round(s),
            None => get("Attn_scale").and_then(|t| t.data.first().copied()).unwrap_or(1.0),
        };
        let factor = |name: &str| get(name).and_then(|t| t.data.first().copied()).unwrap_or(1.0);
        let scale = if op.fp8.is_some() { attn_scale * factor("Descale_Q") * factor("Descale_K") } else { attn_scale };
        let scalar = |name: &str| get(name).and_then(|t| t.data.first().copied()).unwrap_or(0.0) as i64;
        let seed_offset = op.dropout.map(|_| (scalar("Seed"), scalar("Offset")));
        Problem {
            op,
            q,
            k,
            v,
            bias: get("Bias"),
            seq_q: get("SEQ_LEN_Q"),
            seq_kv: get("SEQ_LEN_KV"),
            seed_offset,
            attn_scale,
            scale,
            b,
            h_q,
            s_q,
            d_qk,
            h_k: h_k.max(1),
            s_kv,
            h_v: h_v.max(1),
            d_v,
        }
    }

    /// The actual lengths of batch `b`.
    fn lengths(&self, b: usize) -> (usize, usize) {
        let len = |t: Option<&Array>, max: usize| {
            t.and_then(|t| t.data.get(b)).map_or(max, |v| (v.max(0.0) as usize).min(max))
        };
        if self.op.padding_mask {
            (len(self.seq_q, self.s_q), len(self.seq_kv, self.s_kv))
        } else {
            (self.s_q, self.s_kv)
        }
    }

    /// Whether query `i` sees key `j` in batch `b`.
    fn visible(&self, b: usize, i: usize, j: usize) -> bool {
        let (sq, skv) = self.lengths(b);
        if i >= sq || j >= skv {
            return false;
        }
        let shift = if self.op.bottom_right() { skv as i64 - sq as i64 } else { 0 };
        let (i, j) = (i as i64, j as i64);
        if self.op.causal && j > i + shift {
            return false;
        }
        if let Some(w) = self.op.window {
            if j <= i + shift - w {
                return false;
            }
        }
        true
    }

    /// The dropout factor of score `(b, h, i, j)`: 0 or `1 / (1 - p)` (1 without dropout).
    fn dropout(&self, b: usize, h: usize, i: usize, j: usize) -> f64 {
        match (self.op.dropout, self.seed_offset) {
            (Some(p), Some((seed, offset))) => {
                let flat = (((b * self.h_q + h) * self.s_q + i) * self.s_kv + j) as u64;
                if dropout_keep(seed, offset, flat, p) {
                    // cuDNN scales by an f32.
                    crate::DataType::F32.round(1.0 / (1.0 - p))
                } else {
                    0.0
                }
            }
            _ => 1.0,
        }
    }

    /// The scores of row `(b, h, i)`: `scale · q·k + bias`, `-inf` where masked.
    fn scores(&self, b: usize, h: usize, i: usize) -> Vec<f64> {
        let hk = h / (self.h_q / self.h_k).max(1);
        let qd = dims4(self.q);
        let kd = dims4(self.k);
        (0..self.s_kv)
            .map(|j| {
                if !self.visible(b, i, j) {
                    return f64::NEG_INFINITY;
                }
                let dot: f64 = (0..self.d_qk)
                    .map(|d| self.q.data[at(qd, [b, h, i, d])] * self.k.data[at(kd, [b, hk, j, d])])
                    .sum();
                let bias = self.bias.map_or(0.0, |t| t.data[at(dims4(t), [b, h, i, j])]);
                self.scale * dot + bias
            })
            .collect()
    }

    fn v_head(&self, h: usize) -> usize {
        h / (self.h_q / self.h_v).max(1)
    }
}

/// `max + ln Σ exp(s - max)` of a row, `-inf` when every score is.
fn log_sum_exp(row: &[f64]) -> f64 {
    let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + row.iter().map(|s| (s - m).exp()).sum::<f64>().ln()
}

impl Sdpa {

    /// The reference of a node whose sequences are padded (or unpacked already).
    fn padded(&self, inputs: &[&Array]) -> Vec<Array> {
        if let Some((k, v)) = super::paged::dense_kv(self, inputs) {
            // A paged cache is the dense attention over the tokens its tables name.
            let mut dense = inputs.to_vec();
            dense[1] = &k;
            dense[2] = &v;
            return self.forward(&dense);
        }
        match self.pass {
            SdpaPass::Forward => self.forward(inputs),
            SdpaPass::Backward => self.backward(inputs),
        }
    }

    fn forward(&self, inputs: &[&Array]) -> Vec<Array> {
        if let Some(fp8) = self.fp8 {
            return self.forward_fp8(inputs, fp8);
        }
        let (o, stats) = Problem::new(self, inputs).forward_sums(|w| w);
        let mut outs = vec![o];
        if self.training {
            outs.push(stats);
        }
        outs
    }

    /// fp8 attention, quantized where cudnn-frontend's `sdpa_fp8` quantizes: `P · Scale_S` is
    /// rounded to Q's fp8 type before the second matmul (`Amax_S` is `max |P|` before the scale),
    /// and `O' = Descale_S · Descale_V · P8·V` is rounded to O's type after `Scale_O`
    /// (`Amax_O = max |O'|`); everything else is `f64`. `[O, Amax_S, Amax_O]` or
    /// `[O, Stats, Amax_S, Amax_O]`.
    fn forward_fp8(&self, inputs: &[&Array], fp8: crate::DataType) -> Vec<Array> {
        let factor = |name: &str| self.factor(inputs, name);
        let (scale_s, descale_s, descale_v, scale_o) =
            (factor("Scale_S"), factor("Descale_S"), factor("Descale_V"), factor("Scale_O"));
        let (mut amax_s, mut amax_o) = (0.0f64, 0.0f64);
        let (mut o, stats) = Problem::new(self, inputs).forward_sums(|w| {
            amax_s = amax_s.max(w.abs());
            fp8.round(w * scale_s)
        });
        for x in &mut o.data {
            let descaled = *x * descale_s * descale_v;
            amax_o = amax_o.max(descaled.abs());
            *x = fp8.round(descaled * scale_o);
        }
        let scalar = |v: f64| Array { dims: vec![1; 4], data: vec![v] };
        let mut outs = vec![o];
        if self.training {
            outs.push(stats);
        }
        outs.extend([scalar(amax_s), scalar(amax_o)]);
        outs
    }

    /// The value of scalar input `name` (1 where the instance has none).
    fn factor(&self, inputs: &[&Array], name: &str) -> f64 {
        self.input_index(name).and_then(|i| inputs.get(i)).and_then(|t| t.data.first().copied()).unwrap_or(1.0)
    }

    /// fp8 attention's backward, quantized where cudnn-frontend's `sdpa_fp8_backward` quantizes
    /// (its `SDPAFP8BackwardNode` without MXFP8); everything else is `f64`:
    ///
    /// - `D = Descale_dO · Descale_O · Σ_d dO·O` from the stored fp8 O and dO;
    /// - `P = exp(S − Stats)` with `S = scale · Descale_Q · Descale_K · Q·Kᵀ`, masked, and
    ///   `P8 = fp8(P · Scale_S)`;
    /// - `dV' = Descale_S · Descale_dO · P8ᵀ·dO`, `Amax_dV = max |dV'|`, `dV = fp8(dV' · Scale_dV)`;
    /// - `dS = P ⊙ (Descale_dO · Descale_V · dO·Vᵀ − D) · scale`, `Amax_dP = max |dS|`,
    ///   `dS8 = fp8(dS · Scale_dP)`;
    /// - `dQ' = Descale_dP · Descale_K · dS8·K`, `dK' = Descale_dP · Descale_Q · dS8ᵀ·Q`, their
    ///   amaxes, `dQ = fp8(dQ' · Scale_dQ)`, `dK = fp8(dK' · Scale_dK)`.
    ///
    /// Grouped heads sum the group's dK', dV' before the descales, as `MatmulFP8Node` does.
    /// `[dQ, dK, dV, Amax_dQ, Amax_dK, Amax_dV, Amax_dP]`.
    fn backward_fp8(&self, inputs: &[&Array], fp8: crate::DataType) -> Vec<Array> {
        let p = Problem::new(self, inputs);
        let f = |name: &str| self.factor(inputs, name);
        let mut amax_dp = 0.0f64;
        let [mut dq, mut dk, mut dv] = p.backward_sums(inputs, |g| {
            let delta = g.do_o * f("Descale_dO") * f("Descale_O");
            let ds = g.prob * (g.do_v * f("Descale_dO") * f("Descale_V") - delta) * p.attn_scale;
            amax_dp = amax_dp.max(ds.abs());
            (fp8.round(g.prob * f("Scale_S")), fp8.round(ds * f("Scale_dP")))
        });
        // MatmulFP8Node: both descales, the amax, then the output's scale into fp8.
        let finish = |a: &mut Array, descales: f64, scale: f64| {
            let mut amax = 0.0f64;
            for x in &mut a.data {
                let descaled = *x * descales;
                amax = amax.max(descaled.abs());
                *x = fp8.round(descaled * scale);
            }
            amax
        };
        let amax_dq = finish(&mut dq, f("Descale_dP") * f("Descale_K"), f("Scale_dQ"));
        let amax_dk = finish(&mut dk, f("Descale_dP") * f("Descale_Q"), f("Scale_dK"));
        let amax_dv = finish(&mut dv, f("Descale_S") * f("Descale_dO"), f("Scale_dV"));
        let scalar = |v: f64| Array { dims: vec![1; 4], data: vec![v] };
        vec![dq, dk, dv, scalar(amax_dq), scalar(amax_dk), scalar(amax_dv), scalar(amax_dp)]
    }

    /// The backward: `dV += P̃ᵀ·dO`, `dS = P ⊙ (dP̃ ⊙ keep − Σ_d dO·O)` with `dP̃ = dO·Vᵀ`,
    /// `dBias = dS`, `dQ += scale · dS·K`, `dK += scale · dSᵀ·Q`.
    fn backward(&self, inputs: &[&Array]) -> Vec<Array> {
        if let Some(fp8) = self.fp8 {
            return self.backward_fp8(inputs, fp8);
        }
        let p = Problem::new(self, inputs);
        let mut dbias = p.bias.map(|t| Array::zeros(&t.dims));
        let [dq, dk, dv] = p.backward_sums(inputs, |g| {
            let keep = p.dropout(g.b, g.h, g.i, g.j);
            let ds = g.prob * (g.do_v * keep - g.do_o);
            if let (Some(db), Some(bias)) = (dbias.as_mut(), p.bias) {
                db.data[at(dims4(bias), [g.b, g.h, g.i, g.j])] += ds;
            }
            (g.prob * keep, p.scale * ds)
        });
        let mut outs = vec![dq, dk, dv];
        if self.d_bias {
            outs.push(dbias.unwrap_or_else(|| Array::zeros(&[1])));
        }
        outs
    }
}

/// One visible score `(b, h, i, j)` of the backward: its probability `P = exp(S − Stats)` and the
/// two dot products both backward passes start from.
struct ScoreGrad {
    b: usize,
    h: usize,
    i: usize,
    j: usize,
    prob: f64,
    /// `Σ_d dO·O` of row `i` (the softmax backward's delta, before any descale).
    do_o: f64,
    /// `Σ_d dO_i·V_j` (`dP`, before dropout or descales).
    do_v: f64,
}

impl Problem<'_> {
    /// The loop both forward passes share: `O = Σ_j weight(P_ij · dropout_ij) · V_j` over every
    /// row with a visible score, and `Stats` (each row's log-sum-exp, `-inf` for a row that sees
    /// nothing, whose O stays 0). `weight` is the identity, or fp8's quantization of `P`.
    fn forward_sums(&self, mut weight: impl FnMut(f64) -> f64) -> (Array, Array) {
        let vd = dims4(self.v);
        let mut o = Array::zeros(&[self.b as i64, self.h_q as i64, self.s_q as i64, self.d_v as i64]);
        let mut stats = Array::zeros(&[self.b as i64, self.h_q as i64, self.s_q as i64, 1]);
        for b in 0..self.b {
            for h in 0..self.h_q {
                let hv = self.v_head(h);
                for i in 0..self.s_q {
                    let s = self.scores(b, h, i);
                    let lse = log_sum_exp(&s);
                    stats.data[(b * self.h_q + h) * self.s_q + i] = lse;
                    if lse == f64::NEG_INFINITY {
                        continue;
                    }
                    let row = ((b * self.h_q + h) * self.s_q + i) * self.d_v;
                    for (j, sj) in s.iter().enumerate() {
                        let w = weight((sj - lse).exp() * self.dropout(b, h, i, j));
                        if w == 0.0 {
                            continue;
                        }
                        for d in 0..self.d_v {
                            o.data[row + d] += w * self.v.data[at(vd, [b, hv, j, d])];
                        }
                    }
                }
            }
        }
        (o, stats)
    }

    /// The loop both backward passes share, over every visible score of the backward's inputs
    /// (`O`, `dO`, `Stats` after Q, K, V). `weights` gives each score's `(w_v, w_qk)`, and the
    /// sums are `dV_j += w_v · dO_i`, `dQ_i += w_qk · K_j`, `dK_j += w_qk · Q_i` (grouped heads
    /// summing into their shared K and V head). `[dQ, dK, dV]`.
    fn backward_sums(&self, inputs: &[&Array], mut weights: impl FnMut(&ScoreGrad) -> (f64, f64)) -> [Array; 3] {
        let (o, d_o, stats) = (inputs[3], inputs[4], inputs[5]);
        let (qd, kd, vd, od) = (dims4(self.q), dims4(self.k), dims4(self.v), dims4(o));
        let mut dq = Array::zeros(&self.q.dims);
        let mut dk = Array::zeros(&self.k.dims);
        let mut dv = Array::zeros(&self.v.dims);
        for b in 0..self.b {
            for h in 0..self.h_q {
                let hk = h / (self.h_q / self.h_k).max(1);
                let hv = self.v_head(h);
                for i in 0..self.s_q {
                    let s = self.scores(b, h, i);
                    let lse = stats.data.get((b * self.h_q + h) * self.s_q + i).copied().unwrap_or(f64::NEG_INFINITY);
                    let d_o_row = |d: usize| d_o.data[at(od, [b, h, i, d])];
                    let do_o: f64 = (0..self.d_v).map(|d| d_o_row(d) * o.data[at(od, [b, h, i, d])]).sum();
                    for (j, sj) in s.iter().enumerate() {
                        if *sj == f64::NEG_INFINITY {
                            continue;
                        }
                        let do_v = (0..self.d_v).map(|d| d_o_row(d) * self.v.data[at(vd, [b, hv, j, d])]).sum();
                        let score = ScoreGrad { b, h, i, j, prob: (sj - lse).exp(), do_o, do_v };
                        let (w_v, w_qk) = weights(&score);
                        for d in 0..self.d_v {
                            dv.data[at(vd, [b, hv, j, d])] += w_v * d_o_row(d);
                        }
                        for d in 0..self.d_qk {
                            dq.data[at(qd, [b, h, i, d])] += w_qk * self.k.data[at(kd, [b, hk, j, d])];
                            dk.data[at(kd, [b, hk, j, d])] += w_qk * self.q.data[at(qd, [b, h, i, d])];
                        }
                    }
                }
            }
        }
        [dq, dk, dv]
    }
}

/// Computes the op on the CPU: `[O]` or `[O, Stats]` forward, `[dQ, dK, dV]` or
/// `[dQ, dK, dV, dBias]` backward (validated graphs only: dims are the shape rule's).
pub(super) fn reference(op: &Sdpa, inputs: &[&Array]) -> Vec<Array> {
    if inputs.len() < op.inputs().len() {
        return Vec::new();
    }
    // Packed sequences are the padded batch they unpack to.
    if let Some(outs) = super::ragged::reference(op, inputs, |padded| op.padded(padded)) {
        return outs;
    }
    op.padded(inputs)
}
