//! The variant-pack layout of a plan, fixed when the plan is made: [`VariantLayout`] (ascending
//! uids, each I/O tensor's position, the lowering's own tensors) and the host storage of its
//! [`ByValueScalar`]s, so an execute only fills pointers.

use crate::cudnn::Internals;
use crate::ir::{Graph, TensorId};
use crate::{DataType, Fp8E4M3, Fp8E5M2};

/// Host storage for one by-value scalar, in its tensor's data type (an `f32` tensor stores 4
/// bytes, a `bf16` one 2), aligned for any of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(8))]
pub(crate) struct ScalarStorage([u8; 8]);

impl ScalarStorage {
    /// `value` stored as `data_type` (rounded, saturated, as cuDNN reads that type).
    pub(crate) fn new(data_type: DataType, value: f64) -> Self {
        let mut b = [0u8; 8];
        let n = data_type.size_bytes();
        let bytes: [u8; 8] = match data_type {
            DataType::F32 => widen(&(value as f32).to_ne_bytes()),
            DataType::F64 => value.to_ne_bytes(),
            DataType::F16 => widen(&half::f16::from_f64(value).to_bits().to_ne_bytes()),
            DataType::BF16 => widen(&half::bf16::from_f64(value).to_bits().to_ne_bytes()),
            DataType::I8 => widen(&(DataType::I8.round(value) as i8).to_ne_bytes()),
            DataType::U8 => widen(&(DataType::U8.round(value) as u8).to_ne_bytes()),
            DataType::I32 => widen(&(DataType::I32.round(value) as i32).to_ne_bytes()),
            DataType::I64 => (DataType::I64.round(value) as i64).to_ne_bytes(),
            DataType::Bool => widen(&[u8::from(value != 0.0)]),
            DataType::Fp8E4M3 => widen(&[Fp8E4M3::from_f64(value).0]),
            DataType::Fp8E5M2 => widen(&[Fp8E5M2::from_f64(value).0]),
        };
        b[..n].copy_from_slice(&bytes[..n]);
        ScalarStorage(b)
    }

    /// The first `n` bytes.
    pub(crate) fn bytes(&self, n: usize) -> &[u8] {
        &self.0[..n]
    }

    pub(crate) fn ptr(&self) -> *const u8 {
        self.0.as_ptr()
    }
}

/// A by-value scalar of the variant pack: cuDNN reads it from host memory at execute.
#[derive(Debug, Clone, PartialEq)]
pub struct ByValueScalar {
    /// The tensor's uid.
    pub uid: i64,
    /// Its position in [`VariantLayout::uids`].
    pub position: usize,
    /// Its data type.
    pub data_type: DataType,
    value: f64,
    storage: ScalarStorage,
}

impl ByValueScalar {
    pub(crate) fn new(uid: i64, position: usize, data_type: DataType, value: f64) -> Self {
        ByValueScalar { uid, position, data_type, value, storage: ScalarStorage::new(data_type, value) }
    }

    /// The value as given (before it is stored as `data_type`).
    pub fn value(&self) -> f64 {
        self.value
    }

    /// The value's bytes as cuDNN reads them (native endian, `data_type.size_bytes()` long).
    pub fn bytes(&self) -> &[u8] {
        self.storage.bytes(self.data_type.size_bytes())
    }

    pub(crate) fn host_ptr(&self) -> *const u8 {
        self.storage.ptr()
    }
}

fn widen(bytes: &[u8]) -> [u8; 8] {
    let mut out = [0u8; 8];
    out[..bytes.len()].copy_from_slice(bytes);
    out
}

/// Where each pointer goes in the variant pack, fixed when the plan is made.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantLayout {
    uids: Vec<i64>,
    io: Vec<TensorId>,
    outputs_from: usize,
    io_positions: Vec<Option<usize>>,
    scalars: Vec<ByValueScalar>,
    /// Slices bound by pointer offset: position in `uids`, the I/O tensor they view, byte offset.
    views: Vec<(usize, usize, u64)>,
    /// Tensors the lowering placed in the workspace: position in `uids`, byte offset.
    workspace_tensors: Vec<(usize, usize)>,
    /// Bytes of workspace those take, before cuDNN's own.
    workspace_bytes: usize,
    /// The elements each I/O tensor's buffer must hold ([`Graph::storage_needs`]).
    needs: Vec<usize>,
}

impl VariantLayout {
    #[cfg(test)]
    pub(crate) fn new(graph: &Graph) -> Self {
        Self::with_internals(graph, &Internals::default())
    }

