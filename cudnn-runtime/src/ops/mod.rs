//! The op vocabulary: each op family is defined **once**, in its own module, with its ports,
//! attributes, shape rule (generic over [`Dim`], so the `graph!` macro runs it over symbolic dims at
//! expansion and the runtime over concrete dims), CPU reference, and cuDNN lowering.
//!
//! The macro, the builder API and the structural JSON all create ops the same way: by name and
//! attribute list through [`Op::from_call`], so a call written in `graph!` and the same call made at
//! run time produce the same [`Op`].

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::dim::{shape_string, Dim, DimCx};
use crate::DataType;

pub mod conv;
pub mod layout;
pub mod matmul;
pub mod norm;
pub mod pointwise;
pub mod reduction;
pub mod resample;
pub mod sdpa;

pub use conv::{Conv, ConvKind, ConvMode};
pub use layout::{Layout, LayoutKind};
pub use matmul::Matmul;
pub use norm::{Norm, NormKind, NormMode, NormPhase};
pub use pointwise::{Pointwise, PointwiseMode};
pub use reduction::{Reduction, ReductionMode};
pub use resample::{Resample, ResampleMode};
pub use sdpa::{Alignment, Implementation, Sdpa, SdpaPass};

/// One operation of a graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "tag")]
pub enum Op {
    /// Batched matrix product `C = A · B`.
    #[serde(rename = "MATMUL")]
    Matmul(Matmul),
    /// Elementwise map with NumPy broadcasting.
    #[serde(rename = "POINTWISE")]
    Pointwise(Pointwise),
    /// Reduction over chosen dims (reduced dims become 1).
    #[serde(rename = "REDUCTION")]
    Reduction(Reduction),
    /// A normalization (layer, RMS, batch, instance norm, their backward ops, genstats).
    #[serde(rename = "NORM")]
    Norm(Norm),
    /// Scaled dot-product attention, forward or backward.
    #[serde(rename = "SDPA")]
    Sdpa(Sdpa),
    /// A convolution: forward, data gradient or filter gradient.
    #[serde(rename = "CONV")]
    Conv(Conv),
    /// Pooling (max or average), optionally with the maximum's index.
    #[serde(rename = "RESAMPLE")]
    Resample(Resample),
    /// A layout op: a view (reshape, transpose, slice) or a concatenation.
    #[serde(rename = "LAYOUT")]
    Layout(Layout),
}

/// How a port is fed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortSpec {
    /// The port's name, as in cudnn-frontend's JSON (`A`, `IN_0`, `X`, ...).
    pub name: &'static str,
    /// Whether a numeric literal may feed it (becoming a by-value scalar tensor).
    pub scalar_ok: bool,
}

/// The type of an attribute's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrKind {
    /// A float (integer literals are accepted too).
    Float,
    /// An integer.
    Int,
    /// A list of integers, `[0, 2]`.
    IntList,
    /// `true` or `false`.
    Bool,
    /// One of these names, written bare: `mode = cross_correlation`.
    OneOf(&'static [&'static str]),
}

impl fmt::Display for AttrKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AttrKind::Float => "a float",
            AttrKind::Int => "an integer",
            AttrKind::IntList => "a list of integers",
            AttrKind::Bool => "`true` or `false`",
            AttrKind::OneOf(names) => {
                let list: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
                return write!(f, "one of {}", list.join(", "));
            }
        })
    }
}

/// An attribute an op accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttrSpec {
    /// Its name in the DSL and the builder API (`lower_clip`, `dims`, ...).
    pub name: &'static str,
    /// Its value type.
    pub kind: AttrKind,
    /// Whether a call must give it.
    pub required: bool,
}

/// An attribute value as written in a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AttrValue {
    /// `0.5`
    Float(f64),
    /// `3`
    Int(i64),
    /// `[0, 2]`
    IntList(Vec<i64>),
    /// `true`
    Bool(bool),
    /// `cross_correlation`
    Name(String),
}

