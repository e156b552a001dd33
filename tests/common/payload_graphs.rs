//! The graph types whose payloads `tests/suite/serialization.rs` and `tests/suite/payload_safety.rs` write,
//! read and attack: a matmul epilogue with const and runtime dims, and a graph with a by-value
//! scalar.

use cudnn_graph::graph;

graph! {
    pub MatmulBiasRelu<const N: usize, const K: usize, dyn M>(
        a: bf16[1, M, K],
        b: bf16[1, K, N],
        bias: bf16[1, 1, N],
    ) -> (y: bf16[1, M, N]) {
        y = relu(add(matmul(a, b), bias));
    }

    pub ScaledRelu<dyn M>(x: f16[M, 64]) -> (y: f16[M, 64]) {
        y = relu(mul(x, 5.0));
    }
}
