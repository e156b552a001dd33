//! Attention throughput on the GPU: cuDNN's flash attention through cudnn-graph, forward and
//! backward, causal and not, each lowering (fused `SDPA_FWD`, the composite subgraph), every
//! engine config cuDNN builds timed (plan choice), as JSON lines.
//!
//! ```text
//! cargo run --release --example bench_sdpa                 # b=4 h=16 s=4096 d=128 bf16
//! cargo run --release --example bench_sdpa -- --s 2048 --repeats 50 --first-plan
//! ```
//!
//! Timing: CUDA events around each execute on the plan's stream, after warm-up; the median of
//! the repeats. FLOPs: `4·b·h·s²·d` forward (two matmuls), halved when causal; the backward counts
//! 2.5 times the forward (five matmuls), as FlashAttention's and PyTorch's benchmarks do. Each line
//! is one (pass, causal, lowering, engine config), with `case`, `impl`, `gpu_ms` and `tflops` as
//! `../shared/bench/anchor_cudnn_frontend.py` writes them (`case` is its tag, e.g.
//! `sdpa_fwd_b4_h16_s4096_d128_causal`); `"best": true` marks the fastest config of its case.

#[cfg(not(feature = "cudnn"))]
fn main() {
    eprintln!("bench_sdpa runs on the GPU: build it with the `cudnn` feature (the default)");
    std::process::exit(2);
}

#[cfg(feature = "cudnn")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    bench::main()
}

#[cfg(feature = "cudnn")]
mod bench {
    use std::sync::Arc;

    use cudnn_graph::backend::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
    use cudnn_graph::backend::{BuildOptions, Cudnn, ExecutionPlan};
    use cudnn_graph::ops::AttrValue;
    use cudnn_graph::{DataType, Graph, GraphBuilder};
    use half::bf16;

    struct Args {
        b: i64,
        h: i64,
        s: i64,
        d: i64,
        warmup: usize,
        repeats: usize,
        all_plans: bool,
    }

