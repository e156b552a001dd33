//! Native memory per build/drop cycle (issue #14): repeats one deviceless cuDNN cycle and prints
//! the process's resident set and glibc's heap after a warm-up and along the way, so a true leak
//! (in-use heap grows) can be told from allocator retention (free-but-retained heap grows, RSS
//! grows, in-use stays flat) and from a bounded cache (growth that plateaus).
//!
//! ```text
//! cargo run --release -p cudnn-runtime --example rss_cycles -- --mode build --cycles 2000
//! ```
//!
//! Modes: `build` (lower, heuristics, plan finalize, drop), `heuristics` (lower and heuristics
//! only: an out-of-range `candidate_index` stops the build before any plan is finalized), `load`
//! (a plan payload read back into a plan, and dropped). `--trim` calls `malloc_trim(0)` after
//! every cycle; `--every K` prints a line every K cycles; `--devprop FILE` describes another GPU
//! than the H200 of `tests/fixtures/h200-devprop.json`. Needs libcudnn 9 and a libcuda.so.1 (the
//! CI stand-in will do) on `LD_LIBRARY_PATH`, like the deviceless tests.

use std::error::Error;
use std::process::ExitCode;

use cudnn_runtime::backend::{BackendError, BuildOptions, Cudnn, ExecutionPlan};
use cudnn_runtime::ops::PointwiseMode;
use cudnn_runtime::payload::plan::{read_payload, write_payload, Expect, PlanOrigin, SerializeOptions};
use cudnn_runtime::{DataType, Graph, GraphBuilder};

const DEVPROP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/h200-devprop.json");

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Build,
    Heuristics,
    Load,
}

struct Args {
    mode: Mode,
    cycles: usize,
    warmup: usize,
    every: usize,
    trim: bool,
    devprop: String,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { mode: Mode::Build, cycles: 2000, warmup: 50, every: 0, trim: false, devprop: DEVPROP.into() };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--mode" => {
                args.mode = match value("--mode")?.as_str() {
                    "build" => Mode::Build,
                    "heuristics" => Mode::Heuristics,
                    "load" => Mode::Load,
                    other => return Err(format!("unknown mode `{other}` (build, heuristics or load)")),
                }
            }
            "--cycles" => args.cycles = number("--cycles", &value("--cycles")?)?,
            "--warmup" => args.warmup = number("--warmup", &value("--warmup")?)?,
            "--every" => args.every = number("--every", &value("--every")?)?,
            "--trim" => args.trim = true,
            "--devprop" => args.devprop = value("--devprop")?,
            other => {
                return Err(format!(
                    "unknown argument `{other}`; usage: rss_cycles [--mode build|heuristics|load] \
                     [--cycles N] [--warmup N] [--every K] [--trim] [--devprop FILE]"
                ))
            }
        }
    }
    if args.cycles == 0 {
        return Err("--cycles must be at least 1".into());
    }
    Ok(args)
}

fn number(name: &str, text: &str) -> Result<usize, String> {
    text.parse().map_err(|_| format!("{name} needs a whole number, not `{text}`"))
}

/// What one sample reads: resident set (from `/proc/self/statm`) and glibc's heap.
#[derive(Debug, Clone, Copy)]
struct Sample {
    rss: usize,
    /// glibc's `mallinfo2()`: `uordblks` in use, `fordblks` free but retained by the allocator,
    /// `hblkhd` in `mmap`ed chunks outside the arenas.
    heap: libc::mallinfo2,
}

fn sample() -> Result<Sample, Box<dyn Error>> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: usize = statm.split_whitespace().nth(1).ok_or("/proc/self/statm has no resident field")?.parse()?;
    // statm counts pages.
    // SAFETY: `sysconf` only reads a system constant.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })?;
    let rss = pages * page;
    // SAFETY: `mallinfo2` takes no arguments and returns a plain struct.
    let heap = unsafe { libc::mallinfo2() };
    Ok(Sample { rss, heap })
}

fn kib(bytes: usize) -> f64 {
    bytes as f64 / 1024.0
}

