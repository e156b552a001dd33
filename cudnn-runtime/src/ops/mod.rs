//! The op vocabulary: each op family is defined **once**, in its own folder, with its ports,
//! attributes, shape rule (generic over [`Dim`], so the `graph!` macro runs it over symbolic dims at
//! expansion and the runtime over concrete dims), CPU reference, layout policy and cuDNN lowering.
//!
//! The list below is the only place that names every family: `families!` (in `list.rs`) declares
//! each folder's module and generates [`Op`], [`Family`], [`lookup`], [`all_names`] and every
//! method of `Op` from it, each delegating to the family's `OpFamily` impl (`family.rs`), to its
//! `codec.rs` for the cudnn-frontend fields, or to its `lower.rs` for the cuDNN descriptors. Adding a family is one line here plus its folder
//! (`mod.rs` with its `OpFamily` impl, `codec.rs` with `read` and `write`, `lower.rs`). The
//! vocabulary the families are written in lives in sibling modules: `signature.rs` (ports,
//! attributes, [`OpSignature`]), `attrs.rs` (attribute checking, [`AttrError`]), `shape.rs`
//! ([`ShapeError`] and the broadcasting helpers) and `codec.rs` (what a family's cudnn-frontend
//! codec reads and writes).
//!
//! The macro, the builder API and the structural JSON all create ops the same way: by name and
//! attribute list through [`Op::from_call`], so a call written in `graph!` and the same call made at
//! run time produce the same [`Op`].

mod attrs;
pub(crate) mod codec;
mod family;
mod list;
mod shape;
mod signature;
mod window;

use crate::array::Array;
use crate::dim::{Dim, DimCx};
use crate::DataType;
pub use family::{FusionRule, RaggedPort};
use family::{LayoutPolicy, OpFamily};

pub(crate) use attrs::Attrs;
pub use attrs::{closest, AttrError};
pub(crate) use family::{ChannelsLast, OutputLayout};
pub use shape::{OutputMeta, ShapeError, ShapeErrorKind, StridedMeta, TensorMeta};
// `pointwise/lower.rs` reaches it here.
#[cfg(feature = "cudnn")]
pub(crate) use shape::normalize_axis;
pub use signature::{AttrKind, AttrSpec, AttrValue, Extents, OpSignature, PortSpec};
pub use window::{Window, WindowAttrs};

list::families! {
    /// Batched matrix product `C = A · B`.
    Matmul => matmul,
    /// Elementwise map with NumPy broadcasting.
    Pointwise(PointwiseMode) => pointwise,
    /// Reduction over chosen dims (reduced dims become 1).
    Reduction(ReductionMode) => reduction,
    /// A normalization (layer, RMS, batch, instance norm, their backward ops, genstats).
    Norm(NormKind) => norm,
    /// Batch norm's statistics finalized from per-channel sums (`genstats`'s).
    BnFinalize => bn_finalize,
    /// Scaled dot-product attention, forward or backward.
    Sdpa(SdpaPass) => sdpa,
    /// A convolution: forward, data gradient or filter gradient.
    Conv(ConvKind) => conv,
    /// Pooling (max or average), optionally with the maximum's index.
    Resample => resample,
    /// A layout op: a view (reshape, transpose, slice) or a concatenation.
    Layout(LayoutKind) => layout,
}

pub use conv::ConvMode;
pub use norm::{NormMode, NormPhase};
pub use resample::ResampleMode;
pub use sdpa::{Alignment, Implementation};

/// The closest known op name to a misspelled one, if any is close.
pub fn suggest(name: &str) -> Option<&'static str> {
    closest(name, all_names())
}

impl Op {
    /// Builds an op from a call: its name and its attributes, checked against the signature.
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::ops::{Op, AttrValue};
    /// let op = Op::from_call("relu", &[("upper_clip".into(), AttrValue::Float(6.0))]).unwrap();
    /// assert_eq!(op.call_name(), "relu");
    /// assert!(Op::from_call("rleu", &[]).unwrap_err().to_string().contains("did you mean `relu`?"));
    /// ```
    ///
    /// A concatenation built this way has two inputs; [`Op::from_call_with_inputs`] gives the
    /// count, as `graph!`, the builder and the JSON reader do.
    pub fn from_call(name: &str, attrs: &[(String, AttrValue)]) -> Result<Op, AttrError> {
        let inputs = lookup(name).map_or(0, |sig| sig.inputs.len());
        Self::from_call_with_inputs(name, attrs, inputs)
    }

