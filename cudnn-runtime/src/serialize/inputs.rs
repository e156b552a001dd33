//! Inputs saved to a directory and read back (`cudnn-graph repro`'s bug bundles, captures): a
//! manifest, `inputs.json`, naming each input's type and dims, and one file per input of its
//! elements, dense and row-major, in its type, little-endian.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::array::Array;
use crate::ir::{Graph, Tensor};
use crate::{DataType, Fp8E4M3, Fp8E5M2};

/// `value` in `dt`'s bytes, little-endian.
fn encode(dt: DataType, value: f64, out: &mut Vec<u8>) {
    match dt {
        DataType::F32 => out.extend_from_slice(&(value as f32).to_le_bytes()),
        DataType::F64 => out.extend_from_slice(&value.to_le_bytes()),
        DataType::F16 => out.extend_from_slice(&half::f16::from_f64(value).to_bits().to_le_bytes()),
        DataType::BF16 => out.extend_from_slice(&half::bf16::from_f64(value).to_bits().to_le_bytes()),
        DataType::I8 => out.extend_from_slice(&(DataType::I8.round(value) as i8).to_le_bytes()),
        DataType::U8 => out.push(DataType::U8.round(value) as u8),
        DataType::I32 => out.extend_from_slice(&(DataType::I32.round(value) as i32).to_le_bytes()),
        DataType::I64 => out.extend_from_slice(&(DataType::I64.round(value) as i64).to_le_bytes()),
        DataType::Bool => out.push(u8::from(value != 0.0)),
        DataType::Fp8E4M3 => out.push(Fp8E4M3::from_f64(value).0),
        DataType::Fp8E5M2 => out.push(Fp8E5M2::from_f64(value).0),
    }
}

/// The value of `dt` in `bytes` (exactly `dt.size_bytes()` of them), little-endian.
fn decode(dt: DataType, bytes: &[u8]) -> f64 {
    let mut b = [0u8; 8];
    b[..bytes.len().min(8)].copy_from_slice(&bytes[..bytes.len().min(8)]);
    match dt {
        DataType::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DataType::F64 => f64::from_le_bytes(b),
        DataType::F16 => half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
        DataType::BF16 => half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
        DataType::I8 => f64::from(b[0] as i8),
        DataType::U8 => f64::from(b[0]),
        DataType::I32 => f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DataType::I64 => i64::from_le_bytes(b) as f64,
        DataType::Bool => f64::from(u8::from(b[0] != 0)),
        DataType::Fp8E4M3 => Fp8E4M3(b[0]).to_f64(),
        DataType::Fp8E5M2 => Fp8E5M2(b[0]).to_f64(),
    }
}

/// `array` (dense, row-major over `tensor`'s dims) stored as `tensor` is: its type, its strides
/// (bytes no element addresses stay `fill`), little-endian: a buffer to upload.
pub fn to_storage(tensor: &Tensor, array: &Array, fill: u8) -> Vec<u8> {
    let size = tensor.data_type.size_bytes();
    let mut out = vec![fill; tensor.storage_len().saturating_mul(size)];
    let mut one = Vec::with_capacity(8);
    for (flat, &v) in array.data.iter().enumerate() {
        let index = Array::unravel(flat as i64, &tensor.dims);
        let at: i64 = index.iter().zip(&tensor.strides).map(|(i, s)| i * s).sum();
        one.clear();
        encode(tensor.data_type, v, &mut one);
        let at = at as usize * size;
        out[at..at + size].copy_from_slice(&one);
    }
    out
}

/// `tensor`'s elements from its storage `bytes` (as [`to_storage`] lays them out), dense and
/// row-major; an element past the end of `bytes` reads as NaN.
pub fn from_storage(tensor: &Tensor, bytes: &[u8]) -> Array {
    let size = tensor.data_type.size_bytes();
    Array::from_fn(&tensor.dims, |flat| {
        let index = Array::unravel(flat as i64, &tensor.dims);
        let at = index.iter().zip(&tensor.strides).map(|(i, s)| i * s).sum::<i64>() as usize * size;
        bytes.get(at..at + size).map_or(f64::NAN, |b| decode(tensor.data_type, b))
    })
}

