use cudnn_graph::graph;
use half::{bf16, f16};

graph! {
    /// The DESIGN sketch: const generics, a runtime dim, a broadcast bias.
    pub MatmulBiasRelu<const N: usize, const K: usize, dyn M>(
        a: bf16[1, M, K],
        b: bf16[1, K, N],
        bias: bf16[1, 1, N],
    ) -> (y: bf16[1, M, N]) {
        let c = matmul(a, b);
        let d = add(c, bias);
        y = relu(d);
    }

    /// Nested calls, a by-value scalar, attributes, several outputs.
    #[compute(f32)]
    #[intermediate(f32)]
    pub Mixed<const K: usize>(a: f16[2, 8, K], b: f16[1, K, 64]) -> (y: f16[2, 8, 64], s: f32[2, 8, 1]) {
        let c = matmul(a, b);
        y = gelu_tanh(mul(relu(c, upper_clip = 6.0), 0.5));
        s = reduce_sum(c, dims = [-1]);
    }

    /// A literal meeting a const generic is fine when the instantiation agrees.
    pub Fixed<const K: usize>(a: f32[1, 4, K], b: f32[1, 16, 4]) -> (c: f32[1, 4, 4]) {
        c = matmul(a, b);
    }
}

fn main() {
    let g = MatmulBiasRelu::<4, 8>::new(3);
    let graph = g.graph().unwrap();
    assert_eq!(graph.tensor_by_name("y").unwrap().dims, vec![1, 3, 4]);
    let a = vec![bf16::ONE; 24];
    let b = vec![bf16::ONE; 32];
    let bias = vec![bf16::ONE; 4];
    let out = g.reference(MatmulBiasReluInputs { a: &a, b: &b, bias: &bias }).unwrap();
    assert!(out.y.iter().all(|v| v.to_f32() == 9.0));
    assert_ne!(MatmulBiasRelu::<4, 8>::FINGERPRINT, Mixed::<4>::FINGERPRINT);

    let m = Mixed::<16>::new();
    let a = vec![f16::ONE; 2 * 8 * 16];
    let b = vec![f16::ONE; 16 * 64];
    let out = m.reference(MixedInputs { a: &a, b: &b }).unwrap();
    assert_eq!(out.s.len(), 16);
    assert!(out.s.iter().all(|v| *v == 1024.0));
    assert_eq!(out.y.len(), 2 * 8 * 64);

    let _ = Fixed::<16>::new().graph().unwrap();
}
