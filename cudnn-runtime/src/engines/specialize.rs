//! The specialization policy of a [`PlanCache`](super::PlanCache) with dynamic shapes
//! ([`Specialization`]: eager, lazy, none, as TensorRT-RTX names them), what each shape is served
//! and why ([`ServeReason`]), and the background worker that builds and times specialized plans
//! for the lazy policy.
//!
//! What cuDNN 9.19 offers, and so what the policies choose between: the operation graph's
//! dynamic-shape flag with a kernel cache (a new shape's plan finds its kernels compiled: cheap
//! to make, shape-generic kernels) and the ordinary plan of one shape (heuristics and a
//! compilation per shape: expensive to make, kernels cuDNN may specialize to the shape). It has no
//! execute-time shape overrides (cuDNN 9.21 adds them), so either way a call runs a plan made for
//! its exact shape.
//!
//! The worker is one thread per cache, started by the first lazy specialization. It owns its
//! cuDNN contexts (a handle of its own on a new stream of the caller's CUDA context, or a
//! deviceless context for the same described device): a `Cudnn` is `Send` but not `Sync`, and a
//! handle must not be used by two threads at once. Its plans serve the caller's context (the same
//! CUDA context, or the same device properties). Tasks run one at a time, in order; dropping the
//! cache lets the task running finish (a plan build cannot be interrupted) and drops the others.

use std::collections::VecDeque;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use cudarc::driver::CudaContext;

use super::measure::measure;
use super::tuning::AutotuneOptions;
use crate::backend::{BackendError, Cudnn, CudnnError, ExecutionPlan};

/// Which plan a [`PlanCache`](super::PlanCache) with dynamic shapes serves a new shape, as
/// TensorRT-RTX's kernel specialization strategies (`kEAGER`, `kLAZY`, `kNONE`), mapped onto
/// what cuDNN 9.19 has (see the [module documentation](self)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Specialization {
    /// A new shape gets the plan specialized to it (an ordinary operation graph: heuristics and
    /// compilation) before its first call. What a cache without dynamic shapes does.
    #[default]
    Eager,
    /// A new shape is served the dynamic-shape plan at once (its kernels from the structure's
    /// kernel cache); the specialized plan is built in the background on a worker thread, both
    /// are timed, and the specialized one replaces the dynamic one in the cache only if it is
    /// faster by more than [`SWAP_MARGIN`]. A caller (or a CUDA graph) holding the dynamic plan
    /// keeps it: the swap changes what later lookups get, never a plan in use.
    Lazy,
    /// A new shape is always served the dynamic-shape plan; nothing is specialized.
    None,
}

impl fmt::Display for Specialization {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Specialization::Eager => "eager",
            Specialization::Lazy => "lazy",
            Specialization::None => "none",
        })
    }
}

/// How much faster the specialized plan's median must be for the lazy policy to swap it in:
/// 2 %, autotuning's default stability tolerance (a smaller difference is measurement noise).
pub const SWAP_MARGIN: f64 = 0.02;

/// The lazy policy's swap rule: the specialized plan replaces the dynamic one only if its time
/// per execute is below the dynamic plan's by more than [`SWAP_MARGIN`] (both finite and
/// positive).
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::engines::specialized_is_faster;
/// assert!(specialized_is_faster(100.0, 90.0));
/// assert!(!specialized_is_faster(100.0, 99.0)); // within the margin: noise
/// assert!(!specialized_is_faster(100.0, 120.0));
/// assert!(!specialized_is_faster(f64::NAN, 1.0));
/// ```
pub fn specialized_is_faster(dynamic_us: f64, specialized_us: f64) -> bool {
    let valid = |t: f64| t.is_finite() && t > 0.0;
    valid(dynamic_us) && valid(specialized_us) && specialized_us < dynamic_us * (1.0 - SWAP_MARGIN)
}

