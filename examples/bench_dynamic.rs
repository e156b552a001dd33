//! Dynamic shapes on the GPU (issue 19): what a new shape of an already-built graph type costs
//! on the host, with and without cuDNN's kernel cache, and what the dynamic-shape plans cost on
//! the device against plans made for each shape by heuristics.
//!
//! ```text
//! cargo run --release --example bench_dynamic -- [--quick] [--only host,device,policy,padded,lazy,churn]
//!     [--shapes 1,2,4,...] [--cases matmul_bias_relu,...] [--device-properties DEVPROP.json]
//! ```
//!
//! `--shapes` replaces the S of `host`, `device` and `policy` (the first shape is 1024 whatever
//! the list), `--cases` keeps those graphs of theirs (`matmul_bias_relu`, `layernorm`,
//! `sdpa_fwd`, `sdpa_bwd`).
//!
//! With `--device-properties` (a deviceless context for the GPU it describes) `host` runs, and
//! `policy` without its device times (the lazy policy cannot time plans there, and says so).
//! Without it on a machine with no GPU it says why and exits with status 1; any failure is one
//! line on stderr, `bench_dynamic: ` and the error with its causes.
//!
//! - `host`: for matmul + bias + relu (`[1, S, 4096] x [1, 4096, 4096]`), layer norm
//!   (`[S, 4096]`), attention forward and backward (`[1, 16, S, 128]`, causal): the first shape
//!   (S = 1024) built, then every other shape of S = 128 … 8192 (`--quick`: 4) built as a new
//!   shape. `impl: static`: a plan cache without dynamic shapes (heuristics and compilation per
//!   shape); `impl: dynamic`: `PlanCache::dynamic_shapes` (the structure's kernel cache and
//!   engine). One line per shape: `host_ms` (the whole `get_or_build`), the build phases, whether
//!   the plan is dynamic-shape and whether heuristics were skipped.
//! - `device`: for each graph and S, the dynamic-shape plan (the engine the S = 1024 plan chose,
//!   kernels from its cache) and the exact plan (heuristics for this S, no kernel cache), each
//!   timed as autotuning times a candidate (`engines::measure`); `ratio` is dynamic / exact
//!   (the issue's target: within 1.05).
//! - `policy`: for each graph and each specialization policy (`impl`: `eager`, `none`, `lazy`;
//!   `PlanCache::specialization`), the S = 1024 shape built first, then every other shape's first
//!   call: `first_call_ms` (host time of `get_or_build`), the plan served (`dynamic_shape`) and
//!   why (`reason`); then, once the lazy policy's background builds are done (`settle_ms`, the
//!   wait for them after the last first call), each shape's steady plan (`steady_reason`) and its
//!   device time (`steady_us`, `engines::measure`; null deviceless). A row `{case}_policy_cache`
//!   gives the cache's counters.
//!
//! - `padded` (GPU only): attention forward and backward and layer norm (`[S, 4096]`, its rows)
//!   served by padded class plans (`backend::PaddedPlan`: one plan per class bound, a call's
//!   tensors copied into the class extents, attention's sequence lengths masked), classes of powers of two (`pow2`) and of multiples
//!   of 256 (`m256`), at S = 128 … 8192 including lengths between bounds. Per class bound
//!   `build_ms` (its plan and buffers, once); per S `host_us` (the call's graph and the first
//!   execute of that S: the host work of a new length), and the device time of the padded call
//!   (copies included) against the exact plan of that S (`exact_us`, heuristics), both timed as
//!   CUDA-event batches of back-to-back executes (median of 7 batches of 20), and `ratio`.
//! - `lazy` (GPU only): the same three graphs and lengths through class plans (`pow2`) under
//!   the lazy policy (`PlanCache::class_plan`), each class plan warmed when made
//!   (`ClassPlan::warm_up`, `{case}_lazy_class` rows: `build_ms`, `warm_up_ms`): per S
//!   `first_call_us` (a new length's first call: padded, its exact plan queued), `settle_ms`
//!   (waiting for the background builds after the last first call), what the length then runs
//!   (`serving`, `exact_served`) and its device time `lazy_us` against the exact plan's
//!   `exact_us` (same method as `padded`), and `ratio` (the issue's target: within 1.05). A row
//!   `{case}_lazy_cache` gives the cache's counters.
//! - `churn` (GPU only): 10 000 attention-forward calls (`--quick`: 1 000) at S drawn uniformly
//!   from 1 … 8192 through `pow2` class plans of one cache with an 8 MiB budget, policy `none`,
//!   then `lazy` (`impl`) specializing at a length's first call and at its fourth
//!   (`specialize_after`): the host time per call (p50, p99, max, how many over 5 ms), the
//!   cache's unpinned bytes against its budget (the largest seen, sampled every 100 calls), and
//!   the counters: specializations queued, swapped, kept, failed; evictions; padded and exact
//!   calls; exact plans found evicted.
//!
//! Every figure is one JSON object per line on stdout (`case`, `impl`, figures), as
//! `examples/bench.rs` prints them.

