//! Graph rewrites that keep what a graph computes and change how cuDNN can plan it: the graph
//! that comes out has the same inputs and outputs (ids, uids, names, types, layouts) and computes
//! the same function, with different nodes in between.
//!
//! [`for_cudnn`] applies every rewrite, in order; each also stands alone:
//! - [`batchnorm_as_pointwise`]: cuDNN 9.19 has no engine for `batchnorm_inference` on its own
//!   nor with a convolution before it (measured deviceless for the H200: `conv_fprop →
//!   batchnorm_inference → relu` gets no engine configuration), while the same formula written as
//!   four pointwise ops plans alone and fuses as a convolution's epilogue.
//! - [`column_sum_as_matmul`]: cuDNN 9.19 has no engine for a sum over the rows of a row-major
//!   tensor (a bias gradient), alone or after pointwise ops, while a matmul by a vector of ones
//!   plans, with those pointwise ops fused before it.
//! - [`mean_and_norms_as_sums`]: cuDNN 9.19 finalizes no reduction descriptor of mode `AVG`,
//!   `NORM1` or `NORM2`: a mean is a sum of `x·(1/n)`, a norm a sum of `|x|` or of `x·x` (and
//!   its square root).
//! - [`narrow_reductions_through_f32`]: cuDNN 9.19 reduces into no 16-bit tensor: such a
//!   reduction writes f32, which an `identity` rounds.

use std::collections::HashSet;
use std::fmt;

use super::{Graph, GraphError, Node, Tensor, TensorId};
use crate::dim::{strides_in_order_of, Concrete};
use crate::ops::{
    ConvKind, Layout, Matmul, NormKind, Op, Pointwise, PointwiseMode, Reduction, ReductionMode, TensorMeta,
};
use crate::DataType;

/// A graph after rewrites, with what was rewritten.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewritten {
    /// The rewritten graph (a copy of the one given when nothing applied).
    pub graph: Graph,
    /// The rewrites made, in node order; empty when the graph is unchanged.
    pub rewrites: Vec<Rewrite>,
}

/// One node replaced by others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    /// The name of the node replaced.
    pub node: String,
    /// The names of the nodes that replace it, in order (the last one produces its output).
    pub replaced_by: Vec<String>,
    /// What replaced it, and why.
    pub kind: RewriteKind,
}

/// The kinds of rewrite.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RewriteKind {
    /// `batchnorm_inference` as `sub`, `mul`, `mul`, `add` (see [`batchnorm_as_pointwise`]).
    BatchnormAsPointwise {
        /// The `conv_fprop` node that computes the norm's X (directly or through pointwise
        /// nodes), whose epilogue the chain becomes; `None` when no convolution comes before it.
        after_conv: Option<String>,
    },
    /// `reduce_sum(x, dims = [1])` of a row-major `[B, T, N]` as `matmul(ones, x)` (see
    /// [`column_sum_as_matmul`]).
    ColumnSumAsMatmul,
    /// `reduce_mean(x, dims)` as a multiplication by `1/n` and `reduce_sum` (see
    /// [`mean_and_norms_as_sums`]).
    MeanAsSum,
    /// `reduce_norm1` as `abs` and `reduce_sum`, `reduce_norm2` as `mul(x, x)`, `reduce_sum` and
    /// `sqrt` (see [`mean_and_norms_as_sums`]).
    NormAsSum,
    /// A reduction into a 16-bit output as the reduction into f32 and an `identity` rounding it
    /// (see [`narrow_reductions_through_f32`]).
    NarrowThroughF32,
}

impl fmt::Display for Rewrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            RewriteKind::BatchnormAsPointwise { after_conv } => {
                write!(f, "batchnorm_inference `{}` as sub/mul/mul/add", self.node)?;
                match after_conv {
                    Some(conv) => write!(f, " (fuses as the epilogue of conv_fprop `{conv}`)"),
                    None => write!(f, " (a pointwise chain plans where the norm op has no engine)"),
                }
            }
            RewriteKind::ColumnSumAsMatmul => write!(
                f,
                "reduce_sum `{}` over rows as a matmul by a vector of ones (cuDNN plans no such reduction)",
                self.node
            ),
            RewriteKind::MeanAsSum => write!(
                f,
                "reduce_mean `{}` as a multiplication by 1/n and reduce_sum (cuDNN has no mean reduction)",
                self.node
            ),
            RewriteKind::NarrowThroughF32 => write!(
                f,
                "reduction `{}` into f32, then rounded to its 16-bit output (cuDNN reduces into no 16-bit tensor)",
                self.node
            ),
            RewriteKind::NormAsSum => write!(
                f,
                "norm reduction `{}` as elementwise ops around reduce_sum (cuDNN has no norm reduction)",
                self.node
            ),
        }
    }
}

