//! [`ClassPlan`]: every length of a shape class served on one padded class plan
//! ([`PaddedPlan`]), with the plan cache's [`Specialization`] policy deciding when a length gets
//! the plan of its exact shape instead (issue 19).
//!
//! A padded call costs a few driver calls of host work but the class bound's device time (its
//! copies, and for attention the bound's S²: `docs/benchmarks.md`, "Padded class plans"). The
//! exact plan of a length costs a plan build (38–45 ms for attention on the H100) and then its
//! own device time. The policies, as [`PlanCache::get_or_build`] has them for dynamic-shape
//! plans:
//!
//! - [`Specialization::None`]: every call runs padded.
//! - [`Specialization::Lazy`]: a new length runs padded at once, and at its first call (or its
//!   `n`th: [`ClassPlan::specialize_after`]) a task on the cache's background worker builds the
//!   exact plan, times the call both ways (the padded call with
//!   [`measure_padded`], the exact plan with [`measure`]: the same CUDA-event method), and, if
//!   the exact plan is faster by more than [`SWAP_MARGIN`](super::SWAP_MARGIN), stores it in the
//!   cache ([`ServeReason::FasterThanPadded`]); from the next call on that length runs exact.
//! - [`Specialization::Eager`]: a new length's first call builds (or looks up) its exact plan
//!   and runs it; padded only where the exact plan does not build.
//!
//! The exact plans live in the plan cache, within its byte budget: the class plan holds them
//! weakly and marks them used at each call (so the cache evicts the lengths least used), and a
//! length whose exact plan was evicted starts over. The lengths a class plan tracks are bounded
//! too ([`MAX_CLASS_LENGTHS`], least recently used forgotten first), so a workload of any number
//! of shapes stays within the cache's budget. [`ClassPlan::serving`] says what a length runs and
//! why; [`ClassPlan::stats`] counts. [`ClassPlan::warm_up`] runs the class plan once when it is
//! made, so that its first call does not pay for loading its kernels.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, PoisonError, Weak};

use cudarc::driver::CudaSlice;

use super::cache::{PlanCache, PlanKey};
use super::measure::{measure, measure_padded};
use super::planner::Planner;
use super::specialize::{Contexts, PushError, Specialization, Target, Task};
use super::specializer::{faster_or_not, Against, Arrival, Inbox, Outcome, Specialized};
use super::tuning::AutotuneOptions;
use crate::backend::{BackendError, BuildOptions, Cudnn, DeviceBuffer, ExecutionPlan, PaddedPlan};
use crate::ir::{Binding, ClassGraph, PadError};
use crate::payload::plan::{Expect, PayloadKey};
use crate::Graph;

#[cfg(doc)]
use super::specialize::ServeReason;

/// How many lengths one [`ClassPlan`] tracks at most; past that the least recently used length
/// not being specialized is forgotten (its exact plan, if any, stays in the cache, which evicts
/// it by its budget; a later call of it starts over).
pub const MAX_CLASS_LENGTHS: usize = 4096;

/// How many recent calls a [`ClassPlan`] keeps bound.
const RECENT_CALLS: usize = 8;

/// What a length of a [`ClassPlan`] runs, and why ([`ClassPlan::serving`]).
#[derive(Debug, Clone, PartialEq)]
pub enum LengthServing {
    /// The padded class plan, as the policy says ([`Specialization::None`]).
    Padded,
    /// The padded class plan: the length has had fewer calls than
    /// [`ClassPlan::specialize_after`] asks before its exact plan is built
    /// ([`Specialization::Lazy`]).
    Cold,
    /// The padded class plan, while the exact plan is built and timed in the background
    /// ([`Specialization::Lazy`]).
    Pending,
    /// The exact plan, built or looked up at the length's first call ([`Specialization::Eager`]).
    Exact,
    /// The exact plan, swapped in: the call timed faster on it than padded.
    ExactFaster {
        /// The call on the padded class plan, µs per execute.
        padded_us: f64,
        /// The exact plan, µs per execute.
        exact_us: f64,
    },
    /// The padded class plan, kept: the exact plan was not faster by more than
    /// [`SWAP_MARGIN`](super::SWAP_MARGIN).
    PaddedFaster {
        /// The call on the padded class plan, µs per execute.
        padded_us: f64,
        /// The exact plan, µs per execute.
        exact_us: f64,
    },
    /// The padded class plan, kept: the exact plan could not be built, timed or stored.
    Failed {
        /// What went wrong.
        reason: String,
    },
    /// The padded class plan: the cache's specialization queue was full
    /// ([`MAX_PENDING_SPECIALIZATIONS`](super::MAX_PENDING_SPECIALIZATIONS)); the length's next
    /// call queues it again.
    QueueFull,
}

