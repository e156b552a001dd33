//! `Runner::run_with_backward` on CPU tensors: gradients from cudnn-graph's backward graphs equal
//! candle's own autograd of the same computation written in candle ops (compared in f64), for
//! RMSNorm with a host-scalar epsilon, causal grouped-query attention, and a GEMM with its bias
//! and ReLU epilogue; pairing mistakes are typed errors naming both graphs and the port.

use candle_core::{DType, Device, Tensor, Var, D};
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

    /// Causal attention, 4 query heads over 2 key/value heads, with the softmax statistics.
    pub Attention<dyn S>(q: bf16[1, 4, S, 16], k: bf16[1, 2, S, 16], v: bf16[1, 2, S, 16])
        -> (o: bf16[1, 4, S, 16], stats: f32[1, 4, S, 1])
    {
        (o, stats) = sdpa(q, k, v, causal = true, training = true, scale = 0.25);
    }

    /// Its gradients.
    pub AttentionBackward<dyn S>(
        q: bf16[1, 4, S, 16],
        k: bf16[1, 2, S, 16],
        v: bf16[1, 2, S, 16],
        o: bf16[1, 4, S, 16],
        d_o: bf16[1, 4, S, 16],
        stats: f32[1, 4, S, 1],
    ) -> (d_q: bf16[1, 4, S, 16], d_k: bf16[1, 2, S, 16], d_v: bf16[1, 2, S, 16]) {
        (d_q, d_k, d_v) = sdpa_backward(q, k, v, o, d_o, stats, causal = true, scale = 0.25);
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

impl Differentiable for RmsNorm {
    type Backward = RmsNormBackward;
    fn backward(&self) -> RmsNormBackward {
        RmsNormBackward::new(self.N, self.C)
    }
}

impl Differentiable for Attention {
    type Backward = AttentionBackward;
    fn backward(&self) -> AttentionBackward {
        AttentionBackward::new(self.S)
    }
}

impl Differentiable for Dense {
    type Backward = DenseBackward;
    fn backward(&self) -> DenseBackward {
        DenseBackward::new(self.T, self.IN, self.OUT)
    }
}

/// Values in [-1, 1) from a fixed seed (an LCG: no all-zero data).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn tensor(dims: &[usize], seed: u64, dtype: DType) -> Tensor {
    Tensor::from_vec(values(dims.iter().product(), seed), dims, &Device::Cpu).unwrap().to_dtype(dtype).unwrap()
}

/// The largest difference between `got` and `want` over the largest magnitude of `want`.
fn relative(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.dims(), want.dims());
    let (got, want) = (got.to_dtype(DType::F64).unwrap(), want.to_dtype(DType::F64).unwrap());
    let max = |t: Tensor| t.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f64>().unwrap();
    let scale = max(want.clone());
    assert!(scale > 1e-3, "a gradient of zeros proves nothing");
    max((got - want).unwrap()) / scale
}

/// `loss = Σ y ⊙ r` for a fixed random `r`, in f64.
fn loss(y: &Tensor, seed: u64) -> Tensor {
    let r = tensor(y.dims(), seed, DType::F64);
    (y.to_dtype(DType::F64).unwrap() * r).unwrap().sum_all().unwrap()
}

#[test]
fn rmsnorm_gradients_equal_candles_autograd() {
    let (n, c) = (6, 32);
    let eps = 1e-5;
    let x = Var::from_tensor(&tensor(&[n, c], 1, DType::F32)).unwrap();
    let scale = Var::from_tensor(&(tensor(&[1, c], 2, DType::F32) + 1.5).unwrap()).unwrap();
    let eps_tensor = Tensor::new(eps as f32, &Device::Cpu).unwrap();
    let outputs = Runner::new().run_with_backward(&RmsNorm::new(n, c), &[&x, &scale, &eps_tensor]).unwrap();
    let [y, inv_var] = <[Tensor; 2]>::try_from(outputs).unwrap();
    let grads = loss(&y, 3).backward().unwrap();

    // candle's own, in f64 on the same values.
    let x64 = Var::from_tensor(&x.to_dtype(DType::F64).unwrap()).unwrap();
    let s64 = Var::from_tensor(&scale.to_dtype(DType::F64).unwrap()).unwrap();
    let rms = (x64.sqr().unwrap().mean_keepdim(D::Minus1).unwrap() + eps).unwrap().sqrt().unwrap().recip().unwrap();
    let y64 = x64.broadcast_mul(&rms).unwrap().broadcast_mul(&s64).unwrap();
    let want = loss(&y64, 3).backward().unwrap();

    assert!(relative(&y, &y64) < 1e-5, "y");
    assert!(relative(&inv_var, &rms) < 1e-5, "inv_var, the side output");
    let dx = relative(grads.get(&x).unwrap(), want.get(&x64).unwrap());
    let ds = relative(grads.get(&scale).unwrap(), want.get(&s64).unwrap());
    println!("rmsnorm: d_x {dx:.1e}, d_scale {ds:.1e}");
    assert!(dx < 1e-5 && ds < 1e-5, "d_x {dx}, d_scale {ds}");
}

