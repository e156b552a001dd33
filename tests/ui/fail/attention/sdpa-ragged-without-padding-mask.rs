use cudnn_graph::graph;

graph! {
    /// Packed sequences need their lengths: `ragged` goes with `padding_mask`.
    pub Packed<dyn B>(
        q: bf16[B, 8, 128, 64] order [0, 2, 1, 3],
        k: bf16[B, 8, 128, 64] order [0, 2, 1, 3],
        v: bf16[B, 8, 128, 64] order [0, 2, 1, 3],
        offsets: i32[B + 1, 1, 1, 1],
    ) -> (o: bf16[B, 8, 128, 64] order [0, 2, 1, 3]) {
        o = sdpa(q, k, v, offsets, offsets, offsets, offsets, ragged = true);
    }
}

fn main() {}
