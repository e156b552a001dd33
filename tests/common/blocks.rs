//! The four blocks of issue 16 that cuDNN 9.19 will not fuse into one kernel, shared by
//! `tests/suite/partition.rs` (deviceless planning, emulated against the CPU reference) and
//! `tests/gpu_suite/gpu_partition.rs` (executed on the GPU). Shapes are const or `dyn` parameters where
//! the DSL allows it; `reshape(shape = [..])` takes integer literals only, so the attention
//! block's shapes are fixed in its declaration.

use cudnn_graph::graph;

graph! {
    /// A transformer MLP: y = gelu(x·W1 + b1)·W2 + b2 + x.
    #[intermediate(bf16)]
    pub Mlp<const E: usize, const F: usize, dyn T>(
        x: bf16[1, T, E],
        w1: bf16[1, E, F],
        b1: bf16[1, 1, F],
        w2: bf16[1, F, E],
        b2: bf16[1, 1, E],
    ) -> (y: bf16[1, T, E]) {
        let h = gelu(add(matmul(x, w1), b1));
        y = add(add(matmul(h, w2), b2), x);
    }

    /// rmsnorm → matmul.
    #[intermediate(bf16)]
    pub NormLinear<const E: usize, const F: usize, dyn T>(x: bf16[1, T, E], g: bf16[1, 1, E], w: bf16[1, E, F])
        -> (y: bf16[1, T, F])
    {
        y = matmul(rmsnorm(x, g, 1e-5), w);
    }

    /// A ResNet basic block: conv → batchnorm_inference → relu → conv → residual add (3×3
    /// convolutions, padding 1, C channels throughout).
    #[intermediate(f16)]
    pub ResBlock<const C: usize, dyn N, dyn H, dyn W>(
        x: f16[N, C, H, W] channels_last,
        w1: f16[C, C, 3, 3] channels_last,
        mean: f32[1, C, 1, 1],
        inv_var: f32[1, C, 1, 1],
        scale: f32[1, C, 1, 1],
        bias: f32[1, C, 1, 1],
        w2: f16[C, C, 3, 3] channels_last,
    ) -> (y: f16[N, C, H, W] channels_last) {
        let a = relu(batchnorm_inference(conv_fprop(x, w1, padding = [1, 1]), mean, inv_var, scale, bias));
        y = add(conv_fprop(a, w2, padding = [1, 1]), x);
    }

    /// A pre-norm attention block: rmsnorm → Q/K/V projections → causal GQA attention → output
    /// projection + residual, over `B · S` tokens of width `HQ · D`, `HQ` query heads and `HKV`
    /// key/value heads of `D`.
    #[intermediate(bf16)]
    pub AttentionBlock<const HQ: usize, const HKV: usize, const D: usize, dyn B, dyn S>(
        x: bf16[1, B * S, HQ * D],
        g: bf16[1, 1, HQ * D],
        wq: bf16[1, HQ * D, HQ * D],
        wk: bf16[1, HQ * D, HKV * D],
        wv: bf16[1, HQ * D, HKV * D],
        wo: bf16[1, HQ * D, HQ * D],
    ) -> (y: bf16[1, B * S, HQ * D]) {
        let h = rmsnorm(x, g, 1e-5);
        let q = transpose(reshape(matmul(h, wq), shape = [B, S, HQ, D]), permutation = [0, 2, 1, 3]);
        let k = transpose(reshape(matmul(h, wk), shape = [B, S, HKV, D]), permutation = [0, 2, 1, 3]);
        let v = transpose(reshape(matmul(h, wv), shape = [B, S, HKV, D]), permutation = [0, 2, 1, 3]);
        let o = sdpa(q, k, v, causal = true);
        let merged = reshape(transpose(o, permutation = [0, 2, 1, 3]), shape = [1, B * S, HQ * D]);
        y = add(matmul(merged, wo), x);
    }
}
