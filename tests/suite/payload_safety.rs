//! Payloads that are corrupted, edited, or made for another graph never reach cuDNN, never crash
//! the process, and never run: each is a typed error (deviceless against the H200's properties;
//! CI runs these with real cuDNN 9.19). A corrupted disk-cache entry is evicted with a warning.

#![cfg(feature = "cudnn")]

use crate::common;
use crate::payload_graphs;

use cudnn_graph::backend::{BackendError, BuildOptions, PlanMismatch};
use cudnn_graph::engines::{CacheSource, PlanCache};
use cudnn_graph::payload::plan::{
    parse_payload, parse_signed_payload, read_payload, seal, PayloadError, PayloadKey, SerializeOptions,
    MAX_PAYLOAD_BYTES,
};
use cudnn_graph::Error;
use payload_graphs::{MatmulBiasRelu, ScaledRelu};
use serde_json::Value;

type Mlp = MatmulBiasRelu<64, 32>;

fn payload_error(e: Error) -> PayloadError {
    match e {
        Error::Payload(p) => p,
        other => panic!("expected a payload error, got {other}"),
    }
}

/// The mismatch inside a payload error from a plan JSON that does not bind.
fn mismatch(e: Error) -> PlanMismatch {
    match payload_error(e) {
        PayloadError::Load(inner) => match *inner {
            BackendError::PlanMismatch { mismatch, .. } => *mismatch,
            other => panic!("expected a plan mismatch, got {other}"),
        },
        other => panic!("expected a plan mismatch, got {other}"),
    }
}

fn body_of(bytes: &[u8]) -> Value {
    let envelope: Value = serde_json::from_slice(bytes).unwrap();
    envelope["body"].clone()
}

/// `bytes` with its body edited by `edit`, resealed with a correct digest: what reaches the
/// checks behind the digest.
fn edited(bytes: &[u8], edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut body = body_of(bytes);
    edit(&mut body);
    seal(&serde_json::to_string(&body).unwrap(), None)
}

/// `bytes` with cuDNN's plan JSON inside edited by `edit`, resealed.
fn plan_json_edited(bytes: &[u8], edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    edited(bytes, |body| {
        let mut plan: Value = serde_json::from_str(body["plan"]["plan_json"].as_str().unwrap()).unwrap();
        edit(&mut plan);
        body["plan"]["plan_json"] = plan.to_string().into();
    })
}

/// The plan JSON tensor named `uid`.
fn tensor<'a>(plan: &'a mut Value, uid: &str) -> &'a mut Value {
    let tensors = plan["operationGraph"]["tensors"].as_array_mut().unwrap();
    tensors.iter_mut().find(|t| t["name"] == uid).unwrap()
}

#[needs_cudnn]
#[test]
fn a_zero_dim_in_the_plan_json_is_refused_before_cudnn() {
    // Before the binding check this died with SIGFPE inside cuDNN's matmul finalize.
    let Some(cudnn) = common::deviceless() else { return };
    let bytes =
        Mlp::new(64).build(&cudnn, &BuildOptions::default()).unwrap().serialize(SerializeOptions::default()).unwrap();
    let bad = plan_json_edited(&bytes, |p| tensor(p, "1")["dim"][1] = 0.into());
    match mismatch(Mlp::deserialize(&cudnn, &bad).err().unwrap()) {
        PlanMismatch::Tensor { uid: 1, tensor, field: "dims", plan, graph } => {
            assert_eq!((tensor.as_str(), plan.as_str(), graph.as_str()), ("a", "[1, 0, 32]", "[1, 64, 32]"));
        }
        other => panic!("{other}"),
    }
    // The same edit without resealing is caught by the digest already.
    let mut body = body_of(&bytes);
    let text = body["plan"]["plan_json"].as_str().unwrap().replacen("\"dim\":[1,64,32]", "\"dim\":[1,0,32]", 1);
    body["plan"]["plan_json"] = text.into();
    let mut envelope: Value = serde_json::from_slice(&bytes).unwrap();
    envelope["body"] = body;
    let e = payload_error(Mlp::deserialize(&cudnn, &serde_json::to_vec(&envelope).unwrap()).err().unwrap());
    assert!(matches!(e, PayloadError::Digest { .. }), "{e}");
    assert!(e.to_string().starts_with("the payload is corrupted"), "{e}");
}

