//! [`PagePool`], the allocator that hands pages of a paged K/V cache to sequences, and
//! [`PageTable`], one batch's page tables and lengths as a paged `sdpa` plan reads them.

use std::sync::atomic::{AtomicU32, Ordering};

use super::error::{PageError, TableRow};
use super::SeqId;

/// The largest page index, page size, length or table extent: table entries and lengths are `i32`.
const MAX_I32: usize = i32::MAX as usize;

/// Pool ids, so that a handle of one pool is an error in another (wraps after 2³² pools).
static POOL_IDS: AtomicU32 = AtomicU32::new(0);

/// A slot of the pool's sequence list: live, or vacant until the next `add`.
#[derive(Debug, Clone, Default)]
struct Slot {
    serial: u64,
    live: bool,
    len: usize,
    /// `ceil(len / page_size)` pages, token order (kept allocated while vacant).
    pages: Vec<i32>,
}

/// The pages of a paged K/V cache and the sequences holding them: `pages` pages of `page_size`
/// tokens (the pools' `[P, H, page, D]`), handed out to sequences as they grow and taken back as
/// they shrink or end.
///
/// By construction every page index is in `0..pages`, no page belongs to two live sequences, and
/// each sequence of `len` tokens holds exactly `ceil(len / page_size)` pages, in token order
/// (page `t` holds its tokens `t·page_size..(t+1)·page_size`). A failed call changes nothing.
/// Sequences are [`SeqId`] handles, never reused.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::serving::{PageError, PagePool};
///
/// let mut pool = PagePool::new(4, 16)?;
/// let a = pool.add()?;
/// pool.grow(a, 40)?; // 3 pages
/// assert_eq!((pool.len(a)?, pool.pages(a)?.len(), pool.free_pages()), (40, 3, 1));
/// let b = pool.add()?;
/// let e = pool.grow(b, 20).unwrap_err(); // all or nothing
/// assert_eq!(e.to_string(), "sequence 1 needs 2 more pages to hold 20 tokens, but the pool has 1 free");
/// pool.release(a)?;
/// assert_eq!(pool.free_pages(), 4);
/// assert!(matches!(pool.pages(a), Err(PageError::Released { .. })));
/// # Ok::<(), PageError>(())
/// ```
#[derive(Debug, Clone)]
pub struct PagePool {
    id: u32,
    pages: i32,
    page_size: usize,
    /// Pages `fresh..pages` were never handed out.
    fresh: i32,
    /// Pages handed back, taken again last in first out.
    returned: Vec<i32>,
    slots: Vec<Slot>,
    /// Slots of released sequences, for the next `add`.
    vacant: Vec<u32>,
    next_serial: u64,
    live: usize,
}

impl PagePool {
    /// A pool that holds `tokens` tokens in pages of [`DEFAULT_PAGE_SIZE`](super::DEFAULT_PAGE_SIZE)
    /// (`tokens` rounded up to whole pages), all free.
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::serving::{PagePool, DEFAULT_PAGE_SIZE};
    ///
    /// let pool = PagePool::for_tokens(1000)?;
    /// assert_eq!((pool.page_size(), pool.page_count()), (DEFAULT_PAGE_SIZE, 16));
    /// # Ok::<(), cudnn_graph::serving::PageError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`PagePool::new`]: [`PageError::PoolPages`] for no tokens or more pages than `i32`
    /// counts.
    pub fn for_tokens(tokens: usize) -> Result<PagePool, PageError> {
        PagePool::new(tokens.div_ceil(super::DEFAULT_PAGE_SIZE), super::DEFAULT_PAGE_SIZE)
    }

    /// A pool of `pages` pages of `page_size` tokens, all free.
    ///
    /// # Errors
    ///
    /// [`PageError::PoolPages`] unless `pages` is in `1..=i32::MAX` (an unused table slot names
    /// page 0, so a pool has at least one); [`PageError::PageSize`] unless `page_size` is.
    pub fn new(pages: usize, page_size: usize) -> Result<PagePool, PageError> {
        let (pages, page_size) = check_pool(pages, page_size)?;
        Ok(PagePool {
            id: POOL_IDS.fetch_add(1, Ordering::Relaxed),
            pages,
            page_size,
            fresh: 0,
            returned: Vec::new(),
            slots: Vec::new(),
            vacant: Vec::new(),
            next_serial: 0,
            live: 0,
        })
    }

