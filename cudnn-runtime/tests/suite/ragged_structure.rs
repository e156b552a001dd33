//! Ragged (packed, THD) attention through the structural JSON: the packed tensors carry
//! cudnn-frontend's `ragged_offset_uid` / `ragged_offset_name`, the node lists no offsets port;
//! exact round trips, cudnn-frontend's fields alone (even without entries for the offsets
//! tensors, as its `Tensor_attributes` JSON gives them) read to the same computation, and ragged
//! offsets anywhere else refused by name. cudnn-frontend's own printed ragged graphs are read in
//! `tests/suite/frontend_oracle.rs` (fixtures `sdpa_ragged_forward`, `sdpa_ragged_backward`).

use cudnn_runtime::ops::AttrValue;
use cudnn_runtime::serialize::{structure_from_json, structure_to_json, SerializeError};
use cudnn_runtime::{reference, DataType, Graph, GraphBuilder, Operand};

const B: i64 = 3;
const H: i64 = 2;
const S: i64 = 6;
const D: i64 = 8;
/// The sequences' lengths (queries and keys alike).
const LENS: [i64; 3] = [4, 6, 1];

/// A ragged attention graph, forward or backward, optionally over a paged cache, with `extra`
/// attributes; offsets of type `offsets`.
fn graph(backward: bool, paged: bool, offsets: DataType, extra: &[(&str, AttrValue)]) -> Graph {
    let mut a: Vec<(String, AttrValue)> = vec![("ragged".into(), true.into()), ("padding_mask".into(), true.into())];
    if paged {
        a.push(("paged".into(), true.into()));
    }
    a.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    let name = if backward { "sdpa_backward" } else { "sdpa" };
    let op = cudnn_runtime::ops::Op::from_call(name, &a).unwrap();
    let mut g = GraphBuilder::new("ragged");
    let mut ins: Vec<Operand> = Vec::new();
    for p in op.inputs() {
        let (dt, dims, thd): (DataType, Vec<i64>, bool) = match p.name {
            "K" | "V" if paged => (DataType::BF16, vec![8, H, 3, D], false),
            "Q" | "K" | "V" | "O" | "dO" => (DataType::BF16, vec![B, H, S, D], true),
            "Page_table_K" | "Page_table_V" => (DataType::I32, vec![B, 1, 2, 1], false),
            "Stats" => (DataType::F32, vec![B, H, S, 1], false),
            "SEQ_LEN_Q" | "SEQ_LEN_KV" => (DataType::I32, vec![B, 1, 1, 1], false),
            n if n.starts_with("Ragged_offset") => (offsets, vec![B + 1, 1, 1, 1], false),
            "Bias" => (DataType::BF16, vec![1, H, S, S], false),
            _ => (DataType::I64, vec![1, 1, 1, 1], false),
        };
        let t = g.input(&p.name.to_lowercase(), dt, &dims).unwrap();
        if thd {
            g.set_dim_order(t, &[0, 2, 1, 3]).unwrap();
        }
        ins.push(t.into());
    }
    let outs = g.op(name, &ins, &a).unwrap();
    for (t, port) in outs.iter().zip(op.outputs()) {
        let dt = if port == "Stats" { DataType::F32 } else { DataType::BF16 };
        let id = g.output(*t, &format!("out_{}", port.to_lowercase()), dt).unwrap();
        if ["O", "dQ", "dK", "dV"].contains(&port) {
            g.set_dim_order(id, &[0, 2, 1, 3]).unwrap();
        }
    }
    g.build().unwrap()
}

