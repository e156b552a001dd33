//! [`PlanCache`]: built plans kept in memory, and as payloads, so that a warm start skips
//! heuristics and compilation entirely: a memory hit hands out the plan already loaded (an
//! [`Arc`] clone, microseconds), a disk hit asks cuDNN to load the plan (about a millisecond).
//!
//! **Keys.** A [`PlanKey`] is (graph fingerprint, runtime-dim binding, SM, cuDNN version):
//! [`crate::Graph::fingerprint`] covers the concrete dims, strides and types, the binding names the
//! `graph!` type's runtime dims (`M = 192`), and plans load only into the SM and the exact cuDNN
//! version that made them. The [`BuildOptions`] are not part of the key: an entry is used only if
//! its selected engine passes the options' note and engine filters and workspace limit (checked
//! against the engine recorded in the payload), otherwise the lookup is a miss and the new plan
//! replaces the entry. ([`BuildOptions::candidate`] and the shared-memory limit are not
//! recorded, so they are not checked.)
//!
//! **Memory.** Each entry holds the plan's payload and the plans loaded from it (or inserted),
//! shared: plans are `Send + Sync` (see [`ExecutionPlan`]), so every caller gets an `Arc` of the
//! same plan. A plan serves the callers whose [`Cudnn`] it could
//! have been made by — online, the same CUDA context (any stream of it); deviceless, the same
//! device-properties JSON — and whose graph equals its own (the fingerprint leaves names out); for
//! another context the payload is loaded once more and that plan is kept beside the first (at
//! most [`SHARED_PLANS`] per entry). Shared plans keep the cuDNN handle and CUDA context they
//! were made with alive until the entry is replaced, evicted or [`PlanCache::clear`]ed.
//!
//! **Budget.** The memory tier keeps within a byte budget ([`PlanCache::with_budget`], default
//! [`DEFAULT_BUDGET_BYTES`]), evicting the least recently used entry first; an entry whose plan is
//! held outside the cache (by a caller, or by a CUDA graph that replays it, which borrows the
//! caller's `Arc`) is pinned and never evicted. [`PlanCache::stats`] gives hits, misses, builds,
//! evictions and the bytes held; hits, misses and evictions are traced (`tracing::debug!`).
//!
//! **Specialization.** With dynamic shapes ([`PlanCache::dynamic_shapes`]) a new shape can be
//! served its dynamic-shape plan (kernels from the structure's kernel cache, milliseconds) or the
//! plan specialized to it (heuristics and compilation): [`PlanCache::specialization`] sets the
//! policy ([`Specialization`]: eager, lazy, none). Lazy serves the dynamic-shape plan and builds
//! and times the specialized one on a background thread, swapping it in at a later lookup only if
//! it is faster; a swap replaces the cache's `Arc`s, so whoever holds the old plan (a CUDA graph
//! among them) keeps it. A [`ClassPlan`](super::ClassPlan) ([`PlanCache::class_plan`](PlanCache::class_plan)) applies the same policy to
//! the lengths of a shape class, with the padded class plan where the dynamic-shape plan is. Every entry records why it serves its plan ([`ServeReason`]:
//! [`CachedPlan::reason`], [`PlanCache::serving`], the stats and `tracing`).
//!
//! **Threads.** The cache is `Send + Sync`: one `Mutex` around the map, held only to look up or
//! insert, never while cuDNN works. Share it with an `Arc`, or a `static`.
//!
//! **Disk.** With a directory, each entry is one file named by its key,
//! `{fingerprint:016x}-{binding hash:016x}-sm{sm}-cudnn{version}.plan.json`, holding a plan
//! payload with structure ([`crate::payload::plan`]). Writes go to a uniquely named temporary
//! file in the same directory (`.`-prefixed), are synced, then renamed over the entry: readers in
//! any process see a whole old file or a whole new one, never a torn one, and concurrent writers
//! of one key leave one of their (equivalent) files. Entries are never trusted blindly: an entry
//! over [`MAX_PAYLOAD_BYTES`] is refused before it is read; each is parsed and checked by
//! [`load_payload`] (format, content digest, cuDNN version, SM, graph fingerprint, binding, the
//! plan JSON's tensors and operations against the graph, variant pack, workspace, engine,
//! scalars) and its recorded key must be the one looked up. An entry that fails is **evicted**
//! (its file removed) with a [`CacheWarning`] (returned, and logged with `tracing::warn!`) and
//! rebuilt over: never executed, never fatal, and not read again by a later process. An entry
//! carries executable GPU code: for a directory that others can write, give the cache a key
//! ([`PlanCache::with_key`]) so that it signs what it writes and loads only what it signed.
//!
//! ```no_run
//! # use cudnn_runtime as cudnn_graph;
//! use cudnn_graph::backend::{BuildOptions, Cudnn};
//! use cudnn_graph::engines::{CacheSource, PlanCache};
//! use cudnn_graph::payload::plan::Expect;
//! # fn graph() -> cudnn_graph::Graph { unimplemented!() }
//! let cache = PlanCache::with_dir("/tmp/cudnn-graph-plans")?;
//! let cudnn = Cudnn::new(cudnn_graph::backend::cuda_context(0)?.default_stream())?;
//! let first = cache.get_or_build(&cudnn, &graph(), &Expect::default(), &BuildOptions::default())?;
//! let again = cache.get_or_build(&cudnn, &graph(), &Expect::default(), &BuildOptions::default())?;
//! assert_eq!(again.source, CacheSource::Memory);
//! assert!(std::sync::Arc::ptr_eq(&first.plan, &again.plan), "one plan, shared");
//! println!("cold {:?}, warm {:?}", first.elapsed, again.elapsed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use super::lru::{Evicted, Lru, Weigh};
use super::specialize::{
    median_us, specialized_is_faster, Contexts, PlanTimer, PushError, ServeReason, Serving, Specialization, Target,
    Task, Worker, MAX_PENDING_SPECIALIZATIONS,
};
use crate::backend::{
    BackendError, BehaviorNote, BuildOptions, Cudnn, EngineConfig, ExecutionPlan, Fusion, KernelCache, NumericalNote,
    PaddedPlan,
};
use crate::ir::ClassGraph;
use crate::payload::plan::{
    load_payload, parse_payload, parse_signed_payload, write, EngineRecord, Expect, Payload, PayloadError, PayloadKey,
    PlanOrigin, PlanRecord, SerializeOptions, MAX_PAYLOAD_BYTES,
};
use crate::{Fnv, Graph};

/// What a cached plan is filed under.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PlanKey {
    /// [`Graph::fingerprint`].
    pub graph_fingerprint: u64,
    /// The `graph!` type's runtime-dim binding ([`Expect::binding`]), if any.
    pub binding: Option<String>,
    /// The target's compute capability.
    pub sm: Option<u32>,
    /// `cudnnGetVersion()`.
    pub cudnn_version: usize,
}

impl PlanKey {
    /// The key of `graph` (with `expect`'s binding) planned by `cudnn`.
    pub fn new(cudnn: &Cudnn, graph: &Graph, expect: &Expect) -> Self {
        PlanKey {
            graph_fingerprint: graph.fingerprint(),
            binding: expect.binding.clone(),
            sm: cudnn.sm(),
            cudnn_version: cudnn.version(),
        }
    }

    /// The key a payload's plan record was made under; `None` if its fingerprint is not `0x…`
    /// hex.
    pub fn of_record(record: &PlanRecord) -> Option<Self> {
        let hex = record.graph_fingerprint.strip_prefix("0x")?;
        Some(PlanKey {
            graph_fingerprint: u64::from_str_radix(hex, 16).ok()?,
            binding: record.binding.clone(),
            sm: record.sm,
            cudnn_version: record.cudnn_version,
        })
    }

    /// The entry's file name in a cache directory.
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::engines::PlanKey;
    /// let key = PlanKey { graph_fingerprint: 0xab, binding: None, sm: Some(90), cudnn_version: 91900 };
    /// assert!(key.file_name().starts_with("00000000000000ab-"));
    /// assert!(key.file_name().ends_with("-sm90-cudnn91900.plan.json"));
    /// ```
    pub fn file_name(&self) -> String {
        let mut h = Fnv::default();
        match &self.binding {
            Some(b) => h.write_str(&format!("some:{b}")),
            None => h.write_str("none"),
        }
        let sm = self.sm.map_or_else(|| "any".to_string(), |s| s.to_string());
        format!("{:016x}-{:016x}-sm{sm}-cudnn{}.plan.json", self.graph_fingerprint, h.finish(), self.cudnn_version)
    }
}

impl fmt::Display for PlanKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "graph {:#018x}", self.graph_fingerprint)?;
        if let Some(b) = &self.binding {
            write!(f, " ({b})")?;
        }
        match self.sm {
            Some(sm) => write!(f, ", sm {sm}")?,
            None => f.write_str(", sm ?")?,
        }
        write!(f, ", cuDNN {}", self.cudnn_version)
    }
}

