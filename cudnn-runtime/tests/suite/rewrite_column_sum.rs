//! `ir::column_sum_as_matmul`: which `reduce_sum` nodes become `identity` (a fill of ones) and
//! `matmul`, that the rewritten graph keeps its ports and computes what the original does on the
//! CPU reference engine (random fixed-seed inputs, compared in f64), that `Graph::validate`
//! accepts a fill's broadcast and nothing else's, and (deviceless, cuDNN 9.19 for the H200) that
//! a dense layer's backward with its bias gradient, which had no engine, now plans, the fill a
//! kernel of its own, its plan run through its memory on the CPU equal to the reference.

use crate::common;

use common::{inputs, reference as run};
use cudnn_runtime::ir::{column_sum_as_matmul, for_cudnn, RewriteKind};
use cudnn_runtime::ops::{Op, Pointwise, PointwiseMode};
use cudnn_runtime::{DataType, Graph, GraphBuilder, GraphError, Node};

use DataType::{BF16, F16, F32};

fn dims(name: &str, v: &[i64]) -> Vec<(String, cudnn_runtime::ops::AttrValue)> {
    vec![(name.to_string(), v.to_vec().into())]
}

/// The dense layer's backward: `dh = relu_bwd(d_y, h)`, `d_x = dh · wᵀ`, `d_w = xᵀ · dh`,
/// `d_b = reduce_sum(dh, dims = [1])`, every port `io`.
fn dense_backward(io: DataType, t: i64, inp: i64, out: i64) -> Graph {
    let mut g = GraphBuilder::new("dense_backward");
    let d_y = g.input("d_y", io, &[1, t, out]).unwrap();
    let h = g.input("h", io, &[1, t, out]).unwrap();
    let x = g.input("x", io, &[1, t, inp]).unwrap();
    let w = g.input("w", io, &[1, inp, out]).unwrap();
    let dh = g.op_named("dh", "relu_bwd", &[d_y.into(), h.into()], &[]).unwrap()[0];
    let wt = g.op("transpose", &[w.into()], &dims("permutation", &[0, 2, 1])).unwrap()[0];
    let xt = g.op("transpose", &[x.into()], &dims("permutation", &[0, 2, 1])).unwrap()[0];
    let d_x = g.matmul(dh, wt).unwrap();
    let d_w = g.matmul(xt, dh).unwrap();
    let d_b = g.op_named("db", "reduce_sum", &[dh.into()], &dims("dims", &[1])).unwrap()[0];
    g.output(d_x, "d_x", io).unwrap();
    g.output(d_w, "d_w", io).unwrap();
    g.output(d_b, "d_b", io).unwrap();
    g.build().unwrap()
}

/// `y = op(x, dims)` of an input `x` of `dtype` and `x_dims`, `x` laid out in `order` if given.
fn lone(op: &str, dtype: DataType, x_dims: &[i64], reduced: &[i64], order: Option<&[usize]>) -> Graph {
    let mut g = GraphBuilder::new("lone");
    let x = g.input("x", dtype, x_dims).unwrap();
    if let Some(order) = order {
        g.set_dim_order(x, order).unwrap();
    }
    let y = g.op_named("sum", op, &[x.into()], &dims("dims", reduced)).unwrap()[0];
    g.output(y, "y", F32).unwrap();
    g.build().unwrap()
}

fn ops(graph: &Graph) -> Vec<&'static str> {
    graph.nodes.iter().map(|n| n.op.call_name()).collect()
}

