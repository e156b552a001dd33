//! A graph's ports as candle sees them: element types, dims and strides, checked against the
//! tensors given; the packed order an output is allocated in.

use candle_core::{DType, Layout, Tensor};
use cudnn_graph::{DataType, Graph};

use crate::error::AdapterError;

/// One input or output of a graph: what a tensor for it must be.
#[derive(Debug, Clone)]
pub(crate) struct Port {
    pub(crate) name: String,
    pub(crate) data_type: DataType,
    pub(crate) dtype: DType,
    pub(crate) dims: Vec<i64>,
    pub(crate) strides: Vec<i64>,
    /// Elements from the first to one past the last (`Tensor::storage_len`).
    pub(crate) span: usize,
    /// A host scalar (`eps: f32[1, 1] host`): one value, given as a CPU tensor whatever the device.
    pub(crate) host: bool,
}

/// candle's element type for a graph element type, where candle has one.
fn candle_dtype(data_type: DataType) -> Option<DType> {
    Some(match data_type {
        DataType::F32 => DType::F32,
        DataType::F64 => DType::F64,
        DataType::F16 => DType::F16,
        DataType::BF16 => DType::BF16,
        DataType::U8 => DType::U8,
        DataType::I32 => DType::I32,
        DataType::I64 => DType::I64,
        _ => return None,
    })
}

/// The graph's inputs and outputs, in `Graph::inputs` / `Graph::outputs` order.
pub(crate) fn ports(graph: &Graph) -> Result<(Vec<Port>, Vec<Port>), AdapterError> {
    let port = |id| -> Result<Port, AdapterError> {
        let t = graph.tensor(id);
        let dtype = candle_dtype(t.data_type).ok_or_else(|| AdapterError::UnsupportedDType {
            graph: graph.name.clone(),
            port: t.name.clone(),
            data_type: t.data_type,
        })?;
        Ok(Port {
            name: t.name.clone(),
            data_type: t.data_type,
            dtype,
            dims: t.dims.clone(),
            strides: t.strides.clone(),
            span: t.storage_len(),
            host: t.host_scalar,
        })
    };
    let inputs = graph.inputs().into_iter().map(port).collect::<Result<_, _>>()?;
    let outputs = graph.outputs().into_iter().map(port).collect::<Result<_, _>>()?;
    Ok((inputs, outputs))
}

impl Port {
    /// Checks `tensor` against the port: dims, element type, strides (those of extent-1 dims do
    /// not matter). A host scalar takes a tensor of one element, of any rank (`Tensor::new(1e-5f32,
    /// &Device::Cpu)` or the port's `[1, 1]`). Returns the tensor's first element's offset in its
    /// storage.
    pub(crate) fn check(&self, graph: &str, tensor: &Tensor) -> Result<usize, AdapterError> {
        let layout = tensor.layout();
        let dims_match = if self.host {
            layout.shape().elem_count() == 1
        } else {
            layout.dims().len() == self.dims.len() && layout.dims().iter().zip(&self.dims).all(|(&d, &p)| d as i64 == p)
        };
        if !dims_match && self.host {
            return Err(AdapterError::HostScalarShape {
                graph: graph.to_string(),
                port: self.name.clone(),
                found: layout.dims().to_vec(),
            });
        }
        if !dims_match {
            return Err(AdapterError::Shape {
                graph: graph.to_string(),
                port: self.name.clone(),
                expected: self.dims.clone(),
                found: layout.dims().to_vec(),
            });
        }
        if tensor.dtype() != self.dtype {
            return Err(AdapterError::DType {
                graph: graph.to_string(),
                port: self.name.clone(),
                expected: self.data_type,
                found: tensor.dtype(),
            });
        }
        if !self.host && !self.same_strides(layout) {
            return Err(AdapterError::Layout {
                graph: graph.to_string(),
                port: self.name.clone(),
                expected: self.strides.clone(),
                found: layout.stride().to_vec(),
            });
        }
        Ok(layout.start_offset())
    }

    fn same_strides(&self, layout: &Layout) -> bool {
        self.dims.iter().zip(&self.strides).zip(layout.stride()).all(|((&d, &p), &s)| d == 1 || p == s as i64)
    }

    /// The order to allocate an output in, outermost first: the identity for a row-major port,
    /// else the port's dims sorted by stride, largest first (`[0, 2, 3, 1]` for an `NCHW` port
    /// laid out channels-last), checked to be packed.
    pub(crate) fn packed_order(&self, graph: &str) -> Result<Vec<usize>, AdapterError> {
        let identity: Vec<usize> = (0..self.dims.len()).collect();
        if is_packed(&self.dims, &self.strides, &identity) {
            return Ok(identity);
        }
        let mut order = identity;
        order.sort_by_key(|&i| std::cmp::Reverse(self.strides[i]));
        if is_packed(&self.dims, &self.strides, &order) {
            Ok(order)
        } else {
            Err(AdapterError::UnpackedOutput {
                graph: graph.to_string(),
                port: self.name.clone(),
                dims: self.dims.clone(),
                strides: self.strides.clone(),
            })
        }
    }
}

/// Whether `strides` are the packed strides of `dims` taken in `order` (outermost first),
/// ignoring extent-1 dims.
fn is_packed(dims: &[i64], strides: &[i64], order: &[usize]) -> bool {
    let mut next = 1;
    for &i in order.iter().rev() {
        if dims[i] != 1 && strides[i] != next {
            return false;
        }
        next *= dims[i];
    }
    true
}

/// `tensor`, allocated packed in `order`, seen in the port's dim order (no copy).
pub(crate) fn in_port_order(tensor: Tensor, order: &[usize]) -> candle_core::Result<Tensor> {
    if order.iter().enumerate().all(|(k, &i)| k == i) {
        return Ok(tensor);
    }
    let mut position = vec![0; order.len()];
    for (k, &i) in order.iter().enumerate() {
        position[i] = k;
    }
    tensor.permute(position)
}

/// The shape to allocate an output in: its dims in `order`.
pub(crate) fn storage_shape(port: &Port, order: &[usize]) -> Vec<usize> {
    order.iter().map(|&i| port.dims[i] as usize).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(dims: &[i64], strides: &[i64]) -> Port {
        Port {
            name: "y".into(),
            data_type: DataType::F32,
            dtype: DType::F32,
            dims: dims.to_vec(),
            strides: strides.to_vec(),
            span: 0,
            host: false,
        }
    }

    #[test]
    fn row_major_is_the_identity_and_channels_last_is_nhwc() {
        assert_eq!(port(&[2, 3, 4], &[12, 4, 1]).packed_order("g").unwrap(), [0, 1, 2]);
        assert_eq!(port(&[1, 3, 1], &[3, 1, 1]).packed_order("g").unwrap(), [0, 1, 2]);
        assert_eq!(port(&[2, 3, 4, 5], &[60, 1, 15, 3]).packed_order("g").unwrap(), [0, 2, 3, 1]);
    }

    #[test]
    fn gaps_are_refused_by_name() {
        let e = port(&[2, 3], &[4, 1]).packed_order("g").unwrap_err();
        assert!(e.to_string().contains("output `y`"), "{e}");
    }
}
