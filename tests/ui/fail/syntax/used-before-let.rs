use cudnn_graph::graph;

graph! {
    /// `h` is read before the statement that defines it.
    pub Mlp(x: f32[4, 8]) -> (y: f32[4, 8]) {
        let g = relu(h);
        let h = tanh(x);
        y = g;
    }
}

fn main() {}
