//! Scaled dot-product attention: `sdpa(q, k, v, ...)` (forward) and
//! `sdpa_backward(q, k, v, o, d_o, stats, ...)`, cuDNN's flash attention.
//!
//! Dims are logical `[B, H, S, D]` as in cudnn-frontend: Q is `[B, H_q, S_q, D_qk]`, K is
//! `[B, H_k, S_kv, D_qk]`, V is `[B, H_v, S_kv, D_v]`, O is `[B, H_q, S_q, D_v]`. Any strides
//! whose last one is 1 (BHSD, BSHD, ...) are accepted; set them with
//! [`crate::GraphBuilder::set_strides`].
//!
//! ```text
//! S = scale · Q·Kᵀ (+ bias), masked (padding, causal, sliding window) to −∞
//! P = softmax(S) along S_kv,  Stats = max(S) + log Σ exp(S − max(S))   (training)
//! O = dropout(P) · V
//! ```
//!
//! Attributes (all optional): `scale` (default `1/sqrt(D_qk)`) or `scale_tensor = true` (an
//! `Attn_scale` input), `causal`, `alignment = top_left | bottom_right` (where the causal
//! diagonal and the window sit when `S_q != S_kv`), `window = w` (sliding window: row `i` sees
//! keys `j` with `i + shift - w < j`, `shift = S_kv - S_q` bottom-right, 0 top-left),
//! `bias = true` (a `Bias` input), `padding_mask = true` (`SEQ_LEN_Q`, `SEQ_LEN_KV` inputs),
//! `dropout = p` (`Seed`, `Offset` inputs), `training = true` (forward: the `Stats` output),
//! `d_bias = true` (backward: the `dBias` output), `deterministic = true` (backward),
//! `implementation = auto | fused | composite` (see [`Implementation`]),
//! `fp8 = e4m3 | e5m2` (fp8 attention, forward and backward, below), and `paged = true` with
//! `max_seq_len_kv = n` (forward: K and V are page pools read through page tables, see
//! [`paged`]).
//!
//! `ragged = true` packs the sequences (THD): each of Q, K, V, O (the backward's too) holds
//! sequence `b` at the element offset its `Ragged_offset_*` input gives (see [`ragged`]);
//! `max_total_seq_len_q = n`, `max_total_seq_len_kv = n` bound the packed tokens, so that the
//! buffers hold only that many.
//!
//! Optional inputs follow Q, K, V (and O, dO, Stats for the backward) in this order:
//! `Attn_scale`, `Bias`, `SEQ_LEN_Q`, `SEQ_LEN_KV`, `Seed`, `Offset`, `Page_table_K`,
//! `Page_table_V`, `Ragged_offset_Q`, `Ragged_offset_K`, `Ragged_offset_V`, `Ragged_offset_O`;
//! an instance takes those its attributes ask for ([`Op::inputs`](crate::ops::Op::inputs)).
//!
//! With `fp8 = e4m3` (or `e5m2`: cudnn-frontend's `sdpa_fp8`), Q, K and V are of that fp8 type, six `f32`
//! `[1, 1, 1, 1]` inputs follow the others: `Descale_Q`, `Descale_K`, `Descale_V`, `Descale_S`,
//! `Scale_S`, `Scale_O`; the outputs are O in Q's type (and Stats), then `Amax_S`, `Amax_O`
//! (`f32 [1, 1, 1, 1]`):
//!
//! ```text
//! S = scale · descale_q · descale_k · Q·Kᵀ, masked;  P = softmax(S)
//! Amax_S = max |P|,  P8 = fp8(P · scale_s)
//! O' = descale_s · descale_v · P8·V,  Amax_O = max |O'|,  O = fp8(O' · scale_o)
//! ```
//!
//! The backward with `fp8` (cudnn-frontend's `sdpa_fp8_backward`, per-tensor scaling) takes Q, K,
//! V, O and dO of that fp8 type, Stats, then twelve `f32 [1, 1, 1, 1]` inputs after the others
//! ([`FP8_BACKWARD_INPUTS`]): `Descale_Q`, `Descale_K`, `Descale_V`, `Descale_O`, `Descale_dO`,
//! `Descale_S`, `Descale_dP`, `Scale_S`, `Scale_dQ`, `Scale_dK`, `Scale_dV`, `Scale_dP`; the
//! outputs are dQ, dK, dV in the fp8 type, then `Amax_dQ`, `Amax_dK`, `Amax_dV`, `Amax_dP`. It
//! quantizes P and dS before their matmuls and each gradient after its scale:
//!
//! ```text
//! D = descale_do · descale_o · Σ_d dO·O;   P = exp(S − Stats),  P8 = fp8(P · scale_s)
//! dV' = descale_s · descale_do · P8ᵀ·dO,   Amax_dV = max |dV'|,  dV = fp8(dV' · scale_dv)
//! dS = P ⊙ (descale_do · descale_v · dO·Vᵀ − D) · scale,  Amax_dP = max |dS|,  dS8 = fp8(dS · scale_dp)
//! dQ' = descale_dp · descale_k · dS8·K,    Amax_dQ = max |dQ'|,  dQ = fp8(dQ' · scale_dq)
//! dK' = descale_dp · descale_q · dS8ᵀ·Q,   Amax_dK = max |dK'|,  dK = fp8(dK' · scale_dk)
//! ```
//!
//! fp8 attention writes O and the gradients in its fp8 type: cuDNN 9.19 refuses bf16 or f16 ones
//! on Hopper, and a declaration of another type is an error quoting that reason
//! ([`OutputMeta::reason`](super::OutputMeta::reason)). Its backward takes no dropout and no
//! `deterministic` (cudnn-frontend's fp8 backward graph has no dropout mask on dP; the
//! deterministic variant is Blackwell's).
//!
//! The shape rule checks every support rule that depends only on shapes, types and attributes
//! (the macro runs it at compile time); rules that depend on the GPU or the cuDNN version are
//! checked when a plan is built ([`support`]).

