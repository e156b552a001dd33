//! JSON tree → [`Graph`]: reads cudnn-frontend's layout (ours or one cudnn-frontend logged, with
//! tensors referred to by uid or by name), resolves it into the IR and validates it. The header
//! and context are read here, the tensors in `tensors.rs`, the nodes in `nodes.rs` (each node's
//! fields by its family's codec, `ops/<family>/codec.rs`), the graph put together in `assemble.rs`.
//!
//! Stages: document header (version, extension) → context → tensors (each checked alone) → nodes
//! (ports resolved against the tensors, op built from its attributes) → fill-in (what
//! cudnn-frontend's `validate()` would infer, for graphs logged before it ran) → uids, tensor order
//! and strides → [`Graph::validate`] → fingerprint. Every failure is a [`SerializeError`] naming
//! what is at fault; nothing is skipped silently: a field that is neither cudnn-frontend's nor ours
//! is an error. cudnn-frontend's fields that do not bear on the structure (`gid`,
//! `cudnn_backend_version`, `sm_count`, the plan payload's fields) are type-checked or read past,
//! as cudnn-frontend does.

mod assemble;
mod nodes;
mod ragged;
mod tensors;

use super::layout::{CONTEXT_FIELDS, EXT, FORMAT, JSON_VERSIONS, TOP_FIELDS};
use super::SerializeError;
use crate::codec::float::parse_hex;
use crate::codec::json::{self, Json, Obj};
use crate::codec::names::read_data_type;
use crate::{DataType, Graph};

type Result<T> = std::result::Result<T, SerializeError>;

/// The graph in `doc`, validated, and the context's `is_dynamic_shape_enabled` (how the graph's plan was made, which
/// a plan payload's structure records; `false` when absent).
pub(crate) fn planned_graph_from_json(doc: &Json) -> Result<(Graph, bool)> {
    if !matches!(doc, Json::Obj(_)) {
        return Err(wrong_type("(document)", "an object", doc));
    }
    let top = doc.as_obj("")?;
    top.deny_unknown(&TOP_FIELDS)?;
    match top.req("json_version")? {
        Json::Str(v) if JSON_VERSIONS.contains(&v.as_str()) => {}
        Json::Str(v) => return Err(SerializeError::UnsupportedVersion { found: v.clone(), supported: "1.0 or 2.0" }),
        other => return Err(wrong_type("json_version", "a string", other)),
    }
    // cudnn-frontend's instance number (`layout::frontend_gid`): type-checked, not structure.
    match top.get("gid") {
        None | Some(Json::UInt(_)) => {}
        Some(Json::Int(v)) if *v >= 0 => {}
        Some(Json::Int(v)) => {
            return Err(SerializeError::OutOfRange {
                path: "gid".into(),
                value: v.to_string(),
                range: "the 64-bit unsigned integers",
            })
        }
        Some(other) => return Err(wrong_type("gid", "an integer", other)),
    }
    let ext = Extension::read(&top)?;
    let cx = RawContext::read(&top)?;
    let dynamic_shape = cx.dynamic_shape;
    let mut tensors = tensors::read_tensors(&top)?;
    // What cudnn-graph writes holds every operand as given: only another writer's document
    // (cudnn-frontend printing a graph after building it) can hold lowered ones.
    if !ext.present {
        restore_lowered_operands(&top, &mut tensors);
    }
    // Packed tensors' offsets become their nodes' offsets ports.
    let with_offsets = ragged::attach_offsets(&top, &mut tensors)?;
    let top = match &with_offsets {
        Some(doc) => doc.as_obj("")?,
        None => top,
    };
    let nodes = nodes::read_nodes(&top, &cx, &tensors)?;
    let nodes = nodes::fill_in(&cx, &mut tensors, nodes)?;
    let graph = assemble::assemble(cx, tensors, nodes, ext.tensor_order)?;
    graph.validate()?;
    if let Some(stored) = ext.fingerprint {
        let computed = graph.fingerprint();
        if computed != stored {
            return Err(SerializeError::FingerprintMismatch { stored, computed });
        }
    }
    Ok((graph, dynamic_shape))
}

