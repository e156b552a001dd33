//! Loading checks. cudarc opens libcudnn and libcuda lazily and *panics* when one is missing; every
//! entry point of this layer calls these checks first, so a missing library is a
//! [`CudnnError::LibraryMissing`], never a panic.
//!
//! The checks are our own (`libloading`, which cudarc depends on in every mode): cudarc's
//! `is_culib_present` and `culib` exist only when cudarc loads dynamically, and cudarc may link
//! instead, when another crate of the build asks for `dynamic-linking` (candle-core's `cuda` does)
//! or when the `dynamic-linking` feature of this crate does. Linked, both libraries were loaded at
//! process start (a missing one stops the process before `main`), and these checks find them.

use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
use std::sync::OnceLock;

use cudarc::cudnn::sys;

use super::CudnnError;

use super::support;

const CUDNN_HINT: &str = "install cuDNN 9 (`pip install nvidia-cudnn-cu13==9.19.0.56`, or `.ci/setup-cudnn.sh DIR`) \
                          and put its nvidia/cudnn/lib folder on LD_LIBRARY_PATH";
const CUDA_HINT: &str = "install the NVIDIA driver; on a machine without a GPU, build the stand-in with \
                         `.ci/setup-cudnn.sh DIR` and put DIR/libcuda-stub on LD_LIBRARY_PATH";

/// Checks that libcudnn can be opened and is in [`support::SUPPORTED`]; returns
/// `cudnnGetVersion()`. Both are looked up once per process.
pub(crate) fn require_cudnn() -> Result<usize, CudnnError> {
    match cudnn_version() {
        None => Err(CudnnError::LibraryMissing { library: "libcudnn.so.9", hint: CUDNN_HINT }),
        Some(found) => match support::check_range(found) {
            Ok(()) => Ok(found),
            Err((oldest, newest)) => Err(CudnnError::UnsupportedVersion { found, oldest, newest }),
        },
    }
}

/// `cudnnGetVersion()` of the libcudnn this process loads (whatever its version), or `None` when
/// none can be opened. Looked up once per process.
pub(super) fn cudnn_version() -> Option<usize> {
    static VERSION: OnceLock<Option<usize>> = OnceLock::new();
    *VERSION.get_or_init(|| {
        // SAFETY: once a candidate opens, cudarc's loader (which tries these names among others)
        // finds a libcudnn rather than panicking, and a linked cudarc has it loaded already;
        // `cudnnGetVersion` takes no arguments.
        open_any("cudnn", &["9"]).is_some().then(|| unsafe { sys::cudnnGetVersion() })
    })
}

/// Whether libcuda (the driver, or the CI stand-in) can be opened. Looked up once per process.
pub(super) fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| open_driver().is_some())
}

/// Opens libcuda (the driver, or the CI stand-in) by the names cudarc's loader tries first, for
/// looking its symbols up; `None` when none opens.
pub(super) fn open_driver() -> Option<libloading::Library> {
    open_any("cuda", &["1"]).or_else(|| open_any("nvcuda", &[]))
}

/// Opens the first of `lib`'s candidate file names that loads, in the order cudarc's loader tries
/// them: `libcudnn.so`, `libcudnn64_9.so`, `libcudnn.so.9` for `("cudnn", ["9"])` on Linux
/// (`cudnn.dll`, `cudnn64_9.dll` on Windows). Every candidate is one that cudarc tries too, so
/// whenever this finds a library, cudarc finds one instead of panicking.
fn open_any(lib: &str, sonames: &[&str]) -> Option<libloading::Library> {
    let plain = format!("{DLL_PREFIX}{lib}{DLL_SUFFIX}");
    let windows = sonames.iter().map(|v| format!("{DLL_PREFIX}{lib}64_{v}{DLL_SUFFIX}"));
    let versioned = sonames.iter().map(|v| format!("{DLL_PREFIX}{lib}{DLL_SUFFIX}.{v}"));
    std::iter::once(plain).chain(windows).chain(versioned).find_map(|name| {
        // SAFETY: loading a library runs its initialisers, which using it needs anyway; the
        // handle is dropped by the caller (the library stays loaded while cudarc or cuDNN holds
        // it, or while the process was linked against it).
        unsafe { libloading::Library::new(&name) }.ok()
    })
}

/// Checks that libcuda (the driver, or the CI stand-in) can be opened. cuDNN opens it itself, even
/// for deviceless planning.
pub(crate) fn require_driver() -> Result<(), CudnnError> {
    if driver_present() {
        Ok(())
    } else {
        Err(CudnnError::LibraryMissing { library: "libcuda.so.1", hint: CUDA_HINT })
    }
}

/// `cuDriverGetVersion()` of the loaded libcuda (`12040` is CUDA 12.4), or `None` when no libcuda
/// opens or it lacks the call or does not answer. Looked up on each call (a cheap call; the
/// library is already loaded), through our own symbol lookup: cudarc would panic on a libcuda
/// lacking the symbol.
pub(super) fn driver_version() -> Option<i32> {
    let lib = open_driver()?;
    // SAFETY: `cuDriverGetVersion(int *)` has this signature in every CUDA version.
    let call = unsafe { lib.get::<unsafe extern "C" fn(*mut i32) -> i32>(b"cuDriverGetVersion") }.ok()?;
    let mut version = 0;
    // SAFETY: a valid out-pointer; the library stays loaded while `lib` lives.
    (unsafe { call(&mut version) } == 0).then_some(version)
}

/// Checks that libcuda can be opened and that its driver is new enough for this crate's driver
/// bindings and for the CUDA the loaded cuDNN was built for ([`support::check_driver`]): what
/// online work (a CUDA context, a cuDNN handle) needs. Deviceless planning needs only
/// [`require_driver`]: cuDNN's deviceless path does not care which driver version the library
/// reports (measured on 9.19 with the stand-in posing as CUDA 12.4 and 11.8).
pub(crate) fn require_online_driver() -> Result<(), CudnnError> {
    require_driver()?;
    // A libcuda that does not answer is left to fail on its own first real call.
    let Some(driver) = driver_version() else { return Ok(()) };
    // SAFETY: cuDNN opens (checked by `cudnn_version`); `cudnnGetCudartVersion` takes no arguments.
    let cudnn_cuda = cudnn_version().map(|_| unsafe { sys::cudnnGetCudartVersion() });
    support::check_driver(driver, cudnn_cuda)
}

/// Whether libcudnn (a supported version) and libcuda can both be loaded: what every GPU entry point
/// needs. Never panics; the constructors of [`crate::backend::Cudnn`] say which one is missing.
pub fn libraries_present() -> bool {
    require_cudnn().is_ok() && require_driver().is_ok()
}
