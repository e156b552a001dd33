//! The plan payload: a built [`ExecutionPlan`] written out and read back, with or without the
//! graph's structure (cudnn-frontend PRs #364 and #371).
//!
//! ```text
//! {
//!   "cudnn_graph_payload": 1,
//!   "structure": { ...structural JSON, see the module above... },   ← only with `structure: true`
//!   "plan": {
//!     "graph_name": "MatmulBiasRelu", "graph_fingerprint": "0x…", "type_fingerprint": "0x…",
//!     "binding": "M = 192", "cudnn_version": 91900, "sm": 90, "device_properties": {...},
//!     "engine": {"id": 7, "tag": "eng7_k2=3…", "knobs": [[2, 3], …],
//!                "behavior_notes": ["RUNTIME_COMPILATION"], "numerical_notes": ["TENSOR_CORE"]},
//!     "variant_pack_uids": [1, 2, 3, 6], "scalars": [{"uid": 4, "data_type": "FLOAT", "bits": "0x3fe0…"}],
//!     "workspace_size": 0, "workspace_init": [],
//!     "plan_json": "…cuDNN's CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION…"
//!   }
//! }
//! ```
//!
//! The notes are the *selected* plan's (not the union of every candidate's). Reading checks, in
//! order: the format, the cuDNN version and SM against the context, the graph (from the payload's
//! structure or the caller's) against the recorded fingerprint, the caller's expected type
//! fingerprint and binding, and the variant-pack layout against the graph's. Every mismatch is a
//! [`PayloadError`] naming both sides. Writing a plan read back gives an equivalent payload
//! (cuDNN's plan JSON aside, which embeds pointers).

use serde::{Deserialize, Serialize};

use super::{structure_from_json, structure_to_json, SerializeError};
use crate::backend::{Cudnn, ExecutionPlan};
use crate::{DataType, Graph};

/// The payload format this build writes and reads.
pub const PAYLOAD_FORMAT: u32 = 1;

/// The largest payload [`read_payload`] accepts.
pub const MAX_PAYLOAD_BYTES: usize = 256 << 20;

/// What [`write_payload`] includes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SerializeOptions {
    /// Include the graph's structure (default). Without it the payload is plan-only and needs
    /// the graph (or graph type) it was made from to load.
    pub structure: bool,
}

impl Default for SerializeOptions {
    fn default() -> Self {
        SerializeOptions { structure: true }
    }
}

/// What a `graph!` type records in its payloads and expects of those it reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expect {
    /// The graph type's `FINGERPRINT`.
    pub type_fingerprint: Option<u64>,
    /// The graph type's name.
    pub type_name: Option<String>,
    /// The runtime-dim binding, `M = 192`.
    pub binding: Option<String>,
    /// The runtime dims by name (what a plan-only payload needs to rebuild the graph).
    pub runtime_dims: Vec<(String, i64)>,
}

/// Where a plan was made: the cuDNN version and target, recorded in its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanOrigin {
    /// `cudnnGetVersion()`.
    pub cudnn_version: usize,
    /// The target's compute capability (`90`).
    pub sm: Option<u32>,
    /// The device-properties JSON of a deviceless context.
    pub device_properties: Option<String>,
    /// The engine as recorded when the plan was first selected, for a plan loaded from a payload.
    /// cuDNN reports a reloaded config with its default knobs filled in (`SPLIT_K_SLC = -1`, say);
    /// the record written is the one that was read, so a round trip loses and adds nothing.
    pub engine: Option<EngineRecord>,
}

impl PlanOrigin {
    /// The origin of plans made with `cudnn`.
    pub fn of(cudnn: &Cudnn) -> Self {
        PlanOrigin {
            cudnn_version: cudnn.version(),
            sm: cudnn.sm(),
            device_properties: cudnn.device_properties().map(str::to_string),
            engine: None,
        }
    }
}

/// The selected engine config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineRecord {
    /// cuDNN's global engine index.
    pub id: Option<i64>,
    /// cudnn-frontend's tag, `eng7_k2=3_…`.
    pub tag: String,
    /// `(knob type, value)` pairs.
    pub knobs: Vec<(i32, i64)>,
    /// The selected engine's behavior notes.
    pub behavior_notes: Vec<String>,
    /// The selected engine's numerical notes.
    pub numerical_notes: Vec<String>,
}

