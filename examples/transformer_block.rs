//! A pre-norm transformer block as one `graph!`: RMSNorm → one fused Q/K/V projection → causal
//! GQA attention → output projection + residual → RMSNorm → MLP (GELU) + residual.
//!
//! ```text
//! cargo run --release --example transformer_block            # CPU reference engine, a small block
//! cargo run --release --example transformer_block -- --gpu   # cuDNN: the small block checked against
//!                                                            # the CPU, then a large one timed
//! ```
//!
//! cuDNN fuses one matmul, norm or attention per kernel, so `build` plans the block as 7 parts
//! (the norms, each projection with its epilogue, the attention), run in order on the stream
//! with the intermediates in the workspace; `plan().parts()` lists them and why each boundary is
//! there. Q, K and V are slices of the one packed projection `[B, S, HQ + 2·HKV, D]`, and the
//! attention reads them, and the output projection reads its output, as views of that memory
//! (`reshape`, `slice` and `transpose` cost nothing between parts), so nothing is copied.

use cudnn_graph::graph;
use cudnn_graph::rng::SplitMix64;
use half::bf16;

graph! {
    #[intermediate(bf16)]
    pub Block<const E: usize, const HQ: usize, const HKV: usize, const D: usize, const FF: usize, dyn B, dyn S>(
        x: bf16[B, S, E],
        g1: bf16[1, 1, E],
        wqkv: bf16[1, E, (HQ + 2 * HKV) * D],
        wo: bf16[1, HQ * D, E],
        g2: bf16[1, 1, E],
        w1: bf16[1, E, FF],
        w2: bf16[1, FF, E],
    ) -> (y: bf16[B, S, E]) {
        let h = rmsnorm(x, g1, 1e-5);
        let qkv = reshape(matmul(h, wqkv), shape = [B, S, HQ + 2 * HKV, D]);
        let q = transpose(slice(qkv, start = [0, 0, 0, 0], limit = [B, S, HQ, D]), permutation = [0, 2, 1, 3]);
        let k = transpose(slice(qkv, start = [0, 0, HQ, 0], limit = [B, S, HQ + HKV, D]), permutation = [0, 2, 1, 3]);
        let v = transpose(
            slice(qkv, start = [0, 0, HQ + HKV, 0], limit = [B, S, HQ + 2 * HKV, D]),
            permutation = [0, 2, 1, 3],
        );
        let o = sdpa(q, k, v, causal = true);
        let merged = reshape(transpose(o, permutation = [0, 2, 1, 3]), shape = [B, S, HQ * D]);
        let x2 = add(matmul(merged, wo), x);
        let u = gelu(matmul(rmsnorm(x2, g2, 1e-5), w1));
        y = add(matmul(u, w2), x2);
    }
}

/// The block's weights (host), `E` model width, `QD = HQ·D`, `KVD = HKV·D`, `FF` MLP width;
/// `wqkv` is `[wq | wk | wv]`, each row of E the three projections' rows side by side.
struct Weights {
    g1: Vec<bf16>,
    wqkv: Vec<bf16>,
    wo: Vec<bf16>,
    g2: Vec<bf16>,
    w1: Vec<bf16>,
    w2: Vec<bf16>,
}

/// Fixed-seed inputs in [-scale, scale), never all zeros.
fn random(seed: u64, n: usize, scale: f64) -> Vec<bf16> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| bf16::from_f64(rng.uniform(-scale, scale))).collect()
}

impl Weights {
    fn new(e: usize, qd: usize, kvd: usize, ff: usize) -> Self {
        let s = |fan_in: usize| 1.0 / (fan_in as f64).sqrt();
        Weights {
            g1: random(1, e, 1.0).iter().map(|v| bf16::from_f64(1.0 + 0.1 * v.to_f64())).collect(),
            wqkv: packed_rows(&[
                (random(2, e * qd, s(e)), qd),
                (random(3, e * kvd, s(e)), kvd),
                (random(4, e * kvd, s(e)), kvd),
            ]),
            wo: random(5, qd * e, s(qd)),
            g2: random(6, e, 1.0).iter().map(|v| bf16::from_f64(1.0 + 0.1 * v.to_f64())).collect(),
            w1: random(7, e * ff, s(e)),
            w2: random(8, ff * e, s(ff)),
        }
    }
}

/// Row-major matrices of one row count, each `(values, columns)`, joined along their columns.
fn packed_rows(parts: &[(Vec<bf16>, usize)]) -> Vec<bf16> {
    let rows = parts.first().map_or(0, |(v, c)| v.len() / c);
    (0..rows).flat_map(|r| parts.iter().flat_map(move |(v, c)| v[r * c..(r + 1) * c].iter().copied())).collect()
}

/// The block on the CPU reference engine.
fn reference<const E: usize, const HQ: usize, const HKV: usize, const D: usize, const FF: usize>(
    b: usize,
    s: usize,
    x: &[bf16],
    w: &Weights,
) -> Result<Vec<bf16>, cudnn_graph::ArgError> {
    let inputs = BlockInputs { x, g1: &w.g1, wqkv: &w.wqkv, wo: &w.wo, g2: &w.g2, w1: &w.w1, w2: &w.w2 };
    Ok(Block::<E, HQ, HKV, D, FF>::new(b, s).reference(inputs)?.y)
}

