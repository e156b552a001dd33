//! The candle adapter's integration tests, one module per former test file, in one binary (one
//! link instead of one per file); `tests/gpu_candle` holds the GPU ones.

// `#[needs_cudnn]`, `#[needs_gpu]`: ignored, with the reason, where the requirement was missing
// when the tests were built (cudnn-graph-testkit).
#[macro_use]
extern crate cudnn_graph_testkit;

mod adapter;
mod autograd;
mod deviceless_llama;
mod llama_layer;
