//! The runtime's integration tests, one module per former test file (`deviceless`, `plans`,
//! `structure_json`, ...), gathered into one binary (one link instead of one per file).
//! `tests/gpu_backend.rs` holds the GPU tests, and `tests/deviceless_memory.rs` stays a binary of
//! its own (it measures the process's heap). Adding a file: `docs/developing.md`.

// `#[needs_cudnn]`, `#[needs_gpu]`: ignored, with the reason, where the requirement was missing
// when the tests were built (cudnn-graph-testkit).
#[macro_use]
extern crate cudnn_graph_testkit;

#[path = "../common/mod.rs"]
mod common;

mod deviceless;
mod deviceless_bn_finalize;
mod deviceless_conv;
mod deviceless_dynamic;
mod deviceless_fp8;
mod deviceless_fp8_sdpa;
mod deviceless_layout;
mod deviceless_measure;
mod deviceless_norm;
mod deviceless_paged;
mod deviceless_partition;
mod deviceless_payload_flag;
mod deviceless_ragged;
mod deviceless_reductions;
mod deviceless_sdpa;
mod deviceless_specialization;
mod driver_version;
mod fuzz_corpus;
mod fuzz_regressions;
mod huge_values;
mod ops_norm;
mod plans;
mod ragged_structure;
mod repro_bisect;
mod rewrite_batchnorm;
mod rewrite_column_sum;
mod sdpa_structure;
mod structure_bn_finalize;
mod structure_json;
