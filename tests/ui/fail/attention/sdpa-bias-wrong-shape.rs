use cudnn_graph::graph;

graph! {
    /// The bias is [1 or B, 1 or H_q, S_q, S_kv]: here S_q and S_kv are swapped.
    pub Biased(
        q: bf16[2, 4, 16, 64],
        k: bf16[2, 4, 32, 64],
        v: bf16[2, 4, 32, 64],
        bias: bf16[1, 1, 32, 16],
    ) -> (o: bf16[2, 4, 16, 64]) {
        o = sdpa(q, k, v, bias, bias = true);
    }
}

fn main() {}
