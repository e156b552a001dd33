//! Appending to a paged K/V cache: writing the new tokens' K and V rows into their pages. cuDNN
//! has no scatter, so this is a small CUDA kernel of our own ([`KvAppend`], with the `cudnn`
//! feature), its CPU reference ([`append_reference`]) and the host side that says where each new
//! token goes ([`append_slots`]).
//!
//! A pool is `[P, H, page_size, D]` (16-bit elements, packed row-major; [`KvPoolDims`]). The new
//! tokens of a step are `new [N, H, D]`, and `dst [N]` (`i32`) names each one's *slot*: the flat
//! row `page · page_size + row` it goes to, or `-1` to skip it. For each `(n, h, d)`:
//!
//! ```text
//! pool[((dst[n] / page_size) · H + h) · page_size + dst[n] % page_size) · D + d] = new[(n · H + h) · D + d]
//! ```
//!
//! A decode step (one token per sequence) from a [`PagePool`]:
//!
//! 1. `pool.append(seq, 1)` for each sequence: room for its new token;
//! 2. [`append_slots`]`(&pool, &[(seq, 1), ...])`: the slot of each new token, in batch order;
//! 3. upload the slots, then [`KvAppend::append`] the step's K rows into the K pool and its V
//!    rows into the V pool (same slots); the attention plan of the step then reads them.
//!
//! ```
//! # use cudnn_runtime as cudnn_graph;
//! use cudnn_graph::serving::{append_reference, append_slots, KvPoolDims, PagePool};
//!
//! let mut pages = PagePool::new(8, 4)?; // 8 pages of 4 tokens
//! let (a, b) = (pages.add()?, pages.add()?);
//! pages.grow(a, 3)?; // a: page 0
//! pages.grow(b, 4)?; // b: page 1 (full)
//! pages.append(a, 1)?; // a's 4th token: page 0, row 3
//! pages.append(b, 1)?; // b's 5th token: a new page (2), row 0
//! let slots = append_slots(&pages, &[(a, 1), (b, 1)])?;
//! assert_eq!(slots, [3, 2 * 4]);
//!
//! // One head of d 2: write the two tokens' rows into a pool of 8 × 1 × 4 × 2 elements.
//! let dims = KvPoolDims { pages: 8, heads: 1, page_size: 4, head_dim: 2 };
//! let mut k_pool = vec![0u16; dims.pool_len().unwrap()];
//! append_reference(&mut k_pool, &[1, 2, 3, 4], &slots, dims)?;
//! assert_eq!(&k_pool[6..8], [1, 2]); // page 0, row 3
//! assert_eq!(&k_pool[16..18], [3, 4]); // page 2, row 0
//! # Ok::<(), cudnn_graph::serving::AppendError>(())
//! ```
//!
//! The kernel ships as PTX (`append.ptx`, generated from `append.cu` beside this file; the
//! command is at the top of both) and is JIT-compiled by the driver when [`KvAppend::new`] loads
//! it: no NVRTC, no build-time CUDA.

use super::{PageError, PagePool, SeqId};

/// The append kernel's PTX (ISA 7.0, `sm_80`; entries `kv_append_b16` and `kv_append_b128`),
/// generated from `append.cu` (the command is at the top of both), for loading it elsewhere.
pub const APPEND_PTX: &str = include_str!("append.ptx");

/// The largest slot, token count, page count or extent: slots and kernel parameters are `i32`.
const MAX_I32: usize = i32::MAX as usize;

/// A K or V page pool's shape, `[pages, heads, page_size, head_dim]` (packed row-major): what
/// [`KvAppend::append`] and [`append_reference`] write into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KvPoolDims {
    /// Pages in the pool (`P`).
    pub pages: usize,
    /// K or V heads (`H_k` or `H_v`).
    pub heads: usize,
    /// Tokens per page.
    pub page_size: usize,
    /// Elements per head and token (`D`).
    pub head_dim: usize,
}

impl KvPoolDims {
    /// Elements in the pool, `pages · heads · page_size · head_dim` (`None` if that overflows).
    pub fn pool_len(&self) -> Option<usize> {
        self.pages.checked_mul(self.heads)?.checked_mul(self.page_size)?.checked_mul(self.head_dim)
    }

    /// Elements of `tokens` new tokens' rows, `tokens · heads · head_dim` (`None` if that
    /// overflows).
    pub fn rows_len(&self, tokens: usize) -> Option<usize> {
        tokens.checked_mul(self.heads)?.checked_mul(self.head_dim)
    }

