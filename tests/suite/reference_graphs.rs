//! The CPU reference engine through `graph!`: every op family on random inputs, against direct
//! f64 computations written here without the engine, and run-time errors of the typed API.

use crate::common;

use common::random;
use cudnn_graph::{graph, ArgError};
use half::{bf16, f16};

graph! {
    pub MatmulBiasRelu<const N: usize, const K: usize, dyn M>(
        a: bf16[1, M, K],
        b: bf16[1, K, N],
        bias: bf16[1, 1, N],
    ) -> (y: bf16[1, M, N]) {
        let c = matmul(a, b);
        let d = add(c, bias);
        y = relu(d);
    }

    pub BatchedGelu<dyn B>(a: f32[B, 5, 7], b: f32[1, 7, 3]) -> (y: f32[B, 5, 3]) {
        y = gelu(matmul(a, b));
    }

    pub ScaleShift(x: f32[3, 4]) -> (y: f32[3, 4]) {
        y = add(mul(x, 0.5), -1.25);
    }

    pub RowStats(x: f64[3, 5]) -> (sum: f64[3, 1], mean: f64[3, 1], amax: f64[1, 5], norm2: f64[3, 1]) {
        sum = reduce_sum(x, dims = [1]);
        mean = reduce_mean(x, dims = [-1]);
        amax = reduce_amax(x, dims = [0]);
        norm2 = reduce_norm2(x, dims = [1]);
    }

    pub Compare(a: f32[6], b: f32[6]) -> (lt: bool[6], sel: f32[6]) {
        let m = cmp_lt(a, b);
        lt = m;
        sel = binary_select(a, b, m);
    }
}

#[test]
fn matmul_bias_relu_matches_direct_f64() {
    let (m, n, k) = (7, 5, 6);
    let g = MatmulBiasRelu::<5, 6>::new(m);
    let (a, b, bias) = (random::<bf16>(1, m * k), random::<bf16>(2, k * n), random::<bf16>(3, n));
    let out = g.reference(MatmulBiasReluInputs { a: &a, b: &b, bias: &bias }).unwrap();
    for i in 0..m {
        for j in 0..n {
            let acc: f64 = (0..k).map(|p| a[i * k + p].to_f64() * b[p * n + j].to_f64()).sum();
            // The sum lives in an f32 intermediate, then the output is bf16.
            let want = bf16::from_f32(((acc as f32) + bias[j].to_f32()).max(0.0));
            assert_eq!(out.y[i * n + j], want, "y[{i},{j}]");
        }
    }
}

#[test]
fn batched_gelu_broadcasts_b() {
    let g = BatchedGelu::new(3);
    let (a, b) = (random::<f32>(4, 3 * 5 * 7), random::<f32>(5, 7 * 3));
    let out = g.reference(BatchedGeluInputs { a: &a, b: &b }).unwrap();
    for batch in 0..3 {
        for i in 0..5 {
            for j in 0..3 {
                let acc: f64 = (0..7).map(|p| a[batch * 35 + i * 7 + p] as f64 * b[p * 3 + j] as f64).sum();
                let acc = acc as f32 as f64;
                let want = 0.5 * acc * (1.0 + libm::erf(acc / std::f64::consts::SQRT_2));
                assert_eq!(out.y[batch * 15 + i * 3 + j], want as f32);
            }
        }
    }
}

#[test]
fn by_value_scalars() {
    let x = random::<f32>(6, 12);
    let out = ScaleShift::new().reference(ScaleShiftInputs { x: &x }).unwrap();
    for (y, x) in out.y.iter().zip(&x) {
        assert_eq!(*y, ((*x as f64 * 0.5) as f32 as f64 - 1.25) as f32);
    }
}

