//! On the GPU: slices of graph inputs, lowered as cudnn-frontend does before cuDNN 9.22 (no
//! operation; the sliced tensor bound to the input's address plus an offset), feeding a matmul and
//! a pointwise op; a convolution's output concatenated with an input in place (cudnn-frontend's
//! "Convolution fprop concatenate"); each compared with the CPU reference. The concatenations
//! cuDNN 9.19 computes wrongly are shown to stop at the `concat.fused_in_place` support rule.
//! Views that are graph outputs (a slice, a slice of a matmul): each port is laid out as
//! declared, written by a pointwise identity copy from the view bound into X's memory, and must
//! equal the reference in exactly its element count (a transpose as the output is refused, rule
//! `pointwise.axis_order`: cuDNN 9.19 computed that copy wrongly here, into a packed port and into
//! one of the view's own order). The transpose of an input read by a matmul is the input bound
//! column-major: a weight gradient and a dense layer's backward in f32 and bf16 against the
//! reference, its bias gradient a matmul by ones (`ir::column_sum_as_matmul`).
//!
//! Without a GPU each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_GPU=1`.

#![cfg(feature = "cudnn")]

use crate::common;

use common::{check, poisoned, uniform, upload, workspace};
use cudnn_graph::backend::BuildOptions;
use cudnn_graph::graph;
use half::{bf16, f16};

