//! cuDNN lowering of `matmul`: a `CUDNN_BACKEND_MATMUL_DESCRIPTOR` carrying the node's compute
//! type, and a `CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR` wiring A, B and C to it (as
//! cudnn-frontend's `MatmulNode`). Batch broadcasting needs nothing extra: cuDNN broadcasts a batch
//! dim of extent 1.

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendDescriptorType_t as K;

use super::Matmul;
use crate::ops::family::lowering::LowerCx;
use crate::cudnn::{CudnnError, LoweredOp};

pub(crate) fn lower(_op: &Matmul, cx: &mut LowerCx<'_, '_>) -> Result<LoweredOp, CudnnError> {
    let cx = cx.node;
    let mut desc = cx.descriptor(K::CUDNN_BACKEND_MATMUL_DESCRIPTOR)?;
    desc.set_data_type(A::CUDNN_ATTR_MATMUL_COMP_TYPE, cx.compute_type())?;
    desc.finalize()?;

    let mut op = cx.descriptor(K::CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR)?;
    op.set_descriptors(A::CUDNN_ATTR_OPERATION_MATMUL_ADESC, &[cx.input(0)?])?;
    op.set_descriptors(A::CUDNN_ATTR_OPERATION_MATMUL_BDESC, &[cx.input(1)?])?;
    op.set_descriptors(A::CUDNN_ATTR_OPERATION_MATMUL_CDESC, &[cx.output(0)?])?;
    op.set_descriptors(A::CUDNN_ATTR_OPERATION_MATMUL_DESC, &[&desc])?;
    op.finalize()?;
    Ok(LoweredOp { operation: op, parts: vec![desc] })
}
