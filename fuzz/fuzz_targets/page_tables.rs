//! The page tables of paged attention (`cudnn_runtime::serving`): the bytes are a program of
//! `PagePool` and `PageTable` calls (add, grow, append, truncate, release, stale and foreign
//! handles, batch fills with repeats and overflows, tables filled by hand), sizes small enough to
//! collide or out of range. Every call returns or errs, none panics, and after each: the pool
//! agrees with a model (lengths; `ceil(len / page)` pages per sequence; every page in range and
//! in at most one live sequence; the free count), a refused call changed nothing and was refused
//! for the model's reason, a filled table is exactly the batch's pages and lengths and passes
//! `PageTable::from_raw`, and `from_raw` accepts a hand-made table exactly when every entry is in
//! the pool, every length fits its row and no page is live twice, else names the first fault.
//! Seeds: `fuzz/corpus/page_tables`.

#![no_main]

use std::collections::{BTreeMap, HashMap, HashSet};

use arbitrary::Unstructured;
use cudnn_runtime::serving::{PageError, PagePool, PageTable, SeqId, TableRow};

/// Calls per input, so that one input stays well under a millisecond.
const MAX_CALLS: usize = 256;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let _ = run(&mut u);
});

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    // Pool and table shapes: usually small, sometimes out of range (refused by name).
    let pages = size(u, 1..=48, &[0, i32::MAX as usize + 1, usize::MAX])?;
    let page_size = size(u, 1..=8, &[0, i32::MAX as usize + 1, i32::MAX as usize])?;
    let mut pool = match PagePool::new(pages, page_size) {
        Ok(pool) => pool,
        Err(e) => {
            let bad_pages = !(1..=i32::MAX as usize).contains(&pages);
            let want = if bad_pages { PageError::PoolPages { pages } } else { PageError::PageSize { page_size } };
            assert_eq!(e, want);
            return Ok(());
        }
    };
    let mut foreign = PagePool::new(1, 1).expect("a pool of one page");
    let stranger = foreign.add().expect("a first sequence");
    let (max_batch, width, max_queries) = (u.int_in_range(1..=6)?, u.int_in_range(1..=6)?, u.int_in_range(1..=3)?);
    let mut table = PageTable::multi_token(max_batch, width, max_queries).expect("a small table");
    let mut model: BTreeMap<SeqId, usize> = BTreeMap::new();
    let mut dead: Vec<SeqId> = Vec::new();
    for _ in 0..MAX_CALLS {
        if u.is_empty() {
            break;
        }
        let live: Vec<SeqId> = model.keys().copied().collect();
        let before = Snapshot::of(&pool);
        let free = pool.page_count() - model.values().map(|&l| l.div_ceil(page_size)).sum::<usize>();
        let call = u.int_in_range(0..=8)?;
        // A handle: live, released, or another pool's.
        let seq = match u.int_in_range(0..=9)? {
            0 if !dead.is_empty() => dead[u.choose_index(dead.len())?],
            1 => stranger,
            _ if !live.is_empty() => live[u.choose_index(live.len())?],
            _ => stranger,
        };
        let handle_error = if seq == stranger {
            Some(PageError::OtherPool { seq })
        } else if !model.contains_key(&seq) {
            Some(PageError::Released { seq })
        } else {
            None
        };
        let len = model.get(&seq).copied().unwrap_or(0);
        match call {
            0 | 1 => {
                let seq = pool.add().expect("handles to spare");
                assert!(model.insert(seq, 0).is_none(), "handle {seq:?} given out twice");
                assert!(!dead.contains(&seq), "released handle {seq:?} given out again");
            }
            2 | 3 => {
                let to = if call == 2 {
                    len.saturating_add(size(u, 0..=20, &[])?)
                } else {
                    size(u, 0..=400, &[usize::MAX])?
                };
                let got = if call == 2 { pool.append(seq, to.saturating_sub(len)) } else { pool.grow(seq, to) };
                let needed = to.div_ceil(page_size).saturating_sub(len.div_ceil(page_size));
                let want = match handle_error {
                    Some(e) => Err(e),
                    None if to < len => Err(PageError::Shrink { seq, len, to }),
                    None if to > i32::MAX as usize => Err(PageError::TooLong { seq, len: to }),
                    None if needed > free => Err(PageError::OutOfPages { seq, len: to, needed, free }),
                    None => Ok(()),
                };
                assert_eq!(got, want);
                match got {
                    Ok(()) => _ = model.insert(seq, to),
                    Err(e) => assert_eq!(Snapshot::of(&pool), before, "refused ({e}) but changed the pool"),
                }
            }
            4 => {
                let to = size(u, 0..=400, &[])?;
                assert_eq!(pool.truncate(seq, to), handle_error.clone().map_or(Ok(()), Err));
                if handle_error.is_some() {
                    assert_eq!(Snapshot::of(&pool), before);
                }
                if let Some(l) = model.get_mut(&seq) {
                    *l = (*l).min(to);
                }
            }
            5 => {
                assert_eq!(pool.release(seq), handle_error.clone().map_or(Ok(()), Err));
                if handle_error.is_some() {
                    assert_eq!(Snapshot::of(&pool), before);
                }
                if model.remove(&seq).is_some() {
                    dead.push(seq);
                }
            }
            6 | 7 => fill(u, &pool, &model, &mut table, call == 7, stranger)?,
            _ => raw(u)?,
        }
        check_pool(&pool, &model);
    }
    Ok(())
}