/// Swaps back the attention operands of a graph cudnn-frontend printed after building it, which
/// its lowering transposed in place (`serialize::lowered`): K (backward, K and V) of a node that
/// swaps them, found with its dims and strides so swapped (unit stride on dim 2, not on dim 3),
/// is read as given, `[b, h, s_kv, d]` with unit stride on the head dim. A graph printed before
/// building has every operand as given, and an operand so strided could not be planned as given
/// (cuDNN's attention reads the head dim, the last, with unit stride: lowering refuses another
/// stride, `sdpa.strides`), so no plannable graph is changed; the strides tell the two apart
/// where the dims cannot (`d == s_kv`). A tensor two such nodes share was swapped twice, so is
/// as given. Not for a document cudnn-graph wrote (its `cudnn_graph` object): a valid graph may
/// hold an operand so strided (the CPU engine runs it; cuDNN refuses it by name), and a tensor
/// such a node reads as both K and Q would be swapped for both (the `builder` fuzz target,
/// 2026-12-07).
fn restore_lowered_operands(top: &Obj<'_>, tensors: &mut [tensors::RawTensor]) {
    let Some(Json::Arr(nodes)) = top.get("nodes") else { return };
    let keys = super::lowered::swapped_by_lowering(nodes);
    for t in tensors.iter_mut().filter(|t| keys.contains(&t.key)) {
        let Some(strides) = t.strides.as_mut() else { continue };
        if t.dims.len() == 4 && super::lowered::strides_as_lowered(strides) {
            t.dims.swap(2, 3);
            strides.swap(2, 3);
        }
    }
}

/// The top-level `cudnn_graph` object.
#[derive(Default)]
struct Extension {
    /// The document has one: cudnn-graph wrote it.
    present: bool,
    fingerprint: Option<u64>,
    tensor_order: Option<Vec<i64>>,
}

impl Extension {
    fn read(top: &Obj<'_>) -> Result<Extension> {
        let Some(ext) = top.opt_obj(EXT)? else {
            return Ok(Extension::default());
        };
        ext.deny_unknown(&["fingerprint", "format", "tensor_order"])?;
        let format = ext.req("format")?;
        if format.as_i64(&ext.field_path("format")).ok() != Some(FORMAT as i64) {
            let found = match format {
                Json::Str(s) => format!("{s:?}"),
                other => other.to_pretty(),
            };
            return Err(SerializeError::UnsupportedFormat { found, supported: FORMAT });
        }
        let fingerprint = match ext.opt_str("fingerprint")? {
            None => None,
            Some(s) => Some(parse_hex(s, 16).ok_or_else(|| SerializeError::BadFloat {
                path: ext.field_path("fingerprint"),
                value: s.to_string(),
                expected: "a 64-bit fingerprint in hex such as \"0x0123456789abcdef\"",
            })?),
        };
        let tensor_order =
            ext.get("tensor_order").map(|v| v.as_i64_list(&ext.field_path("tensor_order"))).transpose()?;
        Ok(Extension { present: true, fingerprint, tensor_order })
    }
}

/// cudnn-frontend's context: graph name and default data types (each may be unset).
struct RawContext {
    name: String,
    compute: Option<DataType>,
    intermediate: Option<DataType>,
    io: Option<DataType>,
    /// `is_dynamic_shape_enabled`: a planning knob, not structure.
    dynamic_shape: bool,
}

impl RawContext {
    fn read(top: &Obj<'_>) -> Result<RawContext> {
        let Some(c) = top.opt_obj("context")? else {
            return Ok(RawContext {
                name: String::new(),
                compute: None,
                intermediate: None,
                io: None,
                dynamic_shape: false,
            });
        };
        c.deny_unknown(&CONTEXT_FIELDS)?;
        // Planning knobs, not structure: type-checked, then left to the plan payload (which
        // checks the dynamic-shape flag against its plan).
        c.opt_i64("sm_count")?;
        let dynamic_shape = c.bool_or("is_dynamic_shape_enabled", false)?;
        c.bool_or("is_override_shape_enabled", false)?;
        Ok(RawContext {
            name: c.opt_str("name")?.unwrap_or_default().to_string(),
            compute: data_type(&c, "compute_data_type")?,
            intermediate: data_type(&c, "intermediate_data_type")?,
            io: data_type(&c, "io_data_type")?,
            dynamic_shape,
        })
    }
}

/// A `WrongType` error for `found` at `path`.
fn wrong_type(path: &str, expected: &'static str, found: &Json) -> SerializeError {
    json::wrong_type(path, expected, found).into()
}

/// Reads an optional data-type field.
fn data_type(obj: &Obj<'_>, key: &str) -> Result<Option<DataType>> {
    Ok(read_data_type(obj, key)?)
}

/// The type a tensor takes when the document leaves it unset: cudnn-frontend's
/// `fill_from_context` gives virtual tensors the intermediate type and the others the I/O type.
fn context_type(cx: &RawContext, t: &tensors::RawTensor) -> Option<DataType> {
    t.data_type.or(if t.is_virtual { cx.intermediate } else { cx.io })
}
