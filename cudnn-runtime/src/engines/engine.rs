//! Engines: one id space for cuDNN's engines and engines written in Rust, and a [`Router`] that
//! orders candidates across them and plans a graph once.
//!
//! **Ids.** [`EngineId`]s below [`EngineId::RUST_BASE`] are cuDNN's global engine indices (what
//! [`Candidate::engine_id`] holds); ids from `RUST_BASE` on are reserved for engines written in
//! Rust, like cudnn-frontend's Python engines. [`EngineId::REFERENCE`] (`RUST_BASE`) is the CPU
//! reference engine. The ids are stable: they appear in candidate lists, filters
//! ([`BuildOptions::deselect_engines`], [`BuildOptions::engine`]) and logs.
//!
//! **Routing.** [`Router::plan`] asks cuDNN (when given a context) and then each registered Rust
//! engine, in the router's [`Order`]; every proposal becomes a [`Candidate`] in one list (cuDNN's
//! with their heuristic modes, Rust engines' with mode `None`), the filters of the
//! [`BuildOptions`] apply to all of them, and the first engine that accepts the graph is the
//! plan — so a graph cuDNN cannot run (an `f64` pointwise graph, a lone reduction) falls back to
//! the reference engine, and the candidate list says why.
//!
//! ```
//! # use cudnn_runtime as cudnn_graph;
//! use cudnn_graph::engines::engine::{EngineId, RoutedTarget, Router};
//! use cudnn_graph::backend::BuildOptions;
//! use cudnn_graph::{DataType, GraphBuilder};
//! let mut g = GraphBuilder::new("twice");
//! let x = g.input("x", DataType::F64, &[3])?;
//! let y = g.op("add", &[x.into(), x.into()], &[])?[0];
//! g.output(y, "y", DataType::F64)?;
//! let graph = g.build()?;
//! // No cuDNN context: only the Rust engines are asked.
//! let routed = Router::new().plan(None, &graph, &BuildOptions::default())?;
//! assert_eq!(routed.engine_id(), EngineId::REFERENCE);
//! assert!(matches!(routed.target(), RoutedTarget::Rust(_)));
//! let out = routed.run_host(&[("x", [1.0f64, 2.0, 3.5].as_slice().into())])?;
//! assert_eq!(out[0].data, [2.0, 4.0, 7.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::sync::Arc;

use super::planner::Planner;
use crate::array::{Array, HostSlice};
use crate::backend::{BackendError, BuildOptions, Candidate, CandidateState, Cudnn, ExecutionPlan, Filter, Rejection};
use crate::reference;
use crate::Graph;

/// An engine id: cuDNN's global engine index, or an id in the Rust region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EngineId(pub i64);

impl EngineId {
    /// The first id of the region reserved for engines written in Rust (2³²); cuDNN's global
    /// engine indices are small non-negative integers, far below it.
    pub const RUST_BASE: i64 = 1 << 32;
    /// The CPU reference engine ([`ReferenceEngine`]).
    pub const REFERENCE: EngineId = EngineId(Self::RUST_BASE);

    /// Whether this is one of cuDNN's engine ids.
    pub fn is_cudnn(self) -> bool {
        (0..Self::RUST_BASE).contains(&self.0)
    }

    /// Whether this is in the region reserved for engines written in Rust.
    pub fn is_rust(self) -> bool {
        self.0 >= Self::RUST_BASE
    }
}

impl fmt::Display for EngineId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_rust() {
            write!(f, "rust engine {}", self.0 - Self::RUST_BASE)
        } else {
            write!(f, "cuDNN engine {}", self.0)
        }
    }
}

