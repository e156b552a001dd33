//! JSON tree → [`Graph`]: reads cudnn-frontend's layout (ours or one cudnn-frontend logged, with
//! tensors referred to by uid or by name), resolves it into the IR and validates it.
//!
//! Stages: document header (version, extension) → context → tensors (each checked alone) → nodes
//! (ports resolved against the tensors, op built from its attributes) → fill-in (what
//! cudnn-frontend's `validate()` would infer, for graphs logged before it ran) → uids, tensor order
//! and strides → [`Graph::validate`] → fingerprint. Every failure is a [`SerializeError`] naming
//! what is at fault; nothing is skipped silently: a field that is neither cudnn-frontend's nor ours
//! is an error. cudnn-frontend's fields that do not bear on the structure (`cudnn_backend_version`,
//! `sm_count`, the plan payload's fields) are type-checked or read past, as cudnn-frontend does.

use std::collections::{HashMap, HashSet};

use super::float::{hex_to_f32, hex_to_f64, near_f64, parse_hex, same_f32};
use super::json::{wrong_type, Json, Obj};
use super::layout::{
    dsl_attr_of, parse_data_type, parse_reduction_mode, DataTypeName, ScalarKind, CONTEXT_FIELDS, EXT, FORMAT,
    JSON_VERSIONS, MATMUL_FIELDS, NODE_FIELDS, POINTWISE_FIELDS, POINTWISE_FLOAT_FIELDS, REDUCTION_FIELDS, TAGS,
    TAG_MATMUL, TAG_POINTWISE, TAG_REDUCTION, TENSOR_FIELDS, TOP_FIELDS,
};
use super::layout::{norm_kind_of_tag, NORM_PEER_STATS_FIELD, NORM_PHASE_FIELD, NORM_TAGS};
use super::{SerializeError, MAX_NODES, MAX_RANK, MAX_TENSORS};
use crate::dim::{shape_string, Concrete};
use crate::ir::GraphError;
use crate::ops::{matmul, AttrValue, Norm, NormKind, NormPhase, Op, PointwiseMode, TensorMeta};
use crate::{Context, DataType, Graph, Node, Tensor, TensorId};

type Result<T> = std::result::Result<T, SerializeError>;

/// The graph in `doc`, validated.
pub(crate) fn graph_from_json(doc: &Json) -> Result<Graph> {
    if !matches!(doc, Json::Obj(_)) {
        return Err(wrong_type("(document)", "an object", doc));
    }
    let top = doc.as_obj("")?;
    top.deny_unknown(&TOP_FIELDS)?;
    match top.req("json_version")? {
        Json::Str(v) if JSON_VERSIONS.contains(&v.as_str()) => {}
        Json::Str(v) => return Err(SerializeError::UnsupportedVersion { found: v.clone(), supported: "1.0 or 2.0" }),
        other => return Err(wrong_type("json_version", "a string", other)),
    }
    let ext = Extension::read(&top)?;
    let cx = RawContext::read(&top)?;
    let mut tensors = read_tensors(&top)?;
    let nodes = read_nodes(&top, &cx, &tensors)?;
    let nodes = fill_in(&cx, &mut tensors, nodes)?;
    let graph = assemble(cx, tensors, nodes, ext.tensor_order)?;
    graph.validate()?;
    if let Some(stored) = ext.fingerprint {
        let computed = graph.fingerprint();
        if computed != stored {
            return Err(SerializeError::FingerprintMismatch { stored, computed });
        }
    }
    Ok(graph)
}

/// The top-level `cudnn_graph` object.
#[derive(Default)]
struct Extension {
    fingerprint: Option<u64>,
    tensor_order: Option<Vec<i64>>,
}

impl Extension {
    fn read(top: &Obj<'_>) -> Result<Extension> {
        let Some(ext) = top.opt_obj(EXT)? else {
            return Ok(Extension::default());
        };
        ext.deny_unknown(&["fingerprint", "format", "tensor_order"])?;
        let format = ext.req("format")?;
        if format.as_i64(&ext.field_path("format")).ok() != Some(FORMAT as i64) {
            let found = match format {
                Json::Str(s) => format!("{s:?}"),
                other => other.to_pretty(),
            };
            return Err(SerializeError::UnsupportedFormat { found, supported: FORMAT });
        }
        let fingerprint = match ext.opt_str("fingerprint")? {
            None => None,
            Some(s) => Some(parse_hex(s, 16).ok_or_else(|| SerializeError::BadFloat {
                path: ext.field_path("fingerprint"),
                value: s.to_string(),
                expected: "a 64-bit fingerprint in hex such as \"0x0123456789abcdef\"",
            })?),
        };
        let tensor_order =
            ext.get("tensor_order").map(|v| v.as_i64_list(&ext.field_path("tensor_order"))).transpose()?;
        Ok(Extension { fingerprint, tensor_order })
    }
}

/// Reads an optional data-type field.
fn data_type(obj: &Obj<'_>, key: &str) -> Result<Option<DataType>> {
    let Some(s) = obj.opt_str(key)? else {
        return Ok(None);
    };
    match parse_data_type(s) {
        DataTypeName::Known(d) => Ok(Some(d)),
        DataTypeName::Unsupported => {
            Err(SerializeError::UnsupportedDataType { path: obj.field_path(key), value: s.to_string() })
        }
        DataTypeName::Unknown => {
            Err(SerializeError::UnknownEnum { path: obj.field_path(key), kind: "data type", value: s.to_string() })
        }
    }
}

/// cudnn-frontend's context: graph name and default data types (each may be unset).
struct RawContext {
    name: String,
    compute: Option<DataType>,
    intermediate: Option<DataType>,
    io: Option<DataType>,
}

