//! Normalizations, as cudnn-frontend defines them (`node/layernorm.h`, `rmsnorm.h`, `batchnorm.h`,
//! `batchnorm_inference.h`, `instancenorm.h`, `genstats.h`, `dln.h`, `dbn.h`):
//!
//! | call | inputs | outputs |
//! | --- | --- | --- |
//! | `layernorm(x, scale, bias, eps)` | X, SCALE, BIAS, EPSILON | Y (+ MEAN, INV_VARIANCE in training) |
//! | `rmsnorm(x, scale, eps)` | X, SCALE, EPSILON | Y (+ INV_VARIANCE in training) |
//! | `rmsnorm_bias(x, scale, bias, eps)` | X, SCALE, BIAS, EPSILON | Y (+ INV_VARIANCE in training) |
//! | `batchnorm(x, scale, bias, running_mean, running_var, eps, momentum)` | X, SCALE, BIAS, PREV_RUNNING_MEAN, PREV_RUNNING_VAR, EPSILON, MOMENTUM | Y, MEAN, INV_VARIANCE, NEXT_RUNNING_MEAN, NEXT_RUNNING_VAR |
//! | `batchnorm_inference(x, mean, inv_var, scale, bias)` | X, MEAN, INV_VARIANCE, SCALE, BIAS | Y |
//! | `instancenorm(x, scale, bias, eps)` | X, SCALE, BIAS, EPSILON | Y (+ MEAN, INV_VARIANCE in training) |
//! | `genstats(x)` | X | SUM, SQ_SUM |
//! | `layernorm_backward`, `batchnorm_backward`, `instancenorm_backward` `(dy, x, scale, mean, inv_var)` | DY, X, SCALE, MEAN, INV_VARIANCE | DX, DSCALE, DBIAS |
//! | `rmsnorm_backward(dy, x, scale, inv_var)` | DY, X, SCALE, INV_VARIANCE | DX, DSCALE (+ DBIAS with `dbias = true`) |
//!
//! `layernorm`, `rmsnorm`, `rmsnorm_bias` and `instancenorm` take `phase = training` or
//! `phase = inference` (the default): only training produces the statistics, so
//! `let (y, mean, inv_var) = layernorm(x, scale, bias, 1e-5, phase = training);` binds three
//! tensors and the same call in inference binds one. Epsilon and momentum are positional ports that
//! take a number (a by-value scalar of the compute type) or a tensor whose dims are all 1.
//!
//! Shape rules (cudnn-frontend's inference, checked rather than filled in): X has rank ≥ 2 and a
//! floating-point type; every tensor port has X's rank; DY and the outputs Y and DX have X's dims.
//! - layer and RMS norm: SCALE is 1 or X's extent in each dim; the dims where it is not 1 are the
//!   normalized ones (cudnn-frontend's default SCALE is `[1, C, H, W]`: everything but the batch).
//!   BIAS, DSCALE and DBIAS have SCALE's dims; the statistics MEAN and INV_VARIANCE have X's dims
//!   with the normalized ones set to 1 (`[N, 1, 1, 1]`).
//! - batch norm and genstats: dim 1 is the channel; SCALE, BIAS, the running statistics, MEAN,
//!   INV_VARIANCE, SUM and SQ_SUM are `[1, C, 1, ...]`; the statistics run over every other dim.
//! - instance norm: SCALE and BIAS are `[1, C, 1, ...]`; MEAN and INV_VARIANCE are `[N, C, 1, ...]`.
//!
//! The statistics are the mean and `1 / sqrt(var + eps)` with the biased variance; batch norm's
//! running statistics are `(1 - momentum) · prev + momentum · batch`, with the unbiased variance
//! for the running variance (cuDNN's and PyTorch's rule). The CPU reference (f64) is in
//! `reference.rs`, the cuDNN lowering in `lower.rs` (`CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR`,
//! `..._NORM_BACKWARD_DESCRIPTOR`, `..._GEN_STATS_DESCRIPTOR`).

use serde::{Deserialize, Serialize};

pub(crate) mod codec;
#[cfg(feature = "cudnn")]
pub(crate) mod lower;
mod reference;

use super::signature::{with_running_stats, AttrKind, AttrSpec, AttrValue, OpSignature, PortSpec};
use super::attrs::{AttrError, Attrs};
use super::shape::{OutputMeta, ShapeError, ShapeErrorKind, TensorMeta};
use super::family::{ChannelsLast, FusionRule, Inferred, LayoutPolicy, OpFamily, OutputLayout};
use super::Family;
use crate::dim::{shape_string, Dim, DimCx};
use crate::array::Array;
use crate::DataType;

