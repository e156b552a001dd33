//! The scaled fp8 matmul of cudnn-frontend written with `graph!`, on the CPU reference: the
//! values round at the points cuDNN's kernel rounds them (f32 after the matmul, after each
//! descale, the bias and relu; fp8 with saturation at the output), the amax is of the values
//! before the output's scale, and `fp8::scale_from_amax` closes the delayed-scaling loop. fp8
//! attention's backward (`sdpa_backward` with `fp8 = e4m3`) against the unquantized `f64`
//! gradient within cudnn-frontend's fp8 tolerances.

use cudnn_graph::fp8::{scale_from_amax, Fp8Format};
use cudnn_graph::ops::Op;
use cudnn_graph::reference::Array;
use cudnn_graph::rng::SplitMix64;
use cudnn_graph::{graph, Fp8E4M3, Fp8E5M2};
use half::bf16;

graph! {
    /// y = fp8(relu((a·b)·descale_a·descale_b + bias)·scale_y), amax = max |relu(..)|, as
    /// cudnn-frontend's `MatmulFP8Node` with a bias and relu epilogue; B column-major.
    pub ScaledFp8Matmul<const M: usize, const N: usize, const K: usize>(
        a: fp8_e4m3[1, M, K],
        b: fp8_e5m2[1, K, N] order [0, 2, 1],
        descale_a: f32[1, 1, 1],
        descale_b: f32[1, 1, 1],
        bias: bf16[1, 1, N],
        scale_y: f32[1, 1, 1],
    ) -> (y: fp8_e4m3[1, M, N], amax: f32[1, 1, 1]) {
        let d = relu(add(mul(mul(matmul(a, b), descale_a), descale_b), bias));
        amax = reduce_amax(d, dims = [0, 1, 2]);
        y = mul(d, scale_y);
    }

    /// fp8 attention's backward, causal (cudnn-frontend's `sdpa_fp8_backward`): e4m3 Q, K, V,
    /// O, dO; the twelve scale inputs; e4m3 gradients and four amaxes.
    pub Fp8AttentionBackward<const B: usize, const H: usize, const S: usize, const D: usize>(
        q: fp8_e4m3[B, H, S, D],
        k: fp8_e4m3[B, H, S, D],
        v: fp8_e4m3[B, H, S, D],
        o: fp8_e4m3[B, H, S, D],
        d_o: fp8_e4m3[B, H, S, D],
        stats: f32[B, H, S, 1],
        descale_q: f32[1, 1, 1, 1],
        descale_k: f32[1, 1, 1, 1],
        descale_v: f32[1, 1, 1, 1],
        descale_o: f32[1, 1, 1, 1],
        descale_d_o: f32[1, 1, 1, 1],
        descale_s: f32[1, 1, 1, 1],
        descale_dp: f32[1, 1, 1, 1],
        scale_s: f32[1, 1, 1, 1],
        scale_dq: f32[1, 1, 1, 1],
        scale_dk: f32[1, 1, 1, 1],
        scale_dv: f32[1, 1, 1, 1],
        scale_dp: f32[1, 1, 1, 1],
    ) -> (
        dq: fp8_e4m3[B, H, S, D],
        dk: fp8_e4m3[B, H, S, D],
        dv: fp8_e4m3[B, H, S, D],
        amax_dq: f32[1, 1, 1, 1],
        amax_dk: f32[1, 1, 1, 1],
        amax_dv: f32[1, 1, 1, 1],
        amax_dp: f32[1, 1, 1, 1],
    ) {
        (dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp) = sdpa_backward(
            q, k, v, o, d_o, stats,
            descale_q, descale_k, descale_v, descale_o, descale_d_o, descale_s, descale_dp,
            scale_s, scale_dq, scale_dk, scale_dv, scale_dp,
            fp8 = e4m3, causal = true,
        );
    }

    /// The plain form: e4m3 · e4m3 with per-tensor descales, to bf16.
    pub Fp8MatmulBf16<const M: usize, const N: usize, const K: usize>(
        a: fp8_e4m3[1, M, K],
        b: fp8_e4m3[1, K, N],
        descale_a: f32[1, 1, 1],
        descale_b: f32[1, 1, 1],
    ) -> (y: bf16[1, M, N]) {
        y = mul(mul(matmul(a, b), descale_a), descale_b);
    }
}

fn f32r(x: f64) -> f64 {
    x as f32 as f64
}