impl RawContext {
    fn read(top: &Obj<'_>) -> Result<RawContext> {
        let Some(c) = top.opt_obj("context")? else {
            return Ok(RawContext { name: String::new(), compute: None, intermediate: None, io: None });
        };
        c.deny_unknown(&CONTEXT_FIELDS)?;
        // Planning knobs, not structure: type-checked, then left to the plan payload.
        c.opt_i64("sm_count")?;
        c.bool_or("is_dynamic_shape_enabled", false)?;
        c.bool_or("is_override_shape_enabled", false)?;
        Ok(RawContext {
            name: c.opt_str("name")?.unwrap_or_default().to_string(),
            compute: data_type(&c, "compute_data_type")?,
            intermediate: data_type(&c, "intermediate_data_type")?,
            io: data_type(&c, "io_data_type")?,
        })
    }
}

/// One entry of the `tensors` map, checked on its own.
struct RawTensor {
    /// Its key in the map (what ports refer to).
    key: String,
    name: String,
    /// The uid, if the document assigned one.
    uid: Option<i64>,
    dims: Vec<i64>,
    /// `None`: to be inferred (packed).
    strides: Option<Vec<i64>>,
    /// `None`: to be inferred (from the producing op, else from the context).
    data_type: Option<DataType>,
    is_virtual: bool,
    pass_by_value: Option<Scalar>,
}

/// A by-value scalar's value as read.
#[derive(Clone, Copy)]
struct Scalar {
    value: f64,
    /// From our extension: kept bit for bit. Otherwise rounded to the tensor's type, as the IR
    /// stores scalars.
    exact: bool,
}

fn read_tensors(top: &Obj<'_>) -> Result<Vec<RawTensor>> {
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
    for field in ["ragged_offset_uid", "ragged_offset_name"] {
        if t.get(field).is_some() {
            return Err(SerializeError::Unsupported { path: t.field_path(field), feature: "ragged offsets".into() });
        }
    }
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
    let pass_by_value = read_scalar(&t, &name)?;
    Ok(RawTensor { key: key.to_string(), name, uid, dims, strides, data_type, is_virtual, pass_by_value })
}

/// A by-value scalar as cudnn-frontend's variant holds it.
enum FrontendScalar {
    Int(i64),
    F32(f32),
    /// `None`: the `double` was written as `null` (NaN or an infinity).
    F64(Option<f64>),
}

/// An f32 written in cudnn-frontend's hex encoding, or as a plain number.
pub(crate) fn f32_value(v: &Json, path: &str) -> Result<f32> {
    match v {
        Json::Str(s) => hex_to_f32(s).ok_or_else(|| SerializeError::BadFloat {
            path: path.to_string(),
            value: s.clone(),
            expected: "a 32-bit float bit pattern in hex such as \"3DCCCCCD\"",
        }),
        Json::Float(x) => Ok(*x as f32),
        Json::Int(x) => Ok(*x as f32),
        Json::UInt(x) => Ok(*x as f32),
        other => Err(wrong_type(path, "a float (hex bit pattern or number)", other)),
    }
}

/// An f64 written as our hex encoding, or as a plain number.
fn f64_value(v: &Json, path: &str) -> Result<f64> {
    match v {
        Json::Str(s) => hex_to_f64(s).ok_or_else(|| SerializeError::BadFloat {
            path: path.to_string(),
            value: s.clone(),
            expected: "a 64-bit float bit pattern in hex such as \"0x3fe0000000000000\"",
        }),
        Json::Float(x) => Ok(*x),
        Json::Int(x) => Ok(*x as f64),
        Json::UInt(x) => Ok(*x as f64),
        other => Err(wrong_type(path, "a float (hex bit pattern or number)", other)),
    }
}

fn read_scalar(t: &Obj<'_>, name: &str) -> Result<Option<Scalar>> {
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
        if is_pass_by_value {
            return Err(SerializeError::Unsupported {
                path: t.field_path("pass_by_value"),
                feature: "a by-value scalar supplied at execution (is_pass_by_value without a value)".into(),
            });
        }
        if let Some(e) = &ext {
            return Err(SerializeError::ExtensionMismatch {
                path: e.field_path("pass_by_value"),
                field: t.field_path("pass_by_value"),
            });
        }
        return Ok(None);
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
        return Ok(Some(Scalar { value, exact: false }));
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
    Ok(Some(Scalar { value: x, exact: true }))
}

/// A node with its ports resolved to tensor positions in the `tensors` map.
struct RawNode {
    name: String,
    /// For error messages: the name, or `nodes[i]` if the document gives none.
    label: String,
    op: PendingOp,
    inputs: Vec<usize>,
    outputs: Vec<usize>,
    compute_data_type: DataType,
}

fn read_nodes(top: &Obj<'_>, cx: &RawContext, tensors: &[RawTensor]) -> Result<Vec<RawNode>> {
    let nodes = match top.get("nodes") {
        None => return Ok(Vec::new()),
        Some(Json::Arr(nodes)) => nodes,
        Some(other) => return Err(wrong_type("nodes", "an array", other)),
    };
    if nodes.len() > MAX_NODES {
        return Err(SerializeError::TooMany {
            path: "nodes".into(),
            what: "nodes",
            count: nodes.len(),
            max: MAX_NODES,
        });
    }
    let by_key: HashMap<&str, usize> = tensors.iter().enumerate().map(|(i, t)| (t.key.as_str(), i)).collect();
    let nodes: Vec<RawNode> =
        nodes.iter().enumerate().map(|(i, n)| read_node(i, n, cx, &by_key)).collect::<Result<_>>()?;
    // The IR's validation assumes one producer per tensor; a document can say otherwise.
    let mut producer: HashMap<usize, &str> = HashMap::new();
    for n in &nodes {
        for &o in &n.outputs {
            if let Some(first) = producer.insert(o, &n.label) {
                return Err(SerializeError::ProducedTwice {
                    tensor: tensors.get(o).map(|t| t.name.clone()).unwrap_or_default(),
                    first: first.to_string(),
                    second: n.label.clone(),
                });
            }
        }
    }
    Ok(nodes)
}

