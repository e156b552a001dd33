//! Pointwise ops: every cuDNN pointwise mode, one table row each.
//!
//! Shape rule: inputs have equal rank and broadcast NumPy-style (a dim broadcasts only when it is
//! 1); the output has the broadcast shape. A numeric literal in an input position becomes a by-value
//! scalar tensor of all-1 dims. Comparisons and logical ops produce `bool`, `gen_index` produces
//! `i32`; logical ops and `binary_select`'s mask take `bool`; arithmetic does not take `bool`.
//!
//! Backward activations take `(dy, x)` and return `dx = dy · f'(x)`, as cuDNN's `*_BWD` modes.

use std::f64::consts::{FRAC_2_SQRT_PI, SQRT_2};

use serde::{Deserialize, Serialize};

pub(crate) mod codec;
#[cfg(feature = "cudnn")]
pub(crate) mod lower;

use super::signature::{AttrKind, AttrSpec, AttrValue, OpSignature, PortSpec};
use super::attrs::{AttrError, Attrs};
use super::shape::{broadcast, normalize_axis, OutputMeta, ShapeError, ShapeErrorKind, TensorMeta};
use super::family::{ChannelsLast, FusionRule, Inferred, LayoutPolicy, OpFamily, OutputLayout};
use super::Family;
use crate::dim::{shape_string, Dim, DimCx};
use crate::array::Array;
use crate::DataType;

const UNARY: &[PortSpec] = &[PortSpec::tensor("IN_0")];
const BINARY: &[PortSpec] = &[PortSpec::scalar("IN_0"), PortSpec::scalar("IN_1")];
const TERNARY: &[PortSpec] = &[
    PortSpec::scalar("IN_0"),
    PortSpec::scalar("IN_1"),
    PortSpec::tensor("IN_2"),
];
const OUT: &[&str] = &["OUT_0"];

/// A float parameter of the pointwise modes: the one place that says which DSL attribute it is,
/// which `Pointwise` field (named as cudnn-frontend's JSON field) holds it, and its default.
/// A mode takes the parameters of its row's [`Params`] group; the codec, the call attributes and
/// the reference all read them from there.
#[derive(Clone, Copy)]
pub(crate) struct Param {
    /// The DSL attribute (`lower_clip`, `beta`).
    pub(crate) attr: &'static str,
    /// cudnn-frontend's field, also the `Pointwise` field (`relu_lower_clip`, `softplus_beta`).
    pub(crate) field: &'static str,
    /// cuDNN's value when unset.
    default: f64,
    get: fn(&Pointwise) -> Option<f64>,
    set: fn(&mut Pointwise, Option<f64>),
}

impl Param {
    /// The value set on `p`, if any.
    pub(crate) fn get(&self, p: &Pointwise) -> Option<f64> {
        (self.get)(p)
    }

    /// The value `p` computes with: set or default.
    fn value(&self, p: &Pointwise) -> f64 {
        self.get(p).unwrap_or(self.default)
    }
}

/// A [`Param`] held by the `Pointwise` field `$field`, which is also cudnn-frontend's name for it.
macro_rules! param {
    ($attr:literal, $field:ident, $default:expr) => {
        Param {
            attr: $attr,
            field: stringify!($field),
            default: $default,
            get: |p| p.$field,
            set: |p, v| p.$field = v,
        }
    };
}

/// ReLU's lower clip (values at or below it are clipped).
const LOWER_CLIP: Param = param!("lower_clip", relu_lower_clip, 0.0);
/// ReLU's upper clip.
const UPPER_CLIP: Param = param!("upper_clip", relu_upper_clip, f64::INFINITY);
/// ReLU's slope below the lower clip.
const LOWER_CLIP_SLOPE: Param = param!("lower_clip_slope", relu_lower_clip_slope, 0.0);
/// ELU's alpha.
const ELU_ALPHA: Param = param!("alpha", elu_alpha, 1.0);
/// Softplus's `beta`.
const SOFTPLUS_BETA: Param = param!("beta", softplus_beta, 1.0);
/// Swish's `beta`.
const SWISH_BETA: Param = param!("beta", swish_beta, 1.0);

