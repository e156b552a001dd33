//! Attention on the GPU: `graph!` attention graphs (fused `SDPA_FWD` and the composite subgraph,
//! forward and backward) built online through cuDNN, executed, and compared with the CPU
//! reference engine (relative error ≤ 2e-2, NaN never passes, outputs poisoned before each run).
//! Without a GPU each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_GPU=1`.

#![cfg(feature = "cudnn")]

use crate::common;

use std::sync::Arc;

use common::{random, relative_error};
use cudnn_graph::backend::cudarc::driver::{CudaSlice, CudaStream};
use cudnn_graph::backend::{BuildOptions, DeviceBuffer, ExecutionPlan};
use cudnn_graph::graph;
use cudnn_graph::{DataType, Element, GraphBuilder};
use half::{bf16, f16};

graph! {
    /// Plain attention: the fused SDPA_FWD operation where the loaded cuDNN has it.
    pub Plain<dyn B, dyn H, dyn S, dyn D>(q: bf16[B, H, S, D], k: bf16[B, H, S, D], v: bf16[B, H, S, D]) -> (o: bf16[B, H, S, D]) {
        o = sdpa(q, k, v);
    }

    /// The same, forced through the composite subgraph.
    pub PlainComposite<dyn B, dyn H, dyn S, dyn D>(q: bf16[B, H, S, D], k: bf16[B, H, S, D], v: bf16[B, H, S, D]) -> (o: bf16[B, H, S, D]) {
        o = sdpa(q, k, v, implementation = composite);
    }

    /// Causal grouped-query attention for training: O and the statistics.
    pub CausalGqa<dyn B, dyn HQ, dyn HKV, dyn S, dyn D>(
        q: bf16[B, HQ, S, D],
        k: bf16[B, HKV, S, D],
        v: bf16[B, HKV, S, D],
    ) -> (o: bf16[B, HQ, S, D], stats: f32[B, HQ, S, 1]) {
        let (out, lse) = sdpa(q, k, v, causal = true, training = true);
        o = out;
        stats = lse;
    }

    /// f16, bottom-right causal with S_q < S_kv (decoding against a cache), a sliding window.
    pub Decode<dyn SQ, dyn SKV>(q: f16[2, 8, SQ, 128], k: f16[2, 8, SKV, 128], v: f16[2, 8, SKV, 128]) -> (o: f16[2, 8, SQ, 128]) {
        o = sdpa(q, k, v, causal = true, alignment = bottom_right, window = 96, scale = 0.1);
    }

    /// A bias and per-batch sequence lengths.
    pub BiasPadding<dyn S>(
        q: bf16[2, 4, S, 64],
        k: bf16[2, 4, S, 64],
        v: bf16[2, 4, S, 64],
        bias: bf16[1, 4, S, S],
        seq_q: i32[2, 1, 1, 1],
        seq_kv: i32[2, 1, 1, 1],
    ) -> (o: bf16[2, 4, S, 64]) {
        o = sdpa(q, k, v, bias, seq_q, seq_kv, bias = true, padding_mask = true, causal = true);
    }

    /// Dropout (cuDNN's Philox: compared by determinism, not with the reference).
    pub Dropout<dyn S>(q: bf16[1, 4, S, 64], k: bf16[1, 4, S, 64], v: bf16[1, 4, S, 64], seed: i64[1, 1, 1, 1], offset: i64[1, 1, 1, 1]) -> (o: bf16[1, 4, S, 64]) {
        o = sdpa(q, k, v, seed, offset, dropout = 0.2);
    }

    /// The gradients of `CausalGqa`.
    pub CausalGqaBackward<dyn B, dyn HQ, dyn HKV, dyn S, dyn D>(
        q: bf16[B, HQ, S, D],
        k: bf16[B, HKV, S, D],
        v: bf16[B, HKV, S, D],
        o: bf16[B, HQ, S, D],
        d_o: bf16[B, HQ, S, D],
        stats: f32[B, HQ, S, 1],
    ) -> (d_q: bf16[B, HQ, S, D], d_k: bf16[B, HKV, S, D], d_v: bf16[B, HKV, S, D]) {
        let (dq, dk, dv) = sdpa_backward(q, k, v, o, d_o, stats, causal = true);
        d_q = dq;
        d_k = dk;
        d_v = dv;
    }

    /// Forward with a bias, for the backward with dBias (deterministic).
    pub Biased<dyn S>(q: bf16[1, 4, S, 64], k: bf16[1, 4, S, 64], v: bf16[1, 4, S, 64], bias: bf16[1, 4, S, S]) -> (o: bf16[1, 4, S, 64], stats: f32[1, 4, S, 1]) {
        let (out, lse) = sdpa(q, k, v, bias, bias = true, training = true);
        o = out;
        stats = lse;
    }

    pub BiasedBackward<dyn S>(
        q: bf16[1, 4, S, 64],
        k: bf16[1, 4, S, 64],
        v: bf16[1, 4, S, 64],
        o: bf16[1, 4, S, 64],
        d_o: bf16[1, 4, S, 64],
        stats: f32[1, 4, S, 1],
        bias: bf16[1, 4, S, S],
    ) -> (d_q: bf16[1, 4, S, 64], d_k: bf16[1, 4, S, 64], d_v: bf16[1, 4, S, 64], d_bias: bf16[1, 4, S, S]) {
        let (dq, dk, dv, db) = sdpa_backward(q, k, v, o, d_o, stats, bias, bias = true, d_bias = true, deterministic = true);
        d_q = dq;
        d_k = dk;
        d_v = dv;
        d_bias = db;
    }
}