impl LengthServing {
    /// Whether the length runs its exact plan.
    pub fn is_exact(&self) -> bool {
        matches!(self, LengthServing::Exact | LengthServing::ExactFaster { .. })
    }
}

impl std::fmt::Display for LengthServing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LengthServing::Padded => f.write_str("padded class plan (policy: none)"),
            LengthServing::Cold => f.write_str("padded class plan: not called often enough yet to specialize"),
            LengthServing::Pending => f.write_str("padded class plan while the exact plan is built"),
            LengthServing::Exact => f.write_str("exact plan (policy: eager)"),
            LengthServing::ExactFaster { padded_us, exact_us } => {
                write!(f, "exact plan swapped in: {exact_us:.2} µs against {padded_us:.2} µs padded")
            }
            LengthServing::PaddedFaster { padded_us, exact_us } => {
                write!(f, "padded class plan kept: {padded_us:.2} µs against {exact_us:.2} µs exact")
            }
            LengthServing::Failed { reason } => write!(f, "padded class plan kept: {reason}"),
            LengthServing::QueueFull => f.write_str("padded class plan: the specialization queue was full"),
        }
    }
}

/// The counters of a [`ClassPlan`] ([`ClassPlan::stats`]); its background builds count in the
/// cache's [`CacheStats`](super::CacheStats) too (`specializations_*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassPlanStats {
    /// Calls run on the padded class plan.
    pub padded_calls: u64,
    /// Calls run on an exact plan.
    pub exact_calls: u64,
    /// Lengths tracked now.
    pub lengths: usize,
    /// Of those, lengths whose exact plan the class plan holds now.
    pub exact_plans: usize,
    /// Exact plans found evicted by the cache at a call: the length started over.
    pub exact_evicted: u64,
    /// Lengths forgotten to keep within [`MAX_CLASS_LENGTHS`].
    pub forgotten: u64,
}

/// Every length of a shape class on one padded class plan, with exact plans where the cache's
/// policy builds them ([module documentation](self); made by [`PlanCache::class_plan`]).
///
/// ```no_run
/// # use cudnn_runtime as cudnn_graph;
/// # use std::sync::Arc;
/// # use cudnn_graph::backend::{BuildOptions, Cudnn, DeviceBuffer};
/// # use cudnn_graph::engines::{PlanCache, Specialization};
/// # use cudnn_graph::payload::plan::Expect;
/// # fn attention(s: i64) -> cudnn_graph::Graph { unimplemented!() }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let ctx = cudnn_graph::backend::cudarc::driver::CudaContext::new(0)?;
/// # let cudnn = Cudnn::new(ctx.default_stream())?;
/// # let (q, k, v, mut o) = (ctx.default_stream().alloc_zeros::<half::bf16>(1)?, ctx.default_stream().alloc_zeros::<half::bf16>(1)?, ctx.default_stream().alloc_zeros::<half::bf16>(1)?, ctx.default_stream().alloc_zeros::<half::bf16>(1)?);
/// let cache = Arc::new(PlanCache::in_memory().specialization(Specialization::Lazy));
/// let mut plan = cache.class_plan(&cudnn, &attention(512), &Expect::default(), &BuildOptions::default())?;
/// let mut io = [DeviceBuffer::input(&q), DeviceBuffer::input(&k), DeviceBuffer::input(&v), DeviceBuffer::output(&mut o)];
/// plan.execute(&cudnn, &attention(300), &mut io)?; // padded at once; S = 300's exact plan queued
/// plan.wait_for_specializations();                  // or let later calls pick it up
/// println!("{}", plan.serving(&attention(300))?.unwrap()); // e.g. "exact plan swapped in: ..."
/// # Ok(())
/// # }
/// ```
pub struct ClassPlan {
    cache: Arc<PlanCache>,
    padded: PaddedPlan,
    policy: Specialization,
    expect: Expect,
    options: BuildOptions,
    lengths: Lengths<ExecutionPlan>,
    /// The calls bound most recently, most recent first, with their bindings and lengths: a
    /// call equal to one of them is not validated and bound again (4 µs of host work for
    /// attention backward, a tenth of a microsecond to compare).
    recent: VecDeque<(Graph, Binding, Vec<usize>)>,
    inbox: Arc<Inbox>,
    /// The exact plans' workspace, grown to the largest asked.
    workspace: Option<CudaSlice<u8>>,
    padded_calls: u64,
    exact_calls: u64,
    specialize_after: u64,
}

