//! Graphs whose attention reads Q, K and V as strided views of one packed projection (issue
//! 17), shared by `tests/suite/views.rs` (CPU reference, deviceless planning) and `tests/gpu_suite/gpu_views.rs`
//! (executed on the GPU).

use cudnn_graph::graph;

graph! {
    /// `tests/common/blocks.rs`'s `AttentionBlock` with one fused QKV projection: `wqkv` is
    /// `[wq | wk | wv]` along its columns, the projection `[B·S, (HQ + 2·HKV)·D]` seen as
    /// `[B, S, HQ + 2·HKV, D]`, and Q, K, V are slices of its head dim, transposed to `[B, H, S, D]`:
    /// views of the projection's memory at the offsets of heads 0, HQ and HQ + HKV.
    #[intermediate(bf16)]
    pub PackedAttentionBlock<const HQ: usize, const HKV: usize, const D: usize, dyn B, dyn S>(
        x: bf16[1, B * S, HQ * D],
        g: bf16[1, 1, HQ * D],
        wqkv: bf16[1, HQ * D, (HQ + 2 * HKV) * D],
        wo: bf16[1, HQ * D, HQ * D],
    ) -> (y: bf16[1, B * S, HQ * D]) {
        let qkv = reshape(matmul(rmsnorm(x, g, 1e-5), wqkv), shape = [B, S, HQ + 2 * HKV, D]);
        let q = transpose(slice(qkv, start = [0, 0, 0, 0], limit = [B, S, HQ, D]), permutation = [0, 2, 1, 3]);
        let k = transpose(slice(qkv, start = [0, 0, HQ, 0], limit = [B, S, HQ + HKV, D]), permutation = [0, 2, 1, 3]);
        let v = transpose(
            slice(qkv, start = [0, 0, HQ + HKV, 0], limit = [B, S, HQ + 2 * HKV, D]),
            permutation = [0, 2, 1, 3],
        );
        let o = sdpa(q, k, v, causal = true);
        let merged = reshape(transpose(o, permutation = [0, 2, 1, 3]), shape = [1, B * S, HQ * D]);
        y = add(matmul(merged, wo), x);
    }

    /// Multi-head attention over a packed `[B, S, 3, H, D]` QKV input (PyTorch's
    /// `in_proj` layout): each of Q, K, V is a slice of the `3` dim, its unit dim reshaped away
    /// (a view: the slice's `H × D` rows stay contiguous) and transposed to `[B, H, S, D]`.
    pub PackedHeads<const H: usize, const D: usize, dyn B, dyn S>(qkv: bf16[B, S, 3, H, D])
        -> (o: bf16[B, H, S, D])
    {
        let q = transpose(reshape(slice(qkv, start = [0, 0, 0, 0, 0], limit = [B, S, 1, H, D]), shape = [B, S, H, D]), permutation = [0, 2, 1, 3]);
        let k = transpose(reshape(slice(qkv, start = [0, 0, 1, 0, 0], limit = [B, S, 2, H, D]), shape = [B, S, H, D]), permutation = [0, 2, 1, 3]);
        let v = transpose(reshape(slice(qkv, start = [0, 0, 2, 0, 0], limit = [B, S, 3, H, D]), shape = [B, S, H, D]), permutation = [0, 2, 1, 3]);
        o = sdpa(q, k, v);
    }

    /// [`PackedHeads`] with Q, K, V given as three BSHD buffers: the same attention.
    pub SeparateHeads<const H: usize, const D: usize, dyn B, dyn S>(
        q: bf16[B, H, S, D] order [0, 2, 1, 3],
        k: bf16[B, H, S, D] order [0, 2, 1, 3],
        v: bf16[B, H, S, D] order [0, 2, 1, 3],
    ) -> (o: bf16[B, H, S, D]) {
        o = sdpa(q, k, v);
    }

    /// The first `K` columns of each row, through a ReLU (a slice that is itself a graph
    /// output keeps the slice's strides): whether `K <= N` is known only when both are bound.
    pub FirstColumns<dyn N, dyn K>(x: f32[2, N]) -> (y: f32[2, K]) {
        y = relu(slice(x, start = [0, 0], limit = [2, K]));
    }
}
