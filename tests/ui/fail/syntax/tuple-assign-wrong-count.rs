use cudnn_graph::graph;

graph! {
    pub Norm(x: f32[4, 16], scale: f32[1, 16], bias: f32[1, 16]) -> (y: f32[4, 16], mean: f32[4, 1]) {
        (y, mean) = layernorm(x, scale, bias, 1e-5);
    }
}

fn main() {}
