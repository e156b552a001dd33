//! `docs/dsl.md`, "Views": Q, K and V as slices of one fused QKV projection.

use cudnn_graph::graph;
use half::bf16;

graph! {
    #[intermediate(bf16)]
    pub Attn<const E: usize, const HQ: usize, const HKV: usize, const D: usize, dyn B, dyn S>(
        x: bf16[B, S, E],
        wqkv: bf16[1, E, (HQ + 2 * HKV) * D],
    ) -> (o: bf16[B, HQ, S, D]) {
        let qkv = reshape(matmul(x, wqkv), shape = [B, S, HQ + 2 * HKV, D]);
        let q = transpose(slice(qkv, start = [0, 0, 0, 0], limit = [B, S, HQ, D]), permutation = [0, 2, 1, 3]);
        let k = transpose(slice(qkv, start = [0, 0, HQ, 0], limit = [B, S, HQ + HKV, D]), permutation = [0, 2, 1, 3]);
        let v = transpose(slice(qkv, start = [0, 0, HQ + HKV, 0], limit = [B, S, HQ + 2 * HKV, D]), permutation = [0, 2, 1, 3]);
        o = sdpa(q, k, v, causal = true);
    }
}

fn main() {
    let (b, s) = (2, 8);
    let data = |n: usize| (0..n).map(|i| bf16::from_f32(((i * 37 % 11) as f32 - 5.0) * 0.05)).collect::<Vec<_>>();
    let (x, wqkv) = (data(b * s * 32), data(32 * 8 * 16));
    let out = Attn::<32, 4, 2, 16>::new(b, s).reference(AttnInputs { x: &x, wqkv: &wqkv }).unwrap();
    assert_eq!(out.o.len(), b * 4 * s * 16);
    assert!(Attn::<32, 4, 2, 16>::new(b, s).graph().is_ok());
}
