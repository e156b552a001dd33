//! A Llama-style decoder layer (RMSNorm, Q/K/V projections, rotary embedding, causal
//! grouped-query attention over a KV cache, SwiGLU MLP, residuals), written twice on the same
//! weights: [`Layer::forward_candle`], candle's own implementation (candle-nn's `Linear`,
//! `rms_norm`, `rope` and `softmax_last_dim`, as candle-transformers' Llama does it), and
//! [`Layer::forward_graphs`], where the projections with their epilogues and the attention are
//! cudnn-graph types run through [`Runner`], RMSNorm too. The rotary embedding is candle's in both.
//! Each is a chain of one function per stage (`attn_norm_*`, `qkv_*`, `rope_*`,
//! `attention_*`, `o_proj_*`, `mlp_norm_*`, `swiglu_*`, `down_*`, with `_candle` and
//! `_graphs` suffixes), which `examples/llama_bench.rs --stages` times one by one.
//!
//! For training, [`Layer::forward_graphs_training`] runs RMSNorm, the projections, the attention
//! and the SwiGLU MLP as graph types with backward graphs ([`Differentiable`]) through
//! [`Runner::run_with_backward`], so `loss.backward()` computes their gradients with cudnn-graph's
//! backward graphs; [`Layer::forward_candle_training`] is the same layer in differentiable candle
//! ops (candle's fused `rms_norm`, `rope` and `softmax_last_dim` have no backward). The rotary
//! embedding is candle's `rope_slow` in both.
//!
//! Shared by `examples/llama_layer.rs`, `examples/llama_bench.rs` and the crate's tests.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use candle_core::Var;
use candle_core::{DType, Device, Module, Result, Tensor, D};
use candle_nn::ops::{rms_norm, softmax_last_dim};
use candle_nn::ops::{rms_norm_slow, silu, softmax};
use candle_nn::rotary_emb::{rope, rope_slow, rope_thd};
use candle_nn::Linear;
use cudnn_graph::graph;
use cudnn_graph_candle::{Differentiable, Runner};

graph! {
    /// The Q, K and V projections of `x` (weights in candle's `[out, in]` layout, seen as
    /// `[in, out]`): three GEMMs of one graph.
    pub Qkv<dyn T, dyn E, dyn HD, dyn KD>(
        x: bf16[1, T, E],
        wq: bf16[1, E, HD] order [0, 2, 1],
        wk: bf16[1, E, KD] order [0, 2, 1],
        wv: bf16[1, E, KD] order [0, 2, 1],
    ) -> (q: bf16[1, T, HD], k: bf16[1, T, KD], v: bf16[1, T, KD]) {
        q = matmul(x, wq);
        k = matmul(x, wk);
        v = matmul(x, wv);
    }

    /// Causal grouped-query attention on candle's `[B, S, H, D]` activations, seen as
    /// `[B, H, S, D]`. The last query sees every key (bottom-right), so one graph serves prefill
    /// (`SQ = SKV`) and decode after a KV cache (`SQ = 1`).
    pub Attention<dyn B, dyn H, dyn HKV, dyn SQ, dyn SKV, dyn DH>(
        q: bf16[B, H, SQ, DH] order [0, 2, 1, 3],
        k: bf16[B, HKV, SKV, DH] order [0, 2, 1, 3],
        v: bf16[B, HKV, SKV, DH] order [0, 2, 1, 3],
    ) -> (o: bf16[B, H, SQ, DH] order [0, 2, 1, 3]) {
        o = sdpa(q, k, v, causal = true, alignment = bottom_right);
    }

    /// A projection with the residual added in the GEMM's epilogue: `y = x · wᵀ + r`. Its
    /// intermediates are bf16, as candle's and PyTorch's are: where autotuning with
    /// `measure_partitionings` cuts the add off, the GEMM writes bf16, which cuDNN 9.19 runs on a
    /// faster engine than an f32 output (engine 0 against 4 on the H100).
    #[intermediate(bf16)]
    pub ProjResidual<dyn T, dyn IN, dyn OUT>(
        x: bf16[1, T, IN],
        w: bf16[1, IN, OUT] order [0, 2, 1],
        r: bf16[1, T, OUT],
    ) -> (y: bf16[1, T, OUT]) {
        y = add(matmul(x, w), r);
    }

    /// RMSNorm over `[T, E]` rows (inference), epsilon given at run time: cuDNN's kernel (candle's
    /// `rms_norm` took 0.066 ms at `[4096, 4096]` bf16 on the H200 where PyTorch's took 0.027).
    pub RmsNorm<dyn T, dyn E>(x: bf16[T, E], scale: bf16[1, E], eps: f32[1, 1] host) -> (y: bf16[T, E]) {
        y = rmsnorm(x, scale, eps, phase = inference);
    }

    /// The SwiGLU MLP's first half, the activation in the GEMMs' epilogues:
    /// `silu(x · w_gateᵀ) * (x · w_upᵀ)`. Two GEMMs are two kernels, so the gate crosses memory:
    /// in bf16 (`#[intermediate(bf16)]`, as candle and PyTorch store it), half the bytes of f32,
    /// and cuDNN 9.19 runs a bf16-output GEMM on engine 0 (640 µs on the H100 at `[4096, 4096] ·
    /// [4096, 14336]`) where an f32 output gets engine 4 (785 µs at best).
    #[intermediate(bf16)]
    pub SwiGlu<dyn T, dyn E, dyn F>(
        x: bf16[1, T, E],
        wg: bf16[1, E, F] order [0, 2, 1],
        wu: bf16[1, E, F] order [0, 2, 1],
    ) -> (h: bf16[1, T, F]) {
        h = mul(swish(matmul(x, wg)), matmul(x, wu));
    }
}

