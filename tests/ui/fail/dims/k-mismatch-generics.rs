use cudnn_graph::graph;

graph! {
    pub Mm<const M: usize, const K: usize, const J: usize, const N: usize>(
        a: bf16[1, M, K],
        b: bf16[1, J, N],
    ) -> (c: bf16[1, M, N]) {
        c = matmul(a, b);
    }
}

fn main() {}
