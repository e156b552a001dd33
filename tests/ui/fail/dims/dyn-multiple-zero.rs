use cudnn_graph::graph;

graph! {
    /// Classes of multiples need a step of 1 or more.
    pub Attention<dyn S: 64..=8192 multiple(0)>(q: bf16[1, 4, S, 64], k: bf16[1, 4, S, 64], v: bf16[1, 4, S, 64]) -> (o: bf16[1, 4, S, 64]) {
        o = sdpa(q, k, v);
    }
}

fn main() {}
