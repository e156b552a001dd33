//! The composite lowering of attention, as a plain description: the matmul, pointwise,
//! reduction, RNG and reshape operations (and their tensors) that cuDNN's fused attention
//! engines pattern-match, in the order and with the types cudnn-frontend's `CompositeSDPANode`,
//! `CompositeSDPABackwardNode` and (fp8) `SDPAFP8BackwardNode` build them
//! (`scaled_dot_product_flash_attention.h`, `sdpa_fp8_bwd.h`, `matmul_fp8.h`,
//! `attn_score_modifiers.h`, `diagonal_band_mask.h`, `softmax.h`).
//!
//! [`expand`] is pure (no cuDNN): `lower.rs` turns its result into descriptors, the variant pack
//! takes its by-value scalars and workspace tensors from it, and the tests run it on the CPU to
//! check that the subgraph computes what the reference does.

use crate::capabilities::{has, Capability};
use crate::cudnn::Port;
use crate::dim::packed_strides;
use crate::ops::family::OpFamily;
use crate::ops::{PointwiseMode, ReductionMode};
use crate::DataType;

use super::{Sdpa, SdpaPass};

/// Tensor `i` of an [`Expansion`].
pub(crate) type T = usize;

/// What a tensor of the subgraph is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    /// The node's input port `i`, with its own descriptor.
    Input(usize),
    /// The node's output port `i`, with its own descriptor.
    Output(usize),
    /// The node's input port `input` seen with its dims permuted by `perm` (alias dim `k` is
    /// the input's dim `perm[k]`; the strides follow): Kᵀ. Same uid as the input.
    Alias { input: usize, perm: [usize; 4] },
    /// An intermediate that never reaches memory.
    Virtual,
    /// A by-value scalar (`[1, 1, 1, 1]`).
    Scalar(f64),
    /// A device tensor at `offset` bytes into the front of the workspace.
    Workspace { offset: usize },
}

/// A tensor of the subgraph.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SubTensor {
    /// For errors and debugging.
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    /// The uid: the graph tensor's for inputs, outputs and aliases; fresh otherwise.
    pub(crate) uid: i64,
    pub(crate) dims: Vec<i64>,
    pub(crate) strides: Vec<i64>,
    pub(crate) data_type: DataType,
    /// A packed (ragged) tensor: the node's input port holding its ragged offsets, which its
    /// descriptor names (`CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC`). Only the node's own tensors
    /// (an input, an output, Kᵀ) are packed.
    pub(crate) ragged: Option<usize>,
}

/// An operation of the subgraph.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SubOp {
    /// `c = a · b` (batch dims broadcast, heads grouped), with cuDNN's optional M, N, K override
    /// tensors (the per-batch sequence lengths of a padding mask).
    Matmul { a: T, b: T, c: T, m_override: Option<T>, n_override: Option<T>, k_override: Option<T> },
    /// A pointwise mode: `inputs` (1 to 3, in cuDNN's X, B, T order) → `output`, computed in
    /// `compute`, with cuDNN's optional axis attribute.
    Pointwise { mode: PointwiseMode, inputs: Vec<T>, output: T, compute: DataType, axis: Option<i64> },
    /// A reduction of `x` to `y`'s dims (a dim of `y` divides `x`'s: 1, or the KV heads of a
    /// grouped-query gradient).
    Reduction { mode: ReductionMode, x: T, y: T },
    /// Bernoulli(`keep`) samples into `y` from the `seed` and `offset` tensors.
    Rng { keep: f64, seed: T, offset: T, y: T },
    /// `y` is `x` seen with dims permuted by `perm` (a transpose that moves no data).
    Reshape { x: T, y: T, perm: [usize; 4] },
    /// cuDNN's paged cache load: `y` (`[B, H, S_kv, D]`, or Kᵀ `[B, H, D, S_kv]` by its strides)
    /// gathers from the page pool `container` the pages `page_table` names for each sequence's
    /// first `seq_len` tokens.
    PagedCacheLoad { container: T, page_table: T, seq_len: T, y: T },
}

/// The subgraph of one attention node.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Expansion {
    pub(crate) tensors: Vec<SubTensor>,
    /// Operations in order, each with a name (cudnn-frontend's) for errors.
    pub(crate) ops: Vec<(&'static str, SubOp)>,
    /// Bytes of workspace the [`Kind::Workspace`] tensors take, before cuDNN's own.
    pub(crate) workspace_bytes: usize,
}

/// Workspace tensors are aligned to this many bytes (and cuDNN's workspace after them).
pub(crate) const WORKSPACE_ALIGNMENT: usize = 256;

/// What [`expand`] needs to know about the node and the target.
pub(crate) struct Context<'a> {
    /// The node's input tensors, in [`Op::inputs`](crate::ops::Op::inputs) order.
    pub(crate) inputs: &'a [Port<'a>],
    /// The node's output tensors, in [`Op::outputs`](crate::ops::Op::outputs) order.
    pub(crate) outputs: &'a [Port<'a>],
    /// The graph's intermediate (virtual tensor) type.
    pub(crate) intermediate: DataType,
    /// The node's compute type.
    pub(crate) compute: DataType,
    /// The loaded cuDNN's version (`91900`).
    pub(crate) version: usize,
}

