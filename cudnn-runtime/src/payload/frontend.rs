//! cudnn-frontend 1.32's plan payload (`Graph::serialize(std::vector<uint8_t>&)`, Python
//! `graph.serialize()`), read into an [`ExecutionPlan`] and written from one: an explicit import
//! and export beside our own payload format ([`super::plan`]), which stays as it is.
//!
//! Long because cudnn-frontend's payload is one foreign format, read and written key by key in one
//! file so that each key's reader sits beside its writer.
//!
//! The payload is UBJSON ([`crate::serialize::ubjson`]) of one object holding the graph's structure (the
//! structural JSON's top-level keys, absent from a plan-only payload) and the plan's keys:
//!
//! ```text
//! {
//!   "context": {...}, "gid": 1, "json_version": "2.0", "nodes": [...], "tensors": [...],  ← structure
//!   "cudnn_backend_version": "9.19.0", "cudnn_frontend_version": 13200,                  ← stamps
//!   "cudnn_backend_data": "…cuDNN's execution-plan JSON…",
//!   "variant_pack_uids": [3, 2, 1],          the plan's tensors bound at execute (a set)
//!   "behavior_notes": [["RUNTIME_COMPILATION"]],   the selected engine's behavior notes
//!   "pass_by_values": {"4": {"index": 3, "value": "3DCCCCCD"}},   by-value scalars it fills in
//!   "workspace_modifications": {"9": [2, 0, []]},   tensors it places in its own workspace
//!   "aligned_operands": {},                  pointer alignments it checks at execute
//!   "variant_pack_replacements": [[1, [7, 256]]],   pointers it derives: uid 7 = uid 1 + 256 bytes
//!   "fe_workspace_size": 256,                workspace bytes it keeps in front of cuDNN's
//!   "tensors_to_dump": []                    tensors it logs after execute
//! }
//! ```
//!
//! `variant_pack_replacements` is how cudnn-frontend binds a slice before cuDNN 9.22 (which has
//! no slice operation): the slice's output uid is bound to its input's pointer plus a byte
//! offset, exactly what our lowering does ([`crate::backend::VariantLayout::views`]).
//! `workspace_modifications` places tensors in the front `fe_workspace_size` bytes of the
//! workspace, cuDNN's own workspace following them (attention backward's dQ accumulator and
//! softmax sums, [`crate::backend::VariantLayout::workspace_tensors`]); each is `[operation,
//! byte offset, values]`, operation 2 being a region left as it is, 0 a host copy of `values`
//! (floats) into it before every execute and 1 a memset of `values[0]` bytes to zero.
//!
//! Reading ([`parse_frontend_payload`], then [`load_frontend_payload`]) checks every key. The
//! structure is read with the structural reader (so a feature it refuses is refused here too, as
//! [`PayloadError::Structure`]); `cudnn_backend_data` goes through [`ExecutionPlan::from_json`],
//! which checks it against the graph's lowering before cuDNN sees it; the variant pack, the
//! by-value scalars, the pointer replacements, the workspace tensors (offsets and
//! `fe_workspace_size` included) and the behavior notes must be the loaded plan's. What
//! cudnn-graph cannot honour — a workspace region to initialise (operations 0 and 1), an
//! alignment requirement of its own, a tensor to dump — is a
//! [`PayloadError::FrontendUnsupported`] naming the key, never dropped; a key missing, unknown or
//! of the wrong shape is a [`PayloadError::FrontendKey`] naming it. Reading is bounded by the UBJSON reader's limits
//! ([`crate::serialize::ubjson::MAX_BYTES`], [`crate::serialize::ubjson::MAX_DEPTH`], [`crate::serialize::MAX_JSON_VALUES`]) and
//! never panics.
//!
//! The structure is printed after lowering, as cudnn-frontend prints its own: its composite
//! attention nodes have transposed K (and, backward, V) in place, so both directions swap those
//! operands' last two dims and strides (`transpose_attention_operands`).
//!
//! Writing ([`write_frontend_payload`]) gives the bytes cudnn-frontend 1.32 itself writes for the
//! same plan (keys sorted, as nlohmann keeps them). Our structure's `cudnn_graph` extension object
//! rides along (cudnn-frontend ignores it), so reading the payload back gives the same graph,
//! fingerprint included.
//!
//! Unlike our payload, cudnn-frontend's has no digest and no signature: it carries executable GPU
//! code (the kernel in `cudnn_backend_data`) with nothing to detect a change. Load it only from
//! where you would load a shared library.

use std::collections::BTreeSet;

use super::plan::{PayloadError, PlanOrigin, SerializeOptions, MAX_PAYLOAD_BYTES};
use crate::backend::{BehaviorNote, ByValueScalar, Cudnn, ExecutionPlan};
use crate::codec::float::{f32_to_hex, hex_to_f32};
use crate::codec::json::Json;
use crate::serialize::ubjson::{from_ubjson, to_ubjson, UbjsonError};
use crate::serialize::{graph_to_json, planned_graph_from_json, swapped_by_lowering, PLAN_FIELDS, STRUCTURE_FIELDS};
use crate::{DataType, Graph};

/// The cudnn-frontend version whose payload layout this module reads and writes, as it stamps
/// `cudnn_frontend_version` (1.32.0).
pub const FRONTEND_VERSION: i64 = 13200;