/// An op, or a cudnn-frontend reduction whose `dims` must wait for its input's dims.
enum PendingOp {
    Ready(Op),
    Reduction {
        call: &'static str,
    },
    /// An attention node read from cudnn-frontend's fields alone: a scale equal (as an f32) to
    /// the default for Q's head dim reads as the default.
    Attention(crate::ops::Sdpa),
    /// A convolution read from cudnn-frontend's fields alone: a filter gradient's filter and a
    /// data gradient's output padding come from the tensors.
    Conv(crate::ops::Conv),
    /// A reshape without `dim`: Y's dims are the shape.
    Reshape,
}

/// A cudnn-frontend attribute value as written (f32 fields keep their bits for comparison).
#[derive(Clone)]
enum FrontendAttr {
    /// A field that maps to a DSL attribute value as is (a convolution's paddings).
    Value(AttrValue),
    Int(i64),
    F32(f32),
    /// An enum field, as the DSL spells it (a norm's `forward_phase`).
    Name(&'static str),
    /// Told by the ports (an RMS-norm backward with a DBIAS output).
    Bool(bool),
}

/// The DSL attributes that cudnn-frontend's fields set.
fn frontend_call_attrs(attrs: &FrontendAttrs) -> Vec<(String, AttrValue)> {
    attrs
        .iter()
        .map(|(_, dsl, v)| {
            let v = match v {
                FrontendAttr::Int(x) => AttrValue::Int(*x),
                FrontendAttr::F32(x) => AttrValue::Float(f64::from(*x)),
                FrontendAttr::Name(x) => AttrValue::Name(x.to_string()),
                FrontendAttr::Bool(x) => AttrValue::Bool(*x),
                FrontendAttr::Value(v) => v.clone(),
            };
            (dsl.to_string(), v)
        })
        .collect()
}

/// A cudnn-frontend attribute: its field, the DSL attribute it sets, its value.
type FrontendAttrs = Vec<(&'static str, &'static str, FrontendAttr)>;

/// What a tag reads to before the ports are known.
struct Family {
    call: &'static str,
    inputs: Vec<&'static str>,
    outputs: &'static [&'static str],
    /// Ports cudnn-frontend has that we do not support.
    unsupported_ports: &'static [&'static str],
    attrs: FrontendAttrs,
    pointwise: Option<PointwiseMode>,
}

/// Rejects fields that neither every node nor this tag's attributes have.
fn deny_unknown_node_fields(n: &Obj<'_>, own: &[&'static str]) -> Result<()> {
    let accepted: Vec<&'static str> = NODE_FIELDS.iter().chain(own).copied().collect();
    n.deny_unknown(&accepted)
}

