//! The support rules of cuDNN's attention that depend on the GPU or on the loaded cuDNN version
//! (cudnn-frontend's `sdpa_support_surface.h` and the backward node's validation), checked when
//! a plan is built; and the choice between the fused and the composite lowering.
//!
//! Rules that depend only on shapes, types and attributes are in the shape rule
//! ([`super::Sdpa`]), so the `graph!` macro reports them at compile time.
//!
//! ```
//! # use cudnn_runtime as cudnn_graph;
//! use cudnn_graph::ops::sdpa::support::{choose, Problem, Target};
//! use cudnn_graph::ops::{Implementation, Op};
//! let Op::Sdpa(op) = Op::from_call("sdpa", &[("causal".into(), true.into())]).unwrap() else { unreachable!() };
//! let problem = Problem { b: 4, h_q: 16, h_k: 16, h_v: 16, s_q: 4096, s_kv: 4096, d_qk: 128, d_v: 128, compute_f32: true };
//! // cuDNN 9.19's fused SDPA_FWD operation has no causal mask: the composite subgraph it is.
//! assert_eq!(choose(&op, &problem, Target { version: 91900, sm: Some(90) }).unwrap(), Implementation::Composite);
//! let e = choose(&op, &problem, Target { version: 91900, sm: Some(75) }).unwrap_err();
//! assert_eq!(e.rule, "sdpa.sm80");
//! ```

use std::fmt;

use super::{Implementation, Sdpa, SdpaPass};
use crate::capabilities::{require, version_string as version, Capability as C, Missing};

/// What a plan is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// `cudnnGetVersion()` (`91900` is 9.19.0).
    pub version: usize,
    /// Compute capability as `major * 10 + minor` (90 for an H200), when known.
    pub sm: Option<u32>,
}

/// The dims of an attention node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Problem {
    /// Batch.
    pub b: i64,
    /// Query heads.
    pub h_q: i64,
    /// Key heads.
    pub h_k: i64,
    /// Value heads.
    pub h_v: i64,
    /// Query sequence length.
    pub s_q: i64,
    /// Key/value sequence length.
    pub s_kv: i64,
    /// Q/K head dim.
    pub d_qk: i64,
    /// V/O head dim.
    pub d_v: i64,
    /// The node computes in `f32` (the fused operation needs it).
    pub compute_f32: bool,
}

impl Problem {
    /// The dims of a node with these Q, K, V dims (`None` unless all are 4-d).
    pub fn from_dims(q: &[i64], k: &[i64], v: &[i64], compute_f32: bool) -> Option<Problem> {
        if q.len() != 4 || k.len() != 4 || v.len() != 4 {
            return None;
        }
        Some(Problem {
            b: q[0],
            h_q: q[1],
            h_k: k[1],
            h_v: v[1],
            s_q: q[2],
            s_kv: k[2],
            d_qk: q[3],
            d_v: v[3],
            compute_f32,
        })
    }
}

/// A support rule that failed: which one, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleFailure {
    /// The rule's stable id (`sdpa.sm80`, `sdpa.fused.causal`, ...).
    pub rule: &'static str,
    /// What the rule says and what the node or target has.
    pub message: String,
    /// Where only the version refuses: the capability the target's cuDNN lacks and the version
    /// that brings it.
    pub needs: Option<Missing>,
}

impl fmt::Display for RuleFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule `{}`: {}", self.rule, self.message)
    }
}

fn fail(rule: &'static str, message: String) -> Result<(), RuleFailure> {
    Err(RuleFailure { rule, message, needs: None })
}

/// Fails with `rule` unless cuDNN `v` has `capability` ([`crate::capabilities`]): the message
/// names the capability, the version that brings it and the loaded one, then `detail` if any.
fn need(rule: &'static str, capability: C, v: usize, detail: &str) -> Result<(), RuleFailure> {
    require(v, capability).map_err(|missing| RuleFailure {
        rule,
        message: if detail.is_empty() { missing.to_string() } else { format!("{missing} ({detail})") },
        needs: Some(missing),
    })
}

