//! `matmul` in cudnn-frontend's JSON: tag `MATMUL` (`Matmul_attributes`), whose one field of its
//! own, `padding_value`, must be 0; the M/N/K override ports are not supported.

use super::{signature, Matmul};
use crate::codec::json::{wrong_type, Json, Obj};
use crate::codec::CodecError;
use crate::ops::codec::{deny_unknown_node_fields, FrontendFields, FrontendNode, ReadError, WriteCx};

/// The node tag.
pub(crate) const TAG: &str = "MATMUL";

/// `Matmul_attributes`'s own fields.
const FIELDS: [&str; 1] = ["padding_value"];

/// A `MATMUL` node.
pub(crate) fn read(n: &Obj<'_>, _label: &str, _tag: &str) -> Result<FrontendNode, ReadError> {
    deny_unknown_node_fields(n, &FIELDS)?;
    match n.get("padding_value") {
        None => {}
        Some(Json::Float(x)) if *x == 0.0 => {}
        Some(Json::Int(0)) => {}
        Some(v @ (Json::Float(_) | Json::Int(_) | Json::UInt(_))) => {
            return Err(CodecError::Unsupported {
                path: n.field_path("padding_value"),
                feature: format!("matmul padding {}", v.to_pretty()),
            }
            .into())
        }
        Some(other) => return Err(wrong_type(&n.field_path("padding_value"), "a number", other).into()),
    }
    Ok(FrontendNode {
        unsupported_ports: &["M_override", "N_override", "K_override"],
        ..FrontendNode::plain(signature(), Vec::new())
    })
}

/// The fields of a `MATMUL` node.
pub(crate) fn write(_op: &Matmul, _cx: &WriteCx<'_>) -> FrontendFields {
    FrontendFields::plain(vec![("padding_value", Json::Float(0.0)), ("tag", Json::str(TAG))])
}
