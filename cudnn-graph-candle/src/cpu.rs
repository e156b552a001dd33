//! CPU tensors: the graph runs on cudnn-graph's CPU reference engine (f64 math, each tensor
//! rounded to its storage type), reading candle's storage in place.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, Device, Storage, Tensor};
use cudnn_graph::reference::{self, HostSlice};
use cudnn_graph::DataType;
use half::{bf16, f16};

use crate::error::AdapterError;
use crate::ports::{in_port_order, storage_shape};
use crate::Prepared;

/// Runs `prepared` on CPU tensors already checked against its inputs (`offsets`: each one's
/// first element in its storage).
pub(crate) fn run(prepared: &Prepared, inputs: &[&Tensor], offsets: &[usize]) -> candle_core::Result<Vec<Tensor>> {
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
    for (((port, array), order), id) in prepared.outputs.iter().zip(&arrays).zip(&prepared.output_orders).zip(ids) {
        let tensor = graph.tensor(id);
        let shape = storage_shape(port, order);
        let packed = match port.data_type {
            DataType::F32 => Tensor::from_vec(reference::scatter::<f32>(tensor, array), shape, &Device::Cpu),
            DataType::F64 => Tensor::from_vec(reference::scatter::<f64>(tensor, array), shape, &Device::Cpu),
            DataType::F16 => Tensor::from_vec(reference::scatter::<f16>(tensor, array), shape, &Device::Cpu),
            DataType::BF16 => Tensor::from_vec(reference::scatter::<bf16>(tensor, array), shape, &Device::Cpu),
            DataType::U8 => Tensor::from_vec(reference::scatter::<u8>(tensor, array), shape, &Device::Cpu),
            DataType::I32 => Tensor::from_vec(reference::scatter::<i32>(tensor, array), shape, &Device::Cpu),
            DataType::I64 => Tensor::from_vec(reference::scatter::<i64>(tensor, array), shape, &Device::Cpu),
            // `ports` admits only the element types above.
            data_type => {
                return Err(AdapterError::UnsupportedDType {
                    graph: graph.name.clone(),
                    port: port.name.clone(),
                    data_type,
                }
                .into())
            }
        }?;
        outputs.push(in_port_order(packed, order)?);
    }
    Ok(outputs)
}

fn storage_len(storage: &CpuStorage) -> usize {
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
