//! CUDA graphs of one execute: [`ExecutionPlan::cuda_graph`] records it (populated by cuDNN where
//! the plan supports it, stream-captured otherwise) as a [`PlanGraph`], which
//! [`PlanGraph::update`] points at other buffers and [`PlanGraph::launch`] replays.

use super::candidate::BehaviorNote;
use super::plan::ExecutionPlan;
use super::{BackendError, Cudnn};
use crate::cudnn::{exec_update, NativeCudaGraph};

/// How [`ExecutionPlan::cuda_graph`] records an execute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GraphMode {
    /// cuDNN's native API where the plan supports it, stream capture otherwise.
    #[default]
    Auto,
    /// `cudnnBackendPopulateCudaGraph` (an error for plans without
    /// [`BehaviorNote::SupportsCudaGraphNativeApi`]).
    Native,
    /// Stream capture of an ordinary execute.
    Capture,
}

impl ExecutionPlan {
    /// Records one execute of the selected plan, with these raw pointers (as
    /// [`ExecutionPlan::execute_raw`] takes them), as a CUDA graph that [`PlanGraph::launch`]
    /// replays on the context's stream. With [`GraphMode::Auto`], where the plan's behavior notes
    /// include [`BehaviorNote::SupportsCudaGraphNativeApi`], cuDNN populates the graph itself
    /// (`cudnnBackendPopulateCudaGraph`); otherwise the execute is stream-captured, which needs a
    /// stream made with `CudaContext::new_stream` (the legacy default stream cannot be captured:
    /// that is a [`BackendError::Driver`]).
    ///
    /// A host scalar ([`crate::Tensor::host_scalar`]) is read when the graph is recorded (it
    /// becomes a kernel argument): every launch computes with that value, and a new value needs
    /// [`PlanGraph::update`] or a new recording.
    ///
    /// # Safety
    /// As [`ExecutionPlan::execute_raw`], and the pointers must stay valid for every launch of
    /// the returned graph (it replays them).
    pub unsafe fn cuda_graph(
        &self,
        cudnn: &Cudnn,
        io: &[u64],
        workspace: u64,
        mode: GraphMode,
    ) -> Result<PlanGraph<'_>, BackendError> {
        let (handle, _) = self.target(cudnn)?;
        self.check_raw(io, workspace)?;
        let single = !self.is_partitioned();
        let native_api = single && self.selected().behavior_notes.contains(&BehaviorNote::SupportsCudaGraphNativeApi);
        let native = match mode {
            GraphMode::Auto => native_api,
            GraphMode::Native if !native_api => {
                return Err(BackendError::WrongEngine {
                    graph: self.graph().name.clone(),
                    engine: format!("cuDNN ({})", self.selected().tag()),
                    reason: if single {
                        "lacks SUPPORTS_CUDA_GRAPH_NATIVE_API: use GraphMode::Auto or GraphMode::Capture"
                    } else {
                        "is partitioned, and cuDNN populates a CUDA graph for one kernel: use GraphMode::Auto or \
                         GraphMode::Capture, which records every part"
                    },
                });
            }
            GraphMode::Native => true,
            GraphMode::Capture => false,
        };
        let stream = cudnn.stream().ok_or(BackendError::NotOnline { what: "recording a CUDA graph" })?.clone();
        if native {
            let part = &self.parts()[0];
            let pack = part.variant_pack(io, self.part_workspace(workspace, part))?;
            let held = part.descriptors();
            let plan = held.plan(part.selected_index());
            // SAFETY: a live handle bound to `stream` (`target` made its context current), a
            // finalized plan and pack, and pointers valid for every launch, as this function's
            // caller vouches.
            let graph = unsafe { NativeCudaGraph::populate(handle, plan, &pack, stream.clone()) }?;
            return Ok(self.recorded(GraphKind::Native(graph), cudnn, stream, io));
        }
        // SAFETY: as this function's.
        let graph = unsafe { self.capture(handle, &stream, io, workspace) }?;
        Ok(self.recorded(GraphKind::Captured(graph), cudnn, stream, io))
    }

    /// The [`PlanGraph`] of `kind`, recorded on `stream` with I/O `io`; the plan recorded by a
    /// capture in progress (`backend::capture`), as at an execute.
    fn recorded(
        &self,
        kind: GraphKind,
        cudnn: &Cudnn,
        stream: std::sync::Arc<cudarc::driver::CudaStream>,
        io: &[u64],
    ) -> PlanGraph<'_> {
        super::capture::graph_recorded(self, cudnn);
        PlanGraph { kind, plan: self, stream, io: LaunchIo::of(self, io) }
    }

    /// One execute (every part) stream-captured on `stream` and instantiated.
    ///
    /// # Safety
    /// As [`ExecutionPlan::cuda_graph`].
    unsafe fn capture(
        &self,
        handle: cudarc::cudnn::sys::cudnnHandle_t,
        stream: &std::sync::Arc<cudarc::driver::CudaStream>,
        io: &[u64],
        workspace: u64,
    ) -> Result<cudarc::driver::CudaGraph, BackendError> {
        use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(BackendError::driver("cuStreamBeginCapture"))?;
        // SAFETY: as this function's.
        let launched = unsafe { self.launch(handle, io, workspace) };
        let captured = stream.end_capture(CUgraphInstantiate_flags(0));
        launched?;
        match captured {
            Ok(Some(graph)) => Ok(graph),
            Ok(None) => {
                Err(BackendError::Driver { call: "cuStreamEndCapture", message: "nothing was captured".into() })
            }
            Err(e) => Err(BackendError::Driver { call: "cuStreamEndCapture", message: e.to_string() }),
        }
    }
}

