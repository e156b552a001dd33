use cudnn_graph::graph;

// Two independent mistakes, the second in an op that reads the first one's output: both are
// reported in one compile. The failed matmul still knows `c` is [1, 8, 16] (M from A, N from B,
// neither in its failed requirement), so `y` is [1, 8, 32]: declared 64 wide, the second mistake,
// reported on `y` with the shape it is assigned.
graph! {
    pub TwoMistakes(a: f32[1, 8, 4], b: f32[1, 5, 16], w: f32[1, 16, 32]) -> (y: bf16[1, 8, 64]) {
        let c = matmul(a, b);
        y = matmul(c, w);
    }
}

fn main() {}