/// A by-value scalar as cudnn-frontend records it (`std::variant<int64_t, int32_t, half, float,
/// double, nv_bfloat16>`, by its index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontendScalar {
    /// Index 0.
    I64(i64),
    /// Index 1.
    I32(i32),
    /// Index 2: the half's bits (written as the float it widens to).
    F16(u16),
    /// Index 3: the float's bits (written as 8 hex digits).
    F32(u32),
    /// Index 4: the double's bits (written as a number).
    F64(u64),
    /// Index 5: the bfloat16's bits (written as the float it widens to).
    BF16(u16),
}

impl FrontendScalar {
    /// The scalar of `data_type` holding `value`, as a plan stores it; `None` for a type
    /// cudnn-frontend's variant has no member for.
    fn of(data_type: DataType, value: f64) -> Option<Self> {
        Some(match data_type {
            DataType::I64 => FrontendScalar::I64(DataType::I64.round(value) as i64),
            DataType::I32 => FrontendScalar::I32(DataType::I32.round(value) as i32),
            DataType::F16 => FrontendScalar::F16(half::f16::from_f64(value).to_bits()),
            DataType::F32 => FrontendScalar::F32((value as f32).to_bits()),
            DataType::F64 => FrontendScalar::F64(value.to_bits()),
            DataType::BF16 => FrontendScalar::BF16(half::bf16::from_f64(value).to_bits()),
            _ => return None,
        })
    }

    /// The data type it has.
    pub fn data_type(self) -> DataType {
        match self {
            FrontendScalar::I64(_) => DataType::I64,
            FrontendScalar::I32(_) => DataType::I32,
            FrontendScalar::F16(_) => DataType::F16,
            FrontendScalar::F32(_) => DataType::F32,
            FrontendScalar::F64(_) => DataType::F64,
            FrontendScalar::BF16(_) => DataType::BF16,
        }
    }

    /// The value as an `f64` (exact: every member widens without loss, but for `i64`s above 2^53).
    pub fn value(self) -> f64 {
        match self {
            FrontendScalar::I64(v) => v as f64,
            FrontendScalar::I32(v) => f64::from(v),
            FrontendScalar::F16(b) => half::f16::from_bits(b).to_f64(),
            FrontendScalar::F32(b) => f64::from(f32::from_bits(b)),
            FrontendScalar::F64(b) => f64::from_bits(b),
            FrontendScalar::BF16(b) => half::bf16::from_bits(b).to_f64(),
        }
    }

    fn to_json(self) -> Json {
        let (index, value) = match self {
            FrontendScalar::I64(v) => (0, Json::Int(v)),
            FrontendScalar::I32(v) => (1, Json::Int(i64::from(v))),
            FrontendScalar::F16(b) => (2, Json::Float(half::f16::from_bits(b).to_f64())),
            FrontendScalar::F32(b) => (3, Json::str(f32_to_hex(f32::from_bits(b)))),
            FrontendScalar::F64(b) => (4, Json::Float(f64::from_bits(b))),
            FrontendScalar::BF16(b) => (5, Json::Float(half::bf16::from_bits(b).to_f64())),
        };
        Json::obj([("index", Json::Int(index)), ("value", value)])
    }

    fn from_json(v: &Json) -> Option<Self> {
        let Json::Obj(members) = v else { return None };
        if members.len() != 2 {
            return None;
        }
        let get = |k: &str| members.iter().find(|(key, _)| key == k).map(|(_, v)| v);
        let number = |v: &Json| match v {
            Json::Float(f) => Some(*f),
            Json::Int(i) => Some(*i as f64),
            _ => None,
        };
        let value = get("value")?;
        Some(match get("index")? {
            Json::Int(0) => match value {
                Json::Int(i) => FrontendScalar::I64(*i),
                _ => return None,
            },
            Json::Int(1) => match value {
                Json::Int(i) => FrontendScalar::I32(i32::try_from(*i).ok()?),
                _ => return None,
            },
            // A half or bfloat16 is written as the float it widens to: it must be exactly one.
            Json::Int(2) => {
                let f = number(value)?;
                let h = half::f16::from_f64(f);
                (h.to_f64() == f || f.is_nan()).then_some(FrontendScalar::F16(h.to_bits()))?
            }
            Json::Int(3) => match value {
                Json::Str(s) => FrontendScalar::F32(hex_to_f32(s)?.to_bits()),
                _ => return None,
            },
            Json::Int(4) => FrontendScalar::F64(number(value)?.to_bits()),
            Json::Int(5) => {
                let f = number(value)?;
                let h = half::bf16::from_f64(f);
                (h.to_f64() == f || f.is_nan()).then_some(FrontendScalar::BF16(h.to_bits()))?
            }
            _ => return None,
        })
    }
}

