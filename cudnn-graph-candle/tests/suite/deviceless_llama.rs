//! cuDNN plans every graph of the Llama layer (`examples/llama/layer.rs`) for the H200 at the
//! benchmark's sizes (Llama 3 8B: E = 4096, 32 heads over 8 KV heads of 128, MLP 14336): a decode
//! step after 4095 cached positions and a prefill of 4096 tokens. Deviceless (the H200's device
//! properties, real lowering, heuristics and plan compilation), so CI proves the GPU benchmark's
//! graphs are plannable without a GPU. Ignored when libcudnn cannot be loaded, unless
//! `CUDNN_GRAPH_REQUIRE_CUDNN=1`.

use crate::layer;

use cudnn_graph::backend::{BuildOptions, Cudnn, CudnnError, ExecutionPlan};
use cudnn_graph::GraphType;
use layer::{
    Attention, AttentionTrain, AttentionTrainBackward, Config, Proj, ProjBackward, ProjResidual, ProjResidualBackward,
    Qkv, RmsNorm, RmsNormTrain, RmsNormTrainBackward, SwiGlu, SwiGluTrain, SwiGluTrainBackward,
};

const DEVPROP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/h200-devprop.json");

fn deviceless() -> Option<Cudnn> {
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

/// Plans `graph` as `Runner` does (one kernel where the type demands it) and returns its parts.
fn plan<G: GraphType>(cudnn: &Cudnn, graph: G) -> usize {
    let ir = graph.graph().unwrap_or_else(|e| panic!("{} ({}): {e}", G::NAME, graph.binding()));
    let plan = ExecutionPlan::build(cudnn, &ir, &BuildOptions::default())
        .unwrap_or_else(|e| panic!("{} ({}): {e}", G::NAME, graph.binding()));
    plan.parts().len()
}

#[needs_cudnn]
#[test]
fn the_layers_graphs_plan_for_the_h200_at_the_benchmark_sizes() {
    let Some(cudnn) = deviceless() else { return };
    let cfg = Config::LLAMA3_8B;
    let (e, h, hkv, d, f) = (cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim(), cfg.intermediate);
    for (b, s, past) in [(1, 1, 4095), (1, 4096, 0)] {
        let t = b * s;
        assert_eq!(plan(&cudnn, RmsNorm::new(t, e)), 1, "one norm kernel");
        assert_eq!(plan(&cudnn, Qkv::new(t, e, h * d, hkv * d)), 3, "three GEMMs, three kernels");
        assert_eq!(plan(&cudnn, Attention::new(b, h, hkv, s, past + s, d)), 1, "one attention kernel");
        assert_eq!(plan(&cudnn, ProjResidual::new(t, e, e)), 1, "the residual in the GEMM's epilogue");
        assert_eq!(plan(&cudnn, ProjResidual::new(t, f, e)), 1, "the residual in the GEMM's epilogue");
        let swiglu = plan(&cudnn, SwiGlu::new(t, e, f));
        assert!(swiglu <= 2, "SwiGLU: two GEMMs with the activation in their epilogues, {swiglu} kernels");
    }
}

#[needs_cudnn]
#[test]
fn the_training_graphs_and_their_backward_graphs_plan_for_the_h200() {
    let Some(cudnn) = deviceless() else { return };
    let cfg = Config::LLAMA3_8B;
    let (e, h, hkv, d, f) = (cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim(), cfg.intermediate);
    let (b, s) = (1, 4096);
    let t = b * s;
    let parts = [
        ("rmsnorm", plan(&cudnn, RmsNormTrain::new(t, e))),
        ("rmsnorm backward", plan(&cudnn, RmsNormTrainBackward::new(t, e))),
        ("projection", plan(&cudnn, Proj::new(t, e, h * d))),
        ("projection backward", plan(&cudnn, ProjBackward::new(t, e, h * d))),
        ("projection + residual backward", plan(&cudnn, ProjResidualBackward::new(t, f, e))),
        ("attention", plan(&cudnn, AttentionTrain::new(b, h, hkv, s, d))),
        ("attention backward", plan(&cudnn, AttentionTrainBackward::new(b, h, hkv, s, d))),
        ("swiglu", plan(&cudnn, SwiGluTrain::new(t, e, f))),
        ("swiglu backward", plan(&cudnn, SwiGluTrainBackward::new(t, e, f))),
    ];
    println!("{parts:?}");
    let get = |name: &str| parts.iter().find(|(n, _)| *n == name).map(|(_, k)| *k);
    assert_eq!(get("attention"), Some(1), "one attention kernel");
    assert_eq!(get("attention backward"), Some(1), "one attention backward kernel");
}
