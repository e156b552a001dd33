//! Binding a cuDNN execution-plan JSON to the graph it is loaded for, before cuDNN sees it.
//!
//! A plan JSON (`CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION`) carries its own operation graph:
//! every tensor's uid, dims, strides, type and alignment, and every operation with the tensors it
//! reads and writes. cuDNN rebuilds the plan from that description, not from ours, so a plan JSON
//! made for another graph (or another shape binding, or edited) would read and write the user's
//! buffers as *it* describes them — and a malformed one can crash the process inside cuDNN (a
//! dim of 0 dies with SIGFPE in `MatmulOperation::finalize_internal` on 9.19).
//!
//! [`check`] therefore compares the JSON's operation graph with the lowering's own account of the
//! graph ([`Manifest`], recorded by the descriptors as the lowering sets them, so no op family
//! restates its lowering here):
//! - the same tensors (by uid), each with the same dims, strides, data type, virtual and
//!   by-value flags and byte alignment, unvectorized and not reordered;
//! - the same operations (kind and the set of tensors each refers to), as a multiset: every
//!   name a node gives is an enum spelling (`CUDNN_…`) or a tensor of the plan;
//! - the cuDNN version and the SM its kernels were compiled for, against the context;
//! - the kernel list's shape: every entry names its kernel and carries its code as text, and an
//!   attention plan (`finalizeMode` naming SDPA) lists at most one kernel. cuDNN 9.19 writes one
//!   for every SDPA engine it plans, and reads any further entry of such a plan as a kernel to
//!   compile, calling NVRTC through a pointer nothing has set: the process dies with SIGSEGV in
//!   `RuntimeKernel::getNvrtcVersion` (found by the `payload` fuzz target; other plans' engines
//!   tolerate extra or missing entries, and refuse them or not, without crashing).
//!
//! What is not compared: an operation's non-tensor attributes (pointwise mode, padding, …) and
//! the kernel itself. A payload's content digest catches accidental changes to those, and a
//! keyed signature deliberate ones (see `payload::plan`): a plan carries executable GPU code.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Deserialize;

use super::lower::Manifest;
use super::mismatch::PlanMismatch;
use super::Cudnn;
use crate::{DataType, Graph};

/// The part of cuDNN 9's execution-plan JSON that is checked.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PlanJson {
    cudnn_version: i64,
    operation_graph: OperationGraph,
    engine: Engine,
}

