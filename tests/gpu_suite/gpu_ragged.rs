//! Ragged (packed, THD) attention on the GPU against the CPU reference (itself equal, token for
//! token, to the padded batch: `tests/suite/ragged_attention.rs`): packed prefill fused (no mask)
//! and composite (causal, GQA), a training forward and its backward, and one serving step mixing
//! prefill and decode sequences (packed queries over a paged cache). Outputs start as NaN; the
//! packed tokens (the front `offsets[B]` elements) must all be written and match within
//! cudnn-frontend's bf16 tolerance (relative error ≤ 2e-2); Stats on the rows of the sequences.
//! One plan serves a second batch of other lengths and offsets, rebuilt from nothing.

#![cfg(feature = "cudnn")]

use std::sync::Arc;

use crate::common;

use common::{random, relative_error};
use cudnn_graph::backend::cudarc::driver::{CudaSlice, CudaStream};
use cudnn_graph::backend::BuildOptions;
use cudnn_graph::graph;
use cudnn_graph::ops::sdpa::ragged::thd_offsets;
use cudnn_graph::rng::SplitMix64;
use half::bf16;

graph! {
    /// Packed prefill, causal, 16 query heads over 4 KV heads, d 128 (composite).
    pub CausalPrefill<dyn B, dyn S>(
        q: bf16[B, 16, S, 128] order [0, 2, 1, 3],
        k: bf16[B, 4, S, 128] order [0, 2, 1, 3],
        v: bf16[B, 4, S, 128] order [0, 2, 1, 3],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
        offsets_q: i32[B + 1, 1, 1, 1],
        offsets_kv: i32[B + 1, 1, 1, 1],
    ) -> (o: bf16[B, 16, S, 128] order [0, 2, 1, 3]) {
        o = sdpa(q, k, v, seq_q, seq_kv, offsets_q, offsets_kv, offsets_kv, offsets_q,
                 ragged = true, padding_mask = true, causal = true);
    }

    /// Packed prefill without a mask beyond the lengths (fused `SDPA_FWD` on cuDNN 9.15+).
    pub Prefill<dyn B, dyn S>(
        q: bf16[B, 16, S, 128] order [0, 2, 1, 3],
        k: bf16[B, 16, S, 128] order [0, 2, 1, 3],
        v: bf16[B, 16, S, 128] order [0, 2, 1, 3],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
        offsets: i64[B + 1, 1, 1, 1],
    ) -> (o: bf16[B, 16, S, 128] order [0, 2, 1, 3]) {
        o = sdpa(q, k, v, seq_q, seq_kv, offsets, offsets, offsets, offsets, ragged = true, padding_mask = true);
    }

    /// The training forward: O and the statistics the backward reads (padded).
    pub Training<dyn B, dyn S>(
        q: bf16[B, 8, S, 64] order [0, 2, 1, 3],
        k: bf16[B, 2, S, 64] order [0, 2, 1, 3],
        v: bf16[B, 2, S, 64] order [0, 2, 1, 3],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
        offsets_q: i32[B + 1, 1, 1, 1],
        offsets_kv: i32[B + 1, 1, 1, 1],
    ) -> (o: bf16[B, 8, S, 64] order [0, 2, 1, 3], stats: f32[B, 8, S, 1]) {
        let (out, lse) = sdpa(q, k, v, seq_q, seq_kv, offsets_q, offsets_kv, offsets_kv, offsets_q,
                              ragged = true, padding_mask = true, causal = true, training = true);
        o = out;
        stats = lse;
    }

    /// Its backward: dO at O's offsets, the gradients at their tensors'.
    pub Backward<dyn B, dyn S>(
        q: bf16[B, 8, S, 64] order [0, 2, 1, 3],
        k: bf16[B, 2, S, 64] order [0, 2, 1, 3],
        v: bf16[B, 2, S, 64] order [0, 2, 1, 3],
        o: bf16[B, 8, S, 64] order [0, 2, 1, 3],
        d_o: bf16[B, 8, S, 64] order [0, 2, 1, 3],
        stats: f32[B, 8, S, 1],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
        offsets_q: i32[B + 1, 1, 1, 1],
        offsets_kv: i32[B + 1, 1, 1, 1],
    ) -> (d_q: bf16[B, 8, S, 64] order [0, 2, 1, 3], d_k: bf16[B, 2, S, 64] order [0, 2, 1, 3],
          d_v: bf16[B, 2, S, 64] order [0, 2, 1, 3]) {
        let (g_q, g_k, g_v) = sdpa_backward(q, k, v, o, d_o, stats, seq_q, seq_kv,
                                            offsets_q, offsets_kv, offsets_kv, offsets_q,
                                            ragged = true, padding_mask = true, causal = true);
        d_q = g_q;
        d_k = g_k;
        d_v = g_v;
    }

    /// One serving step: prefill and decode sequences' queries packed in Q and O, their keys in a
    /// paged cache (pages of 16), causal with the diagonal at each sequence's last key.
    pub MixedStep<dyn B, dyn SQ, dyn P, dyn T>(
        q: bf16[B, 32, SQ, 128] order [0, 2, 1, 3],
        k_pool: bf16[P, 8, 16, 128],
        v_pool: bf16[P, 8, 16, 128],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
        table: i32[B, 1, T, 1],
        offsets: i32[B + 1, 1, 1, 1],
    ) -> (o: bf16[B, 32, SQ, 128] order [0, 2, 1, 3]) {
        o = sdpa(q, k_pool, v_pool, seq_q, seq_kv, table, table, offsets, offsets,
                 paged = true, ragged = true, padding_mask = true, causal = true, alignment = bottom_right);
    }
}

