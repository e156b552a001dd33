use cudnn_graph::graph;

graph! {
    /// A range is written smaller bound first.
    pub Attention<dyn S: 8192..=1>(q: bf16[1, 4, S, 64], k: bf16[1, 4, S, 64], v: bf16[1, 4, S, 64]) -> (o: bf16[1, 4, S, 64]) {
        o = sdpa(q, k, v);
    }
}

fn main() {}
