//! The pool against a model under random operations, every error with its message, tables
//! round-tripping through `from_raw`, and filled tables read by the paged `sdpa` op itself.

use std::collections::{BTreeMap, HashSet};

use super::{PageError, PagePool, PageTable, SeqId, TableRow};
use crate::array::Array;
use crate::ops::{AttrValue, Op};
use crate::rng::SplitMix64;

/// Everything observable of a pool, for "nothing changed" checks: each live sequence with its
/// length and pages, the free pages, the live count.
#[derive(Debug, PartialEq)]
struct Snapshot(Vec<(SeqId, usize, Vec<i32>)>, usize, usize);

fn snapshot(pool: &PagePool) -> Snapshot {
    let seqs = pool.sequences().map(|s| (s, pool.len(s).unwrap(), pool.pages(s).unwrap().to_vec())).collect();
    Snapshot(seqs, pool.free_pages(), pool.live_sequences())
}

/// The pool's invariants against the model's lengths: each live sequence holds
/// `ceil(len / page)` pages, every page is in range and in at most one sequence, and the free
/// count is the rest.
fn check_pool(pool: &PagePool, model: &BTreeMap<SeqId, usize>) {
    let mut seen = HashSet::new();
    let live: Vec<SeqId> = pool.sequences().collect();
    assert_eq!(live.len(), model.len());
    assert_eq!(pool.live_sequences(), model.len());
    for (&seq, &len) in model {
        assert_eq!(pool.len(seq), Ok(len), "sequence {seq}");
        let pages = pool.pages(seq).unwrap();
        assert_eq!(pages.len(), len.div_ceil(pool.page_size()), "sequence {seq} of {len} tokens");
        for &p in pages {
            assert!((0..pool.page_count() as i32).contains(&p), "page {p}");
            assert!(seen.insert(p), "page {p} in two sequences");
        }
    }
    assert_eq!(pool.free_pages() + seen.len(), pool.page_count());
}

#[test]
fn random_operations_keep_the_pool_consistent_with_a_model() {
    for seed in 0..40u64 {
        let mut rng = SplitMix64::new(seed);
        let (pages, page_size) = (8 + rng.below(40), 1 + rng.below(6));
        let mut pool = PagePool::new(pages, page_size).unwrap();
        let mut model: BTreeMap<SeqId, usize> = BTreeMap::new();
        let mut dead: Vec<SeqId> = Vec::new();
        let (mut grown, mut refused) = (0, 0);
        for _ in 0..400 {
            let before = snapshot(&pool);
            let live: Vec<SeqId> = model.keys().copied().collect();
            let pick = |rng: &mut SplitMix64| live.get(rng.below(live.len().max(1))).copied();
            let free: usize = pages - model.values().map(|l| l.div_ceil(page_size)).sum::<usize>();
            match rng.below(6) {
                0 => {
                    let seq = pool.add().unwrap();
                    assert!(model.insert(seq, 0).is_none() && !dead.contains(&seq));
                }
                1 | 2 => {
                    let Some(seq) = pick(&mut rng) else { continue };
                    let (len, to) = (model[&seq], rng.below(page_size * 12));
                    let needed = to.div_ceil(page_size).saturating_sub(len.div_ceil(page_size));
                    match pool.grow(seq, to) {
                        Ok(()) => {
                            assert!(to >= len && needed <= free);
                            model.insert(seq, to);
                            grown += 1;
                        }
                        Err(e) => {
                            let want = if to < len {
                                PageError::Shrink { seq, len, to }
                            } else {
                                PageError::OutOfPages { seq, len: to, needed, free }
                            };
                            assert_eq!(e, want);
                            assert_eq!(snapshot(&pool), before, "{e}");
                            refused += 1;
                        }
                    }
                }
                3 => {
                    let Some(seq) = pick(&mut rng) else { continue };
                    let to = rng.below(page_size * 12);
                    pool.truncate(seq, to).unwrap();
                    let len = model.get_mut(&seq).unwrap();
                    *len = (*len).min(to);
                }
                4 => {
                    let Some(seq) = pick(&mut rng) else { continue };
                    pool.release(seq).unwrap();
                    model.remove(&seq);
                    dead.push(seq);
                }
                _ => {
                    let Some(&seq) = dead.get(rng.below(dead.len().max(1))) else { continue };
                    assert_eq!(pool.pages(seq), Err(PageError::Released { seq }));
                    assert_eq!(pool.grow(seq, 1), Err(PageError::Released { seq }));
                    assert_eq!(pool.release(seq), Err(PageError::Released { seq }));
                    assert_eq!(snapshot(&pool), before);
                }
            }
            check_pool(&pool, &model);
        }
        assert!(grown > 10 && refused > 0, "seed {seed}: {grown} grown, {refused} refused");
    }
}

