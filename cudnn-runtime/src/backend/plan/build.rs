//! Building a plan: [`ExecutionPlan::build`] (validate → rewrite → one kernel, or the parts of a
//! [`Partition`]), the partitionings [`Fusion::Measure`] builds besides it, and loading one from
//! cuDNN's JSON ([`ExecutionPlan::from_json`], [`ExecutionPlan::from_parts_json`]).

use std::time::{Duration, Instant};

use super::part::{ChosenPart, PlanPart, SavedPart};
use super::{ExecutionPlan, Partitioning};
use crate::backend::mismatch::PlanMismatch;
use crate::backend::options::{BuildOptions, BuildTimings, Fusion};
use crate::backend::partition::{BuiltParts, Partition, Place};
use crate::backend::variant::VariantLayout;
use crate::backend::{capture, lower};
use crate::backend::{BackendError, Cudnn};
use crate::cudnn::Internals;
use crate::ir::{for_cudnn, Graph, Rewrite, Rewritten};

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

/// The error for a part's tensor that crosses a part boundary with no memory, which a partition
/// the table or a measured cut made never has.
fn no_memory(part: &PlanPart, tensor: &str) -> BackendError {
    BackendError::Unsupported {
        node: part.nodes.first().cloned().unwrap_or_default(),
        op: "partition",
        reason: format!("tensor `{tensor}` crosses a part boundary but has no memory"),
    }
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
        Ok(capture::captured(plan, cudnn))
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

    /// [`ExecutionPlan::build_auto`] of `graph` rewritten as `planned`: one kernel where the
    /// fusion table and cuDNN allow it, else the parts of a [`Partition`].
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
        let one_kernel = Partition::one_kernel(&planned);
        if let (Err(cut), Fusion::Single) = (&one_kernel, options.fusion) {
            return Err(BackendError::CannotFuse { graph: graph.name.clone(), cut: cut.clone().map(Box::new) });
        }
        let whole = |timings_validate| -> Result<ExecutionPlan, BackendError> {
            let all = planned.nodes.iter().map(|n| n.name.clone()).collect();
            let part = PlanPart::build(cudnn, planned.clone(), all, None, options)?;
            Ok(ExecutionPlan::single(graph.clone(), part, rewrites.clone(), timings_validate, cudnn))
        };
        if !may_split {
            return whole(validate);
        }
        let parts = |refused| Self::build_parts(cudnn, graph, &planned, &rewrites, options, refused, validate);
        if one_kernel.is_ok() {
            match Partition::refused(cudnn, &planned) {
                Some(why) => {
                    tracing::debug!(reason = %why, "cuDNN refused this graph as one kernel before: partitioning");
                    // Where no split plans, the whole graph's own error says the most.
                    return match parts(Some(why)) {
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
                        Partition::remember_refusal(cudnn, &planned, why.clone());
                        return match parts(Some(why)) {
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
        parts(None)?.ok_or_else(|| BackendError::CannotFuse { graph: graph.name.clone(), cut: None })
    }

    /// A plan of one part: `part` plans `graph` (or its rewrite) whole.
    fn single(
        graph: Graph,
        mut part: PlanPart,
        rewrites: Vec<Rewrite>,
        validate: Duration,
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
            capture_recorded: Default::default(),
        }
    }

    /// Builds `planned` (`graph` rewritten) as the parts of its automatic [`Partition`] (see
    /// [`ExecutionPlan::build`]); `refused` is why cuDNN would not take it whole, when it was
    /// asked. `None` when the graph is one node or one part that cannot be split.
    fn build_parts(
        cudnn: &Cudnn,
        user_graph: &Graph,
        planned: &Graph,
        rewrites: &[Rewrite],
        options: &BuildOptions,
        refused: Option<String>,
        validate: Duration,
    ) -> Result<Option<ExecutionPlan>, BackendError> {
        let options = &*without_kernel_cache(options);
        let Some(mut partition) = Partition::automatic(planned, refused.as_deref()) else { return Ok(None) };
        let mut k = 0;
        let build = |graph, nodes, cut| {
            let p = PlanPart::build(cudnn, graph, nodes, cut, options).map_err(|e| {
                // A failure a split cannot help ends the build, naming the user's ports.
                if is_refusal(&e) {
                    e
                } else {
                    lower::name_channels_last_ports(e, user_graph)
                }
            })?;
            tracing::debug!(
                part = k,
                nodes = ?p.nodes,
                engine = %p.selected().tag(),
                cut = %p.cut.as_ref().map(ToString::to_string).unwrap_or_default(),
                "part built"
            );
            k += 1;
            Ok(p)
        };
        let refusal = |e: &BackendError| is_refusal(e).then(|| summary(e));
        let Some(built) = partition.build_splitting(cudnn, build, refusal)? else { return Ok(None) };
        let assembled =
            Self::assemble(cudnn, user_graph.clone(), &partition, built, rewrites.to_vec(), validate, no_memory)?;
        Ok(Some(assembled))
    }

    /// The partitionings [`Fusion::Measure`] builds besides this plan (built as [`Fusion::Auto`]
    /// builds it, from `planned`, the graph rewritten): this plan's partition with one part cut
    /// at one point each ([`Partition::measured`]). A candidate one of whose parts cuDNN refuses
    /// is left out. Their build times are added to this plan's.
    fn measured_alternatives(
        &mut self,
        cudnn: &Cudnn,
        planned: &Graph,
        options: &BuildOptions,
    ) -> Result<Vec<Partitioning>, BackendError> {
        let options = &*without_kernel_cache(options);
        let partition = if self.is_partitioned() {
            let names = self.parts.iter().map(|p| p.nodes.as_slice());
            let partition = Partition::from_names(planned, names).map_err(|reason| BackendError::Unsupported {
                node: self.graph.name.clone(),
                op: "partition",
                reason,
            })?;
            partition.with_cuts(self.parts.iter().map(|p| p.cut.clone()))
        } else {
            // A plan of one kernel: its one group (views between parts would make more).
            match Partition::automatic(planned, None) {
                Some(partition) if partition.len() == 1 => partition,
                _ => return Ok(Vec::new()),
            }
        };
        let mut out = Vec::new();
        for candidate in partition.measured() {
            let parts = candidate.names();
            let built = candidate.build_each(|_, graph, nodes, cut| PlanPart::build(cudnn, graph, nodes, cut, options));
            let built = match built {
                Ok(built) => built,
                Err(e) if is_refusal(&e) => {
                    tracing::debug!(?parts, reason = %summary(&e), "a measured partitioning left out: cuDNN refused a part");
                    continue;
                }
                Err(e) => return Err(e),
            };
            let (graph, rewrites) = (self.graph.clone(), self.rewrites.clone());
            let plan = Self::assemble(cudnn, graph, &candidate, built, rewrites, Duration::ZERO, no_memory)?;
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
        Ok(capture::captured(ExecutionPlan::single(graph, part, rewrites, validate, cudnn), cudnn))
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
        let mismatch = |reason| BackendError::PlanMismatch {
            graph: graph.name.clone(),
            mismatch: Box::new(PlanMismatch::Partition(reason)),
        };
        let partition = Partition::from_names(&planned, parts.iter().map(|p| p.nodes.as_slice())).map_err(mismatch)?;
        // Why each boundary is there: cuDNN's refusal or autotuning's times where the saved part
        // says so, else the table's reason where its partition has the same part. A measured
        // epilogue cut stores what it materializes as the build did.
        let saved: Vec<_> = parts.iter().map(|p| (p.refused.as_deref(), p.measured.as_deref())).collect();
        let partition = partition.with_saved_cuts(&saved);
        let built = partition.build_each(|k, part, _, cut| {
            PlanPart::from_json(cudnn, part, parts[k].nodes.clone(), cut, &parts[k].json)
        })?;
        let name = graph.name.clone();
        let missing = |_: &PlanPart, tensor: &str| BackendError::PlanMismatch {
            graph: name.clone(),
            mismatch: Box::new(PlanMismatch::Partition(format!(
                "tensor `{tensor}` crosses a part boundary but has no memory"
            ))),
        };
        Ok(capture::captured(Self::assemble(cudnn, graph, &partition, built, rewrites, validate, missing)?, cudnn))
    }

    /// Builds `graph` as an earlier build chose to run it, without heuristics: the partition
    /// `parts` records (each part's nodes, as [`PlanPart::nodes`] lists them, and why it was cut),
    /// each part built with its recorded engine config only ([`BuildOptions::engine`]). This is
    /// what a tuning-store hit costs: lowering and one plan finalize per part, no heuristics, no
    /// other candidate compiled, nothing timed. The parts must cover the graph's nodes as a
    /// partition must; an engine cuDNN no longer builds for its part is the part's
    /// [`BackendError::NoPlan`]. `options`' filters and limits still apply; their `engine`,
    /// `candidate`, `build_all` and `fusion` are the record's business and ignored.
    pub fn build_chosen(
        cudnn: &Cudnn,
        graph: &Graph,
        parts: &[ChosenPart],
        options: &BuildOptions,
    ) -> Result<ExecutionPlan, BackendError> {
        let _span = tracing::debug_span!("build_chosen", graph = %graph.name, parts = parts.len()).entered();
        let start = Instant::now();
        graph.validate()?;
        let Rewritten { graph: planned, rewrites } = for_cudnn(graph)?;
        let validate = start.elapsed();
        let base = BuildOptions { build_all: false, candidate: None, fusion: Fusion::Auto, ..options.clone() };
        let with =
            |engine: &crate::backend::EngineConfig| BuildOptions { engine: Some(engine.clone()), ..base.clone() };
        let mismatch = |reason| BackendError::PlanMismatch {
            graph: graph.name.clone(),
            mismatch: Box::new(PlanMismatch::Partition(reason)),
        };
        if let [ChosenPart { nodes, engine, .. }] = parts {
            if nodes.len() == planned.nodes.len() && nodes.iter().zip(&planned.nodes).all(|(a, n)| *a == n.name) {
                let part = PlanPart::build(cudnn, planned, nodes.clone(), None, &with(engine))
                    .map_err(|e| users_no_plan(e, graph, &rewrites))?;
                return Ok(capture::captured(
                    ExecutionPlan::single(graph.clone(), part, rewrites, validate, cudnn),
                    cudnn,
                ));
            }
        }
        let partition = Partition::from_names(&planned, parts.iter().map(|p| p.nodes.as_slice())).map_err(mismatch)?;
        let saved: Vec<_> = parts.iter().map(|p| (p.refused.as_deref(), p.measured.as_deref())).collect();
        let partition = partition.with_saved_cuts(&saved);
        let options: Vec<BuildOptions> = parts.iter().map(|p| with(&p.engine)).collect();
        let options: Vec<BuildOptions> = options.iter().map(|o| without_kernel_cache(o).into_owned()).collect();
        let built =
            partition.build_each(|k, part, nodes, cut| PlanPart::build(cudnn, part, nodes, cut, &options[k]))?;
        Ok(capture::captured(
            Self::assemble(cudnn, graph.clone(), &partition, built, rewrites, validate, no_memory)?,
            cudnn,
        ))
    }

    /// A partitioned plan of `graph` from the parts of `partition`, built or loaded (each with
    /// its part's tensors' ids in the partition's graph): every part's I/O placed in the plan's
    /// memory (`missing` is the error for a part's tensor that has none, which a
    /// valid partition never has), the bytes each writes into the arena, the parts' timings summed.
    fn assemble(
        cudnn: &Cudnn,
        graph: Graph,
        partition: &Partition,
        built: BuiltParts<PlanPart>,
        rewrites: Vec<Rewrite>,
        validate: Duration,
        missing: impl Fn(&PlanPart, &str) -> BackendError,
    ) -> Result<ExecutionPlan, BackendError> {
        let layout = VariantLayout::with_internals(&graph, &Internals::default());
        let memory = partition.arena(layout.io());
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
            capture_recorded: Default::default(),
        })
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