    /// The layout of `graph` plus the tensors its lowering adds (by-value constants, workspace
    /// tensors).
    pub(crate) fn with_internals(graph: &Graph, internals: &Internals) -> Self {
        let inputs = graph.inputs();
        let outputs_from = inputs.len();
        let io: Vec<TensorId> = inputs.into_iter().chain(graph.outputs()).collect();
        enum Slot {
            Io(usize),
            Scalar(DataType, f64),
            Workspace(usize),
            View(usize, u64),
        }
        let mut slots: Vec<(i64, Slot)> = io
            .iter()
            .enumerate()
            .filter(|(_, id)| !internals.aliased.contains(&id.0))
            .map(|(i, id)| (graph.tensor(*id).uid, Slot::Io(i)))
            .collect();
        slots.extend(internals.views.iter().filter_map(|&(uid, base, offset)| {
            io.iter().position(|id| id.0 == base).map(|i| (uid, Slot::View(i, offset)))
        }));
        slots.extend(
            graph.tensors.iter().filter_map(|t| t.pass_by_value.map(|v| (t.uid, Slot::Scalar(t.data_type, v)))),
        );
        slots.extend(internals.scalars.iter().map(|&(uid, dt, v)| (uid, Slot::Scalar(dt, v))));
        slots.extend(internals.workspace.iter().map(|&(uid, offset)| (uid, Slot::Workspace(offset))));
        slots.sort_by_key(|(uid, _)| *uid);
        let mut io_positions = vec![None; io.len()];
        let mut scalars = Vec::new();
        let mut workspace_tensors = Vec::new();
        let mut views = Vec::new();
        for (position, (uid, slot)) in slots.iter().enumerate() {
            match *slot {
                Slot::Io(i) => io_positions[i] = Some(position),
                Slot::View(i, offset) => views.push((position, i, offset)),
                Slot::Scalar(dt, v) => scalars.push(ByValueScalar::new(*uid, position, dt, v)),
                Slot::Workspace(offset) => workspace_tensors.push((position, offset)),
            }
        }
        let needs = graph.storage_needs();
        VariantLayout {
            uids: slots.iter().map(|(uid, _)| *uid).collect(),
            needs: io.iter().map(|id| needs[id.0]).collect(),
            io,
            outputs_from,
            io_positions,
            scalars,
            workspace_tensors,
            views,
            workspace_bytes: internals.workspace_bytes,
        }
    }

    /// Tensors the lowering placed at the front of the workspace (attention backward's softmax
    /// sums and dQ accumulator): their positions in [`VariantLayout::uids`] and byte offsets.
    pub fn workspace_tensors(&self) -> &[(usize, usize)] {
        &self.workspace_tensors
    }

    /// Bytes at the front of the workspace that [`VariantLayout::workspace_tensors`] take;
    /// cuDNN's own workspace starts after them.
    pub fn workspace_prefix(&self) -> usize {
        self.workspace_bytes
    }

    /// Every uid of the variant pack, ascending.
    pub fn uids(&self) -> &[i64] {
        &self.uids
    }

    /// The graph's I/O tensors in execution order: [`Graph::inputs`], then [`Graph::outputs`].
    pub fn io(&self) -> &[TensorId] {
        &self.io
    }

    /// For the `i`-th I/O tensor, its position in [`VariantLayout::uids`]; `None` for a graph
    /// input read only through slices ([`VariantLayout::views`]), which no operation names.
    pub fn io_positions(&self) -> &[Option<usize>] {
        &self.io_positions
    }

    /// Slices lowered as pointer offsets (cuDNN before 9.22): each one's position in
    /// [`VariantLayout::uids`], the index of the I/O tensor it views and the byte offset.
    pub fn views(&self) -> &[(usize, usize, u64)] {
        &self.views
    }

    /// The elements the `i`-th I/O tensor's buffer must hold: its storage span, or fewer for a
    /// packed tensor whose tokens the graph bounds ([`Graph::storage_needs`]).
    pub fn need(&self, i: usize) -> usize {
        self.needs[i]
    }

    /// Whether the `i`-th I/O tensor is an output.
    pub fn is_output(&self, i: usize) -> bool {
        i >= self.outputs_from
    }

    /// The by-value scalars, with their host storage.
    pub fn scalars(&self) -> &[ByValueScalar] {
        &self.scalars
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GraphBuilder;

    #[test]
    fn layout_sorts_uids_and_maps_io_order() {
        let mut g = GraphBuilder::new("l");
        let x = g.input("x", DataType::BF16, &[2, 3]).unwrap();
        let y = g.input("y", DataType::BF16, &[2, 3]).unwrap();
        g.set_uid(x, 40).unwrap();
        g.set_uid(y, 7).unwrap();
        let s = g.op("mul", &[x.into(), 0.5.into()], &[]).unwrap()[0];
        let z = g.op("add", &[s.into(), y.into()], &[]).unwrap()[0];
        g.output(z, "z", DataType::F32).unwrap();
        let graph = g.build().unwrap();
        let layout = VariantLayout::new(&graph);
        let uid = |name: &str| graph.tensor_by_name(name).unwrap().uid;
        let scalar_uid = graph.tensors.iter().find(|t| t.pass_by_value.is_some()).unwrap().uid;
        let mut want = [40, 7, uid("z"), scalar_uid];
        want.sort_unstable();
        assert_eq!(layout.uids(), &want[..]);
        for (i, id) in layout.io().iter().enumerate() {
            assert_eq!(layout.uids()[layout.io_positions()[i].unwrap()], graph.tensor(*id).uid);
        }
        assert!(!layout.is_output(1) && layout.is_output(2));
        let s = &layout.scalars()[0];
        assert_eq!(s.uid, scalar_uid);
        assert_eq!(layout.uids()[s.position], scalar_uid);
        assert_eq!(s.data_type, DataType::F32);
        assert_eq!(s.bytes(), &0.5f32.to_ne_bytes());
        assert_eq!(s.host_ptr() as usize % 8, 0);
    }

    #[test]
    fn scalars_are_stored_in_their_type() {
        let b = |dt, v| ByValueScalar::new(1, 0, dt, v).bytes().to_vec();
        assert_eq!(b(DataType::F16, 1.5), half::f16::from_f64(1.5).to_bits().to_ne_bytes());
        assert_eq!(b(DataType::BF16, -2.0), half::bf16::from_f64(-2.0).to_bits().to_ne_bytes());
        assert_eq!(b(DataType::F64, 0.1), 0.1f64.to_ne_bytes());
        assert_eq!(b(DataType::I32, 300.4), 300i32.to_ne_bytes());
        assert_eq!(b(DataType::I8, 300.0), [127u8]);
        assert_eq!(b(DataType::Bool, 2.0), [1u8]);
        assert_eq!(b(DataType::Fp8E4M3, 448.0), [0x7e]);
    }
}
