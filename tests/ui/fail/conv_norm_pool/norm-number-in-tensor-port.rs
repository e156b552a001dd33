use cudnn_graph::graph;

graph! {
    /// Epsilon written in SCALE's place: SCALE takes a tensor.
    pub Rms(x: f16[16, 64], scale: f16[1, 64]) -> (y: f16[16, 64]) {
        y = rmsnorm(x, 1e-5, scale);
    }
}

fn main() {}
