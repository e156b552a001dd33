//! The `tensors` of a document (an array in `json_version` 2.0, an object keyed by uid or name in
//! 1.0), each checked on its own, by-value scalars included.

use std::collections::HashSet;

use super::{data_type, Result};
use crate::codec::f32_value;
use crate::codec::f64_value;
use crate::codec::float::{near_f64, same_f32};
use crate::codec::json::{Json, Obj};
use crate::ir::GraphError;
use crate::serialize::layout::{ScalarKind, EXT, TENSOR_FIELDS};
use crate::serialize::{SerializeError, MAX_RANK, MAX_TENSORS};
use crate::DataType;

/// One entry of the `tensors` map, checked on its own.
pub(super) struct RawTensor {
    /// Its key in the map (what ports refer to).
    pub(super) key: String,
    pub(super) name: String,
    /// The uid, if the document assigned one.
    pub(super) uid: Option<i64>,
    pub(super) dims: Vec<i64>,
    /// `None`: to be inferred (packed).
    pub(super) strides: Option<Vec<i64>>,
    /// `None`: to be inferred (from the producing op, else from the context).
    pub(super) data_type: Option<DataType>,
    pub(super) is_virtual: bool,
    pub(super) pass_by_value: Option<Scalar>,
    /// `is_pass_by_value` without a value: a host scalar supplied at execute.
    pub(super) host_scalar: bool,
    /// cudnn-frontend's `ragged_offset_uid` / `ragged_offset_name`: a packed tensor's offsets.
    pub(super) ragged_offset: Option<RaggedRef>,
}

/// The ragged offsets a tensor names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RaggedRef {
    /// `ragged_offset_uid`.
    pub(super) uid: Option<i64>,
    /// `ragged_offset_name`.
    pub(super) name: Option<String>,
    /// The field's path, for errors.
    pub(super) path: String,
}

/// A by-value scalar's value as read.
#[derive(Clone, Copy)]
pub(super) struct Scalar {
    pub(super) value: f64,
    /// From our extension: kept bit for bit. Otherwise rounded to the tensor's type, as the IR
    /// stores scalars.
    pub(super) exact: bool,
}

pub(super) fn read_tensors(top: &Obj<'_>) -> Result<Vec<RawTensor>> {
    // json_version 2.0: an array of tensors, each referred to by its uid (or, unassigned, its name).
    if let Some(Json::Arr(items)) = top.get("tensors") {
        if items.len() > MAX_TENSORS {
            return Err(SerializeError::TooMany {
                path: "tensors".into(),
                what: "tensors",
                count: items.len(),
                max: MAX_TENSORS,
            });
        }
        let mut seen = HashSet::new();
        return items
            .iter()
            .enumerate()
            .map(|(i, value)| {
                let t = value.as_obj(&format!("tensors[{i}]"))?;
                let key = match t.opt_i64("uid")? {
                    Some(uid) if t.bool_or("uid_assigned", true)? => uid.to_string(),
                    _ => t.str("name")?.to_string(),
                };
                // Two tensors answering to one reference would make ports ambiguous.
                if !seen.insert(key.clone()) {
                    return Err(SerializeError::DuplicateKey { path: "tensors".into(), key });
                }
                read_tensor(&key, value)
            })
            .collect();
    }
    let Some(map) = top.opt_obj("tensors")? else {
        return Ok(Vec::new());
    };
    let members = map.members();
    if members.len() > MAX_TENSORS {
        return Err(SerializeError::TooMany {
            path: "tensors".into(),
            what: "tensors",
            count: members.len(),
            max: MAX_TENSORS,
        });
    }
    members.iter().map(|(key, value)| read_tensor(key, value)).collect()
}

fn rank_checked(list: Vec<i64>, path: String) -> Result<Vec<i64>> {
    if list.len() > MAX_RANK {
        return Err(SerializeError::TooMany { path, what: "dims", count: list.len(), max: MAX_RANK });
    }
    Ok(list)
}

fn read_tensor(key: &str, value: &Json) -> Result<RawTensor> {
    let t = value.as_obj(&format!("tensors[{key:?}]"))?;
    t.deny_unknown(&TENSOR_FIELDS)?;
    let name = t.str("name")?.to_string();
    let dims = rank_checked(t.req("dim")?.as_i64_list(&t.field_path("dim"))?, t.field_path("dim"))?;
    let strides = match t.get("stride") {
        None => None,
        Some(s) => {
            let s = rank_checked(s.as_i64_list(&t.field_path("stride"))?, t.field_path("stride"))?;
            (!s.is_empty()).then_some(s)
        }
    };
    let is_virtual = t.bool_or("is_virtual", false)?;
    let data_type = data_type(&t, "data_type")?;
    match t.opt_str("reordering_type")? {
        None | Some("NONE") => {}
        Some(r @ ("INT8x32" | "F16x16" | "F8_128x4")) => {
            return Err(SerializeError::Unsupported {
                path: t.field_path("reordering_type"),
                feature: format!("tensor reordering {r}"),
            })
        }
        Some(r) => {
            return Err(SerializeError::UnknownEnum {
                path: t.field_path("reordering_type"),
                kind: "reordering type",
                value: r.to_string(),
            })
        }
    }
    // Which node reads the tensor packed, and so whether it may, is the nodes' to say
    // (`read::ragged`).
    let ragged_uid = t.opt_i64("ragged_offset_uid")?;
    let ragged_name = t.opt_str("ragged_offset_name")?.map(str::to_string);
    let ragged_offset = (ragged_uid.is_some() || ragged_name.is_some()).then(|| RaggedRef {
        uid: ragged_uid,
        name: ragged_name,
        path: t.field_path(if ragged_uid.is_some() { "ragged_offset_uid" } else { "ragged_offset_name" }),
    });
    let uid_field = t.opt_i64("uid")?;
    let uid = if t.bool_or("uid_assigned", uid_field.is_some())? {
        Some(uid_field.ok_or_else(|| SerializeError::MissingField { path: t.field_path("uid") })?)
    } else {
        None
    };
    // Checked here, not only by `validate`: a uid out of range would otherwise surface first as
    // the ports that refer to this tensor's uid not finding it.
    if let Some(uid) = uid.filter(|u| !(1..=crate::ir::MAX_UID).contains(u)) {
        return Err(GraphError::BadUid { tensor: name, uid }.into());
    }
    let (pass_by_value, host_scalar) = match read_scalar(&t, &name)? {
        ByValue::No => (None, false),
        ByValue::Value(s) => (Some(s), false),
        ByValue::AtExecute => (None, true),
    };
    Ok(RawTensor {
        key: key.to_string(),
        name,
        uid,
        dims,
        strides,
        data_type,
        is_virtual,
        pass_by_value,
        host_scalar,
        ragged_offset,
    })
}

