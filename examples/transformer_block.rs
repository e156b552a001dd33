//! A pre-norm transformer block from `graph!` graphs: RMSNorm → Q/K/V projections → causal GQA
//! attention → output projection + residual → RMSNorm → MLP (GELU) + residual.
//!
//! ```text
//! cargo run --release --example transformer_block            # CPU reference engine, a small block
//! cargo run --release --example transformer_block -- --gpu   # cuDNN: the small block checked against
//!                                                            # the CPU, then a large one timed per graph
//! ```
//!
//! Each graph is one fused cuDNN kernel. Tensors flow between graphs in one layout: activations
//! `[1, T, E]` (T = B·S tokens), and Q/K/V/O as logical `[B, H, S, D]` stored BSHD (`order [0, 2,
//! 1, 3]`), which is exactly the `[1, T, H·D]` a projection writes, so no copies sit between them.
//! cuDNN 9.19 does not fuse RMSNorm into the following matmul (its deviceless planning refuses the
//! pattern), so the norms are graphs of their own.

use cudnn_graph::graph;
use cudnn_graph::rng::SplitMix64;
use half::bf16;

graph! {
    pub RmsNorm<const E: usize, dyn T>(x: bf16[1, T, E], g: bf16[1, 1, E]) -> (y: bf16[1, T, E]) {
        y = rmsnorm(x, g, 1e-5);
    }

    pub Linear<const IN: usize, const OUT: usize, dyn T>(x: bf16[1, T, IN], w: bf16[1, IN, OUT]) -> (y: bf16[1, T, OUT]) {
        y = matmul(x, w);
    }

    pub LinearGelu<const IN: usize, const OUT: usize, dyn T>(x: bf16[1, T, IN], w: bf16[1, IN, OUT]) -> (y: bf16[1, T, OUT]) {
        y = gelu(matmul(x, w));
    }

    pub LinearResidual<const IN: usize, const OUT: usize, dyn T>(
        x: bf16[1, T, IN],
        w: bf16[1, IN, OUT],
        r: bf16[1, T, OUT],
    ) -> (y: bf16[1, T, OUT]) {
        y = add(matmul(x, w), r);
    }

    pub Attention<const HQ: usize, const HKV: usize, const D: usize, dyn B, dyn S>(
        q: bf16[B, HQ, S, D] order [0, 2, 1, 3],
        k: bf16[B, HKV, S, D] order [0, 2, 1, 3],
        v: bf16[B, HKV, S, D] order [0, 2, 1, 3],
    ) -> (o: bf16[B, HQ, S, D] order [0, 2, 1, 3]) {
        o = sdpa(q, k, v, causal = true);
    }
}

/// The block's weights (host), `E` model width, `QD = HQ·D`, `KVD = HKV·D`, `FF` MLP width.
struct Weights {
    g1: Vec<bf16>,
    wq: Vec<bf16>,
    wk: Vec<bf16>,
    wv: Vec<bf16>,
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
            wq: random(2, e * qd, s(e)),
            wk: random(3, e * kvd, s(e)),
            wv: random(4, e * kvd, s(e)),
            wo: random(5, qd * e, s(qd)),
            g2: random(6, e, 1.0).iter().map(|v| bf16::from_f64(1.0 + 0.1 * v.to_f64())).collect(),
            w1: random(7, e * ff, s(e)),
            w2: random(8, ff * e, s(ff)),
        }
    }
}

/// A block of fixed widths; `B` and `S` are bound per call.
struct Block<
    const E: usize,
    const HQ: usize,
    const HKV: usize,
    const D: usize,
    const QD: usize,
    const KVD: usize,
    const FF: usize,
>;

