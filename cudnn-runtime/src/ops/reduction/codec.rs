//! Reductions in cudnn-frontend's JSON: tag `REDUCTION` (`Reduction_attributes`): `mode` in cuDNN's
//! spelling (`ADD`, `MAX`, ...) and `is_deterministic` (not supported when true). cudnn-frontend
//! has no field for the reduced dims: a node read from its fields alone takes them from X and Y.

use super::{Reduction, ReductionMode};
use crate::codec::json::{Json, Obj};
use crate::codec::CodecError;
use crate::dim::shape_string;
use crate::ops::codec::{deny_unknown_node_fields, FrontendFields, FrontendNode, Pending, ReadError, WriteCx};
use crate::ops::{AttrValue, Op};

/// The node tag.
pub(crate) const TAG: &str = "REDUCTION";

/// `Reduction_attributes`'s own fields.
const FIELDS: [&str; 2] = ["is_deterministic", "mode"];

/// A `REDUCTION` node.
pub(crate) fn read(n: &Obj<'_>, _label: &str, _tag: &str) -> Result<FrontendNode, ReadError> {
    deny_unknown_node_fields(n, &FIELDS)?;
    let mode_name = n.str("mode")?;
    let mode = ReductionMode::ALL.iter().copied().find(|m| m.cudnn_name() == mode_name).ok_or_else(|| {
        CodecError::UnknownEnum { path: n.field_path("mode"), kind: "reduction mode", value: mode_name.to_string() }
    })?;
    if n.bool_or("is_deterministic", false)? {
        return Err(CodecError::Unsupported {
            path: n.field_path("is_deterministic"),
            feature: "deterministic reductions".into(),
        }
        .into());
    }
    Ok(FrontendNode {
        from_fields: |fe, _, _| {
            let call = fe.call;
            Ok(Pending::Resolve(Box::new(move |t: &crate::ops::codec::NodeDims<'_>| {
                let (x, y) = (t.input(0), t.output(0));
                let dims = reduced_dims(x, y).ok_or_else(|| CodecError::ReductionDims {
                    node: t.label.to_string(),
                    x: shape_string(x),
                    y: shape_string(y),
                })?;
                Op::from_call(call, &[("dims".to_string(), AttrValue::IntList(dims))]).map_err(ReadError::attr(t.label))
            })))
        },
        ..FrontendNode::plain(mode.signature(), Vec::new())
    })
}

/// The fields of a `REDUCTION` node.
pub(crate) fn write(r: &Reduction, _cx: &WriteCx<'_>) -> FrontendFields {
    FrontendFields::plain(vec![
        ("is_deterministic", Json::Bool(false)),
        ("mode", Json::str(r.mode.cudnn_name())),
        ("tag", Json::str(TAG)),
    ])
}

/// The reduced dims of a cudnn-frontend reduction, which has no `dims` field: those where Y is 1
/// and X is not (or, if X has no other 1s to reduce, where both are 1).
fn reduced_dims(x: &[i64], y: &[i64]) -> Option<Vec<i64>> {
    if x.len() != y.len() {
        return None;
    }
    let pick = |strict: bool| -> Vec<i64> {
        (0..x.len()).filter(|&i| y[i] == 1 && (!strict || x[i] != 1)).map(|i| i as i64).collect()
    };
    let strict = pick(true);
    if !strict.is_empty() {
        return Some(strict);
    }
    let ones = pick(false);
    (!ones.is_empty()).then_some(ones)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduced_dims_from_shapes() {
        assert_eq!(reduced_dims(&[2, 3, 4], &[2, 3, 1]), Some(vec![2]));
        assert_eq!(reduced_dims(&[2, 3, 4], &[1, 3, 1]), Some(vec![0, 2]));
        assert_eq!(reduced_dims(&[2, 1, 4], &[2, 1, 4]), Some(vec![1]));
        assert_eq!(reduced_dims(&[2, 1, 4], &[2, 1, 1]), Some(vec![2]));
        assert_eq!(reduced_dims(&[2, 4], &[2, 4]), None);
        assert_eq!(reduced_dims(&[2, 4], &[2, 4, 1]), None);
    }
}
