use cudnn_graph::graph;

graph! {
    /// Attention's statistics (log-sum-exp) are f32, whatever the I/O type.
    pub Fwd(
        q: bf16[2, 8, 128, 64],
        k: bf16[2, 8, 128, 64],
        v: bf16[2, 8, 128, 64],
    ) -> (o: bf16[2, 8, 128, 64], stats: bf16[2, 8, 128, 1]) {
        let (out, lse) = sdpa(q, k, v, causal = true, training = true);
        o = out;
        stats = lse;
    }
}

fn main() {}
