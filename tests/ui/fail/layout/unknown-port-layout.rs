use cudnn_graph::graph;

graph! {
    /// A layout is `order [..]` or `channels_last`.
    pub Bad(x: f16[2, 8, 4, 4] nhwc) -> (y: f16[2, 8, 4, 4]) {
        y = relu(x);
    }
}

fn main() {}
