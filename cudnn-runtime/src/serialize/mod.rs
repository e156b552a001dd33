//! The structural JSON of a graph, in cudnn-frontend's layout, so that graphs logged by
//! cudnn-frontend load here and graphs written here load in cudnn-frontend.
//!
//! [`structure_to_json`] writes a [`Graph`]; [`structure_from_json`] reads one back (or one that
//! cudnn-frontend wrote) and validates it with [`Graph::validate`]. Writing then reading gives the
//! same graph, bit for bit, and writing it again gives the same bytes.
//!
//! The layout is cudnn-frontend 1.32's `Graph::serialize` (`json_version` `"2.0"`, captured from
//! it; the older `"1.0"` layout, with `tensors` an object keyed by uid or name, is read too):
//!
//! ```text
//! {
//!   "context": {"compute_data_type": "FLOAT", "intermediate_data_type": "FLOAT", "io_data_type": null,
//!               "name": "mbr", "sm_count": -1, ...},
//!   "cudnn_graph": {"fingerprint": "0x…", "format": 1},          ← our extension
//!   "json_version": "2.0",
//!   "nodes": [ {"tag": "MATMUL", "name": "matmul_0", "compute_data_type": "FLOAT",
//!               "inputs": {"A": 1, "B": 2}, "outputs": {"C": 4}, "padding_value": 0.0}, ... ],
//!   "tensors": [ {"name": "a", "uid": 1, "data_type": "BFLOAT16", "dim": [2, 8, 4],
//!                 "stride": [32, 4, 1], "is_virtual": false, "is_pass_by_value": false,
//!                 "pass_by_value": null, "reordering_type": "NONE"}, ... ]
//! }
//! ```
//!
//! Nodes are in topological order; tensors are in ascending uid order and ports refer to them by
//! uid. Floats are IEEE bit patterns in hex ([`float`]). What cudnn-frontend's fields cannot
//! hold exactly (the `f64` value of a float attribute, a reduction's `dims` as written, an `f64`
//! scalar, the IR's tensor order, the fingerprint) goes in `cudnn_graph` objects that cudnn-frontend
//! ignores; where both speak, cudnn-frontend's field is authoritative and a disagreement is an
//! error. `docs/serialization.md` describes the format in full.
//!
//! This is the structure only: the plan payloads (cuDNN's execution-plan JSON, engine, workspace)
//! wrap a built plan and sit one layer up, in `crate::payload`.
//!
//! ```
//! # use cudnn_runtime as cudnn_graph;
//! use cudnn_graph::serialize::{structure_from_json, structure_to_json};
//! use cudnn_graph::{DataType, GraphBuilder};
//!
//! let mut g = GraphBuilder::new("scale");
//! let x = g.input("x", DataType::F32, &[2, 3]).unwrap();
//! let y = g.op("mul", &[x.into(), 0.1.into()], &[]).unwrap()[0];
//! g.output(y, "y", DataType::F32).unwrap();
//! let graph = g.build().unwrap();
//!
//! let text = structure_to_json(&graph);
//! assert!(text.contains(r#""pass_by_value": {"index": 3, "value": "3DCCCCCD"}"#));
//! let back = structure_from_json(&text).unwrap();
//! assert_eq!(back, graph);
//! assert_eq!(structure_to_json(&back), text);
//! ```

mod error;
pub mod inputs;
mod layout;
mod lowered;
mod read;
pub mod ubjson;
mod write;

pub use crate::codec::float;
pub use error::SerializeError;
pub use layout::{FORMAT, JSON_VERSION};
// For the plan payloads one layer up (`crate::payload`), which embed the structure.
#[cfg(feature = "cudnn")]
pub(crate) use layout::{PLAN_FIELDS, STRUCTURE_FIELDS};
#[cfg(feature = "cudnn")]
pub(crate) use lowered::swapped_by_lowering;
#[cfg(feature = "cudnn")]
pub(crate) use read::planned_graph_from_json;
#[cfg(feature = "cudnn")]
pub(crate) use write::graph_to_json;

use crate::codec::json;
use crate::Graph;

/// The longest document [`structure_from_json`] reads: 64 MiB.
pub const MAX_INPUT_BYTES: usize = 64 << 20;

