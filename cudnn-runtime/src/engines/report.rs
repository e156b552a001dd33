//! What the plan cache reports: where a plan came from ([`CacheSource`], [`CachedPlan`]), entries
//! it ignored ([`CacheWarning`]), its counters ([`CacheStats`]) and what seeding loaded
//! ([`SeedReport`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::specialize::{ServeReason, Specialization};
use crate::backend::ExecutionPlan;

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

/// Records a warning, and logs it.
pub(super) fn warn(warnings: &mut Vec<CacheWarning>, path: Option<&Path>, reason: String) {
    let w = CacheWarning { path: path.map(Path::to_path_buf), reason };
    tracing::warn!("{w}");
    warnings.push(w);
}

/// A plan from [`PlanCache::get_or_build`](crate::engines::PlanCache::get_or_build).
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

/// The counters of a [`PlanCache`](crate::engines::PlanCache) ([`PlanCache::stats`](crate::engines::PlanCache::stats)): lookups, builds, evictions, and the
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
    /// Bytes held now (see [`PlanCache::with_budget`](crate::engines::PlanCache::with_budget) for what an entry weighs).
    pub bytes: usize,
    /// Kernel caches held now ([`PlanCache::dynamic_shapes`](crate::engines::PlanCache::dynamic_shapes)).
    pub kernel_caches: usize,
    /// Their bytes: each cache's JSON (`CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION`), its
    /// compiled kernels serialized, measured after each plan built with it.
    pub kernel_bytes: usize,
    /// Kernel caches replaced by a new one for their structure because a new shape's finalize
    /// cost more than the average of the plans made with them (see [`PlanCache::dynamic_shapes`](crate::engines::PlanCache::dynamic_shapes)).
    pub kernel_restarts: u64,
    /// Of `bytes`, those of entries pinned now: a plan held outside the cache (by a caller, or
    /// borrowed by a CUDA graph that replays it) is never evicted.
    pub pinned_bytes: usize,
    /// The budget in bytes.
    pub budget: usize,
    /// The specialization policy ([`PlanCache::specialization`](crate::engines::PlanCache::specialization)).
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

/// What [`PlanCache::seed_from_dir`](crate::engines::PlanCache::seed_from_dir) loaded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeedReport {
    /// Payloads added.
    pub seeded: usize,
    /// Files skipped, and why.
    pub warnings: Vec<CacheWarning>,
}
