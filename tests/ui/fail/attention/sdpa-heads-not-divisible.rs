use cudnn_graph::graph;

graph! {
    /// Grouped-query attention needs H_q to be a multiple of H_kv.
    pub Gqa(
        q: bf16[1, 8, 64, 64],
        k: bf16[1, 3, 64, 64],
        v: bf16[1, 3, 64, 64],
    ) -> (o: bf16[1, 8, 64, 64]) {
        o = sdpa(q, k, v);
    }
}

fn main() {}
