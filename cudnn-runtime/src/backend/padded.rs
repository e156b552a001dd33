//! [`PaddedPlan`]: one plan made at a `dyn` dim's class bound, serving every length of the
//! class without a new plan (issue 19; the graph side is [`crate::ir::ClassGraph`]): attention,
//! masked by its padding mask, and row-wise graphs (norms, pointwise), whose rows along axis 0
//! are computed apart.
//!
//! A call at `S = 300` of a class bound of 512 runs the class plan: each input whose padded
//! axis is shorter is copied into a buffer of the class extents (one `cuMemcpy2DAsync`: its
//! blocks of `S · position` elements into blocks of `512 · position`), the rest of those
//! buffers is kept zero (the positions a longer call left are cleared again), the attention
//! nodes' sequence lengths are set to 300, the plan runs, and each output's first 300 positions
//! are copied back. A call at the class bound itself binds its buffers directly: no copies. All
//! of it is enqueued on the context's stream: the host work of a new length is a few driver calls.
//!
//! The plan's padded buffers (the class extents of every tensor a call can shorten), its
//! workspace and the sequence-length buffers are allocated once, when the plan is made, and
//! belong to it: [`PaddedPlan::execute`] takes `&mut self`, and every use of them goes through
//! cudarc's stream ordering, so a plan used from two streams in turn orders itself.
//!
//! The device time is the class plan's plus the copies: attention over 512 positions costs what
//! it costs at 512 (a layer norm of 512 rows, what 512 rows cost, and its copies are as many
//! bytes again as its own traffic), so classes trade plans for device time (`docs/benchmarks.md` measures the
//! curve; finer classes waste less).
//!
//! ```no_run
//! # use cudnn_runtime as cudnn_graph;
//! use cudnn_graph::backend::{BuildOptions, Cudnn, DeviceBuffer, PaddedPlan};
//! use cudnn_graph::{DataType, Graph, GraphBuilder};
//! fn attention(s: i64) -> Graph {
//!     let mut g = GraphBuilder::new("attention");
//!     let qkv: Vec<_> =
//!         ["q", "k", "v"].iter().map(|n| g.input(n, DataType::BF16, &[1, 16, s, 128]).unwrap().into()).collect();
//!     let o = g.op("sdpa", &qkv, &[("causal".into(), true.into())]).unwrap()[0];
//!     g.output(o, "o", DataType::BF16).unwrap();
//!     g.build().unwrap()
//! }
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let ctx = cudnn_graph::backend::cudarc::driver::CudaContext::new(0)?;
//! let cudnn = Cudnn::new(ctx.default_stream())?;
//! let mut plan = PaddedPlan::build(&cudnn, &attention(512), &BuildOptions::default())?;
//! let stream = ctx.default_stream();
//! let n = 16 * 300 * 128;
//! let alloc = || stream.alloc_zeros::<half::bf16>(n);
//! let (q, k, v, mut o) = (alloc()?, alloc()?, alloc()?, alloc()?);
//! let mut io = [DeviceBuffer::input(&q), DeviceBuffer::input(&k), DeviceBuffer::input(&v), DeviceBuffer::output(&mut o)];
//! plan.execute(&cudnn, &attention(300), &mut io)?; // S = 300 on the S = 512 plan
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use cudarc::driver::sys::{self as cu, CUresult};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use super::execute::check_buffer;
use super::{BackendError, BuildOptions, Cudnn, DeviceBuffer, ExecutionPlan};
use crate::ir::{Binding, ClassGraph, PadCopy, TensorId};
use crate::Graph;

/// A plan made at its class bound, serving calls at every length up to it: attention masked,
/// row-wise graphs with their rows padded ([`ClassGraph`]).
pub struct PaddedPlan {
    graph: ClassGraph,
    plan: Arc<ExecutionPlan>,
    /// Per I/O tensor of the masked graph, in the plan's I/O order.
    slots: Vec<Slot>,
    workspace: Option<CudaSlice<u8>>,
}

impl std::fmt::Debug for PaddedPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaddedPlan")
            .field("graph", &self.graph.class().name)
            .field("padded_bytes", &self.padded_bytes())
            .field("workspace", &self.plan.workspace_size())
            .finish()
    }
}

