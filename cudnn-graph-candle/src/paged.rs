//! Paged K/V caches on candle tensors ([`PagedKvCache`]).

#[cfg(feature = "cuda")]
use std::sync::Mutex;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType, Device, Layout, Tensor};
use cudnn_graph::serving::{append_slots_into, AppendError, KvPoolDims, PageError, PagePool, PageTable, SeqId};

use crate::error::AdapterError;

/// One layer's paged K/V cache on candle tensors: the pools a paged `sdpa` reads (`paged = true`), the
/// host allocator that hands their pages to sequences, and the per-step inputs (lengths and page
/// table), for serving a decoder with continuous batching.
///
/// It holds one layer's K and V pools as candle tensors (`[pages, heads,
/// page_size, head_dim]`) on one device, and a [`PagePool`] that gives their pages to sequences
/// by construction in range and unshared (`cudnn_graph::serving`). Each step:
///
/// 1. [`PagedKvCache::append`] makes room for each sequence's new tokens and writes their K and V
///    rows (`[N, heads, head_dim]`, in batch order) into their pages: on CUDA with cudnn-graph's
///    append kernel on candle's stream, on the CPU with its reference;
/// 2. [`PagedKvCache::step`] fills a [`PageTable`] of the plan's capacity (`max_batch` rows of
///    `width` pages) and uploads `SEQ_LEN_Q`, `SEQ_LEN_KV` and the table in one copy;
/// 3. the paged attention graph runs through [`Runner`](crate::Runner) on
///    `(q, cache.k_pool(), cache.v_pool(), step.seq_len_q, step.seq_len_kv, step.table,
///    step.table)`: one plan per capacity serves every batch that fits it.
///
/// ```
/// use candle_core::{DType, Device, Tensor};
/// use cudnn_graph::serving::{PagePool, PageTable};
/// use cudnn_graph_candle::PagedKvCache;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let device = Device::Cpu;
/// // 8 pages of 4 tokens, 2 KV heads of dim 3.
/// let mut cache = PagedKvCache::new(PagePool::new(8, 4)?, 2, 3, DType::F32, &device)?;
/// let (a, b) = (cache.add()?, cache.add()?);
/// // A prompt of 5 tokens for `a`, 1 for `b`: their K and V rows, [6, 2, 3].
/// let k = Tensor::randn(0f32, 1.0, (6, 2, 3), &device)?;
/// let v = Tensor::randn(0f32, 1.0, (6, 2, 3), &device)?;
/// cache.append(&[(a, 5), (b, 1)], &k, &v)?;
/// let mut table = PageTable::new(4, 2)?; // a plan for 4 sequences of up to 2 pages
/// let step = cache.step(&mut table, &[a, b])?;
/// assert_eq!(step.seq_len_kv.flatten_all()?.to_vec1::<i32>()?, [5, 1, 0, 0]);
/// assert_eq!(step.table.dims(), [4, 1, 2, 1]);
/// // Token 4 of `a` (its second page, slot 0) holds k's row 4.
/// let page = step.table.flatten_all()?.to_vec1::<i32>()?[1] as usize;
/// let row = cache.k_pool().get(page)?.narrow(1, 0, 1)?.squeeze(1)?;
/// assert_eq!(row.to_vec2::<f32>()?, k.get(4)?.to_vec2::<f32>()?);
/// # Ok(())
/// # }
/// ```
///
/// Nothing out of bounds reaches a kernel: the pool names only its own pages, a table is checked
/// against its capacity when it is filled, and the append checks every tensor's shape, element
/// type, device and layout first. A failed append changes nothing.
#[derive(Debug)]
pub struct PagedKvCache {
    k: Tensor,
    v: Tensor,
    pages: PagePool,
    dims: KvPoolDims,
    /// Scratch for the slots of an append.
    slots: Vec<i32>,
    /// The append kernel, loaded on the first CUDA append.
    kernel: KernelSlot,
}

/// Where a cache keeps its append kernel once loaded (CUDA only).
#[cfg(feature = "cuda")]
type KernelSlot = Mutex<Option<std::sync::Arc<cudnn_graph::serving::KvAppend>>>;
#[cfg(not(feature = "cuda"))]
type KernelSlot = ();

/// The inputs of one paged attention step besides Q and the pools, in the table's capacity:
/// `SEQ_LEN_Q` and `SEQ_LEN_KV` (`i32 [max_batch, 1, 1, 1]`) and the page table (`i32
/// [max_batch, 1, width, 1]`, for both `Page_table_K` and `Page_table_V`). Views of one tensor,
/// uploaded in one copy.
#[derive(Debug, Clone)]
pub struct StepInputs {
    /// The query tokens of each row (1 per live sequence when decoding, 0 for empty rows).
    pub seq_len_q: Tensor,
    /// The tokens each row's sequence holds (0 for empty rows).
    pub seq_len_kv: Tensor,
    /// The page table.
    pub table: Tensor,
}

