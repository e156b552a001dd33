//! Loading checks. cudarc opens libcudnn and libcuda lazily and *panics* when one is missing; every
//! entry point of this layer calls these checks first, so a missing library is a
//! [`CudnnError::LibraryMissing`], never a panic.

use std::sync::OnceLock;

use cudarc::cudnn::sys;

use super::CudnnError;

/// The oldest cuDNN this layer drives: 9.8 brought the device-properties descriptor that
/// deviceless planning needs, and plan JSON, workspace queries without compiling and
/// `cudnnGetLastErrorString` are all older.
pub(crate) const MIN_CUDNN_VERSION: usize = 90800;

const CUDNN_HINT: &str = "install cuDNN 9 (`pip install nvidia-cudnn-cu13==9.19.0.56`, or `.ci/setup-cudnn.sh DIR`) \
                          and put its nvidia/cudnn/lib folder on LD_LIBRARY_PATH";
const CUDA_HINT: &str = "install the NVIDIA driver; on a machine without a GPU, build the stand-in with \
                         `.ci/setup-cudnn.sh DIR` and put DIR/libcuda-stub on LD_LIBRARY_PATH";

/// Checks that libcudnn can be opened and is new enough; returns `cudnnGetVersion()`. Both are
/// looked up once per process.
pub(crate) fn require_cudnn() -> Result<usize, CudnnError> {
    match cudnn_version() {
        None => Err(CudnnError::LibraryMissing { library: "libcudnn.so.9", hint: CUDNN_HINT }),
        Some(found) if found < MIN_CUDNN_VERSION => {
            Err(CudnnError::UnsupportedVersion { found, required: MIN_CUDNN_VERSION })
        }
        Some(found) => Ok(found),
    }
}

/// `cudnnGetVersion()` of the libcudnn this process loads (whatever its version), or `None` when
/// none can be opened. Looked up once per process.
pub(super) fn cudnn_version() -> Option<usize> {
    static VERSION: OnceLock<Option<usize>> = OnceLock::new();
    *VERSION.get_or_init(|| {
        // SAFETY: `is_culib_present` only tries to dlopen the candidate names (running the
        // library's initialisers, which loading cuDNN requires anyway) and closes them again;
        // once it is present, cudarc's loader finds it and `cudnnGetVersion` takes no arguments.
        unsafe { sys::is_culib_present().then(|| sys::cudnnGetVersion()) }
    })
}

/// Whether libcuda (the driver, or the CI stand-in) can be opened. Looked up once per process.
pub(super) fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: as in `cudnn_version`.
    *PRESENT.get_or_init(|| unsafe { cudarc::driver::sys::is_culib_present() })
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

/// Whether libcudnn (9.8 or newer) and libcuda can both be loaded: what every GPU entry point
/// needs. Never panics; the constructors of [`crate::backend::Cudnn`] say which one is missing.
pub fn libraries_present() -> bool {
    require_cudnn().is_ok() && require_driver().is_ok()
}
