//! Layer norm declared with `graph!`, in training (Y, MEAN, INV_VARIANCE), run on the CPU
//! reference engine (default) or on cuDNN (`--gpu`), checked against a direct f64 computation.
//!
//! ```text
//! cargo run --example layernorm                        # CPU reference, bf16 256 × 4096
//! cargo run --example layernorm -- --rows 1024         # CPU reference, bf16 1024 × 4096
//! cargo run --release --example layernorm -- --gpu     # cuDNN, bf16 16384 × 4096, timed
//! cargo run --example layernorm -- --structure g.json   # also write the structural JSON
//! ```
//!
//! The CPU path defaults to 256 rows (the reference engine computes in f64, one element at a
//! time); the GPU path runs the 16384 × 4096 of cudnn-frontend's benchmark, checks 256 sampled
//! rows (rows are independent) and every statistic against the direct computation, and reports the
//! time per call and the bandwidth (bf16 X read and Y written) for both layouts cuDNN takes:
//! `[N, D]` and cudnn-frontend's `[N, D, 1, 1]`.

use cudnn_graph::graph;
use cudnn_graph::rng::SplitMix64;
use half::bf16;

graph! {
    /// Layer norm over the last dim, training: the statistics are outputs too.
    pub LayerNorm<const H: usize, dyn N>(x: bf16[N, H], scale: bf16[1, H], bias: bf16[1, H])
        -> (y: bf16[N, H], mean: f32[N, 1], inv_var: f32[N, 1])
    {
        let (normalized, m, v) = layernorm(x, scale, bias, 1e-5, phase = training);
        y = normalized;
        mean = m;
        inv_var = v;
    }

    /// The same in cudnn-frontend's layout, inference (Y only), as its benchmark runs it.
    pub LayerNorm4d<const H: usize, dyn N>(x: bf16[N, H, 1, 1], scale: bf16[1, H, 1, 1], bias: bf16[1, H, 1, 1])
        -> (y: bf16[N, H, 1, 1])
    {
        y = layernorm(x, scale, bias, 1e-5);
    }
}

const D: usize = 4096;
const EPS: f64 = 1e-5;

/// Fixed-seed inputs in [lo, hi), never all zeros.
fn random(seed: u64, n: usize, lo: f64, hi: f64) -> Vec<bf16> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| bf16::from_f64(rng.uniform(lo, hi))).collect()
}

/// Row `r`'s Y, mean and inverse standard deviation in f64, without the graph machinery.
fn direct_row(x: &[bf16], scale: &[bf16], bias: &[bf16], r: usize) -> (Vec<f64>, f64, f64) {
    let row: Vec<f64> = x[r * D..(r + 1) * D].iter().map(|v| v.to_f64()).collect();
    let mean = row.iter().sum::<f64>() / D as f64;
    let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / D as f64;
    let inv = 1.0 / (var + EPS).sqrt();
    let y = row.iter().zip(scale).zip(bias).map(|((v, s), b)| s.to_f64() * (v - mean) * inv + b.to_f64()).collect();
    (y, mean, inv)
}

