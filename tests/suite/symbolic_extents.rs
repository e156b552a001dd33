//! Issue 17: extents written with const parameters, `dyn` symbols and expressions, in
//! `reshape(shape = [..])` and in port dims. A pre-norm attention block is one `graph!` for any
//! width, head count, head dim, batch and sequence length, and builds exactly the graph the same
//! block written with literal shapes builds.

use cudnn_graph::rng::SplitMix64;
use cudnn_graph::{graph, ArgError, GraphError};
use half::bf16;

graph! {
    /// A pre-norm attention block: rmsnorm → Q/K/V projections → causal GQA attention → output
    /// projection + residual.
    #[intermediate(bf16)]
    pub AttentionBlock<const E: usize, const HQ: usize, const HKV: usize, const D: usize, dyn B, dyn S>(
        x: bf16[B, S, E],
        g: bf16[1, 1, E],
        wq: bf16[1, E, HQ * D],
        wk: bf16[1, E, HKV * D],
        wv: bf16[1, E, HKV * D],
        wo: bf16[1, HQ * D, E],
    ) -> (y: bf16[B, S, E]) {
        let h = rmsnorm(x, g, 1e-5);
        let q = transpose(reshape(matmul(h, wq), shape = [B, S, HQ, D]), permutation = [0, 2, 1, 3]);
        let k = transpose(reshape(matmul(h, wk), shape = [B, S, HKV, D]), permutation = [0, 2, 1, 3]);
        let v = transpose(reshape(matmul(h, wv), shape = [B, S, HKV, D]), permutation = [0, 2, 1, 3]);
        let o = reshape(transpose(sdpa(q, k, v, causal = true), permutation = [0, 2, 1, 3]), shape = [B, S, HQ * D]);
        y = add(matmul(o, wo), x);
    }

    /// The same block with literal shapes: E = 128, 4 query heads and 2 key/value heads of 32,
    /// B = 2, S = 64.
    #[intermediate(bf16)]
    pub LiteralBlock(
        x: bf16[2, 64, 128],
        g: bf16[1, 1, 128],
        wq: bf16[1, 128, 128],
        wk: bf16[1, 128, 64],
        wv: bf16[1, 128, 64],
        wo: bf16[1, 128, 128],
    ) -> (y: bf16[2, 64, 128]) {
        let h = rmsnorm(x, g, 1e-5);
        let q = transpose(reshape(matmul(h, wq), shape = [2, 64, 4, 32]), permutation = [0, 2, 1, 3]);
        let k = transpose(reshape(matmul(h, wk), shape = [2, 64, 2, 32]), permutation = [0, 2, 1, 3]);
        let v = transpose(reshape(matmul(h, wv), shape = [2, 64, 2, 32]), permutation = [0, 2, 1, 3]);
        let o = reshape(transpose(sdpa(q, k, v, causal = true), permutation = [0, 2, 1, 3]), shape = [2, 64, 128]);
        y = add(matmul(o, wo), x);
    }

    /// Rows regrouped: M rows of 8 as N rows of 4, which only the binding can check (N = 2 · M).
    pub Regroup<dyn M, dyn N>(x: f32[M, 8]) -> (y: f32[N, 4]) {
        y = reshape(x, shape = [N, 4]);
    }

    /// A port whose extent is a product of a runtime dim with itself.
    pub Square<dyn N>(x: f32[N * N]) -> (y: f32[N, N]) {
        y = reshape(x, shape = [N, N]);
    }
}

/// `n` values in [-1, -0.25] ∪ [0.25, 1] (never zero), rounded to bf16.
fn random(rng: &mut SplitMix64, n: usize) -> Vec<bf16> {
    (0..n)
        .map(|_| {
            let v = rng.uniform(0.25, 1.0);
            bf16::from_f64(if rng.uniform(0.0, 1.0) < 0.5 { -v } else { v })
        })
        .collect()
}

