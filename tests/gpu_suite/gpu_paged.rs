//! Paged attention on the GPU: decode and multi-token queries over page pools read through
//! shuffled page tables, with mixed per-sequence lengths, fused `SDPA_FWD` and the composite
//! subgraph, against the CPU reference (relative error ≤ 2e-2 over the rows that exist). One
//! plan serves a second batch with new tables and lengths: the serving contract (tables and
//! lengths are device buffers, so nothing is rebuilt).

#![cfg(feature = "cudnn")]

use crate::common;

use common::{random, relative_error};
use cudnn_graph::backend::BuildOptions;
use cudnn_graph::graph;
use cudnn_graph::rng::SplitMix64;
use half::bf16;

graph! {
    /// Llama-style paged decode: 32 query heads over 8 KV heads, d 128, one table for K and V.
    pub PagedDecode<dyn B, dyn P, dyn PAGE, dyn T>(
        q: bf16[B, 32, 1, 128],
        k_pool: bf16[P, 8, PAGE, 128],
        v_pool: bf16[P, 8, PAGE, 128],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
        table: i32[B, 1, T, 1],
    ) -> (o: bf16[B, 32, 1, 128]) {
        o = sdpa(q, k_pool, v_pool, seq_q, seq_kv, table, table, paged = true, padding_mask = true);
    }

    /// The same through the composite subgraph (paged cache loads).
    pub PagedDecodeComposite<dyn B, dyn P, dyn PAGE, dyn T>(
        q: bf16[B, 32, 1, 128],
        k_pool: bf16[P, 8, PAGE, 128],
        v_pool: bf16[P, 8, PAGE, 128],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
        table: i32[B, 1, T, 1],
    ) -> (o: bf16[B, 32, 1, 128]) {
        o = sdpa(q, k_pool, v_pool, seq_q, seq_kv, table, table, paged = true, padding_mask = true, implementation = composite);
    }

    /// Several query tokens per sequence (speculative decoding, chunked prefill), causal with
    /// the diagonal at the end of each sequence's keys; own tables for K and V.
    pub PagedVerify<dyn B, dyn SQ, dyn P, dyn T>(
        q: bf16[B, 8, SQ, 64],
        k_pool: bf16[P, 2, 16, 64],
        v_pool: bf16[P, 2, 16, 64],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
        table_k: i32[B, 1, T, 1],
        table_v: i32[B, 1, T, 1],
    ) -> (o: bf16[B, 8, SQ, 64]) {
        o = sdpa(q, k_pool, v_pool, seq_q, seq_kv, table_k, table_v, paged = true, padding_mask = true, causal = true, alignment = bottom_right);
    }

    /// A sliding window over the cache with the softmax statistics (log-sum-exp) returned:
    /// two query tokens per sequence, each seeing its last 48 keys.
    pub PagedWindowStats<dyn B, dyn P, dyn T>(
        q: bf16[B, 8, 2, 64],
        k_pool: bf16[P, 2, 16, 64],
        v_pool: bf16[P, 2, 16, 64],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
        table: i32[B, 1, T, 1],
    ) -> (o: bf16[B, 8, 2, 64], stats: f32[B, 8, 2, 1]) {
        (o, stats) = sdpa(q, k_pool, v_pool, seq_q, seq_kv, table, table, paged = true, padding_mask = true, causal = true, alignment = bottom_right, window = 48, training = true);
    }
}

const TOLERANCE: f64 = 2e-2;

/// A shuffled assignment of the pool's `pages` pages to `b` sequences of `width` slots.
fn shuffled_table(rng: &mut SplitMix64, b: usize, width: usize, pages: usize) -> Vec<i32> {
    let mut order: Vec<i32> = (0..pages as i32).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    order[..b * width].to_vec()
}

/// Zeroes the rows of `o` (`[B, H, S_q, D]`) at or past each sequence's query length, in both.
fn live_rows_only(got: &mut [bf16], want: &mut [bf16], seq_q: &[i32], [h, s_q, d]: [usize; 3]) {
    for (b, &len) in seq_q.iter().enumerate() {
        for head in 0..h {
            for i in (len.max(0) as usize)..s_q {
                let row = ((b * h + head) * s_q + i) * d;
                got[row..row + d].fill(bf16::ZERO);
                want[row..row + d].fill(bf16::ZERO);
            }
        }
    }
}

