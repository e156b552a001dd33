//! fp8 attention (`sdpa` with `fp8 = e4m3 | e5m2`, cudnn-frontend's `sdpa_fp8`) planned
//! deviceless for the H200 of `tests/fixtures/h200-devprop.json` with cuDNN 9.19: the composite
//! subgraph with the descales after the first matmul, `Amax_S` and `Scale_S` before P is cast to
//! fp8, and `MatmulFP8Node`'s descales, `Amax_O` and `Scale_O` after the second; the support rules
//! that refuse what cuDNN refuses on Hopper; the structure round trips.
//!
//! Needs libcudnn 9 (see `deviceless.rs`); without it each test is ignored (as it was built), unless
//! `CUDNN_GRAPH_REQUIRE_CUDNN=1`.
#![cfg(feature = "cudnn")]

use cudnn_runtime::backend::{BackendError, BuildOptions, ExecutionPlan};
use cudnn_runtime::capabilities::{self, Capability};
use cudnn_runtime::ops::AttrValue;
use cudnn_runtime::serialize::{structure_from_json, structure_to_json};
use cudnn_runtime::{DataType, Graph, GraphBuilder, Operand};

use crate::common;

use common::{deviceless, plan};

/// `[b, h, s, d]` of Q, K, V and O.
type Shape = [i64; 4];

