//! The normalizations through `graph!` on the CPU reference engine: tuple bindings of the
//! training statistics, epsilon as a literal and as a tensor, const-generic and `dyn` dims, nested
//! calls, and the same graph made with the builder API.

use crate::common;

use common::random;
use cudnn_graph::{graph, reference, DataType, GraphBuilder};
use half::bf16;

graph! {
    /// Training: three outputs bound by one `let`.
    pub LnTrain<const H: usize, dyn N>(x: f32[N, H], scale: f32[1, H], bias: f32[1, H])
        -> (y: f32[N, H], mean: f32[N, 1], inv_var: f32[N, 1])
    {
        let (out, m, v) = layernorm(x, scale, bias, 1e-5, phase = training);
        y = out;
        mean = m;
        inv_var = v;
    }

    /// Inference, epsilon given as a tensor.
    pub LnEpsTensor<dyn N, dyn H>(x: f32[N, H], scale: f32[1, H], bias: f32[1, H], eps: f32[1, 1]) -> (y: f32[N, H]) {
        y = layernorm(x, scale, bias, eps);
    }

    /// An RMS norm feeding a matmul, then a residual add.
    pub RmsProj<dyn M, dyn K, dyn N>(x: bf16[M, K], scale: bf16[1, K], w: bf16[K, N], r: bf16[M, N]) -> (y: bf16[M, N]) {
        y = add(matmul(rmsnorm(x, scale, 1e-6), w), r);
    }

    /// Batch norm backward after a batch-norm-inference forward and a ReLU backward
    /// (cudnn-frontend's "BN_inference DRelu DBN").
    pub BnInferDreluDbn<dyn N, dyn C, dyn S>(
        x: f32[N, C, S, S],
        dy: f32[N, C, S, S],
        scale: f32[1, C, 1, 1],
        bias: f32[1, C, 1, 1],
        mean: f32[1, C, 1, 1],
        inv_var: f32[1, C, 1, 1],
    ) -> (dx: f32[N, C, S, S], dscale: f32[1, C, 1, 1], dbias: f32[1, C, 1, 1]) {
        let y = batchnorm_inference(x, mean, inv_var, scale, bias);
        let (a, b, c) = batchnorm_backward(relu_bwd(dy, y), x, scale, mean, inv_var);
        dx = a;
        dscale = b;
        dbias = c;
    }
}

