use cudnn_graph::graph;

graph! {
    /// Attribute values are written as Rust literals: `axis = 1`, not `axis = "1"`.
    pub Index(x: f32[4, 8]) -> (y: f32[4, 8]) {
        y = gen_index(x, axis = "1");
    }
}

fn main() {}
