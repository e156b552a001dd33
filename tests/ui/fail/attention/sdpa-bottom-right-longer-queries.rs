use cudnn_graph::graph;

graph! {
    /// Bottom-right alignment without a padding mask needs S_q <= S_kv.
    pub Decode(q: bf16[1, 4, 256, 64], k: bf16[1, 4, 128, 64], v: bf16[1, 4, 128, 64]) -> (o: bf16[1, 4, 256, 64]) {
        o = sdpa(q, k, v, causal = true, alignment = bottom_right);
    }
}

fn main() {}