const LAYER_IN: &[PortSpec] = &[PortSpec::tensor("X"), PortSpec::tensor("SCALE"), PortSpec::tensor("BIAS"), PortSpec::scalar("EPSILON")];
const RMS_IN: &[PortSpec] = &[PortSpec::tensor("X"), PortSpec::tensor("SCALE"), PortSpec::scalar("EPSILON")];
const BATCH_IN: &[PortSpec] = with_running_stats![PortSpec::tensor("X");];
const BATCH_INFERENCE_IN: &[PortSpec] = &[PortSpec::tensor("X"), PortSpec::tensor("MEAN"), PortSpec::tensor("INV_VARIANCE"), PortSpec::tensor("SCALE"), PortSpec::tensor("BIAS")];
const GENSTATS_IN: &[PortSpec] = &[PortSpec::tensor("X")];
const BACKWARD_IN: &[PortSpec] = &[PortSpec::tensor("DY"), PortSpec::tensor("X"), PortSpec::tensor("SCALE"), PortSpec::tensor("MEAN"), PortSpec::tensor("INV_VARIANCE")];
const RMS_BACKWARD_IN: &[PortSpec] = &[PortSpec::tensor("DY"), PortSpec::tensor("X"), PortSpec::tensor("SCALE"), PortSpec::tensor("INV_VARIANCE")];

const STATS_OUT: &[&str] = &["Y", "MEAN", "INV_VARIANCE"];
const RMS_OUT: &[&str] = &["Y", "INV_VARIANCE"];
const BATCH_OUT: &[&str] = &["Y", "MEAN", "INV_VARIANCE", "NEXT_RUNNING_MEAN", "NEXT_RUNNING_VAR"];
const Y_OUT: &[&str] = &["Y"];
const GENSTATS_OUT: &[&str] = &["SUM", "SQ_SUM"];
const BACKWARD_OUT: &[&str] = &["DX", "DSCALE", "DBIAS"];

/// The values of the `phase` attribute.
pub const PHASES: &[&str] = &["training", "inference"];

const PHASE_ATTRS: &[AttrSpec] = &[AttrSpec { name: "phase", kind: AttrKind::OneOf(PHASES), required: false }];
const DBIAS_ATTRS: &[AttrSpec] = &[AttrSpec { name: "dbias", kind: AttrKind::Bool, required: false }];
const NO_ATTRS: &[AttrSpec] = &[];

/// What a norm computes its statistics over, which fixes the shapes of its parameters and
/// statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grouping {
    /// Layer and RMS norm: over the dims where SCALE is not 1.
    Normalized,
    /// Batch norm and genstats: per channel (dim 1), over every other dim.
    PerChannel,
    /// Instance norm: per sample and channel (dims 0 and 1), over the rest.
    PerInstance,
}

macro_rules! norm_kinds {
    ($($variant:ident = $name:literal, $tag:literal, $inputs:ident, $outputs:ident, $attrs:ident, $grouping:ident;)*) => {
        /// A normalization op (one call name each).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum NormKind {
            $(
                #[doc = concat!("`", $name, "` (cudnn-frontend's `", $tag, "`)")]
                #[serde(rename = $name)]
                $variant,
            )*
        }

        impl NormKind {
            /// Every kind.
            pub const ALL: &'static [NormKind] = &[$(NormKind::$variant),*];

            /// The DSL call name.
            pub const fn name(self) -> &'static str {
                match self { $(NormKind::$variant => $name),* }
            }

            /// cudnn-frontend's node tag (`rmsnorm` and `rmsnorm_bias` share `RMS_NORM`).
            pub const fn frontend_tag(self) -> &'static str {
                match self { $(NormKind::$variant => $tag),* }
            }

            const fn inputs(self) -> &'static [PortSpec] {
                match self { $(NormKind::$variant => $inputs),* }
            }

            const fn all_outputs(self) -> &'static [&'static str] {
                match self { $(NormKind::$variant => $outputs),* }
            }

            const fn attrs(self) -> &'static [AttrSpec] {
                match self { $(NormKind::$variant => $attrs),* }
            }

            const fn grouping(self) -> Grouping {
                match self { $(NormKind::$variant => Grouping::$grouping),* }
            }
        }
    };
}

