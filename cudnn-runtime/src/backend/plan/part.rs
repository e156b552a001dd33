//! One kernel of a plan ([`PlanPart`]): lowered, planned by heuristics, checked and built (or
//! loaded from cuDNN's JSON), with the descriptors it owns and what a payload saves of it
//! ([`SavedPart`]).

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendDescriptorType_t as K;

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crate::backend::binding;
use crate::backend::candidate::{Candidate, CandidateState, Rejection};
use crate::backend::heuristics::{self, Config};
use crate::backend::lower::{self, LoweredGraph};
use crate::backend::options::{BuildOptions, BuildTimings};
use crate::backend::pack::PackSlots;
use crate::backend::partition::{Cut, Place};
use crate::backend::variant::VariantLayout;
use crate::backend::BackendError;
use crate::cudnn::{Binding, Cudnn, Descriptor, KernelCache};
use crate::ir::Graph;

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
    /// The kernel cache the plan was finalized with: its kernels live there, so it lives as long
    /// as the plan.
    _kernels: Option<KernelCache>,
}

/// Every cuDNN descriptor a plan part owns, behind its lock ([`PlanPart::descriptors`]):
/// cuDNN is called on them only with the lock held, by one thread at a time (see
/// [`crate::backend::execute`] for why). A `Mutex` of `Send` data is `Sync`, which is what makes
/// [`ExecutionPlan`](crate::backend::ExecutionPlan) `Sync` with no `unsafe impl`.
#[derive(Debug)]
pub(crate) struct Descriptors {
    // Fields drop in order: packs, plans and configs, then the operation graph they refer to.
    //
    // Variant packs of recent executes (a pack does not depend on the plan, only on pointers).
    packs: PackSlots,
    /// One per entry of [`PlanPart::built`], in the same order.
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

/// One kernel of an [`ExecutionPlan`](crate::backend::ExecutionPlan): the nodes it runs, the engine cuDNN chose for them, its
/// workspace, and why it does not share the previous part's kernel.
#[derive(Debug)]
pub struct PlanPart {
    pub(super) graph: Graph,
    pub(super) nodes: Vec<String>,
    pub(super) cut: Option<Cut>,
    pub(super) candidates: Vec<Candidate>,
    pub(super) built: Vec<BuiltPlan>,
    pub(super) selected: usize,
    pub(super) layout: VariantLayout,
    pub(super) timings: BuildTimings,
    /// Where each entry of `layout.io()` lives: an I/O buffer of the plan (at an offset, for a
    /// view) or the arena.
    pub(super) sources: Vec<Place>,
    /// Sources are the plan's I/O in order (a plan of one part): no remapping at execute.
    pub(super) identity: bool,
    /// Bytes this part writes into the arena.
    pub(super) arena_writes: usize,
    /// Planned as a dynamic-shape operation graph with a kernel cache.
    pub(super) dynamic_shape: bool,
    pub(super) descriptors: Mutex<Descriptors>,
}

/// One part of a partitioned plan as a payload saves it ([`ExecutionPlan::from_parts_json`](crate::backend::ExecutionPlan::from_parts_json)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedPart {
    /// The names of the nodes it runs, in order ([`PlanPart::nodes`]).
    pub nodes: Vec<String>,
    /// cuDNN's JSON of its plan ([`PlanPart::json`]).
    pub json: String,
    /// cuDNN's refusal that cut it from the previous part, where that is why
    /// ([`CutReason::Refused`](crate::backend::CutReason::Refused)): one of the two reasons the fusion table cannot give again on
    /// loading.
    pub refused: Option<String>,
    /// Autotuning's times, where it was cut from the previous part because that measured faster
    /// ([`CutReason::MeasuredFaster`](crate::backend::CutReason::MeasuredFaster)): the other one. The tensors such an epilogue cut
    /// materializes are stored in the type the build stored them in (its rule runs again).
    pub measured: Option<String>,
}