/// The most JSON values (scalars, arrays, objects and object keys) a document may hold, which
/// bounds the memory a hostile document can make the reader allocate (a graph of [`MAX_TENSORS`]
/// tensors needs about a fifth of it).
pub const MAX_JSON_VALUES: usize = 1 << 22;

/// The most tensors a document may have.
pub const MAX_TENSORS: usize = 1 << 16;

/// The most nodes a document may have.
pub const MAX_NODES: usize = 1 << 16;

/// The highest tensor rank a document may have: a graph's ([`crate::dim::MAX_RANK`]).
pub const MAX_RANK: usize = crate::dim::MAX_RANK;

/// Writes the structure of `graph` as JSON in cudnn-frontend's layout (pretty-printed,
/// deterministic: the same graph always gives the same bytes).
///
/// Any graph can be written; one that [`Graph::validate`] rejects gives a document that
/// [`structure_from_json`] rejects too.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::serialize::structure_to_json;
/// use cudnn_graph::{DataType, GraphBuilder};
/// let mut g = GraphBuilder::new("mm");
/// let a = g.input("a", DataType::F16, &[1, 8, 4]).unwrap();
/// let b = g.input("b", DataType::F16, &[1, 4, 2]).unwrap();
/// let c = g.matmul(a, b).unwrap();
/// g.output(c, "c", DataType::F16).unwrap();
/// let text = structure_to_json(&g.build().unwrap());
/// assert!(text.contains(r#""json_version": "2.0""#));
/// assert!(text.contains(r#""inputs": {"A": 1, "B": 2}"#));
/// assert!(text.contains(r#""tag": "MATMUL""#));
/// ```
pub fn structure_to_json(graph: &Graph) -> String {
    write::graph_to_json(graph, false).to_pretty()
}

/// [`structure_to_json`] for the structure of a plan: the context's `is_dynamic_shape_enabled`
/// says whether the plan was made as a dynamic-shape operation graph.
#[cfg(feature = "cudnn")]
pub(crate) fn planned_structure_to_json(graph: &Graph, dynamic_shape: bool) -> String {
    write::graph_to_json(graph, dynamic_shape).to_pretty()
}

/// Reads a graph from its structural JSON, written by [`structure_to_json`] or by cudnn-frontend
/// (`Graph::serialize`, before or after build), and validates it.
///
/// # Errors
///
/// A [`SerializeError`] naming the field, node, port or tensor at fault: input over
/// [`MAX_INPUT_BYTES`] or [`MAX_JSON_VALUES`], malformed or truncated JSON, an unsupported `json_version` or extension
/// format, an unknown tag or enum spelling, a port referring to a missing tensor, duplicate keys or
/// uids, a cudnn-frontend feature the IR cannot represent, or a graph that
/// [`Graph::validate`] rejects.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::serialize::{structure_from_json, SerializeError};
/// let e = structure_from_json(r#"{"json_version": "2.0", "nodes": [{"tag": "RNG"}]}"#);
/// assert!(matches!(e, Err(SerializeError::UnknownTag { .. })));
/// ```
pub fn structure_from_json(text: &str) -> Result<Graph, SerializeError> {
    planned_structure_from_json(text).map(|(graph, _)| graph)
}

/// [`structure_from_json`], with the context's `is_dynamic_shape_enabled` (`false` when absent).
pub(crate) fn planned_structure_from_json(text: &str) -> Result<(Graph, bool), SerializeError> {
    if text.len() > MAX_INPUT_BYTES {
        return Err(SerializeError::InputTooLarge { len: text.len(), max: MAX_INPUT_BYTES });
    }
    let doc = json::parse(text, MAX_JSON_VALUES).map_err(|e| {
        let full = e.to_string();
        // serde_json appends " at line L column C"; the variant carries those as fields.
        let message = full.split(" at line ").next().unwrap_or(&full).to_string();
        SerializeError::Syntax { line: e.line(), column: e.column(), message }
    })?;
    let Some(doc) = doc else {
        return Err(SerializeError::TooMany {
            path: "(document)".into(),
            what: "JSON values",
            count: MAX_JSON_VALUES + 1,
            max: MAX_JSON_VALUES,
        });
    };
    read::planned_graph_from_json(&doc)
}
