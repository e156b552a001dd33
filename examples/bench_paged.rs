//! Paged decode attention on the GPU, on the grid of `../shared/bench/paged_decode_anchor.py`
//! (cudnn-frontend 1.32 and PyTorch's dense SDPA), so both can run in one call and be compared
//! row by row (`scripts/paged-vs-anchor`).
//!
//! ```text
//! cargo run --release --example bench_paged -- [--json PATH] [--quick] [--batches 1,8,32,128]
//!     [--lens 1024,4096,16384] [--page-sizes 16,64] [--implementations auto,composite] [--budget-s 240]
//! ```
//!
//! The problem is the anchor's: bf16, 32 query heads over 8 KV heads, d 128, one query token,
//! `paged = true` over pools of `B · ceil(L / page)` pages in a shuffled order (one table for K
//! and V), lengths `L` ("uniform") or uniform-random in `[L/4, L]` ("mixed", seeded), capacity
//! `L`. Each (B, L, page, lowering) is built once (`build_ms`, a cold process for the first)
//! and serves both length distributions (tables and lengths are device buffers: nothing is
//! rebuilt). Device time is the batched method of `bench` (`us`: CUDA events around batches of
//! back-to-back executes, median of samples, per call), and the anchor's CUDA-graph method
//! (`us_cg`: 50 executes captured into one graph, graphs replayed back to back, per execute);
//! `us_plan_graph` replays cuDNN's own graph of one execute (`ExecutionPlan::cuda_graph`);
//! `host_us` is the host time per execute, `host_us_graph` per launch of cuDNN's graph of one
//! execute (a serving step's cost on the host: the graph reads new lengths and tables from the
//! same device buffers). Bandwidth counts, as the anchor
//! does, the K/V bytes the lengths hold plus Q and O (`tbps`, `frac_peak` of the HBM peak: 4.8
//! TB/s on an H200, 3.35 on an H100 SXM). Every row's output is checked finite (the numerics are
//! `tests/gpu_suite/gpu_paged.rs`'s).

