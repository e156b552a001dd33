//! fp8 attention on the GPU (issue 20), against the CPU reference with the same quantization
//! points (`sdpa` with `fp8 = e4m3`, cudnn-frontend's `sdpa_fp8`): causal and not, b = 2, h = 4,
//! s = 128, d = 128, and GQA with odd lengths.
//!
//! Inputs and scales as cudnn-frontend's `test/python/sdpa/fp8.py` makes them: Q, K and V drawn
//! in [-1, 1) and scaled by `128 / 2^ceil(log2 amax) · 0.25` into e4m3, their descales the
//! reciprocals; `Scale_S` from an amax of 1 (32), `Descale_S` its reciprocal; `Scale_O` from the
//! reference's `Amax_O`. O is compared descaled (`O · Descale_O`) with its tolerances, `atol =
//! 0.08`, `rtol = 0.2`, an element passing when `|got − want| ≤ atol + rtol·|want|`; the amaxes
//! within `0.1 + 0.1·|want|` (cudnn-graph's, as for the fp8 matmul: cudnn-frontend checks none).
//!
//! The backward (`sdpa_backward` with `fp8 = e4m3`, cudnn-frontend's `sdpa_fp8_backward`, b = 2,
//! h = 4, s = 128, d = 128 (Hopper's only head dim), causal and not) takes O and Stats from the
//! reference's fp8 forward, dO drawn as Q is, and the scales of dS and the gradients from the
//! reference's amaxes (delayed scaling, cudnn-frontend's factor); dQ, dK, dV are compared
//! descaled with cudnn-frontend's fp8 backward tolerances, `atol = 0.04`, `rtol = 0.2`, the four
//! amaxes within `0.1 + 0.1·|want|`.
//!
//! Outputs are filled with NaN before each execute. Without a GPU each test prints why and
//! passes, unless `CUDNN_GRAPH_REQUIRE_GPU=1`, which makes that a failure.

#![cfg(feature = "cudnn")]

use crate::common;

use cudnn_graph::backend::BuildOptions;
use cudnn_graph::{graph, Fp8E4M3};

graph! {
    /// fp8 attention, inference: O in e4m3 and both amaxes.
    pub Fp8Attention<dyn B, dyn H, dyn S, dyn D>(
        q: fp8_e4m3[B, H, S, D],
        k: fp8_e4m3[B, H, S, D],
        v: fp8_e4m3[B, H, S, D],
        descale_q: f32[1, 1, 1, 1],
        descale_k: f32[1, 1, 1, 1],
        descale_v: f32[1, 1, 1, 1],
        descale_s: f32[1, 1, 1, 1],
        scale_s: f32[1, 1, 1, 1],
        scale_o: f32[1, 1, 1, 1],
    ) -> (o: fp8_e4m3[B, H, S, D], amax_s: f32[1, 1, 1, 1], amax_o: f32[1, 1, 1, 1]) {
        (o, amax_s, amax_o) = sdpa(q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o, fp8 = e4m3);
    }

    /// The same, causal (top-left: bottom-right fp8 attention needs Blackwell).
    pub Fp8CausalAttention<dyn B, dyn H, dyn S, dyn D>(
        q: fp8_e4m3[B, H, S, D],
        k: fp8_e4m3[B, H, S, D],
        v: fp8_e4m3[B, H, S, D],
        descale_q: f32[1, 1, 1, 1],
        descale_k: f32[1, 1, 1, 1],
        descale_v: f32[1, 1, 1, 1],
        descale_s: f32[1, 1, 1, 1],
        scale_s: f32[1, 1, 1, 1],
        scale_o: f32[1, 1, 1, 1],
    ) -> (o: fp8_e4m3[B, H, S, D], amax_s: f32[1, 1, 1, 1], amax_o: f32[1, 1, 1, 1]) {
        (o, amax_s, amax_o) =
            sdpa(q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o, fp8 = e4m3, causal = true);
    }
}

