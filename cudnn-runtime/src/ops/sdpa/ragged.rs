//! Ragged (packed, THD) attention (`ragged = true`): batches of sequences of mixed lengths
//! stored back to back, each at the element offset a ragged offset tensor gives (cuDNN's
//! `CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC`, cudnn-frontend's `set_ragged_offset`).
//!
//! ```text
//! Q                [B, H_q, S_q, D_qk]  strides [S_q·H_q·D_qk, D_qk, H_q·D_qk, 1] (THD: token-major)
//! Ragged_offset_Q  [B + 1, 1, 1, 1]     i32 or i64: sequence b's first element is Ragged_offset_Q[b]
//! SEQ_LEN_Q        [B, 1, 1, 1]         i32: its tokens
//! ```
//!
//! Element `(b, h, s, d)` of a packed tensor is at `Ragged_offset[b] + s·H·D + h·D + d` instead
//! of `b·S·H·D + s·H·D + h·D + d`: with offsets `0, L_0·H·D, (L_0 + L_1)·H·D, ..` the sequences
//! sit back to back (the exclusive prefix sum of the lengths, times `H·D`). `S_q` and `S_kv` are
//! the longest sequences the graph takes. The buffers hold `B·S·H·D` elements, the padded
//! capacity, unless the node bounds its packed tokens: with `max_total_seq_len_q = T_q` (Q, O,
//! dO, dQ) and `max_total_seq_len_kv = T_kv` (K, V, dK, dV), cudnn-frontend's names, a buffer
//! needs only `T·H·D` elements (a serving step of 64 sequences of up to 4096 tokens, 8192 tokens
//! in all: 1/32 of the padded size). The packed tokens fill the buffer's front. Only rows within
//! the sequence lengths are read or written: cuDNN writes no padding rows of a packed O (or dQ,
//! dK, dV), which would be the next sequence's. (The CPU reference's arrays are logical
//! `[B, H, S, D]`: its host buffers keep the padded capacity.)
//!
//! Packed are Q, K, V and O (forward), or Q, K, V, O, dO, dQ, dK and dV (backward), each through
//! its own offsets input, in this order: `Ragged_offset_Q`, `Ragged_offset_K`,
//! `Ragged_offset_V`, `Ragged_offset_O` (pass one tensor several times where the layouts agree).
//! dO is read at O's offsets, dQ, dK, dV written at Q's, K's, V's. Over a paged cache
//! (`paged = true`, forward) K and V are page pools: only Q and O are packed, which is how a
//! serving step mixes prefill (many query tokens) and decode (one) sequences in one call. `Stats`
//! stays padded `[B, H_q, S_q, 1]`.
//!
//! Rules: `padding_mask = true` (cuDNN's: ragged offsets need the sequence lengths), no `fp8`;
//! the offsets `[B + 1, 1, 1, 1]`, all `i32` or all `i64` (shape rule, so `graph!` reports them at
//! compile time); `max_total_seq_len_q`/`_kv` only with `ragged`, within `1..=B·S` (and no
//! `max_total_seq_len_kv` over a paged cache, whose keys are pages, not packed); packed ports
//! laid out THD ([`crate::ops::Op::check_layout`], when the graph is validated); and before a
//! node runs, on the values ([`crate::ops::Op::check_values`]): every offset a whole number of
//! tokens, each sequence within the buffer and before the next (`Ragged_offset[b] + L_b·H·D <=
//! Ragged_offset[b + 1] <= T·H·D`, `T` the bound or `B·S`), each length within `0..=S`. cuDNN
//! checks none of it and reads or writes out of bounds otherwise.
//!
//! The CPU reference unpacks the packed inputs into the padded batch, runs the padded attention
//! (padding mask, and the paged cache's gather), and packs the outputs back, writing only the
//! rows within the lengths (the rest of a packed output is 0).

use super::{rule, Sdpa, SdpaPass};
use crate::ops::family::OpFamily;
use crate::array::Array;
use crate::ops::shape::{ShapeError, StridedMeta};