/// An engine written in Rust, running graphs on host buffers.
///
/// ```
/// use cudnn_runtime::engines::engine::{Engine, EngineId, Router};
/// use cudnn_runtime::reference::{Array, HostSlice};
/// use cudnn_runtime::Graph;
///
/// /// Runs only single-node graphs, through the reference engine.
/// struct SingleNode;
/// impl Engine for SingleNode {
///     fn id(&self) -> EngineId { EngineId(EngineId::RUST_BASE + 7) }
///     fn name(&self) -> &str { "single-node" }
///     fn supports(&self, graph: &Graph) -> Result<(), String> {
///         if graph.nodes.len() == 1 { Ok(()) } else { Err(format!("{} nodes", graph.nodes.len())) }
///     }
///     fn run(&self, graph: &Graph, inputs: &[(&str, HostSlice<'_>)]) -> cudnn_runtime::Result<Vec<Array>> {
///         Ok(cudnn_runtime::reference::run(graph, inputs)?)
///     }
/// }
/// let mut router = Router::new();
/// router.register(std::sync::Arc::new(SingleNode))?;
/// # Ok::<(), cudnn_runtime::backend::BackendError>(())
/// ```
pub trait Engine: Send + Sync {
    /// Its stable id, in the Rust region (at least [`EngineId::RUST_BASE`]).
    fn id(&self) -> EngineId;
    /// A short name for candidate lists and logs.
    fn name(&self) -> &str;
    /// Whether it can run `graph` (a validated graph); `Err` says why not.
    fn supports(&self, graph: &Graph) -> Result<(), String>;
    /// Runs `graph` on named host inputs; returns the outputs in [`Graph::outputs`] order.
    fn run(&self, graph: &Graph, inputs: &[(&str, HostSlice<'_>)]) -> crate::Result<Vec<Array>>;
}

/// The CPU reference engine ([`crate::reference::run`]) as an engine: every valid graph, in
/// `f64` with storage rounding.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReferenceEngine;

impl Engine for ReferenceEngine {
    fn id(&self) -> EngineId {
        EngineId::REFERENCE
    }

    fn name(&self) -> &str {
        "reference"
    }

    fn supports(&self, _graph: &Graph) -> Result<(), String> {
        Ok(())
    }

    fn run(&self, graph: &Graph, inputs: &[(&str, HostSlice<'_>)]) -> crate::Result<Vec<Array>> {
        Ok(reference::run(graph, inputs)?)
    }
}

/// Which engines a [`Router`] asks first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    /// cuDNN's candidates (in heuristic order), then the Rust engines in registration order.
    #[default]
    CudnnFirst,
    /// The Rust engines, then cuDNN's candidates.
    RustFirst,
}

/// Orders candidates across cuDNN and registered Rust engines and plans graphs; see the module
/// documentation.
#[derive(Clone)]
pub struct Router {
    engines: Vec<Arc<dyn Engine>>,
    order: Order,
}

impl fmt::Debug for Router {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let engines: Vec<String> = self.engines.iter().map(|e| format!("{} ({})", e.name(), e.id().0)).collect();
        f.debug_struct("Router").field("engines", &engines).field("order", &self.order).finish()
    }
}

impl Default for Router {
    fn default() -> Self {
        Self::new()
    }
}

impl Router {
    /// A router with the reference engine registered, cuDNN first.
    pub fn new() -> Self {
        Router { engines: vec![Arc::new(ReferenceEngine)], order: Order::CudnnFirst }
    }

    /// A router with no Rust engine (cuDNN only, unless some are registered).
    pub fn empty() -> Self {
        Router { engines: Vec::new(), order: Order::CudnnFirst }
    }

    /// Which engines are asked first.
    pub fn order(mut self, order: Order) -> Self {
        self.order = order;
        self
    }

    /// Adds a Rust engine (asked after those registered before it). Its id must be in the Rust
    /// region and not taken.
    pub fn register(&mut self, engine: Arc<dyn Engine>) -> Result<(), BackendError> {
        let id = engine.id();
        let refuse = |reason| Err(BackendError::EngineId { name: engine.name().to_string(), id: id.0, reason });
        if !id.is_rust() {
            return refuse("ids below EngineId::RUST_BASE (2^32) are cuDNN's");
        }
        if self.engines.iter().any(|e| e.id() == id) {
            return refuse("another registered engine has it");
        }
        self.engines.push(engine);
        Ok(())
    }

    /// The registered Rust engines, in the order they are asked.
    pub fn engines(&self) -> &[Arc<dyn Engine>] {
        &self.engines
    }

    /// Plans `graph` once: cuDNN's candidates (with `cudnn`, built as `options` say) and the Rust
    /// engines, in this router's order, filtered by `options`; the first that accepts it is the
    /// plan. [`BuildOptions::engine`] with a Rust id routes to that engine alone; with a cuDNN id,
    /// to cuDNN alone. Fails with [`BackendError::NoPlan`] listing every candidate of every
    /// engine when none accepts the graph; a graph that breaks a rule fails with its
    /// [`crate::GraphError`] before any engine is asked.
    // Long because it asks each engine in the router's order and gathers every candidate into one
    // error; the order and the gathering share its locals.
    pub fn plan(&self, cudnn: Option<&Cudnn>, graph: &Graph, options: &BuildOptions) -> crate::Result<RoutedPlan> {
        graph.validate()?;
        let pinned = options.engine.as_ref().map(|e| EngineId(e.id));
        let ask_cudnn = cudnn.is_some() && pinned.is_none_or(EngineId::is_cudnn);
        let mut candidates = Vec::new();
        let mut heuristics = Vec::new();
        let mut chosen: Option<(usize, RoutedTarget)> = None;
        let steps: [bool; 2] = match self.order {
            Order::CudnnFirst => [true, false],
            Order::RustFirst => [false, true],
        };
        for is_cudnn in steps {
            if is_cudnn {
                let Some(cudnn) = cudnn.filter(|_| ask_cudnn) else { continue };
                if chosen.is_some() {
                    continue;
                }
                let offset = candidates.len();
                let shift = |mut c: Candidate| {
                    c.index += offset;
                    if let CandidateState::Rejected(Rejection::Duplicate { of }) = &mut c.state {
                        *of += offset;
                    }
                    c
                };
                match Planner::as_asked(cudnn, graph, options) {
                    Ok(plan) => {
                        let selected = plan.selected().index + offset;
                        candidates.extend(plan.candidates().iter().cloned().map(shift));
                        chosen = Some((selected, RoutedTarget::Cudnn(Box::new(plan))));
                    }
                    Err(BackendError::NoPlan { candidates: c, heuristics: h, .. }) => {
                        candidates.extend(c.into_iter().map(shift));
                        heuristics.extend(h);
                    }
                    Err(e @ (BackendError::Graph(_) | BackendError::Arg(_))) => return Err(e.into()),
                    Err(e) => {
                        // cuDNN cannot take the graph at all (no lowering for an op, ...).
                        let mut c = rust_candidate(candidates.len(), None);
                        c.state = CandidateState::Rejected(Rejection::Other { message: format!("cuDNN: {e}") });
                        candidates.push(c);
                    }
                }
            } else {
                for engine in &self.engines {
                    let id = engine.id();
                    let mut c = rust_candidate(candidates.len(), Some(id));
                    c.state = if pinned.is_some_and(|p| p != id) {
                        CandidateState::Rejected(Rejection::Other {
                            message: format!("BuildOptions::engine asks for engine {}", pinned.map_or(0, |p| p.0)),
                        })
                    } else if options.deselect_engines.contains(&id.0) {
                        CandidateState::Rejected(Rejection::Filtered(Filter::DeselectedEngine(id.0)))
                    } else if let Some(r) = options.bars(&c) {
                        CandidateState::Rejected(r)
                    } else if chosen.is_some() {
                        CandidateState::Untried
                    } else {
                        match engine.supports(graph) {
                            Ok(()) => {
                                chosen = Some((c.index, RoutedTarget::Rust(engine.clone())));
                                CandidateState::Built
                            }
                            Err(why) => CandidateState::Rejected(Rejection::Other {
                                message: format!("{} does not support the graph: {why}", engine.name()),
                            }),
                        }
                    };
                    candidates.push(c);
                }
            }
        }
        match chosen {
            Some((selected, target)) => Ok(RoutedPlan { graph: graph.clone(), candidates, selected, target }),
            None => Err(BackendError::NoPlan {
                graph: graph.name.clone(),
                nodes: graph.nodes.iter().map(|n| (n.name.clone(), n.op.call_name())).collect(),
                candidates,
                heuristics,
                not_channels_last: graph.ports_not_channels_last(),
            }
            .into()),
        }
    }
}

/// A candidate standing for a Rust engine (or for cuDNN as a whole, with `id` `None`).
fn rust_candidate(index: usize, id: Option<EngineId>) -> Candidate {
    Candidate {
        index,
        mode: None,
        engine_id: id.map(|i| i.0),
        knobs: Vec::new(),
        numerical_notes: Vec::new(),
        behavior_notes: Vec::new(),
        workspace_bytes: Some(0),
        shared_memory_bytes: None,
        state: CandidateState::Untried,
    }
}

/// What a [`RoutedPlan`] runs on.
pub enum RoutedTarget {
    /// A cuDNN plan: execute it with device buffers.
    Cudnn(Box<ExecutionPlan>),
    /// A Rust engine: run it with host buffers ([`RoutedPlan::run_host`]).
    Rust(Arc<dyn Engine>),
}

impl fmt::Debug for RoutedTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RoutedTarget::Cudnn(plan) => write!(f, "Cudnn({})", plan.selected().tag()),
            RoutedTarget::Rust(engine) => write!(f, "Rust({})", engine.name()),
        }
    }
}

