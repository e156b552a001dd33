//! [`BuildOptions`]: how [`ExecutionPlan::build`](super::ExecutionPlan::build)(super::ExecutionPlan::build) chooses a plan
//! (heuristic modes, note and engine filters, workspace and shared-memory caps, one plan or all),
//! with [`EngineConfig`], an engine and knobs named explicitly, and [`BuildTimings`], where a
//! build spent its time.

use std::time::Duration;

use super::candidate::{BehaviorNote, Candidate, Filter, HeuristicMode, Knob, NumericalNote, Rejection};
use crate::cudnn::KernelCache;

/// How [`ExecutionPlan::build`](super::ExecutionPlan::build) chooses a plan: which heuristics to ask, which candidates to
/// bar, and how many plans to build.
///
/// The filters have cudnn-frontend's semantics: a `select_*` list keeps only the candidates that
/// have **all** of its notes; a `deselect_*` list drops every candidate that has **any** of them.
/// A barred candidate is [`CandidateState::Rejected`](super::CandidateState::Rejected) with [`Rejection::Filtered`] naming the
/// filter, so [`ExecutionPlan::candidates`](super::ExecutionPlan::candidates) (or [`BackendError::NoPlan`](super::BackendError::NoPlan)) says why it was not
/// used.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::backend::{BehaviorNote, BuildOptions, HeuristicMode, NumericalNote};
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
    /// stay [`CandidateState::Untried`](super::CandidateState::Untried). Filters still apply to it.
    pub candidate: Option<usize>,
    /// Whether a graph that cuDNN cannot plan as one kernel may run as several
    /// ([`Fusion::Auto`], the default) or must fail ([`Fusion::Single`]), and whether
    /// partitionings that cut what cuDNN fuses are built too, for autotuning to time
    /// ([`Fusion::Measure`]).
    pub fusion: Fusion,
    /// Dynamic shapes: when set, the operation graph is built with cuDNN's dynamic-shape flag
    /// (`CUDNN_ATTR_OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED`) and every plan is finalized with
    /// this kernel cache, whose compiled kernels the plans of every shape of the graph's
    /// structure share ([`BuildOptions::dynamic_shapes`]; a
    /// [`PlanCache`](crate::engines::PlanCache) hands out one cache per structure).
    pub kernel_cache: Option<KernelCache>,
}

/// How many kernels a graph may become ([`BuildOptions::fusion`]).
///
/// cuDNN fuses one anchor op (a matmul, convolution, normalization, attention or reduction) with
/// the pointwise ops around it, within rules that depend on the version and the GPU. With
/// [`Fusion::Auto`] a graph it will not plan as one is split into parts that it will, which run in
/// order on the stream with their intermediates in the workspace
/// ([`ExecutionPlan::parts`](super::ExecutionPlan::parts) lists them and why each was cut).
/// With [`Fusion::Single`] such a graph is an error naming the pair of ops that cannot share a
/// kernel (`graph!`'s `#[fuse(single)]`).
///
/// A fused kernel is not always the fastest: on the H200 with cuDNN 9.19, an fp8 matmul 8192³
/// into bf16 runs at 1259–1353 TFLOP/s, and 836–880 with cuDNN's fused bias + relu epilogue,
/// where the GEMM (with its bias) into bf16 followed by a relu kernel costs little more than the
/// GEMM. With [`Fusion::Measure`] the build makes, besides the plan [`Fusion::Auto`] makes, the
/// partitionings that cut an anchor's elementwise epilogue (or prologue) off into a kernel of its
/// own ([`ExecutionPlan::alternatives`](super::ExecutionPlan::alternatives)), and
/// [`autotune`](crate::engines::autotune) times every one (the sum of its parts, each with its
/// fastest engine) and keeps the fastest, whose cuts then say
/// [`CutReason::MeasuredFaster`](super::CutReason::MeasuredFaster). Results differ from the fused
/// plan's only by the rounding of the tensor a cut materializes, stored in the type a split by
/// hand stores it in: the type of the graph output its epilogue writes (bf16 for an fp8 GEMM
/// into bf16), else the anchor's operand type, never wider than its own. The cost is build time:
/// each candidate's parts are built (an fp8 matmul + bias + relu has two candidates, four more
/// parts), and autotuning times them all. A build naming its engine or candidate
/// ([`BuildOptions::engine`], [`BuildOptions::candidate`]) is one kernel's choice and makes no
/// alternatives.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::backend::{BuildOptions, Fusion};
/// let options = BuildOptions::default().measure_partitionings().all_plans();
/// assert_eq!(options.fusion, Fusion::Measure);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Fusion {
    /// One plan when cuDNN makes one; otherwise the fewest parts it plans.
    #[default]
    Auto,
    /// One plan, or an error.
    Single,
    /// As [`Fusion::Auto`], and the partitionings that cut an anchor's elementwise epilogue or
    /// prologue off too, for [`autotune`](crate::engines::autotune) to choose by timing them.
    Measure,
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
            fusion: Fusion::Auto,
            kernel_cache: None,
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

    /// Builds dynamic-shape operation graphs whose plans share `cache`'s compiled kernels (see
    /// [`BuildOptions::kernel_cache`]).
    pub fn dynamic_shapes(mut self, cache: KernelCache) -> Self {
        self.kernel_cache = Some(cache);
        self
    }

    /// Build every candidate that passes the filters (for [`crate::engines::autotune`]).
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

    /// One kernel or an error: never split the graph ([`Fusion::Single`]).
    pub fn single_kernel(mut self) -> Self {
        self.fusion = Fusion::Single;
        self
    }

    /// Also build the partitionings that cut an anchor's epilogue or prologue off, for
    /// autotuning to time against the fused plan ([`Fusion::Measure`]).
    pub fn measure_partitionings(mut self) -> Self {
        self.fusion = Fusion::Measure;
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
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct EngineConfig {
    /// cuDNN's global engine index.
    pub id: i64,
    /// The knob choices; knobs left out take the engine's defaults.
    pub knobs: Vec<Knob>,
}

/// Where [`ExecutionPlan::build`](super::ExecutionPlan::build) spent its time, phase by phase (cudnn-frontend's pipeline).
/// For a plan from [`ExecutionPlan::from_json`](super::ExecutionPlan::from_json), only `validate` and `plan_build` (loading the
/// plan) are non-zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BuildTimings {
    /// [`Graph::validate`](crate::Graph::validate).
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

    /// Adds `other`'s phases to these.
    pub(crate) fn add(&mut self, other: &BuildTimings) {
        self.validate += other.validate;
        self.lower += other.lower;
        self.heuristics += other.heuristics;
        self.check_support += other.check_support;
        self.plan_build += other.plan_build;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::CandidateState;

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
}
