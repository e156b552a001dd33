//! cuDNN lowering of attention, two ways, chosen per node by [`support::choose`] (the node's
//! `implementation` attribute, the loaded cuDNN version and the GPU):
//!
//! - **fused**: one `CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR` (cuDNN 9.13.1+) over Q, K, V,
//!   O, Stats, the scale (a by-value `f32` unless it is an input) and, from 9.15, the sequence
//!   lengths (cudnn-frontend's `UnifiedSDPANode`);
//! - **composite**: the subgraph of [`composite::expand`] (matmul, pointwise, reduction, RNG and
//!   reshape operations, cudnn-frontend's `CompositeSDPANode` / `CompositeSDPABackwardNode`),
//!   which cuDNN's fused flash-attention engines pattern-match.
//!
//! Either way the node's own tensors keep their descriptors; the lowering adds tensors of its
//! own (virtual intermediates, Kᵀ/Vᵀ views of K and V under their uids, by-value constants and
//! the backward's workspace tensors), with fresh uids past the graph's. The by-value and
//! workspace ones are the [`Internals`] the variant pack binds.

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendAttributeType_t as T;
use sys::cudnnBackendDescriptorType_t as K;

use crate::ops::family::lowering::{LowerCx, Lowered};
use crate::ops::family::{LowerResult, OpFamily};
use super::composite::{self, Expansion, Kind, SubOp, SubTensor};
use super::ragged::{self, Slot};
use super::support::{self, Problem, Target};
use super::{Implementation, Sdpa};
use crate::cudnn::{Cudnn, CudnnError, Descriptor, Internals, NodeCx, ALIGNMENT};
use crate::DataType;

/// What a node lowers to.
pub(crate) enum Plan {
    /// The fused operation; the scale as a by-value scalar `(uid, value)` unless it is an input.
    Fused { scale: Option<(i64, f64)> },
    /// The composite subgraph.
    Composite(Expansion),
}

/// Decides how the node of `cx` lowers on `cudnn` and the tensors that adds to the variant pack.
/// Pure (no cuDNN call), so a plan loaded from JSON gets the same answer as the one that was
/// built.
pub(crate) fn internals(
    op: &Sdpa,
    cx: &NodeCx<'_>,
    cudnn: &Cudnn,
    next_uid: &mut i64,
) -> Result<(Plan, Internals), CudnnError> {
    let (ins, outs) = (&cx.inputs, &cx.outputs);
    let malformed = || cx.unsupported("its tensors are not the ones its shape rule gives (validate the graph)".into());
    if ins.len() != op.inputs().len() || outs.len() != op.outputs().len() {
        return Err(malformed());
    }
    // The head dim (the last) of every 4-d port must be contiguous.
    let names = op.inputs().into_iter().map(|p| p.name).chain(op.outputs().iter().copied());
    for (t, port) in ins.iter().chain(outs).zip(names) {
        let four_d = ["Q", "K", "V", "O", "dO", "dQ", "dK", "dV"].contains(&port);
        if four_d && t.strides.last() != Some(&1) {
            return Err(cx.support_rule(
                "sdpa.strides",
                format!(
                    "port {port} (tensor `{}`) has strides {:?}; the head dim (last) must have stride 1",
                    t.name, t.strides
                ),
            ));
        }
    }
    // The key length of a paged node is its cache's capacity.
    let [b, h_q, s_q, d_qk, h_k, s_kv, h_v, d_v] = composite::dims(op, ins).ok_or_else(malformed)?;
    let problem = Problem { b, h_q, h_k, h_v, s_q, s_kv, d_qk, d_v, compute_f32: cx.compute_type == DataType::F32 };
    let target = Target { version: cudnn.version(), sm: cudnn.sm() };
    let choice = support::choose(op, &problem, target).map_err(|f| cx.support_rule_needing(f.rule, f.message, f.needs))?;
    match choice {
        Implementation::Fused => {
            let mut internals = Internals::default();
            let scale = op.literal_scale(problem.d_qk).map(|value| {
                let uid = *next_uid;
                *next_uid += 1;
                let value = DataType::F32.round(value);
                internals.scalars.push((uid, DataType::F32, value));
                (uid, value)
            });
            Ok((Plan::Fused { scale }, internals))
        }
        Implementation::Composite | Implementation::Auto => {
            let cx = composite::Context {
                inputs: ins,
                outputs: outs,
                intermediate: cx.intermediate_type,
                compute: cx.compute_type,
                version: cudnn.version(),
            };
            let x = composite::expand(op, &cx, next_uid).ok_or_else(malformed)?;
            let mut internals = Internals { workspace_bytes: x.workspace_bytes, ..Internals::default() };
            for t in &x.tensors {
                match t.kind {
                    Kind::Scalar(v) => internals.scalars.push((t.uid, t.data_type, v)),
                    Kind::Workspace { offset } => internals.workspace.push((t.uid, offset)),
                    _ => {}
                }
            }
            Ok((Plan::Composite(x), internals))
        }
    }
}