/// The value cuDNN's masks write: `-inf` (the lowest finite `f32` before cuDNN 9.10).
pub(crate) fn masked_value(version: usize) -> f64 {
    if has(version, Capability::NegativeInfinityMasks) {
        f64::NEG_INFINITY
    } else {
        f64::from(f32::MIN)
    }
}

struct Builder<'a> {
    cx: &'a Context<'a>,
    op: &'a Sdpa,
    next_uid: &'a mut i64,
    x: Expansion,
}

impl Builder<'_> {
    fn push(
        &mut self,
        name: &'static str,
        kind: Kind,
        uid: i64,
        dims: Vec<i64>,
        strides: Vec<i64>,
        data_type: DataType,
    ) -> T {
        self.x.tensors.push(SubTensor { name, kind, uid, dims, strides, data_type, ragged: None });
        self.x.tensors.len() - 1
    }

    /// Marks tensor `t`, the node's port `port`, packed where the node is ragged.
    fn packed(&mut self, t: T, port: &str) -> T {
        let offsets = super::ragged::packed(self.op).into_iter().find(|p| p.port == port).map(|p| p.offsets_index);
        self.x.tensors[t].ragged = offsets;
        t
    }

    fn fresh(&mut self) -> i64 {
        let uid = *self.next_uid;
        *self.next_uid += 1;
        uid
    }

    fn input(&mut self, port: &str) -> Option<T> {
        let i = self.op.input_index(port)?;
        let t = self.cx.inputs.get(i)?;
        let x = self.push("input", Kind::Input(i), t.uid, t.dims.clone(), t.strides.clone(), t.data_type);
        Some(self.packed(x, port))
    }

    fn output(&mut self, port: &str) -> Option<T> {
        let i = self.op.outputs().iter().position(|p| *p == port)?;
        let t = self.cx.outputs.get(i)?;
        let x = self.push("output", Kind::Output(i), t.uid, t.dims.clone(), t.strides.clone(), t.data_type);
        Some(self.packed(x, port))
    }

    /// Input `port` with its last two dims swapped (Kᵀ, Vᵀ).
    fn transposed(&mut self, port: &str) -> Option<T> {
        let i = self.op.input_index(port)?;
        let t = self.cx.inputs.get(i)?;
        let perm = [0, 1, 3, 2];
        let dims = perm.iter().map(|&p| t.dims[p]).collect();
        let strides = perm.iter().map(|&p| t.strides[p]).collect();
        let x = self.push("transposed", Kind::Alias { input: i, perm }, t.uid, dims, strides, t.data_type);
        // Kᵀ of packed K keeps K's offsets (cudnn-frontend's `reshape_k`).
        Some(self.packed(x, port))
    }

    /// The paged cache load of pool `pool` through table `table` into a virtual tensor of
    /// `dims` and `strides`.
    fn paged_load(
        &mut self,
        name: &'static str,
        pool: &str,
        table: &str,
        seq_len: T,
        dims: [i64; 4],
        strides: &[i64],
    ) -> Option<T> {
        let container = self.input(pool)?;
        let page_table = self.input(table)?;
        let data_type = self.x.tensors[container].data_type;
        let y = self.virt_strided(name, &dims, strides, data_type);
        self.op(name, SubOp::PagedCacheLoad { container, page_table, seq_len, y });
        Some(y)
    }

    fn virt(&mut self, name: &'static str, dims: &[i64], data_type: DataType) -> T {
        let uid = self.fresh();
        self.push(name, Kind::Virtual, uid, dims.to_vec(), packed_strides(dims), data_type)
    }

    fn virt_strided(&mut self, name: &'static str, dims: &[i64], strides: &[i64], data_type: DataType) -> T {
        let uid = self.fresh();
        self.push(name, Kind::Virtual, uid, dims.to_vec(), strides.to_vec(), data_type)
    }

    fn scalar(&mut self, name: &'static str, value: f64, data_type: DataType) -> T {
        let uid = self.fresh();
        self.push(name, Kind::Scalar(data_type.round(value)), uid, vec![1; 4], vec![1; 4], data_type)
    }

    fn workspace(&mut self, name: &'static str, dims: &[i64]) -> T {
        let uid = self.fresh();
        let offset = self.x.workspace_bytes;
        let bytes = dims.iter().product::<i64>().max(0) as usize * DataType::F32.size_bytes();
        self.x.workspace_bytes = offset + bytes.div_ceil(WORKSPACE_ALIGNMENT) * WORKSPACE_ALIGNMENT;
        self.push(name, Kind::Workspace { offset }, uid, dims.to_vec(), packed_strides(dims), DataType::F32)
    }

    fn op(&mut self, name: &'static str, op: SubOp) {
        self.x.ops.push((name, op));
    }

    /// A pointwise op into a new virtual tensor shaped like `like`.
    fn pw(
        &mut self,
        name: &'static str,
        mode: PointwiseMode,
        inputs: &[T],
        like: T,
        (out_type, compute): (DataType, DataType),
        axis: Option<i64>,
    ) -> T {
        let dims = self.x.tensors[like].dims.clone();
        let strides = self.x.tensors[like].strides.clone();
        let output = self.virt_strided(name, &dims, &strides, out_type);
        self.op(name, SubOp::Pointwise { mode, inputs: inputs.to_vec(), output, compute, axis });
        output
    }

    /// A pointwise op in the node's compute type into the intermediate type.
    fn arith(&mut self, name: &'static str, mode: PointwiseMode, inputs: &[T], like: T) -> T {
        let (inter, comp) = (self.cx.intermediate, self.cx.compute);
        self.pw(name, mode, inputs, like, (inter, comp), None)
    }

    fn matmul(&mut self, name: &'static str, a: T, b: T, c: T, overrides: [Option<T>; 3]) {
        let [m_override, n_override, k_override] = overrides;
        self.op(name, SubOp::Matmul { a, b, c, m_override, n_override, k_override });
    }

    /// cudnn-frontend's `MatmulFP8Node`: `a · b` into the intermediate type (summed over each
    /// group of heads where `c` has fewer than `a`), times both descales; `Amax_C` is the max
    /// magnitude of that, and `c` is it times `scale_c` in `c`'s (fp8) type.
    fn fp8_matmul(&mut self, name: &'static str, (a, b): (T, T), scales: [&str; 3], (c, amax_c): (&str, &str), overrides: [Option<T>; 3]) -> Option<()> {
        use PointwiseMode as M;
        let c = self.output(c)?;
        let amax_c = self.output(amax_c)?;
        let [descale_a, descale_b, scale_c] = scales.map(|s| self.input(s));
        let (a_dims, b_dims) = (&self.x.tensors[a].dims, &self.x.tensors[b].dims);
        let full = [a_dims[0], a_dims[1], a_dims[2], b_dims[3]];
        let inter = self.cx.intermediate;
        let mut acc = self.virt(name, &full, inter);
        self.matmul(name, a, b, acc, overrides);
        if self.x.tensors[c].dims[1] != full[1] {
            let dims = self.x.tensors[c].dims.clone();
            let reduced = self.virt("gqa_c", &dims, inter);
            self.op("gqa_c", SubOp::Reduction { mode: ReductionMode::Sum, x: acc, y: reduced });
            acc = reduced;
        }
        acc = self.arith("descale_a", M::Mul, &[acc, descale_a?], acc);
        acc = self.arith("descale_b", M::Mul, &[acc, descale_b?], acc);
        let compute = self.cx.compute;
        self.op("scale_c", SubOp::Pointwise { mode: M::Mul, inputs: vec![acc, scale_c?], output: c, compute, axis: None });
        self.op("amax_c", SubOp::Reduction { mode: ReductionMode::Amax, x: acc, y: amax_c });
        Some(())
    }

    /// `x` times the node's scalar input `port` (a descale or scale of fp8 attention).
    fn times(&mut self, name: &'static str, x: T, port: &str) -> Option<T> {
        let factor = self.input(port)?;
        Some(self.arith(name, PointwiseMode::Mul, &[x, factor], x))
    }

    /// `select(s, -inf, keep)`.
    fn select(&mut self, name: &'static str, s: T, keep: T) -> T {
        let masked = masked_value(self.cx.version);
        let fill = self.scalar("masked_value", masked, DataType::F32);
        self.arith(name, PointwiseMode::BinarySelect, &[s, fill, keep], s)
    }

    /// cudnn-frontend's `padding_mask`: rows past `SEQ_LEN_Q` and columns past `SEQ_LEN_KV`.
    fn padding_mask(&mut self, s: T, seq_q: T, seq_kv: T) -> T {
        use PointwiseMode as M;
        let (i32_, bool_) = (DataType::I32, DataType::Bool);
        let row = self.pw("gen_row_idx_padding", M::GenIndex, &[s], s, (i32_, i32_), Some(2));
        let col = self.pw("gen_col_idx_padding", M::GenIndex, &[s], s, (i32_, i32_), Some(3));
        let row_ok = self.pw("lt_row_sq_padding", M::CmpLt, &[row, seq_q], s, (bool_, bool_), None);
        let col_ok = self.pw("lt_col_skv_padding", M::CmpLt, &[col, seq_kv], s, (bool_, bool_), None);
        let keep = self.pw("and_row_col_padding", M::LogicalAnd, &[row_ok, col_ok], s, (bool_, bool_), None);
        self.select("select_padding", s, keep)
    }

    /// cudnn-frontend's `sliding_window_mask` (right bound 0 when causal; left bound the window),
    /// each bound a composite diagonal band mask.
    fn band_masks(&mut self, mut s: T, s_q: i64, s_kv: i64, seq: Option<(T, T)>) -> T {
        use PointwiseMode as M;
        let (i32_, f32_, bool_) = (DataType::I32, DataType::F32, DataType::Bool);
        let comp = self.cx.compute;
        let bottom_right = self.op.bottom_right();
        if self.op.causal {
            let mut row = self.pw("gen_row_index", M::GenIndex, &[s], s, (i32_, comp), Some(2));
            let col = self.pw("gen_col_index", M::GenIndex, &[s], s, (i32_, comp), Some(3));
            if bottom_right {
                let (sq_t, skv_t) = match seq {
                    Some(pair) => pair,
                    None => (self.scalar("s_q", s_q as f64, i32_), self.scalar("s_kv", s_kv as f64, i32_)),
                };
                row = self.pw("row+skv", M::Add, &[row, skv_t], s, (i32_, i32_), Some(3));
                row = self.pw("row+skv-sq", M::Sub, &[row, sq_t], s, (i32_, i32_), Some(3));
            }
            let keep = self.pw("row>=col", M::CmpGe, &[row, col], s, (bool_, bool_), None);
            s = self.select("right_bound_select", s, keep);
        }
        if let Some(w) = self.op.window {
            let row = self.pw("gen_row_index", M::GenIndex, &[s], s, (i32_, comp), Some(2));
            let mut col = self.pw("gen_col_index", M::GenIndex, &[s], s, (i32_, comp), Some(3));
            match (bottom_right, seq) {
                (false, _) => {
                    let lb = self.scalar("left_bound", w as f64, f32_);
                    col = self.pw("col+window", M::Add, &[col, lb], s, (f32_, f32_), Some(3));
                }
                (true, None) => {
                    let lb = self.scalar("left_bound", (w - s_kv + s_q) as f64, f32_);
                    col = self.pw("col+window", M::Add, &[col, lb], s, (f32_, f32_), Some(3));
                }
                (true, Some((sq_t, skv_t))) => {
                    let lb = self.scalar("left_bound", w as f64, i32_);
                    col = self.pw("col+window", M::Add, &[col, lb], s, (i32_, i32_), Some(3));
                    col = self.pw("col+window-skv", M::Sub, &[col, skv_t], s, (i32_, i32_), Some(3));
                    col = self.pw("col+window-skv+sq", M::Add, &[col, sq_t], s, (i32_, i32_), Some(3));
                }
            }
            let keep = self.pw("col>row", M::CmpGt, &[col, row], s, (bool_, bool_), None);
            s = self.select("left_bound_select", s, keep);
        }
        s
    }
}

