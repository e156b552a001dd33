//! cuDNN lowering of pooling, as cudnn-frontend's `ResampleNode`: a
//! `CUDNN_BACKEND_RESAMPLE_DESCRIPTOR` (mode, compute type, NaN propagation, padding mode, spatial
//! rank, and the window, stride and paddings as `CUDNN_TYPE_FRACTION`s with denominator 1) and a
//! `CUDNN_BACKEND_OPERATION_RESAMPLE_FWD_DESCRIPTOR` wiring X, Y and, with `index = true`, the
//! index tensor.

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendAttributeType_t as T;
use sys::cudnnBackendDescriptorType_t as K;

use super::Resample;
use crate::ops::family::lowering::LowerCx;
use crate::cudnn::{CudnnError, LoweredOp, NodeCx};

/// `CUDNN_PROPAGATE_NAN`, as cudnn-frontend sets it.
const PROPAGATE_NAN: u32 = 1;

/// Rule `resample.index_layout`: a max pooling that writes its indices has channels-last ports.
/// On the H100 with cuDNN 9.19, a row-major (NCHW) one plans and writes Y right but never writes
/// the index tensor (every index left as it was; `cudnn-graph repro`, 2026-12-07, at C = 4 and 16),
/// while the same pooling channels-last writes every index as the reference does.
fn check_index_layout(op: &Resample, cx: &NodeCx<'_>) -> Result<(), CudnnError> {
    if !op.index {
        return Ok(());
    }
    let row_major = |dims: &[i64], strides: &[i64]| dims.len() >= 3 && dims[1] > 1 && strides[1] != 1;
    let ports = cx.inputs.iter().take(1).chain(cx.outputs.iter());
    let offending: Vec<String> = ports
        .filter(|p| row_major(&p.dims, &p.strides))
        .map(|p| format!("`{}` (strides {:?})", p.name, p.strides))
        .collect();
    if offending.is_empty() {
        return Ok(());
    }
    Err(cx.support_rule(
        "resample.index_layout",
        format!(
            "a max pooling with `index = true` over row-major ports ({}) plans on cuDNN 9.19 but never writes its \
             indices (measured on the H100); declare X, Y and the index `channels_last`",
            offending.join(", ")
        ),
    ))
}

pub(crate) fn lower(op: &Resample, cx: &mut LowerCx<'_, '_>) -> Result<LoweredOp, CudnnError> {
    let cx = cx.node;
    check_index_layout(op, cx)?;
    let spatial = cx.input_rank(0).saturating_sub(2);
    let (window, w) = op.geometry(spatial).map_err(|e| cx.unsupported(e.to_string()))?;
    let mut desc = cx.descriptor(K::CUDNN_BACKEND_RESAMPLE_DESCRIPTOR)?;
    desc.set_enum(A::CUDNN_ATTR_RESAMPLE_MODE, T::CUDNN_TYPE_RESAMPLE_MODE, op.mode.cudnn_value())?;
    desc.set_data_type(A::CUDNN_ATTR_RESAMPLE_COMP_TYPE, cx.compute_type())?;
    desc.set_enum(A::CUDNN_ATTR_RESAMPLE_NAN_PROPAGATION, T::CUDNN_TYPE_NAN_PROPOGATION, PROPAGATE_NAN)?;
    desc.set_enum(A::CUDNN_ATTR_RESAMPLE_PADDING_MODE, T::CUDNN_TYPE_PADDING_MODE, op.mode.cudnn_padding_mode())?;
    desc.set_i64s(A::CUDNN_ATTR_RESAMPLE_SPATIAL_DIMS, &[spatial as i64])?;
    desc.set_whole_fractions(A::CUDNN_ATTR_RESAMPLE_WINDOW_DIMS, &window)?;
    desc.set_whole_fractions(A::CUDNN_ATTR_RESAMPLE_STRIDES, &w.stride)?;
    desc.set_whole_fractions(A::CUDNN_ATTR_RESAMPLE_PRE_PADDINGS, &w.pre)?;
    desc.set_whole_fractions(A::CUDNN_ATTR_RESAMPLE_POST_PADDINGS, &w.post)?;
    desc.finalize()?;

    let mut operation = cx.descriptor(K::CUDNN_BACKEND_OPERATION_RESAMPLE_FWD_DESCRIPTOR)?;
    operation.set_descriptors(A::CUDNN_ATTR_OPERATION_RESAMPLE_FWD_XDESC, &[cx.input(0)?])?;
    operation.set_descriptors(A::CUDNN_ATTR_OPERATION_RESAMPLE_FWD_YDESC, &[cx.output(0)?])?;
    if op.index {
        operation.set_descriptors(A::CUDNN_ATTR_OPERATION_RESAMPLE_FWD_IDXDESC, &[cx.output(1)?])?;
    }
    operation.set_descriptors(A::CUDNN_ATTR_OPERATION_RESAMPLE_FWD_DESC, &[&desc])?;
    operation.finalize()?;
    Ok(LoweredOp { operation, parts: vec![desc] })
}
