//! Scaled fp8 matmul planned deviceless for the H200 with cuDNN 9.19: cudnn-frontend's
//! `samples/cpp/matmul/fp8_matmul.cpp` and `MatmulFP8Node` as existing ops (`matmul` of two fp8
//! tensors, `mul` by each descale, optional bias and relu, `reduce_amax`, a `mul` by the output's
//! scale before an fp8 output); the dtype rules that refuse what cuDNN has no engine for; plan
//! payloads round trip.
//!
//! Needs libcudnn 9 (see `deviceless.rs`); without it each test is ignored (as it was built), unless
//! `CUDNN_GRAPH_REQUIRE_CUDNN=1`.
#![cfg(feature = "cudnn")]

use cudnn_runtime::backend::{BuildOptions, ExecutionPlan, HeuristicMode};
use cudnn_runtime::engines::{CacheSource, PlanCache};
use cudnn_runtime::ops::{AttrValue, PointwiseMode};
use cudnn_runtime::payload::plan::{read_payload, write_payload, Expect, PlanOrigin, SerializeOptions};
use cudnn_runtime::serialize::{structure_from_json, structure_to_json};
use cudnn_runtime::{Context, DataType, Graph, GraphBuilder, GraphError};

use crate::common;

use common::{deviceless, plan};

use DataType::{Fp8E4M3 as E4, Fp8E5M2 as E5, BF16, F16, F32};

/// A scaled fp8 matmul `[1, 256, 128] · [1, 128, 256]`.
#[derive(Clone, Copy)]
struct Fp8Matmul {
    a: DataType,
    b: DataType,
    /// B stored column-major (`[1, K, N]` with strides `[K·N, 1, K]`), as cuBLASLt takes it.
    b_col_major: bool,
    /// The descale of A: its type and dims (`[1, 1, 1]` per tensor, `[1, M, 1]` per row).
    descale_a: (DataType, [i64; 3]),
    /// bias (bf16 `[1, 1, N]`) then relu after the descales.
    bias_relu: bool,
    /// `reduce_amax` of the descaled values, written before the output's scale (else after).
    amax: Option<bool>,
    out: DataType,
}

const PLAIN: Fp8Matmul = Fp8Matmul {
    a: E4,
    b: E4,
    b_col_major: false,
    descale_a: (F32, [1, 1, 1]),
    bias_relu: false,
    amax: None,
    out: BF16,
};

impl Fp8Matmul {
    fn graph(self, name: &str) -> Graph {
        let (m, n, k) = (256, 256, 128);
        let mut g = GraphBuilder::new(name);
        let a = g.input("a", self.a, &[1, m, k]).unwrap();
        let b = g.input("b", self.b, &[1, k, n]).unwrap();
        if self.b_col_major {
            g.set_dim_order(b, &[0, 2, 1]).unwrap();
        }
        let da = g.input("descale_a", self.descale_a.0, &self.descale_a.1).unwrap();
        let db = g.input("descale_b", F32, &[1, 1, 1]).unwrap();
        let c = g.matmul(a, b).unwrap();
        let c = g.pointwise(PointwiseMode::Mul, &[c.into(), da.into()]).unwrap();
        let mut d = g.pointwise(PointwiseMode::Mul, &[c.into(), db.into()]).unwrap();
        if self.bias_relu {
            let bias = g.input("bias", BF16, &[1, 1, n]).unwrap();
            d = g.pointwise(PointwiseMode::Add, &[d.into(), bias.into()]).unwrap();
            d = g.pointwise(PointwiseMode::Relu, &[d.into()]).unwrap();
        }
        let dims = [("dims".to_string(), AttrValue::IntList(vec![0, 1, 2]))];
        let amax = |g: &mut GraphBuilder| {
            let r = g.op("reduce_amax", &[d.into()], &dims).unwrap()[0];
            g.output(r, "amax", F32).unwrap();
        };
        if self.amax == Some(true) {
            amax(&mut g);
        }
        let y = if matches!(self.out, E4 | E5) {
            let scale = g.input("scale_y", F32, &[1, 1, 1]).unwrap();
            g.pointwise(PointwiseMode::Mul, &[d.into(), scale.into()]).unwrap()
        } else {
            d
        };
        if self.amax == Some(false) {
            amax(&mut g);
        }
        g.output(y, "y", self.out).unwrap();
        g.build().unwrap()
    }
}