/// Why a cache entry serves the plan it does ([`PlanCache::serving`](super::PlanCache::serving),
/// [`CachedPlan::reason`](super::CachedPlan::reason)).
#[derive(Debug, Clone, PartialEq)]
pub enum ServeReason {
    /// Built for its shape at its first call: [`Specialization::Eager`], or a cache without
    /// dynamic shapes.
    Specialized,
    /// The dynamic-shape plan, by [`Specialization::None`].
    DynamicByPolicy,
    /// The dynamic-shape plan, while the specialized plan is built and timed in the background
    /// ([`Specialization::Lazy`]).
    LazyPending,
    /// The specialized plan, swapped in: it was timed faster.
    LazyFaster {
        /// The dynamic-shape plan's median, µs per execute.
        dynamic_us: f64,
        /// The specialized plan's median, µs per execute.
        specialized_us: f64,
    },
    /// The dynamic-shape plan, kept: the specialized one was not faster (see [`SWAP_MARGIN`]).
    LazyNotFaster {
        /// The dynamic-shape plan's median, µs per execute.
        dynamic_us: f64,
        /// The specialized plan's median, µs per execute.
        specialized_us: f64,
    },
    /// The dynamic-shape plan, kept: the specialized plan could not be built, timed or stored.
    LazyFailed {
        /// What went wrong.
        reason: String,
    },
    /// The dynamic-shape plan, kept: [`MAX_PENDING_SPECIALIZATIONS`] were already waiting.
    LazyQueueFull,
    /// The plan of a call's exact shape, which a [`ClassPlan`](super::ClassPlan) built in the
    /// background and timed faster than the same call on its padded class plan.
    FasterThanPadded {
        /// The call on the padded class plan, µs per execute.
        padded_us: f64,
        /// The exact plan, µs per execute.
        exact_us: f64,
    },
    /// An ordinary plan, because cuDNN plans no dynamic-shape graph of this structure (attention
    /// backward and graphs of pointwise ops alone, with cuDNN 9.19): it is already specialized.
    StaticOnly,
    /// Built as the build options asked: they choose the engine or the kernel cache themselves
    /// (`engine`, `candidate`, `build_all`, `kernel_cache`), so no policy applies.
    OptionsChoose,
    /// Made by the caller ([`PlanCache::get_or_insert_with`](super::PlanCache::get_or_insert_with),
    /// [`PlanCache::insert`](super::PlanCache::insert)).
    Caller,
    /// Loaded from a payload: the cache directory, or [`PlanCache::seed_from_dir`](super::PlanCache::seed_from_dir).
    Loaded,
    /// Built as the cache's tuning store recorded it (what autotuning kept, here or on another
    /// machine: [`PlanCache::with_tuning_store`](super::PlanCache::with_tuning_store)), nothing timed.
    Tuned,
}

impl fmt::Display for ServeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeReason::Specialized => f.write_str("specialized to its shape at its first call"),
            ServeReason::DynamicByPolicy => f.write_str("dynamic-shape plan (policy: none)"),
            ServeReason::LazyPending => f.write_str("dynamic-shape plan while the specialized one is built"),
            ServeReason::LazyFaster { dynamic_us, specialized_us } => {
                write!(f, "specialized plan swapped in: {specialized_us:.2} µs against {dynamic_us:.2} µs")
            }
            ServeReason::LazyNotFaster { dynamic_us, specialized_us } => write!(
                f,
                "dynamic-shape plan kept: the specialized one took {specialized_us:.2} µs against {dynamic_us:.2} µs"
            ),
            ServeReason::LazyFailed { reason } => write!(f, "dynamic-shape plan kept: {reason}"),
            ServeReason::LazyQueueFull => f.write_str("dynamic-shape plan kept: the specialization queue was full"),
            ServeReason::FasterThanPadded { padded_us, exact_us } => {
                write!(f, "exact plan of a class length: {exact_us:.2} µs against {padded_us:.2} µs padded")
            }
            ServeReason::StaticOnly => f.write_str("ordinary plan: cuDNN plans no dynamic-shape graph of it"),
            ServeReason::OptionsChoose => f.write_str("built as the options ask"),
            ServeReason::Caller => f.write_str("made by the caller"),
            ServeReason::Loaded => f.write_str("loaded from a payload"),
            ServeReason::Tuned => f.write_str("built as the tuning store recorded it"),
        }
    }
}

/// What a cache entry serves now, and why ([`PlanCache::serving`](super::PlanCache::serving)).
#[derive(Debug, Clone, PartialEq)]
pub struct Serving {
    /// Whether the plan served is a dynamic-shape plan; `None` for an entry whose payload no
    /// lookup has loaded yet (seeded).
    pub dynamic_shape: Option<bool>,
    /// Why.
    pub reason: ServeReason,
}

/// How the lazy policy times a plan: its device time per execute in µs, on the worker's cuDNN
/// context. The default, [`median_us`], is autotuning's [`measure`].
pub type PlanTimer = dyn Fn(&Cudnn, &ExecutionPlan) -> Result<f64, BackendError> + Send + Sync;

