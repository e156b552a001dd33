use cudnn_graph::graph;

graph! {
    /// A slice starts at an index, never before the base.
    pub Before<dyn B, dyn S>(x: f32[B, S, 64]) -> (y: f32[B, S, 32]) {
        y = slice(x, start = [0, 0, -8], limit = [B, S, 24]);
    }
}

fn main() {}