fn page_error(e: PageError) -> AdapterError {
    AdapterError::Append(e.into())
}

impl PagedKvCache {
    /// Pools of `pages.page_count()` pages of `pages.page_size()` tokens, `heads` K/V heads of
    /// `head_dim`, of `dtype` on `device`, zeroed; `pages` hands them out (usually a new
    /// [`PagePool`]: its live sequences keep their pages).
    ///
    /// # Errors
    ///
    /// [`AdapterError::Append`] for a shape the append kernel cannot address (a dim of 0 or past
    /// `i32`), and candle's error if the pools cannot be allocated.
    pub fn new(
        pages: PagePool,
        heads: usize,
        head_dim: usize,
        dtype: DType,
        device: &Device,
    ) -> candle_core::Result<Self> {
        let dims = KvPoolDims { pages: pages.page_count(), heads, page_size: pages.page_size(), head_dim };
        dims.check().map_err(AdapterError::Append)?;
        let shape = (dims.pages, heads, dims.page_size, head_dim);
        Ok(PagedKvCache {
            k: Tensor::zeros(shape, dtype, device)?,
            v: Tensor::zeros(shape, dtype, device)?,
            pages,
            dims,
            slots: Vec::new(),
            kernel: KernelSlot::default(),
        })
    }

    /// The K pool, `[pages, heads, page_size, head_dim]`: the paged attention's K input.
    pub fn k_pool(&self) -> &Tensor {
        &self.k
    }

    /// The V pool: the paged attention's V input.
    pub fn v_pool(&self) -> &Tensor {
        &self.v
    }

    /// The pools' shape.
    pub fn dims(&self) -> KvPoolDims {
        self.dims
    }

    /// Who holds which pages.
    pub fn pages(&self) -> &PagePool {
        &self.pages
    }

    /// A new sequence, holding no tokens yet ([`PagePool::add`]).
    ///
    /// # Errors
    ///
    /// [`AdapterError::Append`] if the pool has no handle left.
    pub fn add(&mut self) -> candle_core::Result<SeqId> {
        Ok(self.pages.add().map_err(page_error)?)
    }

    /// Ends `seq`: its pages go back to the pool ([`PagePool::release`]).
    ///
    /// # Errors
    ///
    /// [`AdapterError::Append`] for a released handle or one of another pool.
    pub fn release(&mut self, seq: SeqId) -> candle_core::Result<()> {
        Ok(self.pages.release(seq).map_err(page_error)?)
    }

    /// Appends new tokens: `batch` names each sequence and how many tokens it gains (a prompt's
    /// whole length at prefill, 1 per decode step), `k` and `v` hold their rows, `[N, heads,
    /// head_dim]` with `N` the tokens of `batch` in its order, of the pools' element type on
    /// their device. Each sequence gets the pages it needs, then the rows are written into them:
    /// on CUDA by one kernel per pool on candle's stream (asynchronous), on the CPU at once.
    ///
    /// # Errors
    ///
    /// [`AdapterError::PagedInput`] for a tensor of another shape, element type or device, or
    /// not contiguous; [`AdapterError::Append`] for a released or foreign handle, a sequence
    /// twice in `batch`, or too few free pages for all of `batch`; candle's error for new rows
    /// that are a view of a pool. Nothing is appended then: every sequence keeps its length.
    pub fn append(&mut self, batch: &[(SeqId, usize)], k: &Tensor, v: &Tensor) -> candle_core::Result<()> {
        let tokens = batch.iter().try_fold(0usize, |n, &(_, t)| n.checked_add(t)).unwrap_or(usize::MAX);
        for (name, t) in [("k", k), ("v", v)] {
            self.check_rows(name, t, tokens)?;
        }
        let lengths = self.make_room(batch)?;
        let written = self.write(batch, k, v);
        if written.is_err() {
            // Nothing lost, nothing half-done: the sequences go back to their lengths.
            for (&(seq, _), &len) in batch.iter().zip(&lengths) {
                self.pages.truncate(seq, len).map_err(page_error)?;
            }
        }
        written
    }

    /// Writes the rows of `batch`'s new tokens (room made) into the pools.
    fn write(&mut self, batch: &[(SeqId, usize)], k: &Tensor, v: &Tensor) -> candle_core::Result<()> {
        append_slots_into(&self.pages, batch, &mut self.slots).map_err(AdapterError::Append)?;
        if self.slots.is_empty() {
            return Ok(());
        }
        let slots = Tensor::from_slice(&self.slots, self.slots.len(), self.k.device())?;
        let op = AppendRows { dims: self.dims, kernel: &self.kernel };
        self.k.inplace_op3(k, &slots, &op)?;
        self.v.inplace_op3(v, &slots, &op)
    }

