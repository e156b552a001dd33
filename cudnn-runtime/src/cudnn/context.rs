//! [`Cudnn`]: what cuDNN plans *for*. Either a handle on a CUDA stream (online: plans that execute)
//! or a finalized device-properties descriptor (deviceless: real lowering, heuristics and plan
//! compilation for a described GPU, on a machine that has none).
//!
//! A `Cudnn` always holds exactly one of the two, so no operation graph, heuristic query or plan
//! can reach cuDNN with neither (finalizing a deserialized plan that way crashes inside cuDNN).

use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr;
use std::sync::Arc;

use cudarc::cudnn::sys;
use cudarc::driver::{CudaContext, CudaStream};

use super::descriptor::{status_error, Descriptor};
use super::{devprop, library, CudnnError};

/// The CUDA context of GPU `ordinal`, as `cudarc::driver::CudaContext::new`, but a missing
/// libcuda is [`CudnnError::LibraryMissing`] (cudarc panics), a driver older than CUDA 12.0 or
/// than the CUDA major version the loaded cuDNN was built for [`CudnnError::DriverTooOld`], and a
/// driver failure (no such GPU, no GPU at all) [`CudnnError::Driver`].
///
/// ```no_run
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::backend::{cuda_context, Cudnn};
/// let cudnn = Cudnn::new(cuda_context(0)?.default_stream())?;
/// # Ok::<(), cudnn_graph::backend::CudnnError>(())
/// ```
pub fn cuda_context(ordinal: usize) -> Result<Arc<CudaContext>, CudnnError> {
    library::require_online_driver()?;
    CudaContext::new(ordinal)
        .map_err(|e| CudnnError::Driver { call: "create the CUDA context", message: e.to_string() })
}

/// An owned `cudnnHandle_t`, with the stream it was created for (so the CUDA context outlives
/// the handle).
#[derive(Debug)]
struct Handle {
    raw: sys::cudnnHandle_t,
    stream: Arc<CudaStream>,
}

// SAFETY: the handle is owned by this value alone and cuDNN ties it to no thread. It is only ever
// *used* through a `Cudnn` (which is not `Sync`) on the thread holding that `Cudnn`; the other
// owners of the `Arc` (plans, which threads share) only keep it alive and read its stream's
// context, so shared references never use the handle concurrently.
unsafe impl Send for Handle {}
// SAFETY: as above.
unsafe impl Sync for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: created by `cudnnCreate`, destroyed exactly once, while `stream` (and its
        // context) is still alive. Nothing useful can be done with a failure here.
        let _ = unsafe { sys::cudnnDestroy(self.raw) };
    }
}

/// A finalized device-properties descriptor, with the JSON it was made from.
#[derive(Debug)]
struct Properties {
    descriptor: Descriptor,
    json: String,
}

// SAFETY: after finalize cuDNN only reads the descriptor; it is set on heuristics and plans
// through a `Cudnn` (not `Sync`), and the plans holding the `Arc` (which threads share) only keep
// it alive and compare its JSON.
unsafe impl Sync for Properties {}

#[derive(Debug, Clone)]
enum Target {
    Online(Arc<Handle>),
    Deviceless(Arc<Properties>),
}

/// What an operation graph, a heuristic query or a plan is bound to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Binding<'a> {
    /// The handle of an online context.
    Handle(sys::cudnnHandle_t),
    /// The device-properties descriptor of a deviceless context.
    DeviceProperties(&'a Descriptor),
}

/// Keeps what a plan was made with (the handle or the device properties its descriptors refer
/// to) alive as long as the plan, whatever happens to the `Cudnn`.
#[derive(Debug, Clone)]
pub(crate) struct Anchor(Target);

impl Anchor {
    /// Whether a plan made with this anchor serves `cudnn` as well as one `cudnn` made itself:
    /// online, the same CUDA context (another stream of it is fine: the stream comes with the
    /// `Cudnn` passed to execute); deviceless, the same described device.
    pub(crate) fn serves(&self, cudnn: &Cudnn) -> bool {
        match (&self.0, &cudnn.target) {
            (Target::Online(made), Target::Online(asks)) => **made.stream.context() == **asks.stream.context(),
            (Target::Deviceless(made), Target::Deviceless(asks)) => made.json == asks.json,
            _ => false,
        }
    }

