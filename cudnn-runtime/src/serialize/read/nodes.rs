//! The `nodes` of a document: each node's tag and fields read by its family's codec
//! (`ops/<family>/codec.rs`), its ports resolved against the tensors, our exact attributes
//! (`cudnn_graph.attrs`) checked against cudnn-frontend's fields, and what cudnn-frontend's
//! `validate()` would infer filled in.

use std::collections::HashMap;

use super::tensors::RawTensor;
use super::{context_type, data_type, wrong_type, RawContext, Result};
use crate::codec::f64_value;
use crate::codec::json::{Json, Obj};
use crate::codec::names::EXT;
use crate::dim::Concrete;
use crate::ir::GraphError;
use crate::ops::codec::{CallAttrs, NodeDims, Pending};
use crate::ops::{self, AttrValue, Op, TensorMeta};
use crate::serialize::{SerializeError, MAX_NODES};
use crate::DataType;

/// A node with its ports resolved to tensor positions in the `tensors` map.
pub(super) struct RawNode {
    pub(super) name: String,
    /// For error messages: the name, or `nodes[i]` if the document gives none.
    pub(super) label: String,
    pub(super) inputs: Vec<usize>,
    pub(super) outputs: Vec<usize>,
    pub(super) compute_data_type: DataType,
}