#[needs_cudnn]
#[test]
fn a_plan_json_for_another_graph_or_binding_is_refused() {
    let Some(cudnn) = common::deviceless() else { return };
    let options = BuildOptions::default();
    let m64 = Mlp::new(64).build(&cudnn, &options).unwrap().serialize(SerializeOptions::default()).unwrap();
    let m192 = Mlp::new(192).build(&cudnn, &options).unwrap().serialize(SerializeOptions::default()).unwrap();
    let other = ScaledRelu::new(64).build(&cudnn, &options).unwrap().serialize(SerializeOptions::default()).unwrap();

    // The plan for M = 192 inside the payload for M = 64.
    let swapped = edited(&m64, |b| b["plan"]["plan_json"] = body_of(&m192)["plan"]["plan_json"].clone());
    match mismatch(Mlp::deserialize(&cudnn, &swapped).err().unwrap()) {
        PlanMismatch::Tensor { tensor, field: "dims", plan, graph, .. } => {
            assert_eq!((tensor.as_str(), plan.as_str(), graph.as_str()), ("a", "[1, 192, 32]", "[1, 64, 32]"));
        }
        other => panic!("{other}"),
    }
    // Another graph's plan JSON.
    let foreign = edited(&m64, |b| b["plan"]["plan_json"] = body_of(&other)["plan"]["plan_json"].clone());
    let e = mismatch(Mlp::deserialize(&cudnn, &foreign).err().unwrap());
    assert!(matches!(e, PlanMismatch::Tensor { .. } | PlanMismatch::UnknownTensor { .. }), "{e}");
}

