//! Device buffers for [`ExecutionPlan::execute`](super::ExecutionPlan::execute): [`DeviceBuffer`],
//! a type-erased, borrow-checked input or output of any element type, over cudarc's
//! `CudaSlice`, `CudaView` and `CudaViewMut` ([`InputBuffer`], [`OutputBuffer`]).

use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr, DeviceSlice,
    SyncOnDrop,
};

use super::variant::ScalarStorage;
use crate::{Bits, DataType, Element, Fp8E4M3, Fp8E5M2};

// SAFETY: both are `#[repr(transparent)]` over `u8`, valid for every bit pattern, and hold no
// pointers: exactly what device memory of `u8` holds.
unsafe impl DeviceRepr for Fp8E4M3 {}
// SAFETY: as for `Fp8E4M3`.
unsafe impl DeviceRepr for Fp8E5M2 {}
// SAFETY: as for `Fp8E4M3`.
unsafe impl DeviceRepr for Bits {}

pub(super) mod erased {
    use super::*;

    /// A device buffer that can be read on a stream.
    pub trait ReadPtr {
        fn elements(&self) -> usize;
        fn context(&self) -> &Arc<CudaContext>;
        fn read_ptr<'s>(&'s self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>);
    }

    /// A device buffer that can be written on a stream.
    pub trait WritePtr {
        fn elements(&self) -> usize;
        fn context(&self) -> &Arc<CudaContext>;
        fn write_ptr<'s>(&'s mut self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>);
    }

    /// Implements [`ReadPtr`] (and [`WritePtr`]) for cudarc's device memory types: one body, as
    /// each only forwards to cudarc's `DevicePtr`/`DevicePtrMut`.
    macro_rules! device_ptrs {
        ($trait:ident, $method:ident, $self_:ty, $device_ptr:ident: $($t:ty),*) => {$(
            impl<T> $trait for $t {
                fn elements(&self) -> usize {
                    self.len()
                }
                fn context(&self) -> &Arc<CudaContext> {
                    DeviceSlice::stream(self).context()
                }
                fn $method<'s>(self: $self_, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>) {
                    self.$device_ptr(stream)
                }
            }
        )*};
    }

    device_ptrs!(ReadPtr, read_ptr, &'s Self, device_ptr: CudaSlice<T>, CudaView<'_, T>, CudaViewMut<'_, T>);
    device_ptrs!(WritePtr, write_ptr, &'s mut Self, device_ptr_mut: CudaSlice<T>, CudaViewMut<'_, T>);
}

/// Device memory a graph input can be read from: `CudaSlice<T>`, `CudaView<T>`, `CudaViewMut<T>`.
pub trait InputBuffer<T>: erased::ReadPtr {}
impl<T> InputBuffer<T> for CudaSlice<T> {}
impl<T> InputBuffer<T> for CudaView<'_, T> {}
impl<T> InputBuffer<T> for CudaViewMut<'_, T> {}

/// Device memory a graph output can be written to: `CudaSlice<T>`, `CudaViewMut<T>`.
pub trait OutputBuffer<T>: erased::WritePtr {}
impl<T> OutputBuffer<T> for CudaSlice<T> {}
impl<T> OutputBuffer<T> for CudaViewMut<'_, T> {}

pub(super) enum Access<'a> {
    Read(&'a dyn erased::ReadPtr),
    Write(&'a mut dyn erased::WritePtr),
    Host(&'a HostScalar),
}

/// The value of a host scalar input ([`crate::Tensor::host_scalar`]: a by-value scalar supplied
/// at execute, such as cudnn-frontend's epsilon), stored in its data type in host memory, where
/// cuDNN reads it when the work is enqueued. Pass it with [`DeviceBuffer::host_scalar`].
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::backend::HostScalar;
/// use cudnn_graph::DataType;
/// let eps = HostScalar::new(DataType::F32, 1e-5);
/// assert_eq!(eps.bytes(), &1e-5f32.to_ne_bytes());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostScalar {
    data_type: DataType,
    value: f64,
    storage: ScalarStorage,
}

impl HostScalar {
    /// `value` stored as `data_type` (rounded as that type stores it).
    pub fn new(data_type: DataType, value: f64) -> Self {
        HostScalar { data_type, value, storage: ScalarStorage::new(data_type, value) }
    }

    /// Its data type.
    pub fn data_type(&self) -> DataType {
        self.data_type
    }

    /// The value as given.
    pub fn value(&self) -> f64 {
        self.value
    }

    /// The bytes cuDNN reads (native endian, `data_type.size_bytes()` long).
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes(self.data_type.size_bytes())
    }

    /// The host address cuDNN is given ([`super::ExecutionPlan::execute_raw`] takes it as the
    /// tensor's pointer).
    pub fn address(&self) -> u64 {
        self.storage.ptr() as u64
    }
}

