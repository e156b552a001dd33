//! Paged K/V caches (`paged = true`): attention whose K and V live in page pools, as serving
//! engines keep them, read through per-sequence page tables (cudnn-frontend's
//! `paged_attention_k_table`, `paged_attention_v_table` and `paged_attention_max_seq_len_kv`).
//!
//! ```text
//! K pool        [P_k, H_k, page, D_qk]   page p holds tokens p·page .. of whichever sequence owns it
//! V pool        [P_v, H_v, page, D_v]
//! Page_table_K  [B, 1, T, 1] i32         entry (b, t): the page holding tokens t·page .. (t+1)·page of b
//! Page_table_V  [B, 1, T, 1] i32         (often the same tensor as Page_table_K)
//! SEQ_LEN_Q     [B, 1, 1, 1] i32         the query rows of sequence b (1 when decoding)
//! SEQ_LEN_KV    [B, 1, 1, 1] i32         the keys sequence b holds
//! ```
//!
//! The key capacity `S_kv` is `max_seq_len_kv` when given (then `T = ceil(S_kv / page)`), else
//! `T · page`. Sequence `b` sees its first `SEQ_LEN_KV[b]` tokens, gathered page by page; the
//! padding mask hides the rest, so a paged node needs `padding_mask = true` (cudnn-frontend's
//! rule). Everything else (scale, causal, windows, grouped heads, `Stats`) is the dense
//! attention's, computed over the gathered K and V: that is the CPU reference.
//!
//! cuDNN reads the pages a table names with no bounds check, so before a paged node runs every
//! table entry must name a page of its pool and every length must fit the capacity (the CPU
//! engine checks it on every call, [`crate::ops::Op::check_values`]; on the GPU, tables built by
//! `serving::PageTable` are checked on the host before they are uploaded).

use super::{rule, Sdpa, SdpaPass};
use crate::array::Array;
use crate::dim::Dim;
use crate::ops::shape::ShapeError;

/// The page-table ports, in input order.
pub const TABLE_PORTS: [&str; 2] = ["Page_table_K", "Page_table_V"];

/// The rules on `paged` and `max_seq_len_kv` alone.
pub(super) fn check_attributes(op: &Sdpa) -> Result<(), ShapeError> {
    let name = op.pass.name();
    let fail = |r: String| Err(rule(name, None, r));
    if !op.paged {
        if let Some(n) = op.max_seq_len_kv {
            return fail(format!(
                "`max_seq_len_kv = {n}` bounds the keys of a paged cache; add `paged = true` or leave it out"
            ));
        }
        return Ok(());
    }
    if op.pass == SdpaPass::Backward {
        return fail("paged K/V caches are read by the forward only (cuDNN has no paged backward)".into());
    }
    if !op.padding_mask {
        return fail(
            "a paged cache needs the per-sequence lengths: add `padding_mask = true` and the SEQ_LEN_Q, SEQ_LEN_KV \
             inputs (cudnn-frontend's rule: paged caches go with a padding mask)"
                .into(),
        );
    }
    if op.fp8.is_some() {
        return fail("cudnn-graph does not lower fp8 attention over paged caches; leave out `fp8` or `paged`".into());
    }
    if let Some(n) = op.max_seq_len_kv {
        if n < 1 {
            return fail(format!("`max_seq_len_kv` must be at least 1, found {n}"));
        }
    }
    Ok(())
}

/// The key capacity of a paged node whose tables are `width` entries wide over pages of `page`
/// tokens: `max_seq_len_kv`, else `width · page` (`None` if that overflows).
pub(crate) fn capacity<D: Dim>(op: &Sdpa, width: &D, page: &D) -> Option<D> {
    match op.max_seq_len_kv {
        Some(n) => Some(D::lit(n)),
        None => D::product(&[width.clone(), page.clone()]),
    }
}

/// The table width a capacity of `s_kv` tokens over pages of `page` needs.
pub(crate) fn width_for(s_kv: i64, page: i64) -> i64 {
    if page <= 0 {
        0
    } else {
        // Not `(s_kv + page - 1) / page`, which overflows for a capacity near i64::MAX.
        s_kv / page + i64::from(s_kv % page != 0)
    }
}

