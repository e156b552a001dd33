//! cudnn-frontend 1.32's plan payloads through [`cudnn_graph::payload::frontend`]: its
//! own payloads load deviceless, each key edited to something wrong is a typed error naming the
//! key, and ours → cudnn-frontend's → ours keeps the graph and its fingerprint. (What
//! cudnn-frontend itself makes of what we write is `tests/suite/frontend_oracle.rs`.)

#![cfg(feature = "cudnn")]

use crate::common;

use cudnn_graph::payload::frontend::{
    parse_frontend_payload, read_frontend_payload, write_frontend_payload, FrontendScalar,
};
use cudnn_graph::payload::plan::{
    load_payload, parse_payload, write_payload, Expect, PayloadError, PlanOrigin, SerializeOptions,
};
use cudnn_graph::serialize::ubjson::{json_to_ubjson, ubjson_to_json};
use serde_json::{json, Value};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/frontend");

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{name}.ubjson")).unwrap()
}

/// The payload `bytes` as JSON, edited by `edit`, as UBJSON again.
fn edited(bytes: &[u8], edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> Vec<u8> {
    let mut doc: Value = serde_json::from_str(&ubjson_to_json(bytes).unwrap()).unwrap();
    edit(doc.as_object_mut().unwrap());
    json_to_ubjson(&doc.to_string()).unwrap()
}

/// The key an error names, and whether it is "cannot honour" (`true`) or "malformed" (`false`).
fn key_of(e: &PayloadError) -> Option<(&str, bool)> {
    match e {
        PayloadError::FrontendKey { key, .. } => Some((key, false)),
        PayloadError::FrontendUnsupported { key, .. } => Some((key, true)),
        _ => None,
    }
}

#[test]
fn frontend_fixtures_parse_and_keep_their_keys() {
    let p = parse_frontend_payload(&fixture("matmul")).unwrap();
    assert_eq!(p.cudnn_version, Some(91900));
    assert_eq!(p.frontend_version, Some(13200));
    assert_eq!(p.variant_pack_uids, vec![1, 2, 3]);
    assert!(p.pass_by_values.is_empty());
    assert_eq!(p.behavior_notes.len(), 1);
    let graph = p.structure.unwrap();
    assert_eq!(graph.nodes.len(), 1);
    assert!(p.plan_json.contains("\"cudnnVersion\":91900"), "cudnn_backend_data is cuDNN's plan JSON");
}

/// Each key edited into something cudnn-graph cannot honour, or into the wrong shape, is refused
/// naming the key (before cuDNN is involved).
#[test]
fn each_wrong_key_is_a_typed_error_naming_it() {
    let base = fixture("matmul");
    type Edit = Box<dyn FnOnce(&mut serde_json::Map<String, Value>)>;
    let set = |key: &'static str, v: Value| -> Edit { Box::new(move |m| drop(m.insert(key.into(), v))) };
    let cases: Vec<(&str, bool, Edit)> = vec![
        ("workspace_modifications", true, set("workspace_modifications", json!({"9": [0, 0, [1.0]]}))),
        ("workspace_modifications", true, set("workspace_modifications", json!({"9": [1, 0, [512.0]]}))),
        ("workspace_modifications", false, set("workspace_modifications", json!({"9": [2, 0, [1.0]]}))),
        ("workspace_modifications", false, set("workspace_modifications", json!({"9": [7, 0, []]}))),
        ("workspace_modifications", false, set("workspace_modifications", json!({"9": [2, -256, []]}))),
        ("workspace_modifications", false, set("workspace_modifications", json!({"9": [2, 0]}))),
        ("workspace_modifications", false, set("workspace_modifications", json!({"x9": [2, 0, []]}))),
        // A region past `fe_workspace_size` (0 in the fixture).
        ("workspace_modifications", false, set("workspace_modifications", json!({"9": [2, 0, []]}))),
        ("workspace_modifications", false, set("workspace_modifications", json!(3))),
        ("variant_pack_replacements", false, set("variant_pack_replacements", json!([[1, 9, 64]]))),
        ("variant_pack_replacements", false, set("variant_pack_replacements", json!([[1, [9, -64]]]))),
        ("variant_pack_replacements", false, set("variant_pack_replacements", json!([[1, [9, 64]], [1, [8, 0]]]))),
        ("variant_pack_replacements", false, set("variant_pack_replacements", json!({"1": [9, 64]}))),
        ("tensors_to_dump", true, set("tensors_to_dump", json!([[3, 100]]))),
        ("aligned_operands", true, set("aligned_operands", json!({"1": [16, 4096]}))),
        ("fe_workspace_size", false, set("fe_workspace_size", json!(-1))),
        ("fe_workspace_size", false, set("fe_workspace_size", json!("0"))),
        ("pass_by_values", false, set("pass_by_values", json!({"x": {"index": 3, "value": "3F800000"}}))),
        ("pass_by_values", false, set("pass_by_values", json!({"4": {"index": 9, "value": 1}}))),
        ("pass_by_values", false, set("pass_by_values", json!({"4": {"index": 3, "value": 1.0}}))),
        ("pass_by_values", false, set("pass_by_values", json!({"4": {"index": 2, "value": 0.1}}))),
        ("pass_by_values", false, set("pass_by_values", json!([]))),
        ("variant_pack_uids", false, set("variant_pack_uids", json!([1, 1, 2]))),
        ("variant_pack_uids", false, set("variant_pack_uids", json!({"1": 1}))),
        ("behavior_notes", false, set("behavior_notes", json!([["FAST"]]))),
        ("behavior_notes", false, set("behavior_notes", json!(["RUNTIME_COMPILATION"]))),
        ("cudnn_backend_data", false, set("cudnn_backend_data", json!({"cudnnVersion": 91900}))),
        ("cudnn_backend_data", false, Box::new(|m| drop(m.remove("cudnn_backend_data")))),
        ("fe_workspace_size", false, Box::new(|m| drop(m.remove("fe_workspace_size")))),
        ("json_version", false, set("json_version", json!("1.0"))),
        ("json_version", false, Box::new(|m| drop(m.remove("json_version")))),
        ("cudnn_backend_version", false, set("cudnn_backend_version", json!("9.x"))),
        ("cudnn_frontend_version", false, set("cudnn_frontend_version", json!("1.32"))),
        ("extra", false, set("extra", json!(1))),
        ("context", false, Box::new(|m| drop((m.remove("nodes"), m.remove("tensors"))))),
    ];
    for (key, unsupported, edit) in cases {
        let bytes = edited(&base, edit);
        let e = parse_frontend_payload(&bytes).expect_err(key);
        assert_eq!(key_of(&e), Some((key, unsupported)), "{key}: {e}");
        assert!(e.to_string().contains(&format!("`{key}`")), "{e}");
    }
    // The structure is the structural reader's: its errors come through as they are.
    let bytes = edited(&base, |m| drop(m.insert("nodes".into(), json!([{"tag": "RNG"}]))));
    assert!(matches!(parse_frontend_payload(&bytes), Err(PayloadError::Structure(_))));
    // Not UBJSON, not an object, truncated: typed, never a panic.
    assert!(matches!(parse_frontend_payload(b"{\"json\": 1}"), Err(PayloadError::Ubjson(_))));
    assert!(matches!(parse_frontend_payload(b"[]"), Err(PayloadError::FrontendKey { .. })));
    for cut in (0..base.len()).step_by(97) {
        assert!(parse_frontend_payload(&base[..cut]).is_err(), "a payload cut at byte {cut} parsed");
    }
}

/// What only the loaded plan can tell: the variant pack, the by-value scalars, the pointer
/// replacements, the workspace tensors, the behavior notes and the cuDNN version must be the
/// plan's.
#[needs_cudnn]
#[test]
fn keys_that_disagree_with_the_loaded_plan_are_refused() {
    let Some(cudnn) = common::deviceless() else { return };
    let base = fixture("matmul");
    read_frontend_payload(&cudnn, &base, None).unwrap();
    // (what the error is about, the edited payload): a scalar filled in for a uid the plan does not
    // have is a variant pack that is not the plan's.
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("variant_pack_uids", edited(&base, |m| drop(m.insert("variant_pack_uids".into(), json!([1, 2]))))),
        (
            "variant_pack_uids",
            edited(&base, |m| drop(m.insert("pass_by_values".into(), json!({"7": {"index": 3, "value": "3F800000"}})))),
        ),
        ("behavior_notes", edited(&base, |m| drop(m.insert("behavior_notes".into(), json!([[]]))))),
        // A slice by pointer offset, a workspace tensor, a front-end workspace the plan lacks.
        (
            "variant_pack_replacements",
            edited(&base, |m| drop(m.insert("variant_pack_replacements".into(), json!([[1, [3, 64]]])))),
        ),
        (
            "variant_pack_uids",
            edited(&base, |m| {
                m.insert("workspace_modifications".into(), json!({"9": [2, 0, []]}));
                m.insert("fe_workspace_size".into(), json!(256));
            }),
        ),
        ("fe_workspace_size", edited(&base, |m| drop(m.insert("fe_workspace_size".into(), json!(256))))),
        ("cudnn_backend_version", edited(&base, |m| drop(m.insert("cudnn_backend_version".into(), json!("9.18.0"))))),
    ];
    for (key, bytes) in cases {
        let e = read_frontend_payload(&cudnn, &bytes, None).expect_err(key);
        let named = match &e {
            PayloadError::VariantPack { .. } => "variant_pack_uids",
            PayloadError::Scalars { .. } => "pass_by_values",
            PayloadError::CudnnVersion { payload: 91800, .. } => "cudnn_backend_version",
            other => key_of(other).map_or("?", |(k, _)| k),
        };
        assert_eq!(named, key, "{e}");
    }
    // The notes are named as cuDNN spells them, each side a list.
    let forged = edited(&base, |m| drop(m.insert("behavior_notes".into(), json!([[]]))));
    let e = read_frontend_payload(&cudnn, &forged, None).unwrap_err().to_string();
    assert!(e.contains("`behavior_notes` [[]] are not the loaded plan's [[\""), "{e}");
    assert!(!e.contains('{'), "{e}");
    // Another graph's plan JSON: refused by the binding check before cuDNN sees it.
    let conv = parse_frontend_payload(&fixture("conv_fprop")).unwrap();
    let bytes = edited(&base, |m| drop(m.insert("cudnn_backend_data".into(), json!(conv.plan_json))));
    assert!(matches!(read_frontend_payload(&cudnn, &bytes, None), Err(PayloadError::Load(_))));
    // Plan-only: the graph must be given, and must be the one the plan was made for.
    let plan_only = edited(&base, |m| {
        for k in ["context", "gid", "nodes", "tensors"] {
            m.remove(k);
        }
    });
    assert!(matches!(read_frontend_payload(&cudnn, &plan_only, None), Err(PayloadError::NeedsGraph { .. })));
    let graph = parse_frontend_payload(&base).unwrap().structure.unwrap();
    let plan = read_frontend_payload(&cudnn, &plan_only, Some(graph.clone())).unwrap();
    assert_eq!(plan.graph().fingerprint(), graph.fingerprint());
    let other = parse_frontend_payload(&fixture("pointwise_relu")).unwrap().structure.unwrap();
    assert!(matches!(read_frontend_payload(&cudnn, &base, Some(other)), Err(PayloadError::GraphFingerprint { .. })));
}