/// The default [`PlanTimer`]: the median of [`measure`] with [`AutotuneOptions::default`]
/// (scratch buffers of non-zero data, CUDA-event timing). A deviceless plan cannot be timed: the
/// error says so, and the lazy policy keeps the dynamic-shape plan.
pub fn median_us(cudnn: &Cudnn, plan: &ExecutionPlan) -> Result<f64, BackendError> {
    measure(cudnn, plan, &AutotuneOptions::default()).map(|t| t.median_us)
}

/// How many specializations may wait for the worker; past that a new shape keeps its
/// dynamic-shape plan ([`ServeReason::LazyQueueFull`]).
pub const MAX_PENDING_SPECIALIZATIONS: usize = 64;

/// What the worker makes its cuDNN context for: the caller's CUDA context, or the caller's
/// described device.
#[derive(Clone)]
pub(crate) enum Target {
    Online(Arc<CudaContext>),
    Deviceless(String),
}

impl Target {
    /// The target of `cudnn` (every context has one of the two).
    pub(crate) fn of(cudnn: &Cudnn) -> Option<Self> {
        match (cudnn.stream(), cudnn.device_properties()) {
            (Some(stream), _) => Some(Target::Online(stream.context().clone())),
            (None, Some(json)) => Some(Target::Deviceless(json.to_string())),
            (None, None) => None,
        }
    }

    fn same(&self, other: &Target) -> bool {
        match (self, other) {
            (Target::Online(a), Target::Online(b)) => Arc::ptr_eq(a, b) || **a == **b,
            (Target::Deviceless(a), Target::Deviceless(b)) => a == b,
            _ => false,
        }
    }

    fn make(&self) -> Result<Cudnn, CudnnError> {
        match self {
            Target::Online(context) => {
                let stream = context.new_stream().map_err(|e| CudnnError::Driver {
                    call: "create the specialization worker's stream",
                    message: e.to_string(),
                })?;
                Cudnn::new(stream)
            }
            Target::Deviceless(json) => Cudnn::deviceless(json),
        }
    }
}

/// The worker's cuDNN contexts, one per target it has served (at most [`Contexts::KEPT`]).
#[derive(Default)]
pub(crate) struct Contexts {
    held: Vec<(Target, Cudnn)>,
}

impl Contexts {
    const KEPT: usize = 4;

    /// The worker's context for `target`, made the first time.
    pub(crate) fn get(&mut self, target: &Target) -> Result<&Cudnn, CudnnError> {
        let index = match self.held.iter().position(|(t, _)| t.same(target)) {
            Some(i) => i,
            None => {
                let cudnn = target.make()?;
                if self.held.len() == Self::KEPT {
                    self.held.remove(0);
                }
                self.held.push((target.clone(), cudnn));
                self.held.len() - 1
            }
        };
        Ok(&self.held[index].1)
    }
}

/// A task for the worker.
pub(crate) type Task<R> = Box<dyn FnOnce(&mut Contexts) -> R + Send>;

struct Queue<R> {
    /// Each task, with what it reports if it panics.
    tasks: VecDeque<(Task<R>, R)>,
    running: bool,
    done: Vec<R>,
    closed: bool,
}

type Shared<R> = Arc<(Mutex<Queue<R>>, Condvar)>;

fn lock<R>(shared: &Shared<R>) -> MutexGuard<'_, Queue<R>> {
    // Tasks run outside the lock, so a poisoned lock can only come from a panic between two
    // plain field updates; the queue is still consistent.
    shared.0.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One background thread running tasks in order, their results collected for the owner.
pub(crate) struct Worker<R> {
    shared: Shared<R>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl<R: Send + 'static> Worker<R> {
    pub(crate) fn new() -> Self {
        let queue = Queue { tasks: VecDeque::new(), running: false, done: Vec::new(), closed: false };
        Worker { shared: Arc::new((Mutex::new(queue), Condvar::new())), thread: Mutex::new(None) }
    }

    /// Queues `task` (`if_panicked` is its result should it panic), starting the thread the
    /// first time. `Err` gives the task back's reason: `limit` tasks are waiting already, or the
    /// thread cannot start.
    pub(crate) fn push(&self, task: Task<R>, if_panicked: R, limit: usize) -> Result<(), PushError> {
        let mut thread = self.thread.lock().unwrap_or_else(PoisonError::into_inner);
        if thread.is_none() {
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new().name("cudnn-graph-specialize".into()).spawn(move || run(&shared));
            *thread = Some(spawned.map_err(|e| PushError::Spawn(e.to_string()))?);
        }
        drop(thread);
        let mut queue = lock(&self.shared);
        if queue.tasks.len() >= limit {
            return Err(PushError::Full);
        }
        queue.tasks.push_back((task, if_panicked));
        self.shared.1.notify_all();
        Ok(())
    }