/// Every parameter, in the order cudnn-frontend's JSON lists their fields.
pub(crate) const PARAMS: [Param; 6] = [LOWER_CLIP, UPPER_CLIP, LOWER_CLIP_SLOPE, SWISH_BETA, ELU_ALPHA, SOFTPLUS_BETA];

/// The attributes of a group of modes: its float parameters, and `gen_index`'s axis.
pub(crate) struct Params {
    /// The attributes, as the signature lists them.
    attrs: &'static [AttrSpec],
    /// The float parameters among them.
    pub(crate) floats: &'static [Param],
}

/// The attribute specs of float parameters.
const fn float_attrs<const N: usize>(params: [Param; N]) -> [AttrSpec; N] {
    let mut out = [AttrSpec { name: "", kind: AttrKind::Float, required: false }; N];
    let mut i = 0;
    while i < N {
        out[i].name = params[i].attr;
        i += 1;
    }
    out
}

const RELU_FLOATS: [Param; 3] = [LOWER_CLIP, UPPER_CLIP, LOWER_CLIP_SLOPE];
const RELU: Params = Params { attrs: &float_attrs(RELU_FLOATS), floats: &RELU_FLOATS };
const ELU: Params = Params { attrs: &float_attrs([ELU_ALPHA]), floats: &[ELU_ALPHA] };
const SOFTPLUS: Params = Params { attrs: &float_attrs([SOFTPLUS_BETA]), floats: &[SOFTPLUS_BETA] };
const SWISH: Params = Params { attrs: &float_attrs([SWISH_BETA]), floats: &[SWISH_BETA] };
/// `gen_index`'s attribute.
const INDEX: Params =
    Params { attrs: &[AttrSpec { name: AXIS, kind: AttrKind::Int, required: true }], floats: &[] };
const NONE: Params = Params { attrs: &[], floats: &[] };

/// `gen_index`'s axis attribute (also cudnn-frontend's field).
pub(crate) const AXIS: &str = "axis";

/// What a mode does to types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Numeric in, numeric out.
    Arith,
    /// Numeric in, `bool` out.
    Compare,
    /// `bool` in, `bool` out.
    Logical,
    /// Anything in, `i32` out.
    Index,
    /// `(a, b, mask: bool)` in, numeric out.
    Select,
}

macro_rules! modes {
    ($($variant:ident = $name:literal, $cudnn:literal, $value:literal, $ports:ident, $params:ident, $class:ident;)*) => {
        /// A cuDNN pointwise mode (`cudnnPointwiseMode_t`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum PointwiseMode {
            $(
                #[doc = concat!("`", $name, "` (`CUDNN_POINTWISE_", $cudnn, "`)")]
                #[serde(rename = $cudnn)]
                $variant,
            )*
        }

        impl PointwiseMode {
            /// Every mode.
            pub const ALL: &'static [PointwiseMode] = &[$(PointwiseMode::$variant),*];

            /// The DSL call name.
            pub const fn name(self) -> &'static str {
                match self { $(PointwiseMode::$variant => $name),* }
            }

            /// cuDNN's spelling, without the `CUDNN_POINTWISE_` prefix (also cudnn-frontend's JSON).
            pub const fn cudnn_name(self) -> &'static str {
                match self { $(PointwiseMode::$variant => $cudnn),* }
            }

            /// The value of `cudnnPointwiseMode_t`.
            pub const fn cudnn_value(self) -> u32 {
                match self { $(PointwiseMode::$variant => $value),* }
            }

            const fn ports(self) -> &'static [PortSpec] {
                match self { $(PointwiseMode::$variant => $ports),* }
            }

            /// The attributes this mode takes.
            pub(crate) const fn params(self) -> &'static Params {
                match self { $(PointwiseMode::$variant => &$params),* }
            }

            const fn class(self) -> Class {
                match self { $(PointwiseMode::$variant => Class::$class),* }
            }
        }
    };
}