use std::sync::Arc;
use std::time::Duration;

use cudnn_graph::backend::cudarc::driver::sys::CUevent_flags;
use cudnn_graph::backend::cudarc::driver::{CudaSlice, CudaStream};
use cudnn_graph::backend::{BuildOptions, Cudnn, DeviceBuffer, ExecutionPlan, PaddedPlan};
use cudnn_graph::engines::{measure, AutotuneOptions, ClassPlan, PlanCache, Specialization, DEFAULT_BUDGET_BYTES};
use cudnn_graph::ops::PointwiseMode;
use cudnn_graph::payload::plan::Expect;
use cudnn_graph::{DataType, Graph, GraphBuilder, Operand};
use serde_json::{json, Value};

type Built = Result<Graph, Box<dyn std::error::Error>>;

/// Inputs `names`, each of `dims`, bf16.
fn inputs<const N: usize>(
    g: &mut GraphBuilder,
    names: [&str; N],
    dims: &[i64],
) -> Result<[Operand; N], Box<dyn std::error::Error>> {
    let mut out = [Operand::Scalar(0.0); N];
    for (slot, name) in out.iter_mut().zip(names) {
        *slot = g.input(name, DataType::BF16, dims)?.into();
    }
    Ok(out)
}

/// `y = relu(a · b + bias)`, `[1, s, 4096] x [1, 4096, 4096]`, bf16.
fn matmul_bias_relu(s: i64) -> Built {
    let mut g = GraphBuilder::new("matmul_bias_relu");
    let a = g.input("a", DataType::BF16, &[1, s, 4096])?;
    let b = g.input("b", DataType::BF16, &[1, 4096, 4096])?;
    let bias = g.input("bias", DataType::BF16, &[1, 1, 4096])?;
    let c = g.matmul(a, b)?;
    let d = g.pointwise(PointwiseMode::Add, &[c.into(), bias.into()])?;
    let y = g.pointwise(PointwiseMode::Relu, &[d.into()])?;
    g.output(y, "y", DataType::BF16)?;
    Ok(g.build()?)
}

/// Layer norm (inference) of `[s, 4096]` bf16.
fn layernorm(s: i64) -> Built {
    let mut g = GraphBuilder::new("layernorm");
    let x = g.input("x", DataType::BF16, &[s, 4096])?;
    let scale = g.input("scale", DataType::F32, &[1, 4096])?;
    let bias = g.input("bias", DataType::F32, &[1, 4096])?;
    let ins = [x.into(), scale.into(), bias.into(), Operand::Scalar(1e-5)];
    let outs = g.op("layernorm", &ins, &[])?;
    g.output(outs[0], "y", DataType::BF16)?;
    Ok(g.build()?)
}

/// Causal attention forward, `[1, 16, s, 128]` bf16.
fn sdpa_forward(s: i64) -> Built {
    let mut g = GraphBuilder::new("sdpa_fwd");
    let qkv = inputs(&mut g, ["q", "k", "v"], &[1, 16, s, 128])?;
    let outs = g.op("sdpa", &qkv, &[("causal".into(), true.into())])?;
    g.output(outs[0], "o", DataType::BF16)?;
    Ok(g.build()?)
}

