use cudnn_graph::graph;

graph! {
    /// Stats come out only with `training = true`.
    pub Fwd(
        q: bf16[2, 8, 128, 64],
        k: bf16[2, 8, 128, 64],
        v: bf16[2, 8, 128, 64],
    ) -> (o: bf16[2, 8, 128, 64], stats: f32[2, 8, 128, 1]) {
        let (out, lse) = sdpa(q, k, v, causal = true);
        o = out;
        stats = lse;
    }
}

fn main() {}
