//! [`PlanCache`]: built plans kept in memory, and as payloads, so that a warm start skips
//! heuristics and compilation entirely: a memory hit hands out the plan already loaded (an
//! [`Arc`] clone, microseconds), a disk hit asks cuDNN to load the plan (about a millisecond).
//!
//! Long because it is the public face of plan serving: its two dozen public methods carry the
//! cache's contract in their docs (and this module doc is its design); the work is in planner.rs,
//! specializer.rs, entry.rs and disk.rs.
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
//! over [`MAX_PAYLOAD_BYTES`](crate::payload::plan::MAX_PAYLOAD_BYTES) is refused before it is read; each is parsed and checked by
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
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use super::disk::{self, parse_with, write_atomically};
use super::entry::{accepts, serves, Entry};
// The keys are part of the cache's public paths (`engines::cache::PlanKey`).
pub use super::keys::{PlanKey, StructureKey};
use super::lru::{Evicted, Lru};
use super::planner::{PlanRequest, Planner};
use super::report::warn;
pub use super::report::{CacheSource, CacheStats, CacheWarning, CachedPlan, SeedReport};
use super::specialize::{ServeReason, Serving, Specialization};
use super::specializer::{EntryChange, Specialized, Specializer};
use super::store::TuningWarning;
use crate::backend::{BackendError, BuildOptions, Cudnn, ExecutionPlan, KernelCache, PaddedPlan};
use crate::ir::ClassGraph;
use crate::payload::plan::{
    load_payload, write, Expect, Payload, PayloadError, PayloadKey, PlanOrigin, SerializeOptions,
};
use crate::Graph;

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
    /// How a miss becomes a plan: the policy and the kernel caches.
    planner: Planner,
    /// The lazy policy's background specializations.
    specializer: Specializer,
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
            planner: Planner::new(),
            specializer: Specializer::new(),
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
        PlanCache { planner: self.planner.dynamic_shapes(kernel_budget), ..self }
    }

    /// The kernel cache this cache plans `graph`'s structure with, made if there is none; `None`
    /// without [`PlanCache::dynamic_shapes`].
    pub fn kernel_cache(&self, cudnn: &Cudnn, graph: &Graph) -> Option<KernelCache> {
        self.planner.kernel_cache(cudnn, graph)
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
    pub fn specialization(self, policy: Specialization) -> Self {
        PlanCache { planner: self.planner.specialization(policy, DEFAULT_BUDGET_BYTES), ..self }
    }

    /// The specialization policy in force (see [`PlanCache::specialization`]).
    pub fn policy(&self) -> Specialization {
        self.planner.policy()
    }

    /// Times plans for the lazy policy with `timer` instead of [`median_us`](super::median_us) (autotuning's
    /// [`measure`](super::measure)): to time with the service's own inputs, say, or to decide
    /// the swap in a test without a GPU. It runs on the worker thread, with the worker's cuDNN
    /// context.
    pub fn time_plans_with(
        self,
        timer: impl Fn(&Cudnn, &ExecutionPlan) -> Result<f64, BackendError> + Send + Sync + 'static,
    ) -> Self {
        PlanCache { specializer: self.specializer.time_with(Arc::new(timer)), ..self }
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

    /// A cache whose misses build what `store` recorded (the plan autotuning kept, with its
    /// partitioning: [`ExecutionPlan::build_chosen`], one engine config per part, no heuristics,
    /// nothing timed) where it holds an entry for the key, and plan as usual where it holds none:
    /// a store filled offline (`cudnn-graph tune`) or by an earlier process's autotuned builds
    /// serves a service that never measures. Such a plan's [`CachedPlan::reason`] is
    /// [`ServeReason::Tuned`]. An entry for another SM or cuDNN only, or one that no longer builds,
    /// is not used: a [`CacheWarning`] says why, and the miss plans as usual. Options that choose
    /// the engine themselves (`engine`, `candidate`, `build_all`, `kernel_cache`) bypass the store.
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::engines::{PlanCache, TuningFile, TuningStore};
    /// let cache = PlanCache::in_memory().with_tuning_store(TuningFile::in_memory(TuningStore::new()));
    /// assert!(cache.is_empty());
    /// ```
    pub fn with_tuning_store(self, store: impl Into<Arc<super::store::TuningFile>>) -> Self {
        PlanCache { planner: self.planner.tuning_store(store.into()), ..self }
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
        self.planner.clear();
    }

    /// The counters so far, and the bytes held now.
    pub fn stats(&self) -> CacheStats {
        let (kernel_caches, kernel_bytes) = self.planner.kernels_held();
        let (kernel_restarts, kernel_evictions) = self.planner.kernel_counters();
        let (queued, pending, swapped, kept, failed, stale) = self.specializer.counts();
        let entries = self.entries();
        CacheStats {
            memory_hits: self.memory_hits.load(Ordering::Relaxed),
            disk_hits: self.disk_hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            builds: self.builds.load(Ordering::Relaxed),
            ignored: self.ignored.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed) + kernel_evictions,
            entries: entries.len(),
            bytes: entries.bytes(),
            pinned_bytes: entries.pinned_bytes(),
            budget: entries.budget(),
            kernel_caches,
            kernel_bytes,
            kernel_restarts,
            specialization: self.policy(),
            specializations_queued: queued,
            specializations_pending: pending,
            specializations_swapped: swapped,
            specializations_kept_dynamic: kept,
            specializations_failed: failed,
            specializations_stale: stale,
        }
    }

    /// Counts and traces what an insert or update evicted.
    fn evicted(&self, evicted: Evicted<PlanKey, Entry>) {
        evicted.count(&self.evictions, "plan cache", |key| key.graph_fingerprint);
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
        let mut got = self.get_or_plan(PlanRequest { cudnn, graph, expect, options }, Planner::build)?;
        if got.source == CacheSource::Built && got.reason == ServeReason::LazyPending {
            // The dynamic-shape plan just built and stored: its specialization goes to the
            // background, or the entry records why it cannot.
            let key = PlanKey::new(cudnn, graph, expect);
            let (signing, path) = (self.key.clone(), self.path_of(&key));
            let queued = self.specializer.lazily(cudnn, graph, expect, options, &got.plan, key.clone(), signing, path);
            if let Err(reason) = queued {
                self.set_reason(&key, reason.clone());
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
    /// whatever the policy (the tuning store's recorded choice first, where the cache has a
    /// store: `cudnn-graph tune --dyn … --padded` records them): a class plan serves every length
    /// of its class for as long as it lives, so a dynamic-shape plan (and a lazy swap of it that
    /// would not reach the padded plan holding it) buys nothing.
    pub(super) fn class_plan_of(
        &self,
        cudnn: &Cudnn,
        graph: &ClassGraph,
        expect: &Expect,
        options: &BuildOptions,
    ) -> crate::Result<CachedPlan> {
        self.get_or_plan(PlanRequest { cudnn, graph: graph.masked(), expect, options }, Planner::build_static)
    }

    /// [`PlanCache::get_or_make`] with the plan `plan` makes through the planner on a miss; the
    /// tuning store's entries it could not use become the answer's warnings.
    fn get_or_plan(
        &self,
        request: PlanRequest<'_>,
        plan: impl FnOnce(&Planner, PlanRequest<'_>, &mut Vec<TuningWarning>) -> crate::Result<(ExecutionPlan, ServeReason)>,
    ) -> crate::Result<CachedPlan> {
        let PlanRequest { cudnn, graph, expect, options } = request;
        let mut tuning = Vec::new();
        let mut got = self.get_or_make(cudnn, graph, expect, options, || plan(&self.planner, request, &mut tuning))?;
        for w in tuning {
            warn(&mut got.warnings, self.planner.tuning_path(), w.to_string());
        }
        Ok(got)
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
        self.settle_specializations(self.specializer.take_done());
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
        self.settle_specializations(self.specializer.take_done());
        let query =
            Lookup { cudnn, graph, expect, options, key: PlanKey::new(cudnn, graph, expect), start: Instant::now() };
        let mut warnings = Vec::new();
        let found = self.lookup(&query, &mut warnings).map(|(plan, source, _)| (plan, source));
        (found, warnings)
    }

    /// What the entry of `key` serves now and why; `None` without an entry in memory.
    /// Specialized plans finished in the background are swapped in first.
    pub fn serving(&self, key: &PlanKey) -> Option<Serving> {
        self.settle_specializations(self.specializer.take_done());
        let mut entries = self.entries();
        let entry = entries.get(key)?;
        Some(Serving { dynamic_shape: entry.plans.first().map(|p| p.is_dynamic_shape()), reason: entry.reason.clone() })
    }

    /// Waits until the background worker has built and timed every specialization queued
    /// ([`Specialization::Lazy`]), and swaps in those that are faster; returns how many
    /// finished. For tests, benchmarks and a service that wants its specialized plans before it
    /// takes traffic; lookups swap in whatever has finished without waiting.
    pub fn wait_for_specializations(&self) -> usize {
        let done = self.specializer.wait_idle();
        let n = done.len();
        self.settle_specializations(done);
        n
    }

    /// The lazy policy's background specializations, for a class plan to queue its lengths on.
    pub(super) fn specializer(&self) -> &Specializer {
        &self.specializer
    }

    /// Swaps in what the worker has finished since the last call.
    pub(super) fn settle(&self) {
        self.settle_specializations(self.specializer.take_done());
    }

    /// Marks `key`'s entry used, if it is held (its recency, for the budget's eviction order).
    pub(super) fn touch(&self, key: &PlanKey) {
        self.entries().get(key);
    }

    /// The key payloads are signed with ([`PlanCache::with_key`]).
    pub(super) fn signing(&self) -> Option<&PayloadKey> {
        self.key.as_ref()
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

    /// Applies finished specializations as the specializer settles them
    /// ([`Specializer::settle`]): a faster plan replaces its entry, a slower or failed one
    /// records why on it, and a class plan hears its length's outcome after the change.
    fn settle_specializations(&self, done: Vec<Specialized>) {
        for done in done {
            let current = done.dynamic().is_some_and(|dynamic| {
                self.entries().get(&done.key).is_some_and(|e| e.plans.iter().any(|p| Arc::ptr_eq(p, dynamic)))
            });
            let (change, delivery) = self.specializer.settle(done, current);
            match change {
                Some(EntryChange::Replace { key, payload, payload_bytes, plan, reason }) => {
                    self.remember(key, *payload, payload_bytes, Some(plan), reason)
                }
                Some(EntryChange::Reason { key, reason }) => self.set_reason(&key, reason),
                None => {}
            }
            self.specializer.deliver(delivery);
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
        let (payload, bytes) = match disk::read_for(&path, key, self.key.as_ref()) {
            disk::Read::Missing => return None,
            disk::Read::Unreadable(reason) => {
                self.ignored.fetch_add(1, Ordering::Relaxed);
                warn(warnings, Some(&path), reason);
                return None;
            }
            disk::Read::Bad(reason) => {
                self.evict(&path, warnings, reason);
                return None;
            }
            disk::Read::Payload(payload, bytes) => (*payload, bytes),
        };
        if !accepts(q.options, &payload.plan) {
            return None;
        }
        match load_payload(q.cudnn, &payload, Some(q.graph.clone()), q.expect) {
            Ok(plan) => {
                let plan = Arc::new(plan);
                self.remember(key.clone(), payload, bytes, Some(plan.clone()), ServeReason::Loaded);
                self.disk_hits.fetch_add(1, Ordering::Relaxed);
                q.hit(CacheSource::Disk, true, &ServeReason::Loaded);
                Some((plan, CacheSource::Disk, ServeReason::Loaded))
            }
            Err(e) => {
                self.evict(&path, warnings, e.to_string());
                None
            }
        }
    }

    /// Removes an entry file that failed its checks, so that no later lookup (in this process or
    /// another) reads it again, and says so: it is never executed, and never fatal.
    fn evict(&self, path: &Path, warnings: &mut Vec<CacheWarning>, reason: String) {
        self.ignored.fetch_add(1, Ordering::Relaxed);
        warn(warnings, Some(path), format!("{}: {reason}", disk::remove(path)));
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
            match disk::read_payload(&path, self.key.as_ref()) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_shareable() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<PlanCache>();
    }
}
