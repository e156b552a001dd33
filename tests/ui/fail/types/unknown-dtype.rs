use cudnn_graph::graph;

graph! {
    pub Cast(x: bfloat16[4, 4]) -> (y: f32[4, 4]) {
        y = identity(x);
    }
}

fn main() {}