/// `(backward, paged, offsets type, attributes)`.
type Case = (bool, bool, DataType, Vec<(&'static str, AttrValue)>);

fn cases() -> Vec<Case> {
    vec![
        (false, false, DataType::I32, vec![]),
        (false, false, DataType::I64, vec![("causal", true.into()), ("training", true.into())]),
        (false, true, DataType::I32, vec![("causal", true.into()), ("alignment", "bottom_right".into())]),
        (true, false, DataType::I32, vec![("causal", true.into())]),
        (true, false, DataType::I64, vec![("bias", true.into()), ("d_bias", true.into())]),
        // Bounds on the packed tokens (LENS holds 11): the buffers' capacity.
        (false, false, DataType::I32, vec![("max_total_seq_len_q", 11.into()), ("max_total_seq_len_kv", 12.into())]),
        (false, true, DataType::I32, vec![("max_total_seq_len_q", 11.into())]),
        (true, false, DataType::I32, vec![("causal", true.into()), ("max_total_seq_len_q", 11.into())]),
    ]
}

#[test]
fn ragged_attention_round_trips_exactly_with_cudnn_frontend_fields() {
    for (backward, paged, offsets, list) in cases() {
        let g = graph(backward, paged, offsets, &list);
        let text = structure_to_json(&g);
        let back = structure_from_json(&text).unwrap_or_else(|e| panic!("{list:?}: {e}\n{text}"));
        assert_eq!(back, g, "{list:?}");
        // The offsets are named by the tensors they pack, not listed among the node's ports.
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        let node_inputs = doc["nodes"][0]["inputs"].as_object().unwrap();
        assert!(node_inputs.keys().all(|k| !k.starts_with("Ragged_offset")), "{text}");
        let tensor =
            |name: &str| doc["tensors"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap().clone();
        let offsets_q = tensor("ragged_offset_q");
        assert_eq!(tensor("q")["ragged_offset_uid"], offsets_q["uid"], "{text}");
        assert_eq!(tensor("q")["ragged_offset_name"], "ragged_offset_q");
        if backward {
            // dO at O's offsets, dQ at Q's.
            assert_eq!(tensor("do")["ragged_offset_name"], "ragged_offset_o");
            assert_eq!(tensor("out_dq")["ragged_offset_name"], "ragged_offset_q");
        } else {
            assert_eq!(tensor("out_o")["ragged_offset_name"], "ragged_offset_o");
        }
        // The bounds are cudnn-frontend's fields (null without one).
        for field in ["max_total_seq_len_q", "max_total_seq_len_kv"] {
            let given = list.iter().find(|(k, _)| *k == field).map(|(_, v)| v.clone());
            let written = &doc["nodes"][0][field];
            match given {
                Some(AttrValue::Int(n)) => assert_eq!(written, &serde_json::json!(n), "{field}: {text}"),
                _ => assert!(written.is_null(), "{field}: {text}"),
            }
        }
        // Over a paged cache K and V are pools: not packed.
        let k = tensor("k");
        assert_eq!(k.get("ragged_offset_uid").is_some(), !paged, "{text}");
        // Stats stay padded.
        let stats = if backward { "stats" } else { "out_stats" };
        if let Some(t) = doc["tensors"].as_array().unwrap().iter().find(|t| t["name"] == stats) {
            assert!(t.get("ragged_offset_uid").is_none(), "{text}");
        }
    }
}

/// Offsets of the packed batch [`LENS`]: `0, 4·H·D, 10·H·D, 11·H·D`.
fn offsets() -> Vec<f64> {
    let mut v = vec![0.0];
    for n in LENS {
        v.push(v[v.len() - 1] + (n * H * D) as f64);
    }
    v
}

/// The reference outputs of `graph` on fixed inputs (valid offsets, lengths and tables).
fn run(graph: &Graph) -> Vec<reference::Array> {
    let mut values = vec![None; graph.tensors.len()];
    for id in graph.inputs() {
        let t = graph.tensor(id);
        let n: i64 = t.dims.iter().product();
        let data: Vec<f64> = if t.name.starts_with("ragged_offset") {
            offsets()
        } else if t.name.starts_with("seq_len") {
            LENS.iter().map(|&n| n as f64).collect()
        } else if t.name.starts_with("page_table") {
            (0..n).map(|i| (7 - i) as f64).collect()
        } else {
            (0..n).map(|i| ((i * 7919 % 113) as f64 / 56.0 - 1.0) * 0.5).collect()
        };
        values[id.0] = Some(reference::Array { dims: t.dims.clone(), data });
    }
    reference::run_arrays(graph, values).unwrap()
}

/// The document with cudnn-frontend's fields alone: no `cudnn_graph` members, and no entry for
/// the offsets tensors (only the packed tensors' `ragged_offset_uid` and `_name` name them).
fn as_frontend_writes(text: &str) -> serde_json::Value {
    let mut doc: serde_json::Value = serde_json::from_str(text).unwrap();
    doc.as_object_mut().unwrap().remove("cudnn_graph");
    for node in doc["nodes"].as_array_mut().unwrap() {
        node.as_object_mut().unwrap().remove("cudnn_graph");
    }
    doc["tensors"].as_array_mut().unwrap().retain(|t| !t["name"].as_str().unwrap().starts_with("ragged_offset"));
    doc
}

#[test]
fn cudnn_frontend_documents_without_the_offsets_tensors_read_to_the_same_computation() {
    for (backward, paged, offsets, list) in cases() {
        let g = graph(backward, paged, offsets, &list);
        let doc = as_frontend_writes(&structure_to_json(&g));
        let back = structure_from_json(&doc.to_string()).unwrap_or_else(|e| panic!("{list:?}: {e}\n{doc}"));
        assert_eq!(back.nodes[0].op.inputs(), g.nodes[0].op.inputs(), "{list:?}");
        // The offsets the document leaves out are `[B + 1, 1, 1, 1]` INT32, by the names and uids
        // the packed tensors give.
        for id in back.inputs() {
            let t = back.tensor(id);
            if t.name.starts_with("ragged_offset") {
                assert_eq!((t.dims.as_slice(), t.data_type), ([B + 1, 1, 1, 1].as_slice(), DataType::I32), "{list:?}");
                assert_eq!(Some(t.uid), g.id_of(&t.name).map(|i| g.tensor(i).uid));
            }
        }
        let (want, got) = (run(&g), run(&back));
        assert_eq!(want.len(), got.len());
        for (w, o) in want.iter().zip(&got) {
            assert!(w.data.iter().any(|v| *v != 0.0), "{list:?}: all zero");
            for (a, b) in w.data.iter().zip(&o.data) {
                assert!(a == b || (a - b).abs() <= 1e-6 * (1.0 + a.abs()), "{list:?}: {a} vs {b}");
            }
        }
    }
}

fn unsupported(doc: &serde_json::Value) -> (String, String) {
    match structure_from_json(&doc.to_string()) {
        Err(SerializeError::Unsupported { path, feature }) => (path, feature),
        other => panic!("{other:?}"),
    }
}

#[test]
fn ragged_offsets_anywhere_else_are_refused_by_name() {
    let g = graph(false, false, DataType::I32, &[]);
    let text = structure_to_json(&g);
    let base: serde_json::Value = serde_json::from_str(&text).unwrap();
    let index = |doc: &serde_json::Value, name: &str| {
        doc["tensors"].as_array().unwrap().iter().position(|t| t["name"] == name).unwrap()
    };
    // Stats is not packed: attention has no ragged Stats here.
    let mut doc =
        as_frontend_writes(&structure_to_json(&graph(false, false, DataType::I32, &[("training", true.into())])));
    let stats = index(&doc, "out_stats");
    let q = index(&doc, "q");
    doc["tensors"][stats]["ragged_offset_uid"] = doc["tensors"][q]["ragged_offset_uid"].clone();
    let (path, feature) = unsupported(&doc);
    assert!(path.ends_with("ragged_offset_uid"), "{path}");
    assert!(feature.contains("ragged offsets on tensor `out_stats`, port Stats of a SDPA node"), "{feature}");
    // A packed tensor no node reads.
    let mut doc = base.clone();
    let offsets_q = index(&doc, "ragged_offset_q");
    doc["tensors"][offsets_q]["ragged_offset_uid"] = serde_json::json!(1);
    let (_, feature) = unsupported(&doc);
    assert!(
        feature.contains("ragged offsets on tensor `ragged_offset_q`, which no attention node reads or writes"),
        "{feature}"
    );
    // dO at other offsets than O.
    let bw = graph(true, false, DataType::I32, &[]);
    let mut doc: serde_json::Value = serde_json::from_str(&structure_to_json(&bw)).unwrap();
    let d_o = index(&doc, "do");
    let k_off = index(&doc, "ragged_offset_k");
    doc["tensors"][d_o]["ragged_offset_uid"] = doc["tensors"][k_off]["uid"].clone();
    doc["tensors"][d_o]["ragged_offset_name"] = doc["tensors"][k_off]["name"].clone();
    let (_, feature) = unsupported(&doc);
    assert!(feature.contains("port dO packed at other offsets than port O"), "{feature}");
    // A uid and a name that disagree.
    let mut doc = base.clone();
    let q = index(&doc, "q");
    doc["tensors"][q]["ragged_offset_name"] = serde_json::json!("ragged_offset_k");
    let (_, feature) = unsupported(&doc);
    assert!(feature.contains("the uid and the name disagree"), "{feature}");
    // A bound on the packed tokens past the padded batch's B·S, or below 1: the rule's error.
    for (bound, want) in [(19, "`max_total_seq_len_q = 19` is more than B·S_q = 3·6 = 18"), (0, "at least 1, found 0")]
    {
        let mut doc = as_frontend_writes(&text);
        doc["nodes"][0]["max_total_seq_len_q"] = serde_json::json!(bound);
        let e = structure_from_json(&doc.to_string()).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }
    // Offsets on a matmul's operand.
    let mut m = GraphBuilder::new("mm");
    let a = m.input("a", DataType::BF16, &[1, 4, 8]).unwrap();
    let b = m.input("b", DataType::BF16, &[1, 8, 4]).unwrap();
    let c = m.op("matmul", &[a.into(), b.into()], &[]).unwrap()[0];
    m.output(c, "c", DataType::BF16).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&structure_to_json(&m.build().unwrap())).unwrap();
    doc["tensors"][0]["ragged_offset_uid"] = serde_json::json!(77);
    doc["tensors"][0]["ragged_offset_name"] = serde_json::json!("off");
    let (_, feature) = unsupported(&doc);
    assert!(feature.contains("ragged offsets on tensor `a`, port A of a MATMUL node"), "{feature}");
}
