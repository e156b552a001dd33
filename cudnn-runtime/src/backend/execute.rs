//! Execution: [`ExecutionPlan::execute`] over type-erased, borrow-checked [`DeviceBuffer`]s, and
//! [`ExecutionPlan::execute_raw`] over raw device pointers for frameworks with their own
//! allocators, and [`ExecutionPlan::cuda_graph`], one execute recorded as a CUDA graph (which
//! [`PlanGraph::update`] points at other buffers when cuDNN populated it).
//!
//! The hot path is lean: the variant-pack layout (ascending uids, each I/O tensor's position,
//! the by-value scalars' host storage) is fixed when the plan is made, pointer arrays live on the
//! stack for graphs of up to [`INLINE_IO`] entries, and the finalized variant packs of the last
//! [`PACK_SLOTS`] pointer sets are kept with the plan: an execute with pointers seen recently
//! allocates nothing, hashes nothing and makes no descriptor call — one uncontended lock (an
//! atomic compare-and-swap) and one `cudnnBackendExecute`, as with a variant pack prebuilt by
//! hand. New pointers cost one pack (create, set, finalize: about 1–2 µs).
//!
//! Threads: a plan is `Send` and `Sync`, so one plan (behind an `Arc`, or borrowed in a
//! `std::thread::scope`) serves threads that each execute on their own stream. Each thread passes
//! its own [`Cudnn`] (a `Cudnn` is not `Sync`): cuDNN is thread-safe as long as no handle is used
//! by two threads at once. A plan's cuDNN descriptors (the execution plan, its variant packs) sit
//! behind one lock held only while cuDNN is called on them — an execute holds it for the host-side
//! enqueue (`cudnnBackendExecute`, a few µs), never while the GPU runs — because cuDNN's thread
//! safety promise is about handles only, and says nothing for one execution plan executed by
//! several threads at once: cuDNN's team reported thread-safety limitations for execution plans
//! shared across threads (pytorch/pytorch#103939), and PyTorch has kept its plan caches
//! thread-local since. So threads sharing a plan run their GPU work concurrently on their
//! streams and only take turns to enqueue it; a thread that finds the lock taken waits for that
//! enqueue, which is shorter than making a plan of its own. Threads that enqueue one graph so
//! often that even this matters can each load a plan of their own with
//! [`ExecutionPlan::from_json`].

use std::ffi::c_void;
use std::ptr;

use cudarc::cudnn::sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut};
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendDescriptorType_t as K;

use super::buffer::Access;
pub use super::buffer::{DeviceBuffer, HostScalar, InputBuffer, OutputBuffer};
pub use super::cuda_graph::{GraphMode, PlanGraph};
pub use super::pack::PACK_SLOTS;
use super::partition::Place;
use super::plan::{ExecutionPlan, PlanPart};
use super::{BackendError, Cudnn};
use crate::cudnn::{Descriptor, ALIGNMENT};
use crate::reference::ArgError;
use crate::{DataType, Tensor};

/// Variant packs of up to this many entries (I/O tensors plus by-value scalars) are filled
/// without heap allocation.
pub const INLINE_IO: usize = 32;

/// `len` optional slots: the first [`INLINE_IO`] on the stack, any more on the heap.
struct Slots<T> {
    inline: [Option<T>; INLINE_IO],
    spill: Vec<Option<T>>,
}

impl<T> Slots<T> {
    fn new(len: usize) -> Self {
        let spill = std::iter::repeat_with(|| None).take(len.saturating_sub(INLINE_IO)).collect();
        Slots { inline: std::array::from_fn(|_| None), spill }
    }

    /// Slot `i`, which must be below the `len` given to [`Slots::new`].
    fn slot(&mut self, i: usize) -> &mut Option<T> {
        match i.checked_sub(INLINE_IO) {
            None => &mut self.inline[i],
            Some(j) => &mut self.spill[j],
        }
    }
}

/// `len` values, each `fill` to start with: on the stack up to [`INLINE_IO`], on the heap beyond.
struct SmallArray<T> {
    inline: [T; INLINE_IO],
    spill: Vec<T>,
    len: usize,
}

impl<T: Copy> SmallArray<T> {
    fn new(len: usize, fill: T) -> Self {
        let spill = if len > INLINE_IO { vec![fill; len] } else { Vec::new() };
        SmallArray { inline: [fill; INLINE_IO], spill, len }
    }
}