#[test]
fn reductions() {
    let x = random::<f64>(7, 15);
    let out = RowStats::new().reference(RowStatsInputs { x: &x }).unwrap();
    for r in 0..3 {
        let row = &x[r * 5..r * 5 + 5];
        let sum: f64 = row.iter().sum();
        assert!((out.sum[r] - sum).abs() < 1e-15);
        assert!((out.mean[r] - sum / 5.0).abs() < 1e-15);
        assert!((out.norm2[r] - row.iter().map(|v| v * v).sum::<f64>().sqrt()).abs() < 1e-15);
    }
    for c in 0..5 {
        let want = (0..3).map(|r| x[r * 5 + c].abs()).fold(0.0, f64::max);
        assert_eq!(out.amax[c], want);
    }
}

#[test]
fn comparisons_and_select() {
    let (a, b) = (random::<f32>(8, 6), random::<f32>(9, 6));
    let out = Compare::new().reference(CompareInputs { a: &a, b: &b }).unwrap();
    for i in 0..6 {
        assert_eq!(out.lt[i], a[i] < b[i]);
        assert_eq!(out.sel[i], if a[i] < b[i] { a[i] } else { b[i] });
    }
}

#[test]
fn wrong_buffer_length_names_the_port() {
    let g = MatmulBiasRelu::<5, 6>::new(4);
    let (a, b, bias) = (random::<bf16>(1, 4 * 6 - 1), random::<bf16>(2, 30), random::<bf16>(3, 5));
    let err = g.reference(MatmulBiasReluInputs { a: &a, b: &b, bias: &bias }).unwrap_err();
    assert_eq!(
        err,
        ArgError::Length { tensor: "a".into(), expected: 24, found: 23, dims: vec![1, 4, 6], strides: vec![24, 6, 1] }
    );
    assert_eq!(err.to_string(), "tensor `a` needs 24 elements ([1, 4, 6] row-major) but its buffer has 23");
}

graph! {
    pub DynBroadcast<dyn M>(x: f16[1, M, 16], bias: f16[1, 4, 16]) -> (y: f16[1, M, 16]) {
        y = add(x, bias);
    }
}

#[test]
fn runtime_dims_are_checked_at_run_time() {
    // M = 4 is fine; M = 1 broadcasts to [1, 4, 16], which is not the declared [1, M, 16]; M = 3
    // breaks the broadcast rule. Each is a typed error naming the binding.
    assert!(DynBroadcast::new(4).graph().is_ok());
    let err = DynBroadcast::new(1).graph().unwrap_err().to_string();
    assert!(err.contains("tensor `y` is declared [1, 1, 16] but node `y` produces [1, 4, 16]"), "{err}");
    let err = DynBroadcast::new(3).graph().unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ArgError::Binding { .. }));
    assert!(text.starts_with("graph `DynBroadcast` with M = 3: node `y` (add), port IN_1"), "{text}");
    let x = vec![f16::ONE; 48];
    let bias = vec![f16::ONE; 64];
    assert!(DynBroadcast::new(3).reference(DynBroadcastInputs { x: &x, bias: &bias }).is_err());
}

#[test]
fn fingerprints_are_stable_and_distinct() {
    assert_eq!(MatmulBiasRelu::<5, 6>::FINGERPRINT, MatmulBiasRelu::<7, 8>::FINGERPRINT);
    assert_ne!(MatmulBiasRelu::<5, 6>::FINGERPRINT, BatchedGelu::FINGERPRINT);
    let g1 = MatmulBiasRelu::<5, 6>::new(3).graph().unwrap();
    let g2 = MatmulBiasRelu::<5, 6>::new(4).graph().unwrap();
    assert_ne!(g1.fingerprint(), g2.fingerprint());
    assert_eq!(g1.fingerprint(), MatmulBiasRelu::<5, 6>::new(3).graph().unwrap().fingerprint());
}

graph! {
    /// A logical [B, H, S, D] tensor stored BSHD (`order` lists the dims outermost in memory first).
    pub Bshd<dyn B, dyn S>(q: f32[B, 4, S, 16] order [0, 2, 1, 3]) -> (y: f32[B, 4, S, 16] order [0, 2, 1, 3]) {
        y = mul(q, 2.0);
    }
}

