//! Ragged (packed, THD) attention from the DSL, on the CPU reference engine: a `graph!` prefill
//! over sequences of mixed lengths packed back to back computes, token for token, what the padded
//! batch computes; so does the backward; offsets that would read or write out of place are errors
//! naming the port and the sequence, never a read; a packed port not laid out THD does not build.
//! The packed buffers here are made by hand (storage element `offset[b] + s·H·D + h·D + d`), not
//! by the runtime's own packing, so the two agree only if the runtime reads memory as cuDNN does.

use crate::common;

use common::random;
use cudnn_graph::graph;
use cudnn_graph::ops::AttrValue;
use cudnn_graph::{DataType, GraphBuilder};
use half::bf16;

const HQ: usize = 4;
const HKV: usize = 2;
const D: usize = 16;

graph! {
    /// Packed prefill: 4 query heads over 2 KV heads, causal; Q and O share their offsets (one
    /// layout), as do K and V.
    pub Packed<dyn B, dyn S>(
        q: bf16[B, 4, S, 16] order [0, 2, 1, 3],
        k: bf16[B, 2, S, 16] order [0, 2, 1, 3],
        v: bf16[B, 2, S, 16] order [0, 2, 1, 3],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
        offsets_q: i64[B + 1, 1, 1, 1],
        offsets_kv: i64[B + 1, 1, 1, 1],
    ) -> (o: bf16[B, 4, S, 16] order [0, 2, 1, 3], stats: f32[B, 4, S, 1]) {
        let (out, lse) = sdpa(q, k, v, seq_q, seq_kv, offsets_q, offsets_kv, offsets_kv, offsets_q,
                              ragged = true, padding_mask = true, causal = true, training = true);
        o = out;
        stats = lse;
    }

    /// The same attention over the padded batch (BHSD).
    pub Padded<dyn B, dyn S>(
        q: bf16[B, 4, S, 16],
        k: bf16[B, 2, S, 16],
        v: bf16[B, 2, S, 16],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
    ) -> (o: bf16[B, 4, S, 16], stats: f32[B, 4, S, 1]) {
        let (out, lse) = sdpa(q, k, v, seq_q, seq_kv, padding_mask = true, causal = true, training = true);
        o = out;
        stats = lse;
    }

    /// The packed backward: dO at O's offsets, dQ at Q's, dK and dV at K's and V's.
    pub PackedBackward<dyn B, dyn S>(
        q: bf16[B, 4, S, 16] order [0, 2, 1, 3],
        k: bf16[B, 2, S, 16] order [0, 2, 1, 3],
        v: bf16[B, 2, S, 16] order [0, 2, 1, 3],
        o: bf16[B, 4, S, 16] order [0, 2, 1, 3],
        d_o: bf16[B, 4, S, 16] order [0, 2, 1, 3],
        stats: f32[B, 4, S, 1],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
        offsets_q: i32[B + 1, 1, 1, 1],
        offsets_kv: i32[B + 1, 1, 1, 1],
    ) -> (d_q: bf16[B, 4, S, 16] order [0, 2, 1, 3], d_k: bf16[B, 2, S, 16] order [0, 2, 1, 3],
          d_v: bf16[B, 2, S, 16] order [0, 2, 1, 3]) {
        let (g_q, g_k, g_v) = sdpa_backward(q, k, v, o, d_o, stats, seq_q, seq_kv,
                                            offsets_q, offsets_kv, offsets_kv, offsets_q,
                                            ragged = true, padding_mask = true, causal = true);
        d_q = g_q;
        d_k = g_k;
        d_v = g_v;
    }

    /// The padded backward.
    pub PaddedBackward<dyn B, dyn S>(
        q: bf16[B, 4, S, 16],
        k: bf16[B, 2, S, 16],
        v: bf16[B, 2, S, 16],
        o: bf16[B, 4, S, 16],
        d_o: bf16[B, 4, S, 16],
        stats: f32[B, 4, S, 1],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
    ) -> (d_q: bf16[B, 4, S, 16], d_k: bf16[B, 2, S, 16], d_v: bf16[B, 2, S, 16]) {
        let (g_q, g_k, g_v) = sdpa_backward(q, k, v, o, d_o, stats, seq_q, seq_kv, padding_mask = true, causal = true);
        d_q = g_q;
        d_k = g_k;
        d_v = g_v;
    }
}

/// Element offsets of sequences of `lens` tokens of `heads · D` elements, back to back.
fn offsets(lens: &[i32], heads: usize) -> Vec<i64> {
    let mut v = vec![0i64];
    for &n in lens {
        v.push(v[v.len() - 1] + i64::from(n) * (heads * D) as i64);
    }
    v
}

/// A padded BHSD batch (`[b, heads, s, D]`) packed THD at `offsets`: the capacity `b·s·heads·D`,
/// storage no sequence owns holding `filler`.
fn pack(padded: &[bf16], lens: &[i32], offsets: &[i64], heads: usize, s: usize, filler: bf16) -> Vec<bf16> {
    let mut out = vec![filler; padded.len()];
    for (b, &n) in lens.iter().enumerate() {
        for row in 0..n as usize {
            for h in 0..heads {
                for x in 0..D {
                    out[offsets[b] as usize + row * heads * D + h * D + x] =
                        padded[((b * heads + h) * s + row) * D + x];
                }
            }
        }
    }
    out
}