/// A by-value scalar of the variant pack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScalarRecord {
    /// The tensor's uid.
    pub uid: i64,
    /// Its type.
    pub data_type: DataType,
    /// The value's `f64` bit pattern, `0x…`.
    pub bits: String,
}

/// The plan part of a payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanRecord {
    /// The graph's name.
    pub graph_name: String,
    /// [`Graph::fingerprint`] of the graph the plan computes, `0x…`.
    pub graph_fingerprint: String,
    /// The `graph!` type's `FINGERPRINT`, when written by one.
    pub type_fingerprint: Option<String>,
    /// The runtime-dim binding, when written by a `graph!` type.
    pub binding: Option<String>,
    /// The runtime dims by name, when written by a `graph!` type.
    #[serde(default)]
    pub runtime_dims: Vec<(String, i64)>,
    /// `cudnnGetVersion()` of the cuDNN that made the plan.
    pub cudnn_version: usize,
    /// The target's compute capability (`90`), when known.
    pub sm: Option<u32>,
    /// The device properties of a deviceless build.
    pub device_properties: Option<serde_json::Value>,
    /// The selected engine.
    pub engine: EngineRecord,
    /// Variant-pack uids, ascending.
    pub variant_pack_uids: Vec<i64>,
    /// By-value scalars.
    pub scalars: Vec<ScalarRecord>,
    /// Workspace bytes.
    pub workspace_size: usize,
    /// Workspace initialisation (`(offset, bytes as hex)`); none of today's ops needs any.
    pub workspace_init: Vec<(usize, String)>,
    /// cuDNN's execution-plan JSON.
    pub plan_json: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    cudnn_graph_payload: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    structure: Option<serde_json::Value>,
    plan: PlanRecord,
}