fn read_family(n: &Obj<'_>, label: &str, tag: &str) -> Result<Family> {
    match tag {
        TAG_MATMUL => deny_unknown_node_fields(n, &MATMUL_FIELDS)?,
        TAG_POINTWISE => deny_unknown_node_fields(n, &POINTWISE_FIELDS)?,
        TAG_REDUCTION => deny_unknown_node_fields(n, &REDUCTION_FIELDS)?,
        _ => {}
    }
    match tag {
        TAG_MATMUL => {
            match n.get("padding_value") {
                None => {}
                Some(Json::Float(x)) if *x == 0.0 => {}
                Some(Json::Int(0)) => {}
                Some(v @ (Json::Float(_) | Json::Int(_) | Json::UInt(_))) => {
                    return Err(SerializeError::Unsupported {
                        path: n.field_path("padding_value"),
                        feature: format!("matmul padding {}", v.to_pretty()),
                    })
                }
                Some(other) => return Err(wrong_type(&n.field_path("padding_value"), "a number", other)),
            }
            let sig = matmul::signature();
            Ok(Family {
                call: sig.name,
                inputs: sig.inputs.iter().map(|p| p.name).collect(),
                outputs: sig.outputs,
                unsupported_ports: &["M_override", "N_override", "K_override"],
                attrs: Vec::new(),
                pointwise: None,
            })
        }
        TAG_POINTWISE => {
            let mode_name = n.str("mode")?;
            let mode = PointwiseMode::from_cudnn_name(mode_name).ok_or_else(|| SerializeError::UnknownEnum {
                path: n.field_path("mode"),
                kind: "pointwise mode",
                value: mode_name.to_string(),
            })?;
            let mut attrs = Vec::new();
            for field in std::iter::once("axis").chain(POINTWISE_FLOAT_FIELDS) {
                let Some(v) = n.get(field) else { continue };
                let dsl = dsl_attr_of(field, mode).ok_or_else(|| SerializeError::AttrNotAccepted {
                    node: label.to_string(),
                    mode: mode.cudnn_name(),
                    field,
                })?;
                let value = if field == "axis" {
                    FrontendAttr::Int(v.as_i64(&n.field_path(field))?)
                } else {
                    FrontendAttr::F32(f32_value(v, &n.field_path(field))?)
                };
                attrs.push((field, dsl, value));
            }
            let sig = mode.signature();
            Ok(Family {
                call: sig.name,
                inputs: sig.inputs.iter().map(|p| p.name).collect(),
                outputs: sig.outputs,
                unsupported_ports: &[],
                attrs,
                pointwise: Some(mode),
            })
        }
        TAG_REDUCTION => {
            let mode_name = n.str("mode")?;
            let mode = parse_reduction_mode(mode_name).ok_or_else(|| SerializeError::UnknownEnum {
                path: n.field_path("mode"),
                kind: "reduction mode",
                value: mode_name.to_string(),
            })?;
            if n.bool_or("is_deterministic", false)? {
                return Err(SerializeError::Unsupported {
                    path: n.field_path("is_deterministic"),
                    feature: "deterministic reductions".into(),
                });
            }
            let sig = mode.signature();
            Ok(Family {
                call: sig.name,
                inputs: sig.inputs.iter().map(|p| p.name).collect(),
                outputs: sig.outputs,
                unsupported_ports: &[],
                attrs: Vec::new(),
                pointwise: None,
            })
        }
        tag if NORM_TAGS.contains(&tag) => read_norm_family(n, tag),
        super::sdpa::TAG_FORWARD | super::sdpa::TAG_BACKWARD => read_sdpa_family(n, tag),
        tag if super::window::TAGS.contains(&tag) => {
            let (call, fields) = super::window::read_fields(n, tag)?;
            let attrs: FrontendAttrs = fields.into_iter().map(|(dsl, v)| (dsl, dsl, FrontendAttr::Value(v))).collect();
            let sig = crate::ops::lookup(call).expect("window tags read to known calls");
            let mut inputs: Vec<&'static str> = sig.inputs.iter().map(|p| p.name).collect();
            if tag == super::window::TAG_CONCATENATE {
                // A list of tensors: as many ports as entries.
                let count = match n.get("inputs") {
                    Some(Json::Arr(items)) => items.len(),
                    Some(other) => return Err(wrong_type(&n.field_path("inputs"), "a list of tensors", other)),
                    None => return Err(SerializeError::MissingField { path: n.field_path("inputs") }),
                };
                let ports = crate::ops::layout::CONCAT_PORTS;
                if count == 0 || count > ports.len() {
                    return Err(SerializeError::Attr {
                        node: label.to_string(),
                        source: crate::ops::AttrError::Inputs {
                            op: call.to_string(),
                            reason: format!("takes 1 to {} inputs, found {count}", ports.len()),
                        },
                    });
                }
                inputs = ports[..count].iter().map(|p| p.name).collect();
            }
            let outputs = match sig.family {
                crate::ops::Family::Resample => match Op::from_call(call, &frontend_call_attrs(&attrs)) {
                    Ok(Op::Resample(r)) => r.outputs(),
                    Ok(_) => sig.outputs,
                    Err(source) => return Err(SerializeError::Attr { node: label.to_string(), source }),
                },
                _ => sig.outputs,
            };
            Ok(Family { call, inputs, outputs, unsupported_ports: &[], attrs, pointwise: None })
        }
        other => Err(SerializeError::UnknownTag {
            node: label.to_string(),
            tag: other.to_string(),
            supported: TAGS
                .iter()
                .chain(&NORM_TAGS)
                .chain(&[super::sdpa::TAG_FORWARD, super::sdpa::TAG_BACKWARD])
                .chain(&super::window::TAGS)
                .copied()
                .collect(),
        }),
    }
}

/// A normalization node: `forward_phase` gives the phase (cudnn-frontend requires it), an
/// `RMS_NORM` with a BIAS input is `rmsnorm_bias`, an `RMS_NORM_BPROP` with a DBIAS output has
/// `dbias = true`; batch norm needs its running statistics and no peer statistics.
fn read_norm_family(n: &Obj<'_>, tag: &str) -> Result<Family> {
    let has_port = |field: &str, port: &str| -> Result<bool> {
        Ok(n.opt_obj(field)?.and_then(|p| p.get(port)).is_some_and(|v| !matches!(v, Json::Null)))
    };
    let unknown = || SerializeError::UnknownEnum { path: n.field_path("tag"), kind: "tag", value: tag.to_string() };
    let kind = norm_kind_of_tag(tag, has_port("inputs", "BIAS")?).ok_or_else(unknown)?;
    let batch = matches!(kind, NormKind::BatchNorm | NormKind::BatchNormBackward);
    let own: Vec<&'static str> = [(kind.takes_phase(), NORM_PHASE_FIELD), (batch, NORM_PEER_STATS_FIELD)]
        .into_iter()
        .filter_map(|(has, field)| has.then_some(field))
        .collect();
    deny_unknown_node_fields(n, &own)?;
    let mut norm = Norm::new(kind);
    let mut attrs: FrontendAttrs = Vec::new();
    if kind.takes_phase() {
        let path = n.field_path(NORM_PHASE_FIELD);
        let name = match n.get(NORM_PHASE_FIELD) {
            None | Some(Json::Null) => return Err(SerializeError::MissingField { path }),
            Some(Json::Str(s)) => s,
            Some(other) => return Err(wrong_type(&path, "a string", other)),
        };
        norm.phase = NormPhase::from_frontend_name(name).ok_or_else(|| SerializeError::UnknownEnum {
            path,
            kind: "norm forward phase",
            value: name.clone(),
        })?;
        attrs.push((NORM_PHASE_FIELD, "phase", FrontendAttr::Name(norm.phase.name())));
    }
    if batch {
        let path = n.field_path(NORM_PEER_STATS_FIELD);
        match n.get(NORM_PEER_STATS_FIELD) {
            None | Some(Json::Null) => {}
            Some(Json::Arr(peers)) if peers.is_empty() => {}
            Some(Json::Arr(_)) => {
                return Err(SerializeError::Unsupported { path, feature: "batch norm peer statistics".into() })
            }
            Some(other) => return Err(wrong_type(&path, "an array", other)),
        }
    }
    if kind == NormKind::BatchNorm && !has_port("inputs", "PREV_RUNNING_MEAN")? {
        return Err(SerializeError::Unsupported {
            path: n.field_path("inputs"),
            feature: "batch norm without running statistics (PREV_RUNNING_MEAN, PREV_RUNNING_VAR, MOMENTUM)".into(),
        });
    }
    if kind == NormKind::RmsNormBackward && has_port("outputs", "DBIAS")? {
        norm.dbias = true;
        attrs.push(("outputs", "dbias", FrontendAttr::Bool(true)));
    }
    let sig = kind.signature();
    Ok(Family {
        call: sig.name,
        inputs: sig.inputs.iter().map(|p| p.name).collect(),
        outputs: norm.outputs(),
        // cudnn-frontend wires DLN's epsilon only for cuDNN < 8.9.6.
        unsupported_ports: if kind == NormKind::LayerNormBackward { &["EPSILON"] } else { &[] },
        attrs,
        pointwise: None,
    })
}

