//! Deviceless planning of ragged (packed, THD) attention (`sdpa(..., ragged = true)`) for the
//! H200 of `tests/fixtures/h200-devprop.json` against the loaded cuDNN: prefill forward (fused
//! and composite), training forward and backward, and packed queries over a paged cache (a
//! serving step mixing prefill and decode sequences), with what cuDNN 9.19 refuses named.
#![cfg(feature = "cudnn")]

use cudnn_runtime::backend::{BuildOptions, CandidateState, ExecutionPlan};
use cudnn_runtime::ops::AttrValue;
use cudnn_runtime::{DataType, Graph, GraphBuilder, Operand, TensorId};

use crate::common;

use common::deviceless;

/// A ragged attention problem: `s_q`, `s_kv` are the longest sequences (the capacity).
#[derive(Clone, Copy, Debug)]
struct Ragged {
    b: i64,
    h_q: i64,
    h_kv: i64,
    s_q: i64,
    s_kv: i64,
    d: i64,
    /// K and V are page pools of pages of this many tokens (`paged = true`); only Q and O are
    /// packed then.
    page: Option<i64>,
    /// The offsets' type.
    offsets: DataType,
}

/// Attributes as the tests write them.
type Attrs = Vec<(&'static str, AttrValue)>;

/// Prefill: 8 sequences of up to 1024 tokens, 16 heads, d 128.
const PREFILL: Ragged =
    Ragged { b: 8, h_q: 16, h_kv: 16, s_q: 1024, s_kv: 1024, d: 128, page: None, offsets: DataType::I32 };

/// A packed `[B, H, S, D]` tensor laid out THD.
fn thd(g: &mut GraphBuilder, name: &str, dims: [i64; 4]) -> TensorId {
    let t = g.input(name, DataType::BF16, &dims).unwrap();
    g.set_dim_order(t, &[0, 2, 1, 3]).unwrap();
    t
}

/// The ragged graph of `p`, forward or backward, with attributes `extra`.
fn ragged_graph(p: Ragged, backward: bool, extra: &[(&str, AttrValue)]) -> Graph {
    let mut g = GraphBuilder::new(if backward { "ragged_backward" } else { "ragged_prefill" });
    let q = thd(&mut g, "q", [p.b, p.h_q, p.s_q, p.d]);
    let (k, v, tables) = match p.page {
        None => (thd(&mut g, "k", [p.b, p.h_kv, p.s_kv, p.d]), thd(&mut g, "v", [p.b, p.h_kv, p.s_kv, p.d]), None),
        Some(page) => {
            let width = (p.s_kv + page - 1) / page;
            let pages = p.b * width + 3;
            let k = g.input("k_pool", DataType::BF16, &[pages, p.h_kv, page, p.d]).unwrap();
            let v = g.input("v_pool", DataType::BF16, &[pages, p.h_kv, page, p.d]).unwrap();
            let table = g.input("page_table", DataType::I32, &[p.b, 1, width, 1]).unwrap();
            (k, v, Some(table))
        }
    };
    let mut ins = vec![q, k, v];
    if backward {
        ins.push(thd(&mut g, "o", [p.b, p.h_q, p.s_q, p.d]));
        ins.push(thd(&mut g, "d_o", [p.b, p.h_q, p.s_q, p.d]));
        ins.push(g.input("stats", DataType::F32, &[p.b, p.h_q, p.s_q, 1]).unwrap());
    }
    let has = |name: &str| extra.iter().any(|(k, _)| *k == name);
    if has("bias") {
        ins.push(g.input("bias", DataType::BF16, &[1, p.h_q, p.s_q, p.s_kv]).unwrap());
    }
    ins.push(g.input("seq_len_q", DataType::I32, &[p.b, 1, 1, 1]).unwrap());
    ins.push(g.input("seq_len_kv", DataType::I32, &[p.b, 1, 1, 1]).unwrap());
    if has("dropout") {
        ins.push(g.input("seed", DataType::I64, &[1, 1, 1, 1]).unwrap());
        ins.push(g.input("offset", DataType::I64, &[1, 1, 1, 1]).unwrap());
    }
    if let Some(table) = tables {
        ins.extend([table, table]);
    }
    // One offsets tensor per packed port (Q and O share theirs when their layouts agree, as
    // here, but each port takes its own input).
    let packed: &[&str] = if p.page.is_some() { &["q", "o"] } else { &["q", "k", "v", "o"] };
    for name in packed {
        ins.push(g.input(&format!("ragged_offset_{name}"), p.offsets, &[p.b + 1, 1, 1, 1]).unwrap());
    }
    let mut attrs: Vec<(String, AttrValue)> =
        vec![("ragged".into(), true.into()), ("padding_mask".into(), true.into())];
    if p.page.is_some() {
        attrs.push(("paged".into(), true.into()));
    }
    attrs.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    let ins: Vec<Operand> = ins.into_iter().map(Operand::Tensor).collect();
    let outs = g.op(if backward { "sdpa_backward" } else { "sdpa" }, &ins, &attrs).unwrap();
    let names = if backward { ["d_q", "d_k", "d_v", "d_bias"] } else { ["o", "stats", "", ""] };
    for (i, (out, name)) in outs.iter().zip(names).enumerate() {
        let dtype = if !backward && i == 1 { DataType::F32 } else { DataType::BF16 };
        let id = g.output(*out, name, dtype).unwrap();
        if name != "stats" && name != "d_bias" {
            g.set_dim_order(id, &[0, 2, 1, 3]).unwrap();
        }
    }
    g.build().unwrap()
}

/// Builds every case; returns the refusals as `what: error`.
fn plan_all(cases: Vec<(&str, Ragged, bool, Attrs)>) -> Vec<String> {
    let Some(cudnn) = deviceless() else { return Vec::new() };
    let mut refused = Vec::new();
    for (what, p, backward, extra) in cases {
        let graph = ragged_graph(p, backward, &extra);
        match ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()) {
            Ok(plan) => {
                assert_eq!(plan.selected().state, CandidateState::Built, "{what}");
                println!("{what}: built {} of {} candidates", plan.selected(), plan.candidates().len());
                // A plan read back from its JSON binds the same tensors, the offsets included.
                let loaded = ExecutionPlan::from_json(&cudnn, graph.clone(), &plan.json().unwrap()).unwrap();
                assert_eq!(loaded.layout(), plan.layout(), "{what}");
            }
            // What the loaded cuDNN lacks (the fused operation before 9.13.1, its sequence
            // lengths before 9.15), refused by name: the form plans from that version on.
            Err(e) if common::lacks_capability(&cudnn, &e) => println!("{what}: refused on this cuDNN: {e}"),
            Err(e) => refused.push(format!("{what}: {e}")),
        }
    }
    refused
}

