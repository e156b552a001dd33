//! Execution plans: [`ExecutionPlan::build`] (validate → lower → heuristics → check support →
//! build) and [`ExecutionPlan::from_json`] (a plan serialized by cuDNN, rebuilt for a context),
//! with the variant-pack layout precomputed for execution.

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendDescriptorType_t as K;

use super::context::{Anchor, Binding};
use super::descriptor::Descriptor;
use super::heuristics::{self, Candidate, CandidateState, HeuristicMode, Rejection};
use super::lower::{self, LoweredGraph};
use super::{BackendError, Cudnn};
use crate::ir::{Graph, TensorId};
use crate::{DataType, Fp8E4M3, Fp8E5M2};

/// How [`ExecutionPlan::build`] chooses a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildOptions {
    /// Heuristic modes to query, in order; their engine configs are concatenated into one
    /// candidate list.
    pub heuristics: Vec<HeuristicMode>,
    /// Candidates needing more workspace are rejected (checked before compiling where cuDNN can
    /// tell, after otherwise).
    pub max_workspace_bytes: Option<usize>,
    /// Build every viable candidate (for autotuning) instead of stopping at the first.
    pub build_all: bool,
}

impl Default for BuildOptions {
    /// Modes A then fallback, no workspace limit, first plan that builds.
    fn default() -> Self {
        BuildOptions {
            heuristics: vec![HeuristicMode::A, HeuristicMode::Fallback],
            max_workspace_bytes: None,
            build_all: false,
        }
    }
}

/// Host storage for one by-value scalar, in its tensor's data type (an `f32` tensor stores 4
/// bytes, a `bf16` one 2), aligned for any of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(8))]
struct ScalarStorage([u8; 8]);

/// A by-value scalar of the variant pack: cuDNN reads it from host memory at execute.
#[derive(Debug, Clone, PartialEq)]
pub struct ByValueScalar {
    /// The tensor's uid.
    pub uid: i64,
    /// Its position in [`VariantLayout::uids`].
    pub position: usize,
    /// Its data type.
    pub data_type: DataType,
    storage: ScalarStorage,
}

impl ByValueScalar {
    fn new(uid: i64, position: usize, data_type: DataType, value: f64) -> Self {
        let mut b = [0u8; 8];
        let n = data_type.size_bytes();
        let bytes: [u8; 8] = match data_type {
            DataType::F32 => widen(&(value as f32).to_ne_bytes()),
            DataType::F64 => value.to_ne_bytes(),
            DataType::F16 => widen(&half::f16::from_f64(value).to_bits().to_ne_bytes()),
            DataType::BF16 => widen(&half::bf16::from_f64(value).to_bits().to_ne_bytes()),
            DataType::I8 => widen(&(DataType::I8.round(value) as i8).to_ne_bytes()),
            DataType::U8 => widen(&(DataType::U8.round(value) as u8).to_ne_bytes()),
            DataType::I32 => widen(&(DataType::I32.round(value) as i32).to_ne_bytes()),
            DataType::I64 => (DataType::I64.round(value) as i64).to_ne_bytes(),
            DataType::Bool => widen(&[u8::from(value != 0.0)]),
            DataType::Fp8E4M3 => widen(&[Fp8E4M3::from_f64(value).0]),
            DataType::Fp8E5M2 => widen(&[Fp8E5M2::from_f64(value).0]),
        };
        b[..n].copy_from_slice(&bytes[..n]);
        ByValueScalar { uid, position, data_type, storage: ScalarStorage(b) }
    }

    /// The value's bytes as cuDNN reads them (native endian, `data_type.size_bytes()` long).
    pub fn bytes(&self) -> &[u8] {
        &self.storage.0[..self.data_type.size_bytes()]
    }

    pub(crate) fn host_ptr(&self) -> *const u8 {
        self.storage.0.as_ptr()
    }
}

fn widen(bytes: &[u8]) -> [u8; 8] {
    let mut out = [0u8; 8];
    out[..bytes.len()].copy_from_slice(bytes);
    out
}

/// Where each pointer goes in the variant pack, fixed when the plan is made.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantLayout {
    uids: Vec<i64>,
    io: Vec<TensorId>,
    outputs_from: usize,
    io_positions: Vec<usize>,
    scalars: Vec<ByValueScalar>,
}