enum Slot {
    /// The call's I/O tensor `index` (inputs, then outputs), padded through `buffer` when the
    /// call can shorten it. `zero_from`: elements of each block past which the buffer is known
    /// zero.
    Io { index: usize, padded: Option<(CudaSlice<u8>, usize)> },
    /// An attention node's sequence length (`kv`: `SEQ_LEN_KV`), `[B]` copies of `value`.
    Length { node: usize, kv: bool, buffer: CudaSlice<i32>, value: i32 },
}

impl PaddedPlan {
    /// Masks `class` (a graph at its class bound, [`ClassGraph::new`]), plans it with `options`,
    /// and allocates its padded buffers and workspace on `cudnn`'s stream.
    pub fn build(cudnn: &Cudnn, class: &Graph, options: &BuildOptions) -> Result<Self, BackendError> {
        cudnn.stream().ok_or(BackendError::NotOnline { what: "allocating a padded plan's buffers" })?;
        let graph = ClassGraph::new(class)?;
        let plan = ExecutionPlan::build(cudnn, graph.masked(), options)?;
        Self::allocate(cudnn, graph, Arc::new(plan))
    }

    /// The padded plan of `graph` on `plan`, a plan of its masked graph ([`ClassGraph::masked`])
    /// made before: loaded from a payload, or shared from a plan cache (the engines layer's
    /// `PlanCache::padded_plan` does this, so class plans compiled ahead of time serve padded
    /// calls with no planning). Allocates the padded buffers and workspace on `cudnn`'s stream.
    ///
    /// # Errors
    /// [`PadError::PlanMismatch`](crate::ir::PadError::PlanMismatch) if `plan` was made for
    /// another graph; [`BackendError::NotOnline`] without a GPU.
    pub fn from_plan(cudnn: &Cudnn, graph: ClassGraph, plan: Arc<ExecutionPlan>) -> Result<Self, BackendError> {
        if plan.graph() != graph.masked() {
            return Err(crate::ir::PadError::PlanMismatch {
                graph: graph.class().name.clone(),
                plan: plan.graph().name.clone(),
            }
            .into());
        }
        Self::allocate(cudnn, graph, plan)
    }

    fn allocate(cudnn: &Cudnn, graph: ClassGraph, plan: Arc<ExecutionPlan>) -> Result<Self, BackendError> {
        let stream = cudnn.stream().ok_or(BackendError::NotOnline { what: "allocating a padded plan's buffers" })?;
        let class = graph.class();
        let masked = graph.masked();
        let class_io = class.io();
        let lengths = graph.seq_len_inputs();
        let mut slots = Vec::with_capacity(plan.layout().io().len());
        for &id in plan.layout().io() {
            let t = masked.tensor(id);
            if let Some(index) = class_io.iter().position(|&c| c == id) {
                let padded = match graph.padded_axes()[index] {
                    Some(_) => {
                        // Zero: every block is known zero from its first element.
                        let bytes = t.storage_len() * t.data_type.size_bytes();
                        Some((
                            stream
                                .alloc_zeros::<u8>(bytes)
                                .map_err(BackendError::driver("allocate a padded buffer"))?,
                            0,
                        ))
                    }
                    None => None,
                };
                slots.push(Slot::Io { index, padded });
                continue;
            }
            let (node, kv) = lengths
                .iter()
                .enumerate()
                .find_map(|(n, &(q, kv))| (id == q).then_some((n, false)).or((id == kv).then_some((n, true))))
                .ok_or_else(|| BackendError::Driver {
                    call: "bind a padded plan",
                    message: format!("tensor `{}` is neither an I/O tensor nor a sequence length", t.name),
                })?;
            let buffer = stream
                .alloc_zeros::<i32>(t.dims[0] as usize)
                .map_err(BackendError::driver("allocate sequence lengths"))?;
            slots.push(Slot::Length { node, kv, buffer, value: 0 });
        }
        let workspace = match plan.workspace_size() {
            0 => None,
            n => Some(stream.alloc_zeros::<u8>(n).map_err(BackendError::driver("allocate the workspace"))?),
        };
        Ok(PaddedPlan { graph, plan, slots, workspace })
    }

    /// The class plan (of [`PaddedPlan::graph`]'s masked graph).
    pub fn plan(&self) -> &ExecutionPlan {
        &self.plan
    }

    /// The class plan, shared.
    pub(crate) fn shared_plan(&self) -> Arc<ExecutionPlan> {
        Arc::clone(&self.plan)
    }

