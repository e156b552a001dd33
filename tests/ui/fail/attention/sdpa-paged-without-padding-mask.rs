use cudnn_graph::graph;

graph! {
    /// A paged cache needs the per-sequence lengths.
    pub PagedDecode(
        q: bf16[4, 8, 1, 64],
        k_pool: bf16[64, 2, 16, 64],
        v_pool: bf16[64, 2, 16, 64],
        table: i32[4, 1, 16, 1],
    ) -> (o: bf16[4, 8, 1, 64]) {
        o = sdpa(q, k_pool, v_pool, table, table, paged = true);
    }
}

fn main() {}
