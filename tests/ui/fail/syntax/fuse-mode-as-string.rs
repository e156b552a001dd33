use cudnn_graph::graph;

graph! {
    /// The fusion mode is written bare, as a Rust identifier: `#[fuse(single)]`.
    #[fuse("single")]
    pub Epilogue(a: bf16[1, 8, 32], b: bf16[1, 32, 64]) -> (y: bf16[1, 8, 64]) {
        y = relu(matmul(a, b));
    }
}

fn main() {}
