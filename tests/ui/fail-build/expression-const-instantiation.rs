use cudnn_graph::graph;

graph! {
    /// The contraction dim is `H * D`: it must be 64 for the weight, which only an instantiation
    /// decides; the error gives each parameter's value and the product's.
    pub Heads<const H: usize, const D: usize>(
        x: bf16[1, 16, H * D],
        w: bf16[1, 64, 32],
    ) -> (y: bf16[1, 16, 32]) {
        y = matmul(x, w);
    }
}

fn main() {
    let _ = Heads::<4, 8>::new();
}
