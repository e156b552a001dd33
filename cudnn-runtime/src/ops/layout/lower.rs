//! cuDNN lowering of the layout ops, as cudnn-frontend's `ReshapeNode` before cuDNN 9.22: one
//! `CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR` from X to Y. Y's strides (X's permuted for a
//! transpose, packed for a reshape) are what makes it a view; a reshape needs a packed X.

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendDescriptorType_t as K;

use super::Layout;
use crate::backend::lower::{LoweredOp, NodeCx};
use crate::backend::BackendError;
use crate::dim::packed_strides;

pub(crate) fn lower(op: &Layout, cx: &NodeCx<'_>) -> Result<LoweredOp, BackendError> {
    if let Layout::Reshape { .. } = op {
        let x = cx.graph().tensor(cx.node().inputs[0]);
        if x.strides != packed_strides(&x.dims) {
            return Err(cx.unsupported(format!(
                "a reshape needs a packed (row-major) X; `{}` has strides {:?}",
                x.name, x.strides
            )));
        }
    }
    let mut operation = cx.descriptor(K::CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR)?;
    operation.set_descriptors(A::CUDNN_ATTR_OPERATION_RESHAPE_XDESC, &[cx.input(0)?])?;
    operation.set_descriptors(A::CUDNN_ATTR_OPERATION_RESHAPE_YDESC, &[cx.output(0)?])?;
    operation.finalize()?;
    Ok(LoweredOp { operation, parts: Vec::new() })
}
