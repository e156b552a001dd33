use cudnn_graph::graph;

graph! {
    pub Scale(x: f32[8], s: f32[1] host) -> (y: f32[8] host) {
        y = mul(x, s);
    }
}

fn main() {}
