use cudnn_graph::graph;

graph! {
    /// Joined along axis 1, the inputs must agree on every other dim; and the declared output
    /// must have the summed extent.
    pub J<const S: usize>(a: f16[2, S, 4], b: f16[2, 5, 8], c: f16[2, 5, 4]) -> (y: f16[2, 9, 4], z: f16[2, 11, 4]) {
        y = concatenate(a, b, axis = 1);
        z = concatenate(c, c, axis = 1);
    }
}

fn main() {}
