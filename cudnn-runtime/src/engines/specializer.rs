//! [`Specializer`]: the lazy policy's state machine. It queues the background build and timing
//! of a shape's specialized plan (for a dynamic-shape entry, or for a length of a
//! [`ClassPlan`](super::ClassPlan)), and settles each finished one into what the cache applies
//! to its entry ([`EntryChange`]) and what a class plan hears ([`Arrival`]), counting every
//! outcome.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use super::disk::{parse_with, write_atomically};
use super::keys::PlanKey;
use super::planner::Planner;
use super::specialize::{
    median_us, specialized_is_faster, Contexts, PlanTimer, PushError, ServeReason, Target, Task, Worker,
    MAX_PENDING_SPECIALIZATIONS,
};
use crate::backend::{BuildOptions, Cudnn, ExecutionPlan};
use crate::payload::plan::{write, Expect, Payload, PayloadKey, PlanOrigin, SerializeOptions};
use crate::Graph;

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

impl Specialized {
    /// The dynamic-shape plan it was timed against, where it was for an entry's.
    pub(super) fn dynamic(&self) -> Option<&Arc<ExecutionPlan>> {
        match &self.against {
            Against::Dynamic(plan) => Some(plan),
            Against::Padded { .. } => None,
        }
    }
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

/// What the cache changes in an entry once a specialization is settled.
pub(super) enum EntryChange {
    /// The faster plan replaces the entry of `key` (the cache's `remember`).
    Replace { key: PlanKey, payload: Box<Payload>, payload_bytes: usize, plan: Arc<ExecutionPlan>, reason: ServeReason },
    /// The entry of `key` keeps its plan, now for `reason`.
    Reason { key: PlanKey, reason: ServeReason },
}

/// A class plan's arrival, to hand over once the cache applied the change.
pub(super) type Delivery = (Weak<Inbox>, Vec<usize>, Arrival);

/// The lazy policy's background builds: the worker, how it times plans, and its counters.
pub(super) struct Specializer {
    /// How the lazy policy times plans.
    timer: Arc<PlanTimer>,
    /// The background builds (its thread starts with the first).
    worker: Worker<Specialized>,
    counters: SpecializationCounters,
}

impl Specializer {
    /// A specializer timing with [`median_us`], its worker not started.
    pub(super) fn new() -> Self {
        Specializer { timer: Arc::new(median_us), worker: Worker::new(), counters: SpecializationCounters::default() }
    }

    /// Times plans with `timer` instead.
    pub(super) fn time_with(self, timer: Arc<PlanTimer>) -> Self {
        Specializer { timer, ..self }
    }

    /// Specializations finished since the last call.
    pub(super) fn take_done(&self) -> Vec<Specialized> {
        self.worker.take_done()
    }

    /// Waits until every queued specialization finished; those since the last call.
    pub(super) fn wait_idle(&self) -> Vec<Specialized> {
        self.worker.wait_idle()
    }