impl<T> std::ops::Deref for SmallArray<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        if self.len <= INLINE_IO {
            &self.inline[..self.len]
        } else {
            &self.spill
        }
    }
}

impl<T> std::ops::DerefMut for SmallArray<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        if self.len <= INLINE_IO {
            &mut self.inline[..self.len]
        } else {
            &mut self.spill
        }
    }
}

/// The checks a buffer gets against its tensor before anything is enqueued: host scalar or
/// device memory as the tensor is, element type, packed bits for `bool`, at least `need`
/// elements (the tensor's storage span, or a packed tensor's bounded tokens:
/// [`crate::Graph::storage_needs`]), writable if an output, and of the stream's CUDA context.
pub(super) fn check_buffer(
    t: &Tensor,
    need: usize,
    buffer: &DeviceBuffer<'_>,
    output: bool,
    stream: &CudaStream,
) -> Result<(), BackendError> {
    if buffer.is_host() != t.host_scalar {
        return Err(ArgError::HostScalar { tensor: t.name.clone(), host_scalar: t.host_scalar }.into());
    }
    if buffer.data_type != t.data_type {
        return Err(ArgError::DType { tensor: t.name.clone(), expected: t.data_type, found: buffer.data_type }.into());
    }
    if t.data_type == DataType::Bool && !buffer.packed {
        return Err(ArgError::UnpackedBool { tensor: t.name.clone() }.into());
    }
    if buffer.len < need {
        return Err(ArgError::Length {
            tensor: t.name.clone(),
            expected: need,
            found: buffer.len,
            dims: t.dims.clone(),
            strides: t.strides.clone(),
        }
        .into());
    }
    if output && matches!(buffer.access, Access::Read(_)) {
        return Err(BackendError::ReadOnlyOutput { tensor: t.name.clone() });
    }
    if buffer.context().is_some_and(|c| **c != **stream.context()) {
        return Err(BackendError::ForeignContext { what: format!("the buffer of tensor `{}`", t.name) });
    }
    Ok(())
}

