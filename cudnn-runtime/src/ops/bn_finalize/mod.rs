//! `bn_finalize`: batch norm's statistics finalized from per-channel sums, as cudnn-frontend's
//! `bn_finalize` (`node/bn_finalize.h`, tag `BN_FINALIZE`) and cuDNN's
//! `CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR` define it. It is the second half of
//! a split batch norm: `genstats` (fused after a convolution) sums each channel's values and
//! squares, and `bn_finalize` turns those sums into the statistics and the per-channel affine map
//! that a following `y = eq_scale · x + eq_bias` applies.
//!
//! ```text
//! let (eq_scale, eq_bias, mean, inv_var, next_mean, next_var) =
//!     bn_finalize(sum, sq_sum, scale, bias, running_mean, running_var, 1e-5, 0.1, 2048);
//! ```
//!
//! | port | what |
//! | --- | --- |
//! | SUM, SQ_SUM | `Σx`, `Σx²` per channel over the `ACCUM_COUNT` elements of the channel |
//! | SCALE, BIAS | batch norm's γ and β |
//! | PREV_RUNNING_MEAN, PREV_RUNNING_VAR | the running statistics before this batch |
//! | EPSILON, MOMENTUM | numbers (by-value scalars of the compute type) or tensors whose dims are all 1 |
//! | ACCUM_COUNT | the number of elements each sum ran over (N·H·W): a number, which becomes an `i64` by-value scalar as cudnn-frontend's `graph.tensor(int64_t)`, or an `i64` tensor whose dims are all 1 |
//! | → EQ_SCALE, EQ_BIAS | `scale · inv_var`, `bias − mean · eq_scale` |
//! | → MEAN, INV_VARIANCE | the saved statistics batch norm's backward reads |
//! | → NEXT_RUNNING_MEAN, NEXT_RUNNING_VAR | the running statistics after this batch |
//!
//! Shape rule: SUM is per channel, `[1, C, 1, ...]` (rank ≥ 2, dim 1 the channel, every other dim
//! 1); SQ_SUM, SCALE, BIAS and the running statistics have SUM's dims, and so has every output;
//! EPSILON, MOMENTUM and ACCUM_COUNT have SUM's rank and every dim 1. The per-channel tensors and
//! outputs are `f32` (cuDNN computes in `f32`, cudnn-frontend's math precision), EPSILON and
//! MOMENTUM `f32` or `f64`, ACCUM_COUNT `i64`. cudnn-frontend makes the running statistics
//! optional; here they are required, as for `batchnorm`.
//!
//! The arithmetic is in `reference.rs`, the lowering in `lower.rs`, the JSON in `codec.rs`.

use serde::{Deserialize, Serialize};

pub(crate) mod codec;
#[cfg(feature = "cudnn")]
pub(crate) mod lower;
mod reference;

use super::attrs::{AttrError, Attrs};
use super::family::{ChannelsLast, FusionRule, Inferred, LayoutPolicy, OpFamily, OutputLayout};
use super::shape::{OutputMeta, ShapeError, ShapeErrorKind, TensorMeta};
use super::signature::{with_running_stats, AttrSpec, OpSignature, PortSpec};
use super::Family;
use crate::array::Array;
use crate::dim::{shape_string, Dim, DimCx};
use crate::DataType;

/// The call name.
pub const NAME: &str = "bn_finalize";

const INPUTS: &[PortSpec] = with_running_stats![
    PortSpec::tensor("SUM"), PortSpec::tensor("SQ_SUM");
    // cudnn-frontend's `graph.tensor(int64_t)`: an int64 by-value scalar.
    PortSpec::scalar_of("ACCUM_COUNT", DataType::I64)
];

const OUTPUTS: &[&str] = &["EQ_SCALE", "EQ_BIAS", "MEAN", "INV_VARIANCE", "NEXT_RUNNING_MEAN", "NEXT_RUNNING_VAR"];

const ATTRS: &[AttrSpec] = &[];

/// The signature of `bn_finalize`.
pub fn signature() -> OpSignature {
    OpSignature { name: NAME, family: Family::BnFinalize, inputs: INPUTS, outputs: OUTPUTS, attrs: ATTRS }
}

/// Batch norm's statistics finalized from per-channel sums (cuDNN's
/// `CUDNN_BN_FINALIZE_STATISTICS_TRAINING`). It has no attributes: epsilon, momentum and the
/// element count are ports.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::ops::Op;
/// let op = Op::from_call("bn_finalize", &[]).unwrap();
/// assert_eq!(op.outputs(), ["EQ_SCALE", "EQ_BIAS", "MEAN", "INV_VARIANCE", "NEXT_RUNNING_MEAN", "NEXT_RUNNING_VAR"]);
/// assert_eq!(op.inputs()[8].name, "ACCUM_COUNT");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BnFinalize {}

/// What a port takes, as the shape rule checks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A per-channel `f32` tensor of SUM's dims.
    PerChannel,
    /// A floating-point scalar (every dim 1).
    Float,
    /// An `i64` scalar (every dim 1).
    Count,
}