impl From<f64> for AttrValue {
    fn from(v: f64) -> Self {
        AttrValue::Float(v)
    }
}
impl From<i64> for AttrValue {
    fn from(v: i64) -> Self {
        AttrValue::Int(v)
    }
}
impl From<bool> for AttrValue {
    fn from(v: bool) -> Self {
        AttrValue::Bool(v)
    }
}
impl From<&str> for AttrValue {
    fn from(v: &str) -> Self {
        AttrValue::Name(v.to_string())
    }
}
impl From<Vec<i64>> for AttrValue {
    fn from(v: Vec<i64>) -> Self {
        AttrValue::IntList(v)
    }
}
impl<const N: usize> From<[i64; N]> for AttrValue {
    fn from(v: [i64; N]) -> Self {
        AttrValue::IntList(v.to_vec())
    }
}

/// The family an op name belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// [`Matmul`]
    Matmul,
    /// [`Pointwise`] with this mode.
    Pointwise(PointwiseMode),
    /// [`Reduction`] with this mode.
    Reduction(ReductionMode),
    /// [`Norm`] of this kind.
    Norm(NormKind),
    /// [`Sdpa`], this pass.
    Sdpa(SdpaPass),
    /// [`Conv`] of this kind.
    Conv(ConvKind),
    /// [`Resample`].
    Resample,
    /// [`Layout`] of this kind.
    Layout(LayoutKind),
}

/// The signature of an op callable by name: what the macro checks arity and attributes against.
#[derive(Debug, Clone, Copy)]
pub struct OpSignature {
    /// The call name (`matmul`, `add`, `reduce_sum`, ...).
    pub name: &'static str,
    /// Its family.
    pub family: Family,
    /// Positional inputs, in order.
    pub inputs: &'static [PortSpec],
    /// Outputs, in order.
    pub outputs: &'static [&'static str],
    /// Accepted attributes.
    pub attrs: &'static [AttrSpec],
}

impl OpSignature {
    /// Positional input `i` of a call: the signature's port, or for a concatenation (which takes
    /// any number) its `i`-th.
    pub fn input(&self, i: usize) -> Option<PortSpec> {
        match self.family {
            Family::Layout(LayoutKind::Concatenate) => layout::CONCAT_PORTS.get(i).copied(),
            _ => self.inputs.get(i).copied(),
        }
    }
}

/// Looks up an op by its call name.
pub fn lookup(name: &str) -> Option<OpSignature> {
    if name == matmul::NAME {
        return Some(matmul::signature());
    }
    if let Some(mode) = PointwiseMode::from_name(name) {
        return Some(mode.signature());
    }
    if let Some(kind) = NormKind::from_name(name) {
        return Some(kind.signature());
    }
    if let Some(pass) = SdpaPass::from_name(name) {
        return Some(pass.signature());
    }
    if let Some(kind) = ConvKind::from_name(name) {
        return Some(kind.signature());
    }
    if name == resample::NAME {
        return Some(resample::signature());
    }
    if let Some(kind) = LayoutKind::from_name(name) {
        return Some(kind.signature());
    }
    ReductionMode::from_name(name).map(ReductionMode::signature)
}

/// Every call name, for suggestions and documentation.
pub fn all_names() -> impl Iterator<Item = &'static str> {
    std::iter::once(matmul::NAME)
        .chain(PointwiseMode::ALL.iter().map(|m| m.name()))
        .chain(ReductionMode::ALL.iter().map(|m| m.name()))
        .chain(NormKind::ALL.iter().map(|k| k.name()))
        .chain(SdpaPass::ALL.iter().map(|p| p.name()))
        .chain(ConvKind::ALL.iter().map(|k| k.name()))
        .chain(std::iter::once(resample::NAME))
        .chain(LayoutKind::ALL.iter().map(|k| k.name()))
}

/// The closest known op name to a misspelled one, if any is close.
pub fn suggest(name: &str) -> Option<&'static str> {
    closest(name, all_names())
}

/// The candidate nearest to `name` by edit distance, if it is within a third of its length.
pub fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.len() / 3).max(1);
    candidates.map(|c| (edit_distance(name, c), c)).filter(|(d, _)| *d <= limit).min_by_key(|(d, _)| *d).map(|(_, c)| c)
}