/// A cudnn-frontend payload parsed and checked as far as it can be without cuDNN.
#[derive(Debug, Clone)]
pub struct FrontendPayload {
    /// The graph from the payload's structure; `None` for a plan-only payload.
    pub structure: Option<Graph>,
    /// The structure context's `is_dynamic_shape_enabled` (cudnn-frontend's
    /// `set_dynamic_shape_enabled`, which makes the plan a dynamic-shape one); `None` for a
    /// plan-only payload. Must be what the plan JSON says when the plan loads.
    pub dynamic_shape: Option<bool>,
    /// `cudnn_backend_version` as `cudnnGetVersion()` numbers it (`91900`), when stamped.
    pub cudnn_version: Option<usize>,
    /// `cudnn_frontend_version` (`13200`), when stamped.
    pub frontend_version: Option<i64>,
    /// `cudnn_backend_data`: cuDNN's execution-plan JSON.
    pub plan_json: String,
    /// `variant_pack_uids`, ascending.
    pub variant_pack_uids: Vec<i64>,
    /// `behavior_notes`: one list per plan (cudnn-frontend writes the selected plan's).
    pub behavior_notes: Vec<Vec<BehaviorNote>>,
    /// `pass_by_values` by uid, ascending.
    pub pass_by_values: Vec<(i64, FrontendScalar)>,
    /// `variant_pack_replacements`, by source uid ascending.
    pub replacements: Vec<PointerReplacement>,
    /// `workspace_modifications` (each a region left as it is: operation 2) as (uid, byte offset
    /// into the workspace), by uid ascending.
    pub workspace_tensors: Vec<(i64, usize)>,
    /// `fe_workspace_size`: the bytes at the front of the workspace that
    /// [`FrontendPayload::workspace_tensors`] take, cuDNN's own workspace following them.
    pub fe_workspace_size: usize,
}

/// One entry of `variant_pack_replacements`: at execute, the pointer bound to uid `to` is the one
/// bound to uid `from` plus `byte_offset` (a slice bound by pointer offset: `from` is the sliced
/// input, `to` the slice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PointerReplacement {
    /// The uid whose pointer is offset (the sliced tensor).
    pub from: i64,
    /// The uid bound to the offset pointer (the slice).
    pub to: i64,
    /// The offset in bytes.
    pub byte_offset: i64,
}

/// The operation cudnn-frontend records for a workspace tensor it leaves as it is (its
/// `collect_tensors_in_workspace_node`: 0 copies host values in, 1 zeroes, 2 only places).
const WORKSPACE_REGION: i64 = 2;

fn key_error(key: &str, reason: impl Into<String>) -> PayloadError {
    PayloadError::FrontendKey { key: key.to_string(), reason: reason.into() }
}

fn unsupported(key: &str, reason: impl Into<String>) -> PayloadError {
    PayloadError::FrontendUnsupported { key: key.to_string(), reason: reason.into() }
}

/// Parses `9.19.0` as `cudnnGetVersion()` numbers it (`91900`).
fn parse_backend_version(text: &str) -> Option<usize> {
    let mut parts = text.split('.').map(|p| p.parse::<usize>().ok());
    let (major, minor, patch) = (parts.next()??, parts.next()??, parts.next()??);
    if parts.next().is_some() || minor > 99 || patch > 99 {
        return None;
    }
    major.checked_mul(10_000)?.checked_add(minor * 100 + patch)
}

/// `91900` as cudnn-frontend stamps it: `9.19.0`.
fn backend_version_string(version: usize) -> String {
    format!("{}.{}.{}", version / 10_000, version / 100 % 100, version % 100)
}

/// An integer key's value (a `UInt`, above `i64::MAX`, is no uid, size or version).
fn int(key: &str, v: &Json) -> Result<i64, PayloadError> {
    match v {
        Json::Int(i) => Ok(*i),
        other => Err(key_error(key, format!("must be an integer, found {}", other.kind()))),
    }
}

/// A key's value must be an empty object or array; otherwise cudnn-graph cannot honour it.
fn require_empty(key: &str, v: &Json, what: &str) -> Result<(), PayloadError> {
    match v {
        Json::Obj(m) if m.is_empty() => Ok(()),
        Json::Arr(a) if a.is_empty() => Ok(()),
        Json::Obj(m) => Err(unsupported(key, format!("holds {} {what}, which cudnn-graph does not do", m.len()))),
        Json::Arr(a) => Err(unsupported(key, format!("holds {} {what}, which cudnn-graph does not do", a.len()))),
        other => Err(key_error(key, format!("must be an object or a list, found {}", other.kind()))),
    }
}