    /// The pool's pages (`P` of the pools' `[P, H, page, D]`).
    pub fn page_count(&self) -> usize {
        self.pages as usize
    }

    /// Tokens per page.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Pages no live sequence holds.
    pub fn free_pages(&self) -> usize {
        self.returned.len() + (self.pages - self.fresh) as usize
    }

    /// The pages `len` tokens take: `ceil(len / page_size)`.
    pub fn pages_for(&self, len: usize) -> usize {
        len.div_ceil(self.page_size)
    }

    /// Live sequences.
    pub fn live_sequences(&self) -> usize {
        self.live
    }

    /// The live sequences, in slot order (not the order they were added in).
    pub fn sequences(&self) -> impl Iterator<Item = SeqId> + '_ {
        let pool = self.id;
        self.slots.iter().enumerate().filter(|(_, s)| s.live).map(move |(slot, s)| SeqId {
            serial: s.serial,
            pool,
            slot: slot as u32,
        })
    }

    /// A new sequence, holding no tokens.
    ///
    /// # Errors
    ///
    /// [`PageError::TooManySequences`] once 2⁶⁴ sequences were added or 2³² are live.
    pub fn add(&mut self) -> Result<SeqId, PageError> {
        let serial = self.next_serial;
        let next_serial = serial.checked_add(1).ok_or(PageError::TooManySequences)?;
        let slot = match self.vacant.pop() {
            Some(slot) => slot,
            None => {
                let slot = u32::try_from(self.slots.len()).map_err(|_| PageError::TooManySequences)?;
                self.slots.push(Slot::default());
                slot
            }
        };
        let s = &mut self.slots[slot as usize];
        debug_assert!(!s.live && s.pages.is_empty());
        (s.serial, s.live, s.len) = (serial, true, 0);
        self.next_serial = next_serial;
        self.live += 1;
        Ok(SeqId { serial, pool: self.id, slot })
    }

    /// The tokens `seq` holds.
    ///
    /// # Errors
    ///
    /// [`PageError::Released`] or [`PageError::OtherPool`] for a handle that names no live
    /// sequence of this pool.
    pub fn len(&self, seq: SeqId) -> Result<usize, PageError> {
        Ok(self.slots[self.find(seq)?].len)
    }

    /// The pages `seq` holds, in token order: entry `t` holds its tokens
    /// `t·page_size..(t+1)·page_size`.
    ///
    /// # Errors
    ///
    /// As [`len`](Self::len).
    pub fn pages(&self, seq: SeqId) -> Result<&[i32], PageError> {
        Ok(&self.slots[self.find(seq)?].pages)
    }

    /// Grows `seq` to `len` tokens, taking the pages it newly needs from the free ones; all or
    /// nothing.
    ///
    /// # Errors
    ///
    /// As [`len`](Self::len); [`PageError::Shrink`] if `seq` holds more than `len` tokens,
    /// [`PageError::TooLong`] past `i32::MAX` tokens, [`PageError::OutOfPages`] (naming the pages
    /// needed and free) if too few pages are free. Nothing changes on an error.
    pub fn grow(&mut self, seq: SeqId, len: usize) -> Result<(), PageError> {
        let i = self.find(seq)?;
        let free = self.free_pages();
        let PagePool { slots, returned, fresh, page_size, .. } = self;
        let slot = &mut slots[i];
        if len < slot.len {
            return Err(PageError::Shrink { seq, len: slot.len, to: len });
        }
        if len > MAX_I32 {
            return Err(PageError::TooLong { seq, len });
        }
        let needed = len.div_ceil(*page_size).saturating_sub(slot.pages.len());
        if needed > free {
            return Err(PageError::OutOfPages { seq, len, needed, free });
        }
        slot.pages.reserve(needed);
        for _ in 0..needed {
            let page = returned.pop().unwrap_or_else(|| {
                *fresh += 1;
                *fresh - 1
            });
            slot.pages.push(page);
        }
        slot.len = len;
        Ok(())
    }

    /// Grows `seq` by `tokens` tokens (a decode step appends 1), as [`grow`](Self::grow).
    ///
    /// # Errors
    ///
    /// As [`grow`](Self::grow).
    pub fn append(&mut self, seq: SeqId, tokens: usize) -> Result<(), PageError> {
        let len = self.len(seq)?.checked_add(tokens).ok_or(PageError::TooLong { seq, len: usize::MAX })?;
        self.grow(seq, len)
    }

    /// Shortens `seq` to `len` tokens, handing back the pages it no longer needs; nothing happens
    /// if it holds `len` tokens or fewer (as `Vec::truncate`).
    ///
    /// # Errors
    ///
    /// As [`len`](Self::len).
    pub fn truncate(&mut self, seq: SeqId, len: usize) -> Result<(), PageError> {
        let i = self.find(seq)?;
        let PagePool { slots, returned, page_size, .. } = self;
        let slot = &mut slots[i];
        if len < slot.len {
            // Reversed, so that the next sequence to grow takes them back in the same order.
            returned.extend(slot.pages.drain(len.div_ceil(*page_size)..).rev());
            slot.len = len;
        }
        Ok(())
    }

    /// Ends `seq`: its pages become free, and its handle (and every copy) an error from now on.
    ///
    /// # Errors
    ///
    /// As [`len`](Self::len).
    pub fn release(&mut self, seq: SeqId) -> Result<(), PageError> {
        let i = self.find(seq)?;
        let slot = &mut self.slots[i];
        self.returned.extend(slot.pages.drain(..).rev());
        (slot.live, slot.len) = (false, 0);
        self.vacant.push(seq.slot);
        self.live -= 1;
        Ok(())
    }

    /// The slot index of live sequence `seq`.
    fn find(&self, seq: SeqId) -> Result<usize, PageError> {
        if seq.pool != self.id {
            return Err(PageError::OtherPool { seq });
        }
        match self.slots.get(seq.slot as usize) {
            Some(s) if s.live && s.serial == seq.serial => Ok(seq.slot as usize),
            _ => Err(PageError::Released { seq }),
        }
    }
}

