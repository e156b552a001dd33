//! cudnn-graph and the framework's cudarc share one cudarc: a framework's device slice is a
//! graph input as it is.

use cudnn_graph::backend::InputBuffer;

/// A framework's `CudaSlice` (from the cudarc the framework depends on) as a cudnn-graph input.
pub fn as_input(slice: &cudarc::driver::CudaSlice<f32>) -> &dyn InputBuffer<f32> {
    slice
}