/// Replaces `batchnorm_inference(x, mean, inv_var, scale, bias)` nodes by the pointwise chain
/// that computes the same formula, cuDNN's:
///
/// ```text
/// y = ((x − mean) · inv_var) · scale + bias      sub, mul, mul, add
/// ```
///
/// reading exactly the tensors the norm read (the `[1, C, 1, ...]` statistics and parameters
/// broadcast over X), so it applies as well when the statistics are run-time inputs or computed
/// by the graph: nothing is folded into constants. In exact arithmetic the result is the norm's;
/// the three intermediates are rounded to the norm node's compute type (f32 for graphs the builder
/// makes), as a fused kernel computing in that type rounds its own.
///
/// Which nodes are rewritten: every `batchnorm_inference` but one whose Y reaches a
/// `batchnorm_backward` node, directly or through pointwise nodes (cudnn-frontend's
/// `batchnorm_inference → relu_bwd → batchnorm_backward`, the one graph cuDNN 9.19 plans the norm
/// op in, and where the chain gets no engine). Measured deviceless for the H200 with cuDNN 9.19:
/// the norm op has no engine after a convolution (`conv_fprop → batchnorm_inference → relu`) nor
/// alone, while the chain fuses as the convolution's epilogue (engine 7) and plans alone
/// (engine 1). [`RewriteKind::BatchnormAsPointwise`] names the convolution that computes X, if any.
///
/// The new nodes take the norm's place in node order, so the order stays topological; the last,
/// an `add`, keeps the norm node's name and writes its output tensor, which keeps its id, uid,
/// name, type and layout: graph inputs and outputs do not change. The others are called
/// `{norm}_centered`, `{norm}_normalized` and `{norm}_scaled`, as are the virtual tensors they
/// write (made unique with `_1`, `_2`, ... if taken), which get X's dim order and the smallest
/// uids the graph does not use.
///
/// # Errors
///
/// Whatever [`Graph::validate`] says of `graph` (the rewritten graph passes it).
///
/// # Example
///
/// ```
/// use cudnn_runtime::ir::batchnorm_as_pointwise;
/// use cudnn_runtime::{DataType, GraphBuilder, Operand};
/// let mut g = GraphBuilder::new("conv_bn_relu");
/// let x = g.input("x", DataType::F16, &[2, 8, 6, 6]).unwrap();
/// let w = g.input("w", DataType::F16, &[16, 8, 3, 3]).unwrap();
/// let [mean, inv_var, scale, bias] =
///     ["mean", "inv_var", "scale", "bias"].map(|n| Operand::from(g.input(n, DataType::F32, &[1, 16, 1, 1]).unwrap()));
/// let c = g.op_named("c1", "conv_fprop", &[x.into(), w.into()], &[]).unwrap()[0];
/// let bn = g.op_named("bn1", "batchnorm_inference", &[c.into(), mean, inv_var, scale, bias], &[]).unwrap()[0];
/// let y = g.op("relu", &[bn.into()], &[]).unwrap()[0];
/// g.output(y, "y", DataType::F16).unwrap();
/// let graph = g.build().unwrap();
///
/// let rewritten = batchnorm_as_pointwise(&graph).unwrap();
/// let ops: Vec<&str> = rewritten.graph.nodes.iter().map(|n| n.op.call_name()).collect();
/// assert_eq!(ops, ["conv_fprop", "sub", "mul", "mul", "add", "relu"]);
/// assert_eq!(rewritten.graph.inputs(), graph.inputs());
/// assert_eq!(rewritten.graph.outputs(), graph.outputs());
/// assert_eq!(
///     rewritten.rewrites[0].to_string(),
///     "batchnorm_inference `bn1` as sub/mul/mul/add (fuses as the epilogue of conv_fprop `c1`)"
/// );
/// ```
pub fn batchnorm_as_pointwise(graph: &Graph) -> Result<Rewritten, GraphError> {
    graph.validate()?;
    let producer = graph.producer();
    node_by_node(graph, |node, out, names| {
        let Some(ports) = batchnorm_inference_ports(node).filter(|_| !feeds_batchnorm_backward(graph, node)) else {
            return Ok(None);
        };
        let after_conv = conv_before(graph, &producer, ports.x).map(|n| graph.nodes[n].name.clone());
        let replaced_by = chain(node, &ports, out, names)?;
        Ok(Some((replaced_by, RewriteKind::BatchnormAsPointwise { after_conv })))
    })
}

/// Every rewrite cuDNN needs, in order: [`batchnorm_as_pointwise`], [`mean_and_norms_as_sums`],
/// [`column_sum_as_matmul`] (a mean over rows becomes a sum over rows, which becomes a matmul),
/// then [`narrow_reductions_through_f32`]; the rewrites of all, in that order.
///
/// # Errors
///
/// Whatever [`Graph::validate`] says of `graph`.
pub fn for_cudnn(graph: &Graph) -> Result<Rewritten, GraphError> {
    let Rewritten { graph, mut rewrites } = batchnorm_as_pointwise(graph)?;
    let means = mean_and_norms_as_sums(&graph)?;
    rewrites.extend(means.rewrites);
    let sums = column_sum_as_matmul(&means.graph)?;
    rewrites.extend(sums.rewrites);
    let narrow = narrow_reductions_through_f32(&sums.graph)?;
    rewrites.extend(narrow.rewrites);
    Ok(Rewritten { graph: narrow.graph, rewrites })
}