/// `(pages, page_size)` of a pool, checked.
fn check_pool(pages: usize, page_size: usize) -> Result<(i32, usize), PageError> {
    let pages = i32::try_from(pages).ok().filter(|&p| p >= 1).ok_or(PageError::PoolPages { pages })?;
    if !(1..=MAX_I32).contains(&page_size) {
        return Err(PageError::PageSize { page_size });
    }
    Ok((pages, page_size))
}

/// One batch's inputs to a paged `sdpa` plan, on the host, ready to upload: `Page_table_K` and
/// `Page_table_V` (one table for both, since a pool's K and V pages share their index), `SEQ_LEN_KV`
/// and `SEQ_LEN_Q`, at the capacity the plan was built for (`max_batch` rows of `width` slots,
/// `max_queries` query tokens per row). One plan serves every batch that fits.
///
/// Rows past the batch and slots past a sequence's pages hold page 0 and lengths 0, so every
/// entry names a page of the pool: nothing cuDNN reads through the table is outside it.
/// [`fill`](Self::fill) writes a batch of a [`PagePool`]'s sequences (in range and unaliased by
/// construction); [`from_raw`](Self::from_raw) checks a table filled by hand. A failed call
/// changes nothing.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::serving::{PageError, PagePool, PageTable};
///
/// let mut pool = PagePool::new(64, 16)?;
/// let mut table = PageTable::new(4, 2)?; // a plan for 4 sequences of up to 2 pages
/// let (a, b) = (pool.add()?, pool.add()?);
/// pool.grow(a, 20)?;
/// pool.grow(b, 3)?;
/// table.fill(&pool, &[a, b])?;
/// assert_eq!(table.entries(), [0, 1, 2, 0, 0, 0, 0, 0]); // [4, 1, 2, 1]
/// assert_eq!(table.seq_len_kv(), [20, 3, 0, 0]);
/// assert_eq!(table.seq_len_q(), [1, 1, 0, 0]); // decode: one query token per sequence
///
/// pool.grow(b, 40)?;
/// let e = table.fill(&pool, &[a, b]).unwrap_err();
/// assert_eq!(e.to_string(), "page table row 1 (sequence 1) needs 3 pages for its 40 tokens, but the table has 2 slots per row");
/// # Ok::<(), PageError>(())
/// ```
#[derive(Debug, Clone)]
pub struct PageTable {
    max_batch: usize,
    width: usize,
    max_queries: usize,
    batch: usize,
    entries: Vec<i32>,
    seq_len_kv: Vec<i32>,
    seq_len_q: Vec<i32>,
    /// Per row, the slots a fill may have written: past them, entries are 0.
    written: Vec<usize>,
    /// Scratch for the duplicate check: (sequence, row).
    order: Vec<(SeqId, usize)>,
}

