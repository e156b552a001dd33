//! The plan payload: a built [`ExecutionPlan`] written out and read back, with or without the
//! graph's structure (cudnn-frontend PRs #364 and #371).
//!
//! Long because the payload format is one contract: its record types, the writer and the reader
//! with every check in the order listed below, kept together so that a field added to the record is
//! written and checked in one file.
//!
//! ```text
//! {
//!   "cudnn_graph_payload": 2,
//!   "sha256": "…64 hex digits: SHA-256 of the body's bytes exactly as written…",
//!   "hmac_sha256": "…",                                             ← only when signed
//!   "body": {
//!     "structure": { ...structural JSON, see the module above... },   ← only with `structure: true`
//!     "plan": {
//!       "graph_name": "MatmulBiasRelu", "graph_fingerprint": "0x…", "type_fingerprint": "0x…",
//!       "binding": "M = 192", "cudnn_version": 91900, "sm": 90, "device_properties": {...},
//!       "engine": {"id": 7, "tag": "eng7_k2=3…", "knobs": [[2, 3], …],
//!                  "behavior_notes": ["RUNTIME_COMPILATION"], "numerical_notes": ["TENSOR_CORE"]},
//!       "variant_pack_uids": [1, 2, 3, 6], "scalars": [{"uid": 4, "data_type": "FLOAT", "bits": "0x3fe0…"}],
//!       "workspace_size": 0, "workspace_init": [],
//!       "plan_json": "…cuDNN's CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION…"
//!     }
//!   }
//! }
//! ```
//!
//! **A payload carries executable GPU code** (the compiled kernel inside cuDNN's plan JSON), like
//! a shared library: load payloads only from where you would load a library. Reading checks, in
//! order, before anything reaches cuDNN:
//! 1. size ([`MAX_PAYLOAD_BYTES`]) and format;
//! 2. the content digest over the body's bytes, which catches accidental corruption (disk,
//!    transfer): one flipped bit anywhere, the kernel included, is a [`PayloadError::Digest`];
//! 3. with a [`PayloadKey`] ([`parse_signed_payload`]), the keyed signature (HMAC-SHA256): for
//!    payloads that cross a trust boundary, since anyone can recompute a digest;
//! 4. the cuDNN version and SM against the context, the graph (from the payload's structure or
//!    the caller's) against the recorded fingerprint, the caller's expected type fingerprint and
//!    binding;
//! 5. cuDNN's plan JSON against the graph: every tensor (uid, dims, strides, type, alignment) and
//!    every operation of its operation graph must be the ones lowering the graph describes
//!    ([`ExecutionPlan::from_json`], [`crate::backend::PlanMismatch`]);
//! 6. once cuDNN has loaded the plan: its variant pack, workspace size, engine (id, knobs,
//!    behavior and numerical notes) and by-value scalars against the payload's record.
//!
//! Every mismatch is a [`PayloadError`] naming both sides. Writing a plan read back gives an
//! equivalent payload (cuDNN's plan JSON aside, which embeds pointers).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::backend::{Candidate, Cudnn, CutReason, ExecutionPlan, PlanPart, SavedPart, VariantLayout};
use crate::serialize::{planned_structure_from_json, planned_structure_to_json, SerializeError};
use crate::{DataType, Graph};

/// The payload format this build writes and reads. Format 1 (no digest) is refused: write the
/// plan again.
pub const PAYLOAD_FORMAT: u32 = 2;

/// The largest payload [`parse_payload`] accepts: 64 MiB. Plans are 40 KB to a few MB (the
/// kernel is most of it); reading one takes about twice its size in memory at the peak (the
/// bytes and the plan JSON read from them; measured: a 60 MB payload within 120 MB).
pub const MAX_PAYLOAD_BYTES: usize = 64 << 20;

// cudnn-frontend's plan payloads are UBJSON: the UBJSON reader takes as much as a payload holds.
const _: () = assert!(MAX_PAYLOAD_BYTES == crate::serialize::ubjson::MAX_BYTES);