/// One part of a plan as an earlier build chose it: its nodes, the engine config it ran and why
/// it was cut from the part before ([`ExecutionPlan::build_chosen`](crate::backend::ExecutionPlan::build_chosen):
/// what the tuning store keeps, replayed without heuristics or timing; what a capture records).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChosenPart {
    /// The names of the nodes it runs, in order ([`PlanPart::nodes`]).
    pub nodes: Vec<String>,
    /// The engine config to build it with.
    pub engine: crate::backend::EngineConfig,
    /// cuDNN's refusal that cut it from the previous part, as [`SavedPart::refused`].
    #[serde(default)]
    pub refused: Option<String>,
    /// Autotuning's times that cut it from the previous part, as [`SavedPart::measured`].
    #[serde(default)]
    pub measured: Option<String>,
}

impl ChosenPart {
    /// `part` as it runs now: its nodes, its selected engine, its cut; `None` where cuDNN could
    /// not name the selected engine.
    pub fn of(part: &PlanPart) -> Option<ChosenPart> {
        let selected = part.selected();
        let (refused, measured) = match part.cut().map(|c| &c.reason) {
            Some(crate::backend::CutReason::Refused(why)) => (Some(why.clone()), None),
            Some(crate::backend::CutReason::MeasuredFaster(times)) => (None, Some(times.clone())),
            _ => (None, None),
        };
        Some(ChosenPart {
            nodes: part.nodes().to_vec(),
            engine: crate::backend::EngineConfig { id: selected.engine_id?, knobs: selected.knobs.clone() },
            refused,
            measured,
        })
    }
}

impl PlanPart {
    /// Lowers, plans and builds `graph` (validated by the caller) as one kernel. With
    /// [`BuildOptions::kernel_cache`], as a dynamic-shape operation graph whose plans use the
    /// cache; where cuDNN plans no such graph (cuDNN 9.19 proposes no engine for a dynamic-shape
    /// graph of pointwise ops alone, nor for attention backward), or where an op's family refuses
    /// one (`OpFamily::dynamic_shape_refusal`: attention), as an ordinary one
    /// ([`PlanPart::is_dynamic_shape`] says which).
    pub(super) fn build(
        cudnn: &Cudnn,
        graph: Graph,
        nodes: Vec<String>,
        cut: Option<Cut>,
        options: &BuildOptions,
    ) -> Result<PlanPart, BackendError> {
        let Some(kernels) = &options.kernel_cache else {
            return Self::build_with(cudnn, graph, nodes, cut, options, None);
        };
        if let Some((node, reason)) = graph.nodes.iter().find_map(|n| Some((&n.name, n.op.dynamic_shape_refusal()?))) {
            tracing::debug!(%node, reason, "planned for its one shape: no dynamic-shape operation graph may hold it");
            return Self::build_with(cudnn, graph, nodes, cut, options, None);
        }
        match Self::build_with(cudnn, graph.clone(), nodes.clone(), cut.clone(), options, Some(kernels)) {
            Err(BackendError::NoPlan { candidates, .. }) => {
                tracing::debug!(
                    candidates = candidates.len(),
                    "no plan for the dynamic-shape operation graph: planning it as an ordinary one"
                );
                Self::build_with(cudnn, graph, nodes, cut, options, None)
            }
            done => done,
        }
    }

