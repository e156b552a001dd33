//! Reductions as users write them (issue 36), on the GPU against the CPU reference: softmax and
//! cross-entropy over the last axis of `f32[N, V]` logits with a one-hot target, log-softmax, a
//! lone row max (f32, and bf16 into bf16), bias gradients over rows (`[N, H]` over axis 0 in f32 and bf16, `[B, T, H]` over
//! axis 1), and the mean and variance of rows. Each had no plan with cuDNN 9.19 ("heuristics
//! proposed no engine configuration"); each now plans (`backend::reduction_layout`'s channel
//! reduction, `ir::mean_as_sum`, `ir::column_sum_as_matmul`; `docs/ops.md`, "Reductions: what
//! cuDNN plans").
//!
//! `the_users_graphs_plan_deviceless` builds every graph deviceless for the H200 (it runs here);
//! `the_users_graphs_match_the_reference_on_the_gpu` executes them, outputs filled with NaN
//! first, and checks every element within cudnn-frontend's tolerance for f32 outputs
//! (`|got − want| ≤ 1e-3 + 1e-3·|want|`, its batch-norm tests), printing each output's largest
//! relative error and each plan's parts, and times the softmax, the row max and the bf16 bias
//! gradient (µs per execute and GB/s of the least traffic each needs).
//!
//! Without a GPU the GPU test prints why and passes, unless `CUDNN_GRAPH_REQUIRE_GPU=1`.

#![cfg(feature = "cudnn")]

use crate::common;

use common::{deviceless, poisoned, uniform, upload, workspace};
use cudnn_graph::backend::support::{known_bad, Condition};
use cudnn_graph::backend::{BackendError, BuildOptions};
use cudnn_graph::graph;
use half::bf16;

graph! {
    /// The user's report: softmax and cross-entropy over the last axis of f32 logits with a
    /// one-hot target.
    pub SoftmaxXent(logits: f32[256, 32000], onehot: f32[256, 32000]) -> (p: f32[256, 32000], loss: f32[256, 1]) {
        let m = reduce_max(logits, dims = [-1]);
        let e = exp(sub(logits, m));
        let s = reduce_sum(e, dims = [-1]);
        p = div(e, s);
        loss = sub(add(log(s), m), reduce_sum(mul(onehot, logits), dims = [-1]));
    }

    /// `x − max − log Σ exp(x − max)` over the last axis.
    pub LogSoftmax(x: f32[1024, 1000]) -> (y: f32[1024, 1000]) {
        let d = sub(x, reduce_max(x, dims = [-1]));
        y = sub(d, log(reduce_sum(exp(d), dims = [-1])));
    }

    /// A lone `reduce_max` over the last axis.
    pub RowMax(x: f32[4096, 1000]) -> (m: f32[4096, 1]) {
        m = reduce_max(x, dims = [-1]);
    }

    /// The same of bf16 into bf16: cuDNN reduces into f32, an identity rounds
    /// (`ir::narrow_reductions_through_f32`).
    pub RowMaxBf16(x: bf16[4096, 1000]) -> (m: bf16[4096, 1]) {
        m = reduce_max(x, dims = [-1]);
    }

    /// A bias gradient over the rows of a matrix.
    pub BiasGrad2d(dh: f32[4096, 1024]) -> (db: f32[1, 1024]) {
        db = reduce_sum(dh, dims = [0]);
    }

    /// The same of bf16 gradients, summed in f32.
    pub BiasGrad2dBf16(dh: bf16[4096, 1024]) -> (db: f32[1, 1024]) {
        db = reduce_sum(dh, dims = [0]);
    }

    /// A bias gradient per batch over rows.
    pub BiasGrad3d(dh: bf16[4, 1024, 768]) -> (db: f32[4, 1, 768]) {
        db = reduce_sum(dh, dims = [1]);
    }

    /// Mean and (biased) variance of each row.
    pub MeanVar(x: f32[2048, 768]) -> (mean: f32[2048, 1], var: f32[2048, 1]) {
        mean = reduce_mean(x, dims = [-1]);
        let c = sub(x, mean);
        var = reduce_mean(mul(c, c), dims = [-1]);
    }
}

/// cudnn-frontend's tolerance for f32 outputs `(atol, rtol)`: its batch-norm tests
/// (`test/python/test_batchnorm.py`).
const F32_TOLERANCE: (f64, f64) = (1e-3, 1e-3);

/// Asserts every element within [`F32_TOLERANCE`]; prints the largest relative error.
fn check(case: &str, output: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{case}: {output}");
    let (atol, rtol) = F32_TOLERANCE;
    let scale = want.iter().fold(f64::MIN_POSITIVE, |m, v| m.max(f64::from(v.abs())));
    let mut worst: f64 = 0.0;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (f64::from(g), f64::from(w));
        assert!((g - w).abs() <= atol + rtol * w.abs(), "{case}: {output}[{i}] = {g}, reference {w}");
        worst = worst.max((g - w).abs() / scale);
    }
    println!("{case}: {output} relative error {worst:.3e} ({} values)", got.len());
}