    /// The CUDA context of an online plan.
    pub(crate) fn context(&self) -> Option<&Arc<CudaContext>> {
        match &self.0 {
            Target::Online(handle) => Some(handle.stream.context()),
            Target::Deviceless(_) => None,
        }
    }
}

/// A cuDNN context: a handle on a CUDA stream, or a described device.
///
/// ```no_run
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::backend::Cudnn;
/// // Deviceless: plan for an H200 on any machine with libcudnn (and a libcuda, real or stand-in).
/// let json = std::fs::read_to_string("tests/fixtures/h200-devprop.json")?;
/// let cudnn = Cudnn::deviceless(&json)?;
/// assert!(!cudnn.is_online());
/// // Online: plans that execute on the stream.
/// let stream = cudnn_graph::backend::cuda_context(0)?.default_stream();
/// let cudnn = Cudnn::new(stream)?;
/// println!("cuDNN {}", cudnn.version());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Cudnn {
    target: Target,
    version: usize,
    /// Compute capability as `major * 10 + minor` (90 for an H200), when known.
    sm: Option<u32>,
    // `Send` but not `Sync`: a cuDNN handle must not be used by two threads at once. (Every call
    // that uses the handle binds the stream's CUDA context to the calling thread first.)
    _not_sync: PhantomData<Cell<()>>,
}

