use cudnn_graph::graph;

graph! {
    pub Ln<const H: usize>(x: bf16[8, H], scale: f32[1, 64], bias: f32[1, 64]) -> (y: bf16[8, H]) {
        y = layernorm(x, scale, bias, 1e-5);
    }
}

fn main() {
    // H = 32 meets SCALE's 64: the graph's const assertion fires for this instantiation.
    let _ = Ln::<32>::new();
}
