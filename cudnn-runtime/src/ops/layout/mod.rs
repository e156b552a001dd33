//! Layout ops: `reshape(x, shape = [..])`, `transpose(x, permutation = [..])` and
//! `slice(x, start = [..], limit = [..], step = [..])`, as cudnn-frontend's `ReshapeNode`,
//! `TransposeNode` and `SliceNode`.
//!
//! | call | shape rule |
//! | --- | --- |
//! | `reshape(x, shape = [2, 3, 4])` | `Y = shape`; its element count must be X's |
//! | `transpose(x, permutation = [0, 2, 1])` | `Y[i] = X[permutation[i]]`; `permutation` is a permutation of `0..rank` |
//! | `slice(x, start = [..], limit = [..], step = [..])` | one value per dim, `0 ≤ start < limit ≤ X[i]`, `step ≥ 1` (default 1); `Y[i] = ceil((limit − start) / step)` |
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

#[cfg(feature = "cudnn")]
pub(crate) mod lower;

use super::{
    AttrKind, AttrSpec, AttrValue, Attrs, Family, OpSignature, OutputMeta, PortSpec, ShapeError, ShapeErrorKind,
    TensorMeta,
};
use crate::dim::{shape_string, Dim, DimCx};
use crate::reference::Array;

const INPUTS: &[PortSpec] = &[PortSpec { name: "X", scalar_ok: false }];
const OUTPUTS: &[&str] = &["Y"];
const RESHAPE_ATTRS: &[AttrSpec] = &[AttrSpec { name: "shape", kind: AttrKind::IntList, required: true }];
const TRANSPOSE_ATTRS: &[AttrSpec] = &[AttrSpec { name: "permutation", kind: AttrKind::IntList, required: true }];
const SLICE_ATTRS: &[AttrSpec] = &[
    AttrSpec { name: "start", kind: AttrKind::IntList, required: true },
    AttrSpec { name: "limit", kind: AttrKind::IntList, required: true },
    AttrSpec { name: "step", kind: AttrKind::IntList, required: false },
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
}

impl LayoutKind {
    /// Every kind.
    pub const ALL: &'static [LayoutKind] = &[LayoutKind::Reshape, LayoutKind::Transpose, LayoutKind::Slice];

    /// The DSL call name.
    pub const fn name(self) -> &'static str {
        match self {
            LayoutKind::Reshape => "reshape",
            LayoutKind::Transpose => "transpose",
            LayoutKind::Slice => "slice",
        }
    }

    /// cudnn-frontend's node tag.
    pub const fn frontend_tag(self) -> &'static str {
        match self {
            LayoutKind::Reshape => "RESHAPE",
            LayoutKind::Transpose => "TRANSPOSE",
            LayoutKind::Slice => "SLICE",
        }
    }

    /// Looks up a kind by its call name.
    pub fn from_name(name: &str) -> Option<LayoutKind> {
        LayoutKind::ALL.iter().copied().find(|k| k.name() == name)
    }

    /// The call signature.
    pub fn signature(self) -> OpSignature {
        let attrs = match self {
            LayoutKind::Reshape => RESHAPE_ATTRS,
            LayoutKind::Transpose => TRANSPOSE_ATTRS,
            LayoutKind::Slice => SLICE_ATTRS,
        };
        OpSignature { name: self.name(), family: Family::Layout(self), inputs: INPUTS, outputs: OUTPUTS, attrs }
    }
}

impl Layout {
    /// The kind.
    pub fn kind(&self) -> LayoutKind {
        match self {
            Layout::Reshape { .. } => LayoutKind::Reshape,
            Layout::Transpose { .. } => LayoutKind::Transpose,
            Layout::Slice { .. } => LayoutKind::Slice,
        }
    }

    pub(crate) fn from_attrs(kind: LayoutKind, a: &Attrs<'_>) -> Self {
        match kind {
            LayoutKind::Reshape => Layout::Reshape { shape: a.int_list("shape").unwrap_or_default() },
            LayoutKind::Transpose => Layout::Transpose { permutation: a.int_list("permutation").unwrap_or_default() },
            LayoutKind::Slice => Layout::Slice {
                start: a.int_list("start").unwrap_or_default(),
                limit: a.int_list("limit").unwrap_or_default(),
                step: a.int_list("step").unwrap_or_default(),
            },
        }
    }

