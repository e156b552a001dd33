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
use super::mismatch::PlanMismatch;
use super::options::{BuildOptions, BuildTimings, Fusion};
use super::pack::PackSlots;
use super::partition::{self, Cut, CutReason, Place, Refusals};
use super::variant::VariantLayout;
use super::{binding, BackendError, Cudnn};
use crate::cudnn::{Anchor, Binding, Descriptor, Internals, KernelCache};
use crate::ir::{for_cudnn, Graph, Rewrite, Rewritten, TensorId};

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
/// [`ExecutionPlan`] `Sync` with no `unsafe impl`.
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

/// A graph planned by cuDNN: ready to execute (online) or to serialize (either).
///
/// A plan is one cuDNN kernel where cuDNN fuses the whole graph, and otherwise (with the default
/// [`Fusion::Auto`]) the fewest parts it plans ([`ExecutionPlan::parts`]): they run in order on the
/// stream, the tensors they exchange in an arena at the front of the workspace, sized at build,
/// so an execute allocates nothing. [`ExecutionPlan::execute`], [`ExecutionPlan::execute_raw`]
/// and [`ExecutionPlan::cuda_graph`] take the graph's own inputs and outputs either way.
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
    /// The graph's I/O layout (for a plan of one part, that part's layout).
    layout: VariantLayout,
    // Fields drop in order: the parts (their descriptors), then the handle or device properties
    // they were made with.
    parts: Vec<PlanPart>,
    /// What the graph was rewritten into before planning.
    rewrites: Vec<Rewrite>,
    /// Bytes of workspace the tensors exchanged between parts take, before the parts' own.
    arena_bytes: usize,
    timings: BuildTimings,
    /// Other ways to run the graph ([`Fusion::Measure`]) that autotuning times against the
    /// parts above, until it keeps the fastest.
    alternatives: Vec<Partitioning>,
    // The handle (with its CUDA context) or device properties the plan was made with.
    anchor: Anchor,
}

/// One way to run a plan's graph that [`Fusion::Measure`] built besides the plan's own parts:
/// the graph with an anchor's elementwise epilogue (or prologue) cut off into a kernel of its
/// own ([`CutReason::ToMeasure`]). [`crate::engines::autotune`] times each whole partitioning
/// (the sum of its parts) against the plan's and keeps the fastest
/// ([`ExecutionPlan::alternatives`]).
#[derive(Debug)]
pub struct Partitioning {
    parts: Vec<PlanPart>,
    layout: VariantLayout,
    arena_bytes: usize,
}

impl Partitioning {
    /// Its kernels, in execution order.
    pub fn parts(&self) -> &[PlanPart] {
        &self.parts
    }

    /// Bytes at the front of the workspace that hold the tensors its parts exchange.
    pub fn arena_bytes(&self) -> usize {
        self.arena_bytes
    }

    /// Workspace bytes enough for any selection of its parts' built plans.
    fn max_workspace_size(&self) -> usize {
        self.arena_bytes + self.parts.iter().map(PlanPart::max_workspace_size).max().unwrap_or(0)
    }
}

/// One kernel of an [`ExecutionPlan`]: the nodes it runs, the engine cuDNN chose for them, its
/// workspace, and why it does not share the previous part's kernel.
#[derive(Debug)]
pub struct PlanPart {
    graph: Graph,
    nodes: Vec<String>,
    cut: Option<Cut>,
    candidates: Vec<Candidate>,
    built: Vec<BuiltPlan>,
    selected: usize,
    layout: VariantLayout,
    timings: BuildTimings,
    /// Where each entry of `layout.io()` lives: an I/O buffer of the plan (at an offset, for a
    /// view) or the arena.
    sources: Vec<Place>,
    /// Sources are the plan's I/O in order (a plan of one part): no remapping at execute.
    identity: bool,
    /// Bytes this part writes into the arena.
    arena_writes: usize,
    /// Planned as a dynamic-shape operation graph with a kernel cache.
    dynamic_shape: bool,
    descriptors: Mutex<Descriptors>,
}

/// One part of a partitioned plan as a payload saves it ([`ExecutionPlan::from_parts_json`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedPart {
    /// The names of the nodes it runs, in order ([`PlanPart::nodes`]).
    pub nodes: Vec<String>,
    /// cuDNN's JSON of its plan ([`PlanPart::json`]).
    pub json: String,
    /// cuDNN's refusal that cut it from the previous part, where that is why
    /// ([`CutReason::Refused`]): one of the two reasons the fusion table cannot give again on
    /// loading.
    pub refused: Option<String>,
    /// Autotuning's times, where it was cut from the previous part because that measured faster
    /// ([`CutReason::MeasuredFaster`]): the other one. The tensors such an epilogue cut
    /// materializes are stored in the type the build stored them in (its rule runs again).
    pub measured: Option<String>,
}

