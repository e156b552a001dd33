//! # cudnn-graph-candle
//!
//! Runs every [`graph!`](cudnn_graph::graph) type on [candle](https://docs.rs/candle-core)
//! tensors: CPU tensors through cudnn-graph's CPU reference engine, CUDA tensors (feature `cuda`)
//! through cuDNN on the tensor's own device and stream. Outputs are allocated by candle; plans are
//! built once per (graph type, runtime dims, device) and kept.
//!
//! ```
//! use candle_core::{Device, Tensor};
//! use cudnn_graph::graph;
//! use cudnn_graph_candle::Runner;
//!
//! graph! {
//!     /// y = relu(x · w + b)
//!     pub Dense<const IN: usize, const OUT: usize, dyn T>(
//!         x: f32[1, T, IN],
//!         w: f32[1, IN, OUT],
//!         b: f32[1, 1, OUT],
//!     ) -> (y: f32[1, T, OUT]) {
//!         y = relu(add(matmul(x, w), b));
//!     }
//! }
//!
//! # fn main() -> candle_core::Result<()> {
//! let runner = Runner::new();
//! let x = Tensor::new(&[[[1f32, 2.0], [3.0, -4.0]]], &Device::Cpu)?;
//! let w = Tensor::new(&[[[1f32, 0.0, 1.0], [0.0, 1.0, 1.0]]], &Device::Cpu)?;
//! let b = Tensor::new(&[[[0f32, 0.0, -1.0]]], &Device::Cpu)?;
//! let [y] = runner.run(&Dense::<2, 3>::new(2), &[&x, &w, &b])?.try_into().unwrap();
//! assert_eq!(y.to_vec3::<f32>()?, [[[1.0, 2.0, 2.0], [3.0, 0.0, 0.0]]]);
//! # Ok(())
//! # }
//! ```
//!
//! ## What a tensor must be
//!
//! Inputs are passed in the graph's input order (its declaration order). The graph runs on the
//! device of its inputs: a CUDA device if one is on it (every other input must be too), else the
//! CPU. Each must have the port's dims and element type, and the port's strides: a contiguous
//! tensor for a row-major port (any storage offset: a narrowed tensor works in place). A
//! transposed or otherwise strided view is refused by name ([`AdapterError::Layout`]), never
//! copied silently: call `.contiguous()` if you want the copy. Every mismatch is a candle error
//! whose message names the graph and the port. Element types: `f32`, `f64`, `f16`, `bf16`, `u8`,
//! `i32`, `i64` (candle has no `bool`, `i8` or fp8 e5m2 tensors). Outputs come in the order the
//! graph computes them (`Graph::outputs`), which is the declaration order when outputs are
//! declared in the order they are computed.
//!
//! ## Host scalars
//!
//! A host scalar port (`eps: f32[1, 1] host`: one value given at each run) takes a CPU tensor of
//! one element of the port's element type, of any rank: `Tensor::new(1e-5f32, &Device::Cpu)` or
//! one of the port's dims, on the CPU and on CUDA alike. On CUDA its value is read on the host
//! and passed to cuDNN by value, so each run may give another without a new plan; a tensor on
//! the device is refused by name ([`AdapterError::HostScalarDevice`]: reading it would wait for
//! the device).
//!
//! ## Autograd
//!
//! A graph type paired with its backward graph type ([`Differentiable`]) runs through
//! [`Runner::run_with_backward`], whose output is a candle op: `loss.backward()` computes its
//! inputs' gradients with the backward graph, on the same engine (the CPU reference, or cuDNN).
//!
//! ## CUDA
//!
//! With the `cuda` feature (which enables candle-core's `cuda`), a graph on CUDA tensors is
//! planned with cuDNN for the tensors' device (through a cudnn-graph `PlanCache`,
//! in memory or on disk: `Runner::with_plan_cache`) and enqueued on candle's stream for that
//! device; its workspace is kept per device. candle-core links cudarc (`dynamic-linking`), so a
//! process using it needs libcudnn at start; `docs/frameworks.md` explains the linking modes.

