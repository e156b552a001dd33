//! Deviceless planning of paged decode attention (`sdpa(..., paged = true)`) for the H200 of
//! `tests/fixtures/h200-devprop.json` against the loaded cuDNN: the fused `SDPA_FWD` operation
//! with page tables and the composite subgraph through paged cache loads, decode and
//! multi-token queries, grouped heads, one table for K and V or one each.
#![cfg(feature = "cudnn")]

use cudnn_runtime::backend::{BackendError, BuildOptions, CandidateState, ExecutionPlan};
use cudnn_runtime::ops::AttrValue;
use cudnn_runtime::{DataType, Graph, GraphBuilder};

use crate::common;

use common::deviceless;

/// A paged attention problem.
#[derive(Clone, Copy, Debug)]
struct Paged {
    b: i64,
    h_q: i64,
    h_kv: i64,
    s_q: i64,
    /// Key capacity per sequence (`T · page`).
    capacity: i64,
    page: i64,
    d: i64,
}

/// Attributes as the tests write them.
type Attrs = Vec<(&'static str, AttrValue)>;

/// The Llama-style decode the anchor measures: 32 query heads over 8 KV heads, d 128.
const DECODE: Paged = Paged { b: 32, h_q: 32, h_kv: 8, s_q: 1, capacity: 4096, page: 16, d: 128 };

/// The paged attention graph of `p` with attributes `extra`; `shared_table`: one table tensor
/// feeds both page-table ports.
fn paged_graph(p: Paged, extra: &[(&str, AttrValue)], shared_table: bool) -> Graph {
    let mut g = GraphBuilder::new("paged_decode");
    let width = (p.capacity + p.page - 1) / p.page;
    let pages = p.b * width + 7;
    let q = g.input("q", DataType::BF16, &[p.b, p.h_q, p.s_q, p.d]).unwrap();
    let k = g.input("k_pool", DataType::BF16, &[pages, p.h_kv, p.page, p.d]).unwrap();
    let v = g.input("v_pool", DataType::BF16, &[pages, p.h_kv, p.page, p.d]).unwrap();
    let seq_q = g.input("seq_len_q", DataType::I32, &[p.b, 1, 1, 1]).unwrap();
    let seq_kv = g.input("seq_len_kv", DataType::I32, &[p.b, 1, 1, 1]).unwrap();
    let table_k = g.input("page_table_k", DataType::I32, &[p.b, 1, width, 1]).unwrap();
    let table_v =
        if shared_table { table_k } else { g.input("page_table_v", DataType::I32, &[p.b, 1, width, 1]).unwrap() };
    let mut attrs: Vec<(String, AttrValue)> = vec![("paged".into(), true.into()), ("padding_mask".into(), true.into())];
    attrs.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    let ins = [q, k, v, seq_q, seq_kv, table_k, table_v].map(cudnn_runtime::Operand::Tensor);
    let outs = g.op("sdpa", &ins, &attrs).unwrap();
    g.output(outs[0], "o", DataType::BF16).unwrap();
    if outs.len() > 1 {
        g.output(outs[1], "stats", DataType::F32).unwrap();
    }
    g.build().unwrap()
}

#[needs_cudnn]
#[test]
fn paged_attention_plans() {
    let Some(cudnn) = deviceless() else { return };
    let composite = || ("implementation", AttrValue::from("composite"));
    let cases: Vec<(&str, Paged, Attrs, bool)> = vec![
        ("decode, fused (auto)", DECODE, vec![], true),
        ("decode, own tables", DECODE, vec![], false),
        ("decode, composite", DECODE, vec![composite()], true),
        ("decode, page 64", Paged { page: 64, ..DECODE }, vec![], true),
        ("decode, page 64, composite", Paged { page: 64, ..DECODE }, vec![composite()], true),
        ("decode B=1 L=16384", Paged { b: 1, capacity: 16384, ..DECODE }, vec![], true),
        ("decode B=128 L=1024", Paged { b: 128, capacity: 1024, ..DECODE }, vec![], true),
        ("decode with stats", DECODE, vec![("training", true.into())], true),
        ("decode, capacity given", Paged { capacity: 3990, ..DECODE }, vec![("max_seq_len_kv", 3990.into())], true),
        (
            "4 query tokens, causal bottom-right (speculative decoding)",
            Paged { s_q: 4, ..DECODE },
            vec![("causal", true.into()), ("alignment", "bottom_right".into())],
            true,
        ),
        (
            "sliding window decode",
            Paged { s_q: 1, ..DECODE },
            vec![("causal", true.into()), ("alignment", "bottom_right".into()), ("window", 1024.into())],
            true,
        ),
        ("MQA decode", Paged { h_kv: 1, ..DECODE }, vec![], true),
        (
            // tests/gpu_suite/gpu_paged.rs, `PagedWindowStats`.
            "2 query tokens, sliding window, statistics",
            Paged { b: 4, h_q: 8, h_kv: 2, s_q: 2, capacity: 384, page: 16, d: 64 },
            vec![
                ("causal", true.into()),
                ("alignment", "bottom_right".into()),
                ("window", 48.into()),
                ("training", true.into()),
            ],
            true,
        ),
    ];
    let mut refused = Vec::new();
    for (what, p, extra, shared) in cases {
        let graph = paged_graph(p, &extra, shared);
        match ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()) {
            Ok(plan) => {
                assert_eq!(plan.selected().state, CandidateState::Built, "{what}");
                println!("{what}: built {} of {} candidates", plan.selected(), plan.candidates().len());
                // A plan read back from its JSON binds the same tensors.
                let loaded = ExecutionPlan::from_json(&cudnn, graph.clone(), &plan.json().unwrap()).unwrap();
                assert_eq!(loaded.layout(), plan.layout(), "{what}");
            }
            Err(e) => refused.push(format!("{what}: {e}")),
        }
    }
    assert!(refused.is_empty(), "cuDNN refused:\n{}", refused.join("\n"));
}

#[needs_cudnn]
#[test]
fn fused_paged_attention_names_its_rules() {
    let Some(cudnn) = deviceless() else { return };
    // Causal masking is not the fused operation's: asking for it is an error naming the rule.
    let graph = paged_graph(DECODE, &[("causal", true.into()), ("implementation", "fused".into())], true);
    match ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap_err() {
        // Before cuDNN 9.13.1 there is no fused operation at all.
        BackendError::SupportRule { rule, .. } => {
            assert_eq!(rule, if cudnn.version() < 91301 { "sdpa.fused.version" } else { "sdpa.fused.causal" })
        }
        other => panic!("{other}"),
    }
}