    /// [`PlanPart::build`], dynamic-shape with `kernels` or not.
    // Long because it is one pass over heuristics' candidates: filters, known-bad engines, the
    // build and its tracing share the build's locals (timings, candidates, descriptors), which
    // pieces would all take as arguments.
    fn build_with(
        cudnn: &Cudnn,
        graph: Graph,
        nodes: Vec<String>,
        cut: Option<Cut>,
        options: &BuildOptions,
        kernels: Option<&KernelCache>,
    ) -> Result<PlanPart, BackendError> {
        let mut timings = validate_timed(&graph)?;
        let start = Instant::now();
        let lowered = lower::lower(&graph, cudnn, kernels.is_some())
            .inspect_err(|e| tracing::debug!(error = %e, "lowering failed"))?;
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
                refuse_known_bad_heuristics(cudnn, &graph)?;
                let q = heuristics::query(cudnn, &lowered.operation_graph, &options.heuristics);
                timings.heuristics = q.heuristics;
                timings.check_support = q.check_support;
                (q.configs, q.failures)
            }
        };
        if let Some(index) = options.candidate {
            if index >= configs.len().max(candidates.len()) {
                return Err(BackendError::CandidateIndex { index, count: configs.len().max(candidates.len()) });
            }
        }
        let mut built: Vec<BuiltPlan> = Vec::new();
        let mut plans = Vec::new();
        let known_bad = known_bad_engine(cudnn, &graph);
        for Config { descriptor, parts, mut candidate } in configs {
            let start = Instant::now();
            if candidate.state == CandidateState::Untried {
                if let Some(r) = options.bars(&candidate) {
                    tracing::debug!(candidate = candidate.index, tag = %candidate.tag(), reason = %r, "filtered out");
                    candidate.state = CandidateState::Rejected(r);
                } else if let Some((_, message)) = known_bad.as_ref().filter(|(e, _)| candidate.engine_id == Some(*e)) {
                    tracing::debug!(candidate = candidate.index, tag = %candidate.tag(), "known bad on this cuDNN");
                    candidate.state = CandidateState::Rejected(Rejection::Other { message: message.clone() });
                }
            }
            timings.check_support += start.elapsed();
            let wanted = options.candidate.is_none_or(|i| i == candidate.index);
            let stop = !options.build_all && !built.is_empty();
            if candidate.state == CandidateState::Untried && wanted && !stop {
                let start = Instant::now();
                let tried = try_build(cudnn, &lowered.operation_graph, kernels, descriptor, parts, &candidate, options);
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
                nodes: graph.nodes.iter().map(|n| (n.name.clone(), n.op.call_name())).collect(),
                candidates,
                heuristics: failures,
                not_channels_last: graph.ports_not_channels_last(),
            });
        }
        tracing::debug!(
            candidates = candidates.len(),
            built = built.len(),
            selected = %candidates[built[0].candidate].tag(),
            elapsed_us = crate::micros(timings.total()),
            "plan ready"
        );
        let layout = VariantLayout::with_internals(&graph, &lowered.internals);
        Ok(PlanPart {
            layout,
            graph,
            nodes,
            cut,
            candidates,
            built,
            selected: 0,
            timings,
            sources: Vec::new(),
            identity: false,
            arena_writes: 0,
            dynamic_shape: kernels.is_some(),
            descriptors: Mutex::new(Descriptors { packs: PackSlots::new(), plans, _lowered: Some(lowered) }),
        })
    }

    /// Loads `graph`'s plan from cuDNN's JSON of it.
    pub(super) fn from_json(
        cudnn: &Cudnn,
        graph: Graph,
        nodes: Vec<String>,
        cut: Option<Cut>,
        json: &str,
    ) -> Result<PlanPart, BackendError> {
        let mut timings = validate_timed(&graph)?;
        let start = Instant::now();
        // cuDNN rebuilds the plan from the JSON's own description of the operation graph, and a
        // malformed one can crash it: the JSON must describe this graph exactly first.
        let manifest = lower::manifest(&graph, cudnn)?;
        let checked = binding::check(json, &graph, &manifest, cudnn)
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
        let plans = vec![PlanDescriptor { plan, _config: config, _parts: Vec::new(), _kernels: None }];
        Ok(PlanPart {
            graph,
            nodes,
            cut,
            candidates: vec![candidate],
            built: vec![BuiltPlan { candidate: 0, workspace }],
            selected: 0,
            layout,
            timings,
            sources: Vec::new(),
            identity: false,
            arena_writes: 0,
            // cuDNN loads a dynamic-shape plan with its kernel in the JSON, without a cache.
            dynamic_shape: checked.dynamic_shape,
            descriptors: Mutex::new(Descriptors { packs: PackSlots::new(), plans, _lowered: None }),
        })
    }

    /// The graph this part plans: the nodes it runs, with the tensors it exchanges with other
    /// parts as its inputs and outputs (named as in the plan's graph).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Whether the part was planned as a dynamic-shape operation graph with a kernel cache
    /// ([`BuildOptions::kernel_cache`]); for a part loaded from JSON, whether its JSON says so.
    pub fn is_dynamic_shape(&self) -> bool {
        self.dynamic_shape
    }

    /// The names of the plan graph's nodes it runs, in order.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// Why it does not share the previous part's kernel (`None` for the first part).
    pub fn cut(&self) -> Option<&Cut> {
        self.cut.as_ref()
    }

    /// Bytes of the arena this part writes (the intermediates later parts read).
    pub fn intermediate_bytes(&self) -> usize {
        self.arena_writes
    }

    /// Every candidate heuristics proposed for it, with its state.
    pub fn candidates(&self) -> &[Candidate] {
        &self.candidates
    }

    /// The candidate of its selected plan.
    pub fn selected(&self) -> &Candidate {
        &self.candidates[self.plan().candidate]
    }

    /// Its candidates that were built into plans, in build order.
    pub fn built(&self) -> Vec<usize> {
        self.built.iter().map(|b| b.candidate).collect()
    }

    /// Where building (or loading) it spent its time.
    pub fn timings(&self) -> &BuildTimings {
        &self.timings
    }

    /// cuDNN's JSON of its selected plan (see [`ExecutionPlan::json`](crate::backend::ExecutionPlan::json)).
    pub fn json(&self) -> Result<String, BackendError> {
        Ok(self.descriptors().plan(self.selected).get_chars(A::CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION)?)
    }

    /// The raw descriptor of its selected plan (see [`ExecutionPlan::raw_descriptor`](crate::backend::ExecutionPlan::raw_descriptor)).
    pub fn raw_descriptor(&self) -> sys::cudnnBackendDescriptor_t {
        self.descriptors().plan(self.selected).as_raw()
    }

    /// Workspace bytes its largest built plan needs.
    pub fn max_workspace_size(&self) -> usize {
        self.built.iter().map(|b| b.workspace).max().unwrap_or(0) + self.layout.workspace_prefix()
    }

    /// Workspace bytes its selected plan needs: cuDNN's, after the tensors the lowering keeps at
    /// the front of the workspace ([`VariantLayout::workspace_prefix`]).
    pub fn workspace_size(&self) -> usize {
        self.plan().workspace + self.layout.workspace_prefix()
    }

    /// Its variant-pack layout.
    pub fn layout(&self) -> &VariantLayout {
        &self.layout
    }

    /// Where each of its I/O tensors lives in the plan's memory.
    pub(crate) fn sources(&self) -> Option<&[Place]> {
        (!self.identity).then_some(self.sources.as_slice())
    }

    pub(crate) fn plan(&self) -> &BuiltPlan {
        // `built` is never empty (both constructors ensure it) and `select_in` keeps `selected`
        // in range.
        &self.built[self.selected]
    }

    /// The index of the selected plan in [`Descriptors`].
    pub(crate) fn selected_index(&self) -> usize {
        self.selected
    }

    /// Its cuDNN descriptors, locked: every cuDNN call on them goes through this.
    pub(crate) fn descriptors(&self) -> MutexGuard<'_, Descriptors> {
        // Nothing panics while the lock is held (cuDNN calls and one slot update), so a poisoned
        // lock still guards consistent descriptors.
        self.descriptors.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl std::fmt::Display for PlanPart {
    /// `matmul_0, add_1, gelu_2: engine 3 (knobs ..), workspace 0 B, writes 16384 B`, then the
    /// cut on a second line where there is one.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}, workspace {} B, writes {} B",
            self.nodes.join(", "),
            self.selected().tag(),
            self.workspace_size(),
            self.arena_writes
        )?;
        if let Some(cut) = &self.cut {
            write!(f, "\n  cut: {cut}")?;
        }
        Ok(())
    }
}

