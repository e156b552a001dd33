use cudnn_graph::graph;

graph! {
    /// Every name in an extent is a dim parameter of the graph: `H` is not declared.
    pub Heads<const D: usize, dyn B>(x: f32[B, 64]) -> (y: f32[B, 2, D]) {
        y = reshape(x, shape = [B, H, D]);
    }
}

fn main() {}
