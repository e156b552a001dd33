//! Appending to a paged K/V cache on the GPU (`serving::KvAppend`): a decode step (one token per
//! sequence) and a chunk (seven) written into random pools through a `PagePool`'s slots, the
//! whole pools compared bit for bit with the CPU reference (`append_reference`); then a paged
//! decode plan reading the appended pools against the reference attention over the same pools.
//! Slots to skip (`-1`, past the pool) and the 16-bit kernel (a head dim or pointer that does not
//! allow 16-byte words) too; and the append timed for 128 sequences × 8 heads × d 128, printed.

#![cfg(feature = "cudnn")]

use crate::common;

use common::{random, relative_error};
use cudnn_graph::backend::cudarc::driver::sys::CUevent_flags;
use cudnn_graph::backend::cudarc::driver::{DevicePtr, DevicePtrMut};
use cudnn_graph::backend::BuildOptions;
use cudnn_graph::rng::SplitMix64;
use cudnn_graph::serving::{
    append_reference, append_slots, AppendError, KvAppend, KvPoolDims, PagePool, PageTable, SeqId,
};
use half::{bf16, f16};

// The decode graph of gpu_paged.rs.
use crate::gpu_paged::{PagedDecode, PagedDecodeArgs, PagedDecodeInputs};

const TOLERANCE: f64 = 2e-2;

/// The first element where two pools' bits differ, and how many do.
fn bit_mismatches<T: Copy, const N: usize>(
    got: &[T],
    want: &[T],
    bits: impl Fn(T) -> [u8; N],
) -> Option<(usize, usize)> {
    assert_eq!(got.len(), want.len());
    let mut first = None;
    let mut count = 0;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if bits(g) != bits(w) {
            first.get_or_insert(i);
            count += 1;
        }
    }
    first.map(|i| (i, count))
}

fn bf16_bits(x: bf16) -> [u8; 2] {
    x.to_bits().to_le_bytes()
}

#[needs_gpu]
#[test]
fn gpu_paged_append_matches_the_reference_then_attention_reads_it() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let kv = KvAppend::new(stream.context()).unwrap();
    let (page, pages, width) = (16usize, 96usize, 64usize); // width × page = 1024, as gpu_paged.rs
    let dims = KvPoolDims { pages, heads: 8, page_size: page, head_dim: 128 };
    let mut k_host = random::<bf16>(31, dims.pool_len().unwrap());
    let mut v_host = random::<bf16>(32, dims.pool_len().unwrap());
    let mut k_dev = stream.clone_htod(&k_host).unwrap();
    let mut v_dev = stream.clone_htod(&v_host).unwrap();
    let mut pool = PagePool::new(pages, page).unwrap();
    // Prompts (their K/V: the random pools' rows), ending mid-page, at a page's end, and at 1.
    let mut seqs: Vec<SeqId> = Vec::new();
    for len in [37usize, 5, 120, 16, 1] {
        let seq = pool.add().unwrap();
        pool.grow(seq, len).unwrap();
        seqs.push(seq);
    }
    // A decode step (1 new token each), then a chunk (7 each, crossing pages).
    for (round, chunk) in [1usize, 7].into_iter().enumerate() {
        for &seq in &seqs {
            pool.append(seq, chunk).unwrap();
        }
        let batch: Vec<(SeqId, usize)> = seqs.iter().map(|&s| (s, chunk)).collect();
        let slots = append_slots(&pool, &batch).unwrap();
        assert_eq!(slots.len(), seqs.len() * chunk);
        let k_new = random::<bf16>(40 + round as u64, dims.rows_len(slots.len()).unwrap());
        let v_new = random::<bf16>(50 + round as u64, dims.rows_len(slots.len()).unwrap());
        let before = k_host.clone();
        append_reference(&mut k_host, &k_new, &slots, dims).unwrap();
        append_reference(&mut v_host, &v_new, &slots, dims).unwrap();
        assert_ne!(before, k_host, "the reference wrote something");
        let dst = stream.clone_htod(&slots).unwrap();
        let (k_new_d, v_new_d) = (stream.clone_htod(&k_new).unwrap(), stream.clone_htod(&v_new).unwrap());
        kv.append(&stream, &k_new_d, &dst, &mut k_dev, dims).unwrap();
        kv.append(&stream, &v_new_d, &dst, &mut v_dev, dims).unwrap();
        for (name, dev, host) in [("K", &k_dev, &k_host), ("V", &v_dev, &v_host)] {
            let got = stream.clone_dtoh(dev).unwrap();
            let mismatch = bit_mismatches(&got, host, bf16_bits);
            println!(
                "append round {round} ({chunk} tokens × {} sequences): {name} pool mismatches {mismatch:?}",
                seqs.len()
            );
            assert_eq!(mismatch, None, "{name} pool after round {round}: (first differing element, count)");
        }
    }

    // Attention over the appended pools: the plan reads the new tokens through the table.
    let b = seqs.len();
    let mut table = PageTable::new(b, width).unwrap();
    table.fill(&pool, &seqs).unwrap();
    let q = random::<bf16>(60, b * 32 * 128);
    let g = PagedDecode::new(b, pages, page, width);
    let inputs = PagedDecodeInputs {
        q: &q,
        k_pool: &k_host,
        v_pool: &v_host,
        seq_q: table.seq_len_q(),
        seq_kv: table.seq_len_kv(),
        table: table.entries(),
    };
    let want = g.reference(inputs).unwrap().o;
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    let up_i32 = |x: &[i32]| stream.clone_htod(x).unwrap();
    let (q_d, sq_d, skv_d, table_d) = (
        stream.clone_htod(&q).unwrap(),
        up_i32(table.seq_len_q()),
        up_i32(table.seq_len_kv()),
        up_i32(table.entries()),
    );
    let mut o_d = stream.clone_htod(&vec![bf16::NAN; want.len()]).unwrap();
    let mut ws = stream.alloc_zeros::<u8>(plan.workspace_size().max(1)).unwrap();
    let args = PagedDecodeArgs {
        q: &q_d,
        k_pool: &k_dev,
        v_pool: &v_dev,
        seq_q: &sq_d,
        seq_kv: &skv_d,
        table: &table_d,
        o: &mut o_d,
    };
    plan.execute(&cudnn, args, Some(&mut ws)).unwrap();
    let got = stream.clone_dtoh(&o_d).unwrap();
    let err = relative_error(&got, &want);
    println!(
        "paged decode over the appended pools ({}), lengths {:?}: relative error {err:.3e}",
        plan.plan().selected().tag(),
        table.seq_len_kv()
    );
    assert!(err <= TOLERANCE, "relative error {err}");
}