/// What a kernel cache is filed under ([`PlanCache::dynamic_shapes`]): the graph's structure
/// without its extents, on one SM and cuDNN version.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StructureKey {
    /// [`Graph::structure_fingerprint`].
    pub structure_fingerprint: u64,
    /// The target's compute capability.
    pub sm: Option<u32>,
    /// `cudnnGetVersion()`.
    pub cudnn_version: usize,
}

impl StructureKey {
    /// The structure key of `graph` planned by `cudnn`.
    pub fn new(cudnn: &Cudnn, graph: &Graph) -> Self {
        StructureKey {
            structure_fingerprint: graph.structure_fingerprint(),
            sm: cudnn.sm(),
            cudnn_version: cudnn.version(),
        }
    }
}

/// The kernel cache of one structure, and the engine its first dynamic-shape plan selected.
struct Kernels {
    cache: KernelCache,
    /// The cache's JSON size when last weighed (after each plan built with it).
    bytes: usize,
    /// The engine and knobs of the first dynamic-shape plan of one part made with the cache:
    /// a new shape is planned with it (no heuristics), its kernels found in the cache.
    engine: Option<EngineConfig>,
    /// cuDNN planned no part of the structure as a dynamic-shape graph (attention backward and
    /// graphs of pointwise ops alone, with cuDNN 9.19): later shapes are planned as ordinary
    /// graphs at once.
    static_only: bool,
    /// The plans finalized with `cache` and their finalize times (the first compiled the
    /// kernels): what [`Kernels::finalized`] weighs a new one against.
    epoch: Epoch,
}

/// The plans finalized with one kernel cache, their finalize times summed, and whether the last
/// one cost more than the average before it.
#[derive(Debug, Clone, Copy, Default)]
struct Epoch {
    plans: u32,
    finalize: Duration,
    over: bool,
}

impl Kernels {
    /// Records a plan finalized with the cache in `finalize`, and starts a new cache where that
    /// cost more than the average plan of this one, the first's compilation included: measured
    /// deviceless for the H200 with cuDNN 9.19, every new shape of a layer norm's structure made
    /// its cache's finalize slower (about 2.4 ms per shape the cache had seen: 8 ms at the second
    /// shape, 100 ms at the 40th, against 420–630 ms to compile the first), where a matmul's
    /// stayed flat (3 ms). Starting over when a shape's cost passes the average is the
    /// ski-rental rule: with costs growing linearly it starts over near the number of shapes that
    /// minimizes the average (√(2·compile/growth), about 19 for the layer norm: about 50 ms a
    /// shape instead of growing without bound), and with flat costs never. It takes two shapes
    /// in a row over the average, so one slow finalize (the host busy) does not throw away a
    /// cache whose costs are flat. Plans made with the old cache keep it (their kernels live
    /// there). Returns whether it started over.
    fn finalized(&mut self, finalize: Duration) -> bool {
        let Epoch { plans, finalize: total, over: was_over } = self.epoch;
        let over = plans > 0 && finalize * plans > total;
        if over && was_over {
            self.cache = KernelCache::new();
            self.bytes = 0;
            self.epoch = Epoch::default();
            return true;
        }
        self.epoch = Epoch { plans: plans + 1, finalize: total + finalize, over };
        false
    }
}

impl Weigh for Kernels {
    fn bytes(&self) -> usize {
        self.bytes
    }

    /// Held by a plan made with it (its kernels live there) or by a caller's clone.
    fn pinned(&self) -> bool {
        self.cache.holders() > 1
    }
}

/// Where a [`CachedPlan`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheSource {
    /// The memory tier: the plan already loaded for this context (shared), or, the first time
    /// this context asks, loaded from the payload held in memory; no heuristics, no compilation.
    Memory,
    /// A payload file of the cache directory: read, loaded, no heuristics, no compilation.
    Disk,
    /// A miss: built (and stored).
    Built,
}

/// A cache entry that was ignored (or could not be written), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheWarning {
    /// The file, for a disk entry.
    pub path: Option<PathBuf>,
    /// What was wrong.
    pub reason: String,
}

impl fmt::Display for CacheWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(p) => write!(f, "plan cache entry {}: {}", p.display(), self.reason),
            None => write!(f, "plan cache: {}", self.reason),
        }
    }
}

fn warn(warnings: &mut Vec<CacheWarning>, path: Option<&Path>, reason: String) {
    let w = CacheWarning { path: path.map(Path::to_path_buf), reason };
    tracing::warn!("{w}");
    warnings.push(w);
}

/// A plan from [`PlanCache::get_or_build`].
#[derive(Debug)]
pub struct CachedPlan {
    /// The plan, for the caller's context; shared with the cache and every other caller it
    /// serves.
    pub plan: Arc<ExecutionPlan>,
    /// Where it came from.
    pub source: CacheSource,
    /// Entries ignored on the way (corrupted, for another key) or not written.
    pub warnings: Vec<CacheWarning>,
    /// Time from the call to the plan, lookups and (on a miss) the build and store included.
    pub elapsed: Duration,
    /// Why the cache serves this plan for this shape (the specialization policy's choice).
    pub reason: ServeReason,
}

/// The counters of a [`PlanCache`] ([`PlanCache::stats`]): lookups, builds, evictions, and the
/// bytes held against the budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Hits in memory.
    pub memory_hits: u64,
    /// Hits on disk.
    pub disk_hits: u64,
    /// Lookups that found no entry to use.
    pub misses: u64,
    /// Plans made after a miss (a miss whose build failed is not one).
    pub builds: u64,
    /// Entries ignored with a warning.
    pub ignored: u64,
    /// Memory entries and kernel caches evicted to keep within their budgets (an entry heavier
    /// than the whole budget, not kept, counts as one).
    pub evictions: u64,
    /// Memory entries held now.
    pub entries: usize,
    /// Bytes held now (see [`PlanCache::with_budget`] for what an entry weighs).
    pub bytes: usize,
    /// Kernel caches held now ([`PlanCache::dynamic_shapes`]).
    pub kernel_caches: usize,
    /// Their bytes: each cache's JSON (`CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION`), its
    /// compiled kernels serialized, measured after each plan built with it.
    pub kernel_bytes: usize,
    /// Kernel caches replaced by a new one for their structure because a new shape's finalize
    /// cost more than the average of the plans made with them (see [`PlanCache::dynamic_shapes`]).
    pub kernel_restarts: u64,
    /// Of `bytes`, those of entries pinned now: a plan held outside the cache (by a caller, or
    /// borrowed by a CUDA graph that replays it) is never evicted.
    pub pinned_bytes: usize,
    /// The budget in bytes.
    pub budget: usize,
    /// The specialization policy ([`PlanCache::specialization`]).
    pub specialization: Specialization,
    /// Specialized plans queued for the background worker ([`Specialization::Lazy`]): for a
    /// dynamic-shape entry, or for a length of a [`ClassPlan`](super::ClassPlan).
    pub specializations_queued: u64,
    /// Of those, waiting or being built and timed now.
    pub specializations_pending: usize,
    /// Specialized plans swapped in, timed faster than the dynamic-shape plan they replaced (or
    /// than the padded call, for a class plan's length).
    pub specializations_swapped: u64,
    /// Specialized plans dropped because they were not faster (the dynamic-shape plan, or the
    /// padded plan, stays).
    pub specializations_kept_dynamic: u64,
    /// Specializations that failed (not built, not timed, not stored) or were not queued (the
    /// queue was full); the dynamic-shape plan stays.
    pub specializations_failed: u64,
    /// Specializations finished after their entry was replaced, evicted or cleared, or after
    /// their class plan was dropped: dropped (a class plan's faster exact plan is still stored).
    pub specializations_stale: u64,
}

/// What [`PlanCache::seed_from_dir`] loaded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeedReport {
    /// Payloads added.
    pub seeded: usize,
    /// Files skipped, and why.
    pub warnings: Vec<CacheWarning>,
}

/// Plans by [`PlanKey`]: loaded plans and their payloads in memory, and payloads in a directory
/// if one is given. The [`cache`](self) module documentation gives the design (keys, sharing,
/// the on-disk format and its safety); `Send + Sync`.
pub struct PlanCache {
    entries: Mutex<Lru<PlanKey, Entry>>,
    dir: Option<PathBuf>,
    key: Option<PayloadKey>,
    memory_hits: AtomicU64,
    disk_hits: AtomicU64,
    misses: AtomicU64,
    builds: AtomicU64,
    ignored: AtomicU64,
    evictions: AtomicU64,
    /// Kernel caches started over ([`CacheStats::kernel_restarts`]).
    kernel_restarts: AtomicU64,
    /// Kernel caches by structure, with [`PlanCache::dynamic_shapes`].
    kernels: Option<Mutex<Lru<StructureKey, Kernels>>>,
    /// The specialization policy as set ([`PlanCache::specialization`]); unset, eager without
    /// dynamic shapes and none with them.
    policy: Option<Specialization>,
    /// How the lazy policy times plans.
    timer: Arc<PlanTimer>,
    /// The lazy policy's background builds (its thread starts with the first).
    worker: Worker<Specialized>,
    specializations: SpecializationCounters,
}

