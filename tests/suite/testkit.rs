//! The testkit's build-time verdict (`#[needs_cudnn]` ignores a test where libcudnn or libcuda
//! could not be opened when the tests were built) agrees with what the runtime loads when they run:
//! a probe that looked for other file names than `cudnn-runtime/src/cudnn/library.rs` would ignore
//! tests that could run, or run tests that can only skip.
#![cfg(feature = "cudnn")]

#[test]
fn the_build_time_cudnn_verdict_matches_the_runtime() {
    let present = cudnn_graph::backend::libraries_present();
    let required = std::env::var("CUDNN_GRAPH_REQUIRE_CUDNN").is_ok_and(|v| v == "1");
    if cudnn_tests_ignored!() {
        assert!(!present, "the cuDNN tests were built as ignored, but libcudnn and libcuda load");
    } else if !required {
        assert!(present, "the cuDNN tests were built to run, but libcudnn or libcuda does not load");
    }
}
