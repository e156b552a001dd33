use cudnn_graph::graph;

graph! {
    pub Ln(x: bf16[8, 32], scale: f32[1, 32], bias: f32[1, 32]) -> (y: bf16[8, 32]) {
        y = layernorm(x, scale, bias, 1e-5, phase = train);
    }
}

fn main() {}