impl PageTable {
    /// An empty decode table (one query token per sequence) of `max_batch` rows of `width`
    /// slots: the `B` and `T` of the plan's `[B, 1, T, 1]` tables.
    ///
    /// # Errors
    ///
    /// [`PageError::TableDims`] unless both are in `1..=i32::MAX` and the table fits in memory.
    pub fn new(max_batch: usize, width: usize) -> Result<PageTable, PageError> {
        PageTable::multi_token(max_batch, width, 1)
    }

    /// An empty table of `max_batch` rows of `width` slots for up to `max_queries` query tokens
    /// per sequence (the plan's `S_q`: speculative decoding, chunked prefill).
    ///
    /// # Errors
    ///
    /// [`PageError::TableDims`] unless all three are in `1..=i32::MAX` and the table fits in
    /// memory.
    pub fn multi_token(max_batch: usize, width: usize, max_queries: usize) -> Result<PageTable, PageError> {
        let dims = PageError::TableDims { max_batch, width, max_queries };
        let n = check_dims(max_batch, width, max_queries).ok_or(dims.clone())?;
        let zeros = |n: usize| -> Result<Vec<i32>, PageError> {
            let mut v = Vec::new();
            v.try_reserve_exact(n).map_err(|_| dims.clone())?;
            v.resize(n, 0);
            Ok(v)
        };
        Ok(PageTable {
            max_batch,
            width,
            max_queries,
            batch: 0,
            entries: zeros(n)?,
            seq_len_kv: zeros(max_batch)?,
            seq_len_q: zeros(max_batch)?,
            written: vec![0; max_batch],
            order: Vec::with_capacity(max_batch),
        })
    }

    /// Checks a table filled by hand and takes it as a decode table: `entries` is
    /// `Page_table_K/V` (`[batch, 1, width, 1]` row-major), `seq_len_kv` is `SEQ_LEN_KV`
    /// (`[batch, 1, 1, 1]`), for a pool of `pool_pages` pages of `page_size` tokens. Every entry
    /// must name a page of the pool, live or not; each length must fit its row
    /// (`0..=width·page_size`); no page may be in the live range (the first
    /// `ceil(len / page_size)` slots) of two rows or twice in one. `SEQ_LEN_Q` is 1 for each row
    /// holding a token, 0 elsewhere ([`with_queries`](Self::with_queries) sets it).
    ///
    /// # Errors
    ///
    /// [`PageError::TableDims`], [`PageError::PoolPages`], [`PageError::PageSize`] for the
    /// shapes; [`PageError::BufferLength`] for a buffer of the wrong length; then, naming the row
    /// and slot, [`PageError::PageOutOfPool`], [`PageError::LengthOutOfRange`] and
    /// [`PageError::Aliased`] (naming both rows and slots).
    pub fn from_raw(
        entries: Vec<i32>,
        seq_len_kv: Vec<i32>,
        batch: usize,
        width: usize,
        pool_pages: usize,
        page_size: usize,
    ) -> Result<PageTable, PageError> {
        let n = check_dims(batch, width, 1).ok_or(PageError::TableDims { max_batch: batch, width, max_queries: 1 })?;
        check_pool(pool_pages, page_size)?;
        let length = |buffer, len, expected| PageError::BufferLength { buffer, len, expected, batch, width };
        if entries.len() != n {
            return Err(length("Page_table_K/V", entries.len(), n));
        }
        if seq_len_kv.len() != batch {
            return Err(length("SEQ_LEN_KV", seq_len_kv.len(), batch));
        }
        let max_len = width.checked_mul(page_size).map_or(MAX_I32, |c| c.min(MAX_I32));
        let mut live = Vec::new();
        for (index, (row, &len)) in entries.chunks_exact(width).zip(&seq_len_kv).enumerate() {
            let at = TableRow { index, seq: None };
            if let Some((slot, &page)) =
                row.iter().enumerate().find(|(_, &p)| !(0..pool_pages as i64).contains(&(p as i64)))
            {
                return Err(PageError::PageOutOfPool { row: at, slot, page, pages: pool_pages });
            }
            let Some(len_tokens) = usize::try_from(len).ok().filter(|&l| l <= max_len) else {
                return Err(PageError::LengthOutOfRange { row: at, len, max_len, width, page_size });
            };
            live.extend(row[..len_tokens.div_ceil(page_size)].iter().enumerate().map(|(slot, &p)| (p, index, slot)));
        }
        live.sort_unstable();
        if let Some(w) = live.windows(2).find(|w| w[0].0 == w[1].0) {
            let ((page, r0, s0), (_, r1, s1)) = (w[0], w[1]);
            let row = |index| TableRow { index, seq: None };
            return Err(PageError::Aliased { page, first: row(r0), first_slot: s0, second: row(r1), second_slot: s1 });
        }
        let seq_len_q = seq_len_kv.iter().map(|&l| i32::from(l > 0)).collect();
        Ok(PageTable {
            max_batch: batch,
            width,
            max_queries: 1,
            batch,
            entries,
            seq_len_kv,
            seq_len_q,
            // Whatever the caller wrote may be anywhere in a row.
            written: vec![width; batch],
            order: Vec::new(),
        })
    }

