//! `docs/guide.md` states payload sizes: they are measured here, deviceless for the H200 with
//! cuDNN 9.19 (the sizes are cuDNN's plan JSON, one per kernel, so another cuDNN may differ a
//! little; the bounds leave it room).

#![cfg(feature = "cudnn")]

use crate::common;

use cudnn_graph::backend::{BuildOptions, ExecutionPlan};
use cudnn_graph::graph;
use cudnn_graph::payload::plan::{write_payload, Expect, PlanOrigin, SerializeOptions};
use cudnn_graph::{DataType, Graph, GraphBuilder};

graph! {
    /// The guide's graph.
    pub MatmulBiasRelu<const N: usize, const K: usize, dyn M>(
        a: bf16[1, M, K],
        b: bf16[1, K, N],
        bias: bf16[1, 1, N],
    ) -> (y: bf16[1, M, N]) {
        let c = matmul(a, b);
        let d = add(c, bias);
        y = relu(d);
    }
}

graph! {
    /// `examples/transformer_block.rs`'s block.
    #[intermediate(bf16)]
    pub Block<const E: usize, const HQ: usize, const HKV: usize, const D: usize, const FF: usize, dyn B, dyn S>(
        x: bf16[B, S, E],
        g1: bf16[1, 1, E],
        wqkv: bf16[1, E, (HQ + 2 * HKV) * D],
        wo: bf16[1, HQ * D, E],
        g2: bf16[1, 1, E],
        w1: bf16[1, E, FF],
        w2: bf16[1, FF, E],
    ) -> (y: bf16[B, S, E]) {
        let h = rmsnorm(x, g1, 1e-5);
        let qkv = reshape(matmul(h, wqkv), shape = [B, S, HQ + 2 * HKV, D]);
        let q = transpose(slice(qkv, start = [0, 0, 0, 0], limit = [B, S, HQ, D]), permutation = [0, 2, 1, 3]);
        let k = transpose(slice(qkv, start = [0, 0, HQ, 0], limit = [B, S, HQ + HKV, D]), permutation = [0, 2, 1, 3]);
        let v = transpose(
            slice(qkv, start = [0, 0, HQ + HKV, 0], limit = [B, S, HQ + 2 * HKV, D]),
            permutation = [0, 2, 1, 3],
        );
        let o = sdpa(q, k, v, causal = true);
        let merged = reshape(transpose(o, permutation = [0, 2, 1, 3]), shape = [B, S, HQ * D]);
        let x2 = add(matmul(merged, wo), x);
        let u = gelu(matmul(rmsnorm(x2, g2, 1e-5), w1));
        y = add(matmul(u, w2), x2);
    }
}

/// The parts of `graph`'s plan and its plan-only payload's size in KB (1000 bytes).
fn measured(cudnn: &cudnn_graph::backend::Cudnn, graph: &Graph) -> (usize, f64) {
    let plan = ExecutionPlan::build(cudnn, graph, &BuildOptions::default()).unwrap();
    let lean = write_payload(&plan, &PlanOrigin::of(cudnn), SerializeOptions { structure: false }, &Expect::default())
        .unwrap();
    (plan.parts().len().max(1), lean.len() as f64 / 1000.0)
}

#[needs_cudnn]
#[test]
fn the_guide_states_the_payload_sizes_measured() {
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/guide.md")).unwrap();
    for claim in ["// plan only, 57 KB", "85 KB for two chained matmuls (2 parts)", "440–460 KB"] {
        assert!(guide.contains(claim), "docs/guide.md no longer says {claim:?}");
    }
    let Some(cudnn) = common::deviceless() else { return };
    let (parts, kb) = measured(&cudnn, &MatmulBiasRelu::<256, 128>::new(192).graph().unwrap());
    assert_eq!(parts, 1);
    assert!((52.0..=62.0).contains(&kb), "the guide's one-kernel plan: {kb} KB");

    let mut g = GraphBuilder::new("two_matmuls");
    let a = g.input("a", DataType::BF16, &[1, 256, 128]).unwrap();
    let b = g.input("b", DataType::BF16, &[1, 128, 128]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let d = g.matmul(c, b).unwrap();
    g.output(d, "d", DataType::BF16).unwrap();
    let (parts, kb) = measured(&cudnn, &g.build().unwrap());
    assert_eq!(parts, 2);
    assert!((78.0..=92.0).contains(&kb), "two chained matmuls: {kb} KB");

    let (parts, kb) = measured(&cudnn, &Block::<256, 4, 2, 64, 512>::new(1, 128).graph().unwrap());
    assert_eq!(parts, 7);
    assert!((420.0..=480.0).contains(&kb), "the transformer block: {kb} KB");
}