#![warn(missing_docs)]

mod autograd;
mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod error;
mod paged;
mod ports;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use candle_core::op::BackpropOp;
use candle_core::{Device, Storage, Tensor};
use cudnn_graph::{Graph, GraphType};

pub use autograd::Differentiable;
pub use error::AdapterError;
pub use paged::{PagedKvCache, StepInputs};
use ports::{in_port_order, storage_shape, Port};

/// Runs `graph!` types on candle tensors, keeping what each (graph type, runtime dims, device)
/// needs: the graph's IR and ports, and on CUDA its plan. `Send + Sync`: one runner serves every
/// thread; a clone shares the same plans.
#[derive(Clone)]
pub struct Runner {
    inner: Arc<Inner>,
}

struct Inner {
    /// Per graph type (by `TypeId`), a `HashMap<(G, DeviceKey), Arc<Prepared>>`.
    prepared: Mutex<HashMap<TypeId, Box<dyn Any + Send + Sync>>>,
    /// Graph values prepared so far (`Runner::graphs_prepared`).
    preparations: AtomicU64,
    #[cfg(feature = "cuda")]
    cuda: cuda::Devices,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let types = self.inner.prepared.lock().map(|m| m.len()).unwrap_or_default();
        f.debug_struct("Runner").field("graph_types", &types).finish_non_exhaustive()
    }
}

impl Default for Runner {
    fn default() -> Self {
        Self::new()
    }
}

/// Where a graph runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum DeviceKey {
    Cpu,
    #[cfg(feature = "cuda")]
    Cuda(candle_core::cuda_backend::DeviceId),
}

/// What running one graph value on one device needs, made once.
pub(crate) struct Prepared {
    pub(crate) graph: Graph,
    pub(crate) inputs: Vec<Port>,
    pub(crate) outputs: Vec<Port>,
    /// For each output, the order its dims are allocated in (`Port::packed_order`).
    pub(crate) output_orders: Vec<Vec<usize>>,
    #[cfg(feature = "cuda")]
    pub(crate) plan: Option<Arc<cudnn_graph::backend::ExecutionPlan>>,
}

type PerType<G> = HashMap<(G, DeviceKey), Arc<Prepared>>;

/// Which engine `device` is: the CPU, a CUDA device (with the `cuda` feature), or unsupported.
pub(crate) fn device_key<G: GraphType>(device: &Device) -> Result<DeviceKey, AdapterError> {
    match device {
        Device::Cpu => Ok(DeviceKey::Cpu),
        #[cfg(feature = "cuda")]
        Device::Cuda(cuda) => Ok(DeviceKey::Cuda(cuda.id())),
        #[allow(unreachable_patterns)]
        other => Err(AdapterError::UnsupportedDevice {
            graph: G::NAME.to_string(),
            device: format!("{:?}", other.location()),
            hint: if other.is_cuda() { ": build cudnn-graph-candle with its `cuda` feature" } else { "" },
        }),
    }
}

/// The device a graph runs on for `inputs`: the first one's that is not the CPU (host scalars are
/// CPU tensors whatever the device), else the CPU.
pub(crate) fn run_device(inputs: &[&Tensor]) -> Device {
    inputs.iter().map(|t| t.device()).find(|d| !d.is_cpu()).cloned().unwrap_or(Device::Cpu)
}

/// A graph run's outputs as candle storage, before they become tensors: each packed in its
/// port's allocation order.
pub(crate) struct Outputs {
    pub(crate) prepared: Arc<Prepared>,
    pub(crate) storages: Vec<Storage>,
}

impl Outputs {
    /// Output `i` as a tensor without a backward op, seen in its port's dim order.
    pub(crate) fn tensor(prepared: &Prepared, i: usize, storage: Storage) -> candle_core::Result<Tensor> {
        let order = &prepared.output_orders[i];
        let packed =
            Tensor::from_storage(storage, storage_shape(&prepared.outputs[i], order), BackpropOp::none(), false);
        in_port_order(packed, order)
    }