/// Every form plans as one kernel (engine 7, runtime-compiled, on cuDNN 9.19).
#[needs_cudnn]
#[test]
fn scaled_fp8_matmuls_plan_as_one_kernel() {
    let Some(cudnn) = deviceless() else { return };
    let cases = [
        ("e4m3_e4m3_to_bf16", PLAIN),
        ("e4m3_e5m2_to_bf16", Fp8Matmul { b: E5, ..PLAIN }),
        ("e5m2_e4m3_to_bf16", Fp8Matmul { a: E5, ..PLAIN }),
        ("e5m2_e5m2_to_bf16", Fp8Matmul { a: E5, b: E5, ..PLAIN }),
        ("b_column_major", Fp8Matmul { b_col_major: true, ..PLAIN }),
        ("to_f16", Fp8Matmul { out: F16, ..PLAIN }),
        ("to_f32", Fp8Matmul { out: F32, ..PLAIN }),
        ("to_e4m3_scaled", Fp8Matmul { out: E4, ..PLAIN }),
        ("to_e5m2_scaled", Fp8Matmul { out: E5, ..PLAIN }),
        ("bias_relu", Fp8Matmul { bias_relu: true, ..PLAIN }),
        ("bias_relu_b_column_major", Fp8Matmul { bias_relu: true, b_col_major: true, ..PLAIN }),
        ("amax_to_bf16", Fp8Matmul { amax: Some(false), ..PLAIN }),
        // cudnn-frontend's MatmulFP8Node: the amax of the values before the output's scale.
        ("amax_then_scale_to_e4m3", Fp8Matmul { amax: Some(true), out: E4, ..PLAIN }),
        ("scale_then_amax_to_e4m3", Fp8Matmul { amax: Some(false), out: E4, ..PLAIN }),
        ("bias_relu_amax_to_e4m3", Fp8Matmul { bias_relu: true, amax: Some(true), out: E4, ..PLAIN }),
        ("descale_bf16", Fp8Matmul { descale_a: (BF16, [1, 1, 1]), ..PLAIN }),
        ("descale_per_row", Fp8Matmul { descale_a: (F32, [1, 256, 1]), ..PLAIN }),
    ];
    for (name, case) in cases {
        let graph = case.graph(name);
        let p = plan(&cudnn, &graph);
        assert_eq!(p.parts().len(), 1, "{name}: one kernel");
        // Asked for one kernel, it is one kernel: no part was cut from it.
        ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default().single_kernel())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// Every candidate of heuristics A, B and fallback is built (what `autotune` times on a GPU).
#[needs_cudnn]
#[test]
fn every_candidate_builds_for_autotune() {
    let Some(cudnn) = deviceless() else { return };
    let options =
        BuildOptions::default().modes(&[HeuristicMode::A, HeuristicMode::B, HeuristicMode::Fallback]).all_plans();
    for (name, case) in [("plain", PLAIN), ("bias_relu", Fp8Matmul { bias_relu: true, ..PLAIN })] {
        let p = ExecutionPlan::build(&cudnn, &case.graph(name), &options).unwrap_or_else(|e| panic!("{name}: {e}"));
        for c in p.candidates() {
            println!("{name}: {c}");
        }
        assert!(!p.built().is_empty(), "{name}");
    }
}

/// fp8 beside a wider type, and an f16 compute type, have no engine in cuDNN 9.19: the builder
/// refuses both with a typed error naming the node and port (the same rule `graph!` checks).
#[test]
fn what_cudnn_has_no_engine_for_is_refused_by_name() {
    let mut g = GraphBuilder::new("mixed");
    let a = g.input("a", E4, &[1, 16, 32]).unwrap();
    let b = g.input("b", BF16, &[1, 32, 8]).unwrap();
    match g.matmul(a, b) {
        Err(GraphError::Shape { op: "matmul", port: Some("B"), source, .. }) => {
            assert!(source.to_string().contains("does not take bf16"), "{source}")
        }
        other => panic!("{other:?}"),
    }
    let mut g = GraphBuilder::new("f16_compute");
    g.context(Context { intermediate_data_type: F32, compute_data_type: F16 });
    let a = g.input("a", E4, &[1, 16, 32]).unwrap();
    let b = g.input("b", E5, &[1, 32, 8]).unwrap();
    match g.matmul(a, b) {
        Err(GraphError::Shape { op: "matmul", port: Some("A"), source, .. }) => {
            assert!(source.to_string().contains("an fp8 matmul (port A is fp8_e4m3) computes in f32"), "{source}")
        }
        other => panic!("{other:?}"),
    }
    // A graph read from JSON is held to the rule too.
    let mut graph = PLAIN.graph("tampered");
    graph.context.compute_data_type = F16;
    assert!(matches!(graph.validate(), Err(GraphError::Shape { op: "matmul", port: Some("A"), .. })));
}

/// The structure and the plan payload round trip: the fp8 types, descales and amax included.
#[needs_cudnn]
#[test]
fn structure_and_payload_round_trip() {
    let graph = Fp8Matmul { bias_relu: true, amax: Some(true), out: E4, b_col_major: true, ..PLAIN }.graph("fp8_rt");
    let text = structure_to_json(&graph);
    assert!(text.contains("\"FP8_E4M3\""), "{text}");
    let back = structure_from_json(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(back, graph);
    assert_eq!(back.fingerprint(), graph.fingerprint());
    let Some(cudnn) = deviceless() else { return };
    let built = plan(&cudnn, &graph);
    let bytes =
        write_payload(&built, &PlanOrigin::of(&cudnn), SerializeOptions { structure: true }, &Expect::default())
            .unwrap();
    let (loaded, _) = read_payload(&cudnn, &bytes, None, &Expect::default()).unwrap();
    assert_eq!(loaded.graph(), &graph);
    assert_eq!(loaded.selected().engine_id, built.selected().engine_id);
    let plan_only =
        write_payload(&built, &PlanOrigin::of(&cudnn), SerializeOptions { structure: false }, &Expect::default())
            .unwrap();
    let (reloaded, _) = read_payload(&cudnn, &plan_only, Some(graph.clone()), &Expect::default()).unwrap();
    assert_eq!(reloaded.workspace_size(), built.workspace_size());
}

/// The plan cache serves fp8 graphs like any other: a miss builds, a repeat is a memory hit of
/// the same plan, and a graph differing only in its output's fp8 format is another key.
#[needs_cudnn]
#[test]
fn plan_cache_keys_fp8_graphs() {
    let Some(cudnn) = deviceless() else { return };
    let cache = PlanCache::in_memory();
    let options = BuildOptions::default();
    let graph = Fp8Matmul { out: E4, amax: Some(true), ..PLAIN }.graph("cached");
    let cold = cache.get_or_build(&cudnn, &graph, &Expect::default(), &options).unwrap();
    assert_eq!(cold.source, CacheSource::Built);
    let warm = cache.get_or_build(&cudnn, &graph, &Expect::default(), &options).unwrap();
    assert_eq!(warm.source, CacheSource::Memory);
    assert!(std::sync::Arc::ptr_eq(&warm.plan, &cold.plan));
    let e5 = Fp8Matmul { out: E5, amax: Some(true), ..PLAIN }.graph("cached");
    assert_ne!(e5.fingerprint(), graph.fingerprint());
    let other = cache.get_or_build(&cudnn, &e5, &Expect::default(), &options).unwrap();
    assert_eq!(other.source, CacheSource::Built);
    assert_eq!(cache.len(), 2);
}

/// The conversions `tests/gpu_suite/gpu_fp8.rs` checks code by code on the H200 plan alone: f32 → fp8
/// and fp8 → f32 through `identity`.
#[needs_cudnn]
#[test]
fn conversions_plan() {
    let Some(cudnn) = deviceless() else { return };
    for (from, to) in [(F32, E4), (F32, E5), (E4, F32), (E5, F32)] {
        let mut g = GraphBuilder::new(format!("{from}_to_{to}"));
        let x = g.input("x", from, &[1, 2048]).unwrap();
        let y = g.pointwise(PointwiseMode::Identity, &[x.into()]).unwrap();
        g.output(y, "y", to).unwrap();
        plan(&cudnn, &g.build().unwrap());
    }
}
