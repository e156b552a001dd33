//! candle autograd for graph types that have a backward graph. [`Differentiable`] pairs a forward
//! graph type with its backward graph type; their ports are matched by name (below), checked on
//! first use. [`Runner::run_with_backward`] runs the forward graph and gives its differentiated
//! output a candle custom op whose backward runs the backward graph, so `loss.backward()` reaches
//! it like any candle op.
//!
//! candle's custom ops (`CustomOp1`, `CustomOp2`, `CustomOp3`) take one to three tensors and
//! return one, so a forward graph here has one output with a gradient and at most three inputs
//! with gradients; anything else is a typed error naming the limit. The side outputs the backward
//! needs (SDPA's `stats`, a norm's `inv_var` and `mean`) are kept by the op from the forward run,
//! never recomputed; inputs without a gradient (host scalars, masks) are kept as constants.

use std::sync::{Arc, Mutex, PoisonError};

use candle_core::{CpuStorage, CudaStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Shape, Storage, Tensor};
use cudnn_graph::GraphType;

use crate::error::AdapterError;
use crate::ports::{in_port_order, storage_shape};
use crate::{device_key, run_device, Outputs, Prepared, Runner};

/// A forward graph type whose gradients a backward graph type computes: what
/// [`Runner::run_with_backward`] needs to put it into candle's autograd.
///
/// The two graphs' ports are paired by name:
/// - each input of the backward graph is an input of the forward graph (`x`, `scale`: the same
///   tensor is passed again), an output of the forward graph (`o`, `stats`, `inv_var`: kept from
///   the forward run), or `d_<output>` (`d_o`, `d_y`): the gradient of that forward output, which
///   candle's backward pass gives;
/// - each output of the backward graph is `d_<input>` (`d_q`, `d_scale`): the gradient of that
///   forward input, with its dims and element type.
///
/// Exactly one forward output has a gradient, and at most three forward inputs do
/// ([`AdapterError::TooManyGradients`]): candle's custom ops return one tensor and take at most
/// three. A forward input without a `d_<input>` output (a host scalar, a mask, sequence lengths)
/// gets no gradient.
///
/// ```
/// use candle_core::{Device, Tensor, Var};
/// use cudnn_graph::graph;
/// use cudnn_graph_candle::{Differentiable, Runner};
///
/// graph! {
///     /// y = x · w
///     pub Mm<dyn T>(x: f32[1, T, 2], w: f32[1, 2, 3]) -> (y: f32[1, T, 3]) {
///         y = matmul(x, w);
///     }
///
///     /// Its gradients: d_x = d_y · wᵀ, d_w = xᵀ · d_y.
///     pub MmBackward<dyn T>(x: f32[1, T, 2], w: f32[1, 2, 3], d_y: f32[1, T, 3])
///         -> (d_x: f32[1, T, 2], d_w: f32[1, 2, 3])
///     {
///         d_x = matmul(d_y, transpose(w, permutation = [0, 2, 1]));
///         d_w = matmul(transpose(x, permutation = [0, 2, 1]), d_y);
///     }
/// }
///
/// impl Differentiable for Mm {
///     type Backward = MmBackward;
///     fn backward(&self) -> MmBackward {
///         MmBackward::new(self.T)
///     }
/// }
///
/// # fn main() -> candle_core::Result<()> {
/// let x = Var::new(&[[[1f32, 2.0], [3.0, 4.0]]], &Device::Cpu)?;
/// let w = Var::new(&[[[1f32, 0.0, 2.0], [0.0, 1.0, 3.0]]], &Device::Cpu)?;
/// let [y] = Runner::new().run_with_backward(&Mm::new(2), &[&x, &w])?.try_into().unwrap();
/// let grads = y.sum_all()?.backward()?;
/// // d(sum y)/dx = ones · wᵀ: each row holds the row sums of w.
/// assert_eq!(grads.get(&x).unwrap().to_vec3::<f32>()?, [[[3.0, 4.0], [3.0, 4.0]]]);
/// # Ok(())
/// # }
/// ```
pub trait Differentiable: GraphType {
    /// The backward graph type.
    type Backward: GraphType;
    /// The backward graph for this forward graph's binding (the same runtime dims).
    fn backward(&self) -> Self::Backward;
}

