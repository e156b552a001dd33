//! Page tables you cannot get wrong: the host side of a paged K/V cache, for a paged `sdpa`
//! (`paged = true`, with `padding_mask = true`). cuDNN reads whatever pages a table names, with
//! no bounds check, so an entry outside the pool reads (or crashes) outside it; this module makes
//! such a table impossible to build.
//!
//! 1. A [`PagePool`] hands the pool's pages to sequences ([`SeqId`] handles) as they grow and
//!    takes them back as they shrink or end: every page index is in range and no page belongs to
//!    two live sequences, by construction; a released handle is an error, never another
//!    sequence's pages.
//! 2. A [`PageTable`] of a plan's capacity (`max_batch` rows of `width` slots) is filled from the
//!    pool with each step's batch and hands out `Page_table_K/V`, `SEQ_LEN_KV` and `SEQ_LEN_Q`
//!    as `&[i32]` in the plan's layouts, ready to upload: one plan serves every batch that fits.
//! 3. A table filled by hand goes through [`PageTable::from_raw`], which checks every entry,
//!    length and alias and names the row, slot and bound it broke ([`PageError`]).
//!
//! A decode loop (pools of 64 pages of 16 tokens, a plan for 4 sequences of up to 8 pages):
//!
//! ```
//! # use cudnn_runtime as cudnn_graph;
//! use cudnn_graph::serving::{PageError, PagePool, PageTable};
//!
//! let mut pool = PagePool::new(64, 16)?;
//! let mut table = PageTable::new(4, 8)?;
//! let prompts = [37, 5, 120];
//! let mut seqs = Vec::new();
//! for len in prompts {
//!     let seq = pool.add()?;
//!     pool.grow(seq, len)?; // pages for the prompt's K/V
//!     seqs.push(seq);
//! }
//! for _step in 0..3 {
//!     for &seq in &seqs {
//!         pool.append(seq, 1)?; // room for the new token's K/V
//!     }
//!     table.fill(&pool, &seqs)?;
//!     // Upload table.entries() to Page_table_K and Page_table_V ([4, 1, 8, 1]),
//!     // table.seq_len_kv() to SEQ_LEN_KV and table.seq_len_q() to SEQ_LEN_Q ([4, 1, 1, 1]).
//! }
//! assert_eq!(table.seq_len_kv(), [40, 8, 123, 0]);
//! assert_eq!(table.row(1), Some(&[3, 0, 0, 0, 0, 0, 0, 0][..])); // 8 tokens: page 3
//!
//! // The second sequence ends; its pages go back to the pool and its handle is dead.
//! pool.release(seqs.remove(1))?;
//! table.fill(&pool, &seqs)?;
//! assert_eq!(table.seq_len_kv(), [40, 123, 0, 0]);
//! assert_eq!(pool.free_pages(), 64 - 3 - 8);
//!
//! // A table made elsewhere is checked before it goes near the GPU.
//! let e = PageTable::from_raw(vec![0, 1, 64, 2], vec![32, 20], 2, 2, 64, 16).unwrap_err();
//! assert_eq!(e.to_string(), "page table row 1, slot 0: page 64 is outside the pool's 0..64");
//! # Ok::<(), PageError>(())
//! ```
//!
//! The pool and the tables are host-only (nothing there needs cuDNN or a GPU); `KvAppend`
//! (with the `cudnn` feature) writes new tokens' K/V into their pages on the GPU, and
//! `StepStaging` uploads a step's slots, lengths and table in one copy from pinned memory
//! ([`StagingLayout`] says where each lives).

mod append;
mod error;
mod pages;
mod staging;
#[cfg(test)]
mod tests;

use std::fmt;

pub use append::{append_reference, append_slots, append_slots_into, AppendError, KvPoolDims, APPEND_PTX};
#[cfg(feature = "cudnn")]
pub use append::{KvAppend, KvElement};
pub use error::{PageError, TableRow};
pub use pages::{PagePool, PageTable};
#[cfg(feature = "cudnn")]
pub use staging::{StagedAddresses, StepStaging};
pub use staging::{StagingError, StagingLayout};

/// The page size [`PagePool::for_tokens`] uses: 64 tokens. On the H100 with cuDNN 9.19, paged
/// decode over pages of 64 was as fast as over pages of 16 at 1024-token contexts and 0.4–1.2 %
/// faster at 16 384 (`docs/benchmarks.md`, measured side by side in one call), and never slower;
/// pages of 16 waste less of a pool (half a page per sequence on average), so choose them with
/// [`PagePool::new`] where memory bounds the batch.
pub const DEFAULT_PAGE_SIZE: usize = 64;

/// A sequence of a [`PagePool`]: a handle, valid until the sequence is released. A released
/// handle stays an error ([`PageError::Released`]) even once its slot holds a new sequence, and a
/// handle of another pool is [`PageError::OtherPool`]: a handle never names another sequence's
/// pages. Displays as its serial number (`17`: the pool's 18th sequence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId {
    serial: u64,
    /// The pool that gave it out.
    pool: u32,
    /// Its slot in that pool's sequence list.
    slot: u32,
}

impl SeqId {
    /// The sequence's serial number in its pool: 0 for the first added, never reused.
    pub fn serial(self) -> u64 {
        self.serial
    }
}

impl fmt::Display for SeqId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.serial)
    }
}