/// Validates `graph` (a part is validated again by itself: it is a graph of its own), and starts
/// the timings of its build with how long that took.
fn validate_timed(graph: &Graph) -> Result<BuildTimings, BackendError> {
    let start = Instant::now();
    graph.validate()?;
    Ok(BuildTimings { validate: start.elapsed(), ..BuildTimings::default() })
}

/// Check support, then build: the workspace limit is applied before compiling when cuDNN reports
/// the config's workspace, and after finalizing otherwise.
#[allow(clippy::too_many_arguments)]
fn try_build(
    cudnn: &Cudnn,
    operation_graph: &Descriptor,
    kernels: Option<&KernelCache>,
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
        match kernels {
            Some(cache) => cache.finalize_plan(plan, operation_graph)?,
            None => plan.finalize()?,
        }
        workspace_of(plan)
    };
    let workspace = finalize(&mut plan).map_err(Rejection::from_error)?;
    if let Some(r) = over(workspace) {
        return Err(r);
    }
    let descriptor = PlanDescriptor { plan, _config: config, _parts: parts, _kernels: kernels.cloned() };
    Ok((BuiltPlan { candidate: candidate.index, workspace }, descriptor))
}

fn workspace_of(plan: &Descriptor) -> Result<usize, BackendError> {
    let w = plan.get_i64(A::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)?;
    usize::try_from(w).map_err(|_| BackendError::BadValue { what: "a plan's workspace size", value: w })
}

