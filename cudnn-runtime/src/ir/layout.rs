//! How a tensor's elements sit in memory, named the way a user declares it, and the one spelling
//! of a tensor's type (`f16[8, 64, 16, 16] channels-last`) that docs, `Display`, pictures and
//! errors all print.
//!
//! The rule this names: a graph port (an input or output, any non-virtual tensor) is laid out
//! by its declaration alone — packed row-major in the declared dim order unless it says
//! `channels_last`, `order [..]` or gives strides — whatever op produces or reads it, so two
//! graphs that declare the same port agree on its memory.

use std::fmt;

use super::Graph;
use crate::dim::{channels_last_strides, packed_strides};
use crate::ops::ChannelsLast;
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

/// A port of a convolution or pooling node that is not channels-last, which is what cuDNN's
/// fused convolution engines want: named in the hint of a graph cuDNN finds no plan for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotChannelsLast {
    /// The tensor (a graph input or output).
    pub tensor: String,
    /// Its type, as [`type_string`] spells it.
    pub type_string: String,
    /// The convolution or pooling node it is a port of.
    pub node: String,
    /// That node's op.
    pub op: &'static str,
}

impl fmt::Display for NotChannelsLast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` ({}) of node `{}` ({})", self.tensor, self.type_string, self.node, self.op)
    }
}

impl Graph {
    /// The graph ports (non-virtual tensors of rank 3 to 5, by-value scalars aside) of each
    /// fused convolution or pooling chain — the conv or pooling node and every node joined to it
    /// through virtual tensors — that are not channels-last, each once, in node order. A port
    /// whose only dims of extent above 1 already have channels-last strides (a `[1, C, 1, 1]`
    /// bias) counts as channels-last.
    ///
    /// ```
    /// use cudnn_runtime::{DataType, GraphBuilder};
    /// let mut g = GraphBuilder::new("g");
    /// let x = g.input("x", DataType::F16, &[2, 8, 6, 6]).unwrap();
    /// let w = g.input("w", DataType::F16, &[4, 8, 3, 3]).unwrap();
    /// g.set_channels_last(w).unwrap();
    /// let bias = g.input("bias", DataType::F16, &[1, 4, 1, 1]).unwrap();
    /// let c = g.op("conv_fprop", &[x.into(), w.into()], &[]).unwrap()[0];
    /// let y = g.op("add", &[c.into(), bias.into()], &[]).unwrap()[0];
    /// g.output(y, "y", DataType::F16).unwrap();
    /// let names: Vec<String> =
    ///     g.build().unwrap().ports_not_channels_last().into_iter().map(|p| p.tensor).collect();
    /// assert_eq!(names, ["x", "y"]);
    /// ```
    pub fn ports_not_channels_last(&self) -> Vec<NotChannelsLast> {
        // Union-find over nodes: two nodes are in one chain when one reads a virtual tensor the
        // other writes (cuDNN fuses exactly what never reaches memory).
        let mut chain: Vec<usize> = (0..self.nodes.len()).collect();
        fn root(chain: &mut [usize], mut i: usize) -> usize {
            while chain[i] != i {
                chain[i] = chain[chain[i]];
                i = chain[i];
            }
            i
        }
        let mut writer: Vec<Option<usize>> = vec![None; self.tensors.len()];
        for (k, n) in self.nodes.iter().enumerate() {
            for o in &n.outputs {
                if let Some(w) = writer.get_mut(o.0) {
                    *w = Some(k);
                }
            }
        }
        for (k, n) in self.nodes.iter().enumerate() {
            for i in &n.inputs {
                let virtual_writer = self.tensors.get(i.0).filter(|t| t.is_virtual).and_then(|_| writer[i.0]);
                if let Some(w) = virtual_writer {
                    let (a, b) = (root(&mut chain, k), root(&mut chain, w));
                    chain[a] = b;
                }
            }
        }
        let mut convolutional = vec![false; self.nodes.len()];
        for (k, n) in self.nodes.iter().enumerate() {
            if n.op.layout_policy().channels_last == ChannelsLast::Anchor {
                let r = root(&mut chain, k);
                convolutional[r] = true;
            }
        }
        let mut seen = vec![false; self.tensors.len()];
        let mut found = Vec::new();
        for (k, n) in self.nodes.iter().enumerate() {
            if !convolutional[root(&mut chain, k)] {
                continue;
            }
            for id in n.inputs.iter().chain(&n.outputs) {
                let Some(t) = self.tensors.get(id.0) else { continue };
                let port = !t.is_virtual && t.pass_by_value.is_none() && (3..=5).contains(&t.dims.len());
                if port && !std::mem::replace(&mut seen[id.0], true) && !acts_channels_last(&t.dims, &t.strides) {
                    found.push(NotChannelsLast {
                        tensor: t.name.clone(),
                        type_string: t.type_string(),
                        node: n.name.clone(),
                        op: n.op.call_name(),
                    });
                }
            }
        }
        found
    }
}

/// Strides that address memory as channels-last does: equal to channels-last's on every dim of
/// extent above 1 (a size-1 dim's stride never moves an address).
fn acts_channels_last(dims: &[i64], strides: &[i64]) -> bool {
    let nhwc = channels_last_strides(dims);
    dims.len() == strides.len() && dims.iter().zip(strides.iter().zip(&nhwc)).all(|(&d, (s, c))| d == 1 || s == c)
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