#[test]
fn scaled_fp8_matmul_rounds_where_cudnn_does_and_saturates() {
    const M: usize = 12;
    const N: usize = 10;
    const K: usize = 24;
    let mut rng = SplitMix64::new(7);
    // Values already scaled into fp8's range; the descales undo the scales.
    let a: Vec<Fp8E4M3> = rng.uniform_vec(M * K, -300.0, 300.0).into_iter().map(Fp8E4M3::from_f64).collect();
    // B is stored column-major: element (k, n) at n * K + k.
    let b: Vec<Fp8E5M2> = rng.uniform_vec(K * N, -2000.0, 2000.0).into_iter().map(Fp8E5M2::from_f64).collect();
    let bias: Vec<bf16> = rng.uniform_vec(N, -0.5, 0.5).into_iter().map(bf16::from_f64).collect();
    let (da, db) = (1.0f32 / 256.0, 1.0f32 / 1024.0);
    // A scale that overflows the largest values: they must saturate to 448, never NaN.
    let scale_y = 4096.0f32;
    let out = ScaledFp8Matmul::<M, N, K>::new()
        .reference(ScaledFp8MatmulInputs {
            a: &a,
            b: &b,
            descale_a: &[da],
            descale_b: &[db],
            bias: &bias,
            scale_y: &[scale_y],
        })
        .unwrap();
    let mut amax = 0.0f64;
    let mut saturated = 0;
    for i in 0..M {
        for j in 0..N {
            let acc: f64 = (0..K).map(|p| a[i * K + p].to_f64() * b[j * K + p].to_f64()).sum();
            let d = f32r(f32r(f32r(acc) * f64::from(da)) * f64::from(db));
            let d = f32r(d + bias[j].to_f64()).max(0.0);
            amax = amax.max(d);
            let scaled = f32r(d * f64::from(scale_y));
            let want = Fp8E4M3::from_f64(scaled);
            assert_eq!(out.y[i * N + j], want, "y[{i},{j}] from {scaled}");
            assert!(!want.to_f64().is_nan());
            if scaled > 448.0 {
                assert_eq!(want, Fp8E4M3::MAX);
                saturated += 1;
            }
        }
    }
    assert!(saturated > 0 && saturated < M * N, "{saturated} saturated");
    assert_eq!(f64::from(out.amax[0]), amax);
    // Delayed scaling: the next scale maps this amax onto 448; nothing saturates with it.
    let next = scale_from_amax(out.amax[0], Fp8Format::E4M3, 0, scale_y);
    assert!(next < scale_y);
    let again = ScaledFp8Matmul::<M, N, K>::new()
        .reference(ScaledFp8MatmulInputs {
            a: &a,
            b: &b,
            descale_a: &[da],
            descale_b: &[db],
            bias: &bias,
            scale_y: &[next],
        })
        .unwrap();
    assert!(again.y.iter().all(|v| v.to_f64().abs() <= 448.0 && !v.to_f64().is_nan()));
    assert!(again.y.iter().any(|v| v.to_f64().abs() >= 416.0), "the largest lands near the top of the range");
}

#[test]
fn plain_fp8_matmul_to_bf16() {
    const M: usize = 8;
    const N: usize = 6;
    const K: usize = 16;
    let mut rng = SplitMix64::new(8);
    let a: Vec<Fp8E4M3> = rng.uniform_vec(M * K, -448.0, 448.0).into_iter().map(Fp8E4M3::from_f64).collect();
    let b: Vec<Fp8E4M3> = rng.uniform_vec(K * N, -448.0, 448.0).into_iter().map(Fp8E4M3::from_f64).collect();
    let (da, db) = (0.125f32, 0.0078125f32);
    let out = Fp8MatmulBf16::<M, N, K>::new()
        .reference(Fp8MatmulBf16Inputs { a: &a, b: &b, descale_a: &[da], descale_b: &[db] })
        .unwrap();
    for i in 0..M {
        for j in 0..N {
            let acc: f64 = (0..K).map(|p| a[i * K + p].to_f64() * b[p * N + j].to_f64()).sum();
            let want = bf16::from_f64(f32r(f32r(f32r(acc) * f64::from(da)) * f64::from(db)));
            assert_eq!(out.y[i * N + j], want, "y[{i},{j}]");
        }
    }
}

/// `x` in e4m3 with a power-of-two scale that puts its amax near the top of the range, and the
/// descale (exact in f32).
fn quantize(x: &[f64]) -> (Vec<Fp8E4M3>, f32) {
    let amax = x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let scale = 2f64.powf((448.0 / amax).log2().floor());
    (x.iter().map(|v| Fp8E4M3::from_f64(v * scale)).collect(), (1.0 / scale) as f32)
}

fn array(dims: &[i64], data: Vec<f64>) -> Array {
    Array { dims: dims.to_vec(), data }
}

fn dequantized(dims: &[i64], x: &[Fp8E4M3], descale: f32) -> Array {
    array(dims, x.iter().map(|v| v.to_f64() * f64::from(descale)).collect())
}

