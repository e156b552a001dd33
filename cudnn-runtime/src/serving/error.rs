//! [`PageError`]: every way a page pool or a page table can be asked for something wrong, with
//! the sequence, the table row, the slot and the bound it broke.

use std::fmt;

use super::SeqId;

/// A row of a page table, for errors: its index in the batch and, for a table filled from a
/// [`PagePool`](super::PagePool), the sequence it holds. Displays as `page table row 3
/// (sequence 17)`, or `page table row 3` for a table filled by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TableRow {
    /// The row (the index `b` of `[B, 1, T, 1]`).
    pub index: usize,
    /// The sequence the row holds, where the table knows it.
    pub seq: Option<SeqId>,
}

impl fmt::Display for TableRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.seq {
            Some(seq) => write!(f, "page table row {} (sequence {seq})", self.index),
            None => write!(f, "page table row {}", self.index),
        }
    }
}

/// What a [`PagePool`](super::PagePool) or a [`PageTable`](super::PageTable) refused, naming the
/// sequence, the row, the slot and the bound. Nothing changed when one is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    /// A pool with no pages, or more than an `i32` table entry can name.
    #[error("a page pool holds 1..=2147483647 pages (page table entries are i32), found {pages}")]
    PoolPages {
        /// The pages asked for.
        pages: usize,
    },
    /// Pages of no tokens, or more than an `i32` length can count.
    #[error("a page holds 1..=2147483647 tokens, found {page_size}")]
    PageSize {
        /// The page size asked for.
        page_size: usize,
    },
    /// A handle whose sequence was released (handles are never reused).
    #[error("sequence {seq} was released: its handle names no pages any more")]
    Released {
        /// The stale handle.
        seq: SeqId,
    },
    /// A handle another pool gave out.
    #[error("sequence {seq} belongs to another page pool")]
    OtherPool {
        /// The foreign handle.
        seq: SeqId,
    },
    /// The pool has given out every sequence handle it can (2⁶⁴, or 2³² live at once).
    #[error("the page pool has no sequence handle left to give out")]
    TooManySequences,
    /// `grow` to fewer tokens than the sequence holds.
    #[error("sequence {seq} holds {len} tokens: growing it to {to} would shrink it (use `truncate`)")]
    Shrink {
        /// The sequence.
        seq: SeqId,
        /// The tokens it holds.
        len: usize,
        /// The length asked for.
        to: usize,
    },
    /// A length that `SEQ_LEN_KV`'s `i32` cannot hold.
    #[error("sequence {seq}: {len} tokens do not fit SEQ_LEN_KV's i32 (at most 2147483647)")]
    TooLong {
        /// The sequence.
        seq: SeqId,
        /// The length asked for (`usize::MAX` where counting it overflowed).
        len: usize,
    },
    /// Not enough free pages for a sequence to grow.
    #[error("sequence {seq} needs {needed} more pages to hold {len} tokens, but the pool has {free} free")]
    OutOfPages {
        /// The sequence.
        seq: SeqId,
        /// The length asked for.
        len: usize,
        /// The pages it would have to take.
        needed: usize,
        /// The pages free.
        free: usize,
    },
    /// A table shape with no rows, slots or query tokens, or too large to hold.
    #[error(
        "a page table has 1..=2147483647 rows, slots and query tokens per row, and room for rows × slots \
         entries; found {max_batch} rows × {width} slots, {max_queries} query tokens"
    )]
    TableDims {
        /// The rows asked for.
        max_batch: usize,
        /// The slots per row asked for.
        width: usize,
        /// The query tokens per row asked for.
        max_queries: usize,
    },
    /// More sequences than the table has rows.
    #[error("a batch of {batch} sequences does not fit the page table's {max_batch} rows")]
    BatchTooLarge {
        /// The sequences given.
        batch: usize,
        /// The table's rows.
        max_batch: usize,
    },
    /// One sequence in two rows of a batch.
    #[error("sequence {seq} is in the batch twice, in page table rows {first} and {second}")]
    DuplicateSequence {
        /// The sequence.
        seq: SeqId,
        /// Its first row.
        first: usize,
        /// Its second row.
        second: usize,
    },
    /// A sequence holding more pages than a table row has slots.
    #[error("{row} needs {needed} pages for its {len} tokens, but the table has {width} slots per row")]
    TooWide {
        /// The row and sequence.
        row: TableRow,
        /// The tokens the sequence holds.
        len: usize,
        /// The pages they take.
        needed: usize,
        /// The table's slots per row.
        width: usize,
    },
    /// A query length outside what the table was made for.
    #[error("{row}: {queries} query tokens is outside 0..={max_queries} (the table's query tokens per row)")]
    QueriesOutOfRange {
        /// The row (and sequence).
        row: TableRow,
        /// The query length given (saturated to `i64`).
        queries: i64,
        /// The table's query tokens per row.
        max_queries: usize,
    },
    /// A buffer given to [`PageTable::from_raw`](super::PageTable::from_raw) of the wrong length.
    #[error("{buffer} holds {len} values, but a table of {batch} rows × {width} slots needs {expected}")]
    BufferLength {
        /// Which buffer: `Page_table_K/V`, `SEQ_LEN_KV` or `SEQ_LEN_Q`.
        buffer: &'static str,
        /// Its length.
        len: usize,
        /// The length the table needs.
        expected: usize,
        /// The table's rows.
        batch: usize,
        /// The table's slots per row.
        width: usize,
    },
    /// A table entry naming no page of the pool: cuDNN would read outside it.
    #[error("{row}, slot {slot}: page {page} is outside the pool's 0..{pages}")]
    PageOutOfPool {
        /// The row.
        row: TableRow,
        /// The slot (the index `t` of `[B, 1, T, 1]`).
        slot: usize,
        /// The entry.
        page: i32,
        /// The pool's pages.
        pages: usize,
    },
    /// A sequence length outside what its row can hold.
    #[error("{row}: length {len} is outside 0..={max_len} ({width} slots of {page_size} tokens)")]
    LengthOutOfRange {
        /// The row.
        row: TableRow,
        /// The length given.
        len: i32,
        /// The most the row holds (`width · page_size`, at most `i32::MAX`).
        max_len: usize,
        /// The table's slots per row.
        width: usize,
        /// The pool's page size.
        page_size: usize,
    },
    /// One page in the live ranges of two rows (or twice in one): appending to one would
    /// overwrite the other's tokens.
    #[error(
        "page {page} is live in {first}, slot {first_slot} and in {second}, slot {second_slot}: a page holds \
         the tokens of one sequence"
    )]
    Aliased {
        /// The page.
        page: i32,
        /// The first row naming it.
        first: TableRow,
        /// Its slot there.
        first_slot: usize,
        /// The second row naming it (the same row where a sequence names it twice).
        second: TableRow,
        /// Its slot there.
        second_slot: usize,
    },
}
