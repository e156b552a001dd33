//! Execution plans: a graph planned by cuDNN, ready to execute (online) or to serialize.
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | [`ExecutionPlan`] and its accessors; [`Partitioning`], an alternative [`Fusion::Measure`] built |
//! | `part.rs` | [`PlanPart`] (one kernel: lowered, planned, built or loaded), its descriptors, [`SavedPart`] |
//! | `build.rs` | [`ExecutionPlan::build`] (validate → rewrite → one kernel, or parts through a [`Partition`](crate::backend::partition::Partition)), the measured alternatives, [`ExecutionPlan::from_json`] and [`ExecutionPlan::from_parts_json`] |
//!
//! The variant-pack layout (`variant.rs`) is precomputed for execution.

mod build;
mod part;

pub use part::{ChosenPart, PlanPart, SavedPart};

use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::cudnn::sys;

use crate::backend::candidate::Candidate;
use crate::backend::options::BuildTimings;
use crate::backend::partition::{CutReason, Place};
use crate::backend::variant::VariantLayout;
use crate::backend::BackendError;
#[cfg(doc)]
use crate::backend::{BuildOptions, Cudnn, Fusion};
use crate::cudnn::Anchor;
use crate::ir::{Graph, Rewrite};

/// A graph planned by cuDNN: ready to execute (online) or to serialize (either).
///
/// A plan is one cuDNN kernel where cuDNN fuses the whole graph, and otherwise (with the default
/// [`Fusion::Auto`]) the fewest parts it plans ([`ExecutionPlan::parts`]): they run in order on the
/// stream, the tensors they exchange in an arena at the front of the workspace, sized at build,
/// so an execute allocates nothing. [`ExecutionPlan::execute`], [`ExecutionPlan::execute_raw`]
/// and [`ExecutionPlan::cuda_graph`] take the graph's own inputs and outputs either way.
///
/// `Send + Sync`: threads share one plan (behind an `Arc`, or borrowed in `std::thread::scope`)
/// and execute it at the same time, each with its own [`Cudnn`] on its own stream of the plan's
/// CUDA context. cuDNN's calls on the plan's descriptors take turns on a lock inside the plan,
/// held only for the host-side enqueue (`cudnnBackendExecute`, a few µs), never while the GPU
/// runs: cuDNN promises thread safety per handle, not for one execution plan executed by several
/// threads at once ([`execute`](crate::backend::execute) says why that matters). Uncontended
/// the lock costs one atomic compare-and-swap.
///
/// ```no_run
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::backend::{BuildOptions, Cudnn, ExecutionPlan};
/// use cudnn_graph::{DataType, GraphBuilder};
/// let mut g = GraphBuilder::new("mm");
/// let a = g.input("a", DataType::F16, &[1, 64, 32])?;
/// let b = g.input("b", DataType::F16, &[1, 32, 16])?;
/// let c = g.matmul(a, b)?;
/// g.output(c, "c", DataType::F16)?;
/// let cudnn = Cudnn::deviceless(&std::fs::read_to_string("tests/fixtures/h200-devprop.json")?)?;
/// let plan = ExecutionPlan::build(&cudnn, &g.build()?, &BuildOptions::default())?;
/// println!("{} ({} bytes of workspace)", plan.selected(), plan.workspace_size());
/// println!("built in {:?}", plan.timings().total());
/// let json = plan.json()?; // load it on the GPU with ExecutionPlan::from_json
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ExecutionPlan {
    graph: Graph,
    /// The graph's I/O layout (for a plan of one part, that part's layout).
    layout: VariantLayout,
    // Fields drop in order: the parts (their descriptors), then the handle or device properties
    // they were made with.
    parts: Vec<PlanPart>,
    /// What the graph was rewritten into before planning.
    rewrites: Vec<Rewrite>,
    /// Bytes of workspace the tensors exchanged between parts take, before the parts' own.
    arena_bytes: usize,
    timings: BuildTimings,
    /// Other ways to run the graph ([`Fusion::Measure`]) that autotuning times against the
    /// parts above, until it keeps the fastest.
    alternatives: Vec<Partitioning>,
    // The handle (with its CUDA context) or device properties the plan was made with.
    anchor: Anchor,
    /// Whether a capture ([`crate::backend::capture`]) has recorded the plan with its selection
    /// now; a change of selection clears it.
    capture_recorded: AtomicBool,
}

