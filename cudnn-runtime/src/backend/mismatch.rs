//! [`PlanMismatch`]: how a plan JSON disagrees with the graph it is loaded for, as the binding
//! check (`binding.rs`) finds it and [`BackendError::PlanMismatch`](super::BackendError::PlanMismatch)
//! carries it.

/// How a plan JSON disagrees with the graph it is loaded for (or why it is not one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanMismatch {
    /// Not a cuDNN execution-plan JSON of the layout cuDNN 9 writes.
    #[error("it is not a cuDNN execution-plan JSON: {0}")]
    Malformed(String),
    /// A partitioned plan's parts that do not partition the graph.
    #[error("its parts do not partition the graph: {0}")]
    Partition(String),
    /// Made by another cuDNN.
    #[error("it was made by cuDNN {plan}, but this context runs cuDNN {runtime}")]
    CudnnVersion {
        /// The plan's `cudnnVersion`.
        plan: i64,
        /// The loaded cuDNN.
        runtime: usize,
    },
    /// Compiled for another GPU architecture.
    #[error("its kernels were compiled for sm {plan}, but this context targets sm {runtime}")]
    Sm {
        /// The plan's SM (its `smVersion` / 10).
        plan: i64,
        /// The context's.
        runtime: u32,
    },
    /// A tensor the plan describes twice.
    #[error("it describes tensor `{name}` twice")]
    DuplicateTensor {
        /// The tensor's name in the plan (its uid).
        name: String,
    },
    /// A tensor the graph's lowering does not describe.
    #[error("it describes a tensor `{name}` that the graph does not have (the graph's tensors have uids {graph:?})")]
    UnknownTensor {
        /// The tensor's name in the plan.
        name: String,
        /// The uids the lowering describes.
        graph: Vec<i64>,
    },
    /// A tensor of the graph the plan does not describe.
    #[error("it does not describe tensor `{tensor}` (uid {uid})")]
    MissingTensor {
        /// The uid.
        uid: i64,
        /// The graph's name for it.
        tensor: String,
    },
    /// A tensor described differently.
    #[error("tensor `{tensor}` (uid {uid}) has {field} {plan} in the plan but {graph} in the graph")]
    Tensor {
        /// The uid.
        uid: i64,
        /// The graph's name for it.
        tensor: String,
        /// Which property: `dims`, `strides`, `data type`, `virtual`, `by value`, `alignment`,
        /// `vector count`, `vector dim`, `reordering`.
        field: &'static str,
        /// The plan's value.
        plan: String,
        /// The graph's.
        graph: String,
    },
    /// A node naming something that is neither a tensor of the plan nor an enum.
    #[error("its node #{node} (`{operation}`) refers to `{name}`, which is no tensor of the plan")]
    DanglingReference {
        /// The node's index in the plan.
        node: usize,
        /// Its operation.
        operation: String,
        /// The name.
        name: String,
    },
    /// Operations that are not the graph's.
    #[error("its operations are {plan:?}, but the graph lowers to {graph:?} (operation kind, tensor uids)")]
    Operations {
        /// The plan's, sorted.
        plan: Vec<(String, Vec<i64>)>,
        /// The graph's, sorted.
        graph: Vec<(String, Vec<i64>)>,
    },
    /// A kernel entry without its name or code.
    #[error("kernel {index} of its engine has no text `{field}`")]
    Kernel {
        /// The entry's index in `engine.payload.kernels`.
        index: usize,
        /// The missing field: `kernelName` or `cubin`.
        field: &'static str,
    },
    /// More kernels than cuDNN writes for a plan of this kind, which cuDNN would crash on
    /// reading (`backend::binding`'s module docs).
    #[error("its engine lists {count} kernels, but a {finalize_mode} plan has at most {most} (cuDNN 9.19 crashes reading more)")]
    Kernels {
        /// The operation graph's `finalizeMode`.
        finalize_mode: String,
        /// The kernels listed.
        count: usize,
        /// The most cuDNN writes for this kind of plan.
        most: usize,
    },
}
