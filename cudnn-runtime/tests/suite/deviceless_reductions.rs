//! Reductions as users write them (issue 36): softmax and cross-entropy over the last axis of
//! `f32[N, V]` logits, log-softmax, a lone `reduce_max`, bias gradients over rows (`[N, H]` over
//! axis 0, `[B, T, H]` over axis 1), a mean/variance pair of rows; each plans deviceless with
//! cuDNN 9.19 for the H200, and its plan, run through its memory on the CPU, equals the CPU
//! reference of the graph as written. Also which reductions cuDNN plans as written (the table in
//! `docs/ops.md`), that the channel-reduction description and the mean rewrite are what make the
//! difference, and that a part no layout plans names the user's nodes.

use crate::common;

use common::inputs;
use cudnn_runtime::ir::{mean_and_norms_as_sums, RewriteKind};
use cudnn_runtime::{DataType, Graph, GraphBuilder};

use DataType::{BF16, F16, F32};

fn dims(v: &[i64]) -> Vec<(String, cudnn_runtime::ops::AttrValue)> {
    vec![("dims".to_string(), v.to_vec().into())]
}

/// The user's softmax and cross-entropy: `m = reduce_max(logits)`, `e = exp(logits - m)`,
/// `s = reduce_sum(e)`, `p = e / s`, `loss = log(s) + m - reduce_sum(onehot · logits)`, over the
/// last axis.
fn softmax_xent(io: DataType, n: i64, v: i64) -> Graph {
    let mut g = GraphBuilder::new("SoftmaxXent");
    let logits = g.input("logits", io, &[n, v]).unwrap();
    let onehot = g.input("onehot", io, &[n, v]).unwrap();
    let m = g.op_named("m", "reduce_max", &[logits.into()], &dims(&[-1])).unwrap()[0];
    let d = g.op_named("shifted", "sub", &[logits.into(), m.into()], &[]).unwrap()[0];
    let e = g.op_named("e", "exp", &[d.into()], &[]).unwrap()[0];
    let s = g.op_named("s", "reduce_sum", &[e.into()], &dims(&[-1])).unwrap()[0];
    let p = g.op_named("p", "div", &[e.into(), s.into()], &[]).unwrap()[0];
    let ls = g.op_named("log_s", "log", &[s.into()], &[]).unwrap()[0];
    let lse = g.op_named("lse", "add", &[ls.into(), m.into()], &[]).unwrap()[0];
    let picked = g.op_named("picked", "mul", &[onehot.into(), logits.into()], &[]).unwrap()[0];
    let target = g.op_named("target", "reduce_sum", &[picked.into()], &dims(&[-1])).unwrap()[0];
    let loss = g.op_named("loss", "sub", &[lse.into(), target.into()], &[]).unwrap()[0];
    g.output(p, "p", io).unwrap();
    g.output(loss, "loss", F32).unwrap();
    g.build().unwrap()
}

/// `y = x - m - log(sum(exp(x - m)))` over the last axis.
fn log_softmax(n: i64, v: i64) -> Graph {
    let mut g = GraphBuilder::new("LogSoftmax");
    let x = g.input("x", F32, &[n, v]).unwrap();
    let m = g.op_named("m", "reduce_max", &[x.into()], &dims(&[-1])).unwrap()[0];
    let d = g.op_named("shifted", "sub", &[x.into(), m.into()], &[]).unwrap()[0];
    let e = g.op_named("e", "exp", &[d.into()], &[]).unwrap()[0];
    let s = g.op_named("s", "reduce_sum", &[e.into()], &dims(&[-1])).unwrap()[0];
    let l = g.op_named("log_s", "log", &[s.into()], &[]).unwrap()[0];
    let y = g.op_named("y", "sub", &[d.into(), l.into()], &[]).unwrap()[0];
    g.output(y, "y", F32).unwrap();
    g.build().unwrap()
}

/// `y = op(x, dims = reduced)` alone.
fn lone(op: &str, io: DataType, x_dims: &[i64], reduced: &[i64], out: DataType) -> Graph {
    let mut g = GraphBuilder::new(format!("{op}_{io:?}_{x_dims:?}_over_{reduced:?}"));
    let x = g.input("x", io, x_dims).unwrap();
    let y = g.op_named("r", op, &[x.into()], &dims(reduced)).unwrap()[0];
    g.output(y, "y", out).unwrap();
    g.build().unwrap()
}

