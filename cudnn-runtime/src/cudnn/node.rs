//! The node-lowering context: what an op family's `lower.rs` is given ([`NodeCx`]) and returns
//! ([`LoweredOp`]), as plain data about the node and its tensors that the graph lowering
//! (`backend::lower`) makes from the graph, so that op lowering needs nothing above this layer.
//!
//! Ranks: cuDNN wants at least 3 dims on every tensor of these ops. A tensor of rank `r < 3` is
//! given `3 - r` leading dims of extent 1 whose stride is `dims[0] * strides[0]` (the span of the
//! whole tensor), the same padding for every tensor, so the tensors of one node keep equal ranks.

use cudarc::cudnn::sys::cudnnBackendAttributeName_t as A;
use cudarc::cudnn::sys::cudnnBackendDescriptorType_t as K;

use super::descriptor::{Descriptor, Label};
use super::{CudnnError, Port};
use crate::DataType;

/// The smallest rank cuDNN accepts for these ops' tensors.
pub(crate) const MIN_RANK: usize = 3;
/// The largest rank cuDNN accepts (`CUDNN_DIM_MAX`).
pub(crate) const MAX_RANK: usize = 8;
/// The byte alignment every tensor descriptor promises.
pub(crate) const ALIGNMENT: u64 = 16;

/// Tensors a lowering adds beyond the graph's own that the variant pack must bind: by-value
/// scalars (attention's scale and mask constants) and device tensors that live at the front of
/// the workspace (attention backward's softmax sums and dQ accumulator, as cudnn-frontend's
/// "fe workspace"). cuDNN's own workspace follows them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Internals {
    /// By-value scalars: uid, type, value.
    pub(crate) scalars: Vec<(i64, DataType, f64)>,
    /// Workspace tensors: uid and byte offset into the workspace.
    pub(crate) workspace: Vec<(i64, usize)>,
    /// Bytes of workspace they take (a multiple of 256), before cuDNN's own.
    pub(crate) workspace_bytes: usize,
    /// Slices lowered as cudnn-frontend does before cuDNN 9.22: Y's uid, bound to the address
    /// of graph input X (its index among the graph's tensors) plus a byte offset.
    pub(crate) views: Vec<(i64, usize, u64)>,
    /// Graph inputs (indices among the graph's tensors) read only through such views: no
    /// operation names them, so the variant pack leaves them out.
    pub(crate) aliased: Vec<usize>,
}

impl Internals {
    /// Appends `other`, its workspace tensors placed after these.
    pub(crate) fn extend(&mut self, other: Internals) {
        self.scalars.extend(other.scalars);
        let base = self.workspace_bytes;
        self.workspace.extend(other.workspace.into_iter().map(|(uid, offset)| (uid, base + offset)));
        self.workspace_bytes += other.workspace_bytes;
        self.views.extend(other.views);
        self.aliased.extend(other.aliased);
    }
}

/// One node's operation descriptor and the descriptors it refers to (matmul, pointwise or
/// reduction descriptors), which live as long as the graph.
#[derive(Debug)]
pub(crate) struct LoweredOp {
    pub(crate) operation: Descriptor,
    pub(crate) parts: Vec<Descriptor>,
}

/// What an op family's `lower` gets: the node, its tensors and their descriptors.
pub(crate) struct NodeCx<'a> {
    /// The node's name.
    pub(crate) name: &'a str,
    /// Its op's call name.
    pub(crate) op: &'static str,
    /// The type the node computes in.
    pub(crate) compute_type: DataType,
    /// The graph's intermediate (virtual tensor) type.
    pub(crate) intermediate_type: DataType,
    /// Its input tensors, in port order.
    pub(crate) inputs: Vec<Port<'a>>,
    /// Its output tensors, in port order.
    pub(crate) outputs: Vec<Port<'a>>,
    /// The descriptors of its inputs, then its outputs, in port order.
    pub(crate) descriptors: Vec<Option<&'a Descriptor>>,
}