const TOLERANCE: f64 = 2e-2;

/// A device buffer of `n` NaNs (every element must be written).
fn poisoned<T: Element + cudnn_graph::backend::cudarc::driver::DeviceRepr>(
    stream: &Arc<CudaStream>,
    n: usize,
) -> CudaSlice<T> {
    stream.clone_htod(&vec![T::from_f64_value(f64::NAN); n]).unwrap()
}

fn workspace(stream: &Arc<CudaStream>, bytes: usize) -> CudaSlice<u8> {
    stream.alloc_zeros::<u8>(bytes.max(1)).unwrap()
}

fn check<T: Element>(what: &str, got: &[T], want: &[T]) {
    let err = relative_error(got, want);
    println!("{what}: relative error {err:.3e}");
    assert!(err <= TOLERANCE, "{what}: relative error {err}");
}

#[needs_gpu]
#[test]
fn gpu_sdpa_forward_plain_fused_and_composite() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    for &(b, h, s, d) in &[(2, 8, 256, 64), (1, 4, 200, 128), (3, 2, 77, 64)] {
        let (q, k, v) =
            (random::<bf16>(1, b * h * s * d), random::<bf16>(2, b * h * s * d), random::<bf16>(3, b * h * s * d));
        let want = Plain::new(b, h, s, d).reference(PlainInputs { q: &q, k: &k, v: &v }).unwrap().o;
        let (q_d, k_d, v_d) =
            (stream.clone_htod(&q).unwrap(), stream.clone_htod(&k).unwrap(), stream.clone_htod(&v).unwrap());
        let fused = Plain::new(b, h, s, d).build(&cudnn, &BuildOptions::default()).unwrap();
        let mut o_d = poisoned::<bf16>(&stream, want.len());
        let mut ws = workspace(&stream, fused.workspace_size());
        fused.execute(&cudnn, PlainArgs { q: &q_d, k: &k_d, v: &v_d, o: &mut o_d }, Some(&mut ws)).unwrap();
        check(
            &format!("plain [{b},{h},{s},{d}] engine {}", fused.plan().selected().tag()),
            &stream.clone_dtoh(&o_d).unwrap(),
            &want,
        );
        let composite = PlainComposite::new(b, h, s, d).build(&cudnn, &BuildOptions::default()).unwrap();
        let mut o_d = poisoned::<bf16>(&stream, want.len());
        let mut ws = workspace(&stream, composite.workspace_size());
        composite
            .execute(&cudnn, PlainCompositeArgs { q: &q_d, k: &k_d, v: &v_d, o: &mut o_d }, Some(&mut ws))
            .unwrap();
        check(
            &format!("plain composite [{b},{h},{s},{d}] engine {}", composite.plan().selected().tag()),
            &stream.clone_dtoh(&o_d).unwrap(),
            &want,
        );
    }
}

