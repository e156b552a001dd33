//! The memory of a partitioned plan: where each tensor the parts exchange lives ([`Place`]), in
//! the plan's I/O buffers or in one arena at the front of the workspace ([`Arena`]).

use super::group::{group_index, materialized, Group};
use super::views::{producers, stored_type, Alias};
use crate::ir::{Graph, TensorId};

/// Where a partitioned plan's arena slots start: every slot offset is a multiple of this, so a
/// workspace allocation (256-byte aligned by CUDA) keeps every tensor aligned for any engine.
pub(crate) const SLOT_ALIGNMENT: u64 = 256;

/// Where a tensor a part reads or writes lives: one of the plan's I/O buffers (by its index in
/// the plan's I/O order) or the arena, at a byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// I/O buffer `index`, `offset` bytes in.
    Io { index: usize, offset: u64 },
    /// `offset` bytes into the workspace.
    Arena { offset: u64 },
}

/// The memory of a partitioned plan: where each materialized or aliased tensor lives, and the
/// arena's size.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Arena {
    places: Vec<Option<Place>>,
    /// Bytes of the arena (a multiple of [`SLOT_ALIGNMENT`]).
    pub(crate) arena_bytes: usize,
}

impl Arena {
    /// Places every tensor the parts exchange: graph I/O in its buffer, materialized virtual
    /// tensors in arena slots (first fit, a slot reused once its tensor's last reader has run),
    /// aliases where their base is.
    pub(crate) fn new(graph: &Graph, groups: &[Group], alias: &[Option<Alias>], io: &[TensorId]) -> Arena {
        let group_of = group_index(graph, groups);
        let producer = producers(graph);
        let materialized = materialized(graph, &group_of, alias);
        let mut places: Vec<Option<Place>> = vec![None; graph.tensors.len()];
        for (index, t) in io.iter().enumerate() {
            places[t.0] = Some(Place::Io { index, offset: 0 });
        }
        // Each materialized tensor's lifetime in parts: [written, last read].
        let mut last_read = vec![0usize; graph.tensors.len()];
        for (n, node) in graph.nodes.iter().enumerate() {
            let Some(g) = group_of[n] else { continue };
            for &t in &node.inputs {
                let base = alias[t.0].map_or(t, |a| a.base);
                last_read[base.0] = last_read[base.0].max(g);
            }
        }
        let mut slots: Vec<(u64, u64, usize, usize)> = Vec::new(); // offset, bytes, first, last
        let mut arena = 0u64;
        for (t, tensor) in graph.tensors.iter().enumerate() {
            if !materialized[t] {
                continue;
            }
            let Some(first) = producer[t].and_then(|p| group_of[p]) else { continue };
            let last = last_read[t].max(first);
            let stored = stored_type(graph, TensorId(t), alias);
            let bytes =
                (tensor.storage_len() as u64 * stored.size_bytes() as u64).div_ceil(SLOT_ALIGNMENT) * SLOT_ALIGNMENT;
            let mut live: Vec<(u64, u64)> =
                slots.iter().filter(|s| s.2 <= last && first <= s.3).map(|s| (s.0, s.0 + s.1)).collect();
            live.sort_unstable();
            let mut offset = 0u64;
            for (start, end) in live {
                if offset + bytes <= start {
                    break;
                }
                offset = offset.max(end);
            }
            slots.push((offset, bytes, first, last));
            arena = arena.max(offset + bytes);
            places[t] = Some(Place::Arena { offset });
        }
        for (t, a) in alias.iter().enumerate() {
            if let Some(a) = a {
                // Graph I/O keeps its type; a materialized base is in its stored type.
                let size = match places[a.base.0] {
                    Some(Place::Io { .. }) => graph.tensor(a.base).data_type.size_bytes(),
                    _ => stored_type(graph, a.base, alias).size_bytes(),
                } as u64;
                places[t] = places[a.base.0].map(|p| match p {
                    Place::Io { index, offset } => Place::Io { index, offset: offset + a.elements * size },
                    Place::Arena { offset } => Place::Arena { offset: offset + a.elements * size },
                });
            }
        }
        Arena { places, arena_bytes: usize::try_from(arena).unwrap_or(usize::MAX) }
    }

    /// Where tensor `t` of the graph lives, if it is exchanged between parts or is graph I/O.
    pub(crate) fn place(&self, t: TensorId) -> Option<Place> {
        self.places.get(t.0).copied().flatten()
    }
}