/// Parses a cudnn-frontend plan payload (no cuDNN needed): UBJSON, every key, the structure.
///
/// # Errors
///
/// [`PayloadError::TooLarge`] over [`MAX_PAYLOAD_BYTES`]; [`PayloadError::Ubjson`] for bytes that
/// are not UBJSON; [`PayloadError::FrontendKey`] for a key missing, unknown or of the wrong shape;
/// [`PayloadError::FrontendUnsupported`] for a key whose value cudnn-graph cannot honour;
/// [`PayloadError::Structure`] for a structure the structural reader refuses.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::payload::frontend::parse_frontend_payload;
/// use cudnn_graph::payload::plan::PayloadError;
/// // `{"json_version": "2.0"}`: no plan.
/// let e = parse_frontend_payload(b"{i\x0cjson_versionSi\x032.0}").unwrap_err();
/// assert!(matches!(e, PayloadError::FrontendKey { ref key, .. } if key == "cudnn_backend_data"));
/// ```
// Long because it reads every key of cudnn-frontend's payload in its order, each key's check beside
// its read, so that no key is left unread.
pub fn parse_frontend_payload(bytes: &[u8]) -> Result<FrontendPayload, PayloadError> {
    if bytes.len() > MAX_PAYLOAD_BYTES {
        return Err(PayloadError::TooLarge(bytes.len() as u64));
    }
    let doc = from_ubjson(bytes)?;
    let Json::Obj(members) = &doc else {
        return Err(key_error("(payload)", format!("must be an object, found {}", doc.kind())));
    };
    let mut seen = BTreeSet::new();
    for (key, _) in members {
        if !seen.insert(key.as_str()) {
            return Err(key_error(key, "appears twice"));
        }
        if !STRUCTURE_FIELDS.contains(&key.as_str()) && !PLAN_FIELDS.contains(&key.as_str()) {
            return Err(key_error(key, "is not a key of cudnn-frontend 1.32's plan payload"));
        }
    }
    let get = |key: &str| members.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    let req = |key: &str| get(key).ok_or_else(|| key_error(key, "is missing"));

    match req("json_version")? {
        Json::Str(v) if v == "2.0" => {}
        Json::Str(v) => return Err(key_error("json_version", format!("is {v:?}; cudnn-frontend 1.32 writes \"2.0\""))),
        other => return Err(key_error("json_version", format!("must be a string, found {}", other.kind()))),
    }
    let cudnn_version = match get("cudnn_backend_version") {
        None => None,
        Some(Json::Str(s)) => Some(parse_backend_version(s).ok_or_else(|| {
            key_error("cudnn_backend_version", format!("{s:?} is not a cuDNN version (major.minor.patch)"))
        })?),
        Some(other) => {
            return Err(key_error("cudnn_backend_version", format!("must be a string, found {}", other.kind())))
        }
    };
    let frontend_version = get("cudnn_frontend_version").map(|v| int("cudnn_frontend_version", v)).transpose()?;

    // The structure: present when it has nodes or tensors (as cudnn-frontend decides). Printed
    // after lowering (the payload's plan says so), so attention's K and V are as its lowering
    // left them: transposed back first.
    let (structure, dynamic_shape) = if get("nodes").is_some() || get("tensors").is_some() {
        let mut structural: Vec<(String, Json)> =
            members.iter().filter(|(k, _)| STRUCTURE_FIELDS.contains(&k.as_str())).cloned().collect();
        transpose_attention_operands(&mut structural);
        let (graph, dynamic_shape) = planned_graph_from_json(&Json::Obj(structural))?;
        (Some(graph), Some(dynamic_shape))
    } else {
        if let Some(key) = ["context", "gid", "cudnn_graph"].into_iter().find(|k| get(k).is_some()) {
            return Err(key_error(key, "is given without the structure's `nodes` and `tensors`"));
        }
        (None, None)
    };

    let plan_json = match req("cudnn_backend_data")? {
        Json::Str(s) => s.clone(),
        other => return Err(key_error("cudnn_backend_data", format!("must be a string, found {}", other.kind()))),
    };

    let variant_pack_uids = match req("variant_pack_uids")? {
        Json::Arr(items) => {
            let mut uids = BTreeSet::new();
            for item in items {
                let uid = int("variant_pack_uids", item)?;
                if !uids.insert(uid) {
                    return Err(key_error("variant_pack_uids", format!("lists uid {uid} twice")));
                }
            }
            uids.into_iter().collect()
        }
        other => return Err(key_error("variant_pack_uids", format!("must be a list, found {}", other.kind()))),
    };

    let behavior_notes = match req("behavior_notes")? {
        Json::Arr(lists) => lists
            .iter()
            .map(|list| match list {
                Json::Arr(names) => names
                    .iter()
                    .map(|n| match n {
                        Json::Str(s) => BehaviorNote::from_name(s)
                            .filter(|n| !matches!(n, BehaviorNote::Other(_)))
                            .ok_or_else(|| key_error("behavior_notes", format!("{s:?} is not a behavior note"))),
                        other => {
                            Err(key_error("behavior_notes", format!("a note must be a string, found {}", other.kind())))
                        }
                    })
                    .collect::<Result<Vec<_>, _>>(),
                other => Err(key_error("behavior_notes", format!("must be a list of lists, found {}", other.kind()))),
            })
            .collect::<Result<Vec<_>, _>>()?,
        other => return Err(key_error("behavior_notes", format!("must be a list of lists, found {}", other.kind()))),
    };

    let pass_by_values = match req("pass_by_values")? {
        Json::Obj(entries) => {
            let mut out = Vec::with_capacity(entries.len());
            for (uid, value) in entries {
                let parsed = uid.parse::<i64>().ok().filter(|u| u.to_string() == *uid);
                let uid = parsed.ok_or_else(|| key_error("pass_by_values", format!("{uid:?} is not a uid")))?;
                let scalar = FrontendScalar::from_json(value).ok_or_else(|| {
                    key_error(
                        "pass_by_values",
                        format!("uid {uid}: not an {{\"index\": 0..5, \"value\": …}} scalar of that type"),
                    )
                })?;
                out.push((uid, scalar));
            }
            out.sort_by_key(|(uid, _)| *uid);
            if let Some(w) = out.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(key_error("pass_by_values", format!("lists uid {} twice", w[0].0)));
            }
            out
        }
        other => return Err(key_error("pass_by_values", format!("must be an object, found {}", other.kind()))),
    };

    let workspace_tensors = parse_workspace_modifications(req("workspace_modifications")?)?;
    let replacements = parse_replacements(req("variant_pack_replacements")?)?;
    let fe_workspace_size = match int("fe_workspace_size", req("fe_workspace_size")?)? {
        n if n < 0 => return Err(key_error("fe_workspace_size", format!("{n} is negative"))),
        n => {
            usize::try_from(n).map_err(|_| key_error("fe_workspace_size", format!("{n} bytes do not fit in memory")))?
        }
    };
    if let Some((uid, offset)) = workspace_tensors.iter().find(|(_, offset)| *offset >= fe_workspace_size) {
        return Err(key_error(
            "workspace_modifications",
            format!(
                "uid {uid} is placed at byte {offset}, outside the {fe_workspace_size} bytes of `fe_workspace_size`"
            ),
        ));
    }
    // What cudnn-frontend does around cuDNN's execute that cudnn-graph does not.
    if let Some(aligned) = get("aligned_operands") {
        require_empty("aligned_operands", aligned, "pointer alignment check(s) of cudnn-frontend's own at execute")?;
    }
    if let Some(dump) = get("tensors_to_dump") {
        require_empty("tensors_to_dump", dump, "tensor(s) to dump after execute")?;
    }

    Ok(FrontendPayload {
        structure,
        dynamic_shape,
        cudnn_version,
        frontend_version,
        plan_json,
        variant_pack_uids,
        behavior_notes,
        pass_by_values,
        replacements,
        workspace_tensors,
        fe_workspace_size,
    })
}