graph! {
    /// RMSNorm for training over `[T, E]` rows: the inverse RMS kept for the backward, epsilon
    /// given at run time.
    pub RmsNormTrain<dyn T, dyn E>(x: bf16[T, E], scale: bf16[1, E], eps: f32[1, 1] host)
        -> (y: bf16[T, E], inv_var: f32[T, 1])
    {
        (y, inv_var) = rmsnorm(x, scale, eps, phase = training);
    }

    /// Its gradients.
    pub RmsNormTrainBackward<dyn T, dyn E>(d_y: bf16[T, E], x: bf16[T, E], scale: bf16[1, E], inv_var: f32[T, 1])
        -> (d_x: bf16[T, E], d_scale: bf16[1, E])
    {
        (d_x, d_scale) = rmsnorm_backward(d_y, x, scale, inv_var);
    }

    /// A projection `y = x · wᵀ` (`w` in candle's `[out, in]` layout).
    pub Proj<dyn T, dyn IN, dyn OUT>(x: bf16[1, T, IN], w: bf16[1, IN, OUT] order [0, 2, 1]) -> (y: bf16[1, T, OUT]) {
        y = matmul(x, w);
    }

    /// Its gradients.
    pub ProjBackward<dyn T, dyn IN, dyn OUT>(x: bf16[1, T, IN], w: bf16[1, IN, OUT] order [0, 2, 1], d_y: bf16[1, T, OUT])
        -> (d_x: bf16[1, T, IN], d_w: bf16[1, IN, OUT])
    {
        d_x = matmul(d_y, transpose(w, permutation = [0, 2, 1]));
        d_w = matmul(transpose(x, permutation = [0, 2, 1]), d_y);
    }

    /// `ProjResidual`'s gradients.
    pub ProjResidualBackward<dyn T, dyn IN, dyn OUT>(
        x: bf16[1, T, IN],
        w: bf16[1, IN, OUT] order [0, 2, 1],
        d_y: bf16[1, T, OUT],
    ) -> (d_x: bf16[1, T, IN], d_w: bf16[1, IN, OUT], d_r: bf16[1, T, OUT]) {
        d_x = matmul(d_y, transpose(w, permutation = [0, 2, 1]));
        d_w = matmul(transpose(x, permutation = [0, 2, 1]), d_y);
        d_r = identity(d_y);
    }

    /// Causal grouped-query attention for training (queries and keys aligned: a prefill), with
    /// the softmax statistics.
    pub AttentionTrain<dyn B, dyn H, dyn HKV, dyn S, dyn DH>(
        q: bf16[B, H, S, DH],
        k: bf16[B, HKV, S, DH],
        v: bf16[B, HKV, S, DH],
    ) -> (o: bf16[B, H, S, DH], stats: f32[B, H, S, 1]) {
        (o, stats) = sdpa(q, k, v, causal = true, training = true);
    }

    /// Its gradients.
    pub AttentionTrainBackward<dyn B, dyn H, dyn HKV, dyn S, dyn DH>(
        q: bf16[B, H, S, DH],
        k: bf16[B, HKV, S, DH],
        v: bf16[B, HKV, S, DH],
        o: bf16[B, H, S, DH],
        d_o: bf16[B, H, S, DH],
        stats: f32[B, H, S, 1],
    ) -> (d_q: bf16[B, H, S, DH], d_k: bf16[B, HKV, S, DH], d_v: bf16[B, HKV, S, DH]) {
        (d_q, d_k, d_v) = sdpa_backward(q, k, v, o, d_o, stats, causal = true);
    }

    /// SwiGLU's first half for training: the two projections kept for the backward.
    pub SwiGluTrain<dyn T, dyn E, dyn F>(
        x: bf16[1, T, E],
        wg: bf16[1, E, F] order [0, 2, 1],
        wu: bf16[1, E, F] order [0, 2, 1],
    ) -> (g: bf16[1, T, F], u: bf16[1, T, F], h: bf16[1, T, F]) {
        g = matmul(x, wg);
        u = matmul(x, wu);
        h = mul(swish(g), u);
    }

    /// Its gradients.
    pub SwiGluTrainBackward<dyn T, dyn E, dyn F>(
        x: bf16[1, T, E],
        wg: bf16[1, E, F] order [0, 2, 1],
        wu: bf16[1, E, F] order [0, 2, 1],
        g: bf16[1, T, F],
        u: bf16[1, T, F],
        d_h: bf16[1, T, F],
    ) -> (d_x: bf16[1, T, E], d_wg: bf16[1, E, F], d_wu: bf16[1, E, F]) {
        let dg = swish_bwd(mul(d_h, u), g);
        let du = mul(d_h, swish(g));
        d_x = add(matmul(dg, transpose(wg, permutation = [0, 2, 1])), matmul(du, transpose(wu, permutation = [0, 2, 1])));
        d_wg = matmul(transpose(x, permutation = [0, 2, 1]), dg);
        d_wu = matmul(transpose(x, permutation = [0, 2, 1]), du);
    }
}