#[test]
fn pages_come_back_in_order_and_handles_are_never_reused() {
    let mut pool = PagePool::new(8, 4).unwrap();
    let a = pool.add().unwrap();
    pool.grow(a, 12).unwrap();
    assert_eq!(pool.pages(a), Ok(&[0, 1, 2][..]));
    pool.truncate(a, 5).unwrap();
    assert_eq!((pool.len(a), pool.pages(a)), (Ok(5), Ok(&[0, 1][..])));
    pool.truncate(a, 9).unwrap(); // longer than it is: nothing
    assert_eq!(pool.len(a), Ok(5));
    pool.release(a).unwrap();
    let b = pool.add().unwrap();
    assert_ne!(a, b);
    assert_eq!((a.serial(), b.serial(), b.to_string()), (0, 1, "1".to_string()));
    pool.grow(b, 16).unwrap();
    // The last pages handed back are taken first, in their old order.
    assert_eq!(pool.pages(b), Ok(&[0, 1, 2, 3][..]));
    assert_eq!(pool.pages(a), Err(PageError::Released { seq: a }));
    pool.append(b, 1).unwrap();
    assert_eq!((pool.len(b), pool.pages(b).map(|p| p.len())), (Ok(17), Ok(5)));
}

#[test]
fn every_error_names_what_is_wrong() {
    let msg = |e: PageError| e.to_string();
    assert_eq!(
        msg(PagePool::new(0, 16).unwrap_err()),
        "a page pool holds 1..=2147483647 pages (page table entries are i32), found 0"
    );
    assert_eq!(PagePool::new(1 << 31, 16).unwrap_err(), PageError::PoolPages { pages: 1 << 31 });
    assert_eq!(msg(PagePool::new(4, 0).unwrap_err()), "a page holds 1..=2147483647 tokens, found 0");
    assert_eq!(PagePool::new(4, 1 << 31).unwrap_err(), PageError::PageSize { page_size: 1 << 31 });

    let mut pool = PagePool::new(4, 16).unwrap();
    let mut other = PagePool::new(4, 16).unwrap();
    let (a, b, c) = (pool.add().unwrap(), pool.add().unwrap(), other.add().unwrap());
    assert_eq!(msg(pool.pages(c).unwrap_err()), "sequence 0 belongs to another page pool");
    pool.grow(a, 40).unwrap();
    assert_eq!(
        msg(pool.grow(b, 20).unwrap_err()),
        "sequence 1 needs 2 more pages to hold 20 tokens, but the pool has 1 free"
    );
    assert_eq!(
        msg(pool.grow(a, 39).unwrap_err()),
        "sequence 0 holds 40 tokens: growing it to 39 would shrink it (use `truncate`)"
    );
    assert_eq!(
        msg(pool.grow(a, 1 << 31).unwrap_err()),
        "sequence 0: 2147483648 tokens do not fit SEQ_LEN_KV's i32 (at most 2147483647)"
    );
    assert_eq!(pool.append(a, usize::MAX).unwrap_err(), PageError::TooLong { seq: a, len: usize::MAX });
    pool.release(b).unwrap();
    assert_eq!(msg(pool.len(b).unwrap_err()), "sequence 1 was released: its handle names no pages any more");
    assert_eq!(msg(PageError::TooManySequences), "the page pool has no sequence handle left to give out");

    // Tables.
    assert_eq!(
        msg(PageTable::new(0, 8).unwrap_err()),
        "a page table has 1..=2147483647 rows, slots and query tokens per row, and room for rows × slots \
         entries; found 0 rows × 8 slots, 1 query tokens"
    );
    assert!(PageTable::multi_token(4, 8, 0).is_err() && PageTable::new(4, 1 << 31).is_err());
    assert!(PageTable::new(1 << 30, 1 << 30).is_err()); // 2⁶⁰ entries: refused, not an abort
    let mut table = PageTable::new(2, 2).unwrap();
    let d = pool.add().unwrap();
    assert_eq!(
        msg(table.fill(&pool, &[a, d, d]).unwrap_err()),
        "a batch of 3 sequences does not fit the page table's 2 rows"
    );
    assert_eq!(
        msg(table.fill(&pool, &[d, d]).unwrap_err()),
        "sequence 2 is in the batch twice, in page table rows 0 and 1"
    );
    assert_eq!(
        msg(table.fill(&pool, &[d, a]).unwrap_err()),
        "page table row 1 (sequence 0) needs 3 pages for its 40 tokens, but the table has 2 slots per row"
    );
    assert_eq!(table.fill(&pool, &[b]).unwrap_err(), PageError::Released { seq: b });
    assert_eq!(table.fill(&other, &[d]).unwrap_err(), PageError::OtherPool { seq: d });
    let mut multi = PageTable::multi_token(2, 4, 4).unwrap();
    assert_eq!(
        msg(multi.fill_with_queries(&pool, &[(a, 4), (d, 5)]).unwrap_err()),
        "page table row 1 (sequence 2): 5 query tokens is outside 0..=4 (the table's query tokens per row)"
    );

    // Tables filled by hand.
    let raw = |entries: &[i32], lens: &[i32], batch, width| {
        PageTable::from_raw(entries.to_vec(), lens.to_vec(), batch, width, 4096, 16).map(|_| ()).map_err(msg)
    };
    let row3 = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 4096, 16, 17, 18, 19, 20, 21, 22, 23];
    assert_eq!(
        raw(&row3, &[0; 4], 4, 6),
        Err("page table row 2, slot 3: page 4096 is outside the pool's 0..4096".into())
    );
    let e = PageTable::from_raw(row3.to_vec(), vec![0; 4], 4, 6, 4096, 16).unwrap_err();
    let row = TableRow { index: 2, seq: None };
    assert_eq!(e, PageError::PageOutOfPool { row, slot: 3, page: 4096, pages: 4096 });
    assert!(raw(&[0, -1], &[0], 1, 2).unwrap_err().contains("slot 1: page -1 is outside"));
    assert_eq!(
        raw(&[0, 1], &[33], 1, 2),
        Err("page table row 0: length 33 is outside 0..=32 (2 slots of 16 tokens)".into())
    );
    assert_eq!(
        raw(&[0, 1], &[-1], 1, 2),
        Err("page table row 0: length -1 is outside 0..=32 (2 slots of 16 tokens)".into())
    );
    assert_eq!(
        raw(&[0, 1, 2, 3], &[5], 2, 2),
        Err("SEQ_LEN_KV holds 1 values, but a table of 2 rows × 2 slots needs 2".into())
    );
    assert_eq!(
        raw(&[0, 1, 2], &[5, 5], 2, 2),
        Err("Page_table_K/V holds 3 values, but a table of 2 rows × 2 slots needs 4".into())
    );
    assert_eq!(
        raw(&[7, 1, 2, 7], &[17, 32], 2, 2),
        Err("page 7 is live in page table row 0, slot 0 and in page table row 1, slot 1: a page holds the tokens of \
             one sequence"
            .into())
    );
    assert!(raw(&[7, 7], &[17], 1, 2).unwrap_err().contains("row 0, slot 0 and in page table row 0, slot 1"));
    assert_eq!(raw(&[1, 7, 2, 7], &[16, 32], 2, 2), Ok(())); // page 7 is past row 0's live range
    assert!(raw(&[], &[], 0, 2).unwrap_err().starts_with("a page table has"));
    assert!(PageTable::from_raw(vec![0], vec![0], 1, 1, 0, 16).is_err());
    assert!(PageTable::from_raw(vec![0], vec![0], 1, 1, 1, 0).is_err());
    let t = PageTable::from_raw(vec![0, 1], vec![20], 1, 2, 4, 16).unwrap();
    assert_eq!(
        msg(t.clone().with_queries(vec![3], 2).unwrap_err()),
        "page table row 0: 3 query tokens is outside 0..=2 (the table's query tokens per row)"
    );
    assert_eq!(
        msg(t.clone().with_queries(vec![1, 1], 2).unwrap_err()),
        "SEQ_LEN_Q holds 2 values, but a table of 1 rows × 2 slots needs 1"
    );
    assert!(t.clone().with_queries(vec![1], 0).is_err());
    assert_eq!(t.with_queries(vec![2], 2).map(|t| (t.seq_len_q().to_vec(), t.max_queries())), Ok((vec![2], 2)));
}

