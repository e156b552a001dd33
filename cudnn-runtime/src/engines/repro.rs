//! Replaying a graph against the CPU reference (`cudnn-graph repro`): inputs (recorded or
//! seeded), every output compared under cudnn-frontend's tolerance for its type ([`Tolerance`],
//! [`Verdict`]), a partitioned plan replayed part by part to name the first part and node that
//! diverge ([`bisect`]), a plan executed on the GPU with host arrays ([`execute_arrays`]), and
//! inputs saved to and read from a directory ([`write_inputs`], [`read_inputs`]) so that a bug
//! bundle reproduces elsewhere.
//!
//! ```
//! # use cudnn_runtime as cudnn_graph;
//! use cudnn_graph::engines::repro::{random_inputs, Tolerance, Verdict};
//! use cudnn_graph::{reference, DataType, GraphBuilder};
//! let mut g = GraphBuilder::new("double");
//! let x = g.input("x", DataType::BF16, &[4, 8]).unwrap();
//! let y = g.op("mul", &[x.into(), 2.0.into()], &[]).unwrap()[0];
//! g.output(y, "y", DataType::BF16).unwrap();
//! let graph = g.build().unwrap();
//! let inputs = random_inputs(&graph, 7);
//! let mut values = vec![None; graph.tensors.len()];
//! values[graph.inputs()[0].0] = Some(inputs[0].clone());
//! let want = reference::run_arrays(&graph, values).unwrap();
//! let y = graph.tensor(graph.outputs()[0]);
//! let mut got = want[0].clone();
//! assert!(Verdict::compare(y, &got, &want[0], Tolerance::of(y.data_type)).passed());
//! got.data[3] += 1.0;
//! let v = Verdict::compare(y, &got, &want[0], Tolerance::of(y.data_type));
//! assert_eq!((v.passed(), v.outside, v.first_outside.map(|f| f.0)), (false, 1, Some(3)));
//! ```

use std::fmt;

use cudarc::driver::{CudaSlice, DevicePtr};

use crate::array::Array;
use crate::backend::{BackendError, Cudnn, ExecutionPlan, HostScalar};
use crate::ir::{for_cudnn, Graph, Node, Rewritten, Tensor, TensorId};
use crate::reference::{self, ArgError};
use crate::rng::SplitMix64;
use crate::serialize::inputs::{from_storage, to_storage};
pub use crate::serialize::inputs::{read_inputs, write_inputs, InputsError, INPUTS_FORMAT};
use crate::DataType;

/// An output element passes when `|got − want| ≤ atol + rtol·|want|` (NaN only against NaN,
/// an infinity only against itself).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// The absolute term.
    pub atol: f64,
    /// The relative term.
    pub rtol: f64,
}

impl Tolerance {
    /// cudnn-frontend's tolerance for an output of type `dt`: bf16 as its SDPA tests check O
    /// (`test/python/sdpa/fp16.py`: 2e-2, 2e-2), f16 as its fused f16 convolution tests
    /// (`test/python/test_conv_bias.py`: 1e-2, 1e-2), fp8 as its fp8 GEMM tests
    /// (`test/python/fe_api/test_gemm_amax_utils.py`: 0.1, 0.1), f32 and f64 as its batch-norm
    /// tests (`test/python/test_batchnorm.py`: 1e-3, 1e-3); integers and booleans exactly.
    pub fn of(dt: DataType) -> Tolerance {
        let (atol, rtol) = match dt {
            DataType::BF16 => (2e-2, 2e-2),
            DataType::F16 => (1e-2, 1e-2),
            DataType::Fp8E4M3 | DataType::Fp8E5M2 => (0.1, 0.1),
            DataType::F32 | DataType::F64 => (1e-3, 1e-3),
            DataType::I8 | DataType::U8 | DataType::I32 | DataType::I64 | DataType::Bool => (0.0, 0.0),
        };
        Tolerance { atol, rtol }
    }

    /// Whether `got` passes against `want`.
    pub fn accepts(&self, got: f64, want: f64) -> bool {
        if got.is_nan() || want.is_nan() {
            return got.is_nan() && want.is_nan();
        }
        if got.is_infinite() || want.is_infinite() {
            return got == want;
        }
        (got - want).abs() <= self.atol + self.rtol * want.abs()
    }
}