#[needs_cudnn]
#[test]
fn ragged_forward_plans() {
    let composite = || ("implementation", AttrValue::from("composite"));
    let fused = || ("implementation", AttrValue::from("fused"));
    let causal = || ("causal", AttrValue::from(true));
    let cases: Vec<(&str, Ragged, bool, Attrs)> = vec![
        ("prefill, auto", PREFILL, false, vec![]),
        ("prefill, fused", PREFILL, false, vec![fused()]),
        ("prefill, composite", PREFILL, false, vec![composite()]),
        ("prefill, i64 offsets", Ragged { offsets: DataType::I64, ..PREFILL }, false, vec![]),
        ("prefill, causal", PREFILL, false, vec![causal()]),
        (
            "prefill, causal bottom-right",
            Ragged { s_kv: 2048, ..PREFILL },
            false,
            vec![causal(), ("alignment", "bottom_right".into())],
        ),
        ("prefill, GQA 32/8 causal", Ragged { h_q: 32, h_kv: 8, ..PREFILL }, false, vec![causal()]),
        ("training forward, causal, stats", PREFILL, false, vec![causal(), ("training", true.into())]),
        ("prefill, sliding window", PREFILL, false, vec![causal(), ("window", 256.into())]),
        ("prefill, bias", PREFILL, false, vec![("bias", true.into())]),
        ("prefill, dropout", PREFILL, false, vec![("dropout", 0.1.into()), ("training", true.into())]),
        ("b=32 s=4096 d=64, causal", Ragged { b: 32, s_q: 4096, s_kv: 4096, d: 64, ..PREFILL }, false, vec![causal()]),
    ];
    let refused = plan_all(cases);
    assert!(refused.is_empty(), "cuDNN refused:\n{}", refused.join("\n"));
}