/// Replaces each reduction that writes a 16-bit float graph output `y` (`f16`, `bf16`) by the
/// reduction into an f32 tensor and a pointwise `identity` that rounds it into `y`:
///
/// ```text
/// s = reduce(x, dims)     f32, y's dims
/// y = identity(s)         y's type: the one rounding y had
/// ```
///
/// Measured deviceless for the H200 with cuDNN 9.19: a reduction of a bf16 or f16 X into a Y of
/// that type gets no engine configuration in any layout, while the same into f32 plans
/// (`docs/ops.md`, "Reductions: what cuDNN plans"). The reduction ends its kernel; the rounding
/// is an elementwise kernel of its own, or joins what reads `s`. The CPU reference rounds the
/// sum to y's type once either way, so the result is the same. A reduction of a matmul's or a
/// convolution's output (their epilogue) is left alone.
///
/// The identity keeps the reduction's name and writes `y` (id, uid, name, type and layout kept);
/// the reduction and `s` are called `{node}_f32` (made unique with `_1`, `_2`, ... if taken, `s`
/// with the smallest uid the graph does not use).
///
/// # Errors
///
/// Whatever [`Graph::validate`] says of `graph` (the rewritten graph passes it).
///
/// # Example
///
/// ```
/// use cudnn_runtime::ir::narrow_reductions_through_f32;
/// use cudnn_runtime::{DataType, GraphBuilder};
/// let mut g = GraphBuilder::new("row_max");
/// let x = g.input("x", DataType::BF16, &[8, 64]).unwrap();
/// let m = g.op_named("m", "reduce_max", &[x.into()], &[("dims".into(), vec![-1i64].into())]).unwrap()[0];
/// g.output(m, "m", DataType::BF16).unwrap();
/// let graph = g.build().unwrap();
///
/// let rewritten = narrow_reductions_through_f32(&graph).unwrap();
/// let ops: Vec<&str> = rewritten.graph.nodes.iter().map(|n| n.op.call_name()).collect();
/// assert_eq!(ops, ["reduce_max", "identity"]);
/// assert_eq!(rewritten.graph.tensor_by_name("m_f32").unwrap().data_type, DataType::F32);
/// assert_eq!(rewritten.graph.outputs(), graph.outputs());
/// ```
pub fn narrow_reductions_through_f32(graph: &Graph) -> Result<Rewritten, GraphError> {
    graph.validate()?;
    let producer = graph.producer();
    node_by_node(graph, |node, out, names| {
        let narrow = match (&node.op, node.inputs.as_slice(), node.outputs.as_slice()) {
            (Op::Reduction(_), &[x], &[y]) => {
                let t = graph.tensor(y);
                let after_anchor = producer
                    .get(x.0)
                    .copied()
                    .flatten()
                    .is_some_and(|n| matches!(graph.nodes[n].op, Op::Matmul(_) | Op::Conv(_)));
                let narrow_float = matches!(t.data_type, DataType::F16 | DataType::BF16);
                (narrow_float && !t.is_virtual && !after_anchor).then_some(y)
            }
            _ => None,
        };
        let Some(y) = narrow else {
            return Ok(None);
        };
        let y_tensor = graph.tensor(y);
        let base = format!("{}_f32", node.name);
        let name = names.node(&base);
        out.tensors.push(Tensor {
            name: names.tensor(&base),
            uid: names.uid(),
            dims: y_tensor.dims.clone(),
            strides: y_tensor.strides.clone(),
            data_type: DataType::F32,
            is_virtual: true,
            pass_by_value: None,
            host_scalar: false,
        });
        let s = TensorId(out.tensors.len() - 1);
        out.nodes.push(Node { name: name.clone(), outputs: vec![s], ..node.clone() });
        out.nodes.push(Node {
            name: node.name.clone(),
            op: Op::Pointwise(Pointwise::new(PointwiseMode::Identity)),
            inputs: vec![s],
            outputs: vec![y],
            compute_data_type: DataType::F32,
        });
        Ok(Some((vec![name, node.name.clone()], RewriteKind::NarrowThroughF32)))
    })
}

