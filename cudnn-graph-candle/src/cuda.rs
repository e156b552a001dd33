//! CUDA tensors: cuDNN on the tensors' device, enqueued on candle's stream for that device.
//! Inputs are read in place (cudarc views into candle's slices: candle and cudnn-graph share one
//! cudarc), outputs are allocated on candle's stream and handed to candle as its own storage.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use candle_core::cuda_backend::{CudaDevice, CudaStorage, DeviceId};
use candle_core::{CpuStorage, Device, Storage, Tensor};
use cudnn_graph::backend::cudarc::driver::{CudaSlice, CudaView};
use cudnn_graph::backend::{BuildOptions, Cudnn, DeviceBuffer, ExecutionPlan, Fusion, HostScalar};
use cudnn_graph::engines::{build_autotuned, AutotuneOptions, PlanCache};
use cudnn_graph::payload::plan::Expect;
use cudnn_graph::{DataType, Graph, GraphType};
use half::{bf16, f16};

use crate::error::AdapterError;
use crate::ports::Port;
use crate::Prepared;

/// The plan cache, the options plans are built with, and one cuDNN handle (on candle's stream)
/// and workspace per device.
pub(crate) struct Devices {
    cache: PlanCache,
    options: BuildOptions,
    /// Set: every plan built is autotuned before it is cached ([`crate::Runner::with_autotune`]).
    autotune: Option<AutotuneOptions>,
    devices: Mutex<HashMap<DeviceId, Arc<Mutex<DeviceState>>>>,
}

/// A device's cuDNN handle on candle's stream, and the workspace its executions share (they
/// are ordered on that stream).
struct DeviceState {
    cudnn: Cudnn,
    workspace: Option<CudaSlice<u8>>,
}

fn graph_error(e: impl Into<cudnn_graph::Error>) -> AdapterError {
    AdapterError::Graph(e.into())
}

impl Devices {
    pub(crate) fn new(cache: PlanCache, options: BuildOptions, autotune: Option<AutotuneOptions>) -> Self {
        Devices { cache, options, autotune, devices: Mutex::new(HashMap::new()) }
    }

    fn state(&self, device: &CudaDevice) -> Result<Arc<Mutex<DeviceState>>, AdapterError> {
        let mut devices = self.devices.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(state) = devices.get(&device.id()) {
            return Ok(state.clone());
        }
        let cudnn = Cudnn::new(device.cuda_stream()).map_err(graph_error)?;
        let state = Arc::new(Mutex::new(DeviceState { cudnn, workspace: None }));
        devices.insert(device.id(), state.clone());
        Ok(state)
    }

    /// The plan of `graph` (whose IR is `ir`) for `device`, from the plan cache or built.
    pub(crate) fn plan<G: GraphType>(
        &self,
        graph: &G,
        ir: &Graph,
        device: &CudaDevice,
    ) -> Result<Arc<ExecutionPlan>, AdapterError> {
        let state = self.state(device)?;
        let state = state.lock().unwrap_or_else(PoisonError::into_inner);
        let expect = Expect {
            type_fingerprint: Some(G::FINGERPRINT),
            type_name: Some(G::NAME.to_string()),
            binding: Some(graph.binding()),
            // `graph.graph()` succeeded, so every runtime dim fits in `i64`.
            runtime_dims: graph
                .runtime_dims()
                .into_iter()
                .map(|(name, v)| (name.to_string(), i64::try_from(v).unwrap_or(i64::MAX)))
                .collect(),
        };
        let options = if G::SINGLE_KERNEL && self.options.fusion != Fusion::Single {
            Cow::Owned(BuildOptions { fusion: Fusion::Single, ..self.options.clone() })
        } else {
            Cow::Borrowed(&self.options)
        };
        let Some(tuning) = &self.autotune else {
            return Ok(self.cache.get_or_build(&state.cudnn, ir, &expect, &options)?.plan);
        };
        let options = BuildOptions { build_all: true, ..options.into_owned() };
        // Through the tuning store the options name (`CUDNN_GRAPH_TUNING_STORE` by default): a
        // hit builds the recorded choice, timing nothing; its warnings are traced.
        let cached = self.cache.get_or_insert_with(&state.cudnn, ir, &expect, &options, || {
            Ok(build_autotuned(&state.cudnn, ir, &expect, &options, tuning)?.plan)
        })?;
        Ok(cached.plan)
    }

