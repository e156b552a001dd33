use cudnn_graph::graph;

graph! {
    /// The classes are pow2, multiple(N), exact, or a list.
    pub Attention<dyn S: 1..=8192 pow4>(q: bf16[1, 4, S, 64], k: bf16[1, 4, S, 64], v: bf16[1, 4, S, 64]) -> (o: bf16[1, 4, S, 64]) {
        o = sdpa(q, k, v);
    }
}

fn main() {}
