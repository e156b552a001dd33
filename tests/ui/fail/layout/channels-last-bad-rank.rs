use cudnn_graph::graph;

graph! {
    /// Channels-last needs a batch dim, a channel dim and 1 to 3 spatial dims.
    pub Bad(x: f16[16, 64] channels_last) -> (y: f16[16, 64]) {
        y = relu(x);
    }
}

fn main() {}
