//! cuDNN lowering of the layout ops. Reshape and transpose, as cudnn-frontend's `ReshapeNode`
//! before cuDNN 9.22: one `CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR` from X to Y. Y's strides
//! (X's permuted for a transpose, packed for a reshape) are what makes it a view; a reshape needs
//! a packed X. (A slice has no operation: see `backend::lower`.) A concatenation, as
//! `ConcatenateNode`: one `CUDNN_BACKEND_OPERATION_CONCAT_DESCRIPTOR` with every input, the axis
//! and the in-place index if given.

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
    if let Layout::Concatenate { in_place_index, .. } = op {
        let rank = cx.input_rank(0);
        let axis = op.concat_axis(rank).ok_or_else(|| cx.unsupported(format!("its axis is outside rank {rank}")))?;
        let inputs = (0..cx.node().inputs.len()).map(|i| cx.input(i)).collect::<Result<Vec<_>, _>>()?;
        let mut operation = cx.descriptor(K::CUDNN_BACKEND_OPERATION_CONCAT_DESCRIPTOR)?;
        operation.set_descriptors(A::CUDNN_ATTR_OPERATION_CONCAT_INPUT_DESCS, &inputs)?;
        operation.set_descriptors(A::CUDNN_ATTR_OPERATION_CONCAT_OUTPUT_DESC, &[cx.output(0)?])?;
        // The tensors' descriptors have as many leading 1s as the lowering pads low ranks with.
        let axis = axis + crate::backend::lower::rank_padding(rank);
        operation.set_i64s(A::CUDNN_ATTR_OPERATION_CONCAT_AXIS, &[axis as i64])?;
        if let Some(i) = in_place_index {
            operation.set_i64s(A::CUDNN_ATTR_OPERATION_CONCAT_INPLACE_INDEX, &[*i])?;
        }
        operation.finalize()?;
        return Ok(LoweredOp { operation, parts: Vec::new() });
    }
    let mut operation = cx.descriptor(K::CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR)?;
    operation.set_descriptors(A::CUDNN_ATTR_OPERATION_RESHAPE_XDESC, &[cx.input(0)?])?;
    operation.set_descriptors(A::CUDNN_ATTR_OPERATION_RESHAPE_YDESC, &[cx.output(0)?])?;
    operation.finalize()?;
    Ok(LoweredOp { operation, parts: Vec::new() })
}