/// The counters of the lazy policy.
#[derive(Default)]
struct SpecializationCounters {
    queued: AtomicU64,
    swapped: AtomicU64,
    kept: AtomicU64,
    failed: AtomicU64,
    stale: AtomicU64,
}

/// A background specialization, finished: the entry it was for, what it was timed against, and
/// its outcome.
pub(super) struct Specialized {
    pub(super) key: PlanKey,
    pub(super) against: Against,
    pub(super) outcome: Outcome,
}

/// Where the cache hands a class plan its finished background specializations.
pub(super) type Inbox = Mutex<Vec<(Vec<usize>, Arrival)>>;

/// A finished background specialization of one length, as the cache settled it.
pub(super) enum Arrival<P = ExecutionPlan> {
    /// The exact plan is faster; the cache holds it under `key`.
    Faster {
        key: PlanKey,
        plan: Weak<P>,
        padded_us: f64,
        exact_us: f64,
    },
    NotFaster {
        padded_us: f64,
        exact_us: f64,
    },
    Failed(String),
}

/// What a specialized plan was timed against.
pub(super) enum Against {
    /// The dynamic-shape plan its entry held.
    Dynamic(Arc<ExecutionPlan>),
    /// A call of this length on a class plan's padded plan ([`ClassPlan`](super::ClassPlan)): the outcome goes to
    /// its inbox, if the class plan still lives.
    Padded { inbox: Weak<Inbox>, length: Vec<usize> },
}

/// The outcome of a background specialization; the times are the baseline's (`dynamic_us`: the
/// dynamic-shape plan, or the padded call) and the specialized plan's.
pub(super) enum Outcome {
    /// Faster: the plan, its payload (already in the directory, if any) and both times.
    Faster {
        plan: Arc<ExecutionPlan>,
        payload: Box<Payload>,
        payload_bytes: usize,
        dynamic_us: f64,
        specialized_us: f64,
    },
    NotFaster {
        dynamic_us: f64,
        specialized_us: f64,
    },
    Failed(String),
}

impl fmt::Debug for PlanCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlanCache").field("entries", &self.len()).field("dir", &self.dir).finish()
    }
}

impl Default for PlanCache {
    fn default() -> Self {
        Self::in_memory()
    }
}

/// How many loaded plans one memory entry keeps (one per CUDA context or described device that
/// asked for it); past that the oldest is let go (its holders keep it).
pub const SHARED_PLANS: usize = 8;

/// The memory budget of a [`PlanCache`] unless [`PlanCache::with_budget`] sets another: 256 MiB,
/// about a thousand plans of the sizes measured (see [`PlanCache::with_budget`]).
pub const DEFAULT_BUDGET_BYTES: usize = 256 << 20;

/// A memory entry: a payload, without structure (lookups always bring the graph), and the plans
/// loaded from it, shared.
struct Entry {
    payload: Arc<Payload>,
    /// The payload's size as serialized.
    payload_bytes: usize,
    plans: Vec<Arc<ExecutionPlan>>,
    /// Why the entry holds this plan.
    reason: ServeReason,
}

impl Weigh for Entry {
    /// The payload, and each loaded plan as much again: cuDNN's host-side state of a plan is not
    /// observable, and its JSON (most of the payload) is that state serialized.
    fn bytes(&self) -> usize {
        self.payload_bytes.saturating_mul(1 + self.plans.len())
    }

    /// Whether a plan of the entry is held outside the cache: by a caller's `Arc`, which is also
    /// what a CUDA graph of the plan borrows ([`crate::backend::PlanGraph`] cannot outlive it).
    fn pinned(&self) -> bool {
        self.plans.iter().any(|p| Arc::strong_count(p) > 1)
    }
}

/// Whether `plan` serves a caller of `graph` on `cudnn` as well as a plan it loaded itself.
fn serves(plan: &ExecutionPlan, cudnn: &Cudnn, graph: &Graph) -> bool {
    plan.anchor().serves(cudnn) && plan.graph() == graph
}

/// One lookup's question.
struct Lookup<'a> {
    cudnn: &'a Cudnn,
    graph: &'a Graph,
    expect: &'a Expect,
    options: &'a BuildOptions,
    key: PlanKey,
    start: Instant,
}

impl Lookup<'_> {
    /// Traces a hit: the tier, whether the plan had to be loaded into cuDNN, why the entry
    /// serves that plan, and the time taken.
    fn hit(&self, source: CacheSource, loaded: bool, reason: &ServeReason) {
        let tier = if source == CacheSource::Disk { "disk" } else { "memory" };
        tracing::debug!(
            fingerprint = format_args!("{:#018x}", self.key.graph_fingerprint),
            tier,
            loaded,
            reason = %reason,
            elapsed_us = crate::micros(self.start.elapsed()),
            "plan cache hit"
        );
    }
}

/// Distinguishes the temporary files of threads of one process.
static TEMP_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Whether `options` accept the engine recorded in `record`.
fn accepts(options: &BuildOptions, record: &PlanRecord) -> bool {
    // A partitioned plan does not serve a build that demands one kernel, and each part's engine
    // must pass the filters.
    if record.parts.is_empty() {
        return accepts_engine(options, &record.engine, record.workspace_size);
    }
    options.fusion == Fusion::Auto
        && options.engine.is_none()
        && options.candidate.is_none()
        && options.max_workspace_bytes.is_none_or(|limit| record.workspace_size <= limit)
        && record.parts.iter().all(|p| accepts_engine(options, &p.engine, p.workspace_size))
}

/// Whether a recorded engine (and its workspace) passes `options`' filters.
fn accepts_engine(options: &BuildOptions, engine: &EngineRecord, workspace_size: usize) -> bool {
    let behavior: Option<Vec<BehaviorNote>> =
        engine.behavior_notes.iter().map(|n| BehaviorNote::from_name(n)).collect();
    let numerical: Option<Vec<NumericalNote>> =
        engine.numerical_notes.iter().map(|n| NumericalNote::from_name(n)).collect();
    // A note this build cannot name cannot be checked: such an entry passes only unfiltered.
    let (Some(behavior), Some(numerical)) = (behavior, numerical) else {
        return options.select_behavior_notes.is_empty()
            && options.deselect_behavior_notes.is_empty()
            && options.select_numerical_notes.is_empty()
            && options.deselect_numerical_notes.is_empty();
    };
    if options.bars_notes(engine.id, &behavior, &numerical).is_some() {
        return false;
    }
    if options.max_workspace_bytes.is_some_and(|limit| workspace_size > limit) {
        return false;
    }
    match &options.engine {
        Some(e) => engine.id == Some(e.id) && e.knobs.iter().all(|k| engine.knobs.contains(&(k.kind, k.value))),
        None => true,
    }
}

impl PlanCache {
    /// A cache in memory only.
    pub fn in_memory() -> Self {
        PlanCache {
            entries: Mutex::new(Lru::new(DEFAULT_BUDGET_BYTES)),
            dir: None,
            key: None,
            memory_hits: AtomicU64::new(0),
            disk_hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            builds: AtomicU64::new(0),
            ignored: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            kernel_restarts: AtomicU64::new(0),
            kernels: None,
            policy: None,
            timer: Arc::new(median_us),
            worker: Worker::new(),
            specializations: SpecializationCounters::default(),
        }
    }

    /// Plans every graph this cache builds ([`PlanCache::get_or_build`]) as a dynamic-shape
    /// operation graph with the kernel cache of its structure ([`StructureKey`]: one per graph
    /// structure whatever its extents, so every shape of a `graph!` type with `dyn` dims shares
    /// one), and plans a new shape with the engine the structure's first plan selected, without
    /// heuristics: a new shape costs lowering, one engine config and a plan finalize that finds
    /// its kernels compiled. Where that engine does not plan the new shape, heuristics run as
    /// usual; where cuDNN plans no dynamic-shape graph of the structure, the plan is an ordinary
    /// one ([`ExecutionPlan::is_dynamic_shape`]), and so are the structure's later plans, without
    /// asking again. Options that choose the engine themselves
    /// (`engine`, `candidate`, `build_all`, or a `kernel_cache` of their own) are kept as given.
    /// Kernel caches are kept within `kernel_budget` bytes, least recently used first; one held
    /// by a plan (its kernels live there) is never evicted. A structure whose new shapes finalize
    /// slower the more shapes its cache has seen (cuDNN 9.19's layer norm: 2.4 ms more per shape)
    /// gets a new cache when a shape's finalize passes the average of the cache's plans
    /// ([`CacheStats::kernel_restarts`]), which bounds that cost instead of letting it grow.
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::engines::{PlanCache, DEFAULT_BUDGET_BYTES};
    /// let cache = PlanCache::in_memory().dynamic_shapes(DEFAULT_BUDGET_BYTES);
    /// assert_eq!(cache.stats().kernel_caches, 0);
    /// ```
    pub fn dynamic_shapes(self, kernel_budget: usize) -> Self {
        PlanCache { kernels: Some(Mutex::new(Lru::new(kernel_budget))), ..self }
    }

