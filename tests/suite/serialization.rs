//! Plan payloads of `graph!` types, deviceless against the H200's properties (CI runs these with
//! real cuDNN): both payload modes, symmetric reads, by-value scalars, selected-plan notes, and
//! every mismatch a typed error. Plus the serde form of a graph type's value.

#![cfg(feature = "cudnn")]

use crate::common;
use crate::payload_graphs;

use cudnn_graph::backend::{BuildOptions, ExecutionPlan, HeuristicMode};
use cudnn_graph::payload::plan::{
    parse_payload, read_payload, write_payload, Expect, PayloadError, PlanOrigin, SerializeOptions,
};
use cudnn_graph::Error;
use payload_graphs::{MatmulBiasRelu, ScaledRelu};

fn payload_error(e: Error) -> PayloadError {
    match e {
        Error::Payload(p) => p,
        other => panic!("expected a payload error, got {other}"),
    }
}

/// The body of a payload (what its digest covers), as JSON.
fn json_of(bytes: &[u8]) -> serde_json::Value {
    let envelope: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    envelope["body"].clone()
}

/// A payload around `body` with a correct content digest: what a corrupted or edited payload
/// would be if its writer had digested it, so the checks behind the digest are reached.
fn seal(body: &serde_json::Value) -> Vec<u8> {
    cudnn_graph::payload::plan::seal(&serde_json::to_string(body).unwrap(), None)
}

#[needs_cudnn]
#[test]
fn both_payload_modes_round_trip() {
    let Some(cudnn) = common::deviceless() else { return };
    let g = MatmulBiasRelu::<64, 32>::new(96);
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let full = plan.serialize(SerializeOptions { structure: true }).unwrap();
    let lean = plan.serialize(SerializeOptions { structure: false }).unwrap();
    assert!(lean.len() < full.len(), "plan-only {} B vs structural {} B", lean.len(), full.len());
    println!("payloads: structural {} B, plan-only {} B", full.len(), lean.len());
    for bytes in [&full, &lean] {
        let back = MatmulBiasRelu::<64, 32>::deserialize(&cudnn, bytes).unwrap();
        assert_eq!(back.graph, g, "runtime dims come back from the payload");
        assert_eq!(back.plan().layout().uids(), plan.plan().layout().uids());
        assert_eq!(back.workspace_size(), plan.workspace_size());
        // Re-serializing a loaded plan gives an equivalent payload (cuDNN's own plan JSON embeds
        // pointers, so it is compared by size class only).
        let again = back.serialize(SerializeOptions { structure: bytes == &full }).unwrap();
        let (mut a, mut b) = (json_of(bytes), json_of(&again));
        assert!(
            a["plan"]["plan_json"].as_str().unwrap().len().abs_diff(b["plan"]["plan_json"].as_str().unwrap().len())
                < 64
        );
        a["plan"]["plan_json"] = serde_json::Value::Null;
        b["plan"]["plan_json"] = serde_json::Value::Null;
        assert_eq!(a, b);
    }
    // Untyped: the structural payload rebuilds the graph by itself; the plan-only one needs it.
    let origin = PlanOrigin::of(&cudnn);
    let (untyped, payload) = read_payload(&cudnn, &full, None, &Expect::default()).unwrap();
    assert_eq!(untyped.graph(), &g.graph().unwrap());
    assert!(payload.structure.is_some());
    assert!(matches!(read_payload(&cudnn, &lean, None, &Expect::default()), Err(PayloadError::NeedsGraph { .. })));
    assert!(read_payload(&cudnn, &lean, Some(g.graph().unwrap()), &Expect::default()).is_ok());
    assert_eq!(origin.sm, Some(90));
}

#[needs_cudnn]
#[test]
fn by_value_scalars_survive_a_round_trip() {
    let Some(cudnn) = common::deviceless() else { return };
    let g = ScaledRelu::new(48);
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let lean = plan.serialize(SerializeOptions { structure: false }).unwrap();
    let scalars = &json_of(&lean)["plan"]["scalars"];
    assert_eq!(scalars.as_array().unwrap().len(), 1);
    assert_eq!(scalars[0]["bits"], format!("{:#018x}", 5.0f64.to_bits()));
    let back = ScaledRelu::deserialize(&cudnn, &lean).unwrap();
    let scalar = back.plan().graph().tensors.iter().find_map(|t| t.pass_by_value);
    assert_eq!(scalar, Some(5.0));
    let again = back.serialize(SerializeOptions { structure: false }).unwrap();
    assert_eq!(json_of(&again)["plan"]["scalars"], *scalars);
}

