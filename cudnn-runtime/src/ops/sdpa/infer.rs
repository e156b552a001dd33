//! Attention's shape and type rule, one function per rule, in the order they are checked: the
//! attributes, ranks, types, then each relation between Q, K and V's dims, then the optional
//! ports, then the outputs. Every support rule that depends only on shapes, types and attributes
//! is here too, so the `graph!` macro reports it at expansion.

use super::{paged, ragged, rule, takes, Sdpa, SdpaPass};
use crate::ops::family::OpFamily;
use crate::dim::{shape_string, Dim, DimCx};
use crate::ops::shape::{OutputMeta, ShapeError, ShapeErrorKind, TensorMeta};
use crate::ops::signature::PortSpec;
use crate::DataType;

/// Q, K and V, their dims by name, and their shapes as messages print them.
struct Qkv<'a, D> {
    q: &'a TensorMeta<D>,
    k: &'a TensorMeta<D>,
    v: &'a TensorMeta<D>,
    qs: String,
    ks: String,
    vs: String,
    /// The key sequence length: K's, or a paged cache's capacity.
    s_kv: D,
    /// K and V are page pools.
    paged: bool,
}

impl<'a, D: Dim> Qkv<'a, D> {
    fn new(op: &Sdpa, inputs: &'a [TensorMeta<D>], ports: &[PortSpec]) -> Result<Self, ShapeError> {
        let (q, k, v) = (&inputs[0], &inputs[1], &inputs[2]);
        let table = ports.iter().position(|p| p.name == paged::TABLE_PORTS[0]).map(|i| &inputs[i]);
        let s_kv = match table {
            Some(table) if op.paged => paged::capacity(op, &table.dims[2], &k.dims[2]).ok_or_else(|| {
                rule(
                    op.pass.name(),
                    Some(1),
                    format!(
                        "the paged cache's capacity, table width {} × page size {}, exceeds i64::MAX",
                        table.dims[2], k.dims[2]
                    ),
                )
            })?,
            _ => k.dims[2].clone(),
        };
        let (qs, ks, vs) = (shape_string(&q.dims), shape_string(&k.dims), shape_string(&v.dims));
        Ok(Qkv { q, k, v, qs, ks, vs, s_kv, paged: op.paged })
    }
    fn b(&self) -> &'a D {
        &self.q.dims[0]
    }
    fn h_q(&self) -> &'a D {
        &self.q.dims[1]
    }
    fn s_q(&self) -> &'a D {
        &self.q.dims[2]
    }
    fn d_qk(&self) -> &'a D {
        &self.q.dims[3]
    }
    fn s_kv(&self) -> &D {
        &self.s_kv
    }
    fn d_v(&self) -> &'a D {
        &self.v.dims[3]
    }
}

impl Sdpa {

    /// Bottom-right alignment and windows need S_q <= S_kv unless the actual lengths come from
    /// the padding mask.
    fn aligned_lengths<D: Dim>(&self, op: &'static str, t: &Qkv<'_, D>) -> Result<(), ShapeError> {
        if self.padding_mask || !(self.bottom_right() || self.window.is_some()) {
            return Ok(());
        }
        if let (Some(sq), Some(skv)) = (t.s_q().as_lit(), t.s_kv().as_lit()) {
            if sq > skv {
                let what = if self.window.is_some() { "a sliding window" } else { "bottom-right causal masking" };
                return Err(rule(
                    op,
                    Some(0),
                    format!(
                        "{what} needs S_q <= S_kv without a padding mask, but Q is {} and K is {} \
                         (S_q = {sq} > S_kv = {skv})",
                        t.qs, t.ks
                    ),
                ));
            }
        }
        Ok(())
    }