/// The manifest of a directory of inputs ([`write_inputs`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct InputsManifest {
    cudnn_graph_inputs: u32,
    graph_fingerprint: String,
    inputs: Vec<InputRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct InputRecord {
    name: String,
    data_type: DataType,
    dims: Vec<i64>,
    /// The file beside the manifest: the elements, dense and row-major, in `data_type`,
    /// little-endian.
    file: String,
}

/// The inputs format this build writes and reads.
pub const INPUTS_FORMAT: u32 = 1;

/// Why a directory of inputs cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum InputsError {
    /// A file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The manifest is not one, or does not fit the graph.
    #[error("{path}: {reason}")]
    Malformed {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

/// Writes `inputs` of `graph` (in [`Graph::inputs`] order) to `dir` (created): `inputs.json`,
/// a manifest naming each input's type and dims, and one file per input of its elements,
/// dense and row-major, in its type, little-endian (`inputs/x.bin`). Returns the bytes written.
pub fn write_inputs(dir: &Path, graph: &Graph, inputs: &[Array]) -> Result<usize, InputsError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| InputsError::Io { path, source }
    };
    let data = dir.join("inputs");
    std::fs::create_dir_all(&data).map_err(io(&data))?;
    let mut records = Vec::new();
    let mut total = 0;
    for (k, (id, a)) in graph.inputs().into_iter().zip(inputs).enumerate() {
        let t = graph.tensor(id);
        let file = format!("inputs/{k}.bin");
        let mut bytes = Vec::with_capacity(a.data.len() * t.data_type.size_bytes());
        for &v in &a.data {
            encode(t.data_type, v, &mut bytes);
        }
        let path = dir.join(&file);
        std::fs::write(&path, &bytes).map_err(io(&path))?;
        total += bytes.len();
        records.push(InputRecord { name: t.name.clone(), data_type: t.data_type, dims: a.dims.clone(), file });
    }
    let manifest = InputsManifest {
        cudnn_graph_inputs: INPUTS_FORMAT,
        graph_fingerprint: format!("{:#018x}", graph.fingerprint()),
        inputs: records,
    };
    let text = serde_json::to_string_pretty(&manifest).unwrap_or_default();
    let path = dir.join("inputs.json");
    std::fs::write(&path, &text).map_err(io(&path))?;
    Ok(total + text.len())
}

/// Reads the inputs [`write_inputs`] wrote for `graph`, checked against it: every input by
/// name, type and dims, each file exactly its elements' bytes.
pub fn read_inputs(dir: &Path, graph: &Graph) -> Result<Vec<Array>, InputsError> {
    let path = dir.join("inputs.json");
    let shown = path.display().to_string();
    let bad = |reason: String| InputsError::Malformed { path: shown.clone(), reason };
    let text = std::fs::read(&path).map_err(|source| InputsError::Io { path: shown.clone(), source })?;
    let manifest: InputsManifest = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
    if manifest.cudnn_graph_inputs != INPUTS_FORMAT {
        return Err(bad(format!("inputs format {}, this build reads {INPUTS_FORMAT}", manifest.cudnn_graph_inputs)));
    }
    let mut out = Vec::new();
    for id in graph.inputs() {
        let t = graph.tensor(id);
        let r =
            manifest.inputs.iter().find(|r| r.name == t.name).ok_or_else(|| bad(format!("no input `{}`", t.name)))?;
        if r.data_type != t.data_type || r.dims != t.dims {
            return Err(bad(format!(
                "input `{}` is {}{:?}, the graph's is {}",
                t.name,
                r.data_type.name(),
                r.dims,
                t.type_string()
            )));
        }
        if r.file.contains("..") || Path::new(&r.file).is_absolute() {
            return Err(bad(format!("input `{}`'s file `{}` is outside the directory", t.name, r.file)));
        }
        let file = dir.join(&r.file);
        let bytes =
            std::fs::read(&file).map_err(|source| InputsError::Io { path: file.display().to_string(), source })?;
        let size = t.data_type.size_bytes();
        let n = usize::try_from(t.element_count()).unwrap_or(usize::MAX);
        if Some(bytes.len()) != n.checked_mul(size) {
            return Err(bad(format!(
                "input `{}`'s file has {} bytes, {n} elements need {}",
                t.name,
                bytes.len(),
                n.saturating_mul(size)
            )));
        }
        let data = bytes.chunks_exact(size).map(|b| decode(t.data_type, b)).collect();
        out.push(Array { dims: t.dims.clone(), data });
    }
    Ok(out)
}
