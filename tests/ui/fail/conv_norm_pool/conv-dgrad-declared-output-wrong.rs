use cudnn_graph::graph;

graph! {
    /// The data gradient of a stride-2 convolution of a 3x3 filter with padding 1 from DY's 28 is
    /// 55 (56 with `output_padding = [1, 1]`), not 57.
    pub Dgrad(dy: f16[8, 128, 28, 28], w: f16[128, 64, 3, 3]) -> (dx: f16[8, 64, 57, 57]) {
        dx = conv_dgrad(dy, w, padding = [1, 1], stride = [2, 2]);
    }
}

fn main() {}