/// A CUDA graph of one execute (see [`ExecutionPlan::cuda_graph`]); it borrows the plan, whose
/// kernels it launches. Not `Send`: CUDA graphs are not internally synchronized.
///
/// The borrow is what keeps a plan from a [`PlanCache`](crate::engines::PlanCache) alive, and its
/// entry pinned, for as long as the graph lives: the cache hands out `Arc`s, a graph borrows the
/// plan through the caller's, and the cache never evicts an entry whose plan is held outside it.
/// A graph cannot outlive that `Arc`:
///
/// ```compile_fail,E0597
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::backend::{BuildOptions, Cudnn, GraphMode, PlanGraph};
/// use cudnn_graph::engines::PlanCache;
/// use cudnn_graph::payload::plan::Expect;
/// fn record(cache: &PlanCache, cudnn: &Cudnn, graph: &cudnn_graph::Graph, io: &[u64]) {
///     let recorded: PlanGraph<'_>;
///     {
///         let plan = cache.get_or_build(cudnn, graph, &Expect::default(), &BuildOptions::default()).unwrap().plan;
///         // error[E0597]: `plan` does not live long enough
///         recorded = unsafe { plan.cuda_graph(cudnn, io, 0, GraphMode::Auto) }.unwrap();
///     }
///     recorded.launch().unwrap();
/// }
/// ```
pub struct PlanGraph<'p> {
    kind: GraphKind,
    plan: &'p ExecutionPlan,
    /// The stream it launches on.
    stream: std::sync::Arc<cudarc::driver::CudaStream>,
    /// The I/O its launches run with, for a capture to read their inputs.
    io: LaunchIo,
}

/// The I/O pointers a graph was recorded (or last updated) with, as a capture reads a launch's
/// inputs: a host scalar's value is copied here when the graph is recorded (the caller's
/// address is valid only for that call, and the graph computes with that value), and its
/// pointer is to the copy.
struct LaunchIo {
    pointers: Vec<u64>,
    /// Each host scalar's bytes, in one allocation that never moves (`pointers` address it).
    _values: Box<[[u8; 16]]>,
}

impl LaunchIo {
    /// `io` of `plan`, each host scalar's value copied.
    fn of(plan: &ExecutionPlan, io: &[u64]) -> Self {
        let graph = plan.graph();
        let ids = plan.layout().io();
        let host: Vec<usize> = (0..ids.len().min(io.len())).filter(|&k| graph.tensor(ids[k]).host_scalar).collect();
        let mut values = vec![[0u8; 16]; host.len()].into_boxed_slice();
        let mut pointers = io.to_vec();
        for (value, &k) in values.iter_mut().zip(&host) {
            let size = graph.tensor(ids[k]).data_type.size_bytes().min(16);
            // SAFETY: a host scalar's pointer is the address of its value, in its type, valid for
            // the duration of the call recording or updating the graph (`execute_raw`'s
            // contract, which `cuda_graph` and `update` take), which this runs in.
            unsafe { std::ptr::copy_nonoverlapping(pointers[k] as *const u8, value.as_mut_ptr(), size) };
            pointers[k] = value.as_ptr() as u64;
        }
        LaunchIo { pointers, _values: values }
    }
}