use std::fmt;

use serde::{Deserialize, Serialize};

// The lowering's description; the tests run it on the CPU.
#[cfg(any(feature = "cudnn", test))]
pub(crate) mod composite;
pub(crate) mod codec;
#[cfg(feature = "cudnn")]
pub(crate) mod lower;
mod infer;
pub mod paged;
pub mod ragged;
mod reference;
pub mod support;

use super::signature::{AttrKind, AttrSpec, AttrValue, OpSignature, PortSpec};
use super::attrs::{AttrError, Attrs};
use super::shape::{ShapeError, ShapeErrorKind, StridedMeta, TensorMeta};
use super::family::{FusionRule, Inferred, LayoutPolicy, OpFamily};
use super::Family;
use crate::dim::{Dim, DimCx};
use crate::array::Array;
use crate::DataType;

/// The forward call name.
pub const FORWARD: &str = "sdpa";
/// The backward call name.
pub const BACKWARD: &str = "sdpa_backward";

/// Both passes' inputs, in the order their signatures list them: Q, K, V, then the
/// pass's own (`[..]` after the first name: the backward's O, dO and Stats), the optional inputs
/// both take, the paged-cache inputs (`paged: [..]`, the forward's), the ragged offsets, and the
/// scales `fp8 = ...` adds, which are also declared as `$fp8` on their own (`[n]`: how many).
macro_rules! pass_inputs {
    (
        $inputs:ident: [$($own:literal),*], paged: [$($paged:literal),*],
        $(#[$fp8_doc:meta])* $fp8:ident[$n:literal]: [$($scale:literal),* $(,)?]
    ) => {
        const $inputs: &[PortSpec] = &[
            PortSpec::tensor("Q"),
            PortSpec::tensor("K"),
            PortSpec::tensor("V"),
            $(PortSpec::tensor($own),)*
            PortSpec::tensor("Attn_scale"),
            PortSpec::tensor("Bias"),
            PortSpec::tensor("SEQ_LEN_Q"),
            PortSpec::tensor("SEQ_LEN_KV"),
            PortSpec::tensor("Seed"),
            PortSpec::tensor("Offset"),
            $(PortSpec::tensor($paged),)*
            PortSpec::tensor("Ragged_offset_Q"),
            PortSpec::tensor("Ragged_offset_K"),
            PortSpec::tensor("Ragged_offset_V"),
            PortSpec::tensor("Ragged_offset_O"),
            $(PortSpec::tensor($scale),)*
        ];
        $(#[$fp8_doc])*
        pub const $fp8: [&str; $n] = [$($scale),*];
    };
}

pass_inputs! {
    FORWARD_INPUTS: [], paged: ["Page_table_K", "Page_table_V"],
    /// The inputs `fp8 = ...` adds (cudnn-frontend's `sdpa_fp8` arguments, in its order).
    FP8_INPUTS[6]: ["Descale_Q", "Descale_K", "Descale_V", "Descale_S", "Scale_S", "Scale_O"]
}
pass_inputs! {
    BACKWARD_INPUTS: ["O", "dO", "Stats"], paged: [],
    /// The inputs `fp8 = ...` adds to the backward (cudnn-frontend's `sdpa_fp8_backward` arguments,
    /// in its order).
    FP8_BACKWARD_INPUTS[12]: [
        "Descale_Q",
        "Descale_K",
        "Descale_V",
        "Descale_O",
        "Descale_dO",
        "Descale_S",
        "Descale_dP",
        "Scale_S",
        "Scale_dQ",
        "Scale_dK",
        "Scale_dV",
        "Scale_dP",
    ]
}
const FORWARD_OUTPUTS: &[&str] = &["O", "Stats", "Amax_S", "Amax_O"];
const FP8_INFERENCE_OUTPUTS: &[&str] = &["O", "Amax_S", "Amax_O"];
const BACKWARD_OUTPUTS: &[&str] = &["dQ", "dK", "dV", "dBias", "Amax_dQ", "Amax_dK", "Amax_dV", "Amax_dP"];
const FP8_BACKWARD_OUTPUTS: &[&str] = &["dQ", "dK", "dV", "Amax_dQ", "Amax_dK", "Amax_dV", "Amax_dP"];

const ALIGNMENTS: &[&str] = &["top_left", "bottom_right"];
const IMPLEMENTATIONS: &[&str] = &["auto", "fused", "composite"];
const FP8_MODES: &[&str] = &["e4m3", "e5m2"];
const BACKWARD_IMPLEMENTATIONS: &[&str] = &["auto", "composite"];

const fn attr(name: &'static str, kind: AttrKind) -> AttrSpec {
    AttrSpec { name, kind, required: false }
}

/// Both passes' attributes, in one order: those both take, then the pass's own (`[..]` first),
/// `implementation` with the pass's choices, `fp8`, the paged-cache bounds (`paged: [..]`, the
/// forward's), and the ragged bounds.
macro_rules! pass_attrs {
    ([$($own:expr),*], $implementations:expr, paged: [$($paged:expr),*]) => {
        &[
            attr("scale", AttrKind::Float),
            attr("scale_tensor", AttrKind::Bool),
            attr("causal", AttrKind::Bool),
            attr("alignment", AttrKind::OneOf(ALIGNMENTS)),
            attr("window", AttrKind::Int),
            attr("bias", AttrKind::Bool),
            attr("padding_mask", AttrKind::Bool),
            attr("dropout", AttrKind::Float),
            $($own,)*
            attr("implementation", AttrKind::OneOf($implementations)),
            attr("fp8", AttrKind::OneOf(FP8_MODES)),
            $($paged,)*
            attr("ragged", AttrKind::Bool),
            attr("max_total_seq_len_q", AttrKind::Int),
            attr("max_total_seq_len_kv", AttrKind::Int),
        ]
    };
}

const FORWARD_ATTRS: &[AttrSpec] = pass_attrs!(
    [attr("training", AttrKind::Bool)],
    IMPLEMENTATIONS,
    paged: [attr("paged", AttrKind::Bool), attr("max_seq_len_kv", AttrKind::Int)]
);
const BACKWARD_ATTRS: &[AttrSpec] = pass_attrs!(
    [attr("d_bias", AttrKind::Bool), attr("deterministic", AttrKind::Bool)],
    BACKWARD_IMPLEMENTATIONS,
    paged: []
);

/// Forward or backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SdpaPass {
    /// `sdpa`: Q, K, V → O (and Stats).
    Forward,
    /// `sdpa_backward`: Q, K, V, O, dO, Stats → dQ, dK, dV (and dBias).
    Backward,
}

impl SdpaPass {
    /// Both passes.
    pub const ALL: [SdpaPass; 2] = [SdpaPass::Forward, SdpaPass::Backward];

    /// The call name.
    pub const fn name(self) -> &'static str {
        match self {
            SdpaPass::Forward => FORWARD,
            SdpaPass::Backward => BACKWARD,
        }
    }

    /// Looks a pass up by its call name.
    pub fn from_name(name: &str) -> Option<SdpaPass> {
        SdpaPass::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The call signature: every port the op can have (an instance takes a subset, see
    /// [`Op::inputs`](crate::ops::Op::inputs) and [`Op::outputs`](crate::ops::Op::outputs)).
    pub fn signature(self) -> OpSignature {
        let (inputs, outputs, attrs) = match self {
            SdpaPass::Forward => (FORWARD_INPUTS, FORWARD_OUTPUTS, FORWARD_ATTRS),
            SdpaPass::Backward => (BACKWARD_INPUTS, BACKWARD_OUTPUTS, BACKWARD_ATTRS),
        };
        OpSignature { name: self.name(), family: Family::Sdpa(self), inputs, outputs, attrs }
    }

    /// The inputs every instance has.
    fn required(self) -> usize {
        match self {
            SdpaPass::Forward => 3,
            SdpaPass::Backward => 6,
        }
    }

    /// The scale inputs `fp8 = ...` adds to this pass, in cudnn-frontend's order.
    pub const fn fp8_inputs(self) -> &'static [&'static str] {
        match self {
            SdpaPass::Forward => &FP8_INPUTS,
            SdpaPass::Backward => &FP8_BACKWARD_INPUTS,
        }
    }
}

/// Where the causal diagonal (and the sliding window) sits when `S_q != S_kv` (cudnn-frontend's
/// `DiagonalAlignment_t`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Alignment {
    /// Query `i` sees keys `j <= i` (`top_left`, the default).
    #[default]
    TopLeft,
    /// Query `i` sees keys `j <= i + S_kv - S_q`: the last query sees every key (`bottom_right`,
    /// for decoding with a KV cache).
    BottomRight,
}

