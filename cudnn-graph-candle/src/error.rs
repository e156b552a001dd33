//! What goes wrong when a graph meets candle tensors. Every error names the graph and the port;
//! [`From<AdapterError> for candle_core::Error`] carries the message into candle.

use candle_core::DType;
use cudnn_graph::DataType;

/// A candle tensor that does not fit a graph port, or a failure of the graph itself.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    /// Another number of input tensors than the graph has inputs.
    #[error("graph `{graph}` takes {expected} inputs ({ports}), got {found} tensors")]
    InputCount {
        /// The graph.
        graph: String,
        /// Its inputs.
        expected: usize,
        /// Their names, comma-separated.
        ports: String,
        /// Tensors given.
        found: usize,
    },
    /// A tensor whose dims are not the port's.
    #[error("graph `{graph}`, input `{port}`: the port is {expected:?}, the tensor is {found:?}")]
    Shape {
        /// The graph.
        graph: String,
        /// The port.
        port: String,
        /// The port's dims.
        expected: Vec<i64>,
        /// The tensor's dims.
        found: Vec<usize>,
    },
    /// A tensor of another element type than the port's.
    #[error("graph `{graph}`, input `{port}`: the port is {expected}, the tensor is {}", found.as_str())]
    DType {
        /// The graph.
        graph: String,
        /// The port.
        port: String,
        /// The port's element type.
        expected: DataType,
        /// The tensor's.
        found: DType,
    },
    /// A port whose element type candle has no tensors of (`bool`, `i8`, fp8 e5m2).
    #[error("graph `{graph}`, port `{port}`: candle has no tensors of {data_type}")]
    UnsupportedDType {
        /// The graph.
        graph: String,
        /// The port.
        port: String,
        /// The port's element type.
        data_type: DataType,
    },
    /// A tensor laid out with other strides than the port's (a transposed or sliced view): the
    /// adapter never copies silently.
    #[error(
        "graph `{graph}`, input `{port}`: the port's strides are {expected:?}, the tensor's {found:?}; \
         pass `tensor.contiguous()?` (a copy you choose) or declare the port's layout to match"
    )]
    Layout {
        /// The graph.
        graph: String,
        /// The port.
        port: String,
        /// The port's strides, in elements.
        expected: Vec<i64>,
        /// The tensor's strides, in elements.
        found: Vec<usize>,
    },
    /// An output port whose strides are not a permutation of packed strides: candle cannot hold it
    /// without a copy.
    #[error("graph `{graph}`, output `{port}`: strides {strides:?} over dims {dims:?} leave gaps; candle tensors are packed")]
    UnpackedOutput {
        /// The graph.
        graph: String,
        /// The port.
        port: String,
        /// Its dims.
        dims: Vec<i64>,
        /// Its strides.
        strides: Vec<i64>,
    },
    /// Inputs on different devices.
    #[error("graph `{graph}`, input `{port}`: the tensor is on {found}, the graph's first input on {expected}")]
    Device {
        /// The graph.
        graph: String,
        /// The port.
        port: String,
        /// The first input's device.
        expected: String,
        /// This one's.
        found: String,
    },
    /// A tensor on a device this build cannot run graphs on (Metal; CUDA without the `cuda`
    /// feature).
    #[error("graph `{graph}`: tensors on {device} are not supported{hint}")]
    UnsupportedDevice {
        /// The graph.
        graph: String,
        /// The device.
        device: String,
        /// How to get support, if there is a way.
        hint: &'static str,
    },
    /// A tensor whose storage is shorter than its layout claims (a candle invariant broken).
    #[error(
        "graph `{graph}`, input `{port}`: the tensor's storage holds {held} elements, its layout reaches {needed}"
    )]
    Storage {
        /// The graph.
        graph: String,
        /// The port.
        port: String,
        /// Elements the storage holds.
        held: usize,
        /// Elements the layout reaches.
        needed: usize,
    },
    /// The graph failed: building its IR, planning it, executing it.
    #[error(transparent)]
    Graph(#[from] cudnn_graph::Error),
}

impl From<AdapterError> for candle_core::Error {
    fn from(e: AdapterError) -> Self {
        candle_core::Error::wrap(e)
    }
}

impl From<cudnn_graph::ArgError> for AdapterError {
    fn from(e: cudnn_graph::ArgError) -> Self {
        AdapterError::Graph(e.into())
    }
}
