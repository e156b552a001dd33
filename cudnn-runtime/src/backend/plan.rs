//! Execution plans: [`ExecutionPlan::build`] (validate → lower → heuristics → check support →
//! build) and [`ExecutionPlan::from_json`] (a plan serialized by cuDNN, rebuilt for a context),
//! with the variant-pack layout precomputed for execution.

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendDescriptorType_t as K;

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::candidate::{
    BehaviorNote, Candidate, CandidateState, Filter, HeuristicMode, Knob, NumericalNote, Rejection,
};
use super::execute::PackSlots;
use super::heuristics::{self, Config};
use super::lower::{self, LoweredGraph};
use super::{binding, BackendError, Cudnn};
use crate::cudnn::{Anchor, Binding, Descriptor, Internals};
use crate::ir::{Graph, TensorId};
use crate::{DataType, Fp8E4M3, Fp8E5M2};

/// How [`ExecutionPlan::build`] chooses a plan: which heuristics to ask, which candidates to
/// bar, and how many plans to build.
///
/// The filters have cudnn-frontend's semantics: a `select_*` list keeps only the candidates that
/// have **all** of its notes; a `deselect_*` list drops every candidate that has **any** of them.
/// A barred candidate is [`CandidateState::Rejected`] with [`Rejection::Filtered`] naming the
/// filter, so [`ExecutionPlan::candidates`] (or [`BackendError::NoPlan`]) says why it was not
/// used.
///
/// ```
/// use cudnn_runtime::backend::{BehaviorNote, BuildOptions, HeuristicMode, NumericalNote};
/// // Deterministic, no runtime compilation, tensor cores, at most 1 MiB of workspace; every
/// // candidate that passes is built (for autotuning).
/// let options = BuildOptions::default()
///     .modes(&[HeuristicMode::A, HeuristicMode::B, HeuristicMode::Fallback])
///     .deterministic()
///     .no_runtime_compilation()
///     .tensor_cores()
///     .workspace_limit(1 << 20)
///     .all_plans();
/// assert_eq!(options.deselect_numerical_notes, [NumericalNote::Nondeterministic]);
/// assert_eq!(options.deselect_behavior_notes, [BehaviorNote::RuntimeCompilation]);
/// assert_eq!(options.select_numerical_notes, [NumericalNote::TensorCore]);
/// assert!(options.build_all);
/// // The defaults: modes A then fallback, no filter, the first plan that builds.
/// assert_eq!(BuildOptions::default().heuristics, [HeuristicMode::A, HeuristicMode::Fallback]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildOptions {
    /// Heuristic modes to query, in order; their engine configs are concatenated into one
    /// candidate list. Ignored when [`BuildOptions::engine`] is set.
    pub heuristics: Vec<HeuristicMode>,
    /// Candidates needing more workspace are rejected (checked before compiling where cuDNN can
    /// tell, after otherwise).
    pub max_workspace_bytes: Option<usize>,
    /// Build every viable candidate (for autotuning) instead of stopping at the first.
    pub build_all: bool,
    /// Keep only candidates having **all** of these behavior notes.
    pub select_behavior_notes: Vec<BehaviorNote>,
    /// Drop candidates having **any** of these behavior notes (e.g.
    /// [`BehaviorNote::RuntimeCompilation`]: no NVRTC compile at build time).
    pub deselect_behavior_notes: Vec<BehaviorNote>,
    /// Keep only candidates having **all** of these numerical notes (e.g.
    /// [`NumericalNote::TensorCore`]).
    pub select_numerical_notes: Vec<NumericalNote>,
    /// Drop candidates having **any** of these numerical notes (e.g.
    /// [`NumericalNote::Nondeterministic`]: deterministic results only).
    pub deselect_numerical_notes: Vec<NumericalNote>,
    /// Drop candidates of these cuDNN engine ids.
    pub deselect_engines: Vec<i64>,
    /// Candidates reported to need more shared memory per block are rejected (where cuDNN cannot
    /// tell without compiling, the candidate passes).
    pub max_shared_memory_bytes: Option<usize>,
    /// Build exactly this engine config instead of asking heuristics (cudnn-frontend's
    /// `create_execution_plan(engine_id, knobs)`); the filters still apply to it.
    pub engine: Option<EngineConfig>,
    /// Build only the candidate at this index of the (concatenated) candidate list; the others
    /// stay [`CandidateState::Untried`]. Filters still apply to it.
    pub candidate: Option<usize>,
}