fn print(label: &str, s: &Sample) {
    println!(
        "{label:>14}: rss {:>9.0} KiB | heap in use {:>9.0} KiB, free retained {:>8.0} KiB, mmapped {:>7.0} KiB",
        kib(s.rss),
        kib(s.heap.uordblks),
        kib(s.heap.fordblks),
        kib(s.heap.hblkhd),
    );
}

/// `y = relu(a · b + bias)`, bf16: one fused kernel, runtime-compiled.
fn graph() -> Result<Graph, cudnn_runtime::Error> {
    let mut g = GraphBuilder::new("rss_matmul_bias_relu");
    let dt = DataType::BF16;
    let a = g.input("a", dt, &[1, 256, 128])?;
    let b = g.input("b", dt, &[1, 128, 512])?;
    let bias = g.input("bias", dt, &[1, 1, 512])?;
    let c = g.matmul(a, b)?;
    let d = g.pointwise(PointwiseMode::Add, &[c.into(), bias.into()])?;
    let y = g.pointwise(PointwiseMode::Relu, &[d.into()])?;
    g.output(y, "y", dt)?;
    Ok(g.build()?)
}

/// What a cycle needs, made once.
struct Setup {
    cudnn: Cudnn,
    graph: Graph,
    payload: Vec<u8>,
}

fn cycle(mode: Mode, s: &Setup) -> Result<(), Box<dyn Error>> {
    match mode {
        Mode::Build => drop(ExecutionPlan::build(&s.cudnn, &s.graph, &BuildOptions::default())?),
        Mode::Heuristics => {
            // Past the end of every candidate list: the build stops after heuristics.
            let options = BuildOptions::default().candidate_index(usize::MAX);
            match ExecutionPlan::build(&s.cudnn, &s.graph, &options) {
                Err(BackendError::CandidateIndex { .. }) => {}
                Err(e) => return Err(e.into()),
                Ok(_) => return Err("a build with candidate index usize::MAX succeeded".into()),
            }
        }
        Mode::Load => {
            let (plan, _payload) = read_payload(&s.cudnn, &s.payload, Some(s.graph.clone()), &Expect::default())?;
            drop(plan);
        }
    }
    Ok(())
}

fn run(args: &Args) -> Result<(), Box<dyn Error>> {
    let cudnn = Cudnn::deviceless(&std::fs::read_to_string(&args.devprop)?)?;
    let graph = graph()?;
    let payload = {
        let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default())?;
        write_payload(&plan, &PlanOrigin::of(&cudnn), SerializeOptions { structure: false }, &Expect::default())?
    };
    let setup = Setup { cudnn, graph, payload };
    println!(
        "mode {:?}, cuDNN {}, {} warm-up + {} cycles{}",
        args.mode,
        setup.cudnn.version(),
        args.warmup,
        args.cycles,
        if args.trim { ", malloc_trim(0) after each" } else { "" }
    );
    let trim = || {
        if args.trim {
            // SAFETY: `malloc_trim` only returns free memory to the system.
            unsafe { libc::malloc_trim(0) };
        }
    };
    for _ in 0..args.warmup {
        cycle(args.mode, &setup)?;
        trim();
    }
    let start = sample()?;
    print("after warm-up", &start);
    let started = std::time::Instant::now();
    for i in 1..=args.cycles {
        cycle(args.mode, &setup)?;
        trim();
        if args.every > 0 && i % args.every == 0 && i != args.cycles {
            let s = sample()?;
            print(&format!("cycle {i}"), &s);
        }
    }
    let end = sample()?;
    print(&format!("cycle {}", args.cycles), &end);
    let per = |a: usize, b: usize| (b as f64 - a as f64) / 1024.0 / args.cycles as f64;
    println!(
        "per cycle: rss {:+.2} KiB, heap in use {:+.2} KiB, free retained {:+.2} KiB ({:.2} ms a cycle)",
        per(start.rss, end.rss),
        per(start.heap.uordblks, end.heap.uordblks),
        per(start.heap.fordblks, end.heap.fordblks),
        started.elapsed().as_secs_f64() * 1000.0 / args.cycles as f64,
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rss_cycles: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rss_cycles: {e}");
            ExitCode::FAILURE
        }
    }
}