/// A size: one of `odd` (out-of-range values) one time in eight when there are any, else in
/// `range`.
fn size(u: &mut Unstructured<'_>, range: std::ops::RangeInclusive<usize>, odd: &[usize]) -> arbitrary::Result<usize> {
    if !odd.is_empty() && u.ratio(1u8, 8u8)? {
        return Ok(odd[u.choose_index(odd.len())?]);
    }
    u.int_in_range(range)
}

/// Each live sequence with its length and pages, the free pages, the live count.
#[derive(Debug, PartialEq)]
struct Snapshot(Vec<(SeqId, usize, Vec<i32>)>, usize, usize);

impl Snapshot {
    fn of(pool: &PagePool) -> Snapshot {
        let seqs = pool.sequences().map(|s| (s, pool.len(s).unwrap(), pool.pages(s).unwrap().to_vec())).collect();
        Snapshot(seqs, pool.free_pages(), pool.live_sequences())
    }
}

/// The pool's invariants against the model's lengths.
fn check_pool(pool: &PagePool, model: &BTreeMap<SeqId, usize>) {
    assert_eq!(pool.sequences().collect::<Vec<_>>().len(), model.len());
    assert_eq!(pool.live_sequences(), model.len());
    let mut seen = HashSet::new();
    for (&seq, &len) in model {
        assert_eq!(pool.len(seq), Ok(len));
        let pages = pool.pages(seq).expect("a live sequence");
        assert_eq!(pages.len(), len.div_ceil(pool.page_size()));
        for &p in pages {
            assert!(p >= 0 && (p as usize) < pool.page_count(), "page {p} outside the pool");
            assert!(seen.insert(p), "page {p} in two live sequences");
        }
    }
    assert_eq!(pool.free_pages() + seen.len(), pool.page_count());
}

/// Fills `table` with a random batch (repeats, released and foreign handles, too many rows
/// sometimes) and checks the result or the refusal.
fn fill(
    u: &mut Unstructured<'_>,
    pool: &PagePool,
    model: &BTreeMap<SeqId, usize>,
    table: &mut PageTable,
    with_queries: bool,
    stranger: SeqId,
) -> arbitrary::Result<()> {
    let live: Vec<SeqId> = model.keys().copied().collect();
    let n = u.int_in_range(0..=table.max_batch() + 1)?;
    let mut rows = Vec::with_capacity(n);
    for _ in 0..n {
        let seq = if live.is_empty() || u.ratio(1u8, 16u8)? { stranger } else { live[u.choose_index(live.len())?] };
        let queries = if with_queries { u.int_in_range(0..=table.max_queries() + 1)? } else { 1 };
        rows.push((seq, queries));
    }
    let before = (table.entries().to_vec(), table.seq_len_kv().to_vec(), table.seq_len_q().to_vec(), table.batch());
    let got = if with_queries {
        table.fill_with_queries(pool, &rows)
    } else {
        table.fill(pool, &rows.iter().map(|r| r.0).collect::<Vec<_>>())
    };
    // The first fault, in the order fill checks: batch size, then row by row, then repeats.
    let mut want = Ok(());
    if n > table.max_batch() {
        want = Err(PageError::BatchTooLarge { batch: n, max_batch: table.max_batch() });
    }
    for (b, &(seq, queries)) in rows.iter().enumerate() {
        if want.is_err() {
            break;
        }
        let row = TableRow { index: b, seq: Some(seq) };
        if seq == stranger {
            want = Err(PageError::OtherPool { seq });
        } else if model[&seq].div_ceil(pool.page_size()) > table.width() {
            let (len, width) = (model[&seq], table.width());
            want = Err(PageError::TooWide { row, len, needed: len.div_ceil(pool.page_size()), width });
        } else if with_queries && queries > table.max_queries() {
            want = Err(PageError::QueriesOutOfRange { row, queries: queries as i64, max_queries: table.max_queries() });
        }
    }
    let mut first_row: HashMap<SeqId, usize> = HashMap::new();
    let mut repeat = None;
    for (b, &(seq, _)) in rows.iter().enumerate() {
        if let Some(&first) = first_row.get(&seq) {
            repeat = repeat.or(Some((seq, first, b)));
        }
        first_row.entry(seq).or_insert(b);
    }
    match (&got, want, repeat) {
        (Err(PageError::DuplicateSequence { seq, first, second }), Ok(()), Some(_)) => {
            assert_eq!(rows[*first].0, *seq);
            assert_eq!(rows[*second].0, *seq);
            assert!(first < second);
        }
        (got, Ok(()), Some(repeat)) => panic!("a batch holding sequence {} twice was not refused: {got:?}", repeat.0),
        (got, want, _) => assert_eq!(got, &want),
    }
    if got.is_err() {
        let after = (table.entries().to_vec(), table.seq_len_kv().to_vec(), table.seq_len_q().to_vec(), table.batch());
        assert_eq!(after, before, "a refused fill changed the table");
        return Ok(());
    }
    // Exactly the batch, page 0 and length 0 elsewhere.
    let width = table.width();
    for b in 0..table.max_batch() {
        let (pages, len, queries) = match rows.get(b) {
            Some(&(seq, q)) => {
                let len = model[&seq];
                (pool.pages(seq).unwrap(), len, if with_queries { q } else { usize::from(len > 0) })
            }
            None => (&[][..], 0, 0),
        };
        let row = table.row(b).unwrap();
        assert_eq!(&row[..pages.len()], pages);
        assert!(row[pages.len()..].iter().all(|&p| p == 0));
        assert_eq!((table.seq_len_kv()[b], table.seq_len_q()[b]), (len as i32, queries as i32));
    }
    assert_eq!(table.row(table.max_batch()), None);
    let back = PageTable::from_raw(
        table.entries().to_vec(),
        table.seq_len_kv().to_vec(),
        table.max_batch(),
        width,
        pool.page_count(),
        pool.page_size(),
    )
    .expect("a filled table passes the raw checks");
    assert_eq!((back.entries(), back.seq_len_kv()), (table.entries(), table.seq_len_kv()));
    Ok(())
}