/// One output compared with the reference.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The tensor's name.
    pub tensor: String,
    /// Its type (`bf16[1, 64, 96]`).
    pub type_string: String,
    /// Elements compared.
    pub elements: usize,
    /// Elements outside the tolerance.
    pub outside: usize,
    /// The first element outside: `(flat index, got, want)`.
    pub first_outside: Option<(usize, f64, f64)>,
    /// The largest `|got − want|` (NaN where an element is NaN on one side only).
    pub max_abs_error: f64,
    /// `max_abs_error` over the largest `|want|`.
    pub max_rel_error: f64,
    /// The tolerance applied.
    pub tolerance: Tolerance,
}

impl Verdict {
    /// `got` (an output of `tensor`) against `want` (the reference's), element by element.
    /// Arrays of other lengths compare as every element outside.
    pub fn compare(tensor: &Tensor, got: &Array, want: &Array, tolerance: Tolerance) -> Verdict {
        let mut v = Verdict {
            tensor: tensor.name.clone(),
            type_string: tensor.type_string(),
            elements: want.data.len(),
            outside: 0,
            first_outside: None,
            max_abs_error: 0.0,
            max_rel_error: 0.0,
            tolerance,
        };
        if got.data.len() != want.data.len() {
            v.outside = want.data.len().max(1);
            v.max_abs_error = f64::INFINITY;
            v.max_rel_error = f64::INFINITY;
            return v;
        }
        let scale = want.data.iter().filter(|w| w.is_finite()).fold(0f64, |m, w| m.max(w.abs()));
        for (i, (&g, &w)) in got.data.iter().zip(&want.data).enumerate() {
            if !tolerance.accepts(g, w) {
                v.outside += 1;
                v.first_outside.get_or_insert((i, g, w));
            }
            let err = if g == w || (g.is_nan() && w.is_nan()) { 0.0 } else { (g - w).abs() };
            if err.is_nan() || err > v.max_abs_error {
                v.max_abs_error = if v.max_abs_error.is_nan() { f64::NAN } else { err };
            }
        }
        v.max_rel_error = if scale > 0.0 { v.max_abs_error / scale } else { v.max_abs_error };
        v
    }

    /// Whether every element passed.
    pub fn passed(&self) -> bool {
        self.outside == 0
    }
}

impl fmt::Display for Verdict {
    /// `y bf16[1, 64, 96]: ok, max |err| 3.1e-3 (1.2e-3 relative), atol 2e-2 + rtol 2e-2·|want|`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: ", self.tensor, self.type_string)?;
        match self.first_outside {
            None if self.outside == 0 => write!(f, "ok")?,
            None => write!(f, "MISMATCH: {} elements, the reference has {}", self.outside, self.elements)?,
            Some((i, got, want)) => write!(
                f,
                "MISMATCH: {} of {} elements outside, the first at {i}: {got} against {want}",
                self.outside, self.elements
            )?,
        }
        write!(
            f,
            ", max |err| {:.3e} ({:.3e} relative), atol {:e} + rtol {:e}·|want|",
            self.max_abs_error, self.max_rel_error, self.tolerance.atol, self.tolerance.rtol
        )
    }
}

/// Every output of `graph` (`got`, in [`Graph::outputs`] order) against the reference's (`want`),
/// each under [`Tolerance::of`] its type.
pub fn compare_outputs(graph: &Graph, got: &[Array], want: &[Array]) -> Vec<Verdict> {
    graph
        .outputs()
        .into_iter()
        .zip(got.iter().zip(want))
        .map(|(id, (g, w))| {
            let t = graph.tensor(id);
            Verdict::compare(t, g, w, Tolerance::of(t.data_type))
        })
        .collect()
}

/// The CPU reference's outputs of `graph` for `inputs` (in [`Graph::inputs`] order).
pub fn reference_outputs(graph: &Graph, inputs: &[Array]) -> Result<Vec<Array>, ArgError> {
    let mut values = vec![None; graph.tensors.len()];
    for (id, a) in graph.inputs().into_iter().zip(inputs) {
        values[id.0] = Some(a.clone());
    }
    reference::run_arrays(graph, values)
}