/// Attributes as the tests write them.
type Attrs = Vec<(&'static str, AttrValue)>;

const SMALL: Shape = [2, 4, 128, 128];
const BENCH: Shape = [4, 16, 4096, 128];

/// fp8 attention of `dtype` with `attrs` (beyond `fp8`): Q, K, V, the six scale inputs, O in
/// `dtype`, then Stats (with `training`), `Amax_S`, `Amax_O`.
fn fp8_sdpa(name: &str, dtype: DataType, shape: Shape, attrs: &[(&str, AttrValue)]) -> Graph {
    fp8_sdpa_in(name, dtype, shape, attrs, false)
}

/// [`fp8_sdpa`], Q, K, V and O in BSHD memory when `bshd` (strides `[S·H·D, D, H·D, 1]`, as
/// cudnn-frontend's benchmark lays them out).
fn fp8_sdpa_in(name: &str, dtype: DataType, shape: Shape, attrs: &[(&str, AttrValue)], bshd: bool) -> Graph {
    let [_, h, s, d] = shape;
    let strides = [s * h * d, d, h * d, 1];
    let mode = if dtype == DataType::Fp8E5M2 { "e5m2" } else { "e4m3" };
    let mut list: Vec<(String, AttrValue)> = vec![("fp8".into(), mode.into())];
    list.extend(attrs.iter().map(|(k, v)| (k.to_string(), v.clone())));
    let mut g = GraphBuilder::new(name);
    let op = cudnn_runtime::ops::Op::from_call("sdpa", &list).unwrap();
    let ins: Vec<Operand> = op
        .inputs()
        .iter()
        .map(|p| {
            let name = p.name.to_lowercase();
            let t = match p.name {
                "Q" | "K" | "V" => g.input(&name, dtype, &shape).inspect(|&t| {
                    if bshd {
                        g.set_strides(t, &strides).unwrap();
                    }
                }),
                "SEQ_LEN_Q" | "SEQ_LEN_KV" => g.input(&name, DataType::I32, &[shape[0], 1, 1, 1]),
                _ => g.input(&name, DataType::F32, &[1, 1, 1, 1]),
            };
            t.unwrap().into()
        })
        .collect();
    let outs = g.op("sdpa", &ins, &list).unwrap();
    let names: &[&str] = if outs.len() == 4 { &["o", "stats", "amax_s", "amax_o"] } else { &["o", "amax_s", "amax_o"] };
    for (t, n) in outs.iter().zip(names) {
        let dt = if *n == "o" { dtype } else { DataType::F32 };
        let t = g.output(*t, n, dt).unwrap();
        if bshd && *n == "o" {
            g.set_strides(t, &strides).unwrap();
        }
    }
    g.build().unwrap()
}

#[needs_cudnn]
#[test]
fn fp8_attention_plans() {
    let Some(cudnn) = deviceless() else { return };
    let e4 = DataType::Fp8E4M3;
    let cases: Vec<(&str, DataType, Shape, Attrs)> = vec![
        ("fp8_sdpa_e4m3", e4, SMALL, vec![]),
        ("fp8_sdpa_e4m3_causal", e4, SMALL, vec![("causal", true.into())]),
        ("fp8_sdpa_e4m3_causal_training", e4, SMALL, vec![("causal", true.into()), ("training", true.into())]),
        ("fp8_sdpa_e4m3_padding", e4, SMALL, vec![("padding_mask", true.into())]),
        ("fp8_sdpa_e5m2", DataType::Fp8E5M2, SMALL, vec![]),
        ("fp8_sdpa_e5m2_causal", DataType::Fp8E5M2, SMALL, vec![("causal", true.into())]),
        ("fp8_sdpa_bench", e4, BENCH, vec![]),
        ("fp8_sdpa_bench_causal", e4, BENCH, vec![("causal", true.into())]),
    ];
    for (name, dtype, shape, attrs) in cases {
        let graph = fp8_sdpa(name, dtype, shape, &attrs);
        let p = plan(&cudnn, &graph);
        println!("{name}: {} candidates, built {}", p.candidates().len(), p.selected());
        assert_eq!(p.parts().len(), 1, "{name}: one kernel");
    }
}

/// The benchmark's graphs (`examples/bench_fp8_sdpa.rs`): BSHD, causal and not.
#[needs_cudnn]
#[test]
fn fp8_attention_bshd_plans() {
    let Some(cudnn) = deviceless() else { return };
    for causal in [false, true] {
        let graph = fp8_sdpa_in("fp8_sdpa_bench_bshd", DataType::Fp8E4M3, BENCH, &[("causal", causal.into())], true);
        let p = plan(&cudnn, &graph);
        println!("BSHD causal = {causal}: {} candidates, built {}", p.candidates().len(), p.selected());
        assert_eq!(p.parts().len(), 1);
    }
}

#[test]
fn fp8_attention_structure_round_trips() {
    let graph = fp8_sdpa("fp8_sdpa_rt", DataType::Fp8E4M3, SMALL, &[("causal", true.into())]);
    let json = structure_to_json(&graph);
    assert!(json.contains("\"SDPA_FP8_FWD\"") && json.contains("\"FP8_E4M3\""), "{json}");
    for port in ["Descale_Q", "Descale_K", "Descale_V", "Descale_S", "Scale_S", "Scale_O", "Amax_S", "Amax_O"] {
        assert!(json.contains(&format!("\"{port}\"")), "{port}: {json}");
    }
    let back = structure_from_json(&json).unwrap();
    assert_eq!(back.nodes, graph.nodes);
}

/// What cuDNN refuses on Hopper is refused by rule before cuDNN sees it.
#[needs_cudnn]
#[test]
fn hopper_rules_name_themselves() {
    let Some(cudnn) = deviceless() else { return };
    // Before cuDNN 9.13.1 there is no fused operation at all: that rule comes first.
    let fused = if capabilities::has(cudnn.version(), Capability::FusedSdpaForward) {
        "sdpa.fused.fp8"
    } else {
        "sdpa.fused.version"
    };
    let cases = [
        (vec![("causal", true.into()), ("alignment", "bottom_right".into())], "sdpa.fp8.bottom_right"),
        (vec![("implementation", "fused".into())], fused),
    ];
    for (attrs, want) in cases {
        let graph = fp8_sdpa("refused", DataType::Fp8E4M3, SMALL, &attrs);
        match ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()) {
            Err(BackendError::SupportRule { rule, .. }) => assert_eq!(rule, want),
            Err(other) => panic!("{want}: {other}"),
            Ok(_) => panic!("{want}: planned"),
        }
    }
}

