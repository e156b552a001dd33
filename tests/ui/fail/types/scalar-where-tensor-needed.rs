use cudnn_graph::graph;

graph! {
    pub Mm(a: f16[1, 8, 4]) -> (c: f16[1, 8, 4]) {
        c = matmul(a, 2.0);
    }
}

fn main() {}