    /// cuDNN's backward does not take S_q = S_kv = 1.
    fn backward_lengths<D: Dim>(&self, op: &'static str, t: &Qkv<'_, D>) -> Result<(), ShapeError> {
        if self.pass == SdpaPass::Backward && t.s_q().as_lit() == Some(1) && t.s_kv().as_lit() == Some(1) {
            return Err(rule(
                op,
                Some(0),
                format!("S_q = S_kv = 1 is not supported by cuDNN's backward (Q is {})", t.qs),
            ));
        }
        Ok(())
    }

    /// The ports beyond Q, K and V that the attributes add: each of its dims (a `true` in
    /// `want` lets that dim be 1 too) and its type.
    fn optional_ports<D: Dim>(
        &self,
        op: &'static str,
        inputs: &[TensorMeta<D>],
        ports: &[PortSpec],
        t: &Qkv<'_, D>,
        cx: &mut impl DimCx<D>,
    ) -> Result<(), ShapeError> {
        let mut expect = |name: &'static str,
                          want: &[(&D, bool)],
                          form: &str,
                          dtype_ok: &dyn Fn(DataType) -> bool,
                          types: &str|
         -> Result<(), ShapeError> {
            let Some(i) = ports.iter().position(|p| p.name == name) else { return Ok(()) };
            port_fits(op, name, i, &inputs[i], want, form, cx)?;
            if !dtype_ok(inputs[i].dtype) {
                return Err(rule(op, Some(i), format!("port {name} is {} but must be {types}", inputs[i].dtype)));
            }
            Ok(())
        };
        let one = D::lit(1);
        let (b, h_q, s_q, s_kv) = (t.b(), t.h_q(), t.s_q(), t.s_kv());
        if self.pass == SdpaPass::Backward {
            let q_dtype = t.q.dtype;
            let same = |dt: DataType| dt == q_dtype;
            let q_type = format!("{q_dtype} (the type of Q)");
            let rows: Vec<(&D, bool)> = [b, h_q, s_q, t.d_v()].into_iter().map(|d| (d, false)).collect();
            // fp8 attention's backward too takes O and dO in the fp8 type, as cudnn-frontend's
            // samples and tests give them (the forward writes O in it).
            expect("O", &rows, "[B, H_q, S_q, D_v]", &same, &q_type)?;
            expect("dO", &rows, "[B, H_q, S_q, D_v]", &same, &q_type)?;
            expect(
                "Stats",
                &[(b, false), (h_q, false), (s_q, false), (&one, false)],
                "[B, H_q, S_q, 1]",
                &|dt| dt == DataType::F32,
                "f32",
            )?;
        }
        expect("Attn_scale", &[(&one, false); 4], "[1, 1, 1, 1]", &|dt| dt == DataType::F32, "f32")?;
        for &name in self.pass.fp8_inputs() {
            expect(name, &[(&one, false); 4], "[1, 1, 1, 1]", &|dt| dt == DataType::F32, "f32")?;
        }
        expect(
            "Bias",
            &[(b, true), (h_q, true), (s_q, false), (s_kv, false)],
            "[1 or B, 1 or H_q, S_q, S_kv]",
            &|dt| dt != DataType::Bool,
            "a numeric type (not bool)",
        )?;
        for name in ["SEQ_LEN_Q", "SEQ_LEN_KV"] {
            expect(
                name,
                &[(b, false), (&one, false), (&one, false), (&one, false)],
                "[B, 1, 1, 1]",
                &|dt| dt == DataType::I32,
                "i32",
            )?;
        }
        for name in ["Seed", "Offset"] {
            expect(
                name,
                &[(&one, false); 4],
                "[1, 1, 1, 1]",
                &|dt| matches!(dt, DataType::I64 | DataType::I32),
                "i64 or i32",
            )?;
        }
        if self.paged {
            paged_ports(self, inputs, ports, (b, &t.k.dims[2]), cx)?;
        }
        offsets_ports(self, inputs, ports, b, cx)
    }

