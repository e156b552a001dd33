//! [`probe_libraries`]: what the libcudnn and libcuda this process loads report — versions,
//! whether libcuda is the NVIDIA driver or a stand-in, the GPUs — on any machine, never failing
//! and never panicking, for environment reports (`cudnn-graph env`). Entry points that need the
//! libraries use `library`'s checks instead, which turn what is missing into a [`CudnnError`].
//!
//! [`CudnnError`]: super::CudnnError

use std::ffi::{c_char, c_void};

use cudarc::driver::sys as cu;

use super::library;

/// The driver calls this probe makes. cudarc panics on calling a symbol the loaded libcuda lacks,
/// so each is looked up first; a libcuda lacking any is a stand-in (such as CI's, which is
/// enough for cuDNN's deviceless planning), not the driver.
const DRIVER_CALLS: [&str; 7] = [
    "cuDriverGetVersion",
    "cuInit",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
];

/// What [`probe_libraries`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryProbe {
    /// `cudnnGetVersion()` of the libcudnn this process loads (`91900` is 9.19.0), of any
    /// version, or `None` when none can be opened.
    pub cudnn_version: Option<usize>,
    /// What the loaded libcuda is.
    pub driver: DriverProbe,
}

/// The libcuda this process loads, as [`probe_libraries`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverProbe {
    /// No libcuda could be opened.
    Missing,
    /// A libcuda lacking these driver entry points: a stand-in, not the NVIDIA driver.
    StandIn {
        /// The entry points it lacks (`cuInit`, ...).
        lacks: Vec<&'static str>,
    },
    /// The NVIDIA driver.
    Driver {
        /// `cuDriverGetVersion()` (`13000` is CUDA 13.0), if it answered.
        cuda_version: Option<i32>,
        /// Whether `cuInit` succeeded (it fails when no GPU is usable).
        initialized: bool,
        /// The GPUs it reports (none unless initialized).
        gpus: Vec<GpuProbe>,
    },
}

/// A GPU as the driver reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuProbe {
    /// The driver's ordinal (`cuDeviceGet`).
    pub ordinal: i32,
    /// `cuDeviceGetName` (empty if it did not answer).
    pub name: String,
    /// Compute capability, major and minor (`(9, 0)`; a part the driver did not answer is 0).
    pub compute_capability: (i32, i32),
    /// `cuDeviceTotalMem` in bytes (0 if it did not answer).
    pub memory_bytes: u64,
}

/// Looks at the libraries this process loads without needing either: the cuDNN version, whether
/// libcuda is the driver or a stand-in, and the GPUs the driver reports.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::backend::{probe_libraries, DriverProbe};
/// let probe = probe_libraries();
/// if let DriverProbe::Driver { gpus, .. } = &probe.driver {
///     for gpu in gpus {
///         println!("GPU {}: {} (sm {}.{})", gpu.ordinal, gpu.name, gpu.compute_capability.0, gpu.compute_capability.1);
///     }
/// }
/// ```
pub fn probe_libraries() -> LibraryProbe {
    LibraryProbe { cudnn_version: library::cudnn_version(), driver: probe_driver() }
}

fn succeeded(result: cu::CUresult) -> bool {
    result == cu::CUresult::CUDA_SUCCESS
}

fn probe_driver() -> DriverProbe {
    // The copy cudarc's loader opens (the same candidates, in its order), or the one the process
    // was linked against.
    let Some(lib) = library::open_driver() else {
        return DriverProbe::Missing;
    };
    let lacks: Vec<&'static str> = DRIVER_CALLS
        .into_iter()
        // SAFETY: only looks the symbol up (as a pointer, never called here).
        .filter(|name| unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_err())
        .collect();
    if !lacks.is_empty() {
        return DriverProbe::StandIn { lacks };
    }
    // From here on every call's symbol exists (checked above).
    let cuda_version = library::driver_version();
    // SAFETY: `cuInit` takes flags, which must be 0.
    let initialized = succeeded(unsafe { cu::cuInit(0) });
    let gpus = if initialized { probe_gpus() } else { Vec::new() };
    DriverProbe::Driver { cuda_version, initialized, gpus }
}

/// The GPUs of an initialized driver; one that does not answer `cuDeviceGet` is left out.
fn probe_gpus() -> Vec<GpuProbe> {
    let mut count = 0;
    // SAFETY: a valid out-pointer, after a successful `cuInit`.
    if !succeeded(unsafe { cu::cuDeviceGetCount(&mut count) }) {
        return Vec::new();
    }
    (0..count).filter_map(probe_gpu).collect()
}

fn probe_gpu(ordinal: i32) -> Option<GpuProbe> {
    let mut device = 0;
    // SAFETY: a valid out-pointer and an ordinal below the device count.
    if !succeeded(unsafe { cu::cuDeviceGet(&mut device, ordinal) }) {
        return None;
    }
    let mut name = [0 as c_char; 256];
    // SAFETY: a buffer of the length passed, and a device handle from `cuDeviceGet`. On failure
    // the buffer stays zeroed: an empty name.
    let _ = unsafe { cu::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, device) };
    let bytes: Vec<u8> = name.iter().map(|&c| c as u8).collect();
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let name = String::from_utf8_lossy(&bytes[..end]).into_owned();
    let attribute = |attribute: cu::CUdevice_attribute| {
        let mut value = 0;
        // SAFETY: a valid out-pointer and a device handle from `cuDeviceGet`. On failure the
        // value stays 0.
        let _ = unsafe { cu::cuDeviceGetAttribute(&mut value, attribute, device) };
        value
    };
    let compute_capability = (
        attribute(cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        attribute(cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
    );
    let mut memory_bytes = 0usize;
    // SAFETY: a valid out-pointer and a device handle from `cuDeviceGet`. On failure it stays 0.
    let _ = unsafe { cu::cuDeviceTotalMem_v2(&mut memory_bytes, device) };
    Some(GpuProbe { ordinal, name, compute_capability, memory_bytes: memory_bytes as u64 })
}
