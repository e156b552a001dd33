use cudnn_graph::graph;

graph! {
    /// Q's heads are the first `HQ` of the `N` packed ones: only an instantiation says whether
    /// `HQ <= N`.
    pub Heads<const N: usize, const HQ: usize>(qkv: bf16[2, 16, N, 64]) -> (q: bf16[2, 16, HQ, 64]) {
        q = slice(qkv, start = [0, 0, 0, 0], limit = [2, 16, HQ, 64]);
    }
}

fn main() {
    // 8 heads from a buffer of 6.
    let _ = Heads::<6, 8>::new().graph();
}
