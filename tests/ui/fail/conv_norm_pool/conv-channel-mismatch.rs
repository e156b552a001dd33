use cudnn_graph::graph;

graph! {
    /// The filter's input channels (W[1]) must be X's channels (X[1]).
    pub Conv(x: f16[8, 64, 56, 56], w: f16[128, 32, 3, 3]) -> (y: f16[8, 128, 56, 56]) {
        y = conv_fprop(x, w, padding = [1, 1]);
    }
}

fn main() {}