/// The table `fill` should write, built from scratch.
fn expected(
    pool: &PagePool,
    rows: &[(SeqId, usize)],
    max_batch: usize,
    width: usize,
) -> (Vec<i32>, Vec<i32>, Vec<i32>) {
    let (mut entries, mut kv, mut q) = (vec![0; max_batch * width], vec![0; max_batch], vec![0; max_batch]);
    for (b, &(seq, queries)) in rows.iter().enumerate() {
        let pages = pool.pages(seq).unwrap();
        entries[b * width..b * width + pages.len()].copy_from_slice(pages);
        (kv[b], q[b]) = (pool.len(seq).unwrap() as i32, queries as i32);
    }
    (entries, kv, q)
}

#[test]
fn fills_are_exact_all_or_nothing_and_round_trip_through_from_raw() {
    let mut rng = SplitMix64::new(33);
    let (pages, page_size, max_batch, width) = (48, 4, 6, 5);
    let mut pool = PagePool::new(pages, page_size).unwrap();
    let mut table = PageTable::multi_token(max_batch, width, 3).unwrap();
    let mut decode = PageTable::new(max_batch, width).unwrap();
    let mut live: Vec<SeqId> = Vec::new();
    let (mut filled, mut refused) = (0, 0);
    for _ in 0..600 {
        // Churn: sequences come, grow and go.
        match rng.below(4) {
            0 if live.len() < 10 => live.push(pool.add().unwrap()),
            1 if !live.is_empty() => pool.release(live.swap_remove(rng.below(live.len()))).unwrap(),
            _ => {
                if let Some(&seq) = live.get(rng.below(live.len().max(1))) {
                    let _ = pool.append(seq, rng.below(2 * page_size));
                }
            }
        }
        // A random batch: mostly valid, sometimes too large or holding a sequence twice.
        let n = rng.below(max_batch + 2).min(live.len() + 1);
        let mut rows: Vec<(SeqId, usize)> = Vec::new();
        for _ in 0..n {
            if let Some(&seq) = live.get(rng.below(live.len().max(1))) {
                if rng.below(8) == 0 || !rows.iter().any(|r| r.0 == seq) {
                    rows.push((seq, rng.below(4)));
                }
            }
        }
        let before = (table.entries().to_vec(), table.seq_len_kv().to_vec(), table.seq_len_q().to_vec(), table.batch());
        match table.fill_with_queries(&pool, &rows) {
            Ok(()) => {
                let (entries, kv, q) = expected(&pool, &rows, max_batch, width);
                assert_eq!((table.entries(), table.seq_len_kv(), table.seq_len_q()), (&entries[..], &kv[..], &q[..]));
                assert_eq!(table.batch(), rows.len());
                // The same table through the checked constructor.
                let raw = PageTable::from_raw(entries, kv, max_batch, width, pages, page_size).unwrap();
                let raw = raw.with_queries(q, 3).unwrap();
                assert_eq!(
                    (raw.entries(), raw.seq_len_kv(), raw.seq_len_q()),
                    (table.entries(), table.seq_len_kv(), table.seq_len_q())
                );
                filled += 1;
            }
            Err(e) => {
                let after =
                    (table.entries().to_vec(), table.seq_len_kv().to_vec(), table.seq_len_q().to_vec(), table.batch());
                assert_eq!(after, before, "{e}");
                assert!(matches!(
                    e,
                    PageError::BatchTooLarge { .. }
                        | PageError::DuplicateSequence { .. }
                        | PageError::TooWide { .. }
                        | PageError::QueriesOutOfRange { .. }
                ));
                refused += 1;
            }
        }
        let seqs: Vec<SeqId> = rows.iter().map(|r| r.0).collect();
        if decode.fill(&pool, &seqs).is_ok() {
            let q: Vec<i32> = decode.seq_len_kv().iter().map(|&l| i32::from(l > 0)).collect();
            assert_eq!(decode.seq_len_q(), q);
            let raw = PageTable::from_raw(
                decode.entries().to_vec(),
                decode.seq_len_kv().to_vec(),
                max_batch,
                width,
                pages,
                page_size,
            );
            assert_eq!(raw.map(|r| r.seq_len_q().to_vec()), Ok(q));
        }
    }
    assert!(filled > 200 && refused > 50, "{filled} filled, {refused} refused");
}