pub(super) fn read_nodes(top: &Obj<'_>, cx: &RawContext, tensors: &[RawTensor]) -> Result<Vec<(RawNode, Pending)>> {
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
    let nodes: Vec<(RawNode, Pending)> =
        nodes.iter().enumerate().map(|(i, n)| read_node(i, n, cx, &by_key)).collect::<Result<_>>()?;
    // The IR's validation assumes one producer per tensor; a document can say otherwise.
    let mut producer: HashMap<usize, &str> = HashMap::new();
    for (n, _) in &nodes {
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

/// A concatenation's inputs by position: a list (ours), or an object keyed `"0"`, `"1"`, ...
/// (cudnn-frontend's), each position once; `None` for another JSON type (the caller reports it).
/// Each reference comes with its field path.
fn positional<'j>(
    value: &'j Json,
    n: &Obj<'_>,
    field: &str,
    label: &str,
    names: &[&'static str],
) -> Result<Option<Vec<(String, &'j Json)>>> {
    match value {
        Json::Arr(items) => {
            Ok(Some(items.iter().enumerate().map(|(i, r)| (format!("{}[{i}]", n.field_path(field)), r)).collect()))
        }
        Json::Obj(members) => {
            let mut slots: Vec<Option<(String, &Json)>> = vec![None; members.len()];
            for (key, reference) in members {
                let unknown = || SerializeError::UnknownPort {
                    node: label.to_string(),
                    direction: "input",
                    port: key.clone(),
                    expected: names.iter().take(members.len()).copied().collect(),
                };
                // Positions only, written as cudnn-frontend does ("0", not "00" or "+0").
                let i = key
                    .parse::<usize>()
                    .ok()
                    .filter(|i| *i < slots.len() && i.to_string() == *key)
                    .ok_or_else(unknown)?;
                slots[i] = Some((format!("{}.{key}", n.field_path(field)), reference));
            }
            // Keys are distinct (a duplicate key is refused when the document is parsed) and each
            // below the count, so every position is filled.
            Ok(Some(slots.into_iter().flatten().collect()))
        }
        _ => Ok(None),
    }
}

/// Resolves a port map to tensor positions, in port order.
fn read_ports(
    n: &Obj<'_>,
    label: &str,
    field: &str,
    names: &[&'static str],
    unsupported: &[&'static str],
    listed_inputs: bool,
    by_key: &HashMap<&str, usize>,
) -> Result<Vec<usize>> {
    let direction = if field == "inputs" { "input" } else { "output" };
    let listed = field == "inputs" && listed_inputs;
    if let Some(positional) =
        n.get(field).filter(|_| listed).and_then(|v| positional(v, n, field, label, names).transpose())
    {
        // A concatenation's inputs: one tensor per port (the family has as many), by position.
        return positional?
            .into_iter()
            .zip(names)
            .map(|((path, reference), port)| tensor_of(reference, &path, label, port, by_key))
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
        found.insert(port_name, tensor_of(reference, &given.field_path(port), label, port, by_key)?);
    }
    names
        .iter()
        .map(|p| {
            found.get(p).copied().ok_or(SerializeError::MissingPort { node: label.to_string(), direction, port: p })
        })
        .collect()
}

/// The position of the tensor a port's `reference` (at `path`) names. A reference is a uid (a
/// number) or a key (a name); cudnn-frontend looks both up as keys.
fn tensor_of(reference: &Json, path: &str, label: &str, port: &str, by_key: &HashMap<&str, usize>) -> Result<usize> {
    let key = match reference {
        Json::Int(v) => v.to_string(),
        Json::UInt(v) => v.to_string(),
        Json::Str(s) => s.clone(),
        other => return Err(wrong_type(path, "a tensor uid or name", other)),
    };
    by_key.get(key.as_str()).copied().ok_or_else(|| SerializeError::UnknownTensorRef {
        node: label.to_string(),
        port: port.to_string(),
        reference: if matches!(reference, Json::Str(_)) { format!("{key:?}") } else { key.clone() },
    })
}

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

fn read_node(index: usize, value: &Json, cx: &RawContext, by_key: &HashMap<&str, usize>) -> Result<(RawNode, Pending)> {
    let n = value.as_obj(&format!("nodes[{index}]"))?;
    let given_name = n.opt_str("name")?.filter(|s| !s.is_empty());
    let label = given_name.map_or_else(|| n.path().to_string(), str::to_string);
    let tag = n.str("tag")?;
    let fe = ops::read_frontend(&n, &label, tag).ok_or_else(|| SerializeError::UnknownTag {
        node: label.clone(),
        tag: tag.to_string(),
        supported: ops::frontend_tags().collect(),
    })??;
    let inputs = read_ports(&n, &label, "inputs", &fe.inputs, fe.unsupported_ports, fe.listed_inputs, by_key)?;
    let outputs = read_ports(&n, &label, "outputs", fe.outputs, &[], false, by_key)?;
    let compute_data_type = data_type(&n, "compute_data_type")?
        .or(cx.compute)
        .ok_or_else(|| SerializeError::MissingField { path: n.field_path("compute_data_type") })?;
    let op = match read_ext_attrs(&n)? {
        Some((ext_path, ext)) => {
            (fe.check_exact_attrs)(&fe, &n, &ext_path, &ext)?;
            let op = Op::from_call_with_inputs(fe.call, &ext, inputs.len())
                .map_err(|source| SerializeError::Attr { node: label.clone(), source })?;
            (fe.check_exact_op)(&fe, &op, &n, &label, &ext_path)?;
            Pending::Ready(op)
        }
        None => (fe.from_fields)(&fe, inputs.len(), &label)?,
    };
    let name = given_name.map_or_else(|| format!("{}_{index}", fe.call), str::to_string);
    Ok((RawNode { name, label, inputs, outputs, compute_data_type }, op))
}

/// What cudnn-frontend's `validate()` fills in, for a graph logged before it ran (values the
/// document sets always win):
/// - a fused scalar takes the rank of its node's first tensor operand (dims and strides all 1);
/// - a reduction's `dims` are told from X and Y;
/// - an output without dims or type gets those the op's shape rule infers (a type the op forces,
///   such as `BOOLEAN` for comparisons, else the context's).
pub(super) fn fill_in(
    cx: &RawContext,
    raw: &mut [RawTensor],
    nodes: Vec<(RawNode, Pending)>,
) -> Result<Vec<(RawNode, Op)>> {
    let mut out = Vec::with_capacity(nodes.len());
    for (n, pending) in nodes {
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
        let op = match pending {
            Pending::Ready(op) => op,
            Pending::Resolve(resolve) => {
                let dims = |ids: &[usize]| -> Vec<&[i64]> {
                    ids.iter().map(|&i| raw.get(i).map_or(&[][..], |t| t.dims.as_slice())).collect()
                };
                let input_types = n.inputs.iter().map(|&i| raw.get(i).and_then(|t| context_type(cx, t))).collect();
                let dims =
                    NodeDims { label: &n.label, inputs: dims(&n.inputs), input_types, outputs: dims(&n.outputs) };
                resolve(&dims)?
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