impl Differentiable for RmsNormTrain {
    type Backward = RmsNormTrainBackward;
    fn backward(&self) -> RmsNormTrainBackward {
        RmsNormTrainBackward::new(self.T, self.E)
    }
}

impl Differentiable for Proj {
    type Backward = ProjBackward;
    fn backward(&self) -> ProjBackward {
        ProjBackward::new(self.T, self.IN, self.OUT)
    }
}

impl Differentiable for ProjResidual {
    type Backward = ProjResidualBackward;
    fn backward(&self) -> ProjResidualBackward {
        ProjResidualBackward::new(self.T, self.IN, self.OUT)
    }
}

impl Differentiable for AttentionTrain {
    type Backward = AttentionTrainBackward;
    fn backward(&self) -> AttentionTrainBackward {
        AttentionTrainBackward::new(self.B, self.H, self.HKV, self.S, self.DH)
    }
}

impl Differentiable for SwiGluTrain {
    type Backward = SwiGluTrainBackward;
    fn backward(&self) -> SwiGluTrainBackward {
        SwiGluTrainBackward::new(self.T, self.E, self.F)
    }
}

/// The layer's sizes.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Hidden size `E`.
    pub hidden: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention: `heads % kv_heads == 0`).
    pub kv_heads: usize,
    /// The MLP's inner size.
    pub intermediate: usize,
    /// RMSNorm's epsilon.
    pub eps: f32,
    /// The rotary embedding's base.
    pub rope_theta: f32,
}

impl Config {
    /// Llama 3 8B's layer: E = 4096, 32 heads over 8 KV heads of 128, MLP 14336.
    pub const LLAMA3_8B: Config =
        Config { hidden: 4096, heads: 32, kv_heads: 8, intermediate: 14336, eps: 1e-5, rope_theta: 500000.0 };

    /// The head size.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

/// A KV cache: keys and values of the past positions, in the layout each implementation keeps
/// (candle's `[B, HKV, P, D]`, the graphs' `[B, P, HKV, D]`).
#[derive(Debug, Clone)]
pub struct Cache {
    /// Keys.
    pub k: Tensor,
    /// Values.
    pub v: Tensor,
}

/// The layer's weights (candle's `[out, in]` layout, bf16) and, for the graphs, the same tensors
/// seen as `[1, in, out]` (views, no copies).
pub struct Layer {
    /// Sizes.
    pub cfg: Config,
    attn_norm: Tensor,
    mlp_norm: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    gate: Linear,
    up: Linear,
    down: Linear,
    /// candle's causal masks by (queries, keys), made once each, as candle-transformers' Llama
    /// keeps them.
    masks: Mutex<HashMap<(usize, usize), Tensor>>,
}

/// `w` (`[out, in]`) as the graphs' `[1, in, out]` port: a transposed view.
fn as_port(w: &Linear) -> Result<Tensor> {
    w.weight().t()?.unsqueeze(0)
}

impl Layer {
    /// Random weights (scaled like an initialised layer, so activations stay O(1)) on `device`.
    pub fn random(cfg: Config, device: &Device, seed: u64) -> Result<Self> {
        let (e, d) = (cfg.hidden, cfg.head_dim());
        let linear = |out: usize, inp: usize, k: u64| -> Result<Linear> {
            Ok(Linear::new(random(&[out, inp], 1.0 / (inp as f32).sqrt(), seed * 16 + k, device)?, None))
        };
        let norm = |k: u64| -> Result<Tensor> { random(&[e], 0.1, seed * 16 + k, device)? + 1.0 };
        Ok(Layer {
            cfg,
            attn_norm: norm(0)?,
            mlp_norm: norm(1)?,
            q: linear(cfg.heads * d, e, 2)?,
            k: linear(cfg.kv_heads * d, e, 3)?,
            v: linear(cfg.kv_heads * d, e, 4)?,
            o: linear(e, cfg.heads * d, 5)?,
            gate: linear(cfg.intermediate, e, 6)?,
            up: linear(cfg.intermediate, e, 7)?,
            down: linear(e, cfg.intermediate, 8)?,
            masks: Mutex::new(HashMap::new()),
        })
    }

