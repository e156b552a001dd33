//! Layout ops in cudnn-frontend's JSON: `RESHAPE` (`dim`, `stride`: Y's, and `reshape_mode`
//! `VIEW_ONLY`; a node with an empty `dim` takes Y's dims, and we write it empty, as
//! cudnn-frontend's Python does: Y's tensor carries its dims and strides), `TRANSPOSE` (`permutation`), `SLICE`
//! (`slices`, one `[start, limit]` pair per dim, and `slice_strides`) and `CONCATENATE` (`axis`,
//! `in_place_index`; its `inputs` are keyed by position, `{"0": .., "1": ..}`, not by port name).

use super::{Layout, LayoutKind, CONCAT_PORTS};
use crate::codec::json::{wrong_type, Json, Obj};
use crate::codec::{ints, CodecError};
use crate::ops::codec::{
    call_attrs, deny_unknown_node_fields, FrontendAttr, FrontendFields, FrontendNode, NodeDims, Pending, ReadError,
    WriteCx,
};
use crate::ops::{AttrError, AttrValue, Op};

/// `Reshape_attributes`'s own fields.
const RESHAPE_FIELDS: [&str; 3] = ["dim", "reshape_mode", "stride"];

/// `Transpose_attributes`'s own fields.
const TRANSPOSE_FIELDS: [&str; 1] = ["permutation"];

/// `Slice_attributes`'s own fields.
const SLICE_FIELDS: [&str; 2] = ["slice_strides", "slices"];

/// `Concatenate_attributes`'s own fields.
const CONCAT_FIELDS: [&str; 2] = ["axis", "in_place_index"];

/// A layout node.
pub(crate) fn read(n: &Obj<'_>, label: &str, tag: &str) -> Result<FrontendNode, ReadError> {
    let kind = LayoutKind::ALL.iter().copied().find(|k| k.frontend_tag() == tag).ok_or_else(|| {
        CodecError::UnknownEnum { path: n.field_path("tag"), kind: "tag", value: tag.to_string() }
    })?;
    let own: &[&'static str] = match kind {
        LayoutKind::Reshape => &RESHAPE_FIELDS,
        LayoutKind::Transpose => &TRANSPOSE_FIELDS,
        LayoutKind::Slice => &SLICE_FIELDS,
        LayoutKind::Concatenate => &CONCAT_FIELDS,
    };
    deny_unknown_node_fields(n, own)?;
    let attrs = match kind {
        LayoutKind::Concatenate => return read_concatenate(n, label),
        LayoutKind::Transpose => {
            let permutation = n
                .opt_i64_list("permutation")?
                .ok_or_else(|| CodecError::MissingField { path: n.field_path("permutation") })?;
            vec![("permutation", AttrValue::IntList(permutation))]
        }
        LayoutKind::Slice => read_slice(n)?,
        LayoutKind::Reshape => {
            if let Some(mode) = n.opt_str("reshape_mode")? {
                if mode != "VIEW_ONLY" {
                    return Err(CodecError::Unsupported {
                        path: n.field_path("reshape_mode"),
                        feature: format!("reshape mode {mode} (cuDNN 9.22)"),
                    }
                    .into());
                }
            }
            // An empty `dim` (Y's dims set on the tensor instead) is resolved from Y.
            let shape = n.opt_i64_list("dim")?.unwrap_or_default();
            vec![("shape", AttrValue::IntList(shape))]
        }
    };
    let attrs = attrs.into_iter().map(|(dsl, v)| (dsl, dsl, FrontendAttr::Value(v))).collect();
    let mut node = FrontendNode::plain(kind.signature(), attrs);
    if kind == LayoutKind::Reshape {
        node.from_fields = reshape_from_fields;
    }
    Ok(node)
}

/// A `SLICE` node's `slices` pairs and `slice_strides`.
fn read_slice(n: &Obj<'_>) -> Result<Vec<(&'static str, AttrValue)>, CodecError> {
    let path = n.field_path("slices");
    let pairs = match n.get("slices") {
        Some(Json::Arr(pairs)) => pairs,
        Some(other) => return Err(wrong_type(&path, "an array of [start, limit] pairs", other)),
        None => return Err(CodecError::MissingField { path }),
    };
    let (mut start, mut limit) = (Vec::new(), Vec::new());
    for (i, pair) in pairs.iter().enumerate() {
        match pair.as_i64_list(&format!("{path}[{i}]"))?.as_slice() {
            [a, b] => {
                start.push(*a);
                limit.push(*b);
            }
            _ => return Err(wrong_type(&format!("{path}[{i}]"), "a [start, limit] pair", pair)),
        }
    }
    let mut attrs = vec![("start", AttrValue::IntList(start)), ("limit", AttrValue::IntList(limit))];
    if let Some(step) = n.opt_i64_list("slice_strides")?.filter(|s| s.iter().any(|&v| v != 1)) {
        attrs.push(("step", AttrValue::IntList(step)));
    }
    Ok(attrs)
}