norm_kinds! {
    LayerNorm = "layernorm", "LAYER_NORM", LAYER_IN, STATS_OUT, PHASE_ATTRS, Normalized;
    RmsNorm = "rmsnorm", "RMS_NORM", RMS_IN, RMS_OUT, PHASE_ATTRS, Normalized;
    RmsNormBias = "rmsnorm_bias", "RMS_NORM", LAYER_IN, RMS_OUT, PHASE_ATTRS, Normalized;
    BatchNorm = "batchnorm", "BATCHNORM", BATCH_IN, BATCH_OUT, NO_ATTRS, PerChannel;
    BatchNormInference = "batchnorm_inference", "BATCHNORM_INFERENCE", BATCH_INFERENCE_IN, Y_OUT, NO_ATTRS, PerChannel;
    InstanceNorm = "instancenorm", "INSTANCE_NORM", LAYER_IN, STATS_OUT, PHASE_ATTRS, PerInstance;
    GenStats = "genstats", "GENSTATS", GENSTATS_IN, GENSTATS_OUT, NO_ATTRS, PerChannel;
    LayerNormBackward = "layernorm_backward", "LAYER_NORM_BPROP", BACKWARD_IN, BACKWARD_OUT, NO_ATTRS, Normalized;
    RmsNormBackward = "rmsnorm_backward", "RMS_NORM_BPROP", RMS_BACKWARD_IN, BACKWARD_OUT, DBIAS_ATTRS, Normalized;
    BatchNormBackward = "batchnorm_backward", "DBN", BACKWARD_IN, BACKWARD_OUT, NO_ATTRS, PerChannel;
    InstanceNormBackward = "instancenorm_backward", "INSTANCE_NORM_BPROP", BACKWARD_IN, BACKWARD_OUT, NO_ATTRS, PerInstance;
}

/// cuDNN's normalization modes (`cudnnBackendNormMode_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NormMode {
    /// `CUDNN_LAYER_NORM`
    Layer,
    /// `CUDNN_INSTANCE_NORM`
    Instance,
    /// `CUDNN_BATCH_NORM`
    Batch,
    /// `CUDNN_RMS_NORM`
    Rms,
}

impl NormMode {
    /// The value of `cudnnBackendNormMode_t`.
    pub const fn cudnn_value(self) -> u32 {
        match self {
            NormMode::Layer => 0,
            NormMode::Instance => 1,
            NormMode::Batch => 2,
            NormMode::Rms => 4,
        }
    }
}

/// A forward norm's phase (`cudnnBackendNormFwdPhase_t`): training also produces the statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NormPhase {
    /// `phase = training` (`CUDNN_NORM_FWD_TRAINING`, cudnn-frontend's `TRAINING`).
    #[serde(rename = "TRAINING")]
    Training,
    /// `phase = inference` (`CUDNN_NORM_FWD_INFERENCE`, cudnn-frontend's `INFERENCE`).
    #[serde(rename = "INFERENCE")]
    Inference,
}

impl NormPhase {
    /// The DSL spelling (`training`, `inference`).
    pub const fn name(self) -> &'static str {
        match self {
            NormPhase::Training => "training",
            NormPhase::Inference => "inference",
        }
    }

    /// cudnn-frontend's spelling (`TRAINING`, `INFERENCE`).
    pub const fn frontend_name(self) -> &'static str {
        match self {
            NormPhase::Training => "TRAINING",
            NormPhase::Inference => "INFERENCE",
        }
    }

    /// The value of `cudnnBackendNormFwdPhase_t`.
    pub const fn cudnn_value(self) -> u32 {
        match self {
            NormPhase::Inference => 0,
            NormPhase::Training => 1,
        }
    }

    /// Parses the DSL spelling.
    pub fn from_name(name: &str) -> Option<NormPhase> {
        [NormPhase::Training, NormPhase::Inference].into_iter().find(|p| p.name() == name)
    }

    /// Parses cudnn-frontend's spelling.
    pub fn from_frontend_name(name: &str) -> Option<NormPhase> {
        [NormPhase::Training, NormPhase::Inference].into_iter().find(|p| p.frontend_name() == name)
    }
}

impl NormKind {
    /// Looks up a kind by its DSL call name.
    pub fn from_name(name: &str) -> Option<NormKind> {
        NormKind::ALL.iter().copied().find(|k| k.name() == name)
    }

    /// The call signature. Its outputs are every output the call can have; [`Op::outputs`](super::Op::outputs) says
    /// which one instance produces.
    pub fn signature(self) -> OpSignature {
        OpSignature {
            name: self.name(),
            family: Family::Norm(self),
            inputs: self.inputs(),
            outputs: self.all_outputs(),
            attrs: self.attrs(),
        }
    }