/// Optimal-string-alignment distance: insertions, deletions, substitutions and adjacent
/// transpositions (`rleu` is one step from `relu`).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// A wrong attribute in a call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AttrError {
    /// The op has no attribute of that name.
    #[error("`{op}` has no attribute `{attr}`{}", hint(.suggestion, .accepted))]
    Unknown {
        /// The op.
        op: String,
        /// The attribute given.
        attr: String,
        /// The closest accepted attribute, if any is close.
        suggestion: Option<&'static str>,
        /// Every accepted attribute.
        accepted: Vec<&'static str>,
    },
    /// The value has the wrong type.
    #[error("attribute `{attr}` of `{op}` must be {expected}")]
    Type {
        /// The op.
        op: String,
        /// The attribute.
        attr: String,
        /// What it takes.
        expected: AttrKind,
    },
    /// A required attribute was not given.
    #[error("`{op}` needs the attribute `{attr}` ({kind})")]
    Missing {
        /// The op.
        op: String,
        /// The attribute.
        attr: &'static str,
        /// What it takes.
        kind: AttrKind,
    },
    /// Given twice.
    #[error("attribute `{attr}` of `{op}` is given twice")]
    Duplicate {
        /// The op.
        op: String,
        /// The attribute.
        attr: String,
    },
    /// Attributes that are each well typed but do not go together.
    #[error("attribute `{attr}` of `{op}` {reason}")]
    Invalid {
        /// The op.
        op: String,
        /// The attribute at fault.
        attr: String,
        /// Why, in words that name the other attribute.
        reason: String,
    },
    /// A call with a number of inputs the op cannot take (a concatenation of none).
    #[error("`{op}` {reason}")]
    Inputs {
        /// The op.
        op: String,
        /// What it takes and what was given.
        reason: String,
    },
    /// No op of this name.
    #[error("unknown op `{op}`{}", .suggestion.map(|s| format!("; did you mean `{s}`?")).unwrap_or_default())]
    UnknownOp {
        /// The name given.
        op: String,
        /// The closest known op.
        suggestion: Option<&'static str>,
    },
}

fn hint(suggestion: &Option<&'static str>, accepted: &[&'static str]) -> String {
    match (suggestion, accepted.is_empty()) {
        (Some(s), _) => format!("; did you mean `{s}`?"),
        (None, true) => "; it takes no attributes".to_string(),
        (None, false) => {
            format!("; it takes {}", accepted.iter().map(|a| format!("`{a}`")).collect::<Vec<_>>().join(", "))
        }
    }
}

/// Checked attributes of one call, read by the family constructors.
pub(crate) struct Attrs<'a> {
    op: &'static str,
    given: &'a [(String, AttrValue)],
}

impl<'a> Attrs<'a> {
    /// Checks names, duplicates, value types and required attributes against `sig`.
    pub(crate) fn check(sig: &OpSignature, given: &'a [(String, AttrValue)]) -> Result<Self, AttrError> {
        for (i, (name, value)) in given.iter().enumerate() {
            let Some(spec) = sig.attrs.iter().find(|a| a.name == name) else {
                return Err(AttrError::Unknown {
                    op: sig.name.to_string(),
                    attr: name.clone(),
                    suggestion: closest(name, sig.attrs.iter().map(|a| a.name)),
                    accepted: sig.attrs.iter().map(|a| a.name).collect(),
                });
            };
            if given[..i].iter().any(|(n, _)| n == name) {
                return Err(AttrError::Duplicate { op: sig.name.to_string(), attr: name.clone() });
            }
            let ok = match (spec.kind, value) {
                (AttrKind::Float, AttrValue::Float(_) | AttrValue::Int(_))
                | (AttrKind::Int, AttrValue::Int(_))
                | (AttrKind::IntList, AttrValue::IntList(_))
                | (AttrKind::Bool, AttrValue::Bool(_)) => true,
                (AttrKind::OneOf(names), AttrValue::Name(n)) => names.contains(&n.as_str()),
                _ => false,
            };
            if !ok {
                return Err(AttrError::Type { op: sig.name.to_string(), attr: name.clone(), expected: spec.kind });
            }
        }
        for spec in sig.attrs.iter().filter(|a| a.required) {
            if !given.iter().any(|(n, _)| n == spec.name) {
                return Err(AttrError::Missing { op: sig.name.to_string(), attr: spec.name, kind: spec.kind });
            }
        }
        Ok(Attrs { op: sig.name, given })
    }

