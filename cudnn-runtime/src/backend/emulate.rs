//! [`ExecutionPlan::emulate`]: a plan's parts run on the CPU reference engine through the plan's
//! own memory plan, so a partition (what each part reads and writes, where, with which strides)
//! is checked without a GPU.

use std::collections::HashMap;

use super::partition::Place;
use super::plan::ExecutionPlan;
use super::BackendError;
use crate::array::Array;
use crate::ir::Tensor;
use crate::reference::{self, ArgError};

/// Emulated device memory: element values by (region, byte address), where region 0 is the
/// arena and region `i + 1` I/O buffer `i`.
#[derive(Default)]
pub(super) struct Memory {
    cells: HashMap<(usize, u64), f64>,
}

impl Memory {
    fn address(place: Place, tensor: &Tensor, index: &[i64]) -> (usize, u64) {
        let element: i64 = index.iter().zip(&tensor.strides).map(|(i, s)| i * s).sum();
        let bytes = element as u64 * tensor.data_type.size_bytes() as u64;
        match place {
            Place::Io { index, offset } => (index + 1, offset + bytes),
            Place::Arena { offset } => (0, offset + bytes),
        }
    }

    /// `tensor`'s elements at `place` (NaN where nothing was written).
    pub(super) fn read(&self, place: Place, tensor: &Tensor) -> Array {
        Array::from_fn(&tensor.dims, |flat| {
            let index = Array::unravel(flat as i64, &tensor.dims);
            self.cells.get(&Self::address(place, tensor, &index)).copied().unwrap_or(f64::NAN)
        })
    }

    /// Stores `array` as `tensor` at `place`.
    pub(super) fn write(&mut self, place: Place, tensor: &Tensor, array: &Array) {
        for (flat, v) in array.data.iter().enumerate() {
            let index = Array::unravel(flat as i64, &tensor.dims);
            self.cells.insert(Self::address(place, tensor, &index), *v);
        }
    }
}

impl ExecutionPlan {
    /// Runs the plan on the CPU reference engine the way the GPU runs it: part by part, each
    /// reading its inputs from and writing its outputs to the plan's memory (the I/O buffers,
    /// views of them at their offsets, the arena slots shared by intermediates whose lifetimes
    /// do not overlap), with each tensor's strides. `inputs` are dense arrays of the graph's
    /// inputs in [`crate::Graph::inputs`] order; the result is the graph's outputs in
    /// [`crate::Graph::outputs`] order. Memory no part wrote reads as NaN, so a wrong memory plan
    /// shows in the result; compared with [`reference::run_arrays`] on the whole graph it checks
    /// a partition without a GPU (deviceless plans included).
    pub fn emulate(&self, inputs: &[Array]) -> Result<Vec<Array>, BackendError> {
        let graph = self.graph();
        let io = self.layout().io();
        let outputs_from = graph.inputs().len();
        let mut memory = Memory::default();
        for (i, id) in io[..outputs_from].iter().enumerate() {
            let t = graph.tensor(*id);
            reference::check_input(graph, *id, inputs.get(i))?;
            let mut a = inputs[i].clone();
            a.round_to(t.data_type);
            memory.write(Place::Io { index: i, offset: 0 }, t, &a);
        }
        if inputs.len() > outputs_from {
            return Err(
                ArgError::Slots { graph: graph.name.clone(), expected: outputs_from, found: inputs.len() }.into()
            );
        }
        for part in self.parts() {
            let (sub, layout) = (part.graph(), part.layout());
            let sources = self.sources_of(part);
            let mut values: Vec<Option<Array>> = vec![None; sub.tensors.len()];
            let mut outputs = Vec::new();
            for (k, (id, place)) in layout.io().iter().zip(sources).enumerate() {
                if layout.is_output(k) {
                    outputs.push((*id, *place));
                } else {
                    values[id.0] = Some(memory.read(*place, sub.tensor(*id)));
                }
            }
            let results = reference::run_arrays(sub, values)?;
            for ((id, place), array) in outputs.into_iter().zip(results) {
                memory.write(place, sub.tensor(id), &array);
            }
        }
        Ok(io[outputs_from..]
            .iter()
            .enumerate()
            .map(|(k, id)| memory.read(Place::Io { index: outputs_from + k, offset: 0 }, graph.tensor(*id)))
            .collect())
    }
}
