//! Layout ops: `reshape(x, shape = [..])`, `transpose(x, permutation = [..])`,
//! `slice(x, start = [..], limit = [..], step = [..])` and `concatenate(x0, x1, .., axis = a)`,
//! as cudnn-frontend's `ReshapeNode`, `TransposeNode`, `SliceNode` and `ConcatenateNode`.
//!
//! | call | shape rule |
//! | --- | --- |
//! | `reshape(x, shape = [2, 3, 4])` | `Y = shape`; its element count must be X's |
//! | `transpose(x, permutation = [0, 2, 1])` | `Y[i] = X[permutation[i]]`; `permutation` is a permutation of `0..rank` |
//! | `slice(x, start = [..], limit = [..], step = [..])` | one value per dim, `0 ≤ start < limit ≤ X[i]`, `step ≥ 1` (default 1); `Y[i] = ceil((limit − start) / step)` |
//! | `concatenate(x0, .., xn, axis = a, in_place_index = i)` | 1 to [`MAX_CONCAT_INPUTS`] inputs of one rank, equal outside `axis`; `Y[axis] = Σ Xk[axis]` |
//!
//! A concatenation takes any number of inputs (ports `X[0]`, `X[1]`, ...) and, unlike the others,
//! moves data: Y is a new tensor whose strides keep `X[0]`'s dim order (cudnn-frontend's rule).
//! `in_place_index = i` tells cuDNN that input `i` already lies in Y's memory at its place, so
//! only the other inputs are written: the caller puts `X[i]`'s values there before executing (the
//! CPU reference computes the whole concatenation either way). cuDNN 9.19 has no engine for a
//! concatenation on its own (cudnn-frontend's standalone sample needs 9.22 and Blackwell); it
//! fuses one after a convolution's output, with an in-place index.
//!
//! A slice is a view too: Y's strides are X's times the step, and Y starts `Σ start[i]·stride[i]`
//! elements into X. On cuDNN 9.19 (no slice operation before 9.22) it lowers as cudnn-frontend
//! does there: no operation at all, Y bound in the variant pack to X's address plus that offset,
//! so X must be a graph input and Y must feed another op.
//!
//! Both are views: Y is X's memory described again. A transpose's Y takes X's strides, permuted
//! (cudnn-frontend's rule), so no element moves; a reshape's Y is packed and needs a packed X
//! (row-major, so that it means what NumPy's `reshape` means). On cuDNN 9.19 both lower to
//! `CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR` (the dedicated transpose operation needs 9.22).
//! The CPU reference works on logical (row-major) values: a reshape keeps them, a transpose
//! permutes them.

use serde::{Deserialize, Serialize};

pub(crate) mod codec;
#[cfg(feature = "cudnn")]
pub(crate) mod lower;

use super::signature::{AttrKind, AttrSpec, AttrValue, Extents, OpSignature, PortSpec};
use super::attrs::{AttrError, Attrs};
use super::shape::{normalize_axis, OutputMeta, ShapeError, ShapeErrorKind, TensorMeta};
use super::family::{ChannelsLast, FusionRule, Inferred, LayoutPolicy, OpFamily, OutputLayout};
use super::Family;
use crate::dim::{shape_string, Dim, DimCx};
use crate::array::Array;

mod infer;
use infer::{concat_infer, packed, reshape_infer, reshape_view, slice_extent, slice_infer};
pub use infer::{CONCAT_PORTS, MAX_CONCAT_INPUTS};

const INPUTS: &[PortSpec] = &[PortSpec::tensor("X")];

const OUTPUTS: &[&str] = &["Y"];
const RESHAPE_ATTRS: &[AttrSpec] = &[AttrSpec { name: "shape", kind: AttrKind::Dims, required: true }];
const TRANSPOSE_ATTRS: &[AttrSpec] = &[AttrSpec { name: "permutation", kind: AttrKind::IntList, required: true }];
const SLICE_ATTRS: &[AttrSpec] = &[
    AttrSpec { name: "start", kind: AttrKind::Indices, required: true },
    AttrSpec { name: "limit", kind: AttrKind::Dims, required: true },
    AttrSpec { name: "step", kind: AttrKind::IntList, required: false },
];
const CONCAT_ATTRS: &[AttrSpec] = &[
    AttrSpec { name: "axis", kind: AttrKind::Int, required: true },
    AttrSpec { name: "in_place_index", kind: AttrKind::Int, required: false },
];

/// A layout op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Layout {
    /// `reshape(x, shape = [..])`: the same values in a new shape.
    #[serde(rename = "reshape")]
    Reshape {
        /// Y's dims.
        shape: Vec<i64>,
    },
    /// `transpose(x, permutation = [..])`: `Y[i] = X[permutation[i]]`.
    #[serde(rename = "transpose")]
    Transpose {
        /// Which X dim each Y dim is.
        permutation: Vec<i64>,
    },
    /// `slice(x, start = [..], limit = [..], step = [..])`: `X[start:limit:step]` in every dim.
    #[serde(rename = "slice")]
    Slice {
        /// First index per dim.
        start: Vec<i64>,
        /// One past the last index per dim.
        limit: Vec<i64>,
        /// Step per dim (empty: all 1).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        step: Vec<i64>,
    },
    /// `concatenate(x0, x1, .., axis = a)`: the inputs joined along `axis`.
    #[serde(rename = "concatenate")]
    Concatenate {
        /// The dim the inputs are joined along (negative counts from the end).
        axis: i64,
        /// The input that already lies in Y's memory, if any (cuDNN does not write it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        in_place_index: Option<i64>,
        /// How many inputs (the call's positional arguments).
        inputs: usize,
    },
}

