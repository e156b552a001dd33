//! Padded class plans on the GPU (issue 19): attention forward and backward (sequence lengths
//! masked) and layer norm forward and backward (rows padded), each planned once at a class bound
//! and run at shorter lengths (copies into the class extents), against the CPU reference of each
//! call's own graph (relative error ≤ 2e-2, NaN never passes, outputs poisoned before each run).
//! The lengths go down and up again, so the padding a longer call left behind must be cleared.
//! Without a GPU each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_GPU=1`.

#![cfg(feature = "cudnn")]

use crate::common;
#[path = "../common/padded.rs"]
mod padded;

use common::{check, poisoned, random, upload};
use cudnn_graph::backend::{BuildOptions, DeviceBuffer, PaddedPlan};
use cudnn_graph::engines::{
    specialized_is_faster, CacheSource, ClassPlan, LengthServing, PlanCache, PlanKey, ServeReason, Specialization,
    TuningFile,
};
use cudnn_graph::payload::plan::Expect;
use half::bf16;
use padded::{
    bshd, Causal, CausalBackward, CausalBackwardInputs, CausalInputs, Cross, CrossInputs, LayerNormBackward,
    LayerNormBackwardInputs, LayerNormGelu, LayerNormGeluInputs,
};
use std::sync::Arc;

#[needs_gpu]
#[test]
fn gpu_padded_attention_forward_and_backward_match_the_reference() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let options = BuildOptions::default();
    let mut fwd = PaddedPlan::build(&cudnn, &Causal::<64>::new(512).graph().unwrap(), &options).unwrap();
    let mut bwd = PaddedPlan::build(&cudnn, &CausalBackward::<64>::new(512).graph().unwrap(), &options).unwrap();
    println!("forward {fwd:?}, backward {bwd:?}");
    // Down, up, down again: the tails a longer call left must not reach a shorter one.
    for (round, s) in [300usize, 512, 37, 400, 1, 129].into_iter().enumerate() {
        let seed = 100 * round as u64;
        let (nq, nk) = (2 * 4 * s * 64, 2 * 2 * s * 64);
        let q: Vec<bf16> = random(seed, nq);
        let k: Vec<bf16> = random(seed + 1, nk);
        let v: Vec<bf16> = random(seed + 2, nk);
        let want = Causal::<64>::new(s).reference(CausalInputs { q: &q, k: &k, v: &v }).unwrap();
        let (dq, dk, dv) = (upload(&stream, &q), upload(&stream, &k), upload(&stream, &v));
        let mut o = poisoned::<bf16>(&stream, nq);
        let mut stats = poisoned::<f32>(&stream, 2 * 4 * s);
        let call = Causal::<64>::new(s).graph().unwrap();
        let began = std::time::Instant::now();
        fwd.execute(
            &cudnn,
            &call,
            &mut [
                DeviceBuffer::input(&dq),
                DeviceBuffer::input(&dk),
                DeviceBuffer::input(&dv),
                DeviceBuffer::output(&mut o),
                DeviceBuffer::output(&mut stats),
            ],
        )
        .unwrap();
        let host = began.elapsed();
        let case = format!("forward S = {s} on the S = 512 plan (host {:.0} µs)", host.as_secs_f64() * 1e6);
        check(&case, "o", &stream.clone_dtoh(&o).unwrap(), &want.o);
        check(&case, "stats", &stream.clone_dtoh(&stats).unwrap(), &want.stats);
        if s == 1 {
            continue; // cuDNN's backward refuses S = 1 in the call's own graph: no reference
        }
        let d_o: Vec<bf16> = random(seed + 3, nq);
        let o_ref: Vec<bf16> = want.o.clone();
        let grads = CausalBackward::<64>::new(s)
            .reference(CausalBackwardInputs { q: &q, k: &k, v: &v, o: &o_ref, d_o: &d_o, stats: &want.stats })
            .unwrap();
        let (d_o_dev, o_dev, stats_dev) =
            (upload(&stream, &d_o), upload(&stream, &o_ref), upload(&stream, &want.stats));
        let mut d_q = poisoned::<bf16>(&stream, nq);
        let mut d_k = poisoned::<bf16>(&stream, nk);
        let mut d_v = poisoned::<bf16>(&stream, nk);
        bwd.execute(
            &cudnn,
            &CausalBackward::<64>::new(s).graph().unwrap(),
            &mut [
                DeviceBuffer::input(&dq),
                DeviceBuffer::input(&dk),
                DeviceBuffer::input(&dv),
                DeviceBuffer::input(&o_dev),
                DeviceBuffer::input(&d_o_dev),
                DeviceBuffer::input(&stats_dev),
                DeviceBuffer::output(&mut d_q),
                DeviceBuffer::output(&mut d_k),
                DeviceBuffer::output(&mut d_v),
            ],
        )
        .unwrap();
        let case = format!("backward S = {s} on the S = 512 plan");
        check(&case, "d_q", &stream.clone_dtoh(&d_q).unwrap(), &grads.d_q);
        check(&case, "d_k", &stream.clone_dtoh(&d_k).unwrap(), &grads.d_k);
        check(&case, "d_v", &stream.clone_dtoh(&d_v).unwrap(), &grads.d_v);
    }
}

