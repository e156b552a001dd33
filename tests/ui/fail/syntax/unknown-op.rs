use cudnn_graph::graph;

graph! {
    pub Mm(a: f16[1, 8, 4], b: f16[1, 4, 16]) -> (c: f16[1, 8, 16]) {
        c = matmull(a, b);
    }
}

fn main() {}