/// Mean and (biased) variance of each row: `mean = reduce_mean(x)`, `var = reduce_mean((x - mean)²)`.
fn mean_var(n: i64, d: i64) -> Graph {
    let mut g = GraphBuilder::new("MeanVar");
    let x = g.input("x", F32, &[n, d]).unwrap();
    let mean = g.op_named("mean", "reduce_mean", &[x.into()], &dims(&[-1])).unwrap()[0];
    let c = g.op_named("centered", "sub", &[x.into(), mean.into()], &[]).unwrap()[0];
    let sq = g.op_named("squared", "mul", &[c.into(), c.into()], &[]).unwrap()[0];
    let var = g.op_named("var", "reduce_mean", &[sq.into()], &dims(&[-1])).unwrap()[0];
    g.output(mean, "mean", F32).unwrap();
    g.output(var, "var", F32).unwrap();
    g.build().unwrap()
}

/// The largest difference between two runs' outputs, relative to the largest magnitude.
fn relative(want: &[cudnn_runtime::reference::Array], got: &[cudnn_runtime::reference::Array]) -> f64 {
    let mut worst: f64 = 0.0;
    for (w, g) in want.iter().zip(got) {
        assert_eq!(w.dims, g.dims);
        let scale = w.data.iter().fold(f64::MIN_POSITIVE, |m, v| m.max(v.abs()));
        assert!(scale > 1e-3, "outputs of zeros prove nothing");
        for (a, b) in w.data.iter().zip(&g.data) {
            worst = worst.max((a - b).abs() / scale);
        }
    }
    worst
}

#[test]
fn means_and_norms_are_sums_and_elementwise_ops_that_compute_them() {
    let graph = mean_var(24, 40);
    let rewritten = mean_and_norms_as_sums(&graph).unwrap();
    let ops: Vec<&str> = rewritten.graph.nodes.iter().map(|n| n.op.call_name()).collect();
    assert_eq!(ops, ["mul", "reduce_sum", "sub", "mul", "mul", "reduce_sum"]);
    assert_eq!(rewritten.rewrites.len(), 2);
    assert!(rewritten.rewrites.iter().all(|r| r.kind == RewriteKind::MeanAsSum));
    assert_eq!(rewritten.rewrites[0].replaced_by, ["mean_scaled", "mean"]);
    assert_eq!(rewritten.graph.tensor_by_name("var_inv_count").unwrap().pass_by_value, Some(1.0 / 40.0));
    assert_eq!(rewritten.graph.inputs(), graph.inputs());
    assert_eq!(rewritten.graph.outputs(), graph.outputs());
    let x = inputs(&graph, 11);
    let (want, got) = (common::reference(&graph, &x), common::reference(&rewritten.graph, &x));
    let err = relative(&want, &got);
    assert!(err < 1e-6, "{err}");
    // Norms: the sum of |x|, the square root of the sum of x·x.
    let mut g = GraphBuilder::new("norms");
    let x = g.input("x", BF16, &[16, 48]).unwrap();
    let n1 = g.op_named("n1", "reduce_norm1", &[x.into()], &dims(&[-1])).unwrap()[0];
    let n2 = g.op_named("n2", "reduce_norm2", &[x.into()], &dims(&[0])).unwrap()[0];
    g.output(n1, "n1", F32).unwrap();
    g.output(n2, "n2", F32).unwrap();
    let graph = g.build().unwrap();
    let rewritten = mean_and_norms_as_sums(&graph).unwrap();
    let ops: Vec<&str> = rewritten.graph.nodes.iter().map(|n| n.op.call_name()).collect();
    assert_eq!(ops, ["abs", "reduce_sum", "mul", "reduce_sum", "sqrt"]);
    assert_eq!(rewritten.rewrites[0].replaced_by, ["n1_abs", "n1"]);
    assert_eq!(rewritten.rewrites[1].replaced_by, ["n2_square", "n2_sum", "n2"]);
    assert!(rewritten.rewrites.iter().all(|r| r.kind == RewriteKind::NormAsSum));
    let x = inputs(&graph, 14);
    let err = relative(&common::reference(&graph, &x), &common::reference(&rewritten.graph, &x));
    assert!(err < 1e-6, "{err}");
    // Over several axes: n is their product.
    let graph = lone("reduce_mean", F32, &[3, 8, 5], &[0, 2], F32);
    let rewritten = mean_and_norms_as_sums(&graph).unwrap().graph;
    assert_eq!(rewritten.tensor_by_name("r_inv_count").unwrap().pass_by_value, Some(1.0 / 15.0));
    let x = inputs(&graph, 12);
    assert!(relative(&common::reference(&graph, &x), &common::reference(&rewritten, &x)) < 1e-6);
}