graph! {
    /// Packed causal GQA prefill whose buffers hold 768 tokens, half the padded 4 · 384
    /// (`max_total_seq_len_q`, `max_total_seq_len_kv`).
    pub CompactPrefill(
        q: bf16[4, 16, 384, 128] order [0, 2, 1, 3],
        k: bf16[4, 4, 384, 128] order [0, 2, 1, 3],
        v: bf16[4, 4, 384, 128] order [0, 2, 1, 3],
        seq_q: i32[4, 1, 1, 1],
        seq_kv: i32[4, 1, 1, 1],
        offsets_q: i32[5, 1, 1, 1],
        offsets_kv: i32[5, 1, 1, 1],
    ) -> (o: bf16[4, 16, 384, 128] order [0, 2, 1, 3]) {
        o = sdpa(q, k, v, seq_q, seq_kv, offsets_q, offsets_kv, offsets_kv, offsets_q,
                 ragged = true, padding_mask = true, causal = true,
                 max_total_seq_len_q = 768, max_total_seq_len_kv = 768);
    }
}

/// cudnn-frontend's bf16 tolerance, as the other attention GPU tests use it.
const TOLERANCE: f64 = 2e-2;

fn poisoned(stream: &Arc<CudaStream>, n: usize) -> CudaSlice<bf16> {
    stream.clone_htod(&vec![bf16::NAN; n]).unwrap()
}

fn workspace(stream: &Arc<CudaStream>, bytes: usize) -> CudaSlice<u8> {
    stream.alloc_zeros::<u8>(bytes.max(1)).unwrap()
}

/// The packed front `n` elements of `got` against `want`'s: every one written, within tolerance.
fn check_packed(what: &str, got: &[bf16], want: &[bf16], n: usize) {
    assert!(got[..n].iter().all(|x| !x.is_nan()), "{what}: a packed element was not written");
    assert!(want[..n].iter().any(|x| x.to_f32() != 0.0), "{what}: an all-zero reference");
    let err = relative_error(&got[..n], &want[..n]);
    println!("{what}: relative error {err:.3e} over {n} packed elements");
    assert!(err <= TOLERANCE, "{what}: relative error {err}");
}

