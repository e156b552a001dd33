//! Convolutions and pooling lowered and planned by real cuDNN without a GPU, for the H200
//! described by `tests/fixtures/h200-devprop.json`: which graphs cuDNN 9.19 plans, and the typed
//! errors of those it does not (recorded in `docs/ops.md`). Ports are declared channels-last
//! (`set_channels_last`), as cuDNN's fused convolution engines want; the builder lays the
//! virtual tensors around a convolution out channels-last itself.
//!
//! Without libcudnn each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_CUDNN=1`.
#![cfg(feature = "cudnn")]

use crate::common;

use common::{deviceless, plan};
use cudnn_runtime::backend::{BackendError, BuildOptions, ExecutionPlan};
use cudnn_runtime::dim::channels_last_strides;
use cudnn_runtime::ops::AttrValue;
use cudnn_runtime::ops::PointwiseMode;
use cudnn_runtime::{DataType, Graph, GraphBuilder, Operand};

use DataType::{BF16, F16, F32};

fn attrs(list: &[(&str, AttrValue)]) -> Vec<(String, AttrValue)> {
    list.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

/// `op(a, b)` (a convolution), optionally followed by `+ bias` and `relu`, in `io` with f32
/// compute, every port declared channels-last.
fn conv(name: &str, op: &str, io: DataType, a: &[i64], b: &[i64], attr: &[(&str, AttrValue)], epilogue: bool) -> Graph {
    let mut g = GraphBuilder::new(name);
    let x = g.input("a", io, a).unwrap();
    let w = g.input("b", io, b).unwrap();
    g.set_channels_last(x).unwrap().set_channels_last(w).unwrap();
    let mut y = g.op(op, &[x.into(), w.into()], &attrs(attr)).unwrap_or_else(|e| panic!("{name}: {e}"))[0];
    if epilogue {
        let k = g.dims(y).unwrap()[1];
        let bias = g.input("bias", io, &[1, k, 1, 1]).unwrap();
        g.set_channels_last(bias).unwrap();
        y = g.pointwise(PointwiseMode::Add, &[y.into(), bias.into()]).unwrap();
        y = g.pointwise(PointwiseMode::Relu, &[Operand::Tensor(y)]).unwrap();
    }
    let y = g.output(y, "y", io).unwrap();
    g.set_channels_last(y).unwrap();
    let graph = g.build().unwrap();
    for t in graph.tensors.iter().filter(|t| t.pass_by_value.is_none()) {
        assert_eq!(t.strides, channels_last_strides(&t.dims), "{name}: tensor `{}` is not channels-last", t.name);
    }
    graph
}

fn list(v: &[i64]) -> AttrValue {
    AttrValue::IntList(v.to_vec())
}

#[needs_cudnn]
#[test]
fn convolutions_plan_for_the_h200() {
    let Some(cudnn) = deviceless() else { return };
    let pad1 = [("padding", list(&[1, 1]))];
    for dt in [F16, BF16] {
        plan(
            &cudnn,
            &conv(&format!("fprop_3x3_{dt}"), "conv_fprop", dt, &[8, 64, 56, 56], &[128, 64, 3, 3], &pad1, false),
        );
        plan(
            &cudnn,
            &conv(&format!("conv_bias_relu_{dt}"), "conv_fprop", dt, &[8, 64, 56, 56], &[128, 64, 3, 3], &pad1, true),
        );
    }
    let strided = [("padding", list(&[1, 1])), ("stride", list(&[2, 2])), ("dilation", list(&[2, 2]))];
    plan(&cudnn, &conv("fprop_strided_dilated", "conv_fprop", F16, &[4, 32, 33, 31], &[64, 32, 3, 3], &strided, false));
    let flipped = [("padding", list(&[2, 1])), ("mode", "convolution".into())];
    plan(
        &cudnn,
        &conv("fprop_convolution_mode", "conv_fprop", F16, &[2, 16, 20, 20], &[32, 16, 5, 3], &flipped, false),
    );
    plan(
        &cudnn,
        &conv(
            "fprop_3d",
            "conv_fprop",
            F16,
            &[2, 16, 8, 16, 16],
            &[32, 16, 3, 3, 3],
            &[("padding", list(&[1, 1, 1]))],
            false,
        ),
    );
    plan(&cudnn, &conv("fprop_f32", "conv_fprop", F32, &[2, 8, 16, 16], &[16, 8, 3, 3], &pad1, false));

    plan(&cudnn, &conv("dgrad_3x3", "conv_dgrad", F16, &[8, 128, 28, 28], &[128, 64, 3, 3], &strided[..2], false));
    let wgrad = [("padding", list(&[1, 1])), ("filter", list(&[3, 3]))];
    plan(&cudnn, &conv("wgrad_3x3", "conv_wgrad", F16, &[8, 64, 28, 28], &[8, 128, 28, 28], &wgrad, false));
}

/// A 1-D convolution: cuDNN 9.19 plans rank-3 tensors directly.
#[needs_cudnn]
#[test]
fn one_dimensional_convolutions_plan() {
    let Some(cudnn) = deviceless() else { return };
    plan(&cudnn, &conv("fprop_1d", "conv_fprop", F16, &[4, 16, 64], &[32, 16, 3], &[("padding", list(&[1]))], false));
}

/// `relu_bwd(conv_dgrad(dy, w), x)`, the data gradient through a ReLU in one fused graph, with
/// its ports declared channels-last or not.
fn dgrad_drelu(channels_last: bool) -> Graph {
    let mut g = GraphBuilder::new(if channels_last { "dgrad_drelu" } else { "dgrad_drelu_nchw" });
    let dy = g.input("dy", F16, &[8, 64, 28, 28]).unwrap();
    let w = g.input("w", F16, &[64, 32, 3, 3]).unwrap();
    let x = g.input("x", F16, &[8, 32, 28, 28]).unwrap();
    let dgrad = g.op("conv_dgrad", &[dy.into(), w.into()], &attrs(&[("padding", list(&[1, 1]))])).unwrap()[0];
    let dx = g.pointwise(PointwiseMode::ReluBwd, &[dgrad.into(), x.into()]).unwrap();
    let dx = g.output(dx, "dx", F16).unwrap();
    if channels_last {
        for port in [dy, w, x, dx] {
            g.set_channels_last(port).unwrap();
        }
    }
    let graph = g.build().unwrap();
    assert_eq!(graph.tensor(dgrad).strides, channels_last_strides(&[8, 32, 28, 28]), "virtual dgrad output");
    graph
}

/// The fused dgrad + dReLU plans with channels-last ports.
#[needs_cudnn]
#[test]
fn dgrad_drelu_plans() {
    let Some(cudnn) = deviceless() else { return };
    plan(&cudnn, &dgrad_drelu(true));
}

/// cuDNN 9.19 has no engine for the fused dgrad + dReLU with row-major (NCHW) ports (nor with
/// its virtual tensors NCHW too), while a lone NCHW convolution plans: the `NoPlan` names every
/// port of the chain that is not channels-last and says to declare it so. cuDNN 9.28 gets
/// further (the partition's convolution plans) and the axis-order rule says the same.
#[needs_cudnn]
#[test]
fn nchw_dgrad_drelu_has_no_plan_and_says_to_declare_channels_last() {
    let Some(cudnn) = deviceless() else { return };
    let graph = dgrad_drelu(false);
    match ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()) {
        Err(e @ BackendError::NoPlan { .. }) => {
            let message = e.to_string();
            let BackendError::NoPlan { not_channels_last, .. } = e else { unreachable!() };
            let named: Vec<(&str, &str)> =
                not_channels_last.iter().map(|p| (p.tensor.as_str(), p.type_string.as_str())).collect();
            assert_eq!(
                named,
                [
                    ("dy", "f16[8, 64, 28, 28] row-major"),
                    ("w", "f16[64, 32, 3, 3] row-major"),
                    ("x", "f16[8, 32, 28, 28] row-major"),
                    ("dx", "f16[8, 32, 28, 28] row-major"),
                ]
            );
            assert!(
                message.contains("hint: cuDNN's fused convolution engines want channels-last (NHWC) ports"),
                "{message}"
            );
            assert!(
                message.contains("`dy` (f16[8, 64, 28, 28] row-major) of node `conv_dgrad_0` (conv_dgrad)"),
                "{message}"
            );
            assert!(message.ends_with("declare them `channels_last` (`GraphBuilder::set_channels_last`)"), "{message}");
        }
        // cuDNN 9.14 and 9.28 plan the convolution alone (its output channels-last), so the
        // partition reaches the elementwise op reading it into the row-major `dx`, which the
        // axis-order rule refuses with the same advice and the same ports.
        Err(e @ BackendError::SupportRule { .. }) => {
            let message = e.to_string();
            assert!(message.contains("breaks cuDNN support rule `pointwise.axis_order`"), "{message}");
            assert!(
                message.contains(
                    "declare the convolution ports of graph `dgrad_drelu_nchw` `channels_last` \
                     (`x: f16[N, C, H, W] channels_last`, `GraphBuilder::set_channels_last`): \
                     `dy` (f16[8, 64, 28, 28] row-major) of node `conv_dgrad_0` (conv_dgrad), \
                     `w` (f16[64, 32, 3, 3] row-major) of node `conv_dgrad_0` (conv_dgrad), \
                     `x` (f16[8, 32, 28, 28] row-major) of node `relu_bwd_1` (relu_bwd), \
                     `dx` (f16[8, 32, 28, 28] row-major) of node `relu_bwd_1` (relu_bwd)"
                ),
                "{message}"
            );
        }
        Ok(p) => panic!("this cuDNN plans NCHW dgrad + dReLU now ({}); update docs/ops.md", p.selected()),
        Err(e) => panic!("neither a NoPlan nor the axis-order rule: {e}"),
    }
    // The same convolution without the fused dReLU plans with NCHW ports.
    let mut g = GraphBuilder::new("dgrad_nchw");
    let dy = g.input("dy", F16, &[8, 64, 28, 28]).unwrap();
    let w = g.input("w", F16, &[64, 32, 3, 3]).unwrap();
    let dx = g.op("conv_dgrad", &[dy.into(), w.into()], &attrs(&[("padding", list(&[1, 1]))])).unwrap()[0];
    g.output(dx, "dx", F16).unwrap();
    let graph = g.build().unwrap();
    assert_eq!(graph.ports_not_channels_last().len(), 3);
    plan(&cudnn, &graph);
}