impl Default for BuildOptions {
    /// Modes A then fallback, no filter or limit, first plan that builds.
    fn default() -> Self {
        BuildOptions {
            heuristics: vec![HeuristicMode::A, HeuristicMode::Fallback],
            max_workspace_bytes: None,
            build_all: false,
            select_behavior_notes: Vec::new(),
            deselect_behavior_notes: Vec::new(),
            select_numerical_notes: Vec::new(),
            deselect_numerical_notes: Vec::new(),
            deselect_engines: Vec::new(),
            max_shared_memory_bytes: None,
            engine: None,
            candidate: None,
        }
    }
}

fn push_unique<T: PartialEq>(list: &mut Vec<T>, item: T) {
    if !list.contains(&item) {
        list.push(item);
    }
}

impl BuildOptions {
    /// Heuristic modes to query, in this order.
    pub fn modes(mut self, modes: &[HeuristicMode]) -> Self {
        self.heuristics = modes.to_vec();
        self
    }

    /// Build every candidate that passes the filters (for [`crate::backend::autotune`]).
    pub fn all_plans(mut self) -> Self {
        self.build_all = true;
        self
    }

    /// Deterministic engines only: deselects [`NumericalNote::Nondeterministic`].
    pub fn deterministic(self) -> Self {
        self.deselect_numerical(NumericalNote::Nondeterministic)
    }

    /// No runtime compilation at build time: deselects [`BehaviorNote::RuntimeCompilation`].
    pub fn no_runtime_compilation(self) -> Self {
        self.deselect_behavior(BehaviorNote::RuntimeCompilation)
    }

    /// Tensor-core engines only: selects [`NumericalNote::TensorCore`].
    pub fn tensor_cores(self) -> Self {
        self.select_numerical(NumericalNote::TensorCore)
    }

    /// Keep only candidates having `note` (and every other selected behavior note).
    pub fn select_behavior(mut self, note: BehaviorNote) -> Self {
        push_unique(&mut self.select_behavior_notes, note);
        self
    }

    /// Drop candidates having `note`.
    pub fn deselect_behavior(mut self, note: BehaviorNote) -> Self {
        push_unique(&mut self.deselect_behavior_notes, note);
        self
    }

    /// Keep only candidates having `note` (and every other selected numerical note).
    pub fn select_numerical(mut self, note: NumericalNote) -> Self {
        push_unique(&mut self.select_numerical_notes, note);
        self
    }

    /// Drop candidates having `note`.
    pub fn deselect_numerical(mut self, note: NumericalNote) -> Self {
        push_unique(&mut self.deselect_numerical_notes, note);
        self
    }

    /// Drop candidates of cuDNN engine `id`.
    pub fn deselect_engine(mut self, id: i64) -> Self {
        push_unique(&mut self.deselect_engines, id);
        self
    }

    /// At most `bytes` of workspace.
    pub fn workspace_limit(mut self, bytes: usize) -> Self {
        self.max_workspace_bytes = Some(bytes);
        self
    }

    /// At most `bytes` of shared memory per block.
    pub fn shared_memory_limit(mut self, bytes: usize) -> Self {
        self.max_shared_memory_bytes = Some(bytes);
        self
    }

    /// Build exactly engine `id` with `knobs`, without heuristics.
    pub fn engine_config(mut self, id: i64, knobs: &[Knob]) -> Self {
        self.engine = Some(EngineConfig { id, knobs: knobs.to_vec() });
        self
    }

    /// Build only candidate `index` of the heuristics' list.
    pub fn candidate_index(mut self, index: usize) -> Self {
        self.candidate = Some(index);
        self
    }