#[needs_cudnn]
#[test]
fn selected_plan_notes_are_the_selected_ones() {
    let Some(cudnn) = common::deviceless() else { return };
    let graph = MatmulBiasRelu::<64, 32>::new(128).graph().unwrap();
    let options = BuildOptions {
        heuristics: vec![HeuristicMode::A, HeuristicMode::B, HeuristicMode::Fallback],
        build_all: true,
        ..BuildOptions::default()
    };
    let mut plan = ExecutionPlan::build(&cudnn, &graph, &options).unwrap();
    let built = plan.built();
    assert!(built.len() >= 2, "need two built plans to select the second, got {built:?}");
    let second = built[1];
    plan.select(second).unwrap();
    let want = plan.candidates()[second].clone();
    let bytes = write_payload(&plan, &PlanOrigin::of(&cudnn), SerializeOptions::default(), &Expect::default()).unwrap();
    let (back, payload) = read_payload(&cudnn, &bytes, None, &Expect::default()).unwrap();
    assert_eq!(payload.plan.engine.id, want.engine_id);
    assert_eq!(payload.plan.engine.tag, want.tag());
    let notes: Vec<String> = want.behavior_notes.iter().map(ToString::to_string).collect();
    assert_eq!(payload.plan.engine.behavior_notes, notes);
    assert_eq!(back.selected().engine_id, want.engine_id);
    // cuDNN reports the reloaded config with default knobs filled in; the chosen ones are there.
    assert!(
        want.knobs.iter().all(|k| back.selected().knobs.contains(k)),
        "{:?} vs {:?}",
        want.knobs,
        back.selected().knobs
    );
    // Writing the loaded plan again records the engine as selected, not as reloaded.
    let again = write_payload(&back, &payload.origin(), SerializeOptions::default(), &Expect::default()).unwrap();
    assert_eq!(parse_payload(&again).unwrap().plan.engine, payload.plan.engine);
}

#[needs_cudnn]
#[test]
fn mismatches_are_typed_errors() {
    let Some(cudnn) = common::deviceless() else { return };
    let plan = MatmulBiasRelu::<64, 32>::new(96).build(&cudnn, &BuildOptions::default()).unwrap();
    let bytes = plan.serialize(SerializeOptions { structure: false }).unwrap();

    // Another graph type.
    let e = payload_error(ScaledRelu::deserialize(&cudnn, &bytes).err().unwrap());
    assert!(matches!(e, PayloadError::TypeFingerprint { .. }), "{e}");
    // The same type with other const dims: another graph.
    let e = payload_error(MatmulBiasRelu::<64, 16>::deserialize(&cudnn, &bytes).err().unwrap());
    assert!(matches!(e, PayloadError::GraphFingerprint { .. }), "{e}");
    assert!(e.to_string().contains("another graph, shape binding or layout"));

    // Another cuDNN, another SM, another format: rewrite the payload's fields.
    let tamper = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = json_of(&bytes);
        f(&mut v);
        seal(&v)
    };
    // (Another version than the loaded one, whichever that is: issue 35.)
    let (loaded, other) = (cudnn.version(), cudnn.version() + 1);
    let e = payload_error(
        MatmulBiasRelu::<64, 32>::deserialize(&cudnn, &tamper(&|v| v["plan"]["cudnn_version"] = other.into()))
            .err()
            .unwrap(),
    );
    assert_eq!(
        e.to_string(),
        format!(
            "the plan was made by cuDNN {other} but this context runs cuDNN {loaded}; plans load only into the exact \
             version that made them"
        )
    );
    let e = payload_error(
        MatmulBiasRelu::<64, 32>::deserialize(&cudnn, &tamper(&|v| v["plan"]["sm"] = 100.into())).err().unwrap(),
    );
    assert!(matches!(e, PayloadError::Sm { payload: 100, runtime: 90 }), "{e}");
    let mut envelope: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    envelope["cudnn_graph_payload"] = 7.into();
    let e = payload_error(
        MatmulBiasRelu::<64, 32>::deserialize(&cudnn, &serde_json::to_vec(&envelope).unwrap()).err().unwrap(),
    );
    assert!(matches!(e, PayloadError::Format { found: 7 }), "{e}");
    let e = payload_error(
        MatmulBiasRelu::<64, 32>::deserialize(
            &cudnn,
            &tamper(&|v| v["plan"]["variant_pack_uids"] = serde_json::json!([1, 2])),
        )
        .err()
        .unwrap(),
    );
    assert!(matches!(e, PayloadError::VariantPack { .. }), "{e}");
    let e = payload_error(
        MatmulBiasRelu::<64, 32>::deserialize(&cudnn, &tamper(&|v| v["plan"]["plan_json"] = "{\"not\": 1}".into()))
            .err()
            .unwrap(),
    );
    assert!(matches!(e, PayloadError::Load(_)), "{e}");
}