    /// The call name of this op (inverse of [`Op::from_call`]).
    pub fn call_name(&self) -> &'static str {
        self.signature().name
    }

    /// Where this op's output is its input's memory described again (reshape, transpose,
    /// slice): Y's strides from X's dims and strides and Y's dims ([`Layout::view_strides`],
    /// for concrete and symbolic dims alike), or the error of a reshape that no strides of that
    /// memory express. `None` for an op that writes its output.
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::ops::{AttrValue, Op};
    /// let slice = Op::from_call(
    ///     "slice",
    ///     &[("start".into(), AttrValue::IntList(vec![0, 4])), ("limit".into(), AttrValue::IntList(vec![2, 8]))],
    /// )
    /// .unwrap();
    /// // Columns 4..8 of a packed [2, 12]: rows keep their stride of 12.
    /// assert_eq!(slice.view_strides(&[2i64, 12], &[12, 1], &[2, 4]).unwrap().unwrap(), vec![12, 1]);
    /// // Merging them again is no view of that memory.
    /// let reshape = Op::from_call("reshape", &[("shape".into(), AttrValue::IntList(vec![8]))]).unwrap();
    /// assert!(reshape.view_strides(&[2i64, 4], &[12, 1], &[8]).unwrap().is_err());
    /// assert!(Op::from_call("relu", &[]).unwrap().view_strides(&[2i64], &[1], &[2]).is_none());
    /// ```
    pub fn view_strides<D: Dim>(
        &self,
        x_dims: &[D],
        x_strides: &[D],
        y_dims: &[D],
    ) -> Option<Result<Vec<D>, ShapeError>> {
        match self {
            Op::Layout(layout) if self.is_view() => Some(layout.view_strides(x_dims, x_strides, y_dims)),
            _ => None,
        }
    }

    /// Whether this op's output is its input's memory described again (reshape, transpose,
    /// slice), so that [`Op::view_strides`] gives its strides.
    pub fn is_view(&self) -> bool {
        matches!(self, Op::Layout(layout) if layout.is_view())
    }

    /// Whether this op is a view that reorders all of its input's dims and nothing else (a
    /// transpose). The backend may store a computed tensor read only through such a view in the
    /// order that makes a reshape of the view packed (attention's O stored BSHD, so that
    /// `reshape(transpose(o))` merges its heads), which no other view allows.
    pub fn is_reordering_view(&self) -> bool {
        matches!(self, Op::Layout(Layout::Transpose { .. }))
    }

    /// Whether the `bool` its shape rule forces may be stored as 0 or 1 in a float output
    /// instead: a comparison's, which cuDNN's pointwise engines write so (cudnn-frontend writes
    /// `cmp_gt` into an `f32` tensor). cuDNN 9.19 plans no logical op into a float output
    /// (heuristics propose no engine), so those stay `bool`. [`output_type_ok`] applies it.
    pub fn stores_bool_as_float(&self) -> bool {
        matches!(self, Op::Pointwise(p) if p.mode.is_comparison())
    }
}

/// Whether an output declared `declared` may hold what its op produces, `produced` being the
/// type the op's shape rule forces: that type, or, where the op
/// [stores its `bool` as a float](Op::stores_bool_as_float), 0 or 1 in an `f64`, `f32`, `f16` or
/// `bf16` tensor. `graph!`'s checker, the builder and [`crate::Graph::validate`] all ask this.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::ops::output_type_ok;
/// use cudnn_graph::DataType;
/// assert!(output_type_ok(DataType::Bool, DataType::F32, true));
/// assert!(!output_type_ok(DataType::Bool, DataType::F32, false));
/// assert!(!output_type_ok(DataType::Bool, DataType::I32, true));
/// ```
pub fn output_type_ok(produced: DataType, declared: DataType, bool_as_float: bool) -> bool {
    declared == produced
        || (bool_as_float
            && produced == DataType::Bool
            && matches!(declared, DataType::F64 | DataType::F32 | DataType::F16 | DataType::BF16))
}

impl Op {
    /// [`ShapeErrorKind::Arity`] unless `found` inputs are as many as [`Op::inputs`] lists.
    fn check_arity(&self, found: usize) -> Result<(), ShapeError> {
        let expected = self.inputs().len();
        if found == expected {
            return Ok(());
        }
        Err(ShapeError::general(ShapeErrorKind::Arity { op: self.call_name(), expected, found }))
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
                        AttrKind::Dims => AttrValue::IntList(vec![1]),
                        AttrKind::Indices => AttrValue::IntList(vec![0]),
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

    #[test]
    fn positional_inputs_follow_the_family() {
        assert_eq!(lookup("concatenate").unwrap().input(5).map(|p| p.name), Some("X[5]"));
        assert_eq!(lookup("matmul").unwrap().input(1).map(|p| p.name), Some("B"));
        assert_eq!(lookup("matmul").unwrap().input(2), None);
    }

    #[test]
    fn reference_with_a_wrong_input_count_is_an_arity_error() {
        let op = Op::from_call("matmul", &[]).unwrap();
        let a = Array::zeros(&[1, 2, 2]);
        let e = op.reference(&[&a]).unwrap_err();
        assert_eq!(*e.kind, ShapeErrorKind::Arity { op: "matmul", expected: 2, found: 1 });
    }

    #[test]
    fn every_family_has_tags_and_every_tag_one_family() {
        let tags: Vec<&str> = frontend_tags().collect();
        let mut unique = tags.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), tags.len(), "{tags:?}");
        for (family, tags) in tags_by_family() {
            assert!(!tags.is_empty(), "family {family} has no cudnn-frontend tag");
        }
    }
}