/// The kinds of [`Layout`], for lookup by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutKind {
    /// [`Layout::Reshape`]
    Reshape,
    /// [`Layout::Transpose`]
    Transpose,
    /// [`Layout::Slice`]
    Slice,
    /// [`Layout::Concatenate`]
    Concatenate,
}

impl LayoutKind {
    /// Every kind.
    pub const ALL: &'static [LayoutKind] =
        &[LayoutKind::Reshape, LayoutKind::Transpose, LayoutKind::Slice, LayoutKind::Concatenate];

    /// The DSL call name.
    pub const fn name(self) -> &'static str {
        match self {
            LayoutKind::Reshape => "reshape",
            LayoutKind::Transpose => "transpose",
            LayoutKind::Slice => "slice",
            LayoutKind::Concatenate => "concatenate",
        }
    }

    /// cudnn-frontend's node tag.
    pub const fn frontend_tag(self) -> &'static str {
        match self {
            LayoutKind::Reshape => "RESHAPE",
            LayoutKind::Transpose => "TRANSPOSE",
            LayoutKind::Slice => "SLICE",
            LayoutKind::Concatenate => "CONCATENATE",
        }
    }

    /// Looks up a kind by its call name.
    pub fn from_name(name: &str) -> Option<LayoutKind> {
        LayoutKind::ALL.iter().copied().find(|k| k.name() == name)
    }

    /// The call signature. A concatenation's lists two inputs, the smallest useful call; an
    /// instance has as many as its call passed ([`Op::inputs`](super::Op::inputs)).
    pub fn signature(self) -> OpSignature {
        let (inputs, attrs): (&'static [PortSpec], _) = match self {
            LayoutKind::Reshape => (INPUTS, RESHAPE_ATTRS),
            LayoutKind::Transpose => (INPUTS, TRANSPOSE_ATTRS),
            LayoutKind::Slice => (INPUTS, SLICE_ATTRS),
            LayoutKind::Concatenate => (&CONCAT_PORTS[..2], CONCAT_ATTRS),
        };
        OpSignature { name: self.name(), family: Family::Layout(self), inputs, outputs: OUTPUTS, attrs }
    }
}

impl Layout {
    /// The kind.
    pub fn kind(&self) -> LayoutKind {
        match self {
            Layout::Reshape { .. } => LayoutKind::Reshape,
            Layout::Transpose { .. } => LayoutKind::Transpose,
            Layout::Slice { .. } => LayoutKind::Slice,
            Layout::Concatenate { .. } => LayoutKind::Concatenate,
        }
    }

    fn from_checked_attrs(kind: LayoutKind, a: &Attrs<'_>, inputs: usize) -> Self {
        match kind {
            LayoutKind::Reshape => Layout::Reshape { shape: a.int_list("shape").unwrap_or_default() },
            LayoutKind::Transpose => Layout::Transpose { permutation: a.int_list("permutation").unwrap_or_default() },
            LayoutKind::Slice => Layout::Slice {
                start: a.int_list("start").unwrap_or_default(),
                limit: a.int_list("limit").unwrap_or_default(),
                step: a.int_list("step").unwrap_or_default(),
            },
            LayoutKind::Concatenate => Layout::Concatenate {
                axis: a.int("axis").unwrap_or_default(),
                in_place_index: a.int("in_place_index"),
                inputs,
            },
        }
    }

    /// The permutation as axes, if it is one for `rank`.
    pub fn axes(permutation: &[i64], rank: usize) -> Option<Vec<usize>> {
        let mut seen = vec![false; rank];
        let mut axes = Vec::with_capacity(rank);
        for &p in permutation {
            let a = usize::try_from(p).ok().filter(|&a| a < rank)?;
            if std::mem::replace(&mut seen[a], true) {
                return None;
            }
            axes.push(a);
        }
        (axes.len() == rank).then_some(axes)
    }

    /// A slice's steps for `rank` dims, defaults filled in (empty for other ops).
    pub fn steps(&self, rank: usize) -> Vec<i64> {
        match self {
            Layout::Slice { step, .. } if step.is_empty() => vec![1; rank],
            Layout::Slice { step, .. } => step.clone(),
            _ => Vec::new(),
        }
    }

    /// A slice's offset into X in elements, for X's strides.
    pub fn offset(&self, x_strides: &[i64]) -> i64 {
        match self {
            // Saturating: in a valid graph each `start < X[i]`, so the offset is less than X's
            // storage span and never saturates.
            Layout::Slice { start, .. } => {
                start.iter().zip(x_strides).fold(0i64, |acc, (s, st)| acc.saturating_add(s.saturating_mul(*st)))
            }
            _ => 0,
        }
    }

    /// Y's strides from X's (dims `x_dims`, strides `x_strides`): a transpose permutes them, a
    /// slice multiplies them by its steps, a reshape keeps the memory where its strides can
    /// ([`Layout::view_strides`]) and is packed otherwise (where the backend lays out its input
    /// packed, or refuses it); a concatenation's Y is packed in `X[0]`'s dim order.
    pub fn output_strides(&self, x_dims: &[i64], x_strides: &[i64], y_dims: &[i64]) -> Vec<i64> {
        match self {
            Layout::Concatenate { .. } => crate::dim::strides_in_order_of(x_strides, y_dims),
            _ => self.view_strides(x_dims, x_strides, y_dims).unwrap_or_else(|_| crate::dim::packed_strides(y_dims)),
        }
    }

