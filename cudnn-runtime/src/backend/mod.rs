//! The cuDNN backend-API layer, on `cudarc::cudnn::sys` (dynamically loaded; cudarc's safe cuDNN
//! layer covers only the legacy API).
//!
//! 1. Make a [`Cudnn`]: [`Cudnn::new`] on a CUDA stream (plans that execute), or
//!    [`Cudnn::deviceless`] from a device-properties JSON (real lowering, heuristics and plan
//!    compilation for that GPU on a machine without one). A missing libcudnn or libcuda is a
//!    [`CudnnError::LibraryMissing`], never a panic.
//! 2. [`ExecutionPlan::build`] a validated [`crate::Graph`] with [`BuildOptions`]: the graph is
//!    lowered to one cuDNN operation graph (each op family's lowering lives in its own
//!    `ops/*/lower.rs`), heuristics propose [`Candidate`]s, each is checked (workspace read
//!    without compiling) and the first that finalizes is built — or all of them. When none
//!    does, [`BackendError::NoPlan`] lists every candidate with its [`Rejection`].
//! 3. [`ExecutionPlan::execute`] with [`DeviceBuffer`]s (checked against the graph), or
//!    [`ExecutionPlan::execute_raw`] with raw device pointers.
//! 4. [`ExecutionPlan::json`] / [`ExecutionPlan::from_json`]: cuDNN's serialized plan, e.g.
//!    compiled deviceless in CI and executed on the GPU.
//! 5. Speed, one layer up in [`crate::engines`]: [`autotune`](crate::engines::autotune) times
//!    every built candidate and selects the fastest; a [`PlanCache`](crate::engines::PlanCache)
//!    (in memory, optionally on disk) makes warm starts skip heuristics and compilation; the
//!    [`engine`](crate::engines::engine) module routes graphs across cuDNN and engines written
//!    in Rust (the CPU reference among them).
//!
//! Below it, the crate's cuDNN layer (`src/cudnn/`) holds every raw `sys` call, in cudarc's
//! layering: `sys` → one RAII descriptor type with one typed setter/getter per attribute type,
//! every failing status a [`CudnnError::Cudnn`] carrying `cudnnGetLastErrorString` (which
//! becomes the [`BackendError::Cudnn`] of the same fields) → these types. [`Cudnn`] and
//! [`cuda_context`] live there and return a [`CudnnError`].
//!
//! Threads: a [`Cudnn`] is `Send` but not `Sync` (a cuDNN handle must not be used by two threads
//! at once), so each thread has its own. An [`ExecutionPlan`] is `Send` and `Sync`: threads share
//! one plan and execute it, each with its own `Cudnn` on its own stream of the plan's device;
//! cuDNN's calls on the plan's descriptors take turns on a lock held only for the host-side
//! enqueue (see [`execute`]). A plan keeps the handle (or device properties) it was made
//! with alive.

mod binding;
mod buffer;
mod candidate;
pub mod capture;
mod cuda_graph;
mod emulate;
mod error;
pub mod execute;
mod heuristics;
pub(crate) mod lower;
mod mismatch;
mod options;
mod pack;
mod padded;
mod partition;
mod picture;
mod plan;
mod reduction_layout;
mod variant;

/// The cudarc this layer is built on, for naming its types (streams, device buffers) at the same
/// version.
pub use cudarc;

pub use crate::cudnn::{
    cuda_context, libraries_present, probe_libraries, Cudnn, CudnnError, DriverProbe, GpuProbe, KernelCache,
    LibraryProbe, Status,
};
pub use crate::cudnn::{devprop, support};
pub use candidate::{
    BehaviorNote, Candidate, CandidateState, Filter, HeuristicFailure, HeuristicMode, Knob, NumericalNote, Rejection,
};
pub use error::BackendError;
pub use execute::{DeviceBuffer, GraphMode, HostScalar, InputBuffer, OutputBuffer, PlanGraph, INLINE_IO, PACK_SLOTS};
pub use mismatch::PlanMismatch;
pub use options::{BuildOptions, BuildTimings, EngineConfig, Fusion};
pub use padded::PaddedPlan;
pub use partition::{Cut, CutReason};
pub use plan::{ChosenPart, ExecutionPlan, Partitioning, PlanPart, SavedPart};
pub use variant::{ByValueScalar, VariantLayout};
