use cudnn_graph::graph;

graph! {
    pub Twice(x: f32[4, 4]) -> (y: f32[4, 4]) {
        let c = relu(x);
        let c = tanh(c);
        y = sigmoid(c);
    }
}

graph! {
    pub SamePort(x: f32[4, 4], x: f32[4, 4]) -> (y: f32[4, 4]) {
        y = add(x, x);
    }
}

fn main() {}