/// Why a payload cannot be read (or does not fit where it is loaded).
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    /// Not JSON of the payload's shape (truncated, corrupted, foreign).
    #[error("not a cudnn-graph plan payload: {0}")]
    Malformed(String),
    /// Over [`MAX_PAYLOAD_BYTES`].
    #[error("payload of {0} bytes is over the {MAX_PAYLOAD_BYTES}-byte limit")]
    TooLarge(usize),
    /// A format this build does not read.
    #[error("payload format {found} is not supported (this build reads {PAYLOAD_FORMAT})")]
    Format {
        /// The payload's format.
        found: u32,
    },
    /// Made by another cuDNN: cuDNN loads plans only into the version that made them.
    #[error("the plan was made by cuDNN {payload} but this context runs cuDNN {runtime}; plans load only into the exact version that made them")]
    CudnnVersion {
        /// The payload's version.
        payload: usize,
        /// The loaded version.
        runtime: usize,
    },
    /// Made for another GPU architecture.
    #[error("the plan was compiled for sm {payload} but this context targets sm {runtime}")]
    Sm {
        /// The payload's SM.
        payload: u32,
        /// The context's SM.
        runtime: u32,
    },
    /// A plan-only payload with no graph to bind it to.
    #[error("payload of graph `{graph}` has no structure: load it through its graph type, or pass the graph")]
    NeedsGraph {
        /// The payload's graph name.
        graph: String,
    },
    /// The graph does not match the one the plan was made from.
    #[error("payload was made for graph `{payload_graph}` with fingerprint {payload}, but the graph given has fingerprint {given} (another graph, shape binding or layout)")]
    GraphFingerprint {
        /// The payload's graph name.
        payload_graph: String,
        /// The payload's fingerprint.
        payload: String,
        /// The given graph's.
        given: String,
    },
    /// Made by another graph type.
    #[error(
        "payload was made by graph type `{payload_type}` (fingerprint {payload}), not `{expected_type}` ({expected})"
    )]
    TypeFingerprint {
        /// The payload's graph name.
        payload_type: String,
        /// The payload's type fingerprint.
        payload: String,
        /// The expected type.
        expected_type: String,
        /// Its fingerprint.
        expected: String,
    },
    /// Made for another runtime-dim binding.
    #[error("payload was made for {payload}, not {expected}")]
    Binding {
        /// The payload's binding.
        payload: String,
        /// The expected one.
        expected: String,
    },
    /// The variant pack the plan expects is not the graph's.
    #[error("the plan's variant pack is {payload:?} but the graph's is {graph:?}")]
    VariantPack {
        /// The payload's uids.
        payload: Vec<i64>,
        /// The graph's.
        graph: Vec<i64>,
    },
    /// The structure inside the payload is invalid.
    #[error("the payload's structure: {0}")]
    Structure(#[from] SerializeError),
    /// cuDNN rejected the plan.
    #[error("cuDNN could not load the plan: {0}")]
    Load(#[source] Box<crate::Error>),
}

fn hex(v: u64) -> String {
    format!("{v:#018x}")
}

fn record(plan: &ExecutionPlan, origin: &PlanOrigin, expect: &Expect) -> Result<PlanRecord, crate::Error> {
    let graph = plan.graph();
    let selected = plan.selected();
    let layout = plan.layout();
    let scalars = layout
        .scalars()
        .iter()
        .map(|s| {
            let value = graph.tensors.iter().find(|t| t.uid == s.uid).and_then(|t| t.pass_by_value).unwrap_or(f64::NAN);
            ScalarRecord { uid: s.uid, data_type: s.data_type, bits: hex(value.to_bits()) }
        })
        .collect();
    Ok(PlanRecord {
        graph_name: graph.name.clone(),
        graph_fingerprint: hex(graph.fingerprint()),
        type_fingerprint: expect.type_fingerprint.map(hex),
        binding: expect.binding.clone(),
        runtime_dims: expect.runtime_dims.clone(),
        cudnn_version: origin.cudnn_version,
        sm: origin.sm,
        device_properties: origin.device_properties.as_deref().and_then(|p| serde_json::from_str(p).ok()),
        engine: origin.engine.clone().unwrap_or_else(|| EngineRecord {
            id: selected.engine_id,
            tag: selected.tag(),
            knobs: selected.knobs.iter().map(|k| (k.kind, k.value)).collect(),
            behavior_notes: selected.behavior_notes.iter().map(ToString::to_string).collect(),
            numerical_notes: selected.numerical_notes.iter().map(ToString::to_string).collect(),
        }),
        variant_pack_uids: layout.uids().to_vec(),
        scalars,
        workspace_size: plan.workspace_size(),
        workspace_init: Vec::new(),
        plan_json: plan.json()?,
    })
}

/// Writes `plan` (made where `origin` says) as a payload. `expect` carries the `graph!` type's
/// fingerprint and binding, when a typed graph writes it.
pub fn write_payload(
    plan: &ExecutionPlan,
    origin: &PlanOrigin,
    options: SerializeOptions,
    expect: &Expect,
) -> Result<Vec<u8>, crate::Error> {
    let structure = if options.structure {
        let text = structure_to_json(plan.graph());
        Some(serde_json::from_str(&text).map_err(|e| PayloadError::Malformed(e.to_string()))?)
    } else {
        None
    };
    let doc = Document { cudnn_graph_payload: PAYLOAD_FORMAT, structure, plan: record(plan, origin, expect)? };
    let bytes = serde_json::to_vec(&doc).map_err(|e| PayloadError::Malformed(e.to_string()))?;
    tracing::debug!(graph = %plan.graph().name, bytes = bytes.len(), structure = options.structure, "payload written");
    Ok(bytes)
}

/// A payload parsed and checked against `cudnn`, before cuDNN loads the plan.
#[derive(Debug, Clone)]
pub struct Payload {
    /// The graph from the payload's structure, if it has one.
    pub structure: Option<Graph>,
    /// The plan record.
    pub plan: PlanRecord,
}

/// Parses a payload (no cuDNN needed): format, size and shape.
pub fn parse_payload(bytes: &[u8]) -> Result<Payload, PayloadError> {
    if bytes.len() > MAX_PAYLOAD_BYTES {
        return Err(PayloadError::TooLarge(bytes.len()));
    }
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| PayloadError::Malformed(e.to_string()))?;
    let format = value.get("cudnn_graph_payload").and_then(serde_json::Value::as_u64);
    match format {
        Some(f) if f == u64::from(PAYLOAD_FORMAT) => {}
        Some(f) => return Err(PayloadError::Format { found: u32::try_from(f).unwrap_or(u32::MAX) }),
        None => return Err(PayloadError::Malformed("no `cudnn_graph_payload` format field".into())),
    }
    let doc: Document = serde_json::from_value(value).map_err(|e| PayloadError::Malformed(e.to_string()))?;
    let structure = match doc.structure {
        Some(s) => Some(structure_from_json(&s.to_string())?),
        None => None,
    };
    if let Some(g) = &structure {
        let given = hex(g.fingerprint());
        if given != doc.plan.graph_fingerprint {
            return Err(PayloadError::GraphFingerprint {
                payload_graph: doc.plan.graph_name.clone(),
                payload: doc.plan.graph_fingerprint.clone(),
                given,
            });
        }
    }
    Ok(Payload { structure, plan: doc.plan })
}