    /// The class graph and its masked form.
    pub fn graph(&self) -> &ClassGraph {
        &self.graph
    }

    /// Device bytes of the padded buffers (the workspace is [`ExecutionPlan::workspace_size`]).
    pub fn padded_bytes(&self) -> usize {
        self.slots
            .iter()
            .map(|s| match s {
                Slot::Io { padded: Some((b, _)), .. } => b.len(),
                _ => 0,
            })
            .sum()
    }

    /// Runs `call` (the class graph at sequence lengths up to the class's, [`ClassGraph::bind`])
    /// on the class plan: `io` holds the call graph's inputs, then its outputs, in
    /// [`Graph::inputs`] / [`Graph::outputs`] order, each checked against the call's tensor as
    /// [`ExecutionPlan::execute`] checks them. Enqueued on the context's stream.
    pub fn execute(&mut self, cudnn: &Cudnn, call: &Graph, io: &mut [DeviceBuffer<'_>]) -> Result<(), BackendError> {
        let binding = self.graph.bind(call)?;
        self.execute_bound(cudnn, call, &binding, io)
    }

    /// [`PaddedPlan::execute`] of a call already bound to this plan's class graph.
    pub(crate) fn execute_bound(
        &mut self,
        cudnn: &Cudnn,
        call: &Graph,
        binding: &Binding,
        io: &mut [DeviceBuffer<'_>],
    ) -> Result<(), BackendError> {
        let (call_io, stream) = self.ready(cudnn, call, io.len())?;
        let inputs = call.inputs().len();
        for (i, (buffer, &id)) in io.iter().zip(&call_io).enumerate() {
            // A class graph has no packed attention (`ClassGraph::new` refuses an attention with
            // a padding mask of its own, which packing needs): every buffer holds its span.
            check_buffer(call.tensor(id), call.tensor(id).storage_len(), buffer, i >= inputs, &stream)?;
        }
        // The call's addresses, with cudarc's stream-ordering guards held until all is enqueued.
        let mut user = Vec::with_capacity(io.len());
        let mut guards = Vec::with_capacity(io.len());
        for buffer in io.iter_mut() {
            let (address, guard) = buffer.pointer(&stream);
            user.push(address);
            guards.push(guard);
        }
        // SAFETY: every address is a call buffer checked to hold its tensor, of this stream's
        // context, guarded (stream-ordered) until the work is enqueued.
        let launched = unsafe { self.launch(cudnn, &stream, call, (&call_io, inputs), binding, &user) };
        drop(guards);
        launched
    }

    /// Runs the class plan once at its bound, on its own padded buffers (zeros) and zeroed
    /// scratch buffers for the tensors a call does not shorten, and waits for it: cuDNN and the
    /// driver load the plan's kernels at its first execute (1.2–3.7 ms of host work for attention
    /// on the H100, `docs/benchmarks.md`), so a service warms its class plans at start and its
    /// first calls cost what any call costs. Writes only the plan's own buffers.
    ///
    /// # Errors
    /// A failed allocation or execute.
    pub fn warm_up(&mut self, cudnn: &Cudnn) -> Result<(), BackendError> {
        self.plan.target(cudnn)?;
        let stream = cudnn.stream().ok_or(BackendError::NotOnline { what: "warming a padded plan" })?.clone();
        let class = self.graph.class().clone();
        let binding = self.graph.bind(&class)?;
        let io = class.io();
        let mut scratch = Vec::new();
        let mut scalars = Vec::new();
        let mut user = vec![0u64; io.len()];
        for slot in &self.slots {
            if let Slot::Io { index, padded: Some((buffer, _)) } = slot {
                user[*index] = buffer.device_ptr(&stream).0;
            }
        }
        for (index, &id) in io.iter().enumerate() {
            if user[index] != 0 {
                continue;
            }
            let t = class.tensor(id);
            if t.host_scalar {
                let scalar = Box::new(super::HostScalar::new(t.data_type, 1.0));
                user[index] = scalar.address();
                scalars.push(scalar);
            } else {
                let bytes = (t.storage_len() * t.data_type.size_bytes()).max(1);
                let buffer =
                    stream.alloc_zeros::<u8>(bytes).map_err(BackendError::driver("allocate a warm-up buffer"))?;
                user[index] = buffer.device_ptr(&stream).0;
                scratch.push(buffer);
            }
        }
        // SAFETY: every address is one of this plan's padded buffers (the class extents) or a
        // scratch buffer of its tensor's storage (or a boxed host scalar), on this stream's
        // context; all live until the stream is synchronized below.
        let inputs = class.inputs().len();
        let launched = unsafe { self.launch(cudnn, &stream, &class, (&io, inputs), &binding, &user) };
        let synced = stream.synchronize().map_err(BackendError::driver("cuStreamSynchronize"));
        drop((scratch, scalars));
        launched.and(synced)
    }

    /// [`PaddedPlan::execute`] with raw device pointers (`CUdeviceptr`), one per I/O tensor of
    /// `call` in [`Graph::io`] order (inputs, then outputs), as
    /// [`ExecutionPlan::execute_raw`] takes them; the padded buffers and the workspace are the
    /// plan's own. Enqueued on the context's stream.
    ///
    /// # Safety
    /// As [`ExecutionPlan::execute_raw`]'s, for `call`'s tensors: every pointer must address
    /// device memory of the context's device, aligned to 16 bytes, holding at least its
    /// tensor's storage in its data type, valid (and, for outputs, not otherwise accessed) until
    /// the enqueued work completes.
    pub unsafe fn execute_raw(&mut self, cudnn: &Cudnn, call: &Graph, io: &[u64]) -> Result<(), BackendError> {
        let binding = self.graph.bind(call)?;
        let (call_io, stream) = self.ready(cudnn, call, io.len())?;
        let inputs = call.inputs().len();
        // SAFETY: the caller's.
        unsafe { self.launch(cudnn, &stream, call, (&call_io, inputs), &binding, io) }
    }

    /// What both ways of running a call check first, so that nothing is enqueued for a call that
    /// cannot run: `found` buffers, one per I/O tensor of `call`, and the plan and `cudnn` online
    /// in one context ([`ExecutionPlan::target`]). Returns `call`'s I/O tensors ([`Graph::io`])
    /// and the context's stream.
    fn ready(
        &self,
        cudnn: &Cudnn,
        call: &Graph,
        found: usize,
    ) -> Result<(Vec<TensorId>, Arc<CudaStream>), BackendError> {
        let call_io = call.io();
        if found != call_io.len() {
            return Err(BackendError::IoCount { graph: call.name.clone(), expected: call_io.len(), found });
        }
        self.plan.target(cudnn)?;
        let stream = cudnn.stream().ok_or(BackendError::NotOnline { what: "executing a plan" })?.clone();
        Ok((call_io, stream))
    }

    /// Enqueues a bound call: the copies in, the tails cleared, the lengths set, the class plan,
    /// the copies out.
    ///
    /// # Safety
    /// `user` holds one address per I/O tensor of `call` ([`Graph::io`] order), each as
    /// [`PaddedPlan::execute_raw`] requires; `binding` is `call` bound to this plan's graph, and
    /// `(call_io, inputs)` are `call`'s [`Graph::io`] and its input count (the callers have them).
    unsafe fn launch(
        &mut self,
        cudnn: &Cudnn,
        stream: &Arc<CudaStream>,
        call: &Graph,
        (call_io, inputs): (&[TensorId], usize),
        binding: &Binding,
        user: &[u64],
    ) -> Result<(), BackendError> {
        let exact = binding.is_exact();
        let bytes: Vec<usize> = call_io.iter().map(|&id| call.tensor(id).data_type.size_bytes()).collect();
        let mut guards = Vec::with_capacity(self.slots.len() + 1);
        let mut addresses = Vec::with_capacity(self.slots.len());
        let mut outputs = Vec::new();
        for slot in &mut self.slots {
            match slot {
                Slot::Io { index, padded: Some((buffer, zero_from)) } if !exact => {
                    let copy = binding.copies[*index].unwrap_or(PadCopy { rows: 0, call_row: 0, class_row: 0 });
                    let size = bytes[*index];
                    let (address, guard) = buffer.device_ptr_mut(stream);
                    if *index < inputs {
                        // SAFETY: the call's buffer holds its tensor (rows blocks of call_row
                        // elements, packed: ClassGraph::bind; this function's contract), the
                        // padded buffer holds rows blocks of class_row; both are of this
                        // stream's context, guarded.
                        unsafe {
                            copy_blocks(stream, address, copy.class_row, user[*index], copy.call_row, copy, size)
                        }
                        .map_err(BackendError::driver("copy an input into its padded buffer"))?;
                        if copy.call_row < *zero_from {
                            let width = (*zero_from - copy.call_row) * size;
                            let start = address + (copy.call_row * size) as u64;
                            // SAFETY: inside each block of the padded buffer (call_row..zero_from).
                            unsafe { zero_blocks(stream, start, copy.class_row * size, width, copy.rows) }
                                .map_err(BackendError::driver("clear a padded buffer's tail"))?;
                        }
                        *zero_from = copy.call_row;
                    } else {
                        outputs.push((address, user[*index], copy, size));
                    }
                    addresses.push(address);
                    guards.push(guard);
                }
                Slot::Io { index, .. } => addresses.push(user[*index]),
                Slot::Length { node, kv, buffer, value } => {
                    let (q, k) = binding.seq_lens[*node];
                    let want = if *kv { k } else { q };
                    if *value != want {
                        let host = vec![want; buffer.len()];
                        stream.memcpy_htod(&host, buffer).map_err(BackendError::driver("set the sequence lengths"))?;
                        *value = want;
                    }
                    let (address, guard) = buffer.device_ptr_mut(stream);
                    addresses.push(address);
                    guards.push(guard);
                }
            }
        }
        let workspace = match &mut self.workspace {
            Some(w) => {
                let (address, guard) = w.device_ptr_mut(stream);
                guards.push(guard);
                address
            }
            None => 0,
        };
        // SAFETY: every address is a call buffer (this function's contract) or a buffer of this
        // plan holding its tensor at the class extents, on this stream's context and guarded
        // until enqueued; the workspace is the plan's size.
        unsafe { self.plan.execute_raw(cudnn, &addresses, workspace) }?;
        for (padded, to, copy, size) in outputs {
            // SAFETY: as the inputs' copies, the other way.
            unsafe { copy_blocks(stream, to, copy.call_row, padded, copy.class_row, copy, size) }
                .map_err(BackendError::driver("copy an output out of its padded buffer"))?;
        }
        drop(guards);
        Ok(())
    }
}

impl From<crate::ir::PadError> for BackendError {
    fn from(e: crate::ir::PadError) -> Self {
        BackendError::Padding(Box::new(e))
    }
}

/// Copies `copy.rows` blocks of `copy.call_row` elements of `size` bytes from `src` (blocks
/// `src_row` elements apart) to `dst` (blocks `dst_row` apart), on `stream`.
///
/// # Safety
/// Both ranges must be device memory of the stream's context, valid until the copy completes.
unsafe fn copy_blocks(
    stream: &CudaStream,
    dst: u64,
    dst_row: usize,
    src: u64,
    src_row: usize,
    copy: PadCopy,
    size: usize,
) -> Result<(), cudarc::driver::DriverError> {
    let width = copy.call_row * size;
    if copy.rows == 0 || width == 0 {
        return Ok(());
    }
    if copy.rows == 1 || (dst_row == copy.call_row && src_row == copy.call_row) {
        // SAFETY: the caller's.
        return unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, width * copy.rows, stream.cu_stream()) };
    }
    let params = cu::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: cu::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcHost: std::ptr::null(),
        srcDevice: src,
        srcArray: std::ptr::null_mut(),
        srcPitch: src_row * size,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: cu::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        dstHost: std::ptr::null_mut(),
        dstDevice: dst,
        dstArray: std::ptr::null_mut(),
        dstPitch: dst_row * size,
        WidthInBytes: width,
        Height: copy.rows,
    };
    // SAFETY: the caller's; `params` lives through the call (the driver reads it when enqueuing).
    unsafe { cu::cuMemcpy2DAsync_v2(&params, stream.cu_stream()) }.result()
}

/// Zeroes `width` bytes at `start` in each of `rows` blocks `pitch` bytes apart, on `stream`.
///
/// # Safety
/// The ranges must be device memory of the stream's context, valid until the work completes.
unsafe fn zero_blocks(
    stream: &CudaStream,
    start: u64,
    pitch: usize,
    width: usize,
    rows: usize,
) -> Result<(), cudarc::driver::DriverError> {
    // SAFETY: the caller's.
    let status: CUresult = unsafe { cu::cuMemsetD2D8Async(start, pitch, 0, width, rows, stream.cu_stream()) };
    status.result()
}