#[needs_gpu]
#[test]
fn gpu_paged_decode_matches_the_reference_and_serves_new_tables() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let mut rng = SplitMix64::new(0x9a9e);
    for &(b, page, capacity) in &[(8usize, 16usize, 1024usize), (4, 64, 2048), (1, 16, 4096)] {
        let width = capacity / page;
        let pages = b * width + 5;
        let q = random::<bf16>(1, b * 32 * 128);
        let k_pool = random::<bf16>(2, pages * 8 * page * 128);
        let v_pool = random::<bf16>(3, pages * 8 * page * 128);
        let seq_q = vec![1i32; b];
        let up_i32 = |x: &Vec<i32>| stream.clone_htod(x).unwrap();
        let (q_d, k_d, v_d) =
            (stream.clone_htod(&q).unwrap(), stream.clone_htod(&k_pool).unwrap(), stream.clone_htod(&v_pool).unwrap());
        let sq_d = up_i32(&seq_q);
        let fused = PagedDecode::new(b, pages, page, width).build(&cudnn, &BuildOptions::default()).unwrap();
        let composite =
            PagedDecodeComposite::new(b, pages, page, width).build(&cudnn, &BuildOptions::default()).unwrap();
        // Two batches through the same plans: new tables, new lengths (mixed, 1..=capacity).
        for round in 0..2 {
            let table = shuffled_table(&mut rng, b, width, pages);
            let seq_kv: Vec<i32> = (0..b).map(|_| 1 + rng.below(capacity) as i32).collect();
            let inputs = PagedDecodeInputs {
                q: &q,
                k_pool: &k_pool,
                v_pool: &v_pool,
                seq_q: &seq_q,
                seq_kv: &seq_kv,
                table: &table,
            };
            let want = PagedDecode::new(b, pages, page, width).reference(inputs).unwrap().o;
            let (skv_d, table_d) = (up_i32(&seq_kv), up_i32(&table));
            for (name, plan_ws, run) in
                [("fused", fused.workspace_size(), 0), ("composite", composite.workspace_size(), 1)]
            {
                let mut o_d = stream.clone_htod(&vec![bf16::NAN; want.len()]).unwrap();
                let mut ws = stream.alloc_zeros::<u8>(plan_ws.max(1)).unwrap();
                // The two plans' argument types differ by name only.
                macro_rules! execute {
                    ($plan:expr, $args:ident) => {{
                        let (q, k_pool, v_pool, seq_q, seq_kv, table) = (&q_d, &k_d, &v_d, &sq_d, &skv_d, &table_d);
                        let args = $args { q, k_pool, v_pool, seq_q, seq_kv, table, o: &mut o_d };
                        $plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
                        $plan.plan().selected().tag()
                    }};
                }
                let tag = if run == 0 {
                    execute!(fused, PagedDecodeArgs)
                } else {
                    execute!(composite, PagedDecodeCompositeArgs)
                };
                let got = stream.clone_dtoh(&o_d).unwrap();
                let err = relative_error(&got, &want);
                println!("paged decode {name} B={b} page={page} capacity={capacity} round {round} ({tag}): relative error {err:.3e}");
                assert!(err <= TOLERANCE, "{name} B={b} page={page} round {round}: relative error {err}");
            }
        }
    }
}

#[needs_gpu]
#[test]
fn gpu_paged_multi_token_causal_matches_the_reference() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let mut rng = SplitMix64::new(0x5eed);
    let (b, s_q, width) = (3usize, 4usize, 24usize);
    let pages = b * width + 2;
    let g = PagedVerify::new(b, s_q, pages, width);
    let q = random::<bf16>(11, b * 8 * s_q * 64);
    let k_pool = random::<bf16>(12, pages * 2 * 16 * 64);
    let v_pool = random::<bf16>(13, pages * 2 * 16 * 64);
    let table_k = shuffled_table(&mut rng, b, width, pages);
    let table_v = shuffled_table(&mut rng, b, width, pages);
    let seq_q = vec![4i32, 1, 3];
    let seq_kv = vec![300i32, 17, 384];
    let inputs = PagedVerifyInputs {
        q: &q,
        k_pool: &k_pool,
        v_pool: &v_pool,
        seq_q: &seq_q,
        seq_kv: &seq_kv,
        table_k: &table_k,
        table_v: &table_v,
    };
    let mut want = g.reference(inputs).unwrap().o;
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let up_i32 = |x: &Vec<i32>| stream.clone_htod(x).unwrap();
    let up = |x: &Vec<bf16>| stream.clone_htod(x).unwrap();
    let mut o_d = stream.clone_htod(&vec![bf16::NAN; want.len()]).unwrap();
    let mut ws = stream.alloc_zeros::<u8>(plan.workspace_size().max(1)).unwrap();
    let (q_d, k_d, v_d) = (up(&q), up(&k_pool), up(&v_pool));
    let (sq_d, skv_d, tk_d, tv_d) = (up_i32(&seq_q), up_i32(&seq_kv), up_i32(&table_k), up_i32(&table_v));
    let args = PagedVerifyArgs {
        q: &q_d,
        k_pool: &k_d,
        v_pool: &v_d,
        seq_q: &sq_d,
        seq_kv: &skv_d,
        table_k: &tk_d,
        table_v: &tv_d,
        o: &mut o_d,
    };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let mut got = stream.clone_dtoh(&o_d).unwrap();
    live_rows_only(&mut got, &mut want, &seq_q, [8, s_q, 64]);
    let err = relative_error(&got, &want);
    println!("paged multi-token causal ({}): relative error {err:.3e}", plan.plan().selected().tag());
    assert!(err <= TOLERANCE, "relative error {err}");
}