/// A graph planned by a [`Router`]: every engine's candidates and the one selected.
#[derive(Debug)]
pub struct RoutedPlan {
    graph: Graph,
    candidates: Vec<Candidate>,
    selected: usize,
    target: RoutedTarget,
}

impl RoutedPlan {
    /// The graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Every candidate of every engine asked, in the order asked, with its state.
    pub fn candidates(&self) -> &[Candidate] {
        &self.candidates
    }

    /// The selected candidate.
    pub fn selected(&self) -> &Candidate {
        &self.candidates[self.selected]
    }

    /// The selected engine's id.
    pub fn engine_id(&self) -> EngineId {
        match &self.target {
            RoutedTarget::Cudnn(plan) => EngineId(plan.selected().engine_id.unwrap_or(-1)),
            RoutedTarget::Rust(engine) => engine.id(),
        }
    }

    /// What it runs on.
    pub fn target(&self) -> &RoutedTarget {
        &self.target
    }

    /// The cuDNN plan, when cuDNN was selected.
    pub fn cudnn_plan(&self) -> Option<&ExecutionPlan> {
        match &self.target {
            RoutedTarget::Cudnn(plan) => Some(plan),
            RoutedTarget::Rust(_) => None,
        }
    }

    /// The cuDNN plan (to execute, autotune or cache), when cuDNN was selected.
    pub fn into_cudnn_plan(self) -> Option<ExecutionPlan> {
        match self.target {
            RoutedTarget::Cudnn(plan) => Some(*plan),
            RoutedTarget::Rust(_) => None,
        }
    }