/// `workspace_modifications`: uid → `[operation, byte offset, values]`. Only regions left as they
/// are (operation 2, no values) are what cudnn-graph's plans place there; a host copy (0) or a
/// memset (1) before execute is refused naming the uid.
fn parse_workspace_modifications(v: &Json) -> Result<Vec<(i64, usize)>, PayloadError> {
    const KEY: &str = "workspace_modifications";
    let Json::Obj(entries) = v else {
        return Err(key_error(KEY, format!("must be an object, found {}", v.kind())));
    };
    let mut out = Vec::with_capacity(entries.len());
    for (uid_text, entry) in entries {
        let uid = uid_text
            .parse::<i64>()
            .ok()
            .filter(|u| u.to_string() == *uid_text)
            .ok_or_else(|| key_error(KEY, format!("{uid_text:?} is not a uid")))?;
        let malformed = || key_error(KEY, format!("uid {uid}: not an [operation, byte offset, [values…]] triple"));
        let Json::Arr(triple) = entry else { return Err(malformed()) };
        let [operation, offset, Json::Arr(values)] = triple.as_slice() else { return Err(malformed()) };
        let (Json::Int(operation), Json::Int(offset)) = (operation, offset) else { return Err(malformed()) };
        let offset = usize::try_from(*offset)
            .map_err(|_| key_error(KEY, format!("uid {uid}: byte offset {offset} is negative")))?;
        match *operation {
            WORKSPACE_REGION if values.is_empty() => out.push((uid, offset)),
            WORKSPACE_REGION => {
                return Err(key_error(KEY, format!("uid {uid}: a region (operation 2) with {} value(s)", values.len())))
            }
            0 => {
                return Err(unsupported(
                    KEY,
                    format!(
                        "uid {uid}: cudnn-frontend copies {} host value(s) into its workspace before every execute, \
                         which cudnn-graph does not do",
                        values.len()
                    ),
                ))
            }
            1 => {
                return Err(unsupported(
                    KEY,
                    format!(
                    "uid {uid}: cudnn-frontend zeroes its region before every execute, which cudnn-graph does not do"
                ),
                ))
            }
            other => return Err(key_error(KEY, format!("uid {uid}: operation {other} is not 0, 1 or 2"))),
        }
    }
    out.sort_unstable();
    if let Some(w) = out.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(key_error(KEY, format!("lists uid {} twice", w[0].0)));
    }
    Ok(out)
}

/// `variant_pack_replacements`: `[[from uid, [to uid, byte offset]], …]` (a map from the source
/// uid, as nlohmann writes one whose keys are not strings).
fn parse_replacements(v: &Json) -> Result<Vec<PointerReplacement>, PayloadError> {
    const KEY: &str = "variant_pack_replacements";
    let Json::Arr(entries) = v else {
        return Err(key_error(KEY, format!("must be a list, found {}", v.kind())));
    };
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let malformed = || key_error(KEY, "an entry is not [from uid, [to uid, byte offset]]");
        let Json::Arr(pair) = entry else { return Err(malformed()) };
        let [Json::Int(from), Json::Arr(target)] = pair.as_slice() else { return Err(malformed()) };
        let [Json::Int(to), Json::Int(byte_offset)] = target.as_slice() else { return Err(malformed()) };
        if *byte_offset < 0 {
            return Err(key_error(KEY, format!("uid {to} = uid {from} + {byte_offset} bytes: a negative offset")));
        }
        out.push(PointerReplacement { from: *from, to: *to, byte_offset: *byte_offset });
    }
    out.sort_unstable();
    if let Some(w) = out.windows(2).find(|w| w[0].from == w[1].from) {
        return Err(key_error(KEY, format!("lists source uid {} twice", w[0].from)));
    }
    Ok(out)
}