impl std::fmt::Debug for ClassPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClassPlan")
            .field("padded", &self.padded)
            .field("policy", &self.policy)
            .field("stats", &self.stats())
            .finish()
    }
}

impl ClassPlan {
    pub(super) fn new(cache: Arc<PlanCache>, padded: PaddedPlan, expect: Expect, options: BuildOptions) -> Self {
        let policy = cache.policy();
        ClassPlan {
            cache,
            padded,
            policy,
            expect,
            options,
            lengths: Lengths::default(),
            recent: VecDeque::with_capacity(RECENT_CALLS),
            inbox: Arc::default(),
            workspace: None,
            padded_calls: 0,
            exact_calls: 0,
            specialize_after: 1,
        }
    }

    /// Under [`Specialization::Lazy`], queues a length's exact plan at its `calls`th call (at
    /// least 1; 1, the default, is at its first, as TensorRT-RTX's lazy specialization). Each
    /// background build costs the worker a plan build and its timing, and the caller host time
    /// while cuDNN loads the new plan's kernels (`docs/benchmarks.md`, "Class plans under a
    /// random workload"): a workload of many lengths each seen a few times is better served with
    /// a threshold, or with [`Specialization::None`].
    pub fn specialize_after(mut self, calls: u64) -> Self {
        self.specialize_after = calls.max(1);
        self
    }

    /// The padded class plan.
    pub fn padded(&self) -> &PaddedPlan {
        &self.padded
    }

    /// The policy, the cache's when the class plan was made.
    pub fn policy(&self) -> Specialization {
        self.policy
    }

    /// The counters.
    pub fn stats(&self) -> ClassPlanStats {
        ClassPlanStats {
            padded_calls: self.padded_calls,
            exact_calls: self.exact_calls,
            lengths: self.lengths.map.len(),
            exact_plans: self.lengths.map.values().filter(|l| l.exact.is_some()).count(),
            exact_evicted: self.lengths.evicted,
            forgotten: self.lengths.forgotten,
        }
    }

