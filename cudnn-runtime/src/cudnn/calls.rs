//! The cuDNN calls on a finalized execution plan that are not about one descriptor's attributes:
//! execute it, or populate or update a CUDA graph with it (for [`super::cuda_graph`], which owns
//! the graph). Each turns a failing status into a [`CudnnError::Cudnn`] carrying
//! `cudnnGetLastErrorString`.

use cudarc::cudnn::sys;
use cudarc::driver::sys::CUgraph;

use super::descriptor::{status_error, Descriptor};
use super::CudnnError;

const PLAN: &str = "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR";

fn check(call: &'static str, status: sys::cudnnStatus_t) -> Result<(), CudnnError> {
    if status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(status_error(call, status, PLAN))
    }
}

/// `cudnnBackendExecute` of `plan` with the variant pack `pack` on `handle`'s stream.
///
/// # Safety
/// `handle` must be live, `plan` and `pack` finalized, and `pack`'s pointers valid for `plan` on
/// `handle`'s stream.
pub(crate) unsafe fn execute(
    handle: sys::cudnnHandle_t,
    plan: &Descriptor,
    pack: &Descriptor,
) -> Result<(), CudnnError> {
    // SAFETY: as the caller vouches.
    check("cudnnBackendExecute", unsafe { sys::cudnnBackendExecute(handle, plan.as_raw(), pack.as_raw()) })
}

/// `cudnnBackendPopulateCudaGraph`: records `plan` with `pack` into the empty CUDA graph `graph`
/// (cuDNN's `cudaGraph_t` and the driver's `CUgraph` are the same type).
///
/// # Safety
/// As [`execute`], and `graph` must be an empty graph of the handle's CUDA context.
pub(super) unsafe fn populate_cuda_graph(
    handle: sys::cudnnHandle_t,
    plan: &Descriptor,
    pack: &Descriptor,
    graph: CUgraph,
) -> Result<(), CudnnError> {
    // SAFETY: as the caller vouches.
    let status = unsafe { sys::cudnnBackendPopulateCudaGraph(handle, plan.as_raw(), pack.as_raw(), graph.cast()) };
    check("cudnnBackendPopulateCudaGraph", status)
}

/// `cudnnBackendUpdateCudaGraph`: points the nodes of `graph`, populated by
/// [`populate_cuda_graph`] for `plan`, at the buffers of `pack`.
///
/// # Safety
/// As [`execute`], and `graph` must have been populated by cuDNN for `plan`.
pub(super) unsafe fn update_cuda_graph(
    handle: sys::cudnnHandle_t,
    plan: &Descriptor,
    pack: &Descriptor,
    graph: CUgraph,
) -> Result<(), CudnnError> {
    // SAFETY: as the caller vouches.
    let status = unsafe { sys::cudnnBackendUpdateCudaGraph(handle, plan.as_raw(), pack.as_raw(), graph.cast()) };
    check("cudnnBackendUpdateCudaGraph", status)
}