/// The shortest [`PayloadKey`]: 16 bytes.
pub const MIN_KEY_BYTES: usize = 16;

/// A secret key for signing payloads (HMAC-SHA256), supplied by the application: for payloads
/// that cross a trust boundary (downloaded, shared between users, stored where others can
/// write). Use 32 random bytes. Its `Debug` shows only its length.
#[derive(Clone, PartialEq, Eq)]
pub struct PayloadKey(Arc<[u8]>);

impl PayloadKey {
    /// A key of `bytes` (at least [`MIN_KEY_BYTES`]).
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, PayloadError> {
        let bytes = bytes.into();
        if bytes.len() < MIN_KEY_BYTES {
            return Err(PayloadError::ShortKey { bytes: bytes.len() });
        }
        Ok(PayloadKey(bytes.into()))
    }

    fn mac(&self, body: &[u8]) -> Hmac<Sha256> {
        // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!());
        mac.update(body);
        mac
    }
}

impl fmt::Debug for PayloadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PayloadKey({} bytes)", self.0.len())
    }
}

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
    /// cuDNN's execution-plan JSON (empty for a partitioned plan, whose parts hold theirs).
    pub plan_json: String,
    /// A partitioned plan's parts, in execution order (absent for a plan of one kernel). The
    /// fields above then describe the whole: `engine` is the first part's, `variant_pack_uids` the
    /// graph's I/O, `workspace_size` the arena and the largest part's workspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PartRecord>,
}

/// One part of a partitioned plan: the nodes it runs (of the graph as `build` rewrote it; see
/// [`ExecutionPlan::rewrites`]) and its plan, checked on loading as a whole plan's are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartRecord {
    /// The names of the nodes it runs, in order.
    pub nodes: Vec<String>,
    /// Its selected engine.
    pub engine: EngineRecord,
    /// Its variant-pack uids, ascending.
    pub variant_pack_uids: Vec<i64>,
    /// Its by-value scalars.
    pub scalars: Vec<ScalarRecord>,
    /// Its workspace bytes (after the plan's arena).
    pub workspace_size: usize,
    /// cuDNN's execution-plan JSON of it.
    pub plan_json: String,
    /// cuDNN's refusal that cut it from the previous part, where that is why (the fusion table
    /// gives every other reason again on loading).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Autotuning's times, where it was cut from the previous part because they measured it
    /// faster apart (`Fusion::Measure`; the tensors such a cut materializes are typed by its rule
    /// again on loading).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<String>,
}

/// The signed part of a payload.
#[derive(Serialize)]
struct Body<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    structure: Option<&'a RawValue>,
    plan: &'a PlanRecord,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BodyIn<'a> {
    #[serde(default, borrow)]
    structure: Option<&'a RawValue>,
    plan: PlanRecord,
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex_bytes(&Sha256::digest(bytes))
}

fn hex_bytes(bytes: &[u8]) -> String {
    use fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok()).collect()
}