/// Asserts packed `got` (THD at `offsets`) equals padded `want` on every row within `lens`, to
/// the bit; returns how many elements were compared.
fn assert_packed_eq(what: &str, got: &[bf16], want: &[bf16], lens: &[i32], offsets: &[i64], heads: usize, s: usize) {
    let mut n = 0;
    for (b, &len) in lens.iter().enumerate() {
        for row in 0..len as usize {
            for h in 0..heads {
                for x in 0..D {
                    let (g, w) = (
                        got[offsets[b] as usize + row * heads * D + h * D + x],
                        want[((b * heads + h) * s + row) * D + x],
                    );
                    assert_eq!(g.to_bits(), w.to_bits(), "{what}: sequence {b}, row {row}, head {h}, dim {x}");
                    n += 1;
                }
            }
        }
    }
    assert!(n > 0 && want.iter().any(|v| v.to_f32() != 0.0), "{what}: nothing compared");
}

/// Mixed lengths (45 % padding of a capacity of 8 tokens), one empty sequence.
const LENS: [i32; 4] = [8, 3, 0, 5];
const S: usize = 8;

#[test]
fn packed_prefill_is_the_padded_batch_token_for_token() {
    let b = LENS.len();
    let (q, k, v) =
        (random::<bf16>(11, b * HQ * S * D), random::<bf16>(12, b * HKV * S * D), random(13, b * HKV * S * D));
    let lens = LENS.to_vec();
    let (off_q, off_kv) = (offsets(&lens, HQ), offsets(&lens, HKV));
    let filler = bf16::from_f32(3.5);
    let packed_q = pack(&q, &lens, &off_q, HQ, S, filler);
    let packed_k = pack(&k, &lens, &off_kv, HKV, S, filler);
    let packed_v = pack(&v, &lens, &off_kv, HKV, S, filler);
    let got = Packed::new(b, S)
        .reference(PackedInputs {
            q: &packed_q,
            k: &packed_k,
            v: &packed_v,
            seq_q: &lens,
            seq_kv: &lens,
            offsets_q: &off_q,
            offsets_kv: &off_kv,
        })
        .unwrap();
    let want = Padded::new(b, S).reference(PaddedInputs { q: &q, k: &k, v: &v, seq_q: &lens, seq_kv: &lens }).unwrap();
    assert_packed_eq("O", &got.o, &want.o, &lens, &off_q, HQ, S);
    // The tail past the packed tokens is not written (the reference leaves it 0).
    let used = off_q[b] as usize;
    assert!(got.o[used..].iter().all(|x| x.to_f32() == 0.0));
    // Stats stay padded: equal on the live rows.
    for (i, (g, w)) in got.stats.iter().zip(&want.stats).enumerate() {
        let (seq, row) = (i / (HQ * S), i % S);
        if (row as i32) < lens[seq] {
            assert_eq!(g.to_bits(), w.to_bits(), "Stats row {i}");
        }
    }
}

#[test]
fn packed_backward_is_the_padded_backward_token_for_token() {
    let b = LENS.len();
    let (q, k, v) =
        (random::<bf16>(21, b * HQ * S * D), random::<bf16>(22, b * HKV * S * D), random(23, b * HKV * S * D));
    let d_o = random::<bf16>(24, b * HQ * S * D);
    let lens = LENS.to_vec();
    let fwd = Padded::new(b, S).reference(PaddedInputs { q: &q, k: &k, v: &v, seq_q: &lens, seq_kv: &lens }).unwrap();
    let want = PaddedBackward::new(b, S)
        .reference(PaddedBackwardInputs {
            q: &q,
            k: &k,
            v: &v,
            o: &fwd.o,
            d_o: &d_o,
            stats: &fwd.stats,
            seq_q: &lens,
            seq_kv: &lens,
        })
        .unwrap();
    let (off_q, off_kv) = (offsets(&lens, HQ), offsets(&lens, HKV));
    let filler = bf16::from_f32(-2.25);
    let p = |x: &[bf16], off: &[i64], heads| pack(x, &lens, off, heads, S, filler);
    let (off_q32, off_kv32): (Vec<i32>, Vec<i32>) =
        (off_q.iter().map(|&x| x as i32).collect(), off_kv.iter().map(|&x| x as i32).collect());
    let got = PackedBackward::new(b, S)
        .reference(PackedBackwardInputs {
            q: &p(&q, &off_q, HQ),
            k: &p(&k, &off_kv, HKV),
            v: &p(&v, &off_kv, HKV),
            o: &p(&fwd.o, &off_q, HQ),
            d_o: &p(&d_o, &off_q, HQ),
            stats: &fwd.stats,
            seq_q: &lens,
            seq_kv: &lens,
            offsets_q: &off_q32,
            offsets_kv: &off_kv32,
        })
        .unwrap();
    assert_packed_eq("dQ", &got.d_q, &want.d_q, &lens, &off_q, HQ, S);
    assert_packed_eq("dK", &got.d_k, &want.d_k, &lens, &off_kv, HKV, S);
    assert_packed_eq("dV", &got.d_v, &want.d_v, &lens, &off_kv, HKV, S);
}

