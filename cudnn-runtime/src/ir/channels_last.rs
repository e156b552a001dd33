//! Which ports of a graph's convolution and pooling chains are not channels-last
//! ([`Graph::ports_not_channels_last`]): the hint of a graph cuDNN finds no plan for. Apart from
//! `layout.rs`, which names layouts and needs no graph.

use super::{Graph, NotChannelsLast};
use crate::dim::channels_last_strides;
use crate::ops::ChannelsLast;

impl Graph {
    /// The graph ports (non-virtual tensors of rank 3 to 5, by-value scalars aside) of each
    /// fused convolution or pooling chain — the conv or pooling node and every node joined to it
    /// through virtual tensors — that are not channels-last, each once, in node order. A port
    /// whose only dims of extent above 1 already have channels-last strides (a `[1, C, 1, 1]`
    /// bias) counts as channels-last.
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::{DataType, GraphBuilder};
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