graph! {
    /// fp8 attention in training: O, Stats and both amaxes (the backward's inputs).
    pub Fp8AttentionTraining<dyn B, dyn H, dyn S, dyn D>(
        q: fp8_e4m3[B, H, S, D],
        k: fp8_e4m3[B, H, S, D],
        v: fp8_e4m3[B, H, S, D],
        descale_q: f32[1, 1, 1, 1],
        descale_k: f32[1, 1, 1, 1],
        descale_v: f32[1, 1, 1, 1],
        descale_s: f32[1, 1, 1, 1],
        scale_s: f32[1, 1, 1, 1],
        scale_o: f32[1, 1, 1, 1],
    ) -> (o: fp8_e4m3[B, H, S, D], stats: f32[B, H, S, 1], amax_s: f32[1, 1, 1, 1], amax_o: f32[1, 1, 1, 1]) {
        (o, stats, amax_s, amax_o) =
            sdpa(q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o, fp8 = e4m3, training = true);
    }

    /// The same, causal.
    pub Fp8CausalAttentionTraining<dyn B, dyn H, dyn S, dyn D>(
        q: fp8_e4m3[B, H, S, D],
        k: fp8_e4m3[B, H, S, D],
        v: fp8_e4m3[B, H, S, D],
        descale_q: f32[1, 1, 1, 1],
        descale_k: f32[1, 1, 1, 1],
        descale_v: f32[1, 1, 1, 1],
        descale_s: f32[1, 1, 1, 1],
        scale_s: f32[1, 1, 1, 1],
        scale_o: f32[1, 1, 1, 1],
    ) -> (o: fp8_e4m3[B, H, S, D], stats: f32[B, H, S, 1], amax_s: f32[1, 1, 1, 1], amax_o: f32[1, 1, 1, 1]) {
        (o, stats, amax_s, amax_o) = sdpa(
            q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o,
            fp8 = e4m3, training = true, causal = true,
        );
    }

    /// fp8 attention's backward: e4m3 gradients and four amaxes.
    pub Fp8AttentionBackward<dyn B, dyn H, dyn S, dyn D>(
        q: fp8_e4m3[B, H, S, D],
        k: fp8_e4m3[B, H, S, D],
        v: fp8_e4m3[B, H, S, D],
        o: fp8_e4m3[B, H, S, D],
        d_o: fp8_e4m3[B, H, S, D],
        stats: f32[B, H, S, 1],
        descale_q: f32[1, 1, 1, 1],
        descale_k: f32[1, 1, 1, 1],
        descale_v: f32[1, 1, 1, 1],
        descale_o: f32[1, 1, 1, 1],
        descale_d_o: f32[1, 1, 1, 1],
        descale_s: f32[1, 1, 1, 1],
        descale_dp: f32[1, 1, 1, 1],
        scale_s: f32[1, 1, 1, 1],
        scale_dq: f32[1, 1, 1, 1],
        scale_dk: f32[1, 1, 1, 1],
        scale_dv: f32[1, 1, 1, 1],
        scale_dp: f32[1, 1, 1, 1],
    ) -> (
        dq: fp8_e4m3[B, H, S, D],
        dk: fp8_e4m3[B, H, S, D],
        dv: fp8_e4m3[B, H, S, D],
        amax_dq: f32[1, 1, 1, 1],
        amax_dk: f32[1, 1, 1, 1],
        amax_dv: f32[1, 1, 1, 1],
        amax_dp: f32[1, 1, 1, 1],
    ) {
        (dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp) = sdpa_backward(
            q, k, v, o, d_o, stats,
            descale_q, descale_k, descale_v, descale_o, descale_d_o, descale_s, descale_dp,
            scale_s, scale_dq, scale_dk, scale_dv, scale_dp,
            fp8 = e4m3,
        );
    }

    /// The same, causal.
    pub Fp8CausalAttentionBackward<dyn B, dyn H, dyn S, dyn D>(
        q: fp8_e4m3[B, H, S, D],
        k: fp8_e4m3[B, H, S, D],
        v: fp8_e4m3[B, H, S, D],
        o: fp8_e4m3[B, H, S, D],
        d_o: fp8_e4m3[B, H, S, D],
        stats: f32[B, H, S, 1],
        descale_q: f32[1, 1, 1, 1],
        descale_k: f32[1, 1, 1, 1],
        descale_v: f32[1, 1, 1, 1],
        descale_o: f32[1, 1, 1, 1],
        descale_d_o: f32[1, 1, 1, 1],
        descale_s: f32[1, 1, 1, 1],
        descale_dp: f32[1, 1, 1, 1],
        scale_s: f32[1, 1, 1, 1],
        scale_dq: f32[1, 1, 1, 1],
        scale_dk: f32[1, 1, 1, 1],
        scale_dv: f32[1, 1, 1, 1],
        scale_dp: f32[1, 1, 1, 1],
    ) -> (
        dq: fp8_e4m3[B, H, S, D],
        dk: fp8_e4m3[B, H, S, D],
        dv: fp8_e4m3[B, H, S, D],
        amax_dq: f32[1, 1, 1, 1],
        amax_dk: f32[1, 1, 1, 1],
        amax_dv: f32[1, 1, 1, 1],
        amax_dp: f32[1, 1, 1, 1],
    ) {
        (dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp) = sdpa_backward(
            q, k, v, o, d_o, stats,
            descale_q, descale_k, descale_v, descale_o, descale_d_o, descale_s, descale_dp,
            scale_s, scale_dq, scale_dk, scale_dv, scale_dp,
            fp8 = e4m3, causal = true,
        );
    }
}