/// Fixed-seed inputs for every input of `graph`, in [`Graph::inputs`] order, rounded to each
/// tensor's type: floats of magnitude in `[1/16, 1)` and either sign (never zero), host scalars
/// positive, integers and booleans 1 (indices and lengths stay in range; graphs whose integer
/// inputs matter replay their recorded inputs), except a ragged attention's offsets, which put
/// each sequence at the start of its own full-capacity slot.
pub fn random_inputs(graph: &Graph, seed: u64) -> Vec<Array> {
    let ids = graph.inputs();
    let mut arrays: Vec<Array> = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            let t = graph.tensor(id);
            let mut rng = SplitMix64::new(seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let integer = !t.data_type.is_float();
            let mut a = Array::from_fn(&t.dims, |_| match (integer, t.host_scalar) {
                (true, _) => 1.0,
                (false, true) => rng.nonzero(0.0625, 1.0).abs(),
                (false, false) => rng.nonzero(0.0625, 1.0),
            });
            a.round_to(t.data_type);
            a
        })
        .collect();
    // A ragged attention's offsets: each sequence at the start of its own full-capacity slot
    // (`b · S · H · D` elements for packed `[B, H, S, D]`), and its lengths that capacity (a
    // dense K and V; over a paged cache they stay 1), so that every token is one cuDNN writes.
    for node in &graph.nodes {
        let ports = node.op.inputs();
        let named = |name: &str| ports.iter().position(|p| p.name == name).and_then(|i| node.inputs.get(i));
        if !node.op.ragged_ports().is_empty() {
            let paged = named("Page_table_K").is_some();
            for (len_port, of_port) in [("SEQ_LEN_Q", "Q"), ("SEQ_LEN_KV", "K")] {
                if paged && of_port == "K" {
                    continue;
                }
                let (Some(&len), Some(&of)) = (named(len_port), named(of_port)) else { continue };
                let Some(at) = ids.iter().position(|&id| id == len) else { continue };
                let capacity = graph.tensor(of).dims.get(2).copied().unwrap_or(1);
                arrays[at] = Array::from_fn(&graph.tensor(len).dims, |_| capacity as f64);
            }
        }
        for ragged in node.op.ragged_ports() {
            let port = if ragged.output { node.outputs.get(ragged.index) } else { node.inputs.get(ragged.index) };
            let (Some(&port), Some(&offsets)) = (port, node.inputs.get(ragged.offsets)) else { continue };
            let Some(at) = ids.iter().position(|&id| id == offsets) else { continue };
            let dims = &graph.tensor(port).dims;
            let slot: i64 = dims.iter().skip(1).product();
            let t = graph.tensor(offsets);
            arrays[at] = Array::from_fn(&t.dims, |i| (i as i64 * slot) as f64);
        }
    }
    arrays
}

/// What [`bisect`] asks its runner to execute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// Part `k` of the plan ([`ExecutionPlan::parts`]), as the plan chose to run it.
    Part(usize),
    /// Node `node` of part `part`'s graph ([`Graph::nodes`]), alone: its inputs the reference's
    /// values, its outputs (virtual in the part) materialized in the part's type for them.
    Node {
        /// The part.
        part: usize,
        /// The node's index in the part's graph.
        node: usize,
    },
}

/// The first part of a plan whose outputs diverge from the reference ([`bisect`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    /// Its index in [`ExecutionPlan::parts`].
    pub part: usize,
    /// Its nodes.
    pub nodes: Vec<String>,
    /// The node that writes the first output outside the tolerance.
    pub node: String,
    /// Its op.
    pub op: &'static str,
    /// That output's comparison.
    pub verdict: Verdict,
    /// What replaying the part's nodes one at a time found; `None` for a part of one node.
    pub within: Option<Within>,
}

/// Inside a diverging part of more than one node, each node run alone on the reference's
/// values of its inputs ([`Piece::Node`]), in the part's order.
#[derive(Debug, Clone, PartialEq)]
pub enum Within {
    /// The first node that diverges alone.
    Node {
        /// Its name.
        node: String,
        /// Its op.
        op: &'static str,
        /// Its first output outside the tolerance.
        verdict: Verdict,
    },
    /// Every node agrees alone: the part diverges only fused.
    Fused,
    /// A node that could not run alone (nodes before it agreed; those after were not tried).
    NotRun {
        /// Its name.
        node: String,
        /// Its op.
        op: &'static str,
        /// Why.
        error: String,
    },
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "part {} [{}] diverges first, at node `{}` ({}): {}",
            self.part,
            self.nodes.join(", "),
            self.node,
            self.op,
            self.verdict
        )?;
        match &self.within {
            None => Ok(()),
            Some(Within::Node { node, op, verdict }) => {
                write!(f, "; run one node at a time, `{node}` ({op}) is the first to diverge alone: {verdict}")
            }
            Some(Within::Fused) => {
                write!(f, "; run one node at a time, every node agrees: the part diverges only fused")
            }
            Some(Within::NotRun { node, op, error }) => write!(
                f,
                "; run one node at a time, the nodes before `{node}` ({op}) agree, and it could not run alone: {error}"
            ),
        }
    }
}

