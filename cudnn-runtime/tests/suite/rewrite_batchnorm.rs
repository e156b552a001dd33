//! `ir::batchnorm_as_pointwise`: which `batchnorm_inference` nodes become `sub/mul/mul/add`, that
//! the rewritten graph keeps its ports and computes what the original does on the CPU reference
//! engine (random fixed-seed inputs, compared in f64 within the rounding the chain's f32
//! intermediates and the outputs' type allow), and (deviceless, cuDNN 9.19 for the H200) that it
//! turns `conv_fprop → batchnorm_inference → relu`, which cuDNN does not plan, into one kernel.

use crate::common;

use std::collections::{HashMap, HashSet};

use cudnn_runtime::ir::{batchnorm_as_pointwise, RewriteKind, Rewritten};
use cudnn_runtime::ops::AttrValue;
use cudnn_runtime::reference::{self, Array};
use cudnn_runtime::rng::SplitMix64;
use cudnn_runtime::{DataType, Graph, GraphBuilder, GraphError, Operand};

use DataType::{BF16, F16, F32};

/// The per-channel statistics and parameters' dims, and the channel count, of the test graphs.
const C: i64 = 16;
const STATS: [i64; 4] = [1, C, 1, 1];
const STAT_NAMES: [&str; 4] = ["mean", "inv_var", "scale", "bias"];

/// What follows the convolution in [`conv_bn`].
#[derive(Clone, Copy, PartialEq)]
enum Tail {
    /// `relu(bn(c))` is the output `y`.
    Relu,
    /// `bn(c)` itself is the output `y`.
    BnOutput,
    /// `bn(c)` is `y`, and `relu(c)` a second output `r`: the conv's output has two readers.
    SharedX,
}

/// `c1 = conv_fprop(x, w, padding 1)`, `bn1 = batchnorm_inference(c1, mean, inv_var, scale,
/// bias)`, then `tail`; `io` ports channels-last, as the builder lays a conv's chain out, f32
/// statistics and compute.
fn conv_bn(name: &str, io: DataType, tail: Tail) -> Graph {
    let mut g = GraphBuilder::new(name);
    let x = g.input("x", io, &[2, 8, 6, 6]).unwrap();
    let w = g.input("w", io, &[C, 8, 3, 3]).unwrap();
    g.set_channels_last(x).unwrap().set_channels_last(w).unwrap();
    let stats = STAT_NAMES.map(|n| Operand::from(g.input(n, F32, &STATS).unwrap()));
    let pad = [("padding".to_string(), AttrValue::IntList(vec![1, 1]))];
    let c = g.op_named("c1", "conv_fprop", &[x.into(), w.into()], &pad).unwrap()[0];
    let bn =
        g.op_named("bn1", "batchnorm_inference", &[c.into(), stats[0], stats[1], stats[2], stats[3]], &[]).unwrap()[0];
    let y = match tail {
        Tail::Relu => g.op_named("act", "relu", &[bn.into()], &[]).unwrap()[0],
        Tail::BnOutput | Tail::SharedX => bn,
    };
    let y = g.output(y, "y", io).unwrap();
    g.set_channels_last(y).unwrap();
    if tail == Tail::SharedX {
        let r = g.op_named("r", "relu", &[c.into()], &[]).unwrap()[0];
        g.output(r, "r", io).unwrap();
        g.set_channels_last(r).unwrap();
    }
    g.build().unwrap()
}

/// Fixed-seed inputs by name, each rounded to its tensor's type and never zero: INV_VARIANCE in
/// [0.5, 2), MEAN and BIAS of magnitude in [0.1, 3) and the others in [0.25, 1), of either sign.
fn inputs(graph: &Graph, seed: u64) -> HashMap<String, Array> {
    let mut rng = SplitMix64::new(seed);
    graph
        .inputs()
        .into_iter()
        .map(|id| {
            let t = graph.tensor(id);
            let (lo, hi) = match t.name.as_str() {
                "inv_var" => (0.5, 2.0),
                "mean" | "bias" => (0.1, 3.0),
                _ => (0.25, 1.0),
            };
            let mut a = Array::from_fn(&t.dims, |_| {
                let v = rng.nonzero(lo, hi);
                if t.name == "inv_var" {
                    v.abs()
                } else {
                    v
                }
            });
            a.round_to(t.data_type);
            assert!(a.data.iter().all(|&v| v != 0.0), "`{}` has a zero", t.name);
            (t.name.clone(), a)
        })
        .collect()
}