#[needs_cudnn]
#[test]
fn truncated_and_corrupted_payloads_are_errors() {
    let Some(cudnn) = common::deviceless() else { return };
    let plan = ScaledRelu::new(16).build(&cudnn, &BuildOptions::default()).unwrap();
    let bytes = plan.serialize(SerializeOptions::default()).unwrap();
    // Every prefix at a stride (the payload is tens of KB), and byte flips across the document.
    for cut in (0..bytes.len()).step_by(211) {
        assert!(parse_payload(&bytes[..cut]).is_err(), "prefix of {cut} bytes parsed");
    }
    let mut flipped = 0;
    for at in (0..bytes.len()).step_by(389) {
        let mut b = bytes.clone();
        b[at] ^= 0x5a;
        // Either rejected, or (a flip inside a string that nothing checks) still a valid plan.
        if ScaledRelu::deserialize(&cudnn, &b).is_err() {
            flipped += 1;
        }
    }
    assert!(flipped > 0);
    assert!(matches!(parse_payload(b"{}"), Err(PayloadError::Malformed(_))));
    assert!(matches!(parse_payload(b"\x00\xff"), Err(PayloadError::Malformed(_))));
    let foreign = serde_json::to_vec(&serde_json::json!({"json_version": "1.0", "nodes": []})).unwrap();
    assert!(matches!(parse_payload(&foreign), Err(PayloadError::Malformed(_))));
}

#[test]
fn graph_values_have_a_serde_form() {
    let g = MatmulBiasRelu::<64, 32>::new(96);
    let text = serde_json::to_string(&g).unwrap();
    assert!(
        text.contains("\"MatmulBiasRelu\"") && text.contains("[\"M\",96]") && text.contains("[\"N\",64]"),
        "{text}"
    );
    let back: MatmulBiasRelu<64, 32> = serde_json::from_str(&text).unwrap();
    assert_eq!(back, g);
    let e = serde_json::from_str::<MatmulBiasRelu<64, 16>>(&text).unwrap_err().to_string();
    assert!(e.contains("has K = 16, but the description has 32"), "{e}");
    let e = serde_json::from_str::<ScaledRelu>(&text).unwrap_err().to_string();
    assert!(e.contains("not `ScaledRelu`"), "{e}");
}

#[needs_cudnn]
#[test]
fn typed_graphs_build_through_the_plan_cache() {
    use cudnn_graph::engines::{CacheSource, PlanCache};
    let Some(cudnn) = common::deviceless() else { return };
    let dir = std::env::temp_dir().join(format!("cudnn-graph-typed-cache-{}", std::process::id()));
    let cache = PlanCache::with_dir(&dir).unwrap();
    let g = MatmulBiasRelu::<64, 32>::new(96);
    let (first, outcome) = g.build_cached(&cache, &cudnn, &BuildOptions::default()).unwrap();
    assert_eq!(outcome.source, CacheSource::Built);
    let (second, outcome) = g.build_cached(&cache, &cudnn, &BuildOptions::default()).unwrap();
    assert_eq!(outcome.source, CacheSource::Memory);
    assert_eq!(second.plan().layout().uids(), first.plan().layout().uids());
    // A new process (a fresh cache on the same directory) starts warm from disk.
    let warm = PlanCache::with_dir(&dir).unwrap();
    let (_, outcome) = g.build_cached(&warm, &cudnn, &BuildOptions::default()).unwrap();
    assert_eq!(outcome.source, CacheSource::Disk);
    println!("disk hit in {:.2} ms", outcome.elapsed.as_secs_f64() * 1e3);
    // Another binding is another key.
    let (_, outcome) = MatmulBiasRelu::<64, 32>::new(48).build_cached(&warm, &cudnn, &BuildOptions::default()).unwrap();
    assert_eq!(outcome.source, CacheSource::Built);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A payload written by the untyped API (as `cudnn-graph aot` writes one from a graph's structural
/// JSON) records no graph type and no runtime dims: `deserialize` cannot rebuild the value and says
/// how to load it; `Name::new(..).load_payload` loads it for that binding, and refuses another.
#[needs_cudnn]
#[test]
fn untyped_payloads_load_for_a_binding() {
    let Some(cudnn) = common::deviceless() else { return };
    let value = MatmulBiasRelu::<64, 32>::new(128);
    let plan = ExecutionPlan::build(&cudnn, &value.graph().unwrap(), &BuildOptions::default()).unwrap();
    let bytes = write_payload(&plan, &PlanOrigin::of(&cudnn), SerializeOptions { structure: true }, &Expect::default())
        .unwrap();
    let e = payload_error(MatmulBiasRelu::<64, 32>::deserialize(&cudnn, &bytes).unwrap_err());
    assert!(e.to_string().contains("load_payload"), "{e}");
    let loaded = value.load_payload(&cudnn, &bytes).unwrap();
    assert_eq!(loaded.plan().graph(), plan.graph());
    match payload_error(MatmulBiasRelu::<64, 32>::new(96).load_payload(&cudnn, &bytes).unwrap_err()) {
        PayloadError::GraphFingerprint { .. } => {}
        other => panic!("{other}"),
    }
    // A typed payload still must be of this type.
    let typed = value.build(&cudnn, &BuildOptions::default()).unwrap().serialize(SerializeOptions::default()).unwrap();
    assert!(value.load_payload(&cudnn, &typed).is_ok());
    let other = payload_error(ScaledRelu::new(128).load_payload(&cudnn, &typed).unwrap_err());
    println!("{other}");
}
