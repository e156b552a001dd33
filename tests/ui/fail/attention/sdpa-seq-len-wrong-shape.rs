use cudnn_graph::graph;

graph! {
    /// Sequence lengths are one i32 per batch: [B, 1, 1, 1].
    pub Padded(
        q: bf16[4, 8, 128, 64],
        k: bf16[4, 8, 128, 64],
        v: bf16[4, 8, 128, 64],
        seq_q: i32[4, 1, 1, 1],
        seq_kv: i32[1, 1, 1, 4],
    ) -> (o: bf16[4, 8, 128, 64]) {
        o = sdpa(q, k, v, seq_q, seq_kv, padding_mask = true);
    }
}

fn main() {}
