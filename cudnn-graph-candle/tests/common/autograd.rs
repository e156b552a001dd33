//! Graph types with backward graphs, the same computations written in candle ops, and the
//! comparison of their gradients (`Runner::run_with_backward` against candle's own autograd, in
//! f64): shared by `tests/suite/autograd.rs` (CPU) and `tests/gpu_candle/gpu_autograd.rs` (CUDA).

use candle_core::{DType, Device, Result, Tensor, Var, D};
use cudnn_graph::graph;
use cudnn_graph_candle::{Differentiable, Runner};

graph! {
    /// RMSNorm for training: y and the inverse RMS the backward needs; epsilon given at run time.
    pub RmsNorm<dyn N, dyn C>(x: f32[N, C], scale: f32[1, C], eps: f32[1, 1] host)
        -> (y: f32[N, C], inv_var: f32[N, 1])
    {
        (y, inv_var) = rmsnorm(x, scale, eps, phase = training);
    }

    /// Its gradients.
    pub RmsNormBackward<dyn N, dyn C>(d_y: f32[N, C], x: f32[N, C], scale: f32[1, C], inv_var: f32[N, 1])
        -> (d_x: f32[N, C], d_scale: f32[1, C])
    {
        (d_x, d_scale) = rmsnorm_backward(d_y, x, scale, inv_var);
    }

    /// Causal grouped-query attention with the softmax statistics.
    pub Attention<dyn H, dyn HKV, dyn S, dyn DH>(q: bf16[1, H, S, DH], k: bf16[1, HKV, S, DH], v: bf16[1, HKV, S, DH])
        -> (o: bf16[1, H, S, DH], stats: f32[1, H, S, 1])
    {
        (o, stats) = sdpa(q, k, v, causal = true, training = true, scale = 0.125);
    }

    /// Its gradients.
    pub AttentionBackward<dyn H, dyn HKV, dyn S, dyn DH>(
        q: bf16[1, H, S, DH],
        k: bf16[1, HKV, S, DH],
        v: bf16[1, HKV, S, DH],
        o: bf16[1, H, S, DH],
        d_o: bf16[1, H, S, DH],
        stats: f32[1, H, S, 1],
    ) -> (d_q: bf16[1, H, S, DH], d_k: bf16[1, HKV, S, DH], d_v: bf16[1, HKV, S, DH]) {
        (d_q, d_k, d_v) = sdpa_backward(q, k, v, o, d_o, stats, causal = true, scale = 0.125);
    }

    /// y = relu(x · w + b), the pre-activation h kept for the backward (outputs come in the
    /// order the graph computes them: h, then y).
    pub Dense<dyn T, dyn IN, dyn OUT>(x: f32[1, T, IN], w: f32[1, IN, OUT], b: f32[1, 1, OUT])
        -> (h: f32[1, T, OUT], y: f32[1, T, OUT])
    {
        h = add(matmul(x, w), b);
        y = relu(h);
    }

    /// Its gradients.
    pub DenseBackward<dyn T, dyn IN, dyn OUT>(d_y: f32[1, T, OUT], h: f32[1, T, OUT], x: f32[1, T, IN], w: f32[1, IN, OUT])
        -> (d_x: f32[1, T, IN], d_w: f32[1, IN, OUT], d_b: f32[1, 1, OUT])
    {
        let dh = relu_bwd(d_y, h);
        d_x = matmul(dh, transpose(w, permutation = [0, 2, 1]));
        d_w = matmul(transpose(x, permutation = [0, 2, 1]), dh);
        d_b = reduce_sum(dh, dims = [1]);
    }
}

graph! {}

impl Differentiable for RmsNorm {
    type Backward = RmsNormBackward;
    fn backward(&self) -> RmsNormBackward {
        RmsNormBackward::new(self.N, self.C)
    }
}

impl Differentiable for Attention {
    type Backward = AttentionBackward;
    fn backward(&self) -> AttentionBackward {
        AttentionBackward::new(self.H, self.HKV, self.S, self.DH)
    }
}

impl Differentiable for Dense {
    type Backward = DenseBackward;
    fn backward(&self) -> DenseBackward {
        DenseBackward::new(self.T, self.IN, self.OUT)
    }
}

/// Values in [-1, 1) from a fixed seed (an LCG: no all-zero data).
pub fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// Random values of `dtype` on `device`.
pub fn tensor(dims: &[usize], seed: u64, dtype: DType, device: &Device) -> Result<Tensor> {
    Tensor::from_vec(values(dims.iter().product(), seed), dims, device)?.to_dtype(dtype)
}

