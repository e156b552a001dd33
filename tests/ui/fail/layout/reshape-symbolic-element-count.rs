use cudnn_graph::graph;

graph! {
    /// Splitting the heads of a [B, S, H * D] projection: [B, S, H, 2 * D] has twice its elements
    /// whatever B, S, H and D are, so the macro rejects it at expansion.
    pub Heads<const H: usize, const D: usize, dyn B, dyn S>(x: bf16[B, S, H * D]) -> (y: bf16[B, S, H, 2 * D]) {
        y = reshape(x, shape = [B, S, H, 2 * D]);
    }
}

fn main() {}
