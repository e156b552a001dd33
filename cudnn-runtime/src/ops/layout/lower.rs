//! cuDNN lowering of the layout ops. Reshape and transpose, as cudnn-frontend's `ReshapeNode`
//! before cuDNN 9.22: one `CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR` from X to Y. Y's strides
//! (X's permuted for a transpose, packed for a reshape) are what makes it a view; a reshape needs
//! a packed X. (A slice has no operation, and a view whose Y is a graph output is a copy, never
//! a reshape: see `backend::lower`.) A concatenation, as
//! `ConcatenateNode`: one `CUDNN_BACKEND_OPERATION_CONCAT_DESCRIPTOR` with every input, the axis
//! and the in-place index if given.

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendDescriptorType_t as K;

use super::Layout;
use crate::ops::family::lowering::LowerCx;
use crate::cudnn::{rank_padding, CudnnError, LoweredOp, NodeCx};
use crate::dim::packed_strides;
use crate::ops::conv::ConvKind;

pub(crate) fn lower(op: &Layout, cx: &mut LowerCx<'_, '_>) -> Result<LoweredOp, CudnnError> {
    let cx = cx.node;
    if let Layout::Reshape { .. } = op {
        let x = cx.inputs.first().ok_or_else(|| cx.unsupported("it has no input #0".into()))?;
        if x.strides != packed_strides(&x.dims) {
            return Err(cx.unsupported(format!(
                "a reshape needs a packed (row-major) X; `{}` has strides {:?}",
                x.name, x.strides
            )));
        }
    }
    if let Layout::Concatenate { in_place_index, .. } = op {
        fused_in_place(cx, *in_place_index)?;
        let rank = cx.input_rank(0);
        let axis = op.concat_axis(rank).ok_or_else(|| cx.unsupported(format!("its axis is outside rank {rank}")))?;
        let inputs = (0..cx.inputs.len()).map(|i| cx.input(i)).collect::<Result<Vec<_>, _>>()?;
        let mut operation = cx.descriptor(K::CUDNN_BACKEND_OPERATION_CONCAT_DESCRIPTOR)?;
        operation.set_descriptors(A::CUDNN_ATTR_OPERATION_CONCAT_INPUT_DESCS, &inputs)?;
        operation.set_descriptors(A::CUDNN_ATTR_OPERATION_CONCAT_OUTPUT_DESC, &[cx.output(0)?])?;
        // The tensors' descriptors have as many leading 1s as the lowering pads low ranks with.
        let axis = axis + rank_padding(rank);
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

/// The one form of concatenation that cuDNN 9.19 computes correctly on the H200: two inputs, the
/// first the virtual output of a `conv_fprop`, the second a graph input already in the output's
/// memory (`in_place_index = 1`), the result a graph output that no other node reads.
///
/// Measured there (engine 1, runtime-compiled; `tests/gpu_suite/gpu_ops_layout.rs`): the engine writes the
/// convolution's part at the start of the axis whatever its position among the inputs, never
/// copies a graph input, leaves a convolution output that is also a graph output unwritten, and
/// crashes the process while building `concatenate(relu(conv_fprop(..)), ..)`. cuDNN accepts
/// all of these, so the rule is ours: without it each would be a silently wrong result or a
/// crash, never a typed error. It applies whatever the loaded version, until one is measured to
/// do better.
fn fused_in_place(cx: &NodeCx<'_>, in_place_index: Option<i64>) -> Result<(), CudnnError> {
    let fail = |message: String| {
        cx.support_rule(
            "concat.fused_in_place",
            format!(
                "{message}; cuDNN 9.19 computes a concatenation only as `concatenate(conv_fprop(..), y0, \
                 in_place_index = 1)`, with y0's values already in the output's memory (it writes the \
                 convolution's part at the start of the axis and copies no input)"
            ),
        )
    };
    let (ins, outs) = (&cx.inputs, &cx.outputs);
    if ins.len() != 2 || in_place_index != Some(1) {
        let given = in_place_index.map_or("no in-place index".to_string(), |i| format!("in_place_index = {i}"));
        return Err(fail(format!("it has {} inputs and {given}", ins.len())));
    }
    let (computed, in_place) = (&ins[0], &ins[1]);
    match computed.producer {
        Some(p) if p == ConvKind::Fprop.name() => {}
        Some(p) => {
            return Err(fail(format!("input X[0] (`{}`) is computed by a {p}, not a conv_fprop", computed.name)))
        }
        None => {
            return Err(fail(format!("input X[0] (`{}`) is a graph input, not computed in the graph", computed.name)))
        }
    }
    if !computed.is_virtual {
        return Err(fail(format!(
            "input X[0] (`{}`) is a graph output as well, which cuDNN leaves unwritten",
            computed.name
        )));
    }
    if in_place.producer.is_some() {
        return Err(fail(format!("the in-place input X[1] (`{}`) is computed in the graph", in_place.name)));
    }
    let Some(y) = outs.first() else { return Err(cx.unsupported("it has no output #0".into())) };
    if y.is_virtual || y.readers > 0 {
        return Err(fail(format!("its output `{}` is read by another node", y.name)));
    }
    Ok(())
}