/// Compares rows `rows` of the outputs with the direct computation and prints the errors.
fn report(engine: &str, inputs: (&[bf16], &[bf16], &[bf16]), out: (&[bf16], &[f32], &[f32]), rows: &[usize]) {
    let (x, scale, bias) = inputs;
    let (y, mean, inv_var) = out;
    let (mut num, mut den, mut max_err, mut stats_err) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for &r in rows {
        let (want, m, v) = direct_row(x, scale, bias, r);
        for (g, w) in y[r * D..(r + 1) * D].iter().zip(&want) {
            let e = g.to_f64() - w;
            num += e * e;
            den += w * w;
            max_err = max_err.max(e.abs());
        }
        stats_err = stats_err.max((f64::from(mean[r]) - m).abs()).max((f64::from(inv_var[r]) - v).abs() / v);
    }
    let n = y.len() / D;
    let checksum: f64 = rows.iter().flat_map(|&r| &y[r * D..(r + 1) * D]).map(|v| v.to_f64()).sum();
    println!(
        "{engine}: y is [{n}, {D}] bf16; over {} rows: checksum {checksum:.4}, max |err| {max_err:.3e}, relative \
         error {:.3e}, worst statistic error {stats_err:.3e}",
        rows.len(),
        (num / den).sqrt()
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let gpu = args.iter().any(|a| a == "--gpu");
    let default_rows = if gpu { 16384 } else { 256 };
    let n = match args.iter().position(|a| a == "--rows") {
        Some(i) => args.get(i + 1).ok_or("--rows needs a number")?.parse()?,
        None => default_rows,
    };
    let (x, scale, bias) = (random(1, n * D, -3.0, 3.0), random(2, D, 0.5, 1.5), random(3, D, -1.0, 1.0));
    let graph = LayerNorm::<D>::new(n);
    println!("{}", graph.graph()?);
    if let Some(path) = args.iter().skip_while(|a| *a != "--structure").nth(1) {
        std::fs::write(path, cudnn_graph::serialize::structure_to_json(&graph.graph()?))?;
    }

    if gpu {
        return run_gpu(n, &x, &scale, &bias);
    }
    let out = graph.reference(LayerNormInputs { x: &x, scale: &scale, bias: &bias })?;
    let every_row: Vec<usize> = (0..n).collect();
    report("cpu reference", (&x, &scale, &bias), (&out.y, &out.mean, &out.inv_var), &every_row);
    Ok(())
}

#[cfg(feature = "cudnn")]
fn run_gpu(n: usize, x: &[bf16], scale: &[bf16], bias: &[bf16]) -> Result<(), Box<dyn std::error::Error>> {
    use cudnn_graph::backend::{cuda_context, BuildOptions, Cudnn};
    use std::time::Instant;

    const CALLS: u32 = 50;
    let ctx = cuda_context(0)?;
    let stream = ctx.default_stream();
    let cudnn = Cudnn::new(stream.clone())?;
    let (x_d, s_d, b_d) = (stream.clone_htod(x)?, stream.clone_htod(scale)?, stream.clone_htod(bias)?);
    let bytes = 2.0 * 2.0 * (n * D) as f64;

    let graph = LayerNorm::<D>::new(n);
    let start = Instant::now();
    let plan = graph.build(&cudnn, &BuildOptions::default())?;
    println!(
        "cudnn {}: [N, D] training plan built in {:.1} ms, engine {}, workspace {} bytes",
        cudnn.version(),
        start.elapsed().as_secs_f64() * 1e3,
        plan.plan().selected().tag(),
        plan.workspace_size()
    );
    let mut y_d = stream.alloc_zeros::<bf16>(n * D)?;
    let (mut m_d, mut v_d) = (stream.alloc_zeros::<f32>(n)?, stream.alloc_zeros::<f32>(n)?);
    let mut ws = stream.alloc_zeros::<u8>(plan.workspace_size().max(1))?;
    let mut call = |plan: &LayerNormPlan<D>| {
        let args = LayerNormArgs { x: &x_d, scale: &s_d, bias: &b_d, y: &mut y_d, mean: &mut m_d, inv_var: &mut v_d };
        plan.execute(&cudnn, args, Some(&mut ws))
    };
    call(&plan)?;
    stream.synchronize()?;
    let start = Instant::now();
    for _ in 0..CALLS {
        call(&plan)?;
    }
    stream.synchronize()?;
    let per_call = start.elapsed().as_secs_f64() / f64::from(CALLS);
    println!("cudnn [N, D] training: {:.1} µs per call, {:.0} GB/s", per_call * 1e6, bytes / per_call / 1e9);
    let (y, mean, inv_var) = (stream.clone_dtoh(&y_d)?, stream.clone_dtoh(&m_d)?, stream.clone_dtoh(&v_d)?);
    let rows: Vec<usize> = (0..256).map(|i| i * n / 256 + (i * 37) % (n / 256).max(1)).filter(|&r| r < n).collect();
    report("cudnn", (x, scale, bias), (&y, &mean, &inv_var), &rows);

    let graph = LayerNorm4d::<D>::new(n);
    let plan = graph.build(&cudnn, &BuildOptions::default())?;
    let mut y4_d = stream.alloc_zeros::<bf16>(n * D)?;
    let mut ws = stream.alloc_zeros::<u8>(plan.workspace_size().max(1))?;
    let mut call = || {
        let args = LayerNorm4dArgs { x: &x_d, scale: &s_d, bias: &b_d, y: &mut y4_d };
        plan.execute(&cudnn, args, Some(&mut ws))
    };
    call()?;
    stream.synchronize()?;
    let start = Instant::now();
    for _ in 0..CALLS {
        call()?;
    }
    stream.synchronize()?;
    let per_call = start.elapsed().as_secs_f64() / f64::from(CALLS);
    println!(
        "cudnn [N, D, 1, 1] inference (engine {}): {:.1} µs per call, {:.0} GB/s",
        plan.plan().selected().tag(),
        per_call * 1e6,
        bytes / per_call / 1e9
    );
    let y4 = stream.clone_dtoh(&y4_d)?;
    let same = y4.iter().zip(&y).filter(|(a, b)| a == b).count();
    println!("cudnn [N, D, 1, 1] Y equals the [N, D] Y in {same} of {} elements", y.len());
    Ok(())
}

#[cfg(not(feature = "cudnn"))]
fn run_gpu(_: usize, _: &[bf16], _: &[bf16], _: &[bf16]) -> Result<(), Box<dyn std::error::Error>> {
    Err("this build has no cuDNN backend: build with the default `cudnn` feature".into())
}