/// Replaces each `y = reduce_mean(x, dims)`, `reduce_norm1` and `reduce_norm2` by the sum and
/// the elementwise ops that compute it:
///
/// ```text
/// mean:  t = mul(x, 1/n);  y = reduce_sum(t, dims)     n the elements summed into each of y's
/// norm1: a = abs(x);       y = reduce_sum(a, dims)
/// norm2: q = mul(x, x);    s = reduce_sum(q, dims);  y = sqrt(s)
/// ```
///
/// The intermediates are in the node's compute type (f32 for graphs the builder makes); `1/n`
/// is a by-value constant. A mean scales before it sums, so the scaling is the sum's prologue:
/// one kernel (scaled after, it would be an elementwise kernel of its own, and of a rank-4 `[B,
/// H, S, 1]` cuDNN 9.19 plans none).
///
/// Measured deviceless for the H200 with cuDNN 9.19: a reduction descriptor of mode `AVG`,
/// `NORM1` or `NORM2` fails to finalize (`CUDNN_STATUS_NOT_SUPPORTED`) in any layout, alone or
/// fused, while the sum plans wherever a sum does, after elementwise ops too (`docs/ops.md`,
/// "Reductions: what cuDNN plans"). A norm2's square root runs in the next kernel (an
/// elementwise kernel of its own, or the prologue of what reads `y`).
///
/// The sum, or for norm2 the square root, keeps the reduction's name and writes its output
/// tensor (id, uid, name, type and layout kept); the elementwise op before the sum is called
/// `{node}_scaled`, `{node}_abs` or `{node}_square`, norm2's sum `{node}_sum`, their outputs
/// likewise, the constant `{node}_inv_count`, made unique with `_1`, `_2`, ... if taken, with
/// the smallest uids the graph does not use. On the CPU reference a mean differs from the
/// rewritten one by the rounding of `1/n` and of each product (a few units in the last place of
/// f32).
///
/// # Errors
///
/// Whatever [`Graph::validate`] says of `graph` (the rewritten graph passes it).
///
/// # Example
///
/// ```
/// use cudnn_runtime::ir::mean_and_norms_as_sums;
/// use cudnn_runtime::{DataType, GraphBuilder};
/// let mut g = GraphBuilder::new("row_mean");
/// let x = g.input("x", DataType::F32, &[8, 64]).unwrap();
/// let mean = g.op_named("mean", "reduce_mean", &[x.into()], &[("dims".into(), vec![-1i64].into())]).unwrap()[0];
/// let norm = g.op_named("norm", "reduce_norm2", &[x.into()], &[("dims".into(), vec![-1i64].into())]).unwrap()[0];
/// g.output(mean, "mean", DataType::F32).unwrap();
/// g.output(norm, "norm", DataType::F32).unwrap();
/// let graph = g.build().unwrap();
///
/// let rewritten = mean_and_norms_as_sums(&graph).unwrap();
/// let ops: Vec<&str> = rewritten.graph.nodes.iter().map(|n| n.op.call_name()).collect();
/// assert_eq!(ops, ["mul", "reduce_sum", "mul", "reduce_sum", "sqrt"]);
/// assert_eq!(rewritten.graph.tensor_by_name("mean_inv_count").unwrap().pass_by_value, Some(1.0 / 64.0));
/// assert_eq!(rewritten.graph.outputs(), graph.outputs());
/// ```
pub fn mean_and_norms_as_sums(graph: &Graph) -> Result<Rewritten, GraphError> {
    graph.validate()?;
    node_by_node(graph, |node, out, names| {
        let reduction = match &node.op {
            Op::Reduction(r) if matches!(r.mode, ReductionMode::Mean | ReductionMode::Norm1 | ReductionMode::Norm2) => {
                Some(r)
            }
            _ => None,
        };
        let (Some(r), &[_], &[_]) = (reduction, node.inputs.as_slice(), node.outputs.as_slice()) else {
            return Ok(None);
        };
        let replaced_by = sum_nodes(graph, out, names, node, r)?;
        let kind = if r.mode == ReductionMode::Mean { RewriteKind::MeanAsSum } else { RewriteKind::NormAsSum };
        Ok(Some((replaced_by, kind)))
    })
}

/// The nodes that compute reduction `r` of `node` (of one input and one output) as a sum, added to
/// `out`: the pointwise op before the sum, the sum, and for a 2-norm the square root. Returns their
/// names.
fn sum_nodes(
    graph: &Graph,
    out: &mut Graph,
    names: &mut Names,
    node: &Node,
    r: &Reduction,
) -> Result<Vec<String>, GraphError> {
    let (x, y) = (node.inputs[0], node.outputs[0]);
    let x_tensor = graph.tensor(x).clone();
    let y_tensor = graph.tensor(y).clone();
    let mut replaced_by = Vec::with_capacity(3);
    let virtual_tensor = |out: &mut Graph, names: &mut Names, base: &str, like: &Tensor| {
        out.tensors.push(Tensor {
            name: names.tensor(base),
            uid: names.uid(),
            dims: like.dims.clone(),
            strides: like.strides.clone(),
            data_type: node.compute_data_type,
            is_virtual: true,
            pass_by_value: None,
            host_scalar: false,
        });
        TensorId(out.tensors.len() - 1)
    };
    // Before the sum: x·(1/n), |x| or x·x.
    let (suffix, mode, inputs) = match r.mode {
        ReductionMode::Mean => ("scaled", PointwiseMode::Mul, vec![x, inv_count(out, names, node, r, &x_tensor)?]),
        ReductionMode::Norm1 => ("abs", PointwiseMode::Abs, vec![x]),
        _ => ("square", PointwiseMode::Mul, vec![x, x]),
    };
    let base = format!("{}_{suffix}", node.name);
    let name = names.node(&base);
    let summed = virtual_tensor(out, names, &base, &x_tensor);
    out.nodes.push(Node {
        name: name.clone(),
        op: Op::Pointwise(Pointwise::new(mode)),
        inputs,
        outputs: vec![summed],
        compute_data_type: node.compute_data_type,
    });
    replaced_by.push(name);
    let sum_op = Op::Reduction(Reduction { mode: ReductionMode::Sum, dims: r.dims.clone() });
    if r.mode == ReductionMode::Norm2 {
        let base = format!("{}_sum", node.name);
        let sum_name = names.node(&base);
        let packed = Tensor { strides: crate::dim::packed_strides(&y_tensor.dims), ..y_tensor.clone() };
        let sum = virtual_tensor(out, names, &base, &packed);
        out.nodes.push(Node {
            name: sum_name.clone(),
            op: sum_op,
            inputs: vec![summed],
            outputs: vec![sum],
            compute_data_type: node.compute_data_type,
        });
        replaced_by.push(sum_name);
        out.nodes.push(Node {
            name: node.name.clone(),
            op: Op::Pointwise(Pointwise::new(PointwiseMode::Sqrt)),
            inputs: vec![sum],
            outputs: vec![y],
            compute_data_type: node.compute_data_type,
        });
    } else {
        // The sum of x·(1/n) or of |x| is the result: it writes y.
        out.nodes.push(Node {
            name: node.name.clone(),
            op: sum_op,
            inputs: vec![summed],
            outputs: vec![y],
            compute_data_type: node.compute_data_type,
        });
    }
    replaced_by.push(node.name.clone());
    Ok(replaced_by)
}

