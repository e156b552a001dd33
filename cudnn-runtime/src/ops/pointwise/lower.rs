//! cuDNN lowering of the pointwise modes: a `CUDNN_BACKEND_POINTWISE_DESCRIPTOR` (mode, math
//! precision and the mode's parameters) and a `CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR`
//! wiring the tensors, as cudnn-frontend's `PointwiseNode` does:
//!
//! - forward modes: `IN_0` → X, `IN_1` → B, `IN_2` → T (`binary_select`'s mask), `OUT_0` → Y;
//! - backward activations (`*_bwd`): `IN_0` → DY, `IN_1` → X, `OUT_0` → DX.
//!
//! Unset parameters take cuDNN's defaults spelled out (ReLU clips 0 and +max, slope 0; ELU alpha,
//! softplus and swish beta 1); both alphas are 1.

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendAttributeType_t as T;
use sys::cudnnBackendDescriptorType_t as K;

use super::{Pointwise, PointwiseMode};
use crate::ops::family::lowering::LowerCx;
use crate::cudnn::{rank_padding, CudnnError, LoweredOp};
use crate::ops::normalize_axis;
use crate::DataType;

/// The backward activations, whose ports are (dy, x) → dx.
fn is_activation_backward(mode: PointwiseMode) -> bool {
    use PointwiseMode as M;
    matches!(
        mode,
        M::ReluBwd
            | M::TanhBwd
            | M::SigmoidBwd
            | M::EluBwd
            | M::GeluBwd
            | M::SoftplusBwd
            | M::SwishBwd
            | M::GeluTanhBwd
    )
}

/// ReLU's upper clip: unset or infinite means "no clip", which cuDNN spells as the largest finite
/// value of the compute type.
fn relu_upper_clip(clip: Option<f64>, compute: DataType) -> f64 {
    let max = if compute == DataType::F32 { f64::from(f32::MAX) } else { f64::MAX };
    clip.map_or(max, |c| c.min(max))
}

pub(crate) fn lower(op: &Pointwise, cx: &mut LowerCx<'_, '_>) -> Result<LoweredOp, CudnnError> {
    let cx = cx.node;
    use PointwiseMode as M;
    let mut desc = cx.descriptor(K::CUDNN_BACKEND_POINTWISE_DESCRIPTOR)?;
    desc.set_enum(A::CUDNN_ATTR_POINTWISE_MODE, T::CUDNN_TYPE_POINTWISE_MODE, op.mode.cudnn_value())?;
    // The logical ops compute in cuDNN's boolean math precision: with the graph's f32 heuristics
    // propose no engine for them, alone or between comparisons and a select (measured deviceless
    // on cuDNN 9.19; cudnn-frontend sets BOOLEAN for its attention masks' LOGICAL_AND).
    let logical = matches!(op.mode, M::LogicalAnd | M::LogicalOr | M::LogicalNot);
    desc.set_data_type(A::CUDNN_ATTR_POINTWISE_MATH_PREC, if logical { DataType::Bool } else { cx.compute_type() })?;
    match op.mode {
        M::Relu | M::ReluBwd => {
            let propagate = sys::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN as u32;
            desc.set_enum(A::CUDNN_ATTR_POINTWISE_NAN_PROPAGATION, T::CUDNN_TYPE_NAN_PROPOGATION, propagate)?;
            desc.set_f64(A::CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, op.relu_lower_clip.unwrap_or(0.0))?;
            desc.set_f64(
                A::CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP,
                relu_upper_clip(op.relu_upper_clip, cx.compute_type()),
            )?;
            desc.set_f64(A::CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, op.relu_lower_clip_slope.unwrap_or(0.0))?;
        }
        M::Elu | M::EluBwd => desc.set_f64(A::CUDNN_ATTR_POINTWISE_ELU_ALPHA, op.elu_alpha.unwrap_or(1.0))?,
        M::Softplus | M::SoftplusBwd => {
            desc.set_f64(A::CUDNN_ATTR_POINTWISE_SOFTPLUS_BETA, op.softplus_beta.unwrap_or(1.0))?
        }
        M::Swish | M::SwishBwd => desc.set_f64(A::CUDNN_ATTR_POINTWISE_SWISH_BETA, op.swish_beta.unwrap_or(1.0))?,
        M::GenIndex => {
            // The axis counts dims of the graph's tensor; the descriptor's tensor may have
            // leading dims added (see `backend::lower`).
            let rank = cx.input_rank(0);
            let axis = op.axis.ok_or_else(|| cx.unsupported("gen_index needs an axis".into()))?;
            let axis = normalize_axis(op.mode.name(), axis, rank).map_err(|e| cx.unsupported(e.to_string()))?;
            let axis = (axis + rank_padding(rank)) as i64;
            desc.set_i64s(A::CUDNN_ATTR_POINTWISE_AXIS, &[axis])?;
        }
        _ => {}
    }
    desc.finalize()?;

    let mut operation = cx.descriptor(K::CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR)?;
    operation.set_descriptors(A::CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, &[&desc])?;
    if is_activation_backward(op.mode) {
        operation.set_descriptors(A::CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, &[cx.input(0)?])?;
        operation.set_descriptors(A::CUDNN_ATTR_OPERATION_POINTWISE_XDESC, &[cx.input(1)?])?;
        operation.set_descriptors(A::CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, &[cx.output(0)?])?;
    } else {
        operation.set_descriptors(A::CUDNN_ATTR_OPERATION_POINTWISE_XDESC, &[cx.input(0)?])?;
        if op.mode.arity() >= 2 {
            operation.set_descriptors(A::CUDNN_ATTR_OPERATION_POINTWISE_BDESC, &[cx.input(1)?])?;
        }
        if op.mode.arity() >= 3 {
            operation.set_descriptors(A::CUDNN_ATTR_OPERATION_POINTWISE_TDESC, &[cx.input(2)?])?;
        }
        operation.set_descriptors(A::CUDNN_ATTR_OPERATION_POINTWISE_YDESC, &[cx.output(0)?])?;
    }
    operation.set_f32(A::CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, 1.0)?;
    operation.set_f32(A::CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, 1.0)?;
    operation.finalize()?;
    Ok(LoweredOp { operation, parts: vec![desc] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backward_modes_are_exactly_the_200s() {
        for &m in PointwiseMode::ALL {
            assert_eq!(is_activation_backward(m), (200..300).contains(&m.cudnn_value()), "{m:?}");
        }
    }

    #[test]
    fn upper_clip_is_finite() {
        assert_eq!(relu_upper_clip(None, DataType::F32), f64::from(f32::MAX));
        assert_eq!(relu_upper_clip(Some(f64::INFINITY), DataType::F64), f64::MAX);
        assert_eq!(relu_upper_clip(Some(6.0), DataType::F32), 6.0);
    }
}
