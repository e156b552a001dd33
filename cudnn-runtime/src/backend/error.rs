//! [`BackendError`]: every way the backend can fail, each carrying what a user needs to act on
//! it — the cuDNN status (number and name) together with `cudnnGetLastErrorString`, the descriptor
//! and attribute at fault, and the graph node being lowered.

use super::candidate::{Candidate, HeuristicFailure};
use super::mismatch::PlanMismatch;
use super::partition::Cut;
use crate::cudnn::{with_call_failures, CudnnError};
use crate::ir::{GraphError, NotChannelsLast};
use crate::reference::ArgError;

with_call_failures! {
    /// A cuDNN, CUDA-driver or library-loading failure, or anything else the backend refuses
    /// (the first variants are those of [`CudnnError`], which converts into this variant for
    /// variant).
    pub enum BackendError {
        /// Something that needs a GPU was asked of a deviceless context.
        #[error("{what} needs a GPU, but this cuDNN context is deviceless; make one with `Cudnn::new(stream)`")]
        NotOnline {
            /// What was asked.
            what: &'static str,
        },
        /// A plan made by a deviceless context was asked to execute.
        #[error(
            "the plan for graph `{graph}` was built deviceless and cannot execute; load its `json()` into an online \
             context with `ExecutionPlan::from_json`"
        )]
        DevicelessPlan {
            /// The graph.
            graph: String,
        },
        /// A plan or buffer of another CUDA context (device) than the executing context's stream.
        #[error("{what} belongs to another CUDA context (device) than the stream of this cuDNN context")]
        ForeignContext {
            /// What (`the plan`, `the buffer of tensor `y``).
            what: String,
        },
        /// A graph input that no node reads: cuDNN has no operation to bind it to.
        #[error("input `{tensor}` of graph `{graph}` is read by no node; remove it or use it")]
        UnusedInput {
            /// The graph.
            graph: String,
            /// The input.
            tensor: String,
        },
        /// A plan JSON that does not describe the graph it is loaded for (or is no plan JSON): refused
        /// before cuDNN is given it.
        #[error("the plan JSON given for graph `{graph}` does not describe it: {mismatch}")]
        PlanMismatch {
            /// The graph.
            graph: String,
            /// How it differs.
            mismatch: Box<PlanMismatch>,
        },
        /// Heuristics found nothing cuDNN would build. Lists every candidate and why it was
        /// rejected, and hints at the convolution or pooling ports that are not channels-last.
        #[error("{}", no_plan_message(.graph, .nodes, .candidates, .heuristics, .not_channels_last))]
        NoPlan {
            /// The graph (the user's, also where one part of its partition was refused).
            graph: String,
            /// The refused graph's or part's nodes as the user declared them (name, op): a node a
            /// rewrite replaced is named as written, not as rewritten; empty where unknown.
            nodes: Vec<(String, &'static str)>,
            /// Every candidate heuristics proposed, with its rejection.
            candidates: Vec<Candidate>,
            /// Heuristic modes that failed outright.
            heuristics: Vec<HeuristicFailure>,
            /// The graph's convolution and pooling ports that are not channels-last
            /// ([`crate::Graph::ports_not_channels_last`]): cuDNN's fused convolution engines want
            /// NHWC, so these are the first thing to change.
            not_channels_last: Vec<NotChannelsLast>,
        },
        /// The wrong number of device buffers.
        #[error("graph `{graph}` takes {expected} buffers (its inputs, then its outputs) but {found} were given")]
        IoCount {
            /// The graph.
            graph: String,
            /// Inputs plus outputs.
            expected: usize,
            /// Buffers given.
            found: usize,
        },
        /// An output given as a read-only buffer.
        #[error("output `{tensor}` was given as `DeviceBuffer::input`; outputs take `DeviceBuffer::output(&mut buffer)`")]
        ReadOnlyOutput {
            /// The output.
            tensor: String,
        },
        /// A device buffer not aligned as cuDNN's tensor descriptors promise (16 bytes), or a host
        /// scalar's address null or not aligned for its type.
        #[error("the buffer of tensor `{tensor}` starts at {address:#x}, which is not {alignment}-byte aligned")]
        Misaligned {
            /// The tensor.
            tensor: String,
            /// The device address.
            address: u64,
            /// The alignment needed, in bytes.
            alignment: u64,
        },
        /// A workspace smaller than the plan needs.
        #[error("the plan needs a workspace of {required} bytes but {given} were given")]
        Workspace {
            /// Bytes the plan needs.
            required: usize,
            /// Bytes given.
            given: usize,
        },
        /// [`crate::backend::ExecutionPlan::select`] of a candidate that was not built.
        #[error("candidate #{index} is not a built plan of this graph (built: {built:?})")]
        NotBuilt {
            /// The candidate asked for.
            index: usize,
            /// The candidates that were built.
            built: Vec<usize>,
        },
        /// [`crate::backend::BuildOptions::candidate`] past the end of the candidate list.
        #[error("candidate #{index} was asked for, but heuristics proposed {count} candidates")]
        CandidateIndex {
            /// The index asked for.
            index: usize,
            /// Candidates proposed.
            count: usize,
        },
        /// Autotuning found no built candidate that executes.
        #[error("autotuning graph `{graph}`: no built candidate executed:{}", autotune_failures(.failures))]
        Autotune {
            /// The graph.
            graph: String,
            /// Each candidate tried, with what went wrong.
            failures: Vec<(usize, String)>,
        },
        /// A Rust engine registered with an id outside the Rust region, or twice.
        #[error("engine `{name}` cannot be registered with id {id}: {reason}")]
        EngineId {
            /// The engine's name.
            name: String,
            /// The id it gave.
            id: i64,
            /// Why it is refused.
            reason: &'static str,
        },
        /// A routed plan asked to do what its engine cannot (a cuDNN plan to run on host buffers).
        #[error("graph `{graph}` was routed to {engine}, which {reason}")]
        WrongEngine {
            /// The graph.
            graph: String,
            /// The engine it was routed to.
            engine: String,
            /// What it cannot do.
            reason: &'static str,
        },
        /// A graph that cuDNN will not plan as one kernel, built with
        /// [`Fusion::Single`](crate::backend::Fusion::Single) (`graph!`'s `#[fuse(single)]`).
        #[error("{}", cannot_fuse_message(.graph, .cut))]
        CannotFuse {
            /// The graph.
            graph: String,
            /// The first boundary the partitioner would cut, naming the op pair and the rule
            /// (`None` where cuDNN refused a graph the rules would fuse and no split helped).
            cut: Option<Box<Cut>>,
        },
        /// Something asked of a partitioned plan that only a plan of one kernel has (its one
        /// JSON, its one descriptor).
        #[error("graph `{graph}` runs as {parts} kernels, so it has no single {what}: use `ExecutionPlan::parts()`")]
        Partitioned {
            /// The graph.
            graph: String,
            /// How many parts it has.
            parts: usize,
            /// What was asked (`json`).
            what: &'static str,
        },
        /// [`crate::backend::ExecutionPlan::select_in`] of a part the plan does not have.
        #[error("part #{index} was asked for, but the plan has {count} parts")]
        PartIndex {
            /// The part asked for.
            index: usize,
            /// Parts the plan has.
            count: usize,
        },
        /// A graph that cannot be padded, or a call its class plan cannot serve
        /// ([`crate::backend::PaddedPlan`]).
        #[error("{0}")]
        Padding(Box<crate::ir::PadError>),
        /// The graph given to build or load a plan breaks a rule ([`crate::Graph::validate`]).
        /// Converted into [`crate::Error`], this is [`crate::Error::Graph`].
        #[error("{0}")]
        Graph(Box<GraphError>),
        /// A bad execution argument (a buffer's count, type, length or name). Converted into
        /// [`crate::Error`], this is [`crate::Error::Arg`].
        #[error("{0}")]
        Arg(Box<ArgError>),
    }
}