/// Runs `graph` on the reference engine: each output by name.
fn run(graph: &Graph, inputs: &HashMap<String, Array>) -> HashMap<String, Array> {
    let values: Vec<Option<Array>> = graph.tensors.iter().map(|t| inputs.get(&t.name).cloned()).collect();
    let out = reference::run_arrays(graph, values).unwrap_or_else(|e| panic!("{}: {e}", graph.name));
    graph.outputs().into_iter().map(|id| graph.tensor(id).name.clone()).zip(out).collect()
}

/// Unit roundoff of a storage type: half its relative spacing.
fn unit_roundoff(dt: DataType) -> f64 {
    match dt {
        F32 => 2f64.powi(-24),
        BF16 => 2f64.powi(-8),
        F16 => 2f64.powi(-11),
        other => panic!("no roundoff for {other}"),
    }
}

/// Asserts the rewritten graph's outputs equal the original's within the rounding the chain
/// adds. The original computes `t = scale·(x − mean)·inv_var` and `t + bias` in f64 and rounds
/// once; the chain rounds `x − mean`, `·inv_var` and `·scale` to f32, so its `t` is within
/// `3u·|t|` (u = 2^-24) of the exact one, and `|t| ≤ |y| + |bias|`. Where a ReLU follows, it
/// moves no value apart (and where it clips one side, `|y|` is below that same bound). Both
/// round Y to f32 and the output to its type `io`, which can put two values `u_io·(|a| + |b|)`
/// apart at most beyond their distance; `6u` covers the three f32 roundings, the Y rounding and
/// the slack of measuring `|y|` after rounding.
fn assert_close(original: &HashMap<String, Array>, rewritten: &HashMap<String, Array>, graph: &Graph, bias: &Array) {
    let mut names: Vec<&String> = original.keys().collect();
    names.sort();
    assert_eq!(names.len(), rewritten.len());
    for name in names {
        let (a, b) = (&original[name], &rewritten[name]);
        let t = graph.tensor_by_name(name).unwrap();
        let u_io = unit_roundoff(t.data_type);
        assert_eq!(a.dims, b.dims, "{name}");
        let mut worst = 0f64;
        for (i, (&x, &y)) in a.data.iter().zip(&b.data).enumerate() {
            let channel = Array::unravel(i as i64, &a.dims)[1] as usize;
            let tol = 6.0 * unit_roundoff(F32) * (x.abs() + bias.data[channel].abs()) + u_io * (x.abs() + y.abs());
            assert!((x - y).abs() <= tol, "{}: `{name}`[{i}]: {x} vs {y}, tolerance {tol:e}", graph.name);
            worst = worst.max((x - y).abs() / tol.max(f64::MIN_POSITIVE));
        }
        println!("{}: `{name}` agrees, worst |Δ| / tolerance {worst:.3}", graph.name);
    }
}

/// Checks what every rewrite must keep: the rewritten graph is valid, its inputs and outputs are
/// the original's (same ids and tensors), the tensors the original had are unchanged, and the new
/// ones are virtual f32 tensors in X's dim order with fresh names and uids.
fn check_ports(original: &Graph, rewritten: &Rewritten) {
    let g = &rewritten.graph;
    g.validate().unwrap();
    assert_eq!(g.inputs(), original.inputs());
    assert_eq!(g.outputs(), original.outputs());
    assert_eq!(g.tensors[..original.tensors.len()], original.tensors[..], "existing tensors unchanged");
    let uids: HashSet<i64> = g.tensors.iter().map(|t| t.uid).collect();
    assert_eq!(uids.len(), g.tensors.len(), "unique uids");
    for t in &g.tensors[original.tensors.len()..] {
        assert!(t.is_virtual && t.data_type == F32, "`{}`", t.name);
        assert!(t.uid >= 1 && t.uid < cudnn_runtime::ir::MAX_UID);
        assert_eq!(t.strides, cudnn_runtime::dim::channels_last_strides(&t.dims), "`{}` follows X", t.name);
    }
    assert_eq!(g.tensors.len() - original.tensors.len(), 3 * rewritten.rewrites.len());
    assert_eq!(g.nodes.len() - original.nodes.len(), 3 * rewritten.rewrites.len());
}

fn ops(g: &Graph) -> Vec<&'static str> {
    g.nodes.iter().map(|n| n.op.call_name()).collect()
}

