//! [`Planner`]: how a graph becomes a plan in plan serving, and the only caller of
//! [`ExecutionPlan::build`] above the backend. It owns the kernel caches of dynamic shapes (one per
//! structure, [`StructureKey`]) and the choice between explicit, eager, static-only and dynamic
//! planning that the cache's [`Specialization`] policy makes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::keys::{PlanKey, StructureKey};
use super::lru::{Evicted, Lru, Weigh};
use super::specialize::{ServeReason, Specialization};
use super::store::{TuningFile, TuningWarning};
use crate::backend::{BackendError, BuildOptions, Cudnn, EngineConfig, ExecutionPlan, KernelCache};
use crate::payload::plan::Expect;
use crate::Graph;

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

/// What a miss asks the planner for: `graph`'s plan for `cudnn`, built with `options`, to be
/// stored under the key `expect` completes (and looked up in the tuning store under it).
#[derive(Clone, Copy)]
pub(super) struct PlanRequest<'a> {
    pub(super) cudnn: &'a Cudnn,
    pub(super) graph: &'a Graph,
    pub(super) expect: &'a Expect,
    pub(super) options: &'a BuildOptions,
}

/// Plans graphs for a [`PlanCache`](crate::engines::PlanCache) as its policy says, with the kernel caches of their
/// structures ([`PlanCache::dynamic_shapes`](crate::engines::PlanCache::dynamic_shapes)).
pub(super) struct Planner {
    /// Kernel caches by structure, with [`PlanCache::dynamic_shapes`](crate::engines::PlanCache::dynamic_shapes).
    kernels: Option<Mutex<Lru<StructureKey, Kernels>>>,
    /// The specialization policy as set ([`PlanCache::specialization`](crate::engines::PlanCache::specialization)); unset, eager without
    /// dynamic shapes and none with them.
    policy: Option<Specialization>,
    /// Kernel caches started over ([`CacheStats::kernel_restarts`](super::CacheStats::kernel_restarts)).
    restarts: AtomicU64,
    /// Kernel caches evicted to keep within their budget.
    evictions: AtomicU64,
    /// The tuning store whose recorded choices a miss builds first
    /// ([`PlanCache::with_tuning_store`](crate::engines::PlanCache::with_tuning_store)).
    tuning: Option<Arc<TuningFile>>,
}

impl Planner {
    /// A planner without dynamic shapes, eager.
    pub(super) fn new() -> Self {
        Planner { kernels: None, policy: None, restarts: AtomicU64::new(0), evictions: AtomicU64::new(0), tuning: None }
    }

    /// A miss builds what `store` recorded for its key, where it holds an entry
    /// ([`PlanCache::with_tuning_store`](crate::engines::PlanCache::with_tuning_store)).
    pub(super) fn tuning_store(self, store: Arc<TuningFile>) -> Self {
        Planner { tuning: Some(store), ..self }
    }

    /// The tuning store's file, if it has one.
    pub(super) fn tuning_path(&self) -> Option<&std::path::Path> {
        self.tuning.as_deref().and_then(TuningFile::path)
    }

    /// Dynamic shapes on, kernel caches kept within `kernel_budget` bytes
    /// ([`PlanCache::dynamic_shapes`](crate::engines::PlanCache::dynamic_shapes)).
    pub(super) fn dynamic_shapes(self, kernel_budget: usize) -> Self {
        Planner { kernels: Some(Mutex::new(Lru::new(kernel_budget))), ..self }
    }

    /// The policy set to `policy` ([`PlanCache::specialization`](crate::engines::PlanCache::specialization)): one that serves dynamic-shape
    /// plans turns dynamic shapes on, with the default budget unless one was set.
    pub(super) fn specialization(mut self, policy: Specialization, default_budget: usize) -> Self {
        if policy != Specialization::Eager && self.kernels.is_none() {
            self.kernels = Some(Mutex::new(Lru::new(default_budget)));
        }
        Planner { policy: Some(policy), ..self }
    }

    /// The specialization policy in force (see [`PlanCache::specialization`](crate::engines::PlanCache::specialization)).
    pub(super) fn policy(&self) -> Specialization {
        match (self.policy, &self.kernels) {
            (Some(policy), _) => policy,
            (None, Some(_)) => Specialization::None,
            (None, None) => Specialization::Eager,
        }
    }

    /// `graph` planned as `options` ask, whatever the policy: what a class plan, a background
    /// specialization and the router build.
    pub(super) fn as_asked(
        cudnn: &Cudnn,
        graph: &Graph,
        options: &BuildOptions,
    ) -> Result<ExecutionPlan, BackendError> {
        ExecutionPlan::build(cudnn, graph, options)
    }

    /// The kernel cache this planner plans `graph`'s structure with, made if there is none;
    /// `None` without dynamic shapes.
    pub(super) fn kernel_cache(&self, cudnn: &Cudnn, graph: &Graph) -> Option<KernelCache> {
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
                self.restarts.fetch_add(1, Ordering::Relaxed);
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
        evicted.count(&self.evictions, "kernel cache", |key| key.structure_fingerprint);
    }

