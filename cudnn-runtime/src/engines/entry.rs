//! A memory entry of the plan cache ([`Entry`]: a payload and the plans loaded from it, shared,
//! weighed against the budget and pinned while held outside), and which entries serve a lookup:
//! a plan the caller's context could have made ([`serves`]), an engine the options accept
//! ([`accepts`]).

use std::sync::Arc;

use super::lru::Weigh;
use super::specialize::ServeReason;
use crate::backend::{BehaviorNote, BuildOptions, Cudnn, ExecutionPlan, Fusion, NumericalNote};
use crate::payload::plan::{EngineRecord, Payload, PlanRecord};
use crate::Graph;

/// A memory entry: a payload, without structure (lookups always bring the graph), and the plans
/// loaded from it, shared.
pub(super) struct Entry {
    pub(super) payload: Arc<Payload>,
    /// The payload's size as serialized.
    pub(super) payload_bytes: usize,
    pub(super) plans: Vec<Arc<ExecutionPlan>>,
    /// Why the entry holds this plan.
    pub(super) reason: ServeReason,
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
pub(super) fn serves(plan: &ExecutionPlan, cudnn: &Cudnn, graph: &Graph) -> bool {
    plan.anchor().serves(cudnn) && plan.graph() == graph
}

/// Whether `options` accept the engine recorded in `record`.
pub(super) fn accepts(options: &BuildOptions, record: &PlanRecord) -> bool {
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