    /// The rotary tables for positions `start..start + len`, `[len, D / 2]` each (cos, sin), as
    /// candle-transformers' Llama makes them.
    pub fn rope_tables(&self, start: usize, len: usize, device: &Device) -> Result<(Tensor, Tensor)> {
        let d = self.cfg.head_dim();
        let inv_freq: Vec<f32> =
            (0..d).step_by(2).map(|i| 1.0 / self.cfg.rope_theta.powf(i as f32 / d as f32)).collect();
        let inv_freq = Tensor::from_vec(inv_freq, (1, d / 2), device)?;
        let positions = Tensor::arange(start as u32, (start + len) as u32, device)?.to_dtype(DType::F32)?;
        let freqs = positions.reshape((len, 1))?.matmul(&inv_freq)?;
        Ok((freqs.cos()?.to_dtype(DType::BF16)?, freqs.sin()?.to_dtype(DType::BF16)?))
    }

    /// A random KV cache of `past` positions for batch `b`, in both layouts (candle's, the graphs').
    pub fn random_cache(&self, b: usize, past: usize, device: &Device) -> Result<(Cache, Cache)> {
        let (hkv, d) = (self.cfg.kv_heads, self.cfg.head_dim());
        let k = random(&[b, past, hkv, d], 1.0, 11, device)?;
        let v = random(&[b, past, hkv, d], 1.0, 12, device)?;
        let candle = Cache { k: k.transpose(1, 2)?.contiguous()?, v: v.transpose(1, 2)?.contiguous()? };
        Ok((candle, Cache { k, v }))
    }

    /// candle's own layer: `x` `[B, S, E]` at positions `past..past + S` (`cos`, `sin` from
    /// [`Layer::rope_tables`]), after `cache` (`[B, HKV, P, D]`) if any. Its stages are the
    /// `*_candle` functions below.
    pub fn forward_candle(&self, x: &Tensor, cos: &Tensor, sin: &Tensor, cache: Option<&Cache>) -> Result<Tensor> {
        let n = self.attn_norm_candle(x)?;
        let (q, k, v) = self.qkv_candle(&n)?;
        let (q, k) = self.rope_candle(&q, &k, cos, sin)?;
        let attn = self.attention_candle(&q, &k, &v, cache)?;
        let x1 = self.o_proj_candle(&attn, x)?;
        let n2 = self.mlp_norm_candle(&x1)?;
        let mlp = self.swiglu_candle(&n2)?;
        self.down_candle(&mlp, &x1)
    }

    /// The same layer with cudnn-graph types: `cache` in `[B, P, HKV, D]`. Its stages are the
    /// `*_graphs` functions below.
    pub fn forward_graphs(
        &self,
        runner: &Runner,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        cache: Option<&Cache>,
    ) -> Result<Tensor> {
        let (b, s, e) = x.dims3()?;
        let (hkv, d) = (self.cfg.kv_heads, self.cfg.head_dim());
        let n = self.attn_norm_graphs(runner, x)?;
        let [q, k, v] = self.qkv_graphs(runner, &n)?;
        let (q, k) = self.rope_graphs(&q, &k, cos, sin, b)?;
        let v = v.reshape((b, s, hkv, d))?;
        let (k, v) = match cache {
            Some(c) => (Tensor::cat(&[&c.k, &k], 1)?, Tensor::cat(&[&c.v, &v], 1)?),
            None => (k, v),
        };
        let o = self.attention_graphs(runner, &q, &k, &v)?;
        let x1 = self.o_proj_graphs(runner, &o, x)?;
        let n2 = self.mlp_norm_graphs(runner, &x1)?;
        let mlp = self.swiglu_graphs(runner, &n2)?;
        self.down_graphs(runner, &mlp, &x1)?.reshape((b, s, e))
    }
}

/// The stages of [`Layer::forward_candle`] and [`Layer::forward_graphs`], one function each, so
/// that `examples/llama_bench.rs --stages` can time them one by one.
impl Layer {
    /// RMSNorm before the attention: candle's fused `rms_norm`.
    pub fn attn_norm_candle(&self, x: &Tensor) -> Result<Tensor> {
        rms_norm(x, &self.attn_norm, self.cfg.eps)
    }

