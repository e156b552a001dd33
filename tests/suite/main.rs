//! The facade's integration tests, one module per former test file (`cli`, `serialization`, ...),
//! gathered into one binary: each binary links the whole runtime, and one link instead of one
//! per file is most of what `cargo test` costs here. `tests/gpu_suite` holds the GPU tests,
//! `tests/ui.rs` (trybuild) and `tests/tracing.rs` (process-wide `tracing` state) stay binaries
//! of their own. Adding a file: `docs/developing.md`.

// `#[needs_cudnn]`, `#[needs_gpu]`: ignored, with the reason, where the requirement was missing
// when the tests were built (cudnn-graph-testkit).
#[macro_use]
extern crate cudnn_graph_testkit;

#[path = "../common/mod.rs"]
mod common;

// Helpers of several modules, declared once (a file loaded as two modules is compiled twice).
#[cfg(feature = "cudnn")]
#[allow(dead_code)]
#[path = "../common/blocks.rs"]
mod blocks;
#[path = "../common/padded.rs"]
mod padded;
#[cfg(feature = "cudnn")]
#[path = "../common/payload_graphs.rs"]
mod payload_graphs;
// `views` is the module of `views.rs`.
#[cfg(feature = "cudnn")]
#[path = "../common/views.rs"]
mod view_graphs;

mod cli;
mod cli_repro;
mod devices;
mod dims_and_host_lengths;
mod doc_examples_use_the_facade;
mod docs_cover_ops;
mod examples_report;
mod frontend_host_scalars;
mod frontend_oracle;
mod frontend_payload;
mod fuse_attribute;
mod guide_payload_sizes;
mod padded_classes;
mod paged_attention;
mod partition;
mod payload_safety;
mod plan_picture;
mod ragged_attention;
mod reference_bn_finalize;
mod reference_conv;
mod reference_fp8;
mod reference_graphs;
mod reference_norm;
mod serialization;
mod shape_classes;
mod symbolic_extents;
mod testkit;
mod tuning_store;
mod view_outputs;
mod views;
