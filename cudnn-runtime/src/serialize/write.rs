//! [`Graph`] → JSON tree, in cudnn-frontend's layout plus our `cudnn_graph` extension.
//!
//! Members of every object are written in alphabetical order (as nlohmann's `std::map`-backed
//! objects print), except the `tensors` map (ascending uid) and port maps (port order). The writer
//! never fails and never panics, even on a graph that does not validate: it writes what is there,
//! so that the reader rejects it.

use super::layout::{frontend_gid, ScalarKind, EXT, FORMAT, JSON_VERSION};
use crate::codec::float::{f32_to_hex, f64_to_hex};
use crate::codec::ints;
use crate::codec::json::Json;
use crate::codec::names::data_type_name;
use crate::ops::codec::WriteCx;
use crate::ops::AttrValue;
use crate::{Graph, Node, Tensor, TensorId};

/// An object with members sorted by key.
fn sorted(mut members: Vec<(&str, Json)>) -> Json {
    members.sort_by(|a, b| a.0.cmp(b.0));
    Json::Obj(members.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// The document for `g`; `dynamic_shape` is the context's `is_dynamic_shape_enabled`, how a plan
/// of `g` was made (`false` for a bare graph: it has no plan).
pub(crate) fn graph_to_json(g: &Graph, dynamic_shape: bool) -> Json {
    let in_range = |ids: &[TensorId]| ids.iter().all(|t| t.0 < g.tensors.len());
    let wired = g.nodes.iter().all(|n| in_range(&n.inputs) && in_range(&n.outputs));

    let mut by_uid: Vec<usize> = (0..g.tensors.len()).collect();
    by_uid.sort_by_key(|&i| g.tensors[i].uid);

    let mut ext = vec![("format", Json::Int(FORMAT as i64))];
    // `fingerprint` indexes tensors through the nodes: only a graph whose nodes refer to tensors it
    // has can be fingerprinted.
    if wired {
        ext.push(("fingerprint", Json::str(format!("0x{:016x}", g.fingerprint()))));
    }
    if by_uid.iter().enumerate().any(|(pos, &i)| pos != i) {
        ext.push(("tensor_order", Json::Arr(g.tensors.iter().map(|t| Json::Int(t.uid)).collect())));
    }

    let mut context = vec![
        ("compute_data_type", Json::str(data_type_name(g.context.compute_data_type))),
        ("intermediate_data_type", Json::str(data_type_name(g.context.intermediate_data_type))),
        // Every tensor's type is explicit, so there is no I/O default to give.
        ("io_data_type", Json::Null),
        ("is_dynamic_shape_enabled", Json::Bool(dynamic_shape)),
        ("is_override_shape_enabled", Json::Bool(false)),
        ("sm_count", Json::Int(-1)),
    ];
    // As cudnn-frontend: no name, no member (the reader's default is the empty name).
    if !g.name.is_empty() {
        context.push(("name", Json::str(&g.name)));
    }

    // A packed tensor names its ragged offsets (cudnn-frontend's `ragged_offset_uid`); the node
    // that reads it so does not list the offsets among its ports.
    let mut ragged: Vec<Option<&Tensor>> = vec![None; g.tensors.len()];
    for n in &g.nodes {
        for p in n.op.ragged_ports() {
            let ids = if p.output { &n.outputs } else { &n.inputs };
            let offsets = n.inputs.get(p.offsets).and_then(|id| g.tensors.get(id.0));
            if let (Some(slot), Some(offsets)) = (ids.get(p.index).and_then(|id| ragged.get_mut(id.0)), offsets) {
                // A tensor two nodes read at different offsets writes the first: the reader then
                // gives both the same, which the fingerprint refuses.
                slot.get_or_insert(offsets);
            }
        }
    }
    let tensors = by_uid.iter().map(|&i| tensor_json(&g.tensors[i], ragged[i])).collect();

    sorted(vec![
        ("context", sorted(context)),
        (EXT, sorted(ext)),
        ("gid", Json::Int(frontend_gid(g.fingerprint()))),
        ("json_version", Json::str(JSON_VERSION)),
        ("nodes", Json::Arr(g.nodes.iter().map(|n| node_json(g, n)).collect())),
        ("tensors", Json::Arr(tensors)),
    ])
}

fn tensor_json(t: &Tensor, ragged_offset: Option<&Tensor>) -> Json {
    let mut members = vec![
        ("data_type", Json::str(data_type_name(t.data_type))),
        ("dim", ints(&t.dims)),
        ("is_pass_by_value", Json::Bool(t.pass_by_value.is_some() || t.host_scalar)),
        ("is_virtual", Json::Bool(t.is_virtual)),
        ("name", Json::str(&t.name)),
        ("pass_by_value", Json::Null),
        ("reordering_type", Json::str("NONE")),
        ("stride", ints(&t.strides)),
        ("uid", Json::Int(t.uid)),
    ];
    if let Some(offsets) = ragged_offset {
        members.push(("ragged_offset_name", Json::str(&offsets.name)));
        members.push(("ragged_offset_uid", Json::Int(offsets.uid)));
    }
    if let Some(v) = t.pass_by_value {
        let (variant, exact) = scalar_json(t, v);
        members.retain(|(k, _)| *k != "pass_by_value");
        members.push(("pass_by_value", variant));
        if !exact {
            members.push((EXT, Json::obj([("pass_by_value", Json::str(f64_to_hex(v)))])));
        }
    }
    sorted(members)
}

/// cudnn-frontend's `{"index", "value"}` for a by-value scalar, and whether it holds `v` exactly
/// (if not, the exact bits go in our extension).
fn scalar_json(t: &Tensor, v: f64) -> (Json, bool) {
    let kind = ScalarKind::for_data_type(t.data_type);
    let (value, exact) = match kind {
        ScalarKind::Int64 | ScalarKind::Int32 => {
            // `as` saturates; the IR stores integers already rounded and clamped to the type.
            let n = if kind == ScalarKind::Int64 { v as i64 } else { i64::from(v as i32) };
            (Json::Int(n), (n as f64).to_bits() == v.to_bits())
        }
        ScalarKind::Half | ScalarKind::Float | ScalarKind::BFloat16 => {
            let f = v as f32;
            (Json::str(f32_to_hex(f)), f64::from(f).to_bits() == v.to_bits())
        }
        // A decimal number (nlohmann's encoding of `double`): exact in principle, but NaN and the
        // infinities have none and a reader's float parsing may be off by an ulp, so the bits
        // always go in the extension too.
        ScalarKind::Double => (Json::Float(v), false),
    };
    (Json::obj([("index", Json::Int(kind as i64)), ("value", value)]), exact)
}

/// A port map: port name → tensor uid, in port order. Ports beyond the op's signature (only in a
/// graph that does not validate) are written as `#<position>` so that the reader rejects them.
fn ports(g: &Graph, names: &[&'static str], ids: &[TensorId]) -> Json {
    Json::Obj(
        ids.iter()
            .enumerate()
            .map(|(i, id)| {
                let port = names.get(i).map_or_else(|| format!("#{i}"), |n| n.to_string());
                (port, g.tensors.get(id.0).map_or(Json::Null, |t| Json::Int(t.uid)))
            })
            .collect(),
    )
}

/// A list of tensor uids, in input order (cudnn-frontend's `inputs` vector of a concatenation).
/// Inputs by position, as cudnn-frontend writes a concatenation's: `{"0": uid, "1": uid, ...}`.
fn listed(g: &Graph, ids: &[TensorId]) -> Json {
    Json::Obj(
        ids.iter()
            .enumerate()
            .map(|(i, id)| (i.to_string(), g.tensors.get(id.0).map_or(Json::Null, |t| Json::Int(t.uid))))
            .collect(),
    )
}

fn node_json(g: &Graph, n: &Node) -> Json {
    let tensor = |id: &TensorId| g.tensors.get(id.0);
    let cx = WriteCx { input_dims: n.inputs.iter().map(|id| tensor(id).map(|t| t.dims.as_slice())).collect() };
    let frontend = n.op.write_frontend(&cx);
    // The instance's ports (an op whose attributes add ports has more than its first few).
    let input_names: Vec<&'static str> = n.op.inputs().iter().map(|p| p.name).collect();
    let output_names = n.op.outputs();
    let mut inputs = if frontend.listed_inputs { listed(g, &n.inputs) } else { ports(g, &input_names, &n.inputs) };
    // Ragged offsets are named by the tensors they pack, not by ports (cudnn-frontend's layout).
    let offsets: Vec<&str> = n.op.ragged_ports().iter().filter_map(|p| input_names.get(p.offsets).copied()).collect();
    if let Json::Obj(members) = &mut inputs {
        members.retain(|(port, _)| !offsets.contains(&port.as_str()));
    }
    let mut members =
        vec![("inputs", inputs), ("name", Json::str(&n.name)), ("outputs", ports(g, &output_names, &n.outputs))];
    if frontend.compute_data_type || n.compute_data_type != g.context.compute_data_type {
        members.push(("compute_data_type", Json::str(data_type_name(n.compute_data_type))));
    }
    members.extend(frontend.fields);
    // The call's attributes exactly: floats as f64 bits (cudnn-frontend keeps f32), and what it
    // has no field for (a reduction's dims, as written).
    let attrs = n.op.call_attrs();
    if !attrs.is_empty() || frontend.always_exact {
        let attrs = attrs
            .into_iter()
            .map(|(k, v)| {
                let v = match v {
                    AttrValue::Float(x) => Json::str(f64_to_hex(x)),
                    AttrValue::Int(x) => Json::Int(x),
                    AttrValue::IntList(xs) => ints(&xs),
                    AttrValue::Bool(b) => Json::Bool(b),
                    // Strings already mean float bit patterns: a name is an object.
                    AttrValue::Name(n) => Json::obj([("name", Json::str(n))]),
                };
                (k, v)
            })
            .collect();
        members.push((EXT, Json::obj([("attrs", Json::Obj(attrs))])));
    }
    sorted(members)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serialize::{structure_from_json, structure_to_json, SerializeError};
    use crate::{DataType, GraphBuilder};

    fn graph() -> Graph {
        let mut g = GraphBuilder::new("g");
        let x = g.input("x", DataType::F32, &[2]).unwrap();
        let y = g.op("exp", &[x.into()], &[]).unwrap()[0];
        g.output(y, "y", DataType::F32).unwrap();
        g.build().unwrap()
    }

    #[test]
    fn a_dangling_tensor_reference_writes_null_and_fails_to_load() {
        let mut g = graph();
        g.nodes[0].inputs[0] = TensorId(7);
        let text = structure_to_json(&g);
        assert!(text.contains(r#""inputs": {"IN_0": null}"#), "{text}");
        assert!(!text.contains("fingerprint"));
        assert!(matches!(
            structure_from_json(&text),
            Err(SerializeError::MissingPort { port: "IN_0", direction: "input", .. })
        ));
    }

    #[test]
    fn extra_inputs_write_positional_ports_that_fail_to_load() {
        let mut g = graph();
        g.nodes[0].inputs.push(TensorId(0));
        let text = structure_to_json(&g);
        assert!(text.contains(r##""inputs": {"IN_0": 1, "#1": 1}"##), "{text}");
        assert!(
            matches!(structure_from_json(&text), Err(SerializeError::UnknownPort { ref port, .. }) if port == "#1")
        );
    }

    #[test]
    fn duplicate_uids_write_duplicate_keys_that_fail_to_load() {
        let mut g = graph();
        g.tensors[1].uid = 1;
        let text = structure_to_json(&g);
        assert!(matches!(structure_from_json(&text), Err(SerializeError::DuplicateKey { ref key, .. }) if key == "1"));
    }

    #[test]
    fn two_producers_are_rejected() {
        let mut g = graph();
        let mut again = g.nodes[0].clone();
        again.name = "exp_again".into();
        g.nodes.push(again);
        let e = structure_from_json(&structure_to_json(&g));
        assert_eq!(
            e,
            Err(SerializeError::ProducedTwice {
                tensor: "y".into(),
                first: "exp_0".into(),
                second: "exp_again".into()
            })
        );
    }
}
