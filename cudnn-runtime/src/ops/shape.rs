//! What a shape rule works on and fails with: tensor and output metadata, [`ShapeError`], and the
//! broadcasting and axis helpers several families share.

use crate::dim::{shape_string, Dim, DimCx};
use crate::DataType;

/// The most input ports one op has (a concatenation's): a port index is always below it.
pub(crate) const MAX_INPUT_PORTS: usize = 32;

/// A tensor as a shape rule sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorMeta<D> {
    /// Its dims.
    pub dims: Vec<D>,
    /// Its element type.
    pub dtype: DataType,
}

/// A concrete tensor's dims and strides, as an op's rule on memory layout sees them
/// ([`crate::ops::Op::check_layout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StridedMeta<'a> {
    /// Its dims.
    pub dims: &'a [i64],
    /// Its strides, in elements.
    pub strides: &'a [i64],
}

/// What a shape rule infers for one output.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputMeta<D> {
    /// The output's dims.
    pub dims: Vec<D>,
    /// The element type the op forces on it (comparisons produce `bool`), if any; otherwise the
    /// graph decides (intermediate type for virtual tensors, the declared type for outputs).
    pub dtype: Option<DataType>,
    /// Why the op forces `dtype` where that is a limit of cuDNN's rather than what the op
    /// computes (fp8 attention's outputs): a clause the error for a declaration of another type
    /// quotes.
    pub reason: Option<&'static str>,
}

/// Why a shape rule rejected its inputs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{kind}")]
pub struct ShapeError {
    /// The positional argument at fault, if one is (for spans in the macro).
    pub arg: Option<usize>,
    /// The attribute at fault, if one is rather than an argument (for spans in the macro).
    pub attr: Option<&'static str>,
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
        ShapeError { arg: None, attr: None, kind: Box::new(kind) }
    }

    pub(crate) fn at(arg: usize, kind: ShapeErrorKind) -> Self {
        debug_assert!(arg < MAX_INPUT_PORTS, "port {arg} of an op");
        ShapeError { arg: Some(arg), attr: None, kind: Box::new(kind) }
    }

    /// An error about the value of attribute `attr`.
    pub(crate) fn on_attr(attr: &'static str, kind: ShapeErrorKind) -> Self {
        ShapeError { arg: None, attr: Some(attr), kind: Box::new(kind) }
    }
}

/// A rule error of `op`.
pub(crate) fn rule(op: &'static str, rule: String) -> ShapeErrorKind {
    ShapeErrorKind::Rule { op, rule }
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
