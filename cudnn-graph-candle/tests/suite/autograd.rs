//! `Runner::run_with_backward` on CPU tensors: gradients from cudnn-graph's backward graphs equal
//! candle's own autograd of the same computation written in candle ops (compared in f64), for
//! RMSNorm with a host-scalar epsilon, causal grouped-query attention, and a GEMM with its bias
//! and ReLU epilogue; pairing mistakes are typed errors naming both graphs and the port.

// Shared with tests/gpu_candle/gpu_autograd.rs.
#[path = "../common/autograd.rs"]
mod cases;

use candle_core::{DType, Device, Tensor, Var};
use cudnn_graph::graph;
use cudnn_graph_candle::{Differentiable, Runner};

use cases::{check, tensor, RmsNorm};

fn cpu_tensor(dims: &[usize], seed: u64) -> Tensor {
    tensor(dims, seed, DType::F32, &Device::Cpu).unwrap()
}

#[test]
fn rmsnorm_gradients_equal_candles_autograd() {
    check("rmsnorm", &cases::rmsnorm(&Runner::new(), &Device::Cpu, 6, 32).unwrap(), 1e-5);
}

#[test]
fn causal_attention_gradients_equal_candles_autograd() {
    // bf16 storage of every tensor (8 bits of mantissa): within a few of its roundings.
    check("attention", &cases::attention(&Runner::new(), &Device::Cpu, 4, 2, 9, 16).unwrap(), 1e-2);
}

#[test]
fn gemm_epilogue_gradients_equal_candles_autograd_through_a_larger_model() {
    check("dense", &cases::dense(&Runner::new(), &Device::Cpu, 7, 12, 10).unwrap(), 1e-5);
}

#[test]
fn host_scalars_take_a_cpu_scalar_tensor_or_the_ports_dims() {
    let (n, c) = (3, 8);
    let (x, scale) = (cpu_tensor(&[n, c], 31), cpu_tensor(&[1, c], 32));
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
    let a = Var::from_tensor(&cpu_tensor(&[4], 41)).unwrap();
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
    let a = Var::from_tensor(&cpu_tensor(&[4], 51)).unwrap();
    let s = Tensor::new(-3f32, &Device::Cpu).unwrap();
    let y = Runner::new().run_with_backward(&Scale::new(), &[&a, &s]).unwrap().remove(0);
    let grads = y.sum_all().unwrap().backward().unwrap();
    assert_eq!(grads.get(&a).unwrap().to_vec1::<f32>().unwrap(), [-3.0; 4]);
    assert!(grads.get(&s).is_none());
}
