//! Ragged offsets as cudnn-frontend writes them: a packed tensor names its offsets tensor
//! (`ragged_offset_uid`, `ragged_offset_name`), and no node lists the offsets among its ports
//! (cudnn-frontend 1.32's printed graph has the offsets tensor in its `tensors`; its
//! `Tensor_attributes` JSON alone does not, nor does its reader read the two fields back). Ours
//! are ports of the node that reads the tensor packed: each node port whose tensor names offsets
//! gets the input port its family reads them from (attention's `Q` → `Ragged_offset_Q`, `dO` →
//! `Ragged_offset_O`, ..., [`ops::frontend_ragged_offsets`]); an offsets tensor the document
//! leaves out is `[B + 1, 1, 1, 1]` `INT32` (cudnn-frontend's samples' type; B from the packed
//! tensor). Ragged offsets anywhere else (on another op's port, on a tensor no node reads, two
//! offsets for one port, a uid and a name that disagree) are refused by name.

use super::tensors::{RaggedRef, RawTensor};
use super::Result;
use crate::codec::json::{Json, Obj};
use crate::ops;
use crate::serialize::SerializeError;
use crate::DataType;

/// The key a reference (a uid or a name) looks a tensor up by.
fn key_of(reference: &Json) -> Option<String> {
    match reference {
        Json::Int(v) => Some(v.to_string()),
        Json::UInt(v) => Some(v.to_string()),
        Json::Str(s) => Some(s.clone()),
        _ => None,
    }
}

/// The index of the offsets tensor `r` names, added to `tensors` if the document leaves it out
/// (`packed`: the index of the tensor naming it).
fn offsets_tensor(tensors: &mut Vec<RawTensor>, r: &RaggedRef, packed: usize) -> Result<usize> {
    let found = match r.uid {
        Some(uid) => tensors.iter().position(|t| t.uid == Some(uid) || t.key == uid.to_string()),
        None => tensors.iter().position(|t| Some(&t.name) == r.name.as_ref() || Some(&t.key) == r.name.as_ref()),
    };
    if let Some(i) = found {
        if let (Some(name), Some(_)) = (&r.name, r.uid) {
            if tensors[i].name != *name && tensors[i].key != *name {
                return Err(SerializeError::Unsupported {
                    path: r.path.clone(),
                    feature: format!(
                        "ragged offsets named `{name}` whose uid is tensor `{}`'s: the uid and the name disagree",
                        tensors[i].name
                    ),
                });
            }
        }
        return Ok(i);
    }
    let b = tensors[packed].dims.first().copied().ok_or_else(|| SerializeError::Unsupported {
        path: r.path.clone(),
        feature: "ragged offsets on a tensor without dims".into(),
    })?;
    let key = r.uid.map_or_else(|| r.name.clone().unwrap_or_default(), |u| u.to_string());
    let name = r.name.clone().unwrap_or_else(|| format!("ragged_offset_{key}"));
    tensors.push(RawTensor {
        key,
        name,
        uid: r.uid,
        dims: vec![b.saturating_add(1), 1, 1, 1],
        strides: None,
        data_type: Some(DataType::I32),
        is_virtual: false,
        pass_by_value: None,
        host_scalar: false,
        ragged_offset: None,
    });
    Ok(tensors.len() - 1)
}

