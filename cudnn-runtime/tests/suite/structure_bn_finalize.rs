//! `bn_finalize` in cudnn-frontend's structural JSON (`BN_FINALIZE`): the round trip keeps the
//! graph, its fingerprint and its bytes, the count is written as cudnn-frontend's `int64_t`
//! by-value scalar (variant index 0), and a node without running statistics is refused, named.
//! (cudnn-frontend 1.32's Python binding has no `bn_finalize`, so the oracle in
//! `tests/frontend/oracle.py` cannot print one for comparison.)

use cudnn_runtime::serialize::{structure_from_json, structure_to_json, SerializeError};
use cudnn_runtime::{DataType, Graph, GraphBuilder, Operand};
use serde_json::{json, Value};

const PORTS: [&str; 6] = ["sum", "sq_sum", "scale", "bias", "running_mean", "running_var"];

fn finalize(count: i64) -> Graph {
    let mut g = GraphBuilder::new("bn_finalize");
    let mut operands: Vec<Operand> =
        PORTS.iter().map(|n| g.input(n, DataType::F32, &[1, 32, 1, 1]).unwrap().into()).collect();
    operands.extend([Operand::Scalar(1e-3), Operand::Scalar(0.125), Operand::Scalar(count as f64)]);
    let outs = g.op("bn_finalize", &operands, &[]).unwrap();
    for (o, n) in outs.into_iter().zip(["eq_scale", "eq_bias", "mean", "inv_var", "next_mean", "next_var"]) {
        g.output(o, n, DataType::F32).unwrap();
    }
    g.build().unwrap()
}

#[test]
fn bn_finalize_round_trips_with_an_int64_count() {
    // Past f32's exact integers: the count travels as an int64, exactly.
    let count = (1i64 << 40) + 1;
    let g = finalize(count);
    let text = structure_to_json(&g);
    let back = structure_from_json(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(back, g);
    assert_eq!(back.fingerprint(), g.fingerprint());
    assert_eq!(structure_to_json(&back), text);

    let v: Value = serde_json::from_str(&text).unwrap();
    let node = &v["nodes"][0];
    assert_eq!(node["tag"], "BN_FINALIZE");
    let inputs: Vec<&str> = node["inputs"].as_object().unwrap().keys().map(String::as_str).collect();
    let mut want = [
        "ACCUM_COUNT",
        "BIAS",
        "EPSILON",
        "MOMENTUM",
        "PREV_RUNNING_MEAN",
        "PREV_RUNNING_VAR",
        "SCALE",
        "SQ_SUM",
        "SUM",
    ];
    want.sort_unstable();
    let mut inputs = inputs;
    inputs.sort_unstable();
    assert_eq!(inputs, want);
    let outputs: Vec<&str> = node["outputs"].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(outputs.len(), 6);
    let count_uid = &node["inputs"]["ACCUM_COUNT"];
    let tensors = v["tensors"].as_array().unwrap();
    let t = tensors.iter().find(|t| &t["uid"] == count_uid).expect("the count tensor");
    assert_eq!(t["data_type"], "INT64");
    assert_eq!(t["is_pass_by_value"], true);
    assert_eq!(t["pass_by_value"], json!({"index": 0, "value": count}));
    assert!(t.get("cudnn_graph").is_none(), "an int64 is exact in cudnn-frontend's encoding");
}

#[test]
fn bn_finalize_without_running_statistics_is_refused() {
    let text = structure_to_json(&finalize(64));
    let mut v: Value = serde_json::from_str(&text).unwrap();
    let inputs = v["nodes"][0]["inputs"].as_object_mut().unwrap();
    for port in ["PREV_RUNNING_MEAN", "PREV_RUNNING_VAR", "MOMENTUM"] {
        inputs.remove(port);
    }
    let e = structure_from_json(&v.to_string()).unwrap_err();
    match &e {
        SerializeError::Unsupported { path, feature } => {
            assert_eq!(path, "nodes[0].inputs");
            assert!(feature.contains("without running statistics"), "{feature}");
        }
        other => panic!("{other:?}"),
    }
}