graph! {
    /// Rows 8..40 of batches 1..3 of `a`, times `b`.
    pub SliceMatmul(a: f16[4, 64, 32], b: f16[1, 32, 48]) -> (c: f16[2, 32, 48]) {
        c = matmul(slice(a, start = [1, 8, 0], limit = [3, 40, 32]), b);
    }

    /// Every other row of `x` from row 2, through a ReLU.
    pub SliceRelu(x: f16[2, 64, 64]) -> (y: f16[2, 31, 64]) {
        y = relu(slice(x, start = [0, 2, 0], limit = [2, 64, 64], step = [1, 2, 1]));
    }

    /// Channels 16..48 of `x`, as the output: a packed `[2, 64, 32]`, not the view's strides.
    pub SliceOut(x: f16[2, 64, 64]) -> (y: f16[2, 64, 32]) {
        y = slice(x, start = [0, 0, 16], limit = [2, 64, 48]);
    }

    /// A weight gradient, `xᵀ · dh`: the transpose of a graph input read by a matmul is that
    /// input described column-major, no operation.
    pub TransposeMatmul(x: f16[1, 128, 256], dh: f16[1, 128, 64]) -> (d_w: f16[1, 256, 64]) {
        d_w = matmul(transpose(x, permutation = [0, 2, 1]), dh);
    }

    /// A dense layer's backward in f32 (`cudnn-graph-candle`'s GPU autograd case): both products
    /// read a transposed graph input; the bias gradient, a sum over rows, is a matmul by ones
    /// (`ir::column_sum_as_matmul`).
    pub DenseBackward(d_y: f32[1, 128, 512], h: f32[1, 128, 512], x: f32[1, 128, 256], w: f32[1, 256, 512])
        -> (d_x: f32[1, 128, 256], d_w: f32[1, 256, 512], d_b: f32[1, 1, 512])
    {
        let dh = relu_bwd(d_y, h);
        d_x = matmul(dh, transpose(w, permutation = [0, 2, 1]));
        d_w = matmul(transpose(x, permutation = [0, 2, 1]), dh);
        d_b = reduce_sum(dh, dims = [1]);
    }

    /// The same in bf16 at a training batch's size, the bias gradient in f32: the ones are bf16
    /// (dh is stored in bf16 between parts, as the GEMMs read it).
    pub DenseBackwardBf16(d_y: bf16[1, 4096, 1024], h: bf16[1, 4096, 1024], x: bf16[1, 4096, 512], w: bf16[1, 512, 1024])
        -> (d_x: bf16[1, 4096, 512], d_w: bf16[1, 512, 1024], d_b: f32[1, 1, 1024])
    {
        let dh = relu_bwd(d_y, h);
        d_x = matmul(dh, transpose(w, permutation = [0, 2, 1]));
        d_w = matmul(transpose(x, permutation = [0, 2, 1]), dh);
        d_b = reduce_sum(dh, dims = [1]);
    }

    /// A bias gradient over batches and rows of a graph input: the ones GEMM reads the input's
    /// view `[1, B·T, N]`, bound by pointer.
    pub BatchBiasGrad(d_y: bf16[4, 1024, 768]) -> (d_b: f32[1, 1, 768]) {
        d_b = reduce_sum(d_y, dims = [0, 1]);
    }

    /// Columns 16..48 of a matmul, as the output: two parts (the matmul writes its product to
    /// the arena, the copy reads the view of it).
    #[intermediate(f16)]
    pub MatmulSliceOut(a: f16[2, 64, 64], b: f16[1, 64, 64]) -> (y: f16[2, 64, 32]) {
        y = slice(matmul(a, b), start = [0, 0, 16], limit = [2, 64, 48]);
    }

    /// `y0`'s channels, then a 1×1 convolution's, NHWC.
    pub ConcatConv<dyn N, const C: usize, const K0: usize, const K: usize, const KY: usize, dyn H, dyn W>(
        x: f16[N, C, H, W] channels_last,
        w: f16[K, C, 1, 1] channels_last,
        y0: f16[N, K0, H, W] channels_last,
    ) -> (y: f16[N, KY, H, W] channels_last) {
        y = concatenate(y0, conv_fprop(x, w), axis = 1);
    }

    /// A 1×1 convolution's channels, then `y0`'s, both copied.
    pub ConvConcat<dyn N, const C: usize, const K: usize, const K0: usize, const KY: usize, dyn H, dyn W>(
        x: f16[N, C, H, W] channels_last,
        w: f16[K, C, 1, 1] channels_last,
        y0: f16[N, K0, H, W] channels_last,
    ) -> (y: f16[N, KY, H, W] channels_last) {
        y = concatenate(conv_fprop(x, w), y0, axis = 1);
    }

    /// A 1×1 convolution's channels, then `y0`'s, which already lie in `y` (in place: cuDNN
    /// writes only the convolution's part).
    pub ConvConcatInPlace<dyn N, const C: usize, const K: usize, const KY: usize, dyn H, dyn W>(
        x: f16[N, C, H, W] channels_last,
        w: f16[K, C, 1, 1] channels_last,
        y0: f16[N, K, H, W] channels_last,
    ) -> (y: f16[N, KY, H, W] channels_last) {
        y = concatenate(conv_fprop(x, w), y0, axis = 1, in_place_index = 1);
    }

    /// `y0` in place first, then the convolution's channels.
    pub InPlaceConcatConv<dyn N, const C: usize, const K: usize, const KY: usize, dyn H, dyn W>(
        x: f16[N, C, H, W] channels_last,
        w: f16[K, C, 1, 1] channels_last,
        y0: f16[N, K, H, W] channels_last,
    ) -> (y: f16[N, KY, H, W] channels_last) {
        y = concatenate(y0, conv_fprop(x, w), axis = 1, in_place_index = 0);
    }

    /// conv + ReLU, then `y0` in place.
    pub ConvReluConcatInPlace<dyn N, const C: usize, const K: usize, const KY: usize, dyn H, dyn W>(
        x: f16[N, C, H, W] channels_last,
        w: f16[K, C, 1, 1] channels_last,
        y0: f16[N, K, H, W] channels_last,
    ) -> (y: f16[N, KY, H, W] channels_last) {
        y = concatenate(relu(conv_fprop(x, w)), y0, axis = 1, in_place_index = 1);
    }

    /// cudnn-frontend's sample exactly: the convolution's output is a graph output too.
    pub ConvOutConcatInPlace<dyn N, const C: usize, const K: usize, const KY: usize, dyn H, dyn W>(
        x: f16[N, C, H, W] channels_last,
        w: f16[K, C, 1, 1] channels_last,
        y0: f16[N, K, H, W] channels_last,
    ) -> (yc: f16[N, K, H, W] channels_last, y: f16[N, KY, H, W] channels_last) {
        yc = conv_fprop(x, w);
        y = concatenate(yc, y0, axis = 1, in_place_index = 1);
    }
}

/// Per-part errors of an NHWC concatenation along channels: `parts` are (name, channels) in order.
fn channel_parts(case: &str, got: &[f16], want: &[f16], parts: &[(&str, usize)]) -> Vec<String> {
    let ky: usize = parts.iter().map(|p| p.1).sum();
    let mut failures = Vec::new();
    let mut first = 0;
    for &(name, channels) in parts {
        let pick =
            |v: &[f16]| -> Vec<f16> { v.chunks(ky).flat_map(|px| px[first..first + channels].to_vec()).collect() };
        let (g, w) = (pick(got), pick(want));
        let nan = g.iter().filter(|v| v.is_nan()).count();
        let err = common::relative_error(&g, &w);
        println!(
            "{case}: {name} (channels {first}..{}) relative error {err:.3e}, {nan} of {} NaN",
            first + channels,
            g.len()
        );
        if err > common::GPU_TOLERANCE {
            failures.push(format!("{case}: {name} relative error {err}"));
        }
        first += channels;
    }
    failures
}

