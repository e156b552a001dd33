//! Engine heuristics: each requested [`HeuristicMode`] queried in order and the engine configs
//! concatenated into one candidate list, each [`Candidate`] described (engine id, knobs, notes,
//! workspace and shared memory, read without compiling anything) for filtering, building and
//! error messages.

use std::time::{Duration, Instant};

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendAttributeType_t as T;
use sys::cudnnBackendDescriptorType_t as K;

use super::candidate::{
    BehaviorNote, Candidate, CandidateState, HeuristicFailure, HeuristicMode, Knob, NumericalNote, Rejection,
};
use super::{BackendError, Cudnn};
use crate::cudnn::{Binding, Descriptor};
impl Rejection {
    /// The rejection a failed cuDNN call (or another backend error) stands for.
    pub(crate) fn from_error(e: impl Into<BackendError>) -> Self {
        match e.into() {
            BackendError::Cudnn { call, attribute, status, message, .. } => {
                Rejection::Cudnn { call, attribute, status, message }
            }
            other => Rejection::Other { message: other.to_string() },
        }
    }
}

/// An engine config descriptor with its description.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) descriptor: Descriptor,
    /// Descriptors the config was made from (engine, knob choices), kept alive with it.
    pub(crate) parts: Vec<Descriptor>,
    pub(crate) candidate: Candidate,
}

/// What [`query`] found, and how long its two halves took.
#[derive(Debug)]
pub(crate) struct Query {
    pub(crate) configs: Vec<Config>,
    pub(crate) failures: Vec<HeuristicFailure>,
    /// The heuristic queries themselves.
    pub(crate) heuristics: Duration,
    /// Describing each config (engine, knobs, notes, workspace: cuDNN's support check without
    /// compiling).
    pub(crate) check_support: Duration,
}

/// Queries every mode in order; a failing mode is recorded, not fatal.
pub(crate) fn query(cudnn: &Cudnn, operation_graph: &Descriptor, modes: &[HeuristicMode]) -> Query {
    let mut q =
        Query { configs: Vec::new(), failures: Vec::new(), heuristics: Duration::ZERO, check_support: Duration::ZERO };
    for &mode in modes {
        let start = Instant::now();
        let found = query_mode(cudnn, operation_graph, mode);
        let took = start.elapsed();
        q.heuristics += took;
        match found {
            Ok(found) => {
                tracing::debug!(mode = %mode, configs = found.len(), elapsed_us = crate::micros(took), "heuristics");
                if found.is_empty() {
                    // What cuDNN's support checks said of each engine it tried: why none was proposed.
                    let said = engines_said(&crate::cudnn::last_error_message());
                    if !said.is_empty() {
                        let message = format!("no engine configuration; cuDNN's checks: {}", said.join("; "));
                        q.failures.push(HeuristicFailure { mode, reason: Rejection::Other { message } });
                    }
                }
                let start = Instant::now();
                for descriptor in found {
                    let mut candidate = describe(&descriptor, q.configs.len(), Some(mode));
                    if let Some(first) = q.configs.iter().find(|c| c.candidate.same_config(&candidate)) {
                        candidate.state = CandidateState::Rejected(Rejection::Duplicate { of: first.candidate.index });
                    }
                    q.configs.push(Config { descriptor, parts: Vec::new(), candidate });
                }
                q.check_support += start.elapsed();
            }
            Err(e) => {
                tracing::debug!(mode = %mode, error = %e, elapsed_us = crate::micros(took), "heuristics failed");
                q.failures.push(HeuristicFailure { mode, reason: Rejection::from_error(e) })
            }
        }
    }
    q
}

