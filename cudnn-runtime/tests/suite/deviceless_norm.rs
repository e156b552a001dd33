//! The normalizations lowered and planned by real cuDNN without a GPU, for the H200 described by
//! `tests/fixtures/h200-devprop.json` (see `deviceless.rs` for the set-up): which graphs cuDNN
//! 9.19 plans, and the typed errors of those it does not (recorded in `docs/ops.md`).
//!
//! Without libcudnn each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_CUDNN=1`.
#![cfg(feature = "cudnn")]

use cudnn_runtime::backend::{BackendError, BuildOptions, ExecutionPlan};
use cudnn_runtime::dim::channels_last_strides;
use cudnn_runtime::ops::AttrValue;
use cudnn_runtime::{Context, DataType, Graph, GraphBuilder, Operand};

use crate::common;

use common::{deviceless, no_plan, plan};

fn training() -> Vec<(String, AttrValue)> {
    vec![("phase".into(), "training".into())]
}

/// Gives every tensor of rank ≥ 3 (not a scalar) channels-last strides, as cudnn-frontend infers
/// Y's strides from X's.
fn to_channels_last(mut g: Graph) -> Graph {
    for t in &mut g.tensors {
        if t.dims.len() >= 3 && t.pass_by_value.is_none() {
            t.strides = channels_last_strides(&t.dims);
        }
    }
    g.validate().unwrap();
    g
}

/// A port: a tensor input (name, type, dims) or a number.
enum In<'a> {
    T(&'a str, DataType, &'a [i64]),
    N(f64),
}