#[test]
fn layernorm_training_through_the_macro() {
    let (n, h) = (6usize, 16usize);
    let x = random::<f32>(1, n * h);
    let scale = random::<f32>(2, h);
    let bias = random::<f32>(3, h);
    let g = LnTrain::<16>::new(n);
    let out = g.reference(LnTrainInputs { x: &x, scale: &scale, bias: &bias }).unwrap();
    for r in 0..n {
        let row: Vec<f64> = x[r * h..(r + 1) * h].iter().map(|&v| f64::from(v)).collect();
        let mean = row.iter().sum::<f64>() / h as f64;
        let inv = 1.0 / (row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / h as f64 + 1e-5f32 as f64).sqrt();
        assert!((f64::from(out.mean[r]) - mean).abs() < 1e-6);
        assert!((f64::from(out.inv_var[r]) - inv).abs() < 1e-5 * inv);
        for j in 0..h {
            let want = f64::from(scale[j]) * (row[j] - mean) * inv + f64::from(bias[j]);
            assert!((f64::from(out.y[r * h + j]) - want).abs() < 1e-5, "row {r} col {j}");
        }
    }

    // The builder makes the same graph, up to names.
    let mut b = GraphBuilder::new("LnTrain");
    let xi = b.input("x", DataType::F32, &[n as i64, 16]).unwrap();
    let si = b.input("scale", DataType::F32, &[1, 16]).unwrap();
    let bi = b.input("bias", DataType::F32, &[1, 16]).unwrap();
    let outs = b
        .op("layernorm", &[xi.into(), si.into(), bi.into(), 1e-5.into()], &[("phase".into(), "training".into())])
        .unwrap();
    for (o, name) in outs.into_iter().zip(["y", "mean", "inv_var"]) {
        b.output(o, name, DataType::F32).unwrap();
    }
    let built = b.build().unwrap();
    assert_eq!(built.fingerprint(), g.graph().unwrap().fingerprint());
    let again =
        reference::run(&built, &[("x", (&x).into()), ("scale", (&scale).into()), ("bias", (&bias).into())]).unwrap();
    assert_eq!(again[0].data, out.y.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
}

#[test]
fn epsilon_as_a_tensor_equals_epsilon_as_a_number() {
    let (n, h) = (3usize, 8usize);
    let x = random::<f32>(4, n * h);
    let scale = random::<f32>(5, h);
    let bias = random::<f32>(6, h);
    let by_tensor = LnEpsTensor::new(n, h)
        .reference(LnEpsTensorInputs { x: &x, scale: &scale, bias: &bias, eps: &[1e-5] })
        .unwrap();
    let by_value = LnTrain::<8>::new(n).reference(LnTrainInputs { x: &x, scale: &scale, bias: &bias }).unwrap();
    assert_eq!(by_tensor.y, by_value.y);
    assert_ne!(LnEpsTensor::FINGERPRINT, LnTrain::<8>::FINGERPRINT);
}

#[test]
fn rmsnorm_feeding_a_matmul() {
    let (m, k, n) = (4usize, 8usize, 3usize);
    let x = random::<bf16>(7, m * k);
    let scale = random::<bf16>(8, k);
    let w = random::<bf16>(9, k * n);
    let r = random::<bf16>(10, m * n);
    let out = RmsProj::new(m, k, n).reference(RmsProjInputs { x: &x, scale: &scale, w: &w, r: &r }).unwrap();
    let f = |v: &bf16| v.to_f64();
    for i in 0..m {
        let row: Vec<f64> = x[i * k..(i + 1) * k].iter().map(f).collect();
        let inv = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / k as f64 + 1e-6f32 as f64).sqrt();
        // The normalized row is stored as an f32 intermediate before the matmul.
        let normed: Vec<f64> = (0..k).map(|p| f64::from((f(&scale[p]) * row[p] * inv) as f32)).collect();
        for j in 0..n {
            let want = (0..k).map(|p| normed[p] * f(&w[p * n + j])).sum::<f64>() + f(&r[i * n + j]);
            assert!((out.y[i * n + j].to_f64() - want).abs() <= 1e-2 * (1.0 + want.abs()));
        }
    }
}

#[test]
fn batchnorm_inference_relu_backward_and_dbn() {
    let (n, c, s) = (2usize, 3usize, 4usize);
    let len = n * c * s * s;
    let x = random::<f32>(11, len);
    let dy = random::<f32>(12, len);
    let scale = random::<f32>(13, c);
    let bias = random::<f32>(14, c);
    let mean = random::<f32>(15, c);
    let inv_var: Vec<f32> = random::<f32>(16, c).iter().map(|v| 1.5 + v).collect();
    let inputs = BnInferDreluDbnInputs { x: &x, dy: &dy, scale: &scale, bias: &bias, mean: &mean, inv_var: &inv_var };
    let out = BnInferDreluDbn::new(n, c, s).reference(inputs).unwrap();
    // dbias is Σ over N, H, W of relu'(y) · dy, per channel.
    for ch in 0..c {
        let want: f64 = (0..len)
            .filter(|i| (i / (s * s)) % c == ch)
            .map(|i| {
                let y = f64::from(scale[ch]) * (f64::from(x[i]) - f64::from(mean[ch])) * f64::from(inv_var[ch])
                    + f64::from(bias[ch]);
                if y > 0.0 {
                    f64::from(dy[i])
                } else {
                    0.0
                }
            })
            .sum();
        assert!((f64::from(out.dbias[ch]) - want).abs() < 1e-5, "channel {ch}");
    }
    assert_eq!(out.dx.len(), len);
}
