//! Serving the Llama layer of `examples/llama/layer.rs` from a paged K/V cache with continuous
//! batching: requests arrive and finish at random, each with its own prompt and output length;
//! every step decodes one token of every live request.
//!
//! ```text
//! cargo run -p cudnn-graph-candle --example llama_serve                      # CPU, small layer
//! cargo run -p cudnn-graph-candle --features cuda --release --example llama_serve -- --gpu \
//!     [--engine paged|candle|check] [--steps 2000] [--max-batch 64] [--page 64] [--widths 8,24]
//!     [--prompt-max 1024] [--output-max 512] [--arrival 0.5] [--seed 7] [--json PATH]
//!     [--trace-out PATH]
//! ```
//!
//! `--engine paged` decodes with the layer's cudnn-graph types and paged decode attention
//! (`llama/serve.rs`, `PagedEngine`): each step's rows are padded to a batch bucket (powers of two
//! from 8 to `--max-batch`) and its longest sequence picks a table width (`--widths`, in pages of
//! `--page` tokens), so one plan per (bucket, width) serves every step: all are built at warm-up
//! and none after. `--engine candle` is candle's own decode (`CandleEngine`): a dense cache per
//! sequence and candle's attention per sequence. `--engine check` runs both on every step and
//! compares their outputs (largest difference over the largest value, per step; the worst is
//! printed and must stay under 2e-2, bf16's tolerance for a layer).
//!
//! Arrivals (probability `--arrival` per step while rows and pages are free) bring a prompt of
//! `1..=--prompt-max` tokens and an output of `1..=--output-max`; the prompt's K/V comes from the
//! shared prefill (candle's K/V projections and rotary embedding), not timed. Printed as one JSON
//! line (and appended to `--json`): steps, tokens decoded, tokens per second over the decode
//! steps, step time p50/p99 (host time to the step's end, the device synchronized), the batch's
//! mean and largest size, plan builds after warm-up, and the worst difference for `check`. Exits
//! non-zero if a plan was built after warm-up or `check` found a difference past the tolerance.
//! `--trace-out` writes the trace's events, one JSON line per step (`{"a": [prompt lengths of the
//! arrivals], "f": [indices of the requests finished after the step]}`, the batch being the live
//! requests in arrival order with each finished one replaced by the last), so that
//! `docs/bench/llama_serve_torch.py` replays the same batches in PyTorch eager.
//! Without `--gpu` everything runs on the CPU (cudnn-graph's reference engine for the graphs) at
//! a small layer size.

// The layer serves its other examples too: this one decodes only.
#[path = "llama/layer.rs"]
#[allow(dead_code)]
mod layer;
#[path = "llama/serve.rs"]
mod serve;

use std::time::Instant;

use candle_core::Device;
use cudnn_graph::rng::SplitMix64;
use cudnn_graph::serving::{PagePool, SeqId};
use cudnn_graph_candle::Runner;
use layer::{random, relative_difference, Config, Layer};
use serve::{prefill_kv, CandleEngine, Classes, PagedEngine, Rope};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const TOLERANCE: f32 = 2e-2;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Engine {
    Paged,
    Candle,
    Check,
}

struct Args {
    gpu: bool,
    engine: Engine,
    steps: usize,
    max_batch: usize,
    page: usize,
    widths: Vec<usize>,
    prompt_max: usize,
    output_max: usize,
    arrival: f64,
    seed: u64,
    json: Option<String>,
    trace_out: Option<String>,
}

/// The command line's flags. This crate is published on its own, so its examples parse their
/// flags themselves (the workspace's `examples/common/flags.rs` is the facade's).
struct Flags(Vec<String>);

impl Flags {
    fn value(&self, flag: &str) -> Option<String> {
        self.0.iter().position(|a| a == flag).and_then(|i| self.0.get(i + 1)).cloned()
    }

    /// The value after `flag` parsed (its error naming the flag), or `default`.
    fn or<T: std::str::FromStr>(&self, flag: &str, default: T) -> Result<T>
    where
        T::Err: std::fmt::Display,
    {
        match self.value(flag) {
            Some(v) => v.parse().map_err(|e| format!("{flag} {v}: {e}").into()),
            None => Ok(default),
        }
    }

    fn list(&self, flag: &str, default: &[usize]) -> Result<Vec<usize>> {
        match self.value(flag) {
            Some(v) => v.split(',').map(|x| x.parse().map_err(|e| format!("{flag} {v}: {e}").into())).collect(),
            None => Ok(default.to_vec()),
        }
    }
}

