//! cuDNN lowering of the normalizations, as cudnn-frontend's norm nodes do it:
//!
//! - forward norms: one `CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR` with the norm mode and
//!   phase, and one descriptor attribute per port (X, SCALE, BIAS, EPSILON, Y; MEAN and
//!   INV_VARIANCE as outputs in training and as inputs of `batchnorm_inference`; batch norm's
//!   running statistics and momentum as `INPUT_/OUTPUT_RUNNING_*` and `EXP_AVG_FACTOR`);
//! - backward norms: one `CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR` (DY, X, SCALE, MEAN,
//!   INV_VARIANCE → DX, DSCALE, DBIAS; no epsilon, which cuDNN ≥ 8.9.6 does not take);
//! - `genstats`: one `CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR` (`CUDNN_GENSTATS_SUM_SQSUM`,
//!   math precision X's type, as cudnn-frontend sets it).
//!
//! Ports are wired by name, from the op's one definition (`super::NormKind`), so a port cannot be
//! wired to the wrong attribute by position.

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendAttributeType_t as T;
use sys::cudnnBackendDescriptorType_t as K;

use crate::ops::family::OpFamily;
use super::{Grouping, Norm, NormKind};
use crate::ops::family::lowering::LowerCx;
use crate::cudnn::{CudnnError, LoweredOp, MIN_RANK};

/// `CUDNN_GENSTATS_SUM_SQSUM`.
const GENSTATS_SUM_SQSUM: u32 = 0;

/// The forward descriptor's attribute for a port.
fn forward_attr(port: &str) -> Option<A> {
    Some(match port {
        "X" => A::CUDNN_ATTR_OPERATION_NORM_FWD_XDESC,
        "SCALE" => A::CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC,
        "BIAS" => A::CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC,
        "EPSILON" => A::CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC,
        "MEAN" => A::CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC,
        "INV_VARIANCE" => A::CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC,
        "MOMENTUM" => A::CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC,
        "PREV_RUNNING_MEAN" => A::CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC,
        "PREV_RUNNING_VAR" => A::CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC,
        "NEXT_RUNNING_MEAN" => A::CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC,
        "NEXT_RUNNING_VAR" => A::CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC,
        "Y" => A::CUDNN_ATTR_OPERATION_NORM_FWD_YDESC,
        _ => return None,
    })
}

/// The backward descriptor's attribute for a port.
fn backward_attr(port: &str) -> Option<A> {
    Some(match port {
        "DY" => A::CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC,
        "X" => A::CUDNN_ATTR_OPERATION_NORM_BWD_XDESC,
        "SCALE" => A::CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC,
        "MEAN" => A::CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC,
        "INV_VARIANCE" => A::CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC,
        "DX" => A::CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC,
        "DSCALE" => A::CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC,
        "DBIAS" => A::CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC,
        _ => return None,
    })
}

/// The genstats descriptor's attribute for a port.
fn genstats_attr(port: &str) -> Option<A> {
    Some(match port {
        "X" => A::CUDNN_ATTR_OPERATION_GENSTATS_XDESC,
        "SUM" => A::CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC,
        "SQ_SUM" => A::CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC,
        _ => return None,
    })
}

pub(crate) fn lower(op: &Norm, cx: &mut LowerCx<'_, '_>) -> Result<LoweredOp, CudnnError> {
    let cx = cx.node;
    let rank = cx.input_rank(op.kind.port_index("X").unwrap_or(0));
    if op.kind.grouping() != Grouping::Normalized && rank < MIN_RANK {
        // Lower ranks get leading 1s, which would move the channel away from dim 1.
        return Err(cx.unsupported(format!(
            "cuDNN reads dim 1 of X as the channel, but X has rank {rank} and would be padded with leading 1s; \
             give X rank {MIN_RANK} or more ([N, C, 1] for [N, C])"
        )));
    }
    let (kind, attr_of): (K, fn(&str) -> Option<A>) = match op.kind {
        NormKind::GenStats => (K::CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, genstats_attr),
        k if k.is_backward() => (K::CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR, backward_attr),
        _ => (K::CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR, forward_attr),
    };
    let mut operation = cx.descriptor(kind)?;
    match op.kind.mode() {
        None => {
            operation.set_enum(
                A::CUDNN_ATTR_OPERATION_GENSTATS_MODE,
                T::CUDNN_TYPE_GENSTATS_MODE,
                GENSTATS_SUM_SQSUM,
            )?;
            let x = cx.input_data_type(0).unwrap_or(cx.compute_type());
            operation.set_data_type(A::CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, x)?;
        }
        Some(mode) if op.kind.is_backward() => {
            operation.set_enum(A::CUDNN_ATTR_OPERATION_NORM_BWD_MODE, T::CUDNN_TYPE_NORM_MODE, mode.cudnn_value())?;
        }
        Some(mode) => {
            operation.set_enum(A::CUDNN_ATTR_OPERATION_NORM_FWD_MODE, T::CUDNN_TYPE_NORM_MODE, mode.cudnn_value())?;
            let phase = op.phase.cudnn_value();
            operation.set_enum(A::CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, T::CUDNN_TYPE_NORM_FWD_PHASE, phase)?;
        }
    }
    let inputs: Vec<&str> = op.kind.signature().inputs.iter().map(|p| p.name).collect();
    cx.wire_ports_by_name(&mut operation, &inputs, op.outputs(), attr_of)?;
    operation.finalize()?;
    Ok(LoweredOp { operation, parts: Vec::new() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every port of every norm has its attribute.
    #[test]
    fn every_port_is_wired() {
        for &kind in NormKind::ALL {
            let attr_of = match kind {
                NormKind::GenStats => genstats_attr,
                k if k.is_backward() => backward_attr,
                _ => forward_attr,
            };
            let sig = kind.signature();
            for name in sig.inputs.iter().map(|p| p.name).chain(sig.outputs.iter().copied()) {
                assert!(attr_of(name).is_some(), "{kind:?} port {name}");
            }
        }
    }
}
