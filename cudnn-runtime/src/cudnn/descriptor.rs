//! [`Descriptor`]: one owned `cudnnBackendDescriptor_t` (created on construction, destroyed on
//! drop) with one typed setter and getter per attribute *type*, so the element size cuDNN reads or
//! writes always matches the Rust buffer. Every failing status becomes a
//! [`CudnnError::Cudnn`] naming the call, the descriptor kind, the attribute, the graph node and
//! tensor it was made for, and `cudnnGetLastErrorString`.
//!
//! Enum-typed outputs are read into `i32`s, never into cudarc's Rust enums: those are generated
//! from a newer cuDNN, and a value the enum lacks would be undefined behaviour.

use std::ffi::c_void;
use std::ptr;

use cudarc::cudnn::sys;
use sys::cudnnBackendAttributeName_t as Attr;
use sys::cudnnBackendAttributeType_t as AttrType;
use sys::cudnnBackendDescriptorType_t as Kind;

use super::{library, CudnnError, Status};
use crate::DataType;

/// The graph node and tensor a descriptor was made for, named in its errors.
#[derive(Debug, Clone, Default)]
pub(crate) struct Label {
    pub(crate) node: Option<String>,
    pub(crate) tensor: Option<String>,
}

/// An owned cuDNN backend descriptor.
#[derive(Debug)]
pub(crate) struct Descriptor {
    raw: sys::cudnnBackendDescriptor_t,
    kind: Kind,
    label: Label,
    record: Record,
}

/// What the lowering gave a tensor or operation descriptor, noted as it is set: the lowering's
/// own account of the operation graph, against which the JSON of a plan loaded from a payload is
/// checked before cuDNN sees it (`serialize::binding`). Only tensor attributes and the tensors an
/// operation refers to are noted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Record {
    /// `CUDNN_ATTR_TENSOR_UNIQUE_ID`.
    pub(crate) uid: Option<i64>,
    /// `CUDNN_ATTR_TENSOR_DIMENSIONS`.
    pub(crate) dims: Vec<i64>,
    /// `CUDNN_ATTR_TENSOR_STRIDES`.
    pub(crate) strides: Vec<i64>,
    /// `CUDNN_ATTR_TENSOR_DATA_TYPE`.
    pub(crate) data_type: Option<DataType>,
    /// `CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT`.
    pub(crate) alignment: Option<i64>,
    /// `CUDNN_ATTR_TENSOR_IS_VIRTUAL`.
    pub(crate) is_virtual: bool,
    /// `CUDNN_ATTR_TENSOR_IS_BY_VALUE`.
    pub(crate) is_by_value: bool,
    /// The tensor descriptors set on this one (an operation's ports), as they were recorded.
    pub(crate) refs: Vec<Record>,
}

// SAFETY: a backend descriptor is a heap object owned by this value alone; cuDNN ties it to no
// thread, so moving the owner to another thread is sound. (Not `Sync`: cuDNN does not promise
// concurrent use.)
unsafe impl Send for Descriptor {}

impl Drop for Descriptor {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `cudnnBackendCreateDescriptor` and is destroyed exactly once.
        // Nothing useful can be done with a failure here.
        let _ = unsafe { sys::cudnnBackendDestroyDescriptor(self.raw) };
    }
}

/// Names of `cudnnBackendDescriptorType_t`, indexed by value (cuDNN 9.21; the values are stable).
const KIND_NAMES: [&str; 46] = [
    "CUDNN_BACKEND_POINTWISE_DESCRIPTOR",
    "CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR",
    "CUDNN_BACKEND_ENGINE_DESCRIPTOR",
    "CUDNN_BACKEND_ENGINECFG_DESCRIPTOR",
    "CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR",
    "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR",
    "CUDNN_BACKEND_INTERMEDIATE_INFO_DESCRIPTOR",
    "CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR",
    "CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR",
    "CUDNN_BACKEND_LAYOUT_INFO_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR",
    "CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR",
    "CUDNN_BACKEND_TENSOR_DESCRIPTOR",
    "CUDNN_BACKEND_MATMUL_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR",
    "CUDNN_BACKEND_REDUCTION_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR",
    "CUDNN_BACKEND_RESAMPLE_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_RESAMPLE_FWD_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_RESAMPLE_BWD_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_CONCAT_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_SIGNAL_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR",
    "CUDNN_BACKEND_RNG_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR",
    "CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_BLOCK_SCALE_QUANTIZE_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_BLOCK_SCALE_DEQUANTIZE_DESCRIPTOR",
    "CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_EXPAND_BAND_MATRIX_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_CONTRACT_BAND_MATRIX_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_MOE_GROUPED_MATMUL_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR",
    "CUDNN_BACKEND_OPERATION_SOFTMAX_DESCRIPTOR",
];

