use cudnn_graph::graph;

// Two independent mistakes, the second in an op that reads the first one's output: both are
// reported in one compile. `c`'s extents are unknown after the first, so nothing about them is
// reported again (no echo); the second, `y` declared 64 wide where `w` makes it 32, does not
// depend on them.
graph! {
    pub TwoMistakes(a: f32[1, 8, 4], b: f32[1, 5, 16], w: f32[1, 16, 32]) -> (y: bf16[1, 8, 64]) {
        let c = matmul(a, b);
        y = matmul(c, w);
    }
}

fn main() {}