    /// Runs `prepared` on CUDA tensors of `device` already checked against its inputs
    /// (`offsets`: each one's first element in its storage; host scalars are CPU tensors, whose
    /// value is passed by value). Returns each output packed in its allocation order
    /// (`Prepared::output_orders`).
    pub(crate) fn run(
        &self,
        prepared: &Prepared,
        device: &Device,
        inputs: &[&Tensor],
        offsets: &[usize],
    ) -> candle_core::Result<Vec<Storage>> {
        let graph = &prepared.graph.name;
        let (Device::Cuda(dev), Some(plan)) = (device, &prepared.plan) else {
            // `Runner::run` prepares a plan for every CUDA device it sends here.
            return Err(AdapterError::UnsupportedDevice {
                graph: graph.clone(),
                device: format!("{:?}", device.location()),
                hint: "",
            }
            .into());
        };
        let guards: Vec<_> = inputs.iter().map(|t| t.storage_and_layout().0).collect();
        let mut views = Vec::with_capacity(inputs.len());
        for ((port, guard), &offset) in prepared.inputs.iter().zip(&guards).zip(offsets) {
            let input = match &**guard {
                Storage::Cpu(storage) if port.host => {
                    let value = scalar_at(storage, offset).ok_or_else(|| AdapterError::Storage {
                        graph: graph.clone(),
                        port: port.name.clone(),
                        held: crate::cpu::storage_len(storage),
                        needed: offset + 1,
                    })?;
                    Input::Host(HostScalar::new(port.data_type, value))
                }
                Storage::Cuda(storage) if !port.host => Input::Device(View::of(storage, port, offset, graph)?),
                // `Runner::run` checked every device: host scalars on the CPU, the rest on `device`.
                _ => {
                    return Err(AdapterError::Device {
                        graph: graph.clone(),
                        port: port.name.clone(),
                        expected: format!("{:?}", device.location()),
                        found: "another device".into(),
                    }
                    .into())
                }
            };
            views.push(input);
        }
        let mut outputs =
            prepared.outputs.iter().map(|p| Output::alloc(dev, p, graph)).collect::<candle_core::Result<Vec<_>>>()?;
        let state = self.state(dev)?;
        {
            let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
            let DeviceState { cudnn, workspace } = &mut *state;
            let needed = plan.workspace_size();
            if needed > 0 && workspace.as_ref().is_none_or(|w| w.len() < needed) {
                // SAFETY: workspace is scratch memory cuDNN writes before it reads. The old one
                // (if any) is freed in stream order, after the executions that used it.
                *workspace = Some(unsafe { dev.alloc::<u8>(needed)? });
            }
            let mut io: Vec<DeviceBuffer<'_>> =
                views.iter().map(Input::buffer).chain(outputs.iter_mut().map(Output::buffer)).collect();
            let workspace = if needed > 0 { workspace.as_mut() } else { None };
            plan.execute(cudnn, &mut io, workspace).map_err(graph_error)?;
        }
        drop(views);
        drop(guards);
        Ok(outputs.into_iter().map(|output| Storage::Cuda(output.into_storage(dev.clone()))).collect())
    }
}

/// A graph input: a view of a CUDA tensor, or a host scalar's value.
enum Input<'a> {
    Device(View<'a>),
    Host(HostScalar),
}

impl Input<'_> {
    fn buffer(&self) -> DeviceBuffer<'_> {
        match self {
            Input::Device(view) => view.buffer(),
            Input::Host(value) => DeviceBuffer::host_scalar(value),
        }
    }
}

/// The element at `offset` of a CPU storage, as `f64` (a host scalar's value); `None` past its end
/// or for the element types no graph port has.
fn scalar_at(storage: &CpuStorage, offset: usize) -> Option<f64> {
    Some(match storage {
        CpuStorage::F32(v) => f64::from(*v.get(offset)?),
        CpuStorage::F64(v) => *v.get(offset)?,
        CpuStorage::F16(v) => v.get(offset)?.to_f64(),
        CpuStorage::BF16(v) => v.get(offset)?.to_f64(),
        CpuStorage::U8(v) => f64::from(*v.get(offset)?),
        CpuStorage::I32(v) => f64::from(*v.get(offset)?),
        CpuStorage::I64(v) => *v.get(offset)? as f64,
        _ => return None,
    })
}

/// Declares the typed views and outputs over the element types candle and cudnn-graph share.
macro_rules! typed {
    ($($variant:ident => $t:ty),*) => {
        /// An input: a view of a candle slice, from the tensor's offset over the port's span.
        enum View<'a> {
            $($variant(CudaView<'a, $t>),)*
        }

        /// An output: a slice allocated on candle's stream.
        enum Output {
            $($variant(CudaSlice<$t>),)*
        }

        impl<'a> View<'a> {
            fn of(storage: &'a CudaStorage, port: &Port, offset: usize, graph: &str) -> candle_core::Result<Self> {
                let window = offset..offset + port.span;
                let short = |held: usize| AdapterError::Storage {
                    graph: graph.to_string(),
                    port: port.name.clone(),
                    held,
                    needed: window.end,
                };
                match port.data_type {
                    $(DataType::$variant => {
                        let slice = storage.as_cuda_slice::<$t>()?;
                        let view = slice.try_slice(window.clone()).ok_or_else(|| short(slice.len()))?;
                        Ok(View::$variant(view))
                    })*
                    data_type => Err(AdapterError::UnsupportedDType {
                        graph: graph.to_string(),
                        port: port.name.clone(),
                        data_type,
                    }.into()),
                }
            }

            fn buffer(&self) -> DeviceBuffer<'_> {
                match self {
                    $(View::$variant(v) => DeviceBuffer::input(v),)*
                }
            }
        }

        impl Output {
            fn alloc(device: &CudaDevice, port: &Port, graph: &str) -> candle_core::Result<Self> {
                // SAFETY (each arm): the graph writes every element of an output before anything
                // reads it (`Port::packed_order` refused outputs with gaps), and the allocation is
                // ordered on candle's stream, where the graph runs.
                match port.data_type {
                    $(DataType::$variant => Ok(Output::$variant(unsafe { device.alloc::<$t>(port.span)? })),)*
                    data_type => Err(AdapterError::UnsupportedDType {
                        graph: graph.to_string(),
                        port: port.name.clone(),
                        data_type,
                    }.into()),
                }
            }

            fn buffer(&mut self) -> DeviceBuffer<'_> {
                match self {
                    $(Output::$variant(s) => DeviceBuffer::output(s),)*
                }
            }

            fn into_storage(self, device: CudaDevice) -> CudaStorage {
                match self {
                    $(Output::$variant(s) => CudaStorage::wrap_cuda_slice(s, device),)*
                }
            }
        }
    };
}

typed!(F32 => f32, F64 => f64, F16 => f16, BF16 => bf16, U8 => u8, I32 => i32, I64 => i64);