impl<
        const E: usize,
        const HQ: usize,
        const HKV: usize,
        const D: usize,
        const QD: usize,
        const KVD: usize,
        const FF: usize,
    > Block<E, HQ, HKV, D, QD, KVD, FF>
{
    /// The block on the CPU reference engine.
    fn reference(b: usize, s: usize, x: &[bf16], w: &Weights) -> Result<Vec<bf16>, cudnn_graph::ArgError> {
        let t = b * s;
        let h = RmsNorm::<E>::new(t).reference(RmsNormInputs { x, g: &w.g1 })?.y;
        let q = Linear::<E, QD>::new(t).reference(LinearInputs { x: &h, w: &w.wq })?.y;
        let k = Linear::<E, KVD>::new(t).reference(LinearInputs { x: &h, w: &w.wk })?.y;
        let v = Linear::<E, KVD>::new(t).reference(LinearInputs { x: &h, w: &w.wv })?.y;
        let o = Attention::<HQ, HKV, D>::new(b, s).reference(AttentionInputs { q: &q, k: &k, v: &v })?.o;
        let x2 = LinearResidual::<QD, E>::new(t).reference(LinearResidualInputs { x: &o, w: &w.wo, r: x })?.y;
        let h2 = RmsNorm::<E>::new(t).reference(RmsNormInputs { x: &x2, g: &w.g2 })?.y;
        let u = LinearGelu::<E, FF>::new(t).reference(LinearGeluInputs { x: &h2, w: &w.w1 })?.y;
        Ok(LinearResidual::<FF, E>::new(t).reference(LinearResidualInputs { x: &u, w: &w.w2, r: &x2 })?.y)
    }
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
type Small = Block<128, 4, 2, 32, 128, 64, 512>;
const SMALL: (usize, usize) = (2, 48);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (b, s) = SMALL;
    let w = Weights::new(128, 128, 64, 512);
    let x = random(9, b * s * 128, 1.0);
    let start = std::time::Instant::now();
    let y = Small::reference(b, s, &x, &w)?;
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

    /// Device state of one block: weights, activations, built plans, workspace.
    struct DeviceBlock<'a> {
        stream: &'a Arc<CudaStream>,
        ws: CudaSlice<u8>,
        timings: Vec<(&'static str, f64, f64)>,
    }

    impl DeviceBlock<'_> {
        /// Runs `f` (one graph execute) `reps` times between CUDA events: (median µs, build ms).
        fn time(
            &mut self,
            name: &'static str,
            build_ms: f64,
            reps: usize,
            mut f: impl FnMut(&mut CudaSlice<u8>) -> Result<(), cudnn_graph::Error>,
        ) -> Result<(), Box<dyn std::error::Error>> {
            let ctx = self.stream.context();
            let mut samples = Vec::with_capacity(reps);
            f(&mut self.ws)?;
            for _ in 0..reps {
                let (start, end) = (
                    ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
                    ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
                );
                start.record(self.stream)?;
                f(&mut self.ws)?;
                end.record(self.stream)?;
                samples.push(f64::from(start.elapsed_ms(&end)?) * 1e3);
            }
            samples.sort_by(f64::total_cmp);
            self.timings.push((name, samples[reps / 2], build_ms));
            Ok(())
        }
    }

    fn build_ms<T>(f: impl FnOnce() -> Result<T, cudnn_graph::Error>) -> Result<(T, f64), cudnn_graph::Error> {
        let t = std::time::Instant::now();
        let v = f()?;
        Ok((v, t.elapsed().as_secs_f64() * 1e3))
    }

    /// Builds and runs the block of these widths on the GPU; returns y and the per-graph table.
    #[allow(clippy::type_complexity)]
    fn block<
        const E: usize,
        const HQ: usize,
        const HKV: usize,
        const D: usize,
        const QD: usize,
        const KVD: usize,
        const FF: usize,
    >(
        stream: &Arc<CudaStream>,
        cudnn: &Cudnn,
        b: usize,
        s: usize,
        x: &[bf16],
        w: &Weights,
        reps: usize,
    ) -> Result<(Vec<bf16>, Vec<(&'static str, f64, f64)>), Box<dyn std::error::Error>> {
        let t = b * s;
        let o = BuildOptions::default();
        let (norm, norm_ms) = build_ms(|| RmsNorm::<E>::new(t).build(cudnn, &o))?;
        let (q_proj, q_ms) = build_ms(|| Linear::<E, QD>::new(t).build(cudnn, &o))?;
        let (kv_proj, kv_ms) = build_ms(|| Linear::<E, KVD>::new(t).build(cudnn, &o))?;
        let (attn, attn_ms) = build_ms(|| Attention::<HQ, HKV, D>::new(b, s).build(cudnn, &o))?;
        let (out_proj, out_ms) = build_ms(|| LinearResidual::<QD, E>::new(t).build(cudnn, &o))?;
        let (up, up_ms) = build_ms(|| LinearGelu::<E, FF>::new(t).build(cudnn, &o))?;
        let (down, down_ms) = build_ms(|| LinearResidual::<FF, E>::new(t).build(cudnn, &o))?;
        let ws_bytes = [
            norm.workspace_size(),
            q_proj.workspace_size(),
            kv_proj.workspace_size(),
            attn.workspace_size(),
            out_proj.workspace_size(),
            up.workspace_size(),
            down.workspace_size(),
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
        .max(1);
        let up_d = |v: &[bf16]| stream.clone_htod(v);
        let (x_d, g1, wq, wk, wv, wo, g2, w1, w2) = (
            up_d(x)?,
            up_d(&w.g1)?,
            up_d(&w.wq)?,
            up_d(&w.wk)?,
            up_d(&w.wv)?,
            up_d(&w.wo)?,
            up_d(&w.g2)?,
            up_d(&w.w1)?,
            up_d(&w.w2)?,
        );
        let alloc = |n: usize| stream.alloc_zeros::<bf16>(n);
        let (mut h, mut q, mut k, mut v, mut attn_o) =
            (alloc(t * E)?, alloc(t * QD)?, alloc(t * KVD)?, alloc(t * KVD)?, alloc(t * QD)?);
        let (mut x2, mut h2, mut u, mut y) = (alloc(t * E)?, alloc(t * E)?, alloc(t * FF)?, alloc(t * E)?);
        let mut dev = DeviceBlock { stream, ws: stream.alloc_zeros::<u8>(ws_bytes)?, timings: Vec::new() };
        dev.time("rmsnorm 1", norm_ms, reps, |ws| {
            norm.execute(cudnn, RmsNormArgs { x: &x_d, g: &g1, y: &mut h }, Some(ws))
        })?;
        dev.time("q projection", q_ms, reps, |ws| {
            q_proj.execute(cudnn, LinearArgs { x: &h, w: &wq, y: &mut q }, Some(ws))
        })?;
        dev.time("k projection", kv_ms, reps, |ws| {
            kv_proj.execute(cudnn, LinearArgs { x: &h, w: &wk, y: &mut k }, Some(ws))
        })?;
        dev.time("v projection", kv_ms, reps, |ws| {
            kv_proj.execute(cudnn, LinearArgs { x: &h, w: &wv, y: &mut v }, Some(ws))
        })?;
        dev.time("causal GQA attention", attn_ms, reps, |ws| {
            attn.execute(cudnn, AttentionArgs { q: &q, k: &k, v: &v, o: &mut attn_o }, Some(ws))
        })?;
        dev.time("out projection + residual", out_ms, reps, |ws| {
            out_proj.execute(cudnn, LinearResidualArgs { x: &attn_o, w: &wo, r: &x_d, y: &mut x2 }, Some(ws))
        })?;
        dev.time("rmsnorm 2", norm_ms, reps, |ws| {
            norm.execute(cudnn, RmsNormArgs { x: &x2, g: &g2, y: &mut h2 }, Some(ws))
        })?;
        dev.time("mlp up + gelu", up_ms, reps, |ws| {
            up.execute(cudnn, LinearGeluArgs { x: &h2, w: &w1, y: &mut u }, Some(ws))
        })?;
        dev.time("mlp down + residual", down_ms, reps, |ws| {
            down.execute(cudnn, LinearResidualArgs { x: &u, w: &w2, r: &x2, y: &mut y }, Some(ws))
        })?;
        Ok((stream.clone_dtoh(&y)?, dev.timings))
    }

    fn table(title: &str, rows: &[(&'static str, f64, f64)]) {
        println!("{title}");
        println!("  {:<28} {:>12} {:>10}", "graph", "device µs", "build ms");
        for (name, us, ms) in rows {
            println!("  {name:<28} {us:>12.1} {ms:>10.1}");
        }
        println!("  {:<28} {:>12.1}", "block", rows.iter().map(|r| r.1).sum::<f64>());
    }

    pub fn run(x: &[bf16], w: &Weights, want: &[bf16]) -> Result<(), Box<dyn std::error::Error>> {
        let stream = cudnn_graph::backend::cuda_context(0)?.default_stream();
        let cudnn = Cudnn::new(stream.clone())?;
        let (b, s) = SMALL;
        let (got, rows) = block::<128, 4, 2, 32, 128, 64, 512>(&stream, &cudnn, b, s, x, w, 5)?;
        println!("cudnn: small block y relative error vs the CPU reference {:.3e}", relative_error(&got, want));
        table("small block (per graph, median of 5):", &rows);
        // A large block: E = 2048, 16 query heads and 4 key/value heads of 128, MLP 8192, 4 × 1024 tokens.
        let (b, s) = (4, 1024);
        let w = Weights::new(2048, 2048, 512, 8192);
        let x = random(10, b * s * 2048, 1.0);
        let (y, rows) = block::<2048, 16, 4, 128, 2048, 512, 8192>(&stream, &cudnn, b, s, &x, &w, 20)?;
        let finite = y.iter().all(|v| v.to_f64().is_finite());
        table(&format!("large block B={b} S={s} E=2048 (per graph, median of 20; outputs finite: {finite}):"), &rows);
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
