use cudnn_graph::graph;

graph! {
    /// Max pooling's index output is i8, whatever the pooled tensor's type.
    pub Pool(x: f16[8, 64, 56, 56]) -> (y: f16[8, 64, 28, 28], idx: f32[8, 64, 28, 28]) {
        (y, idx) = resample(x, mode = maxpool, window = [2, 2], index = true);
    }
}

fn main() {}
