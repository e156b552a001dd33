//! The graph IR: tensors, nodes, graph-level data types, [`Graph::validate`], and rewrites that
//! keep what a graph computes ([`for_cudnn`]: [`batchnorm_as_pointwise`], [`mean_and_norms_as_sums`], [`column_sum_as_matmul`],
//! [`narrow_reductions_through_f32`]).
//!
//! A [`Graph`] is always concrete (every dim is a number) and always valid once built: the
//! [`GraphBuilder`] infers shapes eagerly as ops are added and validates again at the end, and
//! [`Graph::validate`] re-runs every op's shape rule over the stored dims, so a graph read from JSON
//! is held to the same rules.

mod builder;
mod channels_last;
mod class_graph;
mod error;
mod layout;
pub(crate) mod picture;
mod rewrite;

pub use builder::{GraphBuilder, Operand};
pub use class_graph::{Binding, ClassGraph, PadCopy, PadError};
pub use error::{GraphError, NotChannelsLast};
pub use layout::{channels_last_order, type_string, MemoryLayout};
pub use rewrite::{
    batchnorm_as_pointwise, column_sum_as_matmul, for_cudnn, mean_and_norms_as_sums, narrow_reductions_through_f32,
    Rewrite, RewriteKind, Rewritten,
};

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::dim::{byte_span, checked_element_count, shape_string, storage_len, Concrete};
use crate::ops::{Op, TensorMeta};
use crate::DataType;

/// Graph-level data types (cudnn-frontend's context).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Context {
    /// Element type of virtual (intermediate) tensors.
    pub intermediate_data_type: DataType,
    /// The type ops compute in.
    pub compute_data_type: DataType,
}

impl Default for Context {
    fn default() -> Self {
        Context { intermediate_data_type: DataType::F32, compute_data_type: DataType::F32 }
    }
}

/// The largest uid a tensor may have: 2^62. Lowering gives the tensors it adds (an attention
/// subgraph's intermediates, workspace) the uids above the graph's largest, so a graph must leave
/// room for them: with uids up to `i64::MAX` that numbering would overflow.
pub const MAX_UID: i64 = 1 << 62;

/// Index of a tensor in its graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TensorId(pub usize);

/// A tensor of a graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tensor {
    /// Unique within the graph.
    pub name: String,
    /// cuDNN's unique id: user-set values win, others are assigned in creation order.
    pub uid: i64,
    /// Extents, outermost first.
    pub dims: Vec<i64>,
    /// Strides in elements, one per dim.
    pub strides: Vec<i64>,
    /// Element type.
    pub data_type: DataType,
    /// An intermediate that never reaches memory.
    pub is_virtual: bool,
    /// A by-value scalar's value (stored as the nearest value of `data_type`).
    pub pass_by_value: Option<f64>,
    /// A by-value scalar supplied at execute: a graph input (every dim 1, never virtual, never
    /// produced, without [`Tensor::pass_by_value`]) whose value the caller passes by value with
    /// each execute (the CPU reference's one-element array, [`crate::backend`]'s host scalar),
    /// lowered as a by-value tensor bound to a host pointer. Graphs record its type and shape
    /// only; cudnn-frontend writes it as `is_pass_by_value` without a value.
    #[serde(default)]
    pub host_scalar: bool,
}

impl Tensor {
    /// Whether cuDNN reads it by value from host memory: a constant
    /// ([`Tensor::pass_by_value`]) or a host scalar supplied at execute ([`Tensor::host_scalar`]).
    pub fn is_by_value(&self) -> bool {
        self.pass_by_value.is_some() || self.host_scalar
    }

    /// The number of elements, saturating at `i64::MAX` (which a validated graph's tensors stay
    /// within).
    pub fn element_count(&self) -> i64 {
        checked_element_count(&self.dims).unwrap_or(i64::MAX)
    }

    /// The memory layout its strides spell.
    pub fn layout(&self) -> MemoryLayout {
        MemoryLayout::of(&self.dims, &self.strides)
    }

    /// Its type as messages and pictures print it: `f16[8, 64, 16, 16] channels-last`.
    pub fn type_string(&self) -> String {
        type_string(self.data_type, &self.dims, &self.layout())
    }

    /// Elements the tensor's storage spans. A tensor of a validated graph spans at most
    /// [`crate::dim::MAX_BYTES`]; one whose span overflows (or has negative dims or strides,
    /// which validation rejects) gives `usize::MAX`, so no buffer passes a length check for it.
    pub fn storage_len(&self) -> usize {
        storage_len(&self.dims, &self.strides).and_then(|n| usize::try_from(n).ok()).unwrap_or(usize::MAX)
    }
}