/// Why a payload cannot be read (or does not fit where it is loaded).
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    /// Not JSON of the payload's shape (truncated, corrupted, foreign).
    #[error("not a cudnn-graph plan payload: {0}")]
    Malformed(String),
    /// Over [`MAX_PAYLOAD_BYTES`].
    #[error("payload of {0} bytes is over the {MAX_PAYLOAD_BYTES}-byte limit")]
    TooLarge(u64),
    /// The body's bytes are not the ones written: corrupted on disk or in transfer.
    #[error("the payload is corrupted: its content digest is sha256 {computed}, but it records {recorded}")]
    Digest {
        /// The digest the payload records.
        recorded: String,
        /// The digest of the bytes read.
        computed: String,
    },
    /// A signature was required and the payload has none.
    #[error("the payload is not signed, and this reader requires a signature (sign it with the same PayloadKey when writing)")]
    Unsigned,
    /// The signature does not verify with the reader's key.
    #[error("the payload's signature does not verify with this key: it was changed after signing, or signed with another key")]
    Signature,
    /// A key shorter than [`MIN_KEY_BYTES`].
    #[error("a payload key of {bytes} bytes is too short: use at least {MIN_KEY_BYTES} (32 random bytes is best)")]
    ShortKey {
        /// Its length.
        bytes: usize,
    },
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
    /// The structure's `is_dynamic_shape_enabled` is not what the plan JSON says of the plan.
    #[error("the payload's structure says its plan was made {} dynamic shapes (`is_dynamic_shape_enabled`), but its plan JSON says {}", with(*.structure), with(*.plan))]
    DynamicShapeFlag {
        /// The structure's flag.
        structure: bool,
        /// The plan's (`isDynamicShapeEnabled` of cuDNN's plan JSON).
        plan: bool,
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
    /// The workspace the payload records is not the loaded plan's.
    #[error("the payload records a workspace of {payload} bytes, but the loaded plan needs {plan}")]
    Workspace {
        /// The payload's.
        payload: usize,
        /// The plan's, as cuDNN reports it.
        plan: usize,
    },
    /// The engine the payload records is not the one cuDNN loaded.
    #[error("the payload records engine {payload}, but its plan JSON loads as engine {plan}")]
    Engine {
        /// The payload's record (id and knobs).
        payload: String,
        /// The loaded plan's.
        plan: String,
    },
    /// The behavior or numerical notes the payload records for its engine are not those cuDNN
    /// reports for the engine of the plan it loaded (order aside): a forged or stale record,
    /// which would be written out again with the plan.
    #[error("the payload records {kind} notes {payload:?}, but cuDNN reports {plan:?} for the loaded plan's engine")]
    Notes {
        /// `"behavior"` or `"numerical"`.
        kind: &'static str,
        /// The payload's notes, as recorded.
        payload: Vec<String>,
        /// The loaded plan's, as cuDNN reports them.
        plan: Vec<String>,
    },
    /// The by-value scalars the payload records are not the graph's.
    #[error("the payload records by-value scalars {payload:?}, but the graph's are {graph:?} (uid, type, f64 bits)")]
    Scalars {
        /// The payload's.
        payload: Vec<(i64, DataType, String)>,
        /// The graph's.
        graph: Vec<(i64, DataType, String)>,
    },
    /// cudnn-frontend's payload bytes are not UBJSON (or nest too deep, or hold too many
    /// values).
    #[error("not a cudnn-frontend plan payload: {0}")]
    Ubjson(crate::serialize::ubjson::UbjsonError),
    /// A key of a cudnn-frontend payload that is missing, unknown, repeated or of the wrong
    /// shape ([`super::frontend`]).
    #[error("cudnn-frontend payload: `{key}` {reason}")]
    FrontendKey {
        /// The top-level key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A key of a cudnn-frontend payload whose value asks for something cudnn-graph does not do
    /// (initialise workspace, derive pointers, dump tensors, ...), on reading or writing.
    #[error("cudnn-frontend payload: `{key}`: {reason}")]
    FrontendUnsupported {
        /// The top-level key.
        key: String,
        /// What it holds.
        reason: String,
    },
    /// The structure inside the payload is invalid.
    #[error("the payload's structure: {0}")]
    Structure(#[from] SerializeError),
    /// cuDNN rejected the plan.
    #[error("cuDNN could not load the plan: {0}")]
    Load(#[source] Box<crate::backend::BackendError>),
    /// cuDNN could not give the plan's JSON to write.
    #[error("cuDNN could not write the plan: {0}")]
    Save(#[source] Box<crate::backend::BackendError>),
}

fn hex(v: u64) -> String {
    format!("{v:#018x}")
}

/// The by-value scalars of a variant pack, as a payload records them.
fn scalar_records(layout: &VariantLayout) -> Vec<ScalarRecord> {
    layout
        .scalars()
        .iter()
        .map(|s| ScalarRecord { uid: s.uid, data_type: s.data_type, bits: hex(s.value().to_bits()) })
        .collect()
}

fn engine_record(selected: &Candidate) -> EngineRecord {
    EngineRecord::of(selected)
}

impl EngineRecord {
    /// The record of a candidate: its engine, tag, knobs and notes.
    pub fn of(selected: &Candidate) -> Self {
        EngineRecord {
            id: selected.engine_id,
            tag: selected.tag(),
            knobs: selected.knobs.iter().map(|k| (k.kind, k.value)).collect(),
            behavior_notes: selected.behavior_notes.iter().map(ToString::to_string).collect(),
            numerical_notes: selected.numerical_notes.iter().map(ToString::to_string).collect(),
        }
    }

    /// The engine config to build this engine again ([`ExecutionPlan::build_chosen`]); `None`
    /// where cuDNN could not name the engine when it was recorded.
    pub fn config(&self) -> Option<crate::backend::EngineConfig> {
        let knobs = self.knobs.iter().map(|&(kind, value)| crate::backend::Knob { kind, value }).collect();
        Some(crate::backend::EngineConfig { id: self.id?, knobs })
    }
}

fn part_record(part: &PlanPart) -> Result<PartRecord, PayloadError> {
    Ok(PartRecord {
        nodes: part.nodes().to_vec(),
        engine: engine_record(part.selected()),
        variant_pack_uids: part.layout().uids().to_vec(),
        scalars: scalar_records(part.layout()),
        workspace_size: part.workspace_size(),
        plan_json: part.json().map_err(|e| PayloadError::Save(Box::new(e)))?,
        refused: match part.cut().map(|c| &c.reason) {
            Some(CutReason::Refused(why)) => Some(why.clone()),
            _ => None,
        },
        measured: match part.cut().map(|c| &c.reason) {
            Some(CutReason::MeasuredFaster(times)) => Some(times.clone()),
            _ => None,
        },
    })
}

fn record(plan: &ExecutionPlan, origin: &PlanOrigin, expect: &Expect) -> Result<PlanRecord, PayloadError> {
    let graph = plan.graph();
    let selected = plan.selected();
    let layout = plan.layout();
    let scalars = scalar_records(layout);
    let parts = if plan.is_partitioned() {
        plan.parts().iter().map(part_record).collect::<Result<Vec<_>, _>>()?
    } else {
        Vec::new()
    };
    let plan_json =
        if parts.is_empty() { plan.json().map_err(|e| PayloadError::Save(Box::new(e)))? } else { String::new() };
    Ok(PlanRecord {
        graph_name: graph.name.clone(),
        graph_fingerprint: hex(graph.fingerprint()),
        type_fingerprint: expect.type_fingerprint.map(hex),
        binding: expect.binding.clone(),
        runtime_dims: expect.runtime_dims.clone(),
        cudnn_version: origin.cudnn_version,
        sm: origin.sm,
        device_properties: origin.device_properties.as_deref().and_then(|p| serde_json::from_str(p).ok()),
        engine: origin.engine.clone().unwrap_or_else(|| engine_record(selected)),
        variant_pack_uids: layout.uids().to_vec(),
        scalars,
        workspace_size: plan.workspace_size(),
        workspace_init: Vec::new(),
        plan_json,
        parts,
    })
}

/// Writes `plan` (made where `origin` says) as a payload. `expect` carries the `graph!` type's
/// fingerprint and binding, when a typed graph writes it.
pub fn write_payload(
    plan: &ExecutionPlan,
    origin: &PlanOrigin,
    options: SerializeOptions,
    expect: &Expect,
) -> Result<Vec<u8>, PayloadError> {
    write(plan, origin, options, expect, None)
}

/// [`write_payload`], signed with `key` (read it with [`parse_signed_payload`]).
pub fn write_signed_payload(
    plan: &ExecutionPlan,
    origin: &PlanOrigin,
    options: SerializeOptions,
    expect: &Expect,
    key: &PayloadKey,
) -> Result<Vec<u8>, PayloadError> {
    write(plan, origin, options, expect, Some(key))
}

/// "with" or "without", for [`PayloadError::DynamicShapeFlag`].
fn with(flag: bool) -> &'static str {
    if flag {
        "with"
    } else {
        "without"
    }
}

pub(crate) fn write(
    plan: &ExecutionPlan,
    origin: &PlanOrigin,
    options: SerializeOptions,
    expect: &Expect,
    key: Option<&PayloadKey>,
) -> Result<Vec<u8>, PayloadError> {
    let malformed = |e: serde_json::Error| PayloadError::Malformed(e.to_string());
    let structure = if options.structure {
        let text = planned_structure_to_json(plan.graph(), plan.is_dynamic_shape());
        Some(RawValue::from_string(text).map_err(malformed)?)
    } else {
        None
    };
    let record = record(plan, origin, expect)?;
    let body = serde_json::to_string(&Body { structure: structure.as_deref(), plan: &record }).map_err(malformed)?;
    let out = seal(&body, key);
    tracing::debug!(graph = %plan.graph().name, bytes = out.len(), structure = options.structure, signed = key.is_some(), "payload written");
    Ok(out)
}

/// A payload of `body` (the JSON text of `{"structure": …, "plan": …}`): the envelope with its
/// content digest, and its signature when given a key. [`write_payload`] uses it; so do tools and
/// tests that edit a payload's body on purpose (after which the digest must be recomputed, which
/// anyone can do: the digest detects accidents, only the signature detects tampering).
pub fn seal(body: &str, key: Option<&PayloadKey>) -> Vec<u8> {
    let mut out = String::with_capacity(body.len() + 256);
    out.push_str(&format!(r#"{{"cudnn_graph_payload":{PAYLOAD_FORMAT},"sha256":"{}","#, sha256_hex(body.as_bytes())));
    if let Some(key) = key {
        out.push_str(&format!(r#""hmac_sha256":"{}","#, hex_bytes(&key.mac(body.as_bytes()).finalize().into_bytes())));
    }
    out.push_str(r#""body":"#);
    out.push_str(body);
    out.push('}');
    out.into_bytes()
}

/// A payload parsed and checked against `cudnn`, before cuDNN loads the plan.
#[derive(Debug, Clone)]
pub struct Payload {
    /// The graph from the payload's structure, if it has one.
    pub structure: Option<Graph>,
    /// The structure's `is_dynamic_shape_enabled`: whether the plan was made as a dynamic-shape
    /// operation graph (`None` without a structure). Checked against the plan when it loads.
    pub dynamic_shape: Option<bool>,
    /// The plan record.
    pub plan: PlanRecord,
}

/// Parses a payload (no cuDNN needed): size, format, content digest and shape; a signature, if
/// the payload has one, is not checked (see [`parse_signed_payload`]).
pub fn parse_payload(bytes: &[u8]) -> Result<Payload, PayloadError> {
    parse(bytes, None)
}

/// [`parse_payload`] that also requires a signature made with `key`: for payloads from outside
/// the application's trust boundary.
pub fn parse_signed_payload(bytes: &[u8], key: &PayloadKey) -> Result<Payload, PayloadError> {
    parse(bytes, Some(key))
}

fn parse(bytes: &[u8], key: Option<&PayloadKey>) -> Result<Payload, PayloadError> {
    if bytes.len() > MAX_PAYLOAD_BYTES {
        return Err(PayloadError::TooLarge(bytes.len() as u64));
    }
    let malformed = |e: serde_json::Error| PayloadError::Malformed(e.to_string());
    // The top level as raw values: the body is checked over its exact bytes, and nothing is
    // parsed twice.
    let top: BTreeMap<&str, &RawValue> = serde_json::from_slice(bytes).map_err(malformed)?;
    let format = top.get("cudnn_graph_payload").and_then(|v| v.get().parse::<u64>().ok());
    match format {
        Some(f) if f == u64::from(PAYLOAD_FORMAT) => {}
        Some(f) => return Err(PayloadError::Format { found: u32::try_from(f).unwrap_or(u32::MAX) }),
        None => return Err(PayloadError::Malformed("no numeric `cudnn_graph_payload` format field".into())),
    }
    if let Some(unknown) = top.keys().find(|k| !["cudnn_graph_payload", "sha256", "hmac_sha256", "body"].contains(k)) {
        return Err(PayloadError::Malformed(format!("unknown field `{unknown}`")));
    }
    let text = |name: &str| -> Result<Option<String>, PayloadError> {
        top.get(name).map(|v| serde_json::from_str::<String>(v.get()).map_err(malformed)).transpose()
    };
    let recorded = text("sha256")?.ok_or_else(|| PayloadError::Malformed("no `sha256` content digest".into()))?;
    let body = top.get("body").ok_or_else(|| PayloadError::Malformed("no `body`".into()))?.get();
    let computed = sha256_hex(body.as_bytes());
    if recorded != computed {
        return Err(PayloadError::Digest { recorded, computed });
    }
    if let Some(key) = key {
        let signature = text("hmac_sha256")?.ok_or(PayloadError::Unsigned)?;
        let signature = unhex(&signature).ok_or(PayloadError::Signature)?;
        key.mac(body.as_bytes()).verify_slice(&signature).map_err(|_| PayloadError::Signature)?;
    }
    let doc: BodyIn<'_> = serde_json::from_str(body).map_err(malformed)?;
    let (structure, dynamic_shape) = match doc.structure {
        Some(s) => {
            let (graph, dynamic_shape) = planned_structure_from_json(s.get())?;
            (Some(graph), Some(dynamic_shape))
        }
        None => (None, None),
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
    Ok(Payload { structure, dynamic_shape, plan: doc.plan })
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
    let result = payload.check_and_load(cudnn, graph, expect);
    match &result {
        Ok(_) => tracing::debug!(elapsed_us = crate::micros(start.elapsed()), "payload loaded"),
        Err(e) => tracing::debug!(error = %e, "payload refused"),
    }
    result
}

impl Payload {
    /// A payload's checks in the order the module docs list (steps 4 to 6), each naming both sides,
    /// before and after cuDNN loads the plan.
    fn check_and_load(
        &self,
        cudnn: &Cudnn,
        graph: Option<Graph>,
        expect: &Expect,
    ) -> Result<ExecutionPlan, PayloadError> {
        let p = &self.plan;
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
        let graph = match (graph, &self.structure) {
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
        // `from_json` checks the plan JSON's operation graph against the graph's lowering before
        // cuDNN is given it (each part's, for a partitioned plan).
        let plan = if p.parts.is_empty() {
            ExecutionPlan::from_json(cudnn, graph, &p.plan_json)
        } else {
            let parts: Vec<SavedPart> = p
                .parts
                .iter()
                .map(|r| SavedPart {
                    nodes: r.nodes.clone(),
                    json: r.plan_json.clone(),
                    refused: r.refused.clone(),
                    measured: r.measured.clone(),
                })
                .collect();
            ExecutionPlan::from_parts_json(cudnn, graph, &parts)
        }
        .map_err(|e| PayloadError::Load(Box::new(e)))?;
        // The structure says how the plan was made; cuDNN's plan JSON is the authority. Payloads
        // written before the structure recorded it say `false` whatever the plan, so only a structure
        // claiming a dynamic-shape plan the JSON does not hold is refused.
        if self.dynamic_shape == Some(true) && !plan.is_dynamic_shape() {
            return Err(PayloadError::DynamicShapeFlag { structure: true, plan: false });
        }
        check_io(&p.variant_pack_uids, p.workspace_size, plan.layout(), plan.workspace_size())?;
        if p.parts.is_empty() {
            check_engine(&p.engine, plan.selected())?;
            check_scalars(&p.scalars, plan.layout())?;
            return Ok(plan);
        }
        for (part, record) in plan.parts().iter().zip(&p.parts) {
            check_io(&record.variant_pack_uids, record.workspace_size, part.layout(), part.workspace_size())?;
            check_engine(&record.engine, part.selected())?;
            check_scalars(&record.scalars, part.layout())?;
        }
        Ok(plan)
    }
}

/// The variant-pack uids and workspace bytes a payload records (for the plan or one of its
/// parts) against those of what cuDNN loaded.
fn check_io(
    uids: &[i64],
    workspace_size: usize,
    layout: &VariantLayout,
    loaded_workspace: usize,
) -> Result<(), PayloadError> {
    if layout.uids() != uids {
        return Err(PayloadError::VariantPack { payload: uids.to_vec(), graph: layout.uids().to_vec() });
    }
    if loaded_workspace != workspace_size {
        return Err(PayloadError::Workspace { payload: workspace_size, plan: loaded_workspace });
    }
    Ok(())
}

/// The engine a payload records against the one cuDNN loaded.
fn check_engine(recorded: &EngineRecord, loaded: &Candidate) -> Result<(), PayloadError> {
    // cuDNN reports a reloaded config with default knobs filled in, so the record's knobs must
    // be among the loaded ones, not equal to them.
    let knobs_agree =
        recorded.knobs.iter().all(|&(kind, value)| loaded.knobs.iter().any(|k| k.kind == kind && k.value == value));
    if loaded.engine_id != recorded.id || !knobs_agree {
        let knobs: Vec<(i32, i64)> = loaded.knobs.iter().map(|k| (k.kind, k.value)).collect();
        return Err(PayloadError::Engine {
            payload: engine_label(recorded.id, &recorded.knobs),
            plan: engine_label(loaded.engine_id, &knobs),
        });
    }
    // The notes are cuDNN's description of the engine, written out again with the plan: they
    // must be what cuDNN reports for the loaded one (as a multiset: cuDNN's order is kept).
    let notes = |kind, recorded: &[String], loaded: Vec<String>| {
        let (mut want, mut got) = (recorded.to_vec(), loaded.clone());
        want.sort_unstable();
        got.sort_unstable();
        if want == got {
            Ok(())
        } else {
            Err(PayloadError::Notes { kind, payload: recorded.to_vec(), plan: loaded })
        }
    };
    notes("behavior", &recorded.behavior_notes, loaded.behavior_notes.iter().map(ToString::to_string).collect())?;
    notes("numerical", &recorded.numerical_notes, loaded.numerical_notes.iter().map(ToString::to_string).collect())
}

/// An engine for messages: `7 with knobs [(2, 3)]`, `? with knobs []` where cuDNN could not name
/// it (as [`Candidate`]'s `Display` writes it).
fn engine_label(id: Option<i64>, knobs: &[(i32, i64)]) -> String {
    match id {
        Some(id) => format!("{id} with knobs {knobs:?}"),
        None => format!("? with knobs {knobs:?}"),
    }
}

/// The by-value scalars a payload records against the loaded variant pack's.
fn check_scalars(recorded: &[ScalarRecord], layout: &VariantLayout) -> Result<(), PayloadError> {
    let scalars = scalar_records(layout);
    if scalars != recorded {
        let list = |s: &[ScalarRecord]| s.iter().map(|r| (r.uid, r.data_type, r.bits.clone())).collect();
        return Err(PayloadError::Scalars { payload: list(recorded), graph: list(&scalars) });
    }
    Ok(())
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
        self.plan.runtime_dims.iter().find(|(n, _)| n == name).and_then(|(_, v)| usize::try_from(*v).ok()).ok_or_else(
            || {
                PayloadError::Malformed(format!(
                    "the payload records no runtime dim `{name}` (one written by `cudnn-graph aot` or the untyped API \
                     records none): load it for a binding with `Name::new(..).load_payload(cudnn, bytes)`"
                ))
            },
        )
    }
}
