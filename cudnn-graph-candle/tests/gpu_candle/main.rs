//! The candle adapter's GPU tests (candle's `cuda` feature), one module per former
//! `tests/gpu_*.rs` file, in one binary whose name matches the GPU bundle's `gpu_*`.

// `#[needs_cudnn]`, `#[needs_gpu]`: ignored, with the reason, where the requirement was missing
// when the tests were built (cudnn-graph-testkit).
// Only candle's `cuda` feature builds the modules below.
#[cfg(feature = "cuda")]
#[macro_use]
extern crate cudnn_graph_testkit;

mod gpu_autograd;
mod gpu_llama_layer;