#[needs_gpu]
#[test]
fn gpu_padded_attention_bshd_and_cross_lengths() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let options = BuildOptions::default();
    let mut plan = PaddedPlan::build(&cudnn, &bshd(1024, 64), &options).unwrap();
    for s in [1000usize, 3, 1024] {
        let n = 2 * 4 * s * 64;
        let (q, k, v): (Vec<bf16>, Vec<bf16>, Vec<bf16>) = (random(7, n), random(8, n), random(9, n));
        let call = bshd(s as i64, 64);
        let named = [("q", q.as_slice().into()), ("k", k.as_slice().into()), ("v", v.as_slice().into())];
        let want = cudnn_graph::reference::run(&call, &named).unwrap().remove(0);
        let want: Vec<bf16> = want.data.iter().map(|&x| bf16::from_f64(x)).collect();
        let (dq, dk, dv) = (upload(&stream, &q), upload(&stream, &k), upload(&stream, &v));
        let mut o = poisoned::<bf16>(&stream, n);
        let mut io = [
            DeviceBuffer::input(&dq),
            DeviceBuffer::input(&dk),
            DeviceBuffer::input(&dv),
            DeviceBuffer::output(&mut o),
        ];
        plan.execute(&cudnn, &call, &mut io).unwrap();
        // The reference's values are logical [B, H, S, D]; the buffer is BSHD.
        let got = stream.clone_dtoh(&o).unwrap();
        let mut logical = vec![bf16::ZERO; n];
        for b in 0..2 {
            for h in 0..4 {
                for p in 0..s {
                    for d in 0..64 {
                        logical[((b * 4 + h) * s + p) * 64 + d] = got[((b * s + p) * 4 + h) * 64 + d];
                    }
                }
            }
        }
        check(&format!("BSHD S = {s} on the S = 1024 plan"), "o", &logical, &want);
    }

    // Cross-attention through a plan cache: the class plan is built once and shared.
    let cache = PlanCache::in_memory();
    let class = Cross::<64>::new(256, 256).graph().unwrap();
    let (mut cross, first) = cache.padded_plan(&cudnn, &class, &Expect::default(), &options).unwrap();
    let (again, second) = cache.padded_plan(&cudnn, &class, &Expect::default(), &options).unwrap();
    assert_eq!((first.source, second.source), (CacheSource::Built, CacheSource::Memory));
    assert!(std::ptr::eq(cross.plan(), again.plan()), "one class plan, shared");
    drop(again);
    for (sq, skv) in [(5usize, 130usize), (256, 7), (64, 256)] {
        let q: Vec<bf16> = random(11, 2 * sq * 64);
        let k: Vec<bf16> = random(12, 2 * skv * 64);
        let v: Vec<bf16> = random(13, 2 * skv * 64);
        let want = Cross::<64>::new(sq, skv).reference(CrossInputs { q: &q, k: &k, v: &v }).unwrap();
        let (dq, dk, dv) = (upload(&stream, &q), upload(&stream, &k), upload(&stream, &v));
        let mut o = poisoned::<bf16>(&stream, 2 * sq * 64);
        let mut io = [
            DeviceBuffer::input(&dq),
            DeviceBuffer::input(&dk),
            DeviceBuffer::input(&dv),
            DeviceBuffer::output(&mut o),
        ];
        cross.execute(&cudnn, &Cross::<64>::new(sq, skv).graph().unwrap(), &mut io).unwrap();
        check(&format!("cross S_q = {sq}, S_kv = {skv} on (256, 256)"), "o", &stream.clone_dtoh(&o).unwrap(), &want.o);
    }

    // A call the class cannot serve is a typed error before anything runs.
    let mut o = poisoned::<bf16>(&stream, 2 * 4 * 2048 * 64);
    let q = upload(&stream, &random::<bf16>(1, 2 * 4 * 2048 * 64));
    let mut io =
        [DeviceBuffer::input(&q), DeviceBuffer::input(&q), DeviceBuffer::input(&q), DeviceBuffer::output(&mut o)];
    let e = plan.execute(&cudnn, &bshd(2048, 64), &mut io).unwrap_err();
    assert!(e.to_string().contains("class bound"), "{e}");
}