/// Replays `plan` part by part: each part is given the reference's values of its inputs (the
/// graph as the plan planned it, run on the CPU reference with `inputs`, in
/// [`Graph::inputs`] order), run by `run(Piece::Part(k), part's graph, its inputs in its
/// [`Graph::inputs`] order)`, and its outputs compared, under `tolerance` of each output's type,
/// with what the reference computes for the part from the same inputs. Each part starting from
/// the reference's values, a part is blamed only for what it computes itself: the first one
/// outside is returned with the node that writes its first diverging output; `None` when every
/// part agrees. In a diverging part of several nodes, each node is then run alone
/// ([`Piece::Node`], [`Divergence::within`]) to name the first that diverges by itself, or to say
/// that only the fusion does; a node that cannot run alone ends that search without failing the
/// bisection.
pub fn bisect<E: From<ArgError> + fmt::Display>(
    plan: &ExecutionPlan,
    inputs: &[Array],
    tolerance: impl Fn(DataType) -> Tolerance,
    mut run: impl FnMut(Piece, &Graph, &[Array]) -> Result<Vec<Array>, E>,
) -> Result<Option<Divergence>, E> {
    let values = reference_values(plan.graph(), inputs)?;
    // The first output of `sub` outside the tolerance, when `sub` is run as `piece`.
    let mut first_outside = |piece: Piece, sub: &Graph| -> Result<Option<(TensorId, Verdict)>, E> {
        let given = sub
            .inputs()
            .into_iter()
            .map(|id| value_as_stored(&values, plan.graph(), sub.tensor(id)))
            .collect::<Result<Vec<_>, _>>()?;
        // What the piece should compute from exactly these inputs (rounded to their stored
        // types, as the piece reads them).
        let mut known = vec![None; sub.tensors.len()];
        for (id, a) in sub.inputs().into_iter().zip(&given) {
            known[id.0] = Some(a.clone());
        }
        let want = reference::run_arrays(sub, known)?;
        let outputs = run(piece, sub, &given)?;
        for ((id, got), mut want) in sub.outputs().into_iter().zip(&outputs).zip(want) {
            let t = sub.tensor(id);
            want.round_to(t.data_type);
            let verdict = Verdict::compare(t, got, &want, tolerance(t.data_type));
            if !verdict.passed() {
                return Ok(Some((id, verdict)));
            }
        }
        Ok(None)
    };
    for (k, part) in plan.parts().iter().enumerate() {
        let sub = part.graph();
        let Some((id, verdict)) = first_outside(Piece::Part(k), sub)? else { continue };
        let node = sub.nodes.iter().find(|n| n.outputs.contains(&id));
        let within = if sub.nodes.len() > 1 {
            let mut within = Within::Fused;
            for (i, n) in sub.nodes.iter().enumerate() {
                match first_outside(Piece::Node { part: k, node: i }, &lone_node(sub, i)) {
                    Ok(None) => {}
                    Ok(Some((_, verdict))) => {
                        within = Within::Node { node: n.name.clone(), op: n.op.call_name(), verdict };
                        break;
                    }
                    Err(e) => {
                        within = Within::NotRun { node: n.name.clone(), op: n.op.call_name(), error: e.to_string() };
                        break;
                    }
                }
            }
            Some(within)
        } else {
            None
        };
        return Ok(Some(Divergence {
            part: k,
            nodes: part.nodes().to_vec(),
            node: node.map_or_else(String::new, |n| n.name.clone()),
            op: node.map_or("", |n| n.op.call_name()),
            verdict,
            within,
        }));
    }
    Ok(None)
}

/// The reference's value of `t` (by name) rounded to the type it is stored in.
fn value_as_stored(values: &impl Fn(&str) -> Option<Array>, graph: &Graph, t: &Tensor) -> Result<Array, ArgError> {
    let mut a = values(&t.name).ok_or_else(|| missing(graph, &t.name))?;
    a.round_to(t.data_type);
    Ok(a)
}

