//! [`NativeCudaGraph`]: a CUDA graph that cuDNN populated with one execute of a plan, owned with
//! its instantiation and the stream it replays on. Every CUDA driver graph call of the crate is
//! here (create, instantiate, launch, exec-update, destroy); a failing `CUresult` is a
//! [`CudnnError::Driver`] naming the call. (Stream-captured graphs are cudarc's own
//! `CudaGraph`.)

use std::ptr;
use std::sync::Arc;

use cudarc::cudnn::sys;
use cudarc::driver::sys as cu;
use cudarc::driver::CudaStream;

use super::calls::{populate_cuda_graph, update_cuda_graph};
use super::descriptor::Descriptor;
use super::CudnnError;

/// `Ok` for `CUDA_SUCCESS`, otherwise a [`CudnnError::Driver`] naming `call`.
fn check(call: &'static str, result: cu::CUresult) -> Result<(), CudnnError> {
    if result == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CudnnError::Driver { call, message: format!("{result:?}") })
    }
}

/// Gives the instantiated graph `exec` the node parameters of `graph` (`cuGraphExecUpdate`); a
/// failure names the update result (`CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED`, ...).
///
/// # Safety
/// `exec` and `graph` must be live, of the current context; the pointers `graph`'s nodes hold
/// must be valid for every later launch of `exec`.
pub(crate) unsafe fn exec_update(exec: cu::CUgraphExec, graph: cu::CUgraph) -> Result<(), CudnnError> {
    // SAFETY: a plain C struct of an enum and two pointers, for which all zeros is valid.
    let mut info: cu::CUgraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
    // SAFETY: as the caller vouches; `info` is a valid out-pointer.
    let result = unsafe { cu::cuGraphExecUpdate_v2(exec, graph, &mut info) };
    if result != cu::CUresult::CUDA_SUCCESS {
        return Err(CudnnError::Driver {
            call: "cuGraphExecUpdate",
            message: format!("{result:?} ({:?})", info.result),
        });
    }
    Ok(())
}

/// A graph populated by cuDNN (`cudnnBackendPopulateCudaGraph`) and instantiated, replayed on the
/// stream it was recorded for; both are destroyed on drop. Not `Send`: CUDA graphs are not
/// internally synchronized.
pub(crate) struct NativeCudaGraph {
    graph: cu::CUgraph,
    /// Null until instantiated (only while [`NativeCudaGraph::populate`] runs).
    exec: cu::CUgraphExec,
    stream: Arc<CudaStream>,
}

impl NativeCudaGraph {
    /// Records one execute of `plan` with `pack` as a CUDA graph for `stream`: `cuGraphCreate`,
    /// `cudnnBackendPopulateCudaGraph`, then `cuGraphInstantiateWithFlags`.
    ///
    /// # Safety
    /// `handle` must be live and bound to `stream` (whose context must be current on this
    /// thread), `plan` and `pack` finalized, and `pack`'s pointers valid for `plan` on `stream`
    /// for every [`NativeCudaGraph::launch`] of the result (it replays them).
    pub(crate) unsafe fn populate(
        handle: sys::cudnnHandle_t,
        plan: &Descriptor,
        pack: &Descriptor,
        stream: Arc<CudaStream>,
    ) -> Result<Self, CudnnError> {
        let mut graph = ptr::null_mut();
        // SAFETY: a valid out-pointer; the stream's context is current (the caller vouches).
        check("cuGraphCreate", unsafe { cu::cuGraphCreate(&mut graph, 0) })?;
        // Owned from here on, so a failure below destroys the graph.
        let mut native = NativeCudaGraph { graph, exec: ptr::null_mut(), stream };
        // SAFETY: as the caller vouches, and `native.graph` is an empty graph of the handle's
        // context.
        unsafe { populate_cuda_graph(handle, plan, pack, native.graph) }?;
        // SAFETY: a valid out-pointer and a populated graph.
        let instantiated = unsafe { cu::cuGraphInstantiateWithFlags(&mut native.exec, native.graph, 0) };
        check("cuGraphInstantiateWithFlags", instantiated)?;
        Ok(native)
    }

    /// Points the graph at the buffers of `pack`: `cudnnBackendUpdateCudaGraph` rewrites its
    /// nodes' arguments, then `cuGraphExecUpdate` applies that to the instantiated graph (a
    /// failure names the update result, `CU_GRAPH_EXEC_UPDATE_ERROR_...`).
    ///
    /// # Safety
    /// `handle` must be live and of this graph's CUDA context (current on this thread), `plan`
    /// the plan this graph was populated for, `pack` finalized with pointers valid for `plan` for
    /// every later launch; launches already enqueued keep the old pointers, which must stay valid
    /// until that work is done.
    pub(crate) unsafe fn update(
        &mut self,
        handle: sys::cudnnHandle_t,
        plan: &Descriptor,
        pack: &Descriptor,
    ) -> Result<(), CudnnError> {
        // SAFETY: as the caller vouches; `self.graph` was populated by cuDNN for `plan`.
        unsafe { update_cuda_graph(handle, plan, pack, self.graph) }?;
        // SAFETY: an instantiated graph and the graph it was instantiated from, topology unchanged
        // (cuDNN only rewrites node parameters).
        unsafe { exec_update(self.exec, self.graph) }
    }

    /// Replays the graph on its stream (`cuGraphLaunch`).
    pub(crate) fn launch(&self) -> Result<(), CudnnError> {
        self.stream
            .context()
            .bind_to_thread()
            .map_err(|e| CudnnError::Driver { call: "cuGraphLaunch", message: e.to_string() })?;
        // SAFETY: an instantiated graph of this stream's context (now current), launched on that
        // live stream; the pointers it replays are valid as `populate`'s and `update`'s callers
        // vouched.
        check("cuGraphLaunch", unsafe { cu::cuGraphLaunch(self.exec, self.stream.cu_stream()) })
    }
}

impl Drop for NativeCudaGraph {
    fn drop(&mut self) {
        // Nothing useful can be done with failures here.
        let _ = self.stream.context().bind_to_thread();
        if !self.exec.is_null() {
            // SAFETY: made by cuGraphInstantiateWithFlags, destroyed once.
            let _ = unsafe { cu::cuGraphExecDestroy(self.exec) };
        }
        // SAFETY: made by cuGraphCreate, destroyed once (after its instantiation).
        let _ = unsafe { cu::cuGraphDestroy(self.graph) };
    }
}