#[needs_gpu]
#[test]
fn gpu_conv_concatenate() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (n, h, w) = (4usize, 32usize, 32usize);
    let x = uniform::<f16>(1, n * 64 * h * w, -1.0, 1.0);
    let wt = uniform::<f16>(2, 128 * 64, -0.2, 0.2);
    let y0 = uniform::<f16>(4, n * 128 * h * w, -1.0, 1.0);
    let (x_d, w_d, y0_d) = (upload(&stream, &x), upload(&stream, &wt), upload(&stream, &y0));

    // In place: y holds y0's values in channels 128..256 before the execute (NHWC: the last 128
    // of every pixel's 256), the conv's part is poisoned; afterwards y must be the whole
    // concatenation.
    let g = ConvConcatInPlace::<64, 128, 256>::new(n, h, w);
    let want = g.reference(ConvConcatInPlaceInputs { x: &x, w: &wt, y0: &y0 }).unwrap();
    let mut before = want.y.clone();
    for pixel in before.chunks_mut(256) {
        pixel[..128].fill(f16::NAN);
    }
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let mut y_d = upload(&stream, &before);
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, ConvConcatInPlaceArgs { x: &x_d, w: &w_d, y0: &y0_d, y: &mut y_d }, Some(&mut ws)).unwrap();
    let case = format!("concatenate(conv_fprop, y0 in place) NHWC f16, engine {}", plan.plan().selected().tag());
    let failures = channel_parts(&case, &stream.clone_dtoh(&y_d).unwrap(), &want.y, &[("conv", 128), ("y0", 128)]);
    assert!(failures.is_empty(), "{failures:#?}");

    // Every other form: cuDNN 9.19 accepts them and writes a wrong result (or crashes building
    // the ReLU one); the support rule stops them first, with the cause.
    let opts = BuildOptions::default();
    let rejected = [
        ("y0 first, copied", ConcatConv::<64, 128, 128, 256>::new(n, h, w).build(&cudnn, &opts).err()),
        ("conv first, copied", ConvConcat::<64, 128, 128, 256>::new(n, h, w).build(&cudnn, &opts).err()),
        ("y0 in place first", InPlaceConcatConv::<64, 128, 256>::new(n, h, w).build(&cudnn, &opts).err()),
        ("relu between", ConvReluConcatInPlace::<64, 128, 256>::new(n, h, w).build(&cudnn, &opts).err()),
        ("conv also an output", ConvOutConcatInPlace::<64, 128, 256>::new(n, h, w).build(&cudnn, &opts).err()),
    ];
    for (form, err) in rejected {
        let err = err.unwrap_or_else(|| panic!("{form}: planned; cuDNN 9.19 computes it wrongly"));
        assert!(err.to_string().contains("concat.fused_in_place"), "{form}: {err}");
        println!("{form}: rejected ({})", err.to_string().split("; ").next().unwrap_or_default());
    }
}

#[needs_gpu]
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

