use cudnn_graph::graph;

graph! {
    /// The fusion modes are `single` (one kernel, or an error) and `auto`.
    #[fuse(one)]
    pub Epilogue(a: bf16[1, 8, 32], b: bf16[1, 32, 64]) -> (y: bf16[1, 8, 64]) {
        y = relu(matmul(a, b));
    }
}

fn main() {}