    fn args() -> Args {
        let argv: Vec<String> = std::env::args().collect();
        let value = |flag: &str, default: i64| -> i64 {
            argv.iter()
                .position(|a| a == flag)
                .and_then(|i| argv.get(i + 1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        Args {
            b: value("--b", 4),
            h: value("--h", 16),
            s: value("--s", 4096),
            d: value("--d", 128),
            warmup: value("--warmup", 10) as usize,
            repeats: value("--repeats", 50) as usize,
            all_plans: !argv.iter().any(|a| a == "--first-plan"),
        }
    }

    /// Forward (`o = sdpa(q, k, v)`) or backward (`dq, dk, dv = sdpa_backward(...)`) at `a`'s shape.
    fn graph(a: &Args, backward: bool, causal: bool, implementation: &str) -> Graph {
        let dims = [a.b, a.h, a.s, a.d];
        let mut g = GraphBuilder::new(if backward { "sdpa_bwd" } else { "sdpa_fwd" });
        let mut ins = Vec::new();
        for name in ["q", "k", "v"] {
            ins.push(g.input(name, DataType::BF16, &dims).expect("input").into());
        }
        let mut attrs: Vec<(String, AttrValue)> = vec![("causal".into(), causal.into())];
        if implementation != "auto" {
            attrs.push(("implementation".into(), implementation.into()));
        }
        if backward {
            ins.push(g.input("o", DataType::BF16, &dims).expect("input").into());
            ins.push(g.input("d_o", DataType::BF16, &dims).expect("input").into());
            ins.push(g.input("stats", DataType::F32, &[a.b, a.h, a.s, 1]).expect("input").into());
            let outs = g.op("sdpa_backward", &ins, &attrs).expect("sdpa_backward");
            for (t, name) in outs.iter().zip(["d_q", "d_k", "d_v"]) {
                g.output(*t, name, DataType::BF16).expect("output");
            }
        } else {
            let o = g.op("sdpa", &ins, &attrs).expect("sdpa")[0];
            g.output(o, "o", DataType::BF16).expect("output");
        }
        g.build().expect("a valid graph")
    }

    /// Device buffers for every I/O tensor of `graph`, inputs filled with small values.
    fn buffers(stream: &Arc<CudaStream>, graph: &Graph) -> Vec<(CudaSlice<u8>, bool)> {
        let inputs = graph.inputs();
        inputs
            .iter()
            .chain(&graph.outputs())
            .map(|id| {
                let t = graph.tensor(*id);
                let n = t.storage_len();
                let is_input = inputs.contains(id);
                let bytes: Vec<u8> = match t.data_type {
                    DataType::F32 => (0..n).flat_map(|i| (1.0f32 + (i % 7) as f32 * 0.01).to_ne_bytes()).collect(),
                    _ => (0..n)
                        .flat_map(|i| {
                            bf16::from_f32(((i * 7919 % 255) as f32 / 127.0 - 1.0) * 0.5).to_bits().to_ne_bytes()
                        })
                        .collect(),
                };
                (stream.clone_htod(&bytes).expect("copy to the device"), is_input)
            })
            .collect()
    }

    fn median(mut v: Vec<f32>) -> f32 {
        v.sort_by(f32::total_cmp);
        v[v.len() / 2]
    }

    /// Times the selected plan of `plan`: milliseconds per execute (median).
    fn time(stream: &Arc<CudaStream>, cudnn: &Cudnn, plan: &ExecutionPlan, io: &[u64], ws: u64, a: &Args) -> f32 {
        let run = || {
            // SAFETY: `io` points at live buffers of the graph's tensors (in I/O order, sized by
            // their storage) and `ws` at a workspace of at least `max_workspace_size` bytes, all on
            // this stream's context; they outlive the runs (the caller holds them).
            unsafe { plan.execute_raw(cudnn, io, ws) }.expect("execute");
        };
        for _ in 0..a.warmup {
            run();
        }
        let flags = Some(cudnn_graph::backend::cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let times = (0..a.repeats)
            .map(|_| {
                let start = stream.record_event(flags).expect("event");
                run();
                let end = stream.record_event(flags).expect("event");
                start.elapsed_ms(&end).expect("elapsed")
            })
            .collect();
        median(times)
    }

    pub fn main() -> Result<(), Box<dyn std::error::Error>> {
        let a = args();
        let ctx = cudnn_graph::backend::cuda_context(0)?;
        let stream = ctx.default_stream();
        let cudnn = Cudnn::new(stream.clone())?;
        eprintln!("cuDNN {} on sm {:?}; b={} h={} s={} d={} bf16", cudnn.version(), cudnn.sm(), a.b, a.h, a.s, a.d);
        let forward_flops = 4.0 * (a.b * a.h) as f64 * (a.s as f64).powi(2) * a.d as f64;
        for backward in [false, true] {
            for causal in [false, true] {
                let implementations: &[&str] = if backward || causal { &["auto"] } else { &["auto", "composite"] };
                let mut lines: Vec<(f64, String)> = Vec::new();
                for implementation in implementations {
                    let g = graph(&a, backward, causal, implementation);
                    let options =
                        if a.all_plans { BuildOptions::default().all_plans() } else { BuildOptions::default() };
                    let started = std::time::Instant::now();
                    let built = ExecutionPlan::build(&cudnn, &g, &options);
                    let build_ms = started.elapsed().as_secs_f64() * 1e3;
                    let mut plan = match built {
                        Ok(p) => p,
                        Err(e) => {
                            eprintln!("{} causal={causal} {implementation}: {e}", g.name);
                            continue;
                        }
                    };
                    let mut bufs = buffers(&stream, &g);
                    let mut ws = stream.alloc_zeros::<u8>(plan.max_workspace_size().max(1))?;
                    let (ws_ptr, _ws_guard) = ws.device_ptr_mut(&stream);
                    let mut guards = Vec::new();
                    let io: Vec<u64> = bufs
                        .iter_mut()
                        .map(|(b, is_input)| {
                            let (p, guard) = if *is_input { b.device_ptr(&stream) } else { b.device_ptr_mut(&stream) };
                            guards.push(guard);
                            p
                        })
                        .collect();
                    for candidate in plan.built() {
                        plan.select(candidate)?;
                        let ms = time(&stream, &cudnn, &plan, &io, ws_ptr, &a);
                        let flops = forward_flops * if causal { 0.5 } else { 1.0 } * if backward { 2.5 } else { 1.0 };
                        let tflops = flops / (f64::from(ms) * 1e-3) / 1e12;
                        let case = format!(
                            "sdpa_{}_b{}_h{}_s{}_d{}{}",
                            if backward { "bwd" } else { "fwd" },
                            a.b,
                            a.h,
                            a.s,
                            a.d,
                            if causal { "_causal" } else { "" }
                        );
                        let line = format!(
                            "{{\"case\":\"{case}\",\"impl\":\"cudnn-graph\",\"implementation\":\"{implementation}\",\"engine\":\"{}\",\"build_ms\":{build_ms:.1},\"gpu_ms\":{ms:.4},\"tflops\":{tflops:.1},\"workspace_bytes\":{},\"cudnn\":{}",
                            plan.selected().tag(),
                            plan.workspace_size(),
                            cudnn.version()
                        );
                        lines.push((tflops, line));
                    }
                    drop(guards);
                }
                let best = lines.iter().map(|(t, _)| *t).fold(f64::NEG_INFINITY, f64::max);
                for (t, line) in lines {
                    println!("{line},\"best\":{}}}", t == best);
                }
            }
        }
        Ok(())
    }
}
