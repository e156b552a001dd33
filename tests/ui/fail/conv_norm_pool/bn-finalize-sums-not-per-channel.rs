use cudnn_graph::graph;

graph! {
    /// `bn_finalize` takes genstats' per-channel sums, not the activations they sum.
    pub Finalize(
        x: f32[8, 64, 4, 4],
        sq_sum: f32[1, 64, 1, 1],
        scale: f32[1, 64, 1, 1],
        bias: f32[1, 64, 1, 1],
        running_mean: f32[1, 64, 1, 1],
        running_var: f32[1, 64, 1, 1],
    ) -> (eq_scale: f32[1, 64, 1, 1], eq_bias: f32[1, 64, 1, 1]) {
        let (s, b, m, v, nm, nv) = bn_finalize(x, sq_sum, scale, bias, running_mean, running_var, 1e-5, 0.1, 128);
        eq_scale = s;
        eq_bias = b;
    }
}

fn main() {}