/// The loaded plan's slices bound by pointer offset, as cudnn-frontend's replacements, by
/// source uid.
fn plan_replacements(plan: &ExecutionPlan) -> Vec<PointerReplacement> {
    let layout = plan.layout();
    let mut out: Vec<PointerReplacement> = layout
        .views()
        .iter()
        .map(|&(position, io, offset)| PointerReplacement {
            from: plan.graph().tensor(layout.io()[io]).uid,
            to: layout.uids()[position],
            byte_offset: offset as i64,
        })
        .collect();
    out.sort_unstable();
    out
}

/// The loaded plan's workspace tensors as (uid, byte offset), by uid.
fn plan_workspace_tensors(plan: &ExecutionPlan) -> Vec<(i64, usize)> {
    let layout = plan.layout();
    let mut out: Vec<(i64, usize)> =
        layout.workspace_tensors().iter().map(|&(position, offset)| (layout.uids()[position], offset)).collect();
    out.sort_unstable();
    out
}

/// Swaps the last two dims and strides of the attention operands that cudnn-frontend's lowering
/// transposes in place ([`swapped_by_lowering`]: a composite forward node's K, fp8 or not;
/// `UNIFIED`, cuDNN's own `SDPA_FWD` operation, and a paged K cache take K as given; a backward
/// node's K and V, fp8 or not), each swap once per node, so a tensor two such nodes share is
/// swapped back, as there. cudnn-frontend prints a payload's structure after lowering, so its K
/// is `[b, h_k, d_qk, s_kv]`; ours is written so too and read back as given
/// (`[b, h_k, s_kv, d_qk]`): the function is its own inverse. Only rank-4 tensors are touched;
/// anything malformed is left for the structural reader to name.
fn transpose_attention_operands(structure: &mut [(String, Json)]) {
    let find = |structure: &[(String, Json)], key: &str| structure.iter().position(|(k, _)| k == key);
    // The tensors each node swaps, by the key its ports refer to them by (a uid or a name).
    let swaps = match find(structure, "nodes").map(|i| &structure[i].1) {
        Some(Json::Arr(nodes)) => swapped_by_lowering(nodes),
        _ => Vec::new(),
    };
    let Some(Json::Arr(tensors)) = find(structure, "tensors").map(|i| &mut structure[i].1) else { return };
    for tensor in tensors {
        let Json::Obj(fields) = tensor else { continue };
        let key = |k: &str| fields.iter().find(|(name, _)| name == k).map(|(_, v)| v);
        let by_uid = match key("uid") {
            Some(Json::Int(uid)) if !matches!(key("uid_assigned"), Some(Json::Bool(false))) => Some(uid.to_string()),
            _ => None,
        };
        let by_name = match key("name") {
            Some(Json::Str(name)) => Some(name.clone()),
            _ => None,
        };
        let Some(refer) = by_uid.or(by_name) else { continue };
        if swaps.iter().filter(|s| **s == refer).count() % 2 == 0 {
            continue;
        }
        for (name, value) in fields.iter_mut() {
            if let (true, Json::Arr(v)) = (name == "dim" || name == "stride", value) {
                if v.len() == 4 {
                    v.swap(2, 3);
                }
            }
        }
    }
}

/// The by-value scalars of `scalars` as (uid, type, value bits) records, for error messages.
fn records(scalars: impl Iterator<Item = (i64, DataType, f64)>) -> Vec<(i64, DataType, String)> {
    scalars.map(|(uid, dt, v)| (uid, dt, format!("{:#018x}", v.to_bits()))).collect()
}