/// Requires a tensor's element count and storage span in bytes (packed when `strides` is `None`)
/// to be within [`crate::dim::MAX_BYTES`]. A virtual tensor never reaches memory (and a builder
/// output's type can still change when it becomes a graph output), so for one `in_memory` is
/// false and its extents are counted in elements.
pub(crate) fn check_fits(
    tensor: &str,
    dims: &[i64],
    strides: Option<&[i64]>,
    data_type: DataType,
    in_memory: bool,
) -> Result<(), GraphError> {
    let bytes = if in_memory { data_type.size_bytes() } else { 1 };
    let count_fits = checked_element_count(dims).and_then(|n| n.checked_mul(i64::try_from(bytes).ok()?)).is_some();
    let span_fits = strides.is_none_or(|s| byte_span(dims, s, bytes).is_some());
    if count_fits && span_fits {
        return Ok(());
    }
    Err(GraphError::TooLarge {
        tensor: tensor.to_string(),
        dims: dims.to_vec(),
        strides: strides.map(<[i64]>::to_vec),
        data_type,
    })
}

/// One op applied to tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Unique within the graph (`let` names in `graph!`, `{op}_{n}` otherwise).
    pub name: String,
    /// The op.
    pub op: Op,
    /// Inputs, in port order.
    pub inputs: Vec<TensorId>,
    /// Outputs, in port order.
    pub outputs: Vec<TensorId>,
    /// The type this node computes in.
    pub compute_data_type: DataType,
}

/// A validated, concrete compute graph.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::{DataType, GraphBuilder};
/// let mut g = GraphBuilder::new("mm");
/// let a = g.input("a", DataType::F16, &[1, 8, 4]).unwrap();
/// let b = g.input("b", DataType::F16, &[1, 4, 2]).unwrap();
/// let c = g.matmul(a, b).unwrap();
/// g.output(c, "c", DataType::F16).unwrap();
/// let graph = g.build().unwrap();
/// assert_eq!(graph.tensor_by_name("c").unwrap().dims, vec![1, 8, 2]);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    /// The graph's name.
    pub name: String,
    /// Graph-level data types.
    pub context: Context,
    /// Every tensor; [`TensorId`] indexes this.
    pub tensors: Vec<Tensor>,
    /// Nodes in topological order.
    pub nodes: Vec<Node>,
}

