//! How a tensor's elements sit in memory, named the way a user declares it, and the one spelling
//! of a tensor's type (`f16[8, 64, 16, 16] channels-last`) that docs, `Display`, pictures and
//! errors all print.
//!
//! The rule this names: a graph port (an input or output, any non-virtual tensor) is laid out
//! by its declaration alone — packed row-major in the declared dim order unless it says
//! `channels_last`, `order [..]` or gives strides — whatever op produces or reads it, so two
//! graphs that declare the same port agree on its memory.

use std::fmt;

use crate::dim::{channels_last_strides, packed_strides};
use crate::DataType;

/// A tensor's memory layout.
///
/// ```
/// use cudnn_runtime::ir::MemoryLayout;
/// let dims = [8, 64, 16, 16];
/// assert_eq!(MemoryLayout::of(&dims, &[16384, 256, 16, 1]), MemoryLayout::RowMajor);
/// assert_eq!(MemoryLayout::of(&dims, &[16384, 1, 1024, 64]), MemoryLayout::ChannelsLast);
/// assert_eq!(MemoryLayout::of(&dims, &[16384, 16, 1024, 1]).to_string(), "order [0, 2, 1, 3]");
/// assert_eq!(MemoryLayout::of(&dims, &[1, 1, 1, 1]).to_string(), "strides [1, 1, 1, 1]");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryLayout {
    /// Packed, the last dim contiguous: the default of every port.
    RowMajor,
    /// Packed with the channel dim (1) innermost: NHWC for `[N, C, H, W]` (ranks 3 to 5).
    ChannelsLast,
    /// Packed with the dims in this memory order, outermost first.
    Order(Vec<usize>),
    /// Any other strides (a view, padding, broadcast).
    Strides(Vec<i64>),
}

/// The dim order of channels-last storage at `rank`, outermost first: `[0, 2, 1]`,
/// `[0, 2, 3, 1]`, `[0, 2, 3, 4, 1]`; `None` for ranks other than 3 to 5, which have no
/// channel dim between a batch and spatial dims.
pub fn channels_last_order(rank: usize) -> Option<Vec<usize>> {
    (3..=5).contains(&rank).then(|| std::iter::once(0).chain(2..rank).chain(std::iter::once(1)).collect())
}

/// Packed strides with the dims in memory order `order` (outermost first).
pub(crate) fn strides_for_order(dims: &[i64], order: &[usize]) -> Vec<i64> {
    let mut strides = vec![0; dims.len()];
    let mut next = 1i64;
    for &axis in order.iter().rev() {
        strides[axis] = next;
        next = next.saturating_mul(dims[axis].max(1));
    }
    strides
}

impl MemoryLayout {
    /// The layout of a declared dim order (`order [..]` in `graph!`): the identity is row-major,
    /// channels-last's order is channels-last.
    pub fn from_order(order: &[usize]) -> Self {
        if order.iter().enumerate().all(|(i, &a)| i == a) {
            MemoryLayout::RowMajor
        } else if channels_last_order(order.len()).as_deref() == Some(order) {
            MemoryLayout::ChannelsLast
        } else {
            MemoryLayout::Order(order.to_vec())
        }
    }

    /// The layout of concrete strides: the first name that reproduces them exactly (row-major,
    /// then channels-last, then the packed order the strides sort into), else the strides.
    pub fn of(dims: &[i64], strides: &[i64]) -> Self {
        if strides == packed_strides(dims).as_slice() {
            return MemoryLayout::RowMajor;
        }
        if (3..=5).contains(&dims.len()) && strides == channels_last_strides(dims).as_slice() {
            return MemoryLayout::ChannelsLast;
        }
        if strides.len() == dims.len() {
            let mut order: Vec<usize> = (0..dims.len()).collect();
            order.sort_by(|&a, &b| strides[b].cmp(&strides[a]).then(a.cmp(&b)));
            if strides == strides_for_order(dims, &order).as_slice() {
                return MemoryLayout::from_order(&order);
            }
        }
        MemoryLayout::Strides(strides.to_vec())
    }
}

impl fmt::Display for MemoryLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryLayout::RowMajor => f.write_str("row-major"),
            MemoryLayout::ChannelsLast => f.write_str("channels-last"),
            MemoryLayout::Order(order) => write!(f, "order {order:?}"),
            MemoryLayout::Strides(strides) => write!(f, "strides {strides:?}"),
        }
    }
}

/// A tensor's type as every message, doc and picture spells it: element type, dims, layout.
///
/// ```
/// use cudnn_runtime::ir::{type_string, MemoryLayout};
/// use cudnn_runtime::DataType;
/// let t = type_string(DataType::F16, &[8, 64, 16, 16], &MemoryLayout::ChannelsLast);
/// assert_eq!(t, "f16[8, 64, 16, 16] channels-last");
/// ```
pub fn type_string<D: fmt::Display>(data_type: DataType, dims: &[D], layout: &MemoryLayout) -> String {
    let dims: Vec<String> = dims.iter().map(ToString::to_string).collect();
    format!("{}[{}] {layout}", data_type.name(), dims.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_last_orders_exist_for_ranks_three_to_five() {
        assert_eq!(channels_last_order(3), Some(vec![0, 2, 1]));
        assert_eq!(channels_last_order(4), Some(vec![0, 2, 3, 1]));
        assert_eq!(channels_last_order(5), Some(vec![0, 2, 3, 4, 1]));
        assert_eq!(channels_last_order(2), None);
        assert_eq!(channels_last_order(6), None);
        for rank in 3..=5 {
            let dims: Vec<i64> = (2..2 + rank as i64).collect();
            let order = channels_last_order(rank).unwrap_or_default();
            assert_eq!(strides_for_order(&dims, &order), channels_last_strides(&dims), "rank {rank}");
        }
    }

    #[test]
    fn layouts_are_named_by_what_reproduces_the_strides() {
        assert_eq!(MemoryLayout::from_order(&[0, 1, 2]), MemoryLayout::RowMajor);
        assert_eq!(MemoryLayout::from_order(&[0, 2, 1]), MemoryLayout::ChannelsLast);
        assert_eq!(MemoryLayout::from_order(&[1, 0]), MemoryLayout::Order(vec![1, 0]));
        // Size-1 dims make several stride sets mean one layout; the declared name still wins.
        let bias = [1, 8, 1, 1];
        assert_eq!(MemoryLayout::of(&bias, &packed_strides(&bias)), MemoryLayout::RowMajor);
        assert_eq!(MemoryLayout::of(&bias, &channels_last_strides(&bias)), MemoryLayout::ChannelsLast);
        let dims = [2, 3, 4, 5, 6];
        assert_eq!(MemoryLayout::of(&dims, &strides_for_order(&dims, &[0, 2, 3, 4, 1])), MemoryLayout::ChannelsLast);
        assert_eq!(
            MemoryLayout::of(&dims, &strides_for_order(&dims, &[4, 3, 2, 1, 0])).to_string(),
            "order [4, 3, 2, 1, 0]"
        );
        // A padded row is no packed order.
        assert_eq!(MemoryLayout::of(&[4, 3], &[8, 1]), MemoryLayout::Strides(vec![8, 1]));
        assert_eq!(type_string(DataType::BF16, &["B", "S"], &MemoryLayout::RowMajor), "bf16[B, S] row-major");
    }
}
