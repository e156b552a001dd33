use cudnn_graph::graph;

graph! {
    pub Clip(x: f16[1, 8, 4]) -> (y: f16[1, 8, 4]) {
        y = relu(x, uper_clip = 6.0);
    }
}

fn main() {}
