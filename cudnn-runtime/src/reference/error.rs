//! [`ArgError`]: a wrong argument to an executed graph, raised first by the CPU reference engine
//! (and by the GPU backend above it for the same mistakes).

use crate::ir::{GraphError, MemoryLayout};
use crate::shape_class::ClassError;
use crate::DataType;

/// A wrong argument to an executed graph (reference or GPU).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ArgError {
    /// A buffer whose length does not fit the tensor's storage: a host buffer of another length
    /// than the storage span, or a device buffer shorter than it, or than a packed attention
    /// tensor's bounded tokens ([`crate::Graph::storage_needs`]) (a longer device buffer is
    /// accepted: framework arenas hand out larger blocks; only the span is read or written).
    #[error(
        "tensor `{tensor}` needs {expected} elements ({dims:?} {}) but its buffer has {found}",
        MemoryLayout::of(.dims, .strides)
    )]
    Length {
        /// The tensor.
        tensor: String,
        /// Elements needed.
        expected: usize,
        /// Elements given.
        found: usize,
        /// Its dims.
        dims: Vec<i64>,
        /// Its strides.
        strides: Vec<i64>,
    },
    /// A buffer of another element type.
    #[error("tensor `{tensor}` is {expected} but its buffer holds {found}")]
    DType {
        /// The tensor.
        tensor: String,
        /// The tensor's type.
        expected: DataType,
        /// The buffer's type.
        found: DataType,
    },
    /// A `bool` tensor's device buffer of one `bool` per element: cuDNN reads and writes packed
    /// bits.
    #[error(
        "tensor `{tensor}` is bool, which cuDNN stores as packed bits (8 per byte, the lowest bit first); \
         give it a buffer of `Bits` (`Bits::pack`/`Bits::unpack` convert) with `DeviceBuffer::bits_input` or \
         `DeviceBuffer::bits_output`, not one `bool` per element"
    )]
    UnpackedBool {
        /// The tensor.
        tensor: String,
    },
    /// A host scalar ([`crate::Tensor::host_scalar`]) given a device buffer, or a tensor in
    /// device memory given a host scalar.
    #[error(
        "tensor `{tensor}` {}",
        if *.host_scalar {
            "is a host scalar supplied by value at execute: give it `DeviceBuffer::host_scalar(&HostScalar::new(data_type, value))`, not a device buffer"
        } else {
            "is in device memory: give it a device buffer, not a host scalar"
        }
    )]
    HostScalar {
        /// The tensor.
        tensor: String,
        /// Whether the tensor is a host scalar (and was given a device buffer).
        host_scalar: bool,
    },
    /// An input the graph does not have, or given twice.
    #[error("`{tensor}` is not an input of graph `{graph}`, or is given twice")]
    Unexpected {
        /// The graph.
        graph: String,
        /// The name given.
        tensor: String,
    },
    /// An input not given.
    #[error("input `{tensor}` of graph `{graph}` is missing")]
    Missing {
        /// The graph.
        graph: String,
        /// The input.
        tensor: String,
    },
    /// A graph given to an engine that breaks a rule (a `Graph` made or edited by hand).
    #[error("graph `{graph}` cannot run: {source}")]
    Graph {
        /// The graph.
        graph: String,
        /// The rule it breaks.
        source: Box<GraphError>,
    },
    /// Dense input arrays for [`crate::reference::run_arrays`] with one slot per tensor missing.
    #[error("graph `{graph}` has {expected} tensors, but {found} value slots were given (one per tensor)")]
    Slots {
        /// The graph.
        graph: String,
        /// Its tensor count.
        expected: usize,
        /// The slots given.
        found: usize,
    },
    /// A `dyn` dim's value outside the range its `graph!` declaration gives it
    /// (`dyn S: 1..=8192`).
    #[error("graph `{graph}`: {source}")]
    ShapeClass {
        /// The graph.
        graph: String,
        /// The dim, its value and its range.
        source: ClassError,
    },
    /// A runtime dim that breaks a shape rule (wraps the validation error).
    #[error("graph `{graph}` with {binding}: {source}")]
    Binding {
        /// The graph.
        graph: String,
        /// The runtime-dim values, `batch = 3, seq = 7`.
        binding: String,
        /// What failed.
        source: Box<GraphError>,
    },
}