#[needs_cudnn]
#[test]
fn edited_plan_json_tensors_and_operations_are_refused() {
    let Some(cudnn) = common::deviceless() else { return };
    let bytes =
        Mlp::new(64).build(&cudnn, &BuildOptions::default()).unwrap().serialize(SerializeOptions::default()).unwrap();
    let expect =
        |edit: &dyn Fn(&mut Value)| mismatch(Mlp::deserialize(&cudnn, &plan_json_edited(&bytes, edit)).err().unwrap());

    let e = expect(&|p| tensor(p, "2")["stride"] = serde_json::json!([2048, 1, 32]));
    assert!(matches!(&e, PlanMismatch::Tensor { uid: 2, field: "strides", .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "tensor `b` (uid 2) has strides [2048, 1, 32] in the plan but [2048, 64, 1] in the graph"
    );
    let e = expect(&|p| tensor(p, "6")["dataType"] = "CUDNN_DATA_FLOAT".into());
    assert!(matches!(&e, PlanMismatch::Tensor { uid: 6, field: "data type", .. }), "{e}");
    let e = expect(&|p| tensor(p, "6")["isVirtual"] = true.into());
    assert!(matches!(&e, PlanMismatch::Tensor { field: "virtual", .. }), "{e}");
    let e = expect(&|p| tensor(p, "3")["ptrAlignment"] = 4.into());
    assert!(matches!(&e, PlanMismatch::Tensor { field: "alignment", .. }), "{e}");
    let e = expect(&|p| tensor(p, "3")["vectCount"] = 4.into());
    assert!(matches!(&e, PlanMismatch::Tensor { field: "vector count", .. }), "{e}");
    let e = expect(&|p| tensor(p, "3")["name"] = "99".into());
    assert!(matches!(&e, PlanMismatch::UnknownTensor { name, .. } if name == "99"), "{e}");
    let e = expect(&|p| {
        let tensors = p["operationGraph"]["tensors"].as_array_mut().unwrap();
        let dup = tensors[0].clone();
        tensors.push(dup);
    });
    assert!(matches!(&e, PlanMismatch::DuplicateTensor { .. }), "{e}");
    let e = expect(&|p| {
        p["operationGraph"]["tensors"].as_array_mut().unwrap().retain(|t| t["name"] != "3");
    });
    assert!(matches!(&e, PlanMismatch::MissingTensor { uid: 3, .. } | PlanMismatch::DanglingReference { .. }), "{e}");
    // An operation of another kind, or wired to another tensor.
    let e = expect(&|p| {
        p["operationGraph"]["nodes"][0]["operation"] = "CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR".into()
    });
    assert!(matches!(&e, PlanMismatch::Operations { .. }), "{e}");
    let e = expect(&|p| p["operationGraph"]["nodes"][1]["B"] = "1".into());
    assert!(matches!(&e, PlanMismatch::Operations { .. }), "{e}");
    let e = expect(&|p| p["operationGraph"]["nodes"][1]["B"] = "x".into());
    assert!(matches!(&e, PlanMismatch::DanglingReference { node: 1, .. }), "{e}");
    let e = expect(&|p| {
        p["operationGraph"]["nodes"].as_array_mut().unwrap().pop();
    });
    assert!(matches!(&e, PlanMismatch::Operations { .. }), "{e}");
    // Another cuDNN or SM inside the plan JSON itself.
    // (The loaded version, whichever it is, never a constant: issue 35.)
    let loaded = cudnn.version();
    let other = i64::try_from(loaded).unwrap() + 1;
    let e = expect(&|p| p["cudnnVersion"] = other.into());
    assert!(matches!(&e, PlanMismatch::CudnnVersion { plan, runtime } if *plan == other && *runtime == loaded), "{e}");
    let e = expect(&|p| p["engine"]["smVersion"] = 1000.into());
    assert!(matches!(&e, PlanMismatch::Sm { plan: 100, runtime: 90 }), "{e}");
    let e = expect(&|p| p["operationGraph"] = Value::Null);
    assert!(matches!(&e, PlanMismatch::Malformed(_)), "{e}");
}

#[needs_cudnn]
#[test]
fn a_record_that_disagrees_with_its_plan_is_refused() {
    let Some(cudnn) = common::deviceless() else { return };
    let options = BuildOptions::default();
    let bytes = Mlp::new(64).build(&cudnn, &options).unwrap().serialize(SerializeOptions::default()).unwrap();
    let e = payload_error(
        Mlp::deserialize(&cudnn, &edited(&bytes, |b| b["plan"]["workspace_size"] = 1024.into())).err().unwrap(),
    );
    assert!(matches!(e, PayloadError::Workspace { payload: 1024, plan: 0 }), "{e}");
    let e = payload_error(
        Mlp::deserialize(&cudnn, &edited(&bytes, |b| b["plan"]["engine"]["id"] = 3.into())).err().unwrap(),
    );
    assert!(matches!(e, PayloadError::Engine { .. }), "{e}");
    // The engines named as numbers, not as `Some(3)`.
    let engine = body_of(&bytes)["plan"]["engine"]["id"].as_i64().unwrap();
    assert!(e.to_string().starts_with("the payload records engine 3 with knobs ["), "{e}");
    assert!(e.to_string().contains(&format!("loads as engine {engine} with knobs [")), "{e}");
    assert!(!e.to_string().contains("Some("), "{e}");
    let e = payload_error(
        Mlp::deserialize(&cudnn, &edited(&bytes, |b| b["plan"]["engine"]["knobs"] = serde_json::json!([[24, 999]])))
            .err()
            .unwrap(),
    );
    assert!(matches!(e, PayloadError::Engine { .. }), "{e}");

    let scaled = ScaledRelu::new(16).build(&cudnn, &options).unwrap().serialize(SerializeOptions::default()).unwrap();
    let bits = format!("{:#018x}", 7.0f64.to_bits());
    let e = payload_error(
        ScaledRelu::deserialize(&cudnn, &edited(&scaled, |b| b["plan"]["scalars"][0]["bits"] = bits.into()))
            .err()
            .unwrap(),
    );
    assert!(matches!(&e, PayloadError::Scalars { .. }), "{e}");
    // The unedited payloads load.
    assert!(Mlp::deserialize(&cudnn, &bytes).is_ok());
    assert!(ScaledRelu::deserialize(&cudnn, &scaled).is_ok());
}

#[needs_cudnn]
#[test]
fn engine_notes_that_are_not_the_loaded_plans_are_refused() {
    // The notes are cuDNN's description of the engine and are written out again with the plan:
    // a record that adds one, drops one (a nondeterministic engine passed off as deterministic)
    // or misspells one is refused, as cudnn-frontend's imports are.
    let Some(cudnn) = common::deviceless() else { return };
    let bytes =
        Mlp::new(64).build(&cudnn, &BuildOptions::default()).unwrap().serialize(SerializeOptions::default()).unwrap();
    let engine = body_of(&bytes)["plan"]["engine"].clone();
    let list = |key: &str| -> Vec<String> {
        engine[key].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect()
    };
    let (behavior, numerical) = (list("behavior_notes"), list("numerical_notes"));
    assert!(!numerical.is_empty(), "the matmul's engine has numerical notes: {engine}");
    let with =
        |notes: &[String], extra: &str| -> Vec<String> { notes.iter().cloned().chain([extra.to_string()]).collect() };
    let forgeries: [(&str, &str, Vec<String>, &[String]); 4] = [
        ("behavior_notes", "behavior", with(&behavior, "SUPPORTS_CUDA_GRAPH_NATIVE_API"), &behavior),
        ("behavior_notes", "behavior", with(&behavior, "RUNTIME_COMPILATIONS"), &behavior),
        ("numerical_notes", "numerical", Vec::new(), &numerical),
        ("numerical_notes", "numerical", with(&numerical, "NONDETERMINISTIC"), &numerical),
    ];
    for (key, kind, forged, real) in forgeries {
        let e = payload_error(
            Mlp::deserialize(&cudnn, &edited(&bytes, |b| b["plan"]["engine"][key] = serde_json::json!(forged)))
                .err()
                .unwrap_or_else(|| panic!("{key} = {forged:?} was accepted")),
        );
        match &e {
            PayloadError::Notes { kind: k, payload, plan } => {
                assert_eq!((*k, payload, plan.len()), (kind, &forged, real.len()), "{e}");
                let (mut plan, mut real) = (plan.clone(), real.to_vec());
                plan.sort();
                real.sort();
                assert_eq!(plan, real, "{e}");
            }
            other => panic!("{key} = {forged:?}: expected a notes error, got {other}"),
        }
        assert!(e.to_string().contains(&format!("records {kind} notes")), "{e}");
    }
    // In another order, the notes are the plan's: loaded, and written out again.
    let reordered: Vec<String> = numerical.iter().rev().cloned().collect();
    let plan = Mlp::deserialize(
        &cudnn,
        &edited(&bytes, |b| b["plan"]["engine"]["numerical_notes"] = serde_json::json!(reordered)),
    )
    .unwrap();
    let again = body_of(&plan.serialize(SerializeOptions::default()).unwrap())["plan"]["engine"].clone();
    let mut written: Vec<String> =
        again["numerical_notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
    written.sort();
    let mut want = numerical.clone();
    want.sort();
    assert_eq!(written, want);
    // The unedited payload loads and writes its notes out again unchanged.
    let again = body_of(&Mlp::deserialize(&cudnn, &bytes).unwrap().serialize(SerializeOptions::default()).unwrap());
    assert_eq!(again["plan"]["engine"], engine);
}

#[test]
fn every_bit_flip_in_the_kernel_is_caught_by_the_digest() {
    // Before the digest, 3 315 of 3 333 sampled flips inside the kernel binary loaded silently.
    let Some(cudnn) = common::deviceless() else { return };
    let bytes =
        Mlp::new(64).build(&cudnn, &BuildOptions::default()).unwrap().serialize(SerializeOptions::default()).unwrap();
    let start = bytes.windows(7).position(|w| w == b"\\\"cubin").expect("the plan JSON carries its cubin");
    let (mut flips, mut caught) = (0, 0);
    for at in (start + 16..bytes.len() - 64).step_by(97) {
        for bit in [0u8, 3, 6] {
            let mut b = bytes.clone();
            b[at] ^= 1 << bit;
            flips += 1;
            match parse_payload(&b) {
                Err(PayloadError::Digest { .. } | PayloadError::Malformed(_)) => caught += 1,
                other => panic!("flip of bit {bit} at byte {at}: {other:?}"),
            }
        }
    }
    println!("{caught} of {flips} flips in the kernel refused");
    assert!(flips > 300 && caught == flips);
}

#[needs_cudnn]
#[test]
fn signed_payloads_need_the_key_that_signed_them() {
    let Some(cudnn) = common::deviceless() else { return };
    let key = PayloadKey::new(*b"0123456789abcdef0123456789abcdef").unwrap();
    let other = PayloadKey::new(vec![7u8; 32]).unwrap();
    assert!(matches!(PayloadKey::new(vec![1u8; 8]), Err(PayloadError::ShortKey { bytes: 8 })));
    assert_eq!(format!("{key:?}"), "PayloadKey(32 bytes)", "Debug never shows the key");
    let plan = Mlp::new(64).build(&cudnn, &BuildOptions::default()).unwrap();
    let signed = plan.serialize_signed(SerializeOptions::default(), &key).unwrap();
    let unsigned = plan.serialize(SerializeOptions::default()).unwrap();

    assert!(Mlp::deserialize_signed(&cudnn, &signed, &key).is_ok());
    assert!(Mlp::deserialize(&cudnn, &signed).is_ok(), "a reader without a key checks the digest only");
    let e = payload_error(Mlp::deserialize_signed(&cudnn, &unsigned, &key).err().unwrap());
    assert!(matches!(e, PayloadError::Unsigned), "{e}");
    let e = payload_error(Mlp::deserialize_signed(&cudnn, &signed, &other).err().unwrap());
    assert!(matches!(e, PayloadError::Signature), "{e}");
    // Edited and resealed with a correct digest, which anyone can compute: the signature fails.
    let mut envelope: Value = serde_json::from_slice(&signed).unwrap();
    let resealed: Value =
        serde_json::from_slice(&edited(&signed, |b| b["plan"]["workspace_size"] = 64.into())).unwrap();
    envelope["body"] = resealed["body"].clone();
    envelope["sha256"] = resealed["sha256"].clone();
    let forged = serde_json::to_vec(&envelope).unwrap();
    assert!(parse_payload(&forged).is_ok(), "the digest alone is satisfied");
    assert!(matches!(parse_signed_payload(&forged, &key), Err(PayloadError::Signature)));
}

/// The one entry file in `dir`.
fn entry_in(dir: &std::path::Path) -> std::path::PathBuf {
    let files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

#[needs_cudnn]
#[test]
fn corrupted_cache_entries_are_evicted_never_executed() {
    let Some(cudnn) = common::deviceless() else { return };
    let dir = std::env::temp_dir().join(format!("cudnn-graph-evict-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let g = Mlp::new(64);
    let options = BuildOptions::default();
    let (_, outcome) = g.build_cached(&PlanCache::with_dir(&dir).unwrap(), &cudnn, &options).unwrap();
    assert_eq!(outcome.source, CacheSource::Built);
    let path = entry_in(&dir);
    let good = std::fs::read(&path).unwrap();

    // The payload that crashed cuDNN, resealed, as a disk entry: evicted with a warning, rebuilt,
    // and the next process starts warm from the rebuilt entry.
    let crashing = plan_json_edited(&good, |p| tensor(p, "1")["dim"][1] = 0.into());
    let corrupted = {
        let mut b = good.clone();
        let at = b.len() / 2;
        b[at] ^= 0x10;
        b
    };
    let garbage = b"\x00not a payload".to_vec();
    for (what, bytes) in [("crashing plan JSON", crashing), ("flipped bit", corrupted), ("garbage", garbage)] {
        std::fs::write(&path, &bytes).unwrap();
        let cache = PlanCache::with_dir(&dir).unwrap();
        let (_, outcome) = g.build_cached(&cache, &cudnn, &options).unwrap();
        assert_eq!(outcome.source, CacheSource::Built, "{what}");
        assert_eq!(outcome.warnings.len(), 1, "{what}: {:?}", outcome.warnings);
        assert!(outcome.warnings[0].reason.starts_with("evicted: "), "{what}: {}", outcome.warnings[0]);
        assert_eq!(cache.stats().ignored, 1, "{what}");
        let (_, outcome) = g.build_cached(&PlanCache::with_dir(&dir).unwrap(), &cudnn, &options).unwrap();
        assert_eq!(outcome.source, CacheSource::Disk, "{what}: the rebuilt entry serves the next process");
    }

    // Without a rebuild (a plain lookup), the entry is gone all the same.
    std::fs::write(&path, b"{}").unwrap();
    let cache = PlanCache::with_dir(&dir).unwrap();
    let graph = g.graph().unwrap();
    let (found, warnings) = cache.get(&cudnn, &graph, &g.expectation(), &options);
    assert!(found.is_none());
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(!path.exists(), "the corrupted entry was removed");

    // An entry over the size limit is refused before it is read (a sparse file: no disk used).
    let (_, _) = g.build_cached(&cache, &cudnn, &options).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(1 << 30).unwrap();
    drop(file);
    let cache = PlanCache::with_dir(&dir).unwrap();
    let start = std::time::Instant::now();
    let (_, outcome) = g.build_cached(&cache, &cudnn, &options).unwrap();
    assert_eq!(outcome.source, CacheSource::Built);
    assert!(
        outcome.warnings[0].reason.contains(&format!("over the {MAX_PAYLOAD_BYTES}-byte limit")),
        "{:?}",
        outcome.warnings
    );
    println!("1 GiB entry refused; lookup and rebuild took {:?}", start.elapsed());
    assert!(std::fs::metadata(&path).unwrap().len() < 1 << 20, "replaced by the rebuilt entry");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[needs_cudnn]
#[test]
fn a_keyed_cache_loads_only_what_it_signed() {
    let Some(cudnn) = common::deviceless() else { return };
    let dir = std::env::temp_dir().join(format!("cudnn-graph-keyed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let key = PayloadKey::new(vec![42u8; 32]).unwrap();
    let g = Mlp::new(64);
    let options = BuildOptions::default();
    // Written by a cache without the key: a keyed cache evicts it.
    g.build_cached(&PlanCache::with_dir(&dir).unwrap(), &cudnn, &options).unwrap();
    let keyed = PlanCache::with_dir(&dir).unwrap().with_key(key.clone());
    let (_, outcome) = g.build_cached(&keyed, &cudnn, &options).unwrap();
    assert_eq!(outcome.source, CacheSource::Built);
    assert!(outcome.warnings[0].reason.contains("not signed"), "{:?}", outcome.warnings);
    // What it wrote, it loads.
    let (_, outcome) = g.build_cached(&PlanCache::with_dir(&dir).unwrap().with_key(key), &cudnn, &options).unwrap();
    assert_eq!(outcome.source, CacheSource::Disk);
    assert!(outcome.warnings.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn old_and_oversized_payloads_are_typed_errors() {
    let old = serde_json::to_vec(&serde_json::json!({"cudnn_graph_payload": 1, "plan": {}})).unwrap();
    assert!(matches!(parse_payload(&old), Err(PayloadError::Format { found: 1 })));
    let huge = vec![b' '; MAX_PAYLOAD_BYTES + 1];
    assert!(matches!(parse_payload(&huge), Err(PayloadError::TooLarge(n)) if n == MAX_PAYLOAD_BYTES as u64 + 1));
    let unknown = br#"{"cudnn_graph_payload": 2, "sha256": "00", "body": {}, "extra": 1}"#;
    assert!(matches!(parse_payload(unknown), Err(PayloadError::Malformed(m)) if m.contains("extra")));
    let no_digest = br#"{"cudnn_graph_payload": 2, "body": {}}"#;
    assert!(matches!(parse_payload(no_digest), Err(PayloadError::Malformed(m)) if m.contains("sha256")));
}

/// The two payloads that crashed the process under the `payload` fuzz target (format 1, written
/// before the digest), resealed as format 2 so that their plan JSON reaches the binding check:
/// every tensor's first dim set to 0 (SIGFPE inside cuDNN), and a node wired to a tensor named
/// `x` plus a few changed kernel bytes (a C++ exception from cuDNN through the FFI call, which
/// aborts). Both are refused before cuDNN is given them.
#[needs_cudnn]
#[test]
fn the_fuzzers_crashing_payloads_are_refused_before_cudnn() {
    let Some(cudnn) = common::deviceless() else { return };
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/regressions/payload");
    for (file, expected) in
        [("plan-json-dims-zero-sigfpe.json", "dims"), ("plan-json-foreign-exception-abort.json", "refers to `x`")]
    {
        let old: Value = serde_json::from_slice(&std::fs::read(format!("{dir}/{file}")).unwrap()).unwrap();
        assert_eq!(old["cudnn_graph_payload"], 1, "{file}");
        assert!(matches!(parse_payload(&serde_json::to_vec(&old).unwrap()), Err(PayloadError::Format { found: 1 })));
        // Stamped by cuDNN 9.19: restamped with the loaded version (payload and plan JSON) so
        // that the payload reaches the binding check on any cuDNN (issue 35).
        let mut plan = old["plan"].clone();
        plan["cudnn_version"] = cudnn.version().into();
        let mut plan_json: Value = serde_json::from_str(plan["plan_json"].as_str().unwrap()).unwrap();
        plan_json["cudnnVersion"] = cudnn.version().into();
        plan["plan_json"] = plan_json.to_string().into();
        let body = serde_json::json!({"structure": old["structure"], "plan": plan});
        let resealed = seal(&body.to_string(), None);
        let e = read_payload(&cudnn, &resealed, None, &Default::default()).err().unwrap();
        match e {
            PayloadError::Load(inner) => match *inner {
                BackendError::PlanMismatch { mismatch, .. } => {
                    assert!(mismatch.to_string().contains(expected), "{file}: {mismatch}")
                }
                other => panic!("{file}: {other}"),
            },
            other => panic!("{file}: {other}"),
        }
    }
}

/// The payload the fuzz target found to kill the process inside cuDNN 9.19 (2026-12-07): an
/// SDPA plan whose JSON lists three kernels (its own, cut short, and two spliced from a layer
/// norm's plan) under a correct digest. cuDNN reads every kernel after the first of an SDPA plan
/// as one to compile and calls NVRTC through a null pointer (SIGSEGV). The binding check refuses
/// it by the kernel count before cuDNN is given it; an entry without its name or code is refused
/// for every plan.
#[needs_cudnn]
#[test]
fn an_sdpa_plan_json_with_more_kernels_than_cudnn_writes_is_refused() {
    let Some(cudnn) = common::deviceless() else { return };
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/regressions/payload/sdpa-plan-json-extra-kernels-segv.json");
    let bytes = std::fs::read(file).unwrap();
    // Stamped by cuDNN 9.19: restamped with the loaded version so that it reaches the binding
    // check on any cuDNN (issue 35).
    let resealed = edited(&bytes, |body| {
        body["plan"]["cudnn_version"] = cudnn.version().into();
        let mut plan: Value = serde_json::from_str(body["plan"]["plan_json"].as_str().unwrap()).unwrap();
        plan["cudnnVersion"] = cudnn.version().into();
        assert_eq!(plan["engine"]["payload"]["kernels"].as_array().unwrap().len(), 3);
        body["plan"]["plan_json"] = plan.to_string().into();
    });
    let e = read_payload(&cudnn, &resealed, None, &Default::default()).err().unwrap();
    match e {
        PayloadError::Load(inner) => match *inner {
            BackendError::PlanMismatch { mismatch, .. } => match *mismatch {
                PlanMismatch::Kernels { ref finalize_mode, count: 3, most: 1 } => {
                    assert!(finalize_mode.contains("SDPA"), "{mismatch}");
                    let text = mismatch.to_string();
                    assert!(text.contains("3 kernels") && text.contains("at most 1"), "{text}");
                }
                other => panic!("expected the kernel count, got {other}"),
            },
            other => panic!("{other}"),
        },
        other => panic!("{other}"),
    }

    let bytes =
        Mlp::new(64).build(&cudnn, &BuildOptions::default()).unwrap().serialize(SerializeOptions::default()).unwrap();
    for (kernel, field) in
        [(serde_json::json!({"kernelName": "k"}), "cubin"), (serde_json::json!({"cubin": ""}), "kernelName")]
    {
        let edit =
            plan_json_edited(&bytes, |plan| plan["engine"]["payload"] = serde_json::json!({"kernels": [kernel]}));
        let e = mismatch(Mlp::deserialize(&cudnn, &edit).err().unwrap());
        assert!(matches!(e, PlanMismatch::Kernel { index: 0, field: f } if f == field), "{e}");
    }
}
