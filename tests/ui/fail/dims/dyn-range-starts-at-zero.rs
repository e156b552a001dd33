use cudnn_graph::graph;

graph! {
    /// Extents are positive: a range starts at 1.
    pub Attention<dyn S: 0..=8192>(q: bf16[1, 4, S, 64], k: bf16[1, 4, S, 64], v: bf16[1, 4, S, 64]) -> (o: bf16[1, 4, S, 64]) {
        o = sdpa(q, k, v);
    }
}

fn main() {}
