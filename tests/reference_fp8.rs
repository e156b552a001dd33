//! The scaled fp8 matmul of cudnn-frontend written with `graph!`, on the CPU reference: the
//! values round at the points cuDNN's kernel rounds them (f32 after the matmul, after each
//! descale, the bias and relu; fp8 with saturation at the output), the amax is of the values
//! before the output's scale, and `fp8::scale_from_amax` closes the delayed-scaling loop.

use cudnn_graph::fp8::{scale_from_amax, Fp8Format};
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