/// The offsets inputs, in input order.
pub const OFFSET_PORTS: [&str; 4] = ["Ragged_offset_Q", "Ragged_offset_K", "Ragged_offset_V", "Ragged_offset_O"];

/// A port of the node, input or output, by index in [`Op::inputs`](crate::ops::Op::inputs) or [`Op::outputs`](crate::ops::Op::outputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Input `i`.
    Input(usize),
    /// Output `i`.
    Output(usize),
}

/// One packed tensor of a ragged node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed {
    /// Its port name (`Q`, `dO`, ...).
    pub port: &'static str,
    /// Where the node has it.
    pub slot: Slot,
    /// The input holding its offsets (one of [`OFFSET_PORTS`]).
    pub offsets: &'static str,
    /// Its offsets' index in [`Op::inputs`](crate::ops::Op::inputs).
    pub offsets_index: usize,
    /// Its rows per sequence come from `SEQ_LEN_Q` (`true`) or `SEQ_LEN_KV`.
    pub query_rows: bool,
}

/// The packed tensors of `op`, in port order (inputs, then outputs); empty unless `ragged`.
/// The one table the reference, the value and layout rules, the lowering and the JSON codec
/// read.
pub fn packed(op: &Sdpa) -> Vec<Packed> {
    if !op.ragged {
        return Vec::new();
    }
    // (port, where, offsets, query rows)
    let table: &[(&'static str, bool, &'static str, bool)] = match op.pass {
        SdpaPass::Forward => &[
            ("Q", true, "Ragged_offset_Q", true),
            ("K", true, "Ragged_offset_K", false),
            ("V", true, "Ragged_offset_V", false),
            ("O", false, "Ragged_offset_O", true),
        ],
        SdpaPass::Backward => &[
            ("Q", true, "Ragged_offset_Q", true),
            ("K", true, "Ragged_offset_K", false),
            ("V", true, "Ragged_offset_V", false),
            ("O", true, "Ragged_offset_O", true),
            ("dO", true, "Ragged_offset_O", true),
            ("dQ", false, "Ragged_offset_Q", true),
            ("dK", false, "Ragged_offset_K", false),
            ("dV", false, "Ragged_offset_V", false),
        ],
    };
    let outputs = op.outputs();
    table
        .iter()
        .filter_map(|&(port, input, offsets, query_rows)| {
            let offsets_index = op.input_index(offsets)?;
            let slot = if input {
                Slot::Input(op.input_index(port)?)
            } else {
                Slot::Output(outputs.iter().position(|p| *p == port)?)
            };
            Some(Packed { port, slot, offsets, offsets_index, query_rows })
        })
        .collect()
}

/// The ragged offsets of sequences of `lens` tokens packed back to back in a THD tensor of
/// `heads` heads of `head_dim`: the exclusive prefix sum of the lengths times `heads · head_dim`,
/// `lens.len() + 1` entries (the last is the packed elements' count). `None` if a length is
/// negative or the sum overflows `i64`.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::ops::sdpa::ragged::thd_offsets;
/// // Three sequences of 5, 0 and 2 tokens of 8 heads of 64.
/// assert_eq!(thd_offsets(&[5, 0, 2], 8, 64), Some(vec![0, 2560, 2560, 3584]));
/// assert_eq!(thd_offsets(&[-1], 8, 64), None);
/// ```
pub fn thd_offsets(lens: &[i32], heads: i64, head_dim: i64) -> Option<Vec<i64>> {
    let token = heads.checked_mul(head_dim)?;
    let mut out = Vec::with_capacity(lens.len() + 1);
    let mut at = 0i64;
    out.push(at);
    for &n in lens {
        if n < 0 {
            return None;
        }
        at = at.checked_add(i64::from(n).checked_mul(token)?)?;
        out.push(at);
    }
    Some(out)
}