impl From<GraphError> for BackendError {
    fn from(e: GraphError) -> Self {
        BackendError::Graph(Box::new(e))
    }
}

impl From<ArgError> for BackendError {
    fn from(e: ArgError) -> Self {
        BackendError::Arg(Box::new(e))
    }
}

impl From<CudnnError> for BackendError {
    /// The backend variant of the same name and fields.
    fn from(e: CudnnError) -> Self {
        match e {
            CudnnError::LibraryMissing { library, hint } => BackendError::LibraryMissing { library, hint },
            CudnnError::UnsupportedVersion { found, oldest, newest } => {
                BackendError::UnsupportedVersion { found, oldest, newest }
            }
            CudnnError::DriverTooOld { found, needs, by } => BackendError::DriverTooOld { found, needs, by },
            CudnnError::KnownBad { version, what, reason } => BackendError::KnownBad { version, what, reason },
            CudnnError::Cudnn { call, status, descriptor, attribute, node, tensor, message } => {
                BackendError::Cudnn { call, status, descriptor, attribute, node, tensor, message }
            }
            CudnnError::Driver { call, message } => BackendError::Driver { call, message },
            CudnnError::Unsupported { node, op, reason } => BackendError::Unsupported { node, op, reason },
            CudnnError::SupportRule { node, op, rule, message, needs } => {
                BackendError::SupportRule { node, op, rule, message, needs }
            }
            CudnnError::BadValue { what, value } => BackendError::BadValue { what, value },
            CudnnError::DeviceProperties(e) => BackendError::DeviceProperties(e),
        }
    }
}