#[test]
fn conv_batchnorm_relu_becomes_a_pointwise_epilogue_with_the_same_values() {
    for (seed, io) in [(1, F32), (2, BF16), (3, F16)] {
        let graph = conv_bn(&format!("conv_bn_relu_{io}"), io, Tail::Relu);
        let rewritten = batchnorm_as_pointwise(&graph).unwrap();
        check_ports(&graph, &rewritten);
        assert_eq!(ops(&rewritten.graph), ["conv_fprop", "sub", "mul", "mul", "add", "relu"]);
        let [r] = rewritten.rewrites.as_slice() else { panic!("{:?}", rewritten.rewrites) };
        assert_eq!(r.node, "bn1");
        assert_eq!(r.replaced_by, ["bn1_centered", "bn1_normalized", "bn1_scaled", "bn1"]);
        assert_eq!(r.kind, RewriteKind::BatchnormAsPointwise { after_conv: Some("c1".into()) });
        assert_eq!(
            r.to_string(),
            "batchnorm_inference `bn1` as sub/mul/mul/add (fuses as the epilogue of conv_fprop `c1`)"
        );
        // The chain reads the tensors the norm read, and writes its output.
        let names = |n: &cudnn_runtime::Node| -> Vec<String> {
            n.inputs.iter().chain(&n.outputs).map(|i| rewritten.graph.tensor(*i).name.clone()).collect()
        };
        let chain: Vec<Vec<String>> = rewritten.graph.nodes[1..5].iter().map(names).collect();
        assert_eq!(
            chain,
            [
                ["c1", "mean", "bn1_centered"],
                ["bn1_centered", "inv_var", "bn1_normalized"],
                ["bn1_normalized", "scale", "bn1_scaled"],
                ["bn1_scaled", "bias", "bn1"],
            ]
        );
        let ins = inputs(&graph, seed);
        assert_close(&run(&graph, &ins), &run(&rewritten.graph, &ins), &graph, &ins["bias"]);
    }
}

#[test]
fn a_batchnorm_that_is_a_graph_output_keeps_its_tensor() {
    let graph = conv_bn("conv_bn_out", BF16, Tail::BnOutput);
    let rewritten = batchnorm_as_pointwise(&graph).unwrap();
    check_ports(&graph, &rewritten);
    let y = graph.id_of("y").unwrap();
    let last = rewritten.graph.nodes.last().unwrap();
    assert_eq!((last.op.call_name(), last.outputs.as_slice()), ("add", [y].as_slice()));
    assert_eq!(rewritten.graph.tensor(y), graph.tensor(y), "bf16, channels-last, not virtual, same uid");
    let ins = inputs(&graph, 4);
    assert_close(&run(&graph, &ins), &run(&rewritten.graph, &ins), &graph, &ins["bias"]);
}

#[test]
fn a_batchnorm_whose_x_has_another_reader() {
    let graph = conv_bn("conv_bn_shared_x", F16, Tail::SharedX);
    let rewritten = batchnorm_as_pointwise(&graph).unwrap();
    check_ports(&graph, &rewritten);
    assert_eq!(ops(&rewritten.graph), ["conv_fprop", "sub", "mul", "mul", "add", "relu"]);
    let c = graph.id_of("c1").unwrap();
    let readers = rewritten.graph.nodes.iter().filter(|n| n.inputs.contains(&c)).count();
    assert_eq!(readers, 2, "the chain's sub and the relu read the conv's output");
    let ins = inputs(&graph, 5);
    let (a, b) = (run(&graph, &ins), run(&rewritten.graph, &ins));
    assert_eq!(a["r"], b["r"], "the other reader's output is untouched");
    assert_close(&a, &b, &graph, &ins["bias"]);
}

/// `bn(x)` with X a graph input: rewritten too (cuDNN 9.19 has no engine for the norm alone,
/// and the chain plans), with no convolution named.
#[test]
fn a_batchnorm_on_a_graph_input_is_rewritten_without_a_conv() {
    let mut g = GraphBuilder::new("lone_bn");
    let x = g.input("x", BF16, &[2, C, 4, 4]).unwrap();
    g.set_channels_last(x).unwrap();
    let stats = STAT_NAMES.map(|n| Operand::from(g.input(n, F32, &STATS).unwrap()));
    let y = g.op_named("bn", "batchnorm_inference", &[x.into(), stats[0], stats[1], stats[2], stats[3]], &[]).unwrap();
    let y = g.output(y[0], "y", BF16).unwrap();
    g.set_channels_last(y).unwrap();
    let graph = g.build().unwrap();
    let rewritten = batchnorm_as_pointwise(&graph).unwrap();
    check_ports(&graph, &rewritten);
    assert_eq!(rewritten.rewrites[0].kind, RewriteKind::BatchnormAsPointwise { after_conv: None });
    assert_eq!(
        rewritten.rewrites[0].to_string(),
        "batchnorm_inference `bn` as sub/mul/mul/add (a pointwise chain plans where the norm op has no engine)"
    );
    let ins = inputs(&graph, 6);
    assert_close(&run(&graph, &ins), &run(&rewritten.graph, &ins), &graph, &ins["bias"]);
}

