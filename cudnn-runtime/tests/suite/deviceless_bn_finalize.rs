//! `bn_finalize` lowered and planned by real cuDNN without a GPU, for the H200 described by
//! `tests/fixtures/h200-devprop.json` (see `deviceless.rs` for the set-up): cuDNN 9.19 plans it
//! standalone (engine 0, the split batch norm's middle graph), refuses its scalars as device
//! tensors and has no engine for it in one graph with the convolution and `genstats` that make
//! its sums (all recorded in `docs/ops.md`).
//!
//! Without libcudnn each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_CUDNN=1`.
#![cfg(feature = "cudnn")]

use cudnn_runtime::backend::{BackendError, BuildOptions, ExecutionPlan};
use cudnn_runtime::ops::AttrValue;
use cudnn_runtime::{DataType, Graph, GraphBuilder, Operand, TensorId};

use crate::common;

use common::{deviceless, no_plan, plan};

use DataType::{F16, F32, I64};

const OUTPUTS: [&str; 6] = ["eq_scale", "eq_bias", "mean", "inv_var", "next_mean", "next_var"];

/// How each scalar port is fed.
#[derive(Clone, Copy)]
enum Scalars {
    /// Numbers: by-value scalars (epsilon and momentum f32, the count i64).
    Numbers,
    /// EPSILON a device tensor.
    EpsilonTensor,
    /// MOMENTUM a device tensor.
    MomentumTensor,
    /// ACCUM_COUNT an i64 device tensor.
    CountTensor,
}