/// Node `n` of `graph` alone: its tensors (in the graph's order), none virtual, so that what it
/// reads and writes inside a fused part is memory here.
fn lone_node(graph: &Graph, n: usize) -> Graph {
    let node = &graph.nodes[n];
    let mut used: Vec<TensorId> = node.inputs.iter().chain(&node.outputs).copied().collect();
    used.sort_by_key(|t| t.0);
    used.dedup();
    let local = |t: &TensorId| TensorId(used.binary_search_by_key(&t.0, |u| u.0).unwrap_or_default());
    let tensors = used.iter().map(|&t| Tensor { is_virtual: false, ..graph.tensor(t).clone() }).collect();
    let node = Node {
        inputs: node.inputs.iter().map(local).collect(),
        outputs: node.outputs.iter().map(local).collect(),
        ..node.clone()
    };
    Graph { name: format!("{}.{}", graph.name, node.name), context: graph.context, tensors, nodes: vec![node] }
}

fn missing(graph: &Graph, tensor: &str) -> ArgError {
    ArgError::Missing { graph: graph.name.clone(), tensor: tensor.to_string() }
}

/// Every tensor's reference value of `graph` as [`ExecutionPlan::build`] plans it (rewritten),
/// by name, given the user graph's `inputs`.
fn reference_values(graph: &Graph, inputs: &[Array]) -> Result<impl Fn(&str) -> Option<Array>, ArgError> {
    let Rewritten { graph: planned, .. } =
        for_cudnn(graph).map_err(|e| ArgError::Graph { graph: graph.name.clone(), source: Box::new(e) })?;
    let mut values = vec![None; planned.tensors.len()];
    for (id, a) in graph.inputs().into_iter().zip(inputs) {
        let name = &graph.tensor(id).name;
        let there = planned.id_of(name).ok_or_else(|| missing(&planned, name))?;
        values[there.0] = Some(a.clone());
    }
    let all = reference::run_all(&planned, values)?;
    Ok(move |name: &str| planned.id_of(name).and_then(|id| all[id.0].clone()))
}

/// For `output`, the output of a concatenation with an in-place input: its logical values with
/// that input's elements at their place and NaN elsewhere.
fn in_place_values(graph: &Graph, output: crate::TensorId, inputs: &[Array]) -> Option<Array> {
    let node = graph.nodes.iter().find(|n| n.outputs.first() == Some(&output))?;
    let crate::ops::Op::Layout(crate::ops::layout::Layout::Concatenate { axis, in_place_index: Some(k), .. }) =
        &node.op
    else {
        return None;
    };
    let y = &graph.tensor(output).dims;
    let axis = usize::try_from(if *axis < 0 { *axis + y.len() as i64 } else { *axis }).ok()?;
    let k = usize::try_from(*k).ok()?;
    let start: i64 =
        node.inputs.get(..k)?.iter().map(|&id| graph.tensor(id).dims.get(axis).copied().unwrap_or(0)).sum();
    let source = *node.inputs.get(k)?;
    let at = graph.inputs().iter().position(|&id| id == source)?;
    let x = inputs.get(at)?;
    let extent = *x.dims.get(axis)?;
    let strides = crate::dim::packed_strides(&x.dims);
    Some(Array::from_fn(y, |flat| {
        let mut index = Array::unravel(flat as i64, y);
        if index[axis] < start || index[axis] >= start + extent {
            return f64::NAN;
        }
        index[axis] -= start;
        let offset: i64 = index.iter().zip(&strides).map(|(i, s)| i * s).sum();
        x.data.get(offset as usize).copied().unwrap_or(f64::NAN)
    }))
}

/// `tensor`'s storage holding `values` where they are numbers and the poison bytes (0xff) where
/// they are NaN.
fn poisoned_except(tensor: &crate::Tensor, values: &Array) -> Vec<u8> {
    let size = tensor.data_type.size_bytes();
    let mut out = to_storage(tensor, values, 0xff);
    for (flat, v) in values.data.iter().enumerate() {
        if v.is_nan() {
            let index = Array::unravel(flat as i64, &tensor.dims);
            let at = index.iter().zip(&tensor.strides).map(|(i, s)| i * s).sum::<i64>() as usize * size;
            out[at..at + size].fill(0xff);
        }
    }
    out
}