#[test]
fn fp8_attention_backward_is_the_gradient_within_fp8_tolerance() {
    const B: usize = 2;
    const H: usize = 2;
    const S: usize = 32;
    const D: usize = 16;
    let dims = [B as i64, H as i64, S as i64, D as i64];
    let n = B * H * S * D;
    let mut rng = SplitMix64::new(0xf8b);
    let (q, dq_) = quantize(&rng.uniform_vec(n, -1.0, 1.0));
    let (k, dk_) = quantize(&rng.uniform_vec(n, -1.0, 1.0));
    let (v, dv_) = quantize(&rng.uniform_vec(n, -1.0, 1.0));
    let (d_o, ddo) = quantize(&rng.uniform_vec(n, -1.0, 1.0));
    let (qh, kh, vh) = (dequantized(&dims, &q, dq_), dequantized(&dims, &k, dk_), dequantized(&dims, &v, dv_));
    // The forward in f64 gives O (stored in e4m3, as fp8 attention's forward writes it) and Stats.
    let causal = [("causal".to_string(), true.into())];
    let training = [causal[0].clone(), ("training".to_string(), true.into())];
    let fwd = Op::from_call("sdpa", &training).unwrap().reference(&[&qh, &kh, &vh]).unwrap();
    let (o, d_o_o) = quantize(&fwd[0].data);
    let stats: Vec<f32> = fwd[1].data.iter().map(|&s| s as f32).collect();
    // The gradient without quantization, in f64, of the values the fp8 backward sees.
    let (oh, doh) = (dequantized(&dims, &o, d_o_o), dequantized(&dims, &d_o, ddo));
    let stats_a = array(&fwd[1].dims, stats.iter().map(|&s| f64::from(s)).collect());
    let want =
        Op::from_call("sdpa_backward", &causal).unwrap().reference(&[&qh, &kh, &vh, &oh, &doh, &stats_a]).unwrap();
    let graph = Fp8AttentionBackward::<B, H, S, D>::new();
    let scale_s = scale_from_amax(1.0, Fp8Format::E4M3, 0, 1.0);
    let run = |scales: [f32; 4]| {
        let [s_dq, s_dk, s_dv, s_dp] = scales;
        graph
            .reference(Fp8AttentionBackwardInputs {
                q: &q,
                k: &k,
                v: &v,
                o: &o,
                d_o: &d_o,
                stats: &stats,
                descale_q: &[dq_],
                descale_k: &[dk_],
                descale_v: &[dv_],
                descale_o: &[d_o_o],
                descale_d_o: &[ddo],
                descale_s: &[1.0 / scale_s],
                descale_dp: &[1.0 / s_dp],
                scale_s: &[scale_s],
                scale_dq: &[s_dq],
                scale_dk: &[s_dk],
                scale_dv: &[s_dv],
                scale_dp: &[s_dp],
            })
            .unwrap()
    };
    // Delayed scaling: dS's amax first (it precedes its scale), then the gradients' with it.
    let first = run([1.0; 4]);
    let s_dp = scale_from_amax(first.amax_dp[0], Fp8Format::E4M3, 0, 1.0);
    let second = run([1.0, 1.0, 1.0, s_dp]);
    let scale = |a: &[f32]| scale_from_amax(a[0], Fp8Format::E4M3, 0, 1.0);
    let scales = [scale(&second.amax_dq), scale(&second.amax_dk), scale(&second.amax_dv), s_dp];
    let out = run(scales);
    let got = [(&out.dq, &out.amax_dq), (&out.dk, &out.amax_dk), (&out.dv, &out.amax_dv)];
    for ((name, (g, amax)), (w, s)) in ["dQ", "dK", "dV"].iter().zip(got).zip(want.iter().zip(scales)) {
        let w_amax = w.data.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        assert!((f64::from(amax[0]) - w_amax).abs() <= 0.1 * w_amax, "{name}: amax {} vs {w_amax}", amax[0]);
        // cudnn-frontend's fp8 backward tolerances (atol 0.04, rtol 0.2) on the descaled
        // gradient, atol relative to its amax (cudnn-frontend's data has unit-size gradients).
        let (mut worst, mut sq) = (0.0f64, 0.0f64);
        for (e, (x, y)) in g.iter().zip(&w.data).enumerate() {
            let err = (x.to_f64() / f64::from(s) - y).abs();
            assert!(err <= 0.04 * w_amax + 0.2 * y.abs(), "{name}[{e}]: fp8 {}, f64 {y}", x.to_f64() / f64::from(s));
            worst = worst.max(err);
            sq += err * err;
        }
        let rms = (sq / n as f64).sqrt() / w_amax;
        println!("{name}: amax {w_amax:.4e}, worst error {:.3} of it, rms {rms:.4}", worst / w_amax);
        assert!(rms < 0.02, "{name}: rms error {rms} of the amax");
        // Quantized: not the f64 values.
        assert!(g.iter().zip(&w.data).any(|(x, y)| x.to_f64() / f64::from(s) != *y));
    }
    let dp_amax = out.amax_dp[0];
    assert_eq!(dp_amax, first.amax_dp[0], "dS's amax precedes every scale");
}