    /// The results of the tasks finished since the last call.
    pub(crate) fn take_done(&self) -> Vec<R> {
        std::mem::take(&mut lock(&self.shared).done)
    }

    /// Waits until no task is waiting or running, then returns the results not taken yet.
    pub(crate) fn wait_idle(&self) -> Vec<R> {
        let mut queue = lock(&self.shared);
        while (queue.running || !queue.tasks.is_empty()) && !queue.closed {
            queue = self.shared.1.wait(queue).unwrap_or_else(PoisonError::into_inner);
        }
        std::mem::take(&mut queue.done)
    }

    /// Tasks waiting (not running).
    pub(crate) fn waiting(&self) -> usize {
        lock(&self.shared).tasks.len()
    }

    /// Tasks waiting or running.
    pub(crate) fn pending(&self) -> usize {
        let queue = lock(&self.shared);
        queue.tasks.len() + usize::from(queue.running)
    }
}

/// Why a task was not queued.
#[derive(Debug)]
pub(crate) enum PushError {
    Full,
    Spawn(String),
}

fn run<R>(shared: &Shared<R>) {
    let mut contexts = Contexts::default();
    loop {
        let (task, if_panicked) = {
            let mut queue = lock(shared);
            loop {
                if queue.closed {
                    return;
                }
                if let Some(next) = queue.tasks.pop_front() {
                    queue.running = true;
                    break next;
                }
                queue = shared.1.wait(queue).unwrap_or_else(PoisonError::into_inner);
            }
        };
        let result = catch_unwind(AssertUnwindSafe(|| task(&mut contexts))).unwrap_or(if_panicked);
        let mut queue = lock(shared);
        queue.running = false;
        queue.done.push(result);
        shared.1.notify_all();
    }
}

impl<R> Drop for Worker<R> {
    /// Lets the running task finish, drops the waiting ones and joins the thread.
    fn drop(&mut self) {
        {
            let mut queue = lock(&self.shared);
            queue.closed = true;
            queue.tasks.clear();
            self.shared.1.notify_all();
        }
        if let Some(thread) = self.thread.get_mut().unwrap_or_else(PoisonError::into_inner).take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn the_swap_rule_needs_a_margin_and_sane_times() {
        assert!(specialized_is_faster(10.0, 9.7));
        assert!(!specialized_is_faster(10.0, 9.9));
        assert!(!specialized_is_faster(10.0, 10.0));
        assert!(!specialized_is_faster(10.0, 0.0));
        assert!(!specialized_is_faster(0.0, 1.0));
        assert!(!specialized_is_faster(f64::INFINITY, 1.0));
        assert!(!specialized_is_faster(10.0, f64::NAN));
    }

    #[test]
    fn the_worker_runs_tasks_in_order_reports_panics_and_bounds_its_queue() {
        let worker: Worker<usize> = Worker::new();
        assert_eq!(worker.pending(), 0);
        // A gate keeps the first task running while the others queue up.
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let g = gate.clone();
        let ran = Arc::new(AtomicUsize::new(0));
        worker
            .push(
                Box::new(move |_| {
                    let mut open = g.0.lock().unwrap();
                    while !*open {
                        open = g.1.wait(open).unwrap();
                    }
                    1
                }),
                0,
                2,
            )
            .unwrap();
        // The first task is running (its gate closed) before the others are queued.
        while !lock(&worker.shared).running {
            std::thread::yield_now();
        }
        let r = ran.clone();
        worker.push(Box::new(move |_| r.fetch_add(1, Ordering::SeqCst) + 2), 0, 2).unwrap();
        worker.push(Box::new(|_| panic!("a task that panics")), 99, 2).unwrap();
        assert!(matches!(worker.push(Box::new(|_| 7), 0, 2), Err(PushError::Full)), "two wait: full");
        assert_eq!(worker.pending(), 3);
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        let done = worker.wait_idle();
        assert_eq!(done, [1, 2, 99], "in order; the panic reported as its fallback");
        assert_eq!((worker.pending(), ran.load(Ordering::SeqCst)), (0, 1));
        assert!(worker.take_done().is_empty());
    }
}