/// `b` lengths in `1..=s` averaging about 55 % of `s` (45 % padding), one at `s`.
fn mixed_lengths(rng: &mut SplitMix64, b: usize, s: usize) -> Vec<i32> {
    let mut lens: Vec<i32> = (0..b).map(|_| (s / 10 + rng.below(s - s / 10)) as i32).collect();
    lens[0] = s as i32;
    lens.iter_mut().for_each(|n| *n = (*n).max(1));
    lens
}

fn i32s(v: &[i64]) -> Vec<i32> {
    v.iter().map(|&x| i32::try_from(x).unwrap()).collect()
}

#[needs_gpu]
#[test]
fn gpu_ragged_prefill_matches_the_reference_and_serves_new_lengths() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let mut rng = SplitMix64::new(0x7a99);
    for &(b, s) in &[(4usize, 384usize), (2, 512)] {
        let causal = CausalPrefill::new(b, s);
        let plain = Prefill::new(b, s);
        let causal_plan = causal.build(&cudnn, &BuildOptions::default()).unwrap();
        let plain_plan = plain.build(&cudnn, &BuildOptions::default()).unwrap();
        for round in 0..2 {
            let lens = mixed_lengths(&mut rng, b, s);
            let (off_q, off_kv) = (thd_offsets(&lens, 16, 128).unwrap(), thd_offsets(&lens, 4, 128).unwrap());
            let q = random::<bf16>(100 + round, b * 16 * s * 128);
            let k = random::<bf16>(200 + round, b * 4 * s * 128);
            let v = random::<bf16>(300 + round, b * 4 * s * 128);
            let (oq, okv) = (i32s(&off_q), i32s(&off_kv));
            let want = causal
                .reference(CausalPrefillInputs {
                    q: &q,
                    k: &k,
                    v: &v,
                    seq_q: &lens,
                    seq_kv: &lens,
                    offsets_q: &oq,
                    offsets_kv: &okv,
                })
                .unwrap()
                .o;
            // The host copies of the lengths and offsets pass the rule before they are uploaded.
            let graph = causal.graph().unwrap();
            let host = [("seq_q", lens.as_slice().into()), ("seq_kv", lens.as_slice().into())];
            let offsets = [("offsets_q", oq.as_slice().into()), ("offsets_kv", okv.as_slice().into())];
            cudnn_graph::reference::check_values(&graph, &[host, offsets].concat()).unwrap();
            let up = |x: &Vec<bf16>| stream.clone_htod(x).unwrap();
            let up_i32 = |x: &Vec<i32>| stream.clone_htod(x).unwrap();
            let (q_d, k_d, v_d) = (up(&q), up(&k), up(&v));
            let (len_d, oq_d, okv_d) = (up_i32(&lens), up_i32(&oq), up_i32(&okv));
            let mut o_d = poisoned(&stream, want.len());
            let mut ws = workspace(&stream, causal_plan.workspace_size());
            let args = CausalPrefillArgs {
                q: &q_d,
                k: &k_d,
                v: &v_d,
                seq_q: &len_d,
                seq_kv: &len_d,
                offsets_q: &oq_d,
                offsets_kv: &okv_d,
                o: &mut o_d,
            };
            causal_plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
            let tag = causal_plan.plan().selected().tag();
            let n = off_q[b] as usize;
            check_packed(
                &format!("causal GQA prefill B={b} S={s} round {round} ({tag})"),
                &stream.clone_dtoh(&o_d).unwrap(),
                &want,
                n,
            );

            // No causal mask: K and V with 16 heads, i64 offsets.
            let k16 = random::<bf16>(400 + round, b * 16 * s * 128);
            let v16 = random::<bf16>(500 + round, b * 16 * s * 128);
            let off = off_q.clone();
            let want = plain
                .reference(PrefillInputs { q: &q, k: &k16, v: &v16, seq_q: &lens, seq_kv: &lens, offsets: &off })
                .unwrap()
                .o;
            let (k_d, v_d, off_d) = (up(&k16), up(&v16), stream.clone_htod(&off).unwrap());
            let mut o_d = poisoned(&stream, want.len());
            let mut ws = workspace(&stream, plain_plan.workspace_size());
            let args =
                PrefillArgs { q: &q_d, k: &k_d, v: &v_d, seq_q: &len_d, seq_kv: &len_d, offsets: &off_d, o: &mut o_d };
            plain_plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
            let tag = plain_plan.plan().selected().tag();
            check_packed(
                &format!("prefill B={b} S={s} round {round} ({tag})"),
                &stream.clone_dtoh(&o_d).unwrap(),
                &want,
                n,
            );
        }
    }
}

