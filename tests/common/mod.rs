//! Helpers shared by the integration tests: deterministic random inputs and error measures.

#![allow(dead_code)]

use cudnn_graph::rng::SplitMix64;
use cudnn_graph::Element;

/// Fixed-seed values in [-1, 1) as elements of `T`, never all zeros.
pub fn random<T: Element>(seed: u64, n: usize) -> Vec<T> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| T::from_f64_value(rng.uniform(-1.0, 1.0))).collect()
}

/// ‖got − want‖ / ‖want‖ in f64; infinite if any value is NaN (NaN never passes).
pub fn relative_error<T: Element>(got: &[T], want: &[T]) -> f64 {
    assert_eq!(got.len(), want.len());
    let mut num = 0.0;
    let mut den = 0.0;
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (g.to_f64_value(), w.to_f64_value());
        if g.is_nan() || w.is_nan() {
            return f64::INFINITY;
        }
        num += (g - w) * (g - w);
        den += w * w;
    }
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}

/// Largest |got − want|.
pub fn max_abs_error<T: Element>(got: &[T], want: &[T]) -> f64 {
    got.iter().zip(want).map(|(g, w)| (g.to_f64_value() - w.to_f64_value()).abs()).fold(0.0, f64::max)
}

/// The H200's device properties (`tests/fixtures/h200-devprop.json`).
pub const DEVPROP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/h200-devprop.json");

/// A deviceless cuDNN context for the H200, or `None` (after saying why) when libcudnn or
/// libcuda cannot be loaded and `CUDNN_GRAPH_REQUIRE_CUDNN` is not `1`.
#[cfg(feature = "cudnn")]
pub fn deviceless() -> Option<cudnn_graph::backend::Cudnn> {
    use cudnn_graph::backend::{Cudnn, CudnnError};
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

/// The GPU's default stream and an online cuDNN context, or `None` (after saying why) when there
/// is no GPU or libcuda/libcudnn cannot be loaded. With `CUDNN_GRAPH_REQUIRE_GPU=1` (set by the
/// GPU bundle's runner) a missing GPU is a failure, so a broken setup cannot pass as skipped.
#[cfg(feature = "cudnn")]
pub fn gpu() -> Option<(std::sync::Arc<cudnn_graph::backend::cudarc::driver::CudaStream>, cudnn_graph::backend::Cudnn)>
{
    use cudnn_graph::backend::{cuda_context, Cudnn};
    let required = std::env::var("CUDNN_GRAPH_REQUIRE_GPU").is_ok_and(|v| v == "1");
    if !cudnn_graph::backend::libraries_present() {
        assert!(!required, "CUDNN_GRAPH_REQUIRE_GPU=1 but libcuda/libcudnn cannot be loaded");
        println!("skipped: libcuda or libcudnn cannot be loaded");
        return None;
    }
    let setup = || -> Result<_, String> {
        let ctx = cuda_context(0).map_err(|e| format!("no CUDA device: {e}"))?;
        let stream = ctx.default_stream();
        let cudnn = Cudnn::new(stream.clone()).map_err(|e| e.to_string())?;
        Ok((stream, cudnn))
    };
    match setup() {
        Ok(s) => Some(s),
        Err(e) if !required => {
            println!("skipped: {e}");
            None
        }
        Err(e) => panic!("CUDNN_GRAPH_REQUIRE_GPU=1 but: {e}"),
    }
}

/// Random values in `[lo, hi)` as `T` (fixed seed, never all zeros).
pub fn uniform<T: Element>(seed: u64, n: usize, lo: f64, hi: f64) -> Vec<T> {
    random::<f64>(seed, n).into_iter().map(|v| T::from_f64_value(lo + (hi - lo) * (v + 1.0) / 2.0)).collect()
}

/// The relative error a GPU output may have against the CPU reference (bf16/f16 outputs).
pub const GPU_TOLERANCE: f64 = 2e-2;

/// Compares one output, prints the figure, and asserts [`GPU_TOLERANCE`].
pub fn check<T: Element>(case: &str, output: &str, got: &[T], want: &[T]) {
    let err = relative_error(got, want);
    println!("{case}: {output} relative error {err:.3e} ({} values)", got.len());
    assert!(err <= GPU_TOLERANCE, "{case}: {output} relative error {err}");
}

/// Whether `e` is a support rule that only the loaded cuDNN's version refuses: its `needs`
/// names the capability the loaded version lacks and a newer one that brings it
/// (`capabilities::Missing`, "... needs cuDNN 9.15.1 or newer; loaded 9.14.0"). A refusal the
/// tests of a form that 9.19 plans accept on an older cuDNN (the GPU machines' system 9.14), and
/// only there.
#[cfg(feature = "cudnn")]
pub fn lacks_capability(cudnn: &cudnn_graph::backend::Cudnn, e: &cudnn_graph::Error) -> bool {
    use cudnn_graph::backend::BackendError;
    matches!(
        e,
        cudnn_graph::Error::Backend(BackendError::SupportRule { needs: Some(m), .. })
            if m.loaded == cudnn.version() && m.since > m.loaded
    )
}

/// A device copy of `data`.
#[cfg(feature = "cudnn")]
pub fn upload<T: Element + cudnn_graph::backend::cudarc::driver::DeviceRepr>(
    stream: &std::sync::Arc<cudnn_graph::backend::cudarc::driver::CudaStream>,
    data: &[T],
) -> cudnn_graph::backend::cudarc::driver::CudaSlice<T> {
    stream.clone_htod(data).unwrap()
}

/// A device buffer of `n` NaNs: every element must be written.
#[cfg(feature = "cudnn")]
pub fn poisoned<T: Element + cudnn_graph::backend::cudarc::driver::DeviceRepr>(
    stream: &std::sync::Arc<cudnn_graph::backend::cudarc::driver::CudaStream>,
    n: usize,
) -> cudnn_graph::backend::cudarc::driver::CudaSlice<T> {
    stream.clone_htod(&vec![T::from_f64_value(f64::NAN); n]).unwrap()
}

/// A workspace of at least `bytes` (one byte when the plan needs none).
#[cfg(feature = "cudnn")]
pub fn workspace(
    stream: &std::sync::Arc<cudnn_graph::backend::cudarc::driver::CudaStream>,
    bytes: usize,
) -> cudnn_graph::backend::cudarc::driver::CudaSlice<u8> {
    stream.alloc_zeros::<u8>(bytes.max(1)).unwrap()
}

/// Asserts that autotuning kept what `AutotuneOptions::min_gain` prescribes, given the times (µs)
/// of what it kept, of the plan's own choice before tuning (`None` if that did not execute) and of
/// the fastest: the fastest, unless the own choice was within `min_gain` of it.
pub fn assert_tuned(what: &str, kept: f64, own: Option<f64>, fastest: f64, min_gain: f64) {
    match own {
        Some(own) if fastest >= own * (1.0 - min_gain) => {
            assert_eq!(
                kept, own,
                "{what}: the plan's own choice stays when the fastest ({fastest} µs) is within min_gain"
            )
        }
        _ => assert_eq!(kept, fastest, "{what}: the fastest is kept"),
    }
}
