use cudnn_graph::graph;

graph! {
    pub Two(x: f32[4, 4]) -> (y: f32[4, 4], z: f32[4, 4]) {
        y = relu(x);
    }
}

fn main() {}