modes! {
    Add = "add", "ADD", 0, BINARY, NONE, Arith;
    AddSquare = "add_square", "ADD_SQUARE", 5, BINARY, NONE, Arith;
    Div = "div", "DIV", 6, BINARY, NONE, Arith;
    Max = "max", "MAX", 3, BINARY, NONE, Arith;
    Min = "min", "MIN", 2, BINARY, NONE, Arith;
    Mod = "mod", "MOD", 7, BINARY, NONE, Arith;
    Mul = "mul", "MUL", 1, BINARY, NONE, Arith;
    Pow = "pow", "POW", 8, BINARY, NONE, Arith;
    Sub = "sub", "SUB", 9, BINARY, NONE, Arith;
    Abs = "abs", "ABS", 10, UNARY, NONE, Arith;
    Ceil = "ceil", "CEIL", 11, UNARY, NONE, Arith;
    Cos = "cos", "COS", 12, UNARY, NONE, Arith;
    Exp = "exp", "EXP", 13, UNARY, NONE, Arith;
    Floor = "floor", "FLOOR", 14, UNARY, NONE, Arith;
    Log = "log", "LOG", 15, UNARY, NONE, Arith;
    Neg = "neg", "NEG", 16, UNARY, NONE, Arith;
    Rsqrt = "rsqrt", "RSQRT", 17, UNARY, NONE, Arith;
    Sin = "sin", "SIN", 18, UNARY, NONE, Arith;
    Sqrt = "sqrt", "SQRT", 4, UNARY, NONE, Arith;
    Tan = "tan", "TAN", 19, UNARY, NONE, Arith;
    Erf = "erf", "ERF", 20, UNARY, NONE, Arith;
    Identity = "identity", "IDENTITY", 21, UNARY, NONE, Arith;
    Reciprocal = "reciprocal", "RECIPROCAL", 22, UNARY, NONE, Arith;
    Atan2 = "atan2", "ATAN2", 23, BINARY, NONE, Arith;
    Relu = "relu", "RELU_FWD", 100, UNARY, RELU, Arith;
    Tanh = "tanh", "TANH_FWD", 101, UNARY, NONE, Arith;
    Sigmoid = "sigmoid", "SIGMOID_FWD", 102, UNARY, NONE, Arith;
    Elu = "elu", "ELU_FWD", 103, UNARY, ELU, Arith;
    Gelu = "gelu", "GELU_FWD", 104, UNARY, NONE, Arith;
    Softplus = "softplus", "SOFTPLUS_FWD", 105, UNARY, SOFTPLUS, Arith;
    Swish = "swish", "SWISH_FWD", 106, UNARY, SWISH, Arith;
    GeluTanh = "gelu_tanh", "GELU_APPROX_TANH_FWD", 107, UNARY, NONE, Arith;
    ReluBwd = "relu_bwd", "RELU_BWD", 200, BINARY, RELU, Arith;
    TanhBwd = "tanh_bwd", "TANH_BWD", 201, BINARY, NONE, Arith;
    SigmoidBwd = "sigmoid_bwd", "SIGMOID_BWD", 202, BINARY, NONE, Arith;
    EluBwd = "elu_bwd", "ELU_BWD", 203, BINARY, ELU, Arith;
    GeluBwd = "gelu_bwd", "GELU_BWD", 204, BINARY, NONE, Arith;
    SoftplusBwd = "softplus_bwd", "SOFTPLUS_BWD", 205, BINARY, SOFTPLUS, Arith;
    SwishBwd = "swish_bwd", "SWISH_BWD", 206, BINARY, SWISH, Arith;
    GeluTanhBwd = "gelu_tanh_bwd", "GELU_APPROX_TANH_BWD", 207, BINARY, NONE, Arith;
    CmpEq = "cmp_eq", "CMP_EQ", 300, BINARY, NONE, Compare;
    CmpNeq = "cmp_neq", "CMP_NEQ", 301, BINARY, NONE, Compare;
    CmpGt = "cmp_gt", "CMP_GT", 302, BINARY, NONE, Compare;
    CmpGe = "cmp_ge", "CMP_GE", 303, BINARY, NONE, Compare;
    CmpLt = "cmp_lt", "CMP_LT", 304, BINARY, NONE, Compare;
    CmpLe = "cmp_le", "CMP_LE", 305, BINARY, NONE, Compare;
    LogicalAnd = "logical_and", "LOGICAL_AND", 400, BINARY, NONE, Logical;
    LogicalOr = "logical_or", "LOGICAL_OR", 401, BINARY, NONE, Logical;
    LogicalNot = "logical_not", "LOGICAL_NOT", 402, UNARY, NONE, Logical;
    GenIndex = "gen_index", "GEN_INDEX", 501, UNARY, INDEX, Index;
    BinarySelect = "binary_select", "BINARY_SELECT", 601, TERNARY, NONE, Select;
}

