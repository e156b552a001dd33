use cudnn_graph::graph;

graph! {
    /// The statistics exist only in training: without `phase = training`, layernorm produces Y.
    pub Ln(x: bf16[8, 32], scale: f32[1, 32], bias: f32[1, 32]) -> (y: bf16[8, 32], mean: f32[8, 1], inv_var: f32[8, 1]) {
        let (out, m, v) = layernorm(x, scale, bias, 1e-5);
        y = out;
        mean = m;
        inv_var = v;
    }
}

fn main() {}
