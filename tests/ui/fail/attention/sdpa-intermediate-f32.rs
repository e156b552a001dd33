use cudnn_graph::graph;

graph! {
    /// Q scaled inside the graph is an intermediate of the graph's intermediate type (f32 by
    /// default), which attention does not take.
    pub Attn(q: bf16[1, 2, 64, 64], k: bf16[1, 2, 64, 64], v: bf16[1, 2, 64, 64]) -> (o: bf16[1, 2, 64, 64]) {
        o = sdpa(mul(q, 0.5), k, v);
    }
}

fn main() {}
