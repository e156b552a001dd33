//! `matmul(a, b)`: batched matrix product, `C[..., m, n] = Σ_k A[..., m, k] · B[..., k, n]`.
//!
//! Shape rule (cudnn-frontend's, plus a check of K that it leaves to cuDNN): A and B have the same
//! rank ≥ 2; C has A's rank with `C[-2] = A[-2]`, `C[-1] = B[-1]`; batch dims broadcast (NumPy);
//! `A[-1]` must equal `B[-2]`. Inputs are floating point or `i8`.
//!
//! fp8 (cuDNN 9.19 on Hopper, deviceless with the H200's properties): A and B are both fp8, in any
//! of the four `fp8_e4m3`/`fp8_e5m2` pairings (an fp8 operand beside a bf16 one has no engine),
//! and the graph computes in f32 (an f16 compute type has no engine). The scaled fp8 matmul of
//! cudnn-frontend is this op followed by pointwise `mul`s by the descales (see `docs/ops.md`).

use serde::{Deserialize, Serialize};

pub(crate) mod codec;
#[cfg(feature = "cudnn")]
pub(crate) mod lower;

use super::signature::{AttrSpec, OpSignature, PortSpec};
use super::attrs::{AttrError, Attrs};
use super::shape::{broadcast, OutputMeta, ShapeError, ShapeErrorKind, TensorMeta};
use super::family::{FusionRule, Inferred, LayoutPolicy, OpFamily};
use super::Family;
use crate::dim::{shape_string, Dim, DimCx};
use crate::array::Array;
use crate::DataType;

/// The call name.
pub const NAME: &str = "matmul";

const INPUTS: &[PortSpec] = &[PortSpec::tensor("A"), PortSpec::tensor("B")];
const OUTPUTS: &[&str] = &["C"];
const ATTRS: &[AttrSpec] = &[];

/// The signature of `matmul`.
pub fn signature() -> OpSignature {
    OpSignature { name: NAME, family: Family::Matmul, inputs: INPUTS, outputs: OUTPUTS, attrs: ATTRS }
}

/// A batched matrix product. It has no attributes of its own; its compute type is the node's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Matmul {}

fn is_fp8(dtype: DataType) -> bool {
    matches!(dtype, DataType::Fp8E4M3 | DataType::Fp8E5M2)
}

fn takes(dtype: DataType) -> bool {
    matches!(
        dtype,
        DataType::F16 | DataType::BF16 | DataType::F32 | DataType::Fp8E4M3 | DataType::Fp8E5M2 | DataType::I8
    )
}

/// The operands' types: each one cuDNN's matmul takes, and fp8 only beside fp8.
fn check_types(a: DataType, b: DataType) -> Result<(), ShapeError> {
    for (i, t) in [a, b].into_iter().enumerate() {
        if !takes(t) {
            return Err(ShapeError::at(
                i,
                ShapeErrorKind::DType {
                    op: NAME,
                    port: INPUTS[i].name,
                    found: t,
                    expected: "f16, bf16, f32, fp8 or i8",
                },
            ));
        }
    }
    // fp8 only beside fp8: cuDNN 9.19 plans no matmul of an fp8 operand and another type.
    if is_fp8(a) != is_fp8(b) {
        let (i, expected) = if is_fp8(a) {
            (1, "fp8_e4m3 or fp8_e5m2 beside an fp8 port A (cuDNN has no matmul of fp8 and another type: quantize B to fp8 too)")
        } else {
            (0, "fp8_e4m3 or fp8_e5m2 beside an fp8 port B (cuDNN has no matmul of fp8 and another type: quantize A to fp8 too)")
        };
        return Err(ShapeError::at(
            i,
            ShapeErrorKind::DType { op: NAME, port: INPUTS[i].name, found: [a, b][i], expected },
        ));
    }
    Ok(())
}

impl OpFamily for Matmul {
    super::family::one_op!(signature());

