use cudnn_graph::graph;

graph! {
    /// O has Q's heads and sequence length and V's head dim.
    pub Attn<dyn S>(
        q: f16[1, 8, S, 64],
        k: f16[1, 2, S, 64],
        v: f16[1, 2, S, 128],
    ) -> (o: f16[1, 8, S, 64]) {
        o = sdpa(q, k, v, causal = true);
    }
}

fn main() {}