impl VariantLayout {
    pub(crate) fn new(graph: &Graph) -> Self {
        let inputs = graph.inputs();
        let outputs_from = inputs.len();
        let io: Vec<TensorId> = inputs.into_iter().chain(graph.outputs()).collect();
        enum Slot {
            Io(usize),
            Scalar(DataType, f64),
        }
        let mut slots: Vec<(i64, Slot)> =
            io.iter().enumerate().map(|(i, id)| (graph.tensor(*id).uid, Slot::Io(i))).collect();
        slots.extend(
            graph.tensors.iter().filter_map(|t| t.pass_by_value.map(|v| (t.uid, Slot::Scalar(t.data_type, v)))),
        );
        slots.sort_by_key(|(uid, _)| *uid);
        let mut io_positions = vec![0; io.len()];
        let mut scalars = Vec::new();
        for (position, (uid, slot)) in slots.iter().enumerate() {
            match *slot {
                Slot::Io(i) => io_positions[i] = position,
                Slot::Scalar(dt, v) => scalars.push(ByValueScalar::new(*uid, position, dt, v)),
            }
        }
        VariantLayout { uids: slots.iter().map(|(uid, _)| *uid).collect(), io, outputs_from, io_positions, scalars }
    }

    /// Every uid of the variant pack, ascending.
    pub fn uids(&self) -> &[i64] {
        &self.uids
    }

    /// The graph's I/O tensors in execution order: [`Graph::inputs`], then [`Graph::outputs`].
    pub fn io(&self) -> &[TensorId] {
        &self.io
    }

    /// For the `i`-th I/O tensor, its position in [`VariantLayout::uids`].
    pub fn io_positions(&self) -> &[usize] {
        &self.io_positions
    }

    /// Whether the `i`-th I/O tensor is an output.
    pub fn is_output(&self, i: usize) -> bool {
        i >= self.outputs_from
    }

    /// The by-value scalars, with their host storage.
    pub fn scalars(&self) -> &[ByValueScalar] {
        &self.scalars
    }
}

/// One finalized plan.
#[derive(Debug)]
pub(crate) struct BuiltPlan {
    pub(crate) candidate: usize,
    pub(crate) descriptor: Descriptor,
    pub(crate) workspace: usize,
    // The engine config the plan was made from, kept alive with it.
    _config: Descriptor,
}

/// A graph planned by cuDNN: ready to execute (online) or to serialize (either).
///
/// ```no_run
/// use cudnn_runtime::backend::{BuildOptions, Cudnn, ExecutionPlan};
/// use cudnn_runtime::{DataType, GraphBuilder};
/// let mut g = GraphBuilder::new("mm");
/// let a = g.input("a", DataType::F16, &[1, 64, 32])?;
/// let b = g.input("b", DataType::F16, &[1, 32, 16])?;
/// let c = g.matmul(a, b)?;
/// g.output(c, "c", DataType::F16)?;
/// let cudnn = Cudnn::deviceless(&std::fs::read_to_string("tests/fixtures/h200-devprop.json")?)?;
/// let plan = ExecutionPlan::build(&cudnn, &g.build()?, &BuildOptions::default())?;
/// println!("{} ({} bytes of workspace)", plan.selected(), plan.workspace_size());
/// let json = plan.json()?; // load it on the GPU with ExecutionPlan::from_json
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ExecutionPlan {
    graph: Graph,
    candidates: Vec<Candidate>,
    built: Vec<BuiltPlan>,
    selected: usize,
    layout: VariantLayout,
    // Fields drop in order: plans and configs, then the operation graph they refer to, then the
    // handle or device properties everything was made with.
    //
    // The operation graph and its parts (`None` for a plan loaded from JSON, which carries its
    // own).
    _lowered: Option<LoweredGraph>,
    // The handle (with its CUDA context) or device properties the plan was made with.
    anchor: Anchor,
}

