use cudnn_graph::graph;

graph! {
    /// [B, H * D] as [B, H] needs D = 1: over const parameters (B bound at run time apart) the
    /// count is a const assertion of each instantiation.
    pub Merge<const H: usize, const D: usize, dyn B>(x: f32[B, H * D]) -> (y: f32[B, H]) {
        y = reshape(x, shape = [B, H]);
    }
}

fn main() {
    // D = 32: the assertion D == 1 fails for this instantiation.
    let _ = Merge::<4, 32>::new(2);
}
