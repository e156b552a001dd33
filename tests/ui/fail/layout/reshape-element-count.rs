use cudnn_graph::graph;

graph! {
    /// A reshape keeps the element count: 24 is not 20.
    pub R(x: f16[2, 3, 4]) -> (y: f16[5, 4]) {
        y = reshape(x, shape = [5, 4]);
    }
}

fn main() {}