/// One graph input or output on the device, its element type and length erased (and checked
/// against the graph at execute).
pub struct DeviceBuffer<'a> {
    pub(super) access: Access<'a>,
    pub(super) data_type: DataType,
    /// Elements held (8 per [`Bits`]).
    pub(super) len: usize,
    /// Booleans as packed [`Bits`], as cuDNN stores them.
    pub(super) packed: bool,
}

impl std::fmt::Debug for DeviceBuffer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.access {
            Access::Read(_) => "input",
            Access::Write(_) => "output",
            Access::Host(_) => "host_scalar",
        };
        write!(f, "DeviceBuffer::{kind}({}[{}])", self.data_type, self.len)
    }
}

impl<'a> DeviceBuffer<'a> {
    /// A buffer that is read (a graph input).
    pub fn input<T: Element + DeviceRepr, S: InputBuffer<T>>(buffer: &'a S) -> Self {
        DeviceBuffer { len: buffer.elements(), access: Access::Read(buffer), data_type: T::DTYPE, packed: false }
    }

    /// A buffer that is written (a graph output).
    pub fn output<T: Element + DeviceRepr, S: OutputBuffer<T>>(buffer: &'a mut S) -> Self {
        DeviceBuffer { len: buffer.elements(), access: Access::Write(buffer), data_type: T::DTYPE, packed: false }
    }

    /// [`DeviceBuffer::input`] for a buffer behind a trait object (the typed argument structs
    /// that `graph!` generates hold these).
    pub fn input_dyn<T: Element + DeviceRepr>(buffer: &'a dyn InputBuffer<T>) -> Self {
        DeviceBuffer { len: buffer.elements(), access: Access::Read(buffer), data_type: T::DTYPE, packed: false }
    }

    /// [`DeviceBuffer::output`] for a buffer behind a trait object.
    pub fn output_dyn<T: Element + DeviceRepr>(buffer: &'a mut dyn OutputBuffer<T>) -> Self {
        DeviceBuffer { len: buffer.elements(), access: Access::Write(buffer), data_type: T::DTYPE, packed: false }
    }

    /// A host scalar input's value ([`crate::Tensor::host_scalar`]), passed by value: cuDNN reads
    /// it from host memory when the work is enqueued, so it may change between executes.
    pub fn host_scalar(value: &'a HostScalar) -> Self {
        DeviceBuffer { len: 1, access: Access::Host(value), data_type: value.data_type, packed: false }
    }

    /// A `bool` graph input's buffer of packed [`Bits`] (8 elements each).
    pub fn bits_input<S: InputBuffer<Bits>>(buffer: &'a S) -> Self {
        DeviceBuffer {
            len: 8 * buffer.elements(),
            access: Access::Read(buffer),
            data_type: DataType::Bool,
            packed: true,
        }
    }

    /// A `bool` graph output's buffer of packed [`Bits`] (8 elements each).
    pub fn bits_output<S: OutputBuffer<Bits>>(buffer: &'a mut S) -> Self {
        let len = 8 * buffer.elements();
        DeviceBuffer { len, access: Access::Write(buffer), data_type: DataType::Bool, packed: true }
    }

    /// [`DeviceBuffer::bits_input`] behind a trait object.
    pub fn bits_input_dyn(buffer: &'a dyn InputBuffer<Bits>) -> Self {
        DeviceBuffer {
            len: 8 * buffer.elements(),
            access: Access::Read(buffer),
            data_type: DataType::Bool,
            packed: true,
        }
    }

    /// [`DeviceBuffer::bits_output`] behind a trait object.
    pub fn bits_output_dyn(buffer: &'a mut dyn OutputBuffer<Bits>) -> Self {
        let len = 8 * buffer.elements();
        DeviceBuffer { len, access: Access::Write(buffer), data_type: DataType::Bool, packed: true }
    }

    /// The element type.
    pub fn data_type(&self) -> DataType {
        self.data_type
    }

    /// Elements held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The CUDA context of device memory; `None` for a host scalar.
    pub(super) fn context(&self) -> Option<&Arc<CudaContext>> {
        match &self.access {
            Access::Read(b) => Some(b.context()),
            Access::Write(b) => Some(b.context()),
            Access::Host(_) => None,
        }
    }

    /// Whether it is a host scalar's value.
    pub(super) fn is_host(&self) -> bool {
        matches!(self.access, Access::Host(_))
    }

    pub(super) fn pointer<'s>(&'s mut self, stream: &'s CudaStream) -> (u64, SyncOnDrop<'s>) {
        match &mut self.access {
            Access::Read(b) => b.read_ptr(stream),
            Access::Write(b) => b.write_ptr(stream),
            // Host memory cuDNN reads while enqueuing: no stream ordering to record.
            Access::Host(v) => (v.address(), SyncOnDrop::Record(None)),
        }
    }
}
