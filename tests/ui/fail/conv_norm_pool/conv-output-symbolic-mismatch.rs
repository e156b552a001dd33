use cudnn_graph::graph;

graph! {
    /// Without padding a 3x3 filter takes 2 off every spatial extent: `H - 2` is never `H`, so
    /// the macro says so at expansion (under `cargo check`), whatever `H` an instantiation picks.
    pub Conv<const H: usize, dyn W>(x: f16[8, 64, H, W], w: f16[128, 64, 3, 3]) -> (y: f16[8, 128, H, W]) {
        y = conv_fprop(x, w);
    }
}

fn main() {}
