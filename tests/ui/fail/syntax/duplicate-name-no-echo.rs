use cudnn_graph::graph;

// Binding `o` twice is one error: the statements after it read the second `o` (rank 3), so the
// matmul is not also reported as a rank mismatch against the first (rank 2).
graph! {
    pub Rebound(x: f32[2, 4, 8], w: f32[1, 8, 4]) -> (y: f32[2, 4, 4]) {
        let o = reshape(x, shape = [2, 32]);
        let o = reshape(o, shape = [2, 4, 8]);
        y = matmul(o, w);
    }
}

fn main() {}