    /// RMSNorm before the MLP: candle's fused `rms_norm`.
    pub fn mlp_norm_candle(&self, x1: &Tensor) -> Result<Tensor> {
        rms_norm(x1, &self.mlp_norm, self.cfg.eps)
    }

    /// RMSNorm of `x` (`[B, S, E]` or `[1, T, E]`) with `scale`, as the [`RmsNorm`] graph, as
    /// `[1, T, E]`.
    fn norm_graphs(&self, runner: &Runner, x: &Tensor, scale: &Tensor) -> Result<Tensor> {
        let e = x.dim(D::Minus1)?;
        let t = x.elem_count() / e;
        let eps = Tensor::new(self.cfg.eps, &Device::Cpu)?;
        let [y] = outputs(runner.run(&RmsNorm::new(t, e), &[&x.reshape((t, e))?, &scale.reshape((1, e))?, &eps])?)?;
        y.reshape((1, t, e))
    }

    /// RMSNorm before the attention: the [`RmsNorm`] graph, `[1, T, E]`.
    pub fn attn_norm_graphs(&self, runner: &Runner, x: &Tensor) -> Result<Tensor> {
        self.norm_graphs(runner, x, &self.attn_norm)
    }

    /// RMSNorm before the MLP: the [`RmsNorm`] graph, `[1, T, E]`.
    pub fn mlp_norm_graphs(&self, runner: &Runner, x1: &Tensor) -> Result<Tensor> {
        self.norm_graphs(runner, x1, &self.mlp_norm)
    }

    /// candle's Q, K and V projections of `n` `[B, S, E]` (three `Linear`s): `q` `[B, H, S, D]`
    /// and `k` `[B, HKV, S, D]` made contiguous, `v` `[B, HKV, S, D]` a transposed view.
    pub fn qkv_candle(&self, n: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let (b, s, _) = n.dims3()?;
        let (h, hkv, d) = (self.cfg.heads, self.cfg.kv_heads, self.cfg.head_dim());
        let q = self.q.forward(n)?.reshape((b, s, h, d))?.transpose(1, 2)?.contiguous()?;
        let k = self.k.forward(n)?.reshape((b, s, hkv, d))?.transpose(1, 2)?.contiguous()?;
        let v = self.v.forward(n)?.reshape((b, s, hkv, d))?.transpose(1, 2)?;
        Ok((q, k, v))
    }

