use cudnn_graph::graph;

graph! {
    /// `2 * K` meets `N`: equal where N = 2K (K = 4, N = 8), so only an instantiation decides,
    /// and this one (K = 4, N = 6) fails.
    pub Doubled<const K: usize, const N: usize>(a: bf16[1, 4, 2 * K], b: bf16[1, N, 8]) -> (y: bf16[1, 4, 8]) {
        y = matmul(a, b);
    }
}

fn main() {
    let _ = Doubled::<4, 8>::new();
    let _ = Doubled::<4, 6>::new();
}