/// One way to run a plan's graph that [`Fusion::Measure`] built besides the plan's own parts:
/// the graph with an anchor's elementwise epilogue (or prologue) cut off into a kernel of its
/// own ([`CutReason::ToMeasure`]). [`crate::engines::autotune`] times each whole partitioning
/// (the sum of its parts) against the plan's and keeps the fastest
/// ([`ExecutionPlan::alternatives`]).
#[derive(Debug)]
pub struct Partitioning {
    parts: Vec<PlanPart>,
    layout: VariantLayout,
    arena_bytes: usize,
}

impl Partitioning {
    /// Its kernels, in execution order.
    pub fn parts(&self) -> &[PlanPart] {
        &self.parts
    }

    /// Bytes at the front of the workspace that hold the tensors its parts exchange.
    pub fn arena_bytes(&self) -> usize {
        self.arena_bytes
    }

    /// Workspace bytes enough for any selection of its parts' built plans.
    fn max_workspace_size(&self) -> usize {
        self.arena_bytes + self.parts.iter().map(PlanPart::max_workspace_size).max().unwrap_or(0)
    }
}

impl ExecutionPlan {
    /// cuDNN's JSON of the selected plan (`CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION`): the
    /// compiled kernel and everything needed to rebuild the plan with
    /// [`ExecutionPlan::from_json`]. Not byte-identical run to run (it embeds pointers). A
    /// partitioned plan has one per part ([`PlanPart::json`]); asking it for one is a
    /// [`BackendError::Partitioned`].
    pub fn json(&self) -> Result<String, BackendError> {
        self.only("json")?.json()
    }

    /// The graph this plan computes.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The plan's kernels, in execution order: one unless the graph was partitioned.
    pub fn parts(&self) -> &[PlanPart] {
        &self.parts
    }

    /// What the graph was rewritten into before planning (a `batchnorm_inference` as the
    /// elementwise chain that fuses into a convolution's epilogue); the parts' nodes are those of
    /// the rewritten graph.
    pub fn rewrites(&self) -> &[Rewrite] {
        &self.rewrites
    }

    /// Whether the graph runs as more than one kernel.
    pub fn is_partitioned(&self) -> bool {
        self.parts.len() > 1
    }

    /// Whether every part was planned as a dynamic-shape operation graph with a kernel cache
    /// ([`BuildOptions::kernel_cache`]; a part cuDNN plans only as an ordinary graph is one, and
    /// so is every part of a partitioned plan: a kernel cache serves one structure); for a plan
    /// loaded from JSON, whether its JSON says so.
    pub fn is_dynamic_shape(&self) -> bool {
        self.parts.iter().all(PlanPart::is_dynamic_shape)
    }

    /// Bytes at the front of the workspace that hold the tensors parts exchange (0 for a plan of
    /// one part).
    pub fn arena_bytes(&self) -> usize {
        self.arena_bytes
    }

    /// The one part of a plan that is not partitioned, or a [`BackendError::Partitioned`]
    /// naming `what` was asked.
    fn only(&self, what: &'static str) -> Result<&PlanPart, BackendError> {
        match self.parts.as_slice() {
            [part] => Ok(part),
            parts => Err(BackendError::Partitioned { graph: self.graph.name.clone(), parts: parts.len(), what }),
        }
    }

    /// Every candidate heuristics proposed, with its state (for a partitioned plan, the first
    /// part's: see [`ExecutionPlan::parts`]).
    pub fn candidates(&self) -> &[Candidate] {
        &self.parts[0].candidates
    }

    /// The candidate of the selected plan (for a partitioned plan, the first part's).
    pub fn selected(&self) -> &Candidate {
        self.parts[0].selected()
    }

    /// The candidates that were built into plans, in build order (for a partitioned plan, the
    /// first part's).
    pub fn built(&self) -> Vec<usize> {
        self.parts[0].built()
    }

    /// Makes built candidate `index` the one that executes (for autotuning); for a partitioned
    /// plan, of the first part ([`ExecutionPlan::select_in`] chooses for any part).
    pub fn select(&mut self, index: usize) -> Result<(), BackendError> {
        self.select_in(0, index)
    }

    /// Makes built candidate `index` of part `part` the one that executes.
    pub fn select_in(&mut self, part: usize, index: usize) -> Result<(), BackendError> {
        let count = self.parts.len();
        let p = self.parts.get_mut(part).ok_or(BackendError::PartIndex { index: part, count })?;
        match p.built.iter().position(|b| b.candidate == index) {
            Some(i) => {
                p.selected = i;
                *self.capture_recorded.get_mut() = false;
                Ok(())
            }
            None => Err(BackendError::NotBuilt { index, built: p.built() }),
        }
    }

    /// Where building (or loading) this plan spent its time, over every part.
    pub fn timings(&self) -> &BuildTimings {
        &self.timings
    }