    /// Runs a Rust engine's plan on named host inputs; returns the outputs in
    /// [`Graph::outputs`] order. A cuDNN plan runs on device buffers instead
    /// ([`ExecutionPlan::execute`]): asking it here is a [`BackendError::WrongEngine`].
    pub fn run_host(&self, inputs: &[(&str, HostSlice<'_>)]) -> crate::Result<Vec<Array>> {
        match &self.target {
            RoutedTarget::Rust(engine) => engine.run(&self.graph, inputs),
            RoutedTarget::Cudnn(plan) => Err(BackendError::WrongEngine {
                graph: self.graph.name.clone(),
                engine: format!("cuDNN ({})", plan.selected().tag()),
                reason: "runs on device buffers: use ExecutionPlan::execute",
            }
            .into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DataType, GraphBuilder};

    fn graph() -> Graph {
        let mut g = GraphBuilder::new("g");
        let x = g.input("x", DataType::F32, &[4]).unwrap();
        let y = g.op("relu", &[x.into()], &[]).unwrap()[0];
        g.output(y, "y", DataType::F32).unwrap();
        g.build().unwrap()
    }

    struct Named(i64, &'static str, bool);
    impl Engine for Named {
        fn id(&self) -> EngineId {
            EngineId(self.0)
        }
        fn name(&self) -> &str {
            self.1
        }
        fn supports(&self, _: &Graph) -> Result<(), String> {
            if self.2 {
                Ok(())
            } else {
                Err("never".into())
            }
        }
        fn run(&self, graph: &Graph, inputs: &[(&str, HostSlice<'_>)]) -> crate::Result<Vec<Array>> {
            Ok(reference::run(graph, inputs)?)
        }
    }

    #[test]
    fn id_regions() {
        assert!(EngineId(0).is_cudnn() && EngineId(74).is_cudnn() && !EngineId(74).is_rust());
        assert!(EngineId::REFERENCE.is_rust() && !EngineId::REFERENCE.is_cudnn());
        assert!(!EngineId(-1).is_cudnn() && !EngineId(-1).is_rust());
        assert_eq!(EngineId::REFERENCE.to_string(), "rust engine 0");
        assert_eq!(EngineId(12).to_string(), "cuDNN engine 12");
    }

    #[test]
    fn registration_checks_ids() {
        let mut r = Router::new();
        assert!(matches!(r.register(Arc::new(Named(3, "low", true))), Err(BackendError::EngineId { id: 3, .. })));
        let dup = r.register(Arc::new(Named(EngineId::RUST_BASE, "dup", true)));
        assert!(matches!(dup, Err(BackendError::EngineId { .. })));
        r.register(Arc::new(Named(EngineId::RUST_BASE + 1, "one", true))).unwrap();
        assert_eq!(r.engines().len(), 2);
    }

    #[test]
    fn routing_order_filters_and_reasons() {
        let mut r = Router::empty();
        r.register(Arc::new(Named(EngineId::RUST_BASE + 1, "picky", false))).unwrap();
        r.register(Arc::new(Named(EngineId::RUST_BASE + 2, "able", true))).unwrap();
        r.register(Arc::new(ReferenceEngine)).unwrap();
        let routed = r.plan(None, &graph(), &BuildOptions::default()).unwrap();
        assert_eq!(routed.engine_id(), EngineId(EngineId::RUST_BASE + 2));
        let states: Vec<_> = routed.candidates().iter().map(|c| c.state.clone()).collect();
        assert!(
            matches!(&states[0], CandidateState::Rejected(Rejection::Other { message }) if message.contains("never"))
        );
        assert_eq!(states[1], CandidateState::Built);
        assert_eq!(states[2], CandidateState::Untried);
        let out = routed.run_host(&[("x", [-1.0f32, 2.0, -3.0, 4.0].as_slice().into())]).unwrap();
        assert_eq!(out[0].data, [0.0, 2.0, 0.0, 4.0]);

        let skip_able = BuildOptions::default().deselect_engine(EngineId::RUST_BASE + 2);
        let routed = r.plan(None, &graph(), &skip_able).unwrap();
        assert_eq!(routed.engine_id(), EngineId::REFERENCE);
        assert_eq!(
            routed.candidates()[1].state,
            CandidateState::Rejected(Rejection::Filtered(Filter::DeselectedEngine(EngineId::RUST_BASE + 2)))
        );

        let pinned = BuildOptions::default().engine_config(EngineId::RUST_BASE, &[]);
        assert_eq!(r.plan(None, &graph(), &pinned).unwrap().engine_id(), EngineId::REFERENCE);

        let none =
            BuildOptions::default().deselect_engine(EngineId::RUST_BASE + 2).deselect_engine(EngineId::RUST_BASE);
        match r.plan(None, &graph(), &none) {
            Err(crate::Error::Backend(e @ BackendError::NoPlan { .. })) => {
                let text = e.to_string();
                assert!(text.contains("deselect_engines") && text.contains("never"), "{text}");
            }
            other => panic!("{other:?}"),
        }
    }
}