impl PointwiseMode {
    /// A comparison (`cmp_eq` .. `cmp_ge`): numbers in, `bool` out.
    pub fn is_comparison(self) -> bool {
        self.class() == Class::Compare
    }

    /// Looks up a mode by its DSL call name.
    pub fn from_name(name: &str) -> Option<PointwiseMode> {
        PointwiseMode::ALL.iter().copied().find(|m| m.name() == name)
    }

    /// Looks up a mode by cuDNN's spelling (`RELU_FWD`).
    pub fn from_cudnn_name(name: &str) -> Option<PointwiseMode> {
        PointwiseMode::ALL.iter().copied().find(|m| m.cudnn_name() == name)
    }

    /// The call signature of this mode.
    pub fn signature(self) -> OpSignature {
        OpSignature {
            name: self.name(),
            family: Family::Pointwise(self),
            inputs: self.ports(),
            outputs: OUT,
            attrs: self.params().attrs,
        }
    }

    /// Number of inputs.
    pub fn arity(self) -> usize {
        self.ports().len()
    }
}

/// A pointwise op: a mode and its parameters (unset parameters take cuDNN's defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pointwise {
    /// The mode.
    pub mode: PointwiseMode,
    /// ReLU: values at or below this are clipped (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relu_lower_clip: Option<f64>,
    /// ReLU: values above this are clipped (default +∞).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relu_upper_clip: Option<f64>,
    /// ReLU: slope below the lower clip (default 0; leaky ReLU when > 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relu_lower_clip_slope: Option<f64>,
    /// ELU's alpha (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elu_alpha: Option<f64>,
    /// Softplus's beta (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub softplus_beta: Option<f64>,
    /// Swish's beta (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swish_beta: Option<f64>,
    /// `gen_index`'s axis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub axis: Option<i64>,
}

impl Pointwise {
    /// A pointwise op of `mode` with default parameters.
    pub fn new(mode: PointwiseMode) -> Self {
        Pointwise {
            mode,
            relu_lower_clip: None,
            relu_upper_clip: None,
            relu_lower_clip_slope: None,
            elu_alpha: None,
            softplus_beta: None,
            swish_beta: None,
            axis: None,
        }
    }

