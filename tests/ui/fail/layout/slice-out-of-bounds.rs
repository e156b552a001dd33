use cudnn_graph::graph;

graph! {
    /// Dim 1 has 64 rows: a slice cannot end at 80.
    pub S(a: f16[4, 64, 32], b: f16[1, 32, 48]) -> (c: f16[2, 72, 48]) {
        c = matmul(slice(a, start = [1, 8, 0], limit = [3, 80, 32]), b);
    }
}

fn main() {}
