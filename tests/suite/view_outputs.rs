//! A view whose output is a graph output (`y = slice(x, ..)`) is delivered like every port: in
//! its declared layout (packed row-major here), exactly as many elements as its shape holds,
//! whatever op produced it. A `[2, 3]` slice of a `[2, 4]` input once came back as a 7-element
//! buffer with a gap (the view's row stride of 4). Checked on the CPU reference through
//! `graph!`, in the buffer lengths the typed API checks, and in the built graph's strides;
//! deviceless, the plans of the graphs `tests/gpu_suite/gpu_ops_layout.rs` runs on the H200.

use crate::common;

use cudnn_graph::graph;

graph! {
    /// Columns 1..4 of `x`.
    pub SliceOut(x: f32[2, 4]) -> (y: f32[2, 3]) {
        y = slice(x, start = [0, 1], limit = [2, 4]);
    }

    /// `x` transposed.
    pub TransposeOut(x: f32[2, 4]) -> (y: f32[4, 2]) {
        y = transpose(x, permutation = [1, 0]);
    }

    /// `x` transposed, delivered in the transposed order's memory as declared.
    pub TransposeOutOrdered(x: f32[2, 4]) -> (y: f32[4, 2] order [1, 0]) {
        y = transpose(x, permutation = [1, 0]);
    }

    /// Rows 1..3 of every batch of `x`, merged: a reshape of a strided view.
    pub ReshapeOfSliceOut(x: f32[2, 4, 3]) -> (y: f32[2, 6]) {
        y = reshape(slice(x, start = [0, 1, 0], limit = [2, 3, 3]), shape = [2, 6]);
    }

    /// `tests/gpu_suite/gpu_ops_layout.rs`'s rotation, as the output.
    pub RotateOut(x: f16[8, 16, 32]) -> (y: f16[32, 8, 16]) {
        y = transpose(x, permutation = [2, 0, 1]);
    }

    /// The rotation delivered in `x`'s memory order, as declared.
    pub RotateOutOrdered(x: f16[8, 16, 32]) -> (y: f16[32, 8, 16] order [1, 2, 0]) {
        y = transpose(x, permutation = [2, 0, 1]);
    }

    /// A weight gradient: `xᵀ · dh`, the transpose of a graph input read by a matmul.
    pub TransposeMatmul(x: f32[1, 128, 256], dh: f32[1, 128, 512]) -> (d_w: f32[1, 256, 512]) {
        d_w = matmul(transpose(x, permutation = [0, 2, 1]), dh);
    }

    /// `tests/gpu_suite/gpu_ops_layout.rs`'s slice of a matmul, as the output.
    #[intermediate(f16)]
    pub MatmulSliceOut(a: f16[2, 64, 64], b: f16[1, 64, 64]) -> (y: f16[2, 64, 32]) {
        y = slice(matmul(a, b), start = [0, 0, 16], limit = [2, 64, 48]);
    }

    /// A slice that is an output and read again.
    pub SliceOutRead(x: f32[2, 4]) -> (y: f32[2, 3], z: f32[2, 3]) {
        y = slice(x, start = [0, 1], limit = [2, 4]);
        z = mul(y, 2.0);
    }
}

fn iota(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 + 1.0).collect()
}

#[test]
fn a_slice_output_is_packed() {
    let x = iota(8);
    let out = SliceOut::new().reference(SliceOutInputs { x: &x }).unwrap();
    assert_eq!(out.y, vec![2.0, 3.0, 4.0, 6.0, 7.0, 8.0]);
    let graph = SliceOut::new().graph().unwrap();
    let y = graph.outputs()[0];
    assert_eq!(graph.tensor(y).strides, vec![3, 1]);
    assert_eq!(graph.tensor(y).storage_len(), 6);
}

#[test]
fn a_transpose_output_is_row_major_unless_declared_otherwise() {
    let x = iota(8);
    // Row-major [4, 2]: y[i][j] = x[j][i].
    let out = TransposeOut::new().reference(TransposeOutInputs { x: &x }).unwrap();
    assert_eq!(out.y, vec![1.0, 5.0, 2.0, 6.0, 3.0, 7.0, 4.0, 8.0]);
    let graph = TransposeOut::new().graph().unwrap();
    assert_eq!(graph.tensor(graph.outputs()[0]).strides, vec![2, 1]);
    // Declared `order [1, 0]`: the port's memory is x's, as declared.
    let out = TransposeOutOrdered::new().reference(TransposeOutOrderedInputs { x: &x }).unwrap();
    assert_eq!(out.y, x);
    let graph = TransposeOutOrdered::new().graph().unwrap();
    assert_eq!(graph.tensor(graph.outputs()[0]).strides, vec![1, 4]);
}

