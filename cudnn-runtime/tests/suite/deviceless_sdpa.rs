//! Deviceless planning of attention graphs for the H200 of `tests/fixtures/h200-devprop.json`:
//! real cuDNN lowering (fused `SDPA_FWD` and the composite subgraph), heuristics and plan
//! compilation, forward and backward.
//!
//! Needs libcudnn 9 and a libcuda.so.1 (on CI, the stand-in): `export LD_LIBRARY_PATH=$(bash
//! .ci/setup-cudnn.sh DIR | tail -1)`. Without them each test is ignored (as it was built), unless
//! `CUDNN_GRAPH_REQUIRE_CUDNN=1`, which turns a missing library into a failure.
#![cfg(feature = "cudnn")]

use cudnn_runtime::backend::{BackendError, BuildOptions, CandidateState, Cudnn, ExecutionPlan};
use cudnn_runtime::capabilities::{self, Capability};
use cudnn_runtime::ops::AttrValue;
use cudnn_runtime::{DataType, Graph, GraphBuilder, TensorId};

use crate::common;

use common::deviceless;

/// Logical `[B, H, S, D]` dims with BSHD strides (`[S·H·D, D, H·D, 1]`).
fn bshd(dims: [i64; 4]) -> [i64; 4] {
    let [_, h, s, d] = dims;
    [s * h * d, d, h * d, 1]
}

/// An attention problem: `[b, h_q, h_kv, s_q, s_kv, d]`.
#[derive(Clone, Copy)]
struct Shape {
    b: i64,
    h_q: i64,
    h_kv: i64,
    s_q: i64,
    s_kv: i64,
    d: i64,
}

const SMALL: Shape = Shape { b: 2, h_q: 8, h_kv: 8, s_q: 256, s_kv: 256, d: 64 };
const GQA: Shape = Shape { b: 2, h_q: 8, h_kv: 2, s_q: 200, s_kv: 328, d: 128 };
const BENCH: Shape = Shape { b: 4, h_q: 16, h_kv: 16, s_q: 4096, s_kv: 4096, d: 128 };