/// The inputs a paged node reads, by port.
struct Inputs<'a> {
    pools: [&'a Array; 2],
    tables: [&'a Array; 2],
    seq_q: &'a Array,
    seq_kv: &'a Array,
    s_q: i64,
}

impl<'a> Inputs<'a> {
    fn new(op: &Sdpa, inputs: &[&'a Array]) -> Option<Inputs<'a>> {
        let get = |name: &str| op.input_index(name).and_then(|i| inputs.get(i).copied());
        Some(Inputs {
            pools: [get("K")?, get("V")?],
            tables: [get("Page_table_K")?, get("Page_table_V")?],
            seq_q: get("SEQ_LEN_Q")?,
            seq_kv: get("SEQ_LEN_KV")?,
            s_q: get("Q")?.dims.get(2).copied()?,
        })
    }

    /// `(B, T, page, S_kv)` of K's table and pool.
    fn dims(&self, op: &Sdpa) -> Option<(i64, i64, i64, i64)> {
        let (table, pool) = (self.tables[0], self.pools[0]);
        let (b, width, page) = (*table.dims.first()?, *table.dims.get(2)?, *pool.dims.get(2)?);
        Some((b, width, page, capacity(op, &width, &page)?))
    }
}

/// Checks the values a paged node reads before it runs: every entry of both page tables names
/// a page of its pool, each `SEQ_LEN_KV[b]` is within `0..=S_kv` and each `SEQ_LEN_Q[b]` within
/// `0..=S_q`. The error names the port, the sequence, the slot and the bound.
pub(crate) fn check_values(op: &Sdpa, inputs: &[&Array]) -> Result<(), ShapeError> {
    if !op.paged {
        return Ok(());
    }
    let name = op.pass.name();
    let Some(x) = Inputs::new(op, inputs) else { return Ok(()) };
    let Some((b, width, _, s_kv)) = x.dims(op) else { return Ok(()) };
    let port = |p: &str| op.input_index(p);
    for (t, (table_port, pool_port)) in TABLE_PORTS.into_iter().zip(["K", "V"]).enumerate() {
        let pages = x.pools[t].dims.first().copied().unwrap_or(0);
        for (slot, &entry) in x.tables[t].data.iter().enumerate() {
            if !(entry >= 0.0 && entry < pages as f64 && entry.fract() == 0.0) {
                let (seq, col) = (slot as i64 / width.max(1), slot as i64 % width.max(1));
                return Err(rule(
                    name,
                    port(table_port),
                    format!(
                        "{table_port}[{seq}, 0, {col}, 0] = {entry} names no page of the {pool_port} pool, which \
                         has {pages} pages (0..{pages}); sequence {seq}, slot {col}"
                    ),
                ));
            }
        }
    }
    for (lens, len_port, bound) in [(x.seq_kv, "SEQ_LEN_KV", s_kv), (x.seq_q, "SEQ_LEN_Q", x.s_q)] {
        for (seq, &n) in lens.data.iter().enumerate().take(b.max(0) as usize) {
            if !(n >= 0.0 && n <= bound as f64) {
                let what = if len_port == "SEQ_LEN_KV" { "the cache's capacity" } else { "Q's rows" };
                return Err(rule(
                    name,
                    port(len_port),
                    format!("{len_port}[{seq}] = {n} is outside 0..={bound} ({what}); sequence {seq}"),
                ));
            }
        }
    }
    Ok(())
}

/// Sequence by sequence, the tokens a page table names, as a dense `[B, H, S_kv, D]` array:
/// token `j` of sequence `b` is row `j % page` of page `table[b, j / page]`. Positions at or
/// past `SEQ_LEN_KV[b]` are 0 (the padding mask hides them). Validated values only
/// ([`check_values`]); an entry outside the pool reads as zeros.
pub(super) fn gather(pool: &Array, table: &Array, seq_kv: &Array, b: i64, width: i64, s_kv: i64) -> Array {
    let [pages, h, page, d] = [0, 1, 2, 3].map(|i| pool.dims.get(i).copied().unwrap_or(1).max(0) as usize);
    let (b, width, s_kv) = (b.max(0) as usize, width.max(0) as usize, s_kv.max(0) as usize);
    let mut out = Array::zeros(&[b as i64, h as i64, s_kv as i64, d as i64]);
    for seq in 0..b {
        let live = seq_kv.data.get(seq).map_or(0, |&n| (n.max(0.0) as usize).min(s_kv));
        for j in 0..live {
            let Some(&entry) = table.data.get(seq * width + j / page.max(1)) else { continue };
            let p = entry as usize;
            if entry < 0.0 || p >= pages {
                continue;
            }
            for head in 0..h {
                let src = ((p * h + head) * page + j % page) * d;
                let dst = ((seq * h + head) * s_kv + j) * d;
                out.data[dst..dst + d].copy_from_slice(&pool.data[src..src + d]);
            }
        }
    }
    out
}

/// The dense K and V a paged node's pages hold ([`gather`]), `None` for a node that is not paged.
pub(super) fn dense_kv(op: &Sdpa, inputs: &[&Array]) -> Option<(Array, Array)> {
    if !op.paged {
        return None;
    }
    let x = Inputs::new(op, inputs)?;
    let (b, width, _, s_kv) = x.dims(op)?;
    let k = gather(x.pools[0], x.tables[0], x.seq_kv, b, width, s_kv);
    let v = gather(x.pools[1], x.tables[1], x.seq_kv, b, x.tables[1].dims.get(2).copied().unwrap_or(width), s_kv);
    Some((k, v))
}