/// The most tensors a candle custom op takes (`CustomOp3`).
const MAX_GRADIENTS: usize = 3;

/// Where a backward input comes from.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// The forward input of this index.
    Input(usize),
    /// The forward output of this index.
    Output(usize),
    /// The gradient of the differentiated forward output.
    Gradient,
}

/// How a backward graph's ports meet its forward graph's.
#[derive(Debug)]
struct Pairing {
    /// The forward output with a gradient.
    output: usize,
    /// The backward input that takes its gradient.
    gradient_input: usize,
    /// `(forward input, backward output giving its gradient)`, in forward input order.
    gradients: Vec<(usize, usize)>,
    /// Per backward input, in order, where it comes from.
    sources: Vec<Source>,
}

fn names<'a>(ports: impl Iterator<Item = &'a str>) -> String {
    ports.collect::<Vec<_>>().join(", ")
}

/// Pairs `backward`'s ports with `forward`'s by name (see [`Differentiable`]).
fn pair(forward: &Prepared, backward: &Prepared) -> Result<Pairing, AdapterError> {
    let (f, b) = (&forward.graph.name, &backward.graph.name);
    let input = |name: &str| forward.inputs.iter().position(|p| p.name == name);
    let output = |name: &str| forward.outputs.iter().position(|p| p.name == name);
    let mut sources = Vec::with_capacity(backward.inputs.len());
    let mut differentiated: Option<(usize, usize)> = None;
    for (k, port) in backward.inputs.iter().enumerate() {
        let source = if let Some(i) = input(&port.name) {
            Source::Input(i)
        } else if let Some(j) = output(&port.name) {
            Source::Output(j)
        } else if let Some(j) = port.name.strip_prefix("d_").and_then(output) {
            if let Some((first, _)) = differentiated.filter(|&(first, _)| first != j) {
                return Err(AdapterError::GradientOutputs {
                    forward: f.clone(),
                    backward: b.clone(),
                    first: forward.outputs[first].name.clone(),
                    second: forward.outputs[j].name.clone(),
                });
            }
            differentiated = Some((j, k));
            Source::Gradient
        } else {
            return Err(AdapterError::BackwardInput {
                forward: f.clone(),
                backward: b.clone(),
                port: port.name.clone(),
                ports: names(forward.inputs.iter().chain(&forward.outputs).map(|p| p.name.as_str())),
            });
        };
        sources.push(source);
    }
    let Some((output, gradient_input)) = differentiated else {
        return Err(AdapterError::NoOutputGradient {
            forward: f.clone(),
            backward: b.clone(),
            expected: names(forward.outputs.iter().map(|p| p.name.as_str())),
        });
    };
    let mut gradients = Vec::with_capacity(backward.outputs.len());
    for (k, port) in backward.outputs.iter().enumerate() {
        let i = port.name.strip_prefix("d_").and_then(input).filter(|&i| !forward.inputs[i].host).ok_or_else(|| {
            AdapterError::BackwardOutput {
                forward: f.clone(),
                backward: b.clone(),
                port: port.name.clone(),
                inputs: names(forward.inputs.iter().filter(|p| !p.host).map(|p| p.name.as_str())),
            }
        })?;
        let x = &forward.inputs[i];
        if port.dims != x.dims || port.data_type != x.data_type {
            return Err(AdapterError::GradientPort {
                forward: f.clone(),
                backward: b.clone(),
                port: port.name.clone(),
                expected: format!("{}{:?}", x.data_type, x.dims),
                found: format!("{}{:?}", port.data_type, port.dims),
            });
        }
        gradients.push((i, k));
    }
    gradients.sort_unstable();
    if gradients.len() > MAX_GRADIENTS {
        return Err(AdapterError::TooManyGradients {
            forward: f.clone(),
            backward: b.clone(),
            inputs: names(gradients.iter().map(|&(i, _)| forward.inputs[i].name.as_str())),
            found: gradients.len(),
            limit: MAX_GRADIENTS,
        });
    }
    Ok(Pairing { output, gradient_input, gradients, sources })
}

