//! Layout ops lowered by real cuDNN 9.19 without a GPU, for the H200. Reshape and transpose: the
//! reshape operation finalizes, but heuristics propose no engine for it alone, after a matmul's
//! epilogue or feeding a matmul (a typed `NoPlan`, recorded in `docs/ops.md`; cuDNN 9.22 adds
//! dedicated transpose and slice operations). A test here fails the day cuDNN plans one. Slices,
//! and transposes of graph inputs read by matmuls, plan as pointer bindings; a view that is a
//! graph output, packed as every port, as a pointwise identity copy where the copy keeps one axis
//! order; a concatenation plans in the one form cuDNN 9.19 computes correctly.
//!
//! Without libcudnn each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_CUDNN=1`.
#![cfg(feature = "cudnn")]

use crate::common;

use common::{deviceless, emulated_error, no_plan};
use cudnn_runtime::backend::{BackendError, BuildOptions, ExecutionPlan};
use cudnn_runtime::ops::{AttrValue, PointwiseMode};
use cudnn_runtime::{DataType, GraphBuilder, Operand};

fn ints(name: &str, v: &[i64]) -> Vec<(String, AttrValue)> {
    vec![(name.to_string(), AttrValue::IntList(v.to_vec()))]
}

#[needs_cudnn]
#[test]
fn cudnn_9_19_has_no_engine_for_layout_ops() {
    let Some(cudnn) = deviceless() else { return };
    use DataType::F16;

    // matmul(a, transpose(b)) with B computed (relu(b), stored [N, K], viewed as [K, N]): the
    // reshape operation before the matmul. (With B a graph input the view is B bound column-major,
    // no operation: `transposes_of_graph_inputs_read_by_matmuls_are_bindings`.)
    let mut g = GraphBuilder::new("matmul_transposed_b");
    let a = g.input("a", F16, &[1, 64, 32]).unwrap();
    let b = g.input("b", F16, &[1, 48, 32]).unwrap();
    let b = g.pointwise(PointwiseMode::Relu, &[Operand::Tensor(b)]).unwrap();
    let bt = g.op("transpose", &[b.into()], &ints("permutation", &[0, 2, 1])).unwrap()[0];
    let c = g.matmul(a, bt).unwrap();
    g.output(c, "c", F16).unwrap();
    let graph = g.build().unwrap();
    let bt_strides = &graph.tensors[bt.0].strides;
    assert_eq!(bt_strides, &vec![48 * 32, 1, 32], "a transpose is a view: its strides are B's, permuted");
    // Planned whole it has no engine; the partitioner makes the view an alias between parts.
    no_plan(&cudnn, &graph);

    // relu(matmul) reshaped, [1, 64, 48] -> [1, 3072, 1], and scaled in the same kernel (a
    // reshape that is itself the output is a copy instead: `a_view_output_port_is_packed..`).
    let mut g = GraphBuilder::new("matmul_relu_reshape");
    let a = g.input("a", F16, &[1, 64, 32]).unwrap();
    let b = g.input("b", F16, &[1, 32, 48]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let r = g.pointwise(PointwiseMode::Relu, &[Operand::Tensor(c)]).unwrap();
    let reshaped = g.op("reshape", &[r.into()], &ints("shape", &[1, 3072, 1])).unwrap()[0];
    let y = g.op("mul", &[reshaped.into(), 0.5.into()], &[]).unwrap()[0];
    g.output(y, "y", DataType::F32).unwrap();
    no_plan(&cudnn, &g.build().unwrap());
    // A lone transpose is a copy into its packed output port:
    // `a_view_output_port_is_packed_and_copied_by_an_identity`.
}

/// A transpose of a graph input read only by matmuls is no operation: the view (B's strides,
/// permuted) bound to B's address, which cuDNN's matmul reads column-major. The reshape operation
/// in its place got no engine (`matmul(a, transpose(b))` was a `NoPlan`).
#[needs_cudnn]
#[test]
fn transposes_of_graph_inputs_read_by_matmuls_are_bindings() {
    let Some(cudnn) = deviceless() else { return };
    use DataType::F16;
    let mut g = GraphBuilder::new("matmul_transposed_input");
    let a = g.input("a", F16, &[1, 64, 32]).unwrap();
    let b = g.input("b", F16, &[1, 48, 32]).unwrap();
    let bt = g.op("transpose", &[b.into()], &ints("permutation", &[0, 2, 1])).unwrap()[0];
    let c = g.matmul(a, bt).unwrap();
    g.output(c, "c", F16).unwrap();
    let graph = g.build().unwrap();
    let plan = common::plan(&cudnn, &graph);
    assert_eq!(plan.parts().len(), 1);
    let layout = plan.layout();
    assert_eq!(layout.io_positions()[1], None, "b is bound only through the view");
    assert_eq!(layout.views().iter().map(|v| (v.1, v.2)).collect::<Vec<_>>(), [(1, 0)]);
    assert_eq!(emulated_error(&plan, 7), 0.0);

    // A dense layer's backward in f32: dh = relu_bwd(d_y, h); d_x = dh · wᵀ; d_w = xᵀ · dh.
    let mut g = GraphBuilder::new("dense_backward");
    let d_y = g.input("d_y", DataType::F32, &[1, 128, 512]).unwrap();
    let h = g.input("h", DataType::F32, &[1, 128, 512]).unwrap();
    let x = g.input("x", DataType::F32, &[1, 128, 256]).unwrap();
    let w = g.input("w", DataType::F32, &[1, 256, 512]).unwrap();
    let dh = g.pointwise(PointwiseMode::ReluBwd, &[Operand::Tensor(d_y), Operand::Tensor(h)]).unwrap();
    let wt = g.op("transpose", &[w.into()], &ints("permutation", &[0, 2, 1])).unwrap()[0];
    let xt = g.op("transpose", &[x.into()], &ints("permutation", &[0, 2, 1])).unwrap()[0];
    let d_x = g.matmul(dh, wt).unwrap();
    let d_w = g.matmul(xt, dh).unwrap();
    g.output(d_x, "d_x", DataType::F32).unwrap();
    g.output(d_w, "d_w", DataType::F32).unwrap();
    let graph = g.build().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let parts: Vec<Vec<&str>> =
        plan.parts().iter().map(|p| p.graph().nodes.iter().map(|n| n.op.call_name()).collect()).collect();
    println!("dense_backward parts: {parts:?}");
    let error = emulated_error(&plan, 7);
    println!("dense_backward emulated error {error:e}");
    assert!(error < 1e-9, "{error}");
}

/// A slice of a graph input lowers as cudnn-frontend does before cuDNN 9.22: no operation, the
/// sliced tensor bound to the input's address plus an offset. cuDNN plans the op it feeds.
#[needs_cudnn]
#[test]
fn slices_of_graph_inputs_plan_as_pointer_offsets() {
    let Some(cudnn) = deviceless() else { return };
    use DataType::F16;
    let mut g = GraphBuilder::new("slice_matmul");
    let a = g.input("a", F16, &[4, 64, 32]).unwrap();
    let b = g.input("b", F16, &[1, 32, 48]).unwrap();
    let attrs = [
        ("start".to_string(), AttrValue::IntList(vec![1, 8, 0])),
        ("limit".to_string(), AttrValue::IntList(vec![3, 40, 32])),
    ];
    let s = g.op("slice", &[a.into()], &attrs).unwrap()[0];
    let c = g.matmul(s, b).unwrap();
    g.output(c, "c", F16).unwrap();
    let graph = g.build().unwrap();
    let plan = common::plan(&cudnn, &graph);
    let layout = plan.layout();
    // `a` is read only through the slice: it is not in the pack; the slice is, at a's address
    // plus (1·2048 + 8·32) elements of 2 bytes.
    assert_eq!(layout.io_positions()[0], None);
    assert_eq!(layout.views().len(), 1);
    assert_eq!(layout.views()[0].1, 0);
    assert_eq!(layout.views()[0].2, (2048 + 8 * 32) * 2);
}

/// Declares `ports` channels-last, as cuDNN's fused convolution engines want them.
fn channels_last(g: &mut GraphBuilder, ports: &[cudnn_runtime::TensorId]) {
    for &port in ports {
        g.set_channels_last(port).unwrap();
    }
}

/// The one concatenation cuDNN 9.19 computes correctly (measured on the H200 by
/// `tests/gpu_suite/gpu_ops_layout.rs`): a `conv_fprop`'s virtual output first, then a graph input already
/// in place (cudnn-frontend's "Convolution fprop concatenate" sample). It lowers to one
/// `CUDNN_BACKEND_OPERATION_CONCAT_DESCRIPTOR` and plans. Every other form breaks the typed
/// support rule `concat.fused_in_place` before cuDNN sees it: cuDNN would accept them and write
/// a wrong result (or, for a pointwise op between the two, crash while building).
#[needs_cudnn]
#[test]
fn concatenations() {
    let Some(cudnn) = deviceless() else { return };
    use DataType::F16;
    let axis = |a: i64| ("axis".to_string(), AttrValue::Int(a));
    let in_place = |i: i64| ("in_place_index".to_string(), AttrValue::Int(i));
    let conv = [
        ("pre_padding".to_string(), AttrValue::IntList(vec![0, 0])),
        ("post_padding".to_string(), AttrValue::IntList(vec![0, 0])),
        ("stride".to_string(), AttrValue::IntList(vec![1, 1])),
    ];

    // NHWC conv [16, 128, 64, 64] * [256, 128, 1, 1], concatenated along C with `y0` in place.
    let mut g = GraphBuilder::new("conv_concat");
    let x = g.input("x", F16, &[16, 128, 64, 64]).unwrap();
    let w = g.input("w", F16, &[256, 128, 1, 1]).unwrap();
    let c = g.op("conv_fprop", &[x.into(), w.into()], &conv).unwrap()[0];
    let y0 = g.input("y0", F16, &[16, 256, 64, 64]).unwrap();
    let y = g.op("concatenate", &[c.into(), y0.into()], &[axis(1), in_place(1)]).unwrap()[0];
    let y = g.output(y, "y", F16).unwrap();
    channels_last(&mut g, &[x, w, y0, y]);
    let graph = g.build().unwrap();
    let nhwc = |c: i64| vec![c * 64 * 64, 1, 64 * c, c];
    assert_eq!(graph.tensors[c.0].strides, nhwc(256), "the conv's virtual output is channels-last");
    assert_eq!(graph.tensors[y0.0].strides, nhwc(256), "y0 as declared");
    assert_eq!(graph.tensors[y.0].dims, vec![16, 512, 64, 64]);
    assert_eq!(graph.tensors[y.0].strides, nhwc(512));
    common::plan(&cudnn, &graph);

    // The forms that break the rule, each with the cause the error names.
    let broken = |name: &str, build: &dyn Fn(&mut GraphBuilder), cause: &str| {
        let mut g = GraphBuilder::new(name);
        build(&mut g);
        let graph = g.build().unwrap();
        match ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()) {
            Err(e @ BackendError::SupportRule { rule: "concat.fused_in_place", .. }) => {
                let text = e.to_string();
                assert!(text.contains(cause), "{name}: {text}");
                println!("{name}: {text}");
            }
            other => {
                panic!("{name}: not the concat.fused_in_place rule: {:?}", other.map(|p| p.selected().to_string()))
            }
        }
    };
    let conv_then = |g: &mut GraphBuilder, y0_first: bool, attrs: &[(String, AttrValue)]| {
        let x = g.input("x", F16, &[2, 16, 8, 8]).unwrap();
        let w = g.input("w", F16, &[32, 16, 1, 1]).unwrap();
        let c = g.op("conv_fprop", &[x.into(), w.into()], &conv).unwrap()[0];
        let y0 = g.input("y0", F16, &[2, 32, 8, 8]).unwrap();
        let ins = if y0_first { [y0.into(), c.into()] } else { [c.into(), y0.into()] };
        let y = g.op("concatenate", &ins, attrs).unwrap()[0];
        let y = g.output(y, "y", F16).unwrap();
        channels_last(g, &[x, w, y0, y]);
        c
    };
    broken(
        "concat_alone",
        &|g| {
            let a = g.input("a", F16, &[2, 8, 16]).unwrap();
            let b = g.input("b", F16, &[2, 24, 16]).unwrap();
            let y = g.op("concatenate", &[a.into(), b.into()], &[axis(1), in_place(1)]).unwrap()[0];
            g.output(y, "y", F16).unwrap();
        },
        "input X[0] (`a`) is a graph input",
    );
    broken(
        "conv_concat_copy",
        &|g| {
            conv_then(g, false, &[axis(1)]);
        },
        "it has 2 inputs and no in-place index",
    );
    broken(
        "y0_in_place_first",
        &|g| {
            conv_then(g, true, &[axis(1), in_place(0)]);
        },
        "in_place_index = 0",
    );
    broken(
        "conv_output_too",
        &|g| {
            let c = conv_then(g, false, &[axis(1), in_place(1)]);
            g.output(c, "yc", F16).unwrap();
        },
        "is a graph output as well",
    );
    broken(
        "conv_relu_concat",
        &|g| {
            let x = g.input("x", F16, &[2, 16, 8, 8]).unwrap();
            let w = g.input("w", F16, &[32, 16, 1, 1]).unwrap();
            let c = g.op("conv_fprop", &[x.into(), w.into()], &conv).unwrap()[0];
            let r = g.op("relu", &[c.into()], &[]).unwrap()[0];
            let y0 = g.input("y0", F16, &[2, 32, 8, 8]).unwrap();
            let y = g.op("concatenate", &[r.into(), y0.into()], &[axis(1), in_place(1)]).unwrap()[0];
            let y = g.output(y, "y", F16).unwrap();
            channels_last(g, &[x, w, y0, y]);
        },
        "is computed by a relu, not a conv_fprop",
    );
}