/// The rules every lowering of `op` must meet on `target`.
pub fn check(op: &Sdpa, p: &Problem, target: Target) -> Result<(), RuleFailure> {
    let v = target.version;
    let major = target.sm.map(|sm| sm / 10);
    let d = p.d_qk.max(p.d_v);
    if let Some(sm) = target.sm {
        if sm < 80 {
            return fail(
                "sdpa.sm80",
                format!(
                    "cuDNN's fp16/bf16 attention needs compute capability 8.0 (Ampere) or newer; the target is sm {sm}"
                ),
            );
        }
    }
    if op.fp8.is_some() {
        fp8_rules(op, p, target)?;
    }
    if op.paged {
        need("sdpa.paged.version", C::PagedCacheLoad, v, "")?;
    }
    if op.paged && d > 128 {
        need("sdpa.paged.head_dim", C::PagedHeadDimAbove128, v, &format!("head dim {d}"))?;
    }
    if op.ragged {
        ragged_rules(op, p, target)?;
    }
    match op.pass {
        SdpaPass::Forward => forward_rules(op, p, target)?,
        SdpaPass::Backward => backward_rules(op, p, target)?,
    }
    let head_limit = match major {
        Some(8) => Some((128, C::HeadDimAbove128Ampere)),
        Some(9) => Some((256, C::HeadDimAbove256Hopper)),
        Some(10) => Some((128, C::HeadDimAbove128Blackwell)),
        _ => None,
    };
    if let Some((limit, capability)) = head_limit {
        if d > limit {
            need("sdpa.head_dim", capability, v, &format!("head dim {d}"))?;
        }
    }
    if op.window.is_some() && (!op.causal || op.dropout.is_some() || op.bias) {
        need("sdpa.window_before_9_10_2", C::GeneralSlidingWindow, v, "")?;
    }
    if op.window.is_some() && op.bottom_right() && major == Some(9) && p.s_q == p.s_kv {
        need("sdpa.window_bottom_right_hopper", C::BottomRightWindowSquareHopper, v, "")?;
    }
    Ok(())
}

/// The forward's rules on the GPU and the cuDNN version: releases with known attention bugs, and
/// decoding (one query row) with a large head dim or causal masking.
fn forward_rules(op: &Sdpa, p: &Problem, target: Target) -> Result<(), RuleFailure> {
    let v = target.version;
    let major = target.sm.map(|sm| sm / 10);
    let d = p.d_qk.max(p.d_v);
    if (91000..=91001).contains(&v) {
        return fail(
            "sdpa.cudnn_9_10",
            format!("cuDNN {} has known attention bugs; use 9.10.2 or newer", version(v)),
        );
    }
    if v == 91400 && p.s_kv > 1024 && op.window.is_some() && !op.causal {
        return fail(
            "sdpa.cudnn_9_14_0_window",
            format!("cuDNN 9.14.0 computes non-causal sliding windows over S_kv > 1024 wrongly (S_kv = {}); use 9.14.1 or newer", p.s_kv),
        );
    }
    if p.s_q == 1 && major == Some(10) && d > 128 {
        need("sdpa.decode_head_dim", C::DecodeHeadDimAbove128Blackwell, v, &format!("head dim {d}"))?;
    }
    if p.s_q == 1 && op.causal {
        need("sdpa.decode_causal", C::DecodeCausal, v, "")?;
    }
    Ok(())
}

/// The backward's rules on the GPU and the cuDNN version: the deterministic algorithm on
/// Blackwell, and S_kv not a multiple of 128 without a padding mask.
fn backward_rules(op: &Sdpa, p: &Problem, target: Target) -> Result<(), RuleFailure> {
    let v = target.version;
    let major = target.sm.map(|sm| sm / 10);
    if op.deterministic && major == Some(10) {
        need("sdpa.deterministic_blackwell", C::DeterministicBackwardBlackwell, v, "")?;
        if op.d_bias || op.dropout.is_some() {
            return fail(
                "sdpa.deterministic_blackwell",
                "the deterministic backward on Blackwell supports neither dBias nor dropout".into(),
            );
        }
    }
    if p.s_kv % 128 != 0 && !op.padding_mask {
        need(
            "sdpa.backward_s_kv_128",
            C::BackwardAnySeqLenKv,
            v,
            &format!("S_kv = {}; before, cudnn-frontend adds a hidden padding mask", p.s_kv),
        )?;
    }
    Ok(())
}

