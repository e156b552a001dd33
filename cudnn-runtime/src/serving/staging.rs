//! A decode step's host-written inputs, staged for the device in one buffer: the append slots,
//! `SEQ_LEN_KV`, `SEQ_LEN_Q` and the page table, written into one pinned host buffer and
//! uploaded in one copy (or by a CUDA graph that recorded that copy), into one device buffer
//! whose regions the plans and the append kernel read.
//!
//! Measured on the H100 (`examples/serve_trace.rs`, `docs/benchmarks.md`): four copies from
//! pageable memory cost a 128-sequence step 16–18 µs of host time; one copy from pinned memory
//! 10–12 µs; a graph that holds the copy with the appends and the attention leaves 7.7 µs of
//! writing into pinned memory and one launch.
//!
//! [`StagingLayout`] is the host-only part (where each array lives, and writing a step into a
//! buffer of that layout, checked); [`StepStaging`] (with the `cudnn` feature) holds the two
//! buffers. One staging serves every capacity class of a serving loop: its table region holds
//! the widest class's table, and a narrower class's plan reads a prefix of it (its own
//! `[max_batch, 1, width, 1]`, packed), so the addresses never change and graphs recorded with
//! them stay valid.

use super::PageTable;

/// Every region starts on a multiple of this many `i32`s, 16 bytes: cuDNN wants its tensors
/// 16-byte aligned.
const REGION_ALIGN_ELEMENTS: usize = 4;

/// Where a step's arrays live in a staging buffer of `i32`s, in elements: each region starts on
/// 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StagingLayout {
    /// Rows of every array: the plans' batch.
    pub max_batch: usize,
    /// Slots per table row of the widest class served.
    pub max_width: usize,
    /// The append slots (`max_batch`, unused rows `-1`).
    pub slots: usize,
    /// `SEQ_LEN_KV` (`max_batch`).
    pub seq_len_kv: usize,
    /// `SEQ_LEN_Q` (`max_batch`).
    pub seq_len_q: usize,
    /// The page table (`max_batch · width` of the class in use, at most `max_width`).
    pub page_table: usize,
    /// The buffer's length.
    pub len: usize,
}

/// Why a step could not be staged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StagingError {
    /// A staging of no rows or slots, or one whose length does not fit memory.
    #[error("a staging of {max_batch} rows × {max_width} table slots is empty or too large")]
    Layout {
        /// The rows asked for.
        max_batch: usize,
        /// The slots per row asked for.
        max_width: usize,
    },
    /// A table of another batch, or wider than the staging.
    #[error(
        "a page table of {batch} rows × {width} slots does not fit a staging of {max_batch} rows × {max_width} slots"
    )]
    Table {
        /// The table's rows.
        batch: usize,
        /// The table's slots per row.
        width: usize,
        /// The staging's rows.
        max_batch: usize,
        /// The staging's widest row.
        max_width: usize,
    },
    /// More append slots than rows.
    #[error("{slots} append slots do not fit a staging of {max_batch} rows")]
    Slots {
        /// The slots given.
        slots: usize,
        /// The staging's rows.
        max_batch: usize,
    },
    /// A buffer of another length than the layout's.
    #[error("a staging buffer of {len} elements, but the layout needs {expected}")]
    Buffer {
        /// The buffer's length.
        len: usize,
        /// The layout's.
        expected: usize,
    },
    /// A CUDA driver call failed.
    #[cfg(feature = "cudnn")]
    #[error("CUDA failed to {call}: {source}")]
    Driver {
        /// What was being done.
        call: &'static str,
        /// The driver's error.
        #[source]
        source: cudarc::driver::DriverError,
    },
}

impl StagingLayout {
    /// The layout for plans of `max_batch` rows and tables of at most `max_width` slots.
    ///
    /// # Errors
    ///
    /// [`StagingError::Layout`] for no rows or slots, or a length that overflows.
    pub fn new(max_batch: usize, max_width: usize) -> Result<StagingLayout, StagingError> {
        let bad = StagingError::Layout { max_batch, max_width };
        if max_batch == 0 || max_width == 0 {
            return Err(bad);
        }
        let aligned = max_batch
            .checked_next_multiple_of(REGION_ALIGN_ELEMENTS)
            .ok_or(StagingError::Layout { max_batch, max_width })?;
        let seq_len_kv = aligned;
        let seq_len_q = aligned.checked_mul(2).ok_or(StagingError::Layout { max_batch, max_width })?;
        let page_table = aligned.checked_mul(3).ok_or(StagingError::Layout { max_batch, max_width })?;
        let len = max_batch
            .checked_mul(max_width)
            .and_then(|cells| cells.checked_add(page_table))
            .filter(|&len| len.checked_mul(std::mem::size_of::<i32>()).is_some_and(|b| b <= isize::MAX as usize))
            .ok_or(bad)?;
        Ok(StagingLayout { max_batch, max_width, slots: 0, seq_len_kv, seq_len_q, page_table, len })
    }

