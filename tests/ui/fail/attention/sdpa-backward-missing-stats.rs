use cudnn_graph::graph;

graph! {
    /// The backward needs the forward's statistics (`training = true`).
    pub Grad(
        q: bf16[2, 8, 128, 64],
        k: bf16[2, 8, 128, 64],
        v: bf16[2, 8, 128, 64],
        o: bf16[2, 8, 128, 64],
        d_o: bf16[2, 8, 128, 64],
    ) -> (d_q: bf16[2, 8, 128, 64], d_k: bf16[2, 8, 128, 64], d_v: bf16[2, 8, 128, 64]) {
        let (dq, dk, dv) = sdpa_backward(q, k, v, o, d_o, causal = true);
        d_q = dq;
        d_k = dk;
        d_v = dv;
    }
}

fn main() {}