/// cudnn-frontend's `get_fp8_scale_factor` for e4m3: `128 / 2^ceil(log2 max(amax, 1/16)) · 0.25`.
fn scale_factor(amax: f64) -> f32 {
    (128.0 / 2f64.powf(amax.max(0.0625).log2().ceil()) * 0.25) as f32
}

/// One problem's inputs (fp8 values and their scales).
struct Inputs {
    q: Vec<Fp8E4M3>,
    k: Vec<Fp8E4M3>,
    v: Vec<Fp8E4M3>,
    descale_qkv: [f32; 1],
    scale_s: [f32; 1],
    descale_s: [f32; 1],
}

fn inputs(seed: u64, n: usize) -> Inputs {
    // Uniform in [-1, 1): amax just under 1, so the scale is 32 and every value lies in
    // [-32, 32) before it is rounded to e4m3.
    let scale = scale_factor(1.0);
    let draw = |s: u64| -> Vec<Fp8E4M3> {
        common::uniform::<f32>(s, n, -1.0, 1.0).iter().map(|x| Fp8E4M3::from_f64(f64::from(x * scale))).collect()
    };
    Inputs {
        q: draw(seed),
        k: draw(seed + 1),
        v: draw(seed + 2),
        descale_qkv: [1.0 / scale],
        scale_s: [scale_factor(1.0)],
        descale_s: [1.0 / scale_factor(1.0)],
    }
}

/// Checks O (descaled) and the amaxes against the reference's.
fn check(what: &str, o: &[Fp8E4M3], amax: [f32; 2], want_o: &[Fp8E4M3], want_amax: [f32; 2], descale_o: f32) {
    let (atol, rtol) = (0.08, 0.2);
    let mut bad = 0usize;
    let mut worst = 0.0f64;
    for (g, w) in o.iter().zip(want_o) {
        let (g, w) = (g.to_f64() * f64::from(descale_o), w.to_f64() * f64::from(descale_o));
        let err = (g - w).abs();
        worst = worst.max(err);
        if err.is_nan() || err > atol + rtol * w.abs() {
            bad += 1;
        }
    }
    println!(
        "{what}: O max abs error {worst:.3e} (descaled), {bad} of {} outside 0.08 + 0.2·|want|; Amax_S {} vs {}, Amax_O {} vs {}",
        o.len(),
        amax[0],
        want_amax[0],
        amax[1],
        want_amax[1]
    );
    assert_eq!(bad, 0, "{what}");
    for (g, w) in amax.iter().zip(want_amax) {
        let (g, w) = (f64::from(*g), f64::from(w));
        assert!((g - w).abs() <= 0.1 + 0.1 * w.abs(), "{what}: amax {g} vs {w}");
    }
}