#[needs_gpu]
#[test]
fn gpu_ragged_training_forward_and_backward_match_the_reference() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let mut rng = SplitMix64::new(0xbac4);
    let (b, s) = (6usize, 256usize);
    let lens = mixed_lengths(&mut rng, b, s);
    let (off_q, off_kv) = (thd_offsets(&lens, 8, 64).unwrap(), thd_offsets(&lens, 2, 64).unwrap());
    let (oq, okv) = (i32s(&off_q), i32s(&off_kv));
    let q = random::<bf16>(1, b * 8 * s * 64);
    let k = random::<bf16>(2, b * 2 * s * 64);
    let v = random::<bf16>(3, b * 2 * s * 64);
    let d_o = random::<bf16>(4, b * 8 * s * 64);
    let fwd = Training::new(b, s);
    let want = fwd
        .reference(TrainingInputs {
            q: &q,
            k: &k,
            v: &v,
            seq_q: &lens,
            seq_kv: &lens,
            offsets_q: &oq,
            offsets_kv: &okv,
        })
        .unwrap();
    let up = |x: &Vec<bf16>| stream.clone_htod(x).unwrap();
    let up_i32 = |x: &Vec<i32>| stream.clone_htod(x).unwrap();
    let (q_d, k_d, v_d, do_d) = (up(&q), up(&k), up(&v), up(&d_o));
    let (len_d, oq_d, okv_d) = (up_i32(&lens), up_i32(&oq), up_i32(&okv));
    let plan = fwd.build(&cudnn, &BuildOptions::default()).unwrap();
    let mut o_d = poisoned(&stream, want.o.len());
    let mut stats_d = stream.clone_htod(&vec![f32::NAN; want.stats.len()]).unwrap();
    let mut ws = workspace(&stream, plan.workspace_size());
    let args = TrainingArgs {
        q: &q_d,
        k: &k_d,
        v: &v_d,
        seq_q: &len_d,
        seq_kv: &len_d,
        offsets_q: &oq_d,
        offsets_kv: &okv_d,
        o: &mut o_d,
        stats: &mut stats_d,
    };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let tag = plan.plan().selected().tag();
    check_packed(&format!("training forward O ({tag})"), &stream.clone_dtoh(&o_d).unwrap(), &want.o, off_q[b] as usize);
    // Stats on the rows of the sequences.
    let stats = stream.clone_dtoh(&stats_d).unwrap();
    let (mut got_rows, mut want_rows) = (Vec::new(), Vec::new());
    for (i, (g, w)) in stats.iter().zip(&want.stats).enumerate() {
        if ((i % s) as i32) < lens[i / (8 * s)] {
            got_rows.push(*g);
            want_rows.push(*w);
        }
    }
    let err = relative_error(&got_rows, &want_rows);
    println!("training forward Stats: relative error {err:.3e} over {} rows", got_rows.len());
    assert!(err <= 1e-3, "Stats: relative error {err}");

    // The backward from the reference's O and Stats.
    let bwd = Backward::new(b, s);
    let grads = bwd
        .reference(BackwardInputs {
            q: &q,
            k: &k,
            v: &v,
            o: &want.o,
            d_o: &d_o,
            stats: &want.stats,
            seq_q: &lens,
            seq_kv: &lens,
            offsets_q: &oq,
            offsets_kv: &okv,
        })
        .unwrap();
    let plan = bwd.build(&cudnn, &BuildOptions::default()).unwrap();
    let o_ref_d = up(&want.o);
    let stats_ref_d = stream.clone_htod(&want.stats).unwrap();
    let mut dq_d = poisoned(&stream, grads.d_q.len());
    let mut dk_d = poisoned(&stream, grads.d_k.len());
    let mut dv_d = poisoned(&stream, grads.d_v.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    let args = BackwardArgs {
        q: &q_d,
        k: &k_d,
        v: &v_d,
        o: &o_ref_d,
        d_o: &do_d,
        stats: &stats_ref_d,
        seq_q: &len_d,
        seq_kv: &len_d,
        offsets_q: &oq_d,
        offsets_kv: &okv_d,
        d_q: &mut dq_d,
        d_k: &mut dk_d,
        d_v: &mut dv_d,
    };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let tag = plan.plan().selected().tag();
    check_packed(&format!("backward dQ ({tag})"), &stream.clone_dtoh(&dq_d).unwrap(), &grads.d_q, off_q[b] as usize);
    check_packed(&format!("backward dK ({tag})"), &stream.clone_dtoh(&dk_d).unwrap(), &grads.d_k, off_kv[b] as usize);
    check_packed(&format!("backward dV ({tag})"), &stream.clone_dtoh(&dv_d).unwrap(), &grads.d_v, off_kv[b] as usize);
}

