use cudnn_graph::graph;

graph! {
    /// A graph computes something: it must declare at least one output.
    pub Nothing(x: f32[4, 8]) -> () {
        let y = relu(x);
    }
}

fn main() {}