/// The paged `sdpa` op and its inputs for `table` over pools of `pages` pages whose K and V
/// rows hold, for token `j` of a sequence, values unique to it: `(Op, inputs, dense inputs)`,
/// the dense ones holding each sequence's tokens in order as `[B, H, width·page, D]`.
fn paged_inputs(
    pool: &PagePool,
    seqs: &[SeqId],
    table: &PageTable,
    rng: &mut SplitMix64,
) -> (Op, Vec<Array>, Vec<Array>) {
    let (h, d, page) = (2i64, 4i64, pool.page_size() as i64);
    let (b, p, s_kv) = (table.max_batch() as i64, pool.page_count() as i64, table.width() as i64 * page);
    let mut pools = [0, 1].map(|_| Array::from_fn(&[p, h, page, d], |_| 99.0)); // never read
    let mut dense = [0, 1].map(|_| Array::zeros(&[b, h, s_kv, d]));
    for (row, &seq) in seqs.iter().enumerate() {
        for j in 0..pool.len(seq).unwrap() as i64 {
            let pg = pool.pages(seq).unwrap()[(j / page) as usize] as i64;
            for (kv, (pool_kv, dense_kv)) in pools.iter_mut().zip(&mut dense).enumerate() {
                for (hh, e) in (0..h).flat_map(|hh| (0..d).map(move |e| (hh, e))) {
                    let v = rng.nonzero(0.1, 1.0) + kv as f64;
                    pool_kv.data[(((pg * h + hh) * page + j % page) * d + e) as usize] = v;
                    dense_kv.data[(((row as i64 * h + hh) * s_kv + j) * d + e) as usize] = v;
                }
            }
        }
    }
    let q = Array::from_fn(&[b, h, 1, d], |_| rng.nonzero(0.1, 1.0));
    let lens = |v: &[i32]| Array { dims: table.len_dims().to_vec(), data: v.iter().map(|&x| f64::from(x)).collect() };
    let table_array =
        Array { dims: table.table_dims().to_vec(), data: table.entries().iter().map(|&x| f64::from(x)).collect() };
    let attrs = |paged: bool| {
        let mut a: Vec<(String, AttrValue)> = vec![("padding_mask".into(), true.into())];
        if paged {
            a.push(("paged".into(), true.into()));
        }
        a
    };
    let op = Op::from_call("sdpa", &attrs(true)).unwrap();
    let names: Vec<&str> = op.inputs().iter().map(|p| p.name).collect();
    assert_eq!(names, ["Q", "K", "V", "SEQ_LEN_Q", "SEQ_LEN_KV", "Page_table_K", "Page_table_V"]);
    let [k, v] = pools;
    let paged =
        vec![q.clone(), k, v, lens(table.seq_len_q()), lens(table.seq_len_kv()), table_array.clone(), table_array];
    let [dk, dv] = dense;
    let dense = vec![q, dk, dv, lens(table.seq_len_q()), lens(table.seq_len_kv())];
    (op, paged, dense)
}

