use cudnn_graph::graph;

graph! {
    /// SCALE must be 1 or X's extent in each dim: [1, 64] does not fit X [B, 32].
    pub Ln<dyn B>(x: bf16[B, 32], scale: f32[1, 64], bias: f32[1, 64]) -> (y: bf16[B, 32]) {
        y = layernorm(x, scale, bias, 1e-5);
    }
}

fn main() {}
