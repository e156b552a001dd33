//! Partitioning a graph that cuDNN will not plan as one kernel into parts that it will.
//!
//! cuDNN fuses one *anchor* op (a matmul, convolution, normalization, attention, reduction) with
//! the elementwise ops around it, within rules that depend on the version and the GPU. Each op
//! family states its part of those rules ([`FusionRule`](crate::ops::FusionRule)); the fusion
//! table (`group.rs`) walks the nodes in order and puts each into the kernel (part) it can share,
//! starting a new part where the table says it cannot, and records why ([`Cut`]). The backend
//! builds each part; a part cuDNN refuses is split further and the refusal is remembered per
//! cuDNN version and GPU (`refusals.rs`), so the next build goes straight to the split.
//!
//! Between parts, tensors the graph keeps virtual are *materialized*: written by their part and
//! read by later ones from one arena at the front of the workspace (`arena.rs`), slots reused
//! when lifetimes do not overlap. A view (reshape, transpose, slice) whose output is read across
//! a boundary is no kernel at all: its readers get the memory of its input described again
//! (`views.rs`).
//!
//! What the plan sees is one value, a [`Partition`] (`parts.rs`): made automatically, from
//! node names, or as a measured candidate; it builds its parts with the closure the plan gives
//! it and places what they exchange in an [`Arena`].
//!
//! | file | holds |
//! |---|---|
//! | `parts.rs` | [`Partition`]: the graph as parts, building them, the refusal memo's use |
//! | `group.rs` | the fusion table, splits, measured cuts, partitions by name, one part's graph |
//! | `views.rs` | aliases, restriding, the type a materialized tensor is stored in |
//! | `arena.rs` | [`Place`], [`Arena`]: where exchanged tensors live |
//! | `cut.rs` | [`Cut`], [`CutReason`] |
//! | `refusals.rs` | the process's memo of parts cuDNN refused |

mod arena;
mod cut;
mod group;
mod parts;
mod refusals;
#[cfg(test)]
mod tests;
mod views;

pub(crate) use arena::Place;
pub use cut::{Cut, CutReason};
pub(crate) use parts::{BuiltParts, Partition};
pub(crate) use views::{aliases, producers, restride, stored_type};
