//! Paged K/V caches on candle tensors (`PagedKvCache`) on the CPU: appends land in the pages the
//! table names, every misuse is a typed error that changes nothing, and the Llama layer served
//! from a paged cache with continuous batching (`examples/llama/serve.rs`) matches candle's own
//! dense-cache decode step by step without preparing a graph after warm-up.

use crate::layer::{random, Config, Layer};
use crate::llama_layer::relative_difference;
use crate::serve::{prefill_kv, CandleEngine, Classes, PagedEngine, Rope};

use candle_core::{DType, Device, Tensor};
use cudnn_graph::rng::SplitMix64;
use cudnn_graph::serving::{AppendError, PageError, PagePool, PageTable, SeqId};
use cudnn_graph_candle::{PagedKvCache, Runner};

const SMALL: Config = Config { hidden: 64, heads: 4, kv_heads: 2, intermediate: 96, eps: 1e-5, rope_theta: 10000.0 };

/// `n` rows `[n, heads, dim]` of distinct values (never zero), f32.
fn rows(n: usize, heads: usize, dim: usize, seed: u64) -> Tensor {
    let mut rng = SplitMix64::new(seed);
    let v: Vec<f32> = (0..n * heads * dim).map(|_| rng.nonzero(-1.0, 1.0) as f32).collect();
    Tensor::from_vec(v, (n, heads, dim), &Device::Cpu).unwrap()
}

