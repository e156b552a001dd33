use cudnn_graph::graph;

graph! {
    /// A 2-D convolution takes one padding value per spatial dim.
    pub Conv(x: f16[8, 64, 56, 56], w: f16[128, 64, 3, 3]) -> (y: f16[8, 128, 56, 56]) {
        y = conv_fprop(x, w, padding = [1, 1, 1]);
    }
}

fn main() {}