/// Refuses, naming the loaded cuDNN and why, a heuristic query that a known-bad version
/// ([`crate::cudnn::support::KNOWN_BAD`]) answers by killing the process: deviceless heuristics
/// for a one-row matmul (a decode GEMM) divide by zero inside cuDNN 9.10.2 to 9.14.
fn refuse_known_bad_heuristics(cudnn: &Cudnn, graph: &Graph) -> Result<(), BackendError> {
    use crate::cudnn::support::{refuse_known_bad, Condition};
    if cudnn.is_online() {
        return Ok(());
    }
    for node in &graph.nodes {
        let one_row = matches!(node.op, crate::ops::Op::Matmul(_))
            && node.inputs.first().is_some_and(|a| {
                let dims = &graph.tensor(*a).dims;
                dims.len() >= 2 && dims[dims.len() - 2] == 1
            });
        if one_row {
            let what = format!("deviceless heuristics for matmul `{}` of graph `{}` (one row)", node.name, graph.name);
            refuse_known_bad(cudnn.version(), Condition::DevicelessSingleRowMatmul, &what)?;
        }
    }
    Ok(())
}

/// The engine a known-bad version ([`crate::cudnn::support::KNOWN_BAD`]) computes `graph` wrongly
/// with, and why, for the candidates' loop to pass over: cuDNN 9.14 computes f16 matmuls wrongly on
/// engine 0 (H100: a sliced operand gave infinities, a broadcast `B` left a batch unwritten).
fn known_bad_engine(cudnn: &Cudnn, graph: &Graph) -> Option<(i64, String)> {
    use crate::cudnn::support::{known_bad, reason, Condition};
    use crate::ops::Op;
    let entry = known_bad(cudnn.version(), Condition::F16MatmulEngine0)?;
    let f16_matmul = graph.nodes.iter().any(|m| {
        matches!(m.op, Op::Matmul(_)) && m.inputs.iter().any(|t| graph.tensor(*t).data_type == crate::DataType::F16)
    });
    f16_matmul.then(|| (0, reason(cudnn.version(), entry)))
}