    /// The outputs: O (and Stats in training) forward; dQ, dK, dV (and dBias) backward.
    fn outputs_meta<D: Dim>(&self, inputs: &[TensorMeta<D>], ports: &[PortSpec], t: &Qkv<'_, D>) -> Vec<OutputMeta<D>> {
        let (b, h_q, s_q) = (t.b(), t.h_q(), t.s_q());
        match self.pass {
            SdpaPass::Forward => {
                let o = vec![b.clone(), h_q.clone(), s_q.clone(), t.d_v().clone()];
                // fp8 attention writes O in Q's fp8 type: cuDNN 9.19 on Hopper refuses a bf16 or
                // f16 O ("only supported on Blackwell with cuDNN 9.13.0 and newer").
                let reason = self.fp8.map(|_| FP8_OUTPUT_REASON);
                let mut outs = vec![OutputMeta { dims: o, dtype: self.fp8, reason }];
                if self.training {
                    outs.push(OutputMeta {
                        dims: vec![b.clone(), h_q.clone(), s_q.clone(), D::lit(1)],
                        dtype: Some(DataType::F32),
                        reason: None,
                    });
                }
                if self.fp8.is_some() {
                    // Amax_S, Amax_O.
                    let amax = OutputMeta { dims: vec![D::lit(1); 4], dtype: Some(DataType::F32), reason: None };
                    outs.extend([amax.clone(), amax]);
                }
                outs
            }
            SdpaPass::Backward => {
                // fp8 attention writes its gradients in its fp8 type (cuDNN 9.19 on Hopper refuses
                // bf16 or f16 ones).
                let (dtype, reason) = (self.fp8, self.fp8.map(|_| FP8_GRADIENT_REASON));
                let grad = |dims: &Vec<D>| OutputMeta { dims: dims.clone(), dtype, reason };
                let mut outs = vec![grad(&t.q.dims), grad(&t.k.dims), grad(&t.v.dims)];
                if self.fp8.is_some() {
                    // Amax_dQ, Amax_dK, Amax_dV, Amax_dP.
                    let amax = OutputMeta { dims: vec![D::lit(1); 4], dtype: Some(DataType::F32), reason: None };
                    outs.extend(std::iter::repeat_n(amax, 4));
                }
                if self.d_bias {
                    // `check_attributes` made sure there is a bias. cuDNN writes dBias in the
                    // I/O type (an f32 dBias finds no engine).
                    let bias = ports.iter().position(|p| p.name == "Bias");
                    let dims = bias.map(|i| inputs[i].dims.clone()).unwrap_or_default();
                    outs.push(OutputMeta { dims, dtype: Some(t.q.dtype), reason: None });
                }
                outs
            }
        }
    }
}

/// The shape and type rule; also every support rule that depends only on shapes, types and
/// attributes.
pub(super) fn infer<D: Dim>(
    sdpa: &Sdpa,
    inputs: &[TensorMeta<D>],
    cx: &mut impl DimCx<D>,
) -> Result<Vec<OutputMeta<D>>, ShapeError> {
    let op = sdpa.pass.name();
    let ports = sdpa.inputs();
    sdpa.check_attributes()?;
    ranks(op, inputs, &ports)?;
    sdpa.types(op, inputs)?;
    let t = Qkv::new(sdpa, inputs, &ports)?;
    batches(op, &t, cx)?;
    head_dims(op, &t, cx)?;
    sequence_lengths(op, &t, cx)?;
    grouped_heads(op, &t)?;
    score_size(op, &t)?;
    sdpa.head_dim_rule(op, &t)?;
    sdpa.aligned_lengths(op, &t)?;
    sdpa.backward_lengths(op, &t)?;
    ragged::check_totals(sdpa, t.b().as_lit(), t.s_q().as_lit(), t.s_kv().as_lit())?;
    sdpa.optional_ports(op, inputs, &ports, &t, cx)?;
    Ok(sdpa.outputs_meta(inputs, &ports, &t))
}

/// Why fp8 attention's O is in its fp8 type (the error for a bf16 or f16 O quotes it).
const FP8_OUTPUT_REASON: &str = "fp8 attention writes O in its fp8 type: a bf16 or f16 output of fp8 attention is \
     only supported on Blackwell with cuDNN 9.13.0 and newer, and cuDNN 9.19 refuses it on Hopper";

