use cudnn_graph::graph;

graph! {
    /// `max_seq_len_kv = 512` over pages of 16 tokens needs 32 table entries per sequence.
    pub PagedDecode(
        q: bf16[4, 8, 1, 64],
        k_pool: bf16[64, 2, 16, 64],
        v_pool: bf16[64, 2, 16, 64],
        seq_q: i32[4, 1, 1, 1],
        seq_kv: i32[4, 1, 1, 1],
        table: i32[4, 1, 16, 1],
    ) -> (o: bf16[4, 8, 1, 64]) {
        o = sdpa(q, k_pool, v_pool, seq_q, seq_kv, table, table, paged = true, padding_mask = true, max_seq_len_kv = 512);
    }
}

fn main() {}