/// The name of a descriptor kind.
fn kind_name(kind: Kind) -> &'static str {
    KIND_NAMES.get(kind as usize).copied().unwrap_or("CUDNN_BACKEND_DESCRIPTOR")
}

/// The message cuDNN recorded for this thread's last failing call.
pub(crate) fn last_error_message() -> String {
    let mut buf = [0u8; 4096];
    // SAFETY: cuDNN writes at most `buf.len()` bytes, NUL-terminated, into `buf`.
    unsafe { sys::cudnnGetLastErrorString(buf.as_mut_ptr().cast(), buf.len()) };
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..len]).trim_end().to_string()
}

/// A [`CudnnError::Cudnn`] for a call that is not about one descriptor (handle creation,
/// execution).
pub(crate) fn status_error(call: &'static str, status: sys::cudnnStatus_t, object: &'static str) -> CudnnError {
    CudnnError::Cudnn {
        call,
        status: Status::from_sys(status),
        descriptor: object,
        attribute: None,
        node: None,
        tensor: None,
        message: last_error_message(),
    }
}

/// Keeps NVRTC loaded for the rest of the process once cuDNN has opened it.
///
/// cuDNN opens `libnvrtc.so.<CUDA major>` (or `libnvrtc.so`) for its runtime-compiled engines and
/// closes it when the last descriptor using it is destroyed; glibc then unloads it, and the next
/// heuristics query or plan load opens it again. Each reload reruns NVRTC's static initialisers,
/// whose allocations its finalisers never free: with cuDNN 9.19 and NVRTC 13, 146 KiB of native
/// heap and ~24 ms per reload, 8 reloads per build of a fused matmul, one per plan loaded from
/// JSON (figures and rerun command: `docs/architecture.md`, "Memory"). Reopening the copy cuDNN
/// loaded with `RTLD_NOLOAD | RTLD_NODELETE` marks it never-unload; `RTLD_NOLOAD` finds it by
/// soname, so it is the very file cuDNN found through its own RUNPATH, and loads nothing when
/// cuDNN has not opened NVRTC (then a later finalize tries again). The handle is closed at once;
/// the mark stays.
#[cfg(unix)]
fn keep_nvrtc_loaded() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static KEPT: AtomicBool = AtomicBool::new(false);
    if KEPT.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: takes no arguments; the library is loaded (a descriptor exists).
    let major = unsafe { sys::cudnnGetCudartVersion() } / 1000;
    let versioned = format!("libnvrtc.so.{major}");
    for name in [versioned.as_str(), "libnvrtc.so"] {
        let Ok(name) = std::ffi::CString::new(name) else { continue };
        // SAFETY: a NUL-terminated name; with RTLD_NOLOAD nothing is loaded (no initialiser runs),
        // only an already loaded library's reference count and flags change.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE) };
        if !handle.is_null() {
            // SAFETY: `handle` came from the `dlopen` above; RTLD_NODELETE keeps the library
            // loaded after this close.
            unsafe { libc::dlclose(handle) };
            KEPT.store(true, Ordering::Relaxed);
            tracing::debug!(library = ?name, "NVRTC kept loaded");
            return;
        }
    }
}

fn element_count(len: usize) -> i64 {
    // Slices never hold more than isize::MAX elements.
    i64::try_from(len).unwrap_or(i64::MAX)
}