#[cfg(not(feature = "cudnn"))]
fn main() {
    eprintln!("bench_paged runs on the GPU: build it with the `cudnn` feature (the default)");
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
    use std::time::Instant;

    use std::sync::Arc;

    use cudnn_graph::backend::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    use cudnn_graph::backend::cudarc::driver::{CudaGraph, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
    use cudnn_graph::backend::{BuildOptions, Cudnn, ExecutionPlan, GraphMode};
    use cudnn_graph::ops::AttrValue;
    use cudnn_graph::rng::SplitMix64;
    use cudnn_graph::{DataType, Graph, GraphBuilder};
    use half::bf16;
    use serde_json::json;

    use super::flags::Flags;
    use super::json_lines::Out;
    use super::timing::{device_time, host_time, Result};

    const H_Q: i64 = 32;
    const H_KV: i64 = 8;
    const D: i64 = 128;

    struct Args {
        json: Option<String>,
        batches: Vec<i64>,
        lens: Vec<i64>,
        pages: Vec<i64>,
        implementations: Vec<String>,
        budget_s: f64,
    }

    fn args() -> Result<Args> {
        let f = Flags::from_env();
        let quick = f.has("--quick");
        Ok(Args {
            json: f.value("--json"),
            batches: f.list("--batches", if quick { &[1, 32] } else { &[1, 8, 32, 128] })?,
            lens: f.list("--lens", if quick { &[4096] } else { &[1024, 4096, 16384] })?,
            pages: f.list("--page-sizes", if quick { &[16] } else { &[16, 64] })?,
            implementations: f.list("--implementations", &["auto".to_string(), "composite".to_string()])?,
            budget_s: f.or("--budget-s", 240.0)?,
        })
    }

    /// Executes per captured CUDA graph, as the anchor captures them (`inner_cg`).
    const CG_CALLS: usize = 50;

    /// `calls` back-to-back runs of `run` captured from `stream` into one CUDA graph.
    fn captured(
        stream: &Arc<CudaStream>,
        calls: usize,
        run: &mut dyn FnMut() -> std::result::Result<(), cudnn_graph::backend::BackendError>,
    ) -> Result<CudaGraph> {
        stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        let mut outcome = Ok(());
        for _ in 0..calls {
            outcome = run();
            if outcome.is_err() {
                break;
            }
        }
        // End the capture whatever happened, so the stream is usable again.
        let graph = stream.end_capture(CUgraphInstantiate_flags(0))?;
        outcome?;
        Ok(graph.ok_or("the capture recorded nothing")?)
    }

    /// The paged decode graph of the anchor at `(b, l, page)`.
    fn graph(b: i64, l: i64, page: i64, implementation: &str) -> Result<Graph> {
        let width = (l + page - 1) / page;
        let pages = b * width;
        let mut g = GraphBuilder::new("paged_decode");
        let q = g.input("q", DataType::BF16, &[b, H_Q, 1, D])?;
        let k = g.input("k_pool", DataType::BF16, &[pages, H_KV, page, D])?;
        let v = g.input("v_pool", DataType::BF16, &[pages, H_KV, page, D])?;
        let seq_q = g.input("seq_len_q", DataType::I32, &[b, 1, 1, 1])?;
        let seq_kv = g.input("seq_len_kv", DataType::I32, &[b, 1, 1, 1])?;
        let table = g.input("page_table", DataType::I32, &[b, 1, width, 1])?;
        let mut attrs: Vec<(String, AttrValue)> = vec![
            ("paged".into(), true.into()),
            ("padding_mask".into(), true.into()),
            ("max_seq_len_kv".into(), l.into()),
            ("scale".into(), (1.0 / (D as f64).sqrt()).into()),
        ];
        if implementation != "auto" {
            attrs.push(("implementation".into(), implementation.into()));
        }
        let ins = [q, k, v, seq_q, seq_kv, table, table].map(cudnn_graph::Operand::Tensor);
        let o = g.op("sdpa", &ins, &attrs)?[0];
        g.output(o, "o", DataType::BF16)?;
        Ok(g.build()?)
    }

    /// The device's HBM peak in TB/s, by name.
    fn hbm_peak_tbps(name: &str) -> Option<f64> {
        let n = name.to_uppercase();
        if n.contains("H200") {
            Some(4.8)
        } else if n.contains("H100") && n.contains("PCIE") {
            Some(2.0)
        } else if n.contains("H100") && n.contains("NVL") {
            Some(3.9)
        } else if n.contains("H100") {
            Some(3.35)
        } else {
            None
        }
    }

    /// The anchor's mixed lengths for `(b, l)`: `torch.randint(max(1, l // 4), l + 1, (b,),
    /// generator=gen)` with `gen.manual_seed(1234 * 1000003 + b * 7919 + l)`, its first draw,
    /// which is `lo + mt19937() % (l + 1 - lo)` per sequence on PyTorch's CPU generator. The rows
    /// record `mean_len`, so a mismatch shows (`scripts/paged-vs-anchor` warns).
    fn anchor_lengths(b: i64, l: i64) -> Vec<i32> {
        let lo = (l / 4).max(1);
        let range = (l + 1 - lo) as u64;
        let mut mt = Mt19937::new((1234u64 * 1_000_003 + b as u64 * 7919 + l as u64) as u32);
        (0..b).map(|_| (lo + (u64::from(mt.next()) % range) as i64) as i32).collect()
    }

    /// The 32-bit Mersenne Twister (PyTorch's CPU generator), for [`anchor_lengths`].
    struct Mt19937 {
        state: [u32; 624],
        index: usize,
    }

    impl Mt19937 {
        fn new(seed: u32) -> Mt19937 {
            let mut state = [0u32; 624];
            state[0] = seed;
            for i in 1..624 {
                state[i] = 1_812_433_253u32.wrapping_mul(state[i - 1] ^ (state[i - 1] >> 30)).wrapping_add(i as u32);
            }
            Mt19937 { state, index: 624 }
        }

        fn next(&mut self) -> u32 {
            if self.index >= 624 {
                for i in 0..624 {
                    let y = (self.state[i] & 0x8000_0000) | (self.state[(i + 1) % 624] & 0x7fff_ffff);
                    let mut v = self.state[(i + 397) % 624] ^ (y >> 1);
                    if y & 1 != 0 {
                        v ^= 0x9908_b0df;
                    }
                    self.state[i] = v;
                }
                self.index = 0;
            }
            let mut y = self.state[self.index];
            self.index += 1;
            y ^= y >> 11;
            y ^= (y << 7) & 0x9d2c_5680;
            y ^= (y << 15) & 0xefc6_0000;
            y ^ (y >> 18)
        }
    }

    /// `n` bf16 values in [-1, 1), as the bytes the device buffers hold.
    fn bf16_bytes(rng: &mut SplitMix64, n: usize) -> Vec<u8> {
        (0..n).flat_map(|_| bf16::from_f64(rng.uniform(-1.0, 1.0)).to_bits().to_ne_bytes()).collect()
    }

    pub fn main() -> Result<()> {
        let a = args()?;
        let mut out = Out::create(a.json.as_ref())?;
        let ctx = cudnn_graph::backend::cuda_context(0)?;
        // A stream of its own: the legacy default stream cannot be captured into a CUDA graph.
        let stream = ctx.new_stream()?;
        let cudnn = Cudnn::new(stream.clone())?;
        let device = ctx.name()?;
        let peak = hbm_peak_tbps(&device);
        eprintln!("cuDNN {} on {device} (sm {:?}); HBM peak {peak:?} TB/s", cudnn.version(), cudnn.sm());
        let began = Instant::now();
        let mut first_build = true;
        for &b in &a.batches {
            for &l in &a.lens {
                for &page in &a.pages {
                    if began.elapsed().as_secs_f64() > a.budget_s {
                        eprintln!("budget of {} s spent: B={b} L={l} page={page} skipped", a.budget_s);
                        continue;
                    }
                    case(&mut out, &cudnn, &stream, (b, l, page), &a, peak, &device, &mut first_build)?;
                }
            }
        }
        Ok(())
    }

    /// One (B, L, page): the pools, the table and both length distributions, each lowering.
    #[allow(clippy::too_many_arguments)]
    fn case(
        out: &mut Out,
        cudnn: &Cudnn,
        stream: &Arc<CudaStream>,
        (b, l, page): (i64, i64, i64),
        a: &Args,
        peak: Option<f64>,
        device: &str,
        first_build: &mut bool,
    ) -> Result<()> {
        let width = (l + page - 1) / page;
        let pages = (b * width) as usize;
        let mut rng = SplitMix64::new(0x0009_a9ed ^ (b as u64 * 7919 + l as u64));
        // A shuffled table (never the identity where there are two pages or more).
        let mut order: Vec<i32> = (0..pages as i32).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        if pages > 1 && order.iter().enumerate().all(|(i, &p)| p == i as i32) {
            order.rotate_left(1);
        }
        let lens: HashMap<&str, Vec<i32>> =
            [("uniform", vec![l as i32; b as usize]), ("mixed", anchor_lengths(b, l))].into_iter().collect();
        let pool_len = pages * (H_KV * page * D) as usize;
        let mut bufs: HashMap<&str, CudaSlice<u8>> = HashMap::new();
        let i32_bytes = |v: &[i32]| -> Result<CudaSlice<u8>> {
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
            Ok(stream.clone_htod(&bytes)?)
        };
        // The plan takes raw addresses: every buffer is bytes, under its tensor's name.
        bufs.insert("q", stream.clone_htod(&bf16_bytes(&mut rng, (b * H_Q * D) as usize))?);
        bufs.insert("k_pool", stream.clone_htod(&bf16_bytes(&mut rng, pool_len))?);
        bufs.insert("v_pool", stream.clone_htod(&bf16_bytes(&mut rng, pool_len))?);
        bufs.insert("seq_len_q", i32_bytes(&vec![1; b as usize])?);
        bufs.insert("page_table", i32_bytes(&order)?);
        bufs.insert("o", stream.alloc_zeros::<u8>((b * H_Q * D * 2) as usize)?);
        let len_bufs: HashMap<&str, CudaSlice<u8>> =
            lens.iter().map(|(d, v)| Ok((*d, i32_bytes(v)?))).collect::<Result<_>>()?;
        for implementation in &a.implementations {
            let g = graph(b, l, page, implementation)?;
            let started = Instant::now();
            let plan = match ExecutionPlan::build(cudnn, &g, &BuildOptions::default()) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("B={b} L={l} page={page} {implementation}: {e}");
                    continue;
                }
            };
            let build_ms = started.elapsed().as_secs_f64() * 1e3;
            let cold = std::mem::replace(first_build, false);
            let mut ws = stream.alloc_zeros::<u8>(plan.workspace_size().max(1))?;
            for dist in ["uniform", "mixed"] {
                let (ws_ptr, _ws_guard) = ws.device_ptr_mut(stream);
                let mut guards = Vec::new();
                let mut io = Vec::new();
                for id in plan.layout().io() {
                    let name = plan.graph().tensor(*id).name.as_str();
                    let buf = if name == "seq_len_kv" { &len_bufs[dist] } else { &bufs[name] };
                    let (p, guard) = buf.device_ptr(stream);
                    io.push(p);
                    guards.push(guard);
                }
                // SAFETY: `io` holds live device buffers of every I/O tensor of the plan's graph,
                // each at least its tensor's storage; `ws_ptr` a workspace of the plan's size;
                // both outlive every execute below (dropped at the end of this iteration).
                let mut run = || unsafe { plan.execute_raw(cudnn, &io, ws_ptr) }.map_err(Into::into);
                run()?;
                let o = stream.clone_dtoh(&bufs["o"])?;
                let finite = o.chunks(2).all(|c| bf16::from_bits(u16::from_ne_bytes([c[0], c[1]])).is_finite());
                let (us, us_min, runs, batch) = device_time(stream, &mut run)?;
                let (host_us, _, _) = host_time(stream, 20, 100, 200, &mut || {
                    // SAFETY: as above.
                    unsafe { plan.execute_raw(cudnn, &io, ws_ptr) }.expect("execute");
                });
                // SAFETY: as above; the graph replays these pointers, which outlive it.
                let us_cg = match captured(stream, CG_CALLS, &mut || unsafe { plan.execute_raw(cudnn, &io, ws_ptr) }) {
                    Ok(graph) => {
                        Some(device_time(stream, &mut || graph.launch().map_err(Into::into))?.0 / CG_CALLS as f64)
                    }
                    Err(e) => {
                        eprintln!("CUDA graph of B={b} L={l} page={page}: {e}");
                        None
                    }
                };
                // The serving path's host cost: a step replayed from a graph is one launch, its
                // lengths and tables read from the same device buffers.
                // SAFETY: as above; cuDNN's own graph of one execute replays these pointers.
                let (us_plan_graph, host_us_graph) =
                    match unsafe { plan.cuda_graph(cudnn, &io, ws_ptr, GraphMode::Auto) } {
                        Ok(cg) => {
                            let device = device_time(stream, &mut || cg.launch().map_err(Into::into))?.0;
                            let (host, _, _) = host_time(stream, 20, 100, 200, &mut || {
                                cg.launch().expect("launch the plan's graph");
                            });
                            (Some(device), Some(host))
                        }
                        Err(e) => {
                            eprintln!("PlanGraph of B={b} L={l} page={page}: {e}");
                            (None, None)
                        }
                    };
                let total: i64 = lens[dist].iter().map(|&n| i64::from(n)).sum();
                let bytes = (total * H_KV * D * 2 * 2 + 2 * b * H_Q * D * 2) as f64;
                let tbps = bytes / (us * 1e-6) / 1e12;
                let tbps_cg = us_cg.map(|t| bytes / (t * 1e-6) / 1e12);
                out.record(
                    &format!("paged_decode_b{b}_l{l}_p{page}_{dist}"),
                    "cudnn-graph",
                    json!({
                        "B": b, "L": l, "page_size": page, "dist": dist, "implementation": implementation,
                        "engine": plan.selected().tag(), "build_ms": build_ms, "cold_build": cold,
                        "us": us, "us_min": us_min, "runs": runs, "inner": batch, "us_cg": us_cg,
                        "inner_cg": CG_CALLS, "us_plan_graph": us_plan_graph,
                        "host_us": host_us, "host_us_graph": host_us_graph, "bytes": bytes, "mean_len": total as f64 / b as f64,
                        "tbps": tbps, "frac_peak": peak.map(|p| tbps / p), "tbps_cg": tbps_cg,
                        "frac_peak_cg": peak.zip(tbps_cg).map(|(p, t)| t / p), "table_width": width,
                        "num_blocks": pages, "output_finite": finite, "device": device,
                        "cudnn": cudnn.version(),
                    }),
                );
                drop(guards);
            }
        }
        Ok(())
    }
}