    /// The first filter that bars `candidate` before anything is compiled: the note filters in
    /// field order, the engine list, then the shared-memory and workspace limits (where cuDNN
    /// reported the sizes).
    pub fn bars(&self, candidate: &Candidate) -> Option<Rejection> {
        if let Some(f) = self.bars_notes(candidate.engine_id, &candidate.behavior_notes, &candidate.numerical_notes) {
            return Some(Rejection::Filtered(f));
        }
        if let (Some(required), Some(limit)) = (candidate.shared_memory_bytes, self.max_shared_memory_bytes) {
            if required > limit {
                return Some(Rejection::SharedMemory { required, limit });
            }
        }
        match (candidate.workspace_bytes, self.max_workspace_bytes) {
            (Some(required), Some(limit)) if required > limit => Some(Rejection::Workspace { required, limit }),
            _ => None,
        }
    }

    /// The first note or engine filter that bars an engine with these notes.
    pub fn bars_notes(
        &self,
        engine: Option<i64>,
        behavior: &[BehaviorNote],
        numerical: &[NumericalNote],
    ) -> Option<Filter> {
        if let Some(n) = self.select_behavior_notes.iter().find(|n| !behavior.contains(n)) {
            return Some(Filter::LacksBehaviorNote(*n));
        }
        if let Some(n) = self.deselect_behavior_notes.iter().find(|n| behavior.contains(n)) {
            return Some(Filter::HasBehaviorNote(*n));
        }
        if let Some(n) = self.select_numerical_notes.iter().find(|n| !numerical.contains(n)) {
            return Some(Filter::LacksNumericalNote(*n));
        }
        if let Some(n) = self.deselect_numerical_notes.iter().find(|n| numerical.contains(n)) {
            return Some(Filter::HasNumericalNote(*n));
        }
        match engine {
            Some(id) if self.deselect_engines.contains(&id) => Some(Filter::DeselectedEngine(id)),
            _ => None,
        }
    }
}

/// An engine config named explicitly: cuDNN's global engine index and knob choices (a
/// [`Candidate`]'s `engine_id` and `knobs`, e.g. from an earlier build or an autotune table).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EngineConfig {
    /// cuDNN's global engine index.
    pub id: i64,
    /// The knob choices; knobs left out take the engine's defaults.
    pub knobs: Vec<Knob>,
}

/// Where [`ExecutionPlan::build`] spent its time, phase by phase (cudnn-frontend's pipeline).
/// For a plan from [`ExecutionPlan::from_json`], only `validate` and `plan_build` (loading the
/// plan) are non-zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BuildTimings {
    /// [`Graph::validate`].
    pub validate: Duration,
    /// Lowering to a finalized cuDNN operation graph (for a plan loaded from JSON: lowering the
    /// graph to check the JSON against it).
    pub lower: Duration,
    /// The heuristic queries.
    pub heuristics: Duration,
    /// Describing each candidate without compiling (engine, knobs, notes, workspace) and
    /// filtering.
    pub check_support: Duration,
    /// Finalizing execution plans (compiling, for runtime-compiled engines).
    pub plan_build: Duration,
}

impl BuildTimings {
    /// The sum of the phases.
    pub fn total(&self) -> Duration {
        self.validate + self.lower + self.heuristics + self.check_support + self.plan_build
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
    value: f64,
    storage: ScalarStorage,
}

impl ByValueScalar {
    pub(crate) fn new(uid: i64, position: usize, data_type: DataType, value: f64) -> Self {
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
        ByValueScalar { uid, position, data_type, value, storage: ScalarStorage(b) }
    }

    /// The value as given (before it is stored as `data_type`).
    pub fn value(&self) -> f64 {
        self.value
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
    io_positions: Vec<Option<usize>>,
    scalars: Vec<ByValueScalar>,
    /// Slices bound by pointer offset: position in `uids`, the I/O tensor they view, byte offset.
    views: Vec<(usize, usize, u64)>,
    /// Tensors the lowering placed in the workspace: position in `uids`, byte offset.
    workspace_tensors: Vec<(usize, usize)>,
    /// Bytes of workspace those take, before cuDNN's own.
    workspace_bytes: usize,
}

impl VariantLayout {
    #[cfg(test)]
    pub(crate) fn new(graph: &Graph) -> Self {
        Self::with_internals(graph, &Internals::default())
    }

