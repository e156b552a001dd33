//! Helpers of the integration tests: fixed-seed random inputs, and (with the `cudnn` feature)
//! the deviceless H200 context, planning with the checks a usable plan must pass, and the typed
//! "no engine" outcome.

#![allow(dead_code)]

pub mod pointwise;

use cudnn_runtime::reference::{run_arrays, Array};
use cudnn_runtime::rng::SplitMix64;
use cudnn_runtime::Graph;

#[cfg(feature = "cudnn")]
use cudnn_runtime::backend::{BackendError, BuildOptions, CandidateState, Cudnn, CudnnError, ExecutionPlan};

/// Fixed-seed values in `[lo, hi)`, never all zeros.
pub fn random(seed: u64, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    SplitMix64::new(seed).uniform_vec(n, lo, hi)
}

/// Fixed-seed inputs of `graph` in the order of `graph.inputs()`: values of magnitude in
/// `[0.25, 1)` and either sign, rounded to each tensor's type (so never zero).
pub fn inputs(graph: &Graph, seed: u64) -> Vec<Array> {
    let mut rng = SplitMix64::new(seed);
    graph
        .inputs()
        .iter()
        .map(|id| {
            let t = graph.tensor(*id);
            let mut a = Array::from_fn(&t.dims, |_| rng.nonzero(0.25, 1.0));
            a.round_to(t.data_type);
            a
        })
        .collect()
}

/// `graph`'s outputs on the reference engine, for `inputs` in the order of `graph.inputs()`.
pub fn reference(graph: &Graph, inputs: &[Array]) -> Vec<Array> {
    let mut values = vec![None; graph.tensors.len()];
    for (id, a) in graph.inputs().iter().zip(inputs) {
        values[id.0] = Some(a.clone());
    }
    run_arrays(graph, values).unwrap_or_else(|e| panic!("{}: {e}", graph.name))
}

/// The H200's device properties.
pub const DEVPROP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/h200-devprop.json");

#[cfg(feature = "cudnn")]
/// The deviceless context, or `None` (after saying why) when the libraries are missing and that
/// is allowed (`CUDNN_GRAPH_REQUIRE_CUDNN` is not `1`).
pub fn deviceless() -> Option<Cudnn> {
    let json = std::fs::read_to_string(DEVPROP).unwrap_or_else(|e| panic!("reading {DEVPROP}: {e}"));
    match Cudnn::deviceless(&json) {
        Ok(cudnn) => Some(cudnn),
        Err(e @ CudnnError::LibraryMissing { .. }) => {
            assert!(
                std::env::var("CUDNN_GRAPH_REQUIRE_CUDNN").as_deref() != Ok("1"),
                "CUDNN_GRAPH_REQUIRE_CUDNN=1 but {e}"
            );
            println!("skipped: {e}");
            None
        }
        Err(e) => panic!("deviceless cuDNN context: {e}"),
    }
}

#[cfg(feature = "cudnn")]
/// Whether `e` is a support rule that only the loaded cuDNN's version refuses: its `needs`
/// names the capability the loaded version lacks and a newer one that brings it
/// (`cudnn_runtime::capabilities::Missing`, "... needs cuDNN 9.15.1 or newer; loaded 9.14.0"). A
/// refusal the tests of a form that 9.19 plans accept on an older cuDNN, and only there.
pub fn lacks_capability(cudnn: &Cudnn, e: &cudnn_runtime::backend::BackendError) -> bool {
    use cudnn_runtime::backend::BackendError;
    matches!(e, BackendError::SupportRule { needs: Some(m), .. } if m.loaded == cudnn.version() && m.since > m.loaded)
}

