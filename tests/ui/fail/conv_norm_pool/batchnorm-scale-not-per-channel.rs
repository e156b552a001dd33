use cudnn_graph::graph;

graph! {
    /// Batch norm's parameters are one per channel of X: [1, 64, 1, 1] here.
    pub Bn(
        x: f16[8, 64, 4, 4],
        scale: f32[1, 32, 1, 1],
        bias: f32[1, 64, 1, 1],
        running_mean: f32[1, 64, 1, 1],
        running_var: f32[1, 64, 1, 1],
    ) -> (y: f16[8, 64, 4, 4], mean: f32[1, 64, 1, 1], inv_var: f32[1, 64, 1, 1], next_mean: f32[1, 64, 1, 1], next_var: f32[1, 64, 1, 1]) {
        let (out, m, v, nm, nv) = batchnorm(x, scale, bias, running_mean, running_var, 1e-5, 0.1);
        y = out;
        mean = m;
        inv_var = v;
        next_mean = nm;
        next_var = nv;
    }
}

fn main() {}
