//! A serving trace on the GPU: paged decode attention for a stream of requests that arrive and
//! finish at random, each step appending every live sequence's new K/V into its pages and
//! attending over its whole cache, the way a serving engine runs one layer's attention.
//!
//! ```text
//! cargo run --release --example serve_trace -- [--steps 10000] [--max-batch 128] [--page 16]
//!     [--classes 64,256] [--prompt-max 2048] [--output-max 1024] [--arrival 0.5] [--seed 7]
//!     [--graph attention|step] [--json PATH]
//! ```
//!
//! The problem is `bench_paged`'s (bf16, 32 query heads over 8 KV heads, d 128, one query token
//! per sequence). Capacities are shape classes: one plan per table width in `--classes` (pages
//! per sequence; a class holds `width · page` tokens), each for `--max-batch` rows, built once
//! through a `PlanCache` at warm-up with one CUDA graph of its execute recorded. Each step:
//!
//! 1. arrivals (probability `--arrival` per step while rows are free; prompt and output lengths
//!    uniform in `1..=--prompt-max` and `1..=--output-max`) get their prompt's pages from a
//!    `serving::PagePool` (their K/V is whatever the pool holds: prefill is not timed here);
//!    every live sequence gets room for one token (`PagePool::append`) and its slot
//!    (`append_slots_into`, unused rows `-1`);
//! 2. the smallest class whose width holds the longest sequence serves the step: a class switch
//!    looks the plan up in the cache (never a build after warm-up: counted), and its
//!    `PageTable` is filled;
//! 3. the slots, lengths and table go to the device through a `serving::StepStaging`: written
//!    into its pinned buffer and uploaded in one copy;
//! 4. `KvAppend` writes the step's new K and V rows into their slots, and the class's graph is
//!    launched; with `--graph step` one graph per class holds the whole device side of a step
//!    (the staging's copy, both appends and the attention), so the host only writes the pinned
//!    buffer and launches it;
//! 5. the host waits for the step (a server reads its logits), then finished sequences go back.
//!
//! Printed and written as one JSON line: the host time of a step up to its launches
//! (`host_us_p50/p99/max`, and the median of each phase above) and the whole step
//! (`step_us_p50/p99`), tokens per second, the batch's size over the trace, class switches, plan
//! builds after warm-up, and the relative error of the last step's live rows against an f64
//! reference computed from the pools as the GPU left them (≤ 2e-2, as
//! `tests/gpu_suite/gpu_paged.rs`). Exits non-zero if a plan was built after warm-up or the
//! numerics are off.

#[cfg(not(feature = "cudnn"))]
fn main() {
    eprintln!("serve_trace runs on the GPU: build it with the `cudnn` feature (the default)");
    std::process::exit(2);
}

#[cfg(feature = "cudnn")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    trace::main()
}

#[cfg(feature = "cudnn")]
#[path = "common/flags.rs"]
#[allow(dead_code)] // each example uses part of it
mod flags;

#[cfg(feature = "cudnn")]
#[path = "common/json_lines.rs"]
mod json_lines;

#[cfg(feature = "cudnn")]
mod trace {
    use std::sync::Arc;
    use std::time::Instant;

    use cudnn_graph::backend::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    use cudnn_graph::backend::cudarc::driver::{CudaGraph, CudaSlice, DevicePtr, DevicePtrMut};
    use cudnn_graph::backend::{BuildOptions, Cudnn, ExecutionPlan, GraphMode, PlanGraph};
    use cudnn_graph::engines::PlanCache;
    use cudnn_graph::ops::AttrValue;
    use cudnn_graph::payload::plan::Expect;
    use cudnn_graph::rng::SplitMix64;
    use cudnn_graph::serving::{append_slots_into, KvAppend, KvPoolDims, PagePool, PageTable, SeqId, StepStaging};
    use cudnn_graph::{DataType, Graph, GraphBuilder};
    use half::bf16;
    use serde_json::json;

    use super::flags::Flags;
    use super::json_lines::Out;

    type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

    const H_Q: usize = 32;
    const H_KV: usize = 8;
    const D: usize = 128;
    const TOLERANCE: f64 = 2e-2;

    struct Args {
        steps: usize,
        max_batch: usize,
        page: usize,
        classes: Vec<usize>,
        prompt_max: usize,
        output_max: usize,
        arrival: f64,
        seed: u64,
        whole_step: bool,
        json: Option<String>,
    }