    /// Runs `call` (the class graph at lengths up to the class's: [`PaddedPlan::execute`], whose
    /// `io` and checks these are) on its length's exact plan if it has one, else on the padded
    /// plan; a new length is first handled as the policy says ([module documentation](self)).
    /// Exact plans finished in the background since the last call are taken up first.
    /// Enqueued on the context's stream.
    ///
    /// # Errors
    /// A call that does not bind to the class ([`PadError`], naming the tensor and axis), a
    /// buffer that does not fit its tensor, or a failed execute. An exact plan that does not
    /// build is not an error: the length runs padded ([`LengthServing::Failed`]).
    pub fn execute(&mut self, cudnn: &Cudnn, call: &Graph, io: &mut [DeviceBuffer<'_>]) -> crate::Result<()> {
        self.settle();
        self.bind(call)?;
        let length = self.recent[0].2.clone();
        if let Some((key, plan)) = self.lengths.exact(&length) {
            self.cache.touch(&key);
            return self.execute_exact(cudnn, &plan, io);
        }
        match self.policy {
            Specialization::None => {
                self.lengths.call(&length, || LengthServing::Padded);
            }
            Specialization::Eager => {
                if self.lengths.call(&length, || LengthServing::Cold) == 1 {
                    match self.cache.get_or_build(cudnn, call, &self.expect, &self.options) {
                        Ok(cached) => {
                            let key = PlanKey::new(cudnn, call, &self.expect);
                            let exact = Some((key, Arc::downgrade(&cached.plan)));
                            self.lengths.set(&length, LengthServing::Exact, exact);
                            return self.execute_exact(cudnn, &cached.plan, io);
                        }
                        Err(e) => {
                            let reason = format!("the exact plan does not build: {e}");
                            self.lengths.set(&length, LengthServing::Failed { reason }, None);
                        }
                    }
                }
            }
            Specialization::Lazy => {
                let calls = self.lengths.call(&length, || LengthServing::Cold);
                if calls >= self.specialize_after {
                    if let Some(retry) = self.lengths.to_queue(&length) {
                        let serving = self.queue(cudnn, call, &length, retry);
                        self.lengths.set(&length, serving, None);
                    }
                }
            }
        }
        self.padded.execute_bound(cudnn, call, &self.recent[0].1, io)?;
        self.padded_calls += 1;
        Ok(())
    }

    /// Runs the padded class plan once and waits, so that its kernels are loaded before the
    /// first call ([`PaddedPlan::warm_up`]).
    ///
    /// # Errors
    /// A failed allocation or execute.
    pub fn warm_up(&mut self, cudnn: &Cudnn) -> Result<(), BackendError> {
        self.padded.warm_up(cudnn)
    }

    /// What `call`'s length runs now and why; `None` for a length not tracked (not called yet,
    /// or forgotten). Background specializations finished meanwhile are taken up first.
    ///
    /// # Errors
    /// A call that does not bind to the class.
    pub fn serving(&mut self, call: &Graph) -> Result<Option<LengthServing>, PadError> {
        self.settle();
        let length = length_of(&self.padded.graph().bind(call)?);
        Ok(self.lengths.map.get(&length).map(|l| l.serving.clone()))
    }

    /// Waits until the cache's background worker is idle ([`PlanCache::wait_for_specializations`])
    /// and takes up this class plan's finished specializations; returns how many it took up.
    pub fn wait_for_specializations(&mut self) -> usize {
        self.cache.wait_for_specializations();
        self.settle()
    }

    /// Binds `call` to the class, or finds it bound among the recent calls; either way it is
    /// `recent[0]` after.
    fn bind(&mut self, call: &Graph) -> Result<(), BackendError> {
        if let Some(i) = self.recent.iter().position(|(recent, ..)| recent == call) {
            self.recent.swap(0, i);
            return Ok(());
        }
        let binding = self.padded.graph().bind(call)?;
        let length = length_of(&binding);
        self.recent.truncate(RECENT_CALLS - 1);
        self.recent.push_front((call.clone(), binding, length));
        Ok(())
    }

    /// Takes up what the cache settled for this class plan; returns how many.
    fn settle(&mut self) -> usize {
        self.cache.settle();
        let arrived = std::mem::take(&mut *self.inbox.lock().unwrap_or_else(PoisonError::into_inner));
        let n = arrived.len();
        for (length, arrival) in arrived {
            self.lengths.arrive(length, arrival);
        }
        n
    }

    fn execute_exact(&mut self, cudnn: &Cudnn, plan: &ExecutionPlan, io: &mut [DeviceBuffer<'_>]) -> crate::Result<()> {
        let need = plan.workspace_size();
        if need > 0 && self.workspace.as_ref().is_none_or(|w| w.len() < need) {
            let stream = cudnn.stream().ok_or(BackendError::NotOnline { what: "executing a plan" })?;
            // The old workspace is freed stream-ordered (cudarc), after the work using it.
            self.workspace =
                Some(stream.alloc_zeros::<u8>(need).map_err(BackendError::driver("allocate the workspace"))?);
        }
        plan.execute(cudnn, io, if need > 0 { self.workspace.as_mut() } else { None })?;
        self.exact_calls += 1;
        Ok(())
    }

    /// Queues the background build and timing of `call`'s exact plan; what the length runs
    /// meanwhile.
    /// `retry`: the length found the queue full before, and was counted then.
    fn queue(&self, cudnn: &Cudnn, call: &Graph, length: &[usize], retry: bool) -> LengthServing {
        // Checked first: a full queue costs a call no fingerprint and no copies of its graphs.
        if self.cache.specializer().queue_is_full() {
            if !retry {
                self.cache.specializer().count_not_queued();
            }
            return LengthServing::QueueFull;
        }
        let Some(target) = Target::of(cudnn) else {
            self.cache.specializer().count_not_queued();
            return LengthServing::Failed { reason: "the context has no target".into() };
        };
        let key = PlanKey::new(cudnn, call, &self.expect);
        let job = Job {
            target,
            class: self.padded.graph().clone(),
            class_plan: self.padded.shared_plan(),
            call: call.clone(),
            options: self.options.clone(),
            expect: self.expect.clone(),
            signing: self.cache.signing().cloned(),
            path: self.cache.path_of(&key),
        };
        let against = || Against::Padded { inbox: Arc::downgrade(&self.inbox), length: length.to_vec() };
        let (task_key, task_against) = (key.clone(), against());
        let task: Task<Specialized> = Box::new(move |contexts: &mut Contexts| Specialized {
            key: task_key,
            against: task_against,
            outcome: job.run(contexts),
        });
        let if_panicked =
            Specialized { key, against: against(), outcome: Outcome::Failed("the background build panicked".into()) };
        match self.cache.specializer().queue(task, if_panicked) {
            Ok(()) => LengthServing::Pending,
            Err(PushError::Full) => {
                if !retry {
                    self.cache.specializer().count_not_queued();
                }
                LengthServing::QueueFull
            }
            Err(PushError::Spawn(e)) => {
                self.cache.specializer().count_not_queued();
                LengthServing::Failed { reason: format!("the specialization worker cannot start: {e}") }
            }
        }
    }
}

impl PlanCache {
    /// Every length of the shape class of `class` (a graph at its class bound) on one class plan,
    /// as this cache's [`Specialization`] policy says: the padded plan ([`PlanCache::padded_plan`])
    /// serves each new length at once; [`Specialization::Lazy`] then builds the plan of the
    /// call's exact shape in the background, times both, and serves the exact plan from the next
    /// call on if it is faster; [`Specialization::Eager`] builds the exact plan at a length's
    /// first call; [`Specialization::None`] always runs padded. [`ClassPlan`] has the details.
    ///
    /// # Errors
    /// As [`PlanCache::padded_plan`]'s.
    pub fn class_plan(
        self: &Arc<Self>,
        cudnn: &Cudnn,
        class: &Graph,
        expect: &Expect,
        options: &BuildOptions,
    ) -> crate::Result<ClassPlan> {
        let (padded, _) = self.padded_plan(cudnn, class, expect, options)?;
        Ok(ClassPlan::new(Arc::clone(self), padded, expect.clone(), options.clone()))
    }
}

/// A call's length: each I/O tensor's elements per block (0 where it is not padded), which,
/// with the class fixed, determine the call's shape.
fn length_of(binding: &Binding) -> Vec<usize> {
    binding.copies.iter().map(|c| c.map_or(0, |c| c.call_row)).collect()
}

/// One length's background work, on the worker thread.
struct Job {
    target: Target,
    class: ClassGraph,
    class_plan: Arc<ExecutionPlan>,
    call: Graph,
    options: BuildOptions,
    expect: Expect,
    signing: Option<PayloadKey>,
    path: Option<std::path::PathBuf>,
}

impl Job {
    /// Builds the call's exact plan, times the call on a padded plan of its own (the class plan
    /// shared, its buffers the worker's) and on the exact plan, and writes the exact plan's
    /// payload if it is faster.
    fn run(self, contexts: &mut Contexts) -> Outcome {
        let cudnn = match contexts.get(&self.target) {
            Ok(c) => c,
            Err(e) => return Outcome::Failed(format!("the worker's cuDNN context cannot be made: {e}")),
        };
        let exact = match Planner::as_asked(cudnn, &self.call, &self.options) {
            Ok(p) => p,
            Err(e) => return Outcome::Failed(format!("the exact plan does not build: {e}")),
        };
        let timing = AutotuneOptions::default();
        let padded_us = match PaddedPlan::from_plan(cudnn, self.class, self.class_plan)
            .and_then(|mut padded| measure_padded(cudnn, &mut padded, &self.call, &timing))
        {
            Ok(t) => t.median_us,
            Err(e) => return Outcome::Failed(format!("the padded call cannot be timed: {e}")),
        };
        let exact_us = match measure(cudnn, &exact, &timing) {
            Ok(t) => t.median_us,
            Err(e) => return Outcome::Failed(format!("the exact plan cannot be timed: {e}")),
        };
        faster_or_not(cudnn, exact, &self.expect, self.signing.as_ref(), self.path.as_deref(), padded_us, exact_us)
    }
}

/// The lengths a class plan tracks, each with what it runs and its exact plan (held weakly), in
/// at most [`MAX_CLASS_LENGTHS`], least recently used forgotten first. Generic over the plan so
/// the bookkeeping is tested without a GPU.
struct Lengths<P> {
    map: HashMap<Vec<usize>, Length<P>>,
    clock: u64,
    evicted: u64,
    forgotten: u64,
    limit: usize,
}

struct Length<P> {
    serving: LengthServing,
    exact: Option<(PlanKey, Weak<P>)>,
    /// The clock at its last call.
    used: u64,
    /// Its calls since it was tracked.
    calls: u64,
}

impl<P> Default for Lengths<P> {
    fn default() -> Self {
        Lengths { map: HashMap::new(), clock: 0, evicted: 0, forgotten: 0, limit: MAX_CLASS_LENGTHS }
    }
}

impl<P> Lengths<P> {
    /// The exact plan of `length`, its call counted; a length whose exact plan the cache has let
    /// go is forgotten (counted), so that its next call starts over.
    fn exact(&mut self, length: &[usize]) -> Option<(PlanKey, Arc<P>)> {
        self.clock += 1;
        let entry = self.map.get_mut(length)?;
        let (key, weak) = entry.exact.as_ref()?;
        match weak.upgrade() {
            Some(plan) => {
                entry.used = self.clock;
                entry.calls += 1;
                Some((key.clone(), plan))
            }
            None => {
                self.map.remove(length);
                self.evicted += 1;
                None
            }
        }
    }

    /// Counts a call of `length` and returns its calls so far, tracking it first (as `new`
    /// says it runs) if it is new: then, at the limit, the least recently used length not being
    /// specialized is forgotten.
    fn call(&mut self, length: &[usize], new: impl FnOnce() -> LengthServing) -> u64 {
        if !self.map.contains_key(length) {
            if self.map.len() >= self.limit {
                let oldest = self
                    .map
                    .iter()
                    .filter(|(_, l)| l.serving != LengthServing::Pending)
                    .min_by_key(|(_, l)| l.used)
                    .map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    self.map.remove(&oldest);
                    self.forgotten += 1;
                }
            }
            self.map.insert(length.to_vec(), Length { serving: new(), exact: None, used: 0, calls: 0 });
        }
        self.clock += 1;
        let entry = self.map.get_mut(length).expect("tracked above");
        entry.used = self.clock;
        entry.calls += 1;
        entry.calls
    }

    /// Whether the lazy policy should queue `length` now: `Some(retry)` if it has not been
    /// queued (`Some(false)`) or found the queue full before (`Some(true)`).
    fn to_queue(&self, length: &[usize]) -> Option<bool> {
        match self.map.get(length).map(|l| &l.serving) {
            Some(LengthServing::Cold) => Some(false),
            Some(LengthServing::QueueFull) => Some(true),
            _ => None,
        }
    }

    /// Sets what a tracked `length` runs.
    fn set(&mut self, length: &[usize], serving: LengthServing, exact: Option<(PlanKey, Weak<P>)>) {
        if let Some(l) = self.map.get_mut(length) {
            (l.serving, l.exact) = (serving, exact);
        }
    }

    /// Takes up a finished specialization of `length` (dropped if the length was forgotten
    /// meanwhile: its exact plan, if faster, is in the cache for a later start).
    fn arrive(&mut self, length: Vec<usize>, arrival: Arrival<P>) {
        let Some(entry) = self.map.get_mut(&length) else { return };
        (entry.serving, entry.exact) = match arrival {
            Arrival::Faster { key, plan, padded_us, exact_us } => {
                (LengthServing::ExactFaster { padded_us, exact_us }, Some((key, plan)))
            }
            Arrival::NotFaster { padded_us, exact_us } => (LengthServing::PaddedFaster { padded_us, exact_us }, None),
            Arrival::Failed(reason) => (LengthServing::Failed { reason }, None),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(fp: u64) -> PlanKey {
        PlanKey { graph_fingerprint: fp, binding: None, sm: Some(90), cudnn_version: 91900 }
    }

    fn faster(fp: u64, plan: &Arc<u32>) -> Arrival<u32> {
        Arrival::Faster { key: key(fp), plan: Arc::downgrade(plan), padded_us: 20.0, exact_us: 10.0 }
    }

    /// The lazy policy's bookkeeping: a length is queued once (or again after a full queue),
    /// runs padded until its specialization arrives; a faster exact plan then serves it for as
    /// long as the cache holds that plan, a slower or failed one leaves it padded.
    #[test]
    fn lengths_take_up_arrivals_and_start_over_when_the_cache_lets_a_plan_go() {
        let mut lengths = Lengths::<u32>::default();
        let (a, b, c) = (vec![300, 0], vec![37, 0], vec![1, 0]);
        for l in [&a, &b, &c] {
            assert_eq!(lengths.call(l, || LengthServing::Cold), 1);
            assert_eq!(lengths.to_queue(l), Some(false));
        }
        lengths.set(&a, LengthServing::Pending, None);
        lengths.set(&b, LengthServing::Pending, None);
        lengths.set(&c, LengthServing::QueueFull, None);
        assert_eq!((lengths.to_queue(&a), lengths.to_queue(&c)), (None, Some(true)));
        assert_eq!(lengths.call(&a, || unreachable!()), 2);
        assert!(lengths.exact(&a).is_none());

        let plan = Arc::new(7u32); // the cache's entry
        lengths.arrive(a.clone(), faster(1, &plan));
        lengths.arrive(b.clone(), Arrival::NotFaster { padded_us: 10.0, exact_us: 9.9 });
        lengths.arrive(vec![999], faster(2, &plan)); // forgotten meanwhile: dropped
        let (k, p) = lengths.exact(&a).unwrap();
        assert_eq!((k, *p), (key(1), 7));
        assert_eq!(lengths.map[&a].calls, 3);
        assert_eq!(lengths.map[&a].serving, LengthServing::ExactFaster { padded_us: 20.0, exact_us: 10.0 });
        assert!(lengths.map[&a].serving.is_exact());
        assert!(lengths.exact(&b).is_none());
        assert_eq!(lengths.map[&b].serving, LengthServing::PaddedFaster { padded_us: 10.0, exact_us: 9.9 });
        assert_eq!(lengths.to_queue(&b), None, "decided: not queued again");
        assert!(!lengths.map.contains_key(&vec![999]));

        // The cache evicts the exact plan: the length starts over, from its first call.
        drop((p, plan));
        assert!(lengths.exact(&a).is_none());
        assert_eq!(lengths.evicted, 1);
        assert_eq!(lengths.call(&a, || LengthServing::Cold), 1);
        assert_eq!(lengths.to_queue(&a), Some(false));
    }

    /// At the limit the least recently used length goes first, never one being specialized
    /// (its result has nowhere to land otherwise), whatever the number of lengths seen.
    #[test]
    fn lengths_stay_within_their_limit_forgetting_the_least_recently_used() {
        let mut lengths = Lengths::<u32> { limit: 3, ..Lengths::default() };
        let plan = Arc::new(1u32);
        lengths.call(&[1], || LengthServing::Pending);
        for l in 2..=3 {
            lengths.call(&[l], || LengthServing::Padded);
        }
        lengths.arrive(vec![2], faster(2, &plan));
        lengths.exact(&[2]); // 2 used again: 3 is now the least recently used not pending
        lengths.call(&[4], || LengthServing::Padded);
        let mut held: Vec<_> = lengths.map.keys().cloned().collect();
        held.sort();
        assert_eq!(held, [vec![1], vec![2], vec![4]]);
        assert_eq!(lengths.forgotten, 1);

        let mut rng = crate::rng::SplitMix64::new(19);
        for _ in 0..10_000 {
            let l = [10 + (rng.next_u64() % 8192) as usize];
            if lengths.exact(&l).is_none() {
                lengths.call(&l, || LengthServing::Padded);
            }
            assert!(lengths.map.len() <= 3);
        }
        assert!(lengths.map.contains_key(&vec![1]), "the pending length is never forgotten");
        assert_eq!(lengths.map.len(), 3);
        assert!(lengths.forgotten > 5_000, "{}", lengths.forgotten);
    }

    /// A class plan moves to the thread that serves it (it is used through `&mut`, so `Sync`
    /// buys nothing).
    #[test]
    fn a_class_plan_is_send() {
        fn send<T: Send>() {}
        send::<ClassPlan>();
    }

    #[test]
    fn servings_say_what_runs() {
        let s = LengthServing::ExactFaster { padded_us: 26.04, exact_us: 11.0 };
        assert_eq!(s.to_string(), "exact plan swapped in: 11.00 µs against 26.04 µs padded");
        assert!(LengthServing::Failed { reason: "x".into() }.to_string().ends_with(": x"));
        assert!(!LengthServing::Pending.is_exact() && LengthServing::Exact.is_exact());
    }
}
