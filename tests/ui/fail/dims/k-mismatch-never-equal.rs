use cudnn_graph::graph;

graph! {
    /// `2 * K` meets `K`: equal only at K = 0, which no extent is, so the macro says so at
    /// expansion (under `cargo check`), on the operand, instead of leaving it to a const
    /// assertion that only `cargo build` of an instantiation evaluates.
    pub Doubled<const K: usize>(a: bf16[1, 4, 2 * K], b: bf16[1, K, 8]) -> (y: bf16[1, 4, 8]) {
        y = matmul(a, b);
    }

    /// Several parameters: `2 * M + 1` is odd and `4 * N` even, whatever M and N are.
    pub OddEven<const M: usize, const N: usize>(a: bf16[1, 4, 2 * M + 1], b: bf16[1, 4 * N, 8]) -> (y: bf16[1, 4, 8]) {
        y = matmul(a, b);
    }

    /// A declared output: `K + N` is at least 2, never the 1 the matmul gives.
    pub Sum<const K: usize, const N: usize>(a: bf16[1, N, K], b: bf16[1, K, 1]) -> (y: bf16[1, N, K + N]) {
        y = matmul(a, b);
    }
}

fn main() {}
