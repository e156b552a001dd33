//! The candle adapter's integration tests, one module per former test file, in one binary (one
//! link instead of one per file); `tests/gpu_candle` holds the GPU ones.

// `#[needs_cudnn]`, `#[needs_gpu]`: ignored, with the reason, where the requirement was missing
// when the tests were built (cudnn-graph-testkit).
#[macro_use]
extern crate cudnn_graph_testkit;

// The example's Llama layer, shared with the examples: each target uses part of it.
#[path = "../../examples/llama/layer.rs"]
#[allow(dead_code)]
mod layer;

// The serving engines of the `llama_serve` example.
#[path = "../../examples/llama/serve.rs"]
mod serve;

mod adapter;
mod autograd;
mod deviceless_llama;
mod llama_layer;
mod serving;
