use cudnn_graph::graph;

graph! {
    pub Attn(
        q: bf16[2, 8, 128, 64],
        k: bf16[2, 8, 128, 32],
        v: bf16[2, 8, 128, 64],
    ) -> (o: bf16[2, 8, 128, 64]) {
        o = sdpa(q, k, v, causal = true);
    }
}

fn main() {}
