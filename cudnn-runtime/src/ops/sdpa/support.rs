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
}

impl fmt::Display for RuleFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule `{}`: {}", self.rule, self.message)
    }
}

fn fail(rule: &'static str, message: String) -> Result<(), RuleFailure> {
    Err(RuleFailure { rule, message })
}

fn version(v: usize) -> String {
    format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100)
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
    if op.paged && v < 90500 {
        return fail("sdpa.paged.version", format!("paged K/V caches need cuDNN 9.5 or newer; loaded {}", version(v)));
    }
    if op.paged && v <= 90900 && d > 128 {
        return fail(
            "sdpa.paged.head_dim",
            format!("paged K/V caches with head dims above 128 need cuDNN 9.10 or newer (head dim {d}, loaded {})", version(v)),
        );
    }
    if op.ragged {
        ragged_rules(op, p, target)?;
    }
    match op.pass {
        SdpaPass::Forward => {
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
            if p.s_q == 1 && v <= 90900 && major == Some(10) && d > 128 {
                return fail(
                    "sdpa.decode_head_dim",
                    format!("decoding (S_q = 1) with head dim {d} > 128 on Blackwell needs cuDNN 9.10 or newer"),
                );
            }
            if p.s_q == 1 && v <= 90900 && op.causal {
                return fail(
                    "sdpa.decode_causal",
                    "decoding (S_q = 1) with causal masking needs cuDNN 9.10 or newer".into(),
                );
            }
        }
        SdpaPass::Backward => {
            if op.deterministic && major == Some(10) {
                if v < 91800 {
                    return fail(
                        "sdpa.deterministic_blackwell",
                        format!(
                            "the deterministic backward on Blackwell needs cuDNN 9.18 or newer; loaded {}",
                            version(v)
                        ),
                    );
                }
                if op.d_bias || op.dropout.is_some() {
                    return fail(
                        "sdpa.deterministic_blackwell",
                        "the deterministic backward on Blackwell supports neither dBias nor dropout".into(),
                    );
                }
            }
            if p.s_kv % 128 != 0 && !op.padding_mask && v <= 91500 {
                return fail(
                    "sdpa.backward_s_kv_128",
                    format!(
                        "before cuDNN 9.15.1 the backward needs S_kv % 128 == 0 or a padding mask (cudnn-frontend adds \
                         a hidden one); S_kv = {}, loaded {}",
                        p.s_kv,
                        version(v)
                    ),
                );
            }
        }
    }
    let head_limit = match major {
        Some(8) if v <= 90900 => Some(128),
        Some(9) if v <= 90900 => Some(256),
        Some(10) if v < 90900 => Some(128),
        _ => None,
    };
    if let Some(limit) = head_limit {
        if d > limit {
            return fail(
                "sdpa.head_dim",
                format!("head dims above {limit} need a newer cuDNN on this GPU (head dim {d}, cuDNN {})", version(v)),
            );
        }
    }
    if v < 91002 && op.window.is_some() && (!op.causal || op.dropout.is_some() || op.bias) {
        return fail(
            "sdpa.window_before_9_10_2",
            "before cuDNN 9.10.2 a sliding window needs causal masking and neither dropout nor bias".into(),
        );
    }
    if op.window.is_some() && op.bottom_right() && v <= 90900 && major == Some(9) && p.s_q == p.s_kv {
        return fail(
            "sdpa.window_bottom_right_hopper",
            "a bottom-right sliding window with S_q == S_kv on Hopper needs cuDNN 9.10 or newer".into(),
        );
    }
    Ok(())
}

/// Packed (ragged) attention's rules on the GPU and the cuDNN version (cudnn-frontend's
/// `sdpa_support_surface.h` and its backward node's validation).
fn ragged_rules(op: &Sdpa, p: &Problem, target: Target) -> Result<(), RuleFailure> {
    let v = target.version;
    let major = target.sm.map(|sm| sm / 10);
    if let Some(sm) = target.sm.filter(|&sm| sm < 90 && v < 91801) {
        return fail(
            "sdpa.ragged.sm90",
            format!(
                "packed (ragged, THD) attention needs Hopper (sm 9.0) or newer before cuDNN 9.18.1; the target is sm \
                 {sm}, loaded {}",
                version(v)
            ),
        );
    }
    if op.paged && v < 90700 {
        return fail(
            "sdpa.ragged.paged",
            format!("packed queries over a paged cache need cuDNN 9.7 or newer; loaded {}", version(v)),
        );
    }
    if op.pass == SdpaPass::Backward {
        if v < 90600 && (p.h_q != p.h_k || p.h_q != p.h_v) {
            return fail(
                "sdpa.ragged.gqa_backward",
                format!(
                    "the packed backward with grouped heads ({} query, {} key, {} value heads) needs cuDNN 9.6 or newer; \
                     loaded {}",
                    p.h_q,
                    p.h_k,
                    p.h_v,
                    version(v)
                ),
            );
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
    if v < 90100 || v == 91000 {
        return fail(
            "sdpa.fp8.version",
            format!("fp8 attention needs cuDNN 9.1 or newer, and not 9.10.0; loaded {}", version(v)),
        );
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
    if major.is_some_and(|m| m >= 10) && (p.d_qk > 128 || p.d_v > 128) && !(v >= 91900 && p.d_qk == 192 && p.d_v == 128)
    {
        return fail(
            "sdpa.fp8.head_dim_blackwell",
            format!(
                "fp8 attention on Blackwell needs head dims of at most 128 (or d_qk = 192, d_v = 128 from cuDNN 9.19); \
                 d_qk = {}, d_v = {}",
                p.d_qk, p.d_v
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
    if v < 91301 {
        return fail(
            "sdpa.fused.version",
            format!("the fused SDPA_FWD operation needs cuDNN 9.13.1 or newer; loaded {}", version(v)),
        );
    }
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
    if op.padding_mask && v < 91500 {
        return fail(
            "sdpa.fused.padding",
            format!("the fused SDPA_FWD operation takes sequence lengths from cuDNN 9.15; loaded {}", version(v)),
        );
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
