use cudnn_graph::graph;

graph! {
    pub Sum(x: f32[4, 8]) -> (y: f32[4, 1]) {
        y = reduce_sum(x, dims = 1);
    }
}

fn main() {}