#[test]
fn offsets_out_of_place_are_errors_naming_the_port_and_sequence() {
    let b = LENS.len();
    let (q, k, v) =
        (random::<bf16>(31, b * HQ * S * D), random::<bf16>(32, b * HKV * S * D), random(33, b * HKV * S * D));
    let lens = LENS.to_vec();
    let off_q = offsets(&lens, HQ);
    let run = |off_q: &[i64], off_kv: &[i64], lens: &[i32]| {
        Packed::new(b, S)
            .reference(PackedInputs {
                q: &q,
                k: &k,
                v: &v,
                seq_q: lens,
                seq_kv: lens,
                offsets_q: off_q,
                offsets_kv: off_kv,
            })
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let off_kv = offsets(&lens, HKV);
    assert_eq!(run(&off_q, &off_kv, &lens), Ok(()));
    // Sequence 1 (3 tokens of 32 elements from 256) would overlap sequence 3's at 320.
    let mut overlapping = off_kv.clone();
    overlapping[2] = 320;
    overlapping[3] = 320;
    let e = run(&off_q, &overlapping, &lens).unwrap_err();
    assert!(e.contains("sequence 1 of K runs from Ragged_offset_K[1] = 256 for SEQ_LEN_KV[1] = 3 tokens"), "{e}");
    // Past the capacity: 4 sequences × 8 tokens × 64 elements = 2048.
    let mut past = off_q.clone();
    past[4] = 2112;
    let e = run(&past, &off_kv, &lens).unwrap_err();
    assert!(e.contains("Ragged_offset_Q[4] = 2112 is outside the packed Q buffer"), "{e}");
    // A length past the capacity S.
    let mut long = lens.clone();
    long[3] = 9;
    let e = run(&offsets(&long, HQ), &offsets(&long, HKV), &long).unwrap_err();
    assert!(e.contains("SEQ_LEN_Q[3] = 9 is outside 0..=8"), "{e}");
}

#[test]
fn a_packed_port_not_laid_out_thd_does_not_build() {
    let mut g = GraphBuilder::new("bhsd_ragged");
    let mut ins = Vec::new();
    for name in ["q", "k", "v"] {
        // BHSD, not THD.
        ins.push(g.input(name, DataType::BF16, &[2, 2, 8, 16]).unwrap());
    }
    for name in ["seq_q", "seq_kv"] {
        ins.push(g.input(name, DataType::I32, &[2, 1, 1, 1]).unwrap());
    }
    let offsets = g.input("offsets", DataType::I32, &[3, 1, 1, 1]).unwrap();
    ins.extend([offsets; 4]);
    let attrs: Vec<(String, AttrValue)> = vec![("ragged".into(), true.into()), ("padding_mask".into(), true.into())];
    let ins: Vec<cudnn_graph::Operand> = ins.into_iter().map(Into::into).collect();
    let o = g.op("sdpa", &ins, &attrs).unwrap()[0];
    g.output(o, "o", DataType::BF16).unwrap();
    let e = g.build().unwrap_err().to_string();
    assert!(
        e.contains(
            "packed (ragged) port Q [2, 2, 8, 16] has strides [256, 128, 16, 1]; packed sequences are laid out THD \
             (token-major): strides [256, 16, 32, 1]"
        ),
        "{e}"
    );
}

/// Before a GPU execute (cuDNN checks nothing), the host copies of the lengths and offsets go
/// through the same rule, the large tensors read for their dims alone.
#[test]
fn host_values_are_checked_before_an_upload() {
    let b = LENS.len();
    let graph = Packed::new(b, S).graph().unwrap();
    let lens = LENS.to_vec();
    let off_q = offsets(&lens, HQ);
    let off_kv = offsets(&lens, HKV);
    let check = |lens: &[i32], off_q: &[i64], off_kv: &[i64]| {
        cudnn_graph::reference::check_values(
            &graph,
            &[
                ("seq_q", lens.into()),
                ("seq_kv", lens.into()),
                ("offsets_q", off_q.into()),
                ("offsets_kv", off_kv.into()),
            ],
        )
        .map_err(|e| e.to_string())
    };
    assert_eq!(check(&lens, &off_q, &off_kv), Ok(()));
    let mut shifted = off_kv.clone();
    shifted[1] += 1;
    let e = check(&lens, &off_q, &shifted).unwrap_err();
    assert!(
        e.contains("Ragged_offset_K[1] = 257 is not a whole number of K tokens of H·D = 32 elements; sequence 1"),
        "{e}"
    );
    // One of the node's integer inputs left out: named, not skipped.
    let e = cudnn_graph::reference::check_values(&graph, &[("seq_q", lens.as_slice().into())]).unwrap_err().to_string();
    assert!(e.contains("seq_kv"), "{e}");
}