    /// Fills `table` (the plan's capacity) with `seqs`, one row each in order, and uploads its
    /// inputs in one copy to the pools' device.
    ///
    /// # Errors
    ///
    /// [`AdapterError::Append`] for more sequences than rows, a sequence longer than a row holds,
    /// a released or foreign handle, or a sequence twice.
    pub fn step(&self, table: &mut PageTable, seqs: &[SeqId]) -> candle_core::Result<StepInputs> {
        table.fill(&self.pages, seqs).map_err(page_error)?;
        let (b, w) = (table.max_batch(), table.width());
        let mut host = Vec::with_capacity(2 * b + b * w);
        host.extend_from_slice(table.seq_len_q());
        host.extend_from_slice(table.seq_len_kv());
        host.extend_from_slice(table.entries());
        let all = Tensor::from_vec(host, 2 * b + b * w, self.k.device())?;
        Ok(StepInputs {
            seq_len_q: all.narrow(0, 0, b)?.reshape((b, 1, 1, 1))?,
            seq_len_kv: all.narrow(0, b, b)?.reshape((b, 1, 1, 1))?,
            table: all.narrow(0, 2 * b, b * w)?.reshape((b, 1, w, 1))?,
        })
    }

    /// Gives every sequence of `batch` room for its new tokens, all or nothing: a sequence given
    /// twice, a dead handle or too few free pages for the whole batch changes no sequence.
    /// Returns each one's length before.
    fn make_room(&mut self, batch: &[(SeqId, usize)]) -> Result<Vec<usize>, AdapterError> {
        let mut free = self.pages.free_pages();
        let mut lengths = Vec::with_capacity(batch.len());
        for (i, &(seq, n)) in batch.iter().enumerate() {
            if let Some(first) = batch[..i].iter().position(|&(s, _)| s == seq) {
                return Err(AdapterError::Append(AppendError::DuplicateSequence { seq, first, second: i }));
            }
            let before = self.pages.len(seq).map_err(page_error)?;
            lengths.push(before);
            let len = before.saturating_add(n);
            let held = self.pages.pages(seq).map_err(page_error)?.len();
            let needed = self.pages.pages_for(len).saturating_sub(held);
            free = free.checked_sub(needed).ok_or(page_error(PageError::OutOfPages { seq, len, needed, free }))?;
        }
        for &(seq, n) in batch {
            self.pages.append(seq, n).map_err(page_error)?;
        }
        Ok(lengths)
    }

    /// Checks that `t` is `[tokens, heads, head_dim]` rows of the pools' type, on their device,
    /// contiguous.
    fn check_rows(&self, name: &'static str, t: &Tensor, tokens: usize) -> Result<(), AdapterError> {
        let fits = t.dims() == [tokens, self.dims.heads, self.dims.head_dim]
            && t.dtype() == self.k.dtype()
            && t.device().same_device(self.k.device());
        if !fits {
            // Formatted only here: `append` runs every decode step.
            let expected = format!(
                "{:?}[{tokens}, {}, {}] on {:?}",
                self.k.dtype(),
                self.dims.heads,
                self.dims.head_dim,
                self.k.device().location()
            );
            let found = format!("{:?}{:?} on {:?}", t.dtype(), t.dims(), t.device().location());
            return Err(AdapterError::PagedInput { name, expected, found });
        }
        if !t.is_contiguous() {
            return Err(AdapterError::PagedInput {
                name,
                expected: "a contiguous tensor (call `.contiguous()?`)".into(),
                found: format!("strides {:?}", t.stride()),
            });
        }
        Ok(())
    }
}

/// The in-place op writing new rows (`srcs[0]`, `[N, heads, head_dim]`) into a pool (`dst`) at
/// the slots `srcs[1]` (`i32 [N]`). Shapes, types and devices are checked by
/// [`PagedKvCache::append`]; the layouts here.
struct AppendRows<'a> {
    dims: KvPoolDims,
    // Read by the CUDA append only.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    kernel: &'a KernelSlot,
}

/// The elements `[start, end)` of a contiguous layout, or an error naming the operand.
fn span(layout: &Layout, what: &'static str) -> candle_core::Result<(usize, usize)> {
    layout.contiguous_offsets().ok_or_else(|| {
        AdapterError::PagedInput {
            name: what,
            expected: "a contiguous tensor".into(),
            found: format!("strides {:?}", layout.stride()),
        }
        .into()
    })
}