impl Cudnn {
    /// An online context: a cuDNN handle whose work goes to `stream`. A driver too old for the
    /// loaded cuDNN (a cu13 cuDNN on a CUDA 12 driver) is [`CudnnError::DriverTooOld`], where
    /// `cudnnCreate` would only say `CUDNN_STATUS_NOT_INITIALIZED`.
    pub fn new(stream: Arc<CudaStream>) -> Result<Self, CudnnError> {
        let version = library::require_cudnn()?;
        library::require_online_driver()?;
        stream
            .context()
            .bind_to_thread()
            .map_err(|e| CudnnError::Driver { call: "bind the stream's context", message: e.to_string() })?;
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the stream's context is current.
        let status = unsafe { sys::cudnnCreate(&mut raw) };
        if status != sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
            return Err(status_error("cudnnCreate", status, "cudnnHandle_t"));
        }
        let handle = Handle { raw, stream };
        // SAFETY: a live handle and a live stream (kept alive by the handle); cudarc's and
        // cuDNN's `CUstream_st` are the same driver type under two bindings.
        let status = unsafe { sys::cudnnSetStream(handle.raw, handle.stream.cu_stream().cast()) };
        if status != sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
            return Err(status_error("cudnnSetStream", status, "cudnnHandle_t"));
        }
        let attribute = |a| handle.stream.context().attribute(a).ok().and_then(|v| u32::try_from(v).ok());
        use cudarc::driver::sys::CUdevice_attribute as Attr;
        let sm = match (
            attribute(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            attribute(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        ) {
            (Some(major), Some(minor)) => Some(major * 10 + minor),
            _ => None,
        };
        Ok(Cudnn { target: Target::Online(Arc::new(handle)), version, sm, _not_sync: PhantomData })
    }

    /// A deviceless context for the GPU that `device_properties_json` describes (the JSON of
    /// `CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION`, read once on that GPU, by any supported cuDNN:
    /// the document is first made into the one the loaded version reads, see
    /// [`crate::backend::devprop::for_version`]). No GPU is needed, but cuDNN still opens a
    /// `libcuda.so.1` (on CI, the stand-in from `.ci/setup-cudnn.sh`).
    ///
    /// [`Cudnn::device_properties`] returns the document as given, so plans and payloads made
    /// with it name the same device whichever cuDNN loads them.
    pub fn deviceless(device_properties_json: &str) -> Result<Self, CudnnError> {
        let version = library::require_cudnn()?;
        library::require_driver()?;
        let readable = devprop::for_version(device_properties_json, version)?;
        let mut properties = Descriptor::new(sys::cudnnBackendDescriptorType_t::CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR)?;
        properties.set_chars(sys::cudnnBackendAttributeName_t::CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, &readable)?;
        properties.finalize()?;
        // `deviceVer` is the compute capability times 100 (900 for sm 9.0).
        let sm = serde_json::from_str::<serde_json::Value>(device_properties_json)
            .ok()
            .and_then(|v| v.get("deviceVer")?.as_u64())
            .and_then(|v| u32::try_from(v / 10).ok());
        let properties = Properties { descriptor: properties, json: device_properties_json.to_string() };
        Ok(Cudnn { target: Target::Deviceless(Arc::new(properties)), version, sm, _not_sync: PhantomData })
    }

    /// The loaded cuDNN's `cudnnGetVersion()` (`91900` is 9.19.0; [`devprop::version_string`]
    /// writes it as `9.19.0`).
    pub fn version(&self) -> usize {
        self.version
    }

    /// The target's compute capability as `major * 10 + minor` (90 for sm 9.0), when known.
    pub fn sm(&self) -> Option<u32> {
        self.sm
    }

    /// The device-properties JSON a deviceless context was made from.
    pub fn device_properties(&self) -> Option<&str> {
        match &self.target {
            Target::Online(_) => None,
            Target::Deviceless(properties) => Some(&properties.json),
        }
    }

    /// The device-properties JSON of this context's target, the input of [`Cudnn::deviceless`]:
    /// read off the GPU through cuDNN (`CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR` finalized with the
    /// handle, then `CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION`) for an online context, with every
    /// key some supported cuDNN reads and the loaded one did not write added
    /// (`memoryBusWidth` from the driver, the rest by [`crate::backend::devprop::complete`]), so
    /// the document serves every supported version; the JSON it was made from for a deviceless
    /// one. `cudnn-graph devprop` writes it to a file, so a machine without that GPU can plan
    /// for it.
    pub fn device_properties_json(&self) -> Result<String, CudnnError> {
        use sys::cudnnBackendAttributeName_t as A;
        match &self.target {
            Target::Deviceless(properties) => Ok(properties.json.clone()),
            Target::Online(handle) => {
                let mut properties =
                    Descriptor::new(sys::cudnnBackendDescriptorType_t::CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR)?;
                properties.set_handle(A::CUDNN_ATTR_DEVICEPROP_HANDLE, handle.raw)?;
                properties.finalize()?;
                let json = properties.get_chars(A::CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION)?;
                use cudarc::driver::sys::CUdevice_attribute as Attr;
                let json = match handle.stream.context().attribute(Attr::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH) {
                    Ok(bits) if !json.contains("\"memoryBusWidth\"") => {
                        devprop::with_key(&json, "memoryBusWidth", i64::from(bits))?
                    }
                    _ => json,
                };
                Ok(devprop::complete(&json)?)
            }
        }
    }

    /// Whether this context has a GPU (plans made with it can execute).
    pub fn is_online(&self) -> bool {
        matches!(self.target, Target::Online(_))
    }

    /// The stream of an online context.
    pub fn stream(&self) -> Option<&Arc<CudaStream>> {
        match &self.target {
            Target::Online(handle) => Some(&handle.stream),
            Target::Deviceless(_) => None,
        }
    }

    /// The raw `cudnnHandle_t` of an online context, for measuring against raw cuDNN calls and
    /// for interop. It stays valid while this context (or a plan made with it) lives; never
    /// destroy it, and never use it from two threads at once.
    pub fn raw_handle(&self) -> Option<sys::cudnnHandle_t> {
        self.online().map(|(handle, _)| handle)
    }

    /// The handle and stream of an online context.
    pub(crate) fn online(&self) -> Option<(sys::cudnnHandle_t, &Arc<CudaStream>)> {
        match &self.target {
            Target::Online(handle) => Some((handle.raw, &handle.stream)),
            Target::Deviceless(_) => None,
        }
    }

    /// What graphs, heuristics and plans made with this context are bound to.
    pub(crate) fn binding(&self) -> Binding<'_> {
        match &self.target {
            Target::Online(handle) => Binding::Handle(handle.raw),
            Target::Deviceless(properties) => Binding::DeviceProperties(&properties.descriptor),
        }
    }

    /// What a plan made with this context must keep alive.
    pub(crate) fn anchor(&self) -> Anchor {
        Anchor(self.target.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_move_between_threads() {
        fn send<T: Send>() {}
        send::<Cudnn>();
    }
}