impl Runner {
    /// Runs `graph` like [`Runner::run`], and makes its output that has a gradient (the one whose
    /// `d_<output>` the backward graph takes) a candle op whose backward runs
    /// [`Differentiable::backward`]'s graph on this runner: `loss.backward()` gives the gradients
    /// of the inputs that have one. Its other outputs (side outputs such as SDPA's `stats`) are
    /// returned without a backward op, and the op keeps them for the backward graph.
    ///
    /// In the backward pass the upstream gradient is laid out as the backward graph's
    /// `d_<output>` port is (a copy only where candle's gradient is strided otherwise: the
    /// gradient of a `sum` is a broadcast). Pairing errors ([`Differentiable`]) come before the
    /// forward runs.
    pub fn run_with_backward<G: Differentiable>(
        &self,
        graph: &G,
        inputs: &[&Tensor],
    ) -> candle_core::Result<Vec<Tensor>> {
        let device = run_device(inputs);
        let key = device_key::<G>(&device)?;
        let backward = graph.backward();
        let prepared_backward = self.prepared(&backward, key, &device)?;
        let pairing = pair(&*self.prepared(graph, key, &device)?, &prepared_backward)?;
        let gradient_order =
            prepared_backward.inputs[pairing.gradient_input].packed_order(&prepared_backward.graph.name)?;
        let Outputs { prepared, storages } = self.run_storages(graph, inputs)?;
        let mut result = None;
        let mut outputs = Vec::with_capacity(storages.len());
        for (j, storage) in storages.into_iter().enumerate() {
            if j == pairing.output {
                result = Some(storage);
                outputs.push(None);
            } else {
                outputs.push(Some(Outputs::tensor(&prepared, j, storage)?));
            }
        }
        let order = prepared.output_orders[pairing.output].clone();
        let shape = Shape::from(storage_shape(&prepared.outputs[pairing.output], &order));
        let args: Vec<Tensor> = pairing.gradients.iter().map(|&(i, _)| inputs[i].clone()).collect();
        let op = GradientOp {
            forward: G::NAME,
            runner: self.clone(),
            backward,
            inputs: inputs.iter().map(|&t| t.clone()).collect(),
            side_outputs: outputs.clone(),
            result: Mutex::new(result),
            shape,
            order: order.clone(),
            gradient_order,
            pairing,
        };
        let node = match args.as_slice() {
            [a] => a.apply_op1_arc(Arc::new(Box::new(op)))?,
            [a, b] => a.apply_op2_arc(b, Arc::new(Box::new(op)))?,
            [a, b, c] => a.apply_op3_arc(b, c, Arc::new(Box::new(op)))?,
            // `pair` gives one to `MAX_GRADIENTS` gradients (a graph has at least one output).
            _ => {
                return Err(AdapterError::TooManyGradients {
                    forward: G::NAME.to_string(),
                    backward: <G::Backward as GraphType>::NAME.to_string(),
                    inputs: names(prepared.inputs.iter().map(|p| p.name.as_str())),
                    found: args.len(),
                    limit: MAX_GRADIENTS,
                }
                .into())
            }
        };
        let differentiated = in_port_order(node, &order)?;
        Ok(outputs.into_iter().map(|o| o.unwrap_or_else(|| differentiated.clone())).collect())
    }
}

/// The candle op of one forward run: its forward hands candle the output the graph computed, its
/// backward runs the backward graph.
struct GradientOp<B> {
    forward: &'static str,
    runner: Runner,
    backward: B,
    pairing: Pairing,
    /// The forward's inputs, host scalars and inputs without a gradient included.
    inputs: Vec<Tensor>,
    /// The forward's outputs but the differentiated one (`None`), kept for the backward.
    side_outputs: Vec<Option<Tensor>>,
    /// The differentiated output's storage, until candle's forward call takes it.
    result: Mutex<Option<Storage>>,
    /// Its dims in allocation order, and that order (`Prepared::output_orders`).
    shape: Shape,
    order: Vec<usize>,
    /// The allocation order of the backward graph's gradient input.
    gradient_order: Vec<usize>,
}

