use cudnn_graph::graph;

// Two independent mistakes: the matmul's contraction (16 against 8) and the add's last dims (8
// against 9). The failed matmul still knows its output is [1, 4, 8] (M from A, N from B, neither
// in the failed requirement), so the second error is on the `add` whose operands disagree, not
// on `y`'s declaration.
graph! {
    pub TwoMistakes(a: f32[1, 4, 16], b: f32[1, 8, 8], bias: f32[1, 4, 9]) -> (y: f32[1, 4, 8]) {
        let c = matmul(a, b);
        let d = add(c, bias);
        y = relu(d);
    }
}

fn main() {}