/// The rest of the serving contract on a paged cache: a sliding window and the returned
/// log-sum-exp (cudnn-frontend #920), against the reference, over the rows that exist.
#[needs_gpu]
#[test]
fn gpu_paged_sliding_window_with_statistics_matches_the_reference() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let mut rng = SplitMix64::new(0x3d0);
    let (b, width) = (4usize, 24usize);
    let pages = b * width + 3;
    let g = PagedWindowStats::new(b, pages, width);
    let q = random::<bf16>(31, b * 8 * 2 * 64);
    let k_pool = random::<bf16>(32, pages * 2 * 16 * 64);
    let v_pool = random::<bf16>(33, pages * 2 * 16 * 64);
    let table = shuffled_table(&mut rng, b, width, pages);
    // Lengths inside, at and below the window, and a sequence with one query token.
    let seq_q = vec![2i32, 2, 1, 2];
    let seq_kv = vec![300i32, 48, 17, 384];
    let inputs = PagedWindowStatsInputs {
        q: &q,
        k_pool: &k_pool,
        v_pool: &v_pool,
        seq_q: &seq_q,
        seq_kv: &seq_kv,
        table: &table,
    };
    let want = g.reference(inputs).unwrap();
    let (mut want_o, mut want_stats) = (want.o, want.stats);
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let up_i32 = |x: &Vec<i32>| stream.clone_htod(x).unwrap();
    let up = |x: &Vec<bf16>| stream.clone_htod(x).unwrap();
    let mut o_d = stream.clone_htod(&vec![bf16::NAN; want_o.len()]).unwrap();
    let mut stats_d = stream.clone_htod(&vec![f32::NAN; want_stats.len()]).unwrap();
    let mut ws = stream.alloc_zeros::<u8>(plan.workspace_size().max(1)).unwrap();
    let (q_d, k_d, v_d) = (up(&q), up(&k_pool), up(&v_pool));
    let (sq_d, skv_d, t_d) = (up_i32(&seq_q), up_i32(&seq_kv), up_i32(&table));
    let args = PagedWindowStatsArgs {
        q: &q_d,
        k_pool: &k_d,
        v_pool: &v_d,
        seq_q: &sq_d,
        seq_kv: &skv_d,
        table: &t_d,
        o: &mut o_d,
        stats: &mut stats_d,
    };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let mut got_o = stream.clone_dtoh(&o_d).unwrap();
    let mut got_stats = stream.clone_dtoh(&stats_d).unwrap();
    live_rows_only(&mut got_o, &mut want_o, &seq_q, [8, 2, 64]);
    // The statistics of query rows past a sequence's length are not defined either.
    for (bi, &len) in seq_q.iter().enumerate() {
        for head in 0..8 {
            for i in (len as usize)..2 {
                let at = (bi * 8 + head) * 2 + i;
                (got_stats[at], want_stats[at]) = (0.0, 0.0);
            }
        }
    }
    let (err_o, err_stats) = (relative_error(&got_o, &want_o), relative_error(&got_stats, &want_stats));
    println!(
        "paged sliding window 48 with statistics ({}): O relative error {err_o:.3e}, Stats {err_stats:.3e}",
        plan.plan().selected().tag()
    );
    assert!(err_o <= TOLERANCE, "O: relative error {err_o}");
    assert!(err_stats <= TOLERANCE, "Stats: relative error {err_stats}");
}

