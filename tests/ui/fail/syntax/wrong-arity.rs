use cudnn_graph::graph;

graph! {
    pub Add(x: f32[4, 4]) -> (y: f32[4, 4]) {
        y = add(x);
    }
}

fn main() {}