/// An attention node (`SDPA`, `SDPA_BWD`): its fields and which optional ports it has decide
/// the attributes, and those decide the ports (`Sdpa::inputs`).
fn read_sdpa_family(n: &Obj<'_>, tag: &str) -> Result<Family> {
    use super::sdpa::Read;
    let (pass, fields) = super::sdpa::read_fields(n, tag)?;
    let attrs: FrontendAttrs = fields
        .into_iter()
        .map(|(field, dsl, v)| {
            let v = match v {
                Read::Int(x) => FrontendAttr::Int(x),
                Read::F32(x) => FrontendAttr::F32(x),
                Read::Bool(x) => FrontendAttr::Bool(x),
                Read::Name(x) => FrontendAttr::Name(x),
            };
            (field, dsl, v)
        })
        .collect();
    let op = Op::from_call(pass.name(), &frontend_call_attrs(&attrs))
        .map_err(|source| SerializeError::Attr { node: n.path().to_string(), source })?;
    let Op::Sdpa(sdpa) = &op else { unreachable!("an attention call makes an attention op") };
    Ok(Family {
        call: pass.name(),
        inputs: sdpa.inputs().iter().map(|p| p.name).collect(),
        outputs: sdpa.output_ports(),
        unsupported_ports: super::sdpa::UNSUPPORTED_PORTS,
        attrs,
        pointwise: None,
    })
}