    /// candle's `rope` of `q` and `k` (`[B, ·, S, D]`).
    pub fn rope_candle(&self, q: &Tensor, k: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<(Tensor, Tensor)> {
        Ok((rope(q, cos, sin)?, rope(k, cos, sin)?))
    }

    /// candle's attention of `q` `[B, H, S, D]` over `cache` (`[B, HKV, P, D]`) if any and `k`, `v`
    /// `[B, HKV, S, D]`: KV heads repeated, in f32 (as candle-transformers' Llama computes it),
    /// causal with a mask; `[B, H, S, D]` in bf16.
    pub fn attention_candle(&self, q: &Tensor, k: &Tensor, v: &Tensor, cache: Option<&Cache>) -> Result<Tensor> {
        let (h, hkv, d) = (self.cfg.heads, self.cfg.kv_heads, self.cfg.head_dim());
        let s = q.dim(2)?;
        let (k, v) = match cache {
            Some(c) => (Tensor::cat(&[&c.k, k], 2)?, Tensor::cat(&[&c.v, v], 2)?),
            None => (k.clone(), v.contiguous()?),
        };
        let past = k.dim(2)? - s;
        let k = repeat_kv(&k, h / hkv)?;
        let v = repeat_kv(&v, h / hkv)?;
        let (q, k, v) = (q.to_dtype(DType::F32)?, k.to_dtype(DType::F32)?, v.to_dtype(DType::F32)?);
        let scores = (q.matmul(&k.t()?)? / (d as f64).sqrt())?;
        let scores = if s == 1 { scores } else { self.masked(&scores, past)? };
        softmax_last_dim(&scores)?.matmul(&v.contiguous()?)?.to_dtype(DType::BF16)
    }

    /// candle's output projection of `attn` (`[B, H, S, D]`, from [`Layer::attention_candle`],
    /// copied to `[B, S, E]`) plus the residual `x` `[B, S, E]`.
    pub fn o_proj_candle(&self, attn: &Tensor, x: &Tensor) -> Result<Tensor> {
        let (b, s, e) = x.dims3()?;
        let attn = attn.transpose(1, 2)?.reshape((b, s, e))?;
        self.o.forward(&attn)? + x
    }

    /// candle's SwiGLU MLP's first half of `n2` `[B, S, E]`: `silu(gate(n2)) * up(n2)`.
    pub fn swiglu_candle(&self, n2: &Tensor) -> Result<Tensor> {
        candle_nn::ops::silu(&self.gate.forward(n2)?)? * self.up.forward(n2)?
    }

    /// candle's down projection of `mlp` `[B, S, F]` plus the residual `x1` `[B, S, E]`.
    pub fn down_candle(&self, mlp: &Tensor, x1: &Tensor) -> Result<Tensor> {
        self.down.forward(mlp)? + x1
    }

    /// The graphs' Q, K and V projections of `n` `[1, T, E]`, one [`Qkv`] graph: `q`
    /// `[1, T, H·D]`, `k` and `v` `[1, T, HKV·D]`.
    pub fn qkv_graphs(&self, runner: &Runner, n: &Tensor) -> Result<[Tensor; 3]> {
        let (_, t, e) = n.dims3()?;
        let (h, hkv, d) = (self.cfg.heads, self.cfg.kv_heads, self.cfg.head_dim());
        outputs(
            runner.run(
                &Qkv::new(t, e, h * d, hkv * d),
                &[n, &as_port(&self.q)?, &as_port(&self.k)?, &as_port(&self.v)?],
            )?,
        )
    }

    /// candle's `rope_thd` of the graphs' `q` and `k` (`[1, B·S, ·]`, batch `b`), seen as
    /// `[B, S, H, D]` and `[B, S, HKV, D]`.
    pub fn rope_graphs(
        &self,
        q: &Tensor,
        k: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        b: usize,
    ) -> Result<(Tensor, Tensor)> {
        let (h, hkv, d) = (self.cfg.heads, self.cfg.kv_heads, self.cfg.head_dim());
        let s = q.dim(1)? / b;
        Ok((rope_thd(&q.reshape((b, s, h, d))?, cos, sin)?, rope_thd(&k.reshape((b, s, hkv, d))?, cos, sin)?))
    }

    /// The graphs' attention, one [`Attention`] graph: `q` `[B, S, H, D]` over `k`, `v`
    /// `[B, SKV, HKV, D]` (the cache included), passed as transposed views `[B, ·, S, D]`; `o`
    /// `[B, H, S, D]` over `[B, S, H, D]` storage.
    pub fn attention_graphs(&self, runner: &Runner, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        let (h, hkv, d) = (self.cfg.heads, self.cfg.kv_heads, self.cfg.head_dim());
        let (b, s) = (q.dim(0)?, q.dim(1)?);
        let skv = k.dim(1)?;
        let [o] = outputs(runner.run(
            &Attention::new(b, h, hkv, s, skv, d),
            &[&q.transpose(1, 2)?, &k.transpose(1, 2)?, &v.transpose(1, 2)?],
        )?)?;
        Ok(o)
    }

    /// The graphs' output projection of `o` (from [`Layer::attention_graphs`]) plus the residual
    /// `x` `[B, S, E]`, one [`ProjResidual`] graph: `x1` `[1, T, E]`.
    pub fn o_proj_graphs(&self, runner: &Runner, o: &Tensor, x: &Tensor) -> Result<Tensor> {
        let (b, s, e) = x.dims3()?;
        let t = b * s;
        // `o` is `[B, H, S, D]` over `[B, S, H, D]` storage: back to `[1, T, E]` without a copy.
        let o = o.transpose(1, 2)?.reshape((1, t, e))?;
        let [x1] =
            outputs(runner.run(&ProjResidual::new(t, e, e), &[&o, &as_port(&self.o)?, &x.reshape((1, t, e))?])?)?;
        Ok(x1)
    }

    /// The graphs' SwiGLU MLP's first half of `n2` `[1, T, E]`, one [`SwiGlu`] graph: `[1, T, F]`.
    pub fn swiglu_graphs(&self, runner: &Runner, n2: &Tensor) -> Result<Tensor> {
        let (_, t, e) = n2.dims3()?;
        let [mlp] = outputs(
            runner.run(&SwiGlu::new(t, e, self.cfg.intermediate), &[n2, &as_port(&self.gate)?, &as_port(&self.up)?])?,
        )?;
        Ok(mlp)
    }

    /// The graphs' down projection of `mlp` `[1, T, F]` plus the residual `x1` `[1, T, E]`, one
    /// [`ProjResidual`] graph: `[1, T, E]`.
    pub fn down_graphs(&self, runner: &Runner, mlp: &Tensor, x1: &Tensor) -> Result<Tensor> {
        let (_, t, f) = mlp.dims3()?;
        let [y] = outputs(runner.run(&ProjResidual::new(t, f, self.cfg.hidden), &[mlp, &as_port(&self.down)?, x1])?)?;
        Ok(y)
    }
}

/// A layer's weights as new variables: each weight's name and its [`Var`].
pub type Weights = Vec<(&'static str, Var)>;

impl Layer {
    /// A copy of the layer whose weights are new variables of `dtype` (gradients are taken with
    /// respect to them), and those variables by name.
    pub fn trainable(&self, dtype: DType) -> Result<(Layer, Weights)> {
        let mut weights = Vec::new();
        let mut var = |name: &'static str, t: &Tensor| -> Result<Tensor> {
            let v = Var::from_tensor(&t.to_dtype(dtype)?)?;
            let t = v.as_tensor().clone();
            weights.push((name, v));
            Ok(t)
        };
        let linear = |v: Tensor| Linear::new(v, None);
        let layer = Layer {
            cfg: self.cfg,
            attn_norm: var("attn_norm", &self.attn_norm)?,
            mlp_norm: var("mlp_norm", &self.mlp_norm)?,
            q: linear(var("q", self.q.weight())?),
            k: linear(var("k", self.k.weight())?),
            v: linear(var("v", self.v.weight())?),
            o: linear(var("o", self.o.weight())?),
            gate: linear(var("gate", self.gate.weight())?),
            up: linear(var("up", self.up.weight())?),
            down: linear(var("down", self.down.weight())?),
            masks: Mutex::new(HashMap::new()),
        };
        Ok((layer, weights))
    }

    /// candle's layer for training, a prefill of `x` `[B, S, E]` (no cache), in differentiable
    /// candle ops, in the layer's element type.
    pub fn forward_candle_training(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let (b, s, e) = x.dims3()?;
        let (h, hkv, d) = (self.cfg.heads, self.cfg.kv_heads, self.cfg.head_dim());
        let n = rms_norm_slow(x, &self.attn_norm, self.cfg.eps)?;
        let q = self.q.forward(&n)?.reshape((b, s, h, d))?.transpose(1, 2)?.contiguous()?;
        let k = self.k.forward(&n)?.reshape((b, s, hkv, d))?.transpose(1, 2)?.contiguous()?;
        let v = self.v.forward(&n)?.reshape((b, s, hkv, d))?.transpose(1, 2)?.contiguous()?;
        let (q, k) = (rope_slow(&q, cos, sin)?, rope_slow(&k, cos, sin)?);
        let (k, v) = (repeat_kv(&k, h / hkv)?, repeat_kv(&v, h / hkv)?);
        let scores = (q.matmul(&k.t()?)? / (d as f64).sqrt())?;
        let attn = softmax(&self.masked(&scores, 0)?, D::Minus1)?.matmul(&v)?;
        let x1 = (self.o.forward(&attn.transpose(1, 2)?.reshape((b, s, e))?)? + x)?;
        let n2 = rms_norm_slow(&x1, &self.mlp_norm, self.cfg.eps)?;
        let mlp = (silu(&self.gate.forward(&n2)?)? * self.up.forward(&n2)?)?;
        self.down.forward(&mlp)? + x1
    }

    /// The same with cudnn-graph types that have backward graphs (bf16 weights): RMSNorm, the
    /// projections, the attention and the SwiGLU MLP with their epilogues run through
    /// [`Runner::run_with_backward`]; the rotary embedding is candle's `rope_slow`.
    pub fn forward_graphs_training(&self, runner: &Runner, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let (b, s, e) = x.dims3()?;
        let (h, hkv, d, f) = (self.cfg.heads, self.cfg.kv_heads, self.cfg.head_dim(), self.cfg.intermediate);
        let t = b * s;
        let eps = Tensor::new(self.cfg.eps, &Device::Cpu)?;
        let norm = |x: &Tensor, scale: &Tensor| -> Result<Tensor> {
            let [y, _inv_var] =
                outputs(runner.run_with_backward(
                    &RmsNormTrain::new(t, e),
                    &[&x.reshape((t, e))?, &scale.reshape((1, e))?, &eps],
                )?)?;
            y.reshape((1, t, e))
        };
        let proj = |x: &Tensor, w: &Linear, out: usize| -> Result<Tensor> {
            let [y] = outputs(runner.run_with_backward(&Proj::new(t, e, out), &[x, &as_port(w)?])?)?;
            Ok(y)
        };
        let n = norm(x, &self.attn_norm)?;
        let heads = |y: Tensor, heads: usize| y.reshape((b, s, heads, d))?.transpose(1, 2)?.contiguous();
        let q = rope_slow(&heads(proj(&n, &self.q, h * d)?, h)?, cos, sin)?;
        let k = rope_slow(&heads(proj(&n, &self.k, hkv * d)?, hkv)?, cos, sin)?;
        let v = heads(proj(&n, &self.v, hkv * d)?, hkv)?;
        let [o, _stats] = outputs(runner.run_with_backward(&AttentionTrain::new(b, h, hkv, s, d), &[&q, &k, &v])?)?;
        let o = o.transpose(1, 2)?.reshape((1, t, e))?;
        let [x1] = outputs(
            runner.run_with_backward(&ProjResidual::new(t, e, e), &[&o, &as_port(&self.o)?, &x.reshape((1, t, e))?])?,
        )?;
        let n2 = norm(&x1, &self.mlp_norm)?;
        let [_g, _u, mlp] = outputs(
            runner.run_with_backward(&SwiGluTrain::new(t, e, f), &[&n2, &as_port(&self.gate)?, &as_port(&self.up)?])?,
        )?;
        let [y] = outputs(runner.run_with_backward(&ProjResidual::new(t, f, e), &[&mlp, &as_port(&self.down)?, &x1])?)?;
        y.reshape((b, s, e))
    }
}

impl Layer {
    /// `scores` with key `j` masked for query `i` where `j > i + past` (bottom-right causal), with
    /// `-inf`; the mask is made once per shape.
    fn masked(&self, scores: &Tensor, past: usize) -> Result<Tensor> {
        let (s, skv) = (scores.dim(D::Minus2)?, scores.dim(D::Minus1)?);
        let mask = {
            let mut masks = self.masks.lock().unwrap_or_else(PoisonError::into_inner);
            match masks.get(&(s, skv)) {
                Some(mask) => mask.clone(),
                None => {
                    let mask: Vec<u8> = (0..s).flat_map(|i| (0..skv).map(move |j| u8::from(j > i + past))).collect();
                    let mask = Tensor::from_vec(mask, (s, skv), scores.device())?;
                    masks.insert((s, skv), mask.clone());
                    mask
                }
            }
        };
        let neg_inf = Tensor::new(f32::NEG_INFINITY, scores.device())?.broadcast_as(scores.shape())?;
        mask.broadcast_as(scores.shape())?.where_cond(&neg_inf, scores)
    }
}

/// A bf16 tensor of `dims` with values of standard deviation `std` (uniform, from a fixed-seed
/// xorshift: candle's CPU generator cannot be seeded).
pub fn random(dims: &[usize], std: f32, seed: u64, device: &Device) -> Result<Tensor> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let n: usize = dims.iter().product();
    let values: Vec<f32> = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Uniform on [-√3, √3): standard deviation 1.
            ((state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * 3f32.sqrt() * std
        })
        .collect();
    Tensor::from_vec(values, dims, device)?.to_dtype(DType::BF16)
}

/// Largest `|a - b|` over the largest `|b|`, in f32: how the examples and tests compare the
/// graphs' layer with candle's.
pub fn relative_difference(a: &Tensor, b: &Tensor) -> Result<f32> {
    let (a, b) = (a.to_dtype(DType::F32)?, b.to_dtype(DType::F32)?);
    let diff = (a - &b)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?;
    let scale = b.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?;
    Ok(diff / scale)
}

/// A graph's outputs as an array (the graphs above declare how many).
fn outputs<const N: usize>(tensors: Vec<Tensor>) -> Result<[Tensor; N]> {
    let found = tensors.len();
    tensors.try_into().map_err(|_| candle_core::Error::msg(format!("expected {N} outputs, got {found}")))
}

/// candle-transformers' `repeat_kv`: each KV head repeated for its `n_rep` query heads.
fn repeat_kv(x: &Tensor, n_rep: usize) -> Result<Tensor> {
    if n_rep == 1 {
        return Ok(x.clone());
    }
    let (b, hkv, s, d) = x.dims4()?;
    Tensor::cat(&vec![x; n_rep], 2)?.reshape((b, hkv * n_rep, s, d))
}