    /// Queues the background specialization of `plan`, the dynamic-shape plan just built and
    /// stored under `key` for `graph`; the entry's new reason (counted as failed) if it cannot
    /// be queued. `signing` and `path` are the cache's key and the entry's file, where a faster
    /// plan's payload goes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn lazily(
        &self,
        cudnn: &Cudnn,
        graph: &Graph,
        expect: &Expect,
        options: &BuildOptions,
        plan: &Arc<ExecutionPlan>,
        key: PlanKey,
        signing: Option<PayloadKey>,
        path: Option<std::path::PathBuf>,
    ) -> Result<(), ServeReason> {
        let Some(target) = Target::of(cudnn) else {
            return Err(self.not_queued(&key, ServeReason::LazyFailed { reason: "the context has no target".into() }));
        };
        let (graph, options, expect, dynamic) = (graph.clone(), options.clone(), expect.clone(), plan.clone());
        let timer = self.timer.clone();
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
            Ok(()) => Ok(()),
            Err(PushError::Full) => Err(self.not_queued(&key, ServeReason::LazyQueueFull)),
            Err(PushError::Spawn(e)) => Err(self.not_queued(
                &key,
                ServeReason::LazyFailed { reason: format!("the specialization worker cannot start: {e}") },
            )),
        }
    }

    /// Queues a background specialization on the worker, counted.
    pub(super) fn queue(&self, task: Task<Specialized>, if_panicked: Specialized) -> Result<(), PushError> {
        let key = if_panicked.key.graph_fingerprint;
        self.worker.push(task, if_panicked, MAX_PENDING_SPECIALIZATIONS)?;
        self.counters.queued.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(fingerprint = format_args!("{key:#018x}"), "specialization queued");
        Ok(())
    }

    /// Whether a task queued now would be refused: [`MAX_PENDING_SPECIALIZATIONS`] are waiting.
    pub(super) fn queue_is_full(&self) -> bool {
        self.worker.waiting() >= MAX_PENDING_SPECIALIZATIONS
    }

    /// Counts a specialization that could not be queued (the entry-less kind: a class plan's).
    pub(super) fn count_not_queued(&self) {
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts and traces that `key`'s specialization was not queued; `reason` is why.
    fn not_queued(&self, key: &PlanKey, reason: ServeReason) -> ServeReason {
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(fingerprint = format_args!("{:#018x}", key.graph_fingerprint), reason = %reason, "specialization not queued");
        reason
    }

    /// Settles a finished specialization into what the cache changes in its entry and what a
    /// class plan hears. For an entry's dynamic-shape plan (`current`: whether the entry still
    /// holds the plan it was timed against; if not, it is dropped as stale): a faster
    /// specialized plan replaces the entry's plans (a caller or CUDA graph holding one keeps it),
    /// a slower or failed one leaves the entry as it is with the reason recorded. For a class
    /// plan's length: a faster exact plan is stored as the call graph's entry
    /// ([`ServeReason::FasterThanPadded`]) and the class plan hears the outcome either way.
    pub(super) fn settle(&self, done: Specialized, current: bool) -> (Option<EntryChange>, Option<Delivery>) {
        let Specialized { key, against, outcome } = done;
        let fingerprint = format_args!("{:#018x}", key.graph_fingerprint).to_string();
        let counters = &self.counters;
        let (inbox, length) = match against {
            Against::Dynamic(_) if !current => {
                counters.stale.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(fingerprint, "specialization dropped: its entry was replaced or evicted");
                return (None, None);
            }
            Against::Dynamic(_) => {
                let change = match outcome {
                    Outcome::Faster { plan, payload, payload_bytes, dynamic_us, specialized_us } => {
                        let reason = ServeReason::LazyFaster { dynamic_us, specialized_us };
                        tracing::debug!(fingerprint, dynamic_us, specialized_us, "specialized plan swapped in");
                        counters.swapped.fetch_add(1, Ordering::Relaxed);
                        EntryChange::Replace { key, payload, payload_bytes, plan, reason }
                    }
                    Outcome::NotFaster { dynamic_us, specialized_us } => {
                        tracing::debug!(fingerprint, dynamic_us, specialized_us, "dynamic-shape plan kept: not slower");
                        counters.kept.fetch_add(1, Ordering::Relaxed);
                        EntryChange::Reason { key, reason: ServeReason::LazyNotFaster { dynamic_us, specialized_us } }
                    }
                    Outcome::Failed(reason) => {
                        tracing::debug!(fingerprint, reason = %reason, "specialization failed: dynamic-shape plan kept");
                        counters.failed.fetch_add(1, Ordering::Relaxed);
                        EntryChange::Reason { key, reason: ServeReason::LazyFailed { reason } }
                    }
                };
                return (Some(change), None);
            }
            Against::Padded { inbox, length } => (inbox, length),
        };
        let (change, arrival) = match outcome {
            Outcome::Faster { plan, payload, payload_bytes, dynamic_us: padded_us, specialized_us: exact_us } => {
                tracing::debug!(fingerprint, padded_us, exact_us, "exact plan swapped in for a padded length");
                let weak = Arc::downgrade(&plan);
                let reason = ServeReason::FasterThanPadded { padded_us, exact_us };
                counters.swapped.fetch_add(1, Ordering::Relaxed);
                let change = EntryChange::Replace { key: key.clone(), payload, payload_bytes, plan, reason };
                (Some(change), Arrival::Faster { key, plan: weak, padded_us, exact_us })
            }
            Outcome::NotFaster { dynamic_us: padded_us, specialized_us: exact_us } => {
                tracing::debug!(fingerprint, padded_us, exact_us, "padded plan kept: the exact plan is not faster");
                counters.kept.fetch_add(1, Ordering::Relaxed);
                (None, Arrival::NotFaster { padded_us, exact_us })
            }
            Outcome::Failed(reason) => {
                tracing::debug!(fingerprint, reason = %reason, "exact plan failed: padded plan kept");
                counters.failed.fetch_add(1, Ordering::Relaxed);
                (None, Arrival::Failed(reason))
            }
        };
        (change, Some((inbox, length, arrival)))
    }

    /// Hands a class plan its arrival, if it still lives (else counts it stale).
    pub(super) fn deliver(&self, delivery: Option<Delivery>) {
        let Some((inbox, length, arrival)) = delivery else { return };
        match inbox.upgrade() {
            Some(inbox) => inbox.lock().unwrap_or_else(PoisonError::into_inner).push((length, arrival)),
            None => {
                self.counters.stale.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Specializations queued, waiting or running now, swapped in, kept dynamic, failed and
    /// stale, for [`CacheStats`](super::CacheStats).
    pub(super) fn counts(&self) -> (u64, usize, u64, u64, u64, u64) {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        (load(&c.queued), self.worker.pending(), load(&c.swapped), load(&c.kept), load(&c.failed), load(&c.stale))
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
    let plan = match Planner::as_asked(cudnn, graph, options) {
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
