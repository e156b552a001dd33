use cudnn_graph::graph;

graph! {
    pub Bad(q: f16[2, 4, 8, 16] order [0, 2, 2, 3]) -> (y: f16[2, 4, 8, 16]) {
        y = relu(q);
    }
}

fn main() {}