#[test]
fn sums_over_contiguous_rows_become_matmuls_by_ones() {
    for io in [F32, BF16, F16] {
        let graph = dense_backward(io, 48, 16, 40);
        let rewritten = column_sum_as_matmul(&graph).unwrap();
        assert_eq!(
            ops(&rewritten.graph),
            ["relu_bwd", "transpose", "transpose", "matmul", "matmul", "identity", "matmul"]
        );
        assert_eq!(rewritten.graph.inputs(), graph.inputs());
        assert_eq!(rewritten.graph.outputs(), graph.outputs());
        let [r] = rewritten.rewrites.as_slice() else { panic!("{:?}", rewritten.rewrites) };
        assert_eq!(r.kind, RewriteKind::ColumnSumAsMatmul);
        assert_eq!(r.replaced_by, ["db_ones", "db"]);
        // The ones: virtual [1, 1, T], in the narrowest type relu_bwd reads (its output is f32).
        let ones = rewritten.graph.tensor_by_name("db_ones").unwrap();
        assert_eq!((ones.dims.as_slice(), ones.is_virtual, ones.data_type), (&[1, 1, 48][..], true, io));
        assert_eq!(rewritten.graph.tensor_by_name("db_one").unwrap().pass_by_value, Some(1.0));
        // for_cudnn applies it after the batch-norm rewrite, which finds nothing here.
        assert_eq!(for_cudnn(&graph).unwrap(), rewritten);
    }
}

#[test]
fn the_rewritten_graph_computes_the_original() {
    for (io, seed) in [(F32, 1), (BF16, 2), (F16, 3)] {
        let graph = dense_backward(io, 96, 24, 40);
        let rewritten = column_sum_as_matmul(&graph).unwrap().graph;
        let x = inputs(&graph, seed);
        let (want, got) = (run(&graph, &x), run(&rewritten, &x));
        for ((w, g), name) in want.iter().zip(&got).zip(["d_x", "d_w", "d_b"]) {
            assert_eq!(w.dims, g.dims, "{name}");
            let scale = w.data.iter().fold(0f64, |m, v| m.max(v.abs()));
            assert!(scale > 1.0, "{name}: a gradient of zeros proves nothing");
            // Both sum the same f32 values in f64 and round once to the output's type.
            assert_eq!(w.data, g.data, "{io:?} {name}");
        }
    }
    // A lone bias gradient of a batched input: ones [B, 1, T].
    let graph = lone("reduce_sum", BF16, &[3, 64, 24], &[1], None);
    let rewritten = column_sum_as_matmul(&graph).unwrap().graph;
    assert_eq!(ops(&rewritten), ["identity", "matmul"]);
    assert_eq!(rewritten.tensor_by_name("sum_ones").unwrap().dims, [3, 1, 64]);
    let x = inputs(&graph, 4);
    assert_eq!(run(&graph, &x), run(&rewritten, &x));
    // Over batches and rows: the rows of the view [1, B·T, N], ones [1, 1, B·T].
    let graph = lone("reduce_sum", F32, &[3, 64, 24], &[0, 1], None);
    let rewritten = column_sum_as_matmul(&graph).unwrap();
    assert_eq!(rewritten.rewrites[0].replaced_by, ["sum_rows", "sum_ones", "sum"]);
    let graph_rows = rewritten.graph.tensor_by_name("sum_rows").unwrap();
    assert_eq!((graph_rows.dims.as_slice(), graph_rows.strides.as_slice()), (&[1, 192, 24][..], &[4608, 24, 1][..]));
    assert_eq!(rewritten.graph.tensor_by_name("sum_ones").unwrap().dims, [1, 1, 192]);
    let x = inputs(&graph, 6);
    assert_eq!(run(&graph, &x), run(&rewritten.graph, &x));
    // One batch needs no view.
    let rewritten = column_sum_as_matmul(&lone("reduce_sum", F32, &[1, 64, 24], &[0, 1], None)).unwrap().graph;
    assert_eq!(ops(&rewritten), ["identity", "matmul"]);
}