impl NodeCx<'_> {
    /// A new descriptor whose errors name this node.
    pub(crate) fn descriptor(&self, kind: K) -> Result<Descriptor, CudnnError> {
        Descriptor::labelled(kind, Label { node: Some(self.name.to_string()), tensor: None })
    }

    /// The type the node computes in.
    pub(crate) fn compute_type(&self) -> DataType {
        self.compute_type
    }

    /// The descriptor of input `port`.
    pub(crate) fn input(&self, port: usize) -> Result<&Descriptor, CudnnError> {
        self.port(port < self.inputs.len(), port, "input", port)
    }

    /// The descriptor of output `port`.
    pub(crate) fn output(&self, port: usize) -> Result<&Descriptor, CudnnError> {
        self.port(port < self.outputs.len(), self.inputs.len() + port, "output", port)
    }

    fn port(&self, exists: bool, index: usize, what: &str, port: usize) -> Result<&Descriptor, CudnnError> {
        exists
            .then(|| self.descriptors.get(index).copied().flatten())
            .flatten()
            .ok_or_else(|| self.unsupported(format!("it has no {what} #{port}")))
    }

    /// Sets on `operation` the descriptor of each input and output, in port order, under the
    /// attribute `attr_of` names for the port (`inputs` and `outputs` are the node's port names):
    /// how the operations with one attribute per named port (norms, `bn_finalize`) are wired, so
    /// no port can reach the wrong attribute by position.
    pub(crate) fn wire_ports_by_name(
        &self,
        operation: &mut Descriptor,
        inputs: &[&str],
        outputs: &[&str],
        attr_of: impl Fn(&str) -> Option<A>,
    ) -> Result<(), CudnnError> {
        let wire = |port: &str| {
            attr_of(port).ok_or_else(|| self.unsupported(format!("cuDNN has no attribute for port {port}")))
        };
        for (i, port) in inputs.iter().enumerate() {
            operation.set_descriptors(wire(port)?, &[self.input(i)?])?;
        }
        for (i, port) in outputs.iter().enumerate() {
            operation.set_descriptors(wire(port)?, &[self.output(i)?])?;
        }
        Ok(())
    }

    /// The rank input `port` has in the graph (before padding to [`MIN_RANK`]).
    pub(crate) fn input_rank(&self, port: usize) -> usize {
        self.inputs.get(port).map_or(0, |t| t.dims.len())
    }

    /// The element type of input `port`, if the node has that input.
    pub(crate) fn input_data_type(&self, port: usize) -> Option<DataType> {
        self.inputs.get(port).map(|t| t.data_type)
    }

    /// A [`CudnnError::Unsupported`] about this node.
    pub(crate) fn unsupported(&self, reason: String) -> CudnnError {
        CudnnError::Unsupported { node: self.name.to_string(), op: self.op, reason }
    }

    /// A [`CudnnError::SupportRule`] about this node: it breaks `rule`, whatever the version.
    pub(crate) fn support_rule(&self, rule: &'static str, message: String) -> CudnnError {
        self.support_rule_needing(rule, message, None)
    }

    /// A [`CudnnError::SupportRule`] about this node that `needs` says a newer cuDNN lifts, if
    /// it is `Some`.
    pub(crate) fn support_rule_needing(
        &self,
        rule: &'static str,
        message: String,
        needs: Option<crate::capabilities::Missing>,
    ) -> CudnnError {
        CudnnError::SupportRule { node: self.name.to_string(), op: self.op, rule, message, needs }
    }
}

/// The leading dims a tensor of rank `rank` gets (see the module docs).
pub(crate) fn rank_padding(rank: usize) -> usize {
    MIN_RANK.saturating_sub(rank)
}

/// Dims and strides padded to [`MIN_RANK`] with leading 1s.
pub(crate) fn padded_layout(dims: &[i64], strides: &[i64]) -> (Vec<i64>, Vec<i64>) {
    let pad = rank_padding(dims.len());
    let span = match (dims.first(), strides.first()) {
        // The padded dims have extent 1, so their stride addresses nothing: saturating keeps a
        // valid graph's `d * s` (which can pass i64 when the first dim is large and its stride
        // larger than its span needs) from overflowing.
        (Some(d), Some(s)) => d.saturating_mul(*s),
        _ => 1,
    };
    let mut d = vec![1; pad];
    let mut s = vec![span; pad];
    d.extend_from_slice(dims);
    s.extend_from_slice(strides);
    (d, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_ranks_get_leading_ones_spanning_the_tensor() {
        assert_eq!(padded_layout(&[5], &[2]), (vec![1, 1, 5], vec![10, 10, 2]));
        assert_eq!(padded_layout(&[4, 6], &[6, 1]), (vec![1, 4, 6], vec![24, 6, 1]));
        assert_eq!(padded_layout(&[2, 4, 6], &[24, 6, 1]), (vec![2, 4, 6], vec![24, 6, 1]));
        assert_eq!(rank_padding(1), 2);
        assert_eq!(rank_padding(5), 0);
    }
}