    /// The elementwise function, in f64.
    // Long because it is the table of formulas, one match arm per mode, which reads best as one
    // table beside the parameters it reads.
    pub fn apply(&self, x: &[f64]) -> f64 {
        use PointwiseMode as M;
        let a = x[0];
        let b = || x[1];
        let t = |v: bool| f64::from(u8::from(v));
        let sigmoid = |v: f64| 1.0 / (1.0 + (-v).exp());
        let lower = LOWER_CLIP.value(self);
        let upper = UPPER_CLIP.value(self);
        let slope = LOWER_CLIP_SLOPE.value(self);
        let alpha = ELU_ALPHA.value(self);
        let sp_beta = SOFTPLUS_BETA.value(self);
        let sw_beta = SWISH_BETA.value(self);
        match self.mode {
            M::Add => a + b(),
            M::AddSquare => a + b() * b(),
            M::Div => a / b(),
            M::Max => a.max(b()),
            M::Min => a.min(b()),
            M::Mod => a % b(),
            M::Mul => a * b(),
            M::Pow => a.powf(b()),
            M::Sub => a - b(),
            M::Abs => a.abs(),
            M::Ceil => a.ceil(),
            M::Cos => a.cos(),
            M::Exp => a.exp(),
            M::Floor => a.floor(),
            M::Log => a.ln(),
            M::Neg => -a,
            M::Rsqrt => 1.0 / a.sqrt(),
            M::Sin => a.sin(),
            M::Sqrt => a.sqrt(),
            M::Tan => a.tan(),
            M::Erf => libm::erf(a),
            M::Identity => a,
            M::Reciprocal => 1.0 / a,
            M::Atan2 => a.atan2(b()),
            M::Relu => relu(a, lower, upper, slope),
            M::Tanh => a.tanh(),
            M::Sigmoid => sigmoid(a),
            M::Elu => elu(a, alpha),
            M::Gelu => gelu(a),
            M::Softplus => (sp_beta * a).exp().ln_1p() / sp_beta,
            M::Swish => a * sigmoid(sw_beta * a),
            M::GeluTanh => gelu_tanh(a).0,
            // Backward modes: x[0] = dy, x[1] = x.
            M::ReluBwd => {
                let x = b();
                a * if x <= lower {
                    slope
                } else if x > upper {
                    0.0
                } else {
                    1.0
                }
            }
            M::TanhBwd => a * (1.0 - b().tanh().powi(2)),
            M::SigmoidBwd => {
                let s = sigmoid(b());
                a * s * (1.0 - s)
            }
            M::EluBwd => a * if b() > 0.0 { 1.0 } else { alpha * b().exp() },
            M::GeluBwd => {
                let x = b();
                a * (0.5 * (1.0 + libm::erf(x / SQRT_2)) + x * 0.5 * FRAC_2_SQRT_PI / SQRT_2 * (-0.5 * x * x).exp())
            }
            M::SoftplusBwd => a * sigmoid(sp_beta * b()),
            M::SwishBwd => {
                let x = b();
                let s = sigmoid(sw_beta * x);
                a * (s + sw_beta * x * s * (1.0 - s))
            }
            M::GeluTanhBwd => a * gelu_tanh(b()).1,
            M::CmpEq => t(a == b()),
            M::CmpNeq => t(a != b()),
            M::CmpGt => t(a > b()),
            M::CmpGe => t(a >= b()),
            M::CmpLt => t(a < b()),
            M::CmpLe => t(a <= b()),
            M::LogicalAnd => t(a != 0.0 && b() != 0.0),
            M::LogicalOr => t(a != 0.0 || b() != 0.0),
            M::LogicalNot => t(a == 0.0),
            // Needs the element's index: handled in `reference`.
            M::GenIndex => f64::NAN,
            M::BinarySelect => {
                if x[2] != 0.0 {
                    a
                } else {
                    b()
                }
            }
        }
    }
}

fn relu(x: f64, lower: f64, upper: f64, slope: f64) -> f64 {
    if x <= lower {
        lower + slope * (x - lower)
    } else {
        x.min(upper)
    }
}

fn elu(x: f64, alpha: f64) -> f64 {
    if x > 0.0 {
        x
    } else {
        alpha * x.exp_m1()
    }
}

fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x / SQRT_2))
}

/// GELU's tanh approximation and its derivative.
fn gelu_tanh(x: f64) -> (f64, f64) {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let u = c * (x + 0.044715 * x * x * x);
    let th = u.tanh();
    let du = c * (1.0 + 3.0 * 0.044715 * x * x);
    (0.5 * x * (1.0 + th), 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du)
}

impl OpFamily for Pointwise {
    type Kind = PointwiseMode;

    const KINDS: &'static [PointwiseMode] = PointwiseMode::ALL;

