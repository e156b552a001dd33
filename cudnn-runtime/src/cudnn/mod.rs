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

#[cfg(feature = "cudnn")]
mod calls;
#[cfg(feature = "cudnn")]
mod context;
#[cfg(feature = "cudnn")]
mod cuda_graph;
#[cfg(feature = "cudnn")]
mod descriptor;
#[cfg(feature = "cudnn")]
pub mod devprop;
#[cfg(feature = "cudnn")]
mod error;
#[cfg(feature = "cudnn")]
mod kernel_cache;
#[cfg(feature = "cudnn")]
mod library;
#[cfg(feature = "cudnn")]
mod node;
mod port;
#[cfg(feature = "cudnn")]
mod probe;

#[cfg(feature = "cudnn")]
pub(crate) use calls::execute;
#[cfg(feature = "cudnn")]
pub use context::{cuda_context, Cudnn};
#[cfg(feature = "cudnn")]
pub(crate) use context::{Anchor, Binding};
#[cfg(feature = "cudnn")]
pub(crate) use cuda_graph::{exec_update, NativeCudaGraph};
#[cfg(feature = "cudnn")]
pub(crate) use descriptor::{last_error_message, Descriptor, Label, Record};
#[cfg(feature = "cudnn")]
pub use devprop::{version_string, DevicePropertiesError};
#[cfg(feature = "cudnn")]
pub mod support;
#[cfg(feature = "cudnn")]
pub(crate) use error::{cudnn_message, with_call_failures};
#[cfg(feature = "cudnn")]
pub use error::{CudnnError, Status};
#[cfg(feature = "cudnn")]
pub use kernel_cache::KernelCache;
#[cfg(feature = "cudnn")]
pub use library::libraries_present;
#[cfg(feature = "cudnn")]
pub(crate) use node::{padded_layout, rank_padding, Internals, LoweredOp, NodeCx, ALIGNMENT, MAX_RANK, MIN_RANK};
pub(crate) use port::Port;
#[cfg(feature = "cudnn")]
pub use probe::{probe_libraries, DriverProbe, GpuProbe, LibraryProbe};
