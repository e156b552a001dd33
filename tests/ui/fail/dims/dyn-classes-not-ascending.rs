use cudnn_graph::graph;

graph! {
    /// A list of class ends ascends, each once.
    pub Attention<dyn S: [2048, 512, 128]>(q: bf16[1, 4, S, 64], k: bf16[1, 4, S, 64], v: bf16[1, 4, S, 64]) -> (o: bf16[1, 4, S, 64]) {
        o = sdpa(q, k, v);
    }
}

fn main() {}
