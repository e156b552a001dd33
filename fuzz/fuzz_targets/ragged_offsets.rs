//! Ragged (packed, THD) attention's value rule and reference: the bytes choose a small ragged
//! `sdpa` or `sdpa_backward` (batch, heads, lengths, masks) and its sequence lengths and ragged
//! offsets, mostly the exact prefix sums, often mutated (shifted by tokens or by single
//! elements, swapped, past the buffer, negative, huge). `Op::check_values` must accept them
//! exactly when a model of the rule does (every length in `0..=S`; every offset a whole number of
//! tokens within `0..=B·S·H·D`; each sequence ending at or before the next one's offset), and
//! never panic; where it accepts, `Op::reference` runs, and a forward's packed O equals, bit for
//! bit on every row within the lengths, the padded attention over the sequences the offsets
//! point at (unpacked here, independently of the runtime). Seeds: `fuzz/corpus/ragged_offsets`.

#![no_main]

use arbitrary::Unstructured;
use cudnn_runtime::dim::Concrete;
use cudnn_runtime::ops::{AttrValue, Op, TensorMeta};
use cudnn_runtime::reference::Array;
use cudnn_runtime::DataType;

const D: i64 = 8;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let _ = run(&mut u);
});

/// One packed tensor: its `[B, H, S, D]` and which lengths and offsets it takes.
struct Packed {
    dims: [i64; 4],
    query_rows: bool,
    offsets: usize,
}

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let backward = u.ratio(1u8, 4u8)?;
    let b = u.int_in_range(1..=4)?;
    let h_kv = *u.choose(&[1i64, 2])?;
    let h_q = h_kv * *u.choose(&[1i64, 2])?;
    let (s_q, s_kv) = (u.int_in_range(1..=6)?, u.int_in_range(1..=6)?);
    if backward && s_q == 1 && s_kv == 1 {
        return Ok(());
    }
    let mut attrs: Vec<(String, AttrValue)> = vec![("ragged".into(), true.into()), ("padding_mask".into(), true.into())];
    if u.arbitrary()? {
        attrs.push(("causal".into(), true.into()));
        if u.arbitrary()? {
            attrs.push(("alignment".into(), "bottom_right".into()));
        }
    }
    if !backward && u.arbitrary()? {
        attrs.push(("training".into(), true.into()));
    }
    let name = if backward { "sdpa_backward" } else { "sdpa" };
    let op = Op::from_call(name, &attrs).expect("a ragged attention call");
    // Q, K, V, O, dO values: small non-zero numbers.
    let mut value = |n: i64| -> arbitrary::Result<Vec<f64>> {
        (0..n).map(|i| Ok((f64::from(u.arbitrary::<u8>()? % 17) - 8.0) / 8.0 + 0.01 * i as f64)).collect()
    };
    let q_dims = [b, h_q, s_q, D];
    let kv_dims = [b, h_kv, s_kv, D];
    let array = |dims: [i64; 4], data: Vec<f64>| Array { dims: dims.to_vec(), data };
    let count = |d: [i64; 4]| d.iter().product::<i64>();
    let (q, k, v) = (value(count(q_dims))?, value(count(kv_dims))?, value(count(kv_dims))?);
    let (o, d_o) = if backward { (value(count(q_dims))?, value(count(q_dims))?) } else { (Vec::new(), Vec::new()) };
    let lens = |u: &mut Unstructured<'_>, s: i64| -> arbitrary::Result<Vec<f64>> {
        (0..b)
            .map(|_| {
                Ok(match u.int_in_range(0..=15)? {
                    0 => -1.0,
                    1 => (s + 1) as f64,
                    _ => u.int_in_range(0..=s)? as f64,
                })
            })
            .collect()
    };
    let (seq_q, seq_kv) = (lens(u, s_q)?, lens(u, s_kv)?);
    // Offsets of Q, K, V, O, in `OFFSET_PORTS` order.
    let packed_dims = [(q_dims, true), (kv_dims, false), (kv_dims, false), (q_dims, true)];
    let mut offsets: Vec<Vec<f64>> = Vec::new();
    for (dims, query_rows) in packed_dims {
        let token = (dims[1] * D) as f64;
        let lens = if query_rows { &seq_q } else { &seq_kv };
        let mut off = vec![0.0];
        for n in lens {
            off.push(off[off.len() - 1] + n.max(0.0) * token);
        }
        for _ in 0..u.int_in_range(0..=2)? {
            let i = u.choose_index(off.len())?;
            off[i] = match u.int_in_range(0..=6)? {
                0 => off[i] + token,
                1 => off[i] - token,
                2 => off[i] + 1.0,
                3 => -token,
                4 => (b * dims[2] * dims[1] * D) as f64 + token,
                5 => f64::from(i32::MAX),
                _ => {
                    let j = u.choose_index(off.len())?;
                    off[j]
                }
            };
        }
        offsets.push(off);
    }
    let stats_dims = [b, h_q, s_q, 1];
    let mut inputs: Vec<Array> = Vec::new();
    for p in op.inputs() {
        let a = match p.name {
            "Q" => array(q_dims, q.clone()),
            "K" => array(kv_dims, k.clone()),
            "V" => array(kv_dims, v.clone()),
            "O" => array(q_dims, o.clone()),
            "dO" => array(q_dims, d_o.clone()),
            "Stats" => array(stats_dims, (0..count(stats_dims)).map(|i| 0.5 + 0.01 * i as f64).collect()),
            "SEQ_LEN_Q" => array([b, 1, 1, 1], seq_q.clone()),
            "SEQ_LEN_KV" => array([b, 1, 1, 1], seq_kv.clone()),
            "Ragged_offset_Q" => array([b + 1, 1, 1, 1], offsets[0].clone()),
            "Ragged_offset_K" => array([b + 1, 1, 1, 1], offsets[1].clone()),
            "Ragged_offset_V" => array([b + 1, 1, 1, 1], offsets[2].clone()),
            "Ragged_offset_O" => array([b + 1, 1, 1, 1], offsets[3].clone()),
            other => panic!("unexpected port {other}"),
        };
        inputs.push(a);
    }
    // Shapes the rule refuses (bottom-right alignment needs nothing more here, but keep the
    // contract: only valid nodes reach the value rule).
    let metas: Vec<TensorMeta<i64>> = inputs
        .iter()
        .zip(op.inputs())
        .map(|(a, p)| {
            let dtype = match p.name {
                "Stats" => DataType::F32,
                n if n.starts_with("SEQ") || n.starts_with("Ragged") => DataType::I32,
                _ => DataType::BF16,
            };
            TensorMeta { dims: a.dims.clone(), dtype }
        })
        .collect();
    if op.infer(&metas, &mut Concrete).is_err() {
        return Ok(());
    }
    let refs: Vec<&Array> = inputs.iter().collect();
    let mut packed = vec![
        Packed { dims: q_dims, query_rows: true, offsets: 0 },
        Packed { dims: kv_dims, query_rows: false, offsets: 1 },
        Packed { dims: kv_dims, query_rows: false, offsets: 2 },
        Packed { dims: q_dims, query_rows: true, offsets: 3 },
    ];
    if backward {
        // dO at O's offsets, the gradients at their tensors': no rule of their own.
        packed.push(Packed { dims: q_dims, query_rows: true, offsets: 3 });
    }
    let model_ok = lengths_ok(&seq_q, s_q)
        && lengths_ok(&seq_kv, s_kv)
        && packed.iter().all(|p| offsets_ok(&offsets[p.offsets], if p.query_rows { &seq_q } else { &seq_kv }, p.dims));
    let checked = op.check_values(&refs);
    assert_eq!(checked.is_ok(), model_ok, "the value rule said {checked:?}; the model {model_ok}");
    if !model_ok {
        return Ok(());
    }
    let outs = op.reference(&refs).expect("accepted values run");
    if backward {
        return Ok(());
    }
    // The padded attention over the sequences the offsets point at.
    let padded_attrs: Vec<(String, AttrValue)> = attrs.into_iter().filter(|(k, _)| k != "ragged").collect();
    let padded_op = Op::from_call("sdpa", &padded_attrs).expect("the padded call");
    let unpack = |data: &[f64], dims: [i64; 4], off: &[f64], lens: &[f64]| -> Array {
        let [_, h, s, _] = dims;
        let mut out = Array { dims: dims.to_vec(), data: vec![0.0; count(dims) as usize] };
        for seq in 0..b {
            for row in 0..lens[seq as usize].max(0.0) as i64 {
                for head in 0..h {
                    for x in 0..D {
                        let f = off[seq as usize] as i64 + row * h * D + head * D + x;
                        // The padded array holds the element at its padded position.
                        let dst = (((seq * h + head) * s + row) * D + x) as usize;
                        out.data[dst] = data[logical(dims, f)];
                    }
                }
            }
        }
        out
    };
    let pq = unpack(&q, q_dims, &offsets[0], &seq_q);
    let pk = unpack(&k, kv_dims, &offsets[1], &seq_kv);
    let pv = unpack(&v, kv_dims, &offsets[2], &seq_kv);
    let lens_q = array([b, 1, 1, 1], seq_q.clone());
    let lens_kv = array([b, 1, 1, 1], seq_kv.clone());
    let want = padded_op.reference(&[&pq, &pk, &pv, &lens_q, &lens_kv]).expect("the padded reference runs");
    for seq in 0..b {
        for row in 0..seq_q[seq as usize] as i64 {
            for head in 0..h_q {
                for x in 0..D {
                    let f = offsets[3][seq as usize] as i64 + row * h_q * D + head * D + x;
                    let got = outs[0].data[logical(q_dims, f)];
                    let w = want[0].data[(((seq * h_q + head) * s_q + row) * D + x) as usize];
                    assert_eq!(got.to_bits(), w.to_bits(), "O: sequence {seq}, row {row}, head {head}, dim {x}");
                }
            }
        }
    }
    Ok(())
}

/// The logical (row-major `[B, H, S, D]`) index of storage element `f` of a THD tensor.
fn logical(dims: [i64; 4], f: i64) -> usize {
    let [_, h, s, d] = dims;
    let (b0, r) = (f / (s * h * d), f % (s * h * d));
    let (s0, r) = (r / (h * d), r % (h * d));
    (((b0 * h + r / d) * s + s0) * d + r % d) as usize
}

fn lengths_ok(lens: &[f64], s: i64) -> bool {
    lens.iter().all(|&n| n >= 0.0 && n <= s as f64)
}

fn offsets_ok(off: &[f64], lens: &[f64], dims: [i64; 4]) -> bool {
    let [b, h, s, d] = dims;
    let token = (h * d) as f64;
    let capacity = (b * s * h * d) as f64;
    let whole = off.iter().all(|&o| o >= 0.0 && o <= capacity && o % token == 0.0);
    whole && (0..b as usize).all(|i| off[i] + lens[i] * token <= off[i + 1])
}