/// `relu(bn(conv(x, w) + b0))`, channels-last ports.
fn conv_bias_bn_relu(name: &str, io: DataType) -> Graph {
    let mut g = GraphBuilder::new(name);
    let x = g.input("x", io, &[2, 8, 6, 6]).unwrap();
    let w = g.input("w", io, &[C, 8, 1, 1]).unwrap();
    g.set_channels_last(x).unwrap().set_channels_last(w).unwrap();
    let b0 = g.input("b0", io, &STATS).unwrap();
    let stats = STAT_NAMES.map(|n| Operand::from(g.input(n, F32, &STATS).unwrap()));
    let c = g.op_named("conv", "conv_fprop", &[x.into(), w.into()], &[]).unwrap()[0];
    let cb = g.op_named("biased", "add", &[c.into(), b0.into()], &[]).unwrap()[0];
    let y = g.op_named("bn", "batchnorm_inference", &[cb.into(), stats[0], stats[1], stats[2], stats[3]], &[]).unwrap();
    let r = g.op_named("act", "relu", &[y[0].into()], &[]).unwrap()[0];
    let r = g.output(r, "y", io).unwrap();
    g.set_channels_last(r).unwrap();
    g.build().unwrap()
}

/// A conv, a bias add, then the norm: the convolution is found through the pointwise node.
#[test]
fn the_conv_is_found_through_pointwise_nodes() {
    let graph = conv_bias_bn_relu("conv_bias_bn_relu", F16);
    let rewritten = batchnorm_as_pointwise(&graph).unwrap();
    check_ports(&graph, &rewritten);
    assert_eq!(rewritten.rewrites[0].kind, RewriteKind::BatchnormAsPointwise { after_conv: Some("conv".into()) });
    let ins = inputs(&graph, 7);
    assert_close(&run(&graph, &ins), &run(&rewritten.graph, &ins), &graph, &ins["bias"]);
}

#[test]
fn a_graph_without_batchnorm_is_unchanged() {
    let mut g = GraphBuilder::new("conv_bias_relu");
    let x = g.input("x", F16, &[2, 8, 6, 6]).unwrap();
    let w = g.input("w", F16, &[C, 8, 3, 3]).unwrap();
    let bias = g.input("bias", F16, &STATS).unwrap();
    let c = g.op("conv_fprop", &[x.into(), w.into()], &[]).unwrap()[0];
    let d = g.op("add", &[c.into(), bias.into()], &[]).unwrap()[0];
    let y = g.op("relu", &[d.into()], &[]).unwrap()[0];
    g.output(y, "y", F16).unwrap();
    let graph = g.build().unwrap();
    let rewritten = batchnorm_as_pointwise(&graph).unwrap();
    assert!(rewritten.rewrites.is_empty());
    assert_eq!(rewritten.graph, graph);
}

/// cudnn-frontend's `batchnorm_inference → relu_bwd → batchnorm_backward`: the one graph cuDNN
/// 9.19 plans the norm op in (and the chain in its place gets no engine), so it stays.
#[test]
fn a_batchnorm_feeding_batchnorm_backward_stays() {
    let (x, c) = ([4i64, C, 4, 4], STATS);
    let mut g = GraphBuilder::new("bn_drelu_dbn");
    let xi = g.input("x", F16, &x).unwrap();
    let dy = g.input("dy", F16, &x).unwrap();
    let [mean, inv_var, scale, bias] = STAT_NAMES.map(|n| g.input(n, F32, &c).unwrap());
    let y = g.op("batchnorm_inference", &[xi.into(), mean.into(), inv_var.into(), scale.into(), bias.into()], &[]);
    let d = g.op("relu_bwd", &[dy.into(), y.unwrap()[0].into()], &[]).unwrap();
    let grads = g.op("batchnorm_backward", &[d[0].into(), xi.into(), scale.into(), mean.into(), inv_var.into()], &[]);
    for (o, (name, dt)) in grads.unwrap().into_iter().zip([("dx", F16), ("dscale", F32), ("dbias", F32)]) {
        g.output(o, name, dt).unwrap();
    }
    let graph = g.build().unwrap();
    let rewritten = batchnorm_as_pointwise(&graph).unwrap();
    assert!(rewritten.rewrites.is_empty());
    assert_eq!(rewritten.graph, graph);
}

