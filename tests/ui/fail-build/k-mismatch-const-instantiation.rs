use cudnn_graph::graph;

graph! {
    pub Mm<const M: usize, const K: usize, const N: usize>(
        a: bf16[1, M, K],
        b: bf16[1, 64, N],
    ) -> (c: bf16[1, M, N]) {
        c = matmul(a, b);
    }
}

fn main() {
    // K = 32 meets the literal 64: the graph's const assertion fires for this instantiation.
    let _ = Mm::<16, 32, 8>::new();
}