/// Ours → cudnn-frontend's → ours keeps the graph, its fingerprint and its by-value scalars; and
/// cudnn-frontend's payload, loaded and written again, is the same payload but for the plan JSON
/// (which embeds pointers) and the structure's `cudnn_graph` extension and `gid`.
#[needs_cudnn]
#[test]
fn round_trips_keep_the_graph() {
    let Some(cudnn) = common::deviceless() else { return };
    for name in ["conv_bias_relu", "matmul_bias_relu", "layernorm_training", "sdpa", "sdpa_backward", "slice_matmul"] {
        let ours = std::fs::read(format!("{}/fuzz/corpus/payload/{name}.json", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let payload = parse_payload(&ours).unwrap();
        let plan = load_payload(&cudnn, &payload, None, &Expect::default()).unwrap();
        let theirs = write_frontend_payload(&plan, &payload.origin(), SerializeOptions::default()).unwrap();
        let parsed = parse_frontend_payload(&theirs).unwrap();
        let scalars: Vec<(i64, f64)> = parsed.pass_by_values.iter().map(|(u, s)| (*u, s.value())).collect();
        let want: Vec<(i64, f64)> = plan.layout().scalars().iter().map(|s| (s.uid, s.value() as f32 as f64)).collect();
        if plan.layout().scalars().iter().all(|s| s.data_type == cudnn_graph::DataType::F32 && !s.value().is_nan()) {
            assert_eq!(scalars, want, "{name}: by-value scalars");
        }
        let back = read_frontend_payload(&cudnn, &theirs, None).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(back.graph(), plan.graph(), "{name}");
        assert_eq!(back.graph().fingerprint(), plan.graph().fingerprint(), "{name}");
        let again =
            write_payload(&back, &PlanOrigin::of(&cudnn), SerializeOptions::default(), &Expect::default()).unwrap();
        let reread = parse_payload(&again).unwrap();
        assert_eq!(reread.plan.graph_fingerprint, payload.plan.graph_fingerprint, "{name}");
        // Plan-only: no structure keys, loads with the graph given.
        let plan_only =
            write_frontend_payload(&plan, &payload.origin(), SerializeOptions { structure: false }).unwrap();
        assert!(parse_frontend_payload(&plan_only).unwrap().structure.is_none());
        read_frontend_payload(&cudnn, &plan_only, Some(plan.graph().clone())).unwrap();
    }
    let base = fixture("conv_fprop");
    let plan = read_frontend_payload(&cudnn, &base, None).unwrap();
    let written = write_frontend_payload(&plan, &PlanOrigin::of(&cudnn), SerializeOptions::default()).unwrap();
    // Without the plan JSON and gid, our `cudnn_graph` extension objects, and with the variant
    // pack (a set) in order.
    fn strip_ours(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("cudnn_graph");
                m.values_mut().for_each(strip_ours);
            }
            Value::Array(a) => a.iter_mut().for_each(strip_ours),
            _ => {}
        }
    }
    let strip = |bytes: &[u8]| {
        let mut v: Value = serde_json::from_str(&ubjson_to_json(bytes).unwrap()).unwrap();
        strip_ours(&mut v);
        let m = v.as_object_mut().unwrap();
        m.remove("cudnn_backend_data");
        m.remove("gid");
        let mut uids: Vec<i64> =
            m["variant_pack_uids"].as_array().unwrap().iter().map(|u| u.as_i64().unwrap()).collect();
        uids.sort();
        m.insert("variant_pack_uids".into(), json!(uids));
        v
    };
    assert_eq!(strip(&written), strip(&base));
}

