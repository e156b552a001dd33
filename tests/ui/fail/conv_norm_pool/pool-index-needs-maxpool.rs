use cudnn_graph::graph;

graph! {
    /// Only max pooling has an index output.
    pub Pool(x: f16[8, 64, 56, 56]) -> (y: f16[8, 64, 28, 28], idx: i8[8, 64, 28, 28]) {
        let (p, i) = resample(x, mode = avgpool_include_padding, window = [2, 2], index = true);
        y = p;
        idx = i;
    }
}

fn main() {}