    /// The layout of `graph` plus the tensors its lowering adds (by-value constants, workspace
    /// tensors).
    pub(crate) fn with_internals(graph: &Graph, internals: &Internals) -> Self {
        let inputs = graph.inputs();
        let outputs_from = inputs.len();
        let io: Vec<TensorId> = inputs.into_iter().chain(graph.outputs()).collect();
        enum Slot {
            Io(usize),
            Scalar(DataType, f64),
            Workspace(usize),
            View(usize, u64),
        }
        let mut slots: Vec<(i64, Slot)> = io
            .iter()
            .enumerate()
            .filter(|(_, id)| !internals.aliased.contains(&id.0))
            .map(|(i, id)| (graph.tensor(*id).uid, Slot::Io(i)))
            .collect();
        slots.extend(internals.views.iter().filter_map(|&(uid, base, offset)| {
            io.iter().position(|id| id.0 == base).map(|i| (uid, Slot::View(i, offset)))
        }));
        slots.extend(
            graph.tensors.iter().filter_map(|t| t.pass_by_value.map(|v| (t.uid, Slot::Scalar(t.data_type, v)))),
        );
        slots.extend(internals.scalars.iter().map(|&(uid, dt, v)| (uid, Slot::Scalar(dt, v))));
        slots.extend(internals.workspace.iter().map(|&(uid, offset)| (uid, Slot::Workspace(offset))));
        slots.sort_by_key(|(uid, _)| *uid);
        let mut io_positions = vec![None; io.len()];
        let mut scalars = Vec::new();
        let mut workspace_tensors = Vec::new();
        let mut views = Vec::new();
        for (position, (uid, slot)) in slots.iter().enumerate() {
            match *slot {
                Slot::Io(i) => io_positions[i] = Some(position),
                Slot::View(i, offset) => views.push((position, i, offset)),
                Slot::Scalar(dt, v) => scalars.push(ByValueScalar::new(*uid, position, dt, v)),
                Slot::Workspace(offset) => workspace_tensors.push((position, offset)),
            }
        }
        VariantLayout {
            uids: slots.iter().map(|(uid, _)| *uid).collect(),
            io,
            outputs_from,
            io_positions,
            scalars,
            workspace_tensors,
            views,
            workspace_bytes: internals.workspace_bytes,
        }
    }

    /// Tensors the lowering placed at the front of the workspace (attention backward's softmax
    /// sums and dQ accumulator): their positions in [`VariantLayout::uids`] and byte offsets.
    pub fn workspace_tensors(&self) -> &[(usize, usize)] {
        &self.workspace_tensors
    }

    /// Bytes at the front of the workspace that [`VariantLayout::workspace_tensors`] take;
    /// cuDNN's own workspace starts after them.
    pub fn workspace_prefix(&self) -> usize {
        self.workspace_bytes
    }

    /// Every uid of the variant pack, ascending.
    pub fn uids(&self) -> &[i64] {
        &self.uids
    }

    /// The graph's I/O tensors in execution order: [`Graph::inputs`], then [`Graph::outputs`].
    pub fn io(&self) -> &[TensorId] {
        &self.io
    }

    /// For the `i`-th I/O tensor, its position in [`VariantLayout::uids`]; `None` for a graph
    /// input read only through slices ([`VariantLayout::views`]), which no operation names.
    pub fn io_positions(&self) -> &[Option<usize>] {
        &self.io_positions
    }