/// The first (most specific) reason cuDNN's `cudnnGetLastErrorString` gives for each engine its
/// heuristics tried and found unsupported, once per engine and reason: `engine 1:
/// CUDNN_STATUS_NOT_SUPPORTED_LAYOUT (!is_NHWC)`. cuDNN 9.19 writes one block per engine config
/// tried, its JSON (`{"engineId":1,...}`) then `Warning: STATUS; Reason: ...` lines, innermost
/// check first; blocks are separated by a blank line. Empty for a message of no such block.
fn engines_said(message: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for block in message.split("\n\n") {
        let mut lines = block.lines();
        let Some(engine) = lines.next().and_then(|l| {
            let rest = &l[l.find("\"engineId\":")? + "\"engineId\":".len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            (!digits.is_empty()).then_some(digits)
        }) else {
            continue;
        };
        let Some((status, reason)) = lines.find_map(|l| l.trim().strip_prefix("Warning: ")?.split_once("; Reason: "))
        else {
            continue;
        };
        let said = format!("engine {engine}: {} ({})", status.trim(), reason.trim());
        if !out.contains(&said) {
            out.push(said);
        }
    }
    out
}

/// The engine config `engine` with exactly `knobs`, made without heuristics (cudnn-frontend's
/// `create_execution_plan(engine_id, knobs)`), described like a heuristic candidate; a config
/// cuDNN refuses is the rejected candidate, saying why.
pub(crate) fn explicit(
    cudnn: &Cudnn,
    operation_graph: &Descriptor,
    engine: i64,
    knobs: &[Knob],
) -> Result<Config, Box<Candidate>> {
    let mut parts = Vec::new();
    let made = (|| -> Result<Descriptor, BackendError> {
        let mut e = Descriptor::new(K::CUDNN_BACKEND_ENGINE_DESCRIPTOR)?;
        e.set_descriptors(A::CUDNN_ATTR_ENGINE_OPERATION_GRAPH, &[operation_graph])?;
        e.set_i64s(A::CUDNN_ATTR_ENGINE_GLOBAL_INDEX, &[engine])?;
        if let Binding::DeviceProperties(properties) = cudnn.binding() {
            e.set_descriptors(A::CUDNN_ATTR_ENGINE_DEVICEPROP, &[properties])?;
        }
        e.finalize()?;
        let mut choices = Vec::with_capacity(knobs.len());
        for k in knobs {
            let mut c = Descriptor::new(K::CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR)?;
            let kind = u32::try_from(k.kind)
                .map_err(|_| BackendError::BadValue { what: "a knob type", value: i64::from(k.kind) })?;
            c.set_enum(A::CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, T::CUDNN_TYPE_KNOB_TYPE, kind)?;
            c.set_i64s(A::CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, &[k.value])?;
            c.finalize()?;
            choices.push(c);
        }
        let mut config = Descriptor::new(K::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)?;
        config.set_descriptors(A::CUDNN_ATTR_ENGINECFG_ENGINE, &[&e])?;
        if !choices.is_empty() {
            let refs: Vec<&Descriptor> = choices.iter().collect();
            config.set_descriptors(A::CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, &refs)?;
        }
        config.finalize()?;
        parts.push(e);
        parts.extend(choices);
        Ok(config)
    })();
    match made {
        Ok(descriptor) => {
            let candidate = describe(&descriptor, 0, None);
            Ok(Config { descriptor, parts, candidate })
        }
        Err(e) => Err(Box::new(Candidate {
            index: 0,
            mode: None,
            engine_id: Some(engine),
            knobs: knobs.to_vec(),
            numerical_notes: Vec::new(),
            behavior_notes: Vec::new(),
            workspace_bytes: None,
            shared_memory_bytes: None,
            state: CandidateState::Rejected(Rejection::from_error(e)),
        })),
    }
}

fn query_mode(
    cudnn: &Cudnn,
    operation_graph: &Descriptor,
    mode: HeuristicMode,
) -> Result<Vec<Descriptor>, BackendError> {
    let mut heuristics = Descriptor::new(K::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
    heuristics.set_descriptors(A::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &[operation_graph])?;
    heuristics.set_enum(A::CUDNN_ATTR_ENGINEHEUR_MODE, T::CUDNN_TYPE_HEUR_MODE, mode.cudnn_value())?;
    match cudnn.binding() {
        Binding::DeviceProperties(properties) => {
            heuristics.set_descriptors(A::CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, &[properties])?
        }
        Binding::Handle(_) => {}
    }
    heuristics.finalize()?;
    let count = heuristics.get_descriptor_count(A::CUDNN_ATTR_ENGINEHEUR_RESULTS)?;
    Ok(heuristics.get_descriptors(A::CUDNN_ATTR_ENGINEHEUR_RESULTS, K::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, count)?)
}

/// Describes an engine config; a config cuDNN cannot describe becomes a rejected candidate.
pub(crate) fn describe(config: &Descriptor, index: usize, mode: Option<HeuristicMode>) -> Candidate {
    let mut candidate = Candidate {
        index,
        mode,
        engine_id: None,
        knobs: Vec::new(),
        numerical_notes: Vec::new(),
        behavior_notes: Vec::new(),
        // Known from cuDNN 9.2 on without compiling; where the query fails, building decides.
        workspace_bytes: config
            .get_i64(A::CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE)
            .ok()
            .and_then(|w| usize::try_from(w).ok()),
        shared_memory_bytes: config
            .get_i32(A::CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED)
            .ok()
            .and_then(|s| usize::try_from(s).ok()),
        state: CandidateState::Untried,
    };
    if let Err(e) = describe_engine(config, &mut candidate) {
        candidate.state = CandidateState::Rejected(Rejection::from_error(e));
    }
    candidate
}

/// Room for every note type this or a later cuDNN defines (9.19 has 10 and 5).
const NOTE_CAPACITY: usize = 32;
/// Room for a choice of every knob type (9.19 has 44).
const KNOB_CAPACITY: usize = 64;

fn describe_engine(config: &Descriptor, candidate: &mut Candidate) -> Result<(), BackendError> {
    let engine = config
        .get_descriptors(A::CUDNN_ATTR_ENGINECFG_ENGINE, K::CUDNN_BACKEND_ENGINE_DESCRIPTOR, 1)?
        .pop()
        .ok_or(BackendError::BadValue { what: "the engine count of an engine config", value: 0 })?;
    candidate.engine_id = Some(engine.get_i64(A::CUDNN_ATTR_ENGINE_GLOBAL_INDEX)?);
    candidate.numerical_notes = engine
        .get_enums(A::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, T::CUDNN_TYPE_NUMERICAL_NOTE, NOTE_CAPACITY)?
        .into_iter()
        .map(NumericalNote::from_cudnn)
        .collect();
    candidate.behavior_notes = engine
        .get_enums(A::CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, T::CUDNN_TYPE_BEHAVIOR_NOTE, NOTE_CAPACITY)?
        .into_iter()
        .map(BehaviorNote::from_cudnn)
        .collect();
    // A count query (capacity 0) reports 0 knob choices here even when there are some, so ask
    // for room for every knob type, as cudnn-frontend does.
    let choices = config.get_descriptors(
        A::CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
        K::CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR,
        KNOB_CAPACITY,
    )?;
    candidate.knobs = choices
        .iter()
        .map(|c| {
            let kind = c.get_enums(A::CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, T::CUDNN_TYPE_KNOB_TYPE, 1)?;
            let value = c.get_i64(A::CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE)?;
            Ok(Knob { kind: kind.first().copied().unwrap_or(-1), value })
        })
        .collect::<Result<_, BackendError>>()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::engines_said;

    #[test]
    fn what_cudnn_said_of_each_engine_is_its_first_reason() {
        // cuDNN 9.19's last error after heuristics proposed nothing for a max over rows (abridged).
        let message = "{\"engineId\":1,\"smVersion\":900,\"knobChoices\":{\"CUDNN_KNOB_TYPE_KERNEL_CFG\":34}}\n\
            Warning: CUDNN_STATUS_NOT_SUPPORTED_LAYOUT; Reason: !is_NHWC\n\
            Warning: CUDNN_STATUS_NOT_SUPPORTED_LAYOUT; Reason: check_reduction_support_fort(node)\n\
            Warning: CUDNN_STATUS_NOT_SUPPORTED; Reason: finalize_internal()\n\
            \n\
            {\"engineId\":1,\"smVersion\":900,\"knobChoices\":{\"CUDNN_KNOB_TYPE_KERNEL_CFG\":8}}\n\
            Warning: CUDNN_STATUS_NOT_SUPPORTED_LAYOUT; Reason: !is_NHWC\n\
            \n\
            {\"engineId\":2,\"smVersion\":900,\"knobChoices\":{\"CUDNN_KNOB_TYPE_KERNEL_CFG\":0}}\n\
            Warning: CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN; Reason: Unsupported node in the graph.\n at: true\n\
            Warning: CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN; Reason: check_node_support_fort(node_ptr)";
        assert_eq!(
            engines_said(message),
            [
                "engine 1: CUDNN_STATUS_NOT_SUPPORTED_LAYOUT (!is_NHWC)",
                "engine 2: CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN (Unsupported node in the graph.)"
            ]
        );
        assert!(engines_said("").is_empty());
        assert!(engines_said("CUDNN_BACKEND_TENSOR_DESCRIPTOR: Check and Set CUDNN_ATTR_TENSOR_STRIDES\n").is_empty());
    }
}