/// A by-value scalar `1/n` (`{node}_inv_count`) added to `out`, `n` the count of the elements of
/// `x` that mean `r` of `node` averages.
fn inv_count(
    out: &mut Graph,
    names: &mut Names,
    node: &Node,
    r: &Reduction,
    x: &Tensor,
) -> Result<TensorId, GraphError> {
    let axes = r.axes(x.dims.len()).map_err(|kind| GraphError::Shape {
        node: node.name.clone(),
        op: r.mode.name(),
        port: Some("X"),
        source: crate::ops::ShapeError::general(kind),
    })?;
    let count: i64 = axes.iter().map(|&a| x.dims[a]).product();
    out.tensors.push(Tensor {
        name: names.tensor(&format!("{}_inv_count", node.name)),
        uid: names.uid(),
        dims: vec![1; x.dims.len()],
        strides: vec![1; x.dims.len()],
        data_type: DataType::F32,
        is_virtual: false,
        pass_by_value: Some(1.0 / count as f64),
        host_scalar: false,
    });
    Ok(TensorId(out.tensors.len() - 1))
}

/// Replaces each sum over the rows of a row-major `[B, T, N]` tensor, `y = reduce_sum(x, dims =
/// [1])` (a bias gradient: `[B, 1, N]`; or `dims = [0, 1]`, below), by the matmul that computes it:
///
/// ```text
/// ones = identity(1.0)      a fill: the constant broadcast to [B, 1, T], in x's type (*), its own kernel
/// y = matmul(ones, x)       [B, 1, T] · [B, T, N] = [B, 1, N], accumulated in f32
/// ```
///
/// (*) For an intermediate `x`, the narrowest type its producer reads where narrower: cuDNN takes
/// a matmul's operands in one type, and an intermediate read by matmuls beside narrower operands
/// is stored in theirs.
///
/// Measured deviceless for the H200 with cuDNN 9.19: such a reduction gets no engine
/// configuration, alone or after pointwise ops (`relu_bwd → reduce_sum`); cuDNN plans a
/// reduction that ends no matmul only as a channel reduction, over the axes innermost in memory
/// (`docs/ops.md`, "Reductions: what cuDNN plans"), and the rows' axis is not. The matmul plans
/// (engine 7; of rank 2 too). cuDNN also plans the fill fused into the matmul as its prologue, but
/// on the H200 that kernel computed the sums wrongly (relative error 1.0, 2026-12-05), so the
/// partitioner makes a fill a kernel of its own (`CutReason::AfterFill`): the ones go through
/// the workspace (`[B, 1, T]` elements).
///
/// Which nodes: `reduce_sum` over axis 0 of a rank-2 `x` (`[T, N]`: ones `[1, T]`, a rank-2
/// matmul), or over axis 1 of a rank-3 `x`, of `f16`, `bf16` or `f32` whose rows are
/// contiguous (`x`'s innermost stride 1, axis 1's stride not), except where `x` is a matmul's
/// output (cuDNN fuses that reduction as the matmul's epilogue); and over axes 0 and 1 (batches
/// and rows, `[1, 1, N]`) where the batches' rows are one run of memory: the sum over the rows of
/// the view `reshape(x, [1, B·T, N])` (node and tensor `{node}_rows`), which the partitioner binds
/// or aliases like any view. f32 sums are
/// then a GEMM's: cuDNN may round `x` to TF32 (10 bits of mantissa) on the way, as for any f32
/// matmul.
///
/// The matmul keeps the reduction node's name and writes its output tensor (id, uid, name, type
/// and layout kept: graph inputs and outputs do not change); the fill and its two tensors (the
/// constant and the virtual ones) are called `{node}_ones` and `{node}_one`, made unique with
/// `_1`, `_2`, ... if taken, with the smallest uids the graph does not use.
///
/// # Errors
///
/// Whatever [`Graph::validate`] says of `graph` (the rewritten graph passes it).
///
/// # Example
///
/// ```
/// use cudnn_runtime::ir::column_sum_as_matmul;
/// use cudnn_runtime::{DataType, GraphBuilder};
/// let mut g = GraphBuilder::new("bias_grad");
/// let dy = g.input("dy", DataType::BF16, &[1, 128, 64]).unwrap();
/// let h = g.input("h", DataType::BF16, &[1, 128, 64]).unwrap();
/// let dh = g.op("relu_bwd", &[dy.into(), h.into()], &[]).unwrap()[0];
/// let db = g.op_named("db", "reduce_sum", &[dh.into()], &[("dims".into(), vec![1i64].into())]).unwrap()[0];
/// g.output(db, "d_b", DataType::F32).unwrap();
/// let graph = g.build().unwrap();
///
/// let rewritten = column_sum_as_matmul(&graph).unwrap();
/// let ops: Vec<&str> = rewritten.graph.nodes.iter().map(|n| n.op.call_name()).collect();
/// assert_eq!(ops, ["relu_bwd", "identity", "matmul"]);
/// assert_eq!(rewritten.graph.outputs(), graph.outputs());
/// assert_eq!(
///     rewritten.rewrites[0].to_string(),
///     "reduce_sum `db` over rows as a matmul by a vector of ones (cuDNN plans no such reduction)"
/// );
/// ```
pub fn column_sum_as_matmul(graph: &Graph) -> Result<Rewritten, GraphError> {
    graph.validate()?;
    let producer = graph.producer();
    node_by_node(graph, |node, out, names| {
        let Some(found) = column_sum(graph, &producer, node) else {
            return Ok(None);
        };
        Ok(Some((matmul_nodes(graph, out, names, node, found), RewriteKind::ColumnSumAsMatmul)))
    })
}