/// Why fp8 attention's gradients are in its fp8 type.
const FP8_GRADIENT_REASON: &str = "fp8 attention's backward writes dQ, dK and dV in its fp8 type: a bf16 or f16 \
     gradient of fp8 attention is only supported on Blackwell with cuDNN 9.13.0 and newer, and cuDNN 9.19 refuses it \
     on Hopper";

fn is_fp8(dtype: DataType) -> bool {
    matches!(dtype, DataType::Fp8E4M3 | DataType::Fp8E5M2)
}

/// Every port of attention is 4-d.
fn ranks<D: Dim>(op: &'static str, inputs: &[TensorMeta<D>], ports: &[PortSpec]) -> Result<(), ShapeError> {
    for (i, (t, p)) in inputs.iter().zip(ports).enumerate() {
        if t.dims.len() != 4 {
            return Err(ShapeError::at(
                i,
                ShapeErrorKind::Rank {
                    op,
                    port: p.name,
                    expected: "rank 4 ([B, H, S, D])".into(),
                    found: t.dims.len(),
                    shape: shape_string(&t.dims),
                },
            ));
        }
    }
    Ok(())
}

impl Sdpa {
    /// Q is f16 or bf16 (the `fp8` attribute's type with it), and K and V have its type.
    fn types<D: Dim>(&self, op: &'static str, inputs: &[TensorMeta<D>]) -> Result<(), ShapeError> {
        let q = &inputs[0];
        let fp8 = is_fp8(q.dtype);
        match (self.fp8, fp8) {
            (Some(mode), _) if q.dtype != mode => {
                return Err(rule(
                    op,
                    Some(0),
                    format!(
                        "port Q is {} but `fp8 = {}` attention takes {mode} Q, K and V",
                        q.dtype,
                        self.fp8_mode().unwrap_or_default()
                    ),
                ));
            }
            (None, true) => {
                let mode = if q.dtype == DataType::Fp8E4M3 { "e4m3" } else { "e5m2" };
                let after = match self.pass {
                    SdpaPass::Forward => "Q, K, V",
                    SdpaPass::Backward => "Q, K, V, O, dO, Stats",
                };
                let ports = self.pass.fp8_inputs();
                return Err(rule(
                    op,
                    Some(0),
                    format!(
                        "port Q is {}: fp8 attention needs `fp8 = {mode}` and the inputs {} after {after}",
                        q.dtype,
                        ports.join(", ")
                    ),
                ));
            }
            _ => {}
        }
        if !fp8 && !takes(q.dtype) {
            return Err(ShapeError::at(0, ShapeErrorKind::DType { op, port: "Q", found: q.dtype, expected: "f16 or bf16" }));
        }
        for (i, name) in [(1usize, "K"), (2, "V")] {
            if inputs[i].dtype != q.dtype {
                return Err(rule(
                    op,
                    Some(i),
                    format!("port {name} is {} but Q is {}; Q, K and V must have one type", inputs[i].dtype, q.dtype),
                ));
            }
        }
        Ok(())
    }

