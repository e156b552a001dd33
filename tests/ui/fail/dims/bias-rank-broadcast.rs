use cudnn_graph::graph;

graph! {
    /// A rank-1 bias on a rank-3 matmul: broadcasting needs equal ranks.
    pub Linear(x: bf16[2, 64, 32], w: bf16[1, 32, 128], b: bf16[128]) -> (y: bf16[2, 64, 128]) {
        y = add(matmul(x, w), b);
    }
}

fn main() {}