#[needs_gpu]
#[test]
fn gpu_mixed_prefill_and_decode_step_matches_the_reference() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let mut rng = SplitMix64::new(0x3e55);
    // 6 sequences: 2 prefilling (up to 64 query tokens), 4 decoding (1), keys up to 512.
    let (b, s_q, width) = (6usize, 64usize, 32usize);
    let pages = b * width + 3;
    let seq_q = vec![64i32, 37, 1, 1, 1, 1];
    let seq_kv = vec![64i32, 37, 500, 17, 256, 129];
    let offsets = thd_offsets(&seq_q, 32, 128).unwrap();
    let oq = i32s(&offsets);
    let mut order: Vec<i32> = (0..pages as i32).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let table = order[..b * width].to_vec();
    let q = random::<bf16>(7, b * 32 * s_q * 128);
    let k_pool = random::<bf16>(8, pages * 8 * 16 * 128);
    let v_pool = random::<bf16>(9, pages * 8 * 16 * 128);
    let g = MixedStep::new(b, s_q, pages, width);
    let want = g
        .reference(MixedStepInputs {
            q: &q,
            k_pool: &k_pool,
            v_pool: &v_pool,
            seq_q: &seq_q,
            seq_kv: &seq_kv,
            table: &table,
            offsets: &oq,
        })
        .unwrap()
        .o;
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let up = |x: &Vec<bf16>| stream.clone_htod(x).unwrap();
    let up_i32 = |x: &Vec<i32>| stream.clone_htod(x).unwrap();
    let (q_d, k_d, v_d) = (up(&q), up(&k_pool), up(&v_pool));
    let (sq_d, skv_d, t_d, off_d) = (up_i32(&seq_q), up_i32(&seq_kv), up_i32(&table), up_i32(&oq));
    let mut o_d = poisoned(&stream, want.len());
    let mut ws = workspace(&stream, plan.workspace_size());
    let args = MixedStepArgs {
        q: &q_d,
        k_pool: &k_d,
        v_pool: &v_d,
        seq_q: &sq_d,
        seq_kv: &skv_d,
        table: &t_d,
        offsets: &off_d,
        o: &mut o_d,
    };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let tag = plan.plan().selected().tag();
    check_packed(
        &format!("mixed prefill + decode ({tag})"),
        &stream.clone_dtoh(&o_d).unwrap(),
        &want,
        offsets[b] as usize,
    );
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();

