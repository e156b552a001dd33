//! The structural JSON: round trips (bit-exact, byte-identical, fingerprint-preserving) for every
//! op family and mode, the layout cudnn-frontend reads, the hand-written cudnn-frontend fixtures,
//! one test per error variant, and truncated and mutated documents.

use cudnn_runtime::error::GraphError;
use cudnn_runtime::ops::{AttrError, AttrKind, AttrValue, PointwiseMode, ReductionMode};
use cudnn_runtime::serialize::float::f32_to_hex;
use cudnn_runtime::serialize::{
    structure_from_json, structure_to_json, SerializeError, MAX_INPUT_BYTES, MAX_JSON_VALUES, MAX_NODES, MAX_RANK,
    MAX_TENSORS,
};
use cudnn_runtime::{Context, DataType, Graph, GraphBuilder, Operand, TensorId};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// Helpers

/// Writes, reads back, and checks the graph, its fingerprint and the bytes are unchanged.
fn round_trip(g: &Graph) -> String {
    let text = structure_to_json(g);
    let back = structure_from_json(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(&back, g);
    assert_eq!(back.fingerprint(), g.fingerprint());
    assert_eq!(structure_to_json(&back), text, "re-serialization differs");
    text
}

fn attr(name: &str, v: impl Into<AttrValue>) -> (String, AttrValue) {
    (name.to_string(), v.into())
}

/// a·b + bias → ×0.1 → relu(upper_clip 6.25) = y; reduce_sum(y, dims [-1]) = s. Uids 1..=9 in
/// creation order: a b bias C add scalar mul y s.
fn sample() -> Graph {
    let mut g = GraphBuilder::new("sample");
    let a = g.input("a", DataType::BF16, &[2, 8, 4]).unwrap();
    let b = g.input("b", DataType::BF16, &[2, 4, 16]).unwrap();
    let bias = g.input("bias", DataType::BF16, &[1, 1, 16]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let d = g.op("add", &[c.into(), bias.into()], &[]).unwrap()[0];
    let e = g.op("mul", &[d.into(), 0.1.into()], &[]).unwrap()[0];
    let y = g.op("relu", &[e.into()], &[attr("upper_clip", 6.25)]).unwrap()[0];
    let y = g.output(y, "y", DataType::BF16).unwrap();
    let s = g.op("reduce_sum", &[y.into()], &[attr("dims", vec![-1])]).unwrap()[0];
    g.output(s, "s", DataType::F32).unwrap();
    g.build().unwrap()
}

/// The sample document, mutated as a `serde_json::Value`, then read.
fn read_mutated(f: impl FnOnce(&mut Value)) -> Result<Graph, SerializeError> {
    let mut v: Value = v1(serde_json::from_str(&structure_to_json(&sample())).unwrap());
    f(&mut v);
    structure_from_json(&serde_json::to_string(&v).unwrap())
}

fn at<'a>(v: &'a mut Value, pointer: &str) -> &'a mut Value {
    v.pointer_mut(pointer).unwrap_or_else(|| panic!("no {pointer}"))
}

/// Sets (or adds) the member at `pointer`.
fn set(v: &mut Value, pointer: &str, value: Value) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    match at(v, parent) {
        Value::Object(members) => {
            members.insert(key.to_string(), value);
        }
        Value::Array(items) => items[key.parse::<usize>().unwrap()] = value,
        other => panic!("{parent} is {other}"),
    }
}

fn remove(v: &mut Value, pointer: &str) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    at(v, parent).as_object_mut().unwrap().remove(key).unwrap_or_else(|| panic!("no {pointer}"));
}

fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "`{from}` must occur once");
    text.replacen(from, to, 1)
}

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/cudnn_frontend/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn tensor<'a>(g: &'a Graph, name: &str) -> &'a cudnn_runtime::Tensor {
    g.tensor_by_name(name).unwrap_or_else(|| panic!("no tensor {name}"))
}

// ---------------------------------------------------------------------------------------------
// Round trips

/// The document in json_version 1.0's layout (`tensors` an object keyed by uid, as cudnn-frontend
/// wrote before 1.2x), which we also read: the tests below tamper with tensors by uid.
fn v1(mut v: Value) -> Value {
    if let Some(Value::Array(items)) = v.get("tensors").cloned() {
        let mut map = serde_json::Map::new();
        for mut t in items {
            t["uid_assigned"] = Value::Bool(true);
            map.insert(t["uid"].to_string(), t);
        }
        v["tensors"] = Value::Object(map);
        v["json_version"] = Value::String("1.0".into());
    }
    v
}

#[test]
fn sample_round_trips_in_cudnn_frontend_layout() {
    let g = sample();
    let text = round_trip(&g);
    let written: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(written["json_version"], "2.0");
    let uids: Vec<i64> = written["tensors"].as_array().unwrap().iter().map(|t| t["uid"].as_i64().unwrap()).collect();
    assert_eq!(uids, (1..=9).collect::<Vec<_>>(), "tensors in ascending uid order");
    let v = v1(written);
    assert_eq!(v["cudnn_graph"]["format"], 1);
    assert_eq!(v["cudnn_graph"]["fingerprint"], format!("0x{:016x}", g.fingerprint()));
    assert!(v["cudnn_graph"].get("tensor_order").is_none(), "uids follow creation order");
    // cudnn-frontend's instance number, which it requires: ours is the fingerprint's low 63 bits.
    assert_eq!(v["gid"], json!((g.fingerprint() & i64::MAX as u64).max(1)));
    assert_eq!(
        v["context"],
        json!({"compute_data_type": "FLOAT", "intermediate_data_type": "FLOAT", "io_data_type": null,
               "is_dynamic_shape_enabled": false, "is_override_shape_enabled": false, "name": "sample",
               "sm_count": -1})
    );
    // cudnn-frontend's tensor fields (`uid_assigned` is the 1.0 layout's, added by `v1`).
    assert_eq!(
        v["tensors"]["1"],
        json!({"data_type": "BFLOAT16", "dim": [2, 8, 4], "is_pass_by_value": false, "is_virtual": false,
               "name": "a", "pass_by_value": null, "reordering_type": "NONE", "stride": [32, 4, 1], "uid": 1,
               "uid_assigned": true})
    );
    assert_eq!(v["tensors"]["4"]["is_virtual"], true);
    assert_eq!(v["tensors"]["4"]["data_type"], "FLOAT");
    assert_eq!(v["tensors"]["6"]["pass_by_value"], json!({"index": 3, "value": "3DCCCCCD"}));
    // Nodes in topological order, ports by name referring to uids.
    let nodes = v["nodes"].as_array().unwrap();
    let tags: Vec<&str> = nodes.iter().map(|n| n["tag"].as_str().unwrap()).collect();
    assert_eq!(tags, ["MATMUL", "POINTWISE", "POINTWISE", "POINTWISE", "REDUCTION"]);
    assert_eq!(nodes[0]["inputs"], json!({"A": 1, "B": 2}));
    assert_eq!(nodes[0]["outputs"], json!({"C": 4}));
    assert_eq!(nodes[0]["padding_value"], 0.0);
    assert_eq!(nodes[1]["inputs"], json!({"IN_0": 4, "IN_1": 3}));
    assert_eq!(nodes[2]["inputs"], json!({"IN_0": 5, "IN_1": 6}));
    assert_eq!(nodes[3]["mode"], "RELU_FWD");
    assert_eq!(nodes[3]["relu_upper_clip"], "40C80000");
    assert_eq!(nodes[3]["relu_lower_clip"], Value::Null);
    assert_eq!(nodes[3]["cudnn_graph"], json!({"attrs": {"upper_clip": "0x4019000000000000"}}));
    assert_eq!(nodes[4]["inputs"], json!({"X": 8}));
    assert_eq!(nodes[4]["outputs"], json!({"Y": 9}));
    assert_eq!(nodes[4]["mode"], "ADD");
    assert_eq!(nodes[4]["is_deterministic"], false);
    assert_eq!(nodes[4]["cudnn_graph"], json!({"attrs": {"dims": [-1]}}));
    for n in nodes {
        assert_eq!(n["compute_data_type"], "FLOAT");
    }
}

#[test]
fn output_is_deterministic() {
    assert_eq!(structure_to_json(&sample()), structure_to_json(&sample()));
}

/// Input and output types for a pointwise mode's test graph.
fn pointwise_types(mode: PointwiseMode) -> (Vec<DataType>, DataType) {
    let name = mode.name();
    let arity = mode.arity();
    if name.starts_with("logical_") {
        (vec![DataType::Bool; arity], DataType::Bool)
    } else if name.starts_with("cmp_") {
        (vec![DataType::F32; arity], DataType::Bool)
    } else if mode == PointwiseMode::GenIndex {
        (vec![DataType::F32], DataType::I32)
    } else if mode == PointwiseMode::BinarySelect {
        (vec![DataType::F32, DataType::F32, DataType::Bool], DataType::F32)
    } else {
        (vec![DataType::F32; arity], DataType::F32)
    }
}

