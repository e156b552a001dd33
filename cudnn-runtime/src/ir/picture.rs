//! Pictures of a graph: Graphviz DOT and Mermaid. Tensors are boxes labelled with name and type
//! (`f16[8, 64, 16, 16] channels-last`: shape and memory layout; graph inputs and outputs solid,
//! virtual tensors dashed, by-value scalars with their value); ops are ellipses labelled with the
//! call and its attributes.

use std::fmt::Write;

use super::{Graph, TensorId};
use crate::ops::AttrValue;

fn attrs_text(attrs: &[(String, AttrValue)]) -> String {
    attrs
        .iter()
        .map(|(k, v)| match v {
            AttrValue::Float(f) => format!("{k}={f}"),
            AttrValue::Int(i) => format!("{k}={i}"),
            AttrValue::IntList(l) => format!("{k}={l:?}"),
            AttrValue::Bool(b) => format!("{k}={b}"),
            AttrValue::Name(n) => format!("{k}={n}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Tensor `i`'s label, lines joined by DOT's `\n`: its name and type, or a by-value scalar's
/// type and value.
pub(crate) fn tensor_label(graph: &Graph, i: usize) -> String {
    let t = &graph.tensors[i];
    match t.pass_by_value {
        Some(v) => format!("{} = {v}", t.data_type),
        None => format!("{}\\n{}", t.name, t.type_string()),
    }
}

/// Node `n`'s call: `relu(upper_clip=6)`, or `relu` without attributes.
fn call_text(graph: &Graph, n: usize) -> String {
    let node = &graph.nodes[n];
    let attrs = attrs_text(&node.op.call_attrs());
    if attrs.is_empty() {
        node.op.call_name().to_string()
    } else {
        format!("{}({attrs})", node.op.call_name())
    }
}

/// Text inside a DOT string whose `\n`s are line breaks already.
pub(crate) fn escape(s: &str) -> String {
    s.replace('"', "\\\"")
}

/// The first lines of a DOT picture, through the default node and edge fonts.
pub(crate) fn dot_header(s: &mut String, name: &str) {
    let _ = writeln!(s, "digraph \"{}\" {{", escape(name));
    let _ = writeln!(
        s,
        "  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=11];\n  edge [fontname=\"Helvetica\", fontsize=9];"
    );
}

/// Tensor `i`'s DOT attributes: a box, dashed where virtual, with [`tensor_label`].
pub(crate) fn dot_tensor(graph: &Graph, i: usize) -> String {
    let style = if graph.tensors[i].is_virtual { "dashed" } else { "solid" };
    format!("shape=box, style={style}, label=\"{}\"", escape(&tensor_label(graph, i)))
}

/// Node `n`'s label in DOT (lines joined by `\n`): its name, then its call.
pub(crate) fn node_label(graph: &Graph, n: usize) -> String {
    format!("{}\\n{}", graph.nodes[n].name, call_text(graph, n))
}

/// Node `n`'s DOT attributes: a filled ellipse with [`node_label`].
pub(crate) fn dot_node(graph: &Graph, n: usize) -> String {
    format!("shape=ellipse, style=filled, fillcolor=\"#e8f0fe\", label=\"{}\"", escape(&node_label(graph, n)))
}

/// Tensor `i`'s label in Mermaid.
pub(crate) fn mermaid_tensor_label(graph: &Graph, i: usize) -> String {
    tensor_label(graph, i).replace("\\n", "<br/>").replace('"', "'")
}

/// Tensor `i` as a Mermaid node: a box, slanted where virtual.
pub(crate) fn mermaid_tensor(graph: &Graph, i: usize) -> String {
    let (open, close) = if graph.tensors[i].is_virtual { ("[/", "/]") } else { ("[", "]") };
    format!("t{i}{open}\"{}\"{close}", mermaid_tensor_label(graph, i))
}

/// Node `n`'s label in Mermaid: its name, then its call.
pub(crate) fn mermaid_node_label(graph: &Graph, n: usize) -> String {
    format!("{}<br/>{}", graph.nodes[n].name, call_text(graph, n).replace('"', "'"))
}

/// Node `n` as a Mermaid node: a circle with [`mermaid_node_label`].
pub(crate) fn mermaid_node(graph: &Graph, n: usize) -> String {
    format!("n{n}((\"{}\"))", mermaid_node_label(graph, n))
}

/// One edge between a node and a tensor it reads or writes, with the port's name (empty where
/// the signature has none).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Edge {
    pub(crate) tensor: TensorId,
    /// The node reads the tensor (the edge points into the node); otherwise it writes it.
    pub(crate) reads: bool,
    pub(crate) port: &'static str,
}

impl Edge {
    /// The ends as the pictures name them (`t3`, `n1`), in the data's direction.
    pub(crate) fn ends(&self, n: usize) -> (String, String) {
        let (t, n) = (format!("t{}", self.tensor.0), format!("n{n}"));
        if self.reads {
            (t, n)
        } else {
            (n, t)
        }
    }
}

/// Node `n`'s edges: its inputs in order, then its outputs.
pub(crate) fn edges(graph: &Graph, n: usize) -> Vec<Edge> {
    let node = &graph.nodes[n];
    let ports = node.op.signature();
    let inputs = node.inputs.iter().enumerate().map(|(k, &tensor)| Edge {
        tensor,
        reads: true,
        port: ports.inputs.get(k).map_or("", |p| p.name),
    });
    let outputs = node.outputs.iter().enumerate().map(|(k, &tensor)| Edge {
        tensor,
        reads: false,
        port: ports.outputs.get(k).copied().unwrap_or(""),
    });
    inputs.chain(outputs).collect()
}

impl Graph {
    /// The graph in Graphviz DOT (`dot -Tsvg`).
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::{DataType, GraphBuilder};
    /// let mut g = GraphBuilder::new("g");
    /// let x = g.input("x", DataType::F16, &[2, 3]).unwrap();
    /// let y = g.op("relu", &[x.into()], &[]).unwrap()[0];
    /// g.output(y, "y", DataType::F16).unwrap();
    /// let dot = g.build().unwrap().to_dot();
    /// assert!(dot.contains("digraph \"g\""));
    /// assert!(dot.contains("y\\nf16[2, 3] row-major"));
    /// ```
    pub fn to_dot(&self) -> String {
        let mut s = String::new();
        dot_header(&mut s, &self.name);
        for i in 0..self.tensors.len() {
            let _ = writeln!(s, "  t{i} [{}];", dot_tensor(self, i));
        }
        for n in 0..self.nodes.len() {
            let _ = writeln!(s, "  n{n} [{}];", dot_node(self, n));
            for e in edges(self, n) {
                let (from, to) = e.ends(n);
                let _ = writeln!(s, "  {from} -> {to} [label=\"{}\"];", e.port);
            }
        }
        s.push_str("}\n");
        s
    }

    /// The graph as a Mermaid flowchart (renders in GitHub Markdown).
    pub fn to_mermaid(&self) -> String {
        let mut s = String::from("flowchart TD\n");
        for i in 0..self.tensors.len() {
            let _ = writeln!(s, "  {}", mermaid_tensor(self, i));
        }
        for n in 0..self.nodes.len() {
            let _ = writeln!(s, "  {}", mermaid_node(self, n));
            for e in edges(self, n) {
                let (from, to) = e.ends(n);
                let _ = writeln!(s, "  {from} --> {to}");
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use crate::{DataType, GraphBuilder};

    #[test]
    fn pictures_show_every_tensor_and_op() {
        let mut g = GraphBuilder::new("mbr");
        let a = g.input("a", DataType::BF16, &[1, 4, 8]).unwrap();
        let b = g.input("b", DataType::BF16, &[1, 8, 2]).unwrap();
        let c = g.matmul(a, b).unwrap();
        let d = g.op("mul", &[c.into(), 0.5.into()], &[]).unwrap()[0];
        let y = g.op("relu", &[d.into()], &[("upper_clip".into(), 6.0.into())]).unwrap()[0];
        g.output(y, "y", DataType::BF16).unwrap();
        let graph = g.build().unwrap();
        let dot = graph.to_dot();
        assert_eq!(dot.matches("shape=box").count(), graph.tensors.len());
        assert_eq!(dot.matches("shape=ellipse").count(), 3);
        assert!(dot.contains("relu(upper_clip=6)"), "{dot}");
        assert!(dot.contains("style=dashed"));
        assert!(dot.contains("f32 = 0.5"));
        assert!(dot.contains("label=\"A\""));
        let mm = graph.to_mermaid();
        assert!(mm.starts_with("flowchart TD"));
        assert_eq!(mm.matches("-->").count(), 2 + 2 + 2 + 2);
    }
}