fn role(port: &str) -> Role {
    match port {
        "EPSILON" | "MOMENTUM" => Role::Float,
        "ACCUM_COUNT" => Role::Count,
        _ => Role::PerChannel,
    }
}

/// `[1, C, 1, ...]` for dims `[.., C, ..]`.
fn per_channel<D: Dim>(dims: &[D]) -> Vec<D> {
    dims.iter().enumerate().map(|(i, d)| if i == 1 { d.clone() } else { D::lit(1) }).collect()
}

impl OpFamily for BnFinalize {
    super::family::one_op!(signature());

    const TAGS: &'static [&'static str] = &[codec::TAG];

    fn from_attrs(_kind: (), _attrs: &Attrs<'_>, _inputs: usize) -> Result<Self, AttrError> {
        Ok(BnFinalize {})
    }

    /// The shape and dtype rule (see the module docs): six outputs of SUM's dims, all `f32`.
    fn infer<D: Dim>(&self, inputs: &[TensorMeta<D>], cx: &mut impl DimCx<D>) -> Inferred<D> {
        let port_error = |i: usize, expected: String, found: String| {
            ShapeError::at(i, ShapeErrorKind::PortShape { op: NAME, port: INPUTS[i].name, expected, found })
        };
        let sum = &inputs[0];
        let rank = sum.dims.len();
        if rank < 2 {
            return Err(ShapeError::at(
                0,
                ShapeErrorKind::Rank {
                    op: NAME,
                    port: "SUM",
                    expected: "rank >= 2 ([1, C, 1, ...]: dim 1 is the channel)".into(),
                    found: rank,
                    shape: shape_string(&sum.dims),
                },
            ));
        }
        let one = D::lit(1);
        if !sum.dims.iter().enumerate().all(|(axis, d)| axis == 1 || cx.require_eq(d, &one)) {
            let channels = shape_string(&per_channel(&sum.dims));
            return Err(port_error(
                0,
                format!("per channel, {channels} (dim 1 the channel, every other dim 1)"),
                shape_string(&sum.dims),
            ));
        }
        for (i, (spec, t)) in INPUTS.iter().zip(inputs).enumerate() {
            let role = role(spec.name);
            let (takes, expected) = match role {
                Role::PerChannel => (t.dtype == DataType::F32, "f32"),
                Role::Float => (matches!(t.dtype, DataType::F32 | DataType::F64), "f32 or f64"),
                Role::Count => (t.dtype == DataType::I64, "i64 (a count, as cudnn-frontend's int64 scalar)"),
            };
            if !takes {
                return Err(ShapeError::at(
                    i,
                    ShapeErrorKind::DType { op: NAME, port: spec.name, found: t.dtype, expected },
                ));
            }
            if t.dims.len() != rank {
                return Err(ShapeError::at(
                    i,
                    ShapeErrorKind::Rank {
                        op: NAME,
                        port: spec.name,
                        expected: format!("the rank of port SUM ({rank})"),
                        found: t.dims.len(),
                        shape: shape_string(&t.dims),
                    },
                ));
            }
            let ok = match role {
                Role::PerChannel => sum.dims.iter().zip(&t.dims).all(|(want, found)| cx.require_eq(want, found)),
                Role::Float | Role::Count => t.dims.iter().all(|d| cx.require_eq(d, &one)),
            };
            if !ok {
                let expected = match role {
                    Role::PerChannel => format!("{} (the dims of port SUM)", shape_string(&sum.dims)),
                    Role::Float => format!(
                        "a scalar: a number such as `1e-5`, or a tensor {} (every dim 1)",
                        shape_string(&vec![one.clone(); rank])
                    ),
                    Role::Count => format!(
                        "a scalar: a number (the element count of each channel's sums), or an i64 tensor {} \
                         (every dim 1)",
                        shape_string(&vec![one.clone(); rank])
                    ),
                };
                return Err(port_error(i, expected, shape_string(&t.dims)));
            }
        }
        Ok(OUTPUTS.iter().map(|_| OutputMeta { dims: sum.dims.clone(), dtype: Some(DataType::F32), reason: None }).collect())
    }

    fn reference(&self, inputs: &[&Array]) -> Vec<Array> {
        reference::finalize(inputs).into()
    }

    fn fusion(&self) -> FusionRule {
        FusionRule::ALONE
    }

    /// Packed, or SUM's layout where it is set: cudnn-frontend lays its outputs out NHWC, which
    /// for `[1, C, 1, 1]` is the same memory as NCHW.
    fn layout_policy(&self) -> LayoutPolicy<'_> {
        LayoutPolicy { channels_last: ChannelsLast::No, outputs: OutputLayout::LikeInput }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dim::{Concrete, SymDim, Symbolic};
    use crate::ops::Op;

    fn meta(dims: &[i64], dtype: DataType) -> TensorMeta<i64> {
        TensorMeta { dims: dims.to_vec(), dtype }
    }

    /// Valid inputs for `c` channels at rank 4.
    fn inputs(c: i64) -> Vec<TensorMeta<i64>> {
        let ch = meta(&[1, c, 1, 1], DataType::F32);
        let one = meta(&[1, 1, 1, 1], DataType::F32);
        let mut v = vec![ch; 6];
        v.extend([one.clone(), one, meta(&[1, 1, 1, 1], DataType::I64)]);
        v
    }

    fn op() -> Op {
        Op::from_call(NAME, &[]).unwrap()
    }

    #[test]
    fn six_per_channel_f32_outputs() {
        let out = op().infer(&inputs(32), &mut Concrete).unwrap();
        assert_eq!(out.len(), 6);
        assert!(out.iter().all(|o| o.dims == [1, 32, 1, 1] && o.dtype == Some(DataType::F32)));
    }

    #[test]
    fn errors_name_the_port_and_shape() {
        let mut ins = inputs(32);
        ins[0] = meta(&[4, 32, 1, 1], DataType::F32);
        let e = op().infer(&ins, &mut Concrete).unwrap_err();
        assert_eq!(e.arg, Some(0));
        assert_eq!(
            e.to_string(),
            "`bn_finalize` port SUM must be per channel, [1, 32, 1, 1] (dim 1 the channel, every other dim 1), \
             found [4, 32, 1, 1]"
        );
        let mut ins = inputs(32);
        ins[5] = meta(&[1, 16, 1, 1], DataType::F32);
        let e = op().infer(&ins, &mut Concrete).unwrap_err();
        assert_eq!(e.arg, Some(5));
        assert_eq!(
            e.to_string(),
            "`bn_finalize` port PREV_RUNNING_VAR must be [1, 32, 1, 1] (the dims of port SUM), found [1, 16, 1, 1]"
        );
        let mut ins = inputs(32);
        ins[6] = meta(&[1, 32, 1, 1], DataType::F32);
        let e = op().infer(&ins, &mut Concrete).unwrap_err();
        assert!(e.to_string().starts_with("`bn_finalize` port EPSILON must be a scalar"), "{e}");
        let mut ins = inputs(32);
        ins[2] = meta(&[1, 32, 1], DataType::F32);
        let e = op().infer(&ins, &mut Concrete).unwrap_err();
        assert_eq!(e.to_string(), "`bn_finalize` port SCALE needs the rank of port SUM (4), found rank 3 ([1, 32, 1])");
        let e = op().infer(&[meta(&[32], DataType::F32)], &mut Concrete).unwrap_err();
        assert!(matches!(*e.kind, ShapeErrorKind::Arity { expected: 9, found: 1, .. }), "{e}");
    }

    #[test]
    fn types_are_checked_per_port() {
        let mut ins = inputs(8);
        ins[1].dtype = DataType::F16;
        let e = op().infer(&ins, &mut Concrete).unwrap_err();
        assert_eq!(e.to_string(), "`bn_finalize` port SQ_SUM does not take f16; it takes f32");
        let mut ins = inputs(8);
        ins[8].dtype = DataType::F32;
        let e = op().infer(&ins, &mut Concrete).unwrap_err();
        assert_eq!(e.arg, Some(8));
        assert!(e.to_string().contains("port ACCUM_COUNT does not take f32; it takes i64"), "{e}");
        let mut ins = inputs(8);
        ins[7].dtype = DataType::F64;
        assert!(op().infer(&ins, &mut Concrete).is_ok());
    }

    #[test]
    fn symbolic_channels_defer() {
        let p = |s: &str| SymDim::Param(s.into());
        let l = SymDim::Lit;
        let m = |dims: Vec<SymDim>, dtype| TensorMeta { dims, dtype };
        let ch = |c: SymDim| m(vec![l(1), c, l(1), l(1)], DataType::F32);
        let one = m(vec![l(1); 4], DataType::F32);
        let mut ins = vec![ch(p("C")), ch(p("C")), ch(l(64)), ch(p("C")), ch(p("C")), ch(p("C"))];
        ins.extend([one.clone(), one, m(vec![l(1); 4], DataType::I64)]);
        let mut cx = Symbolic::default();
        let out = op().infer(&ins, &mut cx).unwrap();
        assert_eq!(out[0].dims, vec![l(1), p("C"), l(1), l(1)]);
        assert_eq!(cx.deferred, vec![(p("C"), l(64))]);
        ins[3] = ch(p("K"));
        let e = op().infer(&ins, &mut Symbolic::default()).unwrap_err();
        assert!(e.to_string().contains("port BIAS must be [1, C, 1, 1]"), "{e}");
    }

    #[test]
    fn the_count_port_takes_an_i64_number() {
        let sig = signature();
        assert_eq!(sig.inputs[8].scalar_data_type(DataType::F32), DataType::I64);
        assert_eq!(sig.inputs[6].scalar_data_type(DataType::F32), DataType::F32);
        assert!(!sig.inputs[0].scalar_ok);
    }
}