/// Packed (ragged) attention's rules on the GPU and the cuDNN version (cudnn-frontend's
/// `sdpa_support_surface.h` and its backward node's validation).
fn ragged_rules(op: &Sdpa, p: &Problem, target: Target) -> Result<(), RuleFailure> {
    let v = target.version;
    let major = target.sm.map(|sm| sm / 10);
    if let Some(sm) = target.sm.filter(|&sm| sm < 90) {
        need("sdpa.ragged.sm90", C::RaggedBelowHopper, v, &format!("the target is sm {sm}"))?;
    }
    if op.paged {
        need("sdpa.ragged.paged", C::RaggedPagedAttention, v, "")?;
    }
    if op.pass == SdpaPass::Backward {
        if p.h_q != p.h_k || p.h_q != p.h_v {
            let heads = format!("{} query, {} key, {} value heads", p.h_q, p.h_k, p.h_v);
            need("sdpa.ragged.gqa_backward", C::RaggedGqaBackward, v, &heads)?;
        }
        if op.deterministic && matches!(major, Some(8 | 12)) {
            return fail(
                "sdpa.ragged.deterministic",
                "the deterministic packed backward is not supported on sm 8.x and sm 12.x GPUs (cudnn-frontend's rule); \
                 leave out `deterministic = true`"
                    .into(),
            );
        }
        if op.d_bias && major == Some(10) {
            return fail(
                "sdpa.ragged.d_bias_blackwell",
                "dBias of packed attention is not supported on sm 10.x (cudnn-frontend's rule); leave out `d_bias`"
                    .into(),
            );
        }
    }
    Ok(())
}

/// fp8 attention's rules beyond the shape rule's (`sdpa_support_surface.h`).
fn fp8_rules(op: &Sdpa, p: &Problem, target: Target) -> Result<(), RuleFailure> {
    let v = target.version;
    let major = target.sm.map(|sm| sm / 10);
    need("sdpa.fp8.version", C::Fp8Attention, v, "")?;
    if v == 91000 {
        return fail("sdpa.fp8.version", "cuDNN 9.10.0's fp8 attention is broken (cudnn-frontend refuses it)".into());
    }
    if let Some(sm) = target.sm.filter(|&sm| sm < 90) {
        return fail(
            "sdpa.fp8.sm90",
            format!("cuDNN's fp8 attention needs compute capability 9.0 (Hopper) or newer; the target is sm {sm}"),
        );
    }
    if op.causal && op.bottom_right() && major.is_some_and(|m| m < 10) {
        return fail(
            "sdpa.fp8.bottom_right",
            "bottom-right causal masking of fp8 attention needs Blackwell (cuDNN refuses it on Hopper); use \
             top-left alignment"
                .into(),
        );
    }
    if op.pass == SdpaPass::Backward && major == Some(9) && (p.d_qk != 128 || p.d_v != 128) {
        return fail(
            "sdpa.fp8.backward_head_dim_hopper",
            format!(
                "fp8 attention's backward on Hopper needs head dims of exactly 128 (cudnn-frontend's \
                 sdpa_fp8_backward); d_qk = {}, d_v = {}",
                p.d_qk, p.d_v
            ),
        );
    }
    if major.is_some_and(|m| m >= 10) && (p.d_qk > 128 || p.d_v > 128) {
        // Above 128 only d_qk = 192 with d_v = 128, and only from the version that brings it: a
        // refusal a newer cuDNN lifts says so (`needs`).
        if p.d_qk == 192 && p.d_v == 128 {
            return need(
                "sdpa.fp8.head_dim_blackwell",
                C::Fp8HeadDim192Blackwell,
                v,
                "fp8 attention on Blackwell takes head dims above 128 only as d_qk = 192, d_v = 128",
            );
        }
        return fail(
            "sdpa.fp8.head_dim_blackwell",
            format!(
                "fp8 attention on Blackwell needs head dims of at most 128 (or d_qk = 192, d_v = 128 from cuDNN {}); \
                 d_qk = {}, d_v = {}",
                version(crate::capabilities::row(C::Fp8HeadDim192Blackwell).since),
                p.d_qk,
                p.d_v
            ),
        );
    }
    Ok(())
}