#[needs_gpu]
#[test]
fn gpu_sdpa_forward_causal_gqa_with_stats() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    for &(b, hq, hkv, s, d) in &[(2, 8, 2, 128, 64), (1, 16, 1, 193, 128), (2, 6, 3, 64, 64)] {
        let g = CausalGqa::new(b, hq, hkv, s, d);
        let q = random::<bf16>(10, b * hq * s * d);
        let k = random::<bf16>(11, b * hkv * s * d);
        let v = random::<bf16>(12, b * hkv * s * d);
        let want = g.reference(CausalGqaInputs { q: &q, k: &k, v: &v }).unwrap();
        let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
        let (q_d, k_d, v_d) =
            (stream.clone_htod(&q).unwrap(), stream.clone_htod(&k).unwrap(), stream.clone_htod(&v).unwrap());
        let mut o_d = poisoned::<bf16>(&stream, want.o.len());
        let mut stats_d = poisoned::<f32>(&stream, want.stats.len());
        let mut ws = workspace(&stream, plan.workspace_size());
        plan.execute(
            &cudnn,
            CausalGqaArgs { q: &q_d, k: &k_d, v: &v_d, o: &mut o_d, stats: &mut stats_d },
            Some(&mut ws),
        )
        .unwrap();
        let what = format!("causal GQA [{b},{hq}/{hkv},{s},{d}] engine {}", plan.plan().selected().tag());
        check(&format!("{what} O"), &stream.clone_dtoh(&o_d).unwrap(), &want.o);
        check(&format!("{what} Stats"), &stream.clone_dtoh(&stats_d).unwrap(), &want.stats);
    }
}

#[needs_gpu]
#[test]
fn gpu_sdpa_forward_decode_bottom_right_window_f16() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    for &(sq, skv) in &[(1, 300), (64, 512), (100, 100)] {
        let g = Decode::new(sq, skv);
        let q = random::<f16>(20, 2 * 8 * sq * 128);
        let k = random::<f16>(21, 2 * 8 * skv * 128);
        let v = random::<f16>(22, 2 * 8 * skv * 128);
        let want = g.reference(DecodeInputs { q: &q, k: &k, v: &v }).unwrap().o;
        let plan = match g.build(&cudnn, &BuildOptions::default()) {
            Ok(p) => p,
            Err(e) => panic!("decode S_q={sq} S_kv={skv}: {e}"),
        };
        let (q_d, k_d, v_d) =
            (stream.clone_htod(&q).unwrap(), stream.clone_htod(&k).unwrap(), stream.clone_htod(&v).unwrap());
        let mut o_d = poisoned::<f16>(&stream, want.len());
        let mut ws = workspace(&stream, plan.workspace_size());
        plan.execute(&cudnn, DecodeArgs { q: &q_d, k: &k_d, v: &v_d, o: &mut o_d }, Some(&mut ws)).unwrap();
        check(
            &format!("decode S_q={sq} S_kv={skv} engine {}", plan.plan().selected().tag()),
            &stream.clone_dtoh(&o_d).unwrap(),
            &want,
        );
    }
}

#[needs_gpu]
#[test]
fn gpu_sdpa_forward_bias_and_padding() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let s = 160;
    let g = BiasPadding::new(s);
    let (q, k, v) =
        (random::<bf16>(30, 2 * 4 * s * 64), random::<bf16>(31, 2 * 4 * s * 64), random::<bf16>(32, 2 * 4 * s * 64));
    let bias = random::<bf16>(33, 4 * s * s);
    let (seq_q, seq_kv) = (vec![160i32, 97], vec![160i32, 131]);
    let want =
        g.reference(BiasPaddingInputs { q: &q, k: &k, v: &v, bias: &bias, seq_q: &seq_q, seq_kv: &seq_kv }).unwrap().o;
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let up = |x: &Vec<bf16>| stream.clone_htod(x).unwrap();
    let (q_d, k_d, v_d, bias_d) = (up(&q), up(&k), up(&v), up(&bias));
    let (sq_d, skv_d) = (stream.clone_htod(&seq_q).unwrap(), stream.clone_htod(&seq_kv).unwrap());
    let mut o_d = poisoned::<bf16>(&stream, want.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    plan.execute(
        &cudnn,
        BiasPaddingArgs { q: &q_d, k: &k_d, v: &v_d, bias: &bias_d, seq_q: &sq_d, seq_kv: &skv_d, o: &mut o_d },
        Some(&mut ws),
    )
    .unwrap();
    // Rows past a batch's query length are unspecified: compare the others.
    let mut got = stream.clone_dtoh(&o_d).unwrap();
    let mut want = want;
    for (b, &len) in seq_q.iter().enumerate() {
        for h in 0..4 {
            for i in len as usize..s {
                for d in 0..64 {
                    let e = ((b * 4 + h) * s + i) * 64 + d;
                    got[e] = bf16::ZERO;
                    want[e] = bf16::ZERO;
                }
            }
        }
    }
    check(&format!("bias + padding engine {}", plan.plan().selected().tag()), &got, &want);
}

