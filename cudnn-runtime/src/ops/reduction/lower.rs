//! cuDNN lowering of the reductions: a `CUDNN_BACKEND_REDUCTION_DESCRIPTOR` (compute type and
//! `cudnnReduceTensorOp_t`) and a `CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR` from X to Y (as
//! cudnn-frontend's `ReductionNode`). The reduced dims are implied by Y's dims being 1.

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendAttributeType_t as T;
use sys::cudnnBackendDescriptorType_t as K;

use super::Reduction;
use crate::ops::family::lowering::LowerCx;
use crate::cudnn::{CudnnError, LoweredOp};

pub(crate) fn lower(op: &Reduction, cx: &mut LowerCx<'_, '_>) -> Result<LoweredOp, CudnnError> {
    let cx = cx.node;
    let mut desc = cx.descriptor(K::CUDNN_BACKEND_REDUCTION_DESCRIPTOR)?;
    desc.set_data_type(A::CUDNN_ATTR_REDUCTION_COMP_TYPE, cx.compute_type())?;
    desc.set_enum(A::CUDNN_ATTR_REDUCTION_OPERATOR, T::CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, op.mode.cudnn_value())?;
    desc.finalize()?;

    let mut operation = cx.descriptor(K::CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR)?;
    operation.set_descriptors(A::CUDNN_ATTR_OPERATION_REDUCTION_XDESC, &[cx.input(0)?])?;
    operation.set_descriptors(A::CUDNN_ATTR_OPERATION_REDUCTION_YDESC, &[cx.output(0)?])?;
    operation.set_descriptors(A::CUDNN_ATTR_OPERATION_REDUCTION_DESC, &[&desc])?;
    operation.finalize()?;
    Ok(LoweredOp { operation, parts: vec![desc] })
}