    /// Writes a step into `buffer` (of this layout): `slots` (from
    /// [`append_slots_into`](super::append_slots_into); rows past them get `-1`, no token) and
    /// `table`'s lengths and entries. The table region's tail past the table is left as it was:
    /// no plan of this table's width reads it.
    ///
    /// # Errors
    ///
    /// [`StagingError::Buffer`] for a buffer of another length, [`StagingError::Table`] for a
    /// table of another batch or wider than the layout, [`StagingError::Slots`] for more slots
    /// than rows. Nothing is written then.
    pub fn write(&self, buffer: &mut [i32], table: &PageTable, slots: &[i32]) -> Result<(), StagingError> {
        if buffer.len() != self.len {
            return Err(StagingError::Buffer { len: buffer.len(), expected: self.len });
        }
        if table.max_batch() != self.max_batch || table.width() > self.max_width {
            return Err(StagingError::Table {
                batch: table.max_batch(),
                width: table.width(),
                max_batch: self.max_batch,
                max_width: self.max_width,
            });
        }
        if slots.len() > self.max_batch {
            return Err(StagingError::Slots { slots: slots.len(), max_batch: self.max_batch });
        }
        let b = self.max_batch;
        let region = &mut buffer[self.slots..self.slots + b];
        region[..slots.len()].copy_from_slice(slots);
        region[slots.len()..].fill(-1);
        buffer[self.seq_len_kv..self.seq_len_kv + b].copy_from_slice(table.seq_len_kv());
        buffer[self.seq_len_q..self.seq_len_q + b].copy_from_slice(table.seq_len_q());
        let cells = table.entries();
        buffer[self.page_table..self.page_table + cells.len()].copy_from_slice(cells);
        Ok(())
    }
}

#[cfg(feature = "cudnn")]
pub use device::{StagedAddresses, StepStaging};

#[cfg(feature = "cudnn")]
mod device {
    use std::sync::Arc;

    use cudarc::driver::{result, CudaSlice, CudaStream, DevicePtr, PinnedHostSlice};

    use super::{StagingError, StagingLayout};
    use crate::serving::PageTable;

    fn driver(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> StagingError {
        move |source| StagingError::Driver { call, source }
    }

    /// The device addresses of a [`StepStaging`]'s regions: what a paged decode plan's
    /// `SEQ_LEN_KV`, `SEQ_LEN_Q` and `Page_table_K/V` and the append kernel's `dst` are bound
    /// to (they never change for the staging's life).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct StagedAddresses {
        /// The append slots (`i32 [max_batch]`).
        pub slots: u64,
        /// `SEQ_LEN_KV` (`i32 [max_batch, 1, 1, 1]`).
        pub seq_len_kv: u64,
        /// `SEQ_LEN_Q` (`i32 [max_batch, 1, 1, 1]`).
        pub seq_len_q: u64,
        /// The page table (`i32 [max_batch, 1, width, 1]` of the class in use).
        pub page_table: u64,
    }

    /// A decode step's host-written inputs: one pinned host buffer and one device buffer of a
    /// [`StagingLayout`] (module docs). Per step: [`write`](Self::write) the step's table and
    /// slots, then [`upload`](Self::upload) them (or launch a graph that recorded
    /// [`record_upload`](Self::record_upload)), then the appends and the attention, reading
    /// [`addresses`](Self::addresses).
    ///
    /// ```no_run
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::backend::cuda_context;
    /// use cudnn_graph::serving::{append_slots, PagePool, PageTable, StepStaging};
    ///
    /// let ctx = cuda_context(0)?;
    /// let stream = ctx.new_stream()?;
    /// let mut staging = StepStaging::new(&stream, 128, 256)?; // 128 rows, tables up to 256 pages
    /// let mut pool = PagePool::for_tokens(128 * 256 * 64)?;
    /// let mut table = PageTable::new(128, 64)?; // a class of 64 pages
    /// let seq = pool.add()?;
    /// pool.grow(seq, 300)?;
    /// pool.append(seq, 1)?;
    /// table.fill(&pool, &[seq])?;
    /// staging.write(&table, &append_slots(&pool, &[(seq, 1)])?)?;
    /// staging.upload(&stream)?;
    /// let at = staging.addresses(); // bind at.seq_len_kv, at.page_table, ... to the plan
    /// # let _ = at;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[derive(Debug)]
    pub struct StepStaging {
        layout: StagingLayout,
        host: PinnedHostSlice<i32>,
        device: CudaSlice<i32>,
    }