#[derive(Deserialize)]
struct OperationGraph {
    /// How cuDNN finalizes it (`UNIFIED_SDPA_FWD`, `BLAS_MATMUL`, …); absent in some versions.
    #[serde(rename = "finalizeMode", default)]
    finalize_mode: Option<String>,
    tensors: Vec<TensorJson>,
    nodes: Vec<BTreeMap<String, serde_json::Value>>,
    /// Written (as `true`) only for a dynamic-shape operation graph.
    #[serde(rename = "isDynamicShapeEnabled", default)]
    is_dynamic_shape_enabled: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TensorJson {
    name: String,
    data_type: String,
    dim: Vec<i64>,
    stride: Vec<i64>,
    is_virtual: bool,
    is_by_value: bool,
    vect_count: i64,
    vect_dim: i64,
    ptr_alignment: i64,
    reordering: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Engine {
    sm_version: i64,
    /// The compiled kernels, for engines that carry them (precompiled engines have none).
    #[serde(default)]
    payload: Option<EnginePayload>,
}

#[derive(Deserialize)]
struct EnginePayload {
    #[serde(default)]
    kernels: Vec<serde_json::Value>,
}

/// The most kernels a plan JSON of `finalize_mode` may list before cuDNN is given it: one for
/// attention (see the module docs), no bound for the rest.
fn kernel_bound(finalize_mode: &str) -> Option<usize> {
    finalize_mode.contains("SDPA").then_some(1)
}

/// Checks the shape of the plan's kernel list (see the module docs).
fn check_kernels(plan: &PlanJson) -> Result<(), PlanMismatch> {
    let kernels = plan.engine.payload.as_ref().map_or(&[][..], |p| p.kernels.as_slice());
    for (index, kernel) in kernels.iter().enumerate() {
        for field in ["kernelName", "cubin"] {
            if kernel.get(field).and_then(serde_json::Value::as_str).is_none() {
                return Err(PlanMismatch::Kernel { index, field });
            }
        }
    }
    let mode = plan.operation_graph.finalize_mode.as_deref().unwrap_or("");
    match kernel_bound(mode) {
        Some(most) if kernels.len() > most => {
            Err(PlanMismatch::Kernels { finalize_mode: mode.to_string(), count: kernels.len(), most })
        }
        _ => Ok(()),
    }
}

/// cuDNN's spelling of a data type in plan JSON (`CUDNN_DATA_BFLOAT16`).
fn cudnn_name(data_type: DataType) -> String {
    let serde = serde_json::to_value(data_type).ok();
    format!("CUDNN_DATA_{}", serde.as_ref().and_then(serde_json::Value::as_str).unwrap_or("?"))
}

struct List<'a>(&'a [i64]);

impl fmt::Display for List<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// What a plan JSON that passed [`check`] says of itself.
pub(crate) struct Checked {
    /// Its operation graph is dynamic-shape (`isDynamicShapeEnabled`).
    pub(crate) dynamic_shape: bool,
}

/// Checks `json` against the lowering of `graph` for `cudnn` (see the module docs).
// Long because it checks a plan JSON against the lowering field by field, in the order the module
// docs list, each mismatch naming both sides.
pub(crate) fn check(json: &str, graph: &Graph, manifest: &Manifest, cudnn: &Cudnn) -> Result<Checked, PlanMismatch> {
    let plan: PlanJson = serde_json::from_str(json).map_err(|e| PlanMismatch::Malformed(e.to_string()))?;
    if usize::try_from(plan.cudnn_version).ok() != Some(cudnn.version()) {
        return Err(PlanMismatch::CudnnVersion { plan: plan.cudnn_version, runtime: cudnn.version() });
    }
    if let Some(sm) = cudnn.sm() {
        if plan.engine.sm_version != i64::from(sm) * 10 {
            return Err(PlanMismatch::Sm { plan: plan.engine.sm_version / 10, runtime: sm });
        }
    }
    check_kernels(&plan)?;
    let name_of = |uid: i64| {
        graph
            .tensors
            .iter()
            .find(|t| t.uid == uid)
            .map_or_else(|| format!("#{uid} (the lowering's)"), |t| t.name.clone())
    };
    let expected = &manifest.tensors;
    let mut seen = BTreeSet::new();
    for t in &plan.operation_graph.tensors {
        let Some((uid, want)) = t.name.parse::<i64>().ok().and_then(|uid| expected.get(&uid).map(|w| (uid, w))) else {
            return Err(PlanMismatch::UnknownTensor {
                name: t.name.clone(),
                graph: expected.keys().copied().collect(),
            });
        };
        if !seen.insert(uid) {
            return Err(PlanMismatch::DuplicateTensor { name: t.name.clone() });
        }
        let differs = |field: &'static str, plan: String, graph: String| PlanMismatch::Tensor {
            uid,
            tensor: name_of(uid),
            field,
            plan,
            graph,
        };
        if t.dim != want.dims {
            return Err(differs("dims", List(&t.dim).to_string(), List(&want.dims).to_string()));
        }
        if t.stride != want.strides {
            return Err(differs("strides", List(&t.stride).to_string(), List(&want.strides).to_string()));
        }
        let data_type = want.data_type.map_or_else(|| "unset".to_string(), cudnn_name);
        if t.data_type != data_type {
            return Err(differs("data type", t.data_type.clone(), data_type));
        }
        if t.is_virtual != want.is_virtual {
            return Err(differs("virtual", t.is_virtual.to_string(), want.is_virtual.to_string()));
        }
        if t.is_by_value != want.is_by_value {
            return Err(differs("by value", t.is_by_value.to_string(), want.is_by_value.to_string()));
        }
        if Some(t.ptr_alignment) != want.alignment {
            return Err(differs("alignment", t.ptr_alignment.to_string(), format!("{:?}", want.alignment)));
        }
        // The lowering never vectorizes or reorders a tensor.
        if t.vect_count != 1 {
            return Err(differs("vector count", t.vect_count.to_string(), "1".into()));
        }
        if t.vect_dim != -1 {
            return Err(differs("vector dim", t.vect_dim.to_string(), "-1".into()));
        }
        if t.reordering != "CUDNN_TENSOR_REORDERING_NONE" {
            return Err(differs("reordering", t.reordering.clone(), "CUDNN_TENSOR_REORDERING_NONE".into()));
        }
    }
    if let Some(&uid) = expected.keys().find(|uid| !seen.contains(uid)) {
        return Err(PlanMismatch::MissingTensor { uid, tensor: name_of(uid) });
    }
    let names: BTreeMap<&str, i64> = plan
        .operation_graph
        .tensors
        .iter()
        .filter_map(|t| t.name.parse().ok().map(|uid| (t.name.as_str(), uid)))
        .collect();
    let mut operations = Vec::with_capacity(plan.operation_graph.nodes.len());
    for (index, node) in plan.operation_graph.nodes.iter().enumerate() {
        let operation = node.get("operation").and_then(serde_json::Value::as_str).unwrap_or("").to_string();
        let mut refs = Vec::new();
        for value in node.iter().filter(|(k, _)| k.as_str() != "operation").map(|(_, v)| v) {
            let strings: Vec<&str> = match value {
                serde_json::Value::String(s) => vec![s.as_str()],
                serde_json::Value::Array(items) => items.iter().filter_map(serde_json::Value::as_str).collect(),
                _ => Vec::new(),
            };
            for s in strings {
                match names.get(s) {
                    Some(&uid) => refs.push(uid),
                    None if s.starts_with("CUDNN_") => {}
                    None => {
                        return Err(PlanMismatch::DanglingReference { node: index, operation, name: s.to_string() });
                    }
                }
            }
        }
        refs.sort_unstable();
        refs.dedup();
        operations.push((operation, refs));
    }
    let mut graph_ops: Vec<(String, Vec<i64>)> =
        manifest.operations.iter().map(|(kind, refs)| ((*kind).to_string(), refs.clone())).collect();
    operations.sort();
    graph_ops.sort();
    if operations != graph_ops {
        return Err(PlanMismatch::Operations { plan: operations, graph: graph_ops });
    }
    Ok(Checked { dynamic_shape: plan.operation_graph.is_dynamic_shape_enabled })
}