/// The nodes that compute the column sum `(x, y, merge)` of `node` (what [`column_sum`] found)
/// as a matmul, added to `out`: the view merging batches and rows where `merge`, the fill of ones
/// and the matmul. Returns their names.
fn matmul_nodes(
    graph: &Graph,
    out: &mut Graph,
    names: &mut Names,
    node: &Node,
    (x, y, merge): (TensorId, TensorId, bool),
) -> Vec<String> {
    let mut replaced_by = Vec::with_capacity(3);
    // A sum over batches and rows of [B, T, N]: over the rows of its view [1, B·T, N].
    let x = if merge {
        let (rows, view) = rows_view(graph, out, names, node, x);
        replaced_by.push(view);
        rows
    } else {
        x
    };
    let x_dims = out.tensor(x).dims.clone();
    let base = format!("{}_ones", node.name);
    let fill = names.node(&base);
    let rank = x_dims.len();
    out.tensors.push(Tensor {
        name: names.tensor(&format!("{}_one", node.name)),
        uid: names.uid(),
        dims: vec![1; rank],
        strides: vec![1; rank],
        data_type: DataType::F32,
        is_virtual: false,
        pass_by_value: Some(1.0),
        host_scalar: false,
    });
    let one = TensorId(out.tensors.len() - 1);
    // [B, 1, T] for [B, T, N]; [1, T] for [T, N].
    let ones_dims = if rank == 2 { vec![1, x_dims[0]] } else { vec![x_dims[0], 1, x_dims[1]] };
    out.tensors.push(Tensor {
        name: names.tensor(&base),
        uid: names.uid(),
        strides: crate::dim::packed_strides(&ones_dims),
        dims: ones_dims,
        data_type: ones_type(out, x),
        is_virtual: true,
        pass_by_value: None,
        host_scalar: false,
    });
    let ones = TensorId(out.tensors.len() - 1);
    out.nodes.push(Node {
        name: fill.clone(),
        op: Op::Pointwise(Pointwise::new(PointwiseMode::Identity)),
        inputs: vec![one],
        outputs: vec![ones],
        compute_data_type: DataType::F32,
    });
    out.nodes.push(Node {
        name: node.name.clone(),
        op: Op::Matmul(Matmul {}),
        inputs: vec![ones, x],
        outputs: vec![y],
        compute_data_type: node.compute_data_type,
    });
    replaced_by.extend([fill, node.name.clone()]);
    replaced_by
}

/// The view `reshape(x, [1, B·T, N])` of `x` (`[B, T, N]`, its batches' rows one run of memory)
/// added to `out` as node and tensor `{node}_rows`: the tensor and the node's name.
fn rows_view(graph: &Graph, out: &mut Graph, names: &mut Names, node: &Node, x: TensorId) -> (TensorId, String) {
    let t = graph.tensor(x);
    let dims = vec![1, t.dims[0] * t.dims[1], t.dims[2]];
    let reshape = Layout::Reshape { shape: dims.clone() };
    let base = format!("{}_rows", node.name);
    out.tensors.push(Tensor {
        name: names.tensor(&base),
        uid: names.uid(),
        strides: reshape.output_strides(&t.dims, &t.strides, &dims),
        dims,
        data_type: t.data_type,
        is_virtual: true,
        pass_by_value: None,
        host_scalar: false,
    });
    let rows = TensorId(out.tensors.len() - 1);
    let name = names.node(&base);
    out.nodes.push(Node {
        name: name.clone(),
        op: Op::Layout(reshape),
        inputs: vec![x],
        outputs: vec![rows],
        compute_data_type: node.compute_data_type,
    });
    (rows, name)
}

