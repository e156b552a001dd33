use cudnn_graph::graph;

graph! {
    /// Ragged offsets have one entry per sequence and one past the last: [B + 1, 1, 1, 1].
    pub Packed<dyn B>(
        q: bf16[B, 8, 128, 64] order [0, 2, 1, 3],
        k: bf16[B, 8, 128, 64] order [0, 2, 1, 3],
        v: bf16[B, 8, 128, 64] order [0, 2, 1, 3],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
        offsets: i32[B + 1, 1, 1, 1],
        offsets_kv: i32[B, 1, 1, 1],
    ) -> (o: bf16[B, 8, 128, 64] order [0, 2, 1, 3]) {
        o = sdpa(q, k, v, seq_q, seq_kv, offsets, offsets_kv, offsets_kv, offsets, ragged = true, padding_mask = true);
    }
}

fn main() {}
