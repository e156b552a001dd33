use cudnn_graph::graph;

graph! {
    /// `start` and `limit` give one value per dim of X (rank 3 here), not only the sliced one.
    pub PerDim<dyn B, dyn S>(x: f32[B, S, 64]) -> (y: f32[B, S, 32]) {
        y = slice(x, start = [32], limit = [64]);
    }
}

fn main() {}