    /// This table with `seq_len_q` as `SEQ_LEN_Q` (`[max_batch, 1, 1, 1]`), for a plan of up to
    /// `max_queries` query tokens per sequence.
    ///
    /// # Errors
    ///
    /// [`PageError::TableDims`] unless `max_queries` is in `1..=i32::MAX`;
    /// [`PageError::BufferLength`] unless `seq_len_q` has a value per row;
    /// [`PageError::QueriesOutOfRange`] for a value outside `0..=max_queries`.
    pub fn with_queries(mut self, seq_len_q: Vec<i32>, max_queries: usize) -> Result<PageTable, PageError> {
        let (max_batch, width) = (self.max_batch, self.width);
        if check_dims(max_batch, width, max_queries).is_none() {
            return Err(PageError::TableDims { max_batch, width, max_queries });
        }
        if seq_len_q.len() != max_batch {
            let (len, expected) = (seq_len_q.len(), max_batch);
            return Err(PageError::BufferLength { buffer: "SEQ_LEN_Q", len, expected, batch: max_batch, width });
        }
        if let Some((index, &q)) =
            seq_len_q.iter().enumerate().find(|(_, &q)| !(0..=max_queries as i64).contains(&(q as i64)))
        {
            let row = TableRow { index, seq: None };
            return Err(PageError::QueriesOutOfRange { row, queries: q.into(), max_queries });
        }
        (self.seq_len_q, self.max_queries) = (seq_len_q, max_queries);
        Ok(self)
    }

    /// Writes the decode batch `seqs` of `pool`, in order (row `b` holds `seqs[b]`, one query
    /// token for each sequence holding a token), clearing the rows past it. `pool` is the
    /// allocator of the plan's K and V pools: as many pages, of as many tokens.
    ///
    /// # Errors
    ///
    /// [`PageError::BatchTooLarge`] past `max_batch` sequences; [`PageError::Released`] or
    /// [`PageError::OtherPool`] for a handle naming no live sequence of `pool`;
    /// [`PageError::TooWide`] for a sequence holding more than `width` pages;
    /// [`PageError::DuplicateSequence`] for a sequence given twice. Nothing changes on an error.
    pub fn fill(&mut self, pool: &PagePool, seqs: &[SeqId]) -> Result<(), PageError> {
        self.fill_rows(pool, seqs.len(), |b| (seqs[b], None))
    }

    /// Writes the batch `rows` of `pool`, in order, each sequence with its query tokens (row `b`
    /// holds `rows[b].0` with `rows[b].1` queries), clearing the rows past it.
    ///
    /// # Errors
    ///
    /// As [`fill`](Self::fill), and [`PageError::QueriesOutOfRange`] past `max_queries` query
    /// tokens. Nothing changes on an error.
    pub fn fill_with_queries(&mut self, pool: &PagePool, rows: &[(SeqId, usize)]) -> Result<(), PageError> {
        self.fill_rows(pool, rows.len(), |b| (rows[b].0, Some(rows[b].1)))
    }