    fn get(&self, name: &str) -> Option<&AttrValue> {
        debug_assert!(!self.op.is_empty());
        self.given.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub(crate) fn float(&self, name: &str) -> Option<f64> {
        match self.get(name)? {
            AttrValue::Float(v) => Some(*v),
            AttrValue::Int(v) => Some(*v as f64),
            _ => None,
        }
    }

    pub(crate) fn bool(&self, name: &str) -> Option<bool> {
        match self.get(name)? {
            AttrValue::Bool(v) => Some(*v),
            _ => None,
        }
    }

    pub(crate) fn name(&self, name: &str) -> Option<&str> {
        match self.get(name)? {
            AttrValue::Name(v) => Some(v),
            _ => None,
        }
    }

    pub(crate) fn int(&self, name: &str) -> Option<i64> {
        match self.get(name)? {
            AttrValue::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub(crate) fn int_list(&self, name: &str) -> Option<Vec<i64>> {
        match self.get(name)? {
            AttrValue::IntList(v) => Some(v.clone()),
            _ => None,
        }
    }
}

/// A tensor as a shape rule sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorMeta<D> {
    /// Its dims.
    pub dims: Vec<D>,
    /// Its element type.
    pub dtype: DataType,
}

/// What a shape rule infers for one output.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputMeta<D> {
    /// The output's dims.
    pub dims: Vec<D>,
    /// The element type the op forces on it (comparisons produce `bool`), if any; otherwise the
    /// graph decides (intermediate type for virtual tensors, the declared type for outputs).
    pub dtype: Option<DataType>,
}

/// Why a shape rule rejected its inputs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{kind}")]
pub struct ShapeError {
    /// The positional argument at fault, if one is (for spans in the macro).
    pub arg: Option<usize>,
    /// What is wrong (boxed: errors stay small on the happy path's `Result`s).
    pub kind: Box<ShapeErrorKind>,
}

/// The kinds of [`ShapeError`]. Shapes are rendered (`[1, M, K]`) so the same error serves
/// symbolic and concrete dims.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ShapeErrorKind {
    /// Wrong number of inputs.
    #[error("`{op}` takes {expected} input{}, found {found}", if *.expected == 1 { "" } else { "s" })]
    Arity {
        /// The op.
        op: &'static str,
        /// Inputs it takes.
        expected: usize,
        /// Inputs given.
        found: usize,
    },
    /// A tensor of the wrong rank.
    #[error("`{op}` port {port} needs {expected}, found rank {found} ({shape})")]
    Rank {
        /// The op.
        op: &'static str,
        /// The port.
        port: &'static str,
        /// What it needs ("rank >= 2", "the rank of port A (3)").
        expected: String,
        /// The rank given.
        found: usize,
        /// The shape given.
        shape: String,
    },
    /// Matmul's inner dims differ.
    #[error("matmul contraction dims differ: A is {a} and B is {b}, so A[-1] = {a_k} must equal B[-2] = {b_k}")]
    Contraction {
        /// A's shape.
        a: String,
        /// B's shape.
        b: String,
        /// A's last dim.
        a_k: String,
        /// B's second-to-last dim.
        b_k: String,
    },
    /// Two shapes that do not broadcast.
    #[error("`{op}` cannot broadcast {left} with {right}: dim {axis} is {left_dim} vs {right_dim} (each must be equal or 1)")]
    Broadcast {
        /// The op.
        op: &'static str,
        /// First shape.
        left: String,
        /// Second shape.
        right: String,
        /// The axis.
        axis: usize,
        /// Its extent in the first shape.
        left_dim: String,
        /// Its extent in the second shape.
        right_dim: String,
    },
    /// An input of an element type the op does not take.
    #[error("`{op}` port {port} does not take {found}; it takes {expected}")]
    DType {
        /// The op.
        op: &'static str,
        /// The port.
        port: &'static str,
        /// The type given.
        found: DataType,
        /// What it takes.
        expected: &'static str,
    },
    /// A port whose dims the op's rule does not accept (a norm's SCALE, epsilon, statistics).
    #[error("`{op}` port {port} must be {expected}, found {found}")]
    PortShape {
        /// The op.
        op: &'static str,
        /// The port.
        port: &'static str,
        /// What it must be, with the shapes it follows from.
        expected: String,
        /// What it is.
        found: String,
    },
    /// A rule of an op about its ports' dims and types or its attributes, in words that name
    /// the ports and shapes (attention's head dims, GQA heads, masks).
    #[error("`{op}`: {rule}")]
    Rule {
        /// The op.
        op: &'static str,
        /// What the rule says and what was given.
        rule: String,
    },
    /// An axis outside the tensor.
    #[error("`{op}` axis {axis} is out of range for rank {rank}")]
    Axis {
        /// The op.
        op: &'static str,
        /// The axis given.
        axis: i64,
        /// The rank of the tensor.
        rank: usize,
    },
}