impl Alignment {
    /// The DSL spelling.
    pub const fn name(self) -> &'static str {
        match self {
            Alignment::TopLeft => "top_left",
            Alignment::BottomRight => "bottom_right",
        }
    }

    /// cudnn-frontend's spelling.
    pub const fn cudnn_name(self) -> &'static str {
        match self {
            Alignment::TopLeft => "TOP_LEFT",
            Alignment::BottomRight => "BOTTOM_RIGHT",
        }
    }
}

/// Which cuDNN lowering a node gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Implementation {
    /// `fused` where the loaded cuDNN's `SDPA_FWD` operation supports the node's features,
    /// `composite` otherwise (the default).
    #[default]
    Auto,
    /// cuDNN's dedicated `CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR` (cuDNN 9.13.1 or newer;
    /// forward only). Asking for it where it cannot be used is a build-time error naming the rule.
    Fused,
    /// The matmul → scale → bias → masks → softmax → (dropout) → matmul subgraph that cuDNN's
    /// fused attention engines recognise (every supported cuDNN; the only backward lowering).
    Composite,
}

impl Implementation {
    /// The DSL spelling.
    pub const fn name(self) -> &'static str {
        match self {
            Implementation::Auto => "auto",
            Implementation::Fused => "fused",
            Implementation::Composite => "composite",
        }
    }

    /// cudnn-frontend's spelling (`AttentionImplementation_t`).
    pub const fn cudnn_name(self) -> &'static str {
        match self {
            Implementation::Auto => "AUTO",
            Implementation::Fused => "UNIFIED",
            Implementation::Composite => "COMPOSITE",
        }
    }
}