    impl StepStaging {
        /// Allocates both buffers on `stream`'s context, the slots `-1` and everything else 0
        /// (a table of length-0 rows).
        ///
        /// # Errors
        ///
        /// [`StagingError::Layout`] as [`StagingLayout::new`], [`StagingError::Driver`] if an
        /// allocation fails.
        pub fn new(stream: &Arc<CudaStream>, max_batch: usize, max_width: usize) -> Result<StepStaging, StagingError> {
            let layout = StagingLayout::new(max_batch, max_width)?;
            // SAFETY: every element is written (filled) before anything reads it.
            let mut host = unsafe { stream.context().alloc_pinned::<i32>(layout.len) }
                .map_err(driver("allocate the pinned staging buffer"))?;
            let filled = host.as_mut_slice().map_err(driver("wait for the pinned staging buffer"))?;
            filled.fill(0);
            filled[layout.slots..layout.slots + max_batch].fill(-1);
            let mut device = stream.alloc_zeros::<i32>(layout.len).map_err(driver("allocate the staging buffer"))?;
            stream.memcpy_htod(&host, &mut device).map_err(driver("upload the staging buffer"))?;
            Ok(StepStaging { layout, host, device })
        }

        /// The layout.
        pub fn layout(&self) -> &StagingLayout {
            &self.layout
        }

        /// Writes a step into the pinned buffer ([`StagingLayout::write`]), after waiting for
        /// its last upload to complete.
        ///
        /// # Errors
        ///
        /// As [`StagingLayout::write`]; [`StagingError::Driver`] if the wait fails.
        pub fn write(&mut self, table: &PageTable, slots: &[i32]) -> Result<(), StagingError> {
            let host = self.host.as_mut_slice().map_err(driver("wait for the last upload"))?;
            self.layout.write(host, table, slots)
        }

        /// Enqueues the copy of the whole pinned buffer into the device buffer on `stream`.
        ///
        /// # Errors
        ///
        /// [`StagingError::Driver`] if the copy cannot be enqueued.
        pub fn upload(&mut self, stream: &Arc<CudaStream>) -> Result<(), StagingError> {
            stream.memcpy_htod(&self.host, &mut self.device).map_err(driver("upload the staged step"))
        }

        /// Enqueues the same copy without the buffers' event bookkeeping, for recording into a
        /// CUDA graph (a graph replays the copy from the same pinned buffer each launch).
        ///
        /// # Safety
        ///
        /// The staging must outlive every replay of a graph that records this, and the host must
        /// not [`write`](Self::write) a step while a replay's copy may still be reading the
        /// pinned buffer (wait for the step first; `write` waits only for
        /// [`upload`](Self::upload)'s copies).
        ///
        /// # Errors
        ///
        /// [`StagingError::Driver`] if the copy cannot be enqueued (or recorded).
        pub unsafe fn record_upload(&self, stream: &Arc<CudaStream>) -> Result<(), StagingError> {
            let host = self.host.as_slice().map_err(driver("wait for the last upload"))?;
            let (device, _guard) = self.device.device_ptr(stream);
            // SAFETY: both buffers are `layout.len` elements of this context; the caller keeps
            // them alive and unwritten for as long as the copy may run.
            unsafe { result::memcpy_htod_async(device, host, stream.cu_stream()) }
                .map_err(driver("record the staged step's upload"))
        }

        /// The device addresses of the regions.
        pub fn addresses(&self) -> StagedAddresses {
            let stream = self.device.stream();
            let (base, _guard) = self.device.device_ptr(stream);
            let at = |offset: usize| base + (offset * std::mem::size_of::<i32>()) as u64;
            StagedAddresses {
                slots: at(self.layout.slots),
                seq_len_kv: at(self.layout.seq_len_kv),
                seq_len_q: at(self.layout.seq_len_q),
                page_table: at(self.layout.page_table),
            }
        }
    }
}