    /// cuDNN's mode; `None` for `genstats`, which has a descriptor of its own.
    pub const fn mode(self) -> Option<NormMode> {
        use NormKind as K;
        match self {
            K::LayerNorm | K::LayerNormBackward => Some(NormMode::Layer),
            K::RmsNorm | K::RmsNormBias | K::RmsNormBackward => Some(NormMode::Rms),
            K::BatchNorm | K::BatchNormInference | K::BatchNormBackward => Some(NormMode::Batch),
            K::InstanceNorm | K::InstanceNormBackward => Some(NormMode::Instance),
            K::GenStats => None,
        }
    }

    /// True for the ops lowered to `CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR`.
    pub const fn is_backward(self) -> bool {
        matches!(
            self,
            NormKind::LayerNormBackward
                | NormKind::RmsNormBackward
                | NormKind::BatchNormBackward
                | NormKind::InstanceNormBackward
        )
    }

    /// True if the call takes the `phase` attribute.
    pub const fn takes_phase(self) -> bool {
        matches!(self, NormKind::LayerNorm | NormKind::RmsNorm | NormKind::RmsNormBias | NormKind::InstanceNorm)
    }

    /// The phase of a call that does not take the attribute: batch norm trains, batch-norm
    /// inference infers; genstats and the backward ops count as training (they make or consume
    /// training statistics). For the others, the default of the attribute.
    const fn default_phase(self) -> NormPhase {
        match self {
            NormKind::BatchNormInference
            | NormKind::LayerNorm
            | NormKind::RmsNorm
            | NormKind::RmsNormBias
            | NormKind::InstanceNorm => NormPhase::Inference,
            _ => NormPhase::Training,
        }
    }

    /// Whether the norm subtracts the mean (RMS norm does not).
    const fn centers(self) -> bool {
        !matches!(self, NormKind::RmsNorm | NormKind::RmsNormBias | NormKind::RmsNormBackward)
    }

    /// The position of input port `name`.
    fn port_index(self, name: &str) -> Option<usize> {
        self.inputs().iter().position(|p| p.name == name)
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A normalization op: its kind, its phase and whether an RMS-norm backward produces DBIAS.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::ops::{AttrValue, Op};
/// let op = Op::from_call("layernorm", &[("phase".into(), AttrValue::from("training"))]).unwrap();
/// assert_eq!(op.outputs(), ["Y", "MEAN", "INV_VARIANCE"]);
/// assert_eq!(Op::from_call("layernorm", &[]).unwrap().outputs(), ["Y"]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Norm {
    /// The op.
    pub kind: NormKind,
    /// The forward phase: the `phase` attribute for the calls that take it (default inference),
    /// fixed by the call for the others (see [`NormKind::takes_phase`]).
    pub phase: NormPhase,
    /// `rmsnorm_backward(..., dbias = true)`: also produce DBIAS.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dbias: bool,
}

impl Norm {
    /// `kind` with its default attributes.
    pub const fn new(kind: NormKind) -> Self {
        Norm { kind, phase: kind.default_phase(), dbias: false }
    }
}

/// `[1, C, 1, ...]` for X `[N, C, ...]`.
fn per_channel<D: Dim>(x: &[D]) -> Vec<D> {
    x.iter().enumerate().map(|(i, d)| if i == 1 { d.clone() } else { D::lit(1) }).collect()
}

/// `[N, C, 1, ...]` for X `[N, C, ...]`.
fn per_instance<D: Dim>(x: &[D]) -> Vec<D> {
    x.iter().enumerate().map(|(i, d)| if i < 2 { d.clone() } else { D::lit(1) }).collect()
}

/// The checks of one norm's shape rule, each naming the op and port.
struct Rules {
    kind: NormKind,
}

impl Rules {
    fn port(&self, i: usize) -> &'static str {
        self.kind.inputs().get(i).map_or("?", |p| p.name)
    }

    fn shape_error(&self, i: usize, expected: String, found: String) -> ShapeError {
        ShapeError::at(i, ShapeErrorKind::PortShape { op: self.kind.name(), port: self.port(i), expected, found })
    }

    /// Every port takes a floating-point tensor.
    fn floating<D: Dim>(&self, i: usize, t: &TensorMeta<D>) -> Result<(), ShapeError> {
        if matches!(t.dtype, DataType::F16 | DataType::BF16 | DataType::F32 | DataType::F64) {
            return Ok(());
        }
        Err(ShapeError::at(
            i,
            ShapeErrorKind::DType {
                op: self.kind.name(),
                port: self.port(i),
                found: t.dtype,
                expected: "a floating-point type (f16, bf16, f32 or f64)",
            },
        ))
    }

