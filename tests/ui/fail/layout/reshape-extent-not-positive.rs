use cudnn_graph::graph;

graph! {
    /// An extent of a reshape is positive: `S - S` is 0 for every S.
    pub Flat<dyn B, dyn S>(x: f32[B, S, 4]) -> (y: f32[B, 4]) {
        y = reshape(x, shape = [B, S - S, 4]);
    }
}

fn main() {}
