//! Ragged (packed, THD) prefill attention against the padded batch on the GPU (issue 33's
//! target: at 45 % padding, at least 1.5× faster than the padded batch, equal results).
//!
//! ```text
//! cargo run --release --example bench_ragged -- [--json PATH] [--quick] [--batches 8,16]
//!     [--lens 2048,4096,8192] [--padding 0.45] [--guard 1.5] [--budget-s 240]
//! ```
//!
//! Each case is bf16 causal prefill, 32 query heads over 8 KV heads, d 128, `B` sequences of at
//! most `L` tokens whose lengths are stratified so that exactly the `--padding` fraction of the
//! `B·L` slots is padding (lengths `L·(1 − 2p·(i + ½)/B)` shuffled, seeded). Three plans over the
//! same tokens:
//!
//! - `ragged`: Q, K, V, O packed back to back (THD) with their ragged offsets and the lengths
//!   (`ragged = true, padding_mask = true`);
//! - `padded`: the padded batch `[B, L]` (BSHD), plain causal attention: the batch a framework
//!   without ragged attention runs. Causal top-left masking means a valid query sees only valid
//!   keys, so its valid rows are the packed rows' exactly;
//! - `padded_masked`: the padded batch with the lengths (`padding_mask = true`), for reference.
//!
//! Device time is `bench`'s batched method (CUDA events around batches of back-to-back executes,
//! median of samples, per call; `host_us` the host time per execute). Each row has `us`, the effective TFLOP/s over the packed tokens
//! (`4·H·D·Σ len²/2` flops, causal), the speedup of `ragged` over `padded` (`speedup`) and over
//! `padded_masked`, and the comparison of the outputs on every valid token: `rel_err` (relative
//! error of ragged against padded over the packed tokens), `max_abs_diff` and the fraction of
//! bit-identical elements. `--guard X` exits 1 if a case's speedup is below X or its outputs
//! differ beyond cudnn-frontend's bf16 tolerance (relative error 2e-2), naming the case.

#[cfg(not(feature = "cudnn"))]
fn main() {
    eprintln!("bench_ragged runs on the GPU: build it with the `cudnn` feature (the default)");
    std::process::exit(2);
}

#[cfg(feature = "cudnn")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    bench::main()
}

#[cfg(feature = "cudnn")]
#[path = "common/flags.rs"]
#[allow(dead_code)] // each example uses part of it
mod flags;

#[cfg(feature = "cudnn")]
#[path = "common/json_lines.rs"]
mod json_lines;
#[cfg(feature = "cudnn")]
#[path = "common/timing.rs"]
mod timing;

#[cfg(feature = "cudnn")]
mod bench {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::time::Instant;

    use cudnn_graph::backend::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
    use cudnn_graph::backend::{BuildOptions, Cudnn, ExecutionPlan};
    use cudnn_graph::ops::sdpa::ragged::thd_offsets;
    use cudnn_graph::ops::AttrValue;
    use cudnn_graph::rng::SplitMix64;
    use cudnn_graph::{DataType, Graph, GraphBuilder, Operand};
    use half::bf16;
    use serde_json::json;

    use super::flags::Flags;
    use super::json_lines::Out;
    use super::timing::{device_time, host_time, Result};

    const H_Q: i64 = 32;
    const H_KV: i64 = 8;
    const D: i64 = 128;
    /// cudnn-frontend's bf16 tolerance (relative error).
    const TOLERANCE: f64 = 2e-2;

    struct Args {
        json: Option<String>,
        batches: Vec<i64>,
        lens: Vec<i64>,
        padding: f64,
        guard: Option<f64>,
        budget_s: f64,
    }

    fn args() -> Result<Args> {
        let f = Flags::from_env();
        let quick = f.has("--quick");
        let padding: f64 = f.or("--padding", 0.45)?;
        if !(0.0..0.5).contains(&padding) {
            return Err(format!("--padding {padding}: stratified lengths take a fraction in [0, 0.5)").into());
        }
        Ok(Args {
            json: f.value("--json"),
            batches: f.list("--batches", if quick { &[16] } else { &[8, 16] })?,
            lens: f.list("--lens", if quick { &[4096] } else { &[2048, 4096, 8192] })?,
            padding,
            guard: f.parsed("--guard")?,
            budget_s: f.or("--budget-s", 240.0)?,
        })
    }