impl fmt::Display for Implementation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One attention op, forward or backward, with its options.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::ops::{Op, AttrValue};
/// let op = Op::from_call("sdpa", &[("causal".into(), true.into()), ("training".into(), true.into())]).unwrap();
/// assert_eq!(op.outputs(), ["O", "Stats"]);
/// let names: Vec<&str> = op.inputs().iter().map(|p| p.name).collect();
/// assert_eq!(names, ["Q", "K", "V"]);
/// let op = Op::from_call("sdpa", &[("bias".into(), true.into()), ("padding_mask".into(), true.into())]).unwrap();
/// let names: Vec<&str> = op.inputs().iter().map(|p| p.name).collect();
/// assert_eq!(names, ["Q", "K", "V", "Bias", "SEQ_LEN_Q", "SEQ_LEN_KV"]);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sdpa {
    /// Forward or backward.
    pub pass: SdpaPass,
    /// The attention scale as a literal; `None` means `1/sqrt(D_qk)` (unless `scale_tensor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
    /// The scale comes from an `Attn_scale` input (`f32[1, 1, 1, 1]`).
    #[serde(default)]
    pub scale_tensor: bool,
    /// Causal masking (cudnn-frontend's right bound 0).
    #[serde(default)]
    pub causal: bool,
    /// Where the diagonal sits.
    #[serde(default)]
    pub alignment: Alignment,
    /// Sliding window length (cudnn-frontend's left bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<i64>,
    /// An additive `Bias` input.
    #[serde(default)]
    pub bias: bool,
    /// Per-batch sequence lengths (`SEQ_LEN_Q`, `SEQ_LEN_KV`): positions past them are masked.
    #[serde(default)]
    pub padding_mask: bool,
    /// Dropout probability (`Seed`, `Offset` inputs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropout: Option<f64>,
    /// Forward: also output `Stats` (the softmax log-sum-exp the backward needs).
    #[serde(default)]
    pub training: bool,
    /// Backward: also output `dBias`.
    #[serde(default)]
    pub d_bias: bool,
    /// Backward: the deterministic algorithm (no atomics in dQ).
    #[serde(default)]
    pub deterministic: bool,
    /// Which lowering.
    #[serde(default)]
    pub implementation: Implementation,
    /// fp8 attention in this type (`fp8 = e4m3 | e5m2`). Forward: cudnn-frontend's `sdpa_fp8`
    /// with this `mma_core_mode`, the type of Q, K, V, O and of P between the matmuls: the
    /// `Descale_Q`, `Descale_K`, `Descale_V`, `Descale_S`, `Scale_S`, `Scale_O` inputs and the
    /// `Amax_S`, `Amax_O` outputs. Backward: cudnn-frontend's `sdpa_fp8_backward`, the type of
    /// Q, K, V, O, dO, of P and dS between the matmuls and of dQ, dK, dV: the
    /// [`FP8_BACKWARD_INPUTS`] and the `Amax_dQ`, `Amax_dK`, `Amax_dV`, `Amax_dP` outputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8: Option<DataType>,
    /// Forward: K and V are page pools read through the `Page_table_K`, `Page_table_V` inputs
    /// (`paged = true`, cudnn-frontend's `paged_attention_k_table` / `_v_table`; see [`paged`]).
    #[serde(default)]
    pub paged: bool,
    /// With `paged`: the longest key sequence the tables cover (cudnn-frontend's
    /// `paged_attention_max_seq_len_kv`); `None` means table width × page size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_seq_len_kv: Option<i64>,
    /// Packed (THD) sequences: Q, K, V and O (forward; Q and O over a paged cache) and the
    /// backward's Q, K, V, O, dO, dQ, dK, dV hold each sequence at the element offset its
    /// `Ragged_offset_*` input gives (cuDNN's ragged offset tensors; see [`ragged`]).
    #[serde(default)]
    pub ragged: bool,
    /// With `ragged`: the most query tokens the packed batch holds (cudnn-frontend's
    /// `max_total_seq_len_q`), so that the buffers of Q, O (and dO, dQ) need only that many
    /// tokens of `H·D` elements; `None`: `B·S_q`, the padded capacity (see [`ragged`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_total_seq_len_q: Option<i64>,
    /// With `ragged`: the most key tokens the packed batch holds (`max_total_seq_len_kv`), for
    /// the buffers of K, V (and dK, dV); `None`: `B·S_kv`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_total_seq_len_kv: Option<i64>,
}