    /// Every port has X's rank.
    fn rank<D: Dim>(&self, i: usize, t: &TensorMeta<D>, rank: usize) -> Result<(), ShapeError> {
        if t.dims.len() == rank {
            return Ok(());
        }
        Err(ShapeError::at(
            i,
            ShapeErrorKind::Rank {
                op: self.kind.name(),
                port: self.port(i),
                expected: format!("the rank of port X ({rank})"),
                found: t.dims.len(),
                shape: shape_string(&t.dims),
            },
        ))
    }

    /// Epsilon and momentum: every dim 1.
    fn scalar<D: Dim>(
        &self,
        i: usize,
        t: &TensorMeta<D>,
        rank: usize,
        cx: &mut impl DimCx<D>,
    ) -> Result<(), ShapeError> {
        let one = D::lit(1);
        if t.dims.iter().all(|d| cx.require_eq(d, &one)) {
            return Ok(());
        }
        let ones = shape_string(&vec![one; rank]);
        Err(self.shape_error(
            i,
            format!("a scalar: a number such as `1e-5`, or a tensor {ones} (every dim 1)"),
            shape_string(&t.dims),
        ))
    }

    /// `t` has exactly the dims `expected` (described by `what`).
    fn exact<D: Dim>(
        &self,
        i: usize,
        t: &TensorMeta<D>,
        expected: &[D],
        what: &str,
        cx: &mut impl DimCx<D>,
    ) -> Result<(), ShapeError> {
        if expected.iter().zip(&t.dims).all(|(want, found)| cx.require_eq(want, found)) {
            return Ok(());
        }
        Err(self.shape_error(i, format!("{} ({what})", shape_string(expected)), shape_string(&t.dims)))
    }

    /// Layer and RMS norm's SCALE: 1 or X's extent in each dim. Returns the statistics' dims: X's,
    /// with the normalized dims (where SCALE is not 1) set to 1.
    fn normalized<D: Dim>(
        &self,
        i: usize,
        scale: &TensorMeta<D>,
        x: &TensorMeta<D>,
        cx: &mut impl DimCx<D>,
    ) -> Result<Vec<D>, ShapeError> {
        let mut stats = Vec::with_capacity(x.dims.len());
        for (axis, (s, d)) in scale.dims.iter().zip(&x.dims).enumerate() {
            if s.is_one() {
                stats.push(d.clone());
            } else if cx.require_eq(d, s) {
                stats.push(D::lit(1));
            } else {
                return Err(self.shape_error(
                    i,
                    format!(
                        "1 or X's extent in every dim, its dims that are not 1 being those normalized (X is {})",
                        shape_string(&x.dims)
                    ),
                    format!("{}: dim {axis} is {s}, not 1 or {d}", shape_string(&scale.dims)),
                ));
            }
        }
        Ok(stats)
    }
}
impl OpFamily for Norm {
    type Kind = NormKind;

    const KINDS: &'static [NormKind] = NormKind::ALL;

