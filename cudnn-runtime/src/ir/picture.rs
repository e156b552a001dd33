//! Pictures of a graph: Graphviz DOT and Mermaid. Tensors are boxes labelled with name and type
//! (`f16[8, 64, 16, 16] channels-last`: shape and memory layout; graph inputs and outputs solid,
//! virtual tensors dashed, by-value scalars with their value); ops are ellipses labelled with the
//! call and its attributes.

use std::fmt::Write;

use super::Graph;
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

fn tensor_label(graph: &Graph, i: usize) -> String {
    let t = &graph.tensors[i];
    match t.pass_by_value {
        Some(v) => format!("{} = {v}", t.data_type),
        None => format!("{}\\n{}", t.name, t.type_string()),
    }
}

fn escape(s: &str) -> String {
    s.replace('"', "\\\"")
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
        let _ = writeln!(s, "digraph \"{}\" {{", escape(&self.name));
        let _ = writeln!(s, "  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=11];\n  edge [fontname=\"Helvetica\", fontsize=9];");
        for (i, t) in self.tensors.iter().enumerate() {
            let style = if t.is_virtual { "dashed" } else { "solid" };
            let _ = writeln!(s, "  t{i} [shape=box, style={style}, label=\"{}\"];", escape(&tensor_label(self, i)));
        }
        for (n, node) in self.nodes.iter().enumerate() {
            let attrs = attrs_text(&node.op.call_attrs());
            let label = if attrs.is_empty() {
                format!("{}\\n{}", node.name, node.op.call_name())
            } else {
                format!("{}\\n{}({attrs})", node.name, node.op.call_name())
            };
            let _ = writeln!(
                s,
                "  n{n} [shape=ellipse, style=filled, fillcolor=\"#e8f0fe\", label=\"{}\"];",
                escape(&label)
            );
            let ports = node.op.signature();
            for (k, i) in node.inputs.iter().enumerate() {
                let port = ports.inputs.get(k).map_or("", |p| p.name);
                let _ = writeln!(s, "  t{} -> n{n} [label=\"{port}\"];", i.0);
            }
            for (k, o) in node.outputs.iter().enumerate() {
                let port = ports.outputs.get(k).copied().unwrap_or("");
                let _ = writeln!(s, "  n{n} -> t{} [label=\"{port}\"];", o.0);
            }
        }
        s.push_str("}\n");
        s
    }

    /// The graph as a Mermaid flowchart (renders in GitHub Markdown).
    pub fn to_mermaid(&self) -> String {
        let mut s = String::from("flowchart TD\n");
        for (i, t) in self.tensors.iter().enumerate() {
            let label = tensor_label(self, i).replace("\\n", "<br/>");
            let (open, close) = if t.is_virtual { ("[/", "/]") } else { ("[", "]") };
            let _ = writeln!(s, "  t{i}{open}\"{}\"{close}", label.replace('"', "'"));
        }
        for (n, node) in self.nodes.iter().enumerate() {
            let attrs = attrs_text(&node.op.call_attrs());
            let call = if attrs.is_empty() {
                node.op.call_name().to_string()
            } else {
                format!("{}({attrs})", node.op.call_name())
            };
            let _ = writeln!(s, "  n{n}((\"{}<br/>{}\"))", node.name, call.replace('"', "'"));
            for i in &node.inputs {
                let _ = writeln!(s, "  t{} --> n{n}", i.0);
            }
            for o in &node.outputs {
                let _ = writeln!(s, "  n{n} --> t{}", o.0);
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
