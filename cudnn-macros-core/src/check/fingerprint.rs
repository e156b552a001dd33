//! The structural fingerprint of a checked graph: what a serialized plan of the graph type must
//! match to load into it.

use cudnn_runtime::dim::shape_string;
use cudnn_runtime::ir::MemoryLayout;
use cudnn_runtime::{DataType, Fnv};

use super::{Fusion, Node, Operand, Port};
use crate::parse::GraphDef;

/// The graph-level settings a fingerprint covers.
pub(super) struct Settings {
    pub compute: DataType,
    pub intermediate: DataType,
    pub fusion: Fusion,
}

/// Hashes the graph's name, settings (with its fusion policy), parameters, ports (with their
/// layouts), nodes and output bindings: equal for graphs that build the same IR under the same
/// policy.
pub(super) fn fingerprint(
    def: &GraphDef,
    inputs: &[Port],
    outputs: &[Port],
    nodes: &[Node],
    bindings: &[(String, String)],
    settings: Settings,
) -> u64 {
    let Settings { compute, intermediate, fusion } = settings;
    let mut h = Fnv::default();
    h.write_str(&format!("graph|{}|{compute}|{intermediate}", def.name));
    // A plan of a graph that may be split must not load into (or be served from a cache to) the
    // same graph declared `#[fuse(single)]`. `auto` graphs hash as they always did.
    if fusion == Fusion::Single {
        h.write_str("fuse|single");
    }
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
            // So is a host scalar: its value is given at execute, not in device memory.
            if p.host {
                h.write_str("host");
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
        // Symbolic extents, in their canonical form (a node with literal ones hashes as it always
        // did: they are among its attributes).
        for (attr, dims) in &n.extents {
            h.write_str(&format!("extents|{attr}|{}", shape_string(dims)));
        }
    }
    for (o, t) in bindings {
        h.write_str(&format!("bind|{o}|{t}"));
    }
    h.finish()
}
