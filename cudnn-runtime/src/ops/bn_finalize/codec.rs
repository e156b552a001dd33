//! `bn_finalize` in cudnn-frontend's JSON: tag `BN_FINALIZE` (`BN_finalize_attributes`), which
//! has no fields beyond every node's (`name`, `compute_data_type`, `inputs`, `outputs`). Its
//! EPSILON, MOMENTUM and ACCUM_COUNT are tensors of the document like any port (by-value scalars
//! in cudnn-frontend's `pass_by_value`, ACCUM_COUNT an `INT64` one). cudnn-frontend makes the
//! running statistics optional; a node without them is not supported, as for `BATCHNORM`.

use super::{signature, BnFinalize};
use crate::codec::json::{Json, Obj};
use crate::codec::CodecError;
use crate::ops::codec::{deny_unknown_node_fields, has_port, FrontendFields, FrontendNode, ReadError, WriteCx};

/// The node tag.
pub(crate) const TAG: &str = "BN_FINALIZE";

/// A `BN_FINALIZE` node.
pub(crate) fn read(n: &Obj<'_>, _label: &str, _tag: &str) -> Result<FrontendNode, ReadError> {
    deny_unknown_node_fields(n, &[])?;
    if !has_port(n, "inputs", "PREV_RUNNING_MEAN")? {
        return Err(CodecError::Unsupported {
            path: n.field_path("inputs"),
            feature: "batch-norm finalize without running statistics (PREV_RUNNING_MEAN, PREV_RUNNING_VAR, \
                      MOMENTUM)"
                .into(),
        }
        .into());
    }
    Ok(FrontendNode::plain(signature(), Vec::new()))
}

/// The fields of a `BN_FINALIZE` node.
pub(crate) fn write(_op: &BnFinalize, _cx: &WriteCx<'_>) -> FrontendFields {
    FrontendFields::plain(vec![("tag", Json::str(TAG))])
}