/// The type of the ones multiplying `x`: `x`'s, or for an intermediate, the narrowest floating
/// type among the tensors its producer reads where that is narrower (`relu_bwd` of bf16 tensors
/// computes in f32, and the partitioner stores such an intermediate in bf16 where matmuls read it
/// beside bf16 operands: cuDNN takes a matmul's A and B in one type).
fn ones_type(graph: &Graph, x: TensorId) -> DataType {
    let producer = |t: TensorId| graph.nodes.iter().position(|n| n.outputs.contains(&t));
    let own = graph.tensor(x).data_type;
    let Some(mut n) = producer(x).filter(|_| graph.tensor(x).is_virtual) else { return own };
    // Through the view of the batches' rows, to the op computing them.
    if let Op::Layout(_) = graph.nodes[n].op {
        let base = graph.nodes[n].inputs[0];
        match producer(base).filter(|_| graph.tensor(base).is_virtual) {
            Some(p) => n = p,
            None => return own,
        }
    }
    graph.nodes[n]
        .inputs
        .iter()
        .map(|i| graph.tensor(*i))
        .filter(|t| !t.is_by_value() && t.data_type.is_float())
        .map(|t| t.data_type)
        .filter(|d| d.size_bytes() < own.size_bytes())
        .min_by_key(|d| d.size_bytes())
        .unwrap_or(own)
}

/// `node`'s input and output if it is a sum [`column_sum_as_matmul`] rewrites, and whether it
/// sums over the batches too (through the view `[1, B·T, N]`).
fn column_sum(graph: &Graph, producer: &[Option<usize>], node: &Node) -> Option<(TensorId, TensorId, bool)> {
    let Op::Reduction(r) = &node.op else { return None };
    let (&[x], &[y]) = (node.inputs.as_slice(), node.outputs.as_slice()) else { return None };
    let t = graph.tensor(x);
    let rank = t.dims.len();
    if r.mode != ReductionMode::Sum || !(rank == 2 || rank == 3) {
        return None;
    }
    let merge = match (rank, r.axes(rank).ok()?.as_slice()) {
        // [T, N] over the rows: a matmul of rank 2 ([1, T] · [T, N]).
        (2, [0]) => false,
        (2, _) => return None,
        (_, [1]) => false,
        // Over the batches too: over the rows of the view [1, B·T, N], where the batches' rows
        // are one run of memory (one batch needs no view).
        (_, [0, 1]) if t.dims[0] == 1 => false,
        (_, [0, 1]) if t.strides[0] == t.dims[1] * t.strides[1] => true,
        _ => return None,
    };
    let rows = t.strides[rank - 1] == 1
        && t.strides[rank - 2] != 1
        && matches!(t.data_type, DataType::F16 | DataType::BF16 | DataType::F32);
    let after_matmul = producer.get(x.0).copied().flatten().is_some_and(|n| matches!(graph.nodes[n].op, Op::Matmul(_)));
    (rows && !after_matmul).then_some((x, y, merge))
}

/// The tensors of a `batchnorm_inference` node, by port.
struct BatchnormPorts {
    x: TensorId,
    mean: TensorId,
    inv_var: TensorId,
    scale: TensorId,
    bias: TensorId,
    y: TensorId,
}

/// `node`'s tensors if it is a `batchnorm_inference` (found by port name, so the chain does not
/// depend on the ports' order).
fn batchnorm_inference_ports(node: &Node) -> Option<BatchnormPorts> {
    if !matches!(&node.op, Op::Norm(n) if n.kind == NormKind::BatchNormInference) {
        return None;
    }
    let ports = node.op.inputs();
    let input = |name: &str| ports.iter().zip(&node.inputs).find(|(p, _)| p.name == name).map(|(_, &t)| t);
    Some(BatchnormPorts {
        x: input("X")?,
        mean: input("MEAN")?,
        inv_var: input("INV_VARIANCE")?,
        scale: input("SCALE")?,
        bias: input("BIAS")?,
        y: *node.outputs.first()?,
    })
}

/// Appends to `out` the four nodes that replace the norm `bn`, and the three tensors between
/// them; returns the nodes' names.
fn chain(bn: &Node, ports: &BatchnormPorts, out: &mut Graph, names: &mut Names) -> Result<Vec<String>, GraphError> {
    use PointwiseMode::{Add, Mul, Sub};
    // Each step: the op, what its output is called (none for the last, which writes Y), and the
    // statistic or parameter it applies.
    let steps = [
        (Sub, Some("centered"), ports.mean),
        (Mul, Some("normalized"), ports.inv_var),
        (Mul, Some("scaled"), ports.scale),
        (Add, None, ports.bias),
    ];
    let x_strides = out.tensor(ports.x).strides.clone();
    let mut prev = ports.x;
    let mut replaced_by = Vec::with_capacity(steps.len());
    for (mode, suffix, operand) in steps {
        let op = Op::Pointwise(Pointwise::new(mode));
        let inputs = vec![prev, operand];
        let (name, output) = match suffix {
            None => (bn.name.clone(), ports.y),
            Some(suffix) => {
                let base = format!("{}_{suffix}", bn.name);
                let name = names.node(&base);
                let metas: Vec<TensorMeta<i64>> = inputs
                    .iter()
                    .map(|i| TensorMeta { dims: out.tensor(*i).dims.clone(), dtype: out.tensor(*i).data_type })
                    .collect();
                let inferred = op.infer(&metas, &mut Concrete).map_err(|source| GraphError::Shape {
                    node: name.clone(),
                    op: mode.name(),
                    port: source.arg.and_then(|a| op.inputs().get(a).map(|p| p.name)),
                    source,
                })?;
                // A pointwise op has one output: X's dims, the statistic broadcast over them.
                let dims = inferred.into_iter().next().map_or_else(|| out.tensor(ports.x).dims.clone(), |m| m.dims);
                out.tensors.push(Tensor {
                    name: names.tensor(&base),
                    uid: names.uid(),
                    strides: strides_in_order_of(&x_strides, &dims),
                    dims,
                    data_type: bn.compute_data_type,
                    is_virtual: true,
                    pass_by_value: None,
                    host_scalar: false,
                });
                (name, TensorId(out.tensors.len() - 1))
            }
        };
        out.nodes.push(Node {
            name: name.clone(),
            op,
            inputs,
            outputs: vec![output],
            compute_data_type: bn.compute_data_type,
        });
        replaced_by.push(name);
        prev = output;
    }
    Ok(replaced_by)
}

