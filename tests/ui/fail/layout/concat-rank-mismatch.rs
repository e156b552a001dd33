use cudnn_graph::graph;

graph! {
    /// `b` has rank 2: it cannot join the rank-3 `a` along any axis.
    pub J(a: f16[2, 3, 4], b: f16[3, 4]) -> (y: f16[2, 6, 4]) {
        y = concatenate(a, b, axis = 1);
    }
}

fn main() {}