    /// Slices lowered as pointer offsets (cuDNN before 9.22): each one's position in
    /// [`VariantLayout::uids`], the index of the I/O tensor it views and the byte offset.
    pub fn views(&self) -> &[(usize, usize, u64)] {
        &self.views
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

/// One finalized plan: the candidate it was built from and the workspace it needs (its
/// descriptors are in [`Descriptors::plans`], at the same index).
#[derive(Debug)]
pub(crate) struct BuiltPlan {
    pub(crate) candidate: usize,
    pub(crate) workspace: usize,
}

/// A finalized execution plan's descriptor, with the engine config it was made from (and what
/// that was made from), kept alive with it.
#[derive(Debug)]
pub(crate) struct PlanDescriptor {
    plan: Descriptor,
    _config: Descriptor,
    _parts: Vec<Descriptor>,
}

/// Every cuDNN descriptor a plan owns, behind the plan's lock ([`ExecutionPlan::descriptors`]):
/// cuDNN is called on them only with the lock held, by one thread at a time (see
/// [`crate::backend::execute`] for why). A `Mutex` of `Send` data is `Sync`, which is what makes
/// [`ExecutionPlan`] `Sync` with no `unsafe impl`.
#[derive(Debug)]
pub(crate) struct Descriptors {
    // Fields drop in order: packs, plans and configs, then the operation graph they refer to.
    //
    // Variant packs of recent executes (a pack does not depend on the plan, only on pointers).
    packs: PackSlots,
    /// One per entry of [`ExecutionPlan::built`], in the same order.
    plans: Vec<PlanDescriptor>,
    // The operation graph and its parts (`None` for a plan loaded from JSON, which carries its
    // own).
    _lowered: Option<LoweredGraph>,
}

impl Descriptors {
    /// The execution plan of built plan `index`.
    pub(crate) fn plan(&self, index: usize) -> &Descriptor {
        &self.plans[index].plan
    }

    /// The execution plan of built plan `index`, and the variant packs.
    pub(crate) fn plan_and_packs(&mut self, index: usize) -> (&Descriptor, &mut PackSlots) {
        (&self.plans[index].plan, &mut self.packs)
    }
}

/// A graph planned by cuDNN: ready to execute (online) or to serialize (either).
///
/// `Send + Sync`: threads share one plan (behind an `Arc`, or borrowed in `std::thread::scope`)
/// and execute it at the same time, each with its own [`Cudnn`] on its own stream of the plan's
/// CUDA context. cuDNN's calls on the plan's descriptors take turns on a lock inside the plan,
/// held only for the host-side enqueue (`cudnnBackendExecute`, a few µs), never while the GPU
/// runs: cuDNN promises thread safety per handle, not for one execution plan executed by several
/// threads at once ([`execute`](crate::backend::execute) says why that matters). Uncontended
/// the lock costs one atomic compare-and-swap.
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
/// println!("built in {:?}", plan.timings().total());
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
    timings: BuildTimings,
    // Fields drop in order: the descriptors, then the handle or device properties they were made
    // with.
    descriptors: Mutex<Descriptors>,
    // The handle (with its CUDA context) or device properties the plan was made with.
    anchor: Anchor,
}

impl ExecutionPlan {
    /// Validates `graph`, lowers it, queries heuristics (or makes [`BuildOptions::engine`]),
    /// filters the candidates and builds the first one cuDNN accepts (or every one, with
    /// `build_all`; or only [`BuildOptions::candidate`]). Fails with [`BackendError::NoPlan`],
    /// listing every candidate and why it was rejected, when none is built.
    pub fn build(cudnn: &Cudnn, graph: &Graph, options: &BuildOptions) -> crate::Result<ExecutionPlan> {
        let _span =
            tracing::debug_span!("build_plan", graph = %graph.name, online = cudnn.stream().is_some()).entered();
        let mut timings = BuildTimings::default();
        let start = Instant::now();
        graph.validate()?;
        timings.validate = start.elapsed();
        let start = Instant::now();
        let lowered = lower::lower(graph, cudnn).inspect_err(|e| tracing::debug!(error = %e, "lowering failed"))?;
        timings.lower = start.elapsed();
        tracing::debug!(elapsed_us = crate::micros(timings.lower), "lowered");
        let mut candidates = Vec::new();
        let (configs, failures) = match &options.engine {
            Some(engine) => {
                let start = Instant::now();
                let made = heuristics::explicit(cudnn, &lowered.operation_graph, engine.id, &engine.knobs);
                timings.check_support = start.elapsed();
                match made {
                    Ok(config) => (vec![config], Vec::new()),
                    Err(rejected) => {
                        candidates.push(*rejected);
                        (Vec::new(), Vec::new())
                    }
                }
            }
            None => {
                let q = heuristics::query(cudnn, &lowered.operation_graph, &options.heuristics);
                timings.heuristics = q.heuristics;
                timings.check_support = q.check_support;
                (q.configs, q.failures)
            }
        };
        if let Some(index) = options.candidate {
            if index >= configs.len().max(candidates.len()) {
                return Err(BackendError::CandidateIndex { index, count: configs.len().max(candidates.len()) }.into());
            }
        }
        let mut built: Vec<BuiltPlan> = Vec::new();
        let mut plans = Vec::new();
        for Config { descriptor, parts, mut candidate } in configs {
            let start = Instant::now();
            if candidate.state == CandidateState::Untried {
                if let Some(r) = options.bars(&candidate) {
                    tracing::debug!(candidate = candidate.index, tag = %candidate.tag(), reason = %r, "filtered out");
                    candidate.state = CandidateState::Rejected(r);
                }
            }
            timings.check_support += start.elapsed();
            let wanted = options.candidate.is_none_or(|i| i == candidate.index);
            let stop = !options.build_all && !built.is_empty();
            if candidate.state == CandidateState::Untried && wanted && !stop {
                let start = Instant::now();
                let tried = try_build(cudnn, descriptor, parts, &candidate, options);
                let took = start.elapsed();
                timings.plan_build += took;
                let (index, tag, elapsed_us) = (candidate.index, candidate.tag(), crate::micros(took));
                candidate.state = match tried {
                    Ok((plan, descriptor)) => {
                        tracing::debug!(candidate = index, %tag, workspace = plan.workspace, elapsed_us, "plan built");
                        candidate.workspace_bytes = Some(plan.workspace);
                        built.push(plan);
                        plans.push(descriptor);
                        CandidateState::Built
                    }
                    Err(r) => {
                        tracing::debug!(candidate = index, %tag, reason = %r, elapsed_us, "plan rejected");
                        CandidateState::Rejected(r)
                    }
                };
            }
            candidates.push(candidate);
        }
        if built.is_empty() {
            tracing::debug!(candidates = candidates.len(), "no plan");
            return Err(BackendError::NoPlan {
                graph: graph.name.clone(),
                candidates,
                heuristics: failures,
                not_channels_last: graph.ports_not_channels_last(),
            }
            .into());
        }
        tracing::debug!(
            candidates = candidates.len(),
            built = built.len(),
            selected = %candidates[built[0].candidate].tag(),
            elapsed_us = crate::micros(timings.total()),
            "plan ready"
        );
        let layout = VariantLayout::with_internals(graph, &lowered.internals);
        Ok(ExecutionPlan {
            layout,
            graph: graph.clone(),
            candidates,
            built,
            selected: 0,
            timings,
            descriptors: Mutex::new(Descriptors { packs: PackSlots::new(), plans, _lowered: Some(lowered) }),
            anchor: cudnn.anchor(),
        })
    }