#[needs_gpu]
#[test]
fn gpu_sdpa_forward_dropout_is_deterministic_per_seed() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let s = 128;
    let g = Dropout::new(s);
    let (q, k, v) = (random::<bf16>(40, 4 * s * 64), random::<bf16>(41, 4 * s * 64), random::<bf16>(42, 4 * s * 64));
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let up = |x: &Vec<bf16>| stream.clone_htod(x).unwrap();
    let (q_d, k_d, v_d) = (up(&q), up(&k), up(&v));
    let run = |seed: i64| {
        let (seed_d, offset_d) = (stream.clone_htod(&[seed]).unwrap(), stream.clone_htod(&[0i64]).unwrap());
        let mut o_d = poisoned::<bf16>(&stream, 4 * s * 64);
        let mut ws = workspace(&stream, plan.workspace_size());
        plan.execute(
            &cudnn,
            DropoutArgs { q: &q_d, k: &k_d, v: &v_d, seed: &seed_d, offset: &offset_d, o: &mut o_d },
            Some(&mut ws),
        )
        .unwrap();
        stream.clone_dtoh(&o_d).unwrap()
    };
    let (a, b, c) = (run(7), run(7), run(8));
    assert!(a.iter().all(|x| x.is_finite()), "dropout output has NaN or inf");
    assert_eq!(a, b, "the same seed gives the same dropout mask");
    let differ = relative_error(&a, &c);
    println!("dropout p=0.2: seeds 7 vs 8 differ by {differ:.3e} (relative)");
    assert!(differ > 1e-3, "different seeds give different masks");
}

#[needs_gpu]
#[test]
fn gpu_sdpa_backward_causal_gqa() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    for &(b, hq, hkv, s, d) in &[(2, 8, 2, 128, 64), (1, 4, 4, 256, 128), (2, 6, 1, 96, 64)] {
        let fwd = CausalGqa::new(b, hq, hkv, s, d);
        let q = random::<bf16>(50, b * hq * s * d);
        let k = random::<bf16>(51, b * hkv * s * d);
        let v = random::<bf16>(52, b * hkv * s * d);
        let d_o = random::<bf16>(53, b * hq * s * d);
        let f = fwd.reference(CausalGqaInputs { q: &q, k: &k, v: &v }).unwrap();
        let g = CausalGqaBackward::new(b, hq, hkv, s, d);
        let want =
            g.reference(CausalGqaBackwardInputs { q: &q, k: &k, v: &v, o: &f.o, d_o: &d_o, stats: &f.stats }).unwrap();
        // S = 96 without a padding mask needs cuDNN 9.15.1: refused by name before it.
        let plan = match g.build(&cudnn, &BuildOptions::default()) {
            Ok(plan) => plan,
            Err(e) if common::lacks_capability(&cudnn, &e) => {
                println!("backward causal GQA S = {s}: refused on this cuDNN: {e}");
                continue;
            }
            Err(e) => panic!("backward causal GQA S = {s}: {e}"),
        };
        let up = |x: &Vec<bf16>| stream.clone_htod(x).unwrap();
        let (q_d, k_d, v_d, o_d, do_d) = (up(&q), up(&k), up(&v), up(&f.o), up(&d_o));
        let stats_d = stream.clone_htod(&f.stats).unwrap();
        let mut dq_d = poisoned::<bf16>(&stream, want.d_q.len());
        let mut dk_d = poisoned::<bf16>(&stream, want.d_k.len());
        let mut dv_d = poisoned::<bf16>(&stream, want.d_v.len());
        let mut ws = workspace(&stream, plan.workspace_size());
        plan.execute(
            &cudnn,
            CausalGqaBackwardArgs {
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
        )
        .unwrap();
        let what = format!(
            "backward causal GQA [{b},{hq}/{hkv},{s},{d}] engine {} ({} B workspace)",
            plan.plan().selected().tag(),
            plan.workspace_size()
        );
        check(&format!("{what} dQ"), &stream.clone_dtoh(&dq_d).unwrap(), &want.d_q);
        check(&format!("{what} dK"), &stream.clone_dtoh(&dk_d).unwrap(), &want.d_k);
        check(&format!("{what} dV"), &stream.clone_dtoh(&dv_d).unwrap(), &want.d_v);
    }
}

