//! A causal grouped-query attention block declared with `graph!`: the forward pass with the
//! softmax statistics training needs, and its backward pass. Runs on the CPU reference engine
//! (default) or on cuDNN (`--gpu`, compared with the reference).
//!
//! ```text
//! cargo run --example attention                    # CPU reference engine
//! cargo run --release --example attention -- --gpu
//! cargo run --example attention -- --structure g.json   # also write the forward graph's JSON
//! ```
//!
//! 8 query heads share 2 key/value heads (GQA); the sequence length is a runtime dim. The shape
//! rules ran at compile time: change `k` to 3 heads, or its head dim to 32, and this file no
//! longer compiles, with the error on the `sdpa` call.

use cudnn_graph::graph;
use cudnn_graph::rng::SplitMix64;
use half::bf16;

graph! {
    /// Causal GQA attention, training forward: O and the log-sum-exp statistics.
    pub AttentionForward<dyn B, dyn S>(
        q: bf16[B, 8, S, 64],
        k: bf16[B, 2, S, 64],
        v: bf16[B, 2, S, 64],
    ) -> (o: bf16[B, 8, S, 64], stats: f32[B, 8, S, 1]) {
        let (out, lse) = sdpa(q, k, v, causal = true, training = true);
        o = out;
        stats = lse;
    }

    /// Its backward: the gradients of Q, K and V (K's and V's summed over each group of heads).
    pub AttentionBackward<dyn B, dyn S>(
        q: bf16[B, 8, S, 64],
        k: bf16[B, 2, S, 64],
        v: bf16[B, 2, S, 64],
        o: bf16[B, 8, S, 64],
        d_o: bf16[B, 8, S, 64],
        stats: f32[B, 8, S, 1],
    ) -> (d_q: bf16[B, 8, S, 64], d_k: bf16[B, 2, S, 64], d_v: bf16[B, 2, S, 64]) {
        let (dq, dk, dv) = sdpa_backward(q, k, v, o, d_o, stats, causal = true);
        d_q = dq;
        d_k = dk;
        d_v = dv;
    }
}

const B: usize = 2;
const S: usize = 96;

/// Fixed-seed inputs in [-1, 1).
fn random(seed: u64, n: usize) -> Vec<bf16> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| bf16::from_f64(rng.uniform(-1.0, 1.0))).collect()
}

fn summary<T: Copy + Into<f64>>(name: &str, x: &[T]) -> String {
    let sum: f64 = x.iter().map(|v| (*v).into()).sum();
    let max = x.iter().map(|v| (*v).into().abs()).fold(0.0, f64::max);
    format!("{name}: {} values, sum {sum:.4}, max |x| {max:.4}", x.len())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = std::env::args().any(|a| a == "--gpu");
    let fwd = AttentionForward::new(B, S);
    let bwd = AttentionBackward::new(B, S);
    println!("{}", fwd.graph()?);
    println!("{}", bwd.graph()?);
    if let Some(path) = std::env::args().skip_while(|a| a != "--structure").nth(1) {
        std::fs::write(&path, cudnn_graph::serialize::structure_to_json(&fwd.graph()?))?;
    }
    let (q, k, v) = (random(1, B * 8 * S * 64), random(2, B * 2 * S * 64), random(3, B * 2 * S * 64));
    let d_o = random(4, B * 8 * S * 64);

    let f = fwd.reference(AttentionForwardInputs { q: &q, k: &k, v: &v })?;
    let to_f64 = |x: &[bf16]| x.iter().map(|v| v.to_f64()).collect::<Vec<f64>>();
    println!("cpu reference: {}", summary("o", &to_f64(&f.o)));
    let g = bwd.reference(AttentionBackwardInputs { q: &q, k: &k, v: &v, o: &f.o, d_o: &d_o, stats: &f.stats })?;
    for (name, x) in [("d_q", &g.d_q), ("d_k", &g.d_k), ("d_v", &g.d_v)] {
        println!("cpu reference: {}", summary(name, &to_f64(x)));
    }

    if gpu {
        gpu_run(&fwd, &bwd, [&q, &k, &v, &d_o], &f, &g)?;
    } else {
        println!("(pass --gpu to run the same graphs on cuDNN)");
    }
    Ok(())
}

