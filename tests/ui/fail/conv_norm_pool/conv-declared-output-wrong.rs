use cudnn_graph::graph;

graph! {
    /// A 3x3 filter with stride 2 and padding 1 halves 56 to 28, not 56.
    pub Conv(x: f16[8, 64, 56, 56], w: f16[128, 64, 3, 3]) -> (y: f16[8, 128, 56, 56]) {
        y = conv_fprop(x, w, padding = [1, 1], stride = [2, 2]);
    }
}

fn main() {}
