//! The builder API: graphs made at run time, by frameworks with dynamic graphs and by the code
//! that `graph!` generates.

use super::layout::{channels_last_order, strides_for_order};
use super::{Context, Graph, Node, Tensor, TensorId};
use crate::dim::{channels_last_strides, packed_strides, shape_string, Concrete};
use crate::ir::GraphError;
use crate::ops::{AttrValue, ChannelsLast, Matmul, Op, OutputLayout, Pointwise, PointwiseMode, TensorMeta};
use crate::DataType;

/// An op input: a tensor of the graph, or a number that becomes a by-value scalar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Operand {
    /// A tensor.
    Tensor(TensorId),
    /// A by-value scalar in the compute type, broadcast against the other operands.
    Scalar(f64),
}

impl From<TensorId> for Operand {
    fn from(t: TensorId) -> Self {
        Operand::Tensor(t)
    }
}

impl From<f64> for Operand {
    fn from(v: f64) -> Self {
        Operand::Scalar(v)
    }
}

/// Builds a [`Graph`]: shapes are inferred as ops are added, so a bad call fails at once with an
/// error naming the node, op and port.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::{DataType, GraphBuilder};
/// let mut g = GraphBuilder::new("scaled_relu");
/// let x = g.input("x", DataType::BF16, &[4, 16]).unwrap();
/// let y = g.op("mul", &[x.into(), 0.5.into()], &[]).unwrap()[0];
/// let z = g.op("relu", &[y.into()], &[]).unwrap()[0];
/// g.output(z, "z", DataType::BF16).unwrap();
/// let graph = g.build().unwrap();
/// assert_eq!(graph.nodes.len(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct GraphBuilder {
    name: String,
    context: Context,
    tensors: Vec<Pending>,
    nodes: Vec<Node>,
}

#[derive(Debug, Clone)]
struct Pending {
    name: String,
    uid: Option<i64>,
    dims: Vec<i64>,
    strides: Option<Vec<i64>>,
    data_type: Option<DataType>,
    is_virtual: bool,
    pass_by_value: Option<f64>,
    host_scalar: bool,
    produced: bool,
}

impl GraphBuilder {
    /// An empty graph with the default context (f32 intermediates, f32 compute).
    pub fn new(name: impl Into<String>) -> Self {
        GraphBuilder { name: name.into(), context: Context::default(), tensors: Vec::new(), nodes: Vec::new() }
    }

    /// Sets the graph-level data types.
    pub fn context(&mut self, context: Context) -> &mut Self {
        self.context = context;
        self
    }

