use cudnn_graph::graph;

graph! {
    /// K's heads are a slice of each token's packed row: its tokens are not contiguous with each
    /// other, so merging S with the heads is no view of the projection's memory.
    #[intermediate(bf16)]
    pub MergeAcrossTheGap<const H: usize, const D: usize, dyn B, dyn S>(
        x: bf16[B, S, 64],
        wqkv: bf16[1, 64, 3 * H * D],
    ) -> (y: bf16[B, S * H * D]) {
        let qkv = reshape(matmul(x, wqkv), shape = [B, S, 3 * H, D]);
        let k = slice(qkv, start = [0, 0, H, 0], limit = [B, S, 2 * H, D]);
        y = reshape(k, shape = [B, S * H * D]);
    }
}

fn main() {}