    /// `b` lengths of at most `l` whose padding is exactly `p` of `b·l` (up to rounding):
    /// `l·(1 − 2p·(i + ½)/b)`, shuffled.
    fn lengths(b: i64, l: i64, p: f64, rng: &mut SplitMix64) -> Vec<i32> {
        let mut lens: Vec<i32> = (0..b)
            .map(|i| ((l as f64) * (1.0 - 2.0 * p * (i as f64 + 0.5) / b as f64)).round().max(1.0) as i32)
            .collect();
        for i in (1..lens.len()).rev() {
            lens.swap(i, rng.below(i + 1));
        }
        lens
    }

    /// A `[b, h, l, D]` port laid out BSHD/THD (token-major).
    fn port(g: &mut GraphBuilder, name: &str, b: i64, h: i64, l: i64) -> Result<cudnn_graph::TensorId> {
        let t = g.input(name, DataType::BF16, &[b, h, l, D])?;
        g.set_dim_order(t, &[0, 2, 1, 3])?;
        Ok(t)
    }

    /// The plan of `variant` (`ragged`, `padded`, `padded_masked`) at `(b, l)`.
    fn graph(variant: &str, b: i64, l: i64) -> Result<Graph> {
        let mut g = GraphBuilder::new(variant);
        let mut ins =
            vec![port(&mut g, "q", b, H_Q, l)?, port(&mut g, "k", b, H_KV, l)?, port(&mut g, "v", b, H_KV, l)?];
        let mut attrs: Vec<(String, AttrValue)> = vec![("causal".into(), true.into())];
        if variant != "padded" {
            ins.push(g.input("seq_len_q", DataType::I32, &[b, 1, 1, 1])?);
            ins.push(g.input("seq_len_kv", DataType::I32, &[b, 1, 1, 1])?);
            attrs.push(("padding_mask".into(), true.into()));
        }
        if variant == "ragged" {
            let off_q = g.input("offsets_q", DataType::I32, &[b + 1, 1, 1, 1])?;
            let off_kv = g.input("offsets_kv", DataType::I32, &[b + 1, 1, 1, 1])?;
            ins.extend([off_q, off_kv, off_kv, off_q]);
            attrs.push(("ragged".into(), true.into()));
        }
        let ins: Vec<Operand> = ins.into_iter().map(Operand::Tensor).collect();
        let o = g.op("sdpa", &ins, &attrs)?[0];
        let o = g.output(o, "o", DataType::BF16)?;
        g.set_dim_order(o, &[0, 2, 1, 3])?;
        Ok(g.build()?)
    }