/// Executes `plan` (online) on `cudnn`'s stream with host arrays: `inputs` in [`Graph::inputs`]
/// order, uploaded in each tensor's type and strides (host scalars passed by value), outputs
/// poisoned (every byte 0xff: NaN in every float type) before the execute so that an element
/// the plan does not write shows; returns the outputs in [`Graph::outputs`] order. Allocates
/// per call: for replaying, not serving.
pub fn execute_arrays(cudnn: &Cudnn, plan: &ExecutionPlan, inputs: &[Array]) -> Result<Vec<Array>, BackendError> {
    let stream = super::measure::online_stream(cudnn, plan)?;
    let graph = plan.graph();
    let io = plan.layout().io();
    let count = graph.inputs().len();
    if inputs.len() != count {
        return Err(ArgError::Slots { graph: graph.name.clone(), expected: count, found: inputs.len() }.into());
    }
    let driver = BackendError::driver;
    let mut buffers: Vec<Option<CudaSlice<u8>>> = Vec::with_capacity(io.len());
    let mut scalars: Vec<Box<HostScalar>> = Vec::new();
    let mut addresses = Vec::with_capacity(io.len());
    for (i, id) in io.iter().enumerate() {
        let t = graph.tensor(*id);
        if t.host_scalar {
            let value = inputs.get(i).and_then(|a| a.data.first().copied()).unwrap_or(0.0);
            let scalar = Box::new(HostScalar::new(t.data_type, value));
            addresses.push(scalar.address());
            scalars.push(scalar);
            buffers.push(None);
            continue;
        }
        let bytes = match inputs.get(i) {
            Some(a) if i < count => {
                if a.dims != t.dims {
                    return Err(ArgError::Length {
                        tensor: t.name.clone(),
                        expected: usize::try_from(t.element_count()).unwrap_or(usize::MAX),
                        found: a.data.len(),
                        dims: t.dims.clone(),
                        strides: crate::dim::packed_strides(&t.dims),
                    }
                    .into());
                }
                to_storage(t, a, 0)
            }
            _ => match in_place_values(graph, *id, inputs) {
                // An in-place concatenation's output holds its in-place input where the caller
                // puts it (cuDNN writes only the rest); the rest is poisoned like any output.
                Some(values) => poisoned_except(t, &values),
                None => vec![0xff; t.storage_len().saturating_mul(t.data_type.size_bytes())],
            },
        };
        let mut padded = bytes;
        padded.resize(padded.len().max(1), 0);
        let buffer = stream.clone_htod(&padded).map_err(driver("upload replay inputs"))?;
        addresses.push(buffer.device_ptr(&stream).0);
        buffers.push(Some(buffer));
    }
    let workspace = stream.alloc_zeros::<u8>(plan.workspace_size().max(1)).map_err(driver("allocate workspace"))?;
    let ws = workspace.device_ptr(&stream).0;
    // SAFETY: every buffer holds its tensor's storage in its type (sized from dims and strides),
    // is 256-byte aligned (cuMemAlloc), lives on this context and outlives the enqueued work (the
    // stream is synchronized below before anything is freed); host scalars are boxed and live
    // until this function returns; the workspace is the plan's size.
    let executed = unsafe { plan.execute_raw(cudnn, &addresses, ws) };
    let synced = stream.synchronize().map_err(driver("cuStreamSynchronize"));
    executed?;
    synced?;
    let mut outputs = Vec::with_capacity(io.len() - count);
    for (id, buffer) in io[count..].iter().zip(&buffers[count..]) {
        let t = graph.tensor(*id);
        let bytes = match buffer {
            Some(b) => stream.clone_dtoh(b).map_err(driver("download replay outputs"))?,
            None => Vec::new(),
        };
        outputs.push(from_storage(t, &bytes));
    }
    drop(scalars);
    Ok(outputs)
}

/// The device a plan ran on, for a bundle's report: the cuDNN version and SM of `cudnn`.
pub fn describe_target(cudnn: &Cudnn) -> String {
    format!(
        "cuDNN {}, sm {}{}",
        cudnn.version(),
        cudnn.sm().map_or("?".to_string(), |s| s.to_string()),
        if cudnn.stream().is_some() { "" } else { " (deviceless)" }
    )
}