    fn args() -> Result<Args> {
        let f = Flags::from_env();
        let mut classes: Vec<usize> = f.list("--classes", &[64, 256])?;
        classes.sort_unstable();
        classes.dedup();
        let a = Args {
            steps: f.or("--steps", 10_000)?,
            max_batch: f.or("--max-batch", 128)?,
            page: f.or("--page", 16)?,
            classes,
            prompt_max: f.or("--prompt-max", 2048)?,
            output_max: f.or("--output-max", 1024)?,
            arrival: f.or("--arrival", 0.5)?,
            seed: f.or("--seed", 7)?,
            whole_step: match f.value("--graph").as_deref() {
                None | Some("attention") => false,
                Some("step") => true,
                Some(other) => return Err(format!("--graph {other}: attention or step").into()),
            },
            json: f.value("--json"),
        };
        let widest = *a.classes.last().ok_or("--classes names no class")?;
        if a.classes[0] == 0 || a.max_batch == 0 || a.page == 0 || a.prompt_max == 0 || a.output_max == 0 {
            return Err("--classes, --max-batch, --page, --prompt-max and --output-max must be positive".into());
        }
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

    /// The paged decode graph of one capacity class: `b` rows of up to `width` pages each.
    fn graph(b: usize, pages: usize, page: usize, width: usize) -> Result<Graph> {
        let i = |n: usize| n as i64;
        let mut g = GraphBuilder::new(format!("serve_decode_w{width}"));
        let q = g.input("q", DataType::BF16, &[i(b), i(H_Q), 1, i(D)])?;
        let k = g.input("k_pool", DataType::BF16, &[i(pages), i(H_KV), i(page), i(D)])?;
        let v = g.input("v_pool", DataType::BF16, &[i(pages), i(H_KV), i(page), i(D)])?;
        let seq_q = g.input("seq_len_q", DataType::I32, &[i(b), 1, 1, 1])?;
        let seq_kv = g.input("seq_len_kv", DataType::I32, &[i(b), 1, 1, 1])?;
        let table = g.input("page_table", DataType::I32, &[i(b), 1, i(width), 1])?;
        let attrs: Vec<(String, AttrValue)> = vec![
            ("paged".into(), true.into()),
            ("padding_mask".into(), true.into()),
            ("max_seq_len_kv".into(), i(width * page).into()),
            ("scale".into(), (1.0 / (D as f64).sqrt()).into()),
        ];
        let ins = [q, k, v, seq_q, seq_kv, table, table].map(cudnn_graph::Operand::Tensor);
        let o = g.op("sdpa", &ins, &attrs)?[0];
        g.output(o, "o", DataType::BF16)?;
        Ok(g.build()?)
    }

    /// `n` pseudo-random bf16 values in [-1, 1), a random block of 2^20 tiled.
    fn random_bf16(rng: &mut SplitMix64, n: usize) -> Vec<bf16> {
        let block: Vec<bf16> = (0..(1usize << 20).min(n)).map(|_| bf16::from_f64(rng.unit() * 2.0 - 1.0)).collect();
        block.iter().copied().cycle().take(n).collect()
    }

    fn percentile(sorted: &[f64], p: f64) -> f64 {
        if sorted.is_empty() {
            return f64::NAN;
        }
        sorted[((sorted.len() - 1) as f64 * p).round() as usize]
    }

    /// One live request: its sequence, and the tokens it still decodes.
    struct Request {
        seq: SeqId,
        remaining: usize,
    }

    /// The device buffers every class's plan reads and writes (with the staging's regions).
    struct Buffers {
        q: CudaSlice<bf16>,
        k_pool: CudaSlice<bf16>,
        v_pool: CudaSlice<bf16>,
        o: CudaSlice<bf16>,
        new_k: CudaSlice<bf16>,
        new_v: CudaSlice<bf16>,
    }

    // Long because it is the trace: set-up, the step loop of the module docs, and the report.
    pub fn main() -> Result<()> {
        let a = args()?;
        let mut out = Out::create(a.json.as_ref())?;
        let ctx = cudnn_graph::backend::cuda_context(0)?;
        let stream = ctx.new_stream()?;
        let cudnn = Cudnn::new(stream.clone())?;
        let device = ctx.name()?;
        let widest = *a.classes.last().expect("checked by args");
        let pages = a.max_batch * widest;
        let mut rng = SplitMix64::new(a.seed);
        let dims = KvPoolDims { pages, heads: H_KV, page_size: a.page, head_dim: D };
        let pool_len = dims.pool_len().ok_or("the pools' size overflows")?;
        let rows = dims.rows_len(a.max_batch).ok_or("the new rows' size overflows")?;
        let mut bufs = Buffers {
            q: stream.clone_htod(&random_bf16(&mut rng, a.max_batch * H_Q * D))?,
            k_pool: stream.clone_htod(&random_bf16(&mut rng, pool_len))?,
            v_pool: stream.clone_htod(&random_bf16(&mut rng, pool_len))?,
            o: stream.alloc_zeros::<bf16>(a.max_batch * H_Q * D)?,
            new_k: stream.clone_htod(&random_bf16(&mut rng, rows))?,
            new_v: stream.clone_htod(&random_bf16(&mut rng, rows))?,
        };
        let mut staging = StepStaging::new(&stream, a.max_batch, widest)?;
        let at = staging.addresses();
        let append = KvAppend::new(&ctx)?;

        // Warm-up: every class's plan through the cache, its table and its graph.
        let cache = PlanCache::in_memory();
        let (expect, options) = (Expect::default(), BuildOptions::default());
        let started = Instant::now();
        let graphs: Vec<Graph> =
            a.classes.iter().map(|&w| graph(a.max_batch, pages, a.page, w)).collect::<Result<_>>()?;
        let plans: Vec<Arc<ExecutionPlan>> =
            graphs.iter().map(|g| Ok(cache.get_or_build(&cudnn, g, &expect, &options)?.plan)).collect::<Result<_>>()?;
        let mut tables: Vec<PageTable> =
            a.classes.iter().map(|&w| PageTable::new(a.max_batch, w)).collect::<std::result::Result<_, _>>()?;
        let workspace = plans.iter().map(|p| p.workspace_size()).max().unwrap_or(0).max(1);
        let mut ws = stream.alloc_zeros::<u8>(workspace)?;
        let ws_ptr = ws.device_ptr_mut(&stream).0;
        let o_ptr = bufs.o.device_ptr_mut(&stream).0;
        let mut ios: Vec<Vec<u64>> = Vec::new();
        for plan in &plans {
            let by_name = |name: &str| -> Result<u64> {
                Ok(match name {
                    "q" => bufs.q.device_ptr(&stream).0,
                    "k_pool" => bufs.k_pool.device_ptr(&stream).0,
                    "v_pool" => bufs.v_pool.device_ptr(&stream).0,
                    "seq_len_q" => at.seq_len_q,
                    "seq_len_kv" => at.seq_len_kv,
                    "page_table" => at.page_table,
                    "o" => o_ptr,
                    other => return Err(format!("no buffer for the plan's tensor {other}").into()),
                })
            };
            ios.push(
                plan.layout().io().iter().map(|id| by_name(&plan.graph().tensor(*id).name)).collect::<Result<_>>()?,
            );
        }
        let new_k = bufs.new_k.device_ptr(&stream).0;
        let new_v = bufs.new_v.device_ptr(&stream).0;
        let k_pool = bufs.k_pool.device_ptr_mut(&stream).0;
        let v_pool = bufs.v_pool.device_ptr_mut(&stream).0;
        // SAFETY (of every use below): the new rows ([max_batch, H_KV, D]), the slots region
        // (max_batch) and the pools are live device buffers of this context with those sizes,
        // until the end of `main`; the pools overlap neither; everything is on `stream`, in order.
        let append_both = || -> Result<()> {
            unsafe {
                append.append_raw(&stream, new_k, at.slots, k_pool, a.max_batch, dims)?;
                append.append_raw(&stream, new_v, at.slots, v_pool, a.max_batch, dims)?;
            }
            Ok(())
        };
        // `--graph attention`: one graph of the plan's execute per class. `--graph step`: one
        // graph per class of the whole step on the device: the staging's copy, both appends and
        // the execute.
        let mut cuda_graphs: Vec<PlanGraph<'_>> = Vec::new();
        let mut step_graphs: Vec<CudaGraph> = Vec::new();
        for (plan, io) in plans.iter().zip(&ios) {
            if a.whole_step {
                stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
                // SAFETY: the staging lives until the end of `main`, after the graphs; the host
                // writes a step only after waiting for the previous one (the loop synchronizes).
                let recorded = unsafe { staging.record_upload(&stream) }
                    .map_err(Into::into)
                    .and_then(|()| append_both())
                    // SAFETY: as for the graphs below.
                    .and_then(|()| unsafe { plan.execute_raw(&cudnn, io, ws_ptr) }.map_err(Into::into));
                // End the capture whatever happened, so the stream is usable again.
                let graph = stream.end_capture(CUgraphInstantiate_flags(0))?;
                recorded?;
                step_graphs.push(graph.ok_or("the step's capture recorded nothing")?);
            } else {
                // SAFETY: every buffer named in `io` (the staging's regions, each at least its
                // tensor's size: `StagingLayout`), and the workspace, lives until the end of
                // `main`, after the graphs (dropped first).
                cuda_graphs.push(unsafe { plan.cuda_graph(&cudnn, io, ws_ptr, GraphMode::Auto) }?);
            }
        }
        stream.synchronize()?;
        let warmup_ms = started.elapsed().as_secs_f64() * 1e3;
        let builds_at_warmup = cache.stats().builds;

        let mut pool = PagePool::new(pages, a.page)?;
        let mut live: Vec<Request> = Vec::new();
        let mut seqs: Vec<SeqId> = Vec::new();
        let mut batch: Vec<(SeqId, usize)> = Vec::new();
        let mut slots: Vec<i32> = Vec::with_capacity(a.max_batch);
        let (mut host_us, mut step_us) = (Vec::with_capacity(a.steps), Vec::with_capacity(a.steps));
        let (mut tokens, mut switches, mut deferred, mut finished) = (0usize, 0usize, 0usize, 0usize);
        let mut batch_sizes = Vec::with_capacity(a.steps);
        // Host time by phase: admit (arrivals, room, slots), table (class, fill), upload,
        // append (two launches), launch (the class's graph).
        let mut phases: [Vec<f64>; 5] = std::array::from_fn(|_| Vec::with_capacity(a.steps));
        let mut current: Option<usize> = None;
        let trace_start = Instant::now();
        let mut last_class = 0;
        for _ in 0..a.steps {
            let t0 = Instant::now();
            while live.len() < a.max_batch && rng.unit() < a.arrival {
                let seq = pool.add()?;
                if pool.grow(seq, 1 + rng.below(a.prompt_max)).is_err() {
                    // No pages for this prompt now: it waits (a server would queue it).
                    pool.release(seq)?;
                    deferred += 1;
                    break;
                }
                live.push(Request { seq, remaining: 1 + rng.below(a.output_max) });
            }
            if live.is_empty() {
                continue;
            }
            batch.clear();
            seqs.clear();
            for r in &live {
                pool.append(r.seq, 1)?;
                batch.push((r.seq, 1));
                seqs.push(r.seq);
            }
            append_slots_into(&pool, &batch, &mut slots)?;
            let t1 = Instant::now();
            let mut longest = 0;
            for &s in &seqs {
                longest = longest.max(pool.pages(s)?.len());
            }
            let class = a.classes.iter().position(|&w| w >= longest).ok_or("a sequence outgrew every class")?;
            if current != Some(class) {
                // A class switch: the plan comes from the cache (a hit: nothing is built).
                cache.get_or_build(&cudnn, &graphs[class], &expect, &options)?;
                switches += usize::from(current.is_some());
                current = Some(class);
            }
            let table = &mut tables[class];
            table.fill(&pool, &seqs)?;
            let t2 = Instant::now();
            staging.write(table, &slots)?;
            if !a.whole_step {
                staging.upload(&stream)?;
            }
            let t3 = Instant::now();
            if !a.whole_step {
                append_both()?;
            }
            let t4 = Instant::now();
            if a.whole_step {
                step_graphs[class].launch()?;
            } else {
                cuda_graphs[class].launch()?;
            }
            let t5 = Instant::now();
            for (phase, (from, to)) in phases.iter_mut().zip([(t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5)]) {
                phase.push((to - from).as_secs_f64() * 1e6);
            }
            host_us.push(t0.elapsed().as_secs_f64() * 1e6);
            stream.synchronize()?;
            step_us.push(t0.elapsed().as_secs_f64() * 1e6);
            tokens += live.len();
            batch_sizes.push(live.len());
            last_class = class;
            // The last step's batch stays live for the check below.
            if host_us.len() < a.steps {
                let mut i = 0;
                while i < live.len() {
                    live[i].remaining -= 1;
                    if live[i].remaining == 0 {
                        pool.release(live.swap_remove(i).seq)?;
                        finished += 1;
                    } else {
                        i += 1;
                    }
                }
            }
        }
        let trace_s = trace_start.elapsed().as_secs_f64();
        let builds_after_warmup = cache.stats().builds - builds_at_warmup;

        // The last step's live rows against an f64 reference over the pools as the GPU left them.
        let error = if live.is_empty() {
            None
        } else {
            let (q, k, v, o) = (
                stream.clone_dtoh(&bufs.q)?,
                stream.clone_dtoh(&bufs.k_pool)?,
                stream.clone_dtoh(&bufs.v_pool)?,
                stream.clone_dtoh(&bufs.o)?,
            );
            let table = &tables[last_class];
            let width = table.width();
            let (mut diff, mut norm) = (0.0f64, 0.0f64);
            for (b, &len) in table.seq_len_kv().iter().enumerate().take(seqs.len()).step_by(seqs.len().div_ceil(8)) {
                let row = &table.entries()[b * width..(b + 1) * width];
                let at = |pool: &[bf16], h: usize, pos: usize, d: usize| -> f64 {
                    let page = row[pos / a.page] as usize;
                    pool[((page * H_KV + h) * a.page + pos % a.page) * D + d].to_f64()
                };
                for hq in 0..H_Q {
                    let h = hq / (H_Q / H_KV);
                    let qv = &q[(b * H_Q + hq) * D..(b * H_Q + hq + 1) * D];
                    let scores: Vec<f64> = (0..len as usize)
                        .map(|pos| (0..D).map(|d| qv[d].to_f64() * at(&k, h, pos, d)).sum::<f64>() / (D as f64).sqrt())
                        .collect();
                    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let total: f64 = weights.iter().sum();
                    for d in 0..D {
                        let want: f64 =
                            weights.iter().enumerate().map(|(pos, w)| w * at(&v, h, pos, d)).sum::<f64>() / total;
                        let got = o[(b * H_Q + hq) * D + d].to_f64();
                        diff += (got - want).powi(2);
                        norm += want.powi(2);
                    }
                }
            }
            Some((diff / norm).sqrt())
        };

        host_us.sort_by(f64::total_cmp);
        let phase_p50: Vec<f64> = phases
            .iter_mut()
            .map(|p| {
                p.sort_by(f64::total_cmp);
                percentile(p, 0.5)
            })
            .collect();
        step_us.sort_by(f64::total_cmp);
        let mean_batch = batch_sizes.iter().sum::<usize>() as f64 / batch_sizes.len().max(1) as f64;
        let row = json!({
            "steps": a.steps, "steps_run": host_us.len(), "max_batch": a.max_batch, "page_size": a.page,
            "classes": a.classes, "prompt_max": a.prompt_max, "output_max": a.output_max, "arrival": a.arrival,
            "warmup_ms": warmup_ms, "plan_builds_warmup": builds_at_warmup,
            "plan_builds_after_warmup": builds_after_warmup, "class_switches": switches,
            "host_us_p50": percentile(&host_us, 0.5), "host_us_p99": percentile(&host_us, 0.99),
            "host_us_max": host_us.last(), "step_us_p50": percentile(&step_us, 0.5),
            "step_us_p99": percentile(&step_us, 0.99), "tokens": tokens, "tokens_per_s": tokens as f64 / trace_s,
            "mean_batch": mean_batch, "max_batch_seen": batch_sizes.iter().max(),
            "finished": finished, "deferred": deferred, "relative_error": error,
            "graph": if a.whole_step { "step" } else { "attention" },
            "phase_us_p50": {"admit": phase_p50[0], "table": phase_p50[1], "upload": phase_p50[2],
                             "append": phase_p50[3], "launch": phase_p50[4]},
            "device": device, "cudnn": cudnn.version(),
        });
        out.record("serve_trace", "cudnn-graph", row.clone());
        println!("{}", serde_json::to_string_pretty(&row)?);
        drop(cuda_graphs);
        drop(step_graphs);
        if builds_after_warmup > 0 {
            return Err(format!("{builds_after_warmup} plan builds after warm-up").into());
        }
        if let Some(e) = error.filter(|e| e.is_nan() || *e > TOLERANCE) {
            return Err(format!("the last step's relative error {e:.3e} is above {TOLERANCE}").into());
        }
        Ok(())
    }
}