    pub(crate) fn call_attrs(&self) -> Vec<(String, AttrValue)> {
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

    pub(crate) fn infer<D: Dim>(
        &self,
        inputs: &[TensorMeta<D>],
        cx: &mut impl DimCx<D>,
    ) -> Result<OutputMeta<D>, ShapeError> {
        let x = &inputs[0];
        let op = self.kind().name();
        let dims = match self {
            Layout::Reshape { shape } => {
                if shape.is_empty() || shape.iter().any(|&d| d <= 0) {
                    return Err(ShapeError::general(ShapeErrorKind::Rule {
                        op,
                        rule: format!("attribute `shape` {shape:?} must be a non-empty list of positive extents"),
                    }));
                }
                let count = shape.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d));
                let same = count.is_some_and(|c| cx.require_eq(&D::product(&x.dims), &D::lit(c)));
                if !same {
                    return Err(ShapeError::at(
                        0,
                        ShapeErrorKind::Rule {
                            op,
                            rule: format!(
                                "X {} cannot be reshaped to {shape:?}: the element counts differ",
                                shape_string(&x.dims)
                            ),
                        },
                    ));
                }
                shape.iter().map(|&d| D::lit(d)).collect()
            }
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
            Layout::Slice { start, limit, step } => {
                let steps = self.steps(x.dims.len());
                let rank = x.dims.len();
                let bad = |rule: String| Err(ShapeError::at(0, ShapeErrorKind::Rule { op, rule }));
                if start.len() != rank || limit.len() != rank || steps.len() != rank {
                    return bad(format!(
                        "`start` {start:?}, `limit` {limit:?} and `step` {step:?} need one value per dim of X {} ({rank})",
                        shape_string(&x.dims)
                    ));
                }
                let mut dims = Vec::with_capacity(rank);
                for i in 0..rank {
                    let extent = x.dims[i].as_lit();
                    let inside = 0 <= start[i] && start[i] < limit[i] && extent.is_none_or(|e| limit[i] <= e);
                    if !inside || steps[i] < 1 {
                        return bad(format!(
                            "dim {i} of X {} cannot be sliced {}:{}:{} (it needs 0 <= start < limit <= {} and step >= 1)",
                            shape_string(&x.dims),
                            start[i],
                            limit[i],
                            steps[i],
                            x.dims[i]
                        ));
                    }
                    dims.push(D::lit((limit[i] - start[i] + steps[i] - 1) / steps[i]));
                }
                dims
            }
        };
        Ok(OutputMeta { dims, dtype: Some(x.dtype) })
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
            Layout::Slice { start, .. } => start.iter().zip(x_strides).map(|(s, st)| s * st).sum(),
            _ => 0,
        }
    }

    /// Y's strides from X's: a transpose permutes them; a reshape is packed.
    pub fn output_strides(&self, x_strides: &[i64], y_dims: &[i64]) -> Vec<i64> {
        match self {
            Layout::Transpose { permutation } => match Layout::axes(permutation, x_strides.len()) {
                Some(axes) => axes.iter().map(|&a| x_strides[a]).collect(),
                None => crate::dim::packed_strides(y_dims),
            },
            Layout::Reshape { .. } => crate::dim::packed_strides(y_dims),
            Layout::Slice { .. } => {
                x_strides.iter().zip(self.steps(x_strides.len())).map(|(s, step)| s * step).collect()
            }
        }
    }

    /// The op on logical values.
    pub(crate) fn reference(&self, x: &Array) -> Array {
        match self {
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
                let dims: Vec<i64> =
                    (0..x.dims.len()).map(|i| (limit[i] - start[i] + steps[i] - 1) / steps[i]).collect();
                let strides = crate::dim::packed_strides(&x.dims);
                Array::from_fn(&dims, |i| {
                    let at = Array::unravel(i as i64, &dims);
                    let source: i64 = (0..at.len()).map(|d| (start[d] + at[d] * steps[d]) * strides[d]).sum();
                    x.data[source as usize]
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dim::{Concrete, SymDim, Symbolic};
    use crate::ops::Op;
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
        assert_eq!(e.to_string(), "`reshape`: X [2, 3, 4] cannot be reshaped to [5, 4]: the element counts differ");
        // Symbolic: the count becomes a deferred check.
        let mut cx = Symbolic::default();
        let n = SymDim::Param("N".into());
        let out = r.infer(&[meta(vec![n, SymDim::Lit(4)])], &mut cx).unwrap();
        assert_eq!(out[0].dims, vec![SymDim::Lit(6), SymDim::Lit(4)]);
        assert_eq!(cx.deferred.len(), 1);
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
            "`slice`: dim 1 of X [4, 10, 8] cannot be sliced 4:12:2 (it needs 0 <= start < limit <= 10 and step >= 1)"
        );
        let Op::Layout(l) = s else { unreachable!() };
        assert_eq!(l.output_strides(&[128, 8, 1], &[2, 4, 8]), vec![128, 16, 1]);
        assert_eq!(l.offset(&[128, 8, 1]), 128 + 32);
        let x = Array::from_fn(&[4, 16, 8], |i| i as f64);
        let y = l.reference(&x);
        assert_eq!(y.dims, vec![2, 4, 8]);
        assert_eq!(y.data[0], 160.0);
        assert_eq!(y.data[8], 176.0);
    }

    #[test]
    fn references_and_strides() {
        let x = Array::from_fn(&[2, 3], |i| i as f64);
        let Op::Layout(t) = op("transpose", "permutation", vec![1, 0]) else { unreachable!() };
        assert_eq!(t.reference(&x).data, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        assert_eq!(t.output_strides(&[3, 1], &[3, 2]), vec![1, 3]);
        let Op::Layout(r) = op("reshape", "shape", vec![3, 2]) else { unreachable!() };
        assert_eq!(r.reference(&x).data, x.data);
        assert_eq!(r.output_strides(&[3, 1], &[3, 2]), vec![2, 1]);
    }
}