/// Loads a parsed cudnn-frontend payload into a plan for `cudnn`. The graph comes from the
/// payload's structure or from `graph` (needed for a plan-only payload; when both are there,
/// they must be the same graph).
///
/// # Errors
///
/// [`PayloadError::CudnnVersion`] for a plan of another cuDNN, [`PayloadError::NeedsGraph`],
/// [`PayloadError::GraphFingerprint`], [`PayloadError::Load`] when the plan JSON is not the
/// graph's lowering or cuDNN refuses it, [`PayloadError::VariantPack`] and
/// [`PayloadError::Scalars`] when the payload's variant pack or by-value scalars are not the
/// loaded plan's, [`PayloadError::FrontendKey`] naming `behavior_notes` when those are not.
// Long because it binds cudnn-frontend's payload to the graph and checks what cuDNN loaded against
// every recorded key, in one pass.
pub fn load_frontend_payload(
    cudnn: &Cudnn,
    payload: &FrontendPayload,
    graph: Option<Graph>,
) -> Result<ExecutionPlan, PayloadError> {
    if let Some(version) = payload.cudnn_version {
        if version != cudnn.version() {
            return Err(PayloadError::CudnnVersion { payload: version, runtime: cudnn.version() });
        }
    }
    let graph = match (graph, &payload.structure) {
        (Some(given), Some(own)) if given.fingerprint() != own.fingerprint() => {
            return Err(PayloadError::GraphFingerprint {
                payload_graph: own.name.clone(),
                payload: format!("{:#018x}", own.fingerprint()),
                given: format!("{:#018x}", given.fingerprint()),
            })
        }
        (Some(given), _) => given,
        (None, Some(own)) => own.clone(),
        (None, None) => return Err(PayloadError::NeedsGraph { graph: "(a cudnn-frontend plan-only payload)".into() }),
    };
    let plan =
        ExecutionPlan::from_json(cudnn, graph, &payload.plan_json).map_err(|e| PayloadError::Load(Box::new(e)))?;
    // cudnn-frontend plans with its context's flag, and so does our export: both must agree.
    if let Some(flag) = payload.dynamic_shape.filter(|&f| f != plan.is_dynamic_shape()) {
        return Err(PayloadError::DynamicShapeFlag { structure: flag, plan: plan.is_dynamic_shape() });
    }
    let layout = plan.layout();

    // cudnn-frontend binds `variant_pack_uids`, fills `pass_by_values` in and points the
    // workspace tensors into its workspace: together they are the plan's variant pack.
    let mut bound: BTreeSet<i64> = payload.variant_pack_uids.iter().copied().collect();
    bound.extend(payload.pass_by_values.iter().map(|(uid, _)| *uid));
    bound.extend(payload.workspace_tensors.iter().map(|(uid, _)| *uid));
    if !bound.iter().copied().eq(layout.uids().iter().copied()) {
        return Err(PayloadError::VariantPack { payload: bound.into_iter().collect(), graph: layout.uids().to_vec() });
    }
    // Each of the plan's by-value scalars must be filled in with its value, in its type, and
    // nothing else.
    let ours: Vec<(i64, Option<FrontendScalar>)> =
        layout.scalars().iter().map(|s: &ByValueScalar| (s.uid, FrontendScalar::of(s.data_type, s.value()))).collect();
    let theirs: Vec<(i64, Option<FrontendScalar>)> =
        payload.pass_by_values.iter().map(|&(uid, s)| (uid, Some(s))).collect();
    if ours != theirs {
        return Err(PayloadError::Scalars {
            payload: records(payload.pass_by_values.iter().map(|(uid, s)| (*uid, s.data_type(), s.value()))),
            graph: records(layout.scalars().iter().map(|s| (s.uid, s.data_type, s.value()))),
        });
    }
    // The slices bound by pointer offset and the tensors in the workspace, each where the plan
    // puts it.
    let replacements = plan_replacements(&plan);
    if payload.replacements != replacements {
        return Err(key_error(
            "variant_pack_replacements",
            format!("{:?} are not the loaded plan's slices by pointer offset {replacements:?}", payload.replacements),
        ));
    }
    let workspace = plan_workspace_tensors(&plan);
    if payload.workspace_tensors != workspace {
        return Err(key_error(
            "workspace_modifications",
            format!(
                "places (uid, byte offset) {:?}; the loaded plan places {workspace:?} in the workspace",
                payload.workspace_tensors
            ),
        ));
    }
    if payload.fe_workspace_size != layout.workspace_prefix() {
        return Err(key_error(
            "fe_workspace_size",
            format!(
                "is {} bytes; the loaded plan's workspace tensors take {}",
                payload.fe_workspace_size,
                layout.workspace_prefix()
            ),
        ));
    }
    // The notes describe the selected engine: they must be the loaded plan's.
    let loaded: BTreeSet<String> = plan.selected().behavior_notes.iter().map(ToString::to_string).collect();
    let recorded: BTreeSet<String> = payload.behavior_notes.iter().flatten().map(ToString::to_string).collect();
    if payload.behavior_notes.len() != 1 || loaded != recorded {
        return Err(key_error(
            "behavior_notes",
            format!(
                "{:?} are not the loaded plan's [{:?}]",
                payload
                    .behavior_notes
                    .iter()
                    .map(|l| l.iter().map(ToString::to_string).collect())
                    .collect::<Vec<Vec<_>>>(),
                loaded.iter().collect::<Vec<_>>()
            ),
        ));
    }
    Ok(plan)
}

/// Reads cudnn-frontend's plan payload bytes into a plan for `cudnn`:
/// [`parse_frontend_payload`], then [`load_frontend_payload`].
///
/// # Errors
///
/// Those of the two steps.
pub fn read_frontend_payload(cudnn: &Cudnn, bytes: &[u8], graph: Option<Graph>) -> Result<ExecutionPlan, PayloadError> {
    let payload = parse_frontend_payload(bytes)?;
    let result = load_frontend_payload(cudnn, &payload, graph);
    match &result {
        Ok(plan) => tracing::debug!(graph = %plan.graph().name, bytes = bytes.len(), "cudnn-frontend payload loaded"),
        Err(e) => tracing::debug!(error = %e, "cudnn-frontend payload refused"),
    }
    result
}