/// A one-hot `[n, v]` target: row `r`'s class from a fixed-seed draw.
fn one_hot(n: usize, v: usize) -> Vec<f32> {
    let classes = uniform::<f32>(99, n, 0.0, v as f64);
    let mut out = vec![0.0; n * v];
    for (r, c) in classes.iter().enumerate() {
        out[r * v + (*c as usize).min(v - 1)] = 1.0;
    }
    out
}

/// Microseconds per call of `f` (which enqueues work on `stream`), over 20 calls after one to
/// warm up.
fn time_us(stream: &std::sync::Arc<cudnn_graph::backend::cudarc::driver::CudaStream>, mut f: impl FnMut()) -> f64 {
    f();
    stream.synchronize().unwrap();
    let start = std::time::Instant::now();
    for _ in 0..20 {
        f();
    }
    stream.synchronize().unwrap();
    start.elapsed().as_secs_f64() * 1e6 / 20.0
}

#[needs_cudnn]
#[test]
fn the_users_graphs_plan_deviceless() {
    let Some(cudnn) = deviceless() else { return };
    let opts = BuildOptions::default();
    // cuDNN 9.10.2-9.14's deviceless heuristics divide by zero on a one-row matmul (a bias
    // gradient's column sum): the known-bad table refuses it there, by name, and only there.
    let single_row_known_bad = known_bad(cudnn.version(), Condition::DevicelessSingleRowMatmul).is_some();
    macro_rules! plans {
        ($($g:ident),*) => {$({
            match $g::new().build(&cudnn, &opts) {
                Ok(plan) => {
                    let parts: Vec<String> =
                        plan.plan().parts().iter().map(|p| format!("{:?} {}", p.nodes(), p.selected().tag())).collect();
                    println!("{}: {parts:?}", stringify!($g));
                }
                Err(e @ cudnn_graph::Error::Backend(BackendError::KnownBad { .. })) if single_row_known_bad => {
                    println!("{}: refused on cuDNN {}, as the known-bad table says: {e}", stringify!($g), cudnn.version());
                }
                Err(e) => panic!("{}: {e}", stringify!($g)),
            }
        })*};
    }
    plans!(SoftmaxXent, LogSoftmax, RowMax, RowMaxBf16, BiasGrad2d, BiasGrad2dBf16, BiasGrad3d, MeanVar);
}