    /// Builds `graph` for [`PlanCache::get_or_build`](crate::engines::PlanCache::get_or_build) as the policy says: as the options ask
    /// where they choose the engine themselves, the tuning store's recorded choice where it has
    /// one for the key (`expect`'s binding), specialized to its shape (eager), as an ordinary
    /// graph where the structure plans only statically, or with the structure's kernel cache and
    /// engine under [`PlanCache::dynamic_shapes`](crate::engines::PlanCache::dynamic_shapes); with why. A store entry not used
    /// (another target's, one that does not build) is pushed to `warnings`.
    pub(super) fn build(
        &self,
        request: PlanRequest<'_>,
        warnings: &mut Vec<TuningWarning>,
    ) -> crate::Result<(ExecutionPlan, ServeReason)> {
        if let Some(chosen) = self.chosen(request, warnings) {
            return chosen;
        }
        let PlanRequest { cudnn, graph, options, .. } = request;
        let policy = self.policy();
        let key = StructureKey::new(cudnn, graph);
        let kernels = if policy == Specialization::Eager { None } else { self.kernels_of(&key) };
        let Some((cache, engine, static_only)) = kernels else {
            return Ok((Self::as_asked(cudnn, graph, options)?, ServeReason::Specialized));
        };
        if static_only {
            return Ok((Self::as_asked(cudnn, graph, options)?, ServeReason::StaticOnly));
        }
        let dynamic = options.clone().dynamic_shapes(cache.clone());
        let built = match engine {
            Some(engine) => {
                let known = BuildOptions { engine: Some(engine), ..dynamic.clone() };
                match Self::as_asked(cudnn, graph, &known) {
                    Ok(plan) => Ok(plan),
                    Err(e) => {
                        tracing::debug!(error = %e, "the structure's engine does not plan this shape: heuristics");
                        Self::as_asked(cudnn, graph, &dynamic)
                    }
                }
            }
            None => Self::as_asked(cudnn, graph, &dynamic),
        }?;
        self.built_with_kernels(&key, &cache, &built);
        let reason = match (built.is_dynamic_shape(), policy) {
            (false, _) => ServeReason::StaticOnly,
            (true, Specialization::Lazy) => ServeReason::LazyPending,
            (true, _) => ServeReason::DynamicByPolicy,
        };
        Ok((built, reason))
    }

    /// Builds `graph` at its own shape, never dynamic-shape: as the options ask where they choose
    /// the engine, else the tuning store's recorded choice, else heuristics'. What a padded class
    /// plan is built with ([`PlanCache::class_plan`](crate::engines::PlanCache::class_plan)): it
    /// serves every length of its class, so a dynamic-shape plan would buy nothing.
    pub(super) fn build_static(
        &self,
        request: PlanRequest<'_>,
        warnings: &mut Vec<TuningWarning>,
    ) -> crate::Result<(ExecutionPlan, ServeReason)> {
        match self.chosen(request, warnings) {
            Some(chosen) => chosen,
            None => Ok((Self::as_asked(request.cudnn, request.graph, request.options)?, ServeReason::Specialized)),
        }
    }

    /// The plan chosen before any policy applies: the options' own choice of engine, or the
    /// tuning store's recorded one (a store entry not used goes to `warnings`); `None` when
    /// neither chooses.
    fn chosen(
        &self,
        request: PlanRequest<'_>,
        warnings: &mut Vec<TuningWarning>,
    ) -> Option<crate::Result<(ExecutionPlan, ServeReason)>> {
        let PlanRequest { cudnn, graph, expect, options } = request;
        let chooses = options.engine.is_some()
            || options.candidate.is_some()
            || options.build_all
            || options.kernel_cache.is_some();
        if chooses {
            return Some(
                Self::as_asked(cudnn, graph, options).map(|p| (p, ServeReason::OptionsChoose)).map_err(Into::into),
            );
        }
        let store = self.tuning.as_ref()?;
        match store.recorded_plan(cudnn, graph, &PlanKey::new(cudnn, graph, expect), options) {
            Ok(Some(plan)) => Some(Ok((plan, ServeReason::Tuned))),
            Ok(None) => None,
            Err(w) => {
                warnings.push(w);
                None
            }
        }
    }

    /// Forgets every kernel cache (a plan still held elsewhere keeps its own).
    pub(super) fn clear(&self) {
        if let Some(kernels) = &self.kernels {
            kernels.lock().unwrap_or_else(PoisonError::into_inner).clear();
        }
    }

    /// Kernel caches held now, and their bytes.
    pub(super) fn kernels_held(&self) -> (usize, usize) {
        match &self.kernels {
            Some(k) => {
                let k = k.lock().unwrap_or_else(PoisonError::into_inner);
                (k.len(), k.bytes())
            }
            None => (0, 0),
        }
    }

    /// Kernel caches started over, and evicted, so far.
    pub(super) fn kernel_counters(&self) -> (u64, u64) {
        (self.restarts.load(Ordering::Relaxed), self.evictions.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
