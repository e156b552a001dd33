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
    #[error("graph `{graph}`, input `{port}`: the tensor is on {found}, the graph runs on {expected} (where its other inputs are)")]
    Device {
        /// The graph.
        graph: String,
        /// The port.
        port: String,
        /// The device the graph runs on (its first input's that is not the CPU).
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
    /// A host scalar port (`eps: f32[1, 1] host`) given a tensor on a device: its value is read
    /// on the host when the work is enqueued, and reading a device tensor would wait for the device.
    #[error(
        "graph `{graph}`, input `{port}` is a host scalar: give it a CPU tensor (`Tensor::new(1e-5f32, &Device::Cpu)`), \
         the tensor is on {found}"
    )]
    HostScalarDevice {
        /// The graph.
        graph: String,
        /// The port.
        port: String,
        /// The tensor's device.
        found: String,
    },
    /// A host scalar port given a tensor of more than one element (or none).
    #[error(
        "graph `{graph}`, input `{port}` is a host scalar: give it one value (`Tensor::new(1e-5f32, &Device::Cpu)`), \
         the tensor is {found:?}"
    )]
    HostScalarShape {
        /// The graph.
        graph: String,
        /// The port.
        port: String,
        /// The tensor's dims.
        found: Vec<usize>,
    },
    /// A backward graph input that is neither an input nor an output of the forward graph, nor
    /// `d_<output>` ([`crate::Differentiable`] pairs ports by name).
    #[error(
        "graph `{backward}` (the backward of `{forward}`), input `{port}`: `{forward}` has no input or output so \
         named, and it is not `d_<output>`; name it after one of {ports}"
    )]
    BackwardInput {
        /// The forward graph.
        forward: String,
        /// The backward graph.
        backward: String,
        /// The backward input.
        port: String,
        /// The forward graph's inputs and outputs, comma-separated.
        ports: String,
    },
    /// A backward graph output that is not `d_<input>` of a forward input that can have a
    /// gradient (host scalars cannot).
    #[error(
        "graph `{backward}` (the backward of `{forward}`), output `{port}`: not the gradient of an input of \
         `{forward}`; name it `d_<input>` for one of {inputs}"
    )]
    BackwardOutput {
        /// The forward graph.
        forward: String,
        /// The backward graph.
        backward: String,
        /// The backward output.
        port: String,
        /// The forward inputs that can have a gradient, comma-separated.
        inputs: String,
    },
    /// A backward graph that takes no `d_<output>`: no forward output has a gradient.
    #[error(
        "graph `{backward}` (the backward of `{forward}`) takes no gradient of an output of `{forward}`: \
         give it an input `d_<output>` for one of {expected}"
    )]
    NoOutputGradient {
        /// The forward graph.
        forward: String,
        /// The backward graph.
        backward: String,
        /// The forward outputs, comma-separated.
        expected: String,
    },
    /// A backward graph that takes the gradients of two forward outputs: candle's custom ops
    /// return one tensor, so one output of a forward graph can have a gradient.
    #[error(
        "graph `{backward}` (the backward of `{forward}`) takes the gradients of outputs `{first}` and `{second}`: \
         candle's custom ops return one tensor, so one output can have a gradient; return the other from a graph of its own"
    )]
    GradientOutputs {
        /// The forward graph.
        forward: String,
        /// The backward graph.
        backward: String,
        /// The first differentiated output.
        first: String,
        /// Another one.
        second: String,
    },
    /// A gradient (`d_<input>`) whose dims or element type are not its input's.
    #[error(
        "graph `{backward}` (the backward of `{forward}`), output `{port}`: a gradient must be what its input is, \
         {expected}; it is {found}"
    )]
    GradientPort {
        /// The forward graph.
        forward: String,
        /// The backward graph.
        backward: String,
        /// The backward output.
        port: String,
        /// The input's element type and dims.
        expected: String,
        /// The gradient's.
        found: String,
    },
    /// More forward inputs with gradients than a candle custom op takes.
    #[error(
        "graph `{backward}` (the backward of `{forward}`) gives gradients of {found} inputs ({inputs}); candle's custom \
         ops take at most {limit} tensors (`CustomOp3`): split the forward graph, or leave gradients out of the backward"
    )]
    TooManyGradients {
        /// The forward graph.
        forward: String,
        /// The backward graph.
        backward: String,
        /// The inputs with gradients, comma-separated.
        inputs: String,
        /// How many.
        found: usize,
        /// candle's limit.
        limit: usize,
    },
    /// The candle op of a `Runner::run_with_backward` call asked for its forward output twice, or
    /// on another device than the graph ran on; the op hands over the output the graph computed,
    /// once.
    #[error(
        "graph `{graph}`: its candle op hands over the output of its one forward run once, on the device it ran on; \
         run the graph again with `Runner::run_with_backward`"
    )]
    ForwardReplay {
        /// The forward graph.
        graph: String,
    },
    /// A paged K/V cache's append or page table refused its batch
    /// ([`PagedKvCache`](crate::PagedKvCache)): a dead or repeated sequence, too few pages, a
    /// sequence too long for the table; nothing changed.
    #[error("paged K/V cache: {0}")]
    Append(#[from] cudnn_graph::serving::AppendError),
    /// A tensor given to a paged K/V cache that is not what its pools take.
    #[error("paged K/V cache, `{name}`: expected {expected}, found {found}")]
    PagedInput {
        /// Which tensor (`k`, `v`, or an operand of the append).
        name: &'static str,
        /// What the cache takes.
        expected: String,
        /// What it was given.
        found: String,
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
