//! On the GPU: slices of graph inputs, lowered as cudnn-frontend does before cuDNN 9.22 (no
//! operation; the sliced tensor bound to the input's address plus an offset), feeding a matmul and
//! a pointwise op, compared with the CPU reference.
//!
//! Without a GPU each test prints why and passes, unless `CUDNN_GRAPH_REQUIRE_GPU=1`.

#![cfg(feature = "cudnn")]

mod common;

use common::{check, poisoned, uniform, upload, workspace};
use cudnn_graph::backend::BuildOptions;
use cudnn_graph::graph;
use half::f16;

graph! {
    /// Rows 8..40 of batches 1..3 of `a`, times `b`.
    pub SliceMatmul(a: f16[4, 64, 32], b: f16[1, 32, 48]) -> (c: f16[2, 32, 48]) {
        c = matmul(slice(a, start = [1, 8, 0], limit = [3, 40, 32]), b);
    }

    /// Every other row of `x` from row 2, through a ReLU.
    pub SliceRelu(x: f16[2, 64, 64]) -> (y: f16[2, 31, 64]) {
        y = relu(slice(x, start = [0, 2, 0], limit = [2, 64, 64], step = [1, 2, 1]));
    }
}

#[test]
fn gpu_slices_by_pointer_offset() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let a = uniform::<f16>(1, 4 * 64 * 32, -1.0, 1.0);
    let b = uniform::<f16>(2, 32 * 48, -1.0, 1.0);
    let g = SliceMatmul::new();
    let want = g.reference(SliceMatmulInputs { a: &a, b: &b }).unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let (a_d, b_d) = (upload(&stream, &a), upload(&stream, &b));
    let mut c_d = poisoned::<f16>(&stream, want.c.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, SliceMatmulArgs { a: &a_d, b: &b_d, c: &mut c_d }, Some(&mut ws)).unwrap();
    let case = format!("slice [1:3, 8:40, :] + matmul f16, engine {}", plan.plan().selected().tag());
    check(&case, "c", &stream.clone_dtoh(&c_d).unwrap(), &want.c);

    let x = uniform::<f16>(3, 2 * 64 * 64, -1.0, 1.0);
    let g = SliceRelu::new();
    let want = g.reference(SliceReluInputs { x: &x }).unwrap();
    match g.build(&cudnn, &BuildOptions::default()) {
        Ok(plan) => {
            let x_d = upload(&stream, &x);
            let mut y_d = poisoned::<f16>(&stream, want.y.len());
            let mut ws = workspace(&stream, plan.workspace_size());
            plan.execute(&cudnn, SliceReluArgs { x: &x_d, y: &mut y_d }, Some(&mut ws)).unwrap();
            let case = format!("slice step 2 + relu f16, engine {}", plan.plan().selected().tag());
            check(&case, "y", &stream.clone_dtoh(&y_d).unwrap(), &want.y);
        }
        Err(e) => println!("slice step 2 + relu: not planned by cuDNN {}: {e}", cudnn.version()),
    }
}
