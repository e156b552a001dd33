//! [`CudnnError`]: how a cuDNN call of this layer fails — the library missing or too old, a
//! status other than success (with `cudnnGetLastErrorString`, the descriptor kind, the attribute,
//! and the graph node and tensor being lowered), a CUDA driver failure, or a node that has no
//! lowering. [`crate::backend::BackendError`] converts from it variant for variant, so a user
//! matching `BackendError::Cudnn { .. }` sees every status of every layer.

use std::fmt;

use cudarc::cudnn::sys;

/// A `cudnnStatus_t` returned by cuDNN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(sys::cudnnStatus_t);

impl Status {
    pub(crate) fn from_sys(status: sys::cudnnStatus_t) -> Self {
        Status(status)
    }

    /// The numeric value (`3000` is `CUDNN_STATUS_NOT_SUPPORTED`).
    pub fn code(&self) -> u32 {
        self.0 as u32
    }

    /// The name, `CUDNN_STATUS_...`.
    pub fn name(&self) -> String {
        format!("{:?}", self.0)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} ({})", self.0, self.code())
    }
}

/// Defines an error enum (deriving `Debug` and `thiserror::Error`) holding the variants of a failed
/// call of this layer — loading, a cuDNN status, a CUDA-driver call, a node without a lowering
/// or breaking a support rule, a value out of range — followed by the variants given. Both
/// [`CudnnError`] and `backend::BackendError` are made with it, so each shared variant is written
/// once and a user matching `BackendError::Cudnn { .. }` sees the same fields as this layer.
macro_rules! with_call_failures {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($extra:tt)* }) => {
        $(#[$meta])*
        #[derive(Debug, thiserror::Error)]
        $vis enum $name {
            /// A shared library could not be opened. cudarc would panic on first use; this crate checks
            /// first and reports it instead.
            #[error("{library} could not be loaded: {hint}")]
            LibraryMissing {
                /// The library (`libcudnn.so.9`, `libcuda.so.1`).
                library: &'static str,
                /// What to do about it.
                hint: &'static str,
            },
            /// The loaded cuDNN is outside the range this layer supports
            /// ([`crate::backend::support::SUPPORTED`]).
            #[error(
                "the loaded cuDNN is version {}; cudnn-graph supports {} to {}",
                $crate::cudnn::version_string(*.found),
                $crate::cudnn::version_string(*.oldest),
                $crate::cudnn::version_string(*.newest)
            )]
            UnsupportedVersion {
                /// `cudnnGetVersion()` of the loaded library (`91900` is 9.19.0).
                found: usize,
                /// The oldest supported version, same encoding.
                oldest: usize,
                /// The newest supported (measured) version, same encoding.
                newest: usize,
            },
            /// The loaded CUDA driver is older than what this crate's driver bindings or the loaded
            /// cuDNN need ([`crate::backend::support::check_driver`]).
            #[error(
                "the CUDA driver is version {} (cuDriverGetVersion {found}); {by} needs {} or newer: \
                 update the NVIDIA driver",
                $crate::cudnn::support::cuda_string(*.found),
                $crate::cudnn::support::cuda_string(*.needs)
            )]
            DriverTooOld {
                /// `cuDriverGetVersion()` of the loaded libcuda (`12040` is CUDA 12.4).
                found: i32,
                /// The oldest driver that would do, same encoding.
                needs: i32,
                /// What needs it.
                by: String,
            },
            /// The loaded cuDNN is known to crash or compute wrongly for this graph
            /// ([`crate::backend::support::KNOWN_BAD`]): refused by name instead.
            #[error("{what}: {reason}")]
            KnownBad {
                /// `cudnnGetVersion()` of the loaded library.
                version: usize,
                /// What was asked (`deviceless heuristics for node `mm``).
                what: String,
                /// The known fault and the version measured without it.
                reason: String,
            },
            /// A device-properties document that the loaded cuDNN cannot read and that cannot be
            /// completed for it (see [`crate::backend::devprop`]).
            #[error("{0}")]
            DeviceProperties(#[from] $crate::cudnn::DevicePropertiesError),
            /// A cuDNN call returned an error status.
            #[error("{}", $crate::cudnn::cudnn_message(.call, .status, .descriptor, .attribute, .node, .tensor, .message))]
            Cudnn {
                /// The function (`cudnnBackendFinalize`, `cudnnBackendSetAttribute`, ...).
                call: &'static str,
                /// What it returned.
                status: $crate::cudnn::Status,
                /// The kind of descriptor it was called on (`CUDNN_BACKEND_TENSOR_DESCRIPTOR`), or the
                /// object (`cudnnHandle_t`).
                descriptor: &'static str,
                /// The attribute being set or read, if any.
                attribute: Option<::cudarc::cudnn::sys::cudnnBackendAttributeName_t>,
                /// The graph node being lowered, if any.
                node: Option<String>,
                /// The graph tensor being lowered, if any.
                tensor: Option<String>,
                /// `cudnnGetLastErrorString` right after the failure (may be empty).
                message: String,
            },
            /// A CUDA driver call (through cudarc) failed.
            #[error("CUDA {call} failed: {message}")]
            Driver {
                /// What was being done (`bind the stream's context to this thread`).
                call: &'static str,
                /// cudarc's description of the error.
                message: String,
            },
            /// A node that has no cuDNN lowering in this shape or configuration.
            #[error("node `{node}` ({op}) cannot be lowered to cuDNN: {reason}")]
            Unsupported {
                /// The node.
                node: String,
                /// Its op's call name.
                op: &'static str,
                /// Why.
                reason: String,
            },
            /// A node breaks a support rule of cuDNN that depends on the GPU or the loaded cuDNN
            /// version (rules that depend only on shapes are the shape rule's, at compile time). Says
            /// which rule, so it is not a bare "no plan".
            #[error("node `{node}` ({op}) breaks cuDNN support rule `{rule}`: {message}")]
            SupportRule {
                /// The node.
                node: String,
                /// Its op's call name.
                op: &'static str,
                /// The rule's stable id (`sdpa.sm80`, `sdpa.fused.causal`, ...).
                rule: &'static str,
                /// What the rule says and what the node or target has.
                message: String,
                /// Where only the loaded cuDNN's version refuses (a newer one lifts the rule): the
                /// capability it lacks and the version that brings it
                /// ([`capabilities`](crate::capabilities)). `None` for rules of the GPU, the shapes
                /// or the strides.
                needs: Option<crate::capabilities::Missing>,
            },
            /// cuDNN reported a value outside its documented range.
            #[error("cuDNN reported {what} = {value}, which is out of range")]
            BadValue {
                /// The quantity.
                what: &'static str,
                /// Its value.
                value: i64,
            },
            $($extra)*
        }
    };
}
pub(crate) use with_call_failures;

with_call_failures! {
    /// A failure of the cuDNN layer: loading, a cuDNN or CUDA-driver call, or lowering a node.
    pub enum CudnnError {}
}

/// The message of a failed cuDNN call ([`CudnnError::Cudnn`] and the backend's variant of it).
pub(crate) fn cudnn_message(
    call: &str,
    status: &Status,
    descriptor: &str,
    attribute: &Option<sys::cudnnBackendAttributeName_t>,
    node: &Option<String>,
    tensor: &Option<String>,
    message: &str,
) -> String {
    let mut s = format!("cuDNN {call} failed with {status} on {descriptor}");
    if let Some(a) = attribute {
        s += &format!(" ({a:?})");
    }
    if let Some(n) = node {
        s += &format!(" while lowering node `{n}`");
    }
    if let Some(t) = tensor {
        s += &format!(", tensor `{t}`");
    }
    if !message.is_empty() {
        s += ": ";
        s += message.trim_end();
    }
    s
}