#[test]
fn the_generic_block_builds_the_literal_blocks_graph() {
    let generic = AttentionBlock::<128, 4, 2, 32>::new(2, 64).graph().unwrap();
    let literal = LiteralBlock::new().graph().unwrap();
    // Dims, strides, types, uids, ops with their attributes, wiring: all but the names.
    assert_eq!(generic.fingerprint(), literal.fingerprint());
    let shapes =
        |g: &cudnn_graph::Graph| g.tensors.iter().map(|t| (t.dims.clone(), t.strides.clone())).collect::<Vec<_>>();
    assert_eq!(shapes(&generic), shapes(&literal));
    let reshapes: Vec<String> =
        generic.nodes.iter().filter(|n| n.op.call_name() == "reshape").map(|n| format!("{:?}", n.op)).collect();
    assert_eq!(reshapes.len(), 4);
    assert!(reshapes[0].contains("[2, 64, 4, 32]") && reshapes[3].contains("[2, 64, 128]"), "{reshapes:?}");
}

#[test]
fn the_generic_blocks_reference_equals_the_literal_blocks() {
    let mut rng = SplitMix64::new(17);
    let (x, g, wq, wk, wv, wo) = (
        random(&mut rng, 2 * 64 * 128),
        random(&mut rng, 128),
        random(&mut rng, 128 * 128),
        random(&mut rng, 128 * 64),
        random(&mut rng, 128 * 64),
        random(&mut rng, 128 * 128),
    );
    let generic = AttentionBlock::<128, 4, 2, 32>::new(2, 64)
        .reference(AttentionBlockInputs { x: &x, g: &g, wq: &wq, wk: &wk, wv: &wv, wo: &wo })
        .unwrap();
    let literal =
        LiteralBlock::new().reference(LiteralBlockInputs { x: &x, g: &g, wq: &wq, wk: &wk, wv: &wv, wo: &wo }).unwrap();
    assert_eq!(generic.y.len(), 2 * 64 * 128);
    assert_eq!(generic.y, literal.y);
    assert!(generic.y.iter().any(|v| v.to_f64() != 0.0));
}

#[test]
fn other_bindings_of_the_generic_block_build_and_run() {
    let block = AttentionBlock::<64, 2, 1, 32>::new(3, 16);
    let graph = block.graph().unwrap();
    let y = graph.tensor(graph.outputs()[0]);
    assert_eq!(y.dims, vec![3, 16, 64]);
    let q = graph.nodes.iter().find(|n| n.op.call_name() == "reshape").unwrap();
    assert!(format!("{:?}", q.op).contains("[3, 16, 2, 32]"), "{:?}", q.op);
    let mut rng = SplitMix64::new(3);
    let (x, g) = (random(&mut rng, 3 * 16 * 64), random(&mut rng, 64));
    let (wq, wk, wv, wo) =
        (random(&mut rng, 64 * 64), random(&mut rng, 64 * 32), random(&mut rng, 64 * 32), random(&mut rng, 64 * 64));
    let out = block.reference(AttentionBlockInputs { x: &x, g: &g, wq: &wq, wk: &wk, wv: &wv, wo: &wo }).unwrap();
    assert_eq!(out.y.len(), 3 * 16 * 64);
    assert!(out.y.iter().all(|v| v.to_f64().is_finite()));
}

#[test]
fn a_count_over_runtime_dims_is_checked_when_the_graph_is_built() {
    let x: Vec<f32> = (1..=16).map(|i| i as f32).collect();
    let out = Regroup::new(2, 4).reference(RegroupInputs { x: &x }).unwrap();
    assert_eq!(out.y, x, "a reshape keeps the row-major values");
    let e = Regroup::new(2, 3).graph().unwrap_err();
    let ArgError::Binding { graph, binding, source } = &e else { panic!("{e}") };
    assert_eq!((graph.as_str(), binding.as_str()), ("Regroup", "M = 2, N = 3"));
    let GraphError::Shape { node, .. } = source.as_ref() else { panic!("{source}") };
    assert_eq!(node, "y");
    assert!(
        e.to_string().contains("X [2, 8] cannot be reshaped to [3, 4]: the element counts differ (16 against 12)"),
        "{e}"
    );
}

#[test]
fn an_extent_that_overflows_is_an_error_naming_it() {
    let x = [1.0f32, 2.0, 3.0, 4.0];
    assert_eq!(Square::new(2).reference(SquareInputs { x: &x }).unwrap().y, x);
    let e = Square::new(1 << 32).graph().unwrap_err();
    let ArgError::Binding { source, .. } = &e else { panic!("{e}") };
    assert_eq!(
        *source.as_ref(),
        GraphError::ExtentOverflow { extent: "N * N".into(), dims: vec![("N".into(), 1 << 32)] }
    );
    assert_eq!(source.to_string(), "extent `N * N` overflows i64 with N = 4294967296");
}
