//! What capture costs an execute (issue 34): the host time of `ExecutionPlan::execute_raw` (the
//! enqueue; the GPU work is a small elementwise kernel) with the capture off, then on without
//! inputs, in alternating rounds, each round the median over `--iters` calls of each call's own
//! time. One JSON line per mode and a summary; `--guard` exits 1 when capture on costs more than
//! 2 % of the host time per execute (the issue's target). The first execute of a plan with the
//! capture on writes its entry; it is run before timing, as a service's first call would be.
//!
//! ```text
//! cargo build --release --example capture_cost
//! target/release/examples/capture_cost --gpu [--iters 20000] [--rounds 7] [--guard]
//! ```

use std::time::Instant;

use cudnn_graph::backend::capture::{self, CaptureOptions};
use cudnn_graph::backend::cudarc::driver::DevicePtr;
use cudnn_graph::backend::{cuda_context, BuildOptions, Cudnn, ExecutionPlan};
use cudnn_graph::{DataType, GraphBuilder};
use serde_json::json;

type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    if !args.iter().any(|a| a == "--gpu") {
        eprintln!("capture_cost times executes on a GPU: run it with --gpu");
        return Ok(());
    }
    let iters: usize = value("--iters").map(|v| v.parse()).transpose()?.unwrap_or(20_000);
    let rounds: usize = value("--rounds").map(|v| v.parse()).transpose()?.unwrap_or(7);
    let stream = cuda_context(0)?.default_stream();
    let cudnn = Cudnn::new(stream.clone())?;
    let mut g = GraphBuilder::new("capture_cost_add");
    let a = g.input("a", DataType::F32, &[1, 64, 64])?;
    let b = g.input("b", DataType::F32, &[1, 64, 64])?;
    let y = g.op("add", &[a.into(), b.into()], &[])?[0];
    g.output(y, "y", DataType::F32)?;
    let graph = g.build()?;
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default())?;
    let buffers: Vec<_> = (0..3).map(|_| stream.alloc_zeros::<f32>(64 * 64)).collect::<Result<_, _>>()?;
    let io: Vec<u64> = buffers.iter().map(|b| b.device_ptr(&stream).0).collect();
    let workspace = stream.alloc_zeros::<u8>(plan.workspace_size().max(1))?;
    let ws = workspace.device_ptr(&stream).0;
    let dir = std::env::temp_dir().join(format!("capture-cost-{}", std::process::id()));
    let run = |iters: usize| -> Result<f64> {
        let mut times = Vec::with_capacity(iters);
        for _ in 0..iters {
            let start = Instant::now();
            // SAFETY: three buffers of the graph's [1, 64, 64] f32 tensors and the plan's workspace,
            // on this context, alive (and the stream synchronized) past every execute.
            unsafe { plan.execute_raw(&cudnn, &io, ws) }?;
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
        stream.synchronize()?;
        Ok(median(&mut times))
    };
    run(1000)?;
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        off.push(run(iters)?);
        capture::start(CaptureOptions::new(&dir))?;
        run(1)?; // the first execute of the plan with the capture on records it
        on.push(run(iters)?);
        capture::stop();
    }
    let (off, on) = (median(&mut off), median(&mut on));
    for (mode, us) in [("off", off), ("on", on)] {
        println!(
            "{}",
            json!({"bench": "capture_cost", "capture": mode, "host_us_per_execute": us, "iters": iters, "rounds": rounds})
        );
    }
    let ratio = on / off;
    println!("{}", json!({"bench": "capture_cost", "capture": "summary", "on_over_off": ratio}));
    let _ = std::fs::remove_dir_all(&dir);
    if args.iter().any(|a| a == "--guard") && ratio > 1.02 {
        eprintln!(
            "capture_cost guard failed: capture on costs {:.1} % of an execute's host time (≤ 2 %)",
            (ratio - 1.0) * 100.0
        );
        std::process::exit(1);
    }
    Ok(())
}