    /// The kernel cache this cache plans `graph`'s structure with, made if there is none; `None`
    /// without [`PlanCache::dynamic_shapes`].
    pub fn kernel_cache(&self, cudnn: &Cudnn, graph: &Graph) -> Option<KernelCache> {
        let (cache, _, _) = self.kernels_of(&StructureKey::new(cudnn, graph))?;
        Some(cache)
    }

    /// The kernel cache of `key`, the engine recorded for it and whether the structure plans
    /// only statically; made if missing.
    fn kernels_of(&self, key: &StructureKey) -> Option<(KernelCache, Option<EngineConfig>, bool)> {
        let mut kernels = self.kernels.as_ref()?.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(k) = kernels.get(key) {
            return Some((k.cache.clone(), k.engine.clone(), k.static_only));
        }
        let cache = KernelCache::new();
        let entry =
            Kernels { cache: cache.clone(), bytes: 0, engine: None, static_only: false, epoch: Epoch::default() };
        let evicted = kernels.insert(key.clone(), entry);
        drop(kernels);
        self.evicted_kernels(evicted);
        Some((cache, None, false))
    }

    /// After `plan` was built with `key`'s kernel cache: records its engine (the first time) and
    /// weighs the cache again.
    fn built_with_kernels(&self, key: &StructureKey, cache: &KernelCache, plan: &ExecutionPlan) {
        let Some(kernels) = &self.kernels else { return };
        let static_only = plan.parts().iter().all(|p| !p.is_dynamic_shape());
        let engine = match (plan.is_dynamic_shape(), plan.parts()) {
            (true, [part]) => {
                part.selected().engine_id.map(|id| EngineConfig { id, knobs: part.selected().knobs.clone() })
            }
            _ => None,
        };
        // cuDNN serializes the cache outside the lock of the map (not of the cache).
        let bytes = cache.json().ok().flatten().map_or(0, |j| j.len());
        let finalize: Duration =
            plan.parts().iter().filter(|p| p.is_dynamic_shape()).map(|p| p.timings().plan_build).sum();
        let mut held = kernels.lock().unwrap_or_else(PoisonError::into_inner);
        let updated = held.update(key, |k| {
            if k.cache != *cache {
                return false;
            }
            k.bytes = bytes;
            k.static_only = static_only;
            if k.engine.is_none() {
                k.engine = engine;
            }
            plan.is_dynamic_shape() && k.finalized(finalize)
        });
        drop(held);
        if let Some((restarted, evicted)) = updated {
            if restarted {
                self.kernel_restarts.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    structure = format_args!("{:#018x}", key.structure_fingerprint),
                    finalize_us = crate::micros(finalize),
                    "kernel cache restarted: its plans' finalize grew past their average"
                );
            }
            self.evicted_kernels(evicted);
        }
    }

    /// Counts and traces kernel caches evicted.
    fn evicted_kernels(&self, evicted: Evicted<StructureKey, Kernels>) {
        self.evictions.fetch_add(evicted.entries.len() as u64, Ordering::Relaxed);
        for (key, _, bytes) in &evicted.entries {
            tracing::debug!(
                structure = format_args!("{:#018x}", key.structure_fingerprint),
                bytes,
                "kernel cache eviction"
            );
        }
    }

    /// Builds `graph` for [`PlanCache::get_or_build`] as the policy says: specialized to its
    /// shape (as asked), or with the structure's kernel cache and engine under
    /// [`PlanCache::dynamic_shapes`]; with why.
    fn build(
        &self,
        cudnn: &Cudnn,
        graph: &Graph,
        options: &BuildOptions,
    ) -> crate::Result<(ExecutionPlan, ServeReason)> {
        let chooses = options.engine.is_some()
            || options.candidate.is_some()
            || options.build_all
            || options.kernel_cache.is_some();
        if chooses {
            return Ok((ExecutionPlan::build(cudnn, graph, options)?, ServeReason::OptionsChoose));
        }
        let policy = self.policy();
        let key = StructureKey::new(cudnn, graph);
        let kernels = if policy == Specialization::Eager { None } else { self.kernels_of(&key) };
        let Some((cache, engine, static_only)) = kernels else {
            return Ok((ExecutionPlan::build(cudnn, graph, options)?, ServeReason::Specialized));
        };
        if static_only {
            return Ok((ExecutionPlan::build(cudnn, graph, options)?, ServeReason::StaticOnly));
        }
        let dynamic = options.clone().dynamic_shapes(cache.clone());
        let built = match engine {
            Some(engine) => {
                let known = BuildOptions { engine: Some(engine), ..dynamic.clone() };
                match ExecutionPlan::build(cudnn, graph, &known) {
                    Ok(plan) => Ok(plan),
                    Err(e) => {
                        tracing::debug!(error = %e, "the structure's engine does not plan this shape: heuristics");
                        ExecutionPlan::build(cudnn, graph, &dynamic)
                    }
                }
            }
            None => ExecutionPlan::build(cudnn, graph, &dynamic),
        }?;
        self.built_with_kernels(&key, &cache, &built);
        let reason = match (built.is_dynamic_shape(), policy) {
            (false, _) => ServeReason::StaticOnly,
            (true, Specialization::Lazy) => ServeReason::LazyPending,
            (true, _) => ServeReason::DynamicByPolicy,
        };
        Ok((built, reason))
    }

    /// Sets the [`Specialization`] policy: which plan a new shape gets. [`Specialization::Lazy`]
    /// and [`Specialization::None`] serve dynamic-shape plans, so they turn dynamic shapes on
    /// ([`PlanCache::dynamic_shapes`] with a kernel budget of [`DEFAULT_BUDGET_BYTES`], unless
    /// one was set); [`Specialization::Eager`] builds every shape's own plan and leaves the
    /// kernel caches unused. Without this call a cache is eager, and a cache with dynamic shapes
    /// is none.
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::engines::{PlanCache, Specialization};
    /// assert_eq!(PlanCache::in_memory().policy(), Specialization::Eager);
    /// assert_eq!(PlanCache::in_memory().dynamic_shapes(64 << 20).policy(), Specialization::None);
    /// let lazy = PlanCache::in_memory().specialization(Specialization::Lazy);
    /// assert_eq!(lazy.policy(), Specialization::Lazy);
    /// assert_eq!(lazy.stats().specialization, Specialization::Lazy);
    /// ```
    pub fn specialization(mut self, policy: Specialization) -> Self {
        if policy != Specialization::Eager && self.kernels.is_none() {
            self.kernels = Some(Mutex::new(Lru::new(DEFAULT_BUDGET_BYTES)));
        }
        PlanCache { policy: Some(policy), ..self }
    }

    /// The specialization policy in force (see [`PlanCache::specialization`]).
    pub fn policy(&self) -> Specialization {
        match (self.policy, &self.kernels) {
            (Some(policy), _) => policy,
            (None, Some(_)) => Specialization::None,
            (None, None) => Specialization::Eager,
        }
    }

    /// Times plans for the lazy policy with `timer` instead of [`median_us`] (autotuning's
    /// [`measure`](super::measure)): to time with the service's own inputs, say, or to decide
    /// the swap in a test without a GPU. It runs on the worker thread, with the worker's cuDNN
    /// context.
    pub fn time_plans_with(
        self,
        timer: impl Fn(&Cudnn, &ExecutionPlan) -> Result<f64, BackendError> + Send + Sync + 'static,
    ) -> Self {
        PlanCache { timer: Arc::new(timer), ..self }
    }

    /// Keeps the memory tier within `bytes` (the default is [`DEFAULT_BUDGET_BYTES`]), evicting
    /// the least recently used entries (files in the directory stay). An entry weighs its payload
    /// as serialized (a plan JSON with its record: 7–60 KiB for the graphs of the tests), and each
    /// plan loaded from it as much again. An entry whose plan is held outside the cache — by a
    /// caller, or borrowed by a CUDA graph ([`crate::backend::PlanGraph`]), which cannot outlive
    /// the caller's `Arc` — is pinned: it is never evicted (evicting it would free nothing), so the
    /// bytes exceed the budget by pinned entries only ([`CacheStats::pinned_bytes`]). An entry
    /// heavier than the whole budget is not kept. Entries already held past a smaller budget are
    /// evicted by the next insert.
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::engines::PlanCache;
    /// let cache = PlanCache::in_memory().with_budget(64 << 20);
    /// assert_eq!(cache.stats().budget, 64 << 20);
    /// assert_eq!(cache.stats().bytes, 0);
    /// ```
    pub fn with_budget(self, bytes: usize) -> Self {
        let entries = Mutex::new(Lru::new(bytes));
        PlanCache { entries, ..self }
    }

    /// A cache in memory backed by directory `dir` (created if missing). Entries already there
    /// are read when first looked up (or all at once with [`PlanCache::seed_from_dir`]).
    pub fn with_dir(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        Ok(PlanCache { dir: Some(dir), ..Self::in_memory() })
    }

    /// Signs every entry this cache writes with `key`, and requires that signature of every
    /// entry it reads from its directory or [`PlanCache::seed_from_dir`]: for a directory that
    /// others can write (an entry carries executable GPU code). Without a key, entries are
    /// checked by their content digest, which catches corruption but not a deliberate change.
    pub fn with_key(self, key: PayloadKey) -> Self {
        PlanCache { key: Some(key), ..self }
    }

    /// Parses an entry's bytes, with the signature check if the cache has a key.
    fn parse(&self, bytes: &[u8]) -> Result<Payload, PayloadError> {
        parse_with(self.key.as_ref(), bytes)
    }

    /// The cache directory, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    fn entries(&self) -> MutexGuard<'_, Lru<PlanKey, Entry>> {
        // A panic elsewhere while the map was locked cannot leave it half-updated (every update
        // is one insert or remove), so a poisoned lock is still usable.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Entries held in memory.
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether no entry is held in memory.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether an entry for `key` is held in memory.
    pub fn contains(&self, key: &PlanKey) -> bool {
        self.entries().contains_key(key)
    }

    /// Forgets every entry held in memory, with the plans it shares, and every kernel cache
    /// (files stay; a plan still held elsewhere keeps its kernel cache).
    pub fn clear(&self) {
        self.entries().clear();
        if let Some(kernels) = &self.kernels {
            kernels.lock().unwrap_or_else(PoisonError::into_inner).clear();
        }
    }

    /// The counters so far, and the bytes held now.
    pub fn stats(&self) -> CacheStats {
        let entries = self.entries();
        CacheStats {
            memory_hits: self.memory_hits.load(Ordering::Relaxed),
            disk_hits: self.disk_hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            builds: self.builds.load(Ordering::Relaxed),
            ignored: self.ignored.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            entries: entries.len(),
            bytes: entries.bytes(),
            pinned_bytes: entries.pinned_bytes(),
            budget: entries.budget(),
            kernel_caches: self.kernels.as_ref().map_or(0, |k| k.lock().unwrap_or_else(PoisonError::into_inner).len()),
            kernel_bytes: self.kernels.as_ref().map_or(0, |k| k.lock().unwrap_or_else(PoisonError::into_inner).bytes()),
            kernel_restarts: self.kernel_restarts.load(Ordering::Relaxed),
            specialization: self.policy(),
            specializations_queued: self.specializations.queued.load(Ordering::Relaxed),
            specializations_pending: self.worker.pending(),
            specializations_swapped: self.specializations.swapped.load(Ordering::Relaxed),
            specializations_kept_dynamic: self.specializations.kept.load(Ordering::Relaxed),
            specializations_failed: self.specializations.failed.load(Ordering::Relaxed),
            specializations_stale: self.specializations.stale.load(Ordering::Relaxed),
        }
    }

    /// Counts and traces what an insert or update evicted.
    fn evicted(&self, evicted: Evicted<PlanKey, Entry>) {
        if evicted.entries.is_empty() {
            return;
        }
        self.evictions.fetch_add(evicted.entries.len() as u64, Ordering::Relaxed);
        for (key, _, bytes) in &evicted.entries {
            tracing::debug!(
                fingerprint = format_args!("{:#018x}", key.graph_fingerprint),
                bytes,
                "plan cache eviction"
            );
        }
    }

    /// The path of `key`'s entry, with a directory.
    pub fn path_of(&self, key: &PlanKey) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(key.file_name()))
    }

    /// The cached plan of `graph` for `cudnn`, or one built with `options` and stored. On a hit
    /// no heuristics run and nothing is compiled: the plan is shared from memory, or cuDNN loads
    /// it. On a miss the cache's [`Specialization`] policy decides which plan a new shape gets;
    /// [`CachedPlan::reason`] says which and why. Specialized plans the background worker
    /// finished since the last call are swapped in first ([`Specialization::Lazy`]).
    pub fn get_or_build(
        &self,
        cudnn: &Cudnn,
        graph: &Graph,
        expect: &Expect,
        options: &BuildOptions,
    ) -> crate::Result<CachedPlan> {
        let mut got = self.get_or_make(cudnn, graph, expect, options, || self.build(cudnn, graph, options))?;
        if got.source == CacheSource::Built && got.reason == ServeReason::LazyPending {
            if let Some(reason) = self.specialize(cudnn, graph, expect, options, &got.plan) {
                got.reason = reason;
            }
        }
        Ok(got)
    }

    /// The padded plan of `class`, an attention or row-wise graph at its class bound
    /// ([`PaddedPlan`]): the plan of its masked graph
    /// ([`ClassGraph::masked`](crate::ir::ClassGraph::masked)) from the cache, or built and
    /// stored, with its padded buffers allocated on `cudnn`'s stream. Class plans compiled ahead
    /// of time (`cudnn-graph aot --dyn ... --padded`, then [`PlanCache::seed_from_dir`]) serve
    /// every length of their class with no planning at all; the cache's entry counts
    /// against its budget like any plan, and the padded plan holds it, so it is not evicted while
    /// the padded plan lives.
    ///
    /// # Errors
    /// A class graph that cannot be padded ([`PadError`](crate::ir::PadError), naming the node),
    /// a failed build, or no GPU (the buffers need one).
    pub fn padded_plan(
        &self,
        cudnn: &Cudnn,
        class: &Graph,
        expect: &Expect,
        options: &BuildOptions,
    ) -> crate::Result<(PaddedPlan, CachedPlan)> {
        let graph = ClassGraph::new(class).map_err(BackendError::from)?;
        let cached = self.class_plan_of(cudnn, &graph, expect, options)?;
        let padded = PaddedPlan::from_plan(cudnn, graph, Arc::clone(&cached.plan))?;
        Ok((padded, cached))
    }

    /// The plan of `graph`'s masked graph, looked up or built specialized to the class bound
    /// whatever the policy: a class plan serves every length of its class for as long as it
    /// lives, so a dynamic-shape plan (and a lazy swap of it that would not reach the padded
    /// plan holding it) buys nothing.
    pub(super) fn class_plan_of(
        &self,
        cudnn: &Cudnn,
        graph: &ClassGraph,
        expect: &Expect,
        options: &BuildOptions,
    ) -> crate::Result<CachedPlan> {
        let masked = graph.masked();
        self.get_or_make(cudnn, masked, expect, options, || {
            Ok((ExecutionPlan::build(cudnn, masked, options)?, ServeReason::Specialized))
        })
    }

    /// [`PlanCache::get_or_build`] with the plan made by `make` on a miss (built with
    /// `build_all` and autotuned, say); `options` are what an entry must satisfy to be used. The
    /// policy does not apply to a plan `make` makes ([`ServeReason::Caller`]).
    pub fn get_or_insert_with(
        &self,
        cudnn: &Cudnn,
        graph: &Graph,
        expect: &Expect,
        options: &BuildOptions,
        make: impl FnOnce() -> crate::Result<ExecutionPlan>,
    ) -> crate::Result<CachedPlan> {
        self.get_or_make(cudnn, graph, expect, options, || Ok((make()?, ServeReason::Caller)))
    }

    fn get_or_make(
        &self,
        cudnn: &Cudnn,
        graph: &Graph,
        expect: &Expect,
        options: &BuildOptions,
        make: impl FnOnce() -> crate::Result<(ExecutionPlan, ServeReason)>,
    ) -> crate::Result<CachedPlan> {
        self.settle_specializations(self.worker.take_done());
        let query =
            Lookup { cudnn, graph, expect, options, key: PlanKey::new(cudnn, graph, expect), start: Instant::now() };
        let mut warnings = Vec::new();
        if let Some((plan, source, reason)) = self.lookup(&query, &mut warnings) {
            return Ok(CachedPlan { plan, source, warnings, elapsed: query.start.elapsed(), reason });
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            fingerprint = format_args!("{:#018x}", query.key.graph_fingerprint),
            elapsed_us = crate::micros(query.start.elapsed()),
            "plan cache miss"
        );
        let (plan, reason) = make()?;
        let plan = Arc::new(plan);
        self.builds.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            fingerprint = format_args!("{:#018x}", query.key.graph_fingerprint),
            policy = %self.policy(),
            dynamic_shape = plan.is_dynamic_shape(),
            reason = %reason,
            elapsed_us = crate::micros(query.start.elapsed()),
            "plan cache build"
        );
        warnings.extend(self.store(cudnn, &plan, expect, reason.clone()));
        Ok(CachedPlan { plan, source: CacheSource::Built, warnings, elapsed: query.start.elapsed(), reason })
    }

    /// The cached plan of `graph` for `cudnn`, if an entry satisfies `options` and loads.
    pub fn get(
        &self,
        cudnn: &Cudnn,
        graph: &Graph,
        expect: &Expect,
        options: &BuildOptions,
    ) -> (Option<(Arc<ExecutionPlan>, CacheSource)>, Vec<CacheWarning>) {
        self.settle_specializations(self.worker.take_done());
        let query =
            Lookup { cudnn, graph, expect, options, key: PlanKey::new(cudnn, graph, expect), start: Instant::now() };
        let mut warnings = Vec::new();
        let found = self.lookup(&query, &mut warnings).map(|(plan, source, _)| (plan, source));
        (found, warnings)
    }

    /// What the entry of `key` serves now and why; `None` without an entry in memory.
    /// Specialized plans finished in the background are swapped in first.
    pub fn serving(&self, key: &PlanKey) -> Option<Serving> {
        self.settle_specializations(self.worker.take_done());
        let mut entries = self.entries();
        let entry = entries.get(key)?;
        Some(Serving { dynamic_shape: entry.plans.first().map(|p| p.is_dynamic_shape()), reason: entry.reason.clone() })
    }

    /// Waits until the background worker has built and timed every specialization queued
    /// ([`Specialization::Lazy`]), and swaps in those that are faster; returns how many
    /// finished. For tests, benchmarks and a service that wants its specialized plans before it
    /// takes traffic; lookups swap in whatever has finished without waiting.
    pub fn wait_for_specializations(&self) -> usize {
        let done = self.worker.wait_idle();
        let n = done.len();
        self.settle_specializations(done);
        n
    }

    /// Queues the background specialization of `plan`, the dynamic-shape plan just built and
    /// stored for `graph`; the entry's new reason if it cannot be queued.
    fn specialize(
        &self,
        cudnn: &Cudnn,
        graph: &Graph,
        expect: &Expect,
        options: &BuildOptions,
        plan: &Arc<ExecutionPlan>,
    ) -> Option<ServeReason> {
        let key = PlanKey::new(cudnn, graph, expect);
        let Some(target) = Target::of(cudnn) else {
            return Some(self.not_queued(&key, ServeReason::LazyFailed { reason: "the context has no target".into() }));
        };
        let (graph, options, expect, dynamic) = (graph.clone(), options.clone(), expect.clone(), plan.clone());
        let (timer, signing, path) = (self.timer.clone(), self.key.clone(), self.path_of(&key));
        let task_key = key.clone();
        let task: Task<Specialized> = Box::new(move |contexts: &mut Contexts| {
            let outcome = specialize_in_background(
                contexts,
                &target,
                &graph,
                &options,
                &expect,
                &dynamic,
                &*timer,
                signing.as_ref(),
                path.as_deref(),
            );
            Specialized { key: task_key, against: Against::Dynamic(dynamic), outcome }
        });
        let if_panicked = Specialized {
            key: key.clone(),
            against: Against::Dynamic(plan.clone()),
            outcome: Outcome::Failed("the background build panicked".into()),
        };
        match self.queue(task, if_panicked) {
            Ok(()) => None,
            Err(PushError::Full) => Some(self.not_queued(&key, ServeReason::LazyQueueFull)),
            Err(PushError::Spawn(e)) => Some(self.not_queued(
                &key,
                ServeReason::LazyFailed { reason: format!("the specialization worker cannot start: {e}") },
            )),
        }
    }

    /// Queues a background specialization on the worker, counted.
    pub(super) fn queue(&self, task: Task<Specialized>, if_panicked: Specialized) -> Result<(), PushError> {
        let key = if_panicked.key.graph_fingerprint;
        self.worker.push(task, if_panicked, MAX_PENDING_SPECIALIZATIONS)?;
        self.specializations.queued.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(fingerprint = format_args!("{key:#018x}"), "specialization queued");
        Ok(())
    }

    /// Whether a task queued now would be refused: [`MAX_PENDING_SPECIALIZATIONS`] are waiting.
    pub(super) fn queue_is_full(&self) -> bool {
        self.worker.waiting() >= MAX_PENDING_SPECIALIZATIONS
    }

    /// Counts a specialization that could not be queued (the entry-less kind: a class plan's).
    pub(super) fn count_not_queued(&self) {
        self.specializations.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Swaps in what the worker has finished since the last call.
    pub(super) fn settle(&self) {
        self.settle_specializations(self.worker.take_done());
    }

    /// Marks `key`'s entry used, if it is held (its recency, for the budget's eviction order).
    pub(super) fn touch(&self, key: &PlanKey) {
        self.entries().get(key);
    }

    /// The key payloads are signed with ([`PlanCache::with_key`]).
    pub(super) fn signing(&self) -> Option<&PayloadKey> {
        self.key.as_ref()
    }

    /// Records on `key`'s entry that its specialization was not queued, and why.
    fn not_queued(&self, key: &PlanKey, reason: ServeReason) -> ServeReason {
        self.specializations.failed.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(fingerprint = format_args!("{:#018x}", key.graph_fingerprint), reason = %reason, "specialization not queued");
        self.set_reason(key, reason.clone());
        reason
    }

    /// Sets the reason of `key`'s entry, if it is still held.
    fn set_reason(&self, key: &PlanKey, reason: ServeReason) {
        let mut entries = self.entries();
        if entries.contains_key(key) {
            if let Some(((), evicted)) = entries.update(key, |e| e.reason = reason) {
                drop(entries);
                self.evicted(evicted);
            }
        }
    }

    /// Applies finished specializations: a faster specialized plan replaces the dynamic-shape
    /// plan of its entry (the entry's plans are let go by the cache; a caller or CUDA graph
    /// holding one keeps it), a slower or failed one leaves the entry as it is with the reason
    /// recorded. One whose entry no longer holds the dynamic-shape plan it was timed against
    /// (replaced, evicted, cleared) is dropped.
    fn settle_specializations(&self, done: Vec<Specialized>) {
        for Specialized { key, against, outcome } in done {
            let dynamic = match against {
                Against::Dynamic(plan) => plan,
                Against::Padded { inbox, length } => {
                    self.settle_padded(key, &inbox, length, outcome);
                    continue;
                }
            };
            let current = self.entries().get(&key).is_some_and(|e| e.plans.iter().any(|p| Arc::ptr_eq(p, &dynamic)));
            let fingerprint = format_args!("{:#018x}", key.graph_fingerprint).to_string();
            if !current {
                self.specializations.stale.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(fingerprint, "specialization dropped: its entry was replaced or evicted");
                continue;
            }
            match outcome {
                Outcome::Faster { plan, payload, payload_bytes, dynamic_us, specialized_us } => {
                    let reason = ServeReason::LazyFaster { dynamic_us, specialized_us };
                    tracing::debug!(fingerprint, dynamic_us, specialized_us, "specialized plan swapped in");
                    self.remember(key, *payload, payload_bytes, Some(plan), reason);
                    self.specializations.swapped.fetch_add(1, Ordering::Relaxed);
                }
                Outcome::NotFaster { dynamic_us, specialized_us } => {
                    tracing::debug!(fingerprint, dynamic_us, specialized_us, "dynamic-shape plan kept: not slower");
                    self.set_reason(&key, ServeReason::LazyNotFaster { dynamic_us, specialized_us });
                    self.specializations.kept.fetch_add(1, Ordering::Relaxed);
                }
                Outcome::Failed(reason) => {
                    tracing::debug!(fingerprint, reason = %reason, "specialization failed: dynamic-shape plan kept");
                    self.set_reason(&key, ServeReason::LazyFailed { reason });
                    self.specializations.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Applies a class plan's finished specialization: a faster exact plan is stored as the
    /// call graph's entry ([`ServeReason::FasterThanPadded`]) and handed to the class plan, which
    /// holds it weakly (the entry is evicted by the budget like any other); either way the class
    /// plan hears the outcome, if it still lives.
    fn settle_padded(&self, key: PlanKey, inbox: &Weak<Inbox>, length: Vec<usize>, outcome: Outcome) {
        let fingerprint = format_args!("{:#018x}", key.graph_fingerprint).to_string();
        let arrival = match outcome {
            Outcome::Faster { plan, payload, payload_bytes, dynamic_us: padded_us, specialized_us: exact_us } => {
                tracing::debug!(fingerprint, padded_us, exact_us, "exact plan swapped in for a padded length");
                let weak = Arc::downgrade(&plan);
                let reason = ServeReason::FasterThanPadded { padded_us, exact_us };
                self.remember(key.clone(), *payload, payload_bytes, Some(plan), reason);
                self.specializations.swapped.fetch_add(1, Ordering::Relaxed);
                Arrival::Faster { key, plan: weak, padded_us, exact_us }
            }
            Outcome::NotFaster { dynamic_us: padded_us, specialized_us: exact_us } => {
                tracing::debug!(fingerprint, padded_us, exact_us, "padded plan kept: the exact plan is not faster");
                self.specializations.kept.fetch_add(1, Ordering::Relaxed);
                Arrival::NotFaster { padded_us, exact_us }
            }
            Outcome::Failed(reason) => {
                tracing::debug!(fingerprint, reason = %reason, "exact plan failed: padded plan kept");
                self.specializations.failed.fetch_add(1, Ordering::Relaxed);
                Arrival::Failed(reason)
            }
        };
        match inbox.upgrade() {
            Some(inbox) => inbox.lock().unwrap_or_else(PoisonError::into_inner).push((length, arrival)),
            None => {
                self.specializations.stale.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn lookup(
        &self,
        q: &Lookup<'_>,
        warnings: &mut Vec<CacheWarning>,
    ) -> Option<(Arc<ExecutionPlan>, CacheSource, ServeReason)> {
        let key = &q.key;
        let held = match self.entries().get(key) {
            Some(entry) if accepts(q.options, &entry.payload.plan) => {
                if let Some(plan) = entry.plans.iter().find(|p| serves(p, q.cudnn, q.graph)) {
                    self.memory_hits.fetch_add(1, Ordering::Relaxed);
                    q.hit(CacheSource::Memory, false, &entry.reason);
                    return Some((plan.clone(), CacheSource::Memory, entry.reason.clone()));
                }
                Some((entry.payload.clone(), entry.reason.clone()))
            }
            _ => None,
        };
        if let Some((payload, reason)) = held {
            match load_payload(q.cudnn, &payload, Some(q.graph.clone()), q.expect) {
                Ok(plan) => {
                    let plan = self.share(q, &payload, plan);
                    self.memory_hits.fetch_add(1, Ordering::Relaxed);
                    q.hit(CacheSource::Memory, true, &reason);
                    return Some((plan, CacheSource::Memory, reason));
                }
                Err(e) => {
                    self.ignored.fetch_add(1, Ordering::Relaxed);
                    warn(warnings, None, format!("the entry for {key} does not load: {e}"));
                    self.entries().remove(key);
                }
            }
        }
        let path = self.path_of(key)?;
        let bytes = match read_entry(&path) {
            Ok(b) => b,
            Err(EntryRead::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(EntryRead::Io(e)) => {
                self.ignored.fetch_add(1, Ordering::Relaxed);
                warn(warnings, Some(&path), format!("cannot be read: {e}"));
                return None;
            }
            Err(EntryRead::TooLarge(len)) => {
                self.evict(&path, warnings, PayloadError::TooLarge(len).to_string());
                return None;
            }
        };
        let loaded = self.parse(&bytes).map_err(|e| e.to_string()).and_then(|payload| {
            match PlanKey::of_record(&payload.plan) {
                Some(k) if k == *key => {}
                Some(k) => return Err(format!("it holds the plan of {k}, not {key}")),
                None => return Err(format!("its graph fingerprint `{}` is not hex", payload.plan.graph_fingerprint)),
            }
            if !accepts(q.options, &payload.plan) {
                return Ok(None);
            }
            let plan = load_payload(q.cudnn, &payload, Some(q.graph.clone()), q.expect).map_err(|e| e.to_string())?;
            Ok(Some((plan, payload)))
        });
        match loaded {
            Ok(Some((plan, payload))) => {
                let plan = Arc::new(plan);
                self.remember(key.clone(), payload, bytes.len(), Some(plan.clone()), ServeReason::Loaded);
                self.disk_hits.fetch_add(1, Ordering::Relaxed);
                q.hit(CacheSource::Disk, true, &ServeReason::Loaded);
                Some((plan, CacheSource::Disk, ServeReason::Loaded))
            }
            Ok(None) => None,
            Err(reason) => {
                self.evict(&path, warnings, reason);
                None
            }
        }
    }

    /// Removes an entry file that failed its checks, so that no later lookup (in this process or
    /// another) reads it again, and says so: it is never executed, and never fatal.
    fn evict(&self, path: &Path, warnings: &mut Vec<CacheWarning>, reason: String) {
        self.ignored.fetch_add(1, Ordering::Relaxed);
        let removed = match fs::remove_file(path) {
            Ok(()) => "evicted".to_string(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "evicted".to_string(),
            Err(e) => format!("ignored (it could not be removed: {e})"),
        };
        warn(warnings, Some(path), format!("{removed}: {reason}"));
    }

    /// Adds `plan`, loaded from the entry's `payload` for this lookup, to the entry's shared
    /// plans and returns it — or the plan another thread added meanwhile for the same context, so
    /// that callers keep sharing one. If the entry was replaced meanwhile, `plan` is returned
    /// unshared.
    fn share(&self, q: &Lookup<'_>, payload: &Arc<Payload>, plan: ExecutionPlan) -> Arc<ExecutionPlan> {
        let mut entries = self.entries();
        if !entries.get(&q.key).is_some_and(|e| Arc::ptr_eq(&e.payload, payload)) {
            return Arc::new(plan);
        }
        let plan = Arc::new(plan);
        let shared = entries.update(&q.key, |entry| {
            if let Some(other) = entry.plans.iter().find(|p| serves(p, q.cudnn, q.graph)) {
                return other.clone();
            }
            if entry.plans.len() == SHARED_PLANS {
                entry.plans.remove(0);
            }
            entry.plans.push(plan.clone());
            plan.clone()
        });
        drop(entries);
        match shared {
            Some((shared, evicted)) => {
                self.evicted(evicted);
                shared
            }
            None => plan,
        }
    }

    /// Keeps a payload in memory, without its structure (lookups always bring the graph), with
    /// the plan made from it if there is one; replaces the entry for `key`.
    fn remember(
        &self,
        key: PlanKey,
        payload: Payload,
        payload_bytes: usize,
        plan: Option<Arc<ExecutionPlan>>,
        reason: ServeReason,
    ) {
        let payload = Arc::new(Payload { structure: None, ..payload });
        let entry = Entry { payload, payload_bytes, plans: plan.into_iter().collect(), reason };
        let evicted = self.entries().insert(key, entry);
        self.evicted(evicted);
    }

    /// Stores `plan` (its selected candidate, made with `cudnn`) under its key, in memory (the
    /// plan itself, shared with the callers it serves, and its payload) and in the directory;
    /// replaces an entry there. Failures are returned as warnings: a cache that cannot write is
    /// still a working build.
    pub fn insert(&self, cudnn: &Cudnn, plan: &Arc<ExecutionPlan>, expect: &Expect) -> Vec<CacheWarning> {
        self.store(cudnn, plan, expect, ServeReason::Caller)
    }

    /// [`PlanCache::insert`], recording why the entry holds the plan.
    fn store(
        &self,
        cudnn: &Cudnn,
        plan: &Arc<ExecutionPlan>,
        expect: &Expect,
        reason: ServeReason,
    ) -> Vec<CacheWarning> {
        let mut warnings = Vec::new();
        let key = PlanKey::new(cudnn, plan.graph(), expect);
        let bytes = match write(
            plan,
            &PlanOrigin::of(cudnn),
            SerializeOptions { structure: true },
            expect,
            self.key.as_ref(),
        ) {
            Ok(b) => b,
            Err(e) => {
                warn(&mut warnings, None, format!("the plan for {key} cannot be written as a payload: {e}"));
                return warnings;
            }
        };
        match self.parse(&bytes) {
            Ok(payload) => self.remember(key.clone(), payload, bytes.len(), Some(plan.clone()), reason),
            Err(e) => warn(&mut warnings, None, format!("the payload written for {key} does not read back: {e}")),
        }
        if let Some(path) = self.path_of(&key) {
            if let Err(e) = write_atomically(&path, &bytes) {
                warn(&mut warnings, Some(&path), format!("cannot be written: {e}"));
            }
        }
        warnings
    }

    /// Adds every payload file of `dir` (written ahead of time, e.g. by `cudnn-graph aot` or
    /// [`write_payload`](crate::payload::plan::write_payload); any file name; with or without structure) to the memory cache, under
    /// the key its record names. Files that do not parse as payloads, `.`-prefixed files
    /// (temporaries) and subdirectories are skipped; the first two with a warning. Nothing is
    /// loaded into cuDNN yet: each entry is checked in full when first looked up.
    pub fn seed_from_dir(&self, dir: impl AsRef<Path>) -> std::io::Result<SeedReport> {
        let mut report = SeedReport::default();
        let mut paths: Vec<PathBuf> = fs::read_dir(dir.as_ref())?.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for path in paths {
            let hidden = path.file_name().and_then(|n| n.to_str()).is_none_or(|n| n.starts_with('.'));
            let Ok(meta) = fs::metadata(&path) else { continue };
            if hidden || !meta.is_file() {
                continue;
            }
            let parsed = match read_entry(&path) {
                Ok(b) => self.parse(&b).map(|p| (p, b.len())).map_err(|e| e.to_string()),
                Err(EntryRead::Io(e)) => Err(e.to_string()),
                Err(EntryRead::TooLarge(len)) => Err(PayloadError::TooLarge(len).to_string()),
            };
            match parsed {
                Ok((payload, bytes)) => match PlanKey::of_record(&payload.plan) {
                    Some(key) => {
                        self.remember(key, payload, bytes, None, ServeReason::Loaded);
                        report.seeded += 1;
                    }
                    None => warn(&mut report.warnings, Some(&path), "skipped: its graph fingerprint is not hex".into()),
                },
                Err(e) => warn(&mut report.warnings, Some(&path), format!("skipped: {e}")),
            }
        }
        Ok(report)
    }
}

/// Parses an entry's bytes, with the signature check if there is a key.
fn parse_with(key: Option<&PayloadKey>, bytes: &[u8]) -> Result<Payload, PayloadError> {
    match key {
        Some(key) => parse_signed_payload(bytes, key),
        None => parse_payload(bytes),
    }
}

/// The lazy policy's background work for one shape, on the worker thread: builds the plan
/// specialized to the shape (an ordinary operation graph, `options` as asked), times it and the
/// dynamic-shape plan with `timer`, and if the specialized one is faster writes its payload (to
/// `path` too, atomically, with a directory) for the cache to swap in.
#[allow(clippy::too_many_arguments)]
fn specialize_in_background(
    contexts: &mut Contexts,
    target: &Target,
    graph: &Graph,
    options: &BuildOptions,
    expect: &Expect,
    dynamic: &ExecutionPlan,
    timer: &PlanTimer,
    signing: Option<&PayloadKey>,
    path: Option<&Path>,
) -> Outcome {
    let cudnn = match contexts.get(target) {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(format!("the worker's cuDNN context cannot be made: {e}")),
    };
    let plan = match ExecutionPlan::build(cudnn, graph, options) {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(format!("the specialized plan does not build: {e}")),
    };
    let (dynamic_us, specialized_us) = match (timer(cudnn, dynamic), timer(cudnn, &plan)) {
        (Ok(d), Ok(s)) => (d, s),
        (Err(e), _) => return Outcome::Failed(format!("the dynamic-shape plan cannot be timed: {e}")),
        (_, Err(e)) => return Outcome::Failed(format!("the specialized plan cannot be timed: {e}")),
    };
    faster_or_not(cudnn, plan, expect, signing, path, dynamic_us, specialized_us)
}

/// The outcome of a specialized `plan` timed against its baseline: not faster (by
/// [`specialized_is_faster`]), or faster with its payload written (to `path` too, atomically)
/// for the cache to swap in.
pub(super) fn faster_or_not(
    cudnn: &Cudnn,
    plan: ExecutionPlan,
    expect: &Expect,
    signing: Option<&PayloadKey>,
    path: Option<&Path>,
    dynamic_us: f64,
    specialized_us: f64,
) -> Outcome {
    if !specialized_is_faster(dynamic_us, specialized_us) {
        return Outcome::NotFaster { dynamic_us, specialized_us };
    }
    let origin = PlanOrigin::of(cudnn);
    let bytes = match write(&plan, &origin, SerializeOptions { structure: true }, expect, signing) {
        Ok(b) => b,
        Err(e) => return Outcome::Failed(format!("the specialized plan cannot be written as a payload: {e}")),
    };
    let payload = match parse_with(signing, &bytes) {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(format!("the specialized plan's payload does not read back: {e}")),
    };
    if let Some(path) = path {
        if let Err(e) = write_atomically(path, &bytes) {
            return Outcome::Failed(format!("the specialized plan cannot be stored at {}: {e}", path.display()));
        }
    }
    Outcome::Faster {
        plan: Arc::new(plan),
        payload: Box::new(payload),
        payload_bytes: bytes.len(),
        dynamic_us,
        specialized_us,
    }
}

enum EntryRead {
    Io(std::io::Error),
    TooLarge(u64),
}

/// Reads an entry file, refusing one over [`MAX_PAYLOAD_BYTES`] before reading it (and one that
/// grows past it while being read).
fn read_entry(path: &Path) -> Result<Vec<u8>, EntryRead> {
    use std::io::Read;
    let file = fs::File::open(path).map_err(EntryRead::Io)?;
    let len = file.metadata().map_err(EntryRead::Io)?.len();
    let limit = MAX_PAYLOAD_BYTES as u64;
    if len > limit {
        return Err(EntryRead::TooLarge(len));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(limit + 1).read_to_end(&mut bytes).map_err(EntryRead::Io)?;
    if bytes.len() as u64 > limit {
        return Err(EntryRead::TooLarge(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Writes `bytes` to `path` so that no reader ever sees a partial file: a uniquely named
/// temporary in the same directory, synced, then renamed over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("entry");
    let unique = format!(
        ".{name}.{}.{}.{}.tmp",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
    );
    let temp = dir.join(unique);
    let written = (|| {
        let mut f = fs::OpenOptions::new().write(true).create_new(true).open(&temp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(fp: u64, binding: Option<&str>, sm: Option<u32>, version: usize) -> PlanKey {
        PlanKey { graph_fingerprint: fp, binding: binding.map(str::to_string), sm, cudnn_version: version }
    }

    /// The ski-rental rule of [`Kernels::finalized`] on finalize times as measured deviceless:
    /// growing by 2.4 ms a shape after a 420 ms compilation, the cache starts over near √(2 ·
    /// 420 / 2.4) ≈ 19 shapes (one more: two in a row over the average), and again as often;
    /// flat, never, even with a slow finalize now and then.
    #[test]
    fn kernel_caches_start_over_when_a_shape_costs_more_than_their_average() {
        let ms = |v: f64| Duration::from_secs_f64(v / 1e3);
        let mut k =
            Kernels { cache: KernelCache::new(), bytes: 1, engine: None, static_only: false, epoch: Epoch::default() };
        let first = k.cache.clone();
        let mut restarts = Vec::new();
        let mut seen = 0u32;
        for shape in 0..100 {
            let cost = if seen == 0 { ms(420.0) } else { ms(5.0 + 2.4 * f64::from(seen)) };
            if k.finalized(cost) {
                restarts.push(shape);
                seen = 0;
            } else {
                seen += 1;
            }
        }
        assert!(k.cache != first, "a new cache after a restart");
        assert!((18..=22).contains(&restarts[0]), "{restarts:?}");
        let gaps: Vec<usize> = restarts.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.len() >= 3 && gaps.iter().all(|g| (18..=23).contains(g)), "{gaps:?}");
        // Flat costs (a matmul's shape-generic kernel): never.
        let mut k =
            Kernels { cache: KernelCache::new(), bytes: 1, engine: None, static_only: false, epoch: Epoch::default() };
        assert!(!k.finalized(ms(412.0)));
        assert!((0..1000).all(|i| !k.finalized(ms(if i % 7 == 0 { 40.0 } else { 0.03 }))));
    }

    #[test]
    fn every_key_part_changes_the_file_name() {
        let base = key(1, Some("M = 64"), Some(90), 91900);
        let names = [
            base.file_name(),
            key(2, Some("M = 64"), Some(90), 91900).file_name(),
            key(1, Some("M = 65"), Some(90), 91900).file_name(),
            key(1, None, Some(90), 91900).file_name(),
            key(1, Some(""), Some(90), 91900).file_name(),
            key(1, Some("M = 64"), Some(80), 91900).file_name(),
            key(1, Some("M = 64"), None, 91900).file_name(),
            key(1, Some("M = 64"), Some(90), 91400).file_name(),
        ];
        let unique: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:#?}");
        assert_eq!(base.file_name(), key(1, Some("M = 64"), Some(90), 91900).file_name());
        assert!(names.iter().all(|n| !n.starts_with('.') && !n.contains('/')));
    }

    #[test]
    fn atomic_writes_replace_whole_files_and_leave_no_temporaries() {
        let dir = std::env::temp_dir().join(format!("cudnn-graph-atomic-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("entry.plan.json");
        write_atomically(&path, b"first").unwrap();
        write_atomically(&path, b"second, longer").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second, longer");
        let left: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, [std::ffi::OsString::from("entry.plan.json")]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_cache_is_shareable() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<PlanCache>();
    }
}
