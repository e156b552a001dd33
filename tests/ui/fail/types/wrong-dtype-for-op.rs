use cudnn_graph::graph;

graph! {
    pub IntMatmul(a: i64[1, 8, 4], b: i64[1, 4, 16]) -> (c: f32[1, 8, 16]) {
        c = matmul(a, b);
    }
}

graph! {
    pub BoolRelu(x: bool[8]) -> (y: f32[8]) {
        y = relu(x);
    }
}

fn main() {}
