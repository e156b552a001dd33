use cudnn_graph::graph;

graph! {
    /// The mode goes in parentheses, as in `#[compute(f32)]`.
    #[fuse = single]
    pub Epilogue(a: bf16[1, 8, 32], b: bf16[1, 32, 64]) -> (y: bf16[1, 8, 64]) {
        y = relu(matmul(a, b));
    }
}

fn main() {}