#[test]
fn a_sum_over_the_rows_of_a_matrix_is_a_rank_2_matmul_by_ones() {
    let graph = lone("reduce_sum", BF16, &[96, 40], &[0], F32);
    let rewritten = cudnn_runtime::ir::column_sum_as_matmul(&graph).unwrap().graph;
    let ops: Vec<&str> = rewritten.nodes.iter().map(|n| n.op.call_name()).collect();
    assert_eq!(ops, ["identity", "matmul"]);
    assert_eq!(rewritten.tensor_by_name("r_ones").unwrap().dims, [1, 96]);
    assert_eq!(rewritten.tensor_by_name("r_one").unwrap().dims, [1, 1]);
    let x = inputs(&graph, 13);
    assert_eq!(common::reference(&graph, &x), common::reference(&rewritten, &x));
}

#[cfg(feature = "cudnn")]
mod deviceless {
    use super::*;
    use common::{deviceless, emulated_error, plan};
    use cudnn_runtime::backend::{BackendError, BuildOptions, CutReason, ExecutionPlan, SavedPart};

    fn parts(plan: &ExecutionPlan) -> Vec<String> {
        plan.parts().iter().map(|p| format!("{:?} {}", p.nodes(), p.selected().tag())).collect()
    }

    /// Plans `graph` with default options and checks the plan ([`computes`]).
    fn plans_and_computes(graph: &Graph, bound: f64) -> ExecutionPlan {
        let plan = ExecutionPlan::build(&cudnn(), graph, &BuildOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", graph.name));
        computes(plan, graph, bound)
    }

    /// [`plans_and_computes`] of a graph whose sum over rows is a one-row matmul: on cuDNN
    /// 9.10.2-9.14 deviceless, refused by the known-bad table (its heuristics would kill the
    /// process), and nothing to check.
    fn plans_and_computes_unless_known_bad(graph: &Graph, bound: f64) {
        if let Some(plan) = common::plan_unless_known_bad(&cudnn(), graph) {
            computes(plan, graph, bound);
        }
    }

    /// Prints `plan`'s parts and checks it run through its memory on the CPU against the
    /// reference of the whole graph.
    fn computes(plan: ExecutionPlan, graph: &Graph, bound: f64) -> ExecutionPlan {
        let err = emulated_error(&plan, 21);
        println!("{}: {} parts {:?}, emulated error {err:.2e}", graph.name, plan.parts().len(), parts(&plan));
        assert!(err <= bound, "{}: {err}", graph.name);
        for part in plan.parts() {
            only_prologues(part.graph());
        }
        plan
    }

    /// A kernel of elementwise ops and a reduction holds only the reduction's prologue: every
    /// op feeds the reduction. (An op beside it that does not, `log(s) + m` beside
    /// `Σ onehot · logits` in the cross-entropy, planned on cuDNN 9.19 and computed wrongly on
    /// the H100, 2026-12-07.)
    fn only_prologues(part: &Graph) {
        use cudnn_runtime::ops::Op;
        let Some(r) = part.nodes.iter().position(|n| matches!(n.op, Op::Reduction(_))) else { return };
        if part.nodes.iter().any(|n| matches!(n.op, Op::Matmul(_) | Op::Conv(_))) {
            return; // a reduction ending a matmul's epilogue: its own rules
        }
        let producer = |t: cudnn_runtime::TensorId| part.nodes.iter().position(|n| n.outputs.contains(&t));
        let mut feeds = vec![r];
        let mut stack: Vec<usize> = part.nodes[r].inputs.iter().filter_map(|t| producer(*t)).collect();
        while let Some(m) = stack.pop() {
            if !feeds.contains(&m) {
                feeds.push(m);
                stack.extend(part.nodes[m].inputs.iter().filter_map(|t| producer(*t)));
            }
        }
        let strays: Vec<&str> =
            (0..part.nodes.len()).filter(|m| !feeds.contains(m)).map(|m| part.nodes[m].name.as_str()).collect();
        assert!(strays.is_empty(), "{}: {strays:?} share the reduction's kernel but do not feed it", part.name);
    }

    fn cudnn() -> cudnn_runtime::backend::Cudnn {
        deviceless().expect("CUDNN_GRAPH_REQUIRE_CUDNN is unset and cuDNN is missing")
    }

    fn skip() -> bool {
        deviceless().is_none()
    }

    /// The user's report: right on the CPU reference, then "no execution plan for graph
    /// SoftmaxXent.part0". Every part plans now.
    #[needs_cudnn]
    #[test]
    fn softmax_and_cross_entropy_over_the_last_axis_plan() {
        if skip() {
            return;
        }
        for (n, v) in [(64, 1000), (8, 32000)] {
            let plan = plans_and_computes(&softmax_xent(F32, n, v), 1e-6);
            // The three reductions each end a kernel of their own.
            let reductions =
                plan.parts().iter().filter(|p| p.nodes().iter().any(|n| ["m", "s", "target"].contains(&n.as_str())));
            assert_eq!(reductions.count(), 3);
        }
        plans_and_computes(&softmax_xent(BF16, 64, 1000), 1e-6);
    }

    /// The softmax's plan reloads from each part's JSON (a payload's path): the channel
    /// description is made again on loading and matches the plans'.
    #[needs_cudnn]
    #[test]
    fn the_softmax_plan_reloads_from_its_parts_json() {
        if skip() {
            return;
        }
        let cudnn = cudnn();
        let graph = softmax_xent(F32, 64, 1000);
        let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
        let saved: Vec<SavedPart> = plan
            .parts()
            .iter()
            .map(|p| SavedPart {
                nodes: p.nodes().to_vec(),
                json: p.json().unwrap(),
                refused: match p.cut().map(|c| &c.reason) {
                    Some(CutReason::Refused(why)) => Some(why.clone()),
                    _ => None,
                },
                measured: None,
            })
            .collect();
        let loaded = ExecutionPlan::from_parts_json(&cudnn, graph, &saved).unwrap();
        assert_eq!(loaded.parts().len(), plan.parts().len());
        assert_eq!(loaded.workspace_size(), plan.workspace_size());
        assert_eq!(emulated_error(&loaded, 22), 0.0);
    }

    #[needs_cudnn]
    #[test]
    fn log_softmax_plans() {
        if skip() {
            return;
        }
        let plan = plans_and_computes(&log_softmax(256, 1000), 1e-6);
        // On the H100 the kernels [shifted, e, s] and [log_s, y] computed y wrongly (y[0] = 80.1
        // against -10.5, 2026-12-07): `shifted` is read later, so it is written by a kernel of its
        // own, and `y` broadcasts `log_s`, so it does not share `log_s`'s kernel.
        let nodes: Vec<Vec<String>> = plan.parts().iter().map(|p| p.nodes().to_vec()).collect();
        assert_eq!(nodes, [vec!["m"], vec!["shifted"], vec!["e", "s"], vec!["log_s"], vec!["y"]]);
    }

    #[needs_cudnn]
    #[test]
    fn a_mean_and_variance_of_rows_plan() {
        if skip() {
            return;
        }
        let plan = plans_and_computes(&mean_var(512, 768), 1e-6);
        assert_eq!(plan.rewrites().len(), 2);
        // Each mean's scaling is its sum's prologue: two kernels.
        assert_eq!(plan.parts().len(), 2);
    }

    /// Bias gradients: `[N, H]` over axis 0 and `[B, T, H]` over axis 1, of a graph input and
    /// after `relu_bwd`.
    #[needs_cudnn]
    #[test]
    fn bias_gradients_over_rows_plan() {
        if skip() {
            return;
        }
        for io in [F32, BF16] {
            plans_and_computes_unless_known_bad(&lone("reduce_sum", io, &[512, 256], &[0], F32), 0.0);
            plans_and_computes_unless_known_bad(&lone("reduce_sum", io, &[4, 128, 96], &[1], F32), 0.0);
        }
        let mut g = GraphBuilder::new("relu_bwd_bias_grad_2d");
        let d_y = g.input("d_y", BF16, &[256, 128]).unwrap();
        let h = g.input("h", BF16, &[256, 128]).unwrap();
        let dh = g.op_named("dh", "relu_bwd", &[d_y.into(), h.into()], &[]).unwrap()[0];
        let db = g.op_named("db", "reduce_sum", &[dh.into()], &dims(&[0])).unwrap()[0];
        g.output(db, "d_b", F32).unwrap();
        plans_and_computes_unless_known_bad(&g.build().unwrap(), 0.0);
    }

    /// Every reduction cuDNN reduces over the innermost axes in memory plans in every type,
    /// alone and after elementwise ops: `docs/ops.md`'s table.
    #[needs_cudnn]
    #[test]
    fn reductions_over_the_innermost_axes_plan() {
        if skip() {
            return;
        }
        let cudnn = cudnn();
        let cases: &[(&[i64], &[i64])] = &[
            (&[16, 200], &[-1]),
            (&[2, 16, 200], &[2]),
            (&[2, 16, 200], &[1, 2]),
            (&[2, 4, 8, 100], &[3]),
            (&[2, 4, 8, 100], &[1, 2, 3]),
            (&[16, 200], &[0, 1]),
            (&[1, 200], &[-1]),
        ];
        for (io, ops) in [
            (F32, &["reduce_sum", "reduce_max", "reduce_min", "reduce_amax"][..]),
            (BF16, &["reduce_sum", "reduce_max"][..]),
            (F16, &["reduce_sum", "reduce_max"][..]),
        ] {
            for op in ops {
                for (x, reduced) in cases {
                    let graph = lone(op, io, x, reduced, F32);
                    let p = plan(&cudnn, &graph);
                    assert_eq!(emulated_error(&p, 5), 0.0, "{}", graph.name);
                }
            }
        }
        // A mean: the scaling and the sum, one kernel.
        for (x, reduced) in cases {
            let p = plans_and_computes(&lone("reduce_mean", F32, x, reduced, F32), 1e-6);
            assert_eq!(p.parts().len(), 1);
        }
        // Norms: `abs` and the sum, one kernel; `x·x` and the sum, then the square root (of rank
        // 4, an elementwise kernel of `[2, 4, 8, 1]`, gets no engine: not a reduction's limit).
        for (x, reduced) in cases.iter().filter(|(x, _)| x.len() < 4) {
            let p = plans_and_computes(&lone("reduce_norm1", F32, x, reduced, F32), 1e-6);
            assert_eq!(p.parts().len(), 1);
            let p = plans_and_computes(&lone("reduce_norm2", BF16, x, reduced, F32), 1e-6);
            assert_eq!(p.parts().len(), 2);
        }
        // After elementwise ops, fused: one kernel.
        for (x, reduced) in cases {
            let mut g = GraphBuilder::new(format!("exp_sum_{x:?}_over_{reduced:?}"));
            let xi = g.input("x", F32, x).unwrap();
            let e = g.op("exp", &[xi.into()], &[]).unwrap()[0];
            let y = g.op("reduce_sum", &[e.into()], &dims(reduced)).unwrap()[0];
            g.output(y, "y", F32).unwrap();
            let graph = g.build().unwrap();
            let p = plan(&cudnn, &graph);
            assert_eq!(p.parts().len(), 1, "{}", graph.name);
            assert!(emulated_error(&p, 6) < 1e-6);
        }
    }

    /// A reduction into a 16-bit output (no engine as written) reduces into f32, then rounds.
    #[needs_cudnn]
    #[test]
    fn a_reduction_into_a_16_bit_output_plans() {
        if skip() {
            return;
        }
        for io in [BF16, F16] {
            for op in ["reduce_sum", "reduce_max"] {
                let p = plans_and_computes(&lone(op, io, &[64, 1000], &[-1], io), 0.0);
                assert_eq!(p.parts().len(), 2);
                assert_eq!(p.rewrites()[0].kind, RewriteKind::NarrowThroughF32);
            }
        }
        // A matmul's epilogue reduction is left as written.
        let mut g = GraphBuilder::new("matmul_row_sum_bf16");
        let a = g.input("a", BF16, &[1, 64, 32]).unwrap();
        let b = g.input("b", BF16, &[1, 32, 48]).unwrap();
        let c = g.matmul(a, b).unwrap();
        let s = g.op("reduce_sum", &[c.into()], &dims(&[2])).unwrap()[0];
        g.output(s, "s", BF16).unwrap();
        let graph = g.build().unwrap();
        assert!(cudnn_runtime::ir::narrow_reductions_through_f32(&graph).unwrap().rewrites.is_empty());
    }

    /// What is still refused, with why: a max over rows (the reduced axis not innermost: no
    /// channel reduction reads it, and only a sum is a matmul), a reduction over axes that are not
    /// one run of memory, a product. The error names the graph's own nodes and what cuDNN said.
    #[needs_cudnn]
    #[test]
    fn a_refused_reduction_names_the_users_nodes_and_the_cause() {
        if skip() {
            return;
        }
        let cudnn = cudnn();
        // Inside a graph that is partitioned: the part's NoPlan names the user's node.
        let mut g = GraphBuilder::new("ColumnMax");
        let x = g.input("x", F32, &[256, 512]).unwrap();
        let r = g.op_named("relu_x", "relu", &[x.into()], &[]).unwrap()[0];
        let m = g.op_named("col_max", "reduce_max", &[r.into()], &dims(&[0])).unwrap()[0];
        let y = g.op_named("scaled", "div", &[r.into(), m.into()], &[]).unwrap()[0];
        g.output(y, "y", F32).unwrap();
        let graph = g.build().unwrap();
        let e = match ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()) {
            Err(e) => e,
            Ok(_) => panic!("a max over rows plans now"),
        };
        let text = e.to_string();
        println!("{text}");
        let BackendError::NoPlan { graph: name, nodes, .. } = &e else { panic!("not a NoPlan: {e}") };
        assert_eq!(name, "ColumnMax");
        assert!(nodes.iter().any(|(n, _)| n == "col_max"), "{nodes:?}");
        assert!(text.contains("`col_max` (reduce_max)"), "{text}");
        assert!(text.contains("heuristics proposed no engine configuration"), "{text}");
        // What cuDNN's checks said: its reduction engine wants the channel layout (9.14 and newer
        // say so; 9.10.2's heuristics propose no engine to check).
        if cudnn.version() >= 91400 {
            assert!(text.contains("engine 1: CUDNN_STATUS_NOT_SUPPORTED_LAYOUT (!is_NHWC)"), "{text}");
        }
        assert!(!text.contains("ColumnMax.part"), "{text}");
        for graph in [
            lone("reduce_max", F32, &[256, 512], &[0], F32),
            lone("reduce_sum", F32, &[4, 64, 100], &[0, 2], F32),
            lone("reduce_mul", F32, &[64, 100], &[-1], F32),
        ] {
            let Err(e) = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()) else {
                panic!("{} plans now", graph.name)
            };
            println!("{}: {}", graph.name, e.to_string().lines().next().unwrap_or_default());
            assert!(matches!(e, BackendError::NoPlan { .. }), "{e}");
            assert!(e.to_string().contains("`r` (reduce_"), "{e}");
        }
        let Err(e) =
            ExecutionPlan::build(&cudnn, &lone("reduce_mul", F32, &[64, 100], &[-1], F32), &BuildOptions::default())
        else {
            panic!("a product plans now")
        };
        // What cuDNN's checks said (9.14 and newer; 9.10.2's heuristics propose no engine to check).
        if cudnn.version() >= 91400 {
            assert!(e.to_string().contains("Unsupported reduction op in the graph."), "{e}");
        }
    }
}
