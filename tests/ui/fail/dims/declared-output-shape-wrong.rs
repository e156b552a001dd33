use cudnn_graph::graph;

graph! {
    pub Mm<const M: usize, const K: usize, const N: usize>(
        a: bf16[1, M, K],
        b: bf16[1, K, N],
    ) -> (c: bf16[1, M, K]) {
        c = matmul(a, b);
    }
}

fn main() {}