impl ShapeError {
    /// An error about no port in particular.
    pub(crate) fn general(kind: ShapeErrorKind) -> Self {
        ShapeError { arg: None, kind: Box::new(kind) }
    }

    pub(crate) fn at(arg: usize, kind: ShapeErrorKind) -> Self {
        // The op with the most ports is a concatenation of up to `MAX_CONCAT_INPUTS` inputs.
        debug_assert!(arg < layout::MAX_CONCAT_INPUTS, "port {arg} of an op");
        ShapeError { arg: Some(arg), kind: Box::new(kind) }
    }
}

/// NumPy broadcasting of two equal-rank shapes (rank mismatch is the caller's error).
pub(crate) fn broadcast<D: Dim>(
    op: &'static str,
    left: &[D],
    right: &[D],
    right_arg: usize,
    cx: &mut impl DimCx<D>,
) -> Result<Vec<D>, ShapeError> {
    debug_assert_eq!(left.len(), right.len());
    let mut out = Vec::with_capacity(left.len());
    for (axis, (l, r)) in left.iter().zip(right).enumerate() {
        let d = if r.is_one() {
            l.clone()
        } else if l.is_one() || cx.require_eq(l, r) {
            // After `require_eq`, prefer the literal of the two so the result is as concrete as
            // the inputs allow.
            if l.as_lit().is_some() && !l.is_one() {
                l.clone()
            } else {
                r.clone()
            }
        } else {
            return Err(ShapeError::at(
                right_arg,
                ShapeErrorKind::Broadcast {
                    op,
                    left: shape_string(left),
                    right: shape_string(right),
                    axis,
                    left_dim: l.to_string(),
                    right_dim: r.to_string(),
                },
            ));
        };
        out.push(d);
    }
    Ok(out)
}

/// Normalises a possibly negative axis.
pub(crate) fn normalize_axis(op: &'static str, axis: i64, rank: usize) -> Result<usize, ShapeErrorKind> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&a) {
        Ok(a as usize)
    } else {
        Err(ShapeErrorKind::Axis { op, axis, rank })
    }
}

impl Op {
    /// Builds an op from a call: its name and its attributes, checked against the signature.
    ///
    /// ```
    /// use cudnn_runtime::ops::{Op, AttrValue};
    /// let op = Op::from_call("relu", &[("upper_clip".into(), AttrValue::Float(6.0))]).unwrap();
    /// assert_eq!(op.call_name(), "relu");
    /// assert!(Op::from_call("rleu", &[]).unwrap_err().to_string().contains("did you mean `relu`?"));
    /// ```
    ///
    /// A concatenation built this way has two inputs; [`Op::from_call_with_inputs`] gives the
    /// count, as `graph!`, the builder and the JSON reader do.
    pub fn from_call(name: &str, attrs: &[(String, AttrValue)]) -> Result<Op, AttrError> {
        let sig =
            lookup(name).ok_or_else(|| AttrError::UnknownOp { op: name.to_string(), suggestion: suggest(name) })?;
        Self::from_signature(&sig, attrs, sig.inputs.len())
    }

