//! The tensors parts exchange, as memory: which views are aliases of their input's memory
//! ([`aliases`]), the strides that make a view between parts an alias ([`restride`]), and the
//! type a materialized tensor is stored in ([`stored_type`]).

use crate::cudnn::ALIGNMENT;
use crate::dim::packed_strides;
use crate::dim::Concrete;
use crate::ir::{Graph, Node, TensorId};
use crate::ops::{FusionRule, Op, TensorMeta};
use crate::DataType;

/// A view node whose output is its input's memory described again: the base tensor (never
/// itself an alias) and the offset into it, in elements (bytes follow from the type the base is
/// stored in, [`stored_type`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Alias {
    pub(crate) base: TensorId,
    pub(crate) elements: u64,
}

/// The graph's views as aliases, where they can be: indexed by tensor, the alias of each
/// view output. A view is an alias when its output is virtual (a graph output must be written
/// by a kernel), its strides are exactly the view of its input's (`Layout::view_strides`: a
/// reshape's input packed, or strided with runs the reshape keeps whole), and a slice starts
/// at an aligned byte.
pub(crate) fn aliases(graph: &Graph) -> Vec<Option<Alias>> {
    let mut alias: Vec<Option<Alias>> = vec![None; graph.tensors.len()];
    for node in &graph.nodes {
        let Op::Layout(layout) = &node.op else { continue };
        if node.op.fusion() != FusionRule::View {
            continue;
        }
        let (Some(&x), Some(&y)) = (node.inputs.first(), node.outputs.first()) else { continue };
        let (xt, yt) = (graph.tensor(x), graph.tensor(y));
        // The view's strides as its rule gives them from X's (a reshape that cannot be a view of
        // X's memory is none).
        let view = layout.view_strides(&xt.dims, &xt.strides, &yt.dims).ok();
        if !yt.is_virtual || xt.is_by_value() || view.as_ref() != Some(&yt.strides) {
            continue;
        }
        let Ok(offset) = u64::try_from(layout.offset(&xt.strides)) else { continue };
        let within = alias[x.0].unwrap_or(Alias { base: x, elements: 0 });
        let elements = within.elements + offset;
        // Aligned whatever the type the base is stored in: a multiple of 16 elements.
        if !elements.is_multiple_of(ALIGNMENT) {
            continue;
        }
        alias[y.0] = Some(Alias { base: within.base, elements });
    }
    alias
}

/// The graph with its materializable intermediates laid out so the views between parts are
/// aliases: where `reshape(transpose(b))` would reshape an unpacked view, and `b` is a virtual
/// tensor computed by an op and read only by the transpose, `b` is stored in the order that
/// makes the transpose packed (attention's O stored BSHD, so `reshape(transpose(o))` back to
/// `[1, T, H·D]` is the memory the next matmul reads). Only the strides of virtual tensors
/// change, which the graph's I/O and results never see.
pub(crate) fn restride(graph: &Graph) -> Graph {
    let mut out = graph.clone();
    let producer = producers(graph);
    for node in &graph.nodes {
        let Op::Layout(reshape @ crate::ops::Layout::Reshape { .. }) = &node.op else { continue };
        let (Some(&t_out), Some(&y)) = (node.inputs.first(), node.outputs.first()) else { continue };
        let packed = packed_strides(&out.tensor(t_out).dims);
        let (x, y) = (out.tensor(t_out), out.tensor(y));
        if reshape.view_strides(&x.dims, &x.strides, &y.dims).is_ok() {
            continue;
        }
        let Some(t) = producer[t_out.0].map(|p| &graph.nodes[p]) else { continue };
        let Op::Layout(layout @ crate::ops::Layout::Transpose { .. }) = &t.op else { continue };
        let Some(&b) = t.inputs.first() else { continue };
        let readers = graph.nodes.iter().filter(|n| n.inputs.contains(&b)).count();
        let computed = producer[b.0].is_some_and(|p| graph.nodes[p].op.fusion() != FusionRule::View);
        if !graph.tensor(b).is_virtual || readers != 1 || !computed || !graph.tensor(t_out).is_virtual {
            continue;
        }
        // Transposing `b` with strides `s` gives strides `s[p[i]]`: setting `s[p[i]]` to the
        // packed strides of the transpose's output makes it packed.
        let rank = packed.len();
        let mut strides = vec![0i64; rank];
        let mut ok = true;
        for (i, &stride) in packed.iter().enumerate() {
            let unit = vec![0i64; rank];
            // The axis `i` of the transpose's output reads: where a unit stride at `i` comes from.
            let mut probe = unit.clone();
            probe[i] = 1;
            match (0..rank).find(|&a| {
                let mut s = unit.clone();
                s[a] = 1;
                layout.output_strides(&graph.tensor(b).dims, &s, &out.tensor(t_out).dims) == probe
            }) {
                Some(a) => strides[a] = stride,
                None => ok = false,
            }
        }
        if !ok {
            continue;
        }
        out.tensors[b.0].strides = strides;
        out.tensors[t_out.0].strides = packed;
    }
    out
}

