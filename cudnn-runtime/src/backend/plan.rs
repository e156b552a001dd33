//! Execution plans: [`ExecutionPlan::build`] (validate → lower → heuristics → check support →
//! build) and [`ExecutionPlan::from_json`] (a plan serialized by cuDNN, rebuilt for a context),
//! with the variant-pack layout (`variant.rs`) precomputed for execution.

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendDescriptorType_t as K;

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use super::candidate::{Candidate, CandidateState, Rejection};
use super::heuristics::{self, Config};
use super::lower::{self, LoweredGraph};
use super::options::{BuildOptions, BuildTimings};
use super::pack::PackSlots;
use super::variant::VariantLayout;
use super::{binding, BackendError, Cudnn};
use crate::cudnn::{Anchor, Binding, Descriptor};
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
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::backend::{BuildOptions, Cudnn, ExecutionPlan};
/// use cudnn_graph::{DataType, GraphBuilder};
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
    pub fn build(cudnn: &Cudnn, graph: &Graph, options: &BuildOptions) -> Result<ExecutionPlan, BackendError> {
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
                return Err(BackendError::CandidateIndex { index, count: configs.len().max(candidates.len()) });
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
            });
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
    pub fn from_json(cudnn: &Cudnn, graph: Graph, json: &str) -> Result<ExecutionPlan, BackendError> {
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

    #[test]
    fn plans_are_shared_by_threads() {
        fn send<T: Send>() {}
        fn sync<T: Sync>() {}
        send::<ExecutionPlan>();
        sync::<ExecutionPlan>();
        send::<std::sync::Arc<ExecutionPlan>>();
    }
}