    /// Checks what the kernel needs: every extent in `1..=i32::MAX`, `heads · head_dim` too, and
    /// the pool's length countable; returns that length.
    ///
    /// # Errors
    ///
    /// [`AppendError::Dims`] otherwise.
    pub fn check(&self) -> Result<usize, AppendError> {
        let KvPoolDims { pages, heads, page_size, head_dim } = *self;
        let in_range = |x: usize| (1..=MAX_I32).contains(&x);
        let fits = [pages, heads, page_size, head_dim].into_iter().all(in_range)
            && heads.checked_mul(head_dim).is_some_and(in_range);
        match self.pool_len() {
            Some(len) if fits => Ok(len),
            _ => Err(AppendError::Dims { dims: *self }),
        }
    }
}

/// What an append refused: the buffer, the sequence or the extent, and the bound it broke.
/// Nothing was written (or launched) when one is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    /// A pool shape the kernel cannot address.
    #[error(
        "a K/V pool has 1..=2147483647 pages, heads, tokens per page and head dim, with heads × head dim at \
         most 2147483647; found [{}, {}, {}, {}]",
        dims.pages, dims.heads, dims.page_size, dims.head_dim
    )]
    Dims {
        /// The shape given.
        dims: KvPoolDims,
    },
    /// More new tokens than one launch (or an `i32` count) takes.
    #[error("{tokens} new tokens do not fit one append (at most 2147483647)")]
    TooManyTokens {
        /// The new tokens.
        tokens: usize,
    },
    /// A buffer of the wrong length for the pool's shape and the new tokens.
    #[error("{buffer} holds {len} elements, but {expected} are needed for {tokens} new tokens of a pool of shape [{}, {}, {}, {}]",
        dims.pages, dims.heads, dims.page_size, dims.head_dim)]
    Length {
        /// Which buffer: `new`, `dst` or `pool`.
        buffer: &'static str,
        /// Its length.
        len: usize,
        /// The length needed (`usize::MAX` where counting it overflowed).
        expected: usize,
        /// The new tokens (`dst`'s length).
        tokens: usize,
        /// The pool's shape.
        dims: KvPoolDims,
    },
    /// More new tokens for a sequence than it holds: `PagePool::append` comes first.
    #[error(
        "sequence {seq} holds {len} tokens, fewer than its {tokens} new ones: make room with `PagePool::append` \
         before asking for their slots"
    )]
    NotAppended {
        /// The sequence.
        seq: SeqId,
        /// The new tokens asked for.
        tokens: usize,
        /// The tokens it holds.
        len: usize,
    },
    /// One sequence twice in a batch: its new tokens would get the same slots twice.
    #[error("sequence {seq} is in the append batch twice, at {first} and {second}: give each sequence once, with all its new tokens")]
    DuplicateSequence {
        /// The sequence.
        seq: SeqId,
        /// Its first index in the batch.
        first: usize,
        /// Its second.
        second: usize,
    },
    /// A slot past `i32::MAX` (a pool of more than 2³¹ token rows): no `i32` slot names it.
    #[error("sequence {seq}, token {position}: slot {slot} does not fit an i32 slot list (at most 2147483647)")]
    SlotTooLarge {
        /// The sequence.
        seq: SeqId,
        /// The token's position in the sequence.
        position: usize,
        /// The slot, `page · page_size + row`.
        slot: usize,
    },
    /// A pool or sequence the [`PagePool`] refused (a released or foreign handle).
    #[error(transparent)]
    Page(#[from] PageError),
    /// A stream or buffer of another CUDA context than the one the kernel was loaded into.
    #[cfg(feature = "cudnn")]
    #[error("{what} belongs to another CUDA context than the one KvAppend was loaded into")]
    OtherContext {
        /// `the stream`, `new`, `dst` or `pool`.
        what: &'static str,
    },
    /// A raw device pointer not aligned to its element (2 bytes for `new` and `pool`, 4 for `dst`).
    #[cfg(feature = "cudnn")]
    #[error("{buffer} at {address:#x} is not aligned to its {align}-byte elements")]
    Misaligned {
        /// `new`, `dst` or `pool`.
        buffer: &'static str,
        /// The pointer.
        address: u64,
        /// The alignment it needs.
        align: u64,
    },
    /// A CUDA driver call failed.
    #[cfg(feature = "cudnn")]
    #[error("cannot {call}: {source}")]
    Driver {
        /// What was being done (`load the append kernel's PTX`, `launch kv_append_b128`).
        call: &'static str,
        /// The driver's error.
        source: cudarc::driver::DriverError,
    },
}

