use cudnn_graph::graph;

// `D` is K of both matmuls: the first needs 64, the second 32. No instantiation satisfies both,
// so the macro says so under `cargo check`, on the second requirement, naming both.
graph! {
    pub TwoProj<const D: usize>(
        x: bf16[1, 8, D],
        w1: bf16[1, 64, 16],
        w2: bf16[1, 32, 16],
    ) -> (y: bf16[1, 8, 16], z: bf16[1, 8, 16]) {
        y = matmul(x, w1);
        z = matmul(x, w2);
    }
}

fn main() {}