fn refs(v: &[Array]) -> Vec<&Array> {
    v.iter().collect()
}

#[test]
fn filled_tables_pass_the_paged_ops_value_check_and_read_each_sequences_tokens() {
    let mut rng = SplitMix64::new(0x5eed);
    let mut pool = PagePool::new(24, 4).unwrap();
    let mut table = PageTable::new(5, 4).unwrap();
    let seqs: Vec<SeqId> = (0..4).map(|_| pool.add().unwrap()).collect();
    // Interleaved growth, so that each sequence's pages are scattered through the pool.
    for round in 1..=4 {
        for (i, &seq) in seqs.iter().enumerate() {
            pool.grow(seq, (round * (i + 2)).min(16)).unwrap();
        }
    }
    pool.truncate(seqs[3], 7).unwrap();
    table.fill(&pool, &seqs).unwrap();
    assert_eq!(table.seq_len_kv(), [8, 12, 16, 7, 0]);
    let (op, paged, dense) = paged_inputs(&pool, &seqs, &table, &mut rng);
    op.check_values(&refs(&paged)).unwrap();
    let dense_op = Op::from_call("sdpa", &[("padding_mask".into(), true.into())]).unwrap();
    let (got, want) = (op.reference(&refs(&paged)).unwrap(), dense_op.reference(&refs(&dense)).unwrap());
    // Rows of the batch (the fifth row is empty: no query, no keys).
    let live = seqs.len() * 2 * 4;
    assert!(got[0].data[..live].iter().all(|v| v.abs() > 1e-3));
    for (i, (g, w)) in got[0].data[..live].iter().zip(&want[0].data).enumerate() {
        assert!((g - w).abs() <= 1e-12, "O[{i}]: {g} against {w}");
    }

    // A table the raw checks refuse is refused by the op too, where both check it.
    let mut entries = table.entries().to_vec();
    entries[5] = 24;
    let e = PageTable::from_raw(entries.clone(), table.seq_len_kv().to_vec(), 5, 4, 24, 4).unwrap_err();
    assert_eq!(e.to_string(), "page table row 1, slot 1: page 24 is outside the pool's 0..24");
    let mut bad = paged.clone();
    bad[5].data = entries.iter().map(|&x| f64::from(x)).collect();
    let op_error = op.check_values(&refs(&bad)).unwrap_err().to_string();
    assert!(op_error.contains("sequence 1, slot 1"), "{op_error}");
}