/// One op; output `i` is called `out{i}` and has type `types[i]`.
fn one_op(name: &str, op: &str, inputs: &[In<'_>], attrs: &[(String, AttrValue)], types: &[DataType]) -> Graph {
    let mut g = GraphBuilder::new(name);
    let operands: Vec<Operand> = inputs
        .iter()
        .map(|i| match i {
            In::T(n, dt, dims) => g.input(n, *dt, dims).unwrap().into(),
            In::N(v) => Operand::Scalar(*v),
        })
        .collect();
    let outs = g.op(op, &operands, attrs).unwrap_or_else(|e| panic!("{name}: {e}"));
    for (i, o) in outs.into_iter().enumerate() {
        g.output(o, &format!("out{i}"), types[i]).unwrap();
    }
    g.build().unwrap()
}

use DataType::{BF16, F16, F32};

fn layernorm(name: &str, dt: DataType, x: &[i64], p: &[i64], attrs: &[(String, AttrValue)]) -> Graph {
    let ins = [In::T("x", dt, x), In::T("scale", F32, p), In::T("bias", F32, p), In::N(1e-5)];
    one_op(name, "layernorm", &ins, attrs, &[dt, F32, F32])
}

#[needs_cudnn]
#[test]
fn layernorm_plans_in_both_phases() {
    let Some(cudnn) = deviceless() else { return };
    for dt in [BF16, F16, F32] {
        for (x, p) in [(&[1024i64, 768][..], &[1i64, 768][..]), (&[1024, 768, 1, 1], &[1, 768, 1, 1])] {
            let g = layernorm(&format!("layernorm_train_{dt}_{x:?}"), dt, x, p, &training());
            assert_eq!(plan(&cudnn, &g).layout().io().len(), 6, "x, scale, bias; y, mean, inv_var");
            plan(&cudnn, &layernorm(&format!("layernorm_infer_{dt}_{x:?}"), dt, x, p, &[]));
        }
    }
    // The example's size: bf16 16384 × 4096, statistics [16384, 1].
    let g = layernorm("layernorm_16384x4096", BF16, &[16384, 4096], &[1, 4096], &training());
    plan(&cudnn, &g);
    let ins = [
        In::T("x", BF16, &[16384, 4096]),
        In::T("scale", BF16, &[1, 4096]),
        In::T("bias", BF16, &[1, 4096]),
        In::N(1e-5),
    ];
    plan(&cudnn, &one_op("layernorm_16384x4096_bf16_params", "layernorm", &ins, &[], &[BF16]));
}

#[needs_cudnn]
#[test]
fn rmsnorm_plans_with_and_without_bias() {
    let Some(cudnn) = deviceless() else { return };
    for dt in [BF16, F16, F32] {
        for attrs in [training(), vec![]] {
            let ins = [In::T("x", dt, &[2048, 1024]), In::T("scale", F32, &[1, 1024]), In::N(1e-6)];
            plan(&cudnn, &one_op(&format!("rmsnorm_{dt}_{}", attrs.len()), "rmsnorm", &ins, &attrs, &[dt, F32]));
            let ins =
                [In::T("x", dt, &[2048, 1024]), In::T("s", F32, &[1, 1024]), In::T("b", F32, &[1, 1024]), In::N(1e-6)];
            plan(
                &cudnn,
                &one_op(&format!("rmsnorm_bias_{dt}_{}", attrs.len()), "rmsnorm_bias", &ins, &attrs, &[dt, F32]),
            );
        }
    }
}

fn batchnorm(name: &str, dt: DataType) -> Graph {
    let (x, c) = (&[8i64, 64, 16, 16][..], &[1i64, 64, 1, 1][..]);
    let ins = [
        In::T("x", dt, x),
        In::T("scale", F32, c),
        In::T("bias", F32, c),
        In::T("running_mean", F32, c),
        In::T("running_var", F32, c),
        In::N(1e-5),
        In::N(0.1),
    ];
    one_op(name, "batchnorm", &ins, &[], &[dt, F32, F32, F32, F32])
}

#[needs_cudnn]
#[test]
fn batchnorm_plans_in_both_layouts() {
    let Some(cudnn) = deviceless() else { return };
    for dt in [F16, BF16, F32] {
        plan(&cudnn, &batchnorm(&format!("batchnorm_nchw_{dt}"), dt));
        plan(&cudnn, &to_channels_last(batchnorm(&format!("batchnorm_nhwc_{dt}"), dt)));
    }
}

#[needs_cudnn]
#[test]
fn a_channels_last_x_needs_a_channels_last_y() {
    let Some(cudnn) = deviceless() else { return };
    let mut g = batchnorm("batchnorm_mixed_layouts", F16);
    g.tensors[0].strides = channels_last_strides(&g.tensors[0].dims);
    g.validate().unwrap();
    match ExecutionPlan::build(&cudnn, &g, &BuildOptions::default()) {
        Err(e @ BackendError::Cudnn { .. }) => {
            println!("{e}");
            assert!(e.to_string().contains("NORM_FORWARD_DESCRIPTOR"), "{e}");
            assert!(e.to_string().contains("batchnorm_0"), "names the node: {e}");
        }
        other => panic!("{other:?}"),
    }
}

#[needs_cudnn]
#[test]
fn instancenorm_plans_in_both_phases_and_layouts() {
    let Some(cudnn) = deviceless() else { return };
    for dt in [F16, BF16, F32] {
        for attrs in [training(), vec![]] {
            let (x, c) = (&[8i64, 64, 16, 16][..], &[1i64, 64, 1, 1][..]);
            let ins = [In::T("x", dt, x), In::T("scale", F32, c), In::T("bias", F32, c), In::N(1e-5)];
            let g =
                one_op(&format!("instancenorm_{dt}_{}", attrs.len()), "instancenorm", &ins, &attrs, &[dt, F32, F32]);
            plan(&cudnn, &g);
            let mut g = to_channels_last(g);
            g.name.push_str("_nhwc");
            plan(&cudnn, &g);
        }
    }
}

#[needs_cudnn]
#[test]
fn backward_norms_plan() {
    let Some(cudnn) = deviceless() else { return };
    for dt in [F16, BF16, F32] {
        let (x, p, st) = (&[1024i64, 768, 1, 1][..], &[1i64, 768, 1, 1][..], &[1024i64, 1, 1, 1][..]);
        let ins = [
            In::T("dy", dt, x),
            In::T("x", dt, x),
            In::T("scale", F32, p),
            In::T("mean", F32, st),
            In::T("inv_var", F32, st),
        ];
        plan(&cudnn, &one_op(&format!("layernorm_backward_{dt}"), "layernorm_backward", &ins, &[], &[dt, F32, F32]));
        for dbias in [false, true] {
            let ins = [In::T("dy", dt, x), In::T("x", dt, x), In::T("scale", F32, p), In::T("inv_var", F32, st)];
            let attrs = [("dbias".to_string(), AttrValue::Bool(dbias))];
            let g =
                one_op(&format!("rmsnorm_backward_{dt}_{dbias}"), "rmsnorm_backward", &ins, &attrs, &[dt, F32, F32]);
            assert_eq!(g.outputs().len(), if dbias { 3 } else { 2 });
            plan(&cudnn, &g);
        }
        let (x, c, nc) = (&[8i64, 64, 16, 16][..], &[1i64, 64, 1, 1][..], &[8i64, 64, 1, 1][..]);
        let ins = [
            In::T("dy", dt, x),
            In::T("x", dt, x),
            In::T("scale", F32, c),
            In::T("mean", F32, c),
            In::T("inv_var", F32, c),
        ];
        plan(&cudnn, &one_op(&format!("batchnorm_backward_{dt}"), "batchnorm_backward", &ins, &[], &[dt, F32, F32]));
        let ins = [
            In::T("dy", dt, x),
            In::T("x", dt, x),
            In::T("scale", F32, c),
            In::T("mean", F32, nc),
            In::T("inv_var", F32, nc),
        ];
        plan(
            &cudnn,
            &one_op(&format!("instancenorm_backward_{dt}"), "instancenorm_backward", &ins, &[], &[dt, F32, F32]),
        );
    }
}

/// cudnn-frontend's "BN_inference DRelu DBN" graph: `batchnorm_inference` has engines only fused
/// like this (channels last, f16 intermediates), not on its own.
#[needs_cudnn]
#[test]
fn batchnorm_inference_plans_fused_with_relu_backward_and_dbn() {
    let Some(cudnn) = deviceless() else { return };
    let (x, c) = ([4i64, 32, 16, 16], [1i64, 32, 1, 1]);
    let mut g = GraphBuilder::new("bn_inference_drelu_dbn");
    g.context(Context { intermediate_data_type: F16, compute_data_type: F32 });
    let xi = g.input("x", F16, &x).unwrap();
    let dy = g.input("dy", F16, &x).unwrap();
    let [scale, bias, mean, inv_var] = ["scale", "bias", "mean", "inv_var"].map(|n| g.input(n, F32, &c).unwrap());
    let y =
        g.op("batchnorm_inference", &[xi.into(), mean.into(), inv_var.into(), scale.into(), bias.into()], &[]).unwrap();
    let d = g.op("relu_bwd", &[dy.into(), y[0].into()], &[]).unwrap();
    let grads =
        g.op("batchnorm_backward", &[d[0].into(), xi.into(), scale.into(), mean.into(), inv_var.into()], &[]).unwrap();
    for (o, (name, dt)) in grads.into_iter().zip([("dx", F16), ("dscale", F32), ("dbias", F32)]) {
        g.output(o, name, dt).unwrap();
    }
    let graph = to_channels_last(g.build().unwrap());
    plan(&cudnn, &graph);
}

/// What cuDNN 9.19 has no engine for, deviceless on the H200: each a typed error.
#[needs_cudnn]
#[test]
fn unplannable_norm_graphs_are_typed_errors() {
    let Some(cudnn) = deviceless() else { return };
    let (x, c) = (&[8i64, 64, 16, 16][..], &[1i64, 64, 1, 1][..]);
    for layout in ["nchw", "nhwc"] {
        let ins = [
            In::T("x", F16, x),
            In::T("mean", F32, c),
            In::T("inv_var", F32, c),
            In::T("scale", F32, c),
            In::T("bias", F32, c),
        ];
        let g = one_op(&format!("lone_batchnorm_inference_{layout}"), "batchnorm_inference", &ins, &[], &[F16]);
        if layout == "nhwc" {
            // cuDNN 9.19 has no engine for the norm op alone, so `build` plans it as the
            // elementwise chain of its formula (`ir::batchnorm_as_pointwise`), which it has.
            let p = plan(&cudnn, &to_channels_last(g));
            assert_eq!(p.rewrites().len(), 1, "{:?}", p.rewrites());
        } else {
            no_plan(&cudnn, &g);
        }
        let g = one_op(&format!("lone_genstats_{layout}"), "genstats", &[In::T("x", F16, x)], &[], &[F32, F32]);
        no_plan(&cudnn, &if layout == "nhwc" { to_channels_last(g) } else { g });
    }
    // A pointwise epilogue after an inference layer norm.
    let mut g = GraphBuilder::new("layernorm_relu");
    let xi = g.input("x", BF16, &[1024, 768]).unwrap();
    let s = g.input("scale", F32, &[1, 768]).unwrap();
    let b = g.input("bias", F32, &[1, 768]).unwrap();
    let y = g.op("layernorm", &[xi.into(), s.into(), b.into(), 1e-5.into()], &[]).unwrap()[0];
    let r = g.op("relu", &[y.into()], &[]).unwrap()[0];
    g.output(r, "r", BF16).unwrap();
    no_plan(&cudnn, &g.build().unwrap());
}

/// `rmsnorm` feeding a `matmul`: cuDNN 9.19 refuses the operation graph itself
/// (`CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN` when it is finalized), a typed error naming the
/// descriptor; run the two as separate graphs.
#[needs_cudnn]
#[test]
fn rmsnorm_then_matmul_is_not_fused_by_this_cudnn() {
    let Some(cudnn) = deviceless() else { return };
    let mut g = GraphBuilder::new("rmsnorm_matmul");
    let x = g.input("x", BF16, &[1024, 768]).unwrap();
    let s = g.input("scale", BF16, &[1, 768]).unwrap();
    let w = g.input("w", BF16, &[768, 512]).unwrap();
    let y = g.op("rmsnorm", &[x.into(), s.into(), 1e-5.into()], &[]).unwrap()[0];
    let c = g.matmul(y, w).unwrap();
    g.output(c, "c", BF16).unwrap();
    match ExecutionPlan::build(&cudnn, &g.build().unwrap(), &BuildOptions::default()) {
        Ok(p) => println!("rmsnorm_matmul: this cuDNN fuses it: {}", p.selected()),
        Err(e @ BackendError::Cudnn { .. }) => {
            println!("rmsnorm_matmul: {e}");
            let BackendError::Cudnn { status, descriptor, .. } = e else { unreachable!() };
            assert_eq!(status.code(), 3001, "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN");
            assert_eq!(descriptor, "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR");
        }
        Err(e @ BackendError::NoPlan { .. }) => println!("rmsnorm_matmul: {e}"),
        Err(e) => panic!("rmsnorm_matmul: {e}"),
    }
}

/// Per-channel norms read dim 1 as the channel: a rank-2 X, which the backend would pad to
/// `[1, N, C]`, is refused before cuDNN sees it.
#[needs_cudnn]
#[test]
fn rank_2_per_channel_norms_are_refused_with_a_reason() {
    let Some(cudnn) = deviceless() else { return };
    let ins = [In::T("x", F32, &[32, 16]), In::T("s", F32, &[1, 16]), In::T("b", F32, &[1, 16]), In::N(1e-5)];
    let g = one_op("instancenorm_rank2", "instancenorm", &ins, &[], &[F32]);
    match ExecutionPlan::build(&cudnn, &g, &BuildOptions::default()) {
        Err(BackendError::Unsupported { node, op, reason }) => {
            assert_eq!((node.as_str(), op), ("instancenorm_0", "instancenorm"));
            assert!(reason.contains("[N, C, 1]"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// `genstats` of a convolution's output, which stays a graph output (cudnn-frontend's conv +
/// genstats fusion, the statistics a following batch norm needs): plans with its ports declared
/// channels-last, where `genstats` alone has no engine; with row-major ports (the default) it has
/// none, a typed `NoPlan` whose hint names the three ports.
#[needs_cudnn]
#[test]
fn genstats_plans_after_a_convolution() {
    let Some(cudnn) = deviceless() else { return };
    for layout in ["nhwc", "nchw"] {
        let mut g = GraphBuilder::new(format!("conv_genstats_{layout}"));
        let x = g.input("x", F16, &[8, 64, 16, 16]).unwrap();
        let w = g.input("w", F16, &[32, 64, 3, 3]).unwrap();
        let padding = [("padding".to_string(), AttrValue::IntList(vec![1, 1]))];
        let y = g.op("conv_fprop", &[x.into(), w.into()], &padding).unwrap()[0];
        let stats = g.op("genstats", &[y.into()], &[]).unwrap();
        let y = g.output(y, "y", F16).unwrap();
        g.output(stats[0], "sum", F32).unwrap();
        g.output(stats[1], "sq_sum", F32).unwrap();
        if layout == "nhwc" {
            for port in [x, w, y] {
                g.set_channels_last(port).unwrap();
            }
        }
        let graph = g.build().unwrap();
        if layout == "nhwc" {
            assert!(graph.ports_not_channels_last().is_empty());
            plan(&cudnn, &graph);
        } else {
            let hinted: Vec<String> = graph.ports_not_channels_last().into_iter().map(|p| p.tensor).collect();
            assert_eq!(hinted, ["x", "w", "y"]);
            no_plan(&cudnn, &graph);
        }
    }
}
