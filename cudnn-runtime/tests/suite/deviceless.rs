//! Real cuDNN lowering, heuristics and plan compilation without a GPU: a deviceless [`Cudnn`] for
//! the H200 described by `tests/fixtures/h200-devprop.json`.
//!
//! Needs libcudnn 9 and a libcuda.so.1 (on CI, the stand-in): `export LD_LIBRARY_PATH=$(bash
//! .ci/setup-cudnn.sh DIR)`. Without them each test is ignored (as it was built), unless
//! `CUDNN_GRAPH_REQUIRE_CUDNN=1`, which turns a missing library into a failure.
#![cfg(feature = "cudnn")]

use cudnn_runtime::backend::{
    cuda_context, devprop, devprop::DevicePropertiesError, support, BackendError, BuildOptions, CandidateState, Cudnn,
    CudnnError, ExecutionPlan, HeuristicMode, PlanMismatch, Rejection,
};
use cudnn_runtime::ops::PointwiseMode;
use cudnn_runtime::{DataType, Graph, GraphBuilder};

use crate::common;

use common::{deviceless, DEVPROP};

fn devprop_json() -> String {
    std::fs::read_to_string(DEVPROP).unwrap_or_else(|e| panic!("reading {DEVPROP}: {e}"))
}

/// Plans `graph` deviceless and checks what a usable plan must have.
fn plan(cudnn: &Cudnn, graph: Graph) -> ExecutionPlan {
    let name = graph.name.clone();
    let plan = ExecutionPlan::build(cudnn, &graph, &BuildOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let candidates = plan.candidates();
    assert!(!candidates.is_empty(), "{name}: no candidates");
    assert_eq!(plan.built().len(), 1, "{name}: one plan is built unless build_all");
    assert_eq!(plan.selected().state, CandidateState::Built);
    assert!(plan.selected().engine_id.is_some());
    assert_eq!(plan.selected().workspace_bytes, Some(plan.workspace_size()));
    assert!(!plan.is_online());
    let json = plan.json().unwrap_or_else(|e| panic!("{name}: json: {e}"));
    assert!(json.len() > 1000 && json.trim_start().starts_with('{'), "{name}: plan JSON of {} bytes", json.len());
    println!(
        "{name}: {} candidates, built {} ({} B workspace), plan JSON {} B",
        candidates.len(),
        plan.selected(),
        plan.workspace_size(),
        json.len()
    );
    plan
}

/// `y = act(a · b + bias)`, bias and activation optional.
fn matmul_graph(
    name: &str,
    dt: DataType,
    a_dims: &[i64],
    b_dims: &[i64],
    bias: bool,
    act: Option<PointwiseMode>,
) -> Graph {
    let mut g = GraphBuilder::new(name);
    let a = g.input("a", dt, a_dims).unwrap();
    let b = g.input("b", dt, b_dims).unwrap();
    let mut y = g.matmul(a, b).unwrap();
    if bias {
        let n = *b_dims.last().unwrap();
        let bias = g.input("bias", dt, &[1, 1, n]).unwrap();
        y = g.pointwise(PointwiseMode::Add, &[y.into(), bias.into()]).unwrap();
    }
    if let Some(act) = act {
        y = g.pointwise(act, &[y.into()]).unwrap();
    }
    g.output(y, "y", dt).unwrap();
    g.build().unwrap()
}

#[needs_cudnn]
#[test]
fn matmul_f16() {
    let Some(cudnn) = deviceless() else { return };
    assert!(cudnn.version() >= 90800, "cuDNN {}", cudnn.version());
    assert!(!cudnn.is_online() && cudnn.stream().is_none());
    plan(&cudnn, matmul_graph("matmul_f16", DataType::F16, &[1, 128, 64], &[1, 64, 256], false, None));
}

#[needs_cudnn]
#[test]
fn matmul_bias_relu_bf16_batched_and_non_square() {
    let Some(cudnn) = deviceless() else { return };
    for (a, b) in [([1, 128, 64], [1, 64, 256]), ([4, 96, 160], [4, 160, 72]), ([2, 256, 512], [1, 512, 128])] {
        let name = format!("matmul_bias_relu_bf16_{a:?}x{b:?}");
        plan(&cudnn, matmul_graph(&name, DataType::BF16, &a, &b, true, Some(PointwiseMode::Relu)));
    }
}

#[needs_cudnn]
#[test]
fn matmul_gelu_f16() {
    let Some(cudnn) = deviceless() else { return };
    let g =
        matmul_graph("matmul_gelu_f16", DataType::F16, &[4, 96, 160], &[4, 160, 72], false, Some(PointwiseMode::Gelu));
    plan(&cudnn, g);
}

#[needs_cudnn]
#[test]
fn pointwise_add_relu_rank_2() {
    let Some(cudnn) = deviceless() else { return };
    let mut g = GraphBuilder::new("add_relu");
    let x = g.input("x", DataType::F16, &[64, 256]).unwrap();
    let y = g.input("y", DataType::F16, &[64, 256]).unwrap();
    let s = g.pointwise(PointwiseMode::Add, &[x.into(), y.into()]).unwrap();
    let r = g.pointwise(PointwiseMode::Relu, &[s.into()]).unwrap();
    g.output(r, "out", DataType::F16).unwrap();
    plan(&cudnn, g.build().unwrap());
}

#[needs_cudnn]
#[test]
fn mul_by_a_by_value_scalar() {
    let Some(cudnn) = deviceless() else { return };
    let mut g = GraphBuilder::new("scale");
    let x = g.input("x", DataType::F32, &[8, 32, 64]).unwrap();
    let y = g.op("mul", &[x.into(), 0.125.into()], &[]).unwrap()[0];
    g.output(y, "y", DataType::F32).unwrap();
    let p = plan(&cudnn, g.build().unwrap());
    let layout = p.layout();
    assert_eq!(layout.uids().len(), 3, "x, the scalar and y");
    assert_eq!(layout.io().len(), 2);
    let scalars = layout.scalars();
    assert_eq!(scalars.len(), 1);
    assert_eq!(scalars[0].data_type, DataType::F32);
    assert_eq!(scalars[0].bytes(), &0.125f32.to_ne_bytes());
}

/// cuDNN's runtime-fusion engines take a reduction as the epilogue of a matmul, over any axes (a
/// reduction on its own plans only as a channel reduction: `tests/deviceless_reductions.rs`).
#[needs_cudnn]
#[test]
fn matmul_then_row_sum_reduction() {
    let Some(cudnn) = deviceless() else { return };
    let mut g = GraphBuilder::new("matmul_row_sum");
    let a = g.input("a", DataType::F16, &[1, 128, 64]).unwrap();
    let b = g.input("b", DataType::F16, &[1, 64, 256]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let s = g.op("reduce_sum", &[c.into()], &[("dims".into(), vec![2i64].into())]).unwrap()[0];
    g.output(s, "s", DataType::F32).unwrap();
    let p = plan(&cudnn, g.build().unwrap());
    assert_eq!(p.graph().tensor_by_name("s").unwrap().dims, vec![1, 128, 1]);
}

#[needs_cudnn]
#[test]
fn build_all_builds_every_viable_candidate_and_select_switches() {
    let Some(cudnn) = deviceless() else { return };
    let options = BuildOptions {
        heuristics: vec![HeuristicMode::A, HeuristicMode::B, HeuristicMode::Fallback],
        max_workspace_bytes: Some(0),
        build_all: true,
        ..BuildOptions::default()
    };
    let g = matmul_graph("all", DataType::BF16, &[1, 128, 64], &[1, 64, 256], true, Some(PointwiseMode::Relu));
    let mut p = ExecutionPlan::build(&cudnn, &g, &options).unwrap();
    for c in p.candidates() {
        println!("  {c}");
        assert_ne!(c.state, CandidateState::Untried, "build_all tries every candidate");
        if let CandidateState::Rejected(Rejection::Duplicate { of }) = c.state {
            assert!(of < c.index);
            assert_eq!(p.candidates()[of].tag(), c.tag());
        }
    }
    let built = p.built();
    assert!(!built.is_empty());
    let last = *built.last().unwrap();
    p.select(last).unwrap();
    assert_eq!(p.selected().index, last);
    assert!(p.json().unwrap().len() > 1000);
    let not_built = p.candidates().iter().find(|c| c.state != CandidateState::Built).map(|c| c.index);
    if let Some(index) = not_built {
        assert!(matches!(p.select(index), Err(BackendError::NotBuilt { .. })));
    }
}

#[needs_cudnn]
#[test]
fn plan_json_round_trips_through_from_json() {
    let Some(cudnn) = deviceless() else { return };
    let g = matmul_graph("round_trip", DataType::F16, &[2, 64, 32], &[2, 32, 48], true, Some(PointwiseMode::Relu));
    let p = plan(&cudnn, g.clone());
    let q = ExecutionPlan::from_json(&cudnn, g.clone(), &p.json().unwrap()).unwrap();
    assert_eq!(q.selected().engine_id, p.selected().engine_id);
    assert_eq!(q.workspace_size(), p.workspace_size());
    assert_eq!(q.layout(), p.layout());
    assert!(q.json().unwrap().len() > 1000);
    // What is not a plan JSON never reaches cuDNN.
    for bad in ["", "{}", "not json"] {
        match ExecutionPlan::from_json(&cudnn, g.clone(), bad) {
            Err(BackendError::PlanMismatch { graph, mismatch }) => {
                assert_eq!(graph, "round_trip");
                assert!(matches!(*mismatch, PlanMismatch::Malformed(_)), "{bad:?}: {mismatch}");
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

/// A graph cuDNN cannot run is a typed error that lists every candidate and why it failed.
#[needs_cudnn]
#[test]
fn unrunnable_graphs_are_typed_errors() {
    let Some(cudnn) = deviceless() else { return };
    // cuDNN 9.19 proposes runtime-compiled engines for f64 pointwise math, but NVRTC fails to
    // compile them.
    let mut g = GraphBuilder::new("f64_add");
    let x = g.input("x", DataType::F64, &[1, 8, 8]).unwrap();
    let y = g.op("add", &[x.into(), x.into()], &[]).unwrap()[0];
    g.output(y, "y", DataType::F64).unwrap();
    match ExecutionPlan::build(&cudnn, &g.build().unwrap(), &BuildOptions::default()) {
        Err(e @ BackendError::NoPlan { .. }) => {
            let message = e.to_string();
            println!("{message}");
            let BackendError::NoPlan { graph, candidates, .. } = e else { unreachable!() };
            assert_eq!(graph, "f64_add");
            assert!(!candidates.is_empty());
            for c in &candidates {
                assert!(matches!(c.state, CandidateState::Rejected(_)), "{c}");
                assert!(message.contains(&c.to_string()));
            }
            assert!(candidates.iter().any(|c| matches!(&c.state, CandidateState::Rejected(Rejection::Cudnn { .. }))));
        }
        Ok(p) => panic!("f64 pointwise planned: {}", p.selected()),
        Err(e) => panic!("not a NoPlan error: {e}"),
    }
    // A reduction on its own over its innermost axis: cuDNN 9.19 proposes no engine for it as
    // written, so the backend describes it as the channel reduction its engine plans
    // (`tests/deviceless_reductions.rs` covers the forms).
    let mut g = GraphBuilder::new("lone_reduction");
    let x = g.input("x", DataType::F32, &[1, 64, 128]).unwrap();
    let s = g.op("reduce_sum", &[x.into()], &[("dims".into(), vec![2i64].into())]).unwrap()[0];
    g.output(s, "s", DataType::F32).unwrap();
    if let Err(e) = ExecutionPlan::build(&cudnn, &g.build().unwrap(), &BuildOptions::default()) {
        panic!("a lone reduction over the innermost axis does not plan: {e}");
    }
    // An input no node reads.
    let mut g = GraphBuilder::new("unused");
    let x = g.input("x", DataType::F32, &[1, 4, 4]).unwrap();
    g.input("spare", DataType::F32, &[1, 4, 4]).unwrap();
    let y = g.pointwise(PointwiseMode::Relu, &[x.into()]).unwrap();
    g.output(y, "y", DataType::F32).unwrap();
    match ExecutionPlan::build(&cudnn, &g.build().unwrap(), &BuildOptions::default()) {
        Err(BackendError::UnusedInput { tensor, .. }) => assert_eq!(tensor, "spare"),
        other => panic!("{other:?}"),
    }
}

#[needs_cudnn]
#[test]
fn bad_device_properties_are_typed_errors() {
    if deviceless().is_none() {
        return;
    }
    // Not a JSON object: refused before cuDNN sees it.
    for json in ["", "not json", "[1, 2]"] {
        match Cudnn::deviceless(json) {
            Err(CudnnError::DeviceProperties(DevicePropertiesError::NotAnObject { .. })) => {}
            other => panic!("{json:?}: {other:?}"),
        }
    }
    // An object without the properties: cuDNN's refusal, or (for a cuDNN that reads a key this
    // crate fills from the others) ours, naming the key and the loaded version.
    match Cudnn::deviceless("{}") {
        Err(CudnnError::Cudnn { descriptor, message, .. }) => {
            assert_eq!(descriptor, "CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR");
            assert!(!message.is_empty());
        }
        Err(CudnnError::DeviceProperties(DevicePropertiesError::Unfillable { version, .. })) => {
            assert_eq!(version, devprop::version_string(loaded_version()));
        }
        other => panic!("{{}}: {other:?}"),
    }
}

/// `cudnnGetVersion()` of the loaded cuDNN.
fn loaded_version() -> usize {
    deviceless().map_or(0, |cudnn| cudnn.version())
}

/// One device-properties document serves every supported cuDNN: the fixture (written by 9.19)
/// and the same document with every key of newer versions plan the same matmul on the engine
/// the loaded cuDNN picks, whatever it is (CI: 9.19; the closing note of issue 35: 9.27, 9.28).
#[test]
fn one_device_properties_document_serves_the_loaded_cudnn() {
    let Some(written_by_9_19) = deviceless() else { return };
    let complete = devprop::complete(&devprop_json()).unwrap();
    let with_newer_keys = Cudnn::deviceless(&complete)
        .unwrap_or_else(|e| panic!("cuDNN {}: {e}", devprop::version_string(written_by_9_19.version())));
    assert_eq!(with_newer_keys.device_properties(), Some(complete.as_str()));
    assert_eq!(with_newer_keys.sm(), Some(90));
    let graph = || matmul_graph("m", DataType::F16, &[1, 64, 32], &[1, 32, 48], false, None);
    let a = plan(&written_by_9_19, graph());
    let b = plan(&with_newer_keys, graph());
    assert_eq!(a.selected().engine_id, b.selected().engine_id);
    assert_eq!(a.candidates().len(), b.candidates().len());
}

/// A key the loaded cuDNN reads that cannot be derived is a typed error naming the key and the
/// loaded version, not cuDNN's `!json_object.HasMember(key)`; a cuDNN that does not read it
/// takes the document as it is.
#[test]
fn an_underivable_key_names_itself_and_the_loaded_version() {
    let Some(cudnn) = deviceless() else { return };
    let mut doc: serde_json::Value = serde_json::from_str(&devprop_json()).unwrap();
    doc["deviceName"] = "Some Future GPU".into();
    let doc = doc.to_string();
    let reads_bus_width =
        devprop::VERSIONED_KEYS.iter().any(|k| k.name == "memoryBusWidth" && k.since <= cudnn.version());
    match Cudnn::deviceless(&doc) {
        Ok(_) => assert!(!reads_bus_width, "cuDNN {} reads memoryBusWidth", cudnn.version()),
        Err(CudnnError::DeviceProperties(DevicePropertiesError::Unfillable { key, version, .. })) => {
            assert!(reads_bus_width);
            assert_eq!(key, "memoryBusWidth");
            assert_eq!(version, devprop::version_string(cudnn.version()));
        }
        Err(e) => panic!("{e}"),
    }
    // Given, it is used whatever the name.
    let with_width = devprop::with_key(&doc, "memoryBusWidth", 6144).unwrap();
    assert!(Cudnn::deviceless(&with_width).is_ok());
}

/// A deviceless context gives back the device properties it was made from (what
/// `cudnn-graph devprop` writes on a GPU machine).
#[needs_cudnn]
#[test]
fn deviceless_context_gives_back_its_device_properties() {
    let Some(cudnn) = deviceless() else { return };
    let json = std::fs::read_to_string(DEVPROP).unwrap();
    assert_eq!(cudnn.device_properties_json().unwrap(), json);
    assert_eq!(cudnn.device_properties(), Some(json.as_str()));
}

#[needs_cudnn]
#[test]
fn deviceless_plans_refuse_to_execute() {
    let Some(cudnn) = deviceless() else { return };
    let p = plan(&cudnn, matmul_graph("no_gpu", DataType::F16, &[1, 64, 64], &[1, 64, 64], false, None));
    // SAFETY: the call is refused before any pointer is used.
    let e = unsafe { p.execute_raw(&cudnn, &[0, 0, 0], 0) }.unwrap_err();
    assert!(matches!(e, BackendError::DevicelessPlan { .. }), "{e}");
    assert!(e.to_string().contains("ExecutionPlan::from_json"), "{e}");
}

/// The name the test harness gives `test` of this module (its path without the crate's name), for
/// `--exact`: the tests of this file are a module of the `suite` binary.
fn test_name(test: &str) -> String {
    match module_path!().split_once("::") {
        Some((_crate, module)) => format!("{module}::{test}"),
        None => test.to_string(),
    }
}

/// With no library on the path, everything is a typed error, never a panic. Runs this test binary
/// again with a bogus `LD_LIBRARY_PATH` (a system-wide cuDNN may still be found; then the child
/// just plans).
#[test]
fn missing_libraries_are_typed_errors_not_panics() {
    if std::env::var_os("CUDNN_GRAPH_CHILD_PROBE").is_some() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["--exact", &test_name("child_probe_without_libraries"), "--nocapture", "--test-threads", "1"])
        .env("LD_LIBRARY_PATH", "/nonexistent-cudnn-graph")
        .env("CUDNN_GRAPH_CHILD_PROBE", "1")
        .env_remove("CUDNN_GRAPH_REQUIRE_CUDNN")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let report = stdout.find("CHILD:").map(|i| stdout[i..].lines().next().unwrap_or_default());
    println!("{}", report.unwrap_or_else(|| panic!("no report from the child:\n{stdout}")));
}

/// `cuda_context(0)` where there is no libcuda (a bogus `LD_LIBRARY_PATH`) is
/// `LibraryMissing` naming libcuda, where `CudaContext::new(0)` panics inside cudarc.
#[test]
fn cuda_context_without_libcuda_is_a_typed_error() {
    if std::env::var_os("CUDNN_GRAPH_CHILD_PROBE").is_some() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["--exact", &test_name("child_probe_cuda_context"), "--nocapture", "--test-threads", "1"])
        .env("LD_LIBRARY_PATH", "/nonexistent-cudnn-graph")
        .env("CUDNN_GRAPH_CHILD_PROBE", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // A system-wide driver may still be found (on a GPU machine); then the child reports it.
    let report = stdout.find("CHILD:").map(|i| stdout[i..].lines().next().unwrap_or_default());
    let report = report.unwrap_or_else(|| panic!("no report from the child:\n{stdout}"));
    println!("{report}");
    let system_driver = std::path::Path::new("/lib/x86_64-linux-gnu/libcuda.so.1").exists();
    if !system_driver {
        assert_eq!(report, "CHILD: LibraryMissing libcuda.so.1");
    }
}

/// The child half of `cuda_context_without_libcuda_is_a_typed_error`.
#[test]
fn child_probe_cuda_context() {
    if std::env::var_os("CUDNN_GRAPH_CHILD_PROBE").is_none() {
        return;
    }
    match cuda_context(0) {
        Err(CudnnError::LibraryMissing { library, .. }) => println!("CHILD: LibraryMissing {library}"),
        Err(e) => println!("CHILD: other typed error: {e}"),
        Ok(ctx) => println!("CHILD: a driver found anyway: {:?}", ctx.name()),
    }
}

/// On a machine whose libcuda has no usable GPU (the CI stand-in, which cudarc cannot drive),
/// `cuda_context(0)` is a typed error, never a panic.
#[needs_cudnn]
#[test]
fn cuda_context_without_a_gpu_is_a_typed_error() {
    let Some(_) = deviceless() else { return };
    match cuda_context(0) {
        Ok(ctx) => println!("a GPU after all: {:?}", ctx.name()),
        Err(e) => {
            assert!(matches!(e, CudnnError::Driver { .. }), "{e}");
            println!("typed error: {e}");
        }
    }
}

/// The child half of `missing_libraries_are_typed_errors_not_panics` (does nothing on its own).
#[test]
fn child_probe_without_libraries() {
    if std::env::var_os("CUDNN_GRAPH_CHILD_PROBE").is_none() {
        return;
    }
    match Cudnn::deviceless(&devprop_json()) {
        Err(e @ CudnnError::LibraryMissing { .. }) => println!("CHILD: typed error: {e}"),
        Err(e) => println!("CHILD: other typed error: {e}"),
        Ok(cudnn) => {
            let g = matmul_graph("child", DataType::F16, &[1, 64, 64], &[1, 64, 64], false, None);
            match ExecutionPlan::build(&cudnn, &g, &BuildOptions::default()) {
                Ok(p) => println!("CHILD: libraries found anyway; planned {}", p.selected()),
                Err(e) => println!("CHILD: libraries found anyway; typed error: {e}"),
            }
        }
    }
}

/// Every cuDNN pointwise mode, alone on `[16, 128]` tensors (f32, or bool for the logical ops),
/// plans deviceless: comparisons give bool, `gen_index` i32, the logical ops need cuDNN's boolean
/// math precision (as cudnn-frontend sets for its attention masks). `gpu_backend.rs` runs the
/// same cases on the H200.
#[needs_cudnn]
#[test]
fn every_pointwise_mode_plans() {
    let Some(cudnn) = deviceless() else { return };
    let cases = common::pointwise::cases();
    assert_eq!(cases.len(), PointwiseMode::ALL.len());
    for case in cases {
        plan(&cudnn, case.graph);
    }
}

/// A bool graph output is packed bits in memory: its rows must start on a byte. cuDNN 9.19
/// proposes no engine otherwise; the lowering says why first (`bool.byte_rows`).
#[needs_cudnn]
#[test]
fn bool_tensors_in_memory_need_byte_aligned_rows() {
    let Some(cudnn) = deviceless() else { return };
    for inner in [8i64, 104, 100] {
        let mut g = GraphBuilder::new(format!("cmp_gt_{inner}"));
        let a = g.input("a", DataType::F32, &[16, inner]).unwrap();
        let b = g.input("b", DataType::F32, &[16, inner]).unwrap();
        let m = g.pointwise(PointwiseMode::CmpGt, &[a.into(), b.into()]).unwrap();
        g.output(m, "m", DataType::Bool).unwrap();
        let graph = g.build().unwrap();
        if inner % 8 == 0 {
            plan(&cudnn, graph);
        } else {
            match ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()) {
                Err(e @ BackendError::SupportRule { rule: "bool.byte_rows", .. }) => {
                    assert!(e.to_string().contains("bool tensor `m` [16, 100] with strides [100, 1]"), "{e}");
                }
                other => panic!("not the bool.byte_rows rule: {:?}", other.map(|p| p.selected().to_string())),
            }
        }
    }
}

/// A decode GEMM (one row: the Llama layer's projections at T = 1): cuDNN 9.10.2 to 9.14's
/// deviceless heuristics divide by zero on it (SIGFPE, a dead process), so on those versions it
/// is refused by name; on the others it plans.
#[test]
fn a_decode_gemm_on_a_known_bad_cudnn_is_refused_by_name() {
    let Some(cudnn) = deviceless() else { return };
    let graph = matmul_graph("decode_q", DataType::BF16, &[1, 1, 4096], &[1, 4096, 4096], false, None);
    let known_bad = support::known_bad(cudnn.version(), support::Condition::DevicelessSingleRowMatmul).is_some();
    match ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()) {
        Ok(plan) => {
            assert!(!known_bad, "cuDNN {} is on the known-bad table", cudnn.version());
            assert!(plan.selected().engine_id.is_some());
        }
        Err(e @ BackendError::KnownBad { version, .. }) => {
            assert!(known_bad);
            assert_eq!(version, cudnn.version());
            let m = e.to_string();
            let loaded = devprop::version_string(cudnn.version());
            assert!(m.contains("matmul `") && m.contains(&format!("cuDNN {loaded} is known to fail")), "{m}");
        }
        Err(e) => panic!("{e}"),
    }
}

/// `slice [1:3, 8:40, :]` + an f16 matmul, and an f16 matmul with `B` broadcast over the batch:
/// cuDNN 9.14 computes both wrongly on engine 0 (H100: infinities, and a batch left unwritten), so
/// on that version engine 0 is passed over, with the reason; on the others it stays a candidate
/// like any engine.
#[test]
fn f16_matmuls_pass_over_a_known_bad_engine() {
    let Some(cudnn) = deviceless() else { return };
    let mut g = GraphBuilder::new("broadcast_matmul");
    let a = g.input("a", DataType::F16, &[2, 64, 64]).unwrap();
    let b = g.input("b", DataType::F16, &[1, 64, 64]).unwrap();
    let c = g.matmul(a, b).unwrap();
    g.output(c, "c", DataType::F16).unwrap();
    assert_engine_0_passed_over(&cudnn, g.build().unwrap());
    let mut g = GraphBuilder::new("slice_matmul");
    let a = g.input("a", DataType::F16, &[4, 64, 32]).unwrap();
    let b = g.input("b", DataType::F16, &[1, 32, 48]).unwrap();
    let attrs = [
        ("start".to_string(), cudnn_runtime::ops::AttrValue::IntList(vec![1, 8, 0])),
        ("limit".to_string(), cudnn_runtime::ops::AttrValue::IntList(vec![3, 40, 32])),
    ];
    let s = g.op("slice", &[a.into()], &attrs).unwrap()[0];
    let c = g.matmul(s, b).unwrap();
    g.output(c, "c", DataType::F16).unwrap();
    assert_engine_0_passed_over(&cudnn, g.build().unwrap());
}

/// Engine 0 is passed over, with the loaded version named, exactly where the known-bad table
/// says so for f16 matmuls.
fn assert_engine_0_passed_over(cudnn: &cudnn_runtime::backend::Cudnn, graph: cudnn_runtime::Graph) {
    let plan = plan(cudnn, graph);
    let known_bad = support::known_bad(cudnn.version(), support::Condition::F16MatmulEngine0).is_some();
    let loaded = format!("cuDNN {} is known to fail", devprop::version_string(cudnn.version()));
    let passed_over = |c: &&cudnn_runtime::backend::Candidate| matches!(&c.state, CandidateState::Rejected(Rejection::Other { message }) if message.contains(&loaded));
    for c in plan.candidates() {
        if c.engine_id == Some(0) {
            assert_eq!(passed_over(&c), known_bad, "{c}");
        } else {
            assert!(!passed_over(&c), "{c}");
        }
    }
    if known_bad {
        assert_ne!(plan.selected().engine_id, Some(0));
    }
}