    fn into_tensors(self) -> candle_core::Result<Vec<Tensor>> {
        let prepared = self.prepared;
        self.storages.into_iter().enumerate().map(|(i, s)| Self::tensor(&prepared, i, s)).collect()
    }
}

impl Runner {
    /// A runner with no plans yet; CUDA plans are kept in memory
    /// (`PlanCache::in_memory`) and built with the default `BuildOptions`.
    pub fn new() -> Self {
        Runner {
            inner: Arc::new(Inner {
                prepared: Mutex::new(HashMap::new()),
                preparations: AtomicU64::new(0),
                #[cfg(feature = "cuda")]
                cuda: cuda::Devices::new(
                    cudnn_graph::engines::PlanCache::in_memory(),
                    cudnn_graph::backend::BuildOptions::default(),
                    None,
                ),
            }),
        }
    }

    /// A runner whose CUDA plans come from `cache` (a directory cache makes a warm start of a new
    /// process load its plans instead of building them) and are built with `options` (with
    /// `fusion` forced to one kernel for a graph declaring `#[fuse(single)]`).
    #[cfg(feature = "cuda")]
    pub fn with_plan_cache(
        cache: cudnn_graph::engines::PlanCache,
        options: cudnn_graph::backend::BuildOptions,
    ) -> Self {
        Runner {
            inner: Arc::new(Inner {
                prepared: Mutex::new(HashMap::new()),
                preparations: AtomicU64::new(0),
                cuda: cuda::Devices::new(cache, options, None),
            }),
        }
    }

    /// [`Runner::with_plan_cache`], every plan autotuned before it is cached: built with
    /// `build_all` (each viable engine configuration; with `Fusion::Measure` in `options`, each
    /// partitioning too) and timed on the tensors' device with `autotune`'s settings
    /// (`cudnn_graph::engines::autotune`), the fastest kept. A first call costs the timing (about
    /// a second a graph); a plan loaded from a directory cache keeps the choice it was saved with.
    /// Through the tuning store `autotune` names (`AutotuneOptions::tuning_store`, by default the
    /// one `CUDNN_GRAPH_TUNING_STORE` names): a graph the store holds for this GPU and cuDNN is
    /// built as recorded, timing nothing, and one it lacks is recorded after its timing
    /// (`cudnn_graph::engines::build_autotuned`).
    #[cfg(feature = "cuda")]
    pub fn with_autotune(
        cache: cudnn_graph::engines::PlanCache,
        options: cudnn_graph::backend::BuildOptions,
        autotune: cudnn_graph::engines::AutotuneOptions,
    ) -> Self {
        Runner {
            inner: Arc::new(Inner {
                prepared: Mutex::new(HashMap::new()),
                preparations: AtomicU64::new(0),
                cuda: cuda::Devices::new(cache, options, Some(autotune)),
            }),
        }
    }

    /// Runs `graph` on `inputs` (in the graph's input order) and returns its outputs (in its
    /// output order), on the inputs' device. See the crate docs for what each tensor must be.
    /// The outputs have no backward op: [`Runner::run_with_backward`] gives one.
    pub fn run<G: GraphType>(&self, graph: &G, inputs: &[&Tensor]) -> candle_core::Result<Vec<Tensor>> {
        self.run_storages(graph, inputs)?.into_tensors()
    }

