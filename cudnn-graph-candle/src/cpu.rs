//! CPU tensors: the graph runs on cudnn-graph's CPU reference engine (f64 math, each tensor
//! rounded to its storage type), reading candle's storage in place.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, Storage, Tensor};
use cudnn_graph::reference::{self, HostSlice};
use cudnn_graph::DataType;
use half::{bf16, f16};

use crate::error::AdapterError;
use crate::Prepared;

/// Runs `prepared` on CPU tensors already checked against its inputs (`offsets`: each one's
/// first element in its storage). Returns each output packed in its allocation order
/// (`Prepared::output_orders`).
pub(crate) fn run(prepared: &Prepared, inputs: &[&Tensor], offsets: &[usize]) -> candle_core::Result<Vec<Storage>> {
    let graph = &prepared.graph;
    let guards: Vec<_> = inputs.iter().map(|t| t.storage_and_layout().0).collect();
    let mut named = Vec::with_capacity(inputs.len());
    for ((port, guard), &offset) in prepared.inputs.iter().zip(&guards).zip(offsets) {
        let Storage::Cpu(storage) = &**guard else {
            // `Runner::run` sends only CPU tensors here.
            return Err(AdapterError::UnsupportedDevice {
                graph: graph.name.clone(),
                device: format!("the device of input `{}`", port.name),
                hint: "",
            }
            .into());
        };
        let window = offset..offset + port.span;
        let short = || AdapterError::Storage {
            graph: graph.name.clone(),
            port: port.name.clone(),
            held: storage_len(storage),
            needed: window.end,
        };
        let slice = match storage {
            CpuStorage::F32(v) => HostSlice::F32(v.get(window.clone()).ok_or_else(short)?),
            CpuStorage::F64(v) => HostSlice::F64(v.get(window.clone()).ok_or_else(short)?),
            CpuStorage::F16(v) => HostSlice::F16(v.get(window.clone()).ok_or_else(short)?),
            CpuStorage::BF16(v) => HostSlice::BF16(v.get(window.clone()).ok_or_else(short)?),
            CpuStorage::U8(v) => HostSlice::U8(v.get(window.clone()).ok_or_else(short)?),
            CpuStorage::I32(v) => HostSlice::I32(v.get(window.clone()).ok_or_else(short)?),
            CpuStorage::I64(v) => HostSlice::I64(v.get(window.clone()).ok_or_else(short)?),
            // The port check admits only the element types above.
            other => {
                return Err(AdapterError::DType {
                    graph: graph.name.clone(),
                    port: port.name.clone(),
                    expected: port.data_type,
                    found: other.dtype(),
                }
                .into())
            }
        };
        named.push((port.name.as_str(), slice));
    }
    let arrays = reference::run(graph, &named).map_err(AdapterError::from)?;
    drop(guards);
    let mut outputs = Vec::with_capacity(arrays.len());
    let ids = graph.outputs();
    for ((port, array), id) in prepared.outputs.iter().zip(&arrays).zip(ids) {
        let tensor = graph.tensor(id);
        // `scatter` lays the values out at the tensor's strides, which `packed_order` found packed.
        let storage = match port.data_type {
            DataType::F32 => CpuStorage::F32(reference::scatter::<f32>(tensor, array)),
            DataType::F64 => CpuStorage::F64(reference::scatter::<f64>(tensor, array)),
            DataType::F16 => CpuStorage::F16(reference::scatter::<f16>(tensor, array)),
            DataType::BF16 => CpuStorage::BF16(reference::scatter::<bf16>(tensor, array)),
            DataType::U8 => CpuStorage::U8(reference::scatter::<u8>(tensor, array)),
            DataType::I32 => CpuStorage::I32(reference::scatter::<i32>(tensor, array)),
            DataType::I64 => CpuStorage::I64(reference::scatter::<i64>(tensor, array)),
            // `ports` admits only the element types above.
            data_type => {
                return Err(AdapterError::UnsupportedDType {
                    graph: graph.name.clone(),
                    port: port.name.clone(),
                    data_type,
                }
                .into())
            }
        };
        outputs.push(Storage::Cpu(storage));
    }
    Ok(outputs)
}

/// Elements a CPU storage holds.
pub(crate) fn storage_len(storage: &CpuStorage) -> usize {
    match storage {
        CpuStorage::U8(v) => v.len(),
        CpuStorage::U32(v) => v.len(),
        CpuStorage::I16(v) => v.len(),
        CpuStorage::I32(v) => v.len(),
        CpuStorage::I64(v) => v.len(),
        CpuStorage::BF16(v) => v.len(),
        CpuStorage::F16(v) => v.len(),
        CpuStorage::F32(v) => v.len(),
        CpuStorage::F64(v) => v.len(),
        CpuStorage::F8E4M3(v) => v.len(),
        CpuStorage::F6E2M3(v) | CpuStorage::F6E3M2(v) | CpuStorage::F4(v) | CpuStorage::F8E8M0(v) => v.len(),
    }
}
