use cudnn_graph::graph;

graph! {
    pub Mm(a: f16[1, 8, 4], b: f16[1, 5, 16]) -> (c: f16[1, 8, 16]) {
        c = matmul(a, b);
    }
}

fn main() {}