    /// Rebuilds a plan from cuDNN's JSON of it ([`ExecutionPlan::json`]) for `cudnn`, online or
    /// deviceless. `graph` must be the graph the plan was made from: it gives the variant-pack
    /// layout and the checks of [`ExecutionPlan::execute`]. Needs the cuDNN version that wrote
    /// the JSON.
    pub fn from_json(cudnn: &Cudnn, graph: Graph, json: &str) -> crate::Result<ExecutionPlan> {
        let _span = tracing::debug_span!("plan_from_json", graph = %graph.name, bytes = json.len()).entered();
        let mut timings = BuildTimings::default();
        let start = Instant::now();
        graph.validate()?;
        timings.validate = start.elapsed();
        let start = Instant::now();
        // cuDNN rebuilds the plan from the JSON's own description of the operation graph, and a
        // malformed one can crash it: the JSON must describe this graph exactly first.
        let manifest = lower::manifest(&graph, cudnn)?;
        binding::check(json, &graph, &manifest, cudnn)
            .map_err(|m| BackendError::PlanMismatch { graph: graph.name.clone(), mismatch: Box::new(m) })?;
        timings.lower = start.elapsed();
        let start = Instant::now();
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
        timings.plan_build = start.elapsed();
        tracing::debug!(tag = %candidate.tag(), workspace, elapsed_us = crate::micros(timings.plan_build), "plan loaded");
        let layout = VariantLayout::with_internals(&graph, &manifest.internals);
        let plans = vec![PlanDescriptor { plan, _config: config, _parts: Vec::new() }];
        Ok(ExecutionPlan {
            graph,
            candidates: vec![candidate],
            built: vec![BuiltPlan { candidate: 0, workspace }],
            selected: 0,
            layout,
            timings,
            descriptors: Mutex::new(Descriptors { packs: PackSlots::new(), plans, _lowered: None }),
            anchor: cudnn.anchor(),
        })
    }