/// `bn_finalize` on `dims` (per channel), every tensor port a graph tensor.
fn standalone(name: &str, dims: &[i64], count: f64, scalars: Scalars) -> Graph {
    let mut g = GraphBuilder::new(name);
    let mut operands: Vec<Operand> = ["sum", "sq_sum", "scale", "bias", "running_mean", "running_var"]
        .iter()
        .map(|n| g.input(n, F32, dims).unwrap().into())
        .collect();
    let ones = vec![1; dims.len()];
    let mut tensor = |name: &str, dt: DataType| Operand::from(g.input(name, dt, &ones).unwrap());
    operands.extend(match scalars {
        Scalars::Numbers => [Operand::Scalar(1e-5), Operand::Scalar(0.1), Operand::Scalar(count)],
        Scalars::EpsilonTensor => [tensor("epsilon", F32), Operand::Scalar(0.1), Operand::Scalar(count)],
        Scalars::MomentumTensor => [Operand::Scalar(1e-5), tensor("momentum", F32), Operand::Scalar(count)],
        Scalars::CountTensor => [Operand::Scalar(1e-5), Operand::Scalar(0.1), tensor("count", I64)],
    });
    let outs = g.op("bn_finalize", &operands, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
    for (o, n) in outs.into_iter().zip(OUTPUTS) {
        g.output(o, n, F32).unwrap();
    }
    g.build().unwrap()
}

/// Plans standalone at ranks 3 to 5 and from 1 to 2048 channels, as cudnn-frontend's
/// "BN Finalize Graph" sample runs it; the count is an i64 by-value scalar, so counts past
/// f32's 2^24 are exact.
#[needs_cudnn]
#[test]
fn bn_finalize_plans_standalone() {
    let Some(cudnn) = deviceless() else { return };
    for (dims, count) in [
        (&[1i64, 32, 1, 1][..], 64.0),
        (&[1, 64, 1][..], 100.0),
        (&[1, 256, 1, 1, 1][..], 1e9),
        (&[1, 1, 1, 1][..], 2.0),
        (&[1, 2048, 1, 1][..], 4096.0),
    ] {
        let g = standalone(&format!("bn_finalize_{dims:?}"), dims, count, Scalars::Numbers);
        let count_scalar = g.tensors.iter().find(|t| t.data_type == I64).expect("an i64 count");
        assert_eq!(count_scalar.pass_by_value, Some(count));
        let p = plan(&cudnn, &g);
        assert_eq!(p.layout().io().len(), 12, "six per-channel inputs, six outputs");
        assert_eq!(p.layout().scalars().len(), 3, "epsilon, momentum, count");
        assert!(p.layout().scalars().iter().any(|s| s.data_type == I64 && s.bytes() == (count as i64).to_ne_bytes()));
    }
}

/// cuDNN 9.19 takes EPSILON, MOMENTUM and ACCUM_COUNT only by value (each fed from a device
/// tensor fails the operation's finalize with a bare `CUDNN_STATUS_BAD_PARAM`, measured), so the
/// lowering refuses a device tensor first with the support rule `bn_finalize.by_value_scalars`,
/// naming the port and the tensor.
#[needs_cudnn]
#[test]
fn scalars_in_device_tensors_break_a_support_rule() {
    let Some(cudnn) = deviceless() else { return };
    for (what, port, scalars) in [
        ("epsilon", "EPSILON", Scalars::EpsilonTensor),
        ("momentum", "MOMENTUM", Scalars::MomentumTensor),
        ("count", "ACCUM_COUNT", Scalars::CountTensor),
    ] {
        let g = standalone(&format!("bn_finalize_{what}_tensor"), &[1, 32, 1, 1], 64.0, scalars);
        match ExecutionPlan::build(&cudnn, &g, &BuildOptions::default()) {
            Err(e @ BackendError::SupportRule { .. }) => {
                println!("{what} as a device tensor: {e}");
                let BackendError::SupportRule { node, rule, message, .. } = e else { unreachable!() };
                assert_eq!((node.as_str(), rule), ("bn_finalize_0", "bn_finalize.by_value_scalars"));
                assert!(message.starts_with(&format!("{port} (tensor `{what}`)")), "{message}");
            }
            Ok(p) => panic!("{what}: planned ({}); the rule should have refused it", p.selected()),
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// cuDNN reads dim 1 as the channel: rank-2 sums, which the backend would pad to `[1, 1, C]`,
/// are refused before cuDNN sees them.
#[needs_cudnn]
#[test]
fn rank_2_is_refused_with_a_reason() {
    let Some(cudnn) = deviceless() else { return };
    let g = standalone("bn_finalize_rank2", &[1, 32], 64.0, Scalars::Numbers);
    match ExecutionPlan::build(&cudnn, &g, &BuildOptions::default()) {
        Err(BackendError::Unsupported { node, op, reason }) => {
            assert_eq!((node.as_str(), op), ("bn_finalize_0", "bn_finalize"));
            assert!(reason.contains("[1, C, 1]"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// A convolution, `genstats` of its output and `bn_finalize` of the sums.
fn conv_genstats_finalize(name: &str, sums_are_outputs: bool) -> Graph {
    let mut g = GraphBuilder::new(name);
    let x = g.input("x", F16, &[8, 64, 16, 16]).unwrap();
    let w = g.input("w", F16, &[32, 64, 3, 3]).unwrap();
    let padding = [("padding".to_string(), AttrValue::IntList(vec![1, 1]))];
    let y = g.op("conv_fprop", &[x.into(), w.into()], &padding).unwrap()[0];
    let mut sums = g.op("genstats", &[y.into()], &[]).unwrap();
    let y = g.output(y, "y", F16).unwrap();
    if sums_are_outputs {
        sums = vec![g.output(sums[0], "sum", F32).unwrap(), g.output(sums[1], "sq_sum", F32).unwrap()];
    }
    let mut operands: Vec<Operand> = sums.iter().map(|&s| s.into()).collect();
    for n in ["scale", "bias", "running_mean", "running_var"] {
        operands.push(g.input(n, F32, &[1, 32, 1, 1]).unwrap().into());
    }
    operands.extend([Operand::Scalar(1e-5), Operand::Scalar(0.1), Operand::Scalar(8.0 * 16.0 * 16.0)]);
    let outs = g.op("bn_finalize", &operands, &[]).unwrap();
    for (o, n) in outs.into_iter().zip(OUTPUTS) {
        g.output(o, n, F32).unwrap();
    }
    let ports: [TensorId; 3] = [x, w, y];
    for p in ports {
        g.set_channels_last(p).unwrap();
    }
    g.build().unwrap()
}

/// In one graph with the convolution and `genstats` that make its sums, cuDNN 9.19 has no
/// engine (sums in memory: a typed `NoPlan`) or refuses the node (virtual sums: `BAD_PARAM` at
/// the operation's finalize): the split batch norm is three graphs.
#[needs_cudnn]
#[test]
fn no_plan_fused_after_genstats() {
    let Some(cudnn) = deviceless() else { return };
    no_plan(&cudnn, &conv_genstats_finalize("conv_genstats_finalize", true));
    // With the sums virtual, one kernel is refused (cuDNN's finalize takes its sums from memory:
    // fused, `cudnnBackendFinalize` of the BN_FINALIZE_STATISTICS operation fails with
    // CUDNN_STATUS_BAD_PARAM), so the fusion rules cut before `bn_finalize`; as two parts the sums
    // pass through the arena and both plan.
    let g = conv_genstats_finalize("conv_genstats_finalize_virtual_sums", false);
    match ExecutionPlan::build(&cudnn, &g, &BuildOptions::default().single_kernel()) {
        Err(BackendError::CannotFuse { cut: Some(cut), .. }) => {
            println!("virtual sums, one kernel: {cut}");
            assert_eq!((cut.before.1, cut.after.1), ("conv_fprop", "bn_finalize"));
        }
        Ok(p) => panic!("this cuDNN fuses it now ({}); update docs/ops.md", p.selected()),
        Err(e) => panic!("{e}"),
    }
    let p = ExecutionPlan::build(&cudnn, &g, &BuildOptions::default()).unwrap();
    let ops: Vec<usize> = p.parts().iter().map(|part| part.nodes().len()).collect();
    assert_eq!(ops, [2, 1], "conv_fprop + genstats, then bn_finalize");
    assert!(p.arena_bytes() > 0);
    for part in p.parts() {
        println!("virtual sums, part: {part}");
    }
}

/// The split batch-norm training step as a user plans it: (1) convolution + `genstats`
/// (channels-last), (2) `bn_finalize` of the sums, (3) `y = relu(eq_scale · conv + eq_bias)`.
/// Every graph plans.
#[needs_cudnn]
#[test]
fn split_batchnorm_training_step_plans_as_three_graphs() {
    let Some(cudnn) = deviceless() else { return };
    let (n, c, k, h, w) = (8i64, 64i64, 32i64, 16i64, 16i64);
    let mut g = GraphBuilder::new("step1_conv_genstats");
    let x = g.input("x", F16, &[n, c, h, w]).unwrap();
    let wt = g.input("w", F16, &[k, c, 3, 3]).unwrap();
    let padding = [("padding".to_string(), AttrValue::IntList(vec![1, 1]))];
    let y = g.op("conv_fprop", &[x.into(), wt.into()], &padding).unwrap()[0];
    let sums = g.op("genstats", &[y.into()], &[]).unwrap();
    let y = g.output(y, "y", F16).unwrap();
    g.output(sums[0], "sum", F32).unwrap();
    g.output(sums[1], "sq_sum", F32).unwrap();
    for p in [x, wt, y] {
        g.set_channels_last(p).unwrap();
    }
    plan(&cudnn, &g.build().unwrap());

    plan(&cudnn, &standalone("step2_bn_finalize", &[1, k, 1, 1], (n * h * w) as f64, Scalars::Numbers));

    let mut g = GraphBuilder::new("step3_apply");
    let y = g.input("y", F16, &[n, k, h, w]).unwrap();
    let eq_scale = g.input("eq_scale", F32, &[1, k, 1, 1]).unwrap();
    let eq_bias = g.input("eq_bias", F32, &[1, k, 1, 1]).unwrap();
    let scaled = g.op("mul", &[y.into(), eq_scale.into()], &[]).unwrap()[0];
    let shifted = g.op("add", &[scaled.into(), eq_bias.into()], &[]).unwrap()[0];
    let out = g.op("relu", &[shifted.into()], &[]).unwrap()[0];
    let out = g.output(out, "out", F16).unwrap();
    for p in [y, out] {
        g.set_channels_last(p).unwrap();
    }
    plan(&cudnn, &g.build().unwrap());
}

/// The same training step as one graph: it plans as three parts (convolution + `genstats`,
/// `bn_finalize`, the `relu(eq_scale · y + eq_bias)` chain), the conv output and the sums passing
/// through the workspace arena, and the parts run on the CPU reference through that memory give
/// the whole graph's result exactly.
#[needs_cudnn]
#[test]
fn batchnorm_training_step_as_one_graph_plans_as_three_parts() {
    let Some(cudnn) = deviceless() else { return };
    let (n, c, k, h, w) = (4i64, 16i64, 16i64, 8i64, 8i64);
    let mut g = GraphBuilder::new("bn_training_step");
    let x = g.input("x", F16, &[n, c, h, w]).unwrap();
    let wt = g.input("w", F16, &[k, c, 3, 3]).unwrap();
    let padding = [("padding".to_string(), AttrValue::IntList(vec![1, 1]))];
    let y = g.op("conv_fprop", &[x.into(), wt.into()], &padding).unwrap()[0];
    let sums = g.op("genstats", &[y.into()], &[]).unwrap();
    let mut operands: Vec<Operand> = sums.iter().map(|&s| s.into()).collect();
    for name in ["scale", "bias", "running_mean", "running_var"] {
        operands.push(g.input(name, F32, &[1, k, 1, 1]).unwrap().into());
    }
    operands.extend([Operand::Scalar(1e-5), Operand::Scalar(0.1), Operand::Scalar((n * h * w) as f64)]);
    let stats = g.op("bn_finalize", &operands, &[]).unwrap();
    let scaled = g.op("mul", &[y.into(), stats[0].into()], &[]).unwrap()[0];
    let shifted = g.op("add", &[scaled.into(), stats[1].into()], &[]).unwrap()[0];
    let out = g.op("relu", &[shifted.into()], &[]).unwrap()[0];
    let out = g.output(out, "out", F16).unwrap();
    for (o, name) in stats.into_iter().zip(OUTPUTS).skip(2) {
        g.output(o, name, F32).unwrap();
    }
    for p in [x, wt, out] {
        g.set_channels_last(p).unwrap();
    }
    let graph = g.build().unwrap();
    let p = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    for part in p.parts() {
        println!("{part}");
    }
    let sizes: Vec<usize> = p.parts().iter().map(|part| part.nodes().len()).collect();
    assert_eq!(sizes, [2, 1, 3], "conv_fprop + genstats | bn_finalize | mul, add, relu");
    let mut inputs = common::inputs(&graph, 7);
    for (id, a) in graph.inputs().iter().zip(&mut inputs) {
        if graph.tensor(*id).name == "running_var" {
            a.data.iter_mut().for_each(|v| *v = v.abs());
        }
    }
    let want = common::reference(&graph, &inputs);
    let got = p.emulate(&inputs).unwrap();
    assert_eq!(got, want);
}