#[needs_gpu]
#[test]
fn gpu_paged_append_skips_bad_slots_and_copies_16_bit_words() {
    let Some((stream, _cudnn)) = common::gpu() else { return };
    let kv = KvAppend::new(stream.context()).unwrap();

    // f16, a head dim of 20 (not whole 16-byte words): the 16-bit kernel. Slots to skip: -1,
    // the first past the pool (35), i32::MAX and i32::MIN, among valid ones (two per page row).
    let dims = KvPoolDims { pages: 7, heads: 3, page_size: 5, head_dim: 20 };
    let slots = [3i32, -1, 35, 34, i32::MAX, 0, i32::MIN, 17];
    let mut want = random::<f16>(71, dims.pool_len().unwrap());
    let new = random::<f16>(72, dims.rows_len(slots.len()).unwrap());
    let mut pool_d = stream.clone_htod(&want).unwrap();
    let (new_d, dst_d) = (stream.clone_htod(&new).unwrap(), stream.clone_htod(&slots).unwrap());
    append_reference(&mut want, &new, &slots, dims).unwrap();
    kv.append(&stream, &new_d, &dst_d, &mut pool_d, dims).unwrap();
    let got = stream.clone_dtoh(&pool_d).unwrap();
    assert_eq!(bit_mismatches(&got, &want, |x: f16| x.to_bits().to_le_bytes()), None, "f16, d 20");

    // Wrong lengths are refused on the host, and nothing is launched.
    let short = stream.clone_htod(&new[..new.len() - 1]).unwrap();
    let e = kv.append(&stream, &short, &dst_d, &mut pool_d, dims).unwrap_err();
    assert!(matches!(e, AppendError::Length { buffer: "new", .. }), "{e}");
    assert_eq!(stream.clone_dtoh(&pool_d).unwrap(), got, "nothing written");

    // bf16, d 128, through raw pointers with `new` 2 bytes into its allocation: not 16-byte
    // aligned, so the 16-bit kernel again.
    let dims = KvPoolDims { pages: 4, heads: 2, page_size: 4, head_dim: 128 };
    let slots = [5i32, 15, 2];
    let mut want = random::<bf16>(73, dims.pool_len().unwrap());
    let new = random::<bf16>(74, 1 + dims.rows_len(slots.len()).unwrap());
    let mut pool_d = stream.clone_htod(&want).unwrap();
    let (new_d, dst_d) = (stream.clone_htod(&new).unwrap(), stream.clone_htod(&slots).unwrap());
    append_reference(&mut want, &new[1..], &slots, dims).unwrap();
    {
        let (new_ptr, _new_guard) = new_d.device_ptr(&stream);
        let (dst_ptr, _dst_guard) = dst_d.device_ptr(&stream);
        let (pool_ptr, _pool_guard) = pool_d.device_ptr_mut(&stream);
        // SAFETY: all three are live allocations of the stream's context with the lengths the
        // dims ask for (new from its second element on), distinct, and read back after a sync.
        unsafe { kv.append_raw(&stream, new_ptr + 2, dst_ptr, pool_ptr, slots.len(), dims) }.unwrap();
        // An odd address is refused before any launch.
        let e = unsafe { kv.append_raw(&stream, new_ptr + 1, dst_ptr, pool_ptr, slots.len(), dims) }.unwrap_err();
        assert!(matches!(e, AppendError::Misaligned { buffer: "new", .. }), "{e}");
    }
    let got = stream.clone_dtoh(&pool_d).unwrap();
    assert_eq!(bit_mismatches(&got, &want, bf16_bits), None, "bf16 raw, misaligned new");
}