/// Whether `e` is cuDNN declining a pattern, which a smaller part may avoid (rather than a
/// failure a split cannot help).
fn is_refusal(e: &BackendError) -> bool {
    matches!(e, BackendError::NoPlan { .. } | BackendError::Cudnn { .. } | BackendError::Unsupported { .. })
}

/// `e`, where it is a [`BackendError::NoPlan`] of `graph` rewritten or of a part of it (named
/// `{graph}.part{k}`), as the user wrote `graph`: its name, and its nodes by their declared names
/// and ops (a node a rewrite made is the node it replaced; one of nothing the user wrote is
/// dropped), each once.
fn users_no_plan(e: BackendError, graph: &Graph, rewrites: &[Rewrite]) -> BackendError {
    let BackendError::NoPlan { nodes, candidates, heuristics, not_channels_last, .. } = e else { return e };
    let mut named: Vec<(String, &'static str)> = Vec::with_capacity(nodes.len());
    for (name, _) in nodes {
        let declared =
            rewrites.iter().find(|r| r.replaced_by.contains(&name)).map_or(name.as_str(), |r| r.node.as_str());
        let Some(node) = graph.nodes.iter().find(|n| n.name == declared) else { continue };
        let op = node.op.call_name();
        if !named.iter().any(|(n, _)| n == declared) {
            named.push((declared.to_string(), op));
        }
    }
    BackendError::NoPlan { graph: graph.name.clone(), nodes: named, candidates, heuristics, not_channels_last }
}

/// The first line of an error, for a cut's reason.
fn summary(e: &BackendError) -> String {
    let text = e.to_string();
    text.lines().next().unwrap_or_default().to_string()
}

impl ExecutionPlan {
    /// Validates `graph`, lowers it, queries heuristics (or makes [`BuildOptions::engine`]),
    /// filters the candidates and builds the first one cuDNN accepts (or every one, with
    /// `build_all`; or only [`BuildOptions::candidate`]). Fails with [`BackendError::NoPlan`],
    /// listing every candidate and why it was rejected, when none is built.
    ///
    /// A graph cuDNN will not plan as one kernel is split into parts ([`Fusion::Auto`]): by the
    /// op families' [`FusionRule`](crate::ops::FusionRule)s first (two matmuls are two parts
    /// without asking), then by cuDNN's answers (a part it refuses is split around its anchor op,
    /// and the refusal is remembered for this cuDNN version and GPU). With [`Fusion::Single`] such
    /// a graph is a [`BackendError::CannotFuse`] naming the op pair.
    ///
    /// With [`Fusion::Measure`], the plan is built as with [`Fusion::Auto`], and then so is every
    /// partitioning that cuts an anchor's elementwise epilogue (or prologue) off into a kernel of
    /// its own, at its natural cut points ([`ExecutionPlan::alternatives`]; a candidate with a part
    /// cuDNN refuses is left out): [`crate::engines::autotune`] times them all and keeps the
    /// fastest. Each costs the build of its parts.
    pub fn build(cudnn: &Cudnn, graph: &Graph, options: &BuildOptions) -> Result<ExecutionPlan, BackendError> {
        let _span =
            tracing::debug_span!("build_plan", graph = %graph.name, online = cudnn.stream().is_some()).entered();
        let mut plan = Self::build_auto(cudnn, graph, options)?;
        let explicit = options.engine.is_some() || options.candidate.is_some();
        if options.fusion == Fusion::Measure && !explicit {
            let start = Instant::now();
            let Rewritten { graph: planned, .. } = for_cudnn(graph)?;
            plan.timings.validate += start.elapsed();
            plan.alternatives = plan.measured_alternatives(cudnn, &planned, options)?;
        }
        Ok(plan)
    }

    /// [`ExecutionPlan::build`] as [`Fusion::Auto`] (or [`Fusion::Single`]) builds; a
    /// [`BackendError::NoPlan`] of the graph or of one of its parts names the user's graph and
    /// nodes ([`users_no_plan`]).
    fn build_auto(cudnn: &Cudnn, graph: &Graph, options: &BuildOptions) -> Result<ExecutionPlan, BackendError> {
        let start = Instant::now();
        graph.validate()?;
        let Rewritten { graph: planned, rewrites } = for_cudnn(graph)?;
        Self::build_rewritten(cudnn, graph, planned, rewrites.clone(), options, start)
            .map_err(|e| users_no_plan(e, graph, &rewrites))
    }

    /// [`ExecutionPlan::build_auto`] of `graph` rewritten as `planned`.
    fn build_rewritten(
        cudnn: &Cudnn,
        graph: &Graph,
        planned: Graph,
        rewrites: Vec<Rewrite>,
        options: &BuildOptions,
        start: Instant,
    ) -> Result<ExecutionPlan, BackendError> {
        for r in &rewrites {
            tracing::debug!(rewrite = %r, "rewritten");
        }
        let validate = start.elapsed();
        // An engine or candidate named explicitly is one kernel's choice: such a build is never
        // split.
        let explicit = options.engine.is_some() || options.candidate.is_some();
        let may_split = options.fusion != Fusion::Single && !explicit;
        let key = |g: &Graph| (cudnn.version(), cudnn.sm(), g.fingerprint());
        let table = partition::group(&planned, None);
        if table.len() > 1 && options.fusion == Fusion::Single {
            let cut = table.iter().find_map(|g| g.cut.clone());
            return Err(BackendError::CannotFuse { graph: graph.name.clone(), cut: cut.map(Box::new) });
        }
        let whole = |timings_validate| -> Result<ExecutionPlan, BackendError> {
            let all = planned.nodes.iter().map(|n| n.name.clone()).collect();
            let part = PlanPart::build(cudnn, planned.clone(), all, None, options)?;
            Ok(ExecutionPlan::single(graph.clone(), part, rewrites.clone(), timings_validate, cudnn))
        };
        if !may_split {
            return whole(validate);
        }
        if table.len() <= 1 {
            match Refusals::global().get(key(&planned)) {
                Some(why) => {
                    tracing::debug!(reason = %why, "cuDNN refused this graph as one kernel before: partitioning");
                    // Where no split plans, the whole graph's own error says the most.
                    return match Self::build_parts(cudnn, graph, &planned, &rewrites, options, Some(why), validate) {
                        Ok(Some(plan)) => Ok(plan),
                        Ok(None) => whole(validate),
                        Err(e) if is_refusal(&e) => whole(validate),
                        Err(e) => Err(e),
                    };
                }
                None => match whole(validate) {
                    Err(e) if planned.nodes.len() > 1 && is_refusal(&e) => {
                        let why = summary(&e);
                        tracing::debug!(reason = %why, "cuDNN refused the graph as one kernel: partitioning");
                        Refusals::global().insert(key(&planned), why.clone());
                        return match Self::build_parts(cudnn, graph, &planned, &rewrites, options, Some(why), validate)
                        {
                            Ok(Some(plan)) => Ok(plan),
                            Ok(None) => Err(e),
                            Err(part) if is_refusal(&part) => Err(e),
                            Err(part) => Err(part),
                        };
                    }
                    done => return done,
                },
            }
        }
        Self::build_parts(cudnn, graph, &planned, &rewrites, options, None, validate)?
            .ok_or_else(|| BackendError::CannotFuse { graph: graph.name.clone(), cut: None })
    }

    /// A plan of one part: `part` plans `graph` (or its rewrite) whole.
    fn single(
        graph: Graph,
        mut part: PlanPart,
        rewrites: Vec<Rewrite>,
        validate: std::time::Duration,
        cudnn: &Cudnn,
    ) -> ExecutionPlan {
        part.sources = (0..part.layout.io().len()).map(|index| Place::Io { index, offset: 0 }).collect();
        part.identity = true;
        let mut timings = part.timings;
        timings.validate += validate;
        ExecutionPlan {
            graph,
            layout: part.layout.clone(),
            parts: vec![part],
            rewrites,
            arena_bytes: 0,
            timings,
            alternatives: Vec::new(),
            anchor: cudnn.anchor(),
        }
    }

    /// Builds `planned` (`graph` rewritten) as several parts (see [`ExecutionPlan::build`]);
    /// `refused` is why cuDNN would not take it whole, when it was asked. `None` when the graph
    /// is one node or one part that cannot be split.
    fn build_parts(
        cudnn: &Cudnn,
        user_graph: &Graph,
        planned: &Graph,
        rewrites: &[Rewrite],
        options: &BuildOptions,
        refused: Option<String>,
        validate: std::time::Duration,
    ) -> Result<Option<ExecutionPlan>, BackendError> {
        let options = &*without_kernel_cache(options);
        let restrided = partition::restride(planned);
        let graph = &restrided;
        let alias = partition::aliases(graph);
        let mut groups = partition::group(graph, Some(&alias));
        if let (Some(why), [one]) = (&refused, groups.as_slice()) {
            let Some(pieces) = partition::split(graph, one, why) else { return Ok(None) };
            groups = pieces;
        }
        let mut built: Vec<(PlanPart, Vec<TensorId>)> = Vec::new();
        while built.len() < groups.len() {
            let k = built.len();
            let part = partition::extract(graph, &groups, k, &alias);
            let key = (cudnn.version(), cudnn.sm(), part.graph.fingerprint());
            let remembered = if groups[k].nodes.len() > 1 { Refusals::global().get(key) } else { None };
            let failure = match remembered {
                Some(why) => {
                    tracing::debug!(part = k, reason = %why, "cuDNN refused this part before: splitting it");
                    Err((why, None))
                }
                None => {
                    let nodes = groups[k].nodes.iter().map(|&n| graph.nodes[n].name.clone()).collect();
                    PlanPart::build(cudnn, part.graph, nodes, groups[k].cut.clone(), options)
                        .map_err(|e| (summary(&e), Some(e)))
                }
            };
            match failure {
                Ok(p) => {
                    tracing::debug!(
                        part = k,
                        nodes = ?p.nodes,
                        engine = %p.selected().tag(),
                        cut = %p.cut.as_ref().map(ToString::to_string).unwrap_or_default(),
                        "part built"
                    );
                    built.push((p, part.tensors));
                }
                Err((why, error)) => {
                    let error = match error {
                        Some(e) if !is_refusal(&e) => return Err(lower::name_channels_last_ports(e, user_graph)),
                        error => error,
                    };
                    let Some(pieces) = partition::split(graph, &groups[k], &why) else {
                        return match error {
                            Some(e) => Err(e),
                            None => Ok(None),
                        };
                    };
                    Refusals::global().insert(key, why);
                    groups.splice(k..=k, pieces);
                }
            }
        }
        let missing = |part: &PlanPart, tensor: &str| BackendError::Unsupported {
            node: part.nodes.first().cloned().unwrap_or_default(),
            op: "partition",
            reason: format!("tensor `{tensor}` crosses a part boundary but has no memory"),
        };
        let assembled = Self::assemble(
            cudnn,
            user_graph.clone(),
            graph,
            &groups,
            &alias,
            built,
            rewrites.to_vec(),
            validate,
            missing,
        )?;
        Ok(Some(assembled))
    }

    /// The partitionings [`Fusion::Measure`] builds besides this plan (built as [`Fusion::Auto`]
    /// builds it, from `planned`, the graph rewritten): this plan's partition with one part cut
    /// at one of [`partition::measured_cuts`]' points each, the tensors an epilogue cut
    /// materializes stored as [`partition::retype_epilogue_cut`] says. A candidate one of whose
    /// parts cuDNN refuses is left out. Their build times are added to this plan's.
    fn measured_alternatives(
        &mut self,
        cudnn: &Cudnn,
        planned: &Graph,
        options: &BuildOptions,
    ) -> Result<Vec<Partitioning>, BackendError> {
        let options = &*without_kernel_cache(options);
        let restrided = partition::restride(planned);
        let alias = partition::aliases(&restrided);
        let groups = if self.is_partitioned() {
            let names = self.parts.iter().map(|p| p.nodes.as_slice());
            let mut groups = partition::from_names(&restrided, names, &alias).map_err(|reason| {
                BackendError::Unsupported { node: self.graph.name.clone(), op: "partition", reason }
            })?;
            for (group, part) in groups.iter_mut().zip(&self.parts) {
                group.cut = part.cut.clone();
            }
            groups
        } else {
            // A plan of one kernel: its one group (views between parts would make more).
            let groups = partition::group(&restrided, Some(&alias));
            if groups.len() != 1 {
                return Ok(Vec::new());
            }
            groups
        };
        let mut out = Vec::new();
        for candidate in partition::measured_cuts(&restrided, &groups) {
            let mut graph = restrided.clone();
            for k in 0..candidate.len() {
                if candidate[k].cut.as_ref().is_some_and(|c| c.reason == CutReason::ToMeasure) {
                    partition::retype_epilogue_cut(&mut graph, &candidate, k);
                }
            }
            let mut built = Vec::with_capacity(candidate.len());
            let mut refused = None;
            for (k, group) in candidate.iter().enumerate() {
                let part = partition::extract(&graph, &candidate, k, &alias);
                let nodes = group.nodes.iter().map(|&n| graph.nodes[n].name.clone()).collect();
                match PlanPart::build(cudnn, part.graph, nodes, group.cut.clone(), options) {
                    Ok(p) => built.push((p, part.tensors)),
                    Err(e) if is_refusal(&e) => {
                        refused = Some(summary(&e));
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            let parts: Vec<Vec<String>> =
                candidate.iter().map(|g| g.nodes.iter().map(|&n| graph.nodes[n].name.clone()).collect()).collect();
            if let Some(why) = refused {
                tracing::debug!(?parts, reason = %why, "a measured partitioning left out: cuDNN refused a part");
                continue;
            }
            let missing = |part: &PlanPart, tensor: &str| BackendError::Unsupported {
                node: part.nodes.first().cloned().unwrap_or_default(),
                op: "partition",
                reason: format!("tensor `{tensor}` crosses a part boundary but has no memory"),
            };
            let zero = std::time::Duration::ZERO;
            let plan = Self::assemble(
                cudnn,
                self.graph.clone(),
                &graph,
                &candidate,
                &alias,
                built,
                self.rewrites.clone(),
                zero,
                missing,
            )?;
            tracing::debug!(?parts, arena_bytes = plan.arena_bytes, "a measured partitioning built");
            self.timings.add(&plan.timings);
            out.push(Partitioning { parts: plan.parts, layout: plan.layout, arena_bytes: plan.arena_bytes });
        }
        Ok(out)
    }

    /// Rebuilds a plan from cuDNN's JSON of it ([`ExecutionPlan::json`]) for `cudnn`, online or
    /// deviceless. `graph` must be the graph the plan was made from: it gives the variant-pack
    /// layout and the checks of [`ExecutionPlan::execute`]. Needs the cuDNN version that wrote
    /// the JSON. A partitioned plan is rebuilt with [`ExecutionPlan::from_parts_json`].
    pub fn from_json(cudnn: &Cudnn, graph: Graph, json: &str) -> Result<ExecutionPlan, BackendError> {
        let _span = tracing::debug_span!("plan_from_json", graph = %graph.name, bytes = json.len()).entered();
        let start = Instant::now();
        graph.validate()?;
        // The plan was made from the graph as `build` rewrote it.
        let Rewritten { graph: planned, rewrites } = for_cudnn(&graph)?;
        let validate = start.elapsed();
        let nodes = planned.nodes.iter().map(|n| n.name.clone()).collect();
        let part = PlanPart::from_json(cudnn, planned, nodes, None, json)?;
        Ok(ExecutionPlan::single(graph, part, rewrites, validate, cudnn))
    }

    /// Rebuilds a partitioned plan from each part's nodes (by name, as [`PlanPart::nodes`] lists
    /// them) and cuDNN's JSON of its plan ([`PlanPart::json`]), in part order. The parts must
    /// cover the graph's nodes exactly as the plan that wrote them did (a view between parts
    /// belongs to none); each JSON is checked against its part before cuDNN sees it.
    pub fn from_parts_json(cudnn: &Cudnn, graph: Graph, parts: &[SavedPart]) -> Result<ExecutionPlan, BackendError> {
        let _span = tracing::debug_span!("plan_from_parts_json", graph = %graph.name, parts = parts.len()).entered();
        let start = Instant::now();
        graph.validate()?;
        let Rewritten { graph: planned, rewrites } = for_cudnn(&graph)?;
        if let [SavedPart { nodes, json, .. }] = parts {
            if nodes.len() == planned.nodes.len() && nodes.iter().zip(&planned.nodes).all(|(a, n)| *a == n.name) {
                return Self::from_json(cudnn, graph, json);
            }
        }
        let validate = start.elapsed();
        let restrided = partition::restride(&planned);
        let alias = partition::aliases(&restrided);
        let groups =
            partition::from_names(&restrided, parts.iter().map(|p| p.nodes.as_slice()), &alias).map_err(|reason| {
                BackendError::PlanMismatch {
                    graph: graph.name.clone(),
                    mismatch: Box::new(PlanMismatch::Partition(reason)),
                }
            })?;
        // Why each boundary is there: cuDNN's refusal or autotuning's times where the saved part
        // says so, else the table's reason where its partition has the same part. A measured
        // epilogue cut stores what it materializes as the build did.
        let table = partition::group(&restrided, Some(&alias));
        let mut retyped = restrided.clone();
        for (k, saved) in parts.iter().enumerate() {
            if saved.measured.is_some() {
                partition::retype_epilogue_cut(&mut retyped, &groups, k);
            }
        }
        let restrided = retyped;
        let mut built = Vec::with_capacity(parts.len());
        for (k, saved) in parts.iter().enumerate() {
            let part = partition::extract(&restrided, &groups, k, &alias);
            let reason = match (&saved.refused, &saved.measured) {
                (Some(why), _) => Some(CutReason::Refused(why.clone())),
                (None, Some(times)) => Some(CutReason::MeasuredFaster(times.clone())),
                (None, None) => None,
            };
            let cut = match (reason, k.checked_sub(1).and_then(|j| groups[j].nodes.last())) {
                (Some(reason), Some(&before)) => Some(Cut {
                    before: partition::node_ref(&restrided.nodes[before]),
                    after: partition::node_ref(&restrided.nodes[groups[k].nodes[0]]),
                    reason,
                }),
                _ => table.get(k).filter(|g| g.nodes == groups[k].nodes).and_then(|g| g.cut.clone()),
            };
            let p = PlanPart::from_json(cudnn, part.graph, saved.nodes.clone(), cut, &saved.json)?;
            built.push((p, part.tensors));
        }
        let name = graph.name.clone();
        let missing = |_: &PlanPart, tensor: &str| BackendError::PlanMismatch {
            graph: name.clone(),
            mismatch: Box::new(PlanMismatch::Partition(format!(
                "tensor `{tensor}` crosses a part boundary but has no memory"
            ))),
        };
        Self::assemble(cudnn, graph, &restrided, &groups, &alias, built, rewrites, validate, missing)
    }

    /// A partitioned plan of `graph` from its parts, built or loaded (each with its part's
    /// tensors' ids in `planned`, the graph as rewritten and restrided): every part's I/O placed
    /// in the plan's memory (`missing` is the error for a part's tensor that has none, which a
    /// valid partition never has), the bytes each writes into the arena, the parts' timings summed.
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        cudnn: &Cudnn,
        graph: Graph,
        planned: &Graph,
        groups: &[partition::Group],
        alias: &[Option<partition::Alias>],
        built: Vec<(PlanPart, Vec<TensorId>)>,
        rewrites: Vec<Rewrite>,
        validate: std::time::Duration,
        missing: impl Fn(&PlanPart, &str) -> BackendError,
    ) -> Result<ExecutionPlan, BackendError> {
        let layout = VariantLayout::with_internals(&graph, &Internals::default());
        let memory = partition::Layout::new(planned, groups, alias, layout.io());
        let mut parts = Vec::with_capacity(built.len());
        let mut timings = BuildTimings { validate, ..BuildTimings::default() };
        for (mut part, tensors) in built {
            let mut sources = Vec::with_capacity(part.layout.io().len());
            for (i, id) in part.layout.io().iter().enumerate() {
                let place = memory.place(tensors[id.0]).ok_or_else(|| missing(&part, &part.graph.tensor(*id).name))?;
                if let (Place::Arena { .. }, true) = (place, part.layout.is_output(i)) {
                    let t = part.graph.tensor(*id);
                    part.arena_writes += t.storage_len() * t.data_type.size_bytes();
                }
                sources.push(place);
            }
            part.sources = sources;
            let t = part.timings;
            timings.lower += t.lower;
            timings.heuristics += t.heuristics;
            timings.check_support += t.check_support;
            timings.plan_build += t.plan_build;
            parts.push(part);
        }
        tracing::debug!(
            parts = parts.len(),
            arena_bytes = memory.arena_bytes,
            elapsed_us = crate::micros(timings.total()),
            "partitioned plan ready"
        );
        Ok(ExecutionPlan {
            graph,
            layout,
            parts,
            rewrites,
            arena_bytes: memory.arena_bytes,
            timings,
            alternatives: Vec::new(),
            anchor: cudnn.anchor(),
        })
    }

    /// cuDNN's JSON of the selected plan (`CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION`): the
    /// compiled kernel and everything needed to rebuild the plan with
    /// [`ExecutionPlan::from_json`]. Not byte-identical run to run (it embeds pointers). A
    /// partitioned plan has one per part ([`PlanPart::json`]); asking it for one is a
    /// [`BackendError::Partitioned`].
    pub fn json(&self) -> Result<String, BackendError> {
        self.only("json")?.json()
    }

    /// The graph this plan computes.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The plan's kernels, in execution order: one unless the graph was partitioned.
    pub fn parts(&self) -> &[PlanPart] {
        &self.parts
    }

    /// What the graph was rewritten into before planning (a `batchnorm_inference` as the
    /// elementwise chain that fuses into a convolution's epilogue); the parts' nodes are those of
    /// the rewritten graph.
    pub fn rewrites(&self) -> &[Rewrite] {
        &self.rewrites
    }

    /// Whether the graph runs as more than one kernel.
    pub fn is_partitioned(&self) -> bool {
        self.parts.len() > 1
    }

    /// Whether every part was planned as a dynamic-shape operation graph with a kernel cache
    /// ([`BuildOptions::kernel_cache`]; a part cuDNN plans only as an ordinary graph is one, and
    /// so is every part of a partitioned plan: a kernel cache serves one structure); for a plan
    /// loaded from JSON, whether its JSON says so.
    pub fn is_dynamic_shape(&self) -> bool {
        self.parts.iter().all(PlanPart::is_dynamic_shape)
    }

    /// Bytes at the front of the workspace that hold the tensors parts exchange (0 for a plan of
    /// one part).
    pub fn arena_bytes(&self) -> usize {
        self.arena_bytes
    }

    /// The one part of a plan that is not partitioned, or a [`BackendError::Partitioned`]
    /// naming `what` was asked.
    fn only(&self, what: &'static str) -> Result<&PlanPart, BackendError> {
        match self.parts.as_slice() {
            [part] => Ok(part),
            parts => Err(BackendError::Partitioned { graph: self.graph.name.clone(), parts: parts.len(), what }),
        }
    }

    /// Every candidate heuristics proposed, with its state (for a partitioned plan, the first
    /// part's: see [`ExecutionPlan::parts`]).
    pub fn candidates(&self) -> &[Candidate] {
        &self.parts[0].candidates
    }

    /// The candidate of the selected plan (for a partitioned plan, the first part's).
    pub fn selected(&self) -> &Candidate {
        self.parts[0].selected()
    }

    /// The candidates that were built into plans, in build order (for a partitioned plan, the
    /// first part's).
    pub fn built(&self) -> Vec<usize> {
        self.parts[0].built()
    }

    /// Makes built candidate `index` the one that executes (for autotuning); for a partitioned
    /// plan, of the first part ([`ExecutionPlan::select_in`] chooses for any part).
    pub fn select(&mut self, index: usize) -> Result<(), BackendError> {
        self.select_in(0, index)
    }

    /// Makes built candidate `index` of part `part` the one that executes.
    pub fn select_in(&mut self, part: usize, index: usize) -> Result<(), BackendError> {
        let count = self.parts.len();
        let p = self.parts.get_mut(part).ok_or(BackendError::PartIndex { index: part, count })?;
        match p.built.iter().position(|b| b.candidate == index) {
            Some(i) => {
                p.selected = i;
                Ok(())
            }
            None => Err(BackendError::NotBuilt { index, built: p.built() }),
        }
    }

    /// Where building (or loading) this plan spent its time, over every part.
    pub fn timings(&self) -> &BuildTimings {
        &self.timings
    }

    /// The raw `cudnnBackendDescriptor_t` of the selected execution plan (for a partitioned plan,
    /// the first part's), for measuring against raw `cudnnBackendExecute` and for interop. It
    /// stays valid while this plan lives and the selection does not change; never destroy or
    /// modify it, and never call cuDNN with it while another thread may be executing this plan
    /// (the plan's own calls take turns on a lock that raw calls bypass).
    pub fn raw_descriptor(&self) -> sys::cudnnBackendDescriptor_t {
        self.parts[0].raw_descriptor()
    }

    /// Workspace bytes enough for any [`ExecutionPlan::select`]: the arena, then the most any
    /// part's largest built plan needs; while the plan has [alternatives](Self::alternatives),
    /// enough for any of them too (autotuning runs each).
    pub fn max_workspace_size(&self) -> usize {
        let own = self.arena_bytes + self.parts.iter().map(PlanPart::max_workspace_size).max().unwrap_or(0);
        self.alternatives.iter().map(Partitioning::max_workspace_size).fold(own, usize::max)
    }

    /// The other partitionings [`Fusion::Measure`] built, which [`crate::engines::autotune`]
    /// times against the plan's own parts: empty for any other [`Fusion`], for a graph with no
    /// cut point, and once autotuning has kept the fastest (which is then what
    /// [`ExecutionPlan::parts`] lists, executes and serializes). Until then the plan executes
    /// its own parts, the fusion cuDNN plans.
    pub fn alternatives(&self) -> &[Partitioning] {
        &self.alternatives
    }

    /// Exchanges the plan's partitioning with alternative `index` (autotuning runs each in
    /// turn): the plan then executes that one, and alternative `index` is the one it ran before.
    pub(crate) fn swap_alternative(&mut self, index: usize) {
        if let Some(other) = self.alternatives.get_mut(index) {
            std::mem::swap(&mut self.parts, &mut other.parts);
            std::mem::swap(&mut self.layout, &mut other.layout);
            std::mem::swap(&mut self.arena_bytes, &mut other.arena_bytes);
        }
    }

    /// Drops the alternatives: the plan's partitioning is the one it keeps. `measured`, where
    /// that partitioning has cuts made to be measured, is autotuning's times, which their
    /// reason ([`CutReason::MeasuredFaster`]) then gives.
    pub(crate) fn keep_partitioning(&mut self, measured: Option<String>) {
        self.alternatives.clear();
        let Some(times) = measured else { return };
        for cut in self.parts.iter_mut().filter_map(|p| p.cut.as_mut()) {
            if cut.reason == CutReason::ToMeasure {
                cut.reason = CutReason::MeasuredFaster(times.clone());
            }
        }
    }

    /// Workspace bytes the selected plans need at execute: the arena of exchanged tensors, then
    /// the most any part needs (cuDNN's, after the tensors its lowering keeps at the front of the
    /// workspace, [`VariantLayout::workspace_prefix`]).
    pub fn workspace_size(&self) -> usize {
        self.arena_bytes + self.parts.iter().map(PlanPart::workspace_size).max().unwrap_or(0)
    }

    /// Where each of `part`'s I/O tensors lives in the plan's memory (its own I/O in order, for a
    /// plan of one part).
    pub(crate) fn sources_of<'p>(&self, part: &'p PlanPart) -> &'p [Place] {
        &part.sources
    }

    /// Where a part's workspace starts in the plan's.
    pub(crate) fn part_workspace(&self, workspace: u64, part: &PlanPart) -> u64 {
        if workspace == 0 || part.workspace_size() == 0 {
            0
        } else {
            workspace + self.arena_bytes as u64
        }
    }

    /// The variant-pack layout of the graph's I/O (for a plan of one part, its whole layout).
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
}

/// `options` for the parts of a partitioned plan: a kernel cache is finalized with the operation
/// graph of its first plan and serves the shapes of that one structure, so the parts, each another
/// structure, are planned without it.
fn without_kernel_cache(options: &BuildOptions) -> std::borrow::Cow<'_, BuildOptions> {
    match options.kernel_cache {
        Some(_) => std::borrow::Cow::Owned(BuildOptions { kernel_cache: None, ..options.clone() }),
        None => std::borrow::Cow::Borrowed(options),
    }
}

