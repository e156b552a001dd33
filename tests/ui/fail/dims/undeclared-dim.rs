use cudnn_graph::graph;

graph! {
    pub Mm<const M: usize>(a: f16[1, M, Q], b: f16[1, Q, 8]) -> (c: f16[1, M, 8]) {
        c = matmul(a, b);
    }
}

fn main() {}
