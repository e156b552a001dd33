//! Reductions: `reduce_sum(x, dims = [1])`, `reduce_max`, `reduce_min`, `reduce_mean`,
//! `reduce_amax`, `reduce_mul`, `reduce_mul_no_zeros`, `reduce_norm1`, `reduce_norm2`.
//!
//! Shape rule: the output has the input's rank, with every dim in `dims` (negative counts from the
//! end) set to 1. `dims` must be non-empty, in range and without repeats. Input and output are
//! numeric (not `bool`).

use serde::{Deserialize, Serialize};

pub(crate) mod codec;
#[cfg(feature = "cudnn")]
pub(crate) mod lower;

use super::signature::{AttrKind, AttrSpec, AttrValue, OpSignature, PortSpec};
use super::attrs::{AttrError, Attrs};
use super::shape::{normalize_axis, OutputMeta, ShapeError, ShapeErrorKind, TensorMeta};
use super::family::{FusionRule, Inferred, LayoutPolicy, OpFamily};
use super::Family;
use crate::dim::{Dim, DimCx};
use crate::array::Array;
use crate::DataType;

const INPUTS: &[PortSpec] = &[PortSpec::tensor("X")];
const OUTPUTS: &[&str] = &["Y"];
const ATTRS: &[AttrSpec] = &[AttrSpec { name: "dims", kind: AttrKind::IntList, required: true }];

macro_rules! reduction_modes {
    ($($variant:ident = $name:literal, $cudnn:literal, $value:literal;)*) => {
        /// A cuDNN reduction mode (`cudnnReduceTensorOp_t`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum ReductionMode {
            $(
                #[doc = concat!("`", $name, "` (`CUDNN_REDUCE_TENSOR_", $cudnn, "`)")]
                #[serde(rename = $cudnn)]
                $variant,
            )*
        }

        impl ReductionMode {
            /// Every mode.
            pub const ALL: &'static [ReductionMode] = &[$(ReductionMode::$variant),*];

            /// The DSL call name.
            pub const fn name(self) -> &'static str {
                match self { $(ReductionMode::$variant => $name),* }
            }

            /// cuDNN's spelling without the `CUDNN_REDUCE_TENSOR_` prefix.
            pub const fn cudnn_name(self) -> &'static str {
                match self { $(ReductionMode::$variant => $cudnn),* }
            }

            /// The value of `cudnnReduceTensorOp_t`.
            pub const fn cudnn_value(self) -> u32 {
                match self { $(ReductionMode::$variant => $value),* }
            }
        }
    };
}

reduction_modes! {
    Sum = "reduce_sum", "ADD", 0;
    Mul = "reduce_mul", "MUL", 1;
    Min = "reduce_min", "MIN", 2;
    Max = "reduce_max", "MAX", 3;
    Amax = "reduce_amax", "AMAX", 4;
    Mean = "reduce_mean", "AVG", 5;
    Norm1 = "reduce_norm1", "NORM1", 6;
    Norm2 = "reduce_norm2", "NORM2", 7;
    MulNoZeros = "reduce_mul_no_zeros", "MUL_NO_ZEROS", 8;
}

impl ReductionMode {
    /// Looks up a mode by its DSL call name.
    pub fn from_name(name: &str) -> Option<ReductionMode> {
        ReductionMode::ALL.iter().copied().find(|m| m.name() == name)
    }

    /// The call signature.
    pub fn signature(self) -> OpSignature {
        OpSignature {
            name: self.name(),
            family: Family::Reduction(self),
            inputs: INPUTS,
            outputs: OUTPUTS,
            attrs: ATTRS,
        }
    }
}

/// A reduction over `dims`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reduction {
    /// The mode.
    pub mode: ReductionMode,
    /// The reduced dims, as written (negative counts from the end).
    pub dims: Vec<i64>,
}

impl Reduction {
    /// The reduced axes, normalised and sorted.
    pub fn axes(&self, rank: usize) -> Result<Vec<usize>, ShapeErrorKind> {
        let op = self.mode.name();
        let mut axes = Vec::with_capacity(self.dims.len());
        for &d in &self.dims {
            let a = normalize_axis(op, d, rank)?;
            if axes.contains(&a) {
                return Err(ShapeErrorKind::Axis { op, axis: d, rank });
            }
            axes.push(a);
        }
        if axes.is_empty() {
            return Err(ShapeErrorKind::Axis { op, axis: -1, rank: 0 });
        }
        axes.sort_unstable();
        Ok(axes)
    }
}

impl OpFamily for Reduction {
    type Kind = ReductionMode;

    const KINDS: &'static [ReductionMode] = ReductionMode::ALL;