/// The cuDNN types Q, K and V may have.
fn takes(dtype: DataType) -> bool {
    matches!(dtype, DataType::F16 | DataType::BF16)
}

fn rule(op: &'static str, arg: Option<usize>, rule: String) -> ShapeError {
    ShapeError { arg, attr: None, kind: Box::new(ShapeErrorKind::Rule { op, rule }) }
}

impl Sdpa {
    /// A plain (non-causal, unscaled-by-default, inference) attention op of `pass`.
    pub fn new(pass: SdpaPass) -> Self {
        Sdpa {
            pass,
            scale: None,
            scale_tensor: false,
            causal: false,
            alignment: Alignment::TopLeft,
            window: None,
            bias: false,
            padding_mask: false,
            dropout: None,
            training: false,
            d_bias: false,
            deterministic: false,
            implementation: Implementation::Auto,
            fp8: None,
            paged: false,
            max_seq_len_kv: None,
            ragged: false,
            max_total_seq_len_q: None,
            max_total_seq_len_kv: None,
        }
    }

    /// Whether this instance has the optional input `name`.
    fn has(&self, name: &str) -> bool {
        match name {
            "Attn_scale" => self.scale_tensor,
            "Bias" => self.bias,
            "SEQ_LEN_Q" | "SEQ_LEN_KV" => self.padding_mask,
            "Seed" | "Offset" => self.dropout.is_some(),
            "Page_table_K" | "Page_table_V" => self.paged,
            "Ragged_offset_Q" | "Ragged_offset_O" => self.ragged,
            // A paged cache's K and V are pools: only the dense sequence tensors are packed.
            "Ragged_offset_K" | "Ragged_offset_V" => self.ragged && !self.paged,
            name => self.fp8.is_some() && self.pass.fp8_inputs().contains(&name),
        }
    }