    const TAGS: &'static [&'static str] = codec::TAGS;

    fn signature_of(kind: NormKind) -> OpSignature {
        kind.signature()
    }

    fn kind(&self) -> NormKind {
        self.kind
    }

    fn from_attrs(kind: NormKind, a: &Attrs<'_>, _inputs: usize) -> Result<Self, AttrError> {
        let mut n = Norm::new(kind);
        if let Some(phase) = a.name("phase").and_then(NormPhase::from_name) {
            n.phase = phase;
        }
        n.dbias = a.bool("dbias").unwrap_or(false);
        Ok(n)
    }

    fn call_attrs(&self) -> Vec<(String, AttrValue)> {
        let mut out = Vec::new();
        if self.kind.takes_phase() && self.phase != self.kind.default_phase() {
            out.push(("phase".to_string(), AttrValue::Name(self.phase.name().to_string())));
        }
        if self.dbias {
            out.push(("dbias".to_string(), AttrValue::Bool(true)));
        }
        out
    }

    /// The outputs this instance produces: the statistics only in training, DBIAS only when asked.
    fn outputs(&self) -> &'static [&'static str] {
        let all = self.kind.all_outputs();
        let keep = match self.kind {
            k if k.takes_phase() && self.phase == NormPhase::Inference => 1,
            NormKind::RmsNormBackward if !self.dbias => 2,
            _ => all.len(),
        };
        &all[..keep]
    }

    /// The shape and dtype rule (see the module docs), one [`OutputMeta`] per output of
    /// [`Op::outputs`](super::Op::outputs).
    fn infer<D: Dim>(&self, inputs: &[TensorMeta<D>], cx: &mut impl DimCx<D>) -> Inferred<D> {
        let rules = Rules { kind: self.kind };
        for (i, t) in inputs.iter().enumerate() {
            rules.floating(i, t)?;
        }
        let x_at = self.kind.port_index("X").unwrap_or(0);
        let x = &inputs[x_at];
        let rank = x.dims.len();
        if rank < 2 {
            return Err(ShapeError::at(
                x_at,
                ShapeErrorKind::Rank {
                    op: self.kind.name(),
                    port: "X",
                    expected: "rank >= 2 (dim 1 is the channel)".into(),
                    found: rank,
                    shape: shape_string(&x.dims),
                },
            ));
        }
        for (i, t) in inputs.iter().enumerate() {
            rules.rank(i, t, rank)?;
        }
        let (params, stats) = match self.kind.grouping() {
            Grouping::Normalized => {
                let s_at = self.kind.port_index("SCALE").unwrap_or(0);
                let stats = rules.normalized(s_at, &inputs[s_at], x, cx)?;
                (inputs[s_at].dims.clone(), stats)
            }
            Grouping::PerChannel => (per_channel(&x.dims), per_channel(&x.dims)),
            Grouping::PerInstance => (per_channel(&x.dims), per_instance(&x.dims)),
        };
        let x_shape = shape_string(&x.dims);
        let (params_what, stats_what) = match self.kind.grouping() {
            Grouping::Normalized => {
                ("the dims of port SCALE".to_string(), format!("X {x_shape} with the dims SCALE normalizes set to 1"))
            }
            Grouping::PerChannel => {
                let w = format!("one value per channel of X {x_shape}");
                (w.clone(), w)
            }
            Grouping::PerInstance => (
                format!("one value per channel of X {x_shape}"),
                format!("one value per sample and channel of X {x_shape}"),
            ),
        };
        for (i, (spec, t)) in self.kind.inputs().iter().zip(inputs).enumerate() {
            match spec.name {
                "X" => {}
                "EPSILON" | "MOMENTUM" => rules.scalar(i, t, rank, cx)?,
                "DY" => rules.exact(i, t, &x.dims, &format!("the dims of X {x_shape}"), cx)?,
                "MEAN" | "INV_VARIANCE" => rules.exact(i, t, &stats, &stats_what, cx)?,
                // SCALE of layer and RMS norm decides `params` (checked above).
                "SCALE" if self.kind.grouping() == Grouping::Normalized => {}
                _ => rules.exact(i, t, &params, &params_what, cx)?,
            }
        }
        let outputs = self
            .outputs()
            .iter()
            .map(|name| {
                let dims = match *name {
                    "Y" | "DX" => x.dims.clone(),
                    "MEAN" | "INV_VARIANCE" => stats.clone(),
                    _ => params.clone(),
                };
                OutputMeta { dims, dtype: None, reason: None }
            })
            .collect();
        Ok(outputs)
    }

    fn reference(&self, inputs: &[&Array]) -> Vec<Array> {
        reference::reference(self, inputs)
    }

    fn fusion(&self) -> FusionRule {
        match self.kind {
            // Per-channel sums of a convolution's output, in its epilogue (cuDNN's conv-genstats
            // pattern).
            NormKind::GenStats => FusionRule::Anchor { prologue: true, epilogue: false, follows: true },
            // cuDNN's batch-norm backward fusion: `batchnorm_backward(relu_bwd(dy,
            // batchnorm_inference(x, ..)), ..)` is one kernel (engine 0 on the H200). Anywhere else
            // `build` has already rewritten a `batchnorm_inference` as elementwise ops.
            NormKind::BatchNormInference => FusionRule::Anchor { prologue: false, epilogue: true, follows: false },
            NormKind::BatchNormBackward => FusionRule::Anchor { prologue: true, epilogue: false, follows: true },
            // cuDNN 9.19's normalization engines take the norm alone: heuristics propose nothing
            // for rmsnorm → matmul, layernorm → relu or batchnorm_inference → relu.
            _ => FusionRule::ALONE,
        }
    }

    fn layout_policy(&self) -> LayoutPolicy<'_> {
        LayoutPolicy { channels_last: ChannelsLast::No, outputs: OutputLayout::LikeInput }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dim::{Concrete, SymDim, Symbolic};
    use crate::ops::Op;

    fn meta(dims: &[i64]) -> TensorMeta<i64> {
        TensorMeta { dims: dims.to_vec(), dtype: DataType::F32 }
    }

    fn op(name: &str, attrs: &[(&str, AttrValue)]) -> Op {
        let attrs: Vec<(String, AttrValue)> = attrs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        Op::from_call(name, &attrs).unwrap()
    }

    fn dims(outs: &[OutputMeta<i64>]) -> Vec<Vec<i64>> {
        outs.iter().map(|o| o.dims.clone()).collect()
    }

    #[test]
    fn layernorm_shapes_by_phase() {
        let training = op("layernorm", &[("phase", "training".into())]);
        let ins = [meta(&[8, 32, 1, 1]), meta(&[1, 32, 1, 1]), meta(&[1, 32, 1, 1]), meta(&[1, 1, 1, 1])];
        let out = training.infer(&ins, &mut Concrete).unwrap();
        assert_eq!(dims(&out), vec![vec![8, 32, 1, 1], vec![8, 1, 1, 1], vec![8, 1, 1, 1]]);
        let inference = op("layernorm", &[]);
        assert_eq!(dims(&inference.infer(&ins, &mut Concrete).unwrap()), vec![vec![8, 32, 1, 1]]);
        // Normalizing over the last dim only.
        let ins = [meta(&[2, 6, 32]), meta(&[1, 1, 32]), meta(&[1, 1, 32]), meta(&[1, 1, 1])];
        assert_eq!(dims(&training.infer(&ins, &mut Concrete).unwrap())[1], vec![2, 6, 1]);
    }

    #[test]
    fn scale_mismatch_names_the_port_and_dim() {
        let ln = op("layernorm", &[]);
        let ins = [meta(&[8, 32]), meta(&[1, 64]), meta(&[1, 64]), meta(&[1, 1])];
        let e = ln.infer(&ins, &mut Concrete).unwrap_err();
        assert_eq!(e.arg, Some(1));
        assert_eq!(
            e.to_string(),
            "`layernorm` port SCALE must be 1 or X's extent in every dim, its dims that are not 1 being those \
             normalized (X is [8, 32]), found [1, 64]: dim 1 is 64, not 1 or 32"
        );
        let ins = [meta(&[8, 32]), meta(&[1, 32]), meta(&[32, 1]), meta(&[1, 1])];
        let e = ln.infer(&ins, &mut Concrete).unwrap_err();
        assert_eq!(e.arg, Some(2));
        assert!(e.to_string().contains("port BIAS must be [1, 32] (the dims of port SCALE), found [32, 1]"), "{e}");
        let bn = op("batchnorm", &[]);
        let c = meta(&[1, 16, 1, 1]);
        let mut ins =
            vec![meta(&[4, 16, 8, 8]), c.clone(), c.clone(), c.clone(), c.clone(), meta(&[1; 4]), meta(&[1; 4])];
        ins[1] = meta(&[1, 8, 1, 1]);
        let e = bn.infer(&ins, &mut Concrete).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`batchnorm` port SCALE must be [1, 16, 1, 1] (one value per channel of X [4, 16, 8, 8]), found [1, 8, 1, 1]"
        );
    }

    #[test]
    fn epsilon_must_be_a_scalar() {
        let ln = op("rmsnorm", &[]);
        let e = ln.infer(&[meta(&[8, 32]), meta(&[1, 32]), meta(&[1, 32])], &mut Concrete).unwrap_err();
        assert_eq!(e.arg, Some(2));
        assert_eq!(
            e.to_string(),
            "`rmsnorm` port EPSILON must be a scalar: a number such as `1e-5`, or a tensor [1, 1] (every dim 1), \
             found [1, 32]"
        );
    }

    #[test]
    fn ranks_and_types() {
        let ln = op("layernorm", &[]);
        let e = ln.infer(&[meta(&[8]), meta(&[8]), meta(&[8]), meta(&[1])], &mut Concrete).unwrap_err();
        assert!(e.to_string().contains("port X needs rank >= 2"), "{e}");
        let e = ln.infer(&[meta(&[8, 4]), meta(&[1, 1, 4]), meta(&[1, 4]), meta(&[1, 1])], &mut Concrete).unwrap_err();
        assert!(e.to_string().contains("port SCALE needs the rank of port X (2)"), "{e}");
        let mut x = meta(&[8, 4]);
        x.dtype = DataType::I32;
        let e = ln.infer(&[x, meta(&[1, 4]), meta(&[1, 4]), meta(&[1, 1])], &mut Concrete).unwrap_err();
        assert!(e.to_string().contains("port X does not take i32"), "{e}");
    }

    #[test]
    fn per_channel_and_per_instance() {
        let x = meta(&[4, 16, 8, 8]);
        let c = meta(&[1, 16, 1, 1]);
        let one = meta(&[1, 1, 1, 1]);
        let bn = op("batchnorm", &[]);
        let out =
            bn.infer(&[x.clone(), c.clone(), c.clone(), c.clone(), c.clone(), one.clone(), one.clone()], &mut Concrete);
        assert_eq!(
            dims(&out.unwrap()),
            vec![vec![4, 16, 8, 8], vec![1, 16, 1, 1], vec![1, 16, 1, 1], vec![1, 16, 1, 1], vec![1, 16, 1, 1]]
        );
        let gs = op("genstats", &[]);
        assert_eq!(dims(&gs.infer(std::slice::from_ref(&x), &mut Concrete).unwrap()), vec![vec![1, 16, 1, 1]; 2]);
        let inst = op("instancenorm", &[("phase", "training".into())]);
        let out = inst.infer(&[x.clone(), c.clone(), c.clone(), one], &mut Concrete).unwrap();
        assert_eq!(dims(&out)[1], vec![4, 16, 1, 1]);
        let din = op("instancenorm_backward", &[]);
        let stats = meta(&[4, 16, 1, 1]);
        let out = din.infer(&[x.clone(), x.clone(), c.clone(), stats.clone(), stats], &mut Concrete).unwrap();
        assert_eq!(dims(&out), vec![vec![4, 16, 8, 8], vec![1, 16, 1, 1], vec![1, 16, 1, 1]]);
        let e = din.infer(&[x.clone(), x.clone(), c.clone(), c.clone(), c], &mut Concrete).unwrap_err();
        assert_eq!(e.arg, Some(3));
        assert!(e.to_string().contains("one value per sample and channel"), "{e}");
    }

    #[test]
    fn rmsnorm_backward_dbias_is_an_output_switch() {
        let x = meta(&[8, 32]);
        let ins = [x.clone(), x, meta(&[1, 32]), meta(&[8, 1])];
        assert_eq!(op("rmsnorm_backward", &[]).infer(&ins, &mut Concrete).unwrap().len(), 2);
        let with = op("rmsnorm_backward", &[("dbias", true.into())]);
        assert_eq!(with.outputs(), ["DX", "DSCALE", "DBIAS"]);
        assert_eq!(dims(&with.infer(&ins, &mut Concrete).unwrap())[2], vec![1, 32]);
    }

    #[test]
    fn symbolic_dims() {
        let p = |s: &str| SymDim::Param(s.into());
        let l = SymDim::Lit;
        let m = |dims: Vec<SymDim>| TensorMeta { dims, dtype: DataType::BF16 };
        let ln = op("layernorm", &[("phase", "training".into())]);
        let mut cx = Symbolic::default();
        let out = ln
            .infer(
                &[m(vec![p("M"), p("N")]), m(vec![l(1), p("N")]), m(vec![l(1), l(64)]), m(vec![l(1), l(1)])],
                &mut cx,
            )
            .unwrap();
        assert_eq!(out[1].dims, vec![p("M"), l(1)]);
        assert_eq!(cx.deferred, vec![(p("N"), l(64))]);
        let e = ln
            .infer(
                &[m(vec![p("M"), p("N")]), m(vec![l(1), p("K")]), m(vec![l(1), p("K")]), m(vec![l(1), l(1)])],
                &mut cx,
            )
            .unwrap_err();
        assert!(e.to_string().contains("dim 1 is K, not 1 or N"), "{e}");
    }

    #[test]
    fn attributes_round_trip() {
        for (name, attrs) in [
            ("layernorm", vec![("phase", AttrValue::from("training"))]),
            ("instancenorm", vec![("phase", "inference".into())]),
            ("rmsnorm_backward", vec![("dbias", true.into())]),
            ("batchnorm", vec![]),
        ] {
            let o = op(name, &attrs);
            assert_eq!(Op::from_call(name, &o.call_attrs()).unwrap(), o);
        }
        assert!(op("instancenorm", &[("phase", "inference".into())]).call_attrs().is_empty());
        let e = Op::from_call("layernorm", &[("phase".into(), "train".into())]).unwrap_err();
        assert_eq!(e.to_string(), "attribute `phase` of `layernorm` must be one of `training`, `inference`");
        let e = Op::from_call("batchnorm", &[("phase".into(), "training".into())]).unwrap_err();
        assert!(e.to_string().contains("it takes no attributes"), "{e}");
    }
}