impl Descriptor {
    /// Creates a descriptor of `kind`.
    pub(crate) fn new(kind: Kind) -> Result<Self, CudnnError> {
        Self::labelled(kind, Label::default())
    }

    /// Creates a descriptor of `kind` whose errors name `label`'s node and tensor.
    pub(crate) fn labelled(kind: Kind, label: Label) -> Result<Self, CudnnError> {
        library::require_cudnn()?;
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the library is loaded (checked above).
        let status = unsafe { sys::cudnnBackendCreateDescriptor(kind, &mut raw) };
        if status != sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
            let mut e = status_error("cudnnBackendCreateDescriptor", status, kind_name(kind));
            if let CudnnError::Cudnn { node, tensor, .. } = &mut e {
                *node = label.node;
                *tensor = label.tensor;
            }
            return Err(e);
        }
        Ok(Descriptor { raw, kind, label, record: Record::default() })
    }

    /// The descriptor's kind.
    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    /// The name of its kind, as cuDNN's plan JSON spells an operation
    /// (`CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR`).
    pub(crate) fn kind_name(&self) -> &'static str {
        kind_name(self.kind)
    }

    /// What was set on it (see [`Record`]).
    pub(crate) fn record(&self) -> &Record {
        &self.record
    }

    /// The raw pointer, for calls that take a descriptor (execute).
    pub(crate) fn as_raw(&self) -> sys::cudnnBackendDescriptor_t {
        self.raw
    }

    /// A [`CudnnError::Cudnn`] about this descriptor.
    pub(crate) fn error(&self, call: &'static str, status: sys::cudnnStatus_t, attr: Option<Attr>) -> CudnnError {
        CudnnError::Cudnn {
            call,
            status: Status::from_sys(status),
            descriptor: kind_name(self.kind),
            attribute: attr,
            node: self.label.node.clone(),
            tensor: self.label.tensor.clone(),
            message: last_error_message(),
        }
    }

    fn check(&self, call: &'static str, status: sys::cudnnStatus_t, attr: Option<Attr>) -> Result<(), CudnnError> {
        if status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
            Ok(())
        } else {
            Err(self.error(call, status, attr))
        }
    }

    /// Finalizes the descriptor: cuDNN validates what was set.
    pub(crate) fn finalize(&mut self) -> Result<(), CudnnError> {
        // SAFETY: `raw` is a live descriptor.
        let status = unsafe { sys::cudnnBackendFinalize(self.raw) };
        self.check("cudnnBackendFinalize", status, None)?;
        // Heuristics and plan finalize are where cuDNN opens NVRTC.
        #[cfg(unix)]
        if matches!(
            self.kind,
            Kind::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR | Kind::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR
        ) {
            keep_nvrtc_loaded();
        }
        Ok(())
    }

    /// # Safety
    /// `data` must point to `count` readable elements of the C type that `ty` denotes.
    unsafe fn set_raw(
        &mut self,
        attr: Attr,
        ty: AttrType,
        count: usize,
        data: *const c_void,
    ) -> Result<(), CudnnError> {
        // SAFETY: `raw` is live; the caller vouches for `data`.
        let status = unsafe { sys::cudnnBackendSetAttribute(self.raw, attr, ty, element_count(count), data) };
        self.check("cudnnBackendSetAttribute", status, Some(attr))
    }

    /// Reads up to `capacity` elements into `data`; returns how many cuDNN reports (which can
    /// exceed `capacity` when `capacity` is 0: a count query).
    ///
    /// # Safety
    /// `data` must point to `capacity` writable elements of the C type that `ty` denotes (or be
    /// null when `capacity` is 0).
    unsafe fn get_raw(
        &self,
        attr: Attr,
        ty: AttrType,
        capacity: usize,
        data: *mut c_void,
    ) -> Result<usize, CudnnError> {
        let mut count = 0i64;
        // SAFETY: `raw` is live, `count` is a valid out-pointer; the caller vouches for `data`.
        let status =
            unsafe { sys::cudnnBackendGetAttribute(self.raw, attr, ty, element_count(capacity), &mut count, data) };
        self.check("cudnnBackendGetAttribute", status, Some(attr))?;
        usize::try_from(count).map_err(|_| CudnnError::BadValue { what: "an attribute's element count", value: count })
    }

    /// `CUDNN_TYPE_INT64` array.
    pub(crate) fn set_i64s(&mut self, attr: Attr, values: &[i64]) -> Result<(), CudnnError> {
        // SAFETY: `values` holds `len` i64s, the C type of CUDNN_TYPE_INT64.
        unsafe { self.set_raw(attr, AttrType::CUDNN_TYPE_INT64, values.len(), values.as_ptr().cast()) }?;
        match attr {
            Attr::CUDNN_ATTR_TENSOR_UNIQUE_ID => self.record.uid = values.first().copied(),
            Attr::CUDNN_ATTR_TENSOR_DIMENSIONS => self.record.dims = values.to_vec(),
            Attr::CUDNN_ATTR_TENSOR_STRIDES => self.record.strides = values.to_vec(),
            Attr::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT => self.record.alignment = values.first().copied(),
            _ => {}
        }
        Ok(())
    }

    /// `CUDNN_TYPE_FRACTION` array, each value `v` as the fraction `v / 1`.
    pub(crate) fn set_whole_fractions(&mut self, attr: Attr, values: &[i64]) -> Result<(), CudnnError> {
        let fractions: Vec<sys::cudnnFraction_t> =
            values.iter().map(|&numerator| sys::cudnnFraction_t { numerator, denominator: 1 }).collect();
        // SAFETY: `fractions` holds `len` `cudnnFraction_t`s, the C type of CUDNN_TYPE_FRACTION.
        unsafe { self.set_raw(attr, AttrType::CUDNN_TYPE_FRACTION, fractions.len(), fractions.as_ptr().cast()) }
    }

    /// `CUDNN_TYPE_DOUBLE`.
    pub(crate) fn set_f64(&mut self, attr: Attr, value: f64) -> Result<(), CudnnError> {
        // SAFETY: one f64, the C type of CUDNN_TYPE_DOUBLE.
        unsafe { self.set_raw(attr, AttrType::CUDNN_TYPE_DOUBLE, 1, ptr::from_ref(&value).cast()) }
    }

    /// `CUDNN_TYPE_FLOAT`.
    pub(crate) fn set_f32(&mut self, attr: Attr, value: f32) -> Result<(), CudnnError> {
        // SAFETY: one f32, the C type of CUDNN_TYPE_FLOAT.
        unsafe { self.set_raw(attr, AttrType::CUDNN_TYPE_FLOAT, 1, ptr::from_ref(&value).cast()) }
    }

    /// `CUDNN_TYPE_BOOLEAN`.
    pub(crate) fn set_bool(&mut self, attr: Attr, value: bool) -> Result<(), CudnnError> {
        // SAFETY: one Rust bool, which has the size and representation of C/C++ `bool`.
        unsafe { self.set_raw(attr, AttrType::CUDNN_TYPE_BOOLEAN, 1, ptr::from_ref(&value).cast()) }?;
        match attr {
            Attr::CUDNN_ATTR_TENSOR_IS_VIRTUAL => self.record.is_virtual = value,
            Attr::CUDNN_ATTR_TENSOR_IS_BY_VALUE => self.record.is_by_value = value,
            _ => {}
        }
        Ok(())
    }

    /// `CUDNN_TYPE_DATA_TYPE`.
    pub(crate) fn set_data_type(&mut self, attr: Attr, value: DataType) -> Result<(), CudnnError> {
        let v: u32 = value.cudnn_value();
        // SAFETY: one 32-bit integer, the size of the C enum `cudnnDataType_t`.
        unsafe { self.set_raw(attr, AttrType::CUDNN_TYPE_DATA_TYPE, 1, ptr::from_ref(&v).cast()) }?;
        if attr == Attr::CUDNN_ATTR_TENSOR_DATA_TYPE {
            self.record.data_type = Some(value);
        }
        Ok(())
    }

    /// An attribute whose type is a C enum (`CUDNN_TYPE_POINTWISE_MODE`, `CUDNN_TYPE_HEUR_MODE`,
    /// ...), given as its integer value.
    pub(crate) fn set_enum(&mut self, attr: Attr, ty: AttrType, value: u32) -> Result<(), CudnnError> {
        debug_assert!(is_enum_type(ty), "{ty:?} is not an enum-typed attribute");
        // SAFETY: one 32-bit integer, the size of every cuDNN C enum.
        unsafe { self.set_raw(attr, ty, 1, ptr::from_ref(&value).cast()) }
    }

    /// `CUDNN_TYPE_BACKEND_DESCRIPTOR` array.
    pub(crate) fn set_descriptors(&mut self, attr: Attr, values: &[&Descriptor]) -> Result<(), CudnnError> {
        const INLINE: usize = 16;
        let mut inline = [ptr::null_mut(); INLINE];
        let spill: Vec<sys::cudnnBackendDescriptor_t>;
        let raws: &[sys::cudnnBackendDescriptor_t] = if values.len() <= INLINE {
            for (slot, d) in inline.iter_mut().zip(values) {
                *slot = d.raw;
            }
            &inline[..values.len()]
        } else {
            spill = values.iter().map(|d| d.raw).collect();
            &spill
        };
        // SAFETY: `raws` holds `len` live descriptor pointers, the C type of the attribute.
        unsafe { self.set_raw(attr, AttrType::CUDNN_TYPE_BACKEND_DESCRIPTOR, raws.len(), raws.as_ptr().cast()) }?;
        let tensors = values.iter().filter(|d| d.kind == Kind::CUDNN_BACKEND_TENSOR_DESCRIPTOR);
        self.record.refs.extend(tensors.map(|d| d.record.clone()));
        Ok(())
    }

    /// `CUDNN_TYPE_HANDLE`. The handle must outlive every use of this descriptor.
    pub(crate) fn set_handle(&mut self, attr: Attr, handle: sys::cudnnHandle_t) -> Result<(), CudnnError> {
        // SAFETY: one handle pointer, the C type of CUDNN_TYPE_HANDLE.
        unsafe { self.set_raw(attr, AttrType::CUDNN_TYPE_HANDLE, 1, ptr::from_ref(&handle).cast()) }
    }

    /// `CUDNN_TYPE_VOID_PTR` array. cuDNN stores the pointers; whoever executes with them vouches
    /// for what they point to.
    pub(crate) fn set_void_ptrs(&mut self, attr: Attr, values: &[*mut c_void]) -> Result<(), CudnnError> {
        // SAFETY: `values` holds `len` pointers, the C type of CUDNN_TYPE_VOID_PTR.
        unsafe { self.set_raw(attr, AttrType::CUDNN_TYPE_VOID_PTR, values.len(), values.as_ptr().cast()) }
    }

    /// `CUDNN_TYPE_CHAR` array (JSON), without a terminating NUL.
    pub(crate) fn set_chars(&mut self, attr: Attr, text: &str) -> Result<(), CudnnError> {
        // SAFETY: `text` holds `len` bytes, the C type of CUDNN_TYPE_CHAR.
        unsafe { self.set_raw(attr, AttrType::CUDNN_TYPE_CHAR, text.len(), text.as_ptr().cast()) }
    }

    /// One `CUDNN_TYPE_INT64`.
    pub(crate) fn get_i64(&self, attr: Attr) -> Result<i64, CudnnError> {
        let mut v = 0i64;
        // SAFETY: room for one i64.
        unsafe { self.get_raw(attr, AttrType::CUDNN_TYPE_INT64, 1, ptr::from_mut(&mut v).cast()) }?;
        Ok(v)
    }

    /// One `CUDNN_TYPE_INT32`.
    pub(crate) fn get_i32(&self, attr: Attr) -> Result<i32, CudnnError> {
        let mut v = 0i32;
        // SAFETY: room for one i32.
        unsafe { self.get_raw(attr, AttrType::CUDNN_TYPE_INT32, 1, ptr::from_mut(&mut v).cast()) }?;
        Ok(v)
    }

    /// Up to `capacity` values of an enum-typed attribute, as integers.
    pub(crate) fn get_enums(&self, attr: Attr, ty: AttrType, capacity: usize) -> Result<Vec<i32>, CudnnError> {
        debug_assert!(is_enum_type(ty), "{ty:?} is not an enum-typed attribute");
        let mut out = vec![0i32; capacity];
        // SAFETY: room for `capacity` 32-bit integers, the size of every cuDNN C enum.
        let n = unsafe { self.get_raw(attr, ty, capacity, out.as_mut_ptr().cast()) }?;
        out.truncate(n.min(capacity));
        Ok(out)
    }

    /// How many descriptors a `CUDNN_TYPE_BACKEND_DESCRIPTOR` attribute holds.
    pub(crate) fn get_descriptor_count(&self, attr: Attr) -> Result<usize, CudnnError> {
        // SAFETY: a count query: capacity 0 with a null buffer.
        unsafe { self.get_raw(attr, AttrType::CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, ptr::null_mut()) }
    }

    /// Up to `count` descriptors of `kind` copied out of a `CUDNN_TYPE_BACKEND_DESCRIPTOR`
    /// attribute (cuDNN fills descriptors the caller created).
    pub(crate) fn get_descriptors(&self, attr: Attr, kind: Kind, count: usize) -> Result<Vec<Descriptor>, CudnnError> {
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            out.push(Descriptor::labelled(kind, self.label.clone())?);
        }
        let mut raws: Vec<sys::cudnnBackendDescriptor_t> = out.iter().map(|d| d.raw).collect();
        // SAFETY: `raws` holds `count` live descriptors of the kind the attribute holds.
        let n =
            unsafe { self.get_raw(attr, AttrType::CUDNN_TYPE_BACKEND_DESCRIPTOR, count, raws.as_mut_ptr().cast()) }?;
        out.truncate(n.min(count));
        Ok(out)
    }

    /// A `CUDNN_TYPE_CHAR` array (JSON) as a string.
    pub(crate) fn get_chars(&self, attr: Attr) -> Result<String, CudnnError> {
        // SAFETY: a count query: capacity 0 with a null buffer.
        let len = unsafe { self.get_raw(attr, AttrType::CUDNN_TYPE_CHAR, 0, ptr::null_mut()) }?;
        let mut buf = vec![0u8; len];
        // SAFETY: room for `len` bytes.
        let n = unsafe { self.get_raw(attr, AttrType::CUDNN_TYPE_CHAR, len, buf.as_mut_ptr().cast()) }?;
        buf.truncate(n.min(len));
        while buf.last() == Some(&0) {
            buf.pop();
        }
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }
}