/// Causal grouped-query attention in candle ops, in f64: K and V heads repeated for the query
/// heads, `softmax(q kᵀ · scale + mask) v` with the top-left causal mask.
fn attention_candle(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Tensor {
    let s = q.dim(2).unwrap();
    let repeat = |t: &Tensor| {
        let (b, h, s, d) = t.dims4().unwrap();
        t.unsqueeze(2).unwrap().broadcast_as((b, h, 2, s, d)).unwrap().reshape((b, h * 2, s, d)).unwrap()
    };
    let (k, v) = (repeat(k), repeat(v));
    let scores = (q.matmul(&k.t().unwrap()).unwrap() * scale).unwrap();
    let mask: Vec<f64> = (0..s * s).map(|i| if i % s > i / s { f64::NEG_INFINITY } else { 0.0 }).collect();
    let mask = Tensor::from_vec(mask, (s, s), &Device::Cpu).unwrap();
    // `softmax_last_dim` has no backward; `softmax` is written in differentiable candle ops.
    let p = candle_nn::ops::softmax(&scores.broadcast_add(&mask).unwrap(), D::Minus1).unwrap();
    p.matmul(&v).unwrap()
}

#[test]
fn causal_attention_gradients_equal_candles_autograd() {
    let s = 9;
    let q = Var::from_tensor(&tensor(&[1, 4, s, 16], 11, DType::BF16)).unwrap();
    let k = Var::from_tensor(&tensor(&[1, 2, s, 16], 12, DType::BF16)).unwrap();
    let v = Var::from_tensor(&tensor(&[1, 2, s, 16], 13, DType::BF16)).unwrap();
    let outputs = Runner::new().run_with_backward(&Attention::new(s), &[&q, &k, &v]).unwrap();
    let [o, stats] = <[Tensor; 2]>::try_from(outputs).unwrap();
    assert_eq!(stats.dims(), [1, 4, s, 1]);
    assert!(!stats.track_op(), "side outputs have no backward op");
    let grads = loss(&o, 14).backward().unwrap();

    let [q64, k64, v64] = [&q, &k, &v].map(|t| Var::from_tensor(&t.to_dtype(DType::F64).unwrap()).unwrap());
    let o64 = attention_candle(&q64, &k64, &v64, 0.25);
    let want = loss(&o64, 14).backward().unwrap();

    let d_o = relative(&o, &o64);
    let dq = relative(grads.get(&q).unwrap(), want.get(&q64).unwrap());
    let dk = relative(grads.get(&k).unwrap(), want.get(&k64).unwrap());
    let dv = relative(grads.get(&v).unwrap(), want.get(&v64).unwrap());
    println!("attention: o {d_o:.1e}, d_q {dq:.1e}, d_k {dk:.1e}, d_v {dv:.1e}");
    // bf16 storage of every tensor (8 bits of mantissa): within a few of its roundings.
    assert!(d_o < 1e-2 && dq < 1e-2 && dk < 1e-2 && dv < 1e-2, "o {d_o}, d_q {dq}, d_k {dk}, d_v {dv}");
}

#[test]
fn gemm_epilogue_gradients_equal_candles_autograd_through_a_larger_model() {
    let (t, i, o) = (7, 12, 10);
    let x = Var::from_tensor(&tensor(&[1, t, i], 21, DType::F32)).unwrap();
    let w = Var::from_tensor(&tensor(&[1, i, o], 22, DType::F32)).unwrap();
    let b = Var::from_tensor(&tensor(&[1, 1, o], 23, DType::F32)).unwrap();
    // The graph inside a candle model: its input is computed (x · 2 − 0.1), its output used twice
    // (`sum_all` hands back a broadcast gradient, which the runner lays out for the backward).
    let model = |x: &Tensor, run: &dyn Fn(&Tensor) -> Tensor| {
        let y = run(&x.affine(2.0, -0.1).unwrap());
        let y64 = y.to_dtype(DType::F64).unwrap();
        (loss(&y64, 24) + y64.sum_all().unwrap()).unwrap()
    };
    let runner = Runner::new();
    let graphs = model(&x, &|x| runner.run_with_backward(&Dense::new(t, i, o), &[x, &w, &b]).unwrap().remove(1));
    let grads = graphs.backward().unwrap();

    let [x64, w64, b64] = [&x, &w, &b].map(|t| Var::from_tensor(&t.to_dtype(DType::F64).unwrap()).unwrap());
    let candle = model(&x64, &|x| x.matmul(&w64).unwrap().broadcast_add(&b64).unwrap().relu().unwrap());
    let expected = candle.backward().unwrap();

    let (lg, lc) = (graphs.to_scalar::<f64>().unwrap(), candle.to_scalar::<f64>().unwrap());
    assert!((lg - lc).abs() < 1e-4 * lc.abs(), "loss {lg}, candle's {lc}");
    for (name, got, want) in [("x", &x, &x64), ("w", &w, &w64), ("b", &b, &b64)] {
        let d = relative(grads.get(got).unwrap(), expected.get(want).unwrap());
        println!("dense: d_{name} {d:.1e}");
        assert!(d < 1e-5, "d_{name}: {d}");
    }
}

#[test]
fn host_scalars_take_a_cpu_scalar_tensor_or_the_ports_dims() {
    let (n, c) = (3, 8);
    let (x, scale) = (tensor(&[n, c], 31, DType::F32), tensor(&[1, c], 32, DType::F32));
    let runner = Runner::new();
    let graph = RmsNorm::new(n, c);
    let run = |eps: &Tensor| runner.run(&graph, &[&x, &scale, eps]).map(|mut o| o.remove(0));
    let rank0 = run(&Tensor::new(0.5f32, &Device::Cpu).unwrap()).unwrap();
    let port_dims = run(&Tensor::new(&[[0.5f32]], &Device::Cpu).unwrap()).unwrap();
    assert_eq!(rank0.to_vec2::<f32>().unwrap(), port_dims.to_vec2::<f32>().unwrap());
    // Each run reads its own value: a large epsilon damps the output.
    let damped = run(&Tensor::new(100f32, &Device::Cpu).unwrap()).unwrap();
    let norm = |t: &Tensor| t.sqr().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap();
    assert!(norm(&damped) < norm(&rank0) / 10.0);

    let e = run(&Tensor::new(&[0.5f32, 0.5], &Device::Cpu).unwrap()).unwrap_err().to_string();
    assert!(e.contains("graph `RmsNorm`, input `eps` is a host scalar: give it one value"), "{e}");
    assert!(e.contains("the tensor is [2]"), "{e}");
    let e = run(&Tensor::new(0.5f64, &Device::Cpu).unwrap()).unwrap_err().to_string();
    assert!(e.contains("input `eps`: the port is f32, the tensor is f64"), "{e}");
}

graph! {
    /// Four inputs with gradients: one more than candle's custom ops take.
    pub Four(a: f32[4], b: f32[4], c: f32[4], d: f32[4]) -> (y: f32[4]) {
        y = add(mul(a, b), mul(c, d));
    }
    pub FourBackward(a: f32[4], b: f32[4], c: f32[4], d: f32[4], d_y: f32[4])
        -> (d_a: f32[4], d_b: f32[4], d_c: f32[4], d_d: f32[4])
    {
        d_a = mul(d_y, b);
        d_b = mul(d_y, a);
        d_c = mul(d_y, d);
        d_d = mul(d_y, c);
    }

    /// y = a · s with a host scalar s.
    pub Scale(a: f32[4], s: f32[1] host) -> (y: f32[4]) {
        y = mul(a, s);
    }
    /// A backward input named after nothing of `Scale`.
    pub Misnamed(a: f32[4], grad: f32[4]) -> (d_a: f32[4]) {
        d_a = mul(grad, a);
    }
    /// A gradient for the host scalar.
    pub ScalarGradient(a: f32[4], d_y: f32[4]) -> (d_a: f32[4], d_s: f32[4]) {
        d_a = mul(d_y, a);
        d_s = mul(d_y, a);
    }
    /// A gradient of another element type than its input.
    pub HalfGradient(d_y: f32[4]) -> (d_a: bf16[4]) {
        d_a = identity(d_y);
    }

    /// Two outputs.
    pub Two(a: f32[4]) -> (y: f32[4], z: f32[4]) {
        y = neg(a);
        z = abs(a);
    }
    /// Both their gradients.
    pub TwoBackward(a: f32[4], d_y: f32[4], d_z: f32[4]) -> (d_a: f32[4]) {
        d_a = add(neg(d_y), mul(d_z, a));
    }
    /// No gradient of an output.
    pub NoGradient(a: f32[4]) -> (d_a: f32[4]) {
        d_a = neg(a);
    }
}

impl Differentiable for Four {
    type Backward = FourBackward;
    fn backward(&self) -> FourBackward {
        FourBackward::new()
    }
}

/// `Scale` with each wrong backward, by a const parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ScaleWith<const K: u8>;

macro_rules! scale_with {
    ($($k:literal => $backward:ident),*) => {$(
        impl cudnn_graph::GraphType for ScaleWith<$k> {
            const NAME: &'static str = Scale::NAME;
            const FINGERPRINT: u64 = Scale::FINGERPRINT;
            const SINGLE_KERNEL: bool = false;
            fn graph(&self) -> Result<cudnn_graph::Graph, cudnn_graph::ArgError> {
                Scale::new().graph()
            }
            fn binding(&self) -> String {
                Scale::new().binding()
            }
            fn runtime_dims(&self) -> Vec<(&'static str, usize)> {
                Vec::new()
            }
        }
        impl Differentiable for ScaleWith<$k> {
            type Backward = $backward;
            fn backward(&self) -> $backward {
                $backward::new()
            }
        }
    )*};
}

scale_with!(0 => Misnamed, 1 => ScalarGradient, 2 => HalfGradient);

impl Differentiable for Two {
    type Backward = TwoBackward;
    fn backward(&self) -> TwoBackward {
        TwoBackward::new()
    }
}

/// `Two` paired with a backward taking no output gradient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct TwoWithout;

impl cudnn_graph::GraphType for TwoWithout {
    const NAME: &'static str = Two::NAME;
    const FINGERPRINT: u64 = Two::FINGERPRINT;
    const SINGLE_KERNEL: bool = false;
    fn graph(&self) -> Result<cudnn_graph::Graph, cudnn_graph::ArgError> {
        Two::new().graph()
    }
    fn binding(&self) -> String {
        Two::new().binding()
    }
    fn runtime_dims(&self) -> Vec<(&'static str, usize)> {
        Vec::new()
    }
}

impl Differentiable for TwoWithout {
    type Backward = NoGradient;
    fn backward(&self) -> NoGradient {
        NoGradient::new()
    }
}

fn pairing_error<G: Differentiable>(graph: &G, inputs: &[&Tensor]) -> String {
    match Runner::new().run_with_backward(graph, inputs) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn pairing_mistakes_are_typed_errors_naming_both_graphs() {
    let a = Var::from_tensor(&tensor(&[4], 41, DType::F32)).unwrap();
    let s = Tensor::new(&[2f32], &Device::Cpu).unwrap();

    let e = pairing_error(&Four::new(), &[&a, &a, &a, &a]);
    assert!(
        e.contains("graph `FourBackward` (the backward of `Four`) gives gradients of 4 inputs (a, b, c, d)")
            && e.contains("at most 3 tensors (`CustomOp3`)"),
        "{e}"
    );
    let e = pairing_error(&ScaleWith::<0>, &[&a, &s]);
    assert!(e.contains("graph `Misnamed` (the backward of `Scale`), input `grad`"), "{e}");
    assert!(e.contains("not `d_<output>`; name it after one of a, s, y"), "{e}");
    let e = pairing_error(&ScaleWith::<1>, &[&a, &s]);
    assert!(
        e.contains("output `d_s`: not the gradient of an input of `Scale`; name it `d_<input>` for one of a"),
        "{e}"
    );
    let e = pairing_error(&ScaleWith::<2>, &[&a, &s]);
    assert!(e.contains("output `d_a`: a gradient must be what its input is, f32[4]; it is bf16[4]"), "{e}");
    let e = pairing_error(&Two::new(), &[&a]);
    assert!(e.contains("takes the gradients of outputs `y` and `z`: candle's custom ops return one tensor"), "{e}");
    let e = pairing_error(&TwoWithout, &[&a]);
    assert!(
        e.contains("takes no gradient of an output of `Two`: give it an input `d_<output>` for one of y, z"),
        "{e}"
    );
}

graph! {
    /// `Scale`'s gradient: the host scalar passed again.
    pub ScaleBackward(s: f32[1] host, d_y: f32[4]) -> (d_a: f32[4]) {
        d_a = mul(d_y, s);
    }
}

impl Differentiable for Scale {
    type Backward = ScaleBackward;
    fn backward(&self) -> ScaleBackward {
        ScaleBackward::new()
    }
}

#[test]
fn a_host_scalar_input_is_a_constant_of_the_backward() {
    // `Scale`'s only gradient is `a`'s; `s` is kept by the op.
    let a = Var::from_tensor(&tensor(&[4], 51, DType::F32)).unwrap();
    let s = Tensor::new(-3f32, &Device::Cpu).unwrap();
    let y = Runner::new().run_with_backward(&Scale::new(), &[&a, &s]).unwrap().remove(0);
    let grads = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(grads.get(&a).unwrap().to_vec1::<f32>().unwrap(), [-3.0; 4]);
    assert!(grads.get(&s).is_none());
}
