//! Convolution + bias + ReLU declared with `graph!` (cudnn-frontend's `conv_bias_relu` pattern,
//! NHWC f16), run on the CPU reference engine (default) or on cuDNN (`--gpu`), where it is one
//! fused kernel, checked against the CPU reference and timed.
//!
//! ```text
//! cargo run --example conv_bias_relu                      # CPU reference, [2, 64, 28, 28]
//! cargo run --release --example conv_bias_relu -- --gpu   # cuDNN, [32, 64, 56, 56], timed
//! cargo run --example conv_bias_relu -- --structure g.json  # also write the structural JSON
//! ```
//!
//! Buffers are channels-last (`x[n][h][w][c]`): every port is declared `channels_last`, as
//! cuDNN's fused convolution engines want (ports are row-major unless declared otherwise).

use cudnn_graph::graph;
use cudnn_graph::rng::SplitMix64;
use half::f16;

graph! {
    /// A 3×3 convolution, padding 1, then a per-channel bias and a ReLU.
    pub ConvBiasRelu<const C: usize, const K: usize, dyn N, dyn H, dyn W>(
        x: f16[N, C, H, W] channels_last,
        w: f16[K, C, 3, 3] channels_last,
        bias: f16[1, K, 1, 1] channels_last,
    ) -> (y: f16[N, K, H, W] channels_last) {
        y = relu(add(conv_fprop(x, w, padding = [1, 1]), bias));
    }
}

const C: usize = 64;
const K: usize = 128;

/// Fixed-seed inputs in [lo, hi), never all zeros.
fn random(seed: u64, n: usize, lo: f64, hi: f64) -> Vec<f16> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| f16::from_f64(rng.uniform(lo, hi))).collect()
}

/// ‖got − want‖ / ‖want‖ in f64.
fn relative_error(got: &[f16], want: &[f16]) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (g.to_f64(), w.to_f64());
        num += (g - w) * (g - w);
        den += w * w;
    }
    (num / den).sqrt()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let gpu = args.iter().any(|a| a == "--gpu");
    let (n, h, w) = if gpu { (32, 56, 56) } else { (2, 28, 28) };
    let graph = ConvBiasRelu::<C, K>::new(n, h, w);
    println!("{}", graph.graph()?);
    if let Some(i) = args.iter().position(|a| a == "--structure") {
        let path = args.get(i + 1).ok_or("--structure needs a path")?;
        std::fs::write(path, cudnn_graph::serialize::structure_to_json(&graph.graph()?))?;
        println!("structural JSON written to {path}");
    }
    let x = random(1, n * C * h * w, -1.0, 1.0);
    let wt = random(2, K * C * 9, -0.1, 0.1);
    let bias = random(3, K, -0.5, 0.5);
    let want = graph.reference(ConvBiasReluInputs { x: &x, w: &wt, bias: &bias })?;
    let positive = want.y.iter().filter(|v| v.to_f64() > 0.0).count();
    println!(
        "cpu reference: y is [{n}, {K}, {h}, {w}] f16 (NHWC), {positive} of {} values positive after the ReLU",
        want.y.len()
    );
    if gpu {
        run_gpu(&graph, (&x, &wt, &bias), &want.y)?;
    }
    Ok(())
}

#[cfg(feature = "cudnn")]
fn run_gpu(
    graph: &ConvBiasRelu<C, K>,
    (x, wt, bias): (&[f16], &[f16], &[f16]),
    want: &[f16],
) -> Result<(), Box<dyn std::error::Error>> {
    use cudnn_graph::backend::{cuda_context, BuildOptions, Cudnn};
    use std::time::Instant;

    const CALLS: u32 = 50;
    let ctx = cuda_context(0)?;
    let stream = ctx.default_stream();
    let cudnn = Cudnn::new(stream.clone())?;
    let start = Instant::now();
    let plan = graph.build(&cudnn, &BuildOptions::default())?;
    println!(
        "cudnn {}: plan built in {:.1} ms, engine {}, workspace {} bytes",
        cudnn.version(),
        start.elapsed().as_secs_f64() * 1e3,
        plan.plan().selected().tag(),
        plan.workspace_size()
    );
    let (x_d, w_d, b_d) = (stream.clone_htod(x)?, stream.clone_htod(wt)?, stream.clone_htod(bias)?);
    let mut y_d = stream.alloc_zeros::<f16>(want.len())?;
    let mut ws = stream.alloc_zeros::<u8>(plan.workspace_size().max(1))?;
    let mut call =
        || plan.execute(&cudnn, ConvBiasReluArgs { x: &x_d, w: &w_d, bias: &b_d, y: &mut y_d }, Some(&mut ws));
    call()?;
    stream.synchronize()?;
    let start = Instant::now();
    for _ in 0..CALLS {
        call()?;
    }
    stream.synchronize()?;
    let per_call = start.elapsed().as_secs_f64() / f64::from(CALLS);
    // Two flops per multiply-add: C · 3 · 3 of them for each output value.
    let flops = 2.0 * (want.len() * C * 9) as f64;
    let got = stream.clone_dtoh(&y_d)?;
    println!(
        "cudnn: {:.1} µs per call, {:.0} TFLOP/s; relative error against the CPU reference {:.3e}",
        per_call * 1e6,
        flops / per_call / 1e12,
        relative_error(&got, want)
    );
    Ok(())
}

#[cfg(not(feature = "cudnn"))]
fn run_gpu(_: &ConvBiasRelu<C, K>, _: (&[f16], &[f16], &[f16]), _: &[f16]) -> Result<(), Box<dyn std::error::Error>> {
    Err("this build has no cuDNN backend: build with the default `cudnn` feature".into())
}