/// A candle error's message (candle keeps the adapter's error as text, and adds a backtrace
/// where `RUST_BACKTRACE` asks for one).
fn adapter(e: candle_core::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

/// Token `pos` of `seq` in the K pool, `[heads, dim]`, read through the pool's page list.
fn token(cache: &PagedKvCache, seq: SeqId, pos: usize) -> Vec<Vec<f32>> {
    let page_size = cache.dims().page_size;
    let page = cache.pages().pages(seq).unwrap()[pos / page_size] as usize;
    cache.k_pool().get(page).unwrap().narrow(1, pos % page_size, 1).unwrap().squeeze(1).unwrap().to_vec2().unwrap()
}

#[test]
fn appends_land_in_the_pages_the_table_names() {
    let (heads, dim) = (2, 3);
    let mut cache = PagedKvCache::new(PagePool::new(16, 4).unwrap(), heads, dim, DType::F32, &Device::Cpu).unwrap();
    let (a, b, c) = (cache.add().unwrap(), cache.add().unwrap(), cache.add().unwrap());
    // Prefill of 5, 1 and 9 tokens, then three decode steps of all three.
    let mut written: Vec<(SeqId, Vec<Vec<Vec<f32>>>)> = vec![(a, vec![]), (b, vec![]), (c, vec![])];
    let mut step = |batch: &[(SeqId, usize)], seed: u64, cache: &mut PagedKvCache| {
        let n: usize = batch.iter().map(|&(_, t)| t).sum();
        let k = rows(n, heads, dim, seed);
        let v = (&k * 2.0).unwrap();
        cache.append(batch, &k, &v).unwrap();
        let mut at = 0;
        for &(seq, t) in batch {
            let entry = written.iter_mut().find(|(s, _)| *s == seq).unwrap();
            for i in 0..t {
                entry.1.push(k.get(at + i).unwrap().to_vec2().unwrap());
            }
            at += t;
        }
    };
    step(&[(a, 5), (b, 1), (c, 9)], 1, &mut cache);
    for s in 0..3 {
        step(&[(c, 1), (a, 1), (b, 1)], 10 + s, &mut cache);
    }
    for (seq, tokens) in &written {
        assert_eq!(cache.pages().len(*seq).unwrap(), tokens.len());
        for (pos, want) in tokens.iter().enumerate() {
            assert_eq!(&token(&cache, *seq, pos), want, "sequence {seq}, token {pos}");
        }
    }
    // V got 2·K, at the same places.
    let page = cache.pages().pages(c).unwrap()[0] as usize;
    let (k, v) = (cache.k_pool().get(page).unwrap(), cache.v_pool().get(page).unwrap());
    assert_eq!((k * 2.0).unwrap().to_vec3::<f32>().unwrap(), v.to_vec3::<f32>().unwrap());

    // The step's inputs: lengths and table rows, in the table's capacity.
    let mut table = PageTable::new(4, 4).unwrap();
    let inputs = cache.step(&mut table, &[b, c]).unwrap();
    assert_eq!(inputs.seq_len_kv.flatten_all().unwrap().to_vec1::<i32>().unwrap(), [4, 12, 0, 0]);
    assert_eq!(inputs.seq_len_q.flatten_all().unwrap().to_vec1::<i32>().unwrap(), [1, 1, 0, 0]);
    assert_eq!(inputs.table.dims(), [4, 1, 4, 1]);
    let entries = inputs.table.flatten_all().unwrap().to_vec1::<i32>().unwrap();
    assert_eq!(&entries[4..7], cache.pages().pages(c).unwrap());
}

#[test]
fn every_misuse_is_a_typed_error_that_changes_nothing() {
    let (heads, dim) = (2, 3);
    let mut cache = PagedKvCache::new(PagePool::new(4, 4).unwrap(), heads, dim, DType::F32, &Device::Cpu).unwrap();
    let (a, b) = (cache.add().unwrap(), cache.add().unwrap());
    cache.append(&[(a, 3)], &rows(3, heads, dim, 1), &rows(3, heads, dim, 2)).unwrap();
    let before = (
        cache.pages().free_pages(),
        cache.pages().len(a).unwrap(),
        cache.k_pool().flatten_all().unwrap().to_vec1::<f32>().unwrap(),
    );
    let unchanged = |cache: &PagedKvCache| {
        let now = (
            cache.pages().free_pages(),
            cache.pages().len(a).unwrap(),
            cache.k_pool().flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        );
        assert_eq!(now, before, "a refused append changed the cache");
    };

    // Rows of the wrong shape, element type, or layout, named.
    let e = adapter(cache.append(&[(a, 2)], &rows(3, heads, dim, 3), &rows(2, heads, dim, 3)).unwrap_err());
    assert!(e.starts_with("paged K/V cache, `k`: expected F32[2, 2, 3]") && e.contains("[3, 2, 3]"), "{e}");
    let half = rows(1, heads, dim, 4).to_dtype(DType::BF16).unwrap();
    let e = adapter(cache.append(&[(a, 1)], &rows(1, heads, dim, 4), &half).unwrap_err());
    assert!(e.starts_with("paged K/V cache, `v`: expected F32[1, 2, 3]") && e.contains("BF16"), "{e}");
    let strided = rows(1, dim, heads, 5).transpose(1, 2).unwrap();
    let e = adapter(cache.append(&[(a, 1)], &strided, &rows(1, heads, dim, 5)).unwrap_err());
    assert!(e.starts_with("paged K/V cache, `k`: expected a contiguous tensor"), "{e}");
    unchanged(&cache);

    // A sequence twice; more tokens than the pool holds (b's pages would fit alone: all or nothing).
    let e = adapter(cache.append(&[(a, 1), (a, 1)], &rows(2, heads, dim, 6), &rows(2, heads, dim, 6)).unwrap_err());
    assert_eq!(e, format!("paged K/V cache: {}", AppendError::DuplicateSequence { seq: a, first: 0, second: 1 }));
    let e = adapter(cache.append(&[(b, 4), (a, 10)], &rows(14, heads, dim, 7), &rows(14, heads, dim, 7)).unwrap_err());
    let out = PageError::OutOfPages { seq: a, len: 13, needed: 3, free: 2 };
    assert_eq!(e, format!("paged K/V cache: {out}"));
    assert_eq!(cache.pages().len(b).unwrap(), 0, "b grew although the batch was refused");
    unchanged(&cache);

    // A released handle, and a view of the pool itself as the new rows (candle refuses aliasing).
    cache.release(b).unwrap(); // b held no pages: the pool is as before
    let e = adapter(cache.append(&[(b, 1)], &rows(1, heads, dim, 8), &rows(1, heads, dim, 8)).unwrap_err());
    assert_eq!(e, format!("paged K/V cache: {}", PageError::Released { seq: b }));
    // The pool's first elements, seen as one token's rows: a contiguous view of its storage.
    let alias = cache.k_pool().flatten_all().unwrap().narrow(0, 0, heads * dim).unwrap();
    let alias = alias.reshape((1, heads, dim)).unwrap();
    let e = adapter(cache.append(&[(a, 1)], &alias, &rows(1, heads, dim, 9)).unwrap_err());
    assert!(e.contains("shares storage"), "{e}");
    unchanged(&cache);

    // A table too narrow for a sequence, or with too few rows.
    let mut narrow = PageTable::new(2, 1).unwrap();
    let long = cache.add().unwrap();
    cache.append(&[(long, 5)], &rows(5, heads, dim, 10), &rows(5, heads, dim, 10)).unwrap();
    let e = adapter(cache.step(&mut narrow, &[long]).unwrap_err());
    assert!(e.starts_with("paged K/V cache: page table row 0 (sequence 2) needs 2 pages"), "{e}");
    let mut one_row = PageTable::new(1, 4).unwrap();
    let e = adapter(cache.step(&mut one_row, &[a, long]).unwrap_err());
    assert!(e.starts_with("paged K/V cache: a batch of 2 sequences does not fit"), "{e}");
}

#[test]
fn the_layer_served_from_a_paged_cache_matches_candles_dense_decode() {
    let device = Device::Cpu;
    let layer = Layer::random(SMALL, &device, 5).unwrap();
    let (page, widths, max_batch) = (4, vec![2, 4], 8);
    let rope_tables = Rope::new(&layer, widths[1] * page, &device).unwrap();
    let runner = Runner::new();
    let classes = Classes { buckets: vec![4, max_batch], widths };
    let mut paged = PagedEngine::new(&layer, PagePool::new(max_batch * 4, page).unwrap(), classes, &device).unwrap();
    paged.warm_up(&runner, &layer, &rope_tables, &device).unwrap();
    let prepared = runner.graphs_prepared();
    // RmsNorm, Qkv, SwiGlu, two ProjResiduals per bucket; PagedDecode per (bucket, width).
    assert_eq!(prepared, 2 * 5 + 2 * 2);
    let mut candle = CandleEngine::default();
    let mut rng = SplitMix64::new(11);
    // (sequence, tokens left); prompts of 1..=7, outputs of 1..=8: sequences cross both widths.
    let mut live: Vec<(SeqId, usize)> = Vec::new();
    let mut worst = 0f32;
    let mut batches = Vec::new();
    for step in 0..30 {
        while live.len() < max_batch && rng.unit() < 0.6 {
            let prompt = 1 + rng.below(7);
            let x = random(&[1, prompt, SMALL.hidden], 1.0, 100 + step, &device).unwrap();
            let kv = prefill_kv(&layer, &rope_tables, &x).unwrap();
            let seq = paged.admit(&kv).unwrap();
            candle.admit(seq, &kv);
            live.push((seq, 1 + rng.below(8)));
        }
        if live.is_empty() {
            continue;
        }
        let seqs: Vec<SeqId> = live.iter().map(|&(s, _)| s).collect();
        let bucket = paged.bucket_for(seqs.len()).unwrap();
        let x = random(&[bucket, 1, SMALL.hidden], 1.0, 1000 + step, &device).unwrap();
        let got = paged.step(&runner, &layer, &rope_tables, &seqs, &x).unwrap().narrow(0, 0, seqs.len()).unwrap();
        let want = candle.step(&layer, &rope_tables, &seqs, &x.narrow(0, 0, seqs.len()).unwrap()).unwrap();
        worst = worst.max(relative_difference(&got, &want));
        batches.push(seqs.len());
        live.retain_mut(|(seq, left)| {
            *left -= 1;
            if *left == 0 {
                paged.finish(*seq).unwrap();
                candle.finish(*seq);
            }
            *left > 0
        });
    }
    assert!(worst < 2e-2, "worst step differs by {worst}");
    assert!(batches.iter().any(|&b| b > 4), "no step used the larger bucket: {batches:?}");
    assert_eq!(runner.graphs_prepared(), prepared, "a step prepared a graph after warm-up");
}
