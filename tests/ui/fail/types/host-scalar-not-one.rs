use cudnn_graph::graph;

graph! {
    pub Ln(x: f32[8, 32], scale: f32[1, 32], bias: f32[1, 32], eps: f32[1, 2] host) -> (y: f32[8, 32]) {
        y = layernorm(x, scale, bias, eps);
    }
}

fn main() {}