/// Resolves a port map to tensor positions, in port order.
fn read_ports(
    n: &Obj<'_>,
    label: &str,
    field: &str,
    names: &[&'static str],
    unsupported: &[&'static str],
    by_key: &HashMap<&str, usize>,
) -> Result<Vec<usize>> {
    let direction = if field == "inputs" { "input" } else { "output" };
    let listed = field == "inputs" && n.opt_str("tag")? == Some(super::window::TAG_CONCATENATE);
    if let Some(Json::Arr(items)) = n.get(field).filter(|_| listed) {
        // A concatenation's inputs: a list, one tensor per port (the family has as many).
        return items
            .iter()
            .zip(names)
            .enumerate()
            .map(|(i, (reference, port))| {
                let path = format!("{}[{i}]", n.field_path(field));
                let key = match reference {
                    Json::Int(v) => v.to_string(),
                    Json::UInt(v) => v.to_string(),
                    Json::Str(s) => s.clone(),
                    other => return Err(wrong_type(&path, "a tensor uid or name", other)),
                };
                by_key.get(key.as_str()).copied().ok_or_else(|| SerializeError::UnknownTensorRef {
                    node: label.to_string(),
                    port: port.to_string(),
                    reference: if matches!(reference, Json::Str(_)) { format!("{key:?}") } else { key.clone() },
                })
            })
            .collect();
    }
    let given = match n.opt_obj(field)? {
        Some(p) => p,
        None => {
            return match names.first() {
                Some(port) => Err(SerializeError::MissingPort { node: label.to_string(), direction, port }),
                None => Ok(Vec::new()),
            }
        }
    };
    let mut found: HashMap<&str, usize> = HashMap::new();
    for (port, reference) in given.members() {
        // cudnn-frontend skips ports whose tensor is null.
        if matches!(reference, Json::Null) {
            continue;
        }
        if unsupported.contains(&port.as_str()) {
            return Err(SerializeError::Unsupported {
                path: given.field_path(port),
                feature: format!("the {port} port"),
            });
        }
        let Some(&port_name) = names.iter().find(|p| **p == port) else {
            return Err(SerializeError::UnknownPort {
                node: label.to_string(),
                direction,
                port: port.clone(),
                expected: names.to_vec(),
            });
        };
        // A reference is a uid (a number) or a key (a name); cudnn-frontend looks both up as keys.
        let key = match reference {
            Json::Int(v) => v.to_string(),
            Json::UInt(v) => v.to_string(),
            Json::Str(s) => s.clone(),
            other => return Err(wrong_type(&given.field_path(port), "a tensor uid or name", other)),
        };
        let index = by_key.get(key.as_str()).copied().ok_or_else(|| SerializeError::UnknownTensorRef {
            node: label.to_string(),
            port: port.clone(),
            reference: if matches!(reference, Json::Str(_)) { format!("{key:?}") } else { key.clone() },
        })?;
        found.insert(port_name, index);
    }
    names
        .iter()
        .map(|p| {
            found.get(p).copied().ok_or(SerializeError::MissingPort { node: label.to_string(), direction, port: p })
        })
        .collect()
}

/// A call's attributes, as [`Op::from_call`] takes them.
type CallAttrs = Vec<(String, AttrValue)>;

/// The `cudnn_graph.attrs` of a node (the DSL call's attributes, exactly) and its path.
fn read_ext_attrs(n: &Obj<'_>) -> Result<Option<(String, CallAttrs)>> {
    let Some(ext) = n.opt_obj(EXT)? else {
        return Ok(None);
    };
    ext.deny_unknown(&["attrs"])?;
    let attrs = ext.req("attrs")?.as_obj(&ext.field_path("attrs"))?;
    let values = attrs
        .members()
        .iter()
        .map(|(k, v)| {
            let path = attrs.field_path(k);
            let value = match v {
                Json::Str(_) | Json::Float(_) => AttrValue::Float(f64_value(v, &path)?),
                Json::Int(x) => AttrValue::Int(*x),
                Json::Arr(_) => AttrValue::IntList(v.as_i64_list(&path)?),
                Json::Bool(b) => AttrValue::Bool(*b),
                Json::Obj(members) => match members.as_slice() {
                    [(key, Json::Str(name))] if key == "name" => AttrValue::Name(name.clone()),
                    _ => return Err(wrong_type(&path, "`{\"name\": \"...\"}`", v)),
                },
                other => {
                    return Err(wrong_type(
                        &path,
                        "a float bit pattern, an integer, a bool, a name or a list of integers",
                        other,
                    ))
                }
            };
            Ok((k.clone(), value))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some((attrs.path().to_string(), values)))
}

/// Checks that our exact attributes agree with cudnn-frontend's fields, both ways.
fn check_ext_attrs(n: &Obj<'_>, fe: &FrontendAttrs, ext_path: &str, ext: &[(String, AttrValue)]) -> Result<()> {
    for (field, dsl, value) in fe {
        let agrees = match (ext.iter().find(|(k, _)| k == dsl).map(|(_, v)| v), value) {
            (Some(AttrValue::Int(a)), FrontendAttr::Int(b)) => a == b,
            (Some(AttrValue::Float(a)), FrontendAttr::F32(b)) => same_f32(*a as f32, *b),
            (Some(AttrValue::Int(a)), FrontendAttr::F32(b)) => same_f32(*a as f32, *b),
            _ => false,
        };
        if !agrees {
            return Err(SerializeError::ExtensionMismatch {
                path: format!("{ext_path}.{dsl}"),
                field: n.field_path(field),
            });
        }
    }
    Ok(())
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

fn read_node(index: usize, value: &Json, cx: &RawContext, by_key: &HashMap<&str, usize>) -> Result<RawNode> {
    let n = value.as_obj(&format!("nodes[{index}]"))?;
    let given_name = n.opt_str("name")?.filter(|s| !s.is_empty());
    let label = given_name.map_or_else(|| n.path().to_string(), str::to_string);
    let tag = n.str("tag")?;
    let family = read_family(&n, &label, tag)?;
    let inputs = read_ports(&n, &label, "inputs", &family.inputs, family.unsupported_ports, by_key)?;
    let outputs = read_ports(&n, &label, "outputs", family.outputs, &[], by_key)?;
    let compute_data_type = data_type(&n, "compute_data_type")?
        .or(cx.compute)
        .ok_or_else(|| SerializeError::MissingField { path: n.field_path("compute_data_type") })?;
    let op = match read_ext_attrs(&n)? {
        Some((ext_path, ext)) => {
            if let Some(mode) = family.pointwise {
                check_ext_attrs(&n, &family.attrs, &ext_path, &ext)?;
                // Every exact attribute must have its cudnn-frontend field.
                if let Some((k, _)) = ext.iter().find(|(k, _)| !family.attrs.iter().any(|(_, dsl, _)| dsl == k)) {
                    let field = std::iter::once("axis")
                        .chain(POINTWISE_FLOAT_FIELDS)
                        .find(|f| dsl_attr_of(f, mode) == Some(k.as_str()))
                        .unwrap_or(k.as_str());
                    return Err(SerializeError::ExtensionMismatch {
                        path: format!("{ext_path}.{k}"),
                        field: n.field_path(field),
                    });
                }
            }
            let op = Op::from_call_with_inputs(family.call, &ext, inputs.len())
                .map_err(|source| SerializeError::Attr { node: label.clone(), source })?;
            let sdpa = matches!(tag, super::sdpa::TAG_FORWARD | super::sdpa::TAG_BACKWARD);
            if sdpa
                && (op.inputs().iter().map(|p| p.name).ne(family.inputs.iter().copied())
                    || op.outputs() != family.outputs)
            {
                // The exact attributes must ask for the ports the node has.
                return Err(SerializeError::ExtensionMismatch { path: ext_path, field: n.field_path("inputs") });
            }
            if NORM_TAGS.contains(&tag) {
                // cudnn-frontend's fields (the phase, the DBIAS port) are authoritative.
                let fe = Op::from_call(family.call, &frontend_call_attrs(&family.attrs))
                    .map_err(|source| SerializeError::Attr { node: label.clone(), source })?;
                if fe != op {
                    let field = family.attrs.first().map_or("tag", |a| a.0);
                    return Err(SerializeError::ExtensionMismatch { path: ext_path, field: n.field_path(field) });
                }
            }
            PendingOp::Ready(op)
        }
        None if tag == TAG_REDUCTION => PendingOp::Reduction { call: family.call },
        None if matches!(tag, super::sdpa::TAG_FORWARD | super::sdpa::TAG_BACKWARD) => {
            match Op::from_call(family.call, &frontend_call_attrs(&family.attrs))
                .map_err(|source| SerializeError::Attr { node: label.clone(), source })?
            {
                Op::Sdpa(a) => PendingOp::Attention(a),
                other => PendingOp::Ready(other),
            }
        }
        None if tag == "RESHAPE" => match Op::from_call(family.call, &frontend_call_attrs(&family.attrs))
            .map_err(|source| SerializeError::Attr { node: label.clone(), source })?
        {
            Op::Layout(crate::ops::Layout::Reshape { shape }) if shape.is_empty() => PendingOp::Reshape,
            other => PendingOp::Ready(other),
        },
        None if tag.starts_with("CONV_") => {
            let mut attrs = frontend_call_attrs(&family.attrs);
            if tag == "CONV_WGRAD" {
                // cudnn-frontend has no field for the filter: `fill_in` takes it from DW.
                attrs.push(("filter".into(), AttrValue::IntList(Vec::new())));
            }
            match Op::from_call(family.call, &attrs)
                .map_err(|source| SerializeError::Attr { node: label.clone(), source })?
            {
                Op::Conv(c) => PendingOp::Conv(c),
                other => PendingOp::Ready(other),
            }
        }
        None => {
            let attrs = frontend_call_attrs(&family.attrs);
            PendingOp::Ready(
                Op::from_call_with_inputs(family.call, &attrs, inputs.len())
                    .map_err(|source| SerializeError::Attr { node: label.clone(), source })?,
            )
        }
    };
    let name = given_name.map_or_else(|| format!("{}_{index}", family.call), str::to_string);
    Ok(RawNode { name, label, op, inputs, outputs, compute_data_type })
}

/// The type a tensor takes when the document leaves it unset: cudnn-frontend's
/// `fill_from_context` gives virtual tensors the intermediate type and the others the I/O type.
fn context_type(cx: &RawContext, t: &RawTensor) -> Option<DataType> {
    t.data_type.or(if t.is_virtual { cx.intermediate } else { cx.io })
}

/// What cudnn-frontend's `validate()` fills in, for a graph logged before it ran (values the
/// document sets always win):
/// - a fused scalar takes the rank of its node's first tensor operand (dims and strides all 1);
/// - a reduction's `dims` are told from X and Y;
/// - an output without dims or type gets those the op's shape rule infers (a type the op forces,
///   such as `BOOLEAN` for comparisons, else the context's).
fn fill_in(cx: &RawContext, raw: &mut [RawTensor], nodes: Vec<RawNode>) -> Result<Vec<(RawNode, Op)>> {
    let mut out = Vec::with_capacity(nodes.len());
    for n in nodes {
        let rank =
            n.inputs.iter().filter_map(|&i| raw.get(i)).find(|t| t.pass_by_value.is_none()).map(|t| t.dims.len());
        if let Some(rank) = rank.filter(|&r| r > 0) {
            for &i in &n.inputs {
                let Some(t) = raw.get_mut(i) else { continue };
                let unit_strides = t.strides.as_ref().is_none_or(|s| s.iter().all(|&x| x == 1));
                if t.pass_by_value.is_some() && t.dims.len() != rank && t.dims.iter().all(|&d| d == 1) && unit_strides {
                    t.dims = vec![1; rank];
                    t.strides = Some(vec![1; rank]);
                }
            }
        }
        let dims_of = |ids: &[usize]| ids.first().and_then(|&i| raw.get(i)).map(|t| t.dims.clone()).unwrap_or_default();
        let op = match n.op {
            PendingOp::Ready(ref op) => op.clone(),
            PendingOp::Attention(ref a) => {
                let d_qk = dims_of(&n.inputs).get(3).copied().unwrap_or(0);
                Op::Sdpa(a.clone().default_scale_folded(d_qk))
            }
            PendingOp::Conv(ref c) => {
                let dims =
                    |k: usize| n.inputs.get(k).and_then(|&i| raw.get(i)).map(|t| t.dims.clone()).unwrap_or_default();
                let out = dims_of(&n.outputs);
                let conv = super::window::resolve(c, &dims(0), &dims(1), &out).ok_or_else(|| {
                    SerializeError::ConvGeometry {
                        node: n.label.clone(),
                        output: shape_string(&out),
                        inputs: format!("{} and {}", shape_string(&dims(0)), shape_string(&dims(1))),
                    }
                })?;
                Op::Conv(conv)
            }
            PendingOp::Reshape => {
                let shape = dims_of(&n.outputs);
                if shape.is_empty() {
                    return Err(SerializeError::MissingField { path: format!("{}.dim", n.label) });
                }
                Op::Layout(crate::ops::Layout::Reshape { shape })
            }
            PendingOp::Reduction { call } => {
                let (x, y) = (dims_of(&n.inputs), dims_of(&n.outputs));
                let dims = reduced_dims(&x, &y).ok_or_else(|| SerializeError::ReductionDims {
                    node: n.label.clone(),
                    x: shape_string(&x),
                    y: shape_string(&y),
                })?;
                Op::from_call(call, &[("dims".to_string(), AttrValue::IntList(dims))])
                    .map_err(|source| SerializeError::Attr { node: n.label.clone(), source })?
            }
        };
        let known = |i: &usize| raw.get(*i).is_some_and(|t| !t.dims.is_empty());
        let unset = |i: &usize| raw.get(*i).is_some_and(|t| t.dims.is_empty() || t.data_type.is_none());
        if n.outputs.iter().any(unset) && n.inputs.iter().all(known) {
            let metas = n
                .inputs
                .iter()
                .filter_map(|&i| raw.get(i))
                .map(|t| {
                    context_type(cx, t)
                        .map(|dtype| TensorMeta { dims: t.dims.clone(), dtype })
                        .ok_or_else(|| SerializeError::MissingField { path: format!("tensors[{:?}].data_type", t.key) })
                })
                .collect::<Result<Vec<_>>>()?;
            let inferred = op.infer(&metas, &mut Concrete).map_err(|source| GraphError::Shape {
                node: n.name.clone(),
                op: op.call_name(),
                port: source.arg.and_then(|a| op.inputs().get(a).map(|p| p.name)),
                source,
            })?;
            for (&o, meta) in n.outputs.iter().zip(inferred) {
                let Some(t) = raw.get_mut(o) else { continue };
                if t.dims.is_empty() {
                    t.dims = meta.dims;
                }
                if t.data_type.is_none() {
                    t.data_type = meta.dtype.or(if t.is_virtual { cx.intermediate } else { cx.io });
                }
            }
        }
        out.push((n, op));
    }
    Ok(out)
}

/// Packed strides, or `None` if they overflow.
fn packed_strides_checked(dims: &[i64]) -> Option<Vec<i64>> {
    let mut strides = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].checked_mul(dims[i + 1].max(1))?;
    }
    Some(strides)
}

/// Whether the element count and storage span fit in an `i64` (bad dims and strides are left to
/// [`Graph::validate`], which names them).
fn spans_fit(dims: &[i64], strides: &[i64]) -> bool {
    let count = dims.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d.max(1)));
    let span = dims
        .iter()
        .zip(strides)
        .try_fold(1i64, |acc, (&d, &s)| d.max(1).checked_sub(1)?.checked_mul(s.max(0))?.checked_add(acc));
    count.is_some() && span.is_some()
}