impl PlanPart {
    /// Lowers, plans and builds `graph` (validated by the caller) as one kernel. With
    /// [`BuildOptions::kernel_cache`], as a dynamic-shape operation graph whose plans use the
    /// cache; where cuDNN plans no such graph (cuDNN 9.19 proposes no engine for a dynamic-shape
    /// graph of pointwise ops alone, nor for attention backward), or where an op's family refuses
    /// one (`OpFamily::dynamic_shape_refusal`: attention), as an ordinary one
    /// ([`PlanPart::is_dynamic_shape`] says which).
    fn build(
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
    fn build_with(
        cudnn: &Cudnn,
        graph: Graph,
        nodes: Vec<String>,
        cut: Option<Cut>,
        options: &BuildOptions,
        kernels: Option<&KernelCache>,
    ) -> Result<PlanPart, BackendError> {
        let mut timings = BuildTimings::default();
        let start = Instant::now();
        graph.validate()?;
        timings.validate = start.elapsed();
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
    fn from_json(
        cudnn: &Cudnn,
        graph: Graph,
        nodes: Vec<String>,
        cut: Option<Cut>,
        json: &str,
    ) -> Result<PlanPart, BackendError> {
        let mut timings = BuildTimings::default();
        let start = Instant::now();
        graph.validate()?;
        timings.validate = start.elapsed();
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

    /// cuDNN's JSON of its selected plan (see [`ExecutionPlan::json`]).
    pub fn json(&self) -> Result<String, BackendError> {
        Ok(self.descriptors().plan(self.selected).get_chars(A::CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION)?)
    }

    /// The raw descriptor of its selected plan (see [`ExecutionPlan::raw_descriptor`]).
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
/// with, and why, for the candidates' loop to pass over: cuDNN 9.14 computes a slice read by an f16
/// matmul with infinities on engine 0 (H100, `gpu_slices_by_pointer_offset`).
fn known_bad_engine(cudnn: &Cudnn, graph: &Graph) -> Option<(i64, String)> {
    use crate::cudnn::support::{known_bad, reason, Condition};
    use crate::ops::{Layout, Op};
    let entry = known_bad(cudnn.version(), Condition::SlicedMatmulF16Engine0)?;
    let sliced_f16_matmul = graph.nodes.iter().any(|m| {
        matches!(m.op, Op::Matmul(_))
            && m.inputs.iter().any(|t| {
                graph.tensor(*t).data_type == crate::DataType::F16
                    && graph
                        .nodes
                        .iter()
                        .any(|s| s.outputs.contains(t) && matches!(s.op, Op::Layout(Layout::Slice { .. })))
            })
    });
    sliced_f16_matmul.then(|| (0, reason(cudnn.version(), entry)))
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