fn pool(name: &str, dt: DataType, x: &[i64], attr: &[(&str, AttrValue)], outputs: usize) -> Graph {
    let mut g = GraphBuilder::new(name);
    let xi = g.input("x", dt, x).unwrap();
    g.set_channels_last(xi).unwrap();
    let outs = g.op("resample", &[xi.into()], &attrs(attr)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(outs.len(), outputs);
    for (i, o) in outs.into_iter().enumerate() {
        let ty = if i == 0 { dt } else { DataType::I8 };
        let o = g.output(o, &format!("out{i}"), ty).unwrap();
        g.set_channels_last(o).unwrap();
    }
    g.build().unwrap()
}

#[needs_cudnn]
#[test]
fn pooling_plans_for_the_h200() {
    let Some(cudnn) = deviceless() else { return };
    let max = [("mode", AttrValue::from("maxpool")), ("window", list(&[2, 2]))];
    for dt in [F16, BF16] {
        plan(&cudnn, &pool(&format!("maxpool_2x2_{dt}"), dt, &[8, 64, 56, 56], &max, 1));
    }
    let avg = [
        ("mode", AttrValue::from("avgpool_include_padding")),
        ("window", list(&[3, 3])),
        ("stride", list(&[2, 2])),
        ("padding", list(&[1, 1])),
    ];
    plan(&cudnn, &pool("avgpool_include_3x3", F16, &[8, 64, 56, 56], &avg, 1));
    let mut exclude = avg.clone();
    exclude[0].1 = "avgpool_exclude_padding".into();
    plan(&cudnn, &pool("avgpool_exclude_3x3", F16, &[8, 64, 56, 56], &exclude, 1));
    let mut index = max.to_vec();
    index.push(("index", true.into()));
    plan(&cudnn, &pool("maxpool_index", F16, &[8, 64, 56, 56], &index, 2));
}
