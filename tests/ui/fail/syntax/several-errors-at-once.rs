use cudnn_graph::graph;

graph! {
    pub Broken<const M: usize>(a: bf16[1, M, 4], b: bf16[1, 5, 16], bias: bf61[1, 1, 16]) -> (y: bf16[1, M, 16]) {
        let c = matmul(a, b);
        let d = ad(c, bias);
        y = relu(dd);
    }
}

fn main() {}