    const TAGS: &'static [&'static str] = &[codec::TAG];

    fn signature_of(kind: PointwiseMode) -> OpSignature {
        kind.signature()
    }

    fn kind(&self) -> PointwiseMode {
        self.mode
    }

    fn from_attrs(mode: PointwiseMode, a: &Attrs<'_>, _inputs: usize) -> Result<Self, AttrError> {
        let mut p = Pointwise::new(mode);
        for param in mode.params().floats {
            (param.set)(&mut p, a.float(param.attr));
        }
        p.axis = a.int(AXIS);
        Ok(p)
    }

    /// The parameters of its mode that are set, then the axis.
    fn call_attrs(&self) -> Vec<(String, AttrValue)> {
        let floats = self.mode.params().floats.iter();
        let mut out: Vec<(String, AttrValue)> =
            floats.filter_map(|f| f.get(self).map(|v| (f.attr.to_string(), AttrValue::Float(v)))).collect();
        if let Some(axis) = self.axis {
            out.push((AXIS.into(), AttrValue::Int(axis)));
        }
        out
    }

    fn infer<D: Dim>(&self, inputs: &[TensorMeta<D>], cx: &mut impl DimCx<D>) -> Inferred<D> {
        let op = self.mode.name();
        let class = self.mode.class();
        for (i, t) in inputs.iter().enumerate() {
            let port = self.mode.ports()[i].name;
            let wants_bool = class == Class::Logical || (class == Class::Select && i == 2);
            let bad = match class {
                Class::Index => false,
                _ if wants_bool => t.dtype != DataType::Bool,
                _ => t.dtype == DataType::Bool,
            };
            if bad {
                let expected = if wants_bool { "bool" } else { "a numeric type (not bool)" };
                return Err(ShapeError::at(i, ShapeErrorKind::DType { op, port, found: t.dtype, expected }));
            }
        }
        let rank = inputs[0].dims.len();
        let mut dims = inputs[0].dims.clone();
        for (i, t) in inputs.iter().enumerate().skip(1) {
            if t.dims.len() != rank {
                // Broadcasting aligns equal ranks only: say the shape that broadcasts (leading 1s).
                let expected = if t.dims.len() < rank {
                    let mut padded = vec![D::lit(1); rank - t.dims.len()];
                    padded.extend(t.dims.iter().cloned());
                    format!(
                        "rank {rank} (the rank of port IN_0; declare it {} to broadcast along the leading dims)",
                        shape_string(&padded)
                    )
                } else {
                    format!("the rank of port IN_0 ({rank})")
                };
                return Err(ShapeError::at(
                    i,
                    ShapeErrorKind::Rank {
                        op,
                        port: self.mode.ports()[i].name,
                        expected,
                        found: t.dims.len(),
                        shape: shape_string(&t.dims),
                    },
                ));
            }
            dims = broadcast(op, &dims, &t.dims, i, cx)?;
        }
        if let (Class::Index, Some(axis)) = (class, self.axis) {
            normalize_axis(op, axis, rank).map_err(ShapeError::general)?;
        }
        let dtype = match class {
            Class::Compare | Class::Logical => Some(DataType::Bool),
            Class::Index => Some(DataType::I32),
            Class::Arith | Class::Select => None,
        };
        Ok(vec![OutputMeta { dims, dtype, reason: None }])
    }

    /// The op over broadcast inputs.
    fn reference(&self, inputs: &[&Array]) -> Vec<Array> {
        let mut dims = inputs[0].dims.clone();
        for t in &inputs[1..] {
            for (d, e) in dims.iter_mut().zip(&t.dims) {
                *d = (*d).max(*e);
            }
        }
        if self.mode == PointwiseMode::GenIndex {
            let axis = normalize_axis("gen_index", self.axis.unwrap_or(0), dims.len()).unwrap_or(0);
            return vec![Array::from_fn(&dims, |flat| Array::unravel(flat as i64, &dims)[axis] as f64)];
        }
        let strides: Vec<Vec<i64>> = inputs.iter().map(|t| t.broadcast_strides(&dims)).collect();
        let mut args = vec![0.0; inputs.len()];
        vec![Array::from_fn(&dims, |flat| {
            let idx = Array::unravel(flat as i64, &dims);
            for (k, t) in inputs.iter().enumerate() {
                let off: i64 = idx.iter().zip(&strides[k]).map(|(i, s)| i * s).sum();
                args[k] = t.data[off as usize];
            }
            self.apply(&args)
        })]
    }

    fn fusion(&self) -> FusionRule {
        FusionRule::Elementwise
    }

    fn layout_policy(&self) -> LayoutPolicy<'_> {
        LayoutPolicy { channels_last: ChannelsLast::Follow, outputs: OutputLayout::LikeInput }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dim::Concrete;

    fn pw(mode: PointwiseMode) -> Pointwise {
        Pointwise::new(mode)
    }

    /// Central-difference check of every backward mode against its forward mode.
    #[test]
    fn backward_modes_are_derivatives() {
        use PointwiseMode as M;
        let pairs = [
            (M::Relu, M::ReluBwd),
            (M::Tanh, M::TanhBwd),
            (M::Sigmoid, M::SigmoidBwd),
            (M::Elu, M::EluBwd),
            (M::Gelu, M::GeluBwd),
            (M::Softplus, M::SoftplusBwd),
            (M::Swish, M::SwishBwd),
            (M::GeluTanh, M::GeluTanhBwd),
        ];
        for (fwd, bwd) in pairs {
            for &x in &[-2.3, -0.7, 0.4, 1.9] {
                let h = 1e-6;
                let num = (pw(fwd).apply(&[x + h]) - pw(fwd).apply(&[x - h])) / (2.0 * h);
                let dy = 0.75;
                let got = pw(bwd).apply(&[dy, x]);
                assert!((got - dy * num).abs() < 1e-6, "{fwd:?} at {x}: {got} vs {}", dy * num);
            }
        }
    }

    #[test]
    fn known_values() {
        use PointwiseMode as M;
        assert_eq!(pw(M::Relu).apply(&[-1.5]), 0.0);
        assert_eq!(pw(M::Relu).apply(&[2.5]), 2.5);
        let mut clipped = pw(M::Relu);
        clipped.relu_upper_clip = Some(6.0);
        assert_eq!(clipped.apply(&[7.0]), 6.0);
        let mut leaky = pw(M::Relu);
        leaky.relu_lower_clip_slope = Some(0.1);
        assert!((leaky.apply(&[-2.0]) + 0.2).abs() < 1e-15);
        assert!((pw(M::Gelu).apply(&[1.0]) - 0.841_344_746_068_542_9).abs() < 1e-15);
        assert!((pw(M::GeluTanh).apply(&[1.0]) - 0.841_191_990_608_37).abs() < 1e-12);
        assert_eq!(pw(M::Mod).apply(&[-7.0, 3.0]), -1.0);
        assert_eq!(pw(M::BinarySelect).apply(&[1.0, 2.0, 0.0]), 2.0);
        assert_eq!(pw(M::CmpGe).apply(&[2.0, 2.0]), 1.0);
    }

    #[test]
    fn shape_and_dtype_rules() {
        let m = |dims: Vec<i64>, dtype| TensorMeta { dims, dtype };
        let add = pw(PointwiseMode::Add);
        let out =
            add.infer(&[m(vec![4, 1, 8], DataType::F32), m(vec![1, 3, 8], DataType::F16)], &mut Concrete).unwrap();
        assert_eq!(out[0].dims, vec![4, 3, 8]);
        let e =
            add.infer(&[m(vec![4, 2, 8], DataType::F32), m(vec![1, 3, 8], DataType::F16)], &mut Concrete).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`add` cannot broadcast [4, 2, 8] with [1, 3, 8]: dim 1 is 2 vs 3 (each must be equal or 1)"
        );
        let e = add.infer(&[m(vec![4, 8], DataType::F32), m(vec![1, 3, 8], DataType::F16)], &mut Concrete).unwrap_err();
        assert_eq!(e.arg, Some(1));
        let e = add.infer(&[m(vec![4], DataType::Bool), m(vec![4], DataType::F16)], &mut Concrete).unwrap_err();
        assert!(e.to_string().contains("does not take bool"), "{e}");
        let out = pw(PointwiseMode::CmpLt)
            .infer(&[m(vec![4], DataType::F32), m(vec![4], DataType::F32)], &mut Concrete)
            .unwrap();
        assert_eq!(out[0].dtype, Some(DataType::Bool));
        let e = pw(PointwiseMode::LogicalAnd)
            .infer(&[m(vec![4], DataType::F32), m(vec![4], DataType::Bool)], &mut Concrete)
            .unwrap_err();
        assert_eq!(e.arg, Some(0));
    }

    #[test]
    fn reference_broadcasts() {
        let x = Array::from_fn(&[2, 3], |i| i as f64 - 2.5);
        let bias = Array::from_fn(&[1, 3], |i| 10.0 * (i as f64 + 1.0));
        let y = pw(PointwiseMode::Add).reference(&[&x, &bias]).remove(0);
        assert_eq!(y.data, vec![7.5, 18.5, 29.5, 10.5, 21.5, 32.5]);
        let mut gi = pw(PointwiseMode::GenIndex);
        gi.axis = Some(1);
        assert_eq!(gi.reference(&[&x])[0].data, vec![0.0, 1.0, 2.0, 0.0, 1.0, 2.0]);
    }
}