/// Dims of the node with these input tensors (in [`Op::inputs`](crate::ops::Op::inputs) order): `(b, h_q, s_q, d_qk,
/// h_k, s_kv, h_v, d_v)`; `s_kv` is a paged cache's capacity. `None` unless Q, K and V are 4-d.
pub(crate) fn dims(op: &Sdpa, inputs: &[Port<'_>]) -> Option<[i64; 8]> {
    let (q, k, v) = (inputs.first()?, inputs.get(1)?, inputs.get(2)?);
    if q.dims.len() != 4 || k.dims.len() != 4 || v.dims.len() != 4 {
        return None;
    }
    let s_kv = match op.input_index(super::paged::TABLE_PORTS[0]) {
        Some(i) if op.paged => super::paged::capacity(op, inputs.get(i)?.dims.get(2)?, &k.dims[2])?,
        _ => k.dims[2],
    };
    Some([q.dims[0], q.dims[1], q.dims[2], q.dims[3], k.dims[1], s_kv, v.dims[1], v.dims[3]])
}

/// The composite subgraph of `op` (a validated node), fresh uids counting from `next_uid`.
/// `None` if the node's tensors are not the shape rule's (a graph that did not validate).
pub(crate) fn expand(op: &Sdpa, cx: &Context<'_>, next_uid: &mut i64) -> Option<Expansion> {
    let mut bld = Builder { cx, op, next_uid, x: Expansion::default() };
    match op.pass {
        SdpaPass::Forward => forward(&mut bld)?,
        SdpaPass::Backward => backward(&mut bld)?,
    }
    Some(bld.x)
}

/// The scale tensor: the `Attn_scale` input, or a by-value `f32`.
fn scale_tensor(bld: &mut Builder<'_>, d_qk: i64) -> Option<T> {
    match bld.op.literal_scale(d_qk) {
        Some(s) => Some(bld.scalar("attn_scale", s, DataType::F32)),
        None => bld.input("Attn_scale"),
    }
}

/// The forward as cudnn-frontend's `CompositeSDPANode` builds it: Kᵀ and V (gathered from their
/// pools when paged), the scaled and masked scores, the softmax and its statistics, dropout, and
/// `O = P·V` (through the fp8 matmul for fp8 attention).
// Long because it is cudnn-frontend's forward graph node by node, in its order; every step reads
// tensors several steps back (Q, the masks' lengths, the dropout mask), which one scope keeps in view.
fn forward(bld: &mut Builder<'_>) -> Option<()> {
    use PointwiseMode as M;
    let [b, h_q, s_q, d_qk, h_k, s_kv, h_v, d_v] = dims(bld.op, bld.cx.inputs)?;
    let inter = bld.cx.intermediate;
    let q = bld.input("Q")?;
    let seq = match (bld.input("SEQ_LEN_Q"), bld.input("SEQ_LEN_KV")) {
        (Some(a), Some(c)) => Some((a, c)),
        _ => None,
    };
    let (kt, v) = if bld.op.paged {
        // cudnn-frontend's `CompositeSDPANode`: Kᵀ and V gathered from their pools into
        // virtual tensors, Kᵀ `[B, H_k, D, S_kv]` column-major in its last two dims.
        let seq_kv = seq?.1;
        let kt_strides = [d_qk * s_kv * h_k, d_qk * s_kv, 1, d_qk];
        let kt = bld.paged_load("paged_k_cache_operation", "K", "Page_table_K", seq_kv, [b, h_k, d_qk, s_kv], &kt_strides)?;
        let v_dims = [b, h_v, s_kv, d_v];
        let v = bld.paged_load("paged_v_cache_operation", "V", "Page_table_V", seq_kv, v_dims, &packed_strides(&v_dims))?;
        (kt, v)
    } else {
        (bld.transposed("K")?, bld.input("V")?)
    };
    let scores = [b, h_q, s_q, s_kv];
    let mut s = bld.virt("bmm1", &scores, inter);
    bld.matmul("bmm1", q, kt, s, [seq.map(|p| p.0), seq.map(|p| p.1), None]);
    let scale = scale_tensor(bld, d_qk)?;
    s = bld.arith("attn_scale", M::Mul, &[s, scale], s);
    if bld.op.fp8.is_some() {
        s = bld.times("descale_q", s, "Descale_Q")?;
        s = bld.times("descale_k", s, "Descale_K")?;
    }
    if let Some(bias) = bld.input("Bias") {
        s = bld.arith("bias_add", M::Add, &[s, bias], s);
    }
    if let Some((sq_t, skv_t)) = seq {
        s = bld.padding_mask(s, sq_t, skv_t);
    }
    s = bld.band_masks(s, s_q, s_kv, seq);

    // Softmax, with the log-sum-exp statistics (virtual in inference).
    let row = [b, h_q, s_q, 1];
    let max = bld.virt("Max", &row, inter);
    bld.op("Max", SubOp::Reduction { mode: ReductionMode::Max, x: s, y: max });
    let centered = bld.arith("sub_M", M::Sub, &[s, max], s);
    let e = bld.arith("exp_sub_M", M::Exp, &[centered], s);
    let sum = bld.virt("SumExp", &row, inter);
    bld.op("sum", SubOp::Reduction { mode: ReductionMode::Sum, x: e, y: sum });
    let log = bld.arith("log", M::Log, &[sum], sum);
    let stats = match bld.output("Stats") {
        Some(t) => t,
        None => bld.virt("Stats", &row, inter),
    };
    bld.op(
        "add",
        SubOp::Pointwise { mode: M::Add, inputs: vec![max, log], output: stats, compute: bld.cx.compute, axis: None },
    );
    let mut p = bld.arith("softmax", M::Div, &[e, sum], s);

    if let Some(prob) = bld.op.dropout {
        let seed = bld.input("Seed")?;
        let offset = bld.input("Offset")?;
        let mask = bld.virt("rng", &scores, inter);
        bld.op("rng", SubOp::Rng { keep: 1.0 - prob, seed, offset, y: mask });
        p = bld.arith("dropout_mask_mul", M::Mul, &[p, mask], p);
        let scale = bld.scalar("dropout_scale", 1.0 / (1.0 - prob), DataType::F32);
        p = bld.arith("dropout_scale", M::Mul, &[p, scale], p);
    }
    if bld.op.fp8.is_some() {
        // cudnn-frontend: the amax of P before its scale, then P · Scale_S quantized to the fp8
        // type by the cast below.
        let amax_s = bld.output("Amax_S")?;
        bld.op("amax_s", SubOp::Reduction { mode: ReductionMode::Amax, x: p, y: amax_s });
        p = bld.times("scale_s", p, "Scale_S")?;
    }
    // cuDNN takes the second matmul's A in the I/O type.
    bld.x.tensors[p].data_type = bld.x.tensors[q].data_type;
    let overrides = [seq.map(|p| p.0), None, seq.map(|p| p.1)];
    if bld.op.fp8.is_some() {
        return bld.fp8_matmul("bmm2", (p, v), ["Descale_S", "Descale_V", "Scale_O"], ("O", "Amax_O"), overrides);
    }
    let o = bld.output("O")?;
    bld.matmul("bmm2", p, v, o, overrides);
    Some(())
}

/// fp8 attention's backward as cudnn-frontend's `SDPAFP8BackwardNode` builds it (per-tensor
/// scaling): the softmax sum `Σ dO·O` descaled, the scores descaled and masked, `P` scaled into
/// the fp8 type for `dV = Pᵀ·dO`, `dP` descaled, the `dS` amax and scale into fp8 for
/// `dQ = dS·K` and `dK = dSᵀ·Q`, each gradient through a [`Builder::fp8_matmul`]. No workspace.
fn backward_fp8(bld: &mut Builder<'_>) -> Option<()> {
    use PointwiseMode as M;
    let [b, h_q, s_q, d_qk, _, s_kv, _, d_v] = dims(bld.op, bld.cx.inputs)?;
    let inter = bld.cx.intermediate;
    let io_type = bld.cx.inputs.first()?.data_type;
    let q = bld.input("Q")?;
    let kt = bld.transposed("K")?;
    let vt = bld.transposed("V")?;
    let (o, d_o, stats) = (bld.input("O")?, bld.input("dO")?, bld.input("Stats")?);
    let seq = match (bld.input("SEQ_LEN_Q"), bld.input("SEQ_LEN_KV")) {
        (Some(a), Some(c)) => Some((a, c)),
        _ => None,
    };
    let (sq_t, skv_t) = (seq.map(|p| p.0), seq.map(|p| p.1));
    let scale = scale_tensor(bld, d_qk)?;

    // softmax_sum = Descale_dO · Descale_O · Σ_d dO·O (virtual).
    let dod = bld.virt("mul_dO_O", &[b, h_q, s_q, d_v], inter);
    let compute = bld.cx.compute;
    bld.op("mul_dO_O", SubOp::Pointwise { mode: M::Mul, inputs: vec![d_o, o], output: dod, compute, axis: None });
    let mut sum = bld.virt("reduce_dO", &[b, h_q, s_q, 1], inter);
    bld.op("reduce_dO", SubOp::Reduction { mode: ReductionMode::Sum, x: dod, y: sum });
    sum = bld.times("descale_dO", sum, "Descale_dO")?;
    let softmax_sum = bld.times("descale_O", sum, "Descale_O")?;

    // P = exp(scale · Descale_Q · Descale_K · Q·Kᵀ, masked, − Stats); P8 = P · Scale_S in fp8.
    let scores = [b, h_q, s_q, s_kv];
    let mut s = bld.virt("bmm_Q_K", &scores, inter);
    bld.matmul("bmm_Q_K", q, kt, s, [sq_t, skv_t, None]);
    s = bld.arith("attn_scale", M::Mul, &[s, scale], s);
    s = bld.times("descale_q", s, "Descale_Q")?;
    s = bld.times("descale_k", s, "Descale_K")?;
    if let Some((a, c)) = seq {
        s = bld.padding_mask(s, a, c);
    }
    s = bld.band_masks(s, s_q, s_kv, seq);
    s = bld.arith("sub_dV_Stats", M::Sub, &[s, stats], s);
    let exp_s = bld.arith("exp_dV", M::Exp, &[s], s);
    let p = bld.times("scale_S", exp_s, "Scale_S")?;
    bld.x.tensors[p].data_type = io_type;

    // dV = Pᵀ·dO through the fp8 matmul.
    let transposed = [b, h_q, s_kv, s_q];
    let transposed_strides = [h_q * s_q * s_kv, s_q * s_kv, 1, s_kv];
    let pt = bld.virt_strided("S_T", &transposed, &transposed_strides, io_type);
    bld.op("S_transpose", SubOp::Reshape { x: p, y: pt, perm: [0, 1, 3, 2] });
    let scales = ["Descale_S", "Descale_dO", "Scale_dV"];
    bld.fp8_matmul("bmm_S_T_dO", (pt, d_o), scales, ("dV", "Amax_dV"), [skv_t, None, sq_t])?;

    // dS = (Descale_dO · Descale_V · dO·Vᵀ − softmax_sum) ⊙ P · scale; its amax; dS8 in fp8.
    let mut dp = bld.virt("bmm_dO_V_T", &scores, inter);
    bld.matmul("bmm_dO_V_T", d_o, vt, dp, [sq_t, skv_t, None]);
    dp = bld.times("descale_dO", dp, "Descale_dO")?;
    dp = bld.times("descale_V", dp, "Descale_V")?;
    dp = bld.arith("sub_dP_softmax_sum", M::Sub, &[dp, softmax_sum], dp);
    dp = bld.arith("mul_dP_exp_S", M::Mul, &[dp, exp_s], dp);
    dp = bld.arith("mul_dS_attn_scale", M::Mul, &[dp, scale], dp);
    let amax_dp = bld.output("Amax_dP")?;
    bld.op("amax_dP", SubOp::Reduction { mode: ReductionMode::Amax, x: dp, y: amax_dp });
    dp = bld.times("scale_dP", dp, "Scale_dP")?;
    bld.x.tensors[dp].data_type = io_type;

    // dQ = dS·K (K seen again through Kᵀ) and dK = dSᵀ·Q, through the fp8 matmul.
    let k = reshape_k(bld, kt);
    let scales = ["Descale_dP", "Descale_K", "Scale_dQ"];
    bld.fp8_matmul("bmm_dP_K", (dp, k), scales, ("dQ", "Amax_dQ"), [sq_t, None, skv_t])?;
    let dpt = bld.virt_strided("dP_T", &transposed, &transposed_strides, io_type);
    bld.op("dP_T", SubOp::Reshape { x: dp, y: dpt, perm: [0, 1, 3, 2] });
    let scales = ["Descale_dP", "Descale_Q", "Scale_dK"];
    bld.fp8_matmul("bmm_dP_T_Q", (dpt, q), scales, ("dK", "Amax_dK"), [skv_t, None, sq_t])
}

/// K as a reshape of its transposed alias Kᵀ (cudnn-frontend's `reshape_K`).
fn reshape_k(bld: &mut Builder<'_>, kt: T) -> T {
    let kt_t = &bld.x.tensors[kt];
    let k_dims = vec![kt_t.dims[0], kt_t.dims[1], kt_t.dims[3], kt_t.dims[2]];
    let k_strides = vec![kt_t.strides[0], kt_t.strides[1], kt_t.strides[3], kt_t.strides[2]];
    let k_type = kt_t.data_type;
    let k = bld.virt_strided("reshape_k", &k_dims, &k_strides, k_type);
    bld.op("reshape_k", SubOp::Reshape { x: kt, y: k, perm: [0, 1, 3, 2] });
    k
}

/// The backward as cudnn-frontend's `CompositeSDPABackwardNode` builds it: the softmax sum
/// `Σ dO·O`, `P` recomputed from the statistics, then `dV = Pᵀ·dO`, `dS`, `dK = dSᵀ·Q` and
/// `dQ = dS·K`, each gradient summed over a KV head's group where heads are shared.
// Long because it is cudnn-frontend's backward graph node by node, in its order (its sections are
// commented); P, dS, the dropout mask and the scale flow through several sections each.
fn backward(bld: &mut Builder<'_>) -> Option<()> {
    if bld.op.fp8.is_some() {
        return backward_fp8(bld);
    }
    use PointwiseMode as M;
    let [b, h_q, s_q, d_qk, h_k, s_kv, h_v, d_v] = dims(bld.op, bld.cx.inputs)?;
    let inter = bld.cx.intermediate;
    let io_type = bld.cx.inputs.first()?.data_type;
    let q = bld.input("Q")?;
    let kt = bld.transposed("K")?;
    let vt = bld.transposed("V")?;
    let o = bld.input("O")?;
    let d_o = bld.input("dO")?;
    let stats = bld.input("Stats")?;
    let seq = match (bld.input("SEQ_LEN_Q"), bld.input("SEQ_LEN_KV")) {
        (Some(a), Some(c)) => Some((a, c)),
        _ => None,
    };
    let (sq_t, skv_t) = (seq.map(|p| p.0), seq.map(|p| p.1));
    let scale = scale_tensor(bld, d_qk)?;
    let dropout = match bld.op.dropout {
        Some(prob) => {
            let seed = bld.input("Seed")?;
            let offset = bld.input("Offset")?;
            let scale = bld.scalar("dropout_scale", 1.0 / (1.0 - prob), DataType::F32);
            let scale_inv = bld.scalar("dropout_scale_inv", 1.0 - prob, DataType::F32);
            Some((seed, offset, prob, scale, scale_inv))
        }
        None => None,
    };
    let scores = [b, h_q, s_q, s_kv];
    let mask = dropout.map(|(seed, offset, prob, ..)| {
        let y = bld.virt("rng", &scores, inter);
        bld.op("rng", SubOp::Rng { keep: 1.0 - prob, seed, offset, y });
        y
    });
    // The dQ accumulator (before the softmax sum, as cudnn-frontend lays the workspace out):
    // in f32 unless the dP-workspace algorithm (deterministic, or with dBias) writes dQ itself.
    let use_dp_workspace = bld.op.d_bias || bld.op.deterministic;
    let dq_accum = (!use_dp_workspace).then(|| bld.workspace("dQ_accum", &[b, h_q, s_q, d_qk]));

    // softmax_sum = Σ_d dO·O (· (1 - p)), a workspace tensor.
    let row = [b, h_q, s_q, 1];
    let dod = bld.virt_strided("mul_dO_O", &[b, h_q, s_q, d_v], &[h_q * s_q * d_v, s_q * d_v, h_q * d_v, 1], inter);
    bld.op(
        "mul_dO_O",
        SubOp::Pointwise { mode: M::Mul, inputs: vec![d_o, o], output: dod, compute: bld.cx.compute, axis: None },
    );
    let red = bld.virt("reduce_dO_o", &row, inter);
    bld.op("reduce_dO_o", SubOp::Reduction { mode: ReductionMode::Sum, x: dod, y: red });
    let factor = match dropout {
        Some((.., scale_inv)) => scale_inv,
        None => bld.scalar("one", 1.0, DataType::F32),
    };
    let softmax_sum = bld.workspace("softmax_sum", &row);
    bld.op(
        "scale_dropout_inv",
        SubOp::Pointwise {
            mode: M::Mul,
            inputs: vec![red, factor],
            output: softmax_sum,
            compute: bld.cx.compute,
            axis: None,
        },
    );

    // P = exp(scale · Q·Kᵀ (+ bias), masked, - stats).
    let mut s = bld.virt("matmul_Q_KT", &scores, inter);
    bld.matmul("matmul_Q_KT", q, kt, s, [sq_t, skv_t, None]);
    s = bld.arith("mul_s_attn_scale", M::Mul, &[s, scale], s);
    if let Some(bias) = bld.input("Bias") {
        s = bld.arith("bias_add", M::Add, &[s, bias], s);
    }
    if let Some((a, c)) = seq {
        s = bld.padding_mask(s, a, c);
    }
    s = bld.arith("sub_s_m", M::Sub, &[s, stats], s);
    if let Some((a, c)) = seq {
        if !has(bld.cx.version, Capability::NegativeInfinityMasks) {
            // Before cuDNN 9.10 the padding value is needed again after the statistics.
            s = bld.padding_mask(s, a, c);
        }
    }
    s = bld.band_masks(s, s_q, s_kv, seq);
    let exp_s = bld.arith("exp_s", M::Exp, &[s], s);
    let mut p = exp_s;
    if let (Some(mask), Some((.., scale_d, _))) = (mask, dropout) {
        p = bld.arith("mul_p_dropout_mask", M::Mul, &[p, mask], p);
        p = bld.arith("mul_p_dropout_scale", M::Mul, &[p, scale_d], p);
    }

    // dV = Pᵀ · dO, summed over each KV head's group.
    let transposed = [b, h_q, s_kv, s_q];
    let transposed_strides = [h_q * s_q * s_kv, s_q * s_kv, 1, s_kv];
    let pt = bld.virt_strided("reshape_p", &transposed, &transposed_strides, io_type);
    bld.op("reshape_p", SubOp::Reshape { x: p, y: pt, perm: [0, 1, 3, 2] });
    let dv = bld.output("dV")?;
    if h_q == h_v {
        bld.matmul("matmul_pT_dO", pt, d_o, dv, [skv_t, None, sq_t]);
    } else {
        let full = bld.virt("dV_fullhead", &[b, h_q, s_kv, d_v], io_type);
        bld.matmul("matmul_pT_dO", pt, d_o, full, [skv_t, None, sq_t]);
        bld.op("red_dV_head", SubOp::Reduction { mode: ReductionMode::Sum, x: full, y: dv });
    }

    // dS = P ⊙ (dP ⊙ mask − softmax_sum) (· dropout scale).
    let mut dp = bld.virt("matmul_dO_VT", &scores, inter);
    bld.matmul("matmul_dO_VT", d_o, vt, dp, [sq_t, skv_t, None]);
    if let Some(mask) = mask {
        dp = bld.arith("dP_dropout_mask", M::Mul, &[dp, mask], dp);
    }
    dp = bld.arith("sub_dP_softmax_sum", M::Sub, &[dp, softmax_sum], dp);
    let mut ds = bld.arith("mul_dP_exp_s", M::Mul, &[dp, exp_s], dp);
    if let Some((.., scale_d, _)) = dropout {
        ds = bld.arith("mul_dS_dropout_scale", M::Mul, &[ds, scale_d], ds);
    }
    if let Some(d_bias) = bld.output("dBias") {
        bld.op("red_dP_dBias", SubOp::Reduction { mode: ReductionMode::Sum, x: ds, y: d_bias });
    }
    ds = bld.arith("mul_dS_attn_scale", M::Mul, &[ds, scale], ds);

    // dK = dSᵀ · Q, summed over each KV head's group.
    let dst = bld.virt_strided("reshape_dS", &transposed, &transposed_strides, io_type);
    bld.op("reshape_dS", SubOp::Reshape { x: ds, y: dst, perm: [0, 1, 3, 2] });
    let dk = bld.output("dK")?;
    if h_q == h_k {
        bld.matmul("matmul_dST_Q", dst, q, dk, [skv_t, None, sq_t]);
    } else {
        let full = bld.virt("dK_fullhead", &[b, h_q, s_kv, d_qk], io_type);
        bld.matmul("matmul_dST_Q", dst, q, full, [skv_t, None, sq_t]);
        bld.op("red_dK_head", SubOp::Reduction { mode: ReductionMode::Sum, x: full, y: dk });
    }

    // dQ = dS · K (K seen again through Kᵀ).
    let k = reshape_k(bld, kt);
    let dq = bld.output("dQ")?;
    match dq_accum {
        Some(acc) => {
            bld.matmul("matmul_dS_K", ds, k, acc, [sq_t, None, skv_t]);
            bld.op(
                "identity_dQ",
                SubOp::Pointwise {
                    mode: M::Identity,
                    inputs: vec![acc],
                    output: dq,
                    compute: bld.cx.compute,
                    axis: None,
                },
            );
        }
        None => bld.matmul("matmul_dS_K", ds, k, dq, [sq_t, None, skv_t]),
    }
    Some(())
}