#[needs_gpu]
#[test]
fn gpu_sdpa_backward_bias_deterministic() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let s = 128;
    let n = 4 * s * 64;
    let (q, k, v, d_o) = (random::<bf16>(60, n), random::<bf16>(61, n), random::<bf16>(62, n), random::<bf16>(63, n));
    let bias = random::<bf16>(64, 4 * s * s);
    let f = Biased::new(s).reference(BiasedInputs { q: &q, k: &k, v: &v, bias: &bias }).unwrap();
    let g = BiasedBackward::new(s);
    let want = g
        .reference(BiasedBackwardInputs { q: &q, k: &k, v: &v, o: &f.o, d_o: &d_o, stats: &f.stats, bias: &bias })
        .unwrap();
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let up = |x: &Vec<bf16>| stream.clone_htod(x).unwrap();
    let (q_d, k_d, v_d, o_d, do_d, bias_d) = (up(&q), up(&k), up(&v), up(&f.o), up(&d_o), up(&bias));
    let stats_d = stream.clone_htod(&f.stats).unwrap();
    let run = || {
        let mut dq_d = poisoned::<bf16>(&stream, n);
        let mut dk_d = poisoned::<bf16>(&stream, n);
        let mut dv_d = poisoned::<bf16>(&stream, n);
        let mut db_d = poisoned::<bf16>(&stream, 4 * s * s);
        let mut ws = workspace(&stream, plan.workspace_size());
        plan.execute(
            &cudnn,
            BiasedBackwardArgs {
                q: &q_d,
                k: &k_d,
                v: &v_d,
                o: &o_d,
                d_o: &do_d,
                stats: &stats_d,
                bias: &bias_d,
                d_q: &mut dq_d,
                d_k: &mut dk_d,
                d_v: &mut dv_d,
                d_bias: &mut db_d,
            },
            Some(&mut ws),
        )
        .unwrap();
        [dq_d, dk_d, dv_d, db_d].map(|t| stream.clone_dtoh(&t).unwrap())
    };
    let got = run();
    let what = format!("backward bias deterministic engine {}", plan.plan().selected().tag());
    for (name, (g, w)) in
        ["dQ", "dK", "dV", "dBias"].iter().zip(got.iter().zip([&want.d_q, &want.d_k, &want.d_v, &want.d_bias]))
    {
        check(&format!("{what} {name}"), g, w);
    }
    assert_eq!(run(), got, "the deterministic backward gives the same bits twice");
}