/// The rules of the fused `SDPA_FWD` operation as cudnn-graph drives it (the attributes of
/// cuDNN 9.13.1 to 9.15: Q, K, V, O, Stats, the scale and the sequence lengths). cuDNN 9.21 adds
/// a score-modifier subgraph for masks and bias, which this lowering does not yet build; such
/// nodes go composite.
pub fn fused_supported(op: &Sdpa, p: &Problem, target: Target) -> Result<(), RuleFailure> {
    let v = target.version;
    if op.pass == SdpaPass::Backward {
        return fail(
            "sdpa.fused.backward",
            "the backward has no fused lowering (cudnn-frontend builds it composite too); use `implementation = composite` or `auto`".into(),
        );
    }
    need("sdpa.fused.version", C::FusedSdpaForward, v, "")?;
    if op.fp8.is_some() {
        return fail(
            "sdpa.fused.fp8",
            "the fused SDPA_FWD operation takes fp8 from cuDNN 9.25 only (cudnn-frontend), and cudnn-graph does not \
             drive its fp8 attributes; use `implementation = composite` (or `auto`)"
                .into(),
        );
    }
    let unsupported = if op.causal {
        Some(("sdpa.fused.causal", "causal masking"))
    } else if op.window.is_some() {
        Some(("sdpa.fused.window", "a sliding window"))
    } else if op.bias {
        Some(("sdpa.fused.bias", "a bias"))
    } else if op.dropout.is_some() {
        Some(("sdpa.fused.dropout", "dropout"))
    } else {
        None
    };
    if let Some((rule, what)) = unsupported {
        return fail(
            rule,
            format!(
                "the fused SDPA_FWD operation takes {what} only through cuDNN 9.21's score-modifier subgraph, which \
                 cudnn-graph does not build yet; use `implementation = composite` (or `auto`)"
            ),
        );
    }
    if op.padding_mask {
        need("sdpa.fused.padding", C::FusedSdpaSequenceLengths, v, "")?;
    }
    if !p.compute_f32 {
        return fail(
            "sdpa.fused.compute",
            "the fused SDPA_FWD operation computes in f32 only; set `#[compute(f32)]`".into(),
        );
    }
    Ok(())
}

