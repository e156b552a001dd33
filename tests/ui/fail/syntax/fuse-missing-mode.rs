use cudnn_graph::graph;

graph! {
    /// `#[fuse]` alone does not say which policy.
    #[fuse]
    pub Epilogue(a: bf16[1, 8, 32], b: bf16[1, 32, 64]) -> (y: bf16[1, 8, 64]) {
        y = relu(matmul(a, b));
    }
}

fn main() {}