    /// [`Op::from_call`] for a call with `inputs` positional arguments: an op that takes any
    /// number of inputs (`concatenate`) takes that many; the others keep their ports, and their
    /// shape rule reports a wrong count.
    ///
    /// ```
    /// use cudnn_runtime::ops::{Op, AttrValue};
    /// let op = Op::from_call_with_inputs("concatenate", &[("axis".into(), AttrValue::Int(1))], 3).unwrap();
    /// let ports: Vec<&str> = op.inputs().iter().map(|p| p.name).collect();
    /// assert_eq!(ports, ["X[0]", "X[1]", "X[2]"]);
    /// ```
    pub fn from_call_with_inputs(name: &str, attrs: &[(String, AttrValue)], inputs: usize) -> Result<Op, AttrError> {
        let sig =
            lookup(name).ok_or_else(|| AttrError::UnknownOp { op: name.to_string(), suggestion: suggest(name) })?;
        Self::from_signature(&sig, attrs, inputs)
    }

    fn from_signature(sig: &OpSignature, attrs: &[(String, AttrValue)], inputs: usize) -> Result<Op, AttrError> {
        let attrs = Attrs::check(sig, attrs)?;
        Ok(match sig.family {
            Family::Matmul => Op::Matmul(Matmul::from_attrs(&attrs)),
            Family::Pointwise(mode) => Op::Pointwise(Pointwise::from_attrs(mode, &attrs)),
            Family::Reduction(mode) => Op::Reduction(Reduction::from_attrs(mode, &attrs)),
            Family::Norm(kind) => Op::Norm(Norm::from_attrs(kind, &attrs)),
            Family::Sdpa(pass) => Op::Sdpa(Sdpa::from_attrs(pass, &attrs)),
            Family::Conv(kind) => Op::Conv(Conv::from_attrs(kind, &attrs)?),
            Family::Resample => Op::Resample(Resample::from_attrs(&attrs)?),
            Family::Layout(kind) => Op::Layout(Layout::from_attrs(kind, &attrs, inputs)?),
        })
    }