/// Lowers `op` (the node of `cx`).
pub(crate) fn lower(op: &Sdpa, cx: &mut LowerCx<'_, '_>) -> LowerResult {
    let (plan, internals) = internals(op, cx.node, cx.cudnn, cx.next_uid)?;
    let cx = cx.node;
    let (operations, parts) = match plan {
        Plan::Fused { scale } => fused(op, cx, scale)?,
        Plan::Composite(x) => materialize(cx, &x)?,
    };
    Ok(Lowered { operations, parts, internals })
}

/// A tensor descriptor of the lowering's own; a packed one names its ragged offsets' descriptor
/// (the node's input `t.ragged`).
fn tensor(cx: &NodeCx<'_>, t: &SubTensor) -> Result<Descriptor, CudnnError> {
    let mut d = cx.descriptor(K::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
    if let Some(offsets) = t.ragged {
        d.set_descriptors(A::CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, &[cx.input(offsets)?])?;
    }
    d.set_data_type(A::CUDNN_ATTR_TENSOR_DATA_TYPE, t.data_type)?;
    d.set_i64s(A::CUDNN_ATTR_TENSOR_DIMENSIONS, &t.dims)?;
    d.set_i64s(A::CUDNN_ATTR_TENSOR_STRIDES, &t.strides)?;
    d.set_i64s(A::CUDNN_ATTR_TENSOR_UNIQUE_ID, &[t.uid])?;
    d.set_i64s(A::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &[ALIGNMENT as i64])?;
    d.set_bool(A::CUDNN_ATTR_TENSOR_IS_VIRTUAL, t.kind == Kind::Virtual)?;
    if matches!(t.kind, Kind::Scalar(_)) {
        d.set_bool(A::CUDNN_ATTR_TENSOR_IS_BY_VALUE, true)?;
    }
    d.finalize()?;
    Ok(d)
}

fn fused(
    op: &Sdpa,
    cx: &NodeCx<'_>,
    scale: Option<(i64, f64)>,
) -> Result<(Vec<Descriptor>, Vec<Descriptor>), CudnnError> {
    let mut parts = Vec::new();
    // Packed (ragged) ports get descriptors of their own naming their offsets.
    let mut packed: Vec<(Slot, Descriptor)> = Vec::new();
    for p in ragged::packed(op) {
        let port = match p.slot {
            Slot::Input(i) => cx.inputs.get(i),
            Slot::Output(i) => cx.outputs.get(i),
        };
        let port = port.ok_or_else(|| cx.unsupported(format!("it has no tensor for packed port {}", p.port)))?;
        let kind = match p.slot {
            Slot::Input(i) => Kind::Input(i),
            Slot::Output(i) => Kind::Output(i),
        };
        let t = SubTensor {
            name: p.port,
            kind,
            uid: port.uid,
            dims: port.dims.clone(),
            strides: port.strides.clone(),
            data_type: port.data_type,
            ragged: Some(p.offsets_index),
        };
        packed.push((p.slot, tensor(cx, &t)?));
    }
    let get = |slot: Slot| -> Result<&Descriptor, CudnnError> {
        match (packed.iter().find(|(s, _)| *s == slot), slot) {
            (Some((_, d)), _) => Ok(d),
            (None, Slot::Input(i)) => cx.input(i),
            (None, Slot::Output(i)) => cx.output(i),
        }
    };
    let mut sdpa = cx.descriptor(K::CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR)?;
    sdpa.set_descriptors(A::CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, &[get(Slot::Input(0))?])?;
    sdpa.set_descriptors(A::CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, &[get(Slot::Input(1))?])?;
    sdpa.set_descriptors(A::CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, &[get(Slot::Input(2))?])?;
    sdpa.set_descriptors(A::CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, &[get(Slot::Output(0))?])?;
    if op.training {
        sdpa.set_descriptors(A::CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, &[cx.output(1)?])?;
    }
    match (scale, op.input_index("Attn_scale")) {
        (Some((uid, value)), _) => {
            let t = SubTensor {
                name: "attn_scale",
                kind: Kind::Scalar(value),
                uid,
                dims: vec![1; 4],
                strides: vec![1; 4],
                data_type: DataType::F32,
                ragged: None,
            };
            let d = tensor(cx, &t)?;
            sdpa.set_descriptors(A::CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, &[&d])?;
            parts.push(d);
        }
        (None, Some(i)) => sdpa.set_descriptors(A::CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, &[cx.input(i)?])?,
        (None, None) => {}
    }
    if let (Some(q), Some(kv)) = (op.input_index("SEQ_LEN_Q"), op.input_index("SEQ_LEN_KV")) {
        sdpa.set_descriptors(A::CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC, &[cx.input(q)?])?;
        sdpa.set_descriptors(A::CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC, &[cx.input(kv)?])?;
    }
    // A paged cache: K and V are the pools, read through their tables (cudnn-frontend's
    // `UnifiedSDPANode`; the operation needs no capacity).
    if let (Some(k), Some(v)) = (op.input_index("Page_table_K"), op.input_index("Page_table_V")) {
        sdpa.set_descriptors(A::CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_KDESC, &[cx.input(k)?])?;
        sdpa.set_descriptors(A::CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_VDESC, &[cx.input(v)?])?;
    }
    sdpa.finalize()?;
    parts.extend(packed.into_iter().map(|(_, d)| d));
    Ok((vec![sdpa], parts))
}

/// Descriptors for an expansion's tensors and operations.
// Long because it is one arm per kind of sub-operation, each the descriptors cuDNN wants for it;
// the arms share the lookup of the expansion's tensors.
fn materialize(cx: &NodeCx<'_>, x: &Expansion) -> Result<(Vec<Descriptor>, Vec<Descriptor>), CudnnError> {
    // Own descriptors for every tensor but the node's; the node's are borrowed from `cx`.
    let mut own: Vec<Option<Descriptor>> = Vec::with_capacity(x.tensors.len());
    // A packed input or output gets a descriptor of its own too: the graph's has no ragged
    // offsets (cudnn-frontend sets them on the tensor itself; here the node's tensor keeps its
    // uid and gains them in this operation graph only).
    for t in &x.tensors {
        own.push(match t.kind {
            Kind::Input(_) | Kind::Output(_) if t.ragged.is_none() => None,
            _ => Some(tensor(cx, t)?),
        });
    }
    let get = |i: usize| -> Result<&Descriptor, CudnnError> {
        match (x.tensors.get(i).map(|t| &t.kind), own.get(i)) {
            (_, Some(Some(d))) => Ok(d),
            (Some(Kind::Input(port)), _) => cx.input(*port),
            (Some(Kind::Output(port)), _) => cx.output(*port),
            _ => Err(cx.unsupported(format!("its attention subgraph refers to a tensor #{i} it does not have"))),
        }
    };
    let mut operations = Vec::with_capacity(x.ops.len());
    let mut parts = Vec::new();
    let compute = cx.compute_type();
    for (_, op) in &x.ops {
        match op {
            SubOp::Matmul { a, b, c, m_override, n_override, k_override } => {
                let mut desc = cx.descriptor(K::CUDNN_BACKEND_MATMUL_DESCRIPTOR)?;
                desc.set_data_type(A::CUDNN_ATTR_MATMUL_COMP_TYPE, compute)?;
                desc.finalize()?;
                let mut o = cx.descriptor(K::CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR)?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_MATMUL_ADESC, &[get(*a)?])?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_MATMUL_BDESC, &[get(*b)?])?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_MATMUL_CDESC, &[get(*c)?])?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_MATMUL_DESC, &[&desc])?;
                let overrides = [
                    (A::CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, m_override),
                    (A::CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, n_override),
                    (A::CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, k_override),
                ];
                for (attr, t) in overrides {
                    if let Some(t) = t {
                        o.set_descriptors(attr, &[get(*t)?])?;
                    }
                }
                o.finalize()?;
                operations.push(o);
                parts.push(desc);
            }
            SubOp::Pointwise { mode, inputs, output, compute, axis } => {
                let mut desc = cx.descriptor(K::CUDNN_BACKEND_POINTWISE_DESCRIPTOR)?;
                desc.set_enum(A::CUDNN_ATTR_POINTWISE_MODE, T::CUDNN_TYPE_POINTWISE_MODE, mode.cudnn_value())?;
                desc.set_data_type(A::CUDNN_ATTR_POINTWISE_MATH_PREC, *compute)?;
                if let Some(axis) = axis {
                    desc.set_i64s(A::CUDNN_ATTR_POINTWISE_AXIS, &[*axis])?;
                }
                desc.finalize()?;
                let mut o = cx.descriptor(K::CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR)?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, &[&desc])?;
                let ports = [
                    A::CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
                    A::CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                    A::CUDNN_ATTR_OPERATION_POINTWISE_TDESC,
                ];
                for (attr, t) in ports.into_iter().zip(inputs) {
                    o.set_descriptors(attr, &[get(*t)?])?;
                }
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_POINTWISE_YDESC, &[get(*output)?])?;
                o.finalize()?;
                operations.push(o);
                parts.push(desc);
            }
            SubOp::Reduction { mode, x: input, y } => {
                let mut desc = cx.descriptor(K::CUDNN_BACKEND_REDUCTION_DESCRIPTOR)?;
                desc.set_data_type(A::CUDNN_ATTR_REDUCTION_COMP_TYPE, compute)?;
                desc.set_enum(
                    A::CUDNN_ATTR_REDUCTION_OPERATOR,
                    T::CUDNN_TYPE_REDUCTION_OPERATOR_TYPE,
                    mode.cudnn_value(),
                )?;
                desc.finalize()?;
                let mut o = cx.descriptor(K::CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR)?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_REDUCTION_XDESC, &[get(*input)?])?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_REDUCTION_YDESC, &[get(*y)?])?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_REDUCTION_DESC, &[&desc])?;
                o.finalize()?;
                operations.push(o);
                parts.push(desc);
            }
            SubOp::Rng { keep, seed, offset, y } => {
                let mut desc = cx.descriptor(K::CUDNN_BACKEND_RNG_DESCRIPTOR)?;
                let bernoulli = sys::cudnnRngDistribution_t::CUDNN_RNG_DISTRIBUTION_BERNOULLI as u32;
                desc.set_enum(A::CUDNN_ATTR_RNG_DISTRIBUTION, T::CUDNN_TYPE_RNG_DISTRIBUTION, bernoulli)?;
                desc.set_f64(A::CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY, *keep)?;
                desc.finalize()?;
                let mut o = cx.descriptor(K::CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR)?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_RNG_YDESC, &[get(*y)?])?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_RNG_DESC, &[&desc])?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_RNG_SEED, &[get(*seed)?])?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC, &[get(*offset)?])?;
                o.finalize()?;
                operations.push(o);
                parts.push(desc);
            }
            SubOp::PagedCacheLoad { container, page_table, seq_len, y } => {
                let mut o = cx.descriptor(K::CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR)?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC, &[get(*container)?])?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC, &[get(*page_table)?])?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC, &[get(*seq_len)?])?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_YDESC, &[get(*y)?])?;
                o.finalize()?;
                operations.push(o);
            }
            SubOp::Reshape { x: input, y, .. } => {
                let mut o = cx.descriptor(K::CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR)?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_RESHAPE_XDESC, &[get(*input)?])?;
                o.set_descriptors(A::CUDNN_ATTR_OPERATION_RESHAPE_YDESC, &[get(*y)?])?;
                o.finalize()?;
                operations.push(o);
            }
        }
    }
    parts.extend(own.into_iter().flatten());
    Ok((operations, parts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::SdpaPass;

    #[test]
    fn backward_never_fuses() {
        let op = Sdpa { implementation: Implementation::Auto, ..Sdpa::new(SdpaPass::Backward) };
        let p = Problem { b: 1, h_q: 2, h_k: 2, h_v: 2, s_q: 128, s_kv: 128, d_qk: 64, d_v: 64, compute_f32: true };
        let t = Target { version: 91900, sm: Some(90) };
        assert_eq!(support::choose(&op, &p, t).unwrap(), Implementation::Composite);
    }
}