#[test]
fn random_raw_tables_refused_by_the_op_are_refused_by_from_raw() {
    let op = Op::from_call("sdpa", &[("padding_mask".into(), true.into()), ("paged".into(), true.into())]).unwrap();
    let mut rng = SplitMix64::new(4);
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..2000 {
        let (b, width, pages, page) = (1 + rng.below(3), 1 + rng.below(3), 1 + rng.below(6), 1 + rng.below(3));
        let entries: Vec<i32> = (0..b * width).map(|_| rng.below(pages + 2) as i32 - 1).collect();
        let lens: Vec<i32> = (0..b).map(|_| rng.below(width * page + 2) as i32 - (rng.below(9) == 0) as i32).collect();
        let table =
            Array { dims: vec![b as i64, 1, width as i64, 1], data: entries.iter().map(|&x| x.into()).collect() };
        let len_array = |v: Vec<f64>| Array { dims: vec![b as i64, 1, 1, 1], data: v };
        let inputs = [
            Array::zeros(&[b as i64, 1, 1, 2]),
            Array::zeros(&[pages as i64, 1, page as i64, 2]),
            Array::zeros(&[pages as i64, 1, page as i64, 2]),
            len_array(vec![1.0; b]),
            len_array(lens.iter().map(|&x| x.into()).collect()),
            table.clone(),
            table,
        ];
        let op_ok = op.check_values(&inputs.iter().collect::<Vec<_>>()).is_ok();
        match PageTable::from_raw(entries, lens, b, width, pages, page) {
            Ok(_) => {
                assert!(op_ok, "from_raw accepted what the op refuses");
                accepted += 1;
            }
            Err(PageError::Aliased { .. }) => assert!(op_ok), // the op does not look for aliases
            Err(_) => {
                assert!(!op_ok, "the op accepted what from_raw refuses");
                refused += 1;
            }
        }
    }
    assert!(accepted > 100 && refused > 100, "{accepted} accepted, {refused} refused");
}