#[needs_gpu]
#[test]
fn gpu_padded_layer_norm_forward_and_backward_match_the_reference() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    const E: usize = 1024;
    let options = BuildOptions::default();
    let mut fwd = PaddedPlan::build(&cudnn, &LayerNormGelu::<E>::new(4096).graph().unwrap(), &options).unwrap();
    let mut bwd = PaddedPlan::build(&cudnn, &LayerNormBackward::<E>::new(4096).graph().unwrap(), &options).unwrap();
    println!("forward {fwd:?}, backward {bwd:?}");
    // Warmed first (their kernels loaded on zeros, scratch for SCALE and BIAS): the calls below
    // must not see it.
    fwd.warm_up(&cudnn).unwrap();
    bwd.warm_up(&cudnn).unwrap();
    let scale: Vec<f32> = random(1, E);
    let bias: Vec<f32> = random(2, E);
    let (scale_dev, bias_dev) = (upload(&stream, &scale), upload(&stream, &bias));
    // Down, up, down again: DSCALE and DBIAS sum over every row of the plan, so the rows a
    // longer call left must be cleared.
    for (round, t) in [300usize, 4096, 7, 1000, 1].into_iter().enumerate() {
        let seed = 1000 + 100 * round as u64;
        let x: Vec<bf16> = random(seed, t * E);
        let want =
            LayerNormGelu::<E>::new(t).reference(LayerNormGeluInputs { x: &x, scale: &scale, bias: &bias }).unwrap();
        let x_dev = upload(&stream, &x);
        let mut y = poisoned::<bf16>(&stream, t * E);
        let mut mean = poisoned::<f32>(&stream, t);
        let mut inv_var = poisoned::<f32>(&stream, t);
        let began = std::time::Instant::now();
        fwd.execute(
            &cudnn,
            &LayerNormGelu::<E>::new(t).graph().unwrap(),
            &mut [
                DeviceBuffer::input(&x_dev),
                DeviceBuffer::input(&scale_dev),
                DeviceBuffer::input(&bias_dev),
                // `Graph::outputs` order: the norm's statistics were made before the GELU's y.
                DeviceBuffer::output(&mut mean),
                DeviceBuffer::output(&mut inv_var),
                DeviceBuffer::output(&mut y),
            ],
        )
        .unwrap();
        let host = began.elapsed();
        let case = format!("layer norm T = {t} on the T = 4096 plan (host {:.0} µs)", host.as_secs_f64() * 1e6);
        check(&case, "y", &stream.clone_dtoh(&y).unwrap(), &want.y);
        check(&case, "mean", &stream.clone_dtoh(&mean).unwrap(), &want.mean);
        check(&case, "inv_var", &stream.clone_dtoh(&inv_var).unwrap(), &want.inv_var);

        let dy: Vec<bf16> = random(seed + 1, t * E);
        let grads = LayerNormBackward::<E>::new(t)
            .reference(LayerNormBackwardInputs {
                dy: &dy,
                x: &x,
                scale: &scale,
                mean: &want.mean,
                inv_var: &want.inv_var,
            })
            .unwrap();
        let (dy_dev, mean_dev, inv_var_dev) =
            (upload(&stream, &dy), upload(&stream, &want.mean), upload(&stream, &want.inv_var));
        let mut dx = poisoned::<bf16>(&stream, t * E);
        let mut dscale = poisoned::<f32>(&stream, E);
        let mut dbias = poisoned::<f32>(&stream, E);
        bwd.execute(
            &cudnn,
            &LayerNormBackward::<E>::new(t).graph().unwrap(),
            &mut [
                DeviceBuffer::input(&dy_dev),
                DeviceBuffer::input(&x_dev),
                DeviceBuffer::input(&scale_dev),
                DeviceBuffer::input(&mean_dev),
                DeviceBuffer::input(&inv_var_dev),
                DeviceBuffer::output(&mut dx),
                DeviceBuffer::output(&mut dscale),
                DeviceBuffer::output(&mut dbias),
            ],
        )
        .unwrap();
        let case = format!("layer norm backward T = {t} on the T = 4096 plan");
        check(&case, "dx", &stream.clone_dtoh(&dx).unwrap(), &grads.dx);
        check(&case, "dscale", &stream.clone_dtoh(&dscale).unwrap(), &grads.dscale);
        check(&case, "dbias", &stream.clone_dtoh(&dbias).unwrap(), &grads.dbias);
    }
}