/// A by-value scalar as cudnn-frontend's variant holds it.
enum FrontendScalar {
    Int(i64),
    F32(f32),
    /// `None`: the `double` was written as `null` (NaN or an infinity).
    F64(Option<f64>),
}

/// What a tensor's `is_pass_by_value` and `pass_by_value` say.
enum ByValue {
    /// Not by value.
    No,
    /// A by-value scalar with its value.
    Value(Scalar),
    /// A by-value scalar without a value: supplied at execute.
    AtExecute,
}

fn read_scalar(t: &Obj<'_>, name: &str) -> Result<ByValue> {
    let is_pass_by_value = t.bool_or("is_pass_by_value", false)?;
    let ext = t.opt_obj(EXT)?;
    let exact = match &ext {
        None => None,
        Some(e) => {
            e.deny_unknown(&["pass_by_value"])?;
            Some(f64_value(e.req("pass_by_value")?, &e.field_path("pass_by_value"))?)
        }
    };
    let bad = |reason: &str| SerializeError::BadScalar { tensor: name.to_string(), reason: reason.to_string() };
    let Some(variant) = t.get("pass_by_value") else {
        if let Some(e) = &ext {
            return Err(SerializeError::ExtensionMismatch {
                path: e.field_path("pass_by_value"),
                field: t.field_path("pass_by_value"),
            });
        }
        // cudnn-frontend's by-value scalar without a value (an epsilon, a scale): the caller
        // supplies it at execute.
        return Ok(if is_pass_by_value { ByValue::AtExecute } else { ByValue::No });
    };
    if !is_pass_by_value {
        return Err(bad("pass_by_value is set but is_pass_by_value is false"));
    }
    let v = variant.as_obj(&t.field_path("pass_by_value"))?;
    v.deny_unknown(&["index", "value"])?;
    let index_path = v.field_path("index");
    let index = v.req("index")?.as_i64(&index_path)?;
    let kind = ScalarKind::from_index(index).ok_or_else(|| SerializeError::OutOfRange {
        path: index_path,
        value: index.to_string(),
        range: "0..=5 (int64, int32, half, float, double, bfloat16)",
    })?;
    let value_path = v.field_path("value");
    let fe = match kind {
        ScalarKind::Double => FrontendScalar::F64(v.get("value").map(|x| f64_value(x, &value_path)).transpose()?),
        ScalarKind::Half | ScalarKind::Float | ScalarKind::BFloat16 => {
            FrontendScalar::F32(f32_value(v.req("value")?, &value_path)?)
        }
        ScalarKind::Int64 | ScalarKind::Int32 => {
            let n = v.req("value")?.as_i64(&value_path)?;
            if kind == ScalarKind::Int32 && i32::try_from(n).is_err() {
                return Err(SerializeError::OutOfRange {
                    path: value_path,
                    value: n.to_string(),
                    range: "the 32-bit signed integers",
                });
            }
            FrontendScalar::Int(n)
        }
    };
    let Some(x) = exact else {
        let value = match fe {
            FrontendScalar::Int(n) => n as f64,
            FrontendScalar::F32(f) => f64::from(f),
            FrontendScalar::F64(Some(d)) => d,
            FrontendScalar::F64(None) => return Err(bad("the double value is null")),
        };
        return Ok(ByValue::Value(Scalar { value, exact: false }));
    };
    // Our extension refines cudnn-frontend's value; it must agree with it.
    let agrees = match fe {
        FrontendScalar::Int(n) => (x as i64) == n,
        FrontendScalar::F32(f) => same_f32(x as f32, f),
        FrontendScalar::F64(Some(d)) => near_f64(d, x),
        FrontendScalar::F64(None) => !x.is_finite(),
    };
    if !agrees {
        let path = ext.as_ref().map_or_else(String::new, |e| e.field_path("pass_by_value"));
        return Err(SerializeError::ExtensionMismatch { path, field: value_path });
    }
    Ok(ByValue::Value(Scalar { value: x, exact: true }))
}