#[test]
fn a_pool_for_tokens_rounds_up_to_whole_default_pages() {
    use super::DEFAULT_PAGE_SIZE;
    for (tokens, pages) in [(1, 1), (DEFAULT_PAGE_SIZE, 1), (DEFAULT_PAGE_SIZE + 1, 2), (1000, 16), (4096, 64)] {
        let pool = PagePool::for_tokens(tokens).unwrap();
        assert_eq!(
            (pool.page_count(), pool.page_size(), pool.free_pages()),
            (pages, DEFAULT_PAGE_SIZE, pages),
            "{tokens}"
        );
    }
    assert!(matches!(PagePool::for_tokens(0), Err(PageError::PoolPages { .. })));
    let too_many = (i32::MAX as usize + 1) * DEFAULT_PAGE_SIZE;
    assert!(matches!(PagePool::for_tokens(too_many), Err(PageError::PoolPages { .. })));
}

#[test]
fn a_staging_layout_aligns_its_regions_and_writes_a_step() {
    use super::{append_slots, StagingError, StagingLayout};
    let layout = StagingLayout::new(5, 8).unwrap();
    let regions = [layout.slots, layout.seq_len_kv, layout.seq_len_q, layout.page_table];
    assert!(regions.iter().all(|r| r % 4 == 0), "{layout:?}");
    assert!(regions.windows(2).all(|w| w[1] - w[0] >= 5), "{layout:?}");
    assert_eq!(layout.len, layout.page_table + 5 * 8);

    let mut pool = PagePool::new(40, 4).unwrap();
    let seqs: Vec<SeqId> = (0..3).map(|_| pool.add().unwrap()).collect();
    for (&seq, len) in seqs.iter().zip([3, 9, 1]) {
        pool.grow(seq, len).unwrap();
        pool.append(seq, 1).unwrap();
    }
    // A class of 4 slots in a staging of 8: the table is the region's prefix, its tail untouched.
    let mut table = PageTable::new(5, 4).unwrap();
    table.fill(&pool, &seqs).unwrap();
    let slots = append_slots(&pool, &seqs.iter().map(|&s| (s, 1)).collect::<Vec<_>>()).unwrap();
    let mut buffer = vec![7i32; layout.len];
    layout.write(&mut buffer, &table, &slots).unwrap();
    assert_eq!(&buffer[layout.slots..layout.slots + 3], &slots[..]);
    assert_eq!(&buffer[layout.slots + 3..layout.slots + 5], [-1, -1]);
    assert_eq!(&buffer[layout.seq_len_kv..layout.seq_len_kv + 5], table.seq_len_kv());
    assert_eq!(&buffer[layout.seq_len_q..layout.seq_len_q + 5], table.seq_len_q());
    assert_eq!(&buffer[layout.page_table..layout.page_table + 20], table.entries());
    assert!(buffer[layout.page_table + 20..].iter().all(|&x| x == 7));

    // Refusals leave the buffer as it was.
    let before = buffer.clone();
    let wide = PageTable::new(5, 9).unwrap();
    assert!(matches!(
        layout.write(&mut buffer, &wide, &slots),
        Err(StagingError::Table { batch: 5, width: 9, max_batch: 5, max_width: 8 })
    ));
    let other_batch = PageTable::new(4, 4).unwrap();
    assert!(matches!(layout.write(&mut buffer, &other_batch, &slots), Err(StagingError::Table { batch: 4, .. })));
    assert!(matches!(layout.write(&mut buffer, &table, &[0; 6]), Err(StagingError::Slots { slots: 6, max_batch: 5 })));
    let e = layout.write(&mut buffer[1..], &table, &slots).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("a staging buffer of {} elements, but the layout needs {}", layout.len - 1, layout.len)
    );
    assert_eq!(buffer, before);

    assert!(matches!(StagingLayout::new(0, 8), Err(StagingError::Layout { .. })));
    assert!(matches!(StagingLayout::new(8, 0), Err(StagingError::Layout { .. })));
    assert!(matches!(StagingLayout::new(usize::MAX / 2, 4), Err(StagingError::Layout { .. })));
}
