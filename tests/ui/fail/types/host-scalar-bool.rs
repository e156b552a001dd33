use cudnn_graph::graph;

graph! {
    pub Pick(a: f32[8], b: f32[8], m: bool[1] host) -> (y: f32[8]) {
        y = binary_select(a, b, m);
    }
}

fn main() {}