    /// Y's strides as a view of X's memory (X of dims `x_dims` and strides `x_strides`), for
    /// concrete and symbolic dims alike: the one rule the `graph!` checker and the runtime use.
    ///
    /// - transpose: X's strides permuted (cudnn-frontend's rule);
    /// - slice: X's strides times the steps (a dim of one element keeps X's stride: it takes no
    ///   step);
    /// - reshape: as NumPy and PyTorch's `view`: X's dims fall into runs that are contiguous in
    ///   memory (`stride[i] = stride[i + 1] · X[i + 1]`, dims of extent 1 aside); Y must split
    ///   and merge dims within runs only, each run's element count being a product of
    ///   consecutive Y dims. A packed X is one run, so any reshape of it is packed.
    ///
    /// # Errors
    ///
    /// A reshape that would merge or split dims across a gap in X's memory: the error names the
    /// two X dims and their strides. A concatenation is no view.
    pub fn view_strides<D: Dim>(&self, x_dims: &[D], x_strides: &[D], y_dims: &[D]) -> Result<Vec<D>, ShapeError> {
        let op = self.kind().name();
        let overflow = || {
            ShapeError::at(0, ShapeErrorKind::Rule { op, rule: format!("the strides of X {} overflow i64", shape_string(x_dims)) })
        };
        match self {
            Layout::Transpose { permutation } => match Layout::axes(permutation, x_strides.len()) {
                Some(axes) => Ok(axes.iter().map(|&a| x_strides[a].clone()).collect()),
                None => Err(ShapeError::on_attr(
                    "permutation",
                    ShapeErrorKind::Rule { op, rule: format!("{permutation:?} is not a permutation of X's dims") },
                )),
            },
            Layout::Slice { .. } => x_strides
                .iter()
                .zip(self.steps(x_strides.len()))
                .zip(y_dims)
                .map(|((s, step), y)| if y.is_one() { Some(s.clone()) } else { D::product(&[s.clone(), D::lit(step)]) })
                .collect::<Option<Vec<D>>>()
                .ok_or_else(overflow),
            Layout::Reshape { .. } => {
                if packed(x_dims).as_deref() == Some(x_strides) {
                    return packed(y_dims).ok_or_else(overflow);
                }
                reshape_view(x_dims, x_strides, y_dims).map_err(|(outer, inner)| {
                    ShapeError::at(
                        0,
                        ShapeErrorKind::Rule {
                            op,
                            rule: format!(
                                "X {} is a strided view (strides {}) whose dims {outer} and {inner} are not \
                                 contiguous in memory, and {} merges or splits across them: reshape the base \
                                 before slicing or transposing it, or keep dims {outer} and {inner} apart",
                                shape_string(x_dims),
                                shape_string(x_strides),
                                shape_string(y_dims)
                            ),
                        },
                    )
                })
            }
            Layout::Concatenate { .. } => Err(ShapeError::general(ShapeErrorKind::Rule {
                op,
                rule: "a concatenation writes a new tensor; it is no view".into(),
            })),
        }
    }

    /// Whether Y is X's memory described again (every layout op but a concatenation).
    pub fn is_view(&self) -> bool {
        !matches!(self, Layout::Concatenate { .. })
    }

    /// A concatenation's axis for inputs of `rank` dims, negative axes counted from the end.
    pub fn concat_axis(&self, rank: usize) -> Option<usize> {
        match self {
            Layout::Concatenate { axis, .. } => normalize_axis(self.kind().name(), *axis, rank).ok(),
            _ => None,
        }
    }
}

impl OpFamily for Layout {
    type Kind = LayoutKind;

    const KINDS: &'static [LayoutKind] = LayoutKind::ALL;

