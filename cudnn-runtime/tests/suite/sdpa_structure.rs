//! Attention graphs through the structural JSON (cudnn-frontend's `SDPA` / `SDPA_BWD` nodes):
//! exact round trips with our extension, and cudnn-frontend's fields alone read to the same
//! graph.

use cudnn_runtime::ops::AttrValue;
use cudnn_runtime::serialize::{structure_from_json, structure_to_json, SerializeError};
use cudnn_runtime::{reference, DataType, Graph, GraphBuilder, Operand};

fn attrs(list: &[(&str, AttrValue)]) -> Vec<(String, AttrValue)> {
    list.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

/// `[b, h_q, h_kv, s_q, s_kv, d]` attention, forward or backward, with `list`'s attributes and the
/// inputs they ask for.
fn graph(backward: bool, list: &[(&str, AttrValue)]) -> Graph {
    let (b, h_q, h_kv, s_q, s_kv, d) = (2, 4, 2, 6, 10, 16);
    let a = attrs(list);
    let name = if backward { "sdpa_backward" } else { "sdpa" };
    let op = cudnn_runtime::ops::Op::from_call(name, &a).unwrap();
    let mut g = GraphBuilder::new("attn");
    let mut ins: Vec<Operand> = Vec::new();
    for p in op.inputs() {
        let (dt, dims): (DataType, Vec<i64>) = match p.name {
            "Q" | "O" | "dO" => (DataType::BF16, vec![b, h_q, s_q, d]),
            // A paged cache: pools of 8 pages of 5 tokens, tables 2 wide (capacity 10 = s_kv).
            "K" | "V" if list.iter().any(|(k, _)| *k == "paged") => (DataType::BF16, vec![8, h_kv, 5, d]),
            "Page_table_K" | "Page_table_V" => (DataType::I32, vec![b, 1, s_kv / 5, 1]),
            "K" | "V" => (DataType::BF16, vec![b, h_kv, s_kv, d]),
            "Stats" => (DataType::F32, vec![b, h_q, s_q, 1]),
            "Attn_scale" => (DataType::F32, vec![1, 1, 1, 1]),
            "Bias" => (DataType::BF16, vec![1, h_q, s_q, s_kv]),
            "SEQ_LEN_Q" | "SEQ_LEN_KV" => (DataType::I32, vec![b, 1, 1, 1]),
            _ => (DataType::I64, vec![1, 1, 1, 1]),
        };
        ins.push(g.input(&p.name.to_lowercase(), dt, &dims).unwrap().into());
    }
    let outs = g.op(name, &ins, &a).unwrap();
    for (t, port) in outs.iter().zip(op.outputs()) {
        let dt = if port == "Stats" { DataType::F32 } else { DataType::BF16 };
        g.output(*t, &format!("out_{}", port.to_lowercase()), dt).unwrap();
    }
    g.build().unwrap()
}

fn cases() -> Vec<(bool, Vec<(&'static str, AttrValue)>)> {
    vec![
        (false, vec![]),
        (false, vec![("causal", true.into()), ("training", true.into()), ("scale", 0.25.into())]),
        (false, vec![("causal", true.into()), ("alignment", "bottom_right".into()), ("window", 3.into())]),
        (false, vec![("bias", true.into()), ("padding_mask", true.into()), ("implementation", "composite".into())]),
        (false, vec![("scale_tensor", true.into()), ("dropout", 0.125.into())]),
        (false, vec![("implementation", "fused".into())]),
        (false, vec![("paged", true.into()), ("padding_mask", true.into()), ("training", true.into())]),
        (false, vec![("paged", true.into()), ("padding_mask", true.into()), ("max_seq_len_kv", 9.into())]),
        (true, vec![("causal", true.into())]),
        (true, vec![("bias", true.into()), ("d_bias", true.into()), ("deterministic", true.into())]),
        (true, vec![("padding_mask", true.into()), ("dropout", 0.25.into()), ("scale", 0.5.into())]),
    ]
}

#[test]
fn attention_graphs_round_trip_exactly() {
    for (backward, list) in cases() {
        let g = graph(backward, &list);
        let text = structure_to_json(&g);
        let back = structure_from_json(&text).unwrap_or_else(|e| panic!("{list:?}: {e}\n{text}"));
        assert_eq!(back, g, "{list:?}");
        let tag = if backward { "\"SDPA_BWD\"" } else { "\"SDPA\"" };
        assert!(text.contains(tag), "{text}");
    }
}

/// Removes our `cudnn_graph` members (what cudnn-frontend itself writes).
fn frontend_only(text: &str) -> String {
    let mut doc: serde_json::Value = serde_json::from_str(text).unwrap();
    doc.as_object_mut().unwrap().remove("cudnn_graph");
    for node in doc["nodes"].as_array_mut().unwrap() {
        node.as_object_mut().unwrap().remove("cudnn_graph");
    }
    doc.to_string()
}

#[test]
fn cudnn_frontend_fields_alone_give_the_same_computation() {
    for (backward, list) in cases() {
        let g = graph(backward, &list);
        let text = frontend_only(&structure_to_json(&g));
        let back = structure_from_json(&text).unwrap_or_else(|e| panic!("{list:?}: {e}\n{text}"));
        // cudnn-frontend keeps the scale as an f32, resolved: compare what the graphs compute.
        assert_eq!(back.nodes.len(), g.nodes.len());
        assert_eq!(back.nodes[0].op.inputs(), g.nodes[0].op.inputs(), "{list:?}");
        assert_eq!(back.nodes[0].op.outputs(), g.nodes[0].op.outputs(), "{list:?}");
        let run = |graph: &Graph| {
            let mut values = vec![None; graph.tensors.len()];
            for id in graph.inputs() {
                let t = graph.tensor(id);
                let n: i64 = t.dims.iter().product();
                let data: Vec<f64> = (0..n)
                    .map(|i| match t.data_type {
                        DataType::I32 => (3 + i % 4) as f64,
                        DataType::I64 => 17.0,
                        _ if t.name == "attn_scale" => 0.3,
                        _ => ((i * 7919 % 113) as f64 / 56.0 - 1.0) * 0.5,
                    })
                    .collect();
                values[id.0] = Some(reference::Array { dims: t.dims.clone(), data });
            }
            reference::run_arrays(graph, values).unwrap()
        };
        let (want, got) = (run(&g), run(&back));
        for (w, o) in want.iter().zip(&got) {
            for (a, b) in w.data.iter().zip(&o.data) {
                assert!(
                    a == b || (a - b).abs() <= 1e-6 * (1.0 + a.abs()) || (a.is_nan() && b.is_nan()),
                    "{list:?}: {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn unsupported_frontend_features_are_named() {
    let g = graph(false, &[("causal", true.into())]);
    let mut doc: serde_json::Value = serde_json::from_str(&frontend_only(&structure_to_json(&g))).unwrap();
    doc["nodes"][0]["alibi_mask"] = serde_json::Value::Bool(true);
    let e = structure_from_json(&doc.to_string()).unwrap_err();
    assert!(e.to_string().contains("alibi masks"), "{e}");
    doc["nodes"][0]["alibi_mask"] = serde_json::Value::Bool(false);
    doc["nodes"][0]["right_bound"] = serde_json::json!(4);
    let e = structure_from_json(&doc.to_string()).unwrap_err();
    assert!(e.to_string().contains("right bounds other than 0"), "{e}");
}

#[test]
fn the_backward_node_writes_its_compute_type_only_where_the_context_does_not_give_it() {
    // cudnn-frontend's `SDPA_BWD` has no `compute_data_type` (it computes in the context's type).
    let mut g = graph(true, &[("causal", true.into())]);
    let doc: serde_json::Value = serde_json::from_str(&structure_to_json(&g)).unwrap();
    assert!(doc["nodes"][0].get("compute_data_type").is_none(), "{}", doc["nodes"][0]);
    // A node computing in another type than the context's says so (for our reader).
    g.context.compute_data_type = DataType::F16;
    let text = structure_to_json(&g);
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["nodes"][0]["compute_data_type"], "FLOAT");
    assert_eq!(structure_from_json(&text), Ok(g));
    // The forward node has the field, as cudnn-frontend's.
    let doc: serde_json::Value = serde_json::from_str(&structure_to_json(&graph(false, &[]))).unwrap();
    assert_eq!(doc["nodes"][0]["compute_data_type"], "FLOAT");
}

#[test]
fn cudnn_frontend_1_32_forward_fields_are_written_and_read_by_what_they_mean() {
    let g = graph(false, &[("causal", true.into())]);
    let text = frontend_only(&structure_to_json(&g));
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let node = &doc["nodes"][0];
    // Every field cudnn-frontend 1.32's reader requires, and `AUTO` resolved (it refuses `AUTO`).
    for (field, value) in [
        ("stats_use_log2", serde_json::json!(false)),
        ("is_mxfp8", serde_json::json!(false)),
        ("unfuse_fma", serde_json::json!(false)),
        ("max_total_seq_len_q", serde_json::Value::Null),
        ("max_total_seq_len_kv", serde_json::Value::Null),
        ("implementation", serde_json::json!("COMPOSITE")),
    ] {
        assert_eq!(node.get(field), Some(&value), "{field}: {node}");
    }
    // Values other than the ones our IR means are refused, naming the field.
    for (field, value, feature) in [
        ("stats_use_log2", serde_json::json!(true), "softmax stats in base 2"),
        ("is_mxfp8", serde_json::json!(true), "MXFP8"),
    ] {
        let mut doc = doc.clone();
        doc["nodes"][0][field] = value;
        let e = structure_from_json(&doc.to_string()).unwrap_err();
        assert!(
            matches!(&e, SerializeError::Unsupported { path, feature: f } if path == &format!("nodes[0].{field}") && f.contains(feature)),
            "{field}: {e:?}"
        );
    }
    // A bound on the packed tokens of an attention that packs nothing: the rule's error.
    for field in ["max_total_seq_len_q", "max_total_seq_len_kv"] {
        let mut doc = doc.clone();
        doc["nodes"][0][field] = serde_json::json!(256);
        let e = structure_from_json(&doc.to_string()).unwrap_err().to_string();
        assert!(
            e.contains(&format!("`{field} = 256` bounds the tokens of packed sequences; add `ragged = true`")),
            "{e}"
        );
    }
    let mut doc = doc.clone();
    doc["nodes"][0]["stats_use_log2"] = serde_json::json!("no");
    let e = structure_from_json(&doc.to_string()).unwrap_err();
    assert!(matches!(&e, SerializeError::WrongType { path, .. } if path == "nodes[0].stats_use_log2"), "{e:?}");
}

/// A fixture of `tests/fixtures/cudnn_frontend` (written by its `after_build.py`).
fn captured(name: &str) -> String {
    let path = format!("{}/tests/fixtures/cudnn_frontend/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The dims and strides of the graph's tensor `name`.
fn layout(g: &Graph, name: &str) -> (Vec<i64>, Vec<i64>) {
    let t = g.tensor_by_name(name).unwrap_or_else(|| panic!("no tensor {name}"));
    (t.dims.clone(), t.strides.clone())
}

/// `graph`'s outputs by name, computed by the reference from fixed-seed random inputs (by name:
/// the same input of two graphs gets the same values).
fn outputs_by_name(graph: &Graph) -> Vec<(String, Vec<f64>)> {
    let mut values = vec![None; graph.tensors.len()];
    for id in graph.inputs() {
        let t = graph.tensor(id);
        let mut state =
            t.name.bytes().fold(0x9e37_79b9_7f4a_7c15_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        let data = (0..t.element_count())
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                // Non-zero, in [-1, -1/16] or [1/16, 1].
                let x = (state >> 11) as f64 / (1u64 << 53) as f64;
                if x < 0.5 {
                    -(1.0 / 16.0 + x * 15.0 / 8.0)
                } else {
                    1.0 / 16.0 + (x - 0.5) * 15.0 / 8.0
                }
            })
            .collect();
        values[id.0] = Some(reference::Array { dims: t.dims.clone(), data });
    }
    let out = reference::run_arrays(graph, values).unwrap();
    let mut named: Vec<(String, Vec<f64>)> = graph
        .outputs()
        .into_iter()
        .map(|id| graph.tensor(id).name.clone())
        .zip(out.into_iter().map(|a| a.data))
        .collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named
}

#[test]
fn cudnn_frontend_attention_printed_after_building_reads_as_printed_before() {
    // cudnn-frontend 1.32's composite SDPA lowering swaps K's last two dims and strides in place
    // (its backward K's and V's), so its graph printed after `build_operation_graph` has
    // `k: [1, 2, 64, 128]` with strides `[16384, 8192, 1, 64]`; building also adds the scale as
    // a by-value `Attn_scale` input. Read, it is the graph printed before building: the same
    // layouts and the same values. `forward_square` has d == s_kv, where only the strides tell.
    for (case, swapped, s) in
        [("forward", &["k"][..], 128), ("forward_square", &["k"][..], 64), ("backward", &["k", "v"][..], 128)]
    {
        let built_text = captured(&format!("sdpa_{case}_built.json"));
        let raw: serde_json::Value = serde_json::from_str(&built_text).unwrap();
        for name in swapped {
            let t = raw["tensors"].as_array().unwrap().iter().find(|t| t["name"] == *name).unwrap();
            assert_eq!(t["dim"], serde_json::json!([1, 2, 64, s]), "{case}: the fixture's {name} is as lowered");
            assert_eq!(t["stride"], serde_json::json!([128 * s, 64 * s, 1, 64]), "{case}: {name}");
        }
        let built = structure_from_json(&built_text).unwrap_or_else(|e| panic!("{case}: {e}"));
        let before = structure_from_json(&captured(&format!("sdpa_{case}_before.json"))).unwrap();
        for name in ["q", "k", "v"] {
            assert_eq!(layout(&built, name), (vec![1, 2, s, 64], vec![128 * s, 64 * s, 64, 1]), "{case}: {name}");
            assert_eq!(layout(&built, name), layout(&before, name), "{case}: {name}");
        }
        let (want, got) = (outputs_by_name(&before), outputs_by_name(&built));
        assert_eq!(want.iter().map(|o| &o.0).collect::<Vec<_>>(), got.iter().map(|o| &o.0).collect::<Vec<_>>());
        for ((name, w), (_, o)) in want.iter().zip(&got) {
            assert!(w.iter().any(|x| x.abs() > 1e-3), "{case}: {name} is not all zero");
            for (a, b) in w.iter().zip(o) {
                assert!((a - b).abs() <= 1e-9 * (1.0 + a.abs()), "{case}: {name}: {a} vs {b}");
            }
        }
        // Written back, the operands are as given: the document reads again to the same graph.
        let again = structure_from_json(&structure_to_json(&built)).unwrap();
        assert_eq!(again.fingerprint(), built.fingerprint(), "{case}");
    }
}

#[test]
fn a_k_with_its_dims_swapped_but_not_its_strides_is_refused_naming_the_port() {
    // Only cudnn-frontend's in-place swap (dims and strides, K's unit stride on dim 2) is read
    // back as its lowering left it; K's dims transposed over packed strides are a wrong K.
    let mut doc: serde_json::Value = serde_json::from_str(&captured("sdpa_forward_before.json")).unwrap();
    let k = doc["tensors"].as_array_mut().unwrap().iter_mut().find(|t| t["name"] == "k").unwrap();
    assert_eq!(k["dim"], serde_json::json!([1, 2, 128, 64]));
    k["dim"] = serde_json::json!([1, 2, 64, 128]);
    k["stride"] = serde_json::json!([16384, 8192, 128, 1]);
    let e = structure_from_json(&doc.to_string()).unwrap_err();
    let SerializeError::Graph(graph_error) = &e else { panic!("{e:?}") };
    assert!(
        matches!(&**graph_error, cudnn_runtime::GraphError::Shape { node, port: Some("K"), .. } if node == "sdpa"),
        "{e:?}"
    );
}

/// fp8 attention (`fp8 = e4m3 | e5m2`): Q, K, V, O in the fp8 type, the six scales, the amaxes.
fn fp8_graph(mode: &str, list: &[(&str, AttrValue)]) -> Graph {
    let dtype = if mode == "e5m2" { DataType::Fp8E5M2 } else { DataType::Fp8E4M3 };
    let mut a = attrs(list);
    a.push(("fp8".into(), mode.into()));
    let op = cudnn_runtime::ops::Op::from_call("sdpa", &a).unwrap();
    let mut g = GraphBuilder::new("fp8_attn");
    let ins: Vec<Operand> = op
        .inputs()
        .iter()
        .map(|p| {
            let (dt, dims) = match p.name {
                "Q" | "K" | "V" => (dtype, vec![2, 4, 8, 16]),
                "SEQ_LEN_Q" | "SEQ_LEN_KV" => (DataType::I32, vec![2, 1, 1, 1]),
                _ => (DataType::F32, vec![1, 1, 1, 1]),
            };
            g.input(&p.name.to_lowercase(), dt, &dims).unwrap().into()
        })
        .collect();
    let outs = g.op("sdpa", &ins, &a).unwrap();
    for (t, port) in outs.iter().zip(op.outputs()) {
        let dt = if port == "O" { dtype } else { DataType::F32 };
        g.output(*t, &format!("out_{}", port.to_lowercase()), dt).unwrap();
    }
    g.build().unwrap()
}

#[test]
fn fp8_attention_reads_back_from_cudnn_frontend_fields() {
    let cases: [(&str, Vec<(&str, AttrValue)>); 3] = [
        ("e4m3", vec![("causal", true.into())]),
        ("e5m2", vec![("training", true.into())]),
        ("e4m3", vec![("padding_mask", true.into()), ("scale", 0.5.into())]),
    ];
    for (mode, list) in cases {
        let g = fp8_graph(mode, &list);
        let text = structure_to_json(&g);
        assert_eq!(structure_from_json(&text).unwrap(), g, "{mode} {list:?}");
        let fe = frontend_only(&text);
        let want_mode = if mode == "e5m2" { "\"FP8_E5M2\"" } else { "\"FP8_E4M3\"" };
        assert!(fe.contains("\"SDPA_FP8_FWD\"") && fe.contains(want_mode), "{fe}");
        let back = structure_from_json(&fe).unwrap_or_else(|e| panic!("{mode} {list:?}: {e}\n{fe}"));
        assert_eq!(back.nodes[0].op.inputs(), g.nodes[0].op.inputs(), "{mode} {list:?}");
        assert_eq!(back.nodes[0].op.outputs(), g.nodes[0].op.outputs(), "{mode} {list:?}");
        assert_eq!(
            back.nodes[0].op.call_attrs().iter().find(|(k, _)| k == "fp8").map(|(_, v)| v.clone()),
            Some(mode.into())
        );
    }
    // An fp8 tag in the HALF mode, and an fp8 port on a HALF node, are refused by name.
    let fe = frontend_only(&structure_to_json(&fp8_graph("e4m3", &[])));
    let half = fe.replace("\"FP8_E4M3\"", "\"HALF\"");
    let e = structure_from_json(&half).unwrap_err();
    assert!(e.to_string().contains("MMA mode HALF"), "{e}");
    let plain = fe.replace("\"SDPA_FP8_FWD\"", "\"SDPA\"").replace("\"FP8_E4M3\"", "\"HALF\"");
    let e = structure_from_json(&plain).unwrap_err();
    assert!(e.to_string().contains("port is not supported"), "{e}");
}
