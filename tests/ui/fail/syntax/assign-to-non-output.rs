use cudnn_graph::graph;

graph! {
    pub NotOut(x: f32[4, 4]) -> (y: f32[4, 4]) {
        z = relu(x);
        y = tanh(x);
    }
}

fn main() {}