impl candle_core::InplaceOp3 for AppendRows<'_> {
    fn name(&self) -> &'static str {
        "cudnn-graph paged K/V append"
    }

    fn cpu_fwd(
        &self,
        dst: &mut CpuStorage,
        dst_l: &Layout,
        new: &CpuStorage,
        new_l: &Layout,
        slots: &CpuStorage,
        slots_l: &Layout,
    ) -> candle_core::Result<()> {
        let (d0, d1) = span(dst_l, "pool")?;
        let (n0, n1) = span(new_l, "new rows")?;
        let (s0, s1) = span(slots_l, "slots")?;
        let CpuStorage::I32(slots) = slots else {
            candle_core::bail!("{}: the slots are {:?}, not i32", self.name(), slots.dtype())
        };
        let slots = &slots[s0..s1];
        let result = match (dst, new) {
            (CpuStorage::BF16(p), CpuStorage::BF16(n)) => append(&mut p[d0..d1], &n[n0..n1], slots, self.dims),
            (CpuStorage::F16(p), CpuStorage::F16(n)) => append(&mut p[d0..d1], &n[n0..n1], slots, self.dims),
            (CpuStorage::F32(p), CpuStorage::F32(n)) => append(&mut p[d0..d1], &n[n0..n1], slots, self.dims),
            (CpuStorage::F64(p), CpuStorage::F64(n)) => append(&mut p[d0..d1], &n[n0..n1], slots, self.dims),
            (p, n) => candle_core::bail!("{}: a {:?} pool cannot take {:?} rows", self.name(), p.dtype(), n.dtype()),
        };
        Ok(result?)
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        dst: &mut candle_core::CudaStorage,
        dst_l: &Layout,
        new: &candle_core::CudaStorage,
        new_l: &Layout,
        slots: &candle_core::CudaStorage,
        slots_l: &Layout,
    ) -> candle_core::Result<()> {
        use cudnn_graph::backend::cudarc::driver::{DevicePtr, DevicePtrMut};
        use cudnn_graph::serving::KvAppend;

        let (d0, _) = span(dst_l, "pool")?;
        let (n0, n1) = span(new_l, "new rows")?;
        let (s0, s1) = span(slots_l, "slots")?;
        let stream = dst.device().cuda_stream();
        let kernel = {
            let mut kernel = self.kernel.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match &*kernel {
                Some(k) => k.clone(),
                None => {
                    let k = std::sync::Arc::new(KvAppend::new(stream.context()).map_err(AdapterError::Append)?);
                    *kernel = Some(k.clone());
                    k
                }
            }
        };
        let tokens = s1 - s0;
        let rows = self.dims.rows_len(tokens).unwrap_or(usize::MAX);
        if n1 - n0 != rows {
            candle_core::bail!("{}: {} new elements for {tokens} slots, expected {rows}", self.name(), n1 - n0);
        }
        let slots = slots.as_cuda_slice::<i32>()?;
        let (slot_ptr, _slot_guard) = slots.device_ptr(&stream);
        // 16-bit elements only: the kernel copies rows of 2-byte values.
        macro_rules! launch {
            ($t:ty) => {{
                let new = new.as_cuda_slice::<$t>()?;
                let pool = dst.as_cuda_slice_mut::<$t>()?;
                if pool.len() < d0 + self.dims.pool_len().unwrap_or(usize::MAX) {
                    candle_core::bail!("{}: the pool's storage is shorter than its layout", self.name());
                }
                let (new_ptr, _new_guard) = new.device_ptr(&stream);
                let (pool_ptr, _pool_guard) = pool.device_ptr_mut(&stream);
                let size = std::mem::size_of::<$t>() as u64;
                // SAFETY: the pool (from `d0`, `dims.pool_len()` elements, checked above), the new
                // rows (`n0..n1`, `rows_len(tokens)` elements, checked above) and the slots
                // (`s0..s1`) are live allocations of this stream's context; candle's in-place op
                // holds the pool's storage exclusively and refused aliased operands, so the pool
                // overlaps neither; the guards order the launch after earlier work on the buffers
                // and keep them in use until it is enqueued.
                unsafe {
                    kernel.append_raw(
                        &stream,
                        new_ptr + n0 as u64 * size,
                        slot_ptr + s0 as u64 * 4,
                        pool_ptr + d0 as u64 * size,
                        tokens,
                        self.dims,
                    )
                }
                .map_err(AdapterError::Append)?;
            }};
        }
        match dst.dtype() {
            DType::BF16 => launch!(half::bf16),
            DType::F16 => launch!(half::f16),
            other => candle_core::bail!("{}: the CUDA append takes bf16 or f16 pools, not {other:?}", self.name()),
        }
        Ok(())
    }
}

/// The CPU append: cudnn-graph's reference.
fn append<T: Copy>(pool: &mut [T], new: &[T], slots: &[i32], dims: KvPoolDims) -> Result<(), AdapterError> {
    cudnn_graph::serving::append_reference(pool, new, slots, dims).map_err(AdapterError::Append)
}
