//! cuDNN lowering of `bn_finalize`, as cudnn-frontend's `BatchNormFinalizeNode` does it: one
//! `CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR` in mode
//! `CUDNN_BN_FINALIZE_STATISTICS_TRAINING` with math precision `FLOAT` (whatever the node's
//! compute type: cudnn-frontend sets `FLOAT`), and one descriptor attribute per port. Ports are
//! wired by name from the signature, so none can be wired to the wrong attribute by position.

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendAttributeType_t as T;
use sys::cudnnBackendDescriptorType_t as K;

use super::signature;
use crate::ops::family::lowering::LowerCx;
use crate::cudnn::{CudnnError, LoweredOp, MIN_RANK};
use crate::DataType;

/// `CUDNN_BN_FINALIZE_STATISTICS_TRAINING`.
const TRAINING: u32 = 0;

/// The scalar ports cuDNN takes only as by-value scalars.
const BY_VALUE_ONLY: [&str; 3] = ["EPSILON", "MOMENTUM", "ACCUM_COUNT"];

/// The descriptor's attribute for a port.
fn attr(port: &str) -> Option<A> {
    Some(match port {
        "SUM" => A::CUDNN_ATTR_OPERATION_BN_FINALIZE_Y_SUM_DESC,
        "SQ_SUM" => A::CUDNN_ATTR_OPERATION_BN_FINALIZE_Y_SQ_SUM_DESC,
        "SCALE" => A::CUDNN_ATTR_OPERATION_BN_FINALIZE_SCALE_DESC,
        "BIAS" => A::CUDNN_ATTR_OPERATION_BN_FINALIZE_BIAS_DESC,
        "PREV_RUNNING_MEAN" => A::CUDNN_ATTR_OPERATION_BN_FINALIZE_PREV_RUNNING_MEAN_DESC,
        "PREV_RUNNING_VAR" => A::CUDNN_ATTR_OPERATION_BN_FINALIZE_PREV_RUNNING_VAR_DESC,
        "EPSILON" => A::CUDNN_ATTR_OPERATION_BN_FINALIZE_EPSILON_DESC,
        "MOMENTUM" => A::CUDNN_ATTR_OPERATION_BN_FINALIZE_EXP_AVERATE_FACTOR_DESC,
        "ACCUM_COUNT" => A::CUDNN_ATTR_OPERATION_BN_FINALIZE_ACCUM_COUNT_DESC,
        "EQ_SCALE" => A::CUDNN_ATTR_OPERATION_BN_FINALIZE_EQ_SCALE_DESC,
        "EQ_BIAS" => A::CUDNN_ATTR_OPERATION_BN_FINALIZE_EQ_BIAS_DESC,
        "MEAN" => A::CUDNN_ATTR_OPERATION_BN_FINALIZE_SAVED_MEAN_DESC,
        "INV_VARIANCE" => A::CUDNN_ATTR_OPERATION_BN_FINALIZE_SAVED_INV_STD_DESC,
        "NEXT_RUNNING_MEAN" => A::CUDNN_ATTR_OPERATION_BN_FINALIZE_UPDATED_RUNNING_MEAN_DESC,
        "NEXT_RUNNING_VAR" => A::CUDNN_ATTR_OPERATION_BN_FINALIZE_UPDATED_RUNNING_VAR_DESC,
        _ => return None,
    })
}

pub(crate) fn lower(_op: &super::BnFinalize, cx: &mut LowerCx<'_, '_>) -> Result<LoweredOp, CudnnError> {
    let cx = cx.node;
    let rank = cx.input_rank(0);
    if rank < MIN_RANK {
        // Lower ranks get leading 1s, which would move the channel away from dim 1.
        return Err(cx.unsupported(format!(
            "cuDNN reads dim 1 of SUM as the channel, but SUM has rank {rank} and would be padded with leading \
             1s; give the per-channel tensors rank {MIN_RANK} or more ([1, C, 1] for [1, C])"
        )));
    }
    let sig = signature();
    // cuDNN 9.19 takes these only by value: a device tensor fails the operation's finalize with a
    // bare CUDNN_STATUS_BAD_PARAM (`finalize_internal()`), which names neither port nor cause.
    for (spec, port) in sig.inputs.iter().zip(&cx.inputs) {
        if BY_VALUE_ONLY.contains(&spec.name) && !port.by_value {
            return Err(cx.support_rule(
                "bn_finalize.by_value_scalars",
                format!(
                    "{} (tensor `{}`) is a device tensor, but cuDNN takes bn_finalize's EPSILON, MOMENTUM and \
                     ACCUM_COUNT only by value (a device tensor fails the operation with CUDNN_STATUS_BAD_PARAM); \
                     pass a number",
                    spec.name, port.name
                ),
            ));
        }
    }
    let mut operation = cx.descriptor(K::CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR)?;
    operation.set_enum(A::CUDNN_ATTR_OPERATION_BN_FINALIZE_STATS_MODE, T::CUDNN_TYPE_BN_FINALIZE_STATS_MODE, TRAINING)?;
    operation.set_data_type(A::CUDNN_ATTR_OPERATION_BN_FINALIZE_MATH_PREC, DataType::F32)?;
    let inputs: Vec<&str> = sig.inputs.iter().map(|p| p.name).collect();
    cx.wire_ports_by_name(&mut operation, &inputs, sig.outputs, attr)?;
    operation.finalize()?;
    Ok(LoweredOp { operation, parts: Vec::new() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every port has its attribute, and no two ports share one.
    #[test]
    fn every_port_is_wired_once() {
        let sig = signature();
        let ports: Vec<&str> = sig.inputs.iter().map(|p| p.name).chain(sig.outputs.iter().copied()).collect();
        let mut attrs: Vec<u32> = ports.iter().map(|p| attr(p).map(|a| a as u32)).collect::<Option<_>>().unwrap();
        attrs.sort_unstable();
        attrs.dedup();
        assert_eq!(attrs.len(), ports.len());
    }
}