#[test]
fn other_reductions_are_left_alone() {
    let unchanged = |graph: Graph, why: &str| {
        let r = column_sum_as_matmul(&graph).unwrap();
        assert!(r.rewrites.is_empty(), "{why}: {:?}", r.rewrites);
        assert_eq!(r.graph, graph, "{why}");
    };
    unchanged(lone("reduce_sum", F32, &[1, 64, 24], &[2], None), "a sum over the innermost axis");
    unchanged(lone("reduce_sum", F32, &[3, 64, 24], &[1, 2], None), "a sum over rows and columns");
    unchanged(lone("reduce_sum", F32, &[3, 64, 24], &[0, 2], None), "a sum over batches and columns");
    unchanged(lone("reduce_sum", F32, &[3, 64, 24], &[0, 1], Some(&[1, 0, 2])), "batches not one run with rows");
    unchanged(lone("reduce_mean", F32, &[1, 64, 24], &[1], None), "a mean");
    unchanged(lone("reduce_max", F32, &[1, 64, 24], &[1], None), "a max");
    unchanged(lone("reduce_sum", F32, &[64, 24], &[1], None), "rank 2 over the innermost axis");
    unchanged(lone("reduce_sum", F32, &[64, 24], &[0], Some(&[1, 0])), "rank 2, axis 0 innermost in memory");
    unchanged(lone("reduce_sum", F32, &[2, 1, 64, 24], &[2], None), "rank 4");
    unchanged(lone("reduce_sum", DataType::I32, &[1, 64, 24], &[1], None), "an integer tensor");
    unchanged(lone("reduce_sum", F32, &[1, 64, 24], &[1], Some(&[0, 2, 1])), "axis 1 innermost in memory");
    // The sum of a matmul's output fuses as its epilogue.
    let mut g = GraphBuilder::new("matmul_column_sum");
    let a = g.input("a", F16, &[1, 64, 32]).unwrap();
    let b = g.input("b", F16, &[1, 32, 48]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let s = g.op("reduce_sum", &[c.into()], &dims("dims", &[1])).unwrap()[0];
    g.output(s, "s", F32).unwrap();
    unchanged(g.build().unwrap(), "after a matmul");
}

#[test]
fn only_a_fill_may_broadcast_its_output() {
    let graph = column_sum_as_matmul(&lone("reduce_sum", F32, &[1, 64, 24], &[1], None)).unwrap().graph;
    assert!(graph.validate().is_ok());
    let fill = graph.nodes.iter().position(|n| n.name == "sum_ones").unwrap();
    assert!(graph.is_fill(&graph.nodes[fill]));
    // A fill keeps its constant's rank.
    let mut bad = graph.clone();
    let ones = bad.nodes[fill].outputs[0];
    bad.tensors[ones.0].dims = vec![1, 64];
    bad.tensors[ones.0].strides = vec![64, 1];
    assert!(matches!(bad.validate(), Err(GraphError::DeclaredDims { tensor, .. }) if tensor == "sum_ones"));
    // An identity of a tensor is no fill: its output has its input's dims.
    let mut g = GraphBuilder::new("identity");
    let x = g.input("x", F32, &[1, 1, 8]).unwrap();
    let y = g.pointwise(PointwiseMode::Identity, &[x.into()]).unwrap();
    g.output(y, "y", F32).unwrap();
    let mut bad = g.build().unwrap();
    assert!(!bad.is_fill(&bad.nodes[0]));
    bad.tensors[y.0].dims = vec![1, 4, 8];
    bad.tensors[y.0].strides = vec![32, 8, 1];
    assert!(matches!(bad.validate(), Err(GraphError::DeclaredDims { tensor, .. }) if tensor == "y"));
    // Nor is an op other than identity of a constant.
    let mut g = graph.clone();
    let one = g.nodes[fill].inputs[0];
    g.nodes[fill] = Node {
        name: "sum_ones".into(),
        op: Op::Pointwise(Pointwise::new(PointwiseMode::Relu)),
        inputs: vec![one],
        outputs: vec![ones],
        compute_data_type: F32,
    };
    assert!(!g.is_fill(&g.nodes[fill]));
    assert!(matches!(g.validate(), Err(GraphError::DeclaredDims { .. })));
    // The reference broadcasts the fill's constant: the matmul by it sums every row.
    let x = inputs(&graph, 5);
    let want: f64 = (0..24).map(|n| (0..64).map(|t| x[0].data[t * 24 + n]).sum::<f64>()).sum::<f64>();
    let got: f64 = run(&graph, &x)[0].data.iter().sum();
    assert!((got - want).abs() < 1e-3, "{got} {want}");
}

#[cfg(feature = "cudnn")]
mod deviceless {
    use super::*;
    use common::{deviceless, emulated_error, plan_unless_known_bad};
    use cudnn_runtime::backend::CutReason;

    /// The dense layer's backward with its bias gradient had no plan (the sum over rows got no
    /// engine configuration); rewritten it plans as relu_bwd, the two GEMMs and the ones GEMM.
    #[needs_cudnn]
    #[test]
    fn a_dense_backward_with_its_bias_gradient_plans() {
        let Some(cudnn) = deviceless() else { return };
        for io in [F32, BF16] {
            let graph = dense_backward(io, 128, 256, 512);
            let Some(plan) = plan_unless_known_bad(&cudnn, &graph) else { return };
            let parts: Vec<Vec<&str>> = plan.parts().iter().map(|p| ops(p.graph())).collect();
            println!("{io:?}: {parts:?}");
            // The fill is its own kernel (fused into the matmul, cuDNN 9.19 computed it wrongly
            // on the H200): the ones go through the workspace.
            assert_eq!(parts[3..], [vec!["identity"], vec!["matmul"]], "{parts:?}");
            let cut = plan.parts()[4].cut().expect("a cut before the ones GEMM");
            assert_eq!(cut.reason, CutReason::AfterFill, "{cut}");
            assert_eq!(plan.rewrites().len(), 1);
            // Run through its memory on the CPU: bf16 stores dh in bf16 between parts (the
            // partitioner's stored type) where the reference keeps f32, but dh is d_y or 0,
            // exact in either, and both sum the same values in f64.
            assert_eq!(emulated_error(&plan, 7), 0.0, "{io:?}");
        }
    }

    /// A lone bias gradient of a graph input (a linear layer without activation) is the fill and
    /// the GEMM, over batches and rows too (the view of the input bound by pointer).
    #[needs_cudnn]
    #[test]
    fn a_lone_sum_over_rows_plans_as_a_fill_and_a_matmul() {
        let Some(cudnn) = deviceless() else { return };
        for io in [F32, BF16, F16] {
            for (dims, reduced) in [([1, 512, 256], &[1][..]), ([4, 128, 256], &[0, 1][..])] {
                let graph = lone("reduce_sum", io, &dims, reduced, None);
                let Some(plan) = plan_unless_known_bad(&cudnn, &graph) else { return };
                let parts: Vec<Vec<&str>> = plan.parts().iter().map(|p| ops(p.graph())).collect();
                println!("{io:?} {dims:?} over {reduced:?}: {parts:?}");
                assert_eq!(parts, [vec!["identity"], vec!["matmul"]]);
                assert_eq!(emulated_error(&plan, 7), 0.0, "{io:?}");
            }
        }
    }

    /// The bias gradient over batches and rows of a computed tensor: the view of it aliased
    /// between parts.
    #[needs_cudnn]
    #[test]
    fn a_sum_over_batches_and_rows_of_a_computed_tensor_plans() {
        let Some(cudnn) = deviceless() else { return };
        let mut g = GraphBuilder::new("relu_bwd_bias_grad");
        let d_y = g.input("d_y", BF16, &[4, 256, 512]).unwrap();
        let h = g.input("h", BF16, &[4, 256, 512]).unwrap();
        let dh = g.op("relu_bwd", &[d_y.into(), h.into()], &[]).unwrap()[0];
        let d_b = g.op_named("db", "reduce_sum", &[dh.into()], &dims("dims", &[0, 1])).unwrap()[0];
        g.output(d_b, "d_b", F32).unwrap();
        let graph = g.build().unwrap();
        let Some(plan) = plan_unless_known_bad(&cudnn, &graph) else { return };
        let parts: Vec<Vec<&str>> = plan.parts().iter().map(|p| ops(p.graph())).collect();
        // The fill is its own kernel, neither relu_bwd's (the last elementwise kernel, which
        // would write its broadcast beside dh) nor the matmul's.
        assert_eq!(parts, [vec!["relu_bwd"], vec!["identity"], vec!["matmul"]]);
        assert_eq!(emulated_error(&plan, 7), 0.0);
    }
}