/// One forward call of `Causal::<64>` at `s` through a class plan, checked against the CPU
/// reference.
fn class_call(
    stream: &std::sync::Arc<cudnn_graph::backend::cudarc::driver::CudaStream>,
    cudnn: &cudnn_graph::backend::Cudnn,
    plan: &mut ClassPlan,
    s: usize,
    case: &str,
) {
    let nq = 2 * 4 * s * 64;
    let q: Vec<bf16> = random(s as u64, nq);
    let k: Vec<bf16> = random(s as u64 + 1, nq / 2);
    let v: Vec<bf16> = random(s as u64 + 2, nq / 2);
    let want = Causal::<64>::new(s).reference(CausalInputs { q: &q, k: &k, v: &v }).unwrap();
    let (dq, dk, dv) = (upload(stream, &q), upload(stream, &k), upload(stream, &v));
    let mut o = poisoned::<bf16>(stream, nq);
    let mut stats = poisoned::<f32>(stream, 2 * 4 * s);
    let mut io = [
        DeviceBuffer::input(&dq),
        DeviceBuffer::input(&dk),
        DeviceBuffer::input(&dv),
        DeviceBuffer::output(&mut o),
        DeviceBuffer::output(&mut stats),
    ];
    plan.execute(cudnn, &Causal::<64>::new(s).graph().unwrap(), &mut io).unwrap();
    check(case, "o", &stream.clone_dtoh(&o).unwrap(), &want.o);
    check(case, "stats", &stream.clone_dtoh(&stats).unwrap(), &want.stats);
}