    /// cuDNN's JSON of the selected plan (`CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION`): the
    /// compiled kernel and everything needed to rebuild the plan with
    /// [`ExecutionPlan::from_json`]. Not byte-identical run to run (it embeds pointers).
    pub fn json(&self) -> Result<String, BackendError> {
        Ok(self.descriptors().plan(self.selected).get_chars(A::CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION)?)
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

    /// Where building (or loading) this plan spent its time.
    pub fn timings(&self) -> &BuildTimings {
        &self.timings
    }

    /// The raw `cudnnBackendDescriptor_t` of the selected execution plan, for measuring against
    /// raw `cudnnBackendExecute` and for interop. It stays valid while this plan lives and the
    /// selection does not change; never destroy or modify it, and never call cuDNN with it while
    /// another thread may be executing this plan (the plan's own calls take turns on a lock that
    /// raw calls bypass).
    pub fn raw_descriptor(&self) -> sys::cudnnBackendDescriptor_t {
        self.descriptors().plan(self.selected).as_raw()
    }

    /// Workspace bytes the largest built plan needs: enough for any [`ExecutionPlan::select`].
    pub fn max_workspace_size(&self) -> usize {
        self.built.iter().map(|b| b.workspace).max().unwrap_or(0) + self.layout.workspace_prefix()
    }

    /// Workspace bytes the selected plan needs at execute: cuDNN's, after the tensors the
    /// lowering keeps at the front of the workspace ([`VariantLayout::workspace_prefix`]).
    pub fn workspace_size(&self) -> usize {
        self.plan().workspace + self.layout.workspace_prefix()
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

    /// The index of the selected plan in [`Descriptors`].
    pub(crate) fn selected_index(&self) -> usize {
        self.selected
    }

    /// The plan's cuDNN descriptors, locked: every cuDNN call on them goes through this.
    pub(crate) fn descriptors(&self) -> MutexGuard<'_, Descriptors> {
        // Nothing panics while the lock is held (cuDNN calls and one slot update), so a poisoned
        // lock still guards consistent descriptors.
        self.descriptors.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Check support, then build: the workspace limit is applied before compiling when cuDNN reports
/// the config's workspace, and after finalizing otherwise.
fn try_build(
    cudnn: &Cudnn,
    config: Descriptor,
    parts: Vec<Descriptor>,
    candidate: &Candidate,
    options: &BuildOptions,
) -> Result<(BuiltPlan, PlanDescriptor), Rejection> {
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
    let descriptor = PlanDescriptor { plan, _config: config, _parts: parts };
    Ok((BuiltPlan { candidate: candidate.index, workspace }, descriptor))
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
            assert_eq!(layout.uids()[layout.io_positions()[i].unwrap()], graph.tensor(*id).uid);
        }
        assert!(!layout.is_output(1) && layout.is_output(2));
        let s = &layout.scalars()[0];
        assert_eq!(s.uid, scalar_uid);
        assert_eq!(layout.uids()[s.position], scalar_uid);
        assert_eq!(s.data_type, DataType::F32);
        assert_eq!(s.bytes(), &0.5f32.to_ne_bytes());
        assert_eq!(s.host_ptr() as usize % 8, 0);
    }

    fn candidate(engine: i64, behavior: &[BehaviorNote], numerical: &[NumericalNote]) -> Candidate {
        Candidate {
            index: 0,
            mode: Some(HeuristicMode::A),
            engine_id: Some(engine),
            knobs: Vec::new(),
            numerical_notes: numerical.to_vec(),
            behavior_notes: behavior.to_vec(),
            workspace_bytes: Some(1024),
            shared_memory_bytes: Some(48 << 10),
            state: CandidateState::Untried,
        }
    }

    #[test]
    fn select_keeps_all_listed_notes_deselect_drops_any() {
        use BehaviorNote::{CublasltDependency as Cublaslt, RuntimeCompilation as Rtc};
        use NumericalNote::{Nondeterministic as Nondet, TensorCore as Tc};
        let both = candidate(1, &[Rtc, Cublaslt], &[Tc]);
        let rtc_only = candidate(2, &[Rtc], &[Tc, Nondet]);
        let plain = candidate(3, &[], &[]);
        let select = BuildOptions::default().select_behavior(Rtc).select_behavior(Cublaslt);
        assert_eq!(select.bars(&both), None);
        assert_eq!(select.bars(&rtc_only), Some(Rejection::Filtered(Filter::LacksBehaviorNote(Cublaslt))));
        assert_eq!(select.bars(&plain), Some(Rejection::Filtered(Filter::LacksBehaviorNote(Rtc))));
        let deselect = BuildOptions::default().deselect_behavior(Cublaslt).deselect_behavior(Rtc);
        assert_eq!(deselect.bars(&both), Some(Rejection::Filtered(Filter::HasBehaviorNote(Cublaslt))));
        assert_eq!(deselect.bars(&rtc_only), Some(Rejection::Filtered(Filter::HasBehaviorNote(Rtc))));
        assert_eq!(deselect.bars(&plain), None);
        let det = BuildOptions::default().deterministic().tensor_cores();
        assert_eq!(det.bars(&both), None);
        assert_eq!(det.bars(&rtc_only), Some(Rejection::Filtered(Filter::HasNumericalNote(Nondet))));
        assert_eq!(det.bars(&plain), Some(Rejection::Filtered(Filter::LacksNumericalNote(Tc))));
        assert_eq!(
            BuildOptions::default().deselect_engine(2).bars(&rtc_only),
            Some(Rejection::Filtered(Filter::DeselectedEngine(2)))
        );
        let caps = BuildOptions::default().shared_memory_limit(32 << 10);
        assert_eq!(caps.bars(&plain), Some(Rejection::SharedMemory { required: 48 << 10, limit: 32 << 10 }));
        assert_eq!(
            BuildOptions::default().workspace_limit(512).bars(&plain),
            Some(Rejection::Workspace { required: 1024, limit: 512 })
        );
        // Unknown sizes pass; building decides (workspace) or nothing can (shared memory).
        let unknown = Candidate { workspace_bytes: None, shared_memory_bytes: None, ..plain.clone() };
        assert_eq!(caps.workspace_limit(0).bars(&unknown), None);
        // The builders do not repeat a note.
        assert_eq!(BuildOptions::default().deterministic().deterministic().deselect_numerical_notes, [Nondet]);
        assert_eq!(
            Rejection::Filtered(Filter::HasBehaviorNote(Rtc)).to_string(),
            "barred by deselect_behavior_notes: has behavior note RUNTIME_COMPILATION"
        );
        assert_eq!(
            Rejection::SharedMemory { required: 10, limit: 4 }.to_string(),
            "needs 10 bytes of shared memory, over the limit of 4"
        );
    }

    #[test]
    fn notes_read_back_from_their_names() {
        for n in [NumericalNote::TensorCore, NumericalNote::WinogradTile4x4, NumericalNote::Other(42)] {
            assert_eq!(NumericalNote::from_name(&n.to_string()), Some(n));
        }
        for n in [BehaviorNote::RuntimeCompilation, BehaviorNote::SupportsCudaGraphNativeApi, BehaviorNote::Other(9)] {
            assert_eq!(BehaviorNote::from_name(&n.to_string()), Some(n));
        }
        assert_eq!(BehaviorNote::from_name("note3"), Some(BehaviorNote::SupportsCudaGraphNativeApi));
        assert_eq!(BehaviorNote::from_name("FAST"), None);
        assert_eq!(NumericalNote::from_name("notex"), None);
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