/// Attribute types whose C type is an enum (4 bytes).
fn is_enum_type(ty: AttrType) -> bool {
    use AttrType as T;
    matches!(
        ty,
        T::CUDNN_TYPE_DATA_TYPE
            | T::CUDNN_TYPE_CONVOLUTION_MODE
            | T::CUDNN_TYPE_HEUR_MODE
            | T::CUDNN_TYPE_KNOB_TYPE
            | T::CUDNN_TYPE_NAN_PROPOGATION
            | T::CUDNN_TYPE_NUMERICAL_NOTE
            | T::CUDNN_TYPE_LAYOUT_TYPE
            | T::CUDNN_TYPE_ATTRIB_NAME
            | T::CUDNN_TYPE_POINTWISE_MODE
            | T::CUDNN_TYPE_GENSTATS_MODE
            | T::CUDNN_TYPE_BN_FINALIZE_STATS_MODE
            | T::CUDNN_TYPE_REDUCTION_OPERATOR_TYPE
            | T::CUDNN_TYPE_BEHAVIOR_NOTE
            | T::CUDNN_TYPE_TENSOR_REORDERING_MODE
            | T::CUDNN_TYPE_RESAMPLE_MODE
            | T::CUDNN_TYPE_PADDING_MODE
            | T::CUDNN_TYPE_SIGNAL_MODE
            | T::CUDNN_TYPE_NORM_MODE
            | T::CUDNN_TYPE_NORM_FWD_PHASE
            | T::CUDNN_TYPE_RNG_DISTRIBUTION
    )
}