    /// Checks rows `0..batch` (`row(b)`: the sequence and its query tokens, `None` for decode),
    /// then writes them.
    fn fill_rows(
        &mut self,
        pool: &PagePool,
        batch: usize,
        row: impl Fn(usize) -> (SeqId, Option<usize>),
    ) -> Result<(), PageError> {
        if batch > self.max_batch {
            return Err(PageError::BatchTooLarge { batch, max_batch: self.max_batch });
        }
        self.order.clear();
        for b in 0..batch {
            let (seq, queries) = row(b);
            let (pages, at) = (pool.pages(seq)?, TableRow { index: b, seq: Some(seq) });
            if pages.len() > self.width {
                return Err(PageError::TooWide {
                    row: at,
                    len: pool.len(seq)?,
                    needed: pages.len(),
                    width: self.width,
                });
            }
            if let Some(q) = queries.filter(|&q| q > self.max_queries) {
                let queries = i64::try_from(q).unwrap_or(i64::MAX);
                return Err(PageError::QueriesOutOfRange { row: at, queries, max_queries: self.max_queries });
            }
            self.order.push((seq, b));
        }
        self.order.sort_unstable();
        if let Some(w) = self.order.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(PageError::DuplicateSequence { seq: w[0].0, first: w[0].1, second: w[1].1 });
        }
        // Checked: from here on nothing fails.
        for b in 0..batch.max(self.batch) {
            let (pages, len, queries) = match (b < batch).then(|| row(b)) {
                Some((seq, queries)) => {
                    let (pages, len) = (pool.pages(seq)?, pool.len(seq)?);
                    (pages, len, queries.unwrap_or(usize::from(len > 0)))
                }
                None => (&[][..], 0, 0),
            };
            let start = b * self.width;
            self.entries[start..start + pages.len()].copy_from_slice(pages);
            let written = &mut self.written[b];
            if *written > pages.len() {
                self.entries[start + pages.len()..start + *written].fill(0);
            }
            *written = pages.len();
            // Both at most i32::MAX: the pool's lengths and the table's `max_queries` are.
            (self.seq_len_kv[b], self.seq_len_q[b]) = (len as i32, queries as i32);
        }
        self.batch = batch;
        Ok(())
    }

    /// `Page_table_K` and `Page_table_V`: `[max_batch, 1, width, 1]` `i32`, row-major.
    pub fn entries(&self) -> &[i32] {
        &self.entries
    }

    /// `SEQ_LEN_KV`: `[max_batch, 1, 1, 1]` `i32`, the tokens each row's sequence holds.
    pub fn seq_len_kv(&self) -> &[i32] {
        &self.seq_len_kv
    }

    /// `SEQ_LEN_Q`: `[max_batch, 1, 1, 1]` `i32`, the query tokens of each row.
    pub fn seq_len_q(&self) -> &[i32] {
        &self.seq_len_q
    }

    /// Row `b` of the table (`width` entries), `None` past `max_batch`.
    pub fn row(&self, b: usize) -> Option<&[i32]> {
        self.entries.chunks_exact(self.width).nth(b)
    }

    /// The tables' dims, `[max_batch, 1, width, 1]`.
    pub fn table_dims(&self) -> [i64; 4] {
        [self.max_batch as i64, 1, self.width as i64, 1]
    }

    /// The length tensors' dims, `[max_batch, 1, 1, 1]`.
    pub fn len_dims(&self) -> [i64; 4] {
        [self.max_batch as i64, 1, 1, 1]
    }

    /// The rows (`B` of the plan).
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// The slots per row (`T` of the plan).
    pub fn width(&self) -> usize {
        self.width
    }

    /// The query tokens per row (`S_q` of the plan; 1 for decode).
    pub fn max_queries(&self) -> usize {
        self.max_queries
    }

    /// The rows the last fill wrote (the rest hold nothing).
    pub fn batch(&self) -> usize {
        self.batch
    }
}

/// The entries of a table of `max_batch × width` (each dim, and `max_queries`, in
/// `1..=i32::MAX`), `None` if a dim is out of range or the count overflows.
fn check_dims(max_batch: usize, width: usize, max_queries: usize) -> Option<usize> {
    let dims = [max_batch, width, max_queries];
    if dims.iter().all(|d| (1..=MAX_I32).contains(d)) {
        max_batch.checked_mul(width)
    } else {
        None
    }
}
