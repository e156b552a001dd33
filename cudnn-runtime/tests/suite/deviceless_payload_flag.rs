//! A plan payload's structure records how its plan was made (issue 19): the context's
//! `is_dynamic_shape_enabled` is the plan's own flag, in our payload and in cudnn-frontend's
//! export, and reads back; a structure claiming what the plan JSON does not hold is refused by
//! name. Payloads written before the structure recorded it (`false` whatever the plan) still load,
//! and the flag leaves the graph fingerprint alone. Real cuDNN 9.19, deviceless, for the H200.
//!
//! Without libcudnn each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_CUDNN=1`.
#![cfg(feature = "cudnn")]

use cudnn_runtime::backend::{BuildOptions, ExecutionPlan, KernelCache};
use cudnn_runtime::ops::PointwiseMode;
use cudnn_runtime::payload::frontend::{load_frontend_payload, parse_frontend_payload, write_frontend_payload};
use cudnn_runtime::payload::plan::{
    load_payload, parse_payload, seal, write_payload, Expect, PayloadError, PlanOrigin, SerializeOptions,
};
use cudnn_runtime::serialize::ubjson::{json_to_ubjson, ubjson_to_json};
use cudnn_runtime::{DataType, Graph, GraphBuilder};

use crate::common;

/// `y = relu(a · b + bias)` in bf16, `[1, 64, 64] x [1, 64, 128]`.
fn matmul_bias_relu() -> Graph {
    let mut g = GraphBuilder::new("mbr");
    let a = g.input("a", DataType::BF16, &[1, 64, 64]).unwrap();
    let b = g.input("b", DataType::BF16, &[1, 64, 128]).unwrap();
    let bias = g.input("bias", DataType::BF16, &[1, 1, 128]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let d = g.pointwise(PointwiseMode::Add, &[c.into(), bias.into()]).unwrap();
    let y = g.pointwise(PointwiseMode::Relu, &[d.into()]).unwrap();
    g.output(y, "y", DataType::BF16).unwrap();
    g.build().unwrap()
}

const TRUE: &str = r#""is_dynamic_shape_enabled": true"#;
const FALSE: &str = r#""is_dynamic_shape_enabled": false"#;

/// The body of one of our payloads, its flag replaced (`from` → `to`), sealed again (the digest
/// detects accidents, not edits).
fn edited(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    let text = std::str::from_utf8(bytes).unwrap();
    let at = text.find(r#""body":"#).unwrap() + r#""body":"#.len();
    let body = &text[at..text.len() - 1];
    assert_eq!(body.matches(from).count(), 1, "the structure's context has the flag once");
    seal(&body.replace(from, to), None)
}

#[needs_cudnn]
#[test]
fn our_payload_structure_records_the_plans_dynamic_shape_flag_and_reads_it_back() {
    let Some(cudnn) = common::deviceless() else { return };
    let graph = matmul_bias_relu();
    let origin = PlanOrigin::of(&cudnn);
    let expect = Expect::default();
    let mut fingerprints = Vec::new();
    for dynamic in [true, false] {
        let options =
            if dynamic { BuildOptions::default().dynamic_shapes(KernelCache::new()) } else { BuildOptions::default() };
        let plan = ExecutionPlan::build(&cudnn, &graph, &options).unwrap();
        assert_eq!(plan.is_dynamic_shape(), dynamic);
        let bytes = write_payload(&plan, &origin, SerializeOptions { structure: true }, &expect).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            text.contains(if dynamic { TRUE } else { FALSE }),
            "{dynamic}: the structure says how the plan was made"
        );
        let payload = parse_payload(&bytes).unwrap();
        assert_eq!(payload.dynamic_shape, Some(dynamic));
        fingerprints.push(payload.plan.graph_fingerprint.clone());
        let loaded = load_payload(&cudnn, &payload, None, &expect).unwrap();
        assert_eq!(loaded.is_dynamic_shape(), dynamic);
        // Plan-only: no structure, no flag to read; the plan JSON still says it.
        let plan_only = write_payload(&plan, &origin, SerializeOptions { structure: false }, &expect).unwrap();
        let payload = parse_payload(&plan_only).unwrap();
        assert_eq!(payload.dynamic_shape, None);
        assert_eq!(load_payload(&cudnn, &payload, Some(graph.clone()), &expect).unwrap().is_dynamic_shape(), dynamic);
        if dynamic {
            // As written before the structure recorded the flag: still loads, the plan JSON decides.
            let legacy = parse_payload(&edited(&bytes, TRUE, FALSE)).unwrap();
            assert_eq!(legacy.dynamic_shape, Some(false));
            assert!(load_payload(&cudnn, &legacy, None, &expect).unwrap().is_dynamic_shape());
        } else {
            // A structure claiming a dynamic-shape plan the JSON does not hold: refused, by name.
            let lying = parse_payload(&edited(&bytes, FALSE, TRUE)).unwrap();
            let e = load_payload(&cudnn, &lying, None, &expect).unwrap_err();
            assert!(matches!(e, PayloadError::DynamicShapeFlag { structure: true, plan: false }), "{e:?}");
            assert_eq!(
                e.to_string(),
                "the payload's structure says its plan was made with dynamic shapes (`is_dynamic_shape_enabled`), \
                 but its plan JSON says without"
            );
        }
    }
    // The flag is how the plan was made, not the graph: one fingerprint.
    assert_eq!(fingerprints[0], fingerprints[1]);
}

#[needs_cudnn]
#[test]
fn cudnn_frontends_payload_carries_the_same_flag_both_ways() {
    let Some(cudnn) = common::deviceless() else { return };
    let graph = matmul_bias_relu();
    let origin = PlanOrigin::of(&cudnn);
    for dynamic in [true, false] {
        let options =
            if dynamic { BuildOptions::default().dynamic_shapes(KernelCache::new()) } else { BuildOptions::default() };
        let plan = ExecutionPlan::build(&cudnn, &graph, &options).unwrap();
        let bytes = write_frontend_payload(&plan, &origin, SerializeOptions { structure: true }).unwrap();
        let parsed = parse_frontend_payload(&bytes).unwrap();
        assert_eq!(parsed.dynamic_shape, Some(dynamic));
        assert_eq!(load_frontend_payload(&cudnn, &parsed, None).unwrap().is_dynamic_shape(), dynamic);
        // cudnn-frontend plans with its context's flag: a payload whose flag is not its plan's is
        // refused, either way.
        let json = ubjson_to_json(&bytes).unwrap();
        let (from, to) = if dynamic { (TRUE, FALSE) } else { (FALSE, TRUE) };
        let compact = |s: &str| s.replace(' ', "");
        let flipped = json.replace(&compact(from), &compact(to)).replace(from, to);
        assert_ne!(flipped, json, "the flag was found");
        let parsed = parse_frontend_payload(&json_to_ubjson(&flipped).unwrap()).unwrap();
        assert_eq!(parsed.dynamic_shape, Some(!dynamic));
        let e = load_frontend_payload(&cudnn, &parsed, None).unwrap_err();
        assert!(
            matches!(e, PayloadError::DynamicShapeFlag { structure, plan } if structure != dynamic && plan == dynamic),
            "{e:?}"
        );
    }
}