fn relative_error(got: &[bf16], want: &[bf16]) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (g.to_f64(), w.to_f64());
        if g.is_nan() {
            return f64::INFINITY;
        }
        num += (g - w) * (g - w);
        den += w * w;
    }
    (num / den).sqrt()
}

// The small block: E = 128, 4 query heads and 2 key/value heads of 32, MLP 512.
const SMALL: (usize, usize) = (2, 48);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (b, s) = SMALL;
    let w = Weights::new(128, 128, 64, 512);
    let x = random(9, b * s * 128, 1.0);
    let start = std::time::Instant::now();
    let y = reference::<128, 4, 2, 32, 512>(b, s, &x, &w)?;
    let checksum: f64 = y.iter().map(|v| v.to_f64()).sum();
    println!(
        "cpu reference: block E=128 heads 4/2 x 32, B={b} S={s}: y checksum {checksum:.4} ({:.0} ms)",
        start.elapsed().as_secs_f64() * 1e3
    );
    if std::env::args().any(|a| a == "--gpu") {
        gpu::run(&x, &w, &y)?;
    }
    Ok(())
}

#[cfg(feature = "cudnn")]
mod gpu {
    use std::sync::Arc;

    use cudnn_graph::backend::cudarc::driver::sys::CUevent_flags;
    use cudnn_graph::backend::cudarc::driver::{CudaSlice, CudaStream};
    use cudnn_graph::backend::{BuildOptions, Cudnn};
    use half::bf16;

    use super::*;

    /// Builds the block of these widths, runs it `reps + 1` times and returns y, the median
    /// device time in µs and the build time in ms; prints its parts.
    fn block<const E: usize, const HQ: usize, const HKV: usize, const D: usize, const FF: usize>(
        stream: &Arc<CudaStream>,
        cudnn: &Cudnn,
        (b, s): (usize, usize),
        x: &[bf16],
        w: &Weights,
        reps: usize,
    ) -> Result<(Vec<bf16>, f64, f64), Box<dyn std::error::Error>> {
        let start = std::time::Instant::now();
        let plan = Block::<E, HQ, HKV, D, FF>::new(b, s).build(cudnn, &BuildOptions::default())?;
        let build_ms = start.elapsed().as_secs_f64() * 1e3;
        let p = plan.plan();
        println!(
            "block E={E} heads {HQ}/{HKV} x {D} MLP {FF}, B={b} S={s}: {} parts, arena {} B, workspace {} B",
            p.parts().len(),
            p.arena_bytes(),
            p.workspace_size()
        );
        for (k, part) in p.parts().iter().enumerate() {
            println!("  part {k}: {part}");
        }
        let up = |v: &[bf16]| stream.clone_htod(v);
        let (x_d, g1, wqkv, wo, g2, w1, w2) =
            (up(x)?, up(&w.g1)?, up(&w.wqkv)?, up(&w.wo)?, up(&w.g2)?, up(&w.w1)?, up(&w.w2)?);
        let mut y = stream.alloc_zeros::<bf16>(b * s * E)?;
        let mut ws = stream.alloc_zeros::<u8>(p.workspace_size().max(1))?;
        let run = |y: &mut CudaSlice<bf16>, ws: &mut CudaSlice<u8>| {
            let args = BlockArgs { x: &x_d, g1: &g1, wqkv: &wqkv, wo: &wo, g2: &g2, w1: &w1, w2: &w2, y };
            plan.execute(cudnn, args, Some(ws))
        };
        run(&mut y, &mut ws)?;
        let ctx = stream.context();
        let mut samples = Vec::with_capacity(reps);
        for _ in 0..reps {
            let start = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
            let end = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
            start.record(stream)?;
            run(&mut y, &mut ws)?;
            end.record(stream)?;
            samples.push(f64::from(start.elapsed_ms(&end)?) * 1e3);
        }
        samples.sort_by(f64::total_cmp);
        Ok((stream.clone_dtoh(&y)?, samples[reps / 2], build_ms))
    }

    pub fn run(x: &[bf16], w: &Weights, want: &[bf16]) -> Result<(), Box<dyn std::error::Error>> {
        let stream = cudnn_graph::backend::cuda_context(0)?.default_stream();
        let cudnn = Cudnn::new(stream.clone())?;
        let (got, us, ms) = block::<128, 4, 2, 32, 512>(&stream, &cudnn, SMALL, x, w, 5)?;
        println!(
            "cudnn: small block y relative error vs the CPU reference {:.3e} ({us:.1} µs per block, built in {ms:.0} ms)",
            relative_error(&got, want)
        );
        // A large block: E = 2048, 16 query heads and 4 key/value heads of 128, MLP 8192, 4 × 1024 tokens.
        let (b, s) = (4, 1024);
        let w = Weights::new(2048, 2048, 512, 8192);
        let x = random(10, b * s * 2048, 1.0);
        let (y, us, ms) = block::<2048, 16, 4, 128, 8192>(&stream, &cudnn, (b, s), &x, &w, 20)?;
        let finite = y.iter().all(|v| v.to_f64().is_finite());
        println!(
            "cudnn: large block {us:.1} µs per block (median of 20), built in {ms:.0} ms; outputs finite: {finite}"
        );
        Ok(())
    }
}

#[cfg(not(feature = "cudnn"))]
mod gpu {
    use super::*;
    pub fn run(_: &[bf16], _: &Weights, _: &[bf16]) -> Result<(), Box<dyn std::error::Error>> {
        Err("this build has no cuDNN backend: build with the default `cudnn` feature".into())
    }
}