/// The largest difference between `got` and `want` over the largest magnitude of `want`.
pub fn relative(got: &Tensor, want: &Tensor) -> Result<f64> {
    assert_eq!(got.dims(), want.dims());
    let (got, want) = (got.to_dtype(DType::F64)?, want.to_dtype(DType::F64)?);
    let max = |t: Tensor| t.abs()?.flatten_all()?.max(0)?.to_scalar::<f64>();
    let scale = max(want.clone())?;
    assert!(scale > 1e-3, "a gradient of zeros proves nothing");
    Ok(max((got - want)?)? / scale)
}

/// `loss = Σ y ⊙ r` for a fixed random `r`, in f64.
pub fn loss(y: &Tensor, seed: u64) -> Result<Tensor> {
    let r = tensor(y.dims(), seed, DType::F64, y.device())?;
    (y.to_dtype(DType::F64)? * r)?.sum_all()
}

/// `t` as a new f64 variable (candle's side of a comparison).
fn f64_var(t: &Tensor) -> Result<Var> {
    Var::from_tensor(&t.to_dtype(DType::F64)?)
}

/// Named relative differences of one comparison: outputs first, then gradients.
pub type Differences = Vec<(&'static str, f64)>;

/// RMSNorm over `[n, c]` with epsilon given as a CPU scalar tensor (a host scalar), on `device`.
pub fn rmsnorm(runner: &Runner, device: &Device, n: usize, c: usize) -> Result<Differences> {
    let eps = 1e-5;
    let x = Var::from_tensor(&tensor(&[n, c], 1, DType::F32, device)?)?;
    let scale = Var::from_tensor(&(tensor(&[1, c], 2, DType::F32, device)? + 1.5)?)?;
    let eps_tensor = Tensor::new(eps as f32, &Device::Cpu)?;
    let outputs = runner.run_with_backward(&RmsNorm::new(n, c), &[&x, &scale, &eps_tensor])?;
    let [y, inv_var] = <[Tensor; 2]>::try_from(outputs).expect("two outputs");
    let grads = loss(&y, 3)?.backward()?;

    let (x64, s64) = (f64_var(&x)?, f64_var(&scale)?);
    let rms = (x64.sqr()?.mean_keepdim(D::Minus1)? + eps)?.sqrt()?.recip()?;
    let y64 = x64.broadcast_mul(&rms)?.broadcast_mul(&s64)?;
    let want = loss(&y64, 3)?.backward()?;
    Ok(vec![
        ("y", relative(&y, &y64)?),
        ("inv_var", relative(&inv_var, &rms)?),
        ("d_x", relative(grads.get(&x).expect("d_x"), want.get(&x64).expect("candle's d_x"))?),
        ("d_scale", relative(grads.get(&scale).expect("d_scale"), want.get(&s64).expect("candle's d_scale"))?),
    ])
}

/// Causal grouped-query attention in candle ops: K and V heads repeated for the query heads,
/// `softmax(q kᵀ · scale + mask) v` with the top-left causal mask.
pub fn attention_candle(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
    let (_, h, s, _) = q.dims4()?;
    let repeat = |t: &Tensor| -> Result<Tensor> {
        let (b, hkv, s, d) = t.dims4()?;
        t.unsqueeze(2)?.broadcast_as((b, hkv, h / hkv, s, d))?.reshape((b, h, s, d))
    };
    let (k, v) = (repeat(k)?, repeat(v)?);
    let scores = (q.matmul(&k.t()?)? * scale)?;
    let mask: Vec<f64> = (0..s * s).map(|i| if i % s > i / s { f64::NEG_INFINITY } else { 0.0 }).collect();
    let mask = Tensor::from_vec(mask, (s, s), q.device())?.to_dtype(q.dtype())?;
    // `softmax_last_dim` has no backward; `softmax` is written in differentiable candle ops.
    candle_nn::ops::softmax(&scores.broadcast_add(&mask)?, D::Minus1)?.matmul(&v)
}

/// Causal attention of `h` query heads over `hkv` key/value heads, `s` positions, head size
/// `d`, on `device`.
pub fn attention(runner: &Runner, device: &Device, h: usize, hkv: usize, s: usize, d: usize) -> Result<Differences> {
    let q = Var::from_tensor(&tensor(&[1, h, s, d], 11, DType::BF16, device)?)?;
    let k = Var::from_tensor(&tensor(&[1, hkv, s, d], 12, DType::BF16, device)?)?;
    let v = Var::from_tensor(&tensor(&[1, hkv, s, d], 13, DType::BF16, device)?)?;
    let outputs = runner.run_with_backward(&Attention::new(h, hkv, s, d), &[&q, &k, &v])?;
    let [o, stats] = <[Tensor; 2]>::try_from(outputs).expect("two outputs");
    assert_eq!(stats.dims(), [1, h, s, 1]);
    assert!(!stats.track_op(), "side outputs have no backward op");
    let grads = loss(&o, 14)?.backward()?;

    let (q64, k64, v64) = (f64_var(&q)?, f64_var(&k)?, f64_var(&v)?);
    let o64 = attention_candle(&q64, &k64, &v64, 0.125)?;
    let want = loss(&o64, 14)?.backward()?;
    Ok(vec![
        ("o", relative(&o, &o64)?),
        ("d_q", relative(grads.get(&q).expect("d_q"), want.get(&q64).expect("candle's d_q"))?),
        ("d_k", relative(grads.get(&k).expect("d_k"), want.get(&k64).expect("candle's d_k"))?),
        ("d_v", relative(grads.get(&v).expect("d_v"), want.get(&v64).expect("candle's d_v"))?),
    ])
}

/// `relu(x · w + b)` inside a larger candle model: its input computed (`x · 2 + 0.1`), its output
/// used twice (`sum_all` hands back a broadcast gradient, which the runner lays out for the
/// backward graph), on `device`. The bias gradient, a sum over the rows, plans on cuDNN 9.19 only
/// as the matmul by ones `ir::column_sum_as_matmul` makes of it.
///
/// The pre-activation is kept away from 0 (positive inputs, each weight column of one sign, a
/// bias smaller than `x · w`), so the relu's mask is the same wherever `x · w + b` is computed:
/// on the GPU cuDNN's f32 GEMM may round through TF32, and an `h` near 0 whose sign it flips moves
/// that element's gradient by O(1). With inputs of both signs the H200 gave d_x and d_w 4–6 % of
/// the largest gradient off while the loss agreed to 4e-8, as a few flipped mask elements would.
pub fn dense(runner: &Runner, device: &Device, t: usize, i: usize, o: usize) -> Result<Differences> {
    let x = Var::from_tensor(&(tensor(&[1, t, i], 21, DType::F32, device)?.abs()? + 0.1)?)?;
    let signs: Vec<f32> = (0..o).map(|j| if j % 2 == 0 { 1.0 } else { -1.0 }).collect();
    let signs = Tensor::from_vec(signs, (1, 1, o), device)?;
    let w = (tensor(&[1, i, o], 22, DType::F32, device)?.abs()? + 0.05)?.broadcast_mul(&signs)?;
    let w = Var::from_tensor(&w)?;
    // |b| < 0.05 < |x · w| (at least 0.2 · 0.05 per term, IN terms of one sign).
    let b = Var::from_tensor(&(tensor(&[1, 1, o], 23, DType::F32, device)? * 0.05)?)?;
    let model = |x: &Tensor, layer: &dyn Fn(&Tensor) -> Result<Tensor>| -> Result<Tensor> {
        let y = layer(&x.affine(2.0, 0.1)?)?.to_dtype(DType::F64)?;
        loss(&y, 24)? + y.sum_all()?
    };
    let graphs = model(&x, &|x| Ok(runner.run_with_backward(&Dense::new(t, i, o), &[x, &w, &b])?.remove(1)))?;
    let grads = graphs.backward()?;

    let (x64, w64, b64) = (f64_var(&x)?, f64_var(&w)?, f64_var(&b)?);
    let candle = model(&x64, &|x| x.matmul(&w64)?.broadcast_add(&b64)?.relu())?;
    let want = candle.backward()?;
    let (lg, lc) = (graphs.to_scalar::<f64>()?, candle.to_scalar::<f64>()?);
    Ok(vec![
        ("loss", (lg - lc).abs() / lc.abs()),
        ("d_x", relative(grads.get(&x).expect("d_x"), want.get(&x64).expect("candle's d_x"))?),
        ("d_w", relative(grads.get(&w).expect("d_w"), want.get(&w64).expect("candle's d_w"))?),
        ("d_b", relative(grads.get(&b).expect("d_b"), want.get(&b64).expect("candle's d_b"))?),
    ])
}

/// Prints `differences` under `name` and checks each is below `tolerance`.
pub fn check(name: &str, differences: &Differences, tolerance: f64) {
    let line: Vec<String> = differences.iter().map(|(k, d)| format!("{k} {d:.1e}")).collect();
    println!("{name}: {}", line.join(", "));
    for (k, d) in differences {
        assert!(*d < tolerance, "{name}: {k} differs by {d} (tolerance {tolerance})");
    }
}