#[needs_cudnn]
#[test]
fn ragged_backward_plans() {
    let causal = || ("causal", AttrValue::from(true));
    let cases: Vec<(&str, Ragged, bool, Attrs)> = vec![
        ("backward", PREFILL, true, vec![]),
        ("backward, causal", PREFILL, true, vec![causal()]),
        ("backward, GQA 32/8 causal", Ragged { h_q: 32, h_kv: 8, ..PREFILL }, true, vec![causal()]),
        ("backward, deterministic", PREFILL, true, vec![causal(), ("deterministic", true.into())]),
        ("backward, bias and dBias", PREFILL, true, vec![("bias", true.into()), ("d_bias", true.into())]),
        ("backward, dropout", PREFILL, true, vec![causal(), ("dropout", 0.1.into())]),
        ("backward, i64 offsets", Ragged { offsets: DataType::I64, ..PREFILL }, true, vec![causal()]),
    ];
    let refused = plan_all(cases);
    assert!(refused.is_empty(), "cuDNN refused:\n{}", refused.join("\n"));
}

#[needs_cudnn]
#[test]
fn packed_queries_over_a_paged_cache_plan() {
    // One serving step: prefill sequences (many query tokens) and decode sequences (one) packed
    // together in Q and O, their keys in a paged cache, bottom-right causal.
    let mixed =
        Ragged { b: 16, h_q: 32, h_kv: 8, s_q: 512, s_kv: 4096, d: 128, page: Some(16), offsets: DataType::I32 };
    let causal_br = || vec![("causal", AttrValue::from(true)), ("alignment", AttrValue::from("bottom_right"))];
    let cases: Vec<(&str, Ragged, bool, Attrs)> = vec![
        (
            "mixed prefill + decode, composite",
            mixed,
            false,
            [causal_br(), vec![("implementation", "composite".into())]].concat(),
        ),
        ("mixed prefill + decode, auto", mixed, false, causal_br()),
        ("packed prefill over a paged cache, no mask, auto", mixed, false, vec![]),
        ("packed prefill over a paged cache, fused", mixed, false, vec![("implementation", "fused".into())]),
    ];
    let refused = plan_all(cases);
    assert!(refused.is_empty(), "cuDNN refused:\n{}", refused.join("\n"));
}

#[needs_cudnn]
#[test]
fn packed_decode_and_wide_heads_plan() {
    let decode = Ragged { b: 16, h_q: 32, h_kv: 8, s_q: 1, s_kv: 4096, d: 128, page: Some(16), offsets: DataType::I32 };
    let composite = || ("implementation", AttrValue::from("composite"));
    let causal = || ("causal", AttrValue::from(true));
    let cases: Vec<(&str, Ragged, bool, Attrs)> = vec![
        ("packed decode over a paged cache, auto (fused)", decode, false, vec![]),
        ("packed decode over a paged cache, composite", decode, false, vec![composite()]),
        ("packed decode, dense K/V", Ragged { s_q: 1, ..PREFILL }, false, vec![]),
        ("packed decode, dense K/V, composite", Ragged { s_q: 1, ..PREFILL }, false, vec![composite()]),
        ("prefill d 256, causal", Ragged { d: 256, ..PREFILL }, false, vec![causal()]),
        ("backward d 256, causal", Ragged { d: 256, ..PREFILL }, true, vec![causal()]),
        ("backward, one query token", Ragged { s_q: 1, ..PREFILL }, true, vec![]),
        ("backward, sliding window", PREFILL, true, vec![causal(), ("window", 128.into())]),
        (
            "backward, causal bottom-right",
            Ragged { s_kv: 2048, ..PREFILL },
            true,
            vec![causal(), ("alignment", "bottom_right".into())],
        ),
    ];
    let refused = plan_all(cases);
    assert!(refused.is_empty(), "cuDNN refused:\n{}", refused.join("\n"));
}