/// The type a materialized tensor is stored in. Its own, except where an anchor op reads it
/// beside operands of one narrower floating type of the same rank (a matmul's B, a
/// convolution's W, attention's K and V): cuDNN's engines take such operands in one type (f32 ×
/// f16 matmul: no engine configuration), so a tensor whose type no op forced (the graph's
/// intermediate type) is stored in theirs, as a split written by hand would store it. The whole
/// graph's CPU reference rounds it to its own type, so results differ by that rounding.
pub(crate) fn stored_type(graph: &Graph, t: TensorId, alias: &[Option<Alias>]) -> DataType {
    let tensor = graph.tensor(t);
    let own = tensor.data_type;
    // Graph inputs and outputs are the caller's buffers, in their declared types.
    if !own.is_float() || !tensor.is_virtual {
        return own;
    }
    let producer = producers(graph);
    let Some(p) = producer[t.0].map(|p| &graph.nodes[p]) else { return own };
    // A type the producing op forces (attention's statistics, a norm's f32 statistics) stays.
    let metas: Vec<TensorMeta<i64>> = p
        .inputs
        .iter()
        .map(|i| TensorMeta { dims: graph.tensor(*i).dims.clone(), dtype: graph.tensor(*i).data_type })
        .collect();
    let index = p.outputs.iter().position(|o| *o == t);
    let forced = p.op.infer(&metas, &mut Concrete).ok().and_then(|outs| index.and_then(|i| outs.get(i)?.dtype));
    if forced.is_some() {
        return own;
    }
    let reads = |n: &Node| n.inputs.iter().any(|i| *i == t || alias[i.0].is_some_and(|a| a.base == t));
    let mut wanted: Option<DataType> = None;
    for n in graph.nodes.iter().filter(|n| reads(n) && matches!(n.op.fusion(), FusionRule::Anchor { .. })) {
        let peers: Vec<DataType> = n
            .inputs
            .iter()
            .filter(|i| **i != t && alias[i.0].is_none_or(|a| a.base != t))
            .map(|i| graph.tensor(*i))
            .filter(|o| !o.is_by_value() && o.dims.len() == tensor.dims.len() && o.data_type.is_float())
            .map(|o| o.data_type)
            .collect();
        let Some(&first) = peers.first() else { continue };
        if peers.iter().any(|d| *d != first) || first.size_bytes() >= own.size_bytes() {
            continue;
        }
        match wanted {
            None => wanted = Some(first),
            Some(w) if w == first => {}
            // Readers that disagree: keep the tensor's own type.
            Some(_) => return own,
        }
    }
    wanted.unwrap_or(own)
}

/// The node producing each tensor.
pub(crate) fn producers(graph: &Graph) -> Vec<Option<usize>> {
    let mut producer = vec![None; graph.tensors.len()];
    for (n, node) in graph.nodes.iter().enumerate() {
        for o in &node.outputs {
            producer[o.0].get_or_insert(n);
        }
    }
    producer
}
