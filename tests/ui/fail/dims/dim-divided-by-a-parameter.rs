use cudnn_graph::graph;

graph! {
    /// A dim is divided only by a positive integer (floor division): `S / H` has no canonical form.
    pub Split<const H: usize, dyn S>(x: f32[S / H, H]) -> (y: f32[S / H, H]) {
        y = relu(x);
    }
}

fn main() {}