/// A decode step's append for B = 128 sequences × 8 KV heads × d 128 (one token each, random
/// lengths up to 512 over pages of 16): K and V, timed with CUDA events over 200 steps, through
/// the safe API (with cudarc's stream tracking) and the raw one. Printed, not asserted; the
/// pools are compared with the reference once after.
#[needs_gpu]
#[test]
fn gpu_paged_append_timing_b128_h8_d128() {
    let Some((stream, _cudnn)) = common::gpu() else { return };
    let ctx = stream.context().clone();
    let kv = KvAppend::new(&ctx).unwrap();
    let (b, page) = (128usize, 16usize);
    let pages = b * 513usize.div_ceil(page) + 8;
    let dims = KvPoolDims { pages, heads: 8, page_size: page, head_dim: 128 };
    let mut pool = PagePool::new(pages, page).unwrap();
    let mut rng = SplitMix64::new(0x7a11);
    let mut batch = Vec::new();
    for _ in 0..b {
        let seq = pool.add().unwrap();
        pool.grow(seq, rng.below(512)).unwrap();
        pool.append(seq, 1).unwrap();
        batch.push((seq, 1usize));
    }
    let slots = append_slots(&pool, &batch).unwrap();
    let mut k_want = random::<bf16>(81, dims.pool_len().unwrap());
    let mut v_want = random::<bf16>(82, dims.pool_len().unwrap());
    let mut k_d = stream.clone_htod(&k_want).unwrap();
    let mut v_d = stream.clone_htod(&v_want).unwrap();
    let k_new = random::<bf16>(83, dims.rows_len(b).unwrap());
    let v_new = random::<bf16>(84, dims.rows_len(b).unwrap());
    let (k_new_d, v_new_d, dst_d) =
        (stream.clone_htod(&k_new).unwrap(), stream.clone_htod(&v_new).unwrap(), stream.clone_htod(&slots).unwrap());
    let event = || ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).unwrap();
    let (start, end) = (event(), event());
    let steps = 200;
    let step = |k_d: &mut _, v_d: &mut _| {
        kv.append(&stream, &k_new_d, &dst_d, k_d, dims).unwrap();
        kv.append(&stream, &v_new_d, &dst_d, v_d, dims).unwrap();
    };
    for _ in 0..10 {
        step(&mut k_d, &mut v_d);
    }
    start.record(&stream).unwrap();
    for _ in 0..steps {
        step(&mut k_d, &mut v_d);
    }
    end.record(&stream).unwrap();
    let safe_us = f64::from(start.elapsed_ms(&end).unwrap()) * 1e3 / steps as f64;
    let raw_us = {
        let (k_new_p, _g1) = k_new_d.device_ptr(&stream);
        let (v_new_p, _g2) = v_new_d.device_ptr(&stream);
        let (dst_p, _g3) = dst_d.device_ptr(&stream);
        let (k_p, _g4) = k_d.device_ptr_mut(&stream);
        let (v_p, _g5) = v_d.device_ptr_mut(&stream);
        start.record(&stream).unwrap();
        for _ in 0..steps {
            // SAFETY: live allocations of this context with the lengths of `dims` and `b` tokens,
            // distinct; the guards above keep cudarc's tracking right for the reads after.
            unsafe {
                kv.append_raw(&stream, k_new_p, dst_p, k_p, b, dims).unwrap();
                kv.append_raw(&stream, v_new_p, dst_p, v_p, b, dims).unwrap();
            }
        }
        end.record(&stream).unwrap();
        f64::from(start.elapsed_ms(&end).unwrap()) * 1e3 / steps as f64
    };
    // Bytes one step moves: each new row read once and written once, K and V.
    let bytes = 2.0 * 2.0 * (b * 8 * 128 * 2) as f64;
    println!(
        "kv append B={b} H=8 d=128 page={page} (K and V, 2 launches): safe {safe_us:.2} us/step, raw {raw_us:.2} \
         us/step ({:.1} GB/s of rows moved, raw)",
        bytes / (raw_us * 1e3)
    );
    append_reference(&mut k_want, &k_new, &slots, dims).unwrap();
    append_reference(&mut v_want, &v_new, &slots, dims).unwrap();
    assert_eq!(bit_mismatches(&stream.clone_dtoh(&k_d).unwrap(), &k_want, bf16_bits), None, "K");
    assert_eq!(bit_mismatches(&stream.clone_dtoh(&v_d).unwrap(), &v_want, bf16_bits), None, "V");
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