#[cfg(feature = "cudnn")]
fn gpu_run(
    fwd: &AttentionForward,
    bwd: &AttentionBackward,
    [q, k, v, d_o]: [&Vec<bf16>; 4],
    f: &AttentionForwardOutputs,
    g: &AttentionBackwardOutputs,
) -> Result<(), Box<dyn std::error::Error>> {
    use cudnn_graph::backend::cuda_context;
    use cudnn_graph::backend::{BuildOptions, Cudnn};

    let rel = |got: &[bf16], want: &[bf16]| {
        let (mut num, mut den) = (0.0, 0.0);
        for (a, b) in got.iter().zip(want) {
            let (a, b) = (a.to_f64(), b.to_f64());
            num += (a - b) * (a - b);
            den += b * b;
        }
        (num / den.max(f64::MIN_POSITIVE)).sqrt()
    };
    let stream = cuda_context(0)?.default_stream();
    let cudnn = Cudnn::new(stream.clone())?;
    let fplan = fwd.build(&cudnn, &BuildOptions::default())?;
    let bplan = bwd.build(&cudnn, &BuildOptions::default())?;
    println!(
        "cuDNN {}: forward {}, backward {}",
        cudnn.version(),
        fplan.plan().selected().tag(),
        bplan.plan().selected().tag()
    );
    let (q_d, k_d, v_d, do_d) =
        (stream.clone_htod(q)?, stream.clone_htod(k)?, stream.clone_htod(v)?, stream.clone_htod(d_o)?);
    let mut o_d = stream.alloc_zeros::<bf16>(f.o.len())?;
    let mut stats_d = stream.alloc_zeros::<f32>(f.stats.len())?;
    let mut ws = stream.alloc_zeros::<u8>(fplan.workspace_size().max(bplan.workspace_size()).max(1))?;
    fplan.execute(
        &cudnn,
        AttentionForwardArgs { q: &q_d, k: &k_d, v: &v_d, o: &mut o_d, stats: &mut stats_d },
        Some(&mut ws),
    )?;
    println!("gpu: o relative error {:.3e}", rel(&stream.clone_dtoh(&o_d)?, &f.o));
    let mut dq_d = stream.alloc_zeros::<bf16>(g.d_q.len())?;
    let mut dk_d = stream.alloc_zeros::<bf16>(g.d_k.len())?;
    let mut dv_d = stream.alloc_zeros::<bf16>(g.d_v.len())?;
    bplan.execute(
        &cudnn,
        AttentionBackwardArgs {
            q: &q_d,
            k: &k_d,
            v: &v_d,
            o: &o_d,
            d_o: &do_d,
            stats: &stats_d,
            d_q: &mut dq_d,
            d_k: &mut dk_d,
            d_v: &mut dv_d,
        },
        Some(&mut ws),
    )?;
    for (name, got, want) in [("d_q", &dq_d, &g.d_q), ("d_k", &dk_d, &g.d_k), ("d_v", &dv_d, &g.d_v)] {
        println!("gpu: {name} relative error {:.3e}", rel(&stream.clone_dtoh(got)?, want));
    }
    Ok(())
}

#[cfg(not(feature = "cudnn"))]
fn gpu_run(
    _: &AttentionForward,
    _: &AttentionBackward,
    _: [&Vec<bf16>; 4],
    _: &AttentionForwardOutputs,
    _: &AttentionBackwardOutputs,
) -> Result<(), Box<dyn std::error::Error>> {
    Err("built without the `cudnn` feature".into())
}
