//! The CPU reference engine: executes any [`Graph`] on the host, in `f64`, rounding each tensor to
//! its storage type as cuDNN's memory would (intermediates to the graph's intermediate type,
//! outputs to theirs). It needs no GPU and no libcudnn, and is the oracle of the GPU tests.

mod error;

pub use crate::array::{Array, HostSlice};
pub use error::ArgError;

use crate::ir::{Graph, GraphError, Tensor, TensorId};
use crate::Element;

/// Reads a strided host buffer of `tensor` into a dense array, checking type and length.
///
/// The buffer must hold exactly the tensor's storage span ([`Tensor::storage_len`]): a longer one
/// is as much an error as a shorter one, because on the host it means a buffer made for another
/// shape (a batch of 8 passed where the graph is bound to 4), whose tail would be ignored.
pub fn gather(tensor: &Tensor, data: HostSlice<'_>) -> Result<Array, ArgError> {
    if data.data_type() != tensor.data_type {
        return Err(ArgError::DType {
            tensor: tensor.name.clone(),
            expected: tensor.data_type,
            found: data.data_type(),
        });
    }
    let need = tensor.storage_len();
    if data.len() != need {
        return Err(ArgError::Length {
            tensor: tensor.name.clone(),
            expected: need,
            found: data.len(),
            dims: tensor.dims.clone(),
            strides: tensor.strides.clone(),
        });
    }
    Ok(Array::from_fn(&tensor.dims, |flat| {
        let idx = Array::unravel(flat as i64, &tensor.dims);
        let off: i64 = idx.iter().zip(&tensor.strides).map(|(i, s)| i * s).sum();
        data.get(off as usize)
    }))
}

/// Writes a dense array into `tensor`'s strided layout as elements of `T` (storage it does not
/// address stays at `T`'s zero).
pub fn scatter<T: Element>(tensor: &Tensor, array: &Array) -> Vec<T> {
    let mut out = vec![T::from_f64_value(0.0); tensor.storage_len()];
    for (flat, v) in array.data.iter().enumerate() {
        let idx = Array::unravel(flat as i64, &tensor.dims);
        let off: i64 = idx.iter().zip(&tensor.strides).map(|(i, s)| i * s).sum();
        out[off as usize] = T::from_f64_value(*v);
    }
    out
}