/// The offsets input of packed port `port` (`dO` is read at O's offsets, the gradients written
/// at their tensors'); `None` for a port that is never packed.
pub fn offsets_port_of(port: &str) -> Option<&'static str> {
    Some(match port {
        "Q" | "dQ" => OFFSET_PORTS[0],
        "K" | "dK" => OFFSET_PORTS[1],
        "V" | "dV" => OFFSET_PORTS[2],
        "O" | "dO" => OFFSET_PORTS[3],
        _ => return None,
    })
}

/// The packed tokens port `p`'s buffer holds when the node bounds them (`max_total_seq_len_q`
/// for the ports whose rows are the queries', `max_total_seq_len_kv` for the keys'); `None`:
/// `B·S`, the padded capacity.
pub fn total_tokens(op: &Sdpa, p: &Packed) -> Option<i64> {
    if p.query_rows {
        op.max_total_seq_len_q
    } else {
        op.max_total_seq_len_kv
    }
}

/// The bounds on the packed tokens and their attribute names.
fn totals(op: &Sdpa) -> [(&'static str, Option<i64>); 2] {
    [("max_total_seq_len_q", op.max_total_seq_len_q), ("max_total_seq_len_kv", op.max_total_seq_len_kv)]
}

/// The rules on `ragged` and the other attributes.
pub(super) fn check_attributes(op: &Sdpa) -> Result<(), ShapeError> {
    let name = op.pass.name();
    for (attr, total) in totals(op) {
        let Some(n) = total else { continue };
        let fail = |r: String| Err(ShapeError { attr: Some(attr), ..rule(name, None, r) });
        if !op.ragged {
            return fail(format!(
                "`{attr} = {n}` bounds the tokens of packed sequences; add `ragged = true` or leave it out"
            ));
        }
        if n < 1 {
            return fail(format!("`{attr}` must be at least 1, found {n}"));
        }
        if op.paged && attr == "max_total_seq_len_kv" {
            return fail(format!(
                "`{attr} = {n}`: over a paged cache the keys are in page pools, not packed; leave it out"
            ));
        }
    }
    if !op.ragged {
        return Ok(());
    }
    let fail = |r: &str| Err(ShapeError { attr: Some("ragged"), ..rule(name, None, r.to_string()) });
    if !op.padding_mask {
        return fail(
            "packed (ragged) sequences need their lengths: add `padding_mask = true` and the SEQ_LEN_Q, SEQ_LEN_KV \
             inputs (cuDNN supports ragged offsets only with a padding mask)",
        );
    }
    if op.fp8.is_some() {
        return fail("cudnn-graph does not lower fp8 attention over packed (ragged) sequences; leave out `fp8` or `ragged`");
    }
    Ok(())
}

/// The bounds on the packed tokens against the padded capacity, where the dims are known: at
/// most `B·S_q` query and `B·S_kv` key tokens (a larger bound would let the offsets run past the
/// tensor cuDNN's descriptor spans).
pub(super) fn check_totals(op: &Sdpa, b: Option<i64>, s_q: Option<i64>, s_kv: Option<i64>) -> Result<(), ShapeError> {
    for ((attr, total), s) in totals(op).into_iter().zip([s_q, s_kv]) {
        let (Some(n), Some(b), Some(s)) = (total, b, s) else { continue };
        let most = b.saturating_mul(s);
        if n > most {
            let which = if attr.ends_with("_q") { "S_q" } else { "S_kv" };
            return Err(ShapeError {
                attr: Some(attr),
                ..rule(
                    op.pass.name(),
                    None,
                    format!("`{attr} = {n}` is more than B·{which} = {b}·{s} = {most}, the padded batch's tokens"),
                )
            });
        }
    }
    Ok(())
}

/// The THD strides of a packed `[B, H, S, D]` tensor: `[S·H·D, D, H·D, 1]`.
pub fn thd_strides(dims: &[i64]) -> Option<Vec<i64>> {
    let [_, h, s, d] = *dims else { return None };
    let hd = h.checked_mul(d)?;
    Some(vec![s.checked_mul(hd)?, d, hd, 1])
}

/// Every packed port is laid out THD ([`thd_strides`]): the offsets count whole tokens of
/// `H·D` elements, and the reference reads packed memory so.
pub(super) fn check_layout(op: &Sdpa, inputs: &[StridedMeta<'_>], outputs: &[StridedMeta<'_>]) -> Result<(), ShapeError> {
    for p in packed(op) {
        let (t, arg) = match p.slot {
            Slot::Input(i) => (inputs.get(i), Some(i)),
            Slot::Output(i) => (outputs.get(i), None),
        };
        let Some(t) = t else { continue };
        let want = thd_strides(t.dims);
        if want.as_deref() != Some(t.strides) {
            let want = want.map_or_else(|| "[S·H·D, D, H·D, 1]".to_string(), |w| format!("{w:?}"));
            return Err(rule(
                op.pass.name(),
                arg,
                format!(
                    "packed (ragged) port {} {:?} has strides {:?}; packed sequences are laid out THD (token-major): \
                     strides {want}, declared `order [0, 2, 1, 3]` in `graph!`",
                    p.port, t.dims, t.strides
                ),
            ));
        }
    }
    Ok(())
}

/// `[B, H, S, D]` of a packed tensor of the node, from its inputs (an output's from Q, K, V: O
/// is `[B, H_q, S_q, D_v]`, the gradients are their inputs' dims).
fn dims_of(p: &Packed, inputs: &[&Array]) -> Option<[i64; 4]> {
    let four = |i: usize| -> Option<[i64; 4]> { inputs.get(i)?.dims.as_slice().try_into().ok() };
    match (p.slot, p.port) {
        (Slot::Input(i), _) => four(i),
        (Slot::Output(_), "O") => {
            let (q, v) = (four(0)?, four(2)?);
            Some([q[0], q[1], q[2], v[3]])
        }
        (Slot::Output(_), "dQ") => four(0),
        (Slot::Output(_), "dK") => four(1),
        (Slot::Output(_), _) => four(2),
    }
}

/// Checks the values a ragged node reads before it runs: every length within `0..=S`, and for
/// every packed tensor every offset a whole number of tokens, each sequence within the buffer
/// and before the next. The error names the port, the sequence and the bound.
pub(crate) fn check_values(op: &Sdpa, inputs: &[&Array]) -> Result<(), ShapeError> {
    if !op.ragged {
        return Ok(());
    }
    let name = op.pass.name();
    let get = |port: &str| op.input_index(port).and_then(|i| inputs.get(i).copied());
    let (Some(q), Some(seq_q), Some(seq_kv)) = (get("Q"), get("SEQ_LEN_Q"), get("SEQ_LEN_KV")) else { return Ok(()) };
    let b = q.dims.first().copied().unwrap_or(0).max(0) as usize;
    let s_q = q.dims.get(2).copied().unwrap_or(0);
    let s_kv = get("K").and_then(|k| k.dims.get(2).copied()).unwrap_or(0);
    // A paged cache's lengths are checked against its capacity ([`super::paged::check_values`]).
    let checks = [(seq_q, "SEQ_LEN_Q", s_q), (seq_kv, "SEQ_LEN_KV", s_kv)];
    for (lens, port, bound) in checks.into_iter().take(if op.paged { 1 } else { 2 }) {
        for (seq, &n) in lens.data.iter().enumerate().take(b) {
            if !(n >= 0.0 && n <= bound as f64 && n.fract() == 0.0) {
                let what = if port == "SEQ_LEN_Q" { "S_q, Q's rows" } else { "S_kv, the keys" };
                return Err(rule(
                    name,
                    op.input_index(port),
                    format!("{port}[{seq}] = {n} is outside 0..={bound} ({what}); sequence {seq} of a packed batch"),
                ));
            }
        }
    }
    for p in packed(op) {
        let Some([_, h, s, d]) = dims_of(&p, inputs) else { continue };
        let Some(offsets) = inputs.get(p.offsets_index) else { continue };
        let lens = if p.query_rows { seq_q } else { seq_kv };
        let token = h.saturating_mul(d).max(1);
        let (tokens, what) = match total_tokens(op, &p) {
            Some(n) if p.query_rows => (n, "max_total_seq_len_q·H·D"),
            Some(n) => (n, "max_total_seq_len_kv·H·D"),
            None => ((b as i64).saturating_mul(s), "B·S·H·D"),
        };
        let capacity = tokens.saturating_mul(token);
        let fail = |msg: String| Err(rule(name, Some(p.offsets_index), msg));
        let off = |i: usize| offsets.data.get(i).copied().unwrap_or(0.0);
        for seq in 0..=b {
            let o = off(seq);
            if !(o >= 0.0 && o.fract() == 0.0 && o <= capacity as f64) {
                return fail(format!(
                    "{}[{seq}] = {o} is outside the packed {} buffer: offsets of {} are within 0..={capacity} \
                     ({what} elements); sequence {seq}",
                    p.offsets, p.port, p.port
                ));
            }
            if o as i64 % token != 0 {
                return fail(format!(
                    "{}[{seq}] = {o} is not a whole number of {} tokens of H·D = {token} elements; sequence {seq}",
                    p.offsets, p.port
                ));
            }
            if seq < b {
                let len = lens.data.get(seq).copied().unwrap_or(0.0);
                let end = o + len * token as f64;
                if end > off(seq + 1) {
                    let lens_port = if p.query_rows { "SEQ_LEN_Q" } else { "SEQ_LEN_KV" };
                    let (offsets, next) = (p.offsets, off(seq + 1));
                    return fail(format!(
                        "sequence {seq} of {} runs from {offsets}[{seq}] = {o} for {lens_port}[{seq}] = {len} tokens \
                         of {token} elements to {end}, past {offsets}[{}] = {next}, where the next one starts: \
                         offsets are in order, each at least the previous sequence's tokens after it",
                        p.port,
                        seq + 1,
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The flat index of logical element `(b, h, s, d)` of a `[B, H, S, D]` array whose memory is
/// THD: storage element `f` is token `f / (H·D)`, i.e. `(b, s) = (t / S, t % S)`.
fn logical_of_storage(dims: [i64; 4], f: i64) -> Option<usize> {
    let [b, h, s, d] = dims;
    let (hd, shd) = (h * d, s * h * d);
    if f < 0 || f >= b * shd {
        return None;
    }
    let (b0, r) = (f / shd, f % shd);
    let (s0, r) = (r / hd, r % hd);
    let (h0, d0) = (r / d, r % d);
    usize::try_from(((b0 * h + h0) * s + s0) * d + d0).ok()
}

/// Calls `each(packed, padded)` for every element within the lengths: its flat index in the
/// packed array's logical order and in the padded `[B, H, S, D]` batch.
fn each_valid(dims: [i64; 4], offsets: &Array, lens: &Array, mut each: impl FnMut(usize, usize)) {
    let [b, h, s, d] = dims;
    for seq in 0..b {
        let base = offsets.data.get(seq as usize).copied().unwrap_or(0.0) as i64;
        let len = (lens.data.get(seq as usize).copied().unwrap_or(0.0).max(0.0) as i64).min(s);
        for row in 0..len {
            for head in 0..h {
                for x in 0..d {
                    let Some(packed) = logical_of_storage(dims, base + row * h * d + head * d + x) else { continue };
                    each(packed, (((seq * h + head) * s + row) * d + x) as usize);
                }
            }
        }
    }
}

/// The padded batch a packed array holds: `[B, H, S, D]` with sequence `b`'s first `lens[b]`
/// rows read at its offset, the rest 0.
pub(super) fn unpack(packed: &Array, dims: [i64; 4], offsets: &Array, lens: &Array) -> Array {
    let mut out = Array::zeros(&dims);
    each_valid(dims, offsets, lens, |src, dst| out.data[dst] = packed.data.get(src).copied().unwrap_or(0.0));
    out
}

/// The packed array of a padded batch: the inverse of [`unpack`] on the rows within the
/// lengths; storage no sequence owns is 0.
pub(super) fn pack(padded: &Array, dims: [i64; 4], offsets: &Array, lens: &Array) -> Array {
    let mut out = Array::zeros(&dims);
    each_valid(dims, offsets, lens, |dst, src| {
        if let (Some(o), Some(&v)) = (out.data.get_mut(dst), padded.data.get(src)) {
            *o = v;
        }
    });
    out
}

/// The reference of a ragged node: `padded` (the padded attention) over the unpacked inputs,
/// its packed outputs packed back. `None` for a node that is not ragged. Validated values only
/// ([`check_values`]).
pub(super) fn reference(
    op: &Sdpa,
    inputs: &[&Array],
    padded: impl FnOnce(&[&Array]) -> Vec<Array>,
) -> Option<Vec<Array>> {
    if !op.ragged {
        return None;
    }
    let get = |port: &str| op.input_index(port).and_then(|i| inputs.get(i).copied());
    let (seq_q, seq_kv) = (get("SEQ_LEN_Q")?, get("SEQ_LEN_KV")?);
    let tensors = packed(op);
    let lens = |p: &Packed| if p.query_rows { seq_q } else { seq_kv };
    let mut unpacked: Vec<(usize, Array)> = Vec::new();
    for p in &tensors {
        if let Slot::Input(i) = p.slot {
            let dims = dims_of(p, inputs)?;
            unpacked.push((i, unpack(inputs[i], dims, inputs[p.offsets_index], lens(p))));
        }
    }
    let mut dense = inputs.to_vec();
    for (i, a) in &unpacked {
        dense[*i] = a;
    }
    let mut outs = padded(&dense);
    for p in &tensors {
        if let Slot::Output(i) = p.slot {
            let dims = dims_of(p, inputs)?;
            let out = outs.get(i)?;
            let packed = pack(out, dims, inputs[p.offsets_index], lens(p));
            outs[i] = packed;
        }
    }
    Some(outs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thd_storage_maps_to_the_logical_bhsd_index() {
        // [B=2, H=2, S=3, D=2]: storage element 2·3·2 + 1·2·2 + 1·2 + 1 = 19 is (b 1, s 1, h 1, d 1).
        let dims = [2, 2, 3, 2];
        assert_eq!(logical_of_storage(dims, 19), Some((((2 + 1) * 3 + 1) * 2 + 1) as usize));
        assert_eq!(logical_of_storage(dims, 24), None);
        assert_eq!(logical_of_storage(dims, -1), None);
        assert_eq!(thd_strides(&dims), Some(vec![12, 2, 4, 1]));
    }

    #[test]
    fn pack_inverts_unpack_on_live_rows() {
        let dims = [3, 2, 4, 2];
        let token = 4.0;
        let lens = Array { dims: vec![3, 1, 1, 1], data: vec![2.0, 4.0, 1.0] };
        let offsets = Array { dims: vec![4, 1, 1, 1], data: vec![0.0, 2.0 * token, 6.0 * token, 7.0 * token] };
        let packed = Array::from_fn(&dims, |i| 1.0 + i as f64);
        let padded = unpack(&packed, dims, &offsets, &lens);
        let again = pack(&padded, dims, &offsets, &lens);
        // Storage elements 0..28 are the 7 tokens; their logical positions come back, the rest is 0.
        for f in 0..(3 * 4 * 2 * 2) {
            let i = logical_of_storage(dims, f).unwrap();
            let want = if f < 28 { packed.data[i] } else { 0.0 };
            assert_eq!(again.data[i], want, "storage element {f}");
        }
        // Sequence 1's row 3 (token 5 of the pack) is padded row (1, h, 3).
        let t5 = logical_of_storage(dims, 5 * 4 + 2 + 1).unwrap();
        let at = |b: usize, h: usize, s: usize, d: usize| ((b * 2 + h) * 4 + s) * 2 + d;
        assert_eq!(padded.data[at(1, 1, 3, 1)], packed.data[t5]);
        // Past the lengths the padded batch is 0.
        assert_eq!(padded.data[at(0, 0, 2, 0)], 0.0);
    }
}