    /// The raw `cudnnBackendDescriptor_t` of the selected execution plan (for a partitioned plan,
    /// the first part's), for measuring against raw `cudnnBackendExecute` and for interop. It
    /// stays valid while this plan lives and the selection does not change; never destroy or
    /// modify it, and never call cuDNN with it while another thread may be executing this plan
    /// (the plan's own calls take turns on a lock that raw calls bypass).
    pub fn raw_descriptor(&self) -> sys::cudnnBackendDescriptor_t {
        self.parts[0].raw_descriptor()
    }

    /// Workspace bytes enough for any [`ExecutionPlan::select`]: the arena, then the most any
    /// part's largest built plan needs; while the plan has [alternatives](Self::alternatives),
    /// enough for any of them too (autotuning runs each).
    pub fn max_workspace_size(&self) -> usize {
        let own = self.arena_bytes + self.parts.iter().map(PlanPart::max_workspace_size).max().unwrap_or(0);
        self.alternatives.iter().map(Partitioning::max_workspace_size).fold(own, usize::max)
    }

    /// The other partitionings [`Fusion::Measure`] built, which [`crate::engines::autotune`]
    /// times against the plan's own parts: empty for any other [`Fusion`], for a graph with no
    /// cut point, and once autotuning has kept the fastest (which is then what
    /// [`ExecutionPlan::parts`] lists, executes and serializes). Until then the plan executes
    /// its own parts, the fusion cuDNN plans.
    pub fn alternatives(&self) -> &[Partitioning] {
        &self.alternatives
    }

    /// Exchanges the plan's partitioning with alternative `index` (autotuning runs each in
    /// turn): the plan then executes that one, and alternative `index` is the one it ran before.
    pub(crate) fn swap_alternative(&mut self, index: usize) {
        if let Some(other) = self.alternatives.get_mut(index) {
            *self.capture_recorded.get_mut() = false;
            std::mem::swap(&mut self.parts, &mut other.parts);
            std::mem::swap(&mut self.layout, &mut other.layout);
            std::mem::swap(&mut self.arena_bytes, &mut other.arena_bytes);
        }
    }

    /// Drops the alternatives: the plan's partitioning is the one it keeps. `measured`, where
    /// that partitioning has cuts made to be measured, is autotuning's times, which their
    /// reason ([`CutReason::MeasuredFaster`]) then gives.
    pub(crate) fn keep_partitioning(&mut self, measured: Option<String>) {
        self.alternatives.clear();
        let Some(times) = measured else { return };
        for cut in self.parts.iter_mut().filter_map(|p| p.cut.as_mut()) {
            if cut.reason == CutReason::ToMeasure {
                cut.reason = CutReason::MeasuredFaster(times.clone());
            }
        }
    }

    /// Workspace bytes the selected plans need at execute: the arena of exchanged tensors, then
    /// the most any part needs (cuDNN's, after the tensors its lowering keeps at the front of the
    /// workspace, [`VariantLayout::workspace_prefix`]).
    pub fn workspace_size(&self) -> usize {
        self.arena_bytes + self.parts.iter().map(PlanPart::workspace_size).max().unwrap_or(0)
    }

    /// Where each of `part`'s I/O tensors lives in the plan's memory (its own I/O in order, for a
    /// plan of one part).
    pub(crate) fn sources_of<'p>(&self, part: &'p PlanPart) -> &'p [Place] {
        &part.sources
    }

    /// Where a part's workspace starts in the plan's.
    pub(crate) fn part_workspace(&self, workspace: u64, part: &PlanPart) -> u64 {
        if workspace == 0 || part.workspace_size() == 0 {
            0
        } else {
            workspace + self.arena_bytes as u64
        }
    }

    /// The variant-pack layout of the graph's I/O (for a plan of one part, its whole layout).
    pub fn layout(&self) -> &VariantLayout {
        &self.layout
    }

    /// Whether the plan was made by an online context (only those execute).
    pub fn is_online(&self) -> bool {
        self.anchor.context().is_some()
    }

    pub(crate) fn anchor(&self) -> &Anchor {
        &self.anchor
    }

    /// Whether a capture has recorded this plan with its selection now.
    pub(crate) fn capture_recorded(&self) -> bool {
        self.capture_recorded.load(Ordering::Relaxed)
    }

    /// Marks this plan, with its selection now, recorded by a capture.
    pub(crate) fn set_capture_recorded(&self) {
        self.capture_recorded.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_shared_by_threads() {
        fn send<T: Send>() {}
        fn sync<T: Sync>() {}
        send::<ExecutionPlan>();
        sync::<ExecutionPlan>();
        send::<std::sync::Arc<ExecutionPlan>>();
    }
}