/// fp8 attention's backward (`sdpa_backward` with `fp8`, cudnn-frontend's `sdpa_fp8_backward`)
/// of `dtype` with `attrs`: Q, K, V, O, dO in `dtype` (BSHD memory when `bshd`), Stats, the
/// twelve scale inputs; dQ, dK, dV in `dtype` (as Q, K, V), then the four amaxes.
fn fp8_sdpa_backward(name: &str, dtype: DataType, shape: Shape, attrs: &[(&str, AttrValue)], bshd: bool) -> Graph {
    fp8_sdpa_backward_gqa(name, dtype, shape, shape[1], attrs, bshd)
}

/// [`fp8_sdpa_backward`] with `h_kv` heads in K and V (grouped-query attention).
fn fp8_sdpa_backward_gqa(
    name: &str,
    dtype: DataType,
    shape: Shape,
    h_kv: i64,
    attrs: &[(&str, AttrValue)],
    bshd: bool,
) -> Graph {
    let [b, h, s, d] = shape;
    let kv_shape = [b, h_kv, s, d];
    let strides = |h: i64| [s * h * d, d, h * d, 1];
    let mode = if dtype == DataType::Fp8E5M2 { "e5m2" } else { "e4m3" };
    let mut list: Vec<(String, AttrValue)> = vec![("fp8".into(), mode.into())];
    list.extend(attrs.iter().map(|(k, v)| (k.to_string(), v.clone())));
    let mut g = GraphBuilder::new(name);
    let op = cudnn_runtime::ops::Op::from_call("sdpa_backward", &list).unwrap();
    let ins: Vec<Operand> = op
        .inputs()
        .iter()
        .map(|p| {
            let name = p.name.to_lowercase();
            let t = match p.name {
                "Q" | "K" | "V" | "O" | "dO" => {
                    let (dims, heads) = if ["K", "V"].contains(&p.name) { (kv_shape, h_kv) } else { (shape, h) };
                    g.input(&name, dtype, &dims).inspect(|&t| {
                        if bshd {
                            g.set_strides(t, &strides(heads)).unwrap();
                        }
                    })
                }
                "Stats" => g.input(&name, DataType::F32, &[b, h, s, 1]),
                "SEQ_LEN_Q" | "SEQ_LEN_KV" => g.input(&name, DataType::I32, &[b, 1, 1, 1]),
                _ => g.input(&name, DataType::F32, &[1, 1, 1, 1]),
            };
            t.unwrap().into()
        })
        .collect();
    let outs = g.op("sdpa_backward", &ins, &list).unwrap();
    for (t, port) in outs.iter().zip(op.outputs()) {
        let gradient = port.len() == 2;
        let t = g.output(*t, &port.to_lowercase(), if gradient { dtype } else { DataType::F32 }).unwrap();
        if bshd && gradient {
            g.set_strides(t, &strides(if port == "dQ" { h } else { h_kv })).unwrap();
        }
    }
    g.build().unwrap()
}

/// What plans deviceless on the H200 with cuDNN 9.19: every case one kernel.
#[needs_cudnn]
#[test]
fn fp8_attention_backward_plans() {
    let Some(cudnn) = deviceless() else { return };
    let e4 = DataType::Fp8E4M3;
    let cases: Vec<(&str, DataType, Shape, Attrs, bool)> = vec![
        ("fp8_sdpa_bwd_e4m3", e4, SMALL, vec![], false),
        ("fp8_sdpa_bwd_e4m3_causal", e4, SMALL, vec![("causal", true.into())], false),
        ("fp8_sdpa_bwd_e4m3_padding", e4, SMALL, vec![("padding_mask", true.into())], false),
        ("fp8_sdpa_bwd_e4m3_scale_tensor", e4, SMALL, vec![("scale_tensor", true.into())], false),
        ("fp8_sdpa_bwd_e4m3_window", e4, SMALL, vec![("window", 64.into()), ("causal", true.into())], false),
        ("fp8_sdpa_bwd_e5m2_causal", DataType::Fp8E5M2, SMALL, vec![("causal", true.into())], false),
        ("fp8_sdpa_bwd_bench_bshd", e4, BENCH, vec![], true),
        ("fp8_sdpa_bwd_bench_bshd_causal", e4, BENCH, vec![("causal", true.into())], true),
    ];
    for (name, dtype, shape, attrs, bshd) in cases {
        let graph = fp8_sdpa_backward(name, dtype, shape, &attrs, bshd);
        let p = plan(&cudnn, &graph);
        assert_eq!(p.parts().len(), 1, "{name}: one kernel");
    }
    // Grouped-query attention: `MatmulFP8Node` sums dK and dV over each group of heads.
    let graph = fp8_sdpa_backward_gqa("fp8_sdpa_bwd_gqa", e4, SMALL, 2, &[("causal", true.into())], false);
    assert_eq!(plan(&cudnn, &graph).parts().len(), 1);
}