#[test]
fn scalar_members_widen_exactly() {
    assert_eq!(FrontendScalar::F32(0x3DCC_CCCD).value(), f64::from(0.1f32));
    assert_eq!(FrontendScalar::F16(0x3C00).value(), 1.0);
    assert_eq!(FrontendScalar::BF16(0x3F80).data_type(), cudnn_graph::DataType::BF16);
    assert_eq!(FrontendScalar::I32(-3).value(), -3.0);
}

/// A slice bound by pointer offset is written as cudnn-frontend's `variant_pack_replacements`
/// (the sliced input's uid → the slice's uid and byte offset), tensors in the workspace as
/// `workspace_modifications` regions (operation 2) with `fe_workspace_size`; each, edited, is
/// refused on reading naming the key.
#[needs_cudnn]
#[test]
fn replacements_and_workspace_tensors_are_written_as_cudnn_frontend_reads_them() {
    let Some(cudnn) = common::deviceless() else { return };
    let ours = |name: &str| {
        let bytes = std::fs::read(format!("{}/fuzz/corpus/payload/{name}.json", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let payload = parse_payload(&bytes).unwrap();
        let plan = load_payload(&cudnn, &payload, None, &Expect::default()).unwrap();
        let written = write_frontend_payload(&plan, &payload.origin(), SerializeOptions::default()).unwrap();
        (plan, written)
    };

    let (plan, written) = ours("slice_matmul");
    let layout = plan.layout();
    let &(position, io, offset) = layout.views().first().expect("slice_matmul binds its slice by pointer offset");
    let doc: Value = serde_json::from_str(&ubjson_to_json(&written).unwrap()).unwrap();
    let from = plan.graph().tensor(layout.io()[io]).uid;
    let to = layout.uids()[position];
    assert!(offset > 0, "a slice that does not start at the tensor's front");
    assert_eq!(doc["variant_pack_replacements"], json!([[from, [to, offset]]]));
    // The slice is bound (cudnn-frontend binds it from the replacement), the sliced tensor is not.
    let uids: Vec<i64> = doc["variant_pack_uids"].as_array().unwrap().iter().map(|u| u.as_i64().unwrap()).collect();
    assert!(uids.contains(&to) && !uids.contains(&from), "{uids:?}");
    let parsed = parse_frontend_payload(&written).unwrap();
    assert_eq!(parsed.replacements.len(), 1);
    let shifted =
        edited(&written, |m| drop(m.insert("variant_pack_replacements".into(), json!([[from, [to, offset + 2]]]))));
    let e = read_frontend_payload(&cudnn, &shifted, None).unwrap_err();
    assert_eq!(key_of(&e), Some(("variant_pack_replacements", false)), "{e}");

    let (plan, written) = ours("sdpa_backward");
    let layout = plan.layout();
    assert_eq!(layout.workspace_tensors().len(), 2);
    let doc: Value = serde_json::from_str(&ubjson_to_json(&written).unwrap()).unwrap();
    assert_eq!(doc["fe_workspace_size"], json!(layout.workspace_prefix()));
    assert!(layout.workspace_prefix() > 0);
    for &(position, offset) in layout.workspace_tensors() {
        let uid = layout.uids()[position].to_string();
        assert_eq!(doc["workspace_modifications"][&uid], json!([2, offset, []]), "uid {uid}");
    }
    let parsed = parse_frontend_payload(&written).unwrap();
    assert_eq!(parsed.fe_workspace_size, layout.workspace_prefix());
    // Another offset, another front-end workspace size: not where the plan puts them.
    let (first, _) = parsed.workspace_tensors[0];
    let moved = edited(&written, |m| {
        let size = m["fe_workspace_size"].as_u64().unwrap();
        m["workspace_modifications"][first.to_string()] = json!([2, size - 4, []]);
    });
    let e = read_frontend_payload(&cudnn, &moved, None).unwrap_err();
    assert_eq!(key_of(&e), Some(("workspace_modifications", false)), "{e}");
    let grown = edited(&written, |m| {
        let size = m["fe_workspace_size"].as_u64().unwrap();
        m.insert("fe_workspace_size".into(), json!(size + 256));
    });
    let e = read_frontend_payload(&cudnn, &grown, None).unwrap_err();
    assert_eq!(key_of(&e), Some(("fe_workspace_size", false)), "{e}");
}

/// cudnn-frontend prints a payload's structure after lowering, where its composite attention
/// node has transposed K in place (and the backward node K and V): we write ours so, and read
/// either back as given. `cudnn_graph`'s own structural JSON (no plan) keeps K as given.
#[needs_cudnn]
#[test]
fn attention_operands_are_transposed_in_payload_structures() {
    let Some(cudnn) = common::deviceless() else { return };
    for (name, ports) in [("sdpa", &["K"][..]), ("sdpa_backward", &["K", "V"][..])] {
        let bytes = std::fs::read(format!("{}/fuzz/corpus/payload/{name}.json", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let payload = parse_payload(&bytes).unwrap();
        let plan = load_payload(&cudnn, &payload, None, &Expect::default()).unwrap();
        let written = write_frontend_payload(&plan, &payload.origin(), SerializeOptions::default()).unwrap();
        let doc: Value = serde_json::from_str(&ubjson_to_json(&written).unwrap()).unwrap();
        let node = &doc["nodes"][0];
        let graph = plan.graph();
        for port in ports {
            let uid = node["inputs"][port].as_i64().unwrap();
            let ours = graph.tensors.iter().find(|t| t.uid == uid).unwrap();
            let (mut dims, mut strides) = (ours.dims.clone(), ours.strides.clone());
            assert_ne!(dims[2], dims[3], "{name}: a shape whose transpose shows");
            dims.swap(2, 3);
            strides.swap(2, 3);
            let theirs = doc["tensors"].as_array().unwrap().iter().find(|t| t["uid"] == uid).unwrap();
            assert_eq!(theirs["dim"], json!(dims), "{name} {port}");
            assert_eq!(theirs["stride"], json!(strides), "{name} {port}");
        }
        let back = parse_frontend_payload(&written).unwrap().structure.unwrap();
        assert_eq!(&back, graph, "{name}: K (and V) read back as given");
        // A unified (cuDNN `SDPA_FWD`) node leaves K as given: read as written.
        if name == "sdpa" {
            let unified = edited(&written, |m| {
                m["nodes"][0]["implementation"] = json!("UNIFIED");
                m.remove("cudnn_graph");
                for t in m["tensors"].as_array_mut().unwrap() {
                    t.as_object_mut().unwrap().remove("cudnn_graph");
                }
                for n in m["nodes"].as_array_mut().unwrap() {
                    n.as_object_mut().unwrap().remove("cudnn_graph");
                }
            });
            let e = parse_frontend_payload(&unified).unwrap_err();
            assert!(e.to_string().contains("port K"), "a transposed K read as given fails K's shape rule: {e}");
        }
    }
}