    const TAGS: &'static [&'static str] = &[
        LayoutKind::Reshape.frontend_tag(),
        LayoutKind::Transpose.frontend_tag(),
        LayoutKind::Slice.frontend_tag(),
        LayoutKind::Concatenate.frontend_tag(),
    ];

    fn signature_of(kind: LayoutKind) -> OpSignature {
        kind.signature()
    }

    fn input_of(kind: LayoutKind, i: usize) -> Option<PortSpec> {
        match kind {
            LayoutKind::Concatenate => CONCAT_PORTS.get(i).copied(),
            LayoutKind::Reshape | LayoutKind::Transpose | LayoutKind::Slice => kind.signature().inputs.get(i).copied(),
        }
    }

    fn kind(&self) -> LayoutKind {
        self.kind()
    }

    /// This instance's inputs: X, or a concatenation's `X[0]` .. `X[n-1]`.
    fn inputs(&self) -> Vec<PortSpec> {
        match self {
            Layout::Concatenate { inputs, .. } => CONCAT_PORTS[..(*inputs).min(MAX_CONCAT_INPUTS)].to_vec(),
            _ => INPUTS.to_vec(),
        }
    }

    /// `inputs`: the call's positional argument count (a concatenation's input count; the other
    /// layout ops take one input whatever is passed, and the shape rule reports a mismatch).
    fn from_attrs(kind: LayoutKind, a: &Attrs<'_>, inputs: usize) -> Result<Self, AttrError> {
        if kind == LayoutKind::Concatenate && !(1..=MAX_CONCAT_INPUTS).contains(&inputs) {
            return Err(AttrError::Inputs {
                op: kind.name().to_string(),
                reason: format!("takes 1 to {MAX_CONCAT_INPUTS} inputs, found {inputs}"),
            });
        }
        Ok(Self::from_checked_attrs(kind, a, inputs))
    }

    fn call_attrs(&self) -> Vec<(String, AttrValue)> {
        match self {
            Layout::Reshape { shape } => vec![("shape".into(), AttrValue::IntList(shape.clone()))],
            Layout::Transpose { permutation } => vec![("permutation".into(), AttrValue::IntList(permutation.clone()))],
            Layout::Slice { start, limit, step } => {
                let mut out = vec![
                    ("start".into(), AttrValue::IntList(start.clone())),
                    ("limit".into(), AttrValue::IntList(limit.clone())),
                ];
                if !step.is_empty() {
                    out.push(("step".into(), AttrValue::IntList(step.clone())));
                }
                out
            }
            Layout::Concatenate { axis, in_place_index, .. } => {
                let mut out = vec![("axis".into(), AttrValue::Int(*axis))];
                if let Some(i) = in_place_index {
                    out.push(("in_place_index".into(), AttrValue::Int(*i)));
                }
                out
            }
        }
    }

    fn infer<D: Dim>(&self, inputs: &[TensorMeta<D>], cx: &mut impl DimCx<D>) -> Inferred<D> {
        self.infer_with(inputs, &Extents::own(), cx)
    }

    fn infer_with<D: Dim>(&self, inputs: &[TensorMeta<D>], extents: &Extents<'_, D>, cx: &mut impl DimCx<D>) -> Inferred<D> {
        let op = self.kind().name();
        if let Layout::Concatenate { axis, in_place_index, .. } = self {
            return concat_infer(op, *axis, *in_place_index, inputs, cx).map(|y| vec![y]);
        }
        let x = &inputs[0];
        let dims = match self {
            Layout::Reshape { shape } => reshape_infer(op, x, &extents.read("shape", shape), cx)?,
            Layout::Transpose { permutation } => {
                let Some(axes) = Layout::axes(permutation, x.dims.len()) else {
                    return Err(ShapeError::at(
                        0,
                        ShapeErrorKind::Rule {
                            op,
                            rule: format!(
                                "attribute `permutation` {permutation:?} is not a permutation of the {} dims of X {} (each of 0..{} exactly once)",
                                x.dims.len(),
                                shape_string(&x.dims),
                                x.dims.len()
                            ),
                        },
                    ));
                };
                axes.iter().map(|&a| x.dims[a].clone()).collect()
            }
            Layout::Slice { start, limit, .. } => {
                let (start, limit) = (extents.read("start", start), extents.read("limit", limit));
                slice_infer(op, x, &start, &limit, &self.steps(x.dims.len()), cx)?
            }
            Layout::Concatenate { .. } => unreachable!("returned above"),
        };
        Ok(vec![OutputMeta { dims, dtype: Some(x.dtype), reason: None }])
    }

    /// The op on logical values.
    fn reference(&self, inputs: &[&Array]) -> Vec<Array> {
        let x = inputs[0];
        vec![match self {
            Layout::Concatenate { .. } => {
                let axis = self.concat_axis(x.dims.len()).unwrap_or(0);
                let mut dims = x.dims.clone();
                dims[axis] = inputs.iter().map(|a| a.dims[axis]).sum();
                // Each output index along `axis` belongs to one input, at an offset.
                let owner: Vec<(usize, i64)> =
                    inputs.iter().enumerate().flat_map(|(k, a)| (0..a.dims[axis]).map(move |j| (k, j))).collect();
                Array::from_fn(&dims, |i| {
                    let mut at = Array::unravel(i as i64, &dims);
                    let (k, j) = owner[at[axis] as usize];
                    at[axis] = j;
                    let strides = crate::dim::packed_strides(&inputs[k].dims);
                    let source: i64 = at.iter().zip(&strides).map(|(v, s)| v * s).sum();
                    inputs[k].data[source as usize]
                })
            }
            Layout::Reshape { shape } => Array { dims: shape.clone(), data: x.data.clone() },
            Layout::Transpose { permutation } => {
                let axes = Layout::axes(permutation, x.dims.len()).unwrap_or_default();
                let dims: Vec<i64> = axes.iter().map(|&a| x.dims[a]).collect();
                let strides = crate::dim::packed_strides(&x.dims);
                Array::from_fn(&dims, |i| {
                    let at = Array::unravel(i as i64, &dims);
                    let source: i64 = at.iter().zip(&axes).map(|(&v, &a)| v * strides[a]).sum();
                    x.data[source as usize]
                })
            }
            Layout::Slice { start, limit, .. } => {
                let steps = self.steps(x.dims.len());
                let dims: Vec<i64> = (0..x.dims.len()).map(|i| slice_extent(start[i], limit[i], steps[i])).collect();
                let strides = crate::dim::packed_strides(&x.dims);
                Array::from_fn(&dims, |i| {
                    let at = Array::unravel(i as i64, &dims);
                    let source: i64 = (0..at.len()).map(|d| (start[d] + at[d] * steps[d]) * strides[d]).sum();
                    x.data[source as usize]
                })
            }
        }]
    }

    fn fusion(&self) -> FusionRule {
        match self {
            Layout::Reshape { .. } | Layout::Transpose { .. } | Layout::Slice { .. } => FusionRule::View,
            // The one concatenation cuDNN 9.19 computes: a convolution's output written in place
            // (`concat.fused_in_place`).
            Layout::Concatenate { .. } => FusionRule::Anchor { prologue: false, epilogue: false, follows: true },
        }
    }

    fn layout_policy(&self) -> LayoutPolicy<'_> {
        let channels_last = match self {
            Layout::Concatenate { .. } => ChannelsLast::Follow,
            Layout::Reshape { .. } | Layout::Transpose { .. } | Layout::Slice { .. } => ChannelsLast::No,
        };
        LayoutPolicy { channels_last, outputs: OutputLayout::View(self) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dim::{Concrete, SymDim, Symbolic};
    use crate::ops::{Extents, Op};
    use crate::DataType;

    fn op(name: &str, attr: &str, v: Vec<i64>) -> Op {
        Op::from_call(name, &[(attr.to_string(), AttrValue::IntList(v))]).unwrap()
    }

    fn meta<D: Dim>(dims: Vec<D>) -> TensorMeta<D> {
        TensorMeta { dims, dtype: DataType::F16 }
    }

    #[test]
    fn shapes() {
        let t = op("transpose", "permutation", vec![0, 2, 1]);
        assert_eq!(t.infer(&[meta(vec![2i64, 3, 4])], &mut Concrete).unwrap()[0].dims, vec![2, 4, 3]);
        for bad in [vec![0, 1], vec![0, 1, 1], vec![0, 1, 3], vec![-1, 0, 1]] {
            let e = op("transpose", "permutation", bad).infer(&[meta(vec![2i64, 3, 4])], &mut Concrete).unwrap_err();
            assert!(e.to_string().contains("is not a permutation of the 3 dims"), "{e}");
        }
        let r = op("reshape", "shape", vec![6, 4]);
        assert_eq!(r.infer(&[meta(vec![2i64, 3, 4])], &mut Concrete).unwrap()[0].dims, vec![6, 4]);
        let e = op("reshape", "shape", vec![5, 4]).infer(&[meta(vec![2i64, 3, 4])], &mut Concrete).unwrap_err();
        assert_eq!(e.to_string(), "`reshape`: X [2, 3, 4] cannot be reshaped to [5, 4]: the element counts differ (24 against 20)");
        assert_eq!((e.arg, e.attr), (None, Some("shape")));
        // Symbolic: the count becomes a deferred check.
        let mut cx = Symbolic::default();
        let n = SymDim::Param("N".into());
        let out = r.infer(&[meta(vec![n, SymDim::Lit(4)])], &mut cx).unwrap();
        assert_eq!(out[0].dims, vec![SymDim::Lit(6), SymDim::Lit(4)]);
        assert_eq!(cx.deferred.len(), 1);
    }

    #[test]
    fn symbolic_shapes_are_read_from_the_given_extents() {
        let p = |n: &str| SymDim::Param(n.into());
        // The checker's op: a placeholder the rule never reads.
        let r = op("reshape", "shape", vec![1, 1, 1, 1]);
        let infer = |x: Vec<SymDim>, shape: Vec<SymDim>, cx: &mut Symbolic| {
            let given = [("shape".to_string(), shape)];
            r.infer_with(&[meta(x)], &Extents::given(&given), cx)
        };
        let hd = p("H").checked_mul(&p("D")).unwrap();
        let mut cx = Symbolic::default();
        let y = infer(vec![p("B"), p("S"), hd.clone()], vec![p("B"), p("S"), p("H"), p("D")], &mut cx).unwrap();
        assert_eq!(y[0].dims, vec![p("B"), p("S"), p("H"), p("D")]);
        let y = infer(vec![p("B"), p("S"), p("H"), p("D")], vec![p("B"), p("S"), hd], &mut cx).unwrap();
        assert_eq!(y[0].dims[2].to_string(), "D * H");
        assert!(cx.deferred.is_empty());
        // A count that differs for every binding, on the attribute.
        let e = infer(vec![p("B"), p("E")], vec![p("B"), SymDim::Lit(2), p("E")], &mut cx).unwrap_err();
        assert_eq!((e.arg, e.attr), (None, Some("shape")));
        assert_eq!(
            e.to_string(),
            "`reshape`: X [B, E] cannot be reshaped to [B, 2, E]: the element counts differ (B * E against 2 * B * E)"
        );
        // A non-positive literal among symbols.
        let e = infer(vec![p("B")], vec![p("B"), SymDim::Lit(0)], &mut cx).unwrap_err();
        assert_eq!(e.to_string(), "`reshape`: attribute `shape` [B, 0] must be a non-empty list of positive extents");
        assert_eq!(e.attr, Some("shape"));
        // Without given extents the op's own are read.
        assert_eq!(r.infer(&[meta(vec![1i64, 1])], &mut Concrete).unwrap()[0].dims, vec![1, 1, 1, 1]);
    }

    #[test]
    fn slices() {
        let s = Op::from_call(
            "slice",
            &[
                ("start".into(), AttrValue::IntList(vec![1, 4, 0])),
                ("limit".into(), AttrValue::IntList(vec![3, 12, 8])),
                ("step".into(), AttrValue::IntList(vec![1, 2, 1])),
            ],
        )
        .unwrap();
        // cudnn-frontend's sample: [4, 16, 8] sliced to [2, 4, 8].
        assert_eq!(s.infer(&[meta(vec![4i64, 16, 8])], &mut Concrete).unwrap()[0].dims, vec![2, 4, 8]);
        let e = s.infer(&[meta(vec![4i64, 10, 8])], &mut Concrete).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`slice`: `limit` 12 of dim 1 reaches past X [4, 10, 8], whose dim 1 is 10: a slice is a view and stays inside its base"
        );
        assert_eq!(e.attr, Some("limit"));
        let Op::Layout(l) = s else { unreachable!() };
        assert_eq!(l.output_strides(&[4, 16, 8], &[128, 8, 1], &[2, 4, 8]), vec![128, 16, 1]);
        assert_eq!(l.offset(&[128, 8, 1]), 128 + 32);
        let x = Array::from_fn(&[4, 16, 8], |i| i as f64);
        let y = l.reference(&[&x]).remove(0);
        assert_eq!(y.dims, vec![2, 4, 8]);
        assert_eq!(y.data[0], 160.0);
        assert_eq!(y.data[8], 176.0);
    }

    fn slice_op(start: Vec<i64>, limit: Vec<i64>) -> Op {
        Op::from_call("slice", &[("start".into(), AttrValue::IntList(start)), ("limit".into(), AttrValue::IntList(limit))])
            .unwrap()
    }

    #[test]
    fn symbolic_slice_bounds_are_decided_where_the_parameters_do_not_matter() {
        let p = |n: &str| SymDim::Param(n.into());
        let times = |k: i64, d: SymDim| SymDim::Lit(k).checked_mul(&d).unwrap();
        // The packed QKV projection [B, S, 3·H, D]; K is heads H..2·H.
        let x = meta(vec![p("B"), p("S"), times(3, p("H")), p("D")]);
        let s = slice_op(vec![0; 4], vec![1; 4]);
        let infer = |start: Vec<SymDim>, limit: Vec<SymDim>, cx: &mut Symbolic| {
            let given = [("start".to_string(), start), ("limit".to_string(), limit)];
            s.infer_with(std::slice::from_ref(&x), &Extents::given(&given), cx)
        };
        let zero = SymDim::Lit(0);
        let mut cx = Symbolic::default();
        let k = infer(
            vec![zero.clone(), zero.clone(), p("H"), zero.clone()],
            vec![p("B"), p("S"), times(2, p("H")), p("D")],
            &mut cx,
        )
        .unwrap();
        assert_eq!(k[0].dims, vec![p("B"), p("S"), p("H"), p("D")]);
        assert!(cx.deferred_le.is_empty(), "{:?}", cx.deferred_le);
        // Past the base for every H: an error now, on `limit`.
        let e = infer(
            vec![zero.clone(), zero.clone(), times(2, p("H")), zero.clone()],
            vec![p("B"), p("S"), times(4, p("H")), p("D")],
            &mut cx,
        )
        .unwrap_err();
        assert_eq!(e.attr, Some("limit"));
        assert_eq!(
            e.to_string(),
            "`slice`: `limit` 4 * H of dim 2 reaches past X [B, S, 3 * H, D], whose dim 2 is 3 * H: a slice is a view and stays inside its base"
        );
        // Empty for every H.
        let e = infer(
            vec![zero.clone(), zero.clone(), times(2, p("H")), zero.clone()],
            vec![p("B"), p("S"), p("H"), p("D")],
            &mut cx,
        )
        .unwrap_err();
        assert!(e.to_string().contains("dim 2 is sliced 2 * H..H, which is empty"), "{e}");
        // `E` against `3 * H`: it depends, so it waits.
        let y = infer(vec![zero.clone(); 4], vec![p("B"), p("S"), p("E"), p("D")], &mut cx).unwrap();
        assert_eq!(y[0].dims[2], p("E"));
        assert_eq!(cx.deferred_le, vec![(p("E"), times(3, p("H")))]);
    }

    #[test]
    fn outer_dims_of_one_element_get_packed_strides() {
        // Attention's output O [1, 32, 1, 128] (packed), heads back in place ([0, 2, 1, 3]) and
        // merged for the output projection, at S = 1 (decode): the merge is [1, 1, 4096] with
        // the packed strides [4096, 4096, 1], not [1, 1, 1] (a GEMV's A as column-major with
        // leading dimension 1, 5x slower on the H100).
        let o = packed(&[1i64, 32, 1, 128]).unwrap();
        let Op::Layout(t) = op("transpose", "permutation", vec![0, 2, 1, 3]) else { unreachable!() };
        let t_strides = t.view_strides(&[1i64, 32, 1, 128], &o, &[1, 1, 32, 128]).unwrap();
        assert_eq!(t_strides, vec![4096, 128, 128, 1]);
        let Op::Layout(merge) = op("reshape", "shape", vec![1, 1, 4096]) else { unreachable!() };
        assert_eq!(merge.view_strides(&[1i64, 1, 32, 128], &t_strides, &[1, 1, 4096]).unwrap(), vec![4096, 4096, 1]);
        // Unit dims inside the merged run and before it keep the run's strides.
        let Op::Layout(split) = op("reshape", "shape", vec![1, 32, 1, 128, 1]) else { unreachable!() };
        assert_eq!(
            split.view_strides(&[1i64, 1, 32, 128], &t_strides, &[1, 32, 1, 128, 1]).unwrap(),
            vec![4096, 128, 128, 1, 1]
        );
        // Symbolic: the same over parameters.
        let p = |n: &str| SymDim::Param(n.into());
        let (h, d) = (p("H"), p("D"));
        let hd = h.checked_mul(&d).unwrap();
        let x_dims = [SymDim::Lit(1), SymDim::Lit(1), h.clone(), d.clone()];
        let x_strides = [hd.clone(), d.clone(), d.clone(), SymDim::Lit(1)];
        let Op::Layout(merge) = op("reshape", "shape", vec![1, 1, 4096]) else { unreachable!() };
        let y = merge.view_strides(&x_dims, &x_strides, &[SymDim::Lit(1), SymDim::Lit(1), hd.clone()]).unwrap();
        assert_eq!(y, vec![hd.clone(), hd, SymDim::Lit(1)]);
    }

    #[test]
    fn views_of_strided_memory() {
        // Q of a packed [2, 5, 3·4, 8] QKV buffer, then its heads merged: a view, since each
        // head's 4 × 8 is contiguous.
        let qkv = packed(&[2i64, 5, 12, 8]).unwrap();
        let Op::Layout(q) = slice_op(vec![0, 0, 4, 0], vec![2, 5, 8, 8]) else { unreachable!() };
        let q_strides = q.view_strides(&[2i64, 5, 12, 8], &qkv, &[2, 5, 4, 8]).unwrap();
        assert_eq!(q_strides, vec![480, 96, 8, 1]);
        assert_eq!(q.offset(&qkv), 32);
        let Op::Layout(merge) = op("reshape", "shape", vec![2, 5, 32]) else { unreachable!() };
        assert_eq!(merge.view_strides(&[2i64, 5, 4, 8], &q_strides, &[2, 5, 32]).unwrap(), vec![480, 96, 1]);
        // Heads split again, a unit dim added: still a view.
        let Op::Layout(split) = op("reshape", "shape", vec![2, 5, 1, 2, 2, 8]) else { unreachable!() };
        assert_eq!(
            split.view_strides(&[2i64, 5, 4, 8], &q_strides, &[2, 5, 1, 2, 2, 8]).unwrap(),
            vec![480, 96, 96, 16, 8, 1]
        );
        // Merging tokens with heads crosses the gap between Q's rows: not a view.
        let Op::Layout(flat) = op("reshape", "shape", vec![2, 160]) else { unreachable!() };
        let e = flat.view_strides(&[2i64, 5, 4, 8], &q_strides, &[2, 160]).unwrap_err();
        assert_eq!(e.arg, Some(0));
        assert!(e.to_string().contains("whose dims 1 and 2 are not contiguous in memory"), "{e}");
        // The builder's default then is packed (the backend refuses such a reshape of a view).
        assert_eq!(flat.output_strides(&[2, 5, 4, 8], &q_strides, &[2, 160]), vec![160, 1]);
        // Symbolic: the same rule over parameters.
        let p = |n: &str| SymDim::Param(n.into());
        let (b, sq, h, d) = (p("B"), p("S"), p("H"), p("D"));
        let three_h = SymDim::Lit(3).checked_mul(&h).unwrap();
        let base = packed(&[b.clone(), sq.clone(), three_h, d.clone()]).unwrap();
        let q_sym = q.view_strides(&[b.clone(), sq.clone(), h.clone(), d.clone()], &base, &[b.clone(), sq.clone(), h.clone(), d.clone()]).unwrap();
        let hd = h.checked_mul(&d).unwrap();
        let merged = merge.view_strides(&[b.clone(), sq.clone(), h.clone(), d.clone()], &q_sym, &[b.clone(), sq.clone(), hd.clone()]);
        assert_eq!(merged.unwrap()[2], SymDim::Lit(1));
        let all = sq.checked_mul(&hd).unwrap();
        assert!(flat.view_strides(&[b.clone(), sq, h, d], &q_sym, &[b, all]).is_err());
    }

    #[test]
    fn huge_steps_extents_and_counts_are_errors_or_exact_not_overflows() {
        let big = i64::MAX;
        // A step near i64::MAX takes one element (the old `limit - start + step - 1` overflowed).
        let s = Op::from_call(
            "slice",
            &[
                ("start".into(), AttrValue::IntList(vec![1, 0])),
                ("limit".into(), AttrValue::IntList(vec![3, 8])),
                ("step".into(), AttrValue::IntList(vec![big, 3])),
            ],
        )
        .unwrap();
        assert_eq!(s.infer(&[meta(vec![4i64, 8])], &mut Concrete).unwrap()[0].dims, vec![1, 3]);
        let Op::Layout(l) = &s else { unreachable!() };
        assert_eq!(l.output_strides(&[4, 8], &[8, 1], &[1, 3]), vec![8, 3]);
        assert_eq!(l.reference(&[&Array::from_fn(&[4, 8], |i| i as f64)])[0].data, vec![8.0, 11.0, 14.0]);
        // Concatenated extents that overflow are an error naming them, not a saturated extent.
        let ins = [meta(vec![2i64, big - 1]), meta(vec![2, 2])];
        let e = concat(2, 1, None).infer(&ins, &mut Concrete).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("`concatenate`: the inputs' extents along axis 1 ({} + 2) add up to more than i64::MAX", big - 1)
        );
        let ins = [meta(vec![SymDim::Lit(big)]), meta(vec![SymDim::Lit(1)])];
        assert!(concat(2, 0, None).infer(&ins, &mut Symbolic::default()).is_err());
        // An input whose count overflows is not reshaped to a shape whose count is i64::MAX.
        let r = op("reshape", "shape", vec![big]);
        let e = r.infer(&[meta(vec![1i64 << 32, 1 << 32])], &mut Concrete).unwrap_err();
        assert!(e.to_string().contains("the element counts differ"), "{e}");
    }

    fn concat(inputs: usize, axis: i64, in_place: Option<i64>) -> Op {
        let mut attrs = vec![("axis".to_string(), AttrValue::Int(axis))];
        attrs.extend(in_place.map(|i| ("in_place_index".to_string(), AttrValue::Int(i))));
        Op::from_call_with_inputs("concatenate", &attrs, inputs).unwrap()
    }

    #[test]
    fn concatenation_shapes() {
        let c = concat(3, 1, None);
        assert_eq!(c.inputs().len(), 3);
        let ins = [meta(vec![2i64, 3, 4]), meta(vec![2, 5, 4]), meta(vec![2, 1, 4])];
        assert_eq!(c.infer(&ins, &mut Concrete).unwrap()[0].dims, vec![2, 9, 4]);
        // A negative axis counts from the end.
        let ins = [meta(vec![2i64, 4, 3]), meta(vec![2, 4, 5])];
        assert_eq!(concat(2, -1, None).infer(&ins, &mut Concrete).unwrap()[0].dims, vec![2, 4, 8]);
        let e = concat(2, 1, None).infer(&[meta(vec![2i64, 3, 4]), meta(vec![2, 3])], &mut Concrete).unwrap_err();
        assert_eq!(e.arg, Some(1));
        assert_eq!(
            e.to_string(),
            "`concatenate` port X[1] needs the rank of X[0] [2, 3, 4] (3), found rank 2 ([2, 3])"
        );
        let e = concat(2, 1, None).infer(&[meta(vec![2i64, 3, 4]), meta(vec![2, 3, 5])], &mut Concrete).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`concatenate` port X[1] must be equal to X[0] [2, 3, 4] outside axis 1 (dim 2 is 4), found [2, 3, 5]"
        );
        let e = concat(2, 3, None).infer(&[meta(vec![2i64, 3, 4]), meta(vec![2, 3, 4])], &mut Concrete).unwrap_err();
        assert_eq!(e.to_string(), "`concatenate` axis 3 is out of range for rank 3");
        let e = concat(2, 0, Some(2)).infer(&[meta(vec![2i64]), meta(vec![3])], &mut Concrete).unwrap_err();
        assert_eq!(e.to_string(), "`concatenate`: attribute `in_place_index` 2 names no input (there are 2)");
        // Symbolic: the axis extent is a sum, the other dims deferred equalities.
        let mut cx = Symbolic::default();
        let (m, n) = (SymDim::Param("M".into()), SymDim::Param("N".into()));
        let ins = [meta(vec![m.clone(), SymDim::Lit(4)]), meta(vec![n, SymDim::Lit(4)])];
        let y = concat(2, 0, None).infer(&ins, &mut cx).unwrap();
        assert_eq!(y[0].dims[0].to_string(), "M + N");
        // Input counts: from 1 to MAX_CONCAT_INPUTS.
        let axis = [("axis".to_string(), AttrValue::Int(0))];
        for bad in [0, MAX_CONCAT_INPUTS + 1] {
            let e = Op::from_call_with_inputs("concatenate", &axis, bad).unwrap_err();
            assert_eq!(e.to_string(), format!("`concatenate` takes 1 to 32 inputs, found {bad}"));
        }
        assert_eq!(Op::from_call("concatenate", &axis).unwrap().inputs().len(), 2);
        // Other ops keep their ports whatever the count.
        assert_eq!(Op::from_call_with_inputs("relu", &[], 3).unwrap().inputs().len(), 1);
    }

    #[test]
    fn concatenation_reference_matches_a_direct_loop() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut random = |dims: &[i64]| {
            Array::from_fn(dims, |_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5
            })
        };
        let (a, b, c) = (random(&[2, 3, 4]), random(&[2, 3, 1]), random(&[2, 3, 2]));
        let Op::Layout(l) = concat(3, 2, None) else { unreachable!() };
        let y = l.reference(&[&a, &b, &c]).remove(0);
        assert_eq!(y.dims, vec![2, 3, 7]);
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..7 {
                    let want = match k {
                        0..=3 => a.data[(i * 3 + j) * 4 + k],
                        4 => b.data[i * 3 + j],
                        _ => c.data[(i * 3 + j) * 2 + (k - 5)],
                    };
                    assert_eq!(y.data[(i * 3 + j) * 7 + k], want, "[{i}, {j}, {k}]");
                }
            }
        }
        assert!(y.data.iter().all(|&v| v != 0.0));
        // Y keeps X[0]'s dim order: channels-last in, channels-last out.
        assert_eq!(l.output_strides(&[2, 4, 3, 4], &[48, 1, 12, 4], &[2, 6, 3, 4]), vec![72, 1, 24, 6]);
        assert_eq!(l.output_strides(&[2, 3, 4], &[12, 4, 1], &[2, 3, 7]), vec![21, 7, 1]);
        assert!(!l.is_view());
    }

    #[test]
    fn references_and_strides() {
        let x = Array::from_fn(&[2, 3], |i| i as f64);
        let Op::Layout(t) = op("transpose", "permutation", vec![1, 0]) else { unreachable!() };
        assert_eq!(t.reference(&[&x])[0].data, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        assert_eq!(t.output_strides(&[2, 3], &[3, 1], &[3, 2]), vec![1, 3]);
        let Op::Layout(r) = op("reshape", "shape", vec![3, 2]) else { unreachable!() };
        assert_eq!(r.reference(&[&x])[0].data, x.data);
        assert_eq!(r.output_strides(&[2, 3], &[3, 1], &[3, 2]), vec![2, 1]);
    }
}
