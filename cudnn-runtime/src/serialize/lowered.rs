//! Attention operands as cudnn-frontend's lowering leaves them. Its composite SDPA nodes swap
//! K's (backward: K's and V's) last two dims and strides in place when the graph is built
//! ([`transposed_by_frontend_lowering`] says which), so a graph it prints after building — a
//! plan payload's structure, or `print(graph)` after `build_operation_graph` — has
//! `[b, h, d, s_kv]` with unit stride on dim 2 where the graph was given `[b, h, s_kv, d]`.
//! This module finds those tensors in a document's `nodes`, for the payload reader (which
//! knows its structure was printed after lowering) and the structural reader (which tells by
//! the strides).

use crate::codec::json::Json;
use crate::ops::sdpa::codec::transposed_by_frontend_lowering;

/// The keys (a uid, or a name where the port refers by name) of the tensors cudnn-frontend's
/// lowering swaps in place, once per node that swaps each: a tensor two such nodes share is
/// listed twice (swapped, then swapped back). Nodes that are not objects, and references that
/// are neither integers nor strings, are skipped: the structural reader names them.
pub(crate) fn swapped_by_lowering(nodes: &[Json]) -> Vec<String> {
    let mut keys = Vec::new();
    for node in nodes {
        let Json::Obj(fields) = node else { continue };
        let field = |k: &str| fields.iter().find(|(name, _)| name == k).map(|(_, v)| v);
        let Some(Json::Str(tag)) = field("tag") else { continue };
        let implementation = match field("implementation") {
            Some(Json::Str(i)) => Some(i.as_str()),
            _ => None,
        };
        let Some(Json::Obj(inputs)) = field("inputs") else { continue };
        let refers = |port: &str| inputs.iter().find(|(p, _)| p == port).map(|(_, v)| v);
        let paged_k = refers("Page_table_K").is_some_and(|v| !matches!(v, Json::Null));
        for port in transposed_by_frontend_lowering(tag, implementation, paged_k) {
            match refers(port) {
                Some(Json::Int(uid)) => keys.push(uid.to_string()),
                Some(Json::UInt(uid)) => keys.push(uid.to_string()),
                Some(Json::Str(key)) => keys.push(key.clone()),
                _ => {}
            }
        }
    }
    keys
}

/// Whether a rank-4 tensor's `strides` are those of a transposed attention operand as
/// cudnn-frontend's lowering leaves it: unit stride on dim 2, not on dim 3. cuDNN's attention
/// reads its operands with unit stride on the head dim (the last), so a tensor given so could
/// not be planned as an operand as given.
pub(crate) fn strides_as_lowered(strides: &[i64]) -> bool {
    matches!(strides, [_, _, 1, last] if *last != 1)
}