fn args() -> Result<Args> {
    let f = Flags(std::env::args().skip(1).collect());
    let gpu = f.0.iter().any(|a| a == "--gpu");
    // The CPU's defaults are small: its reference engine computes in f64.
    let (steps, max_batch, page, widths, prompt_max, output_max): (_, _, _, &[usize], _, _) =
        if gpu { (2000, 64, 64, &[8, 24], 1024, 512) } else { (24, 8, 4, &[2, 4], 7, 6) };
    let mut widths = f.list("--widths", widths)?;
    widths.sort_unstable();
    widths.dedup();
    let a = Args {
        gpu,
        engine: match f.value("--engine").as_deref() {
            None | Some("paged") => Engine::Paged,
            Some("candle") => Engine::Candle,
            Some("check") => Engine::Check,
            Some(other) => return Err(format!("--engine {other}: paged, candle or check").into()),
        },
        steps: f.or("--steps", steps)?,
        max_batch: f.or("--max-batch", max_batch)?,
        page: f.or("--page", page)?,
        widths,
        prompt_max: f.or("--prompt-max", prompt_max)?,
        output_max: f.or("--output-max", output_max)?,
        arrival: f.or("--arrival", 0.5)?,
        seed: f.or("--seed", 7)?,
        json: f.value("--json"),
        trace_out: f.value("--trace-out"),
    };
    if [a.max_batch, a.page, a.prompt_max, a.output_max].contains(&0) || a.widths.first().is_none_or(|&w| w == 0) {
        return Err("--max-batch, --page, --widths, --prompt-max and --output-max must be positive".into());
    }
    let widest = a.widths[a.widths.len() - 1];
    if a.prompt_max + a.output_max > widest * a.page {
        return Err(format!(
            "a sequence of up to {} tokens does not fit the widest class ({widest} pages of {})",
            a.prompt_max + a.output_max,
            a.page
        )
        .into());
    }
    Ok(a)
}

/// Batch buckets: powers of two from 8 (or `max_batch` if smaller), and `max_batch`.
fn buckets(max_batch: usize) -> Vec<usize> {
    let mut b: Vec<usize> =
        std::iter::successors(Some(8usize.min(max_batch)), |&x| Some(x * 2)).take_while(|&x| x < max_batch).collect();
    b.push(max_batch);
    b
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted.get(((sorted.len().max(1) - 1) as f64 * p).round() as usize).copied().unwrap_or(f64::NAN)
}

/// A live request: its sequence in the engine, its reservation in the admission pool, and the
/// tokens it still decodes.
struct Request {
    seq: SeqId,
    reservation: SeqId,
    remaining: usize,
}