/// Writes `plan` (made by the cuDNN `origin` names) as cudnn-frontend 1.32's plan payload, with
/// the graph's structure or (`options.structure == false`) plan-only.
///
/// # Errors
///
/// [`PayloadError::FrontendUnsupported`] naming the key for what cudnn-frontend's payload would
/// need and cannot hold: a partitioned plan (`cudnn_backend_data` holds one plan), one tensor
/// bound by pointer offset to two slices (`variant_pack_replacements` keeps one per source uid),
/// a by-value scalar of a type cudnn-frontend's variant has no member for (`pass_by_values`), a
/// behavior note cudnn-frontend does not name (`behavior_notes`); [`PayloadError::Save`] when
/// cuDNN cannot give the plan's JSON. Slices bound by pointer offset are written as
/// `variant_pack_replacements`, tensors in the workspace as `workspace_modifications` (regions,
/// operation 2) with `fe_workspace_size`.
// Long because it writes every key cudnn-frontend 1.32 writes, in its order, so that the bytes
// match its own.
pub fn write_frontend_payload(
    plan: &ExecutionPlan,
    origin: &PlanOrigin,
    options: SerializeOptions,
) -> Result<Vec<u8>, PayloadError> {
    if plan.is_partitioned() {
        return Err(unsupported(
            "cudnn_backend_data",
            format!(
                "graph `{}` runs as {} kernels, and a cudnn-frontend payload holds one plan: build it with \
                 `Fusion::Single` (or split it into graphs) to export it",
                plan.graph().name,
                plan.parts().len()
            ),
        ));
    }
    let layout = plan.layout();
    // cudnn-frontend keeps one replacement per source uid (a map): two slices of one tensor
    // bound by pointer offset cannot be written.
    let replacements = plan_replacements(plan);
    if let Some(w) = replacements.windows(2).find(|w| w[0].from == w[1].from) {
        let name = plan.graph().tensors.iter().find(|t| t.uid == w[0].from).map_or("?", |t| t.name.as_str());
        return Err(unsupported(
            "variant_pack_replacements",
            format!(
                "tensor `{name}` (uid {}) is bound by pointer offset to two slices (uids {} and {}), and \
                 cudnn-frontend keeps one replacement per source uid",
                w[0].from, w[0].to, w[1].to
            ),
        ));
    }
    let workspace_modifications: Vec<(String, Json)> = plan_workspace_tensors(plan)
        .into_iter()
        .map(|(uid, offset)| {
            let triple = [Json::Int(WORKSPACE_REGION), Json::Int(offset as i64), Json::Arr(Vec::new())];
            (uid.to_string(), Json::Arr(triple.into()))
        })
        .collect();
    let mut pass_by_values = Vec::with_capacity(layout.scalars().len());
    for s in layout.scalars() {
        let scalar = FrontendScalar::of(s.data_type, s.value()).ok_or_else(|| {
            unsupported(
                "pass_by_values",
                format!("uid {}: cudnn-frontend has no by-value scalar of type {}", s.uid, s.data_type),
            )
        })?;
        pass_by_values.push((s.uid.to_string(), scalar.to_json()));
    }
    let notes = plan
        .selected()
        .behavior_notes
        .iter()
        .map(|n| match n {
            BehaviorNote::Other(v) => {
                Err(unsupported("behavior_notes", format!("cudnn-frontend does not name behavior note {v}")))
            }
            named => Ok(Json::str(named.to_string())),
        })
        .collect::<Result<Vec<_>, _>>()?;

    let mut members: Vec<(String, Json)> = Vec::new();
    if options.structure {
        // The context's dynamic-shape flag is how the plan was made (cudnn-frontend's
        // `set_dynamic_shape_enabled`), which the graph alone does not say.
        match graph_to_json(plan.graph(), plan.is_dynamic_shape()) {
            Json::Obj(structure) => members.extend(structure),
            other => members.push(("structure".into(), other)),
        }
        // As cudnn-frontend's lowering leaves them in the structure it prints with its plan.
        transpose_attention_operands(&mut members);
    }
    let set = |members: &mut Vec<(String, Json)>, key: &str, value: Json| {
        members.retain(|(k, _)| k != key);
        members.push((key.to_string(), value));
    };
    set(&mut members, "json_version", Json::str("2.0"));
    set(&mut members, "cudnn_backend_version", Json::str(backend_version_string(origin.cudnn_version)));
    set(&mut members, "cudnn_frontend_version", Json::Int(FRONTEND_VERSION));
    let plan_json = plan.json().map_err(|e| PayloadError::Save(Box::new(e)))?;
    set(&mut members, "cudnn_backend_data", Json::Str(plan_json));
    set(&mut members, "variant_pack_uids", Json::Arr(layout.uids().iter().map(|&u| Json::Int(u)).collect()));
    set(&mut members, "behavior_notes", Json::Arr(vec![Json::Arr(notes)]));
    set(&mut members, "pass_by_values", Json::Obj(pass_by_values));
    set(&mut members, "workspace_modifications", Json::Obj(workspace_modifications));
    set(&mut members, "aligned_operands", Json::Obj(Vec::new()));
    let replacements = replacements
        .iter()
        .map(|r| Json::Arr(vec![Json::Int(r.from), Json::Arr(vec![Json::Int(r.to), Json::Int(r.byte_offset)])]));
    set(&mut members, "variant_pack_replacements", Json::Arr(replacements.collect()));
    set(&mut members, "fe_workspace_size", Json::Int(layout.workspace_prefix() as i64));
    set(&mut members, "tensors_to_dump", Json::Arr(Vec::new()));
    // nlohmann keeps an object's keys sorted; so does cudnn-frontend's payload.
    members.sort_by(|a, b| a.0.cmp(&b.0));
    let bytes = to_ubjson(&Json::Obj(members))?;
    tracing::debug!(graph = %plan.graph().name, bytes = bytes.len(), structure = options.structure, "cudnn-frontend payload written");
    Ok(bytes)
}

impl From<UbjsonError> for PayloadError {
    fn from(e: UbjsonError) -> Self {
        match e {
            UbjsonError::TooLarge { len, .. } => PayloadError::TooLarge(len as u64),
            other => PayloadError::Ubjson(other),
        }
    }
}
