use cudnn_graph::graph;

graph! {
    // An assigned output may feed later ops; reading one before its assignment is an error.
    pub Early(x: f32[4, 8]) -> (y: f32[4, 8], z: f32[4, 8]) {
        z = exp(y);
        y = relu(x);
    }
}

fn main() {}
