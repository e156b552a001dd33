//! The structural fingerprint of a checked graph: what a serialized plan of the graph type must
//! match to load into it.

use cudnn_runtime::dim::shape_string;
use cudnn_runtime::ir::MemoryLayout;
use cudnn_runtime::{DataType, Fnv};

use super::{Node, Operand, Port};
use crate::parse::GraphDef;

/// Hashes the graph's name, settings, parameters, ports (with their layouts), nodes and output
/// bindings: equal for graphs that build the same IR.
pub(super) fn fingerprint(
    def: &GraphDef,
    inputs: &[Port],
    outputs: &[Port],
    nodes: &[Node],
    bindings: &[(String, String)],
    compute: DataType,
    intermediate: DataType,
) -> u64 {
    let mut h = Fnv::default();
    h.write_str(&format!("graph|{}|{compute}|{intermediate}", def.name));
    for p in def.params.iter() {
        h.write_str(&format!("param|{}|{}", p.name, p.runtime));
    }
    for (kind, ports) in [("in", inputs), ("out", outputs)] {
        for p in ports {
            h.write_str(&format!("{kind}|{}|{:?}|{}", p.name, p.dtype, shape_string(&p.dims)));
            // A declared layout is part of the type: a plan of NHWC ports must not load into the
            // NCHW declaration. Row-major ports hash as they always did.
            if let Some(order) = p.order.as_deref().filter(|o| MemoryLayout::from_order(o) != MemoryLayout::RowMajor) {
                h.write_str(&format!("layout|{order:?}"));
            }
        }
    }
    for n in nodes {
        let ins: Vec<String> = n
            .inputs
            .iter()
            .map(|o| match o {
                Operand::Tensor(t) => t.clone(),
                Operand::Scalar(v) => format!("{:#x}", v.to_bits()),
            })
            .collect();
        h.write_str(&format!("node|{}|{}|{:?}|{:?}|{:?}", n.name, n.op, n.attrs, ins, n.outputs));
    }
    for (o, t) in bindings {
        h.write_str(&format!("bind|{o}|{t}"));
    }
    h.finish()
}