impl BackendError {
    /// A failed CUDA driver call named `call`, as the closure `map_err` takes.
    pub(crate) fn driver(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> BackendError {
        move |e| BackendError::Driver { call, message: e.to_string() }
    }
}

fn cannot_fuse_message(graph: &str, cut: &Option<Box<Cut>>) -> String {
    match cut {
        Some(cut) => format!(
            "graph `{graph}` asks for one kernel (`#[fuse(single)]` / `Fusion::Single`), but cuDNN cannot fuse {cut}; \
             drop the attribute to run it as several kernels, or split the graph there"
        ),
        None => format!("graph `{graph}`: cuDNN plans it as no set of kernels (every split was refused)"),
    }
}

fn autotune_failures(failures: &[(usize, String)]) -> String {
    failures.iter().map(|(i, e)| format!("\n  #{i}: {e}")).collect()
}

fn no_plan_message(
    graph: &str,
    nodes: &[(String, &'static str)],
    candidates: &[Candidate],
    heuristics: &[HeuristicFailure],
    not_channels_last: &[NotChannelsLast],
) -> String {
    let of = match nodes {
        [] => String::new(),
        nodes => {
            let list: Vec<String> = nodes.iter().map(|(n, op)| format!("`{n}` ({op})")).collect();
            format!(" for {}", list.join(", "))
        }
    };
    let mut s = match candidates.len() {
        0 => format!("no execution plan for graph `{graph}`{of}: heuristics proposed no engine configuration"),
        1 => {
            format!("no execution plan for graph `{graph}`{of}: cuDNN rejected the one candidate engine configuration")
        }
        n => {
            format!("no execution plan for graph `{graph}`{of}: cuDNN rejected all {n} candidate engine configurations")
        }
    };
    for c in candidates {
        s += &format!("\n  {c}");
    }
    for h in heuristics {
        s += &format!("\n  {h}");
    }
    if let Some((node, op)) = nodes.iter().find(|(_, op)| op.starts_with("reduce_")) {
        s += &format!(
            "\n  hint: cuDNN (9.10.2 to 9.28.1, measured) plans a reduction that ends no matmul or convolution only \
             over axes innermost in memory and one run of it (`{node}` ({op}) reads another layout), and a sum over rows as a matmul by \
             ones; see docs/ops.md, \"Reductions: what cuDNN plans\""
        );
    }
    if !not_channels_last.is_empty() {
        let ports: Vec<String> = not_channels_last.iter().map(ToString::to_string).collect();
        s += &format!(
            "\n  hint: cuDNN's fused convolution engines want channels-last (NHWC) ports, and {} not: {}; \
             declare {} `channels_last` (`GraphBuilder::set_channels_last`)",
            if ports.len() == 1 { "this one is" } else { "these are" },
            ports.join(", "),
            if ports.len() == 1 { "it" } else { "them" },
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use cudarc::cudnn::sys;

    use super::*;
    use crate::backend::{CandidateState, HeuristicMode, Rejection};
    use crate::cudnn::Status;

    #[test]
    fn errors_stay_small() {
        // Returned by every backend call: keep it within clippy's `result_large_err` bound.
        assert!(std::mem::size_of::<BackendError>() <= 128, "{}", std::mem::size_of::<BackendError>());
    }

    #[test]
    fn cudnn_errors_name_call_status_descriptor_attribute_node_and_message() {
        let e = BackendError::Cudnn {
            call: "cudnnBackendFinalize",
            status: Status::from_sys(sys::cudnnStatus_t::CUDNN_STATUS_BAD_PARAM),
            descriptor: "CUDNN_BACKEND_TENSOR_DESCRIPTOR",
            attribute: Some(sys::cudnnBackendAttributeName_t::CUDNN_ATTR_TENSOR_STRIDES),
            node: Some("matmul_0".into()),
            tensor: Some("a".into()),
            message: "CUDNN_BACKEND_TENSOR_DESCRIPTOR: Check and Set CUDNN_ATTR_TENSOR_STRIDES\n".into(),
        };
        assert_eq!(
            e.to_string(),
            "cuDNN cudnnBackendFinalize failed with CUDNN_STATUS_BAD_PARAM (2000) on CUDNN_BACKEND_TENSOR_DESCRIPTOR \
             (CUDNN_ATTR_TENSOR_STRIDES) while lowering node `matmul_0`, tensor `a`: CUDNN_BACKEND_TENSOR_DESCRIPTOR: \
             Check and Set CUDNN_ATTR_TENSOR_STRIDES"
        );
        let e = BackendError::LibraryMissing { library: "libcudnn.so.9", hint: "install it" };
        assert_eq!(e.to_string(), "libcudnn.so.9 could not be loaded: install it");
        let wrapped: crate::Error = e.into();
        assert!(matches!(wrapped, crate::Error::Backend(BackendError::LibraryMissing { .. })));
        // A graph or argument error the backend met is the aggregate's own variant, as if the
        // caller had met it.
        let arg = ArgError::Unexpected { graph: "g".into(), tensor: "t".into() };
        let wrapped: crate::Error = BackendError::from(arg.clone()).into();
        assert!(matches!(&wrapped, crate::Error::Arg(a) if *a == arg), "{wrapped:?}");
    }

    #[test]
    fn no_plan_lists_every_candidate_and_failed_mode() {
        let rejected = |index, r| Candidate {
            index,
            mode: Some(HeuristicMode::A),
            engine_id: Some(index as i64 + 10),
            knobs: Vec::new(),
            numerical_notes: Vec::new(),
            behavior_notes: Vec::new(),
            workspace_bytes: None,
            shared_memory_bytes: None,
            state: CandidateState::Rejected(r),
        };
        let e = BackendError::NoPlan {
            graph: "g".into(),
            nodes: Vec::new(),
            candidates: vec![
                rejected(0, Rejection::Workspace { required: 512, limit: 0 }),
                rejected(1, Rejection::Duplicate { of: 0 }),
            ],
            heuristics: vec![HeuristicFailure {
                mode: HeuristicMode::B,
                reason: Rejection::Other { message: "not available".into() },
            }],
            not_channels_last: Vec::new(),
        };
        assert_eq!(
            e.to_string(),
            "no execution plan for graph `g`: cuDNN rejected all 2 candidate engine configurations\n  \
             #0 engine 10 (mode A): rejected: needs 512 bytes of workspace, over the limit of 0\n  \
             #1 engine 11 (mode A): rejected: same engine and knobs as candidate #0\n  \
             heuristics mode B failed: not available"
        );
    }

    #[test]
    fn no_plan_hints_at_convolution_ports_that_are_not_channels_last() {
        let port = |tensor: &str, ty: &str| NotChannelsLast {
            tensor: tensor.into(),
            type_string: ty.into(),
            node: "conv".into(),
            op: "conv_fprop",
        };
        let e = BackendError::NoPlan {
            graph: "g".into(),
            nodes: Vec::new(),
            candidates: Vec::new(),
            heuristics: Vec::new(),
            not_channels_last: vec![port("x", "f16[8, 64, 16, 16] row-major")],
        };
        assert_eq!(
            e.to_string(),
            "no execution plan for graph `g`: heuristics proposed no engine configuration\n  \
             hint: cuDNN's fused convolution engines want channels-last (NHWC) ports, and this one is not: \
             `x` (f16[8, 64, 16, 16] row-major) of node `conv` (conv_fprop); declare it `channels_last` \
             (`GraphBuilder::set_channels_last`)"
        );
        let BackendError::NoPlan { mut not_channels_last, graph, nodes, candidates, heuristics } = e else {
            unreachable!()
        };
        not_channels_last.push(port("w", "f16[32, 64, 3, 3] order [1, 0, 2, 3]"));
        let e = BackendError::NoPlan { graph, nodes, candidates, heuristics, not_channels_last };
        assert!(
            e.to_string()
                .contains("and these are not: `x` (f16[8, 64, 16, 16] row-major) of node `conv` (conv_fprop), `w`"),
            "{e}"
        );
        assert!(e.to_string().ends_with("declare them `channels_last` (`GraphBuilder::set_channels_last`)"), "{e}");
    }
}