macro_rules! run_case {
    ($graph:ident, $inputs:ident, $args:ident, $what:expr, $shape:expr, $seed:expr) => {{
        // The GPU first: without one, the CPU reference below is minutes of work for nothing.
        let Some((stream, cudnn)) = common::gpu() else { return };
        let (b, h, s, d) = $shape;
        let n = b * h * s * d;
        let x = inputs($seed, n);
        let g = $graph::new(b, h, s, d);
        let reference = |scale_o: &[f32]| {
            g.reference($inputs {
                q: &x.q,
                k: &x.k,
                v: &x.v,
                descale_q: &x.descale_qkv,
                descale_k: &x.descale_qkv,
                descale_v: &x.descale_qkv,
                descale_s: &x.descale_s,
                scale_s: &x.scale_s,
                scale_o,
            })
            .unwrap()
        };
        // The output's scale from the reference's amax, as cudnn-frontend's test takes it.
        let amax_o = reference(&[1.0]).amax_o[0];
        let scale_o = [scale_factor(f64::from(amax_o))];
        let want = reference(&scale_o);
        assert!(want.o.iter().any(|v| v.to_f64().abs() > 4.0), "{}: O uses the e4m3 range", $what);
        {
            let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
            let up = |v: &[f32]| common::upload(&stream, v);
            let (q_d, k_d, v_d) =
                (common::upload(&stream, &x.q), common::upload(&stream, &x.k), common::upload(&stream, &x.v));
            let (dqkv_d, ds_d, ss_d, so_d) = (up(&x.descale_qkv), up(&x.descale_s), up(&x.scale_s), up(&scale_o));
            let mut o_d = common::poisoned::<Fp8E4M3>(&stream, n);
            let mut amax_s_d = common::poisoned::<f32>(&stream, 1);
            let mut amax_o_d = common::poisoned::<f32>(&stream, 1);
            let mut ws = common::workspace(&stream, plan.workspace_size());
            let args = $args {
                q: &q_d,
                k: &k_d,
                v: &v_d,
                descale_q: &dqkv_d,
                descale_k: &dqkv_d,
                descale_v: &dqkv_d,
                descale_s: &ds_d,
                scale_s: &ss_d,
                scale_o: &so_d,
                o: &mut o_d,
                amax_s: &mut amax_s_d,
                amax_o: &mut amax_o_d,
            };
            plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
            let o = stream.clone_dtoh(&o_d).unwrap();
            let amax = [stream.clone_dtoh(&amax_s_d).unwrap()[0], stream.clone_dtoh(&amax_o_d).unwrap()[0]];
            println!("{}: engine {}", $what, plan.plan().selected().tag());
            check($what, &o, amax, &want.o, [want.amax_s[0], want.amax_o[0]], 1.0 / scale_o[0]);
        }
    }};
}

#[needs_gpu]
#[test]
fn gpu_fp8_attention_matches_the_reference() {
    run_case!(Fp8Attention, Fp8AttentionInputs, Fp8AttentionArgs, "fp8 sdpa b2 h4 s128 d128", (2, 4, 128, 128), 11);
    run_case!(Fp8Attention, Fp8AttentionInputs, Fp8AttentionArgs, "fp8 sdpa b1 h2 s200 d64", (1, 2, 200, 64), 21);
}

#[needs_gpu]
#[test]
fn gpu_fp8_causal_attention_matches_the_reference() {
    run_case!(
        Fp8CausalAttention,
        Fp8CausalAttentionInputs,
        Fp8CausalAttentionArgs,
        "fp8 causal sdpa b2 h4 s128 d128",
        (2, 4, 128, 128),
        31
    );
}