/// The `conv_fprop` node that computes `t`, directly or through pointwise nodes (the first found,
/// inputs in port order).
fn conv_before(graph: &Graph, producer: &[Option<usize>], t: TensorId) -> Option<usize> {
    let mut seen = HashSet::new();
    let mut stack = vec![t];
    while let Some(t) = stack.pop() {
        let Some(n) = producer.get(t.0).copied().flatten() else { continue };
        if !seen.insert(n) {
            continue;
        }
        match &graph.nodes[n].op {
            Op::Conv(c) if c.kind == ConvKind::Fprop => return Some(n),
            // Pushed in reverse so the first input is searched first.
            Op::Pointwise(_) => stack.extend(graph.nodes[n].inputs.iter().rev()),
            _ => {}
        }
    }
    None
}

/// Whether `bn`'s output reaches a `batchnorm_backward` node, directly or through pointwise nodes.
fn feeds_batchnorm_backward(graph: &Graph, bn: &Node) -> bool {
    let mut reached: HashSet<TensorId> = bn.outputs.iter().copied().collect();
    // Nodes are in topological order: one pass sees every path.
    for node in &graph.nodes {
        if !node.inputs.iter().any(|i| reached.contains(i)) {
            continue;
        }
        match &node.op {
            Op::Norm(n) if n.kind == NormKind::BatchNormBackward => return true,
            Op::Pointwise(_) => reached.extend(node.outputs.iter().copied()),
            _ => {}
        }
    }
    false
}

/// What every rewrite here does with `graph`, a valid graph: its nodes in order, each kept as it
/// is where `replace` returns `None`, else replaced by the nodes `replace` added to the graph
/// being built (`out`: `graph`'s name, context and tensors, and the nodes so far; `names`: the
/// names and uids taken), which it returns with the kind of the rewrite. The result is validated.
fn node_by_node(
    graph: &Graph,
    mut replace: impl FnMut(&Node, &mut Graph, &mut Names) -> Result<Option<(Vec<String>, RewriteKind)>, GraphError>,
) -> Result<Rewritten, GraphError> {
    let mut out = Graph {
        name: graph.name.clone(),
        context: graph.context,
        tensors: graph.tensors.clone(),
        nodes: Vec::with_capacity(graph.nodes.len()),
    };
    let mut names = Names::of(graph);
    let mut rewrites = Vec::new();
    for node in &graph.nodes {
        let Some((replaced_by, kind)) = replace(node, &mut out, &mut names)? else {
            out.nodes.push(node.clone());
            continue;
        };
        let rewrite = Rewrite { node: node.name.clone(), replaced_by, kind };
        tracing::debug!(graph = %graph.name, %rewrite, "rewrite");
        rewrites.push(rewrite);
    }
    out.validate()?;
    Ok(Rewritten { graph: out, rewrites })
}

/// The names and uids taken, to make fresh ones.
pub(super) struct Names {
    tensors: HashSet<String>,
    nodes: HashSet<String>,
    uids: HashSet<i64>,
    next_uid: i64,
}

impl Names {
    pub(super) fn of(graph: &Graph) -> Self {
        Names {
            tensors: graph.tensors.iter().map(|t| t.name.clone()).collect(),
            nodes: graph.nodes.iter().map(|n| n.name.clone()).collect(),
            uids: graph.tensors.iter().map(|t| t.uid).collect(),
            next_uid: 1,
        }
    }

    /// `base`, or `base_1`, `base_2`, ...: the first not in `taken`, which then takes it.
    fn fresh(taken: &mut HashSet<String>, base: &str) -> String {
        let name = std::iter::once(base.to_string())
            .chain((1..).map(|i| format!("{base}_{i}")))
            .find(|n| !taken.contains(n))
            .unwrap_or_default();
        taken.insert(name.clone());
        name
    }

    pub(super) fn tensor(&mut self, base: &str) -> String {
        Self::fresh(&mut self.tensors, base)
    }

    fn node(&mut self, base: &str) -> String {
        Self::fresh(&mut self.nodes, base)
    }

    /// The smallest uid not taken (a graph of n tensors leaves one of 1..=n+1 free, far below
    /// [`super::MAX_UID`]).
    pub(super) fn uid(&mut self) -> i64 {
        while self.uids.contains(&self.next_uid) {
            self.next_uid += 1;
        }
        self.uids.insert(self.next_uid);
        self.next_uid
    }
}