/// Causal attention backward, `[1, 16, s, 128]` bf16.
fn sdpa_backward(s: i64) -> Built {
    let mut g = GraphBuilder::new("sdpa_bwd");
    let dims = [1, 16, s, 128];
    let mut ins = inputs(&mut g, ["q", "k", "v", "o", "d_o"], &dims)?.to_vec();
    ins.push(g.input("stats", DataType::F32, &[1, 16, s, 1])?.into());
    let outs = g.op("sdpa_backward", &ins, &[("causal".into(), true.into())])?;
    for (t, n) in outs.iter().zip(["d_q", "d_k", "d_v"]) {
        g.output(*t, n, DataType::BF16)?;
    }
    Ok(g.build()?)
}

type Family = (&'static str, fn(i64) -> Built);

const FAMILIES: [Family; 4] = [
    ("matmul_bias_relu", matmul_bias_relu),
    ("layernorm", layernorm),
    ("sdpa_fwd", sdpa_forward),
    ("sdpa_bwd", sdpa_backward),
];

const FIRST: i64 = 1024;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn emit(line: Value) {
    println!("{line}");
}

/// Host time of every new shape after the first, through a plan cache with or without dynamic
/// shapes.
fn host(cudnn: &Cudnn, shapes: &[i64], families: &[Family]) -> Result<(), Box<dyn std::error::Error>> {
    for &(case, graph) in families {
        for dynamic in [false, true] {
            let cache = if dynamic {
                PlanCache::in_memory().dynamic_shapes(DEFAULT_BUDGET_BYTES)
            } else {
                PlanCache::in_memory()
            };
            let imp = if dynamic { "dynamic" } else { "static" };
            for &s in std::iter::once(&FIRST).chain(shapes.iter().filter(|&&s| s != FIRST)) {
                let got = cache.get_or_build(cudnn, &graph(s)?, &Expect::default(), &BuildOptions::default())?;
                let t = got.plan.timings();
                emit(json!({
                    "case": format!("{case}_new_shape"), "impl": imp, "s": s, "first": s == FIRST,
                    "host_ms": ms(got.elapsed), "lower_ms": ms(t.lower), "heuristics_ms": ms(t.heuristics),
                    "check_support_ms": ms(t.check_support), "plan_build_ms": ms(t.plan_build),
                    "dynamic_shape": got.plan.is_dynamic_shape(), "engine": got.plan.selected().tag(),
                }));
            }
            let stats = cache.stats();
            emit(json!({
                "case": format!("{case}_cache"), "impl": imp, "entries": stats.entries, "bytes": stats.bytes,
                "kernel_caches": stats.kernel_caches, "kernel_bytes": stats.kernel_bytes,
            }));
        }
    }
    Ok(())
}

/// Device time of the dynamic-shape plan of each shape against the exact plan.
fn device(cudnn: &Cudnn, shapes: &[i64], families: &[Family]) -> Result<(), Box<dyn std::error::Error>> {
    let options = AutotuneOptions::default();
    for &(case, graph) in families {
        let cache = PlanCache::in_memory().dynamic_shapes(DEFAULT_BUDGET_BYTES);
        drop(cache.get_or_build(cudnn, &graph(FIRST)?, &Expect::default(), &BuildOptions::default())?);
        for &s in shapes {
            let g = graph(s)?;
            let dynamic = cache.get_or_build(cudnn, &g, &Expect::default(), &BuildOptions::default())?.plan;
            let exact = ExecutionPlan::build(cudnn, &g, &BuildOptions::default())?;
            let d = measure(cudnn, &dynamic, &options)?;
            let e = measure(cudnn, &exact, &options)?;
            emit(json!({
                "case": format!("{case}_device"), "impl": "dynamic_vs_exact", "s": s,
                "dynamic_us": d.median_us, "exact_us": e.median_us, "ratio": d.median_us / e.median_us,
                "dynamic_shape": dynamic.is_dynamic_shape(),
                "dynamic_engine": dynamic.selected().tag(), "exact_engine": exact.selected().tag(),
            }));
        }
    }
    Ok(())
}

/// What each specialization policy serves a new shape: its first call's host time, and its
/// steady plan's device time once the lazy policy's background builds are done.
fn policy(cudnn: &Cudnn, shapes: &[i64], families: &[Family]) -> Result<(), Box<dyn std::error::Error>> {
    let (options, expect) = (BuildOptions::default(), Expect::default());
    let timing = AutotuneOptions::default();
    let others: Vec<i64> = shapes.iter().copied().filter(|&s| s != FIRST).collect();
    for &(case, graph) in families {
        for policy in [Specialization::Eager, Specialization::None, Specialization::Lazy] {
            let cache = PlanCache::in_memory().specialization(policy);
            drop(cache.get_or_build(cudnn, &graph(FIRST)?, &expect, &options)?);
            cache.wait_for_specializations();
            let mut first = Vec::with_capacity(others.len());
            for &s in &others {
                let got = cache.get_or_build(cudnn, &graph(s)?, &expect, &options)?;
                first.push((ms(got.elapsed), got.plan.is_dynamic_shape(), got.reason.to_string()));
            }
            let settling = std::time::Instant::now();
            cache.wait_for_specializations();
            let settle_ms = ms(settling.elapsed());
            for (&s, (first_call_ms, dynamic, reason)) in others.iter().zip(first) {
                let steady = cache.get_or_build(cudnn, &graph(s)?, &expect, &options)?;
                let steady_us =
                    if cudnn.is_online() { Some(measure(cudnn, &steady.plan, &timing)?.median_us) } else { None };
                emit(json!({
                    "case": format!("{case}_policy"), "impl": policy.to_string(), "s": s,
                    "first_call_ms": first_call_ms, "dynamic_shape": dynamic, "reason": reason,
                    "settle_ms": settle_ms, "steady_dynamic_shape": steady.plan.is_dynamic_shape(),
                    "steady_reason": steady.reason.to_string(), "steady_us": steady_us,
                    "engine": steady.plan.selected().tag(),
                }));
            }
            let stats = cache.stats();
            emit(json!({
                "case": format!("{case}_policy_cache"), "impl": policy.to_string(), "entries": stats.entries,
                "bytes": stats.bytes, "kernel_bytes": stats.kernel_bytes,
                "queued": stats.specializations_queued, "swapped": stats.specializations_swapped,
                "kept_dynamic": stats.specializations_kept_dynamic, "failed": stats.specializations_failed,
            }));
        }
    }
    Ok(())
}

/// Median µs per call of `n` back-to-back calls of `f`, over 7 batches (after 3 warm-up calls).
fn time_us(
    stream: &CudaStream,
    n: usize,
    mut f: impl FnMut() -> Result<(), Box<dyn std::error::Error>>,
) -> Result<f64, Box<dyn std::error::Error>> {
    for _ in 0..3 {
        f()?;
    }
    let start = stream.context().new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let end = stream.context().new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let mut samples = Vec::with_capacity(7);
    for _ in 0..7 {
        start.record(stream)?;
        for _ in 0..n {
            f()?;
        }
        end.record(stream)?;
        samples.push(f64::from(start.elapsed_ms(&end)?) * 1e3 / n as f64);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[3])
}

/// Padded class plans (attention masked, layer norm's rows padded) against exact plans, per
/// sequence length.
fn padded(cudnn: &Cudnn) -> Result<(), Box<dyn std::error::Error>> {
    let stream = cudnn.stream().ok_or("padded plans need a GPU")?.clone();
    let lengths = [128, 200, 300, 512, 700, 1024, 1500, 2048, 3000, 4096, 6000, 8192];
    type Bound = fn(i64) -> i64;
    let buckets: [(&str, Bound); 2] =
        [("pow2", |s| (s as u64).next_power_of_two() as i64), ("m256", |s| (s + 255) / 256 * 256)];
    let options = BuildOptions::default();
    let cases: [Family; 3] = [("sdpa_fwd", sdpa_forward), ("sdpa_bwd", sdpa_backward), ("layernorm", layernorm)];
    for (case, graph) in cases {
        for (bucket, bound) in buckets {
            let mut plans: Vec<(i64, PaddedPlan)> = Vec::new();
            for &s in &lengths {
                let class = bound(s);
                if !plans.iter().any(|(c, _)| *c == class) {
                    let began = std::time::Instant::now();
                    let plan = PaddedPlan::build(cudnn, &graph(class)?, &options)?;
                    stream.synchronize()?;
                    emit(json!({
                        "case": format!("{case}_padded_class"), "impl": bucket, "class": class,
                        "build_ms": ms(began.elapsed()), "padded_bytes": plan.padded_bytes(),
                        "engine": plan.plan().selected().tag(),
                    }));
                    plans.push((class, plan));
                }
                let plan = &mut plans.iter_mut().find(|(c, _)| *c == class).ok_or("no class plan")?.1;
                let FirstCall { call, mut buffers, inputs, host_us } =
                    first_call(&stream, graph, s, |call, io| Ok(plan.execute(cudnn, call, io)?))?;
                let padded_us = time_us(&stream, 20, || {
                    let mut io = bind(&mut buffers, inputs);
                    Ok(plan.execute(cudnn, &call, &mut io)?)
                })?;
                let exact = ExecutionPlan::build(cudnn, &call, &options)?;
                let mut workspace = stream.alloc_zeros::<u8>(exact.workspace_size().max(1))?;
                let exact_us = time_us(&stream, 20, || {
                    let mut io = bind(&mut buffers, inputs);
                    Ok(exact.execute(cudnn, &mut io, Some(&mut workspace))?)
                })?;
                emit(json!({
                    "case": format!("{case}_padded"), "impl": bucket, "s": s, "class": class,
                    "host_us": host_us, "padded_us": padded_us, "exact_us": exact_us, "ratio": padded_us / exact_us,
                    "exact_engine": exact.selected().tag(),
                }));
            }
        }
    }
    Ok(())
}

/// Class plans under the lazy policy (`PlanCache::class_plan`): each new length runs padded at
/// once while its exact plan is built and timed in the background; once those are done, what
/// each length runs and its device time against the exact plan's.
fn lazy(cudnn: &Cudnn) -> Result<(), Box<dyn std::error::Error>> {
    let stream = cudnn.stream().ok_or("class plans need a GPU")?.clone();
    let lengths = [128, 200, 300, 512, 700, 1024, 1500, 2048, 3000, 4096, 6000, 8192];
    let options = BuildOptions::default();
    let cases: [Family; 3] = [("sdpa_fwd", sdpa_forward), ("sdpa_bwd", sdpa_backward), ("layernorm", layernorm)];
    for (case, graph) in cases {
        let cache = Arc::new(PlanCache::in_memory().specialization(Specialization::Lazy));
        let mut plans: Vec<(i64, ClassPlan)> = Vec::new();
        let mut calls = Vec::new();
        for &s in &lengths {
            let class = (s as u64).next_power_of_two() as i64;
            if !plans.iter().any(|(c, _)| *c == class) {
                let began = std::time::Instant::now();
                let mut plan = cache.class_plan(cudnn, &graph(class)?, &Expect::default(), &options)?;
                let build_ms = ms(began.elapsed());
                let began = std::time::Instant::now();
                plan.warm_up(cudnn)?;
                emit(json!({
                    "case": format!("{case}_lazy_class"), "impl": "pow2", "class": class,
                    "build_ms": build_ms, "warm_up_ms": ms(began.elapsed()),
                }));
                plans.push((class, plan));
            }
            let plan = &mut plans.iter_mut().find(|(c, _)| *c == class).ok_or("no class plan")?.1;
            // Its padded execute (enqueued) and queueing its exact plan.
            let first = first_call(&stream, graph, s, |call, io| Ok(plan.execute(cudnn, call, io)?))?;
            calls.push((s, class, first));
        }
        let began = std::time::Instant::now();
        for (_, plan) in &mut plans {
            plan.wait_for_specializations();
        }
        let settle_ms = ms(began.elapsed());
        for (s, class, FirstCall { call, mut buffers, inputs, host_us: first_call_us }) in calls {
            let plan = &mut plans.iter_mut().find(|(c, _)| *c == class).ok_or("no class plan")?.1;
            let serving = plan.serving(&call)?.ok_or("an untracked length")?;
            let lazy_us = time_us(&stream, 20, || Ok(plan.execute(cudnn, &call, &mut bind(&mut buffers, inputs))?))?;
            let exact = ExecutionPlan::build(cudnn, &call, &options)?;
            let mut workspace = stream.alloc_zeros::<u8>(exact.workspace_size().max(1))?;
            let exact_us = time_us(&stream, 20, || {
                Ok(exact.execute(cudnn, &mut bind(&mut buffers, inputs), Some(&mut workspace))?)
            })?;
            emit(json!({
                "case": format!("{case}_lazy"), "impl": "pow2", "s": s, "class": class,
                "first_call_us": first_call_us, "settle_ms": settle_ms, "exact_served": serving.is_exact(),
                "serving": serving.to_string(), "lazy_us": lazy_us, "exact_us": exact_us, "ratio": lazy_us / exact_us,
            }));
        }
        let stats = cache.stats();
        emit(json!({
            "case": format!("{case}_lazy_cache"), "impl": "pow2",
            "queued": stats.specializations_queued, "swapped": stats.specializations_swapped,
            "kept": stats.specializations_kept_dynamic, "failed": stats.specializations_failed,
            "entries": stats.entries, "bytes": stats.bytes,
        }));
    }
    Ok(())
}

/// A random workload through class plans: `calls` attention-forward calls (`[1, 16, S, 128]`,
/// causal) at S drawn uniformly from 1 … 8192, on `pow2` class plans of one lazy cache with a
/// small budget, so that exact plans are built, swapped in, evicted and built again while it
/// runs; and the same with the policy `none` (padded only, no background work), for the host
/// time the background builds cost the caller, and with a threshold (`specialize_after`). Each call's host time (its graph and the enqueued execute; the stream is synchronized
/// after each, untimed), the cache's bytes against its budget sampled every 100 calls, and the
/// counters at the end.
fn churn(cudnn: &Cudnn, calls: usize) -> Result<(), Box<dyn std::error::Error>> {
    for (policy, after) in [(Specialization::None, 1), (Specialization::Lazy, 1), (Specialization::Lazy, 4)] {
        churn_with(cudnn, calls, policy, after)?;
    }
    Ok(())
}

fn churn_with(
    cudnn: &Cudnn,
    calls: usize,
    policy: Specialization,
    after: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let stream = cudnn.stream().ok_or("class plans need a GPU")?.clone();
    const BUDGET: usize = 8 << 20;
    let cache = Arc::new(PlanCache::in_memory().with_budget(BUDGET).specialization(policy));
    let options = BuildOptions::default();
    // Buffers for the longest call serve every call: a longer buffer than a tensor needs is
    // accepted, and its first elements are used.
    let widest = sdpa_forward(8192)?;
    let mut buffers = buffers(&stream, &widest)?;
    let inputs = widest.inputs().len();
    let mut plans: Vec<(i64, ClassPlan)> = Vec::new();
    let mut rng = cudnn_graph::rng::SplitMix64::new(19);
    let (mut host_us, mut max_unpinned, mut max_pinned, mut distinct) =
        (Vec::with_capacity(calls), 0, 0, std::collections::HashSet::new());
    let began = std::time::Instant::now();
    for i in 0..calls {
        let s = 1 + (rng.next_u64() % 8192) as i64;
        distinct.insert(s);
        let class = (s as u64).next_power_of_two() as i64;
        if !plans.iter().any(|(c, _)| *c == class) {
            let plan = cache.class_plan(cudnn, &sdpa_forward(class)?, &Expect::default(), &options)?;
            plans.push((class, plan.specialize_after(after)));
        }
        let plan = &mut plans.iter_mut().find(|(c, _)| *c == class).ok_or("no class plan")?.1;
        let t = std::time::Instant::now();
        let call = sdpa_forward(s)?;
        plan.execute(cudnn, &call, &mut bind(&mut buffers, inputs))?;
        host_us.push(t.elapsed().as_secs_f64() * 1e6);
        stream.synchronize()?;
        if i % 100 == 99 {
            let stats = cache.stats();
            max_unpinned = max_unpinned.max(stats.bytes - stats.pinned_bytes);
            max_pinned = max_pinned.max(stats.pinned_bytes);
        }
    }
    let wall_s = began.elapsed().as_secs_f64();
    let stats = cache.stats();
    let sum =
        |f: fn(&cudnn_graph::engines::ClassPlanStats) -> u64| -> u64 { plans.iter().map(|(_, p)| f(&p.stats())).sum() };
    host_us.sort_by(f64::total_cmp);
    let at = |q: f64| host_us[((host_us.len() - 1) as f64 * q) as usize];
    emit(json!({
        "case": "sdpa_fwd_churn", "impl": policy.to_string(), "specialize_after": after, "calls": calls, "distinct_lengths": distinct.len(),
        "class_plans": plans.len(), "wall_s": wall_s, "budget": BUDGET,
        "max_unpinned_bytes": max_unpinned, "max_pinned_bytes": max_pinned, "bytes": stats.bytes,
        "entries": stats.entries, "evictions": stats.evictions,
        "queued": stats.specializations_queued, "swapped": stats.specializations_swapped,
        "kept": stats.specializations_kept_dynamic, "failed": stats.specializations_failed,
        "padded_calls": sum(|s| s.padded_calls), "exact_calls": sum(|s| s.exact_calls),
        "exact_evicted": sum(|s| s.exact_evicted), "forgotten": sum(|s| s.forgotten),
        "lengths_tracked": plans.iter().map(|(_, p)| p.stats().lengths).sum::<usize>(),
        "host_us_p50": at(0.5), "host_us_p99": at(0.99), "host_us_max": at(1.0),
        "calls_over_5ms": host_us.iter().filter(|&&t| t > 5000.0).count(),
    }));
    Ok(())
}

/// A new length's first call: the call's graph, its buffers, its input count, and the host work
/// of its first execute (the graph made again and the execute enqueued).
struct FirstCall {
    call: Graph,
    buffers: Vec<Buffer>,
    inputs: usize,
    host_us: f64,
}

/// Makes `graph(s)`'s buffers, then times its first call through `execute` (the graph made
/// again, the work enqueued); the stream is synchronized after, untimed.
fn first_call(
    stream: &std::sync::Arc<CudaStream>,
    graph: fn(i64) -> Built,
    s: i64,
    mut execute: impl FnMut(&Graph, &mut [DeviceBuffer<'_>]) -> Result<(), Box<dyn std::error::Error>>,
) -> Result<FirstCall, Box<dyn std::error::Error>> {
    let g = graph(s)?;
    let mut buffers = buffers(stream, &g)?;
    let inputs = g.inputs().len();
    let began = std::time::Instant::now();
    let call = graph(s)?;
    execute(&call, &mut bind(&mut buffers, inputs))?;
    let host_us = began.elapsed().as_secs_f64() * 1e6;
    stream.synchronize()?;
    Ok(FirstCall { call, buffers, inputs, host_us })
}

/// One I/O buffer: bf16, or f32 statistics and norm parameters.
enum Buffer {
    Bf16(CudaSlice<half::bf16>),
    F32(CudaSlice<f32>),
}

/// Zeroed buffers for the I/O tensors of `graph`.
fn buffers(stream: &std::sync::Arc<CudaStream>, graph: &Graph) -> Result<Vec<Buffer>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for id in graph.io() {
        let t = graph.tensor(id);
        out.push(match t.data_type {
            DataType::F32 => Buffer::F32(stream.alloc_zeros(t.storage_len())?),
            _ => Buffer::Bf16(stream.alloc_zeros(t.storage_len())?),
        });
    }
    Ok(out)
}

/// `buffers` as the I/O of a graph with `inputs` inputs: inputs read, outputs written.
fn bind(buffers: &mut [Buffer], inputs: usize) -> Vec<DeviceBuffer<'_>> {
    buffers
        .iter_mut()
        .enumerate()
        .map(|(i, b)| match (b, i < inputs) {
            (Buffer::Bf16(b), true) => DeviceBuffer::input(&*b),
            (Buffer::Bf16(b), false) => DeviceBuffer::output(b),
            (Buffer::F32(b), true) => DeviceBuffer::input(&*b),
            (Buffer::F32(b), false) => DeviceBuffer::output(b),
        })
        .collect()
}

/// A cuDNN context on GPU 0, or why there is none, in words.
fn online() -> Result<Cudnn, String> {
    use cudnn_graph::backend::{probe_libraries, DriverProbe};
    let hint = "pass --device-properties DEVPROP.json (tests/fixtures/h200-devprop.json) to time the host side \
                deviceless";
    let why = match probe_libraries().driver {
        DriverProbe::Missing => Some("no CUDA driver (libcuda) could be opened".to_string()),
        DriverProbe::StandIn { .. } => Some("libcuda is a stand-in, not the NVIDIA driver".to_string()),
        DriverProbe::Driver { initialized: false, .. } => Some("the CUDA driver finds no usable GPU".to_string()),
        DriverProbe::Driver { gpus, .. } if gpus.is_empty() => Some("the CUDA driver reports no GPU".to_string()),
        DriverProbe::Driver { .. } => None,
    };
    if let Some(why) = why {
        return Err(format!("no GPU to time on: {why}; on a machine without one, {hint}"));
    }
    let context = cudnn_graph::backend::cuda_context(0).map_err(|e| format!("GPU 0: {e}"))?;
    Cudnn::new(context.default_stream()).map_err(|e| format!("GPU 0: {e}"))
}

/// Runs the sections asked for; on failure says why in words on stderr (each error with its
/// causes, not a `Debug` dump) and exits with status 1.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let mut message = format!("bench_dynamic: {e}");
            let mut source = e.source();
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            eprintln!("{message}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).map(String::as_str);
    let wants = |section: &str| only.is_none_or(|o| o.split(',').any(|s| s == section));
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1));
    let shapes: Vec<i64> = match value("--shapes") {
        Some(list) => list
            .split(',')
            .map(|s| s.parse().map_err(|_| format!("--shapes takes lengths such as 128,512: `{s}` is not one")))
            .collect::<Result<_, _>>()?,
        None if quick => vec![128, 512, 2048, 8192],
        None => (7..=13).map(|p| 1 << p).chain([384, 1536, 3072, 6144]).collect(),
    };
    let families: Vec<Family> = match value("--cases") {
        Some(list) => {
            let wanted: Vec<&str> = list.split(',').collect();
            if let Some(unknown) = wanted.iter().find(|w| !FAMILIES.iter().any(|(name, _)| name == *w)) {
                return Err(format!("no case `{unknown}`: {:?}", FAMILIES.map(|(name, _)| name)).into());
            }
            FAMILIES.into_iter().filter(|(name, _)| wanted.contains(name)).collect()
        }
        None => FAMILIES.to_vec(),
    };
    let devprop = args.iter().position(|a| a == "--device-properties").and_then(|i| args.get(i + 1));
    let cudnn = match devprop {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("--device-properties {path}: {e}"))?;
            Cudnn::deviceless(&text).map_err(|e| format!("--device-properties {path}: {e}"))?
        }
        None => online()?,
    };
    let online = devprop.is_none();
    emit(json!({"case": "environment", "cudnn_version": cudnn.version(), "sm": cudnn.sm(), "online": online}));
    if wants("host") {
        host(&cudnn, &shapes, &families)?;
    }
    if wants("device") && online {
        device(&cudnn, &shapes, &families)?;
    }
    if wants("policy") {
        policy(&cudnn, &shapes, &families)?;
    }
    if wants("padded") && online {
        padded(&cudnn)?;
    }
    if wants("lazy") && online {
        lazy(&cudnn)?;
    }
    if wants("churn") && online {
        churn(&cudnn, if quick { 1000 } else { 10_000 })?;
    }
    Ok(())
}
