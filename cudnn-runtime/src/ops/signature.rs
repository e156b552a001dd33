//! The vocabulary every family's signature is written in: ports, attribute kinds and values, and
//! [`OpSignature`], what the `graph!` macro checks a call's arity and attributes against.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::Family;
use crate::dim::Dim;
use crate::DataType;

/// How a port is fed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortSpec {
    /// The port's name, as in cudnn-frontend's JSON (`A`, `IN_0`, `X`, ...).
    pub name: &'static str,
    /// Whether a numeric literal may feed it (becoming a by-value scalar tensor).
    pub scalar_ok: bool,
    /// The data type of the by-value scalar a number fed to it becomes; `None`: the node's
    /// compute type (epsilon, a pointwise operand). A port that takes a count says `I64`.
    pub scalar_type: Option<DataType>,
}

/// A port list holding batch norm's running-statistics ports, in cudnn-frontend's order
/// (`BatchNormAttributes`, `BNFinalizeAttributes`), between the ports before `;` and those after
/// it: the training forward takes X before them, `bn_finalize` the two sums before them and the
/// count after.
macro_rules! with_running_stats {
    ($($before:expr),* ; $($after:expr),*) => {
        &[
            $($before,)*
            PortSpec::tensor("SCALE"),
            PortSpec::tensor("BIAS"),
            PortSpec::tensor("PREV_RUNNING_MEAN"),
            PortSpec::tensor("PREV_RUNNING_VAR"),
            PortSpec::scalar("EPSILON"),
            PortSpec::scalar("MOMENTUM"),
            $($after,)*
        ]
    };
}
pub(crate) use with_running_stats;

impl PortSpec {
    /// A tensor port: only a tensor may feed it.
    pub const fn tensor(name: &'static str) -> PortSpec {
        PortSpec { name, scalar_ok: false, scalar_type: None }
    }

    /// A port that also takes a number, a by-value scalar of the node's compute type (epsilon,
    /// momentum, a pointwise operand).
    pub const fn scalar(name: &'static str) -> PortSpec {
        PortSpec { name, scalar_ok: true, scalar_type: None }
    }

    /// A port that also takes a number, a by-value scalar of `data_type` (a count: `I64`).
    pub const fn scalar_of(name: &'static str, data_type: DataType) -> PortSpec {
        PortSpec { name, scalar_ok: true, scalar_type: Some(data_type) }
    }

    /// The type of the by-value scalar a number fed to this port becomes, for a node whose
    /// compute type is `compute`.
    pub fn scalar_data_type(&self, compute: DataType) -> DataType {
        self.scalar_type.unwrap_or(compute)
    }
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
    /// A list of extents, `[2, 64, 4, 32]`: positive integers in a call at run time (an
    /// [`AttrValue::IntList`]); in `graph!` each may be a literal, a dim parameter or an
    /// expression over them (`[B, S, H, D]`, `[B, S, H * D]`), which the shape rule reads through
    /// [`Extents`] and the generated code evaluates when it builds the graph.
    Dims,
    /// A list of indices into dims, `[0, 0, H, 0]`: non-negative integers in a call at run time
    /// (an [`AttrValue::IntList`]); in `graph!` written as [`AttrKind::Dims`] extents are, 0
    /// allowed (a slice's `start`), and read through [`Extents`] alike.
    Indices,
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
            AttrKind::Dims => "a list of extents",
            AttrKind::Indices => "a list of indices",
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

/// The extents of a call's [`AttrKind::Dims`] (and [`AttrKind::Indices`]) attributes as a shape rule reads them: at run
/// time the op's own values ([`Extents::own`]); in the `graph!` checker the symbolic ones the
/// call wrote ([`Extents::given`]), which may name dim parameters. An op the checker builds holds
/// a placeholder in such an attribute (its literal extents, 1 for each symbolic one), which the
/// shape rule never reads: a family reads each of its `Dims` attributes through these extents.
#[derive(Debug, Clone, Copy)]
pub struct Extents<'a, D> {
    given: &'a [(String, Vec<D>)],
}

impl<'a, D: Dim> Extents<'a, D> {
    /// No extents given: every `Dims` attribute is the op's own.
    pub fn own() -> Self {
        Extents { given: &[] }
    }

    /// The extents of the attributes named in `given` (the others stay the op's own).
    pub fn given(given: &'a [(String, Vec<D>)]) -> Self {
        Extents { given }
    }

    /// The extents of attribute `name`: the given ones, or `own` (the op's values) as known
    /// extents.
    pub(crate) fn read(&self, name: &str, own: &[i64]) -> Vec<D> {
        match self.given.iter().find(|(n, _)| n == name) {
            Some((_, dims)) => dims.clone(),
            None => own.iter().map(|&d| D::lit(d)).collect(),
        }
    }
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
        self.family.input(i)
    }
}