impl<B: GraphType> GradientOp<B> {
    fn take(&self) -> Result<Storage, AdapterError> {
        self.result
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .ok_or_else(|| AdapterError::ForwardReplay { graph: self.forward.to_string() })
    }

    fn cpu(&self) -> candle_core::Result<(CpuStorage, Shape)> {
        match self.take()? {
            Storage::Cpu(s) => Ok((s, self.shape.clone())),
            _ => Err(AdapterError::ForwardReplay { graph: self.forward.to_string() }.into()),
        }
    }

    fn cuda(&self) -> candle_core::Result<(CudaStorage, Shape)> {
        match self.take()? {
            Storage::Cuda(s) => Ok((s, self.shape.clone())),
            _ => Err(AdapterError::ForwardReplay { graph: self.forward.to_string() }.into()),
        }
    }

    /// The gradients of the differentiated inputs, from the op's result `res` and its gradient
    /// `grad` (both in allocation order).
    fn gradients(&self, res: &Tensor, grad: &Tensor) -> candle_core::Result<Vec<Option<Tensor>>> {
        let res = in_port_order(res.clone(), &self.order)?;
        let grad = laid_out(in_port_order(grad.clone(), &self.order)?, &self.gradient_order)?;
        let tensors: Vec<&Tensor> = self
            .pairing
            .sources
            .iter()
            .map(|source| match *source {
                Source::Input(i) => &self.inputs[i],
                Source::Output(j) => self.side_outputs[j].as_ref().unwrap_or(&res),
                Source::Gradient => &grad,
            })
            .collect();
        let outputs = self.runner.run(&self.backward, &tensors)?;
        Ok(self.pairing.gradients.iter().map(|&(_, k)| Some(outputs[k].clone())).collect())
    }

    /// [`GradientOp::gradients`] as the `N` a custom op of `N` inputs returns: `None` past the
    /// last differentiated input.
    fn gradient_array<const N: usize>(&self, res: &Tensor, grad: &Tensor) -> candle_core::Result<[Option<Tensor>; N]> {
        let mut g = self.gradients(res, grad)?.into_iter();
        Ok(std::array::from_fn(|_| g.next().flatten()))
    }
}

/// `tensor` (in its port's dim order) with packed strides in `order`: itself when it has them, a
/// copy otherwise.
fn laid_out(tensor: Tensor, order: &[usize]) -> candle_core::Result<Tensor> {
    let stored = tensor.permute(order.to_vec())?;
    if stored.is_contiguous() {
        return Ok(tensor);
    }
    in_port_order(stored.contiguous()?, order)
}

/// candle's `CustomOp1`, `CustomOp2` and `CustomOp3`, alike but for their arity (one `$input`
/// name per input, for the storages and tensors candle passes and the op ignores): the forward
/// hands back the result the graph already computed, and the backward gives the differentiated
/// inputs' gradients in order, `None` past the last, as `$pattern` binds them into `$grads`.
macro_rules! custom_op {
    ($trait:ident, [$($input:ident),+], |$pattern:pat_param| -> $grads:ty { $gradients:expr }) => {
        impl<B: GraphType> $trait for GradientOp<B> {
            fn name(&self) -> &'static str {
                self.forward
            }

            fn cpu_fwd(&self, $($input: &CpuStorage, _: &Layout),+) -> candle_core::Result<(CpuStorage, Shape)> {
                self.cpu()
            }

            fn cuda_fwd(&self, $($input: &CudaStorage, _: &Layout),+) -> candle_core::Result<(CudaStorage, Shape)> {
                self.cuda()
            }

            fn bwd(&self, $($input: &Tensor,)+ res: &Tensor, grad: &Tensor) -> candle_core::Result<$grads> {
                let $pattern = self.gradient_array(res, grad)?;
                Ok($gradients)
            }
        }
    };
}

custom_op!(CustomOp1, [_a], |[a]| -> Option<Tensor> { a });
custom_op!(CustomOp2, [_a, _b], |[a, b]| -> (Option<Tensor>, Option<Tensor>) { (a, b) });
custom_op!(CustomOp3, [_a, _b, _c], |[a, b, c]| -> (Option<Tensor>, Option<Tensor>, Option<Tensor>) { (a, b, c) });
