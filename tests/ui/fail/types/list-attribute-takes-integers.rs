use cudnn_graph::graph;

graph! {
    /// `permutation` is a list of integers, not of extents: a dim parameter has no place in it.
    pub T<dyn B>(x: f32[B, 4]) -> (y: f32[4, B]) {
        y = transpose(x, permutation = [1, B]);
    }
}

fn main() {}