/// Assigns uids where the document has none, orders the tensors, fills strides and builds the IR.
fn assemble(cx: RawContext, raw: Vec<RawTensor>, nodes: Vec<(RawNode, Op)>, order: Option<Vec<i64>>) -> Result<Graph> {
    let mut owner: HashMap<i64, usize> = HashMap::new();
    for (i, t) in raw.iter().enumerate() {
        if let Some(uid) = t.uid {
            if let Some(&first) = owner.get(&uid) {
                return Err(SerializeError::DuplicateUid {
                    uid,
                    first: raw[first].name.clone(),
                    second: t.name.clone(),
                });
            }
            owner.insert(uid, i);
        }
    }
    // Tensors without a uid get the smallest free ones, in order of first use by the nodes (ports
    // in port order), then in document order: deterministic, unlike cudnn-frontend's hash-map order.
    let mut uids: Vec<Option<i64>> = raw.iter().map(|t| t.uid).collect();
    let use_order = nodes.iter().flat_map(|(n, _)| n.inputs.iter().chain(&n.outputs).copied()).chain(0..raw.len());
    let mut next = 1i64;
    for i in use_order {
        if uids[i].is_none() {
            while owner.contains_key(&next) {
                next += 1;
            }
            owner.insert(next, i);
            uids[i] = Some(next);
        }
    }
    let uids: Vec<i64> = uids.into_iter().map(|u| u.unwrap_or_default()).collect();

    // Position in the IR of each raw tensor.
    let sequence: Vec<usize> = match order {
        None => {
            let mut s: Vec<usize> = (0..raw.len()).collect();
            s.sort_by_key(|&i| uids[i]);
            s
        }
        Some(order) => {
            if order.len() != raw.len() {
                return Err(SerializeError::TensorOrder {
                    reason: format!("lists {} uids but the document has {} tensors", order.len(), raw.len()),
                });
            }
            let mut seen = HashSet::new();
            order
                .iter()
                .map(|uid| {
                    let i = owner.get(uid).copied().ok_or_else(|| SerializeError::TensorOrder {
                        reason: format!("lists uid {uid}, which no tensor has"),
                    })?;
                    if !seen.insert(i) {
                        return Err(SerializeError::TensorOrder { reason: format!("lists uid {uid} twice") });
                    }
                    Ok(i)
                })
                .collect::<Result<_>>()?
        }
    };
    let mut position = vec![0usize; raw.len()];
    for (pos, &i) in sequence.iter().enumerate() {
        position[i] = pos;
    }

    let mut slots: Vec<Option<RawTensor>> = raw.into_iter().map(Some).collect();
    let mut tensors = Vec::with_capacity(slots.len());
    for &i in &sequence {
        let Some(t) = slots.get_mut(i).and_then(Option::take) else { continue };
        let overflow = |t: &RawTensor| SerializeError::Overflow {
            tensor: t.name.clone(),
            dims: t.dims.clone(),
            strides: t.strides.clone().unwrap_or_default(),
        };
        let strides = match t.strides.clone() {
            Some(s) => s,
            None => packed_strides_checked(&t.dims).ok_or_else(|| overflow(&t))?,
        };
        if !spans_fit(&t.dims, &strides) {
            return Err(overflow(&t));
        }
        let data_type = context_type(&cx, &t)
            .ok_or_else(|| SerializeError::MissingField { path: format!("tensors[{:?}].data_type", t.key) })?;
        let pass_by_value = t.pass_by_value.map(|s| if s.exact { s.value } else { data_type.round(s.value) });
        tensors.push(Tensor {
            name: t.name,
            uid: uids[i],
            dims: t.dims,
            strides,
            data_type,
            is_virtual: t.is_virtual,
            pass_by_value,
        });
    }
    let ids = |v: &[usize]| v.iter().map(|&i| TensorId(position[i])).collect();
    let nodes = nodes
        .into_iter()
        .map(|(n, op)| Node {
            inputs: ids(&n.inputs),
            outputs: ids(&n.outputs),
            name: n.name,
            op,
            compute_data_type: n.compute_data_type,
        })
        .collect();
    let context = Context {
        intermediate_data_type: cx.intermediate.unwrap_or(Context::default().intermediate_data_type),
        compute_data_type: cx.compute.unwrap_or(Context::default().compute_data_type),
    };
    Ok(Graph { name: cx.name, context, tensors, nodes })
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

    #[test]
    fn overflow_checks() {
        assert_eq!(packed_strides_checked(&[2, 3, 4]), Some(vec![12, 4, 1]));
        assert_eq!(packed_strides_checked(&[1 << 40, 1 << 40, 1 << 40]), None);
        assert!(spans_fit(&[2, 3], &[3, 1]));
        assert!(!spans_fit(&[1 << 32, 1 << 32], &[1, 1]));
        assert!(!spans_fit(&[2, i64::MAX], &[i64::MAX, 1]));
    }
}
