use cudnn_graph::graph;

graph! {
    /// Mode names are written bare, as Rust identifiers: `mode = maxpool`, not `mode = "maxpool"`.
    pub Pool(x: f16[8, 64, 56, 56]) -> (y: f16[8, 64, 28, 28]) {
        y = resample(x, mode = "maxpool", window = [2, 2]);
    }
}

fn main() {}