    /// Runs `graph` on `inputs` and returns its outputs as candle storage.
    pub(crate) fn run_storages<G: GraphType>(&self, graph: &G, inputs: &[&Tensor]) -> candle_core::Result<Outputs> {
        let device = run_device(inputs);
        let key = device_key::<G>(&device)?;
        let prepared = self.prepared(graph, key, &device)?;
        let name = &prepared.graph.name;
        if inputs.len() != prepared.inputs.len() {
            return Err(AdapterError::InputCount {
                graph: name.clone(),
                expected: prepared.inputs.len(),
                ports: prepared.inputs.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
                found: inputs.len(),
            }
            .into());
        }
        // A host scalar on the device first: it would otherwise have chosen the device.
        if let Some((port, tensor)) = prepared.inputs.iter().zip(inputs).find(|(p, t)| p.host && !t.device().is_cpu()) {
            return Err(AdapterError::HostScalarDevice {
                graph: name.clone(),
                port: port.name.clone(),
                found: format!("{:?}", tensor.device().location()),
            }
            .into());
        }
        let mut offsets = Vec::with_capacity(inputs.len());
        for (port, tensor) in prepared.inputs.iter().zip(inputs) {
            if !port.host && !tensor.device().same_device(&device) {
                return Err(AdapterError::Device {
                    graph: name.clone(),
                    port: port.name.clone(),
                    expected: format!("{:?}", device.location()),
                    found: format!("{:?}", tensor.device().location()),
                }
                .into());
            }
            offsets.push(port.check(name, tensor)?);
        }
        let storages = match key {
            DeviceKey::Cpu => cpu::run(&prepared, inputs, &offsets)?,
            #[cfg(feature = "cuda")]
            DeviceKey::Cuda(_) => self.inner.cuda.run(&prepared, &device, inputs, &offsets)?,
        };
        Ok(Outputs { prepared, storages })
    }

    /// How many (graph value, device) pairs this runner has prepared: each built its graph's IR
    /// and, on CUDA, fetched its plan from the plan cache or built it. Constant once every shape
    /// a loop runs has been seen: a serving loop reads it after warm-up and at the end to show
    /// that no step prepared (planned) anything.
    pub fn graphs_prepared(&self) -> u64 {
        self.inner.preparations.load(Ordering::Relaxed)
    }

    /// The prepared graph for `graph` on `key`, made on first use.
    pub(crate) fn prepared<G: GraphType>(
        &self,
        graph: &G,
        key: DeviceKey,
        device: &Device,
    ) -> Result<Arc<Prepared>, AdapterError> {
        // The entry for `TypeId::of::<G>()` is only ever a `PerType<G>`.
        let found = self
            .inner
            .prepared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&TypeId::of::<G>())
            .and_then(|m| m.downcast_ref::<PerType<G>>())
            .and_then(|m| m.get(&(*graph, key)).cloned());
        if let Some(found) = found {
            return Ok(found);
        }
        // Made without the lock held: planning takes a while, and other graphs may run meanwhile.
        let made = Arc::new(self.prepare(graph, device)?);
        self.inner.preparations.fetch_add(1, Ordering::Relaxed);
        let mut map = self.inner.prepared.lock().unwrap_or_else(PoisonError::into_inner);
        let per_type = map.entry(TypeId::of::<G>()).or_insert_with(|| Box::new(PerType::<G>::new()));
        match per_type.downcast_mut::<PerType<G>>() {
            Some(m) => Ok(m.entry((*graph, key)).or_insert(made).clone()),
            None => Ok(made),
        }
    }

    fn prepare<G: GraphType>(&self, graph: &G, device: &Device) -> Result<Prepared, AdapterError> {
        let ir = graph.graph()?;
        let (inputs, outputs) = ports::ports(&ir)?;
        let output_orders = outputs.iter().map(|p| p.packed_order(&ir.name)).collect::<Result<_, _>>()?;
        #[cfg(feature = "cuda")]
        let plan = match device {
            Device::Cuda(cuda) => Some(self.inner.cuda.plan(graph, &ir, cuda)?),
            _ => None,
        };
        #[cfg(not(feature = "cuda"))]
        let _ = device;
        Ok(Prepared {
            graph: ir,
            inputs,
            outputs,
            output_orders,
            #[cfg(feature = "cuda")]
            plan,
        })
    }
}

/// The Rust examples of `docs/frameworks.md`, compiled and run as this crate's doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/frameworks.md")]
pub struct FrameworksDoc;
