use cudnn_graph::graph;

graph! {
    pub Mbr(a: f16[1, 8, 4], b: f16[1, 4, 16], bias: f16[1, 1, 16]) -> (y: f16[1, 8, 16]) {
        let c = matmul(a, b);
        y = add(c, biass);
    }
}

fn main() {}