    /// The position of input `name` in [`Op::inputs`](crate::ops::Op::inputs), if this instance has it.
    pub fn input_index(&self, name: &str) -> Option<usize> {
        self.inputs().iter().position(|p| p.name == name)
    }

    /// The scale applied to `Q·Kᵀ` when it is a literal: the attribute, or `1/sqrt(d_qk)`.
    /// `None` when it comes from the `Attn_scale` input.
    pub fn literal_scale(&self, d_qk: i64) -> Option<f64> {
        if self.scale_tensor {
            None
        } else {
            Some(self.scale.unwrap_or_else(|| 1.0 / (d_qk.max(1) as f64).sqrt()))
        }
    }

    /// This op with a literal scale that equals the default for head dim `d_qk` (as the `f32`
    /// cuDNN uses) written as the default: how a cudnn-frontend document, which always spells the
    /// scale out, reads back to the op that wrote it.
    pub fn default_scale_folded(mut self, d_qk: i64) -> Sdpa {
        let default = 1.0 / (d_qk.max(1) as f64).sqrt();
        if self.scale.is_some_and(|s| s as f32 == default as f32) {
            self.scale = None;
        }
        self
    }

    /// The DSL spelling of the `fp8` attribute (`e4m3`, `e5m2`), if the op is fp8 attention.
    pub fn fp8_mode(&self) -> Option<&'static str> {
        match self.fp8 {
            Some(DataType::Fp8E4M3) => Some("e4m3"),
            Some(DataType::Fp8E5M2) => Some("e5m2"),
            _ => None,
        }
    }

    /// Whether a score row `i` is shifted by `S_kv - S_q` (bottom-right alignment).
    pub fn bottom_right(&self) -> bool {
        self.alignment == Alignment::BottomRight
    }
}
impl OpFamily for Sdpa {
    type Kind = SdpaPass;