/// The offsets ports a node tagged `tag` (of `fields`) takes for its packed ports: (offsets port,
/// offsets tensor key, the port it was read for). Marks each packed tensor an attention port takes
/// as `used`, and keeps in `stray` why one another port reads is not.
fn offsets_ports(
    fields: &[(String, Json)],
    tag: &str,
    tensors: &[RawTensor],
    offsets_of: &[Option<usize>],
    used: &mut [bool],
    stray: &mut [Option<SerializeError>],
) -> Result<Vec<(&'static str, String, String)>> {
    let mut add: Vec<(&'static str, String, String)> = Vec::new();
    for field in ["inputs", "outputs"] {
        let Some((_, Json::Obj(ports))) = fields.iter().find(|(k, _)| k == field) else { continue };
        for (port, reference) in ports {
            let Some(key) = key_of(reference) else { continue };
            let Some(t) = tensors.iter().position(|t| t.key == key) else { continue };
            let (Some(Some(o)), Some(r)) = (offsets_of.get(t), &tensors[t].ragged_offset) else { continue };
            let Some(offsets_port) = ops::frontend_ragged_offsets(tag, port) else {
                // Another node may read or write a packed tensor as plain memory; the
                // offsets are an error only where no attention port takes them (below).
                stray[t].get_or_insert_with(|| SerializeError::Unsupported {
                    path: r.path.clone(),
                    feature: format!(
                        "ragged offsets on tensor `{}`, port {port} of a {tag} node (cudnn-graph reads them \
                         on attention's Q, K, V, O, dO, dQ, dK and dV)",
                        tensors[t].name
                    ),
                });
                continue;
            };
            used[t] = true;
            let offsets_key = tensors[*o].key.clone();
            match add.iter().find(|(p, _, _)| *p == offsets_port) {
                Some((_, k, first)) if *k != offsets_key => {
                    return Err(SerializeError::Unsupported {
                        path: r.path.clone(),
                        feature: format!(
                            "port {port} packed at other offsets than port {first} of the same {tag} node \
                             (cudnn-graph reads dO at O's offsets and writes dQ, dK, dV at Q's, K's, V's)"
                        ),
                    });
                }
                Some(_) => {}
                None => add.push((offsets_port, offsets_key, port.clone())),
            }
        }
    }
    Ok(add)
}

/// The document with each packed tensor's offsets as ports of the nodes that read or write it,
/// and the offsets tensors it leaves out added to `tensors`; `None` where no tensor is packed.
pub(super) fn attach_offsets(top: &Obj<'_>, tensors: &mut Vec<RawTensor>) -> Result<Option<Json>> {
    let packed: Vec<(usize, RaggedRef)> =
        tensors.iter().enumerate().filter_map(|(i, t)| Some((i, t.ragged_offset.clone()?))).collect();
    if packed.is_empty() {
        return Ok(None);
    }
    let mut offsets_of: Vec<Option<usize>> = vec![None; tensors.len()];
    for (i, r) in &packed {
        let o = offsets_tensor(tensors, r, *i)?;
        offsets_of[*i] = Some(o);
    }
    let mut used = vec![false; offsets_of.len()];
    let mut stray: Vec<Option<SerializeError>> = (0..offsets_of.len()).map(|_| None).collect();
    let mut doc = Json::Obj(top.members().to_vec());
    let Json::Obj(members) = &mut doc else { return Ok(None) };
    if let Some((_, Json::Arr(nodes))) = members.iter_mut().find(|(k, _)| k == "nodes") {
        for (index, node) in nodes.iter_mut().enumerate() {
            let Json::Obj(fields) = node else { continue };
            let Some(tag) = fields.iter().find(|(k, _)| k == "tag").and_then(|(_, v)| match v {
                Json::Str(s) => Some(s.clone()),
                _ => None,
            }) else {
                continue;
            };
            let add = offsets_ports(fields, &tag, tensors, &offsets_of, &mut used, &mut stray)?;
            if let Some((_, Json::Obj(inputs))) = fields.iter_mut().find(|(k, _)| k == "inputs") {
                for (port, key, _) in add {
                    match inputs.iter().find(|(p, _)| p == port) {
                        Some((_, given)) if key_of(given).as_deref() != Some(key.as_str()) => {
                            return Err(SerializeError::Unsupported {
                                path: format!("nodes[{index}].inputs.{port}"),
                                feature: format!("a {port} port other than the ragged offsets its tensors name"),
                            });
                        }
                        Some(_) => {}
                        None => inputs.push((port.to_string(), Json::Str(key))),
                    }
                }
            }
        }
    }
    if let Some((i, r)) = packed.iter().find(|(i, _)| !used[*i]) {
        if let Some(e) = stray[*i].take() {
            return Err(e);
        }
        return Err(SerializeError::Unsupported {
            path: r.path.clone(),
            feature: format!(
                "ragged offsets on tensor `{}`, which no attention node reads or writes",
                tensors[*i].name
            ),
        });
    }
    Ok(Some(doc))
}