/// Names the graph already uses get a suffix; the uids taken are skipped.
#[test]
fn new_names_and_uids_are_fresh() {
    let mut graph = conv_bn("taken_names", F32, Tail::Relu);
    let x = graph.id_of("x").unwrap();
    graph.tensors[x.0].name = "bn1_centered".into();
    graph.nodes[0].name = "bn1_normalized".into();
    let rewritten = batchnorm_as_pointwise(&graph).unwrap();
    check_ports(&graph, &rewritten);
    assert_eq!(rewritten.rewrites[0].replaced_by, ["bn1_centered", "bn1_normalized_1", "bn1_scaled", "bn1"]);
    let new: Vec<(&str, i64)> =
        rewritten.graph.tensors[graph.tensors.len()..].iter().map(|t| (t.name.as_str(), t.uid)).collect();
    let first_free = (1..).find(|u| graph.tensors.iter().all(|t| t.uid != *u)).unwrap();
    assert_eq!(
        new,
        [("bn1_centered_1", first_free), ("bn1_normalized", first_free + 1), ("bn1_scaled", first_free + 2)]
    );
}

#[test]
fn an_invalid_graph_is_refused_with_its_validation_error() {
    let mut graph = conv_bn("tampered", F32, Tail::Relu);
    graph.nodes.swap(0, 1);
    let e = batchnorm_as_pointwise(&graph).unwrap_err();
    assert!(matches!(e, GraphError::UsedBeforeProduced { ref node, .. } if node == "bn1"), "{e}");
}

/// Deviceless cuDNN 9.19 for the H200, default build options. Measured 2026-12 with the rewrite
/// bypassed (`ExecutionPlan::build` now applies it, so the graphs as written plan):
/// - the original `conv_fprop → batchnorm_inference → relu` (f16 and bf16, NHWC) has no plan:
///   "heuristics proposed no engine configuration", mode A's `cudnnBackendFinalize` failing with
///   `CUDNN_STATUS_NOT_SUPPORTED (3000): matcher_casted == nullptr`; the rewritten graph plans as
///   one kernel (engine 7, runtime-compiled, 5–6 candidates);
/// - so for `conv_fprop → add → batchnorm_inference → relu`, whose chain plans the same way;
/// - a lone `batchnorm_inference` likewise has none, and its chain plans (engine 1).
#[cfg(feature = "cudnn")]
#[needs_cudnn]
#[test]
fn deviceless_the_rewritten_conv_batchnorm_relu_plans_as_one_kernel() {
    use common::{deviceless, plan};
    use cudnn_runtime::backend::{BuildOptions, ExecutionPlan};
    let Some(cudnn) = deviceless() else { return };
    for io in [F16, BF16] {
        let graph = conv_bn(&format!("conv_bn_relu_{io}"), io, Tail::Relu);
        // `build` rewrites before planning, so the graph as written is one kernel.
        let p = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default().single_kernel())
            .unwrap_or_else(|e| panic!("{}: {e}", graph.name));
        assert_eq!(p.rewrites().len(), 1);
        println!("{}: {} → {}", graph.name, p.rewrites()[0], p.selected());
        let rewritten = batchnorm_as_pointwise(&graph).unwrap();
        plan(&cudnn, &rewritten.graph);

        let biased = conv_bias_bn_relu(&format!("conv_bias_bn_relu_{io}"), io);
        assert_eq!(plan(&cudnn, &biased).rewrites().len(), 1);
        plan(&cudnn, &batchnorm_as_pointwise(&biased).unwrap().graph);

        let mut g = GraphBuilder::new(format!("lone_bn_{io}"));
        let x = g.input("x", io, &[4, C, 16, 16]).unwrap();
        g.set_channels_last(x).unwrap();
        let stats = STAT_NAMES.map(|n| Operand::from(g.input(n, F32, &STATS).unwrap()));
        let y = g.op("batchnorm_inference", &[x.into(), stats[0], stats[1], stats[2], stats[3]], &[]).unwrap();
        let y = g.output(y[0], "y", io).unwrap();
        g.set_channels_last(y).unwrap();
        let lone = g.build().unwrap();
        assert_eq!(plan(&cudnn, &lone).rewrites().len(), 1);
        let p = plan(&cudnn, &batchnorm_as_pointwise(&lone).unwrap().graph);
        println!("{}: {}", lone.name, p.selected());
    }
}
