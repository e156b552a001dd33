//! The cuDNN layer: every raw FFI call of the crate (`cudarc::cudnn::sys` and the CUDA driver's
//! `cudarc::driver::sys`), below the op families' lowerings and the backend, in cudarc's layering:
//! `sys` → [`CudnnError`] (every failing status with `cudnnGetLastErrorString`, every failing
//! driver call by name) → these types.
//!
//! - `library`: loading checks (a missing libcudnn or libcuda is an error, never cudarc's panic);
//! - `probe`: what the loaded libraries and the driver report, for environment reports;
//! - `descriptor`: one RAII descriptor type with a typed setter and getter per attribute type;
//! - `support`: the supported cuDNN range and the table of known-bad versions;
//! - `devprop`: device-properties documents across cuDNN versions (the keys each version reads);
//! - `context`: [`Cudnn`], a handle on a stream or a deviceless device description;
//! - `calls`: typed wrappers of the calls on a finalized plan that are not about one
//!   descriptor's attributes (execute, CUDA-graph populate and update);
//! - `cuda_graph`: an RAII CUDA graph populated by cuDNN (create, instantiate, launch, update);
//! - `kernel_cache`: cuDNN's kernel cache ([`KernelCache`]), shared by the plans of one graph
//!   structure built with dynamic shapes;
//! - `node` and `port`: the node-lowering context the op families' `lower.rs` get ([`NodeCx`]).
//!
//! Public items are re-exported by [`crate::backend`]; the module itself is private.

mod port;
pub(crate) use port::Port;

/// Everything else here needs libcudnn: these items exist only with the `cudnn` feature.
macro_rules! with_cudnn {
    ($($item:item)*) => { $( #[cfg(feature = "cudnn")] $item )* };
}

with_cudnn! {
    mod calls;
    mod context;
    mod cuda_graph;
    mod descriptor;
    pub mod devprop;
    mod error;
    mod kernel_cache;
    mod library;
    mod node;
    mod probe;
    pub mod support;

    pub(crate) use calls::execute;
    pub use context::{cuda_context, Cudnn};
    pub(crate) use context::{Anchor, Binding};
    pub(crate) use cuda_graph::{exec_update, NativeCudaGraph};
    pub(crate) use descriptor::{last_error_message, Descriptor, Label, Record};
    pub use devprop::{version_string, DevicePropertiesError};
    pub(crate) use error::{cudnn_message, with_call_failures};
    pub use error::{CudnnError, Status};
    pub use kernel_cache::KernelCache;
    pub use library::libraries_present;
    pub(crate) use node::{padded_layout, rank_padding, Internals, LoweredOp, NodeCx, ALIGNMENT, MAX_RANK, MIN_RANK};
    pub use probe::{probe_libraries, DriverProbe, GpuProbe, LibraryProbe};
}
