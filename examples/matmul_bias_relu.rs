//! `y = relu(a · b + bias)` declared with `graph!`, run on the CPU reference engine (default) or
//! on cuDNN (`--gpu`), with a checksum and the max error against a direct f64 computation.
//!
//! ```text
//! cargo run --example matmul_bias_relu            # CPU reference engine
//! cargo run --release --example matmul_bias_relu -- --gpu
//! cargo run --example matmul_bias_relu -- --structure g.json   # also write the structural JSON
//! cargo run --example matmul_bias_relu -- --gpu --trace    # log each phase (tracing, to stderr)
//! ```

use cudnn_graph::graph;
use cudnn_graph::rng::SplitMix64;
use half::bf16;

graph! {
    /// y = relu(a · b + bias), one fused cuDNN kernel.
    pub MatmulBiasRelu<const N: usize, const K: usize, dyn M>(
        a: bf16[1, M, K],
        b: bf16[1, K, N],
        bias: bf16[1, 1, N],
    ) -> (y: bf16[1, M, N]) {
        let c = matmul(a, b);
        let d = add(c, bias);
        y = relu(d);
    }
}

const M: usize = 192;
const N: usize = 256;
const K: usize = 128;

/// Fixed-seed inputs in [-1, 1), never all zeros.
fn random(seed: u64, n: usize) -> Vec<bf16> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| bf16::from_f64(rng.uniform(-1.0, 1.0))).collect()
}

/// relu(a · b + bias) in f64 from the same bf16 inputs, without the graph machinery.
fn direct(a: &[bf16], b: &[bf16], bias: &[bf16]) -> Vec<f64> {
    let mut y = vec![0.0; M * N];
    for i in 0..M {
        for j in 0..N {
            let acc: f64 = (0..K).map(|p| a[i * K + p].to_f64() * b[p * N + j].to_f64()).sum();
            y[i * N + j] = (acc + bias[j].to_f64()).max(0.0);
        }
    }
    y
}

fn report(engine: &str, y: &[bf16], want: &[f64]) {
    let checksum: f64 = y.iter().map(|v| v.to_f64()).sum();
    let max_err = y.iter().zip(want).map(|(g, w)| (g.to_f64() - w).abs()).fold(0.0, f64::max);
    let norm = want.iter().map(|w| w * w).sum::<f64>().sqrt();
    let rel = y.iter().zip(want).map(|(g, w)| (g.to_f64() - w).powi(2)).sum::<f64>().sqrt() / norm;
    println!(
        "{engine}: y is [1, {M}, {N}] bf16, checksum {checksum:.4}, max |err| {max_err:.3e}, relative error {rel:.3e}"
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = std::env::args().any(|a| a == "--gpu");
    if std::env::args().any(|a| a == "--trace") {
        // The library only emits `tracing` events; showing them is the application's choice.
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(std::io::stderr)
            .with_target(false)
            .init();
    }
    let graph = MatmulBiasRelu::<N, K>::new(M);
    let (a, b, bias) = (random(1, M * K), random(2, K * N), random(3, N));
    let want = direct(&a, &b, &bias);
    println!("{}", graph.graph()?);
    if let Some(path) = std::env::args().skip_while(|a| a != "--structure").nth(1) {
        std::fs::write(&path, cudnn_graph::serialize::structure_to_json(&graph.graph()?))?;
        println!("wrote the graph's structural JSON to {path}");
    }

    let out = graph.reference(MatmulBiasReluInputs { a: &a, b: &b, bias: &bias })?;
    report("cpu reference", &out.y, &want);

    if gpu {
        run_gpu(&graph, &a, &b, &bias, &want)?;
    }
    Ok(())
}

#[cfg(feature = "cudnn")]
fn run_gpu(
    graph: &MatmulBiasRelu<N, K>,
    a: &[bf16],
    b: &[bf16],
    bias: &[bf16],
    want: &[f64],
) -> Result<(), Box<dyn std::error::Error>> {
    use cudnn_graph::backend::{cuda_context, BuildOptions, Cudnn};
    let ctx = cuda_context(0)?;
    let stream = ctx.default_stream();
    let cudnn = Cudnn::new(stream.clone())?;
    let start = std::time::Instant::now();
    let plan = graph.build(&cudnn, &BuildOptions::default())?;
    println!(
        "cudnn {}: plan built in {:.1} ms, workspace {} bytes",
        cudnn.version(),
        start.elapsed().as_secs_f64() * 1e3,
        plan.workspace_size()
    );
    let (a_d, b_d, bias_d) = (stream.clone_htod(a)?, stream.clone_htod(b)?, stream.clone_htod(bias)?);
    let mut y_d = stream.alloc_zeros::<bf16>(M * N)?;
    let mut ws = stream.alloc_zeros::<u8>(plan.workspace_size().max(1))?;
    plan.execute(&cudnn, MatmulBiasReluArgs { a: &a_d, b: &b_d, bias: &bias_d, y: &mut y_d }, Some(&mut ws))?;
    let y = stream.clone_dtoh(&y_d)?;
    report("cudnn", &y, want);
    Ok(())
}

#[cfg(not(feature = "cudnn"))]
fn run_gpu(
    _: &MatmulBiasRelu<N, K>,
    _: &[bf16],
    _: &[bf16],
    _: &[bf16],
    _: &[f64],
) -> Result<(), Box<dyn std::error::Error>> {
    Err("this build has no cuDNN backend: build with the default `cudnn` feature".into())
}