/// Runs `graph` on named host inputs; returns each graph output (in [`Graph::outputs`] order) as a
/// dense array of values already rounded to the output's type.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::{reference, DataType, GraphBuilder};
/// let mut g = GraphBuilder::new("axpy");
/// let x = g.input("x", DataType::F32, &[3]).unwrap();
/// let y = g.op("mul", &[x.into(), 2.0.into()], &[]).unwrap()[0];
/// g.output(y, "y", DataType::F32).unwrap();
/// let graph = g.build().unwrap();
/// let out = reference::run(&graph, &[("x", [1.0f32, 2.0, 3.5].as_slice().into())]).unwrap();
/// assert_eq!(out[0].data, vec![2.0, 4.0, 7.0]);
/// ```
///
/// The graph is validated first ([`ArgError::Graph`] if it breaks a rule): a [`Graph`] is a
/// plain struct that can be made or edited by hand, and the engine indexes tensors by the ids
/// its nodes hold.
pub fn run(graph: &Graph, inputs: &[(&str, HostSlice<'_>)]) -> Result<Vec<Array>, ArgError> {
    let values = named_inputs(graph, inputs)?;
    if let Some(missing) = graph.inputs().iter().find(|id| values[id.0].is_none()) {
        return Err(ArgError::Missing { graph: graph.name.clone(), tensor: graph.tensor(*missing).name.clone() });
    }
    compute(graph, values)
}

/// Validates `graph` and gathers `inputs` (graph inputs by name, each once) into one slot per
/// tensor, the rest `None`: [`ArgError::Unexpected`] for a name that is not a graph input or is
/// given twice, [`ArgError::Length`] for data that does not fill its tensor.
fn named_inputs(graph: &Graph, inputs: &[(&str, HostSlice<'_>)]) -> Result<Vec<Option<Array>>, ArgError> {
    validated(graph)?;
    let graph_inputs = graph.inputs();
    let mut values: Vec<Option<Array>> = vec![None; graph.tensors.len()];
    for (name, data) in inputs {
        let id = graph
            .id_of(name)
            .filter(|id| graph_inputs.contains(id) && values[id.0].is_none())
            .ok_or_else(|| ArgError::Unexpected { graph: graph.name.clone(), tensor: name.to_string() })?;
        values[id.0] = Some(gather(graph.tensor(id), *data)?);
    }
    Ok(values)
}

/// Checks, on host copies, the values the graph's ops read memory through, before a GPU execute
/// that cuDNN does not bounds-check: page tables and ragged offsets, with the sequence lengths
/// they go with ([`crate::ops::Op::check_values`], the rule the CPU engine runs before it
/// computes). `inputs` names graph inputs as [`run`] takes them, but only the small integer ones
/// are needed: a node is checked when any of its integer graph inputs is given, and then all of
/// them must be ([`ArgError::Missing`] otherwise); the large tensors are read for their dims only.
/// The first fault is [`ArgError::Graph`] naming the node, the port, the sequence and the bound.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::{reference, DataType, GraphBuilder, Operand};
/// use cudnn_graph::ops::sdpa::ragged::thd_offsets;
/// // Packed prefill of 2 sequences of up to 8 tokens, 2 heads of 8.
/// let mut g = GraphBuilder::new("packed");
/// let mut ins = Vec::new();
/// for name in ["q", "k", "v"] {
///     let t = g.input(name, DataType::BF16, &[2, 2, 8, 8]).unwrap();
///     g.set_dim_order(t, &[0, 2, 1, 3]).unwrap();
///     ins.push(t);
/// }
/// let lens = g.input("lens", DataType::I32, &[2, 1, 1, 1]).unwrap();
/// let offsets = g.input("offsets", DataType::I64, &[3, 1, 1, 1]).unwrap();
/// ins.extend([lens, lens, offsets, offsets, offsets, offsets]);
/// let ins: Vec<Operand> = ins.into_iter().map(Operand::Tensor).collect();
/// let attrs = [("ragged".into(), true.into()), ("padding_mask".into(), true.into())];
/// let o = g.op("sdpa", &ins, &attrs).unwrap()[0];
/// let o = g.output(o, "o", DataType::BF16).unwrap();
/// g.set_dim_order(o, &[0, 2, 1, 3]).unwrap();
/// let graph = g.build().unwrap();
/// let good = thd_offsets(&[5, 3], 2, 8).unwrap();
/// assert_eq!(good, [0, 80, 128]);
/// let check = |lens: &[i32], offsets: &[i64]| {
///     reference::check_values(&graph, &[("lens", lens.into()), ("offsets", offsets.into())])
/// };
/// assert!(check(&[5, 3], &good).is_ok());
/// // Sequence 0's 5 tokens overlap sequence 1 at 64.
/// let e = check(&[5, 3], &[0, 64, 128]).unwrap_err().to_string();
/// assert!(e.contains("sequence 0 of Q runs from Ragged_offset_Q[0] = 0"), "{e}");
/// ```
pub fn check_values(graph: &Graph, inputs: &[(&str, HostSlice<'_>)]) -> Result<(), ArgError> {
    let values = named_inputs(graph, inputs)?;
    let graph_inputs = graph.inputs();
    let integer = |id: &TensorId| {
        matches!(graph.tensor(*id).data_type, crate::DataType::I32 | crate::DataType::I64) && graph_inputs.contains(id)
    };
    for node in &graph.nodes {
        let ints: Vec<&TensorId> = node.inputs.iter().filter(|id| integer(id)).collect();
        if ints.iter().all(|id| values[id.0].is_none()) {
            continue;
        }
        if let Some(missing) = ints.iter().find(|id| values[id.0].is_none()) {
            return Err(ArgError::Missing { graph: graph.name.clone(), tensor: graph.tensor(**missing).name.clone() });
        }
        // The large inputs by their dims alone: the value rules read the integer ones only.
        let arrays: Vec<Array> = node
            .inputs
            .iter()
            .map(|id| {
                values[id.0].clone().unwrap_or_else(|| Array { dims: graph.tensor(*id).dims.clone(), data: Vec::new() })
            })
            .collect();
        let refs: Vec<&Array> = arrays.iter().collect();
        node.op.check_values(&refs).map_err(|source| ArgError::Graph {
            graph: graph.name.clone(),
            source: Box::new(GraphError::Shape {
                node: node.name.clone(),
                op: node.op.call_name(),
                port: source.arg.and_then(|a| node.op.inputs().get(a).map(|p| p.name)),
                source,
            }),
        })?;
    }
    Ok(())
}

fn validated(graph: &Graph) -> Result<(), ArgError> {
    graph.validate().map_err(|source| ArgError::Graph { graph: graph.name.clone(), source: Box::new(source) })
}

/// Runs `graph` given a dense array for every graph input (indexed by [`TensorId`]; other slots
/// `None`), as [`gather`] makes them. The graph is validated, `values` must have one slot per
/// tensor, and every graph input an array of its tensor's dims ([`ArgError::Missing`] or
/// [`ArgError::Length`] naming the input otherwise).
pub fn run_arrays(graph: &Graph, values: Vec<Option<Array>>) -> Result<Vec<Array>, ArgError> {
    run_arrays_checked(graph, &values)?;
    compute(graph, values)
}

/// [`run_arrays`], returning every tensor's value, indexed by [`TensorId`] (`None` for a tensor
/// no node computed and no input gave, which a validated graph does not have): what a bisection
/// compares a part's outputs with (`cudnn-graph repro`).
pub fn run_all(graph: &Graph, values: Vec<Option<Array>>) -> Result<Vec<Option<Array>>, ArgError> {
    run_arrays_checked(graph, &values)?;
    compute_all(graph, values)
}

/// The checks of [`run_arrays`] on `values`.
fn run_arrays_checked(graph: &Graph, values: &[Option<Array>]) -> Result<(), ArgError> {
    validated(graph)?;
    if values.len() != graph.tensors.len() {
        return Err(ArgError::Slots { graph: graph.name.clone(), expected: graph.tensors.len(), found: values.len() });
    }
    for id in graph.inputs() {
        check_input(graph, id, values[id.0].as_ref())?;
    }
    Ok(())
}

/// Checks that `array`, given for graph input `id`, is a dense array of its tensor's dims:
/// [`ArgError::Missing`] for none, [`ArgError::Length`] naming the input otherwise. The check
/// [`run_arrays`] and plan emulation (`ExecutionPlan::emulate`) make of every input.
pub(crate) fn check_input(graph: &Graph, id: TensorId, array: Option<&Array>) -> Result<(), ArgError> {
    let t = graph.tensor(id);
    match array {
        None => Err(ArgError::Missing { graph: graph.name.clone(), tensor: t.name.clone() }),
        Some(a) if a.dims != t.dims || usize::try_from(t.element_count()).ok() != Some(a.data.len()) => {
            Err(ArgError::Length {
                tensor: t.name.clone(),
                expected: usize::try_from(t.element_count()).unwrap_or(usize::MAX),
                found: a.data.len(),
                dims: t.dims.clone(),
                strides: crate::dim::packed_strides(&t.dims),
            })
        }
        Some(_) => Ok(()),
    }
}

/// The engine proper, on a validated graph with every input's array in place (a validated graph
/// gives every op as many inputs as it takes, so the arity error cannot occur).
fn compute(graph: &Graph, values: Vec<Option<Array>>) -> Result<Vec<Array>, ArgError> {
    let mut values = compute_all(graph, values)?;
    let empty = Array::zeros(&[0]);
    Ok(graph.outputs().into_iter().map(|TensorId(i)| values[i].take().unwrap_or_else(|| empty.clone())).collect())
}

/// [`compute`], every tensor's value kept.
fn compute_all(graph: &Graph, mut values: Vec<Option<Array>>) -> Result<Vec<Option<Array>>, ArgError> {
    let _span = tracing::debug_span!("reference", graph = %graph.name).entered();
    let start = std::time::Instant::now();
    for (i, t) in graph.tensors.iter().enumerate() {
        if let Some(v) = t.pass_by_value {
            values[i] = Some(Array { dims: t.dims.clone(), data: vec![v] });
        }
    }
    let empty = Array::zeros(&[0]);
    for node in &graph.nodes {
        let ins: Vec<&Array> = node.inputs.iter().map(|i| values[i.0].as_ref().unwrap_or(&empty)).collect();
        debug_assert!(ins.iter().all(|a| !a.data.is_empty()), "validated graphs define inputs first");
        let outs = node.op.reference(&ins).map_err(|source| ArgError::Graph {
            graph: graph.name.clone(),
            source: Box::new(GraphError::Shape {
                node: node.name.clone(),
                op: node.op.call_name(),
                port: None,
                source,
            }),
        })?;
        tracing::trace!(node = %node.name, op = node.op.call_name(), "computed");
        let fill = graph.is_fill(node);
        for (id, mut out) in node.outputs.iter().zip(outs) {
            let dims = &graph.tensor(*id).dims;
            if fill && out.dims != *dims {
                // A fill writes its constant over whatever dims its output declares.
                out = Array::from_fn(dims, |_| out.data[0]);
            }
            out.round_to(graph.tensor(*id).data_type);
            values[id.0] = Some(out);
        }
    }
    tracing::debug!(elapsed_us = crate::micros(start.elapsed()), "reference run");
    Ok(values)
}