/// Non-default attribute values (some exact in f32, some not).
fn non_default(name: &str) -> AttrValue {
    match name {
        "lower_clip" => AttrValue::Float(0.125),
        "upper_clip" => AttrValue::Float(6.25),
        "lower_clip_slope" => AttrValue::Float(0.01),
        "alpha" => AttrValue::Float(0.3),
        "beta" => AttrValue::Float(1.7),
        "axis" => AttrValue::Int(1),
        other => panic!("no test value for attribute `{other}`"),
    }
}

#[test]
fn every_pointwise_mode_round_trips_with_non_default_attributes() {
    for &mode in PointwiseMode::ALL {
        let (ins, out) = pointwise_types(mode);
        let mut g = GraphBuilder::new(format!("pw_{}", mode.name()));
        // The second operand broadcasts over the first.
        let operands: Vec<Operand> = ins
            .iter()
            .enumerate()
            .map(|(i, dt)| {
                let dims: &[i64] = if i == 1 { &[1, 3] } else { &[2, 3] };
                g.input(&format!("x{i}"), *dt, dims).unwrap().into()
            })
            .collect();
        let attrs: Vec<(String, AttrValue)> =
            mode.signature().attrs.iter().map(|a| (a.name.to_string(), non_default(a.name))).collect();
        let y = g.op(mode.name(), &operands, &attrs).unwrap_or_else(|e| panic!("{}: {e}", mode.name()))[0];
        g.output(y, "y", out).unwrap();
        let graph = g.build().unwrap();
        let text = round_trip(&graph);

        let v: Value = v1(serde_json::from_str(&text).unwrap());
        let node = &v["nodes"][0];
        assert_eq!(node["tag"], "POINTWISE");
        assert_eq!(node["mode"], mode.cudnn_name(), "{}", mode.name());
        let ports: Vec<String> = (0..mode.arity()).map(|i| format!("IN_{i}")).collect();
        let keys: Vec<&String> = node["inputs"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ports.iter().collect::<Vec<_>>());
        assert_eq!(node["outputs"], json!({"OUT_0": mode.arity() + 1}));
        // cudnn-frontend's f32 fields, and the exact f64 in our extension.
        for a in mode.signature().attrs {
            let field = match (a.name, mode.name()) {
                ("lower_clip", _) => "relu_lower_clip",
                ("upper_clip", _) => "relu_upper_clip",
                ("lower_clip_slope", _) => "relu_lower_clip_slope",
                ("alpha", _) => "elu_alpha",
                ("beta", m) if m.starts_with("softplus") => "softplus_beta",
                ("beta", _) => "swish_beta",
                ("axis", _) => "axis",
                (other, _) => panic!("unexpected attribute {other}"),
            };
            match (a.kind, non_default(a.name)) {
                (AttrKind::Float, AttrValue::Float(x)) => {
                    assert_eq!(node[field], f32_to_hex(x as f32), "{} {field}", mode.name());
                    assert_eq!(node["cudnn_graph"]["attrs"][a.name], format!("0x{:016x}", x.to_bits()));
                }
                (AttrKind::Int, AttrValue::Int(x)) => assert_eq!(node[field], x),
                other => panic!("unexpected {other:?}"),
            }
        }
        if mode.signature().attrs.is_empty() {
            assert!(node.get("cudnn_graph").is_none());
        }
    }
}

#[test]
fn pointwise_attributes_keep_their_f64_bits() {
    let mut g = GraphBuilder::new("attrs");
    let x = g.input("x", DataType::F32, &[4]).unwrap();
    let y = g.op("elu", &[x.into()], &[attr("alpha", 0.3)]).unwrap()[0];
    let z = g
        .op(
            "relu",
            &[y.into()],
            &[attr("lower_clip", -0.0), attr("upper_clip", 1e-310), attr("lower_clip_slope", 0.01)],
        )
        .unwrap()[0];
    let w = g.op("swish", &[z.into()], &[attr("beta", 1.0 / 3.0)]).unwrap()[0];
    g.output(w, "w", DataType::F32).unwrap();
    let graph = g.build().unwrap();
    let back = structure_from_json(&round_trip(&graph)).unwrap();
    let cudnn_runtime::ops::Op::Pointwise(relu) = &back.nodes[1].op else { panic!("not pointwise") };
    assert_eq!(relu.relu_lower_clip.map(f64::to_bits), Some((-0.0f64).to_bits()));
    assert_eq!(relu.relu_upper_clip.map(f64::to_bits), Some(1e-310f64.to_bits()));
    assert_eq!(relu.relu_lower_clip_slope.map(f64::to_bits), Some(0.01f64.to_bits()));
    let cudnn_runtime::ops::Op::Pointwise(elu) = &back.nodes[0].op else { panic!("not pointwise") };
    assert_eq!(elu.elu_alpha.map(f64::to_bits), Some(0.3f64.to_bits()));
}

#[test]
fn every_reduction_mode_round_trips() {
    for &mode in ReductionMode::ALL {
        for dims in [vec![-1], vec![0, 2], vec![1]] {
            let mut g = GraphBuilder::new(format!("red_{}", mode.name()));
            let x = g.input("x", DataType::F16, &[2, 3, 4]).unwrap();
            let y = g.op(mode.name(), &[x.into()], &[attr("dims", dims.clone())]).unwrap()[0];
            g.output(y, "y", DataType::F32).unwrap();
            let graph = g.build().unwrap();
            let text = round_trip(&graph);
            let v: Value = v1(serde_json::from_str(&text).unwrap());
            let node = &v["nodes"][0];
            assert_eq!(node["tag"], "REDUCTION");
            assert_eq!(node["mode"], mode.cudnn_name());
            assert_eq!(node["cudnn_graph"]["attrs"]["dims"], json!(dims));
            assert_eq!(node["inputs"], json!({"X": 1}));
            assert_eq!(node["outputs"], json!({"Y": 2}));
        }
    }
}

#[test]
fn by_value_scalar_keeps_its_exact_bits() {
    let mut g = GraphBuilder::new("scale");
    let x = g.input("x", DataType::F32, &[2, 3]).unwrap();
    let y = g.op("mul", &[x.into(), 0.1.into()], &[]).unwrap()[0];
    g.output(y, "y", DataType::F32).unwrap();
    let graph = g.build().unwrap();
    let text = round_trip(&graph);
    let v: Value = v1(serde_json::from_str(&text).unwrap());
    let s = &v["tensors"]["2"];
    assert_eq!(s["is_pass_by_value"], true);
    assert_eq!(s["pass_by_value"], json!({"index": 3, "value": "3DCCCCCD"}));
    assert_eq!(s["dim"], json!([1, 1]));
    assert!(s.get("cudnn_graph").is_none(), "an f32 value is exact in cudnn-frontend's encoding");
    let back = structure_from_json(&text).unwrap();
    assert_eq!(back.tensors[1].pass_by_value.map(f64::to_bits), Some(f64::from(0.1f32).to_bits()));
}

fn f64_scalar_graph(v: f64) -> Graph {
    let mut g = GraphBuilder::new("f64");
    g.context(Context { intermediate_data_type: DataType::F64, compute_data_type: DataType::F64 });
    let x = g.input("x", DataType::F64, &[3]).unwrap();
    let y = g.op("add", &[x.into(), v.into()], &[]).unwrap()[0];
    g.output(y, "y", DataType::F64).unwrap();
    g.build().unwrap()
}

#[test]
fn f64_scalars_are_exact_including_nan_and_infinities() {
    let values = [0.1, -0.0, 1e-310, 1.0 / 3.0, f64::MAX, f64::INFINITY, f64::NEG_INFINITY];
    for v in values {
        let text = round_trip(&f64_scalar_graph(v));
        let j: Value = v1(serde_json::from_str(&text).unwrap());
        assert_eq!(j["tensors"]["2"]["pass_by_value"]["index"], 4);
        assert_eq!(j["tensors"]["2"]["cudnn_graph"]["pass_by_value"], format!("0x{:016x}", v.to_bits()));
    }
    let j: Value = v1(serde_json::from_str(&structure_to_json(&f64_scalar_graph(0.1))).unwrap());
    assert_eq!(j["tensors"]["2"]["pass_by_value"]["value"], 0.1);
    // NaN != NaN, so compare the bits: payload and sign survive.
    let nan = f64::from_bits(0xfff8_0000_0bad_f00d);
    let g = f64_scalar_graph(nan);
    let text = structure_to_json(&g);
    let j: Value = v1(serde_json::from_str(&text).unwrap());
    assert_eq!(j["tensors"]["2"]["pass_by_value"]["value"], Value::Null);
    let back = structure_from_json(&text).unwrap();
    assert_eq!(back.tensors[1].pass_by_value.map(f64::to_bits), Some(nan.to_bits()));
    assert_eq!(back.fingerprint(), g.fingerprint());
    assert_eq!(structure_to_json(&back), text);
}