impl ExecutionPlan {
    /// The handle and stream to execute with, after checking that both plan and context are
    /// online and binding the stream's context to this thread.
    pub(super) fn target<'c>(&self, cudnn: &'c Cudnn) -> Result<(sys::cudnnHandle_t, &'c CudaStream), BackendError> {
        let Some(plan_context) = self.anchor().context() else {
            return Err(BackendError::DevicelessPlan { graph: self.graph().name.clone() });
        };
        let (handle, stream) = cudnn.online().ok_or(BackendError::NotOnline { what: "executing a plan" })?;
        if **plan_context != **stream.context() {
            return Err(BackendError::ForeignContext { what: "the plan".into() });
        }
        stream.context().bind_to_thread().map_err(BackendError::driver("bind the stream's context"))?;
        Ok((handle, stream))
    }

    fn check_count(&self, found: usize) -> Result<(), BackendError> {
        let expected = self.layout().io().len();
        if found != expected {
            return Err(BackendError::IoCount { graph: self.graph().name.clone(), expected, found });
        }
        Ok(())
    }

    /// Runs the plan with raw device pointers (`CUdeviceptr`), one per I/O tensor in
    /// [`crate::backend::VariantLayout::io`] order (graph inputs, then outputs), and a workspace of
    /// at least [`ExecutionPlan::workspace_size`] bytes (may be 0 when that is 0). Work is
    /// enqueued on the context's stream.
    ///
    /// # Safety
    /// Every pointer must address device memory of the context's device, aligned to 16 bytes,
    /// holding at least the storage of its tensor (dims and strides) in its data type, valid
    /// (and, for outputs, not otherwise accessed) until the enqueued work completes; likewise the
    /// workspace. A host scalar's ([`crate::Tensor::host_scalar`]) is instead the address of its
    /// value in host memory, in its data type ([`super::HostScalar::address`]), valid until this
    /// call returns.
    pub unsafe fn execute_raw(&self, cudnn: &Cudnn, io: &[u64], workspace: u64) -> Result<(), BackendError> {
        let (handle, stream) = self.target(cudnn)?;
        self.check_raw(io, workspace)?;
        // SAFETY: the caller vouches for the pointers (this function's contract).
        unsafe { self.launch(handle, io, workspace) }?;
        super::capture::executed(self, cudnn, stream, io);
        Ok(())
    }

    /// The checks raw pointers get: count, a workspace where one is needed, alignment.
    pub(super) fn check_raw(&self, io: &[u64], workspace: u64) -> Result<(), BackendError> {
        self.check_count(io.len())?;
        if self.workspace_size() > 0 && workspace == 0 {
            return Err(BackendError::Workspace { required: self.workspace_size(), given: 0 });
        }
        for (&address, id) in io.iter().zip(self.layout().io()) {
            let t = self.graph().tensor(*id);
            // A host scalar is read from host memory, aligned for its type.
            let alignment = if t.host_scalar { t.data_type.size_bytes().max(1) as u64 } else { ALIGNMENT };
            if (t.host_scalar && address == 0) || address % alignment != 0 {
                return Err(BackendError::Misaligned { tensor: t.name.clone(), address, alignment });
            }
        }
        Ok(())
    }

    /// Runs the plan on the context's stream: `io` holds the graph inputs
    /// ([`DeviceBuffer::input`]) then its outputs ([`DeviceBuffer::output`]), in
    /// [`crate::Graph::inputs`] / [`crate::Graph::outputs`] order, and `workspace` at least
    /// [`ExecutionPlan::workspace_size`] bytes (`None` when that is 0).
    ///
    /// Before anything is enqueued it checks the count, each buffer's element type and length
    /// against its tensor (an [`ArgError`] naming the tensor), that outputs are writable, that
    /// every buffer belongs to the stream's CUDA context and is aligned, and the workspace size.
    /// cudarc's stream-ordering events are recorded for every buffer.
    ///
    /// Lengths: a device buffer (or view) must hold at least its tensor's storage span
    /// ([`crate::Tensor::storage_len`] elements), or for a packed attention tensor whose tokens
    /// the node bounds (`max_total_seq_len_q`/`_kv`) that many tokens
    /// ([`crate::Graph::storage_needs`]); a longer one is accepted and only its first span
    /// elements are read or written, because framework arenas and caching allocators hand out
    /// blocks rounded up. Host buffers, which are made for one shape, must match exactly
    /// ([`crate::reference::gather`]).
    pub fn execute(
        &self,
        cudnn: &Cudnn,
        io: &mut [DeviceBuffer<'_>],
        workspace: Option<&mut CudaSlice<u8>>,
    ) -> Result<(), BackendError> {
        self.check_count(io.len())?;
        let mut ordered = Slots::new(io.len());
        for (i, buffer) in io.iter_mut().enumerate() {
            *ordered.slot(i) = Some(buffer);
        }
        self.execute_ordered(cudnn, ordered, workspace)
    }

    /// [`ExecutionPlan::execute`] with each buffer named by its tensor, in any order. A name
    /// that is not an input or output of the graph, or is given twice, is an
    /// [`ArgError::Unexpected`].
    pub fn execute_named(
        &self,
        cudnn: &Cudnn,
        io: &mut [(&str, DeviceBuffer<'_>)],
        workspace: Option<&mut CudaSlice<u8>>,
    ) -> Result<(), BackendError> {
        self.check_count(io.len())?;
        let (graph, layout) = (self.graph(), self.layout());
        let mut ordered = Slots::new(io.len());
        for (k, (name, buffer)) in io.iter_mut().enumerate() {
            // Buffers usually come in I/O order (the generated code passes them so): try there
            // first, then search.
            let at = |i: usize| layout.io().get(i).is_some_and(|id| graph.tensor(*id).name == *name);
            let position = if at(k) { Some(k) } else { (0..layout.io().len()).find(|&i| at(i)) };
            match position.map(|i| ordered.slot(i)) {
                Some(slot @ None) => *slot = Some(buffer),
                _ => return Err(ArgError::Unexpected { graph: graph.name.clone(), tensor: name.to_string() }.into()),
            }
        }
        self.execute_ordered(cudnn, ordered, workspace)
    }

    /// Checks and runs buffers already in I/O order.
    fn execute_ordered(
        &self,
        cudnn: &Cudnn,
        mut io: Slots<&mut DeviceBuffer<'_>>,
        workspace: Option<&mut CudaSlice<u8>>,
    ) -> Result<(), BackendError> {
        let (handle, stream) = self.target(cudnn)?;
        let (graph, layout) = (self.graph(), self.layout());
        let n = layout.io().len();
        for (i, id) in layout.io().iter().enumerate() {
            let t = graph.tensor(*id);
            let Some(buffer) = io.slot(i).as_deref() else {
                return Err(ArgError::Missing { graph: graph.name.clone(), tensor: t.name.clone() }.into());
            };
            check_buffer(t, layout.need(i), buffer, layout.is_output(i), stream)?;
        }
        let required = self.workspace_size();
        let given = workspace.as_ref().map_or(0, |w| w.len());
        if required > 0 && given < required {
            return Err(BackendError::Workspace { required, given });
        }
        if workspace.as_ref().is_some_and(|w| **w.context() != **stream.context()) {
            return Err(BackendError::ForeignContext { what: "the workspace".into() });
        }

        // Guards of cudarc's stream ordering: dropped (recording each buffer's use) only after
        // the work is enqueued.
        let mut guards = Slots::new(n + 1);
        let mut addresses = SmallArray::new(n, 0u64);
        for (i, id) in layout.io().iter().enumerate() {
            let Some(buffer) = io.slot(i).take() else { continue };
            let host = buffer.is_host();
            let (address, guard) = buffer.pointer(stream);
            *guards.slot(i) = Some(guard);
            // A host scalar's storage is aligned for its type; cuDNN's 16 bytes are device memory's.
            if !host && address % ALIGNMENT != 0 {
                let tensor = graph.tensor(*id).name.clone();
                return Err(BackendError::Misaligned { tensor, address, alignment: ALIGNMENT });
            }
            addresses[i] = address;
        }
        let ws = match workspace {
            Some(w) if required > 0 => {
                let (address, guard) = w.device_ptr_mut(stream);
                *guards.slot(n) = Some(guard);
                address
            }
            _ => 0,
        };
        // SAFETY: every buffer was checked above to hold its tensor's storage in its type, to be
        // writable if an output, to belong to this stream's CUDA context and to be aligned; the
        // workspace is large enough. The borrows in `io` and the guards keep them alive and
        // ordered until after the work is enqueued.
        unsafe { self.launch(handle, &addresses, ws) }?;
        super::capture::executed(self, cudnn, stream, &addresses);
        drop(guards);
        Ok(())
    }

    /// Runs every part in order: each with its I/O at its place in the plan's memory (an I/O
    /// buffer, at an offset for a view, or the arena at the front of the workspace) and its own
    /// workspace after the arena.
    ///
    /// # Safety
    /// As [`ExecutionPlan::execute_raw`]: `io` (in I/O order) and `workspace` must be valid for
    /// the plan on `handle`'s stream.
    pub(super) unsafe fn launch(
        &self,
        handle: sys::cudnnHandle_t,
        io: &[u64],
        workspace: u64,
    ) -> Result<(), BackendError> {
        for part in self.parts() {
            // SAFETY: as this function's.
            unsafe { self.launch_one(handle, part, io, workspace) }?;
        }
        Ok(())
    }

    /// Runs part `index` alone, with the plan's I/O pointers and workspace (its inputs from the
    /// arena hold whatever the last execute left there): for timing one part.
    ///
    /// # Safety
    /// As [`ExecutionPlan::execute_raw`].
    pub(crate) unsafe fn execute_part_raw(
        &self,
        cudnn: &Cudnn,
        index: usize,
        io: &[u64],
        workspace: u64,
    ) -> Result<(), BackendError> {
        let (handle, _) = self.target(cudnn)?;
        self.check_raw(io, workspace)?;
        let part = self.parts().get(index).ok_or(BackendError::PartIndex { index, count: self.parts().len() })?;
        // SAFETY: as this function's.
        unsafe { self.launch_one(handle, part, io, workspace) }
    }

    /// Runs `part` with its I/O at its place in the plan's memory (an I/O buffer, at an offset
    /// for a view, or the arena at the front of the workspace) and its own workspace after the
    /// arena.
    ///
    /// # Safety
    /// As [`ExecutionPlan::launch`].
    unsafe fn launch_one(
        &self,
        handle: sys::cudnnHandle_t,
        part: &PlanPart,
        io: &[u64],
        workspace: u64,
    ) -> Result<(), BackendError> {
        let part_workspace = self.part_workspace(workspace, part);
        let Some(sources) = part.sources() else {
            // SAFETY: as this function's; the part's I/O is the plan's, in order.
            return unsafe { part.launch(handle, io, part_workspace) };
        };
        let n = sources.len();
        let mut addresses = SmallArray::new(n, 0u64);
        for (address, place) in addresses.iter_mut().zip(sources) {
            *address = match *place {
                Place::Io { index, offset } => io[index] + offset,
                Place::Arena { offset } => workspace + offset,
            };
        }
        // SAFETY: as this function's: every address is inside a buffer the caller vouches for (an
        // I/O tensor, or a view of one) or inside the arena at the front of the workspace, which
        // `workspace_size` counts.
        unsafe { part.launch(handle, &addresses, part_workspace) }
    }
}

impl PlanPart {
    /// Executes with the variant pack for these pointers, holding the plan's lock: one of the
    /// plan's cached packs when the same pointers were used recently (no allocation, no
    /// descriptor call), else a new pack, which then replaces the oldest cached one.
    ///
    /// # Safety
    /// As [`ExecutionPlan::execute_raw`]: `io` (in this part's I/O order) and `workspace` must be
    /// valid for the part on `handle`'s stream.
    unsafe fn launch(&self, handle: sys::cudnnHandle_t, io: &[u64], workspace: u64) -> Result<(), BackendError> {
        let mut held = self.descriptors();
        let (plan, packs) = held.plan_and_packs(self.selected_index());
        if let Some(pack) = packs.find(io, workspace) {
            tracing::trace!(graph = %self.graph().name, pack = "cached", "execute");
            // SAFETY: as this function's; the pack holds exactly these pointers (and the
            // by-value scalars' host storage, which lives as long as the plan).
            return unsafe { run(handle, plan, pack) };
        }
        tracing::trace!(graph = %self.graph().name, pack = "new", "execute");
        let pack = self.variant_pack(io, workspace)?;
        // SAFETY: as this function's.
        unsafe { run(handle, plan, &pack) }?;
        packs.insert(io, workspace, pack);
        Ok(())
    }

    /// A finalized variant pack: the layout's uids, `io` at their positions, the by-value
    /// scalars' host storage, and the workspace.
    pub(super) fn variant_pack(&self, io: &[u64], workspace: u64) -> Result<Descriptor, BackendError> {
        let layout = self.layout();
        let n = layout.uids().len();
        let mut pointers = SmallArray::new(n, ptr::null_mut::<c_void>());
        for (address, position) in io.iter().zip(layout.io_positions()) {
            if let Some(position) = *position {
                pointers[position] = *address as *mut c_void;
            }
        }
        // Slices: the viewed tensor's address plus the offset (checked aligned at lowering).
        for &(position, base, offset) in layout.views() {
            pointers[position] = (io[base] + offset) as *mut c_void;
        }
        for scalar in layout.scalars() {
            // cuDNN only reads by-value scalars; the plan (and so the storage) outlives the call.
            pointers[scalar.position] = scalar.host_ptr().cast_mut().cast();
        }
        // Tensors the lowering keeps at the front of the workspace; cuDNN's own follows them.
        for &(position, offset) in layout.workspace_tensors() {
            pointers[position] = (workspace + offset as u64) as *mut c_void;
        }
        let workspace = if workspace == 0 { 0 } else { workspace + layout.workspace_prefix() as u64 };
        let mut pack = Descriptor::new(K::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
        pack.set_i64s(A::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, layout.uids())?;
        pack.set_void_ptrs(A::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, &pointers)?;
        pack.set_void_ptrs(A::CUDNN_ATTR_VARIANT_PACK_WORKSPACE, &[workspace as *mut c_void])?;
        pack.finalize()?;
        Ok(pack)
    }
}

/// `cudnnBackendExecute` of `plan` with `pack`, called with the plan's lock held (see the module
/// documentation).
///
/// # Safety
/// `pack`'s pointers must be valid for `plan` on `handle`'s stream.
unsafe fn run(handle: sys::cudnnHandle_t, plan: &Descriptor, pack: &Descriptor) -> Result<(), BackendError> {
    // SAFETY: a live handle, a finalized plan and a finalized variant pack whose pointers the
    // callers vouch for.
    Ok(unsafe { crate::cudnn::execute(handle, plan, pack) }?)
}