impl Graph {
    /// The tensor with this id.
    ///
    /// # Panics
    ///
    /// If the graph has no tensor `id` (never for an id from a validated graph's nodes,
    /// [`Graph::inputs`] or [`Graph::outputs`]); [`Graph::tensors`]`.get(id.0)` does not panic.
    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.0]
    }

    /// The tensor with this name.
    pub fn tensor_by_name(&self, name: &str) -> Option<&Tensor> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The id of the tensor with this name.
    pub fn id_of(&self, name: &str) -> Option<TensorId> {
        self.tensors.iter().position(|t| t.name == name).map(TensorId)
    }

    fn producer(&self) -> Vec<Option<usize>> {
        let mut producer = vec![None; self.tensors.len()];
        for (n, node) in self.nodes.iter().enumerate() {
            for o in &node.outputs {
                if let Some(p) = producer.get_mut(o.0) {
                    p.get_or_insert(n);
                }
            }
        }
        producer
    }

    /// Graph inputs: non-virtual, not by-value, produced by no node; in creation order.
    pub fn inputs(&self) -> Vec<TensorId> {
        let producer = self.producer();
        (0..self.tensors.len())
            .filter(|&i| {
                producer[i].is_none() && !self.tensors[i].is_virtual && self.tensors[i].pass_by_value.is_none()
            })
            .map(TensorId)
            .collect()
    }

    /// Graph outputs: non-virtual tensors that a node produces; in creation order.
    pub fn outputs(&self) -> Vec<TensorId> {
        let producer = self.producer();
        (0..self.tensors.len())
            .filter(|&i| producer[i].is_some() && !self.tensors[i].is_virtual)
            .map(TensorId)
            .collect()
    }

    /// Graph inputs, then graph outputs ([`Graph::inputs`], [`Graph::outputs`]): the order in
    /// which plans take their I/O buffers.
    pub fn io(&self) -> Vec<TensorId> {
        let mut io = self.inputs();
        io.extend(self.outputs());
        io
    }

    /// The elements each tensor's buffer must hold, by [`TensorId`]: its storage span
    /// ([`Tensor::storage_len`]), except a packed (ragged) tensor that every node touching it
    /// reads or writes within a bound on its tokens (an attention's `max_total_seq_len_q`/`_kv`):
    /// that many tokens of its `H·D` elements.
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::{DataType, GraphBuilder};
    /// let mut g = GraphBuilder::new("packed");
    /// // [B = 4, H = 2, S = 64, D = 16], laid out THD (token-major).
    /// let thd = |g: &mut GraphBuilder, name: &str| {
    ///     let t = g.input(name, DataType::BF16, &[4, 2, 64, 16]).unwrap();
    ///     g.set_dim_order(t, &[0, 2, 1, 3]).unwrap();
    ///     t
    /// };
    /// let (q, k, v) = (thd(&mut g, "q"), thd(&mut g, "k"), thd(&mut g, "v"));
    /// let lens = g.input("lens", DataType::I32, &[4, 1, 1, 1]).unwrap();
    /// let offsets = g.input("offsets", DataType::I32, &[5, 1, 1, 1]).unwrap();
    /// let args = [q, k, v, lens, lens, offsets, offsets, offsets, offsets].map(Into::into);
    /// let attrs = [
    ///     ("ragged".into(), true.into()),
    ///     ("padding_mask".into(), true.into()),
    ///     ("max_total_seq_len_q".into(), 100.into()),
    /// ];
    /// let o = g.op("sdpa", &args, &attrs).unwrap()[0];
    /// let o = g.output(o, "o", DataType::BF16).unwrap();
    /// g.set_dim_order(o, &[0, 2, 1, 3]).unwrap();
    /// let graph = g.build().unwrap();
    /// let needs = graph.storage_needs();
    /// let need = |name: &str| needs[graph.id_of(name).unwrap().0];
    /// // Q and O: 100 tokens of 2 · 16 elements; K and V: the padded 4 · 64 tokens.
    /// assert_eq!((need("q"), need("o"), need("k")), (100 * 32, 100 * 32, 4 * 64 * 32));
    /// ```
    pub fn storage_needs(&self) -> Vec<usize> {
        // The largest packed bound over a tensor's uses, and whether a use is unbounded.
        let mut bounded: Vec<Option<usize>> = vec![None; self.tensors.len()];
        let mut whole = vec![false; self.tensors.len()];
        for node in &self.nodes {
            let ragged = node.op.ragged_ports();
            let ports = node.inputs.iter().enumerate().map(|(i, t)| (false, i, t));
            for (output, i, t) in ports.chain(node.outputs.iter().enumerate().map(|(i, t)| (true, i, t))) {
                let tokens = ragged.iter().find(|p| p.output == output && p.index == i).and_then(|p| p.tokens);
                let tensor = &self.tensors[t.0];
                let need = match (tokens, tensor.dims.as_slice()) {
                    (Some(n), &[_, h, _, d]) => n.checked_mul(h).and_then(|x| x.checked_mul(d)),
                    _ => None,
                };
                match need.and_then(|n| usize::try_from(n).ok()) {
                    Some(n) => bounded[t.0] = Some(bounded[t.0].map_or(n, |m| m.max(n))),
                    None => whole[t.0] = true,
                }
            }
        }
        self.tensors
            .iter()
            .enumerate()
            .map(|(i, t)| match bounded[i] {
                Some(n) if !whole[i] => n.min(t.storage_len()),
                _ => t.storage_len(),
            })
            .collect()
    }

    /// Whether `node` is a fill: a pointwise `identity` of one by-value constant, whose output
    /// may have any dims of the constant's rank (the constant broadcast over them; every other
    /// node's outputs have the dims its op infers). `graph!` and the builder never make one;
    /// [`column_sum_as_matmul`] does (a vector of ones). The partitioner makes it a kernel of
    /// its own: fused into the matmul reading it, cuDNN 9.19 computed wrong results on the H200.
    pub fn is_fill(&self, node: &Node) -> bool {
        matches!(&node.op, Op::Pointwise(p) if p.mode == crate::ops::PointwiseMode::Identity)
            && matches!(node.inputs.as_slice(), [c] if self.tensors.get(c.0).is_some_and(|t| t.pass_by_value.is_some()))
    }

    /// Checks every rule a graph must satisfy: unique names and uids, dims and strides well
    /// formed, topological order, every node's inputs and attributes accepted by its op's shape
    /// rule and every output's dims and type equal to what the rule infers.
    pub fn validate(&self) -> Result<(), GraphError> {
        let _span = tracing::debug_span!("validate", graph = %self.name, tensors = self.tensors.len(), nodes = self.nodes.len())
            .entered();
        let result = self.validate_inner();
        if let Err(e) = &result {
            tracing::debug!(error = %e, "graph rejected");
        }
        result
    }

    fn validate_inner(&self) -> Result<(), GraphError> {
        self.check_tensors()?;
        let mut defined = self.check_producers()?;
        let mut node_names = std::collections::HashSet::new();
        for node in &self.nodes {
            if !node_names.insert(node.name.as_str()) {
                return Err(GraphError::DuplicateName { name: node.name.clone() });
            }
            self.check_node(node, &mut defined)?;
        }
        if self.outputs().is_empty() {
            return Err(GraphError::NoOutputs { graph: self.name.clone() });
        }
        let used: std::collections::HashSet<usize> =
            self.nodes.iter().flat_map(|n| n.inputs.iter().map(|i| i.0)).collect();
        if let Some(t) = self.tensors.iter().enumerate().find(|(i, t)| t.is_virtual && !used.contains(i)) {
            return Err(GraphError::Unused { tensor: t.1.name.clone() });
        }
        Ok(())
    }

    /// Each tensor's own rules: a unique name and uid, positive dims within the rank limit and
    /// strides of their count, sizes that fit `i64`, and scalars passed by value of every dim 1.
    fn check_tensors(&self) -> Result<(), GraphError> {
        let mut seen_names = std::collections::HashSet::new();
        let mut seen_uids = std::collections::HashMap::new();
        for t in &self.tensors {
            if !seen_names.insert(t.name.as_str()) {
                return Err(GraphError::DuplicateName { name: t.name.clone() });
            }
            if !(1..=MAX_UID).contains(&t.uid) {
                return Err(GraphError::BadUid { tensor: t.name.clone(), uid: t.uid });
            }
            if let Some(other) = seen_uids.insert(t.uid, t.name.as_str()) {
                return Err(GraphError::DuplicateUid { uid: t.uid, first: other.to_string(), second: t.name.clone() });
            }
            if t.dims.is_empty() || t.dims.iter().any(|&d| d <= 0) {
                return Err(GraphError::BadDims { tensor: t.name.clone(), dims: t.dims.clone() });
            }
            if t.dims.len() > crate::dim::MAX_RANK {
                return Err(GraphError::RankTooHigh {
                    tensor: t.name.clone(),
                    rank: t.dims.len(),
                    max: crate::dim::MAX_RANK,
                });
            }
            if t.strides.len() != t.dims.len() || t.strides.iter().any(|&s| s <= 0) {
                return Err(GraphError::BadStrides {
                    tensor: t.name.clone(),
                    dims: t.dims.clone(),
                    strides: t.strides.clone(),
                });
            }
            // Checked before any rule multiplies dims or strides: within a valid graph no element
            // count, span or offset overflows `i64`.
            check_fits(&t.name, &t.dims, Some(&t.strides), t.data_type, !t.is_virtual)?;
            let by_value = t.pass_by_value.is_some() || t.host_scalar;
            if by_value && (t.is_virtual || t.dims.iter().any(|&d| d != 1)) {
                return Err(GraphError::BadScalar { tensor: t.name.clone() });
            }
            if t.host_scalar && t.pass_by_value.is_some() {
                return Err(GraphError::HostScalarWithValue { tensor: t.name.clone() });
            }
        }
        Ok(())
    }

    /// The graph's sources and producers: no host scalar produced, every virtual tensor produced,
    /// none produced twice. Returns which tensors are defined before any node runs (those no node
    /// produces).
    fn check_producers(&self) -> Result<Vec<bool>, GraphError> {
        let mut defined: Vec<bool> = vec![false; self.tensors.len()];
        let producer = self.producer();
        for (i, d) in defined.iter_mut().enumerate() {
            *d = producer[i].is_none();
            if let (Some(node), true) = (producer[i], self.tensors[i].host_scalar) {
                return Err(GraphError::HostScalarProduced {
                    tensor: self.tensors[i].name.clone(),
                    node: self.nodes[node].name.clone(),
                });
            }
            if producer[i].is_none() && self.tensors[i].is_virtual {
                return Err(GraphError::NeverProduced { tensor: self.tensors[i].name.clone() });
            }
        }
        let mut written = vec![false; self.tensors.len()];
        for node in &self.nodes {
            for o in &node.outputs {
                match written.get_mut(o.0) {
                    Some(w) if *w => return Err(GraphError::ProducedTwice { tensor: self.tensors[o.0].name.clone() }),
                    Some(w) => *w = true,
                    None => {}
                }
            }
        }
        Ok(defined)
    }

    /// One node, in graph order: its tensors exist and its inputs are defined by now, its shape,
    /// compute-type and layout rules hold, and its outputs are declared as the shape rule infers
    /// them (then they are defined).
    fn check_node(&self, node: &Node, defined: &mut [bool]) -> Result<(), GraphError> {
        let check = |id: &TensorId| {
            self.tensors
                .get(id.0)
                .map(|_| ())
                .ok_or_else(|| GraphError::UnknownTensor { node: node.name.clone(), index: id.0 })
        };
        node.inputs.iter().try_for_each(check)?;
        node.outputs.iter().try_for_each(check)?;
        for i in &node.inputs {
            if !defined[i.0] {
                return Err(GraphError::UsedBeforeProduced {
                    tensor: self.tensor(*i).name.clone(),
                    node: node.name.clone(),
                });
            }
        }
        let metas: Vec<TensorMeta<i64>> = node
            .inputs
            .iter()
            .map(|i| TensorMeta { dims: self.tensor(*i).dims.clone(), dtype: self.tensor(*i).data_type })
            .collect();
        let shape_error = |source: crate::ops::ShapeError| GraphError::Shape {
            node: node.name.clone(),
            op: node.op.call_name(),
            port: source.arg.and_then(|a| node.op.inputs().get(a).map(|p| p.name)),
            source,
        };
        let inferred = node.op.infer(&metas, &mut Concrete).map_err(shape_error)?;
        let dtypes: Vec<DataType> = metas.iter().map(|m| m.dtype).collect();
        node.op.check_compute(&dtypes, self.context.compute_data_type).map_err(shape_error)?;
        if inferred.len() != node.outputs.len() {
            return Err(GraphError::OutputCount {
                node: node.name.clone(),
                expected: inferred.len(),
                found: node.outputs.len(),
            });
        }
        let strided = |ids: &[TensorId]| -> Vec<crate::ops::StridedMeta<'_>> {
            ids.iter()
                .map(|i| crate::ops::StridedMeta { dims: &self.tensor(*i).dims, strides: &self.tensor(*i).strides })
                .collect()
        };
        node.op.check_layout(&strided(&node.inputs), &strided(&node.outputs)).map_err(shape_error)?;
        let ports = node.op.outputs();
        for ((o, meta), port) in node.outputs.iter().zip(&inferred).zip(ports) {
            let t = self.tensor(*o);
            if t.dims != meta.dims && !(self.is_fill(node) && t.dims.len() == meta.dims.len()) {
                return Err(GraphError::DeclaredDims {
                    tensor: t.name.clone(),
                    node: node.name.clone(),
                    declared: shape_string(&t.dims),
                    inferred: shape_string(&meta.dims),
                });
            }
            if let Some(dt) = meta.dtype {
                if !crate::ops::output_type_ok(dt, t.data_type, node.op.stores_bool_as_float()) {
                    return Err(GraphError::DeclaredType {
                        tensor: t.name.clone(),
                        node: node.name.clone(),
                        port,
                        declared: t.data_type,
                        required: dt,
                        reason: meta.reason,
                    });
                }
            }
            defined[o.0] = true;
        }
        Ok(())
    }

    /// A stable 64-bit FNV-1a hash of the graph's structure: op names and attributes, tensor
    /// dims, strides, types, uids and wiring. Names of nodes and tensors do not count.
    ///
    /// Total: it hashes what is there without requiring a valid graph, so a hand-made graph
    /// whose node names a tensor index it does not have still hashes (that port as `#index`,
    /// which no uid is written as) instead of panicking; [`Graph::validate`] is what rejects it.
    pub fn fingerprint(&self) -> u64 {
        self.hash_with(|t| {
            format!(
                "T{}|{:?}|{:?}|{}|{}|{:?}",
                t.uid,
                t.dims,
                t.strides,
                t.data_type,
                t.is_virtual,
                t.pass_by_value.map(f64::to_bits)
            )
        })
    }

    /// [`Graph::fingerprint`] without the extents: what graphs of one structure at any shape
    /// share (the key of a kernel cache). Each tensor counts with its rank, its layout (the order
    /// of its strides, largest first), which of its dims are 1 (those broadcast) and its type;
    /// ops, attributes, uids and wiring as in [`Graph::fingerprint`].
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::{DataType, GraphBuilder};
    /// let relu = |rows: i64| {
    ///     let mut g = GraphBuilder::new("relu");
    ///     let x = g.input("x", DataType::F16, &[rows, 256]).unwrap();
    ///     let y = g.op("relu", &[x.into()], &[]).unwrap()[0];
    ///     g.output(y, "y", DataType::F16).unwrap();
    ///     g.build().unwrap()
    /// };
    /// assert_eq!(relu(64).structure_fingerprint(), relu(4096).structure_fingerprint());
    /// assert_ne!(relu(64).fingerprint(), relu(4096).fingerprint());
    /// // A dim of 1 broadcasts: another structure.
    /// assert_ne!(relu(1).structure_fingerprint(), relu(64).structure_fingerprint());
    /// ```
    pub fn structure_fingerprint(&self) -> u64 {
        self.hash_with(|t| {
            let mut order: Vec<usize> = (0..t.strides.len()).collect();
            order.sort_by_key(|&i| (std::cmp::Reverse(t.strides[i]), i));
            let ones: Vec<bool> = t.dims.iter().map(|&d| d == 1).collect();
            format!(
                "T{}|{}|{:?}|{:?}|{}|{}|{:?}",
                t.uid,
                t.dims.len(),
                order,
                ones,
                t.data_type,
                t.is_virtual,
                t.pass_by_value.map(f64::to_bits)
            )
        })
    }

    /// The FNV-1a hash both fingerprints share: the context, each tensor as `tensor` writes it
    /// (then `|host` for a host scalar), each node's op, attributes, wiring by uid and compute
    /// type.
    fn hash_with(&self, tensor: impl Fn(&Tensor) -> String) -> u64 {
        let mut h = crate::Fnv::default();
        h.write_str(&format!("{:?}", self.context));
        for t in &self.tensors {
            h.write_str(&tensor(t));
            // Only when set, so fingerprints of graphs without host scalars are unchanged.
            if t.host_scalar {
                h.write_str("|host");
            }
        }
        // Written as `{:?}` of the uids (`[1, 2]`) was, so fingerprints of valid graphs (stored
        // in plan payloads and cache keys) are unchanged.
        let uids = |ids: &[TensorId]| {
            let each: Vec<String> = ids
                .iter()
                .map(|i| self.tensors.get(i.0).map_or_else(|| format!("#{}", i.0), |t| t.uid.to_string()))
                .collect();
            format!("[{}]", each.join(", "))
        };
        for n in &self.nodes {
            h.write_str(&format!(
                "N{}|{:?}|{}|{}|{}",
                n.op.call_name(),
                n.op.call_attrs(),
                uids(&n.inputs),
                uids(&n.outputs),
                n.compute_data_type
            ));
        }
        h.finish()
    }
}

/// An attribute value as the DSL writes it: `6`, `0.5`, `[1, 1]`, `true`, `maxpool`.
fn attr_string(value: &crate::ops::AttrValue) -> String {
    use crate::ops::AttrValue;
    match value {
        // `{:?}` prints the shortest text that reads back as the same f64, with a `.0` on
        // integral values so a float stays a float.
        AttrValue::Float(v) => format!("{v:?}"),
        AttrValue::Int(v) => v.to_string(),
        AttrValue::IntList(v) => format!("{v:?}"),
        AttrValue::Bool(v) => v.to_string(),
        AttrValue::Name(v) => v.clone(),
    }
}

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "graph {}", self.name)?;
        for n in &self.nodes {
            let name = |i: &TensorId| {
                let t = self.tensor(*i);
                format!("{}: {}", t.name, t.type_string())
            };
            let mut args: Vec<String> = n.inputs.iter().map(name).collect();
            args.extend(n.op.call_attrs().iter().map(|(attr, value)| format!("{attr} = {}", attr_string(value))));
            let outs: Vec<String> = n.outputs.iter().map(name).collect();
            writeln!(f, "  {} = {}({})", outs.join(", "), n.op.call_name(), args.join(", "))?;
        }
        Ok(())
    }
}