/// A table filled by hand: `from_raw` takes it exactly when it is right, else names the first
/// fault.
fn raw(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let (batch, width) = (size(u, 1..=5, &[0])?, size(u, 1..=5, &[0])?);
    let (pool_pages, page_size) = (size(u, 1..=12, &[0])?, size(u, 1..=4, &[0])?);
    let n = batch * width + usize::from(u.ratio(1u8, 16u8)?);
    let entries: Vec<i32> = (0..n).map(|_| u.int_in_range(-1..=pool_pages as i32)).collect::<Result<_, _>>()?;
    let max_len = (width * page_size) as i32;
    let lens: Vec<i32> = (0..batch).map(|_| u.int_in_range(-1..=max_len + 1)).collect::<Result<_, _>>()?;
    let got = PageTable::from_raw(entries.clone(), lens.clone(), batch, width, pool_pages, page_size);
    let want = || -> Result<(), PageError> {
        if batch == 0 || width == 0 {
            return Err(PageError::TableDims { max_batch: batch, width, max_queries: 1 });
        }
        if pool_pages == 0 {
            return Err(PageError::PoolPages { pages: pool_pages });
        }
        if page_size == 0 {
            return Err(PageError::PageSize { page_size });
        }
        if entries.len() != batch * width {
            return Err(PageError::BufferLength {
                buffer: "Page_table_K/V",
                len: entries.len(),
                expected: batch * width,
                batch,
                width,
            });
        }
        for b in 0..batch {
            let row = TableRow { index: b, seq: None };
            for slot in 0..width {
                let page = entries[b * width + slot];
                if page < 0 || page as usize >= pool_pages {
                    return Err(PageError::PageOutOfPool { row, slot, page, pages: pool_pages });
                }
            }
            if lens[b] < 0 || lens[b] > max_len {
                let (len, max_len) = (lens[b], max_len as usize);
                return Err(PageError::LengthOutOfRange { row, len, max_len, width, page_size });
            }
        }
        Ok(())
    };
    // Live slots of every row, to look for a page live twice.
    let mut owners: HashMap<i32, Vec<(usize, usize)>> = HashMap::new();
    if let Ok(()) = want() {
        for (b, &len) in lens.iter().enumerate() {
            for slot in 0..(len as usize).div_ceil(page_size) {
                owners.entry(entries[b * width + slot]).or_default().push((b, slot));
            }
        }
    }
    let aliased = owners.values().any(|o| o.len() > 1);
    match (got, want()) {
        (Err(PageError::Aliased { page, first, first_slot, second, second_slot }), Ok(())) => {
            assert!(aliased, "an alias reported where there is none");
            let o = &owners[&page];
            assert!(o.contains(&(first.index, first_slot)) && o.contains(&(second.index, second_slot)));
            assert!((first.index, first_slot) < (second.index, second_slot));
        }
        (Ok(table), Ok(())) => {
            assert!(!aliased, "a page live in two slots was accepted");
            assert_eq!((table.entries(), table.seq_len_kv()), (&entries[..], &lens[..]));
            let q: Vec<i32> = lens.iter().map(|&l| i32::from(l > 0)).collect();
            assert_eq!(table.seq_len_q(), q);
        }
        (got, want) => assert_eq!(got.map(|_| ()), want),
    }
    Ok(())
}