#[test]
fn fp8_attention_backward_structure_round_trips() {
    let graph = fp8_sdpa_backward("fp8_sdpa_bwd_rt", DataType::Fp8E5M2, SMALL, &[("causal", true.into())], false);
    let json = structure_to_json(&graph);
    assert!(json.contains("\"SDPA_FP8_BWD\""), "{json}");
    let ports =
        cudnn_runtime::ops::sdpa::FP8_BACKWARD_INPUTS.into_iter().chain(["Amax_dQ", "Amax_dK", "Amax_dV", "Amax_dP"]);
    for port in ports {
        assert!(json.contains(&format!("\"{port}\"")), "{port}: {json}");
    }
    let back = structure_from_json(&json).unwrap();
    assert_eq!(back.nodes, graph.nodes);
}

/// What cuDNN refuses for the fp8 backward on Hopper is refused by rule before cuDNN sees it: a
/// head dim other than 128, bottom-right causal masking.
#[needs_cudnn]
#[test]
fn hopper_backward_rules_name_themselves() {
    let Some(cudnn) = deviceless() else { return };
    let cases = [
        ([2, 4, 128, 64], vec![], "sdpa.fp8.backward_head_dim_hopper"),
        (SMALL, vec![("causal", true.into()), ("alignment", "bottom_right".into())], "sdpa.fp8.bottom_right"),
    ];
    for (shape, attrs, want) in cases {
        let graph = fp8_sdpa_backward("refused", DataType::Fp8E4M3, shape, &attrs, false);
        match ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()) {
            Err(BackendError::SupportRule { rule, .. }) => assert_eq!(rule, want),
            Err(other) => panic!("{want}: {other}"),
            Ok(_) => panic!("{want}: planned"),
        }
    }
}

/// A bf16 gradient or O of fp8 attention is refused when the output is declared, naming the
/// port and cuDNN's reason.
#[test]
fn bf16_output_of_fp8_attention_says_why() {
    let mut g = GraphBuilder::new("bf16_dq");
    let list: Vec<(String, AttrValue)> = vec![("fp8".into(), "e4m3".into())];
    let op = cudnn_runtime::ops::Op::from_call("sdpa_backward", &list).unwrap();
    let [b, h, s, d] = SMALL;
    let ins: Vec<Operand> = op
        .inputs()
        .iter()
        .map(|p| match p.name {
            "Q" | "K" | "V" | "O" | "dO" => g.input(&p.name.to_lowercase(), DataType::Fp8E4M3, &SMALL),
            "Stats" => g.input("stats", DataType::F32, &[b, h, s, 1]),
            name => g.input(&name.to_lowercase(), DataType::F32, &[1, 1, 1, 1]),
        })
        .map(|t| t.unwrap().into())
        .collect();
    let outs = g.op("sdpa_backward", &ins, &list).unwrap();
    let e = g.output(outs[1], "dk", DataType::BF16).unwrap_err().to_string();
    assert!(
        e.starts_with("tensor `dk` is declared bf16 but port dK of its op produces fp8_e4m3; fp8 attention's backward"),
        "{e}"
    );
    assert!(
        e.contains("only supported on Blackwell with cuDNN 9.13.0 and newer, and cuDNN 9.19 refuses it on Hopper"),
        "{e}"
    );
    assert_eq!(d, 128);
}