/// Attributes as the tests write them.
type Attrs = Vec<(&'static str, AttrValue)>;

fn attrs(list: &[(&str, AttrValue)]) -> Vec<(String, AttrValue)> {
    list.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

/// The optional inputs `op`'s attributes ask for, after Q, K, V (and O, dO, Stats).
fn optional_inputs(g: &mut GraphBuilder, sh: Shape, names: &[&'static str]) -> Vec<TensorId> {
    names
        .iter()
        .map(|&n| match n {
            "Attn_scale" => g.input("attn_scale", DataType::F32, &[1, 1, 1, 1]).unwrap(),
            "Bias" => g.input("bias", DataType::BF16, &[1, sh.h_q, sh.s_q, sh.s_kv]).unwrap(),
            "SEQ_LEN_Q" => g.input("seq_len_q", DataType::I32, &[sh.b, 1, 1, 1]).unwrap(),
            "SEQ_LEN_KV" => g.input("seq_len_kv", DataType::I32, &[sh.b, 1, 1, 1]).unwrap(),
            "Seed" => g.input("seed", DataType::I64, &[1, 1, 1, 1]).unwrap(),
            "Offset" => g.input("offset", DataType::I64, &[1, 1, 1, 1]).unwrap(),
            other => panic!("{other}"),
        })
        .collect()
}

fn qkv(g: &mut GraphBuilder, sh: Shape, strided: bool) -> [TensorId; 3] {
    let dims = [[sh.b, sh.h_q, sh.s_q, sh.d], [sh.b, sh.h_kv, sh.s_kv, sh.d], [sh.b, sh.h_kv, sh.s_kv, sh.d]];
    let mut ids = [TensorId(0); 3];
    for (i, (name, d)) in ["q", "k", "v"].iter().zip(dims).enumerate() {
        ids[i] = g.input(name, DataType::BF16, &d).unwrap();
        if strided {
            g.set_strides(ids[i], &bshd(d)).unwrap();
        }
    }
    ids
}

fn forward(sh: Shape, list: &[(&str, AttrValue)], strided: bool) -> Graph {
    let mut g = GraphBuilder::new("sdpa_fwd");
    let [q, k, v] = qkv(&mut g, sh, strided);
    let a = attrs(list);
    let op = cudnn_runtime::ops::Op::from_call("sdpa", &a).unwrap();
    let names: Vec<&'static str> = op.inputs().iter().skip(3).map(|p| p.name).collect();
    let mut ins = vec![q.into(), k.into(), v.into()];
    ins.extend(optional_inputs(&mut g, sh, &names).into_iter().map(cudnn_runtime::Operand::Tensor));
    let outs = g.op("sdpa", &ins, &a).unwrap();
    let o = g.output(outs[0], "o", DataType::BF16).unwrap();
    if strided {
        g.set_strides(o, &bshd([sh.b, sh.h_q, sh.s_q, sh.d])).unwrap();
    }
    if outs.len() > 1 {
        g.output(outs[1], "stats", DataType::F32).unwrap();
    }
    g.build().unwrap()
}

fn backward(sh: Shape, list: &[(&str, AttrValue)]) -> Graph {
    let mut g = GraphBuilder::new("sdpa_bwd");
    let [q, k, v] = qkv(&mut g, sh, false);
    let o = g.input("o", DataType::BF16, &[sh.b, sh.h_q, sh.s_q, sh.d]).unwrap();
    let d_o = g.input("d_o", DataType::BF16, &[sh.b, sh.h_q, sh.s_q, sh.d]).unwrap();
    let stats = g.input("stats", DataType::F32, &[sh.b, sh.h_q, sh.s_q, 1]).unwrap();
    let a = attrs(list);
    let op = cudnn_runtime::ops::Op::from_call("sdpa_backward", &a).unwrap();
    let names: Vec<&'static str> = op.inputs().iter().skip(6).map(|p| p.name).collect();
    let mut ins = vec![q.into(), k.into(), v.into(), o.into(), d_o.into(), stats.into()];
    ins.extend(optional_inputs(&mut g, sh, &names).into_iter().map(cudnn_runtime::Operand::Tensor));
    let outs = g.op("sdpa_backward", &ins, &a).unwrap();
    for (t, name) in outs.iter().zip(["d_q", "d_k", "d_v", "d_bias"]) {
        let dt = DataType::BF16;
        g.output(*t, name, dt).unwrap();
    }
    g.build().unwrap()
}

/// Plans `graph` and checks what a usable plan has; returns the plan.
fn plan(cudnn: &Cudnn, what: &str, graph: &Graph) -> ExecutionPlan {
    let plan = ExecutionPlan::build(cudnn, graph, &BuildOptions::default()).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(plan.selected().state, CandidateState::Built, "{what}");
    assert!(plan.selected().engine_id.is_some(), "{what}");
    let json = plan.json().unwrap_or_else(|e| panic!("{what}: json: {e}"));
    println!(
        "{what}: {} candidates, built {} ({} B workspace, {} B ahead of cuDNN's), plan JSON {} B",
        plan.candidates().len(),
        plan.selected(),
        plan.workspace_size(),
        plan.layout().workspace_prefix(),
        json.len()
    );
    plan
}

#[needs_cudnn]
#[test]
fn forward_graphs_plan() {
    let Some(cudnn) = deviceless() else { return };
    let cases: Vec<(&str, Shape, Attrs, bool)> = vec![
        ("fused (auto)", SMALL, vec![], false),
        ("fused with stats", SMALL, vec![("training", true.into())], false),
        ("fused BSHD", SMALL, vec![], true),
        ("composite", SMALL, vec![("implementation", "composite".into())], false),
        ("causal", SMALL, vec![("causal", true.into())], false),
        ("causal training", SMALL, vec![("causal", true.into()), ("training", true.into())], false),
        ("causal GQA odd lengths", GQA, vec![("causal", true.into()), ("alignment", "bottom_right".into())], false),
        ("causal BSHD", SMALL, vec![("causal", true.into())], true),
        ("sliding window", SMALL, vec![("causal", true.into()), ("window", 64.into())], false),
        ("bias", SMALL, vec![("bias", true.into()), ("scale", 0.125.into())], false),
        ("scale tensor", SMALL, vec![("scale_tensor", true.into()), ("causal", true.into())], false),
        ("padding mask", SMALL, vec![("padding_mask", true.into()), ("causal", true.into())], false),
        ("dropout", SMALL, vec![("dropout", 0.1.into()), ("training", true.into())], false),
        ("benchmark causal", BENCH, vec![("causal", true.into())], false),
        ("benchmark non-causal", BENCH, vec![], false),
        ("benchmark non-causal composite", BENCH, vec![("implementation", "composite".into())], false),
    ];
    for (what, sh, list, strided) in cases {
        let graph = forward(sh, &list, strided);
        plan(&cudnn, what, &graph);
    }
}

#[needs_cudnn]
#[test]
fn backward_graphs_plan() {
    let Some(cudnn) = deviceless() else { return };
    let cases: Vec<(&str, Shape, Attrs)> = vec![
        ("plain", SMALL, vec![]),
        ("causal", SMALL, vec![("causal", true.into())]),
        ("causal GQA odd lengths", GQA, vec![("causal", true.into())]),
        ("deterministic", SMALL, vec![("causal", true.into()), ("deterministic", true.into())]),
        ("bias and dBias", SMALL, vec![("bias", true.into()), ("d_bias", true.into())]),
        ("padding mask", SMALL, vec![("padding_mask", true.into()), ("causal", true.into())]),
        ("sliding window", SMALL, vec![("causal", true.into()), ("window", 64.into())]),
        ("dropout", SMALL, vec![("dropout", 0.1.into())]),
        ("benchmark causal", BENCH, vec![("causal", true.into())]),
    ];
    for (what, sh, list) in cases {
        let graph = backward(sh, &list);
        // Odd key lengths without a padding mask need cuDNN 9.15.1: refused by name before it.
        match ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()) {
            Err(e) if common::lacks_capability(&cudnn, &e) => {
                println!("{what}: refused on this cuDNN: {e}");
                continue;
            }
            _ => {}
        }
        let p = plan(&cudnn, what, &graph);
        assert!(p.layout().workspace_prefix() > 0, "{what}: the softmax sums live in the workspace");
    }
}

#[needs_cudnn]
#[test]
fn support_rules_fail_with_their_names() {
    let Some(cudnn) = deviceless() else { return };
    let graph = forward(SMALL, &[("causal", true.into()), ("implementation", "fused".into())], false);
    let e = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap_err();
    // Before cuDNN 9.13.1 there is no fused operation at all: that rule comes first.
    let fused = capabilities::has(cudnn.version(), Capability::FusedSdpaForward);
    match &e {
        BackendError::SupportRule { rule, node, .. } => {
            assert_eq!(*rule, if fused { "sdpa.fused.causal" } else { "sdpa.fused.version" });
            assert_eq!(node, "sdpa_0");
        }
        other => panic!("{other}"),
    }
    println!("{e}");
    // A head dim whose stride is not 1.
    let mut g = GraphBuilder::new("bad_strides");
    let [q, k, v] = qkv(&mut g, SMALL, false);
    g.set_strides(q, &[8 * 256 * 64 * 2, 256 * 64 * 2, 64 * 2, 2]).unwrap();
    let o = g.op("sdpa", &[q.into(), k.into(), v.into()], &[]).unwrap()[0];
    g.output(o, "o", DataType::BF16).unwrap();
    let e = ExecutionPlan::build(&cudnn, &g.build().unwrap(), &BuildOptions::default()).unwrap_err();
    assert!(matches!(&e, BackendError::SupportRule { rule: "sdpa.strides", .. }), "{e}");
}

#[needs_cudnn]
#[test]
fn plan_json_round_trips_with_internal_tensors() {
    let Some(cudnn) = deviceless() else { return };
    for graph in [forward(SMALL, &[("causal", true.into())], false), backward(SMALL, &[("causal", true.into())])] {
        let built = plan(&cudnn, &graph.name, &graph);
        let loaded = ExecutionPlan::from_json(&cudnn, graph.clone(), &built.json().unwrap()).unwrap();
        assert_eq!(loaded.layout(), built.layout(), "{}: the variant pack of a loaded plan", graph.name);
        assert_eq!(loaded.workspace_size(), built.workspace_size());
    }
}

#[test]
fn cudnn_frontend_graphs_printed_after_building_plan() {
    // cudnn-frontend 1.32's attention graphs printed after `build_operation_graph` (K, and V
    // backward, transposed in place by its lowering; `tests/fixtures/cudnn_frontend`): read back
    // as given, they lower and plan as the graphs printed before building do.
    let Some(cudnn) = deviceless() else { return };
    for case in ["forward", "forward_square", "backward"] {
        for stage in ["before", "built"] {
            let name = format!("sdpa_{case}_{stage}.json");
            let path = format!("{}/tests/fixtures/cudnn_frontend/{name}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let graph = cudnn_runtime::serialize::structure_from_json(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            plan(&cudnn, &name, &graph);
        }
    }
}