// Long because it is the trace: set-up, arrivals, the step of each engine, finishing, the report.
fn main() -> Result<()> {
    let a = args()?;
    let (device, cfg) = if a.gpu {
        (Device::new_cuda(0)?, Config::LLAMA3_8B)
    } else {
        (Device::Cpu, Config { hidden: 64, heads: 4, kv_heads: 2, intermediate: 96, eps: 1e-5, rope_theta: 10000.0 })
    };
    let layer = Layer::random(cfg, &device, 7)?;
    let widest = a.widths[a.widths.len() - 1];
    let rope_tables = Rope::new(&layer, widest * a.page, &device)?;
    let runner = Runner::new();
    let classes = Classes { buckets: buckets(a.max_batch), widths: a.widths.clone() };
    let pool = PagePool::new(a.max_batch * widest, a.page)?;
    let mut paged = PagedEngine::new(&layer, pool.clone(), classes, &device)?;
    // Admission: a request joins once the pool can hold its prompt and its whole output (so a
    // step never runs out of pages), the same rule for every engine.
    let mut admission = pool;
    let mut candle = CandleEngine::default();
    let (use_paged, use_candle) = (a.engine != Engine::Candle, a.engine != Engine::Paged);

    let started = Instant::now();
    if use_paged {
        paged.warm_up(&runner, &layer, &rope_tables, &device)?;
    }
    device.synchronize()?;
    let warmup_s = started.elapsed().as_secs_f64();
    let builds_at_warmup = runner.graphs_prepared();

    let mut rng = SplitMix64::new(a.seed);
    let mut live: Vec<Request> = Vec::new();
    let mut seqs: Vec<SeqId> = Vec::new();
    let (mut tokens, mut finished, mut deferred, mut prefill_s) = (0usize, 0usize, 0usize, 0.0f64);
    let mut step_us = Vec::with_capacity(a.steps);
    let mut batch_sizes = Vec::with_capacity(a.steps);
    let mut worst = 0f32;
    let mut trace = a.trace_out.as_ref().map(std::fs::File::create).transpose()?.map(std::io::BufWriter::new);
    let (mut arrived, mut ended) = (Vec::new(), Vec::new());
    for _ in 0..a.steps {
        arrived.clear();
        ended.clear();
        let t_prefill = Instant::now();
        while live.len() < a.max_batch && rng.unit() < a.arrival {
            let (prompt, output) = (1 + rng.below(a.prompt_max), 1 + rng.below(a.output_max));
            let reservation = admission.add()?;
            if admission.grow(reservation, prompt + output).is_err() {
                admission.release(reservation)?;
                deferred += 1;
                break;
            }
            let x = random(&[1, prompt, cfg.hidden], 1.0, rng.next_u64(), &device)?;
            let kv = prefill_kv(&layer, &rope_tables, &x)?;
            let seq = if use_paged { paged.admit(&kv)? } else { reservation };
            if use_candle {
                candle.admit(seq, &kv);
            }
            live.push(Request { seq, reservation, remaining: output });
            arrived.push(prompt);
        }
        device.synchronize()?;
        prefill_s += t_prefill.elapsed().as_secs_f64();
        if live.is_empty() {
            continue;
        }
        seqs.clear();
        seqs.extend(live.iter().map(|r| r.seq));
        let b = seqs.len();
        let bucket = paged.bucket_for(b).ok_or("more live requests than --max-batch")?;
        let x = random(&[bucket, 1, cfg.hidden], 1.0, rng.next_u64(), &device)?;
        let t0 = Instant::now();
        let y_paged = match use_paged {
            true => Some(paged.step(&runner, &layer, &rope_tables, &seqs, &x)?.narrow(0, 0, b)?),
            false => None,
        };
        let y_candle = match use_candle {
            true => Some(candle.step(&layer, &rope_tables, &seqs, &x.narrow(0, 0, b)?)?),
            false => None,
        };
        device.synchronize()?;
        step_us.push(t0.elapsed().as_secs_f64() * 1e6);
        if let (Some(p), Some(c)) = (&y_paged, &y_candle) {
            worst = worst.max(relative_difference(p, c)?);
        }
        tokens += b;
        batch_sizes.push(b);
        let mut i = 0;
        while i < live.len() {
            live[i].remaining -= 1;
            if live[i].remaining == 0 {
                ended.push(i);
                let r = live.swap_remove(i);
                admission.release(r.reservation)?;
                if use_paged {
                    paged.finish(r.seq)?;
                }
                candle.finish(r.seq);
                finished += 1;
            } else {
                i += 1;
            }
        }
        if let Some(trace) = &mut trace {
            use std::io::Write;
            writeln!(trace, "{}", serde_json::json!({"a": arrived, "f": ended}))?;
        }
    }
    if let Some(mut trace) = trace {
        use std::io::Write;
        trace.flush()?;
    }
    let decode_s = step_us.iter().sum::<f64>() / 1e6;
    let builds_after_warmup = runner.graphs_prepared() - builds_at_warmup;
    step_us.sort_by(f64::total_cmp);
    let row = serde_json::json!({
        "engine": format!("{:?}", a.engine).to_lowercase(), "gpu": a.gpu, "steps": a.steps,
        "steps_run": step_us.len(), "max_batch": a.max_batch, "page_size": a.page, "widths": a.widths,
        "prompt_max": a.prompt_max, "output_max": a.output_max, "arrival": a.arrival,
        "hidden": cfg.hidden, "heads": cfg.heads, "kv_heads": cfg.kv_heads,
        "warmup_s": warmup_s, "graphs_prepared_warmup": builds_at_warmup, "graphs_prepared_after_warmup": builds_after_warmup,
        "tokens": tokens, "tokens_per_s": tokens as f64 / decode_s, "decode_s": decode_s, "prefill_s": prefill_s,
        "step_us_p50": percentile(&step_us, 0.5), "step_us_p99": percentile(&step_us, 0.99),
        "mean_batch": batch_sizes.iter().sum::<usize>() as f64 / batch_sizes.len().max(1) as f64,
        "max_batch_seen": batch_sizes.iter().max(), "finished": finished, "deferred": deferred,
        "worst_relative_difference": if a.engine == Engine::Check { Some(worst) } else { None },
    });
    println!("{row}");
    if let Some(path) = &a.json {
        use std::io::Write;
        writeln!(std::fs::OpenOptions::new().create(true).append(true).open(path)?, "{row}")?;
    }
    if builds_after_warmup > 0 {
        return Err(format!("{builds_after_warmup} graphs prepared (planned) after warm-up").into());
    }
    if worst.is_nan() || worst > TOLERANCE {
        return Err(format!("the paged decode differs from candle's by {worst:.3e} (tolerance {TOLERANCE})").into());
    }
    Ok(())
}
