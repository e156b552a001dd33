//! cuDNN lowering of the convolutions, as cudnn-frontend's `ConvolutionNode`, `DgradNode` and
//! `WgradNode`: a `CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR` (compute type, mode, spatial rank,
//! paddings, dilations, filter strides) and one of
//! `CUDNN_BACKEND_OPERATION_CONVOLUTION_{FORWARD,BACKWARD_DATA,BACKWARD_FILTER}_DESCRIPTOR` wiring
//! the tensors, with `alpha = 1`, `beta = 0`. The tensors carry their own strides (channels-last
//! unless set otherwise), which is how cuDNN learns the layout.

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendAttributeType_t as T;
use sys::cudnnBackendDescriptorType_t as K;

use super::{Conv, ConvKind};
use crate::ops::family::lowering::LowerCx;
use crate::cudnn::{CudnnError, LoweredOp};

pub(crate) fn lower(op: &Conv, cx: &mut LowerCx<'_, '_>) -> Result<LoweredOp, CudnnError> {
    let cx = cx.node;
    let spatial = cx.input_rank(0).saturating_sub(2);
    let w = op.window(spatial).map_err(|e| cx.unsupported(e.to_string()))?;
    let mut desc = cx.descriptor(K::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)?;
    desc.set_data_type(A::CUDNN_ATTR_CONVOLUTION_COMP_TYPE, cx.compute_type())?;
    desc.set_enum(A::CUDNN_ATTR_CONVOLUTION_CONV_MODE, T::CUDNN_TYPE_CONVOLUTION_MODE, op.mode.cudnn_value())?;
    desc.set_i64s(A::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, &[spatial as i64])?;
    desc.set_i64s(A::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, &w.pre)?;
    desc.set_i64s(A::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, &w.post)?;
    desc.set_i64s(A::CUDNN_ATTR_CONVOLUTION_DILATIONS, &w.dilation)?;
    desc.set_i64s(A::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, &w.stride)?;
    desc.finalize()?;

    let (kind, ports, conv, alpha, beta) = match op.kind {
        ConvKind::Fprop => (
            K::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
            [A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W],
            (A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC),
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
        ),
        ConvKind::Dgrad => (
            K::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
            [A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W],
            (A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC),
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
        ),
        ConvKind::Wgrad => (
            K::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
            [A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY],
            (
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
            ),
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
        ),
    };
    let mut operation = cx.descriptor(kind)?;
    operation.set_descriptors(ports[0], &[cx.input(0)?])?;
    operation.set_descriptors(ports[1], &[cx.input(1)?])?;
    operation.set_descriptors(conv.0, &[cx.output(0)?])?;
    operation.set_descriptors(conv.1, &[&desc])?;
    operation.set_f32(alpha, 1.0)?;
    operation.set_f32(beta, 0.0)?;
    operation.finalize()?;
    Ok(LoweredOp { operation, parts: vec![desc] })
}