/// The lazy policy on a class plan: a new length runs padded at once, its exact plan is built
/// and timed in the background, and swapped in only when the times say so (S = 64 on the S =
/// 1024 plan: the bound's S² is 256 times the work, so it must be); eager runs every length
/// exact from its first call, none always padded. Every call, padded or exact, matches the
/// reference.
#[needs_gpu]
#[test]
fn gpu_class_plans_swap_in_exact_plans_by_policy() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let options = BuildOptions::default();
    let class = Causal::<64>::new(1024).graph().unwrap();

    let cache = Arc::new(PlanCache::in_memory().specialization(Specialization::Lazy));
    let mut plan = cache.class_plan(&cudnn, &class, &Expect::default(), &options).unwrap();
    let began = std::time::Instant::now();
    plan.warm_up(&cudnn).unwrap();
    println!("warm-up {:.2} ms", began.elapsed().as_secs_f64() * 1e3);
    for s in [64usize, 1000, 1024] {
        class_call(&stream, &cudnn, &mut plan, s, &format!("lazy S = {s}, first call (padded)"));
    }
    assert_eq!(plan.stats().padded_calls, 3);
    // Later calls may have taken some up already: the three are decided once the worker is idle.
    plan.wait_for_specializations();
    for s in [64usize, 1000, 1024] {
        let serving = plan.serving(&Causal::<64>::new(s).graph().unwrap()).unwrap().unwrap();
        println!("lazy S = {s}: {serving}");
        match serving {
            LengthServing::ExactFaster { padded_us, exact_us } => assert!(specialized_is_faster(padded_us, exact_us)),
            LengthServing::PaddedFaster { padded_us, exact_us } => {
                assert!(s != 64 && !specialized_is_faster(padded_us, exact_us))
            }
            other => panic!("S = {s}: {other}"),
        }
        class_call(&stream, &cudnn, &mut plan, s, &format!("lazy S = {s}, after the swap decision"));
    }
    let stats = plan.stats();
    println!("lazy {stats:?}; cache {:?}", cache.stats());
    assert!(stats.exact_calls >= 1 && stats.exact_plans >= 1, "{stats:?}");
    assert_eq!(stats.padded_calls + stats.exact_calls, 6);
    let key = PlanKey::new(&cudnn, &Causal::<64>::new(64).graph().unwrap(), &Expect::default());
    assert!(matches!(cache.serving(&key).unwrap().reason, ServeReason::FasterThanPadded { .. }));

    // A threshold: a length is specialized at its second call, not its first.
    let mut plan = cache.class_plan(&cudnn, &class, &Expect::default(), &options).unwrap().specialize_after(2);
    let s300 = Causal::<64>::new(300).graph().unwrap();
    class_call(&stream, &cudnn, &mut plan, 300, "lazy after 2, S = 300, first call");
    assert_eq!(plan.serving(&s300).unwrap(), Some(LengthServing::Cold));
    class_call(&stream, &cudnn, &mut plan, 300, "lazy after 2, S = 300, second call");
    plan.wait_for_specializations();
    assert!(plan.serving(&s300).unwrap().is_some_and(|s| s.is_exact()), "{:?}", plan.serving(&s300));

    let eager = Arc::new(PlanCache::in_memory());
    let mut plan = eager.class_plan(&cudnn, &class, &Expect::default(), &options).unwrap();
    class_call(&stream, &cudnn, &mut plan, 300, "eager S = 300");
    class_call(&stream, &cudnn, &mut plan, 300, "eager S = 300 again");
    let serving = plan.serving(&Causal::<64>::new(300).graph().unwrap()).unwrap();
    assert_eq!((plan.stats().exact_calls, plan.stats().padded_calls, serving), (2, 0, Some(LengthServing::Exact)));

    let none = Arc::new(PlanCache::in_memory().specialization(Specialization::None));
    let mut plan = none.class_plan(&cudnn, &class, &Expect::default(), &options).unwrap();
    class_call(&stream, &cudnn, &mut plan, 300, "none S = 300");
    assert_eq!((plan.stats().exact_calls, plan.stats().padded_calls), (0, 1));
    assert_eq!(none.stats().specializations_queued, 0);
}

/// `cudnn-graph tune --dyn … --padded` tunes each class's padded plan (the masked graph at its
/// bound); a plan cache with that store then builds each class plan as recorded (one candidate,
/// nothing timed), and the class plan serves a shorter call right.
#[needs_gpu]
#[test]
fn gpu_tune_padded_fills_the_class_plans_a_cache_then_builds() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let dir = std::env::temp_dir().join(format!("cudnn-graph-gpu-tune-padded-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let graph = dir.join("causal.json");
    std::fs::write(&graph, cudnn_graph::serialize::structure_to_json(&Causal::<64>::new(256).graph().unwrap()))
        .unwrap();
    let store = dir.join("tuning.json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cudnn-graph"))
        .args(["tune", "--store"])
        .arg(&store)
        .args(["--device", "0", "--graph"])
        .arg(&graph)
        .args(["--dyn", "S: 256..=512 pow2 @ q[2] k[2] v[2]", "--padded"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for s in [256, 512] {
        assert!(stdout.contains(&format!("[S = {s}]: tuned in ")), "{stdout}");
    }
    assert!(stdout.contains("2 entries"), "{stdout}");
    let file = TuningFile::open(&store).unwrap();
    let cache = Arc::new(PlanCache::in_memory().specialization(Specialization::None).with_tuning_store(file));
    let options = BuildOptions::default();
    for s in [256usize, 512] {
        let class = Causal::<64>::new(s).graph().unwrap();
        let (_, cached) = cache.padded_plan(&cudnn, &class, &Expect::default(), &options).unwrap();
        assert_eq!(cached.reason, ServeReason::Tuned, "S = {s}: {:?}", cached.warnings);
        assert!(cached.warnings.is_empty(), "S = {s}: {:?}", cached.warnings);
        assert!(cached.plan.parts().iter().all(|p| p.built().len() == 1), "S = {s}: one candidate built");
    }
    let mut plan =
        cache.class_plan(&cudnn, &Causal::<64>::new(512).graph().unwrap(), &Expect::default(), &options).unwrap();
    class_call(&stream, &cudnn, &mut plan, 300, "S = 300 on the tuned S = 512 class plan");
    assert_eq!(plan.stats().padded_calls, 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
