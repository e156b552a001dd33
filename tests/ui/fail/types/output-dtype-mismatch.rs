use cudnn_graph::graph;

graph! {
    pub Less(a: f32[8], b: f32[8]) -> (y: i32[8]) {
        y = cmp_lt(a, b);
    }
}

fn main() {}