#[needs_gpu]
#[test]
fn the_users_graphs_match_the_reference_on_the_gpu() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let opts = BuildOptions::default();
    let parts = |plan: &cudnn_graph::backend::ExecutionPlan| -> Vec<String> {
        plan.parts().iter().map(|p| format!("{:?} {}", p.nodes(), p.selected().tag())).collect()
    };

    let (n, v) = (256, 32000);
    let logits = uniform::<f32>(1, n * v, -8.0, 8.0);
    let onehot = one_hot(n, v);
    let g = SoftmaxXent::new();
    let want = g.reference(SoftmaxXentInputs { logits: &logits, onehot: &onehot }).unwrap();
    let plan = g.build(&cudnn, &opts).unwrap();
    println!("softmax xent parts: {:?}", parts(plan.plan()));
    let (logits_d, onehot_d) = (upload(&stream, &logits), upload(&stream, &onehot));
    let mut p = poisoned::<f32>(&stream, want.p.len());
    let mut loss = poisoned::<f32>(&stream, want.loss.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    let args = SoftmaxXentArgs { logits: &logits_d, onehot: &onehot_d, p: &mut p, loss: &mut loss };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    check("softmax xent", "p", &stream.clone_dtoh(&p).unwrap(), &want.p);
    check("softmax xent", "loss", &stream.clone_dtoh(&loss).unwrap(), &want.loss);
    let us = time_us(&stream, || {
        let args = SoftmaxXentArgs { logits: &logits_d, onehot: &onehot_d, p: &mut p, loss: &mut loss };
        plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    });
    // The least memory any implementation moves: logits and onehot read, p written, once.
    let bytes = 3.0 * (n * v * 4) as f64;
    println!("softmax xent: {us:.1} us per execute, {:.0} GB/s of its least traffic", bytes / us / 1e3);

    let x = uniform::<f32>(2, 1024 * 1000, -8.0, 8.0);
    let g = LogSoftmax::new();
    let want = g.reference(LogSoftmaxInputs { x: &x }).unwrap();
    let plan = g.build(&cudnn, &opts).unwrap();
    println!("log softmax parts: {:?}", parts(plan.plan()));
    let x_d = upload(&stream, &x);
    let mut y = poisoned::<f32>(&stream, want.y.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, LogSoftmaxArgs { x: &x_d, y: &mut y }, Some(&mut ws)).unwrap();
    check("log softmax", "y", &stream.clone_dtoh(&y).unwrap(), &want.y);

    let x = uniform::<f32>(3, 4096 * 1000, -4.0, 4.0);
    let g = RowMax::new();
    let want = g.reference(RowMaxInputs { x: &x }).unwrap();
    let plan = g.build(&cudnn, &opts).unwrap();
    println!("row max parts: {:?}", parts(plan.plan()));
    let x_d = upload(&stream, &x);
    let mut m = poisoned::<f32>(&stream, want.m.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, RowMaxArgs { x: &x_d, m: &mut m }, Some(&mut ws)).unwrap();
    let got = stream.clone_dtoh(&m).unwrap();
    check("row max", "m", &got, &want.m);
    assert_eq!(got, want.m, "a max is exact");
    let us = time_us(&stream, || plan.execute(&cudnn, RowMaxArgs { x: &x_d, m: &mut m }, Some(&mut ws)).unwrap());
    println!("row max: {us:.1} us per execute, {:.0} GB/s reading x", (x.len() * 4) as f64 / us / 1e3);

    let x = uniform::<bf16>(8, 4096 * 1000, -4.0, 4.0);
    let g = RowMaxBf16::new();
    let want = g.reference(RowMaxBf16Inputs { x: &x }).unwrap();
    let plan = g.build(&cudnn, &opts).unwrap();
    println!("row max bf16 parts: {:?}", parts(plan.plan()));
    let x_d = upload(&stream, &x);
    let mut m = poisoned::<bf16>(&stream, want.m.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, RowMaxBf16Args { x: &x_d, m: &mut m }, Some(&mut ws)).unwrap();
    assert_eq!(stream.clone_dtoh(&m).unwrap(), want.m, "row max bf16: a max is exact");
    println!("row max bf16: m equal to the reference ({} values)", want.m.len());

    let dh = uniform::<f32>(4, 4096 * 1024, -1.0, 1.0);
    let g = BiasGrad2d::new();
    let want = g.reference(BiasGrad2dInputs { dh: &dh }).unwrap();
    let plan = g.build(&cudnn, &opts).unwrap();
    println!("bias grad 2d f32 parts: {:?}", parts(plan.plan()));
    let dh_d = upload(&stream, &dh);
    let mut db = poisoned::<f32>(&stream, want.db.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, BiasGrad2dArgs { dh: &dh_d, db: &mut db }, Some(&mut ws)).unwrap();
    // An f32 sum as a GEMM may round dh to TF32 (docs/ops.md): the project's relative bound.
    common::check("bias grad 2d f32", "db", &stream.clone_dtoh(&db).unwrap(), &want.db);

    let dh = uniform::<bf16>(5, 4096 * 1024, -1.0, 1.0);
    let g = BiasGrad2dBf16::new();
    let want = g.reference(BiasGrad2dBf16Inputs { dh: &dh }).unwrap();
    let plan = g.build(&cudnn, &opts).unwrap();
    println!("bias grad 2d bf16 parts: {:?}", parts(plan.plan()));
    let dh_d = upload(&stream, &dh);
    let mut db = poisoned::<f32>(&stream, want.db.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, BiasGrad2dBf16Args { dh: &dh_d, db: &mut db }, Some(&mut ws)).unwrap();
    check("bias grad 2d bf16", "db", &stream.clone_dtoh(&db).unwrap(), &want.db);
    let us = time_us(&stream, || {
        plan.execute(&cudnn, BiasGrad2dBf16Args { dh: &dh_d, db: &mut db }, Some(&mut ws)).unwrap();
    });
    println!("bias grad 2d bf16: {us:.1} us per execute, {:.0} GB/s reading dh", (dh.len() * 2) as f64 / us / 1e3);

    let dh = uniform::<bf16>(6, 4 * 1024 * 768, -1.0, 1.0);
    let g = BiasGrad3d::new();
    let want = g.reference(BiasGrad3dInputs { dh: &dh }).unwrap();
    let plan = g.build(&cudnn, &opts).unwrap();
    println!("bias grad 3d parts: {:?}", parts(plan.plan()));
    let dh_d = upload(&stream, &dh);
    let mut db = poisoned::<f32>(&stream, want.db.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, BiasGrad3dArgs { dh: &dh_d, db: &mut db }, Some(&mut ws)).unwrap();
    check("bias grad 3d", "db", &stream.clone_dtoh(&db).unwrap(), &want.db);

    let x = uniform::<f32>(7, 2048 * 768, -2.0, 3.0);
    let g = MeanVar::new();
    let want = g.reference(MeanVarInputs { x: &x }).unwrap();
    let plan = g.build(&cudnn, &opts).unwrap();
    println!("mean var parts: {:?}", parts(plan.plan()));
    let x_d = upload(&stream, &x);
    let mut mean = poisoned::<f32>(&stream, want.mean.len());
    let mut var = poisoned::<f32>(&stream, want.var.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, MeanVarArgs { x: &x_d, mean: &mut mean, var: &mut var }, Some(&mut ws)).unwrap();
    check("mean var", "mean", &stream.clone_dtoh(&mean).unwrap(), &want.mean);
    check("mean var", "var", &stream.clone_dtoh(&var).unwrap(), &want.var);
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