    const TAGS: &'static [&'static str] = &[codec::TAG];

    fn signature_of(kind: ReductionMode) -> OpSignature {
        kind.signature()
    }

    fn kind(&self) -> ReductionMode {
        self.mode
    }

    fn from_attrs(mode: ReductionMode, a: &Attrs<'_>, _inputs: usize) -> Result<Self, AttrError> {
        Ok(Reduction { mode, dims: a.int_list("dims").unwrap_or_default() })
    }

    fn call_attrs(&self) -> Vec<(String, AttrValue)> {
        vec![("dims".into(), AttrValue::IntList(self.dims.clone()))]
    }

    fn infer<D: Dim>(&self, inputs: &[TensorMeta<D>], _cx: &mut impl DimCx<D>) -> Inferred<D> {
        let x = &inputs[0];
        if x.dtype == DataType::Bool {
            return Err(ShapeError::at(
                0,
                ShapeErrorKind::DType {
                    op: self.mode.name(),
                    port: "X",
                    found: x.dtype,
                    expected: "a numeric type (not bool)",
                },
            ));
        }
        let axes = self.axes(x.dims.len()).map_err(ShapeError::general)?;
        let dims =
            x.dims.iter().enumerate().map(|(i, d)| if axes.contains(&i) { D::lit(1) } else { d.clone() }).collect();
        Ok(vec![OutputMeta { dims, dtype: None, reason: None }])
    }

    fn reference(&self, inputs: &[&Array]) -> Vec<Array> {
        let x = inputs[0];
        let axes = self.axes(x.dims.len()).unwrap_or_default();
        let out_dims: Vec<i64> =
            x.dims.iter().enumerate().map(|(i, d)| if axes.contains(&i) { 1 } else { *d }).collect();
        let init = match self.mode {
            ReductionMode::Mul | ReductionMode::MulNoZeros => 1.0,
            ReductionMode::Min => f64::INFINITY,
            ReductionMode::Max => f64::NEG_INFINITY,
            _ => 0.0,
        };
        let mut out = Array { dims: out_dims.clone(), data: vec![init; out_dims.iter().product::<i64>() as usize] };
        let out_strides = crate::dim::packed_strides(&out_dims);
        for (flat, &v) in x.data.iter().enumerate() {
            let idx = Array::unravel(flat as i64, &x.dims);
            let o: i64 =
                idx.iter().enumerate().map(|(i, &j)| if axes.contains(&i) { 0 } else { j * out_strides[i] }).sum();
            let acc = &mut out.data[o as usize];
            *acc = match self.mode {
                ReductionMode::Sum | ReductionMode::Mean => *acc + v,
                ReductionMode::Mul => *acc * v,
                ReductionMode::MulNoZeros => {
                    if v == 0.0 {
                        *acc
                    } else {
                        *acc * v
                    }
                }
                ReductionMode::Min => acc.min(v),
                ReductionMode::Max => acc.max(v),
                ReductionMode::Amax => acc.max(v.abs()),
                ReductionMode::Norm1 => *acc + v.abs(),
                ReductionMode::Norm2 => *acc + v * v,
            };
        }
        let count: i64 = axes.iter().map(|&a| x.dims[a]).product();
        for v in &mut out.data {
            match self.mode {
                ReductionMode::Mean => *v /= count as f64,
                ReductionMode::Norm2 => *v = v.sqrt(),
                _ => {}
            }
        }
        vec![out]
    }

    fn fusion(&self) -> FusionRule {
        // Ends a matmul's or convolution's epilogue, or a chain of elementwise ops of its own.
        FusionRule::Anchor { prologue: true, epilogue: false, follows: true }
    }

    fn layout_policy(&self) -> LayoutPolicy<'_> {
        LayoutPolicy::PACKED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn red(mode: ReductionMode, dims: Vec<i64>) -> Reduction {
        Reduction { mode, dims }
    }

    #[test]
    fn shapes() {
        let x = TensorMeta { dims: vec![2i64, 3, 4], dtype: DataType::F32 };
        let dims = |r: Reduction| {
            r.infer(std::slice::from_ref(&x), &mut crate::dim::Concrete).map(|mut o| o.remove(0).dims)
        };
        assert_eq!(dims(red(ReductionMode::Sum, vec![-1])).unwrap(), vec![2, 3, 1]);
        assert_eq!(dims(red(ReductionMode::Sum, vec![0, 2])).unwrap(), vec![1, 3, 1]);
        assert!(dims(red(ReductionMode::Sum, vec![3])).is_err());
        assert!(dims(red(ReductionMode::Sum, vec![1, -2])).is_err());
        assert!(dims(red(ReductionMode::Sum, vec![])).is_err());
    }

    #[test]
    fn every_mode_against_direct_formulas() {
        let x = Array::from_fn(&[2, 3], |i| [1.5, -2.0, 0.0, 3.0, -0.5, 4.0][i]);
        let rows = |m| red(m, vec![1]).reference(&[&x]).remove(0).data;
        assert_eq!(rows(ReductionMode::Sum), vec![-0.5, 6.5]);
        assert_eq!(rows(ReductionMode::Mean), vec![-0.5 / 3.0, 6.5 / 3.0]);
        assert_eq!(rows(ReductionMode::Mul), vec![0.0, -6.0]);
        assert_eq!(rows(ReductionMode::MulNoZeros), vec![-3.0, -6.0]);
        assert_eq!(rows(ReductionMode::Min), vec![-2.0, -0.5]);
        assert_eq!(rows(ReductionMode::Max), vec![1.5, 4.0]);
        assert_eq!(rows(ReductionMode::Amax), vec![2.0, 4.0]);
        assert_eq!(rows(ReductionMode::Norm1), vec![3.5, 7.5]);
        assert_eq!(rows(ReductionMode::Norm2), vec![6.25f64.sqrt(), 25.25f64.sqrt()]);
        assert_eq!(red(ReductionMode::Sum, vec![0]).reference(&[&x]).remove(0).data, vec![4.5, -2.5, 4.0]);
    }
}