/// Checks a gradient (descaled by `descale`) with cudnn-frontend's fp8 backward tolerances.
fn check_gradient(what: &str, got: &[Fp8E4M3], want: &[Fp8E4M3], descale: f32) -> usize {
    let (atol, rtol) = (0.04, 0.2);
    let mut worst = 0.0f64;
    let mut bad = 0usize;
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (g.to_f64() * f64::from(descale), w.to_f64() * f64::from(descale));
        let err = (g - w).abs();
        worst = worst.max(err);
        if err.is_nan() || err > atol + rtol * w.abs() {
            bad += 1;
        }
    }
    println!("{what}: max abs error {worst:.3e} (descaled), {bad} of {} outside 0.04 + 0.2·|want|", got.len());
    bad
}

macro_rules! run_backward_case {
    ($fwd:ident, $fwd_inputs:ident, $bwd:ident, $bwd_inputs:ident, $bwd_args:ident, $what:expr, $shape:expr, $seed:expr) => {{
        // The GPU first: without one, the CPU reference below is minutes of work for nothing.
        let Some((stream, cudnn)) = common::gpu() else { return };
        let (b, h, s, d) = $shape;
        let n = b * h * s * d;
        let x = inputs($seed, n);
        // The forward on the CPU reference: O in e4m3 with a scale from its amax, and Stats.
        let fwd = $fwd::new(b, h, s, d);
        let forward = |scale_o: &[f32]| {
            fwd.reference($fwd_inputs {
                q: &x.q,
                k: &x.k,
                v: &x.v,
                descale_q: &x.descale_qkv,
                descale_k: &x.descale_qkv,
                descale_v: &x.descale_qkv,
                descale_s: &x.descale_s,
                scale_s: &x.scale_s,
                scale_o,
            })
            .unwrap()
        };
        let scale_o = [scale_factor(f64::from(forward(&[1.0]).amax_o[0]))];
        let f = forward(&scale_o);
        let descale_o = [1.0 / scale_o[0]];
        // dO drawn as Q is.
        let d_o = inputs($seed + 7, n).q;
        let g = $bwd::new(b, h, s, d);
        let backward = |scales: [f32; 4]| {
            let [dq, dk, dv, dp] = scales;
            g.reference($bwd_inputs {
                q: &x.q,
                k: &x.k,
                v: &x.v,
                o: &f.o,
                d_o: &d_o,
                stats: &f.stats,
                descale_q: &x.descale_qkv,
                descale_k: &x.descale_qkv,
                descale_v: &x.descale_qkv,
                descale_o: &descale_o,
                descale_d_o: &x.descale_qkv,
                descale_s: &x.descale_s,
                descale_dp: &[1.0 / dp],
                scale_s: &x.scale_s,
                scale_dq: &[dq],
                scale_dk: &[dk],
                scale_dv: &[dv],
                scale_dp: &[dp],
            })
            .unwrap()
        };
        // Delayed scaling on the reference: dS's scale first, then the gradients' with it.
        let s_dp = scale_factor(f64::from(backward([1.0; 4]).amax_dp[0]));
        let second = backward([1.0, 1.0, 1.0, s_dp]);
        let factor = |a: &[f32]| scale_factor(f64::from(a[0]));
        let scales = [factor(&second.amax_dq), factor(&second.amax_dk), factor(&second.amax_dv), s_dp];
        let want = backward(scales);
        assert!(want.dq.iter().any(|v| v.to_f64().abs() > 4.0), "{}: dQ uses the e4m3 range", $what);
        {
            let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
            let up = |v: &[f32]| common::upload(&stream, v);
            let fp8 = |v: &[Fp8E4M3]| common::upload(&stream, v);
            let (q_d, k_d, v_d, o_d, do_d) = (fp8(&x.q), fp8(&x.k), fp8(&x.v), fp8(&f.o), fp8(&d_o));
            let stats_d = up(&f.stats);
            let (dqkv_d, do_desc_d, ds_d, ss_d) =
                (up(&x.descale_qkv), up(&descale_o), up(&x.descale_s), up(&x.scale_s));
            let (ddp_d, sdq_d, sdk_d, sdv_d, sdp_d) =
                (up(&[1.0 / scales[3]]), up(&scales[..1]), up(&scales[1..2]), up(&scales[2..3]), up(&scales[3..]));
            let mut dq_d = common::poisoned::<Fp8E4M3>(&stream, n);
            let mut dk_d = common::poisoned::<Fp8E4M3>(&stream, n);
            let mut dv_d = common::poisoned::<Fp8E4M3>(&stream, n);
            let mut amax_d: Vec<_> = (0..4).map(|_| common::poisoned::<f32>(&stream, 1)).collect();
            let mut ws = common::workspace(&stream, plan.workspace_size());
            let [a_q, a_k, a_v, a_p] = &mut amax_d[..] else { unreachable!() };
            let args = $bwd_args {
                q: &q_d,
                k: &k_d,
                v: &v_d,
                o: &o_d,
                d_o: &do_d,
                stats: &stats_d,
                descale_q: &dqkv_d,
                descale_k: &dqkv_d,
                descale_v: &dqkv_d,
                descale_o: &do_desc_d,
                descale_d_o: &dqkv_d,
                descale_s: &ds_d,
                descale_dp: &ddp_d,
                scale_s: &ss_d,
                scale_dq: &sdq_d,
                scale_dk: &sdk_d,
                scale_dv: &sdv_d,
                scale_dp: &sdp_d,
                dq: &mut dq_d,
                dk: &mut dk_d,
                dv: &mut dv_d,
                amax_dq: a_q,
                amax_dk: a_k,
                amax_dv: a_v,
                amax_dp: a_p,
            };
            plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
            println!("{}: engine {}", $what, plan.plan().selected().tag());
            let got = [&dq_d, &dk_d, &dv_d].map(|t| stream.clone_dtoh(t).unwrap());
            let mut bad = 0;
            for ((name, got), (want, scale)) in
                ["dQ", "dK", "dV"].iter().zip(&got).zip([&want.dq, &want.dk, &want.dv].into_iter().zip(scales))
            {
                bad += check_gradient(&format!("{} {name}", $what), got, want, 1.0 / scale);
            }
            assert_eq!(bad, 0, "{}", $what);
            let want_amax = [want.amax_dq[0], want.amax_dk[0], want.amax_dv[0], want.amax_dp[0]];
            for (name, (a, w)) in ["Amax_dQ", "Amax_dK", "Amax_dV", "Amax_dP"].iter().zip(amax_d.iter().zip(want_amax))
            {
                let (g, w) = (f64::from(stream.clone_dtoh(a).unwrap()[0]), f64::from(w));
                println!("{}: {name} {g} vs {w}", $what);
                assert!((g - w).abs() <= 0.1 + 0.1 * w.abs(), "{}: {name} {g} vs {w}", $what);
            }
        }
    }};
}

#[needs_gpu]
#[test]
fn gpu_fp8_attention_backward_matches_the_reference() {
    run_backward_case!(
        Fp8AttentionTraining,
        Fp8AttentionTrainingInputs,
        Fp8AttentionBackward,
        Fp8AttentionBackwardInputs,
        Fp8AttentionBackwardArgs,
        "fp8 sdpa backward b2 h4 s128 d128",
        (2, 4, 128, 128),
        41
    );
    run_backward_case!(
        Fp8CausalAttentionTraining,
        Fp8CausalAttentionTrainingInputs,
        Fp8CausalAttentionBackward,
        Fp8CausalAttentionBackwardInputs,
        Fp8CausalAttentionBackwardArgs,
        "fp8 causal sdpa backward b2 h4 s128 d128",
        (2, 4, 128, 128),
        51
    );
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
