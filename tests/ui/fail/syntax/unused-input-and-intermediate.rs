use cudnn_graph::graph;

graph! {
    pub Unused(x: f32[4, 4], extra: f32[4, 4]) -> (y: f32[4, 4]) {
        let t = tanh(x);
        y = relu(x);
    }
}

fn main() {}