/// A serving loop: sequences arrive, grow and finish through a `serving::PagePool`; each step's
/// `PageTable` (capacity 8 rows of 64 pages, unused rows of length 0) is copied into the same
/// device buffers, and one CUDA graph of the plan's execute, recorded once, replays every step
/// with the new tables and lengths: no rebuild, no re-capture. Live rows match the reference.
#[needs_gpu]
#[test]
fn gpu_paged_serving_loop_replays_one_cuda_graph() {
    use cudnn_graph::backend::cudarc::driver::{DevicePtr, DevicePtrMut};
    use cudnn_graph::backend::{Cudnn, GraphMode};
    use cudnn_graph::serving::{PagePool, PageTable};
    let Some((_, _)) = common::gpu() else { return };
    let ctx = cudnn_graph::backend::cuda_context(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let cudnn = Cudnn::new(stream.clone()).unwrap();
    let (b, page, width, pages) = (8usize, 16usize, 64usize, 300usize);
    let g = PagedDecode::new(b, pages, page, width);
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let q = random::<bf16>(21, b * 32 * 128);
    let k_pool = random::<bf16>(22, pages * 8 * page * 128);
    let v_pool = random::<bf16>(23, pages * 8 * page * 128);
    let up = |x: &Vec<bf16>| stream.clone_htod(x).unwrap();
    let (q_d, k_d, v_d) = (up(&q), up(&k_pool), up(&v_pool));
    let mut pool = PagePool::new(pages, page).unwrap();
    let mut table = PageTable::new(b, width).unwrap();
    let mut table_d = stream.clone_htod(table.entries()).unwrap();
    let mut skv_d = stream.clone_htod(table.seq_len_kv()).unwrap();
    let mut sq_d = stream.clone_htod(table.seq_len_q()).unwrap();
    let mut o_d = stream.clone_htod(&vec![bf16::NAN; b * 32 * 128]).unwrap();
    let mut ws = stream.alloc_zeros::<u8>(plan.workspace_size().max(1)).unwrap();
    let o_ptr = o_d.device_ptr_mut(&stream).0;
    let by_name = |name: &str| -> u64 {
        match name {
            "q" => q_d.device_ptr(&stream).0,
            "k_pool" => k_d.device_ptr(&stream).0,
            "v_pool" => v_d.device_ptr(&stream).0,
            "seq_q" => sq_d.device_ptr(&stream).0,
            "seq_kv" => skv_d.device_ptr(&stream).0,
            "table" => table_d.device_ptr(&stream).0,
            "o" => o_ptr,
            other => panic!("no buffer for {other}"),
        }
    };
    let io: Vec<u64> =
        plan.plan().layout().io().iter().map(|id| by_name(&plan.plan().graph().tensor(*id).name)).collect();
    let ws_ptr = ws.device_ptr_mut(&stream).0;
    // SAFETY: every buffer lives until the end of the test, after the graph is dropped.
    let graph = unsafe { plan.plan().cuda_graph(&cudnn, &io, ws_ptr, GraphMode::Auto) }.unwrap();
    let mut rng = SplitMix64::new(0x5e7e);
    let mut live = Vec::new();
    for step in 0..6 {
        // Arrivals (a prompt of up to 400 tokens), one token for everyone, random finishes.
        while live.len() < b && rng.below(3) != 0 {
            let seq = pool.add().unwrap();
            pool.grow(seq, 1 + rng.below(400)).unwrap();
            live.push(seq);
        }
        for &seq in &live {
            pool.append(seq, 1).unwrap();
        }
        table.fill(&pool, &live).unwrap();
        stream.memcpy_htod(table.entries(), &mut table_d).unwrap();
        stream.memcpy_htod(table.seq_len_kv(), &mut skv_d).unwrap();
        stream.memcpy_htod(table.seq_len_q(), &mut sq_d).unwrap();
        graph.launch().unwrap();
        let mut got = stream.clone_dtoh(&o_d).unwrap();
        let inputs = PagedDecodeInputs {
            q: &q,
            k_pool: &k_pool,
            v_pool: &v_pool,
            seq_q: table.seq_len_q(),
            seq_kv: table.seq_len_kv(),
            table: table.entries(),
        };
        let mut want = g.reference(inputs).unwrap().o;
        live_rows_only(&mut got, &mut want, table.seq_len_q(), [32, 1, 128]);
        let err = relative_error(&got, &want);
        println!(
            "serving step {step}: {} live of {b}, lengths {:?}: relative error {err:.3e}",
            live.len(),
            table.seq_len_kv()
        );
        assert!(err <= TOLERANCE, "step {step}: relative error {err}");
        if !live.is_empty() && rng.below(2) == 0 {
            let done = live.remove(rng.below(live.len()));
            pool.release(done).unwrap();
        }
    }
    drop(graph);
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