/// Reads a payload into a plan for `cudnn`: the graph comes from the payload's structure or from
/// `graph` (needed for plan-only payloads; checked against the recorded fingerprint either way).
pub fn read_payload(
    cudnn: &Cudnn,
    bytes: &[u8],
    graph: Option<Graph>,
    expect: &Expect,
) -> Result<(ExecutionPlan, Payload), PayloadError> {
    let payload = parse_payload(bytes)?;
    let plan = load_payload(cudnn, &payload, graph, expect)?;
    Ok((plan, payload))
}

/// [`read_payload`] for a payload already parsed with [`parse_payload`].
pub fn load_payload(
    cudnn: &Cudnn,
    payload: &Payload,
    graph: Option<Graph>,
    expect: &Expect,
) -> Result<ExecutionPlan, PayloadError> {
    let p = &payload.plan;
    let _span = tracing::debug_span!("load_payload", graph = %p.graph_name, engine = %p.engine.tag).entered();
    let start = std::time::Instant::now();
    let result = check_and_load(cudnn, payload, graph, expect);
    match &result {
        Ok(_) => tracing::debug!(elapsed_us = crate::micros(start.elapsed()), "payload loaded"),
        Err(e) => tracing::debug!(error = %e, "payload refused"),
    }
    result
}

fn check_and_load(
    cudnn: &Cudnn,
    payload: &Payload,
    graph: Option<Graph>,
    expect: &Expect,
) -> Result<ExecutionPlan, PayloadError> {
    let p = &payload.plan;
    if p.cudnn_version != cudnn.version() {
        return Err(PayloadError::CudnnVersion { payload: p.cudnn_version, runtime: cudnn.version() });
    }
    if let (Some(payload_sm), Some(runtime)) = (p.sm, cudnn.sm()) {
        if payload_sm != runtime {
            return Err(PayloadError::Sm { payload: payload_sm, runtime });
        }
    }
    if let Some(expected) = expect.type_fingerprint {
        if p.type_fingerprint.as_deref() != Some(hex(expected).as_str()) {
            return Err(PayloadError::TypeFingerprint {
                payload_type: p.graph_name.clone(),
                payload: p.type_fingerprint.clone().unwrap_or_else(|| "none".into()),
                expected_type: expect.type_name.clone().unwrap_or_default(),
                expected: hex(expected),
            });
        }
    }
    if let (Some(expected), Some(found)) = (&expect.binding, &p.binding) {
        if expected != found {
            return Err(PayloadError::Binding { payload: found.clone(), expected: expected.clone() });
        }
    }
    let graph = match (graph, &payload.structure) {
        (Some(g), _) => g,
        (None, Some(s)) => s.clone(),
        (None, None) => return Err(PayloadError::NeedsGraph { graph: p.graph_name.clone() }),
    };
    let given = hex(graph.fingerprint());
    if given != p.graph_fingerprint {
        return Err(PayloadError::GraphFingerprint {
            payload_graph: p.graph_name.clone(),
            payload: p.graph_fingerprint.clone(),
            given,
        });
    }
    let plan = ExecutionPlan::from_json(cudnn, graph, &p.plan_json).map_err(|e| PayloadError::Load(Box::new(e)))?;
    if plan.layout().uids() != p.variant_pack_uids.as_slice() {
        return Err(PayloadError::VariantPack {
            payload: p.variant_pack_uids.clone(),
            graph: plan.layout().uids().to_vec(),
        });
    }
    Ok(plan)
}

impl Payload {
    /// The origin recorded in the payload (re-serializing a loaded plan keeps it).
    pub fn origin(&self) -> PlanOrigin {
        PlanOrigin {
            cudnn_version: self.plan.cudnn_version,
            sm: self.plan.sm,
            device_properties: self.plan.device_properties.as_ref().map(|v| v.to_string()),
            engine: Some(self.plan.engine.clone()),
        }
    }

    /// Runtime dim `name` recorded by the `graph!` type that wrote the payload.
    pub fn runtime_dim(&self, name: &str) -> Result<usize, PayloadError> {
        self.plan
            .runtime_dims
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| usize::try_from(*v).ok())
            .ok_or_else(|| PayloadError::Malformed(format!("the payload records no runtime dim `{name}`")))
    }
}