#[test]
fn a_reshape_of_a_slice_output_is_packed() {
    let x = iota(24);
    let out = ReshapeOfSliceOut::new().reference(ReshapeOfSliceOutInputs { x: &x }).unwrap();
    // Batch b, rows 1..3: elements 12·b + 3 .. 12·b + 9 (values one more).
    let want: Vec<f32> =
        [3.0, 15.0].iter().flat_map(|&from: &f32| (0..6).map(move |i| from + 1.0 + i as f32)).collect();
    assert_eq!(out.y, want);
}

#[test]
fn a_slice_output_read_again_is_packed_and_its_reader_sees_the_values() {
    let x = iota(8);
    let out = SliceOutRead::new().reference(SliceOutReadInputs { x: &x }).unwrap();
    assert_eq!(out.y, vec![2.0, 3.0, 4.0, 6.0, 7.0, 8.0]);
    assert_eq!(out.z, vec![4.0, 6.0, 8.0, 12.0, 14.0, 16.0]);
}

/// What `tests/gpu_suite/gpu_ops_layout.rs` runs, planned by deviceless cuDNN 9.19 for the H200: the
/// rotation into a packed port and into a port declared in `x`'s order refused by rule
/// `pointwise.axis_order` (both copies cuDNN computed wrongly on the H200), the transpose of an
/// input read by a matmul as no operation (the matmul reads `x` column-major),
/// the slice of a matmul as two parts (the matmul's product in the arena, then the copy), with
/// outputs of their exact element counts, and the two-part plan run through its memory equal to
/// the reference.
#[cfg(feature = "cudnn")]
#[needs_cudnn]
#[test]
fn deviceless_plans_of_view_outputs_copy_into_packed_ports() {
    use cudnn_graph::backend::{BackendError, BuildOptions, ExecutionPlan};
    use cudnn_graph::reference::{run_arrays, Array};
    let Some(cudnn) = common::deviceless() else { return };
    for graph in [RotateOut::new().graph().unwrap(), RotateOutOrdered::new().graph().unwrap()] {
        match ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()) {
            Err(BackendError::SupportRule { rule, node, message, .. }) => {
                assert_eq!((rule, node.as_str()), ("pointwise.axis_order", "y"));
                assert!(message.contains("the view of `x`") && message.contains("matmul"), "{message}");
            }
            other => panic!("{}: the rotation's copy must be refused by name, got {other:?}", graph.name),
        }
    }
    let y = RotateOutOrdered::new().graph().unwrap();
    let y = y.tensor(y.outputs()[0]);
    assert_eq!((y.strides.clone(), y.storage_len()), (vec![1, 512, 32], 32 * 8 * 16), "the declared order");

    let graph = TransposeMatmul::new().graph().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    assert_eq!(plan.parts().len(), 1);
    assert_eq!(plan.layout().io_positions()[0], None, "x is bound only through the view");

    let graph = MatmulSliceOut::new().graph().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let ops: Vec<Vec<&str>> =
        plan.parts().iter().map(|p| p.graph().nodes.iter().map(|n| n.op.call_name()).collect()).collect();
    assert_eq!(ops, [vec!["matmul"], vec!["slice"]]);
    let y = graph.tensor(graph.outputs()[0]);
    assert_eq!((y.strides.clone(), y.storage_len()), (vec![2048, 32, 1], 2 * 64 * 32));
    let inputs: Vec<Array> = graph
        .inputs()
        .iter()
        .zip([1u64, 2])
        .map(|(id, seed)| {
            let t = graph.tensor(*id);
            let values: Vec<f64> = common::random(seed, t.element_count() as usize);
            let mut a = Array { dims: t.dims.clone(), data: values };
            a.round_to(t.data_type);
            a
        })
        .collect();
    let mut values = vec![None; graph.tensors.len()];
    for (id, a) in graph.inputs().iter().zip(&inputs) {
        values[id.0] = Some(a.clone());
    }
    let want = run_arrays(&graph, values).unwrap();
    let got = plan.emulate(&inputs).unwrap();
    assert_eq!(got[0].data.len(), 2 * 64 * 32);
    assert_eq!(got[0].data, want[0].data);
}