    fn check_name(&self, name: &str) -> Result<(), GraphError> {
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(GraphError::DuplicateName { name: name.to_string() });
        }
        Ok(())
    }

    fn push(&mut self, t: Pending) -> TensorId {
        self.tensors.push(t);
        TensorId(self.tensors.len() - 1)
    }

    fn get(&self, id: TensorId) -> Result<&Pending, GraphError> {
        self.tensors.get(id.0).ok_or(GraphError::UnknownTensor { node: String::new(), index: id.0 })
    }

    /// A graph input, packed row-major unless [`GraphBuilder::set_channels_last`],
    /// [`GraphBuilder::set_dim_order`] or [`GraphBuilder::set_strides`] says otherwise (the
    /// layout of every port, whatever op reads it).
    pub fn input(&mut self, name: &str, data_type: DataType, dims: &[i64]) -> Result<TensorId, GraphError> {
        self.check_name(name)?;
        if dims.is_empty() || dims.iter().any(|&d| d <= 0) {
            return Err(GraphError::BadDims { tensor: name.to_string(), dims: dims.to_vec() });
        }
        super::check_fits(name, dims, None, data_type, true)?;
        Ok(self.push(Pending {
            name: name.to_string(),
            uid: None,
            dims: dims.to_vec(),
            strides: None,
            data_type: Some(data_type),
            is_virtual: false,
            pass_by_value: None,
            host_scalar: false,
            produced: false,
        }))
    }

    /// A by-value scalar supplied at execute ([`crate::Tensor::host_scalar`]): a graph input of
    /// `rank` dims of 1 whose value the caller passes with each execute, for an op's scalar
    /// port (an epsilon, a pointwise operand) or any operand a one-element tensor fits.
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::{DataType, GraphBuilder};
    /// let mut g = GraphBuilder::new("scaled");
    /// let x = g.input("x", DataType::F32, &[2, 3]).unwrap();
    /// let s = g.host_scalar("s", DataType::F32, 2).unwrap();
    /// let y = g.op("mul", &[x.into(), s.into()], &[]).unwrap()[0];
    /// g.output(y, "y", DataType::F32).unwrap();
    /// let graph = g.build().unwrap();
    /// assert_eq!(graph.inputs().len(), 2, "x and s are bound at execute");
    /// ```
    ///
    /// # Errors
    ///
    /// [`GraphError::DuplicateName`]; [`GraphError::BadDims`] for a rank of 0,
    /// [`GraphError::RankTooHigh`] above [`crate::dim::MAX_RANK`].
    pub fn host_scalar(&mut self, name: &str, data_type: DataType, rank: usize) -> Result<TensorId, GraphError> {
        self.check_name(name)?;
        if rank == 0 {
            return Err(GraphError::BadDims { tensor: name.to_string(), dims: Vec::new() });
        }
        if rank > crate::dim::MAX_RANK {
            return Err(GraphError::RankTooHigh { tensor: name.to_string(), rank, max: crate::dim::MAX_RANK });
        }
        Ok(self.push(Pending {
            name: name.to_string(),
            uid: None,
            dims: vec![1; rank],
            strides: None,
            data_type: Some(data_type),
            is_virtual: false,
            pass_by_value: None,
            host_scalar: true,
            produced: false,
        }))
    }

    /// A tensor's dims as inferred so far (`None` for an id this builder did not make).
    pub fn dims(&self, tensor: TensorId) -> Option<&[i64]> {
        self.tensors.get(tensor.0).map(|t| t.dims.as_slice())
    }

    /// Sets a tensor's strides (user-set values win over inference).
    pub fn set_strides(&mut self, id: TensorId, strides: &[i64]) -> Result<&mut Self, GraphError> {
        let t = self.get(id)?;
        if strides.len() != t.dims.len() || strides.iter().any(|&s| s <= 0) {
            return Err(GraphError::BadStrides {
                tensor: t.name.clone(),
                dims: t.dims.clone(),
                strides: strides.to_vec(),
            });
        }
        let data_type = t.data_type.unwrap_or(self.context.intermediate_data_type);
        super::check_fits(&t.name, &t.dims, Some(strides), data_type, !t.is_virtual)?;
        self.tensors[id.0].strides = Some(strides.to_vec());
        Ok(self)
    }

    /// Lays a tensor out with its dims in memory order `order` (outermost first), packed: a logical
    /// `[B, H, S, D]` tensor stored BSHD is `order = [0, 2, 1, 3]`.
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::{DataType, GraphBuilder};
    /// let mut g = GraphBuilder::new("g");
    /// let q = g.input("q", DataType::F16, &[2, 4, 8, 16]).unwrap();
    /// g.set_dim_order(q, &[0, 2, 1, 3]).unwrap();
    /// let y = g.op("identity", &[q.into()], &[]).unwrap()[0];
    /// g.output(y, "y", DataType::F16).unwrap();
    /// assert_eq!(g.build().unwrap().tensors[0].strides, vec![512, 16, 64, 1]);
    /// ```
    pub fn set_dim_order(&mut self, id: TensorId, order: &[usize]) -> Result<&mut Self, GraphError> {
        let t = self.get(id)?;
        let mut sorted = order.to_vec();
        sorted.sort_unstable();
        if sorted != (0..t.dims.len()).collect::<Vec<_>>() {
            return Err(GraphError::BadOrder { tensor: t.name.clone(), rank: t.dims.len(), order: order.to_vec() });
        }
        let strides = strides_for_order(&t.dims, order);
        self.set_strides(id, &strides)
    }

    /// Lays a tensor out channels-last: packed with the channel dim (1) innermost, NHWC for
    /// `[N, C, H, W]` (`order [0, 2, 3, 1]`; `[0, 2, 1]` at rank 3, `[0, 2, 3, 4, 1]` at rank 5).
    /// Ports are row-major unless set, whatever op they meet; cuDNN's fused convolution engines
    /// want their ports channels-last. Other ranks have no channel dim between a batch and
    /// spatial dims: [`GraphError::ChannelsLastRank`].
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::{DataType, GraphBuilder};
    /// let mut g = GraphBuilder::new("g");
    /// let x = g.input("x", DataType::F16, &[2, 8, 4, 4]).unwrap();
    /// g.set_channels_last(x).unwrap();
    /// let y = g.op("relu", &[x.into()], &[]).unwrap()[0];
    /// g.output(y, "y", DataType::F16).unwrap();
    /// let graph = g.build().unwrap();
    /// assert_eq!(graph.tensors[0].strides, vec![128, 1, 32, 8]);
    /// assert_eq!(graph.tensors[0].type_string(), "f16[2, 8, 4, 4] channels-last");
    /// assert_eq!(graph.tensor_by_name("y").unwrap().type_string(), "f16[2, 8, 4, 4] row-major");
    /// ```
    pub fn set_channels_last(&mut self, id: TensorId) -> Result<&mut Self, GraphError> {
        let t = self.get(id)?;
        let order = channels_last_order(t.dims.len())
            .ok_or_else(|| GraphError::ChannelsLastRank { tensor: t.name.clone(), dims: t.dims.clone() })?;
        self.set_dim_order(id, &order)
    }

    /// Sets a tensor's uid (user-set values win over assignment).
    pub fn set_uid(&mut self, id: TensorId, uid: i64) -> Result<&mut Self, GraphError> {
        let name = self.get(id)?.name.clone();
        if !(1..=super::MAX_UID).contains(&uid) {
            return Err(GraphError::BadUid { tensor: name, uid });
        }
        if let Some(other) = self.tensors.iter().find(|t| t.uid == Some(uid)) {
            return Err(GraphError::DuplicateUid { uid, first: other.name.clone(), second: name });
        }
        self.tensors[id.0].uid = Some(uid);
        Ok(self)
    }

    /// Applies the op called `name` (see [`crate::ops::lookup`]) and returns its outputs, which are
    /// virtual until passed to [`GraphBuilder::output`].
    pub fn op(
        &mut self,
        name: &str,
        inputs: &[Operand],
        attrs: &[(String, AttrValue)],
    ) -> Result<Vec<TensorId>, GraphError> {
        let node = format!("{name}_{}", self.nodes.len());
        let op = Op::from_call_with_inputs(name, attrs, inputs.len())
            .map_err(|source| GraphError::Attr { node: node.clone(), source })?;
        self.apply_named(&node, op, inputs)
    }

    /// Like [`GraphBuilder::op`], naming the node (the code `graph!` generates names nodes after
    /// their `let` bindings).
    pub fn op_named(
        &mut self,
        node: &str,
        name: &str,
        inputs: &[Operand],
        attrs: &[(String, AttrValue)],
    ) -> Result<Vec<TensorId>, GraphError> {
        let op = Op::from_call_with_inputs(name, attrs, inputs.len())
            .map_err(|source| GraphError::Attr { node: node.to_string(), source })?;
        self.apply_named(node, op, inputs)
    }

    /// Applies `op` as a node called `node`.
    pub fn apply_named(&mut self, node: &str, op: Op, inputs: &[Operand]) -> Result<Vec<TensorId>, GraphError> {
        if self.nodes.iter().any(|n| n.name == node) {
            return Err(GraphError::DuplicateName { name: node.to_string() });
        }
        let sig = op.signature();
        let ports = op.inputs();
        let ids = self.operand_ids(node, &op, inputs)?;
        let metas: Vec<TensorMeta<i64>> = ids
            .iter()
            .map(|i| {
                let t = &self.tensors[i.0];
                TensorMeta { dims: t.dims.clone(), dtype: t.data_type.unwrap_or(self.context.intermediate_data_type) }
            })
            .collect();
        let shape_error = |source: crate::ops::ShapeError| GraphError::Shape {
            node: node.to_string(),
            op: sig.name,
            port: source.arg.and_then(|a| ports.get(a).map(|p| p.name)),
            source,
        };
        let outs = op.infer(&metas, &mut Concrete).map_err(shape_error)?;
        let dtypes: Vec<DataType> = metas.iter().map(|m| m.dtype).collect();
        op.check_compute(&dtypes, self.context.compute_data_type).map_err(shape_error)?;
        let mut out_ids = Vec::with_capacity(outs.len());
        for (k, meta) in outs.into_iter().enumerate() {
            let ports = op.outputs();
            let base = if ports.len() == 1 { node.to_string() } else { format!("{node}_{}", ports[k]) };
            let name = self.fresh_name(&base);
            // An inferred extent can exceed what its inputs span (a concatenation, a transposed
            // convolution): caught here, naming the output, before strides are derived from it.
            // Counted in elements: the output is virtual until `output` gives it its type, and
            // `build` validates the byte span then.
            let data_type = meta.dtype.unwrap_or(self.context.intermediate_data_type);
            super::check_fits(&name, &meta.dims, None, data_type, false)?;
            out_ids.push(self.push(Pending {
                name,
                uid: None,
                dims: meta.dims,
                strides: None,
                data_type: meta.dtype.or(Some(self.context.intermediate_data_type)),
                is_virtual: true,
                pass_by_value: None,
                host_scalar: false,
                produced: true,
            }));
        }
        self.nodes.push(Node {
            name: node.to_string(),
            op,
            inputs: ids,
            outputs: out_ids.clone(),
            compute_data_type: self.context.compute_data_type,
        });
        Ok(out_ids)
    }

    /// The tensors of a call's operands, in order: a tensor as given (once it is known to exist), a
    /// scalar as a new by-value tensor of the port's type, of every dim 1 at the rank of the
    /// call's first tensor operand.
    fn operand_ids(&mut self, node: &str, op: &Op, inputs: &[Operand]) -> Result<Vec<TensorId>, GraphError> {
        let ports = op.inputs();
        let rank = inputs
            .iter()
            .find_map(|o| match o {
                Operand::Tensor(t) => self.tensors.get(t.0).map(|t| t.dims.len()),
                Operand::Scalar(_) => None,
            })
            .unwrap_or(1);
        let mut ids = Vec::with_capacity(inputs.len());
        for (i, operand) in inputs.iter().enumerate() {
            match *operand {
                Operand::Tensor(t) => {
                    self.tensors.get(t.0).ok_or(GraphError::UnknownTensor { node: node.to_string(), index: t.0 })?;
                    ids.push(t);
                }
                Operand::Scalar(v) => {
                    let Some(port) = ports.get(i).filter(|p| p.scalar_ok) else {
                        return Err(GraphError::ScalarNotAllowed {
                            node: node.to_string(),
                            op: op.call_name(),
                            port: ports.get(i).map_or("?", |p| p.name),
                        });
                    };
                    let dt = port.scalar_data_type(self.context.compute_data_type);
                    let name = self.fresh_name(&format!("{node}_scalar{i}"));
                    ids.push(self.push(Pending {
                        name,
                        uid: None,
                        dims: vec![1; rank],
                        strides: None,
                        data_type: Some(dt),
                        is_virtual: false,
                        pass_by_value: Some(dt.round(v)),
                        host_scalar: false,
                        produced: false,
                    }));
                }
            }
        }
        Ok(ids)
    }

    fn fresh_name(&self, base: &str) -> String {
        if self.check_name(base).is_ok() {
            return base.to_string();
        }
        (1..).map(|i| format!("{base}_{i}")).find(|n| self.check_name(n).is_ok()).unwrap_or_default()
    }

    /// `matmul(a, b)`.
    pub fn matmul(&mut self, a: TensorId, b: TensorId) -> Result<TensorId, GraphError> {
        let node = format!("matmul_{}", self.nodes.len());
        Ok(self.apply_named(&node, Op::Matmul(Matmul {}), &[a.into(), b.into()])?[0])
    }

    /// A pointwise op with default parameters.
    pub fn pointwise(&mut self, mode: PointwiseMode, inputs: &[Operand]) -> Result<TensorId, GraphError> {
        let node = format!("{}_{}", mode.name(), self.nodes.len());
        Ok(self.apply_named(&node, Op::Pointwise(Pointwise::new(mode)), inputs)?[0])
    }

    /// Makes `tensor` a graph output called `name` of type `data_type`. A tensor that is a graph
    /// input or already an output is first copied through an identity node.
    pub fn output(&mut self, tensor: TensorId, name: &str, data_type: DataType) -> Result<TensorId, GraphError> {
        let t = self.get(tensor)?;
        let id = if t.is_virtual {
            if t.name != name {
                self.check_name(name)?;
            }
            tensor
        } else {
            let node = format!("identity_{}", self.nodes.len());
            self.apply_named(&node, Op::Pointwise(Pointwise::new(PointwiseMode::Identity)), &[tensor.into()])?[0]
        };
        if self.tensors[id.0].name != name {
            self.check_name(name)?;
        }
        let producer = self.nodes.iter().find(|n| n.outputs.contains(&id));
        let bool_as_float = producer.is_some_and(|n| n.op.stores_bool_as_float());
        let forced = producer.and_then(|n| {
            let metas: Vec<TensorMeta<i64>> = n
                .inputs
                .iter()
                .map(|i| TensorMeta {
                    dims: self.tensors[i.0].dims.clone(),
                    dtype: self.tensors[i.0].data_type.unwrap_or(DataType::F32),
                })
                .collect();
            // The type the op forces on this output (not on its first one), and its port.
            let k = n.outputs.iter().position(|o| *o == id)?;
            let meta = n.op.infer(&metas, &mut Concrete).ok()?.into_iter().nth(k)?;
            let port = n.op.outputs().get(k).copied()?;
            Some((n.name.clone(), port, meta.dtype?, meta.reason))
        });
        if let Some((node, port, required, reason)) = forced {
            if !crate::ops::output_type_ok(required, data_type, bool_as_float) {
                return Err(GraphError::DeclaredType {
                    tensor: name.to_string(),
                    node,
                    port,
                    declared: data_type,
                    required,
                    reason,
                });
            }
        }
        let t = &mut self.tensors[id.0];
        t.name = name.to_string();
        t.is_virtual = false;
        t.data_type = Some(data_type);
        Ok(id)
    }

    /// Requires `tensor` to have `dims` (a declared output shape), naming both shapes if not.
    pub fn expect_dims(&self, tensor: TensorId, dims: &[i64]) -> Result<(), GraphError> {
        let t = self.get(tensor)?;
        if t.dims != dims {
            return Err(GraphError::DeclaredDims {
                tensor: t.name.clone(),
                node: self
                    .nodes
                    .iter()
                    .find(|n| n.outputs.contains(&tensor))
                    .map(|n| n.name.clone())
                    .unwrap_or_default(),
                declared: shape_string(dims),
                inferred: shape_string(&t.dims),
            });
        }
        Ok(())
    }

    /// Lays out channels-last (NHWC, what cuDNN's fused convolution engines want) every
    /// *virtual* tensor of rank 3 to 5 that is a port of a convolution or pooling node, or
    /// reaches one through pointwise or concatenation nodes of the same rank (a conv's biased and
    /// activated intermediates follow the conv's layout). Graph ports are never touched: their
    /// layout is their declaration's (row-major unless set), whatever op produces or reads them,
    /// so two graphs that declare the same port agree on its memory.
    fn default_channels_last(&mut self) {
        let unset = |t: &Pending, rank: usize| {
            t.is_virtual && t.strides.is_none() && t.pass_by_value.is_none() && t.dims.len() == rank
        };
        let mut nhwc = vec![false; self.tensors.len()];
        for n in &self.nodes {
            if n.op.layout_policy().channels_last == ChannelsLast::Anchor {
                for id in n.inputs.iter().chain(&n.outputs) {
                    let t = &self.tensors[id.0];
                    nhwc[id.0] = unset(t, t.dims.len()) && (3..=5).contains(&t.dims.len());
                }
            }
        }
        let mut changed = nhwc.iter().any(|&c| c);
        while changed {
            changed = false;
            let follows = |op: &Op| op.layout_policy().channels_last == ChannelsLast::Follow;
            for n in self.nodes.iter().filter(|n| follows(&n.op)) {
                let ports: Vec<TensorId> = n.inputs.iter().chain(&n.outputs).copied().collect();
                let Some(rank) = ports.iter().find(|id| nhwc[id.0]).map(|id| self.tensors[id.0].dims.len()) else {
                    continue;
                };
                for id in ports {
                    if !nhwc[id.0] && unset(&self.tensors[id.0], rank) {
                        nhwc[id.0] = true;
                        changed = true;
                    }
                }
            }
        }
        for (t, _) in self.tensors.iter_mut().zip(&nhwc).filter(|(_, &c)| c) {
            t.strides = Some(channels_last_strides(&t.dims));
        }
    }

    /// Gives *virtual* outputs with unset strides cudnn-frontend's, in node order so chains
    /// follow: a transpose's, reshape's or slice's those that make it a view of its input, a
    /// concatenation's packed in `X[0]`'s dim order; a pointwise or normalization output packed
    /// in the dim order of its first input of the same dims whose layout is set, so a
    /// channels-last X keeps its layout through a fused chain
    /// (`relu_bwd(dy, batchnorm_inference(x, ..))`). This is the one place an output's strides
    /// are derived from its producer: a graph output is never touched here, so it keeps its
    /// declared layout (packed row-major unless set) whatever op produces it, a view included
    /// (`y = slice(x, ..)` is a packed copy, which the backend writes).
    fn default_derived_strides(&mut self) {
        for n in &self.nodes {
            match n.op.layout_policy().outputs {
                OutputLayout::View(layout) => {
                    let (Some(x), Some(y)) = (n.inputs.first(), n.outputs.first()) else { continue };
                    if self.tensors[y.0].strides.is_some() || !self.tensors[y.0].is_virtual {
                        continue;
                    }
                    let x = &self.tensors[x.0];
                    let x_strides = x.strides.clone().unwrap_or_else(|| packed_strides(&x.dims));
                    let strides = layout.output_strides(&x.dims, &x_strides, &self.tensors[y.0].dims);
                    self.tensors[y.0].strides = Some(strides);
                }
                OutputLayout::LikeInput => {
                    for y in &n.outputs {
                        let out = &self.tensors[y.0];
                        if out.strides.is_some() || !out.is_virtual {
                            continue;
                        }
                        let like = n.inputs.iter().map(|x| &self.tensors[x.0]).find_map(|x| {
                            x.strides.as_ref().filter(|_| x.dims == out.dims && x.pass_by_value.is_none())
                        });
                        if let Some(like) = like {
                            let strides = crate::dim::strides_in_order_of(like, &out.dims);
                            self.tensors[y.0].strides = Some(strides);
                        }
                    }
                }
                OutputLayout::Packed => {}
            }
        }
    }

    /// Assigns uids (user-set values win; the rest count up from 1 in creation order, skipping
    /// taken values), lays out where strides are unset every graph port row-major and the
    /// virtual tensors as cuDNN's fused chains want them (channels-last around convolutions and
    /// pooling, views through layout ops), and validates.
    pub fn build(mut self) -> Result<Graph, GraphError> {
        self.default_channels_last();
        self.default_derived_strides();
        let taken: std::collections::HashSet<i64> = self.tensors.iter().filter_map(|t| t.uid).collect();
        let mut next = 1i64;
        let tensors = self
            .tensors
            .into_iter()
            .map(|p| {
                let uid = p.uid.unwrap_or_else(|| {
                    while taken.contains(&next) {
                        next += 1;
                    }
                    next += 1;
                    next - 1
                });
                debug_assert!(p.produced || !p.is_virtual);
                Tensor {
                    strides: p.strides.unwrap_or_else(|| packed_strides(&p.dims)),
                    name: p.name,
                    uid,
                    dims: p.dims,
                    data_type: p.data_type.unwrap_or(self.context.intermediate_data_type),
                    is_virtual: p.is_virtual,
                    pass_by_value: p.pass_by_value,
                    host_scalar: p.host_scalar,
                }
            })
            .collect();
        let graph = Graph { name: self.name, context: self.context, tensors, nodes: self.nodes };
        graph.validate()?;
        Ok(graph)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mm_bias_relu() -> GraphBuilder {
        let mut g = GraphBuilder::new("mbr");
        let a = g.input("a", DataType::BF16, &[2, 8, 4]).unwrap();
        let b = g.input("b", DataType::BF16, &[2, 4, 16]).unwrap();
        let bias = g.input("bias", DataType::BF16, &[1, 1, 16]).unwrap();
        let c = g.matmul(a, b).unwrap();
        let d = g.pointwise(PointwiseMode::Add, &[c.into(), bias.into()]).unwrap();
        let y = g.pointwise(PointwiseMode::Relu, &[d.into()]).unwrap();
        g.output(y, "y", DataType::BF16).unwrap();
        g
    }

    #[test]
    fn builds_with_deterministic_uids_and_strides() {
        let g = mm_bias_relu().build().unwrap();
        let uids: Vec<i64> = g.tensors.iter().map(|t| t.uid).collect();
        assert_eq!(uids, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(g.tensor_by_name("y").unwrap().strides, vec![128, 16, 1]);
        assert_eq!(g.inputs().len(), 3);
        assert_eq!(g.outputs(), vec![TensorId(5)]);
        assert_eq!(g.fingerprint(), mm_bias_relu().build().unwrap().fingerprint());
    }

    #[test]
    fn virtual_pointwise_and_norm_outputs_keep_their_inputs_dim_order() {
        let mut g = GraphBuilder::new("bn_drelu");
        let x = g.input("x", DataType::F16, &[2, 8, 4, 4]).unwrap();
        g.set_dim_order(x, &[0, 2, 3, 1]).unwrap();
        let c = [1, 8, 1, 1];
        let [mean, inv_var, scale, bias] =
            ["mean", "inv_var", "scale", "bias"].map(|n| g.input(n, DataType::F32, &c).unwrap());
        let operands = [x, mean, inv_var, scale, bias].map(Operand::from);
        let y = g.op("batchnorm_inference", &operands, &[]).unwrap()[0];
        let r = g.pointwise(PointwiseMode::Relu, &[y.into()]).unwrap();
        let out = g.pointwise(PointwiseMode::Exp, &[r.into()]).unwrap();
        g.output(out, "out", DataType::F16).unwrap();
        let g = g.build().unwrap();
        let nhwc = vec![128, 1, 32, 8];
        assert_eq!(g.tensor(y).strides, nhwc, "the norm's virtual Y follows X");
        assert_eq!(g.tensor(r).strides, nhwc, "and the ReLU's virtual output follows Y");
        assert_eq!(g.tensor(out).strides, vec![128, 16, 4, 1], "a graph output keeps the declared (packed) layout");
    }

    #[test]
    fn channels_last_is_order_0_2_1_at_ranks_3_to_5_and_a_typed_error_otherwise() {
        let mut g = GraphBuilder::new("nhwc");
        let ids: Vec<TensorId> = [vec![2, 3, 5], vec![2, 3, 5, 7], vec![2, 3, 5, 7, 4]]
            .iter()
            .enumerate()
            .map(|(i, dims)| g.input(&format!("x{i}"), DataType::F16, dims).unwrap())
            .collect();
        for &id in &ids {
            g.set_channels_last(id).unwrap();
        }
        let expected = [vec![15, 1, 3], vec![105, 1, 21, 3], vec![420, 1, 84, 12, 3]];
        for (id, strides) in ids.iter().zip(&expected) {
            assert_eq!(g.tensors[id.0].strides.as_ref(), Some(strides));
        }
        for dims in [vec![6], vec![2, 3], vec![1, 2, 3, 4, 5, 6]] {
            let id = g.input(&format!("r{}", dims.len()), DataType::F16, &dims).unwrap();
            let e = g.set_channels_last(id).unwrap_err();
            assert_eq!(e, GraphError::ChannelsLastRank { tensor: format!("r{}", dims.len()), dims: dims.clone() });
            assert!(e.to_string().contains("channels-last needs 3 to 5 dims"), "{e}");
            assert_eq!(g.tensors[id.0].strides, None, "a refused layout leaves the tensor as it was");
        }
        assert!(matches!(g.set_channels_last(TensorId(99)), Err(GraphError::UnknownTensor { .. })));
    }

    /// The defect of issue #14: `y` was NCHW after a norm but NHWC after a conv's pointwise
    /// chain. A port's layout is its declaration's, whichever op produces it.
    #[test]
    fn a_declared_output_has_the_same_strides_whatever_op_produces_it() {
        let (x_dims, y_dims) = ([2, 4, 6, 6], [2, 8, 6, 6]);
        let producers = ["pointwise", "norm", "conv"];
        for channels_last in [false, true] {
            let strides: Vec<Vec<i64>> = producers
                .iter()
                .map(|producer| {
                    let mut g = GraphBuilder::new(*producer);
                    let x = g.input("x", DataType::F16, &x_dims).unwrap();
                    let w = g.input("w", DataType::F16, &[8, 4, 1, 1]).unwrap();
                    g.set_channels_last(x).unwrap().set_channels_last(w).unwrap();
                    let c = g.op("conv_fprop", &[x.into(), w.into()], &[]).unwrap()[0];
                    let y = match *producer {
                        "pointwise" => {
                            let m = g.op("mul", &[c.into(), 0.5.into()], &[]).unwrap()[0];
                            g.op("relu", &[m.into()], &[]).unwrap()[0]
                        }
                        "norm" => {
                            let stats = ["mean", "inv_var", "scale", "bias"]
                                .map(|n| Operand::from(g.input(n, DataType::F32, &[1, 8, 1, 1]).unwrap()));
                            let operands = [Operand::from(c), stats[0], stats[1], stats[2], stats[3]];
                            g.op("batchnorm_inference", &operands, &[]).unwrap()[0]
                        }
                        _ => c,
                    };
                    let y = g.output(y, "y", DataType::F16).unwrap();
                    if channels_last {
                        g.set_channels_last(y).unwrap();
                    }
                    let graph = g.build().unwrap();
                    assert_eq!(graph.tensor(c).is_virtual, *producer != "conv");
                    if *producer != "conv" {
                        assert_eq!(graph.tensor(c).strides, channels_last_strides(&y_dims), "virtual: NHWC for cuDNN");
                    }
                    graph.tensor(y).strides.clone()
                })
                .collect();
            let declared = if channels_last { channels_last_strides(&y_dims) } else { packed_strides(&y_dims) };
            for (producer, s) in producers.iter().zip(&strides) {
                assert_eq!(s, &declared, "`y` produced by {producer}, channels_last = {channels_last}");
            }
        }
    }

    /// A view whose output is a graph output: the port is packed row-major like any other (a
    /// `[2, 3]` slice of a `[2, 4]` input once kept the view's row stride of 4, a 7-element
    /// buffer with a gap), while the same view kept virtual is X's memory described again.
    #[test]
    fn a_view_output_port_is_packed_while_a_virtual_view_aliases() {
        let ints = |name: &str, v: &[i64]| (name.to_string(), AttrValue::IntList(v.to_vec()));
        let slice = [ints("start", &[0, 1]), ints("limit", &[2, 4])];
        // (op, attributes, Y's dims, Y's strides as a view of the packed [2, 4] X)
        let views = [
            ("slice", slice.to_vec(), [2, 3], [4, 1]),
            ("transpose", vec![ints("permutation", &[1, 0])], [4, 2], [1, 4]),
            ("reshape", vec![ints("shape", &[4, 2])], [4, 2], [2, 1]),
        ];
        for (op, attrs, y_dims, view) in views {
            for is_output in [true, false] {
                let mut g = GraphBuilder::new(op);
                let x = g.input("x", DataType::F32, &[2, 4]).unwrap();
                let y = g.op(op, &[x.into()], &attrs).unwrap()[0];
                let out = if is_output {
                    g.output(y, "y", DataType::F32).unwrap()
                } else {
                    let r = g.op("relu", &[y.into()], &[]).unwrap()[0];
                    g.output(r, "r", DataType::F32).unwrap()
                };
                let graph = g.build().unwrap();
                assert_eq!(graph.tensor(y).dims, y_dims);
                let want = if is_output { packed_strides(&y_dims) } else { view.to_vec() };
                assert_eq!(graph.tensor(y).strides, want, "{op}, graph output: {is_output}");
                assert_eq!(graph.tensor(out).storage_len(), 8 - 2 * usize::from(op == "slice"));
            }
        }
        // A slice of a slice, reshaped, as the output: packed too; the inner views stay views.
        let mut g = GraphBuilder::new("reshape_of_slice");
        let x = g.input("x", DataType::F32, &[2, 4, 6]).unwrap();
        let s = g.op("slice", &[x.into()], &[ints("start", &[0, 1, 0]), ints("limit", &[2, 3, 6])]).unwrap()[0];
        let y = g.op("reshape", &[s.into()], &[ints("shape", &[2, 12])]).unwrap()[0];
        g.output(y, "y", DataType::F32).unwrap();
        let graph = g.build().unwrap();
        assert_eq!(graph.tensor(s).strides, vec![24, 6, 1]);
        assert_eq!(graph.tensor(y).strides, vec![12, 1]);
    }

    #[test]
    fn user_uids_win() {
        let mut g = mm_bias_relu();
        g.set_uid(TensorId(0), 2).unwrap();
        let g = g.build().unwrap();
        let uids: Vec<i64> = g.tensors.iter().map(|t| t.uid).collect();
        assert_eq!(uids, vec![2, 1, 3, 4, 5, 6]);
    }

    #[test]
    fn errors_name_the_culprit() {
        let mut g = GraphBuilder::new("bad");
        let a = g.input("a", DataType::F16, &[1, 8, 4]).unwrap();
        let b = g.input("b", DataType::F16, &[1, 5, 16]).unwrap();
        let e = g.matmul(a, b).unwrap_err();
        assert_eq!(
            e.to_string(),
            "node `matmul_0` (matmul), port B: matmul contraction dims differ: A is [1, 8, 4] and B is [1, 5, 16], so A[-1] = 4 must equal B[-2] = 5"
        );
        assert!(matches!(g.input("a", DataType::F16, &[1]), Err(GraphError::DuplicateName { .. })));
        assert!(matches!(g.input("z", DataType::F16, &[0, 2]), Err(GraphError::BadDims { .. })));
        let e = g.op("matmul", &[a.into(), 2.0.into()], &[]).unwrap_err();
        assert!(e.to_string().contains("port B cannot take a scalar"), "{e}");
        let e = GraphBuilder::new("empty").build().unwrap_err();
        assert!(matches!(e, GraphError::NoOutputs { .. }));
    }

    #[test]
    fn scalars_are_by_value_tensors() {
        let mut g = GraphBuilder::new("s");
        let x = g.input("x", DataType::F32, &[2, 3]).unwrap();
        let y = g.op("mul", &[x.into(), 0.1.into()], &[]).unwrap()[0];
        g.output(y, "y", DataType::F32).unwrap();
        let g = g.build().unwrap();
        let s = &g.tensors[1];
        assert_eq!(s.dims, vec![1, 1]);
        assert_eq!(s.pass_by_value, Some(0.1f32 as f64));
        assert_eq!(g.inputs(), vec![TensorId(0)]);
    }

    #[test]
    fn output_of_an_input_goes_through_identity() {
        let mut g = GraphBuilder::new("copy");
        let x = g.input("x", DataType::F32, &[2]).unwrap();
        g.output(x, "y", DataType::F16).unwrap();
        let g = g.build().unwrap();
        assert_eq!(g.nodes[0].op.call_name(), "identity");
    }

    #[test]
    fn validate_catches_tampering() {
        let mut g = mm_bias_relu().build().unwrap();
        g.tensors[5].dims = vec![2, 8, 15];
        assert!(matches!(g.validate(), Err(GraphError::DeclaredDims { .. })));
        let mut g = mm_bias_relu().build().unwrap();
        g.tensors[1].uid = 1;
        assert!(matches!(g.validate(), Err(GraphError::DuplicateUid { .. })));
        let mut g = mm_bias_relu().build().unwrap();
        g.nodes.swap(0, 1);
        assert!(matches!(g.validate(), Err(GraphError::UsedBeforeProduced { .. })));
    }
}