/// The slots (`page · page_size + row`) of the new tokens of `batch`, in order: for each
/// `(sequence, n)`, its last `n` tokens (positions `len - n .. len`, after
/// [`PagePool::append`] made room for them). The `dst` of [`KvAppend::append`] and
/// [`append_reference`].
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::serving::{append_slots, PagePool};
///
/// let mut pages = PagePool::new(16, 16)?;
/// let seq = pages.add()?;
/// pages.grow(seq, 14)?; // a prompt of 14 tokens: page 0
/// pages.append(seq, 4)?; // a chunk of 4: rows 14 and 15 of page 0, rows 0 and 1 of page 1
/// assert_eq!(append_slots(&pages, &[(seq, 4)])?, [14, 15, 16, 17]);
///
/// let e = append_slots(&pages, &[(seq, 20)]).unwrap_err();
/// assert_eq!(e.to_string(), "sequence 0 holds 18 tokens, fewer than its 20 new ones: make room with `PagePool::append` before asking for their slots");
/// # Ok::<(), cudnn_graph::serving::AppendError>(())
/// ```
///
/// # Errors
///
/// [`AppendError::Page`] for a handle that names no live sequence of `pool`,
/// [`AppendError::NotAppended`] for more new tokens than a sequence holds,
/// [`AppendError::DuplicateSequence`] for a sequence given twice,
/// [`AppendError::SlotTooLarge`] for a slot past `i32::MAX`.
pub fn append_slots(pool: &PagePool, batch: &[(SeqId, usize)]) -> Result<Vec<i32>, AppendError> {
    let mut slots = Vec::new();
    append_slots_into(pool, batch, &mut slots)?;
    Ok(slots)
}

/// [`append_slots`] into a buffer kept from step to step: `slots` is cleared, then holds the
/// slots (on an error, it is left empty).
///
/// # Errors
///
/// As [`append_slots`].
pub fn append_slots_into(pool: &PagePool, batch: &[(SeqId, usize)], slots: &mut Vec<i32>) -> Result<(), AppendError> {
    slots.clear();
    let written = write_slots(pool, batch, slots);
    if written.is_err() {
        slots.clear();
    }
    written
}

fn write_slots(pool: &PagePool, batch: &[(SeqId, usize)], slots: &mut Vec<i32>) -> Result<(), AppendError> {
    let mut order: Vec<(SeqId, usize)> = batch.iter().enumerate().map(|(i, &(seq, _))| (seq, i)).collect();
    order.sort_unstable();
    if let Some(w) = order.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(AppendError::DuplicateSequence { seq: w[0].0, first: w[0].1, second: w[1].1 });
    }
    let page_size = pool.page_size();
    for &(seq, tokens) in batch {
        let len = pool.len(seq)?;
        let pages = pool.pages(seq)?;
        let start = len.checked_sub(tokens).ok_or(AppendError::NotAppended { seq, tokens, len })?;
        for position in start..len {
            // The pool holds `ceil(len / page_size)` pages for `len` tokens, so this page exists.
            let page = pages[position / page_size] as usize;
            // Checked: page · page_size can pass usize::MAX on a 32-bit target.
            let slot = page.checked_mul(page_size).and_then(|s| s.checked_add(position % page_size));
            match slot.and_then(|s| i32::try_from(s).ok()) {
                Some(s) => slots.push(s),
                None => return Err(AppendError::SlotTooLarge { seq, position, slot: slot.unwrap_or(usize::MAX) }),
            }
        }
    }
    Ok(())
}

/// Checks `dims`, the new tokens' count and the lengths of `new` and the pool against them.
fn check_lengths(dims: KvPoolDims, new_len: usize, tokens: usize, pool_len: usize) -> Result<(), AppendError> {
    let expected_pool = dims.check()?;
    if tokens > MAX_I32 {
        return Err(AppendError::TooManyTokens { tokens });
    }
    let length = |buffer, len, expected| AppendError::Length { buffer, len, expected, tokens, dims };
    let expected_new = dims.rows_len(tokens).unwrap_or(usize::MAX);
    if new_len != expected_new {
        return Err(length("new", new_len, expected_new));
    }
    if pool_len != expected_pool {
        return Err(length("pool", pool_len, expected_pool));
    }
    Ok(())
}

/// The CPU reference of [`KvAppend::append`]: writes each new token's rows (`new [N, H, D]`)
/// into the pool (`[P, H, page_size, D]`) at its slot `dst[n]`, skipping (as the kernel does) a
/// slot that is negative (`-1`: no token) or past the pool. Tokens are written in order, so of
/// two tokens with one slot the later wins (on the GPU, either may).
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::serving::{append_reference, KvPoolDims};
///
/// let dims = KvPoolDims { pages: 2, heads: 2, page_size: 2, head_dim: 1 };
/// let mut pool = [0.0f32; 8]; // [2, 2, 2, 1]
/// // Token 0 to page 1 row 0, token 1 skipped, token 2 to page 0 row 1.
/// append_reference(&mut pool, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, -1, 1], dims)?;
/// assert_eq!(pool, [0.0, 5.0, 0.0, 6.0, 1.0, 0.0, 2.0, 0.0]);
/// # Ok::<(), cudnn_graph::serving::AppendError>(())
/// ```
///
/// # Errors
///
/// [`AppendError::Dims`] for a shape the kernel cannot address, [`AppendError::TooManyTokens`],
/// and [`AppendError::Length`] naming `new` or `pool` where a length does not match `dims` and
/// `dst.len()` new tokens. Nothing is written then.
pub fn append_reference<T: Copy>(pool: &mut [T], new: &[T], dst: &[i32], dims: KvPoolDims) -> Result<(), AppendError> {
    check_lengths(dims, new.len(), dst.len(), pool.len())?;
    let KvPoolDims { pages, heads, page_size, head_dim: d } = dims;
    for (n, &slot) in dst.iter().enumerate() {
        let Ok(slot) = usize::try_from(slot) else { continue };
        let (page, row) = (slot / page_size, slot % page_size);
        if page >= pages {
            continue;
        }
        for h in 0..heads {
            let to = ((page * heads + h) * page_size + row) * d;
            let from = (n * heads + h) * d;
            pool[to..to + d].copy_from_slice(&new[from..from + d]);
        }
    }
    Ok(())
}

