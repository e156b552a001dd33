use cudnn_graph::graph;

// `2 * D` must be 64, so D = 32; `D` must be 16. No instantiation satisfies both, so the macro
// says so under `cargo check`, on the second requirement, naming both (and the expression that
// pinned the first).
graph! {
    pub Widened<const D: usize>(
        x: bf16[1, 8, 2 * D],
        h: bf16[1, 8, D],
        w1: bf16[1, 64, 16],
        w2: bf16[1, 16, 16],
    ) -> (y: bf16[1, 8, 16], z: bf16[1, 8, 16]) {
        y = matmul(x, w1);
        z = matmul(h, w2);
    }
}

fn main() {}