#[test]
fn dim_order_lays_tensors_out_in_memory_order() {
    let g = Bshd::new(2, 8);
    let graph = g.graph().unwrap();
    assert_eq!(graph.tensor_by_name("q").unwrap().strides, vec![512, 16, 64, 1]);
    assert_eq!(graph.tensor_by_name("y").unwrap().strides, vec![512, 16, 64, 1]);
    // Element (b, h, s, d) lives at b*512 + s*64 + h*16 + d in both buffers.
    let q = random::<f32>(11, 2 * 8 * 4 * 16);
    let out = g.reference(BshdInputs { q: &q }).unwrap();
    for (i, (y, x)) in out.y.iter().zip(&q).enumerate() {
        assert_eq!(*y, x * 2.0, "element {i}");
    }
}

graph! {
    /// Parameters named like the generated code's own generics (`D`, `S`) must not collide.
    pub NamedLikeGenerics<const D: usize, const S: usize, dyn B>(x: f32[B, S, D]) -> (y: f32[B, S, D]) {
        y = neg(x);
    }
}

#[test]
fn parameter_names_do_not_collide_with_generated_generics() {
    let g = NamedLikeGenerics::<4, 3>::new(2);
    let text = serde_json::to_string(&g).unwrap();
    assert_eq!(serde_json::from_str::<NamedLikeGenerics<4, 3>>(&text).unwrap(), g);
    let x = random::<f32>(12, 24);
    assert_eq!(g.reference(NamedLikeGenericsInputs { x: &x }).unwrap().y, x.iter().map(|v| -v).collect::<Vec<_>>());
}

graph! {
    /// Outputs of a multi-output op assigned directly, as a tuple.
    pub NormTuple<dyn N>(x: f32[N, 16], scale: f32[1, 16], bias: f32[1, 16]) -> (y: f32[N, 16], mean: f32[N, 1], inv_var: f32[N, 1]) {
        (y, mean, inv_var) = layernorm(x, scale, bias, 1e-5, phase = training);
    }

    /// The same through `let` bindings.
    pub NormLet<dyn N>(x: f32[N, 16], scale: f32[1, 16], bias: f32[1, 16]) -> (y: f32[N, 16], mean: f32[N, 1], inv_var: f32[N, 1]) {
        let (a, b, c) = layernorm(x, scale, bias, 1e-5, phase = training);
        y = a;
        mean = b;
        inv_var = c;
    }
}

#[test]
fn tuple_assignment_of_outputs() {
    let (x, scale, bias) = (random::<f32>(13, 5 * 16), random::<f32>(14, 16), random::<f32>(15, 16));
    let t = NormTuple::new(5).reference(NormTupleInputs { x: &x, scale: &scale, bias: &bias }).unwrap();
    let l = NormLet::new(5).reference(NormLetInputs { x: &x, scale: &scale, bias: &bias }).unwrap();
    assert_eq!((t.y, t.mean, t.inv_var), (l.y, l.mean, l.inv_var));
    let graph = NormTuple::new(5).graph().unwrap();
    assert_eq!(graph.nodes.len(), 1, "no identity copies: the op writes the outputs");
}

graph! {
    /// A pooled, clipped convolution: attributes and layouts the printed graph must show.
    pub PrintedConv(x: f16[2, 4, 8, 8] channels_last, w: f16[8, 4, 3, 3] channels_last)
        -> (y: f16[2, 8, 4, 4] channels_last) {
        let c = conv_fprop(x, w, padding = [1, 1]);
        let r = relu(c, upper_clip = 6.0);
        y = resample(r, mode = maxpool, window = [2, 2]);
    }
}

#[test]
fn the_printed_graph_shows_attributes_and_layouts() {
    let text = PrintedConv::new().graph().unwrap().to_string();
    assert!(text.starts_with("graph PrintedConv\n"), "{text}");
    assert!(text.contains("x: f16[2, 4, 8, 8] channels-last"), "{text}");
    assert!(text.contains("padding = [1, 1]"), "{text}");
    assert!(text.contains("upper_clip = 6.0"), "{text}");
    assert!(text.contains("mode = maxpool, window = [2, 2]"), "{text}");
    assert!(text.contains("y: f16[2, 8, 4, 4] channels-last = resample(r: "), "{text}");
}
