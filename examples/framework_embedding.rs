//! Embedding a `graph!` kernel in a framework: tensors that live inside larger allocations.
//!
//! ```text
//! cargo run --example framework_embedding             # CPU reference on sub-slices of one host arena
//! cargo run --release --example framework_embedding -- --gpu
//! ```
//!
//! On the GPU it runs the same layer twice: with cudarc views into one parameter arena and one
//! activation arena (`CudaView`/`CudaViewMut`, checked: lengths and types), and with raw device
//! pointers (`execute_raw`, as a framework with its own caching allocator would call it). Both
//! results are compared with the CPU reference.

use cudnn_graph::graph;
use half::bf16;

graph! {
    /// One MLP layer: y = gelu(x · w + b).
    pub Dense<const IN: usize, const OUT: usize, dyn T>(
        x: bf16[1, T, IN],
        w: bf16[1, IN, OUT],
        b: bf16[1, 1, OUT],
    ) -> (y: bf16[1, T, OUT]) {
        y = gelu(add(matmul(x, w), b));
    }
}

const IN: usize = 256;
const OUT: usize = 512;
const T: usize = 64;

fn values(seed: u64, n: usize) -> Vec<bf16> {
    (0..n)
        .map(|i| bf16::from_f64((((i as u64 + 1) * 2654435761 + seed * 40503) % 2003) as f64 / 1001.5 - 1.0))
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let layer = Dense::<IN, OUT>::new(T);
    // A framework's parameter arena: w then b, back to back, and an activation arena holding x.
    let params: Vec<bf16> = [values(1, IN * OUT), values(2, OUT)].concat();
    let acts = values(3, T * IN + 7); // some other tensor's tail after x
    let (w, b) = params.split_at(IN * OUT);
    let want = layer.reference(DenseInputs { x: &acts[..T * IN], w, b })?.y;
    let checksum: f64 = want.iter().map(|v| v.to_f64()).sum();
    println!("cpu reference on arena sub-slices: y [1, {T}, {OUT}] checksum {checksum:.4}");
    if std::env::args().any(|a| a == "--gpu") {
        gpu(&layer, &params, &acts, &want)?;
    }
    Ok(())
}

#[cfg(feature = "cudnn")]
fn gpu(
    layer: &Dense<IN, OUT>,
    params: &[bf16],
    acts: &[bf16],
    want: &[bf16],
) -> Result<(), Box<dyn std::error::Error>> {
    use cudnn_graph::backend::cuda_context;
    use cudnn_graph::backend::cudarc::driver::{DevicePtr, DevicePtrMut};
    use cudnn_graph::backend::{BuildOptions, Cudnn};
    let stream = cuda_context(0)?.default_stream();
    let cudnn = Cudnn::new(stream.clone())?;
    let plan = layer.build(&cudnn, &BuildOptions::default())?;
    let params_d = stream.clone_htod(params)?;
    let acts_d = stream.clone_htod(acts)?;
    let mut out_arena = stream.alloc_zeros::<bf16>(T * OUT + 128)?;
    let mut ws = stream.alloc_zeros::<u8>(plan.workspace_size().max(1))?;
    let max_err = |got: &[bf16]| got.iter().zip(want).map(|(g, w)| (g.to_f64() - w.to_f64()).abs()).fold(0.0, f64::max);

    // 1. Views into the arenas, checked against the graph.
    {
        let (w, b) = (params_d.slice(0..IN * OUT), params_d.slice(IN * OUT..IN * OUT + OUT));
        let x = acts_d.slice(0..T * IN);
        let mut y = out_arena.slice_mut(128..128 + T * OUT);
        plan.execute(&cudnn, DenseArgs { x: &x, w: &w, b: &b, y: &mut y }, Some(&mut ws))?;
    }
    let got = stream.clone_dtoh(&out_arena.slice(128..128 + T * OUT))?;
    println!("views into arenas: max |err| vs reference {:.3e}", max_err(&got));

    // 2. Raw device pointers, as a framework's allocator hands them out.
    let elem = std::mem::size_of::<bf16>() as u64;
    let (params_ptr, _p) = params_d.device_ptr(&stream);
    let (acts_ptr, _a) = acts_d.device_ptr(&stream);
    let (out_ptr, _o) = out_arena.device_ptr_mut(&stream);
    let (ws_ptr, _w) = ws.device_ptr_mut(&stream);
    let raw = DenseRawArgs { x: acts_ptr, w: params_ptr, b: params_ptr + (IN * OUT) as u64 * elem, y: out_ptr };
    // SAFETY: every pointer addresses live device memory of the port's type and size on this
    // stream's device (the arenas above), and the guards keep them alive until after the copy.
    unsafe { plan.execute_raw(&cudnn, raw, ws_ptr)? };
    drop((_p, _a, _o, _w));
    let got = stream.clone_dtoh(&out_arena.slice(0..T * OUT))?;
    println!("raw device pointers: max |err| vs reference {:.3e}", max_err(&got));
    Ok(())
}

#[cfg(not(feature = "cudnn"))]
fn gpu(_: &Dense<IN, OUT>, _: &[bf16], _: &[bf16], _: &[bf16]) -> Result<(), Box<dyn std::error::Error>> {
    Err("this build has no cuDNN backend: build with the default `cudnn` feature".into())
}