impl ExecutionPlan {
    /// Validates `graph`, lowers it, queries heuristics and builds the first candidate cuDNN
    /// accepts (or every one, with `build_all`). Fails with [`BackendError::NoPlan`], listing
    /// every candidate and why it was rejected, when none is accepted.
    pub fn build(cudnn: &Cudnn, graph: &Graph, options: &BuildOptions) -> crate::Result<ExecutionPlan> {
        graph.validate()?;
        let lowered = lower::lower(graph, cudnn)?;
        let (configs, failures) = heuristics::query(cudnn, &lowered.operation_graph, &options.heuristics);
        let mut candidates = Vec::with_capacity(configs.len());
        let mut built: Vec<BuiltPlan> = Vec::new();
        for config in configs {
            let mut candidate = config.candidate;
            let stop = !options.build_all && !built.is_empty();
            if candidate.state == CandidateState::Untried && !stop {
                candidate.state = match try_build(cudnn, config.descriptor, &candidate, options) {
                    Ok(plan) => {
                        candidate.workspace_bytes = Some(plan.workspace);
                        built.push(plan);
                        CandidateState::Built
                    }
                    Err(r) => CandidateState::Rejected(r),
                };
            }
            candidates.push(candidate);
        }
        if built.is_empty() {
            return Err(BackendError::NoPlan { graph: graph.name.clone(), candidates, heuristics: failures }.into());
        }
        Ok(ExecutionPlan {
            layout: VariantLayout::new(graph),
            graph: graph.clone(),
            candidates,
            built,
            selected: 0,
            _lowered: Some(lowered),
            anchor: cudnn.anchor(),
        })
    }