/// The lowering `op` gets on `target`: the one it asks for if its rules hold, else (for
/// [`Implementation::Auto`]) fused where supported and composite otherwise. Fails with the first
/// rule that rules out every allowed lowering.
pub fn choose(op: &Sdpa, p: &Problem, target: Target) -> Result<Implementation, RuleFailure> {
    check(op, p, target)?;
    match op.implementation {
        Implementation::Composite => Ok(Implementation::Composite),
        Implementation::Fused => fused_supported(op, p, target).map(|()| Implementation::Fused),
        Implementation::Auto => {
            Ok(if fused_supported(op, p, target).is_ok() { Implementation::Fused } else { Implementation::Composite })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Op;

    fn op(name: &str, attrs: &[(&str, crate::ops::AttrValue)]) -> Sdpa {
        let attrs: Vec<(String, crate::ops::AttrValue)> =
            attrs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        match Op::from_call(name, &attrs).unwrap() {
            Op::Sdpa(s) => s,
            other => panic!("{other:?}"),
        }
    }

    const P: Problem =
        Problem { b: 2, h_q: 8, h_k: 8, h_v: 8, s_q: 256, s_kv: 256, d_qk: 64, d_v: 64, compute_f32: true };
    const H200_919: Target = Target { version: 91900, sm: Some(90) };

    /// A node and target that need `capability` and the rule that refuses them without it.
    struct Case {
        name: &'static str,
        attrs: Vec<(&'static str, crate::ops::AttrValue)>,
        problem: Problem,
        sm: u32,
        rule: &'static str,
    }

    fn case(capability: C) -> Option<Case> {
        let c = |name, attrs: &[(&'static str, crate::ops::AttrValue)], problem, sm, rule| {
            Some(Case { name, attrs: attrs.to_vec(), problem, sm, rule })
        };
        let d = |d_qk, d_v| Problem { d_qk, d_v, ..P };
        let gqa = Problem { h_k: 2, h_v: 2, ..P };
        let decode = |d_qk| Problem { s_q: 1, d_qk, d_v: d_qk, ..P };
        match capability {
            C::Fp8Attention => c("sdpa", &[("fp8", "e4m3".into()), ("causal", true.into())], d(128, 128), 90, "sdpa.fp8.version"),
            C::PagedCacheLoad => c("sdpa", &[("paged", true.into())], P, 90, "sdpa.paged.version"),
            C::RaggedGqaBackward => c("sdpa_backward", &[("ragged", true.into())], gqa, 90, "sdpa.ragged.gqa_backward"),
            C::RaggedPagedAttention => {
                c("sdpa", &[("ragged", true.into()), ("paged", true.into())], P, 90, "sdpa.ragged.paged")
            }
            C::PagedHeadDimAbove128 => c("sdpa", &[("paged", true.into())], d(256, 256), 90, "sdpa.paged.head_dim"),
            C::DecodeCausal => c("sdpa", &[("causal", true.into())], decode(64), 90, "sdpa.decode_causal"),
            C::DecodeHeadDimAbove128Blackwell => c("sdpa", &[], decode(256), 100, "sdpa.decode_head_dim"),
            C::HeadDimAbove128Ampere => c("sdpa", &[], d(256, 256), 80, "sdpa.head_dim"),
            C::HeadDimAbove256Hopper => c("sdpa", &[], d(512, 512), 90, "sdpa.head_dim"),
            C::HeadDimAbove128Blackwell => c("sdpa", &[], d(256, 256), 100, "sdpa.head_dim"),
            C::BottomRightWindowSquareHopper => c(
                "sdpa",
                &[("window", 128.into()), ("causal", true.into()), ("alignment", "bottom_right".into())],
                P,
                90,
                "sdpa.window_bottom_right_hopper",
            ),
            // A lowering path, not a rule: `masked_value` (see the test below).
            C::NegativeInfinityMasks => None,
            // The backward: the forward of 9.10.0 and 9.10.1 is refused whole (`sdpa.cudnn_9_10`).
            C::GeneralSlidingWindow => c("sdpa_backward", &[("window", 128.into())], P, 90, "sdpa.window_before_9_10_2"),
            C::FusedSdpaForward => c("sdpa", &[("implementation", "fused".into())], P, 90, "sdpa.fused.version"),
            C::FusedSdpaSequenceLengths => c(
                "sdpa",
                &[("implementation", "fused".into()), ("padding_mask", true.into())],
                P,
                90,
                "sdpa.fused.padding",
            ),
            C::BackwardAnySeqLenKv => {
                c("sdpa_backward", &[], Problem { s_kv: 200, ..P }, 90, "sdpa.backward_s_kv_128")
            }
            C::DeterministicBackwardBlackwell => {
                c("sdpa_backward", &[("deterministic", true.into())], P, 100, "sdpa.deterministic_blackwell")
            }
            C::RaggedBelowHopper => c("sdpa", &[("ragged", true.into())], P, 80, "sdpa.ragged.sm90"),
            C::Fp8HeadDim192Blackwell => {
                c("sdpa", &[("fp8", "e4m3".into())], d(192, 128), 100, "sdpa.fp8.head_dim_blackwell")
            }
        }
    }

    /// Every row of the capabilities table that a support rule consults: the node that needs it is
    /// refused by the rule's name one version before the row's, the message saying which version
    /// brings it and `needs` saying so typed; from the row's version on that rule lets it through.
    #[test]
    fn each_capability_is_refused_by_name_before_its_version_and_used_from_it() {
        for &capability in C::ALL {
            let Some(case) = case(capability) else { continue };
            let since = crate::capabilities::row(capability).since;
            let node = op(case.name, &case.attrs);
            let before = Target { version: since - 1, sm: Some(case.sm) };
            let e = choose(&node, &case.problem, before).unwrap_err();
            assert_eq!(e.rule, case.rule, "{capability:?}: {e}");
            assert!(e.message.contains(&version(since)), "{capability:?}: {e}");
            // Typed too: what is missing, from which version, against the target's.
            assert_eq!(e.needs, Some(Missing { capability, since, loaded: since - 1 }), "{capability:?}: {e}");
            let from = Target { version: since, sm: Some(case.sm) };
            if let Err(e) = choose(&node, &case.problem, from) {
                assert_ne!(e.rule, case.rule, "{capability:?} at {}: {e}", version(since));
            }
        }
    }

    #[test]
    fn masks_write_negative_infinity_from_the_tables_version() {
        let since = crate::capabilities::row(C::NegativeInfinityMasks).since;
        assert_eq!(super::super::composite::masked_value(since - 1), f64::from(f32::MIN));
        assert_eq!(super::super::composite::masked_value(since), f64::NEG_INFINITY);
    }

    #[test]
    fn auto_picks_fused_where_it_can() {
        assert_eq!(choose(&op("sdpa", &[]), &P, H200_919).unwrap(), Implementation::Fused);
        assert_eq!(choose(&op("sdpa", &[("training", true.into())]), &P, H200_919).unwrap(), Implementation::Fused);
        assert_eq!(choose(&op("sdpa", &[("padding_mask", true.into())]), &P, H200_919).unwrap(), Implementation::Fused);
        let old = Target { version: 91200, sm: Some(90) };
        assert_eq!(choose(&op("sdpa", &[]), &P, old).unwrap(), Implementation::Composite);
        for attrs in [("causal", true.into()), ("bias", true.into()), ("window", 128.into()), ("dropout", 0.1.into())] {
            assert_eq!(choose(&op("sdpa", &[attrs]), &P, H200_919).unwrap(), Implementation::Composite);
        }
        assert_eq!(choose(&op("sdpa_backward", &[]), &P, H200_919).unwrap(), Implementation::Composite);
        let bf16_compute = Problem { compute_f32: false, ..P };
        assert_eq!(choose(&op("sdpa", &[]), &bf16_compute, H200_919).unwrap(), Implementation::Composite);
    }

    #[test]
    fn forcing_names_the_rule() {
        let forced = |attrs: &[(&str, crate::ops::AttrValue)], t| {
            let mut a = attrs.to_vec();
            a.push(("implementation", "fused".into()));
            choose(&op("sdpa", &a), &P, t).unwrap_err().rule
        };
        assert_eq!(forced(&[("causal", true.into())], H200_919), "sdpa.fused.causal");
        assert_eq!(forced(&[], Target { version: 91300, sm: Some(90) }), "sdpa.fused.version");
        assert_eq!(
            forced(&[("padding_mask", true.into())], Target { version: 91400, sm: Some(90) }),
            "sdpa.fused.padding"
        );
        let composite = op("sdpa", &[("implementation", "composite".into())]);
        assert_eq!(choose(&composite, &P, H200_919).unwrap(), Implementation::Composite);
    }

    #[test]
    fn fp8_rules() {
        let fp8 = op("sdpa", &[("fp8", "e4m3".into()), ("causal", true.into())]);
        let d128 = Problem { d_qk: 128, d_v: 128, ..P };
        assert_eq!(choose(&fp8, &d128, H200_919).unwrap(), Implementation::Composite);
        let blackwell = Target { version: 91900, sm: Some(100) };
        let rule = |o: &Sdpa, p: &Problem, t| choose(o, p, t).unwrap_err().rule;
        assert_eq!(rule(&fp8, &d128, Target { version: 91900, sm: Some(89) }), "sdpa.fp8.sm90");
        assert_eq!(rule(&fp8, &d128, Target { version: 91000, sm: Some(90) }), "sdpa.fp8.version");
        let br = op("sdpa", &[("fp8", "e4m3".into()), ("causal", true.into()), ("alignment", "bottom_right".into())]);
        assert_eq!(rule(&br, &d128, H200_919), "sdpa.fp8.bottom_right");
        assert!(choose(&br, &d128, blackwell).is_ok());
        let d256 = Problem { d_qk: 256, d_v: 256, ..P };
        assert!(choose(&fp8, &d256, H200_919).is_ok());
        assert_eq!(rule(&fp8, &d256, blackwell), "sdpa.fp8.head_dim_blackwell");
        assert!(choose(&fp8, &Problem { d_qk: 192, d_v: 128, ..P }, blackwell).is_ok());
        let fused = op("sdpa", &[("fp8", "e4m3".into()), ("implementation", "fused".into())]);
        assert_eq!(rule(&fused, &d128, H200_919), "sdpa.fused.fp8");
        // The backward: composite, head dims of exactly 128 on Hopper.
        let bwd = op("sdpa_backward", &[("fp8", "e4m3".into()), ("causal", true.into())]);
        assert_eq!(choose(&bwd, &d128, H200_919).unwrap(), Implementation::Composite);
        assert_eq!(rule(&bwd, &P, H200_919), "sdpa.fp8.backward_head_dim_hopper");
        assert_eq!(rule(&bwd, &d256, H200_919), "sdpa.fp8.backward_head_dim_hopper");
        assert!(choose(&bwd, &P, blackwell).is_ok());
        assert_eq!(rule(&bwd, &d128, Target { version: 91000, sm: Some(90) }), "sdpa.fp8.version");
    }

    #[test]
    fn arch_and_version_rules() {
        let plain = op("sdpa", &[]);
        assert_eq!(check(&plain, &P, Target { version: 91900, sm: Some(75) }).unwrap_err().rule, "sdpa.sm80");
        assert_eq!(check(&plain, &P, Target { version: 91000, sm: Some(90) }).unwrap_err().rule, "sdpa.cudnn_9_10");
        let big = Problem { d_qk: 192, d_v: 192, ..P };
        assert_eq!(check(&plain, &big, Target { version: 90800, sm: Some(80) }).unwrap_err().rule, "sdpa.head_dim");
        assert!(check(&plain, &big, Target { version: 90800, sm: Some(90) }).is_ok());
        let window = op("sdpa", &[("window", 64.into())]);
        assert_eq!(
            check(&window, &P, Target { version: 90800, sm: Some(90) }).unwrap_err().rule,
            "sdpa.window_before_9_10_2"
        );
        assert!(check(&window, &P, H200_919).is_ok());
        let long = Problem { s_kv: 2048, s_q: 2048, ..P };
        assert_eq!(
            check(&window, &long, Target { version: 91400, sm: Some(90) }).unwrap_err().rule,
            "sdpa.cudnn_9_14_0_window"
        );
        let bwd = op("sdpa_backward", &[]);
        let odd = Problem { s_kv: 100, ..P };
        assert_eq!(
            check(&bwd, &odd, Target { version: 91500, sm: Some(90) }).unwrap_err().rule,
            "sdpa.backward_s_kv_128"
        );
        assert!(check(&bwd, &odd, H200_919).is_ok());
        let det = op("sdpa_backward", &[("deterministic", true.into())]);
        assert_eq!(
            check(&det, &P, Target { version: 91700, sm: Some(100) }).unwrap_err().rule,
            "sdpa.deterministic_blackwell"
        );
        // An unknown SM (a context that could not read it) skips the arch rules.
        assert!(check(&plain, &P, Target { version: 91900, sm: None }).is_ok());
    }
}