#[test]
fn scalars_of_every_variant_alternative_round_trip() {
    let cases = [
        (DataType::F16, 0.1, 2, json!("3DCCC000")),
        (DataType::BF16, 0.1, 5, json!("3DCD0000")),
        (DataType::F32, -2.5, 3, json!("C0200000")),
        (DataType::I32, 7.0, 1, json!(7)),
        (DataType::I64, -9.0, 0, json!(-9)),
        (DataType::I8, -3.0, 1, json!(-3)),
    ];
    for (dt, value, index, encoded) in cases {
        let mut g = GraphBuilder::new("s");
        g.context(Context { intermediate_data_type: dt, compute_data_type: dt });
        let x = g.input("x", dt, &[2, 2]).unwrap();
        let y = g.op("sub", &[x.into(), value.into()], &[]).unwrap()[0];
        g.output(y, "y", dt).unwrap();
        let graph = g.build().unwrap();
        let text = round_trip(&graph);
        let j: Value = v1(serde_json::from_str(&text).unwrap());
        assert_eq!(j["tensors"]["2"]["pass_by_value"], json!({"index": index, "value": encoded}), "{dt}");
        assert!(j["tensors"]["2"].get("cudnn_graph").is_none(), "{dt}");
    }
}

#[test]
fn user_set_uids_keep_the_tensor_order() {
    let mut g = GraphBuilder::new("uids");
    let a = g.input("a", DataType::F16, &[1, 8, 4]).unwrap();
    let b = g.input("b", DataType::F16, &[1, 4, 2]).unwrap();
    let c = g.matmul(a, b).unwrap();
    g.output(c, "c", DataType::F16).unwrap();
    g.set_uid(a, 100).unwrap();
    let graph = g.build().unwrap();
    assert_eq!(graph.tensors.iter().map(|t| t.uid).collect::<Vec<_>>(), [100, 1, 2]);
    let text = round_trip(&graph);
    let j: Value = v1(serde_json::from_str(&text).unwrap());
    assert_eq!(j["cudnn_graph"]["tensor_order"], json!([100, 1, 2]));
    assert!(text.find("\"uid\": 2").unwrap() < text.find("\"uid\": 100").unwrap(), "tensors sorted by uid");
    assert_eq!(j["nodes"][0]["inputs"], json!({"A": 100, "B": 1}));
}

#[test]
fn custom_strides_and_graph_names_round_trip() {
    let mut g = GraphBuilder::new("strided \"graph\"\n");
    let a = g.input("a\\ü", DataType::F16, &[1, 8, 4]).unwrap();
    let b = g.input("b", DataType::F16, &[1, 4, 2]).unwrap();
    g.set_strides(b, &[8, 1, 4]).unwrap();
    let c = g.matmul(a, b).unwrap();
    g.output(c, "c", DataType::F16).unwrap();
    round_trip(&g.build().unwrap());
}

// ---------------------------------------------------------------------------------------------
// cudnn-frontend fixtures

#[test]
fn fixture_matmul_bias_relu_loads() {
    let g = structure_from_json(&fixture("matmul_bias_relu.json")).unwrap();
    assert_eq!(g.name, "matmul_bias_relu");
    assert_eq!(g.context, Context { intermediate_data_type: DataType::F32, compute_data_type: DataType::F32 });
    let names: Vec<&str> = g.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["A", "B", "matmul::C", "bias", "bias::OUT_0", "Y"]);
    assert_eq!(g.tensors.iter().map(|t| t.uid).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6]);
    assert_eq!(tensor(&g, "B").strides, [512, 1, 32]);
    assert_eq!(tensor(&g, "A").data_type, DataType::F16);
    assert!(tensor(&g, "matmul::C").is_virtual);
    assert_eq!(g.inputs(), [TensorId(0), TensorId(1), TensorId(3)]);
    assert_eq!(g.outputs(), [TensorId(5)]);
    let calls: Vec<&str> = g.nodes.iter().map(|n| n.op.call_name()).collect();
    assert_eq!(calls, ["matmul", "add", "relu"]);
    assert_eq!(g.nodes[2].op.call_attrs(), [attr("upper_clip", 6.0)]);
    assert_eq!(g.nodes[1].inputs, [TensorId(2), TensorId(3)]);
    // Rebuilt here, it round trips through our own format.
    round_trip(&g);
}

#[test]
fn fixture_before_validate_is_filled_in_like_cudnn_frontend() {
    let g = structure_from_json(&fixture("scale_shift_pow_prevalidate.json")).unwrap();
    // Name references; uids assigned to the unassigned tensors in order of first use.
    let uids: Vec<(&str, i64)> = g.tensors.iter().map(|t| (t.name.as_str(), t.uid)).collect();
    assert_eq!(
        uids,
        [
            ("scale::IN_1", 1),
            ("scale::OUT_0", 2),
            ("shift::IN_1", 3),
            ("shift::OUT_0", 4),
            ("pow::IN_1", 5),
            ("x", 10),
            ("y", 11)
        ]
    );
    // Fused scalars take the operand's rank; outputs get the inferred dims, packed strides and the
    // context's types.
    let s = tensor(&g, "scale::IN_1");
    assert_eq!((s.dims.as_slice(), s.strides.as_slice()), (&[1, 1][..], &[1, 1][..]));
    assert_eq!(s.pass_by_value.map(f64::to_bits), Some(f64::from(0.1f32).to_bits()));
    assert_eq!(tensor(&g, "shift::IN_1").pass_by_value, Some(-0.5));
    assert_eq!(tensor(&g, "shift::IN_1").data_type, DataType::F16);
    assert_eq!(tensor(&g, "pow::IN_1").pass_by_value, Some(2.5));
    assert_eq!(tensor(&g, "pow::IN_1").data_type, DataType::F64);
    let v = tensor(&g, "shift::OUT_0");
    assert_eq!((v.dims.as_slice(), v.strides.as_slice(), v.data_type), (&[4, 16][..], &[16, 1][..], DataType::F32));
    let y = tensor(&g, "y");
    assert_eq!((y.dims.as_slice(), y.data_type, y.is_virtual), (&[4, 16][..], DataType::F32, false));
    assert!(g.nodes.iter().all(|n| n.compute_data_type == DataType::F32));
    round_trip(&g);
}

#[test]
fn fixture_reductions_get_their_dims_from_the_shapes() {
    let g = structure_from_json(&fixture("row_sum_mean_amax.json")).unwrap();
    let calls: Vec<(&str, Vec<(String, AttrValue)>)> =
        g.nodes.iter().map(|n| (n.op.call_name(), n.op.call_attrs())).collect();
    assert_eq!(
        calls,
        [("reduce_sum", vec![attr("dims", vec![1])]), ("div", vec![]), ("reduce_amax", vec![attr("dims", vec![0, 1])])]
    );
    assert_eq!(tensor(&g, "mean::IN_1").pass_by_value, Some(64.0));
    assert_eq!(g.outputs().len(), 2);
    round_trip(&g);
}

#[test]
fn fixture_causal_mask_loads() {
    let g = structure_from_json(&fixture("causal_mask.json")).unwrap();
    let calls: Vec<&str> = g.nodes.iter().map(|n| n.op.call_name()).collect();
    assert_eq!(calls, ["gen_index", "gen_index", "cmp_ge", "binary_select"]);
    assert_eq!(g.nodes[0].op.call_attrs(), [attr("axis", 2)]);
    assert_eq!(g.nodes[1].op.call_attrs(), [attr("axis", 3)]);
    assert_eq!(g.nodes[0].compute_data_type, DataType::I32);
    assert_eq!(g.nodes[3].inputs, [TensorId(0), TensorId(4), TensorId(3)]);
    assert_eq!(tensor(&g, "binary_select::IN_1").pass_by_value, Some(f64::NEG_INFINITY));
    assert_eq!(tensor(&g, "row_greater_than_col::OUT_0").data_type, DataType::Bool);
    round_trip(&g);
}