/// With its tokens bounded (`max_total_seq_len_q`/`_kv = 768`), each packed buffer is a view of
/// the first 768 tokens of an allocation whose next 64 tokens are NaN: the packed tokens of O
/// match the reference (over the padded batch) with none NaN, so nothing past the bound was read
/// into them, and O's tail is still NaN, so nothing was written there. A view one token short is
/// refused before anything runs, naming the tensor.
#[needs_gpu]
#[test]
fn gpu_ragged_buffers_hold_only_the_bounded_tokens() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let (b, s, t, guard) = (4usize, 384usize, 768usize, 64usize);
    let lens: Vec<i32> = vec![384, 100, 250, 17];
    let (off_q, off_kv) = (thd_offsets(&lens, 16, 128).unwrap(), thd_offsets(&lens, 4, 128).unwrap());
    assert!(off_q[b] as usize <= t * 16 * 128, "the lengths fit the bound");
    let (oq, okv) = (i32s(&off_q), i32s(&off_kv));
    let q = random::<bf16>(600, b * 16 * s * 128);
    let k = random::<bf16>(601, b * 4 * s * 128);
    let v = random::<bf16>(602, b * 4 * s * 128);
    let graph = CompactPrefill::new();
    let inputs =
        CompactPrefillInputs { q: &q, k: &k, v: &v, seq_q: &lens, seq_kv: &lens, offsets_q: &oq, offsets_kv: &okv };
    let want = graph.reference(inputs).unwrap().o;
    // The first `t` tokens of each host array (all the packed ones), then `guard` tokens of NaN.
    let bounded = |x: &[bf16], heads: usize| {
        let mut host = x[..t * heads * 128].to_vec();
        host.extend(std::iter::repeat_n(bf16::NAN, guard * heads * 128));
        stream.clone_htod(&host).unwrap()
    };
    let (q_d, k_d, v_d) = (bounded(&q, 16), bounded(&k, 4), bounded(&v, 4));
    let (len_d, oq_d, okv_d) =
        (stream.clone_htod(&lens).unwrap(), stream.clone_htod(&oq).unwrap(), stream.clone_htod(&okv).unwrap());
    let mut o_d = poisoned(&stream, (t + guard) * 16 * 128);
    let plan = graph.build(&cudnn, &BuildOptions::default()).unwrap();
    let mut ws = workspace(&stream, plan.workspace_size());
    let (n_q, n_kv) = (t * 16 * 128, t * 4 * 128);
    {
        let (qv, kv, vv) = (q_d.slice(..n_q), k_d.slice(..n_kv), v_d.slice(..n_kv));
        let mut ov = o_d.slice_mut(..n_q);
        let args = CompactPrefillArgs {
            q: &qv,
            k: &kv,
            v: &vv,
            seq_q: &len_d,
            seq_kv: &len_d,
            offsets_q: &oq_d,
            offsets_kv: &okv_d,
            o: &mut ov,
        };
        plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    }
    let got = stream.clone_dtoh(&o_d).unwrap();
    let tag = plan.plan().selected().tag();
    check_packed(&format!("bounded buffers of {t} of {} tokens ({tag})", b * s), &got, &want, off_q[b] as usize);
    assert!(got[n_q..].iter().all(|x| x.is_nan()), "O was written past its bound of {t} tokens");
    // One token short: refused, naming Q.
    let short = q_d.slice(..n_q - 16 * 128);
    let (kv, vv) = (k_d.slice(..n_kv), v_d.slice(..n_kv));
    let mut ov = o_d.slice_mut(..n_q);
    let args = CompactPrefillArgs {
        q: &short,
        k: &kv,
        v: &vv,
        seq_q: &len_d,
        seq_kv: &len_d,
        offsets_q: &oq_d,
        offsets_kv: &okv_d,
        o: &mut ov,
    };
    let e = plan.execute(&cudnn, args, Some(&mut ws)).unwrap_err().to_string();
    assert!(e.contains("`q`") && e.contains(&n_q.to_string()), "{e}");
}
