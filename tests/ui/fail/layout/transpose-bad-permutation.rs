use cudnn_graph::graph;

graph! {
    /// A permutation names each dim exactly once.
    pub T(x: f16[2, 3, 4]) -> (y: f16[2, 4, 4]) {
        y = transpose(x, permutation = [0, 2, 2]);
    }
}

fn main() {}