#[needs_gpu]
#[test]
fn gpu_sdpa_bshd_strides_through_the_builder() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (b, h, s, d) = (2usize, 8usize, 128usize, 64usize);
    let dims = [b as i64, h as i64, s as i64, d as i64];
    let bshd = [(s * h * d) as i64, d as i64, (h * d) as i64, 1];
    for causal in [false, true] {
        let mut gb = GraphBuilder::new("bshd");
        let q = gb.input("q", DataType::BF16, &dims).unwrap();
        let k = gb.input("k", DataType::BF16, &dims).unwrap();
        let v = gb.input("v", DataType::BF16, &dims).unwrap();
        for t in [q, k, v] {
            gb.set_strides(t, &bshd).unwrap();
        }
        let attrs = vec![("causal".to_string(), causal.into())];
        let o = gb.op("sdpa", &[q.into(), k.into(), v.into()], &attrs).unwrap()[0];
        let o = gb.output(o, "o", DataType::BF16).unwrap();
        gb.set_strides(o, &bshd).unwrap();
        let graph = gb.build().unwrap();
        // Memory is [B, S, H, D]; the reference reads it through the strides.
        let n = b * s * h * d;
        let (qh, kh, vh) = (random::<bf16>(70, n), random::<bf16>(71, n), random::<bf16>(72, n));
        let want = cudnn_graph::reference::run(
            &graph,
            &[("q", qh.as_slice().into()), ("k", kh.as_slice().into()), ("v", vh.as_slice().into())],
        )
        .unwrap()
        .remove(0);
        let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
        let up = |x: &Vec<bf16>| stream.clone_htod(x).unwrap();
        let (q_d, k_d, v_d) = (up(&qh), up(&kh), up(&vh));
        let mut o_d = poisoned::<bf16>(&stream, n);
        let mut ws = workspace(&stream, plan.workspace_size());
        plan.execute(
            &cudnn,
            &mut [
                DeviceBuffer::input(&q_d),
                DeviceBuffer::input(&k_d),
                DeviceBuffer::input(&v_d),
                DeviceBuffer::output(&mut o_d),
            ],
            Some(&mut ws),
        )
        .unwrap();
        let got_bshd = stream.clone_dtoh(&o_d).unwrap();
        // Back to logical [B, H, S, D] order.
        let got: Vec<bf16> = (0..n)
            .map(|flat| {
                let (bi, rest) = (flat / (h * s * d), flat % (h * s * d));
                let (hi, rest) = (rest / (s * d), rest % (s * d));
                let (si, di) = (rest / d, rest % d);
                got_bshd[((bi * s + si) * h + hi) * d + di]
            })
            .collect();
        let want: Vec<bf16> = want.data.iter().map(|&x| bf16::from_f64(x)).collect();
        check(&format!("BSHD causal={causal} engine {}", plan.selected().tag()), &got, &want);
    }
}

/// Every graph and shape of the GPU tests plans for the H200 deviceless (runs in CI).
#[needs_cudnn]
#[test]
fn sdpa_test_graphs_plan_deviceless() {
    let Some(cudnn) = common::deviceless() else { return };
    let o = BuildOptions::default();
    let mut plans = Vec::new();
    for &(b, h, s, d) in &[(2, 8, 256, 64), (1, 4, 200, 128), (3, 2, 77, 64)] {
        plans.push(("plain", Plain::new(b, h, s, d).build(&cudnn, &o).map(|p| p.plan().selected().tag())));
        plans.push((
            "plain composite",
            PlainComposite::new(b, h, s, d).build(&cudnn, &o).map(|p| p.plan().selected().tag()),
        ));
    }
    for &(b, hq, hkv, s, d) in
        &[(2, 8, 2, 128, 64), (1, 16, 1, 193, 128), (2, 6, 3, 64, 64), (1, 4, 4, 256, 128), (2, 6, 1, 96, 64)]
    {
        plans.push((
            "causal GQA",
            CausalGqa::new(b, hq, hkv, s, d).build(&cudnn, &o).map(|p| p.plan().selected().tag()),
        ));
        plans.push((
            "causal GQA backward",
            CausalGqaBackward::new(b, hq, hkv, s, d).build(&cudnn, &o).map(|p| p.plan().selected().tag()),
        ));
    }
    for &(sq, skv) in &[(1, 300), (64, 512), (100, 100)] {
        plans.push(("decode", Decode::new(sq, skv).build(&cudnn, &o).map(|p| p.plan().selected().tag())));
    }
    plans.push(("bias + padding", BiasPadding::new(160).build(&cudnn, &o).map(|p| p.plan().selected().tag())));
    plans.push(("dropout", Dropout::new(128).build(&cudnn, &o).map(|p| p.plan().selected().tag())));
    plans.push(("biased", Biased::new(128).build(&cudnn, &o).map(|p| p.plan().selected().tag())));
    plans.push(("biased backward", BiasedBackward::new(128).build(&cudnn, &o).map(|p| p.plan().selected().tag())));
    let mut failed = Vec::new();
    for (what, r) in plans {
        match r {
            Ok(tag) => println!("{what}: {tag}"),
            // What the loaded cuDNN lacks (odd key lengths in the backward before 9.15.1).
            Err(e) if common::lacks_capability(&cudnn, &e) => println!("{what}: refused on this cuDNN: {e}"),
            Err(e) => failed.push(format!("{what}: {e}")),
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