#[cfg(feature = "cudnn")]
pub use device::{KvAppend, KvElement};

#[cfg(feature = "cudnn")]
mod device {
    use std::ffi::{c_void, CStr};
    use std::sync::Arc;

    use cudarc::driver::sys::{CUdeviceptr, CUfunction, CUmodule};
    use cudarc::driver::{result, CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

    use super::{check_lengths, AppendError, KvPoolDims, APPEND_PTX};

    /// The PTX as the driver takes it: NUL-terminated.
    const PTX_NUL: &str = concat!(include_str!("append.ptx"), "\0");
    /// The kernel copying 16-bit words, and the one copying 16-byte words (8 elements).
    const B16: &CStr = c"kv_append_b16";
    const B128: &CStr = c"kv_append_b128";
    /// Threads per block (one block per token; they stride over its `heads · words` words).
    const THREADS: u32 = 128;

    mod sealed {
        pub trait Sealed {}
    }

    /// An element type of K/V pools that [`KvAppend`] copies: the 16-bit ones (`bf16`, `f16`,
    /// and `u16`/`i16` for raw bits).
    pub trait KvElement: Copy + sealed::Sealed {}
    macro_rules! kv_element {
        ($($t:ty),*) => {$(
            impl sealed::Sealed for $t {}
            impl KvElement for $t {}
        )*};
    }
    kv_element!(half::bf16, half::f16, u16, i16);
    const _: () = assert!(std::mem::size_of::<half::bf16>() == 2 && std::mem::size_of::<half::f16>() == 2);

    /// The append kernel, loaded into one CUDA context (once: keep it with the pools), unloaded
    /// when dropped. [`append`](Self::append) writes a step's new K (or V) rows into their pages
    /// of a pool, on a stream; a launch records into a CUDA graph being captured like any other.
    ///
    /// ```no_run
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::backend::cuda_context;
    /// use cudnn_graph::serving::{append_slots, KvAppend, KvPoolDims, PagePool};
    /// use half::bf16;
    ///
    /// let ctx = cuda_context(0)?;
    /// let stream = ctx.default_stream();
    /// let kv = KvAppend::new(&ctx)?;
    /// let dims = KvPoolDims { pages: 256, heads: 8, page_size: 16, head_dim: 128 };
    /// let mut k_pool = stream.alloc_zeros::<bf16>(dims.pool_len().unwrap())?;
    /// let mut v_pool = stream.alloc_zeros::<bf16>(dims.pool_len().unwrap())?;
    ///
    /// let mut pages = PagePool::new(dims.pages, dims.page_size)?;
    /// let seq = pages.add()?;
    /// pages.grow(seq, 40)?; // the prompt (its K/V written by prefill)
    /// pages.append(seq, 1)?; // room for the next token
    /// let dst = stream.clone_htod(&append_slots(&pages, &[(seq, 1)])?)?;
    /// let k_new = stream.alloc_zeros::<bf16>(dims.rows_len(1).unwrap())?; // [1, 8, 128], from the model
    /// let v_new = stream.alloc_zeros::<bf16>(dims.rows_len(1).unwrap())?;
    /// kv.append(&stream, &k_new, &dst, &mut k_pool, dims)?;
    /// kv.append(&stream, &v_new, &dst, &mut v_pool, dims)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[derive(Debug)]
    pub struct KvAppend {
        ctx: Arc<CudaContext>,
        module: CUmodule,
        b16: CUfunction,
        b128: CUfunction,
    }

    /// One launch's arguments: the three buffers' device addresses (`new` rows, `dst` slots, the
    /// `pool`) and the extents they hold.
    struct Launch {
        new: CUdeviceptr,
        dst: CUdeviceptr,
        pool: CUdeviceptr,
        tokens: usize,
        dims: KvPoolDims,
    }

    // SAFETY: a CUDA module and its functions belong to their context, not to a thread: every use
    // here first makes `ctx` current on the calling thread (`bind_to_thread`), and launching one
    // function from several threads at once is allowed by the driver. The handles are never
    // changed after `new`, and freed once, in `drop` (as cudarc's own `CudaModule`).
    unsafe impl Send for KvAppend {}
    // SAFETY: as above.
    unsafe impl Sync for KvAppend {}

    impl Drop for KvAppend {
        fn drop(&mut self) {
            // As cudarc's `CudaModule`: a failure cannot be returned here, so it is recorded in the
            // context (the next cudarc call on it reports it).
            self.ctx.record_err(self.ctx.bind_to_thread());
            // SAFETY: loaded by `new`, unloaded once, here; `ctx` (an `Arc`) is still alive.
            self.ctx.record_err(unsafe { result::module::unload(self.module) });
        }
    }

    fn driver(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> AppendError {
        move |source| AppendError::Driver { call, source }
    }

    impl KvAppend {
        /// Loads the kernel into `ctx` (the driver JIT-compiles its PTX for the GPU: a few
        /// milliseconds, once).
        ///
        /// # Errors
        ///
        /// [`AppendError::Driver`] if the context cannot be made current or the driver refuses
        /// the PTX (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION` from a driver older than CUDA 11.0).
        pub fn new(ctx: &Arc<CudaContext>) -> Result<KvAppend, AppendError> {
            debug_assert!(PTX_NUL.len() == APPEND_PTX.len() + 1 && !APPEND_PTX.contains('\0'));
            ctx.bind_to_thread().map_err(driver("make the CUDA context current"))?;
            // SAFETY: a NUL-terminated PTX text, read by the driver during the call only.
            let module = unsafe { result::module::load_data(PTX_NUL.as_ptr().cast::<c_void>()) }
                .map_err(driver("load the append kernel's PTX"))?;
            let function = |name: &CStr| {
                // SAFETY: `module` was just loaded and is not unloaded before this returns.
                unsafe { result::module::get_function(module, name.to_owned()) }
                    .map_err(driver("find the append kernel in its module"))
            };
            match (function(B16), function(B128)) {
                (Ok(b16), Ok(b128)) => Ok(KvAppend { ctx: ctx.clone(), module, b16, b128 }),
                (Err(e), _) | (_, Err(e)) => {
                    // SAFETY: loaded above, unloaded once; nothing refers to it.
                    let _ = unsafe { result::module::unload(module) };
                    Err(e)
                }
            }
        }

        /// The context the kernel was loaded into.
        pub fn context(&self) -> &Arc<CudaContext> {
            &self.ctx
        }

        /// Writes the new tokens' rows `new` (`[N, H, D]`, `N = dst.len()`) into `pool`
        /// (`[P, H, page_size, D]`, shaped `dims`) at the slots `dst` (from [`append_slots`]),
        /// on `stream`: asynchronous, like any launch. A slot that is negative (`-1`: no token)
        /// or past the pool is skipped on the device. No tokens, no launch.
        ///
        /// Every length and extent is checked on the host first; the slots are not (they are
        /// on the device: build them with [`append_slots`], which only names the pool's pages).
        /// Two tokens with one slot write it in no particular order.
        ///
        /// [`append_slots`]: super::append_slots
        ///
        /// # Errors
        ///
        /// [`AppendError::Dims`], [`AppendError::TooManyTokens`] and [`AppendError::Length`] for
        /// shapes and lengths that do not match, [`AppendError::OtherContext`] for a stream or
        /// buffer of another context, [`AppendError::Driver`] if the launch fails.
        pub fn append<T: KvElement>(
            &self,
            stream: &CudaStream,
            new: &CudaSlice<T>,
            dst: &CudaSlice<i32>,
            pool: &mut CudaSlice<T>,
            dims: KvPoolDims,
        ) -> Result<(), AppendError> {
            check_lengths(dims, new.len(), dst.len(), pool.len())?;
            for (what, ctx) in [
                ("the stream", stream.context()),
                ("new", new.stream().context()),
                ("dst", dst.stream().context()),
                ("pool", pool.stream().context()),
            ] {
                self.same_context(ctx, what)?;
            }
            if dst.is_empty() {
                return Ok(());
            }
            // The guards make `stream` wait for earlier writes to the buffers, and record the
            // launch as their last use when they drop, after it (cudarc's stream tracking).
            let (new_ptr, _new_guard) = new.device_ptr(stream);
            let (dst_ptr, _dst_guard) = dst.device_ptr(stream);
            let (pool_ptr, _pool_guard) = pool.device_ptr_mut(stream);
            // SAFETY: the three buffers are live allocations of this context with the lengths
            // checked above, and distinct (`pool` is borrowed mutably); the guards keep them in
            // use until the launch is enqueued, and cudarc's events keep them from being reused
            // before it completes.
            unsafe {
                self.launch(stream, Launch { new: new_ptr, dst: dst_ptr, pool: pool_ptr, tokens: dst.len(), dims })
            }
        }

        /// [`append`](Self::append) on raw device pointers: `new` holds `tokens · heads ·
        /// head_dim` 16-bit elements, `dst` `tokens` `i32` slots, `pool` `dims.pool_len()`
        /// elements. The extents are checked on the host (not the buffers, which it cannot see).
        ///
        /// # Safety
        ///
        /// The three must be device memory of this kernel's context holding at least those
        /// lengths, live until the launch completes on `stream`; `pool` must overlap neither
        /// `new` nor `dst`, and nothing may write `new` or `dst` until the launch completes. The
        /// caller orders the launch after the buffers' writes (it enqueues on `stream`, nothing
        /// more).
        ///
        /// # Errors
        ///
        /// [`AppendError::Dims`] and [`AppendError::TooManyTokens`] for extents the kernel
        /// cannot take, [`AppendError::Misaligned`] for a pointer not aligned to its elements,
        /// [`AppendError::OtherContext`] for a stream of another context,
        /// [`AppendError::Driver`] if the launch fails.
        pub unsafe fn append_raw(
            &self,
            stream: &CudaStream,
            new: CUdeviceptr,
            dst: CUdeviceptr,
            pool: CUdeviceptr,
            tokens: usize,
            dims: KvPoolDims,
        ) -> Result<(), AppendError> {
            dims.check()?;
            if tokens > super::MAX_I32 {
                return Err(AppendError::TooManyTokens { tokens });
            }
            self.same_context(stream.context(), "the stream")?;
            for (buffer, address, align) in [("new", new, 2), ("dst", dst, 4), ("pool", pool, 2)] {
                if !address.is_multiple_of(align) {
                    return Err(AppendError::Misaligned { buffer, address, align });
                }
            }
            if tokens == 0 {
                return Ok(());
            }
            // SAFETY: the caller's.
            unsafe { self.launch(stream, Launch { new, dst, pool, tokens, dims }) }
        }

        fn same_context(&self, ctx: &Arc<CudaContext>, what: &'static str) -> Result<(), AppendError> {
            if ctx.cu_ctx() == self.ctx.cu_ctx() {
                Ok(())
            } else {
                Err(AppendError::OtherContext { what })
            }
        }

        /// Enqueues one kernel on `stream`: one block per token.
        ///
        /// # Safety
        ///
        /// `dims` checked and `1 <= tokens <= i32::MAX`; the buffers as `append_raw` says.
        unsafe fn launch(&self, stream: &CudaStream, launch: Launch) -> Result<(), AppendError> {
            let Launch { mut new, mut dst, mut pool, tokens, dims } = launch;
            debug_assert!((1..=super::MAX_I32).contains(&tokens) && dims.check().is_ok());
            // 16-byte words where every row is whole words and both row buffers are aligned to
            // them (a whole allocation is; an offset into one may not be); 16-bit words otherwise.
            let wide = dims.head_dim.is_multiple_of(8) && new.is_multiple_of(16) && pool.is_multiple_of(16);
            let (function, name, row_words) = if wide {
                (self.b128, "launch kv_append_b128", dims.head_dim / 8)
            } else {
                (self.b16, "launch kv_append_b16", dims.head_dim)
            };
            // The kernel's parameters, in its order and at its widths: three `.u64` pointers,
            // then five `.u32` ints (`tokens, heads, page_size, pages, row_words`), each in range
            // (checked: every extent is at most i32::MAX).
            let as_i32 = |x: usize| i32::try_from(x).unwrap_or(i32::MAX);
            let mut ints = [tokens, dims.heads, dims.page_size, dims.pages, row_words].map(as_i32);
            let [t, h, s, p, w] = &mut ints;
            let mut params: [*mut c_void; 8] = [
                (&mut new as *mut CUdeviceptr).cast(),
                (&mut dst as *mut CUdeviceptr).cast(),
                (&mut pool as *mut CUdeviceptr).cast(),
                (t as *mut i32).cast(),
                (h as *mut i32).cast(),
                (s as *mut i32).cast(),
                (p as *mut i32).cast(),
                (w as *mut i32).cast(),
            ];
            self.ctx.bind_to_thread().map_err(driver("make the CUDA context current"))?;
            let grid = (tokens as u32, 1, 1);
            // SAFETY: `function` lives in `self.module` (loaded); `params` points at 8 values of
            // the kernel's parameter types, alive through the call (the driver copies them when
            // enqueuing); the buffers are the caller's.
            unsafe { result::launch_kernel(function, grid, (THREADS, 1, 1), 0, stream.cu_stream(), &mut params) }
                .map_err(driver(name))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    /// The naive formula of `append.cu`, one element at a time.
    fn naive(pool: &mut [u16], new: &[u16], dst: &[i32], dims: KvPoolDims) {
        let KvPoolDims { pages, heads: hh, page_size: ps, head_dim: dd } = dims;
        for (n, &slot) in dst.iter().enumerate() {
            if slot < 0 || slot as usize >= pages * ps {
                continue;
            }
            let s = slot as usize;
            for h in 0..hh {
                for d in 0..dd {
                    pool[(((s / ps) * hh + h) * ps + s % ps) * dd + d] = new[(n * hh + h) * dd + d];
                }
            }
        }
    }

    fn random_u16(rng: &mut SplitMix64, n: usize) -> Vec<u16> {
        (0..n).map(|_| 1 + rng.below(65535) as u16).collect()
    }

    #[test]
    fn the_reference_matches_the_naive_formula() {
        let mut rng = SplitMix64::new(0xa99e);
        for &(pages, heads, page_size, head_dim, tokens) in
            &[(7usize, 3usize, 5usize, 20usize, 9usize), (16, 8, 16, 128, 16), (1, 1, 1, 1, 1), (4, 2, 64, 8, 40)]
        {
            let dims = KvPoolDims { pages, heads, page_size, head_dim };
            let pool0 = random_u16(&mut rng, dims.pool_len().unwrap());
            let new = random_u16(&mut rng, dims.rows_len(tokens).unwrap());
            // Distinct in-pool slots, with a skip and slots past the pool mixed in.
            let mut order: Vec<i32> = (0..(pages * page_size) as i32).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, rng.below(i + 1));
            }
            let mut dst: Vec<i32> = order.iter().copied().take(tokens).collect();
            dst.resize(tokens, -1);
            if tokens >= 3 {
                dst[1] = -1;
                dst[2] = (pages * page_size) as i32;
            }
            let (mut want, mut got) = (pool0.clone(), pool0.clone());
            naive(&mut want, &new, &dst, dims);
            append_reference(&mut got, &new, &dst, dims).unwrap();
            assert_eq!(got, want, "{dims:?}");
            assert_ne!(got, pool0, "{dims:?}: something was written");
        }
    }

    #[test]
    fn the_reference_refuses_wrong_lengths_and_shapes() {
        let dims = KvPoolDims { pages: 2, heads: 2, page_size: 4, head_dim: 8 };
        let mut pool = vec![0u16; 128];
        let e = append_reference(&mut pool, &[0u16; 15], &[0], dims).unwrap_err();
        assert_eq!(
            e.to_string(),
            "new holds 15 elements, but 16 are needed for 1 new tokens of a pool of shape [2, 2, 4, 8]"
        );
        let e = append_reference(&mut pool[..127], &[0u16; 16], &[0], dims).unwrap_err();
        assert!(matches!(e, AppendError::Length { buffer: "pool", len: 127, expected: 128, .. }), "{e}");
        let zero = KvPoolDims { head_dim: 0, ..dims };
        let e = append_reference(&mut pool, &[], &[], zero).unwrap_err();
        assert_eq!(
            e.to_string(),
            "a K/V pool has 1..=2147483647 pages, heads, tokens per page and head dim, with heads × head dim at most \
             2147483647; found [2, 2, 4, 0]"
        );
        let wide = KvPoolDims { heads: 1 << 16, head_dim: 1 << 16, ..dims };
        assert!(matches!(append_reference(&mut pool, &[], &[], wide), Err(AppendError::Dims { .. })));
        assert_eq!(pool, vec![0u16; 128], "nothing written");
        // No tokens: nothing to do, and fine.
        append_reference(&mut pool, &[], &[], dims).unwrap();
    }

    #[test]
    fn slots_follow_the_pages_of_each_sequence() {
        let mut pages = PagePool::new(64, 16).unwrap();
        let (a, b, c) = (pages.add().unwrap(), pages.add().unwrap(), pages.add().unwrap());
        pages.grow(a, 15).unwrap(); // page 0
        pages.grow(b, 16).unwrap(); // page 1
        pages.grow(c, 40).unwrap(); // pages 2, 3, 4
        pages.release(b).unwrap(); // page 1 back
        let b = pages.add().unwrap();
        for &seq in &[a, b, c] {
            pages.append(seq, 1).unwrap();
        }
        // a: row 15 of page 0; b: row 0 of page 1 (taken back); c: row 8 of page 4.
        assert_eq!(append_slots(&pages, &[(a, 1), (b, 1), (c, 1)]).unwrap(), [15, 16, 4 * 16 + 8]);
        // A chunk of 7 crossing a page: c's tokens 41..48, then a's 16..23 on a new page.
        pages.append(c, 7).unwrap();
        pages.append(a, 7).unwrap();
        let slots = append_slots(&pages, &[(c, 7), (a, 7)]).unwrap();
        let a_page = pages.pages(a).unwrap()[1];
        let mut want: Vec<i32> = (4 * 16 + 9..4 * 16 + 16).collect();
        want.extend((0..7).map(|r| a_page * 16 + r));
        assert_eq!(slots, want);
        // Every slot is the position's page and row, by the pool's own pages.
        for (i, &(seq, n)) in [(c, 7usize), (a, 7)].iter().enumerate() {
            let len = pages.len(seq).unwrap();
            for (k, position) in (len - n..len).enumerate() {
                let page = pages.pages(seq).unwrap()[position / 16];
                assert_eq!(slots[i * 7 + k], page * 16 + (position % 16) as i32);
            }
        }
        // Zero new tokens: no slots.
        assert_eq!(append_slots(&pages, &[(a, 0)]).unwrap(), Vec::<i32>::new());
    }

    #[test]
    fn slots_refuse_what_was_not_appended_and_dead_handles() {
        let mut pages = PagePool::new(8, 4).unwrap();
        let a = pages.add().unwrap();
        pages.grow(a, 3).unwrap();
        let c = pages.add().unwrap();
        pages.grow(c, 1).unwrap();
        let mut slots = vec![99];
        let e = append_slots_into(&pages, &[(c, 1), (a, 4)], &mut slots).unwrap_err();
        assert_eq!(e, AppendError::NotAppended { seq: a, tokens: 4, len: 3 });
        assert!(slots.is_empty(), "left empty on an error");
        let b = pages.add().unwrap();
        pages.grow(b, 2).unwrap();
        let e = append_slots(&pages, &[(a, 1), (b, 1), (a, 1)]).unwrap_err();
        assert_eq!(e, AppendError::DuplicateSequence { seq: a, first: 0, second: 2 });
        assert_eq!(
            e.to_string(),
            "sequence 0 is in the append batch twice, at 0 and 2: give each sequence once, with all its new tokens"
        );
        pages.release(a).unwrap();
        let e = append_slots(&pages, &[(a, 1)]).unwrap_err();
        assert_eq!(e, AppendError::Page(PageError::Released { seq: a }));
        assert_eq!(e.to_string(), "sequence 0 was released: its handle names no pages any more");
    }

    #[test]
    fn slots_past_i32_are_refused() {
        // Pages of i32::MAX tokens: page 1's first row is slot i32::MAX, its second is past it.
        let mut pages = PagePool::new(4, i32::MAX as usize).unwrap();
        let (a, b) = (pages.add().unwrap(), pages.add().unwrap());
        pages.grow(a, 1).unwrap(); // page 0
        pages.grow(b, 2).unwrap(); // page 1
        assert_eq!(
            append_slots(&pages, &[(a, 1), (b, 1)]),
            Err(AppendError::SlotTooLarge { seq: b, position: 1, slot: i32::MAX as usize + 1 })
        );
        assert_eq!(append_slots(&pages, &[(a, 1)]).unwrap(), [0]);
        let mut slots = Vec::new();
        append_slots_into(&pages, &[(b, 2)], &mut slots).unwrap_err();
        assert!(slots.is_empty());
    }

    #[test]
    fn the_ptx_declares_both_kernels_for_sm_80_at_isa_7() {
        let header: Vec<&str> = APPEND_PTX
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with('.') && !l.starts_with(".param"))
            .take(3)
            .collect();
        assert_eq!(header, [".version 7.0", ".target sm_80", ".address_size 64"]);
        let entries: Vec<&str> = APPEND_PTX
            .lines()
            .filter_map(|l| l.strip_prefix(".visible .entry "))
            .map(|l| l.trim_end_matches('('))
            .collect();
        assert_eq!(entries, ["kv_append_b16", "kv_append_b128"]);
        // Three u64 pointers, then five u32 ints: what `launch` passes.
        for entry in entries {
            let params: Vec<&str> = APPEND_PTX
                .lines()
                .map(str::trim)
                .filter_map(|l| l.strip_prefix(".param "))
                .filter(|l| l.contains(&format!("{entry}_param_")))
                .map(|l| l.split_whitespace().next().unwrap_or(""))
                .collect();
            assert_eq!(params, [".u64", ".u64", ".u64", ".u32", ".u32", ".u32", ".u32", ".u32"], "{entry}");
        }
        assert!(!APPEND_PTX.contains('\0'));
        assert!(APPEND_PTX.len() < 16 * 1024, "keep the PTX small");
        // The command that regenerates it is at the top of the CUDA source.
        let command = "nvcc -ptx -arch=compute_80 -o - append.cu | sed 's/^\\.version .*$/.version 7.0/'";
        for (file, text) in [("append.cu", include_str!("append.cu")), ("append.ptx", APPEND_PTX)] {
            let top: String = text.lines().take(12).collect::<Vec<_>>().join("\n");
            assert!(top.contains("sh cudnn-runtime/src/serving/append-ptx.sh"), "{file}");
            assert!(top.contains(command), "{file}");
        }
        assert!(include_str!("append-ptx.sh").contains(command));
    }
}
