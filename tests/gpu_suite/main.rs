//! The facade's GPU tests, one module per former `tests/gpu_*.rs` file (`gpu_partition`,
//! `gpu_plans`, ...), in one binary whose name matches the GPU bundle's `gpu_*`. Each test that
//! needs the GPU is `#[needs_gpu]`: ignored where it was built without one, unless the build had
//! `CUDNN_GRAPH_REQUIRE_GPU=1` (`scripts/gpu-bundle`); each module's `gpu_tests_built_to_run`
//! fails a run that requires the GPU of a build that ignored them.

// `#[needs_cudnn]`, `#[needs_gpu]`: ignored, with the reason, where the requirement was missing
// when the tests were built (cudnn-graph-testkit).
#[macro_use]
extern crate cudnn_graph_testkit;

#[path = "../common/mod.rs"]
mod common;

mod gpu_devprop;
mod gpu_dynamic;
mod gpu_fp8;
mod gpu_fp8_sdpa;
mod gpu_frontend_after_build;
mod gpu_frontend_payload;
mod gpu_graphs;
mod gpu_measure;
mod gpu_ops_bn_finalize;
mod gpu_ops_conv;
mod gpu_ops_layout;
mod gpu_ops_norm;
mod gpu_padded;
mod gpu_paged;
mod gpu_paged_append;
mod gpu_partition;
mod gpu_plans;
mod gpu_ragged;
mod gpu_reductions;
mod gpu_repro;
mod gpu_sdpa;
mod gpu_views;