    /// Rebuilds a plan from cuDNN's JSON of it ([`ExecutionPlan::json`]) for `cudnn`, online or
    /// deviceless. `graph` must be the graph the plan was made from: it gives the variant-pack
    /// layout and the checks of [`ExecutionPlan::execute`]. Needs the cuDNN version that wrote
    /// the JSON.
    pub fn from_json(cudnn: &Cudnn, graph: Graph, json: &str) -> crate::Result<ExecutionPlan> {
        graph.validate()?;
        let mut plan = Descriptor::new(K::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
        plan.set_chars(A::CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, json)?;
        // Finalizing with neither a handle nor device properties crashes cuDNN; a `Cudnn` always
        // has exactly one of them.
        match cudnn.binding() {
            Binding::Handle(handle) => plan.set_handle(A::CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle)?,
            Binding::DeviceProperties(properties) => {
                plan.set_descriptors(A::CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, &[properties])?
            }
        }
        plan.finalize()?;
        let workspace = workspace_of(&plan)?;
        let config = plan
            .get_descriptors(A::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, K::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, 1)?
            .pop()
            .ok_or(BackendError::BadValue { what: "the engine-config count of a plan", value: 0 })?;
        let mut candidate = heuristics::describe(&config, 0, None);
        candidate.workspace_bytes = Some(workspace);
        candidate.state = CandidateState::Built;
        let layout = VariantLayout::new(&graph);
        Ok(ExecutionPlan {
            graph,
            candidates: vec![candidate],
            built: vec![BuiltPlan { candidate: 0, descriptor: plan, workspace, _config: config }],
            selected: 0,
            layout,
            _lowered: None,
            anchor: cudnn.anchor(),
        })
    }

    /// cuDNN's JSON of the selected plan (`CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION`): the
    /// compiled kernel and everything needed to rebuild the plan with
    /// [`ExecutionPlan::from_json`]. Not byte-identical run to run (it embeds pointers).
    pub fn json(&self) -> Result<String, BackendError> {
        self.plan().descriptor.get_chars(A::CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION)
    }

    /// The graph this plan computes.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Every candidate heuristics proposed, with its state.
    pub fn candidates(&self) -> &[Candidate] {
        &self.candidates
    }

    /// The candidate of the selected plan.
    pub fn selected(&self) -> &Candidate {
        let index = self.plan().candidate;
        &self.candidates[index]
    }

    /// The candidates that were built into plans, in build order.
    pub fn built(&self) -> Vec<usize> {
        self.built.iter().map(|b| b.candidate).collect()
    }

    /// Makes built candidate `index` the one that executes (for autotuning).
    pub fn select(&mut self, index: usize) -> Result<(), BackendError> {
        match self.built.iter().position(|b| b.candidate == index) {
            Some(i) => {
                self.selected = i;
                Ok(())
            }
            None => Err(BackendError::NotBuilt { index, built: self.built() }),
        }
    }

    /// Workspace bytes the selected plan needs at execute.
    pub fn workspace_size(&self) -> usize {
        self.plan().workspace
    }

    /// The variant-pack layout.
    pub fn layout(&self) -> &VariantLayout {
        &self.layout
    }

    /// Whether the plan was made by an online context (only those execute).
    pub fn is_online(&self) -> bool {
        self.anchor.context().is_some()
    }

    pub(crate) fn anchor(&self) -> &Anchor {
        &self.anchor
    }

    pub(crate) fn plan(&self) -> &BuiltPlan {
        // `built` is never empty (both constructors ensure it) and `select` keeps `selected` in
        // range.
        &self.built[self.selected]
    }
}

/// Check support, then build: the workspace limit is applied before compiling when cuDNN reports
/// the config's workspace, and after finalizing otherwise.
fn try_build(
    cudnn: &Cudnn,
    config: Descriptor,
    candidate: &Candidate,
    options: &BuildOptions,
) -> Result<BuiltPlan, Rejection> {
    let over = |required: usize| match options.max_workspace_bytes {
        Some(limit) if required > limit => Some(Rejection::Workspace { required, limit }),
        _ => None,
    };
    if let Some(r) = candidate.workspace_bytes.and_then(over) {
        return Err(r);
    }
    let mut plan = Descriptor::new(K::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR).map_err(Rejection::from_error)?;
    let finalize = |plan: &mut Descriptor| -> Result<usize, BackendError> {
        plan.set_descriptors(A::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &[&config])?;
        match cudnn.binding() {
            Binding::DeviceProperties(properties) => {
                plan.set_descriptors(A::CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, &[properties])?
            }
            // The operation graph carries the handle.
            Binding::Handle(_) => {}
        }
        plan.finalize()?;
        workspace_of(plan)
    };
    let workspace = finalize(&mut plan).map_err(Rejection::from_error)?;
    if let Some(r) = over(workspace) {
        return Err(r);
    }
    Ok(BuiltPlan { candidate: candidate.index, descriptor: plan, workspace, _config: config })
}

fn workspace_of(plan: &Descriptor) -> Result<usize, BackendError> {
    let w = plan.get_i64(A::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)?;
    usize::try_from(w).map_err(|_| BackendError::BadValue { what: "a plan's workspace size", value: w })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GraphBuilder;

    #[test]
    fn layout_sorts_uids_and_maps_io_order() {
        let mut g = GraphBuilder::new("l");
        let x = g.input("x", DataType::BF16, &[2, 3]).unwrap();
        let y = g.input("y", DataType::BF16, &[2, 3]).unwrap();
        g.set_uid(x, 40).unwrap();
        g.set_uid(y, 7).unwrap();
        let s = g.op("mul", &[x.into(), 0.5.into()], &[]).unwrap()[0];
        let z = g.op("add", &[s.into(), y.into()], &[]).unwrap()[0];
        g.output(z, "z", DataType::F32).unwrap();
        let graph = g.build().unwrap();
        let layout = VariantLayout::new(&graph);
        let uid = |name: &str| graph.tensor_by_name(name).unwrap().uid;
        let scalar_uid = graph.tensors.iter().find(|t| t.pass_by_value.is_some()).unwrap().uid;
        let mut want = [40, 7, uid("z"), scalar_uid];
        want.sort_unstable();
        assert_eq!(layout.uids(), &want[..]);
        for (i, id) in layout.io().iter().enumerate() {
            assert_eq!(layout.uids()[layout.io_positions()[i]], graph.tensor(*id).uid);
        }
        assert!(!layout.is_output(1) && layout.is_output(2));
        let s = &layout.scalars()[0];
        assert_eq!(s.uid, scalar_uid);
        assert_eq!(layout.uids()[s.position], scalar_uid);
        assert_eq!(s.data_type, DataType::F32);
        assert_eq!(s.bytes(), &0.5f32.to_ne_bytes());
        assert_eq!(s.host_ptr() as usize % 8, 0);
    }

    #[test]
    fn scalars_are_stored_in_their_type() {
        let b = |dt, v| ByValueScalar::new(1, 0, dt, v).bytes().to_vec();
        assert_eq!(b(DataType::F16, 1.5), half::f16::from_f64(1.5).to_bits().to_ne_bytes());
        assert_eq!(b(DataType::BF16, -2.0), half::bf16::from_f64(-2.0).to_bits().to_ne_bytes());
        assert_eq!(b(DataType::F64, 0.1), 0.1f64.to_ne_bytes());
        assert_eq!(b(DataType::I32, 300.4), 300i32.to_ne_bytes());
        assert_eq!(b(DataType::I8, 300.0), [127u8]);
        assert_eq!(b(DataType::Bool, 2.0), [1u8]);
        assert_eq!(b(DataType::Fp8E4M3, 448.0), [0x7e]);
    }
}
