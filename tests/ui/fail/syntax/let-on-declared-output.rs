use cudnn_graph::graph;

graph! {
    /// `y` is declared as an output: it is assigned, not bound with `let`.
    pub Mlp(x: f32[4, 8]) -> (y: f32[4, 8]) {
        let y = relu(x);
    }
}

fn main() {}
