use cudnn_graph::graph;

graph! {
    /// A page table has one row per sequence: [B, 1, T, 1] with Q's batch.
    pub PagedDecode(
        q: bf16[4, 8, 1, 64],
        k_pool: bf16[64, 2, 16, 64],
        v_pool: bf16[64, 2, 16, 64],
        seq_q: i32[4, 1, 1, 1],
        seq_kv: i32[4, 1, 1, 1],
        table: i32[8, 1, 16, 1],
    ) -> (o: bf16[4, 8, 1, 64]) {
        o = sdpa(q, k_pool, v_pool, seq_q, seq_kv, table, table, paged = true, padding_mask = true);
    }
}

fn main() {}