#[cfg(feature = "cudnn")]
/// Plans `graph`, or `None` where the loaded cuDNN is one the known-bad table refuses one-row
/// matmuls on (9.10.2–9.14 deviceless: `BackendError::KnownBad`, since those versions kill the
/// process). Any other error, and `KnownBad` on a version the table does not name, fails.
pub fn plan_unless_known_bad(cudnn: &Cudnn, graph: &Graph) -> Option<ExecutionPlan> {
    use cudnn_runtime::backend::support::{known_bad, Condition};
    use cudnn_runtime::backend::{BackendError, BuildOptions};
    match ExecutionPlan::build(cudnn, graph, &BuildOptions::default()) {
        Ok(plan) => Some(plan),
        Err(e @ BackendError::KnownBad { .. })
            if known_bad(cudnn.version(), Condition::DevicelessSingleRowMatmul).is_some() =>
        {
            println!("{}: refused on cuDNN {}, as the known-bad table says: {e}", graph.name, cudnn.version());
            None
        }
        Err(e) => panic!("{}: {e}", graph.name),
    }
}

#[cfg(feature = "cudnn")]
/// Plans `graph` and checks what a usable plan must have: candidates, a built engine, a
/// serializable plan.
pub fn plan(cudnn: &Cudnn, graph: &Graph) -> ExecutionPlan {
    let name = &graph.name;
    let plan = ExecutionPlan::build(cudnn, graph, &BuildOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(!plan.candidates().is_empty(), "{name}: no candidates");
    assert_eq!(plan.selected().state, CandidateState::Built, "{name}");
    assert!(plan.selected().engine_id.is_some(), "{name}");
    let json = plan.json().unwrap_or_else(|e| panic!("{name}: json: {e}"));
    assert!(json.len() > 1000, "{name}: plan JSON of {} bytes", json.len());
    // The plan's JSON must bind to the graph it was made from (every tensor and operation of its
    // operation graph equal to the lowering's), or no payload of it would load.
    let loaded =
        ExecutionPlan::from_json(cudnn, graph.clone(), &json).unwrap_or_else(|e| panic!("{name}: reload: {e}"));
    assert_eq!(loaded.workspace_size(), plan.workspace_size(), "{name}: reloaded workspace");
    println!(
        "{name}: {} candidates, built {} ({} B workspace)",
        plan.candidates().len(),
        plan.selected(),
        plan.workspace_size()
    );
    plan
}

#[cfg(feature = "cudnn")]
/// Asserts cuDNN has no one-kernel plan for `graph` (built with `Fusion::Single`): a typed
/// [`BackendError::NoPlan`] naming the graph where the fusion rules would try it whole, or a
/// [`BackendError::CannotFuse`] naming the op pair where they would not. (With the default
/// `Fusion::Auto` such a graph may still plan as several kernels.)
pub fn no_plan(cudnn: &Cudnn, graph: &Graph) {
    match ExecutionPlan::build(cudnn, graph, &BuildOptions::default().single_kernel()) {
        Err(e @ (BackendError::NoPlan { .. } | BackendError::CannotFuse { .. })) => {
            println!("{}: no plan (typed): {}", graph.name, e.to_string().lines().next().unwrap_or_default());
            let (BackendError::NoPlan { graph: name, .. } | BackendError::CannotFuse { graph: name, .. }) = e else {
                unreachable!()
            };
            assert_eq!(name, graph.name);
        }
        Ok(p) => panic!(
            "{}: this cuDNN plans it now ({}); move it to the planned list and docs/ops.md",
            graph.name,
            p.selected()
        ),
        Err(e) => panic!("{}: not a NoPlan error: {e}", graph.name),
    }
}

#[cfg(feature = "cudnn")]
/// The largest difference between `plan` run through its memory on the CPU
/// ([`ExecutionPlan::emulate`]) and the whole graph on the reference, relative to the largest
/// output magnitude, over the fixed-seed [`inputs`] of `seed`.
pub fn emulated_error(plan: &ExecutionPlan, seed: u64) -> f64 {
    let graph = plan.graph();
    let inputs = inputs(graph, seed);
    let want = reference(graph, &inputs);
    let got = plan.emulate(&inputs).unwrap_or_else(|e| panic!("{}: emulate: {e}", graph.name));
    let mut worst: f64 = 0.0;
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.dims, w.dims);
        let scale = w.data.iter().fold(f64::MIN_POSITIVE, |m, v| m.max(v.abs()));
        for (a, b) in g.data.iter().zip(&w.data) {
            assert!(a.is_finite(), "emulated output reads memory no part wrote");
            worst = worst.max((a - b).abs() / scale);
        }
    }
    worst
}