    /// The call name of this op (inverse of [`Op::from_call`]).
    pub fn call_name(&self) -> &'static str {
        self.signature().name
    }

    /// The attributes that [`Op::from_call`] would need to rebuild this op, defaults omitted.
    pub fn call_attrs(&self) -> Vec<(String, AttrValue)> {
        match self {
            Op::Matmul(_) => Vec::new(),
            Op::Pointwise(p) => p.call_attrs(),
            Op::Reduction(r) => r.call_attrs(),
            Op::Norm(n) => n.call_attrs(),
            Op::Sdpa(a) => a.call_attrs(),
            Op::Conv(c) => c.call_attrs(),
            Op::Resample(r) => r.call_attrs(),
            Op::Layout(l) => l.call_attrs(),
        }
    }

    /// The outputs this op instance produces, in order. Usually the signature's; an op whose
    /// attributes decide its outputs (a norm's training phase adds statistics) narrows them.
    pub fn outputs(&self) -> Vec<&'static str> {
        match self {
            Op::Norm(n) => n.outputs().to_vec(),
            Op::Sdpa(a) => a.outputs(),
            Op::Resample(r) => r.outputs().to_vec(),
            _ => self.signature().outputs.to_vec(),
        }
    }

    /// The inputs this op instance takes, in order. Usually the signature's; an op whose
    /// attributes decide its inputs (attention's bias, sequence lengths, dropout seed) narrows
    /// them. Positional arguments, graph nodes and JSON ports follow this list.
    pub fn inputs(&self) -> Vec<PortSpec> {
        match self {
            Op::Sdpa(a) => a.inputs(),
            Op::Layout(l) => l.inputs().to_vec(),
            _ => self.signature().inputs.to_vec(),
        }
    }

    /// This op's signature.
    pub fn signature(&self) -> OpSignature {
        match self {
            Op::Matmul(_) => matmul::signature(),
            Op::Pointwise(p) => p.mode.signature(),
            Op::Reduction(r) => r.mode.signature(),
            Op::Norm(n) => n.kind.signature(),
            Op::Sdpa(a) => a.pass.signature(),
            Op::Conv(c) => c.kind.signature(),
            Op::Resample(_) => resample::signature(),
            Op::Layout(l) => l.kind().signature(),
        }
    }

    /// The shape and dtype rule: output metadata from input metadata.
    pub fn infer<D: Dim>(
        &self,
        inputs: &[TensorMeta<D>],
        cx: &mut impl DimCx<D>,
    ) -> Result<Vec<OutputMeta<D>>, ShapeError> {
        let sig = self.signature();
        let expected = self.inputs().len();
        if inputs.len() != expected {
            return Err(ShapeError {
                arg: None,
                kind: Box::new(ShapeErrorKind::Arity { op: sig.name, expected, found: inputs.len() }),
            });
        }
        match self {
            Op::Matmul(m) => m.infer(inputs, cx).map(|o| vec![o]),
            Op::Pointwise(p) => p.infer(inputs, cx).map(|o| vec![o]),
            Op::Reduction(r) => r.infer(inputs).map(|o| vec![o]),
            Op::Norm(n) => n.infer(inputs, cx),
            Op::Sdpa(a) => a.infer(inputs, cx),
            Op::Conv(c) => c.infer(inputs, cx).map(|o| vec![o]),
            Op::Resample(r) => r.infer(inputs),
            Op::Layout(l) => l.infer(inputs, cx).map(|o| vec![o]),
        }
    }

    /// Computes the op on the CPU (see [`crate::reference`]).
    pub fn reference(&self, inputs: &[&crate::array::Array]) -> Vec<crate::array::Array> {
        match self {
            Op::Matmul(m) => vec![m.reference(inputs[0], inputs[1])],
            Op::Pointwise(p) => vec![p.reference(inputs)],
            Op::Reduction(r) => vec![r.reference(inputs[0])],
            Op::Norm(n) => n.reference(inputs),
            Op::Sdpa(a) => a.reference(inputs),
            Op::Conv(c) => vec![c.reference(inputs[0], inputs[1])],
            Op::Resample(r) => r.reference(inputs[0]),
            Op::Layout(l) => vec![l.reference(inputs)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_and_suggest() {
        assert!(lookup("matmul").is_some());
        assert!(lookup("gelu_tanh").is_some());
        assert!(lookup("reduce_sum").is_some());
        assert!(lookup("conv").is_none());
        assert_eq!(suggest("conv_fprob"), Some("conv_fprop"));
        assert_eq!(suggest("matmull"), Some("matmul"));
        assert_eq!(suggest("sigmod"), Some("sigmoid"));
        assert_eq!(suggest("zzzzzzzz"), None);
    }

    #[test]
    fn every_name_round_trips_through_from_call() {
        for name in all_names() {
            let sig = lookup(name).unwrap();
            let attrs: Vec<(String, AttrValue)> = sig
                .attrs
                .iter()
                .filter(|a| a.required)
                .map(|a| {
                    let v = match a.kind {
                        AttrKind::Float => AttrValue::Float(0.5),
                        AttrKind::Int => AttrValue::Int(0),
                        AttrKind::IntList => AttrValue::IntList(vec![0]),
                        AttrKind::Bool => AttrValue::Bool(true),
                        AttrKind::OneOf(names) => AttrValue::Name(names[0].to_string()),
                    };
                    (a.name.to_string(), v)
                })
                .collect();
            let op = Op::from_call(name, &attrs).unwrap();
            assert_eq!(op.call_name(), name);
            assert_eq!(Op::from_call(name, &op.call_attrs()).unwrap(), op);
        }
    }

    #[test]
    fn attribute_errors_are_specific() {
        let e = Op::from_call("relu", &[("uper_clip".into(), 1.0.into())]).unwrap_err();
        assert_eq!(e.to_string(), "`relu` has no attribute `uper_clip`; did you mean `upper_clip`?");
        let e = Op::from_call("matmul", &[("alpha".into(), 1.0.into())]).unwrap_err();
        assert_eq!(e.to_string(), "`matmul` has no attribute `alpha`; it takes no attributes");
        let e = Op::from_call("reduce_sum", &[]).unwrap_err();
        assert_eq!(e.to_string(), "`reduce_sum` needs the attribute `dims` (a list of integers)");
        let e = Op::from_call("reduce_sum", &[("dims".into(), 1.0.into())]).unwrap_err();
        assert_eq!(e.to_string(), "attribute `dims` of `reduce_sum` must be a list of integers");
        let e = Op::from_call("elu", &[("alpha".into(), 1.0.into()), ("alpha".into(), 2.0.into())]).unwrap_err();
        assert!(matches!(e, AttrError::Duplicate { .. }));
    }
}