    fn bf16_bytes(v: &[bf16]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_bits().to_ne_bytes()).collect()
    }

    fn bf16_of(bytes: &[u8]) -> Vec<bf16> {
        bytes.chunks_exact(2).map(|c| bf16::from_bits(u16::from_ne_bytes([c[0], c[1]]))).collect()
    }

    /// The padded token-major `[b, l, h, D]` batch `x` with each sequence's valid tokens moved to
    /// the front, back to back (the packed THD buffer; the tail is 0).
    fn pack(x: &[bf16], lens: &[i32], l: usize, h: usize) -> Vec<bf16> {
        let token = h * D as usize;
        let mut out = vec![bf16::ZERO; x.len()];
        let mut at = 0;
        for (b, &n) in lens.iter().enumerate() {
            let n = n as usize * token;
            out[at..at + n].copy_from_slice(&x[b * l * token..b * l * token + n]);
            at += n;
        }
        out
    }

    pub fn main() -> Result<()> {
        let a = args()?;
        let mut out = Out::create(a.json.as_ref())?;
        let ctx = cudnn_graph::backend::cuda_context(0)?;
        let stream = ctx.new_stream()?;
        let cudnn = Cudnn::new(stream.clone())?;
        let device = ctx.name()?;
        eprintln!("cuDNN {} on {device} (sm {:?})", cudnn.version(), cudnn.sm());
        let began = Instant::now();
        let mut failures = Vec::new();
        for &b in &a.batches {
            for &l in &a.lens {
                if began.elapsed().as_secs_f64() > a.budget_s {
                    eprintln!("budget of {} s spent: B={b} L={l} skipped", a.budget_s);
                    continue;
                }
                if let Some(why) = case(&mut out, &cudnn, &stream, (b, l), &a, &device)? {
                    failures.push(why);
                }
            }
        }
        if !failures.is_empty() {
            eprintln!("bench_ragged guard failed:\n  {}", failures.join("\n  "));
            std::process::exit(1);
        }
        Ok(())
    }

    /// One `(B, L)`: the three plans over the same tokens; `Some(reason)` where the guard fails.
    fn case(
        out: &mut Out,
        cudnn: &Cudnn,
        stream: &Arc<CudaStream>,
        (b, l): (i64, i64),
        a: &Args,
        device: &str,
    ) -> Result<Option<String>> {
        let mut rng = SplitMix64::new(0x007a_99ed ^ (b as u64 * 7919 + l as u64));
        let lens = lengths(b, l, a.padding, &mut rng);
        let total: i64 = lens.iter().map(|&n| i64::from(n)).sum();
        let padding = 1.0 - total as f64 / (b * l) as f64;
        let (off_q, off_kv) = (
            thd_offsets(&lens, H_Q, D).ok_or("offsets overflow")?,
            thd_offsets(&lens, H_KV, D).ok_or("offsets overflow")?,
        );
        let to_i32 = |v: &[i64]| v.iter().map(|&x| i32::try_from(x)).collect::<std::result::Result<Vec<i32>, _>>();
        let (off_q, off_kv) = (to_i32(&off_q)?, to_i32(&off_kv)?);
        let (lu, bu) = (l as usize, b as usize);
        let random = |rng: &mut SplitMix64, n: usize| -> Vec<bf16> {
            (0..n).map(|_| bf16::from_f64(rng.uniform(-1.0, 1.0))).collect()
        };
        let q = random(&mut rng, bu * lu * (H_Q * D) as usize);
        let k = random(&mut rng, bu * lu * (H_KV * D) as usize);
        let v = random(&mut rng, bu * lu * (H_KV * D) as usize);
        let i32_bytes = |v: &[i32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_ne_bytes()).collect() };
        let mut bufs: HashMap<(&str, &str), CudaSlice<u8>> = HashMap::new();
        for variant in ["padded", "ragged"] {
            let pk = |x: &[bf16], h: i64| if variant == "ragged" { pack(x, &lens, lu, h as usize) } else { x.to_vec() };
            bufs.insert((variant, "q"), stream.clone_htod(&bf16_bytes(&pk(&q, H_Q)))?);
            bufs.insert((variant, "k"), stream.clone_htod(&bf16_bytes(&pk(&k, H_KV)))?);
            bufs.insert((variant, "v"), stream.clone_htod(&bf16_bytes(&pk(&v, H_KV)))?);
            bufs.insert((variant, "o"), stream.clone_htod(&bf16_bytes(&vec![bf16::NAN; q.len()]))?);
        }
        for name in ["seq_len_q", "seq_len_kv"] {
            bufs.insert(("any", name), stream.clone_htod(&i32_bytes(&lens))?);
        }
        bufs.insert(("any", "offsets_q"), stream.clone_htod(&i32_bytes(&off_q))?);
        bufs.insert(("any", "offsets_kv"), stream.clone_htod(&i32_bytes(&off_kv))?);
        // Useful work: causal attention over the packed tokens.
        let flops: f64 = lens.iter().map(|&n| 4.0 * (H_Q * D) as f64 * (n as f64) * (n as f64) / 2.0).sum();
        let mut times: HashMap<&str, f64> = HashMap::new();
        let mut outputs: HashMap<&str, Vec<bf16>> = HashMap::new();
        for variant in ["ragged", "padded", "padded_masked"] {
            let g = graph(variant, b, l)?;
            // The lengths and offsets pass the rule on the host before any execute reads them.
            if variant == "ragged" {
                let values = [
                    ("seq_len_q", lens.as_slice().into()),
                    ("seq_len_kv", lens.as_slice().into()),
                    ("offsets_q", off_q.as_slice().into()),
                    ("offsets_kv", off_kv.as_slice().into()),
                ];
                cudnn_graph::reference::check_values(&g, &values)?;
            }
            let started = Instant::now();
            let plan = match ExecutionPlan::build(cudnn, &g, &BuildOptions::default()) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("B={b} L={l} {variant}: {e}");
                    continue;
                }
            };
            let build_ms = started.elapsed().as_secs_f64() * 1e3;
            let data = if variant == "ragged" { "ragged" } else { "padded" };
            let mut ws = stream.alloc_zeros::<u8>(plan.workspace_size().max(1))?;
            let (ws_ptr, _ws_guard) = ws.device_ptr_mut(stream);
            let mut guards = Vec::new();
            let mut io = Vec::new();
            for id in plan.layout().io() {
                let name = plan.graph().tensor(*id).name.as_str();
                let buf = bufs.get(&(data, name)).or_else(|| bufs.get(&("any", name))).ok_or("a buffer is missing")?;
                let (p, guard) = buf.device_ptr(stream);
                io.push(p);
                guards.push(guard);
            }
            // SAFETY: `io` holds live device buffers of every I/O tensor of the plan's graph, each
            // its tensor's full storage (the capacity `B·L·H·D` for packed ones) and `ws_ptr` a
            // workspace of the plan's size; all outlive every execute below.
            let mut run = || unsafe { plan.execute_raw(cudnn, &io, ws_ptr) }.map_err(Into::into);
            run()?;
            stream.synchronize()?;
            outputs.insert(variant, bf16_of(&stream.clone_dtoh(&bufs[&(data, "o")])?));
            let (us, us_min, runs, batch) = device_time(stream, &mut run)?;
            let (host_us, _, _) = host_time(stream, 5, 20, 40, &mut || {
                // SAFETY: as above.
                unsafe { plan.execute_raw(cudnn, &io, ws_ptr) }.expect("execute");
            });
            times.insert(variant, us);
            out.record(
                &format!("ragged_prefill_b{b}_l{l}"),
                variant,
                json!({
                    "B": b, "L": l, "H_q": H_Q, "H_kv": H_KV, "D": D, "padding": padding, "tokens": total,
                    "engine": plan.selected().tag(), "build_ms": build_ms, "us": us, "us_min": us_min,
                    "runs": runs, "inner": batch, "host_us": host_us, "tflops": flops / (us * 1e-6) / 1e12,
                    "device": device, "cudnn": cudnn.version(),
                }),
            );
            drop(guards);
        }
        // The outputs on every valid token: ragged's packed rows against the padded batch's.
        let (Some(r), Some(p)) = (outputs.get("ragged"), outputs.get("padded")) else {
            return Ok(Some(format!("B={b} L={l}: a plan did not build")));
        };
        let token = (H_Q * D) as usize;
        let (mut num, mut den, mut max_abs, mut same, mut n, mut unwritten) =
            (0.0, 0.0, 0.0f64, 0usize, 0usize, 0usize);
        let mut at = 0;
        for (seq, &len) in lens.iter().enumerate() {
            let count = len as usize * token;
            let padded = &p[seq * lu * token..seq * lu * token + count];
            for (x, y) in r[at..at + count].iter().zip(padded) {
                let (x, y) = (f64::from(x.to_f32()), f64::from(y.to_f32()));
                if x.is_nan() {
                    unwritten += 1;
                }
                num += (x - y) * (x - y);
                den += y * y;
                max_abs = max_abs.max((x - y).abs());
                same += usize::from(x.to_bits() == y.to_bits());
                n += 1;
            }
            at += count;
        }
        let rel_err = if den > 0.0 { (num / den).sqrt() } else { f64::INFINITY };
        let speedup = times.get("padded").zip(times.get("ragged")).map(|(p, r)| p / r);
        let speedup_masked = times.get("padded_masked").zip(times.get("ragged")).map(|(p, r)| p / r);
        out.record(
            &format!("ragged_prefill_b{b}_l{l}"),
            "ragged_vs_padded",
            json!({
                "B": b, "L": l, "padding": padding, "tokens": total, "speedup": speedup,
                "speedup_vs_padded_masked": speedup_masked, "rel_err": rel_err, "max_abs_diff": max_abs,
                "bit_identical": same as f64 / n.max(1) as f64, "compared": n, "unwritten": unwritten,
                "guard": a.guard,
            }),
        );
        let mut why = Vec::new();
        if rel_err.is_nan() || rel_err > TOLERANCE || unwritten > 0 {
            why.push(format!("outputs differ (relative error {rel_err:.3e}, {unwritten} packed elements unwritten)"));
        }
        if let Some(g) = a.guard {
            match speedup {
                Some(s) if s >= g => {}
                Some(s) => why.push(format!("speedup {s:.3} < {g}")),
                None => why.push("no speedup measured".into()),
            }
        }
        Ok((!why.is_empty()).then(|| format!("ragged_prefill_b{b}_l{l}: {}", why.join("; "))))
    }
}
