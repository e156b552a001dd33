//! Engines over the backend and the reference executor: where a graph runs and how fast it gets
//! there.
//!
//! 1. [`engine`]: the [`Engine`] trait, [`EngineId`]s and the [`Router`], which sends each graph
//!    to cuDNN or to an engine written in Rust (the CPU reference among them).
//! 2. [`autotune`](fn@autotune): times every built candidate of a plan and selects the fastest.
//! 3. [`cache`]: a [`PlanCache`] (in memory, optionally on disk) makes warm starts skip
//!    heuristics and compilation; it is `Sync`, hands out shared plans (`Arc<ExecutionPlan>`)
//!    and keeps within a byte budget, least recently used first (`lru.rs`).
//! 4. [`specialize`]: the specialization policy of a cache with dynamic shapes (eager, lazy,
//!    none), what each shape is served and why, and the lazy policy's background worker.
//! 5. [`class_plan`]: every length of a shape class on one padded class plan, the policy
//!    deciding when a length gets its exact plan.
//!
//! Split by type (issue 32). Following a graph from the cache to its first built plan crosses three
//! files: `cache.rs` ([`PlanCache::get_or_build`], a miss) → `planner.rs` (the `Planner`, the
//! policy's choice) → `backend/plan/build.rs` ([`ExecutionPlan::build`](crate::backend::ExecutionPlan::build)).
//!
//! | file | holds |
//! |---|---|
//! | `cache.rs` | [`PlanCache`]: storage only (memory tier, budget, pinning, lookups, stats) |
//! | `keys.rs` | [`PlanKey`], [`StructureKey`] |
//! | `planner.rs` | `Planner`: the plan cache's only caller of `ExecutionPlan::build` (the tuning store builds its own); kernel caches; explicit, tuned (the cache's tuning store), eager, static-only or dynamic planning |
//! | `specializer.rs` | `Specializer`: the lazy policy's state machine, settling outcomes the cache applies |
//! | `specialize.rs` | the policy, [`ServeReason`], the background worker |
//! | `entry.rs`, `disk.rs`, `report.rs` | a memory entry; entry files; what the cache reports |
//! | `class_plan.rs` | [`ClassPlan`] |
//! | `autotune.rs`, `measure.rs`, `tuning.rs`, `tuning_report.rs` | [`autotune`](fn@autotune), [`build_autotuned`] (through the tuning store); timing on the GPU; its options; its reports |
//! | `repro.rs` | [`repro`]: outputs against the reference under cudnn-frontend's tolerances, part-by-part bisection, host-array execution, saved inputs |
//! | `store.rs` | [`TuningStore`], [`TuningFile`]: what autotuning kept, per key, versioned and mergeable, behind a locked file |
//! | `engine.rs`, `lru.rs` | [`Engine`], [`Router`]; the LRU both budgets use |
//!
//! These sat in `backend` before; they moved here because they use the backend *and* the
//! reference executor (and plan payloads), so the backend can stay below them.

mod autotune;
pub mod cache;
pub mod class_plan;
mod disk;
pub mod engine;
mod entry;
mod keys;
mod lru;
mod measure;
mod planner;
mod report;
pub mod repro;
pub mod specialize;
mod specializer;
pub mod store;
mod tuning;
mod tuning_report;

pub use autotune::{autotune, build_autotuned};
pub use cache::{
    CacheSource, CacheStats, CacheWarning, CachedPlan, PlanCache, PlanKey, SeedReport, StructureKey,
    DEFAULT_BUDGET_BYTES, SHARED_PLANS,
};
pub use class_plan::{ClassPlan, ClassPlanStats, LengthServing, MAX_CLASS_LENGTHS};
pub use engine::{Engine, EngineId, Router};
pub use measure::{measure, measure_padded};
pub use specialize::{
    median_us, specialized_is_faster, PlanTimer, ServeReason, Serving, Specialization, MAX_PENDING_SPECIALIZATIONS,
    SWAP_MARGIN,
};
pub use store::{
    CandidateTime, MergeConflict, MergeReport, PartitioningTime, TuneSource, TunedBuild, TunedPart, TunedPlan,
    TuningFile, TuningStore, TuningStoreError, TuningWarning, MAX_TUNING_STORE_BYTES, TUNING_FORMAT, TUNING_STORE_ENV,
};
pub use tuning::{AutotuneOptions, AutotuneProgress, Fill, ProgressFn, TuningStoreSetting};
pub use tuning_report::{AutotuneReport, PartitioningTiming, Timing};