/// A view that is a graph output is delivered packed in exactly its element count: the buffer
/// is poisoned and as long as the output's shape, so a copy that wrote the view's strides (or
/// nothing) shows as NaN or a wrong value.
#[needs_gpu]
#[test]
fn gpu_view_outputs_are_packed_copies() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let opts = BuildOptions::default();

    let x = uniform::<f16>(5, 2 * 64 * 64, -1.0, 1.0);
    let g = SliceOut::new();
    let want = g.reference(SliceOutInputs { x: &x }).unwrap();
    assert_eq!(want.y.len(), 2 * 64 * 32);
    let plan = g.build(&cudnn, &opts).unwrap();
    let x_d = upload(&stream, &x);
    let mut y_d = poisoned::<f16>(&stream, want.y.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, SliceOutArgs { x: &x_d, y: &mut y_d }, Some(&mut ws)).unwrap();
    let case = format!("slice as the output f16, engine {}", plan.plan().selected().tag());
    check(&case, "y", &stream.clone_dtoh(&y_d).unwrap(), &want.y);

    let x = uniform::<f16>(9, 128 * 256, -1.0, 1.0);
    let dh = uniform::<f16>(10, 128 * 64, -1.0, 1.0);
    let g = TransposeMatmul::new();
    let want = g.reference(TransposeMatmulInputs { x: &x, dh: &dh }).unwrap();
    let plan = g.build(&cudnn, &opts).unwrap();
    let (x_d, dh_d) = (upload(&stream, &x), upload(&stream, &dh));
    let mut d_w = poisoned::<f16>(&stream, want.d_w.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, TransposeMatmulArgs { x: &x_d, dh: &dh_d, d_w: &mut d_w }, Some(&mut ws)).unwrap();
    let case = format!("matmul of a transposed input f16, engine {}", plan.plan().selected().tag());
    check(&case, "d_w", &stream.clone_dtoh(&d_w).unwrap(), &want.d_w);

    let d_y = uniform::<f32>(11, 128 * 512, -1.0, 1.0);
    let h = uniform::<f32>(12, 128 * 512, -1.0, 1.0);
    let x = uniform::<f32>(13, 128 * 256, -1.0, 1.0);
    let w = uniform::<f32>(14, 256 * 512, -1.0, 1.0);
    let g = DenseBackward::new();
    let want = g.reference(DenseBackwardInputs { d_y: &d_y, h: &h, x: &x, w: &w }).unwrap();
    let plan = g.build(&cudnn, &opts).unwrap();
    let [d_y_d, h_d, x_d, w_d] = [&d_y, &h, &x, &w].map(|v| upload(&stream, v));
    let mut d_x = poisoned::<f32>(&stream, want.d_x.len());
    let mut d_w = poisoned::<f32>(&stream, want.d_w.len());
    let mut d_b = poisoned::<f32>(&stream, want.d_b.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    let args =
        DenseBackwardArgs { d_y: &d_y_d, h: &h_d, x: &x_d, w: &w_d, d_x: &mut d_x, d_w: &mut d_w, d_b: &mut d_b };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let parts: Vec<String> =
        plan.plan().parts().iter().map(|p| format!("{:?} {}", p.nodes(), p.selected().tag())).collect();
    println!("dense backward f32 parts: {parts:?}");
    check("dense backward f32", "d_x", &stream.clone_dtoh(&d_x).unwrap(), &want.d_x);
    check("dense backward f32", "d_w", &stream.clone_dtoh(&d_w).unwrap(), &want.d_w);
    check("dense backward f32", "d_b", &stream.clone_dtoh(&d_b).unwrap(), &want.d_b);

    let (t, i, o) = (4096, 512, 1024);
    let d_y = uniform::<bf16>(15, t * o, -1.0, 1.0);
    let h = uniform::<bf16>(16, t * o, -1.0, 1.0);
    let x = uniform::<bf16>(17, t * i, -1.0, 1.0);
    let w = uniform::<bf16>(18, i * o, -1.0, 1.0);
    let g = DenseBackwardBf16::new();
    let want = g.reference(DenseBackwardBf16Inputs { d_y: &d_y, h: &h, x: &x, w: &w }).unwrap();
    let plan = g.build(&cudnn, &opts).unwrap();
    let [d_y_d, h_d, x_d, w_d] = [&d_y, &h, &x, &w].map(|v| upload(&stream, v));
    let mut d_x = poisoned::<bf16>(&stream, want.d_x.len());
    let mut d_w = poisoned::<bf16>(&stream, want.d_w.len());
    let mut d_b = poisoned::<f32>(&stream, want.d_b.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    let args =
        DenseBackwardBf16Args { d_y: &d_y_d, h: &h_d, x: &x_d, w: &w_d, d_x: &mut d_x, d_w: &mut d_w, d_b: &mut d_b };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let parts: Vec<String> =
        plan.plan().parts().iter().map(|p| format!("{:?} {}", p.nodes(), p.selected().tag())).collect();
    println!("dense backward bf16 parts: {parts:?}");
    check("dense backward bf16", "d_x", &stream.clone_dtoh(&d_x).unwrap(), &want.d_x);
    check("dense backward bf16", "d_w", &stream.clone_dtoh(&d_w).unwrap(), &want.d_w);
    check("dense backward bf16", "d_b", &stream.clone_dtoh(&d_b).unwrap(), &want.d_b);

    let d_y = uniform::<bf16>(19, 4 * 1024 * 768, -1.0, 1.0);
    let g = BatchBiasGrad::new();
    let want = g.reference(BatchBiasGradInputs { d_y: &d_y }).unwrap();
    let plan = g.build(&cudnn, &opts).unwrap();
    let d_y_d = upload(&stream, &d_y);
    let mut d_b = poisoned::<f32>(&stream, want.d_b.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, BatchBiasGradArgs { d_y: &d_y_d, d_b: &mut d_b }, Some(&mut ws)).unwrap();
    let case = format!("bias gradient over batches and rows bf16, engine {}", plan.plan().selected().tag());
    check(&case, "d_b", &stream.clone_dtoh(&d_b).unwrap(), &want.d_b);

    let a = uniform::<f16>(7, 2 * 64 * 64, -1.0, 1.0);
    let b = uniform::<f16>(8, 64 * 64, -0.25, 0.25);
    let g = MatmulSliceOut::new();
    let want = g.reference(MatmulSliceOutInputs { a: &a, b: &b }).unwrap();
    let plan = g.build(&cudnn, &opts).unwrap();
    assert_eq!(plan.plan().parts().len(), 2, "matmul | copy of the view");
    let (a_d, b_d) = (upload(&stream, &a), upload(&stream, &b));
    let mut y_d = poisoned::<f16>(&stream, want.y.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(&cudnn, MatmulSliceOutArgs { a: &a_d, b: &b_d, y: &mut y_d }, Some(&mut ws)).unwrap();
    check("slice of a matmul as the output f16, two parts", "y", &stream.clone_dtoh(&y_d).unwrap(), &want.y);
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