/// A view whose output is a graph output: the port is packed like every other (the builder gives
/// it no view strides), so delivering it is a copy, and cuDNN 9.19 has no operation that copies
/// a view (no slice operation, no engine for a reshape or transpose). The lowering copies it
/// with a pointwise identity from the view bound by pointer into X's memory (as a slice is
/// bound): alone, one kernel reading the input at the view's offset; after a computing op, two
/// parts, X written to the arena by the first. A transposing copy into the packed port is refused
/// by support rule `pointwise.axis_order` (cuDNN 9.19 planned the rotation of `[8, 16, 32]` and
/// computed it wrongly on the H200), and after a relu the whole graph's `Unsupported` names the
/// transpose. Each plan run through its memory on the CPU equals the reference;
/// `tests/gpu_suite/gpu_ops_layout.rs` checks them on the H200.
#[needs_cudnn]
#[test]
fn a_view_output_port_is_packed_and_copied_by_an_identity() {
    let Some(cudnn) = deviceless() else { return };
    use DataType::{F16, F32};
    let slice = [
        ("start".to_string(), AttrValue::IntList(vec![0, 0, 16])),
        ("limit".to_string(), AttrValue::IntList(vec![2, 64, 48])),
    ];
    let transpose = ints("permutation", &[0, 2, 1]);
    let reshape = ints("shape", &[2, 32, 128]);
    // (graph, op, attrs, X's dims, what X is: 0 an input, 1 a relu of it, 2 a matmul of it, the
    // output's dims, how many parts plan (0: none does))
    let cases = [
        ("slice_alone", "slice", slice.to_vec(), [2, 64, 64], 0, [2, 64, 32], 1),
        ("reshape_alone", "reshape", reshape.clone(), [2, 64, 64], 0, [2, 32, 128], 1),
        ("rotation_alone", "transpose", ints("permutation", &[2, 0, 1]), [8, 16, 32], 0, [32, 8, 16], 0),
        ("slice_of_relu", "slice", slice.to_vec(), [2, 64, 64], 1, [2, 64, 32], 2),
        ("slice_of_matmul", "slice", slice.to_vec(), [2, 64, 64], 2, [2, 64, 32], 2),
        ("reshape_of_matmul", "reshape", reshape, [2, 64, 64], 2, [2, 32, 128], 2),
        ("transpose_alone", "transpose", transpose.clone(), [2, 64, 64], 0, [2, 64, 64], 0),
        ("transpose_of_relu", "transpose", transpose, [2, 64, 64], 1, [2, 64, 64], 0),
    ];
    for (name, op, attrs, x_dims, x_is, y_dims, parts) in cases {
        let mut g = GraphBuilder::new(name);
        let x = g.input("x", F16, &x_dims).unwrap();
        let x = match x_is {
            0 => x,
            1 => g.op("relu", &[x.into()], &[]).unwrap()[0],
            _ => {
                let w = g.input("w", F16, &[1, 64, 64]).unwrap();
                g.matmul(x, w).unwrap()
            }
        };
        let y = g.op(op, &[x.into()], &attrs).unwrap()[0];
        // A view keeps its input's type: a computed X is the f32 intermediate.
        let y = g.output(y, "y", if x_is == 0 { F16 } else { F32 }).unwrap();
        let graph = g.build().unwrap();
        let port = graph.tensor(y);
        assert_eq!(port.dims, y_dims, "{name}");
        assert_eq!(port.strides, cudnn_runtime::dim::packed_strides(&y_dims), "{name}: the port is packed");
        assert_eq!(port.storage_len() as i64, y_dims.iter().product::<i64>(), "{name}");
        match ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()) {
            Ok(plan) => {
                assert_eq!(plan.parts().len(), parts, "{name}");
                if parts == 1 {
                    // Its JSON reloads onto the lowering (the view tensor and the copy included).
                    common::plan(&cudnn, &graph);
                    // X is bound only through the view, at the slice's 16 elements of 2 bytes.
                    let layout = plan.layout();
                    assert_eq!(layout.io_positions()[0], None, "{name}");
                    let offset = if op == "slice" { 32 } else { 0 };
                    assert_eq!(layout.views().iter().map(|v| (v.1, v.2)).collect::<Vec<_>>(), [(0, offset)], "{name}");
                }
                let error = emulated_error(&plan, 7);
                println!("{name}: {} parts, emulated error {error:e}", plan.parts().len());
                assert_eq!(error, 0.0, "{name}");
            }
            Err(e) => {
                println!("{name}: {e}");
                assert_eq!(parts, 0, "{name}: {e}");
                // Alone or after the relu's part, the copy reads the transposed view into the
                // packed port: refused by name, with both strides.
                let want = if x_is == 0 { "transpose_0" } else { "transpose_1" };
                assert!(
                    matches!(&e, BackendError::SupportRule { rule: "pointwise.axis_order", node, .. } if node == want),
                    "{name}: {e:?}"
                );
            }
        }
    }
}