#[test]
fn every_fixture_survives_our_writer() {
    for name in
        ["matmul_bias_relu.json", "scale_shift_pow_prevalidate.json", "row_sum_mean_amax.json", "causal_mask.json"]
    {
        let g = structure_from_json(&fixture(name)).unwrap();
        assert_eq!(structure_from_json(&structure_to_json(&g)).unwrap(), g, "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// Errors: one test per variant

#[test]
fn error_input_too_large() {
    let text = " ".repeat(MAX_INPUT_BYTES + 1);
    assert_eq!(
        structure_from_json(&text),
        Err(SerializeError::InputTooLarge { len: MAX_INPUT_BYTES + 1, max: MAX_INPUT_BYTES })
    );
}

#[test]
fn error_syntax_names_line_and_column() {
    let text = structure_to_json(&sample());
    let cut = &text[..text.find("\"nodes\"").unwrap()];
    let Err(SerializeError::Syntax { line, column, message }) = structure_from_json(cut) else {
        panic!("expected a syntax error")
    };
    assert_eq!(line, cut.lines().count());
    assert!(column > 0);
    assert!(message.contains("EOF"), "{message}");
    assert!(matches!(structure_from_json("{\"json_version\": \"1.0\"} x"), Err(SerializeError::Syntax { .. })));
    assert!(matches!(structure_from_json(""), Err(SerializeError::Syntax { line: 1, column: 0, .. })));
    // Deep nesting is stopped by the parser's recursion limit, not by the stack.
    let deep = "[".repeat(100_000);
    let Err(SerializeError::Syntax { message, .. }) = structure_from_json(&deep) else { panic!("accepted") };
    assert!(message.contains("recursion limit"), "{message}");
    assert!(matches!(
        structure_from_json("{\"json_version\": \"1.0\", \"a\": \"\\ud800\"}"),
        Err(SerializeError::Syntax { .. })
    ));
}

#[test]
fn error_too_many() {
    let mut tensors = serde_json::Map::new();
    for i in 0..=MAX_TENSORS {
        tensors.insert(i.to_string(), json!({}));
    }
    let doc = json!({"json_version": "1.0", "tensors": tensors}).to_string();
    assert_eq!(
        structure_from_json(&doc),
        Err(SerializeError::TooMany {
            path: "tensors".into(),
            what: "tensors",
            count: MAX_TENSORS + 1,
            max: MAX_TENSORS
        })
    );
    // A document of many small values is stopped while it is parsed, before it takes memory.
    let doc = format!("{{\"json_version\": \"1.0\", \"nodes\": [{}0]}}", "0,".repeat(MAX_JSON_VALUES));
    assert_eq!(
        structure_from_json(&doc),
        Err(SerializeError::TooMany {
            path: "(document)".into(),
            what: "JSON values",
            count: MAX_JSON_VALUES + 1,
            max: MAX_JSON_VALUES
        })
    );
    let doc = json!({"json_version": "1.0", "nodes": vec![json!({}); MAX_NODES + 1]}).to_string();
    assert!(matches!(structure_from_json(&doc), Err(SerializeError::TooMany { what: "nodes", .. })));
    let e = read_mutated(|v| set(v, "/tensors/1/dim", json!(vec![1; MAX_RANK + 1])));
    assert_eq!(
        e,
        Err(SerializeError::TooMany {
            path: "tensors[\"1\"].dim".into(),
            what: "dims",
            count: MAX_RANK + 1,
            max: MAX_RANK
        })
    );
}

#[test]
fn error_unsupported_version() {
    let e = read_mutated(|v| set(v, "/json_version", json!("3.0")));
    assert_eq!(e, Err(SerializeError::UnsupportedVersion { found: "3.0".into(), supported: "1.0 or 2.0" }));
    let e = read_mutated(|v| set(v, "/json_version", json!(1)));
    assert!(matches!(e, Err(SerializeError::WrongType { ref path, .. }) if path == "json_version"), "{e:?}");
    let e = read_mutated(|v| remove(v, "/json_version"));
    assert_eq!(e, Err(SerializeError::MissingField { path: "json_version".into() }));
}

#[test]
fn error_unsupported_format() {
    let e = read_mutated(|v| set(v, "/cudnn_graph/format", json!(2)));
    assert_eq!(e, Err(SerializeError::UnsupportedFormat { found: "2".into(), supported: 1 }));
    let e = read_mutated(|v| set(v, "/cudnn_graph/format", json!("1")));
    assert_eq!(e, Err(SerializeError::UnsupportedFormat { found: "\"1\"".into(), supported: 1 }));
}

#[test]
fn error_unknown_field() {
    let cases: [(&str, &str); 7] = [
        ("/cudnn_graph/plan", "cudnn_graph.plan"),
        ("/nodes/3/cudnn_graph/x", "nodes[3].cudnn_graph.x"),
        ("/nodez", "nodez"),
        ("/tensors/1/strides", "tensors[\"1\"].strides"),
        ("/nodes/3/relu_upper_clipp", "nodes[3].relu_upper_clipp"),
        ("/context/sm_cnt", "context.sm_cnt"),
        ("/tensors/6/pass_by_value/type", "tensors[\"6\"].pass_by_value.type"),
    ];
    for (pointer, expected) in cases {
        let e = read_mutated(|v| set(v, pointer, json!(1)));
        assert!(
            matches!(e, Err(SerializeError::UnknownField { ref path, .. }) if path == expected),
            "{pointer}: {e:?}"
        );
    }
    // A matmul has no pointwise fields.
    let e = read_mutated(|v| set(v, "/nodes/0/mode", json!("ADD")));
    assert!(matches!(e, Err(SerializeError::UnknownField { ref path, .. }) if path == "nodes[0].mode"), "{e:?}");
    // The plan payload's fields, which cudnn-frontend adds to the same object, are left to the plan
    // reader.
    let g = read_mutated(|v| {
        set(v, "/cudnn_backend_data", json!("{}"));
        set(v, "/behavior_notes", json!([]));
        set(v, "/cudnn_frontend_version", json!(12300));
    });
    assert_eq!(g, Ok(sample()));
}

#[test]
fn gid_is_type_checked_and_not_kept() {
    // cudnn-frontend's `gid` numbers its graph instances: any uint64 reads to the same graph.
    for gid in [json!(0), json!(16), json!(u64::MAX)] {
        assert_eq!(read_mutated(|v| set(v, "/gid", gid.clone())), Ok(sample()), "{gid}");
    }
    assert_eq!(read_mutated(|v| remove(v, "/gid")), Ok(sample()));
    let e = read_mutated(|v| set(v, "/gid", json!(-1)));
    assert!(matches!(e, Err(SerializeError::OutOfRange { ref path, .. }) if path == "gid"), "{e:?}");
    let e = read_mutated(|v| set(v, "/gid", json!("1")));
    assert!(matches!(e, Err(SerializeError::WrongType { ref path, .. }) if path == "gid"), "{e:?}");
}

#[test]
fn an_unnamed_graph_writes_no_context_name() {
    let mut g = sample();
    g.name.clear();
    let v: Value = serde_json::from_str(&structure_to_json(&g)).unwrap();
    assert!(v["context"].get("name").is_none(), "{}", v["context"]);
    assert_eq!(structure_from_json(&structure_to_json(&g)), Ok(g));
}

#[test]
fn plain_numbers_are_accepted_for_floats() {
    let g = read_mutated(|v| {
        set(v, "/nodes/3/relu_upper_clip", json!(6.25));
        set(v, "/nodes/3/cudnn_graph/attrs/upper_clip", json!(6.25));
        set(v, "/tensors/6/pass_by_value/value", json!(0.1));
    })
    .unwrap();
    assert_eq!(g, sample());
    // Without our extension, the f32 field is what there is.
    let g = read_mutated(|v| {
        set(v, "/nodes/3/relu_upper_clip", json!(0.3));
        remove(v, "/nodes/3/cudnn_graph");
        remove(v, "/cudnn_graph/fingerprint");
    })
    .unwrap();
    assert_eq!(g.nodes[3].op.call_attrs(), [attr("upper_clip", f64::from(0.3f32))]);
}

#[test]
fn error_missing_field() {
    let e = read_mutated(|v| remove(v, "/tensors/1/name"));
    assert_eq!(e, Err(SerializeError::MissingField { path: "tensors[\"1\"].name".into() }));
    let e = read_mutated(|v| remove(v, "/nodes/2/tag"));
    assert_eq!(e, Err(SerializeError::MissingField { path: "nodes[2].tag".into() }));
    // No type, and none from the context.
    let e = read_mutated(|v| set(v, "/tensors/1/data_type", Value::Null));
    assert_eq!(e, Err(SerializeError::MissingField { path: "tensors[\"1\"].data_type".into() }));
    let e = read_mutated(|v| {
        set(v, "/nodes/0/compute_data_type", Value::Null);
        set(v, "/context/compute_data_type", Value::Null);
    });
    assert_eq!(e, Err(SerializeError::MissingField { path: "nodes[0].compute_data_type".into() }));
}

#[test]
fn error_wrong_type() {
    let e = read_mutated(|v| set(v, "/tensors/1/dim", json!("2x8x4")));
    assert_eq!(
        e,
        Err(SerializeError::WrongType {
            path: "tensors[\"1\"].dim".into(),
            expected: "an array of integers",
            found: "a string"
        })
    );
    let e = read_mutated(|v| set(v, "/tensors/1/dim", json!([2, 8.5, 4])));
    assert!(matches!(e, Err(SerializeError::WrongType { ref path, .. }) if path == "tensors[\"1\"].dim[1]"));
    let e = read_mutated(|v| set(v, "/nodes/0/inputs/A", json!([1])));
    assert!(matches!(e, Err(SerializeError::WrongType { ref path, .. }) if path == "nodes[0].inputs.A"));
    let e = read_mutated(|v| set(v, "/nodes", json!({})));
    assert!(matches!(e, Err(SerializeError::WrongType { ref path, .. }) if path == "nodes"));
    let e = read_mutated(|v| set(v, "/tensors/1/is_virtual", json!(0)));
    assert!(matches!(e, Err(SerializeError::WrongType { expected: "a boolean", .. })));
    assert_eq!(
        structure_from_json("[]"),
        Err(SerializeError::WrongType { path: "(document)".into(), expected: "an object", found: "an array" })
    );
}

#[test]
fn error_out_of_range() {
    let e = read_mutated(|v| set(v, "/tensors/1/uid", json!(u64::MAX)));
    assert!(matches!(e, Err(SerializeError::OutOfRange { ref path, .. }) if path == "tensors[\"1\"].uid"), "{e:?}");
    let e = read_mutated(|v| set(v, "/tensors/6/pass_by_value/index", json!(6)));
    assert!(
        matches!(e, Err(SerializeError::OutOfRange { ref path, .. }) if path == "tensors[\"6\"].pass_by_value.index"),
        "{e:?}"
    );
    let e = read_mutated(|v| set(v, "/tensors/6/pass_by_value", json!({"index": 1, "value": 1_i64 << 40})));
    assert!(matches!(e, Err(SerializeError::OutOfRange { range: "the 32-bit signed integers", .. })), "{e:?}");
}

#[test]
fn error_unknown_enum() {
    let e = read_mutated(|v| set(v, "/tensors/1/data_type", json!("FLOAT17")));
    assert_eq!(
        e,
        Err(SerializeError::UnknownEnum {
            path: "tensors[\"1\"].data_type".into(),
            kind: "data type",
            value: "FLOAT17".into()
        })
    );
    let e = read_mutated(|v| set(v, "/nodes/3/mode", json!("RELU")));
    assert!(matches!(e, Err(SerializeError::UnknownEnum { kind: "pointwise mode", .. })), "{e:?}");
    let e = read_mutated(|v| set(v, "/nodes/4/mode", json!("SUM")));
    assert!(matches!(e, Err(SerializeError::UnknownEnum { kind: "reduction mode", .. })), "{e:?}");
    let e = read_mutated(|v| set(v, "/tensors/1/reordering_type", json!("F16x8")));
    assert!(matches!(e, Err(SerializeError::UnknownEnum { kind: "reordering type", .. })), "{e:?}");
    let e = read_mutated(|v| set(v, "/context/intermediate_data_type", json!("float")));
    assert!(
        matches!(e, Err(SerializeError::UnknownEnum { ref path, .. }) if path == "context.intermediate_data_type"),
        "{e:?}"
    );
}

#[test]
fn error_unsupported_data_type() {
    let e = read_mutated(|v| set(v, "/tensors/2/data_type", json!("INT4")));
    assert_eq!(
        e,
        Err(SerializeError::UnsupportedDataType { path: "tensors[\"2\"].data_type".into(), value: "INT4".into() })
    );
}

#[test]
fn error_bad_float() {
    let e = read_mutated(|v| set(v, "/nodes/3/relu_upper_clip", json!("6.25f")));
    assert!(
        matches!(e, Err(SerializeError::BadFloat { ref path, ref value, .. })
            if path == "nodes[3].relu_upper_clip" && value == "6.25f"),
        "{e:?}"
    );
    let e = read_mutated(|v| set(v, "/tensors/6/pass_by_value/value", json!("0x3DCCCCCD00")));
    assert!(matches!(e, Err(SerializeError::BadFloat { .. })), "{e:?}");
    let e = read_mutated(|v| set(v, "/nodes/3/cudnn_graph/attrs/upper_clip", json!("six")));
    assert!(
        matches!(e, Err(SerializeError::BadFloat { ref path, .. }) if path == "nodes[3].cudnn_graph.attrs.upper_clip")
    );
    let e = read_mutated(|v| set(v, "/cudnn_graph/fingerprint", json!("0xnope")));
    assert!(matches!(e, Err(SerializeError::BadFloat { ref path, .. }) if path == "cudnn_graph.fingerprint"));
}

#[test]
fn error_duplicate_key() {
    let text = structure_to_json(&sample());
    let dup = replace_once(&text, r#""inputs": {"A": 1, "B": 2}"#, r#""inputs": {"A": 1, "A": 2}"#);
    assert_eq!(
        structure_from_json(&dup),
        Err(SerializeError::DuplicateKey { path: "nodes[0].inputs".into(), key: "A".into() })
    );
    let dup = replace_once(&text, "\"tensors\": [", r#""tensors": [{"name": "twin", "uid": 2, "dim": [1]},"#);
    assert_eq!(
        structure_from_json(&dup),
        Err(SerializeError::DuplicateKey { path: "tensors".into(), key: "2".into() })
    );
    // The same in json_version 1.0's layout, where tensors are an object keyed by uid.
    let old = v1(serde_json::from_str(&text).unwrap()).to_string();
    let dup = replace_once(&old, "\"tensors\":{", r#""tensors":{"2": {"name": "twin", "dim": [1]},"#);
    assert_eq!(
        structure_from_json(&dup),
        Err(SerializeError::DuplicateKey { path: "tensors".into(), key: "2".into() })
    );
    let dup =
        replace_once(&text, "\"json_version\": \"2.0\",", "\"json_version\": \"2.0\", \"json_version\": \"2.0\",");
    assert_eq!(
        structure_from_json(&dup),
        Err(SerializeError::DuplicateKey { path: String::new(), key: "json_version".into() })
    );
}

#[test]
fn error_unknown_tag() {
    let e = read_mutated(|v| set(v, "/nodes/0/tag", json!("PAGED_CACHE_LOAD")));
    assert_eq!(
        e,
        Err(SerializeError::UnknownTag {
            node: "matmul_0".into(),
            tag: "PAGED_CACHE_LOAD".into(),
            // Every tag a family reads, in the families! list's order.
            supported: cudnn_runtime::ops::frontend_tags().collect(),
        })
    );
    // A node without a name is named by its position.
    let e = read_mutated(|v| {
        set(v, "/nodes/1/tag", json!("NOT_A_TAG"));
        remove(v, "/nodes/1/name");
    });
    assert!(matches!(e, Err(SerializeError::UnknownTag { ref node, .. }) if node == "nodes[1]"), "{e:?}");
}

#[test]
fn error_unknown_port() {
    let e = read_mutated(|v| set(v, "/nodes/1/inputs/IN_2", json!(1)));
    assert_eq!(
        e,
        Err(SerializeError::UnknownPort {
            node: "add_1".into(),
            direction: "input",
            port: "IN_2".into(),
            expected: vec!["IN_0", "IN_1"]
        })
    );
    let e = read_mutated(|v| set(v, "/nodes/4/outputs/OUT_0", json!(9)));
    assert!(matches!(e, Err(SerializeError::UnknownPort { direction: "output", .. })), "{e:?}");
}

#[test]
fn error_missing_port() {
    let e = read_mutated(|v| remove(v, "/nodes/0/inputs/B"));
    assert_eq!(e, Err(SerializeError::MissingPort { node: "matmul_0".into(), direction: "input", port: "B" }));
    // A null reference is an absent port, as in cudnn-frontend.
    let e = read_mutated(|v| set(v, "/nodes/3/outputs/OUT_0", Value::Null));
    assert_eq!(e, Err(SerializeError::MissingPort { node: "relu_3".into(), direction: "output", port: "OUT_0" }));
    let e = read_mutated(|v| remove(v, "/nodes/2/inputs"));
    assert_eq!(e, Err(SerializeError::MissingPort { node: "mul_2".into(), direction: "input", port: "IN_0" }));
}

#[test]
fn error_unknown_tensor_ref() {
    let e = read_mutated(|v| set(v, "/nodes/0/inputs/A", json!(99)));
    assert_eq!(
        e,
        Err(SerializeError::UnknownTensorRef { node: "matmul_0".into(), port: "A".into(), reference: "99".into() })
    );
    let e = read_mutated(|v| set(v, "/nodes/0/inputs/A", json!("a")));
    assert_eq!(
        e,
        Err(SerializeError::UnknownTensorRef { node: "matmul_0".into(), port: "A".into(), reference: "\"a\"".into() })
    );
}

#[test]
fn error_duplicate_uid() {
    let e = read_mutated(|v| set(v, "/tensors/2/uid", json!(1)));
    assert_eq!(e, Err(SerializeError::DuplicateUid { uid: 1, first: "a".into(), second: "b".into() }));
}

#[test]
fn error_unsupported_features() {
    let cases: [(&str, Value, &str); 5] = [
        ("/tensors/1/reordering_type", json!("F16x16"), "tensors[\"1\"].reordering_type"),
        ("/tensors/1/ragged_offset_uid", json!(3), "tensors[\"1\"].ragged_offset_uid"),
        ("/nodes/0/padding_value", json!(1.5), "nodes[0].padding_value"),
        ("/nodes/0/inputs/M_override", json!(3), "nodes[0].inputs.M_override"),
        ("/nodes/4/is_deterministic", json!(true), "nodes[4].is_deterministic"),
    ];
    for (pointer, value, expected) in cases {
        let e = read_mutated(|v| set(v, pointer, value));
        assert!(matches!(e, Err(SerializeError::Unsupported { ref path, .. }) if path == expected), "{pointer}: {e:?}");
    }
}

#[test]
fn error_bad_scalar() {
    let e = read_mutated(|v| set(v, "/tensors/1/pass_by_value", json!({"index": 3, "value": "3F800000"})));
    assert_eq!(
        e,
        Err(SerializeError::BadScalar {
            tensor: "a".into(),
            reason: "pass_by_value is set but is_pass_by_value is false".into()
        })
    );
    let e = read_mutated(|v| set(v, "/tensors/6/pass_by_value", json!({"index": 4, "value": null})));
    assert!(matches!(e, Err(SerializeError::BadScalar { ref tensor, .. }) if tensor == "mul_2_scalar1"), "{e:?}");
}

#[test]
fn error_attr_not_accepted() {
    let e = read_mutated(|v| set(v, "/nodes/1/relu_upper_clip", json!("40C80000")));
    assert_eq!(e, Err(SerializeError::AttrNotAccepted { node: "add_1".into(), mode: "ADD", field: "relu_upper_clip" }));
    let e = read_mutated(|v| set(v, "/nodes/3/swish_beta", json!(1.0)));
    assert!(matches!(e, Err(SerializeError::AttrNotAccepted { field: "swish_beta", mode: "RELU_FWD", .. })), "{e:?}");
}

#[test]
fn error_attr() {
    // gen_index needs its axis.
    let e = read_mutated(|v| {
        set(v, "/nodes/3/mode", json!("GEN_INDEX"));
        set(v, "/nodes/3/relu_upper_clip", Value::Null);
        remove(v, "/nodes/3/cudnn_graph");
    });
    assert!(
        matches!(e, Err(SerializeError::Attr { ref node, source: AttrError::Missing { attr: "axis", .. } }) if node == "relu_3"),
        "{e:?}"
    );
    let e = read_mutated(|v| set(v, "/nodes/0/cudnn_graph", json!({"attrs": {"alpha": "0x3ff0000000000000"}})));
    assert!(matches!(e, Err(SerializeError::Attr { source: AttrError::Unknown { .. }, .. })), "{e:?}");
    let e = read_mutated(|v| set(v, "/nodes/4/cudnn_graph/attrs/dims", json!(2)));
    assert!(matches!(e, Err(SerializeError::Attr { source: AttrError::Type { .. }, .. })), "{e:?}");
}

#[test]
fn error_extension_mismatch() {
    // cudnn-frontend's field is authoritative: 6.0 there, 6.25 in the extension.
    let e = read_mutated(|v| set(v, "/nodes/3/relu_upper_clip", json!("40C00000")));
    assert_eq!(
        e,
        Err(SerializeError::ExtensionMismatch {
            path: "nodes[3].cudnn_graph.attrs.upper_clip".into(),
            field: "nodes[3].relu_upper_clip".into()
        })
    );
    let e = read_mutated(|v| set(v, "/nodes/3/relu_upper_clip", Value::Null));
    assert_eq!(
        e,
        Err(SerializeError::ExtensionMismatch {
            path: "nodes[3].cudnn_graph.attrs.upper_clip".into(),
            field: "nodes[3].relu_upper_clip".into()
        })
    );
    let e = read_mutated(|v| set(v, "/nodes/3/relu_lower_clip", json!("00000000")));
    assert!(
        matches!(e, Err(SerializeError::ExtensionMismatch { ref field, .. }) if field == "nodes[3].relu_lower_clip")
    );
    // An f64 scalar whose decimal value disagrees with its exact bits.
    let mut j: Value = v1(serde_json::from_str(&structure_to_json(&f64_scalar_graph(0.1))).unwrap());
    j["tensors"]["2"]["pass_by_value"]["value"] = json!(0.2);
    let e = structure_from_json(&j.to_string());
    assert!(
        matches!(e, Err(SerializeError::ExtensionMismatch { ref path, .. }) if path == "tensors[\"2\"].cudnn_graph.pass_by_value"),
        "{e:?}"
    );
    let e = read_mutated(|v| set(v, "/tensors/1/cudnn_graph", json!({"pass_by_value": "0x3ff0000000000000"})));
    assert!(matches!(e, Err(SerializeError::ExtensionMismatch { .. })), "{e:?}");
}

#[test]
fn error_reduction_dims() {
    let e = read_mutated(|v| {
        remove(v, "/nodes/4/cudnn_graph");
        set(v, "/tensors/9/dim", json!([2, 8, 16]));
    });
    assert_eq!(
        e,
        Err(SerializeError::ReductionDims {
            node: "reduce_sum_4".into(),
            x: "[2, 8, 16]".into(),
            y: "[2, 8, 16]".into()
        })
    );
    // Without the extension, the dims come from the shapes: [2] instead of [-1], another op.
    let e = read_mutated(|v| remove(v, "/nodes/4/cudnn_graph"));
    assert!(matches!(e, Err(SerializeError::FingerprintMismatch { .. })), "{e:?}");
}

#[test]
fn error_tensor_order() {
    let e = read_mutated(|v| set(v, "/cudnn_graph/tensor_order", json!([1, 2])));
    assert_eq!(e, Err(SerializeError::TensorOrder { reason: "lists 2 uids but the document has 9 tensors".into() }));
    let e = read_mutated(|v| set(v, "/cudnn_graph/tensor_order", json!([1, 2, 3, 4, 5, 6, 7, 8, 8])));
    assert_eq!(e, Err(SerializeError::TensorOrder { reason: "lists uid 8 twice".into() }));
    let e = read_mutated(|v| set(v, "/cudnn_graph/tensor_order", json!([1, 2, 3, 4, 5, 6, 7, 8, 10])));
    assert_eq!(e, Err(SerializeError::TensorOrder { reason: "lists uid 10, which no tensor has".into() }));
    // A permutation reorders the IR's tensors, which the fingerprint covers.
    let e = read_mutated(|v| set(v, "/cudnn_graph/tensor_order", json!([2, 1, 3, 4, 5, 6, 7, 8, 9])));
    assert!(matches!(e, Err(SerializeError::FingerprintMismatch { .. })), "{e:?}");
}

#[test]
fn error_overflow() {
    let e = read_mutated(|v| {
        set(v, "/tensors/1/dim", json!([1_i64 << 40, 1_i64 << 40, 1_i64 << 40]));
        set(v, "/tensors/1/stride", json!([]));
    });
    assert!(
        matches!(e, Err(SerializeError::Overflow { ref tensor, ref strides, .. }) if tensor == "a" && strides.is_empty())
    );
    let e = read_mutated(|v| set(v, "/tensors/1/stride", json!([i64::MAX, 4, 1])));
    assert!(matches!(e, Err(SerializeError::Overflow { .. })), "{e:?}");
}

#[test]
fn error_fingerprint_mismatch() {
    // A consistent edit (bias broadcast over rows → one bias per row) that the IR accepts.
    let g = sample();
    let e = read_mutated(|v| {
        set(v, "/tensors/3/dim", json!([1, 8, 16]));
        set(v, "/tensors/3/stride", json!([128, 16, 1]));
    });
    let Err(SerializeError::FingerprintMismatch { stored, computed }) = e else { panic!("{e:?}") };
    assert_eq!(stored, g.fingerprint());
    assert_ne!(computed, stored);
    // Without the fingerprint the same document loads (cudnn-frontend's fields are what counts).
    let e = read_mutated(|v| {
        set(v, "/tensors/3/dim", json!([1, 8, 16]));
        set(v, "/tensors/3/stride", json!([128, 16, 1]));
        remove(v, "/cudnn_graph/fingerprint");
    });
    assert_eq!(e.unwrap().tensor_by_name("bias").unwrap().dims, [1, 8, 16]);
}

/// The `GraphError` inside a `SerializeError::Graph`.
fn graph_error(e: Result<Graph, SerializeError>) -> GraphError {
    match e {
        Err(SerializeError::Graph(g)) => *g,
        other => panic!("expected a graph error, got {other:?}"),
    }
}

#[test]
fn error_graph_invalid() {
    let e = graph_error(read_mutated(|v| {
        set(v, "/tensors/2/dim", json!([2, 5, 16]));
        set(v, "/tensors/2/stride", json!([80, 16, 1]));
    }));
    assert!(matches!(e, GraphError::Shape { ref node, port: Some("B"), .. } if node == "matmul_0"), "{e:?}");
    let e = graph_error(read_mutated(|v| set(v, "/tensors/1/uid", json!(0))));
    assert_eq!(e, GraphError::BadUid { tensor: "a".into(), uid: 0 });
    let e = graph_error(read_mutated(|v| set(v, "/tensors/2/name", json!("a"))));
    assert_eq!(e, GraphError::DuplicateName { name: "a".into() });
    // Nodes out of topological order.
    let e = graph_error(read_mutated(|v| at(v, "/nodes").as_array_mut().unwrap().swap(0, 1)));
    assert!(matches!(e, GraphError::UsedBeforeProduced { .. }), "{e:?}");
    let e = graph_error(structure_from_json(r#"{"json_version": "1.0", "nodes": null, "tensors": null}"#));
    assert_eq!(e, GraphError::NoOutputs { graph: String::new() });
}

#[test]
fn errors_read_well() {
    let e = read_mutated(|v| set(v, "/nodes/0/inputs/A", json!(99))).unwrap_err();
    assert_eq!(e.to_string(), "node `matmul_0` port `A` refers to tensor 99, which `tensors` does not have");
    let e = read_mutated(|v| set(v, "/nodes/0/tag", json!("PAGED_CACHE_LOAD"))).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "node `matmul_0` has tag \"PAGED_CACHE_LOAD\"; supported tags are {}",
            cudnn_runtime::ops::frontend_tags().collect::<Vec<_>>().join(", ")
        )
    );
    let e = read_mutated(|v| set(v, "/tensors/2/data_type", json!("INT4"))).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`tensors[\"2\"].data_type` is INT4, a cudnn-frontend data type that cudnn-graph does not support"
    );
}

// ---------------------------------------------------------------------------------------------
// Truncated and mutated documents: never a panic; an error unless the result is a valid graph
// that round trips.

fn small() -> Graph {
    let mut g = GraphBuilder::new("small");
    let x = g.input("x", DataType::F32, &[2, 3]).unwrap();
    let y = g.op("mul", &[x.into(), 0.5.into()], &[]).unwrap()[0];
    let z = g.op("elu", &[y.into()], &[attr("alpha", 0.3)]).unwrap()[0];
    let z = g.output(z, "z", DataType::F16).unwrap();
    let s = g.op("reduce_max", &[z.into()], &[attr("dims", vec![0])]).unwrap()[0];
    g.output(s, "s", DataType::F32).unwrap();
    g.build().unwrap()
}

#[test]
fn every_prefix_is_an_error() {
    let text = structure_to_json(&small());
    assert!(text.is_ascii());
    for end in 0..text.len() {
        assert!(structure_from_json(&text[..end]).is_err(), "prefix of {end} bytes was accepted");
    }
    assert!(structure_from_json(&text).is_ok());
}

#[test]
fn mutated_documents_fail_cleanly() {
    let text = structure_to_json(&small());
    let bytes = text.as_bytes();
    let replacements = [b'{', b'}', b'[', b']', b'"', b',', b':', b'0', b'7', b'-', b'x', b'F'];
    let (mut accepted, mut rejected) = (0usize, 0usize);
    let mut check = |mutated: Vec<u8>, must_fail: bool| {
        let Ok(mutated) = String::from_utf8(mutated) else { return };
        match structure_from_json(&mutated) {
            Err(_) => rejected += 1,
            Ok(g) => {
                assert!(!must_fail, "accepted:\n{mutated}");
                accepted += 1;
                assert_eq!(g.validate(), Ok(()));
                assert_eq!(structure_from_json(&structure_to_json(&g)).unwrap(), g);
            }
        }
    };
    for i in 0..bytes.len() {
        let structural = matches!(bytes[i], b'{' | b'}' | b'[' | b']');
        let mut deleted = bytes.to_vec();
        deleted.remove(i);
        check(deleted, structural);
        for &r in &replacements {
            if r != bytes[i] {
                let mut replaced = bytes.to_vec();
                replaced[i] = r;
                // Replacing a bracket with something else unbalances the document.
                check(replaced, structural);
            }
        }
    }
    // Most mutations must be caught: only those inside names (or harmless whitespace) survive.
    assert!(rejected > 10 * accepted, "rejected {rejected}, accepted {accepted}");
}

/// Real output of cudnn-frontend 1.32 (Python, on the H200, cuDNN 9.19): `str(graph)` of
/// matmul → bias → relu after `validate()` and after `build_plans()`, captured with
/// `.bench/capture_fe_json.py`-style code and stored verbatim.
#[test]
fn captured_cudnn_frontend_graphs_load() {
    for stage in ["validated", "built"] {
        let text = fixture(&format!("captured_h200_matmul_bias_relu_{stage}.json"));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["json_version"], "2.0", "{stage}");
        let g = structure_from_json(&text).unwrap_or_else(|e| panic!("{stage}: {e}"));
        assert_eq!(g.nodes.len(), 3);
        assert_eq!(g.nodes.iter().map(|n| n.op.call_name()).collect::<Vec<_>>(), ["matmul", "add", "relu"]);
        assert_eq!(g.tensors.iter().map(|t| t.uid).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6]);
        let y = tensor(&g, "relu::OUT_0");
        assert_eq!((y.dims.as_slice(), y.data_type, y.is_virtual), (&[1, 64, 16][..], DataType::BF16, false));
        // Ours writes the same layout back and reads it again unchanged.
        let again = structure_to_json(&g);
        assert_eq!(structure_from_json(&again).unwrap(), g);
        let w: Value = serde_json::from_str(&again).unwrap();
        assert_eq!(w["nodes"][0]["inputs"], v["nodes"][0]["inputs"]);
        assert_eq!(w["tensors"][3]["name"], v["tensors"][3]["name"]);
    }
}

/// Convolutions and pooling with every attribute away from its default.
fn window_ops() -> Graph {
    let mut g = GraphBuilder::new("window_ops");
    let x = g.input("x", DataType::F16, &[2, 8, 17, 15]).unwrap();
    g.set_channels_last(x).unwrap();
    let w = g.input("w", DataType::F16, &[16, 8, 3, 3]).unwrap();
    let conv = [
        attr("pre_padding", vec![1, 2]),
        attr("post_padding", vec![0, 1]),
        attr("stride", vec![2, 1]),
        attr("dilation", vec![1, 2]),
        attr("mode", "convolution"),
    ];
    let y = g.op("conv_fprop", &[x.into(), w.into()], &conv).unwrap()[0];
    let y = g.output(y, "y", DataType::F16).unwrap();
    let mut dgrad = conv.to_vec();
    dgrad.push(attr("output_padding", vec![1, 0]));
    let dx = g.op("conv_dgrad", &[y.into(), w.into()], &dgrad).unwrap()[0];
    assert_eq!(g.dims(dx), Some(&[2, 8, 17, 15][..]));
    g.output(dx, "dx", DataType::F16).unwrap();
    let mut wgrad = conv.to_vec();
    wgrad.push(attr("filter", vec![3, 3]));
    let dw = g.op("conv_wgrad", &[x.into(), y.into()], &wgrad).unwrap()[0];
    g.output(dw, "dw", DataType::F32).unwrap();
    let pool = [attr("mode", "maxpool"), attr("window", vec![3, 2]), attr("stride", vec![2, 2]), attr("index", true)];
    let outs = g.op("resample", &[x.into()], &pool).unwrap();
    g.output(outs[0], "pooled", DataType::F16).unwrap();
    g.output(outs[1], "index", DataType::I8).unwrap();
    let avg = [attr("mode", "avgpool_exclude_padding"), attr("window", vec![2, 2]), attr("padding", vec![1, 1])];
    let a = g.op("resample", &[x.into()], &avg).unwrap()[0];
    g.output(a, "avg", DataType::F16).unwrap();
    g.build().unwrap()
}

#[test]
fn convolutions_and_pooling_round_trip_in_cudnn_frontend_layout() {
    let g = window_ops();
    let text = round_trip(&g);
    let v: Value = serde_json::from_str(&text).unwrap();
    let node = |name: &str| v["nodes"].as_array().unwrap().iter().find(|n| n["name"] == name).unwrap().clone();
    let fprop = node("conv_fprop_0");
    assert_eq!(fprop["tag"], "CONV_FPROP");
    assert_eq!(fprop["pre_padding"], json!([1, 2]));
    assert_eq!(fprop["dilation"], json!([1, 2]));
    assert_eq!(fprop["math_mode"], "CONVOLUTION");
    let pool = node("resample_3");
    assert_eq!(pool["tag"], "RESAMPLE");
    assert_eq!(pool["resample_mode"], "MAXPOOL");
    assert_eq!(pool["padding_mode"], "NEG_INF_PAD");
    assert_eq!(pool["window"], json!([3, 2]));
    assert_eq!(pool["generate_index"], json!(true));
    assert_eq!(node("resample_4")["pre_padding"], json!([1, 1]));
    // Each port as declared, whatever op reads it: `x` channels-last, `w` row-major.
    assert_eq!(tensor(&g, "x").strides, vec![8 * 17 * 15, 1, 15 * 8, 8]);
    assert_eq!(tensor(&g, "w").strides, vec![8 * 3 * 3, 3 * 3, 3, 1]);
}

/// A document as cudnn-frontend writes it: without our extension anywhere.
fn strip_extension(v: &mut Value) {
    v.as_object_mut().unwrap().remove("cudnn_graph");
    for list in ["nodes", "tensors"] {
        for n in v[list].as_array_mut().unwrap() {
            n.as_object_mut().unwrap().remove("cudnn_graph");
        }
    }
}

/// Without our exact attributes, cudnn-frontend's fields and the tensors give the same ops: the
/// filter gradient's filter comes from DW, the data gradient's output padding from DX.
#[test]
fn convolutions_read_from_cudnn_frontend_fields_alone() {
    let g = window_ops();
    let mut v: Value = serde_json::from_str(&structure_to_json(&g)).unwrap();
    strip_extension(&mut v);
    let back = structure_from_json(&v.to_string()).unwrap();
    for (a, b) in g.nodes.iter().zip(&back.nodes) {
        let (Some(x), Some(y)) = (g.tensors.get(a.inputs[0].0), back.tensors.get(b.inputs[0].0)) else { panic!() };
        assert_eq!(x.dims, y.dims);
        // The same op up to defaults written out explicitly.
        let fill = |op: &cudnn_runtime::ops::Op| match op {
            cudnn_runtime::ops::Op::Conv(c) => format!("{:?} {:?} {:?} {:?}", c.kind, c.window(2), c.filter, c.mode),
            cudnn_runtime::ops::Op::Resample(r) => format!("{:?} {:?} {}", r.mode, r.geometry(2), r.index),
            other => format!("{other:?}"),
        };
        assert_eq!(fill(&a.op), fill(&b.op), "node {}", a.name);
    }
    let dgrad = back.nodes.iter().find(|n| n.op.call_name() == "conv_dgrad").unwrap();
    let cudnn_runtime::ops::Op::Conv(c) = &dgrad.op else { unreachable!() };
    assert_eq!(c.output_padding, vec![1, 0]);

    // A gradient whose output has no dims cannot be told.
    let mut v: Value = serde_json::from_str(&structure_to_json(&g)).unwrap();
    let dw_uid = tensor(&g, "dw").uid;
    for t in v["tensors"].as_array_mut().unwrap() {
        if t["uid"] == dw_uid {
            t["dim"] = json!([]);
        }
    }
    strip_extension(&mut v);
    let e = structure_from_json(&v.to_string()).unwrap_err();
    assert!(matches!(e, SerializeError::ConvGeometry { .. }), "{e}");
}

#[test]
fn error_pooling_padding_mode() {
    let mut v: Value = serde_json::from_str(&structure_to_json(&window_ops())).unwrap();
    let pool = v["nodes"].as_array_mut().unwrap().iter_mut().find(|n| n["tag"] == "RESAMPLE").unwrap();
    pool["padding_mode"] = json!("EDGE_VAL_PAD");
    let e = structure_from_json(&v.to_string()).unwrap_err();
    assert!(
        matches!(e, SerializeError::Unsupported { ref feature, .. } if feature == "MAXPOOL with padding mode EDGE_VAL_PAD"),
        "{e}"
    );
}

#[test]
fn layout_ops_round_trip_and_read_from_cudnn_frontend_fields() {
    let mut g = GraphBuilder::new("layout");
    let x = g.input("x", DataType::F16, &[2, 6, 4]).unwrap();
    let r = g.op("reshape", &[x.into()], &[attr("shape", vec![2, 3, 8])]).unwrap()[0];
    let t = g.op("transpose", &[r.into()], &[attr("permutation", vec![2, 0, 1])]).unwrap()[0];
    let y = g.op("relu", &[t.into()], &[]).unwrap()[0];
    g.output(y, "y", DataType::F16).unwrap();
    let slice = [attr("start", vec![0, 1, 0]), attr("limit", vec![2, 5, 4]), attr("step", vec![1, 2, 1])];
    let s = g.op("slice", &[x.into()], &slice).unwrap()[0];
    let z = g.op("abs", &[s.into()], &[]).unwrap()[0];
    g.output(z, "z", DataType::F16).unwrap();
    let g = g.build().unwrap();
    let text = round_trip(&g);
    let mut v: Value = serde_json::from_str(&text).unwrap();
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes[0]["tag"], "RESHAPE");
    // Written as cudnn-frontend writes it: the node's `dim`/`stride` empty, Y's tensor with them.
    assert_eq!(nodes[0]["dim"], json!([]));
    let y_uid = &nodes[0]["outputs"]["Y"];
    let y_tensor = v["tensors"].as_array().unwrap().iter().find(|t| &t["uid"] == y_uid).unwrap();
    assert_eq!(y_tensor["dim"], json!([2, 3, 8]));
    assert_eq!(nodes[0]["reshape_mode"], "VIEW_ONLY");
    assert_eq!(nodes[1]["tag"], "TRANSPOSE");
    assert_eq!(nodes[1]["permutation"], json!([2, 0, 1]));
    assert_eq!(nodes[3]["tag"], "SLICE");
    assert_eq!(nodes[3]["slices"], json!([[0, 2], [1, 5], [0, 4]]));
    assert_eq!(nodes[3]["slice_strides"], json!([1, 2, 1]));
    strip_extension(&mut v);
    // cudnn-frontend may set the node's `dim` too.
    v["nodes"][0]["dim"] = json!([2, 3, 8]);
    let back = structure_from_json(&v.to_string()).unwrap();
    assert_eq!(back.nodes[0].op, g.nodes[0].op);
    assert_eq!(back.nodes[1].op, g.nodes[1].op);
    assert_eq!(back.nodes[3].op, g.nodes[3].op);
    v["nodes"][0]["reshape_mode"] = json!("LOGICAL");
    assert!(matches!(structure_from_json(&v.to_string()), Err(SerializeError::Unsupported { .. })));
}

#[test]
fn concatenation_round_trips_with_inputs_by_position() {
    let mut g = GraphBuilder::new("concat");
    let a = g.input("a", DataType::F16, &[2, 3, 4]).unwrap();
    let b = g.input("b", DataType::F16, &[2, 5, 4]).unwrap();
    let c = g.input("c", DataType::F16, &[2, 1, 4]).unwrap();
    let y =
        g.op("concatenate", &[a.into(), b.into(), c.into()], &[attr("axis", 1), attr("in_place_index", 2)]).unwrap()[0];
    g.output(y, "y", DataType::F16).unwrap();
    let g = g.build().unwrap();
    assert_eq!(g.tensor(g.nodes[0].outputs[0]).dims, vec![2, 9, 4]);
    let text = round_trip(&g);
    let mut v: Value = serde_json::from_str(&text).unwrap();
    let node = &v["nodes"][0];
    assert_eq!(node["tag"], "CONCATENATE");
    assert_eq!(node["axis"], 1);
    assert_eq!(node["in_place_index"], 2);
    let uids: Vec<i64> = g.nodes[0].inputs.iter().map(|id| g.tensor(*id).uid).collect();
    // As cudnn-frontend 1.32 writes it (its oracle fixture `concatenate.json`): keyed by position,
    // and no `compute_data_type`.
    assert_eq!(node["inputs"], json!({"0": uids[0], "1": uids[1], "2": uids[2]}));
    assert!(node.get("compute_data_type").is_none(), "{node}");
    // From cudnn-frontend's fields alone; positions in any order.
    strip_extension(&mut v);
    v["nodes"][0]["inputs"] = json!({"2": uids[2], "0": uids[0], "1": uids[1]});
    let back = structure_from_json(&v.to_string()).unwrap();
    assert_eq!(back.nodes[0].op, g.nodes[0].op);
    assert_eq!(back.nodes[0].inputs, g.nodes[0].inputs);
    // A position out of range, or not written as cudnn-frontend writes it, names the key.
    for key in ["3", "01", "x"] {
        let mut bad = v.clone();
        bad["nodes"][0]["inputs"] = json!({"0": uids[0], "1": uids[1], key: uids[2]});
        match structure_from_json(&bad.to_string()) {
            Err(SerializeError::UnknownPort { port, .. }) => assert_eq!(port, key),
            other => panic!("{key}: {other:?}"),
        }
    }
    // A list (what earlier versions of this crate wrote), references as keys (strings), reads too.
    v["nodes"][0]["inputs"] = json!(uids.iter().map(|u| u.to_string()).collect::<Vec<_>>());
    let back = structure_from_json(&v.to_string()).unwrap();
    assert_eq!(back.nodes[0].inputs, g.nodes[0].inputs);
    // Only a concatenation's inputs are by position; an empty list and a missing axis are refused.
    let mut bad = v.clone();
    bad["nodes"][0]["inputs"] = json!([]);
    assert!(matches!(structure_from_json(&bad.to_string()), Err(SerializeError::Attr { .. })), "empty list");
    let mut bad = v.clone();
    bad["nodes"][0]["axis"] = Value::Null;
    assert!(matches!(structure_from_json(&bad.to_string()), Err(SerializeError::MissingField { .. })));
    let mut bad = v.clone();
    bad["nodes"][0]["inputs"] = json!([uids[0], 99, uids[2]]);
    assert_eq!(
        structure_from_json(&bad.to_string()).unwrap_err().to_string(),
        "node `concatenate_0` port `X[1]` refers to tensor 99, which `tensors` does not have"
    );
}

#[test]
fn a_by_value_scalar_without_a_value_is_a_host_scalar() {
    // cudnn-frontend's layernorm epsilon: `is_pass_by_value` with no value, supplied at execute.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/frontend/layernorm.json");
    let text = std::fs::read_to_string(path).unwrap();
    let g = structure_from_json(&text).unwrap();
    let eps = g.tensor_by_name("epsilon").unwrap();
    assert!(eps.host_scalar && eps.pass_by_value.is_none() && eps.dims == [1, 1, 1, 1]);
    // A constant of our document edited into one: another graph, which the stored fingerprint
    // tells.
    let e = read_mutated(|v| set(v, "/tensors/6/pass_by_value", Value::Null));
    assert!(matches!(e, Err(SerializeError::FingerprintMismatch { .. })), "{e:?}");
}