    const KINDS: &'static [SdpaPass] = &SdpaPass::ALL;

    const TAGS: &'static [&'static str] = codec::TAGS;

    fn signature_of(kind: SdpaPass) -> OpSignature {
        kind.signature()
    }

    fn kind(&self) -> SdpaPass {
        self.pass
    }

    fn from_attrs(pass: SdpaPass, a: &Attrs<'_>, _inputs: usize) -> Result<Self, AttrError> {
        let mut s = Sdpa::new(pass);
        s.scale = a.float("scale");
        s.scale_tensor = a.bool("scale_tensor").unwrap_or(false);
        s.causal = a.bool("causal").unwrap_or(false);
        s.alignment = match a.name("alignment") {
            Some("bottom_right") => Alignment::BottomRight,
            _ => Alignment::TopLeft,
        };
        s.window = a.int("window");
        s.bias = a.bool("bias").unwrap_or(false);
        s.padding_mask = a.bool("padding_mask").unwrap_or(false);
        s.dropout = a.float("dropout");
        s.training = a.bool("training").unwrap_or(false);
        s.d_bias = a.bool("d_bias").unwrap_or(false);
        s.deterministic = a.bool("deterministic").unwrap_or(false);
        s.fp8 = match a.name("fp8") {
            Some("e4m3") => Some(DataType::Fp8E4M3),
            Some("e5m2") => Some(DataType::Fp8E5M2),
            _ => None,
        };
        s.paged = a.bool("paged").unwrap_or(false);
        s.max_seq_len_kv = a.int("max_seq_len_kv");
        s.ragged = a.bool("ragged").unwrap_or(false);
        s.max_total_seq_len_q = a.int("max_total_seq_len_q");
        s.max_total_seq_len_kv = a.int("max_total_seq_len_kv");
        s.implementation = match a.name("implementation") {
            Some("fused") => Implementation::Fused,
            Some("composite") => Implementation::Composite,
            _ => Implementation::Auto,
        };
        Ok(s)
    }

    fn call_attrs(&self) -> Vec<(String, AttrValue)> {
        let mut out: Vec<(String, AttrValue)> = Vec::new();
        let mut push = |k: &str, v: AttrValue| out.push((k.to_string(), v));
        if let Some(s) = self.scale {
            push("scale", AttrValue::Float(s));
        }
        let flags = [
            ("scale_tensor", self.scale_tensor),
            ("causal", self.causal),
            ("bias", self.bias),
            ("padding_mask", self.padding_mask),
            ("training", self.training),
            ("d_bias", self.d_bias),
            ("deterministic", self.deterministic),
            ("paged", self.paged),
            ("ragged", self.ragged),
        ];
        for (k, v) in flags {
            if v {
                push(k, AttrValue::Bool(true));
            }
        }
        if self.alignment != Alignment::TopLeft {
            push("alignment", AttrValue::Name(self.alignment.name().into()));
        }
        if let Some(w) = self.window {
            push("window", AttrValue::Int(w));
        }
        let bounds = [
            ("max_seq_len_kv", self.max_seq_len_kv),
            ("max_total_seq_len_q", self.max_total_seq_len_q),
            ("max_total_seq_len_kv", self.max_total_seq_len_kv),
        ];
        for (k, v) in bounds {
            if let Some(n) = v {
                push(k, AttrValue::Int(n));
            }
        }
        if let Some(mode) = self.fp8_mode() {
            push("fp8", AttrValue::Name(mode.into()));
        }
        if let Some(p) = self.dropout {
            push("dropout", AttrValue::Float(p));
        }
        if self.implementation != Implementation::Auto {
            push("implementation", AttrValue::Name(self.implementation.name().into()));
        }
        out
    }

    /// The inputs of this instance, in order: the required ones, then the optional ones its
    /// attributes ask for.
    fn inputs(&self) -> Vec<PortSpec> {
        let all = self.pass.signature().inputs;
        let required = self.pass.required();
        all[..required].iter().copied().chain(all[required..].iter().copied().filter(|p| self.has(p.name))).collect()
    }

    /// The outputs of this instance: `O` (and `Stats` when training, then `Amax_S, Amax_O` with
    /// `fp8`), or `dQ, dK, dV` (and `dBias`, or with `fp8` `Amax_dQ, Amax_dK, Amax_dV, Amax_dP`).
    fn outputs(&self) -> &'static [&'static str] {
        match self.pass {
            SdpaPass::Forward if self.fp8.is_some() && self.training => FORWARD_OUTPUTS,
            SdpaPass::Forward if self.fp8.is_some() => FP8_INFERENCE_OUTPUTS,
            SdpaPass::Forward if self.training => &FORWARD_OUTPUTS[..2],
            SdpaPass::Forward => &FORWARD_OUTPUTS[..1],
            SdpaPass::Backward if self.fp8.is_some() => FP8_BACKWARD_OUTPUTS,
            SdpaPass::Backward if self.d_bias => &BACKWARD_OUTPUTS[..4],
            SdpaPass::Backward => &BACKWARD_OUTPUTS[..3],
        }
    }

    fn infer<D: Dim>(&self, inputs: &[TensorMeta<D>], cx: &mut impl DimCx<D>) -> Inferred<D> {
        infer::infer(self, inputs, cx)
    }

    fn reference(&self, inputs: &[&Array]) -> Vec<Array> {
        reference::reference(self, inputs)
    }

    fn check_values(&self, inputs: &[&Array]) -> Result<(), ShapeError> {
        paged::check_values(self, inputs)?;
        ragged::check_values(self, inputs)
    }

    fn ragged_ports(&self) -> Vec<super::RaggedPort> {
        ragged::packed(self)
            .into_iter()
            .map(|p| {
                let (output, index) = match p.slot {
                    ragged::Slot::Input(i) => (false, i),
                    ragged::Slot::Output(i) => (true, i),
                };
                let tokens = ragged::total_tokens(self, &p);
                super::RaggedPort { port: p.port, output, index, offsets: p.offsets_index, tokens }
            })
            .collect()
    }

    fn frontend_ragged_offsets(_tag: &str, port: &str) -> Option<&'static str> {
        ragged::offsets_port_of(port)
    }

    fn check_layout(&self, inputs: &[StridedMeta<'_>], outputs: &[StridedMeta<'_>]) -> Result<(), ShapeError> {
        ragged::check_layout(self, inputs, outputs)
    }

    fn fusion(&self) -> FusionRule {
        // The fused attention engines take the attention alone (its own pointwise subgraph is
        // the lowering's).
        FusionRule::ALONE
    }

    fn dynamic_shape_refusal(&self) -> Option<&'static str> {
        // Measured on the H200 (cuDNN 9.19, 2026-12-05, tests/gpu_suite/gpu_dynamic.rs): a causal bf16
        // attention planned dynamic-shape at S = 256 and rebuilt at S = 128 from the kernel cache
        // ran the S = 256 kernel (O's relative error 0.64; the benchmark's device times stayed
        // those of the first shape at every S). cudnn-frontend refuses dynamic shapes for its
        // unified attention node too.
        Some("cuDNN 9.19 reuses a cached attention kernel at the sequence length it was compiled for")
    }

    fn layout_policy(&self) -> LayoutPolicy<'_> {
        LayoutPolicy::PACKED
    }
}

#[cfg(test)]
mod tests;
