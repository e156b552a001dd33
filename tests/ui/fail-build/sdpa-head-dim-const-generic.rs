use cudnn_graph::graph;

graph! {
    /// The head dims of Q (a const generic) and K (a literal) must agree at instantiation.
    pub Generic<const D: usize>(q: bf16[1, 8, 64, D], k: bf16[1, 2, 64, 64], v: bf16[1, 2, 64, 64]) -> (o: bf16[1, 8, 64, 64]) {
        o = sdpa(q, k, v, causal = true);
    }
}

fn main() {
    let _ = Generic::<32>::new();
}
