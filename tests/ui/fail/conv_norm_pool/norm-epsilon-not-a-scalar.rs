use cudnn_graph::graph;

graph! {
    /// EPSILON takes a number or an all-1 tensor, not X.
    pub Rms(x: f16[16, 64], scale: f16[1, 64]) -> (y: f16[16, 64]) {
        y = rmsnorm(x, scale, x);
    }
}

fn main() {}