/// A `CONCATENATE` node: as many input ports as its `inputs` has tensors, a list (ours) or an
/// object keyed by position, `{"0": .., "1": ..}` (cudnn-frontend's).
fn read_concatenate(n: &Obj<'_>, label: &str) -> Result<FrontendNode, ReadError> {
    let axis = match n.get("axis") {
        None => return Err(CodecError::MissingField { path: n.field_path("axis") }.into()),
        Some(v) => v.as_i64(&n.field_path("axis"))?,
    };
    let mut attrs = vec![("axis", "axis", FrontendAttr::Value(AttrValue::Int(axis)))];
    if let Some(v) = n.get("in_place_index") {
        let index = v.as_i64(&n.field_path("in_place_index"))?;
        attrs.push(("in_place_index", "in_place_index", FrontendAttr::Value(AttrValue::Int(index))));
    }
    let call = LayoutKind::Concatenate.name();
    let count = match n.get("inputs") {
        Some(Json::Arr(items)) => items.len(),
        Some(Json::Obj(members)) => members.len(),
        Some(other) => return Err(wrong_type(&n.field_path("inputs"), "a list of tensors", other).into()),
        None => return Err(CodecError::MissingField { path: n.field_path("inputs") }.into()),
    };
    if count == 0 || count > CONCAT_PORTS.len() {
        return Err(ReadError::Attr {
            node: label.to_string(),
            source: AttrError::Inputs {
                op: call.to_string(),
                reason: format!("takes 1 to {} inputs, found {count}", CONCAT_PORTS.len()),
            },
        });
    }
    Ok(FrontendNode {
        inputs: CONCAT_PORTS[..count].iter().map(|p| p.name).collect(),
        listed_inputs: true,
        ..FrontendNode::plain(LayoutKind::Concatenate.signature(), attrs)
    })
}

/// A reshape from cudnn-frontend's fields alone: without `dim`, Y's dims are the shape.
fn reshape_from_fields(fe: &FrontendNode, _inputs: usize, label: &str) -> Result<Pending, ReadError> {
    Ok(match Op::from_call(fe.call, &call_attrs(&fe.attrs)).map_err(ReadError::attr(label))? {
        Op::Layout(Layout::Reshape { shape }) if shape.is_empty() => Pending::Resolve(Box::new(|t: &NodeDims<'_>| {
            let shape = t.output(0).to_vec();
            if shape.is_empty() {
                return Err(CodecError::MissingField { path: format!("{}.dim", t.label) }.into());
            }
            Ok(Op::Layout(Layout::Reshape { shape }))
        })),
        other => Pending::Ready(other),
    })
}

/// The fields of a layout node.
pub(crate) fn write(op: &Layout, _cx: &WriteCx<'_>) -> FrontendFields {
    let mut fields = match op {
        // Y's tensor is always written with its dims (the shape) and strides, so the node's own
        // are left empty, as cudnn-frontend writes a reshape whose output's dims were set.
        Layout::Reshape { .. } => {
            vec![("dim", Json::Arr(Vec::new())), ("reshape_mode", Json::str("VIEW_ONLY")), ("stride", Json::Arr(Vec::new()))]
        }
        Layout::Transpose { permutation } => vec![("permutation", ints(permutation))],
        Layout::Slice { start, limit, .. } => {
            let rank = start.len();
            let pairs = start.iter().zip(limit).map(|(&a, &b)| ints(&[a, b])).collect();
            vec![("slice_strides", ints(&op.steps(rank))), ("slices", Json::Arr(pairs))]
        }
        Layout::Concatenate { axis, in_place_index, .. } => {
            vec![("axis", Json::Int(*axis)), ("in_place_index", in_place_index.map_or(Json::Null, Json::Int))]
        }
    };
    fields.push(("tag", Json::str(op.kind().frontend_tag())));
    let concatenate = matches!(op, Layout::Concatenate { .. });
    // cudnn-frontend's `Concatenate_attributes` serializes no `compute_data_type`.
    FrontendFields { listed_inputs: concatenate, compute_data_type: !concatenate, ..FrontendFields::plain(fields) }
}