enum GraphKind {
    /// Populated by cuDNN.
    Native(NativeCudaGraph),
    /// Stream-captured (cudarc's graph, which holds the stream too).
    Captured(cudarc::driver::CudaGraph),
}

impl std::fmt::Debug for PlanGraph<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PlanGraph({})", if self.is_native() { "populated by cuDNN" } else { "stream-captured" })
    }
}

impl PlanGraph<'_> {
    /// Whether cuDNN populated the graph (`cudnnBackendPopulateCudaGraph`) rather than a stream
    /// capture.
    pub fn is_native(&self) -> bool {
        matches!(self.kind, GraphKind::Native(_))
    }

    /// Points the graph at other buffers (taken as [`ExecutionPlan::cuda_graph`] takes them)
    /// without a new instantiation. A graph populated by cuDNN is updated by cuDNN
    /// (`cudnnBackendUpdateCudaGraph` rewrites its nodes' arguments for a variant pack of these
    /// pointers); a stream-captured one (every partitioned plan's) by capturing the execute again
    /// with these pointers. Either way the instantiated graph is then updated in place
    /// (`cuGraphExecUpdate`; a capture whose kernels differ is a [`BackendError::Driver`] naming
    /// the update result: record it again). The plan's selection must be the one the graph was
    /// recorded with.
    ///
    /// # Safety
    /// As [`ExecutionPlan::cuda_graph`]: the new pointers must stay valid for every later launch.
    /// Launches already enqueued keep the old pointers (CUDA applies an update from the next
    /// launch on), so those must stay valid until that work is done.
    pub unsafe fn update(&mut self, cudnn: &Cudnn, io: &[u64], workspace: u64) -> Result<(), BackendError> {
        let plan = self.plan;
        let (handle, _) = plan.target(cudnn)?;
        plan.check_raw(io, workspace)?;
        // Read now (a host scalar's address is valid during this call), kept once the update held.
        let launch_io = LaunchIo::of(plan, io);
        let updated: Result<(), BackendError> = match &mut self.kind {
            GraphKind::Native(native) => {
                // A graph populated by cuDNN is of a plan of one part.
                let part = &plan.parts()[0];
                let pack = part.variant_pack(io, plan.part_workspace(workspace, part))?;
                let held = part.descriptors();
                let descriptor = held.plan(part.selected_index());
                // SAFETY: a live handle of the graph's context (`target` checked it is the plan's
                // and made it current), the plan and selection `native` was populated for, a
                // finalized pack, and pointers valid for every later launch, as this function's
                // caller vouches.
                Ok(unsafe { native.update(handle, descriptor, &pack) }?)
            }
            GraphKind::Captured(graph) => {
                let stream = cudnn.stream().ok_or(BackendError::NotOnline { what: "updating a CUDA graph" })?;
                // SAFETY: as this function's.
                let again = unsafe { plan.capture(handle, stream, io, workspace) }?;
                // SAFETY: both graphs are live and of this context (current after `target`); the
                // new capture's pointers are valid for every later launch, as the caller vouches.
                Ok(unsafe { exec_update(graph.cu_graph_exec(), again.cu_graph()) }?)
            }
        };
        if updated.is_ok() {
            self.io = launch_io;
        }
        updated
    }

    /// Replays the execute on the stream it was recorded for. A capture in progress
    /// (`backend::capture`) counts it as an execute of the plan: the inputs of the plan's first
    /// executes, launches included, are saved.
    pub fn launch(&self) -> Result<(), BackendError> {
        match &self.kind {
            GraphKind::Native(native) => native.launch()?,
            GraphKind::Captured(graph) => graph.launch().map_err(BackendError::driver("cuGraphLaunch"))?,
        }
        super::capture::launched(self.plan, &self.stream, &self.io.pointers);
        Ok(())
    }
}