    const TAGS: &'static [&'static str] = &[codec::TAG];

    fn from_attrs(_kind: (), _attrs: &Attrs<'_>, _inputs: usize) -> Result<Self, AttrError> {
        Ok(Matmul {})
    }

    fn infer<D: Dim>(&self, inputs: &[TensorMeta<D>], cx: &mut impl DimCx<D>) -> Inferred<D> {
        let (a, b) = (&inputs[0], &inputs[1]);
        check_types(a.dtype, b.dtype)?;
        if a.dims.len() < 2 {
            return Err(ShapeError::at(
                0,
                ShapeErrorKind::Rank {
                    op: NAME,
                    port: "A",
                    expected: "rank >= 2".into(),
                    found: a.dims.len(),
                    shape: shape_string(&a.dims),
                },
            ));
        }
        let r = a.dims.len();
        if b.dims.len() != r {
            return Err(ShapeError::at(
                1,
                ShapeErrorKind::Rank {
                    op: NAME,
                    port: "B",
                    expected: format!("the rank of port A ({r})"),
                    found: b.dims.len(),
                    shape: shape_string(&b.dims),
                },
            ));
        }
        let (a_k, b_k) = (&a.dims[r - 1], &b.dims[r - 2]);
        if !cx.require_eq(a_k, b_k) {
            return Err(ShapeError::at(
                1,
                ShapeErrorKind::Contraction {
                    a: shape_string(&a.dims),
                    b: shape_string(&b.dims),
                    a_k: a_k.to_string(),
                    b_k: b_k.to_string(),
                },
            ));
        }
        let mut dims = broadcast(NAME, &a.dims[..r - 2], &b.dims[..r - 2], 1, cx).map_err(|mut e| {
            // Report the full shapes, not the batch prefixes.
            if let ShapeErrorKind::Broadcast { left, right, .. } = e.kind.as_mut() {
                *left = shape_string(&a.dims);
                *right = shape_string(&b.dims);
            }
            e
        })?;
        dims.push(a.dims[r - 2].clone());
        dims.push(b.dims[r - 1].clone());
        Ok(vec![OutputMeta { dims, dtype: None, reason: None }])
    }

    fn compute_rule(&self, inputs: &[DataType], compute: DataType) -> Result<(), ShapeError> {
        // fp8 tensor cores accumulate in f32; cuDNN 9.19 has no engine for another compute type.
        match inputs.iter().position(|&d| is_fp8(d)) {
            Some(i) if compute != DataType::F32 => Err(ShapeError::at(
                i,
                ShapeErrorKind::Rule {
                    op: NAME,
                    rule: format!(
                        "an fp8 matmul (port {} is {}) computes in f32, but the graph's compute type is {compute}",
                        INPUTS[i].name, inputs[i]
                    ),
                },
            )),
            _ => Ok(()),
        }
    }

    /// `C = A · B` with batch broadcasting, accumulated in f64.
    fn reference(&self, inputs: &[&Array]) -> Vec<Array> {
        let (a, b) = (inputs[0], inputs[1]);
        let r = a.dims.len();
        let (m, k, n) = (a.dims[r - 2], a.dims[r - 1], b.dims[r - 1]);
        let batch: Vec<i64> = a.dims[..r - 2].iter().zip(&b.dims[..r - 2]).map(|(x, y)| *x.max(y)).collect();
        let mut dims = batch.clone();
        dims.extend([m, n]);
        let mut out = Array::zeros(&dims);
        let batch_strides = |t: &Array| -> Vec<i64> {
            let own = crate::dim::packed_strides(&t.dims);
            (0..r - 2).map(|i| if t.dims[i] == 1 && batch[i] != 1 { 0 } else { own[i] }).collect()
        };
        let (a_bs, b_bs) = (batch_strides(a), batch_strides(b));
        let batches: i64 = batch.iter().product();
        let (m, k, n) = (m as usize, k as usize, n as usize);
        for bi in 0..batches {
            let idx = Array::unravel(bi, &batch);
            let ao: usize = idx.iter().zip(&a_bs).map(|(i, s)| (*i * *s) as usize).sum();
            let bo: usize = idx.iter().zip(&b_bs).map(|(i, s)| (*i * *s) as usize).sum();
            let co = bi as usize * m * n;
            for i in 0..m {
                for j in 0..n {
                    let mut acc = 0.0f64;
                    for p in 0..k {
                        acc += a.data[ao + i * k + p] * b.data[bo + p * n + j];
                    }
                    out.data[co + i * n + j] = acc;
                }
            }
        }
        vec![out]
    }

    fn fusion(&self) -> FusionRule {
        // cuDNN's runtime-fusion engines: elementwise ops on A and B, and after C (bias,
        // activation, residual), with a reduction at the end.
        FusionRule::Anchor { prologue: true, epilogue: true, follows: false }
    }

    fn layout_policy(&self) -> LayoutPolicy<'_> {
        LayoutPolicy::PACKED
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dim::{Concrete, SymDim, Symbolic};
    use crate::ops::Op;

    fn meta<D: Dim>(dims: Vec<D>, dtype: DataType) -> TensorMeta<D> {
        TensorMeta { dims, dtype }
    }

    #[test]
    fn concrete_shapes() {
        let op = Op::Matmul(Matmul {});
        let out = op
            .infer(&[meta(vec![4, 1, 3, 5], DataType::F16), meta(vec![1, 2, 5, 7], DataType::F16)], &mut Concrete)
            .unwrap();
        assert_eq!(out[0].dims, vec![4, 2, 3, 7]);
        let e = op
            .infer(&[meta(vec![1, 3, 5], DataType::F16), meta(vec![1, 6, 7], DataType::F16)], &mut Concrete)
            .unwrap_err();
        assert_eq!(e.arg, Some(1));
        assert_eq!(
            e.to_string(),
            "matmul contraction dims differ: A is [1, 3, 5] and B is [1, 6, 7], so A[-1] = 5 must equal B[-2] = 6"
        );
        let e = op
            .infer(&[meta(vec![2, 3, 5], DataType::F16), meta(vec![3, 5, 7], DataType::F16)], &mut Concrete)
            .unwrap_err();
        assert!(e.to_string().contains("cannot broadcast [2, 3, 5] with [3, 5, 7]"), "{e}");
        let e = op
            .infer(&[meta(vec![3, 5], DataType::F16), meta(vec![1, 5, 7], DataType::F16)], &mut Concrete)
            .unwrap_err();
        assert!(e.to_string().contains("port B needs the rank of port A (2)"), "{e}");
        let e = op
            .infer(&[meta(vec![1, 3, 5], DataType::I64), meta(vec![1, 5, 7], DataType::F16)], &mut Concrete)
            .unwrap_err();
        assert_eq!(e.arg, Some(0));
    }

    #[test]
    fn symbolic_shapes() {
        let p = |s: &str| SymDim::Param(s.into());
        let op = Op::Matmul(Matmul {});
        let mut cx = Symbolic::default();
        let out = op
            .infer(
                &[
                    meta(vec![SymDim::Lit(1), p("M"), p("K")], DataType::BF16),
                    meta(vec![SymDim::Lit(1), SymDim::Lit(64), p("N")], DataType::BF16),
                ],
                &mut cx,
            )
            .unwrap();
        assert_eq!(out[0].dims, vec![SymDim::Lit(1), p("M"), p("N")]);
        assert_eq!(cx.deferred, vec![(p("K"), SymDim::Lit(64))]);
        let e = op
            .infer(
                &[
                    meta(vec![SymDim::Lit(1), p("M"), p("K")], DataType::BF16),
                    meta(vec![SymDim::Lit(1), p("J"), p("N")], DataType::BF16),
                ],
                &mut cx,
            )
            .unwrap_err();
        assert!(e.to_string().contains("A[-1] = K must equal B[-2] = J"), "{e}");
    }

    #[test]
    fn fp8_pairs_and_compute_type() {
        use DataType::{Fp8E4M3 as E4, Fp8E5M2 as E5, BF16, F16, F32};
        let op = Op::Matmul(Matmul {});
        let infer = |a, b| op.infer(&[meta(vec![1, 4, 8], a), meta(vec![1, 8, 2], b)], &mut Concrete);
        for (a, b) in [(E4, E4), (E4, E5), (E5, E4), (E5, E5)] {
            assert_eq!(infer(a, b).unwrap()[0].dims, vec![1, 4, 2]);
            assert!(op.check_compute(&[a, b], F32).is_ok());
            let e = op.check_compute(&[a, b], F16).unwrap_err();
            assert_eq!(e.arg, Some(0));
            assert!(e.to_string().contains("computes in f32, but the graph's compute type is f16"), "{e}");
        }
        let e = infer(E4, BF16).unwrap_err();
        assert_eq!(e.arg, Some(1));
        assert!(e.to_string().starts_with("`matmul` port B does not take bf16; it takes fp8_e4m3 or fp8_e5m2 beside an fp8 port A"), "{e}");
        let e = infer(F16, E5).unwrap_err();
        assert_eq!(e.arg, Some(0));
        assert!(e.to_string().contains("port A does not take f16"), "{e}");
        assert!(op.check_compute(&[BF16, BF16], F16).is_ok());
    }

    #[test]
    fn reference_broadcasts_batches() {
        let a = Array::from_fn(&[2, 2, 3], |i| (i as f64) * 0.5 - 1.0);
        let b = Array::from_fn(&[1, 3, 2], |i| (i as f64) + 1.0);
        let c = Matmul {}.reference(&[&a, &b]).remove(0);
        assert_eq!(c.dims, vec![2, 2, 2]);
        for batch in 0..2 {
            for i in 0..2 {
                for j in 0..2 {
                    let want: f64 = (0..3).map(|p| a.data[batch * 6 + i * 3 + p] * b.data[p * 2 + j]).sum();
                    assert_eq!(c.data[batch * 4 + i * 2 + j], want);
                }
            }
        }
    }
}
