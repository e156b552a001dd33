use cudnn_graph::graph;

graph! {
    /// `max_total_seq_len_q` bounds the packed query tokens: at most B·S_q = 4·128 = 512.
    pub Packed(
        q: bf16[4, 8, 128, 64] order [0, 2, 1, 3],
        k: bf16[4, 8, 128, 64] order [0, 2, 1, 3],
        v: bf16[4, 8, 128, 64] order [0, 2, 1, 3],
        seq_q: i32[4, 1, 1, 1],
        seq_kv: i32[4, 1, 1, 1],
        offsets: i32[5, 1, 1, 1],
    ) -> (o: bf16[4, 8, 128, 64] order [0, 2, 1, 3]) {
        o = sdpa(q, k, v, seq_q, seq_kv, offsets, offsets, offsets, offsets, ragged = true, padding_mask = true,
                 max_total_seq_len_q = 600);
    }
}

fn main() {}