    /// cuDNN's fp16/bf16 attention needs head dims that are multiples of 8; its fp8 attention
    /// multiples of 16, at most 256 (`sdpa_support_surface.h`; Blackwell's own limits are
    /// checked when a plan is built).
    fn head_dim_rule<D: Dim>(&self, op: &'static str, t: &Qkv<'_, D>) -> Result<(), ShapeError> {
        let (multiple, max, what, bound) = match self.fp8 {
            Some(_) => (16, 256, "fp8", "a multiple of 16, at most 256"),
            None => (8, i64::MAX, "fp16/bf16", "a multiple of 8"),
        };
        for (i, name, d, shape) in [(0usize, "Q", t.d_qk(), &t.qs), (2, "V", t.d_v(), &t.vs)] {
            if let Some(n) = d.as_lit() {
                if n % multiple != 0 || n > max {
                    return Err(rule(
                        op,
                        Some(i),
                        format!("the head dim of {name} {shape} is {d}; cuDNN's {what} attention needs {bound}"),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Q, K and V have one batch size.
fn batches<D: Dim>(op: &'static str, t: &Qkv<'_, D>, cx: &mut impl DimCx<D>) -> Result<(), ShapeError> {
    if t.paged {
        // K and V are page pools; the page tables carry the batch (`paged_ports`).
        return Ok(());
    }
    let b = t.b();
    for (i, name, m, shape) in [(1usize, "K", t.k, &t.ks), (2, "V", t.v, &t.vs)] {
        if !cx.require_eq(b, &m.dims[0]) {
            return Err(rule(
                op,
                Some(i),
                format!(
                    "batch sizes differ: Q is {} and {name} is {shape}, so Q[0] = {b} must equal {name}[0] = {}",
                    t.qs, m.dims[0]
                ),
            ));
        }
    }
    Ok(())
}

/// Q and K have one head dim.
fn head_dims<D: Dim>(op: &'static str, t: &Qkv<'_, D>, cx: &mut impl DimCx<D>) -> Result<(), ShapeError> {
    let (d_qk, d_k) = (t.d_qk(), &t.k.dims[3]);
    if !cx.require_eq(d_qk, d_k) {
        return Err(rule(
            op,
            Some(1),
            format!(
                "head dims differ: Q is {} and K is {}, so Q[3] = {d_qk} must equal K[3] = {d_k}",
                t.qs, t.ks
            ),
        ));
    }
    Ok(())
}

/// K and V have one sequence length.
fn sequence_lengths<D: Dim>(op: &'static str, t: &Qkv<'_, D>, cx: &mut impl DimCx<D>) -> Result<(), ShapeError> {
    if t.paged {
        let (page_k, page_v) = (&t.k.dims[2], &t.v.dims[2]);
        if !cx.require_eq(page_k, page_v) {
            return Err(rule(
                op,
                Some(2),
                format!(
                    "page sizes differ: the K pool is {} and the V pool is {}, so K[2] = {page_k} must equal V[2] = {page_v}",
                    t.ks, t.vs
                ),
            ));
        }
        return Ok(());
    }
    let s_kv = t.s_kv();
    if !cx.require_eq(s_kv, &t.v.dims[2]) {
        return Err(rule(
            op,
            Some(2),
            format!(
                "sequence lengths differ: K is {} and V is {}, so K[2] = {s_kv} must equal V[2] = {}",
                t.ks, t.vs, t.v.dims[2]
            ),
        ));
    }
    Ok(())
}

/// Grouped-query attention: Q's heads are a multiple of K's and of V's (symbolic heads are
/// decided at run time).
fn grouped_heads<D: Dim>(op: &'static str, t: &Qkv<'_, D>) -> Result<(), ShapeError> {
    let h_q = t.h_q();
    for (i, name, h, shape) in [(1usize, "K", &t.k.dims[1], &t.ks), (2, "V", &t.v.dims[1], &t.vs)] {
        let divides = match (h_q.as_lit(), h.as_lit()) {
            (Some(hq), Some(hk)) => hk > 0 && hq % hk == 0,
            // Symbolic: equal names divide; anything else is decided at run time.
            _ => true,
        };
        if !divides {
            return Err(rule(
                op,
                Some(i),
                format!(
                    "Q's heads must be a multiple of {name}'s (grouped-query attention): Q is {} with {h_q} \
                     heads and {name} is {shape} with {h}, and {h_q} % {h} != 0",
                    t.qs
                ),
            ));
        }
    }
    Ok(())
}

/// The scores `[B, H_q, S_q, S_kv]` exist in every lowering (a virtual tensor, the composite's
/// workspace, the reference's arrays) though no port holds them: Q and K each within the size
/// limit do not bound their product.
fn score_size<D: Dim>(op: &'static str, t: &Qkv<'_, D>) -> Result<(), ShapeError> {
    let (b, h_q, s_q, s_kv) = (t.b(), t.h_q(), t.s_q(), t.s_kv());
    if D::product(&[b.clone(), h_q.clone(), s_q.clone(), s_kv.clone()]).is_none() {
        return Err(rule(
            op,
            None,
            format!(
                "Q {} and K {} give attention scores [{b}, {h_q}, {s_q}, {s_kv}] of more than i64::MAX elements",
                t.qs, t.ks
            ),
        ));
    }
    Ok(())
}

impl Sdpa {
    /// The rules on attributes alone (cudnn-frontend's, independent of the GPU and the cuDNN
    /// version).
    pub(super) fn check_attributes(&self) -> Result<(), ShapeError> {
        let op = self.pass.name();
        let fail = |r: &str| Err(rule(op, None, r.to_string()));
        if self.scale_tensor && self.scale.is_some() {
            return fail("give the scale as `scale = <number>` or as an input with `scale_tensor = true`, not both");
        }
        if let Some(s) = self.scale {
            if !s.is_finite() {
                return fail(&format!("the scale must be finite, found {s}"));
            }
        }
        if let Some(w) = self.window {
            if w < 1 {
                return fail(&format!("the sliding window must be at least 1 key long, found window = {w}"));
            }
        }
        if self.bottom_right() && !self.causal && self.window.is_none() {
            return fail("`alignment = bottom_right` places the causal diagonal or the window; add `causal = true` or `window = ...`");
        }
        if let Some(p) = self.dropout {
            if !(p > 0.0 && p < 1.0) {
                return fail(&format!(
                    "the dropout probability must be in (0, 1), found {p}; leave `dropout` out for none"
                ));
            }
        }
        if self.bottom_right() && (self.bias || self.dropout.is_some()) {
            return fail("bottom-right alignment is supported without bias and without dropout only");
        }
        if self.fp8.is_some() && self.bias {
            return fail("fp8 attention takes no bias (cuDNN's fp8 attention engines have none); leave out `bias = true`");
        }
        if self.fp8.is_some() && self.pass == SdpaPass::Backward {
            // Spanned on the attribute in `graph!`.
            let on = |attr: &'static str, r: &str| Err(ShapeError { attr: Some(attr), ..rule(op, None, r.to_string()) });
            if self.dropout.is_some() {
                return on(
                    "dropout",
                    "fp8 attention's backward takes no dropout: cudnn-frontend's fp8 backward subgraph leaves the \
                     dropout mask out of dP, so it is not the gradient of the forward's dropout; leave out `dropout`",
                );
            }
            if self.deterministic {
                return on(
                    "deterministic",
                    "fp8 attention's backward has no deterministic variant on Hopper (cudnn-frontend pins one on \
                     Blackwell only); leave out `deterministic = true`",
                );
            }
        }
        if self.d_bias && !self.bias {
            return fail("`d_bias = true` needs the bias it differentiates: add `bias = true` and the Bias input");
        }
        paged::check_attributes(self)?;
        ragged::check_attributes(self)
    }
}

/// An optional port's dims against `want` (a `true` lets that dim be 1 too).
pub(super) fn port_fits<D: Dim>(
    op: &'static str,
    name: &str,
    i: usize,
    t: &TensorMeta<D>,
    want: &[(&D, bool)],
    form: &str,
    cx: &mut impl DimCx<D>,
) -> Result<(), ShapeError> {
    let want_shape: Vec<String> =
        want.iter().map(|(d, may_be_one)| if *may_be_one { format!("1|{d}") } else { d.to_string() }).collect();
    let fits =
        t.dims.iter().zip(want).all(|(got, (d, may_be_one))| (*may_be_one && got.is_one()) || cx.require_eq(got, d));
    if !fits {
        return Err(rule(
            op,
            Some(i),
            format!("port {name} must be {form} = [{}], found {}", want_shape.join(", "), shape_string(&t.dims)),
        ));
    }
    Ok(())
}

/// The page tables' shapes and types: `[B, 1, T, 1]` `i32` each, one width `T` for both, and
/// `T = ceil(max_seq_len_kv / page)` when the capacity is given and the page size known.
fn paged_ports<D: Dim>(
    op: &Sdpa,
    inputs: &[TensorMeta<D>],
    ports: &[PortSpec],
    (b, page): (&D, &D),
    cx: &mut impl DimCx<D>,
) -> Result<(), ShapeError> {
    let name = op.pass.name();
    let one = D::lit(1);
    let index = |port: &str| ports.iter().position(|p| p.name == port);
    let (Some(k), Some(v)) = (index(paged::TABLE_PORTS[0]), index(paged::TABLE_PORTS[1])) else { return Ok(()) };
    let width = inputs[k].dims[2].clone();
    let expected_width = match (op.max_seq_len_kv, page.as_lit()) {
        (Some(n), Some(p)) => Some(D::lit(paged::width_for(n, p))),
        _ => None,
    };
    for (i, port) in [(k, paged::TABLE_PORTS[0]), (v, paged::TABLE_PORTS[1])] {
        let want = [(b, false), (&one, false), (&width, false), (&one, false)];
        port_fits(name, port, i, &inputs[i], &want, "[B, 1, T, 1] (T: the table width)", cx)?;
        if inputs[i].dtype != DataType::I32 {
            return Err(rule(name, Some(i), format!("port {port} is {} but must be i32", inputs[i].dtype)));
        }
        if let Some(w) = &expected_width {
            if !cx.require_eq(&inputs[i].dims[2], w) {
                return Err(rule(
                    name,
                    Some(i),
                    format!(
                        "port {port} is {} wide but `max_seq_len_kv = {}` over pages of {page} tokens needs \
                         ceil({} / {page}) = {w} entries per sequence",
                        inputs[i].dims[2],
                        op.max_seq_len_kv.unwrap_or_default(),
                        op.max_seq_len_kv.unwrap_or_default(),
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The offsets inputs' shapes and types: `[B + 1, 1, 1, 1]`, `i32` or `i64`.
fn offsets_ports<D: Dim>(
    op: &Sdpa,
    inputs: &[TensorMeta<D>],
    ports: &[PortSpec],
    b: &D,
    cx: &mut impl DimCx<D>,
) -> Result<(), ShapeError> {
    if !op.ragged {
        return Ok(());
    }
    let name = op.pass.name();
    let one = D::lit(1);
    let Some(b1) = D::sum(&[b.clone(), one.clone()]) else {
        return Err(rule(name, Some(0), format!("the batch {b} + 1 of the ragged offsets exceeds i64::MAX")));
    };
    let mut first: Option<(&str, DataType)> = None;
    for (i, p) in ports.iter().enumerate().filter(|(_, p)| ragged::OFFSET_PORTS.contains(&p.name)) {
        let want = [(&b1, false), (&one, false), (&one, false), (&one, false)];
        port_fits(name, p.name, i, &inputs[i], &want, "[B + 1, 1, 1, 1]", cx)?;
        let dtype = inputs[i].dtype;
        if !matches!(dtype, DataType::I32 | DataType::I64) {
            return Err(rule(name, Some(i), format!("port {} is {dtype} but must be i32 or i64", p.name)));
        }
        // Measured: cuDNN 9.19 (deviceless, H200) finds no engine, fused or composite, for a
        // node whose offsets mix the two types.
        match first {
            Some((other, t)) if t != dtype => {
                return Err(rule(
                    name,
                    Some(i),
                    format!(
                        "port {} is {dtype} but {other} is {t}: one node's ragged offsets have one type (cuDNN 9.19 \
                         finds no engine for i32 and i64 offsets together)",
                        p.name
                    ),
                ))
            }
            Some(_) => {}
            None => first = Some((p.name, dtype)),
        }
    }
    Ok(())
}
