//! [`Port`]: a tensor of the node being lowered, as plain data (no descriptor), so that the pure
//! parts of a lowering (attention's subgraph expansion) can be tested without cuDNN.

use crate::DataType;

/// A tensor of the node being lowered, as the graph has it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Port<'a> {
    /// The tensor's name.
    pub(crate) name: &'a str,
    /// Its uid.
    pub(crate) uid: i64,
    /// Its dims, as the graph has them (before padding to `MIN_RANK`).
    pub(crate) dims: Vec<i64>,
    /// Its strides, likewise.
    pub(crate) strides: Vec<i64>,
    /// Its element type.
    pub(crate) data_type: DataType,
    /// Whether it is virtual (computed and read inside the graph, never in memory).
    pub(crate) is_virtual: bool,
    /// Whether it is a by-value scalar (its value in the variant pack, not in device memory).
    pub(crate) by_value: bool,
    /// The call name of the op of the node that computes it; `None` for a graph input.
    pub(crate) producer: Option<&'static str>,
    /// How many nodes read it.
    pub(crate) readers: usize,
}
