//! Pictures of a plan: the graph its parts run, each part a cluster labelled with its index,
//! engine and workspace (and, after the first, why it does not share the previous part's
//! kernel), in Graphviz DOT ([`ExecutionPlan::to_dot`]) and Mermaid
//! ([`ExecutionPlan::to_mermaid`]). Tensors and ops are drawn as in [`Graph::to_dot`]; the
//! tensors parts exchange through the arena sit between the clusters, shaded, with their offset
//! and size, their edges dashed; a view between parts is no kernel and belongs to no cluster.

use std::collections::HashMap;
use std::fmt::Write;

use super::partition::{self, Place};
use super::plan::ExecutionPlan;
use crate::ir::picture as pic;
use crate::ir::{for_cudnn, Graph};

/// What a plan's picture shows: the graph its parts run, the part of each node, the tensors in
/// the arena.
#[derive(Debug)]
struct Sketch {
    graph: Graph,
    /// The plan in one line: its parts, arena and workspace.
    title: String,
    parts: Vec<Cluster>,
    /// The part running each node of `graph`; `None` for a view between parts (no kernel).
    node_part: Vec<Option<usize>>,
    /// The arena offset of each tensor of `graph` the parts exchange through the arena.
    arena: Vec<Option<u64>>,
}

/// One part as a cluster: its title, and its cut.
#[derive(Debug)]
struct Cluster {
    title: String,
    cut: Option<String>,
}

impl ExecutionPlan {
    /// The graph the parts run, whose node names [`PlanPart::nodes`](super::PlanPart::nodes)
    /// lists: [`ExecutionPlan::graph`] after [`ExecutionPlan::rewrites`], and, for a partitioned
    /// plan, with the strides partitioning gave the tensors stored between parts.
    pub(crate) fn planned_graph(&self) -> Graph {
        if let [part] = self.parts() {
            // A plan of one part plans the rewritten graph whole.
            return part.graph().clone();
        }
        // The plan was built from this rewrite of this graph, so it succeeds again; were it to
        // fail, the user's graph is drawn, nodes the parts do not name outside every part.
        let planned = for_cudnn(self.graph()).map_or_else(|_| self.graph().clone(), |r| r.graph);
        partition::restride(&planned)
    }

    /// The plan in Graphviz DOT (`dot -Tsvg`): the graph its parts run (see
    /// [`ExecutionPlan::rewrites`]) drawn as [`Graph::to_dot`] draws a graph, each part a cluster
    /// `cluster_k` labelled `part k: <engine tag>, workspace <bytes> B` (with the bytes it writes
    /// to the arena), and the [`Cut`](super::Cut) before it on the next lines and as its tooltip. The
    /// tensors parts exchange through the arena are shaded boxes between the clusters labelled
    /// with their arena offset and size, their edges dashed; a view between parts (no kernel)
    /// sits outside every cluster. A plan of one part is one cluster.
    ///
    /// ```no_run
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::backend::{BuildOptions, Cudnn, ExecutionPlan};
    /// use cudnn_graph::{Context, DataType, GraphBuilder};
    /// let mut g = GraphBuilder::new("two_matmuls");
    /// // h, between the two parts, is stored in f16.
    /// g.context(Context { intermediate_data_type: DataType::F16, ..Context::default() });
    /// let x = g.input("x", DataType::F16, &[1, 64, 32])?;
    /// let w1 = g.input("w1", DataType::F16, &[1, 32, 128])?;
    /// let w2 = g.input("w2", DataType::F16, &[1, 128, 32])?;
    /// let h = g.matmul(x, w1)?;
    /// let y = g.matmul(h, w2)?;
    /// g.output(y, "y", DataType::F16)?;
    /// let cudnn = Cudnn::deviceless(&std::fs::read_to_string("tests/fixtures/h200-devprop.json")?)?;
    /// let plan = ExecutionPlan::build(&cudnn, &g.build()?, &BuildOptions::default())?;
    /// let dot = plan.to_dot();
    /// assert_eq!(dot.matches("subgraph cluster_").count(), 2);
    /// assert!(dot.contains("both are anchor ops"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_dot(&self) -> String {
        Sketch::of(self).dot()
    }

    /// The plan as a Mermaid flowchart (renders in GitHub Markdown): what
    /// [`ExecutionPlan::to_dot`] draws, each part a `subgraph` titled with its index, engine,
    /// workspace and cut, the plan's summary as the chart's title.
    pub fn to_mermaid(&self) -> String {
        Sketch::of(self).mermaid()
    }
}

/// `text` broken into lines of at most `width` characters at spaces (a longer word on a line
/// of its own), so that a cut's reason does not stretch its cluster across the picture.
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = 0;
    for word in text.split(' ') {
        if line > 0 && line + 1 + word.chars().count() > width {
            out.push('\n');
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(word);
        line += word.chars().count();
    }
    out
}

/// The width a cluster's title wraps at.
const TITLE_WIDTH: usize = 80;

/// Text inside a DOT string: backslashes, quotes and line breaks escaped.
fn dot_text(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Text inside a quoted Mermaid label: the characters Mermaid would read as markup as its entity
/// codes, line breaks as `<br/>`.
fn mermaid_text(s: &str) -> String {
    s.replace('#', "#35;").replace('"', "#quot;").replace('<', "#lt;").replace('>', "#gt;").replace('\n', "<br/>")
}

impl Sketch {
    fn of(plan: &ExecutionPlan) -> Sketch {
        let graph = plan.planned_graph();
        let mut node_part = vec![None; graph.nodes.len()];
        let mut arena = vec![None; graph.tensors.len()];
        let mut parts = Vec::with_capacity(plan.parts().len());
        {
            let nodes: HashMap<&str, usize> =
                graph.nodes.iter().enumerate().map(|(n, x)| (x.name.as_str(), n)).collect();
            let tensors: HashMap<&str, usize> =
                graph.tensors.iter().enumerate().map(|(t, x)| (x.name.as_str(), t)).collect();
            for (k, part) in plan.parts().iter().enumerate() {
                for name in part.nodes() {
                    if let Some(&n) = nodes.get(name.as_str()) {
                        node_part[n] = Some(k);
                    }
                }
                for (id, place) in part.layout().io().iter().zip(plan.sources_of(part)) {
                    let name = part.graph().tensor(*id).name.as_str();
                    if let (Place::Arena { offset }, Some(&t)) = (place, tensors.get(name)) {
                        arena[t] = Some(*offset);
                    }
                }
                let mut title = format!("part {k}: {}, workspace {} B", part.selected().tag(), part.workspace_size());
                if part.intermediate_bytes() > 0 {
                    let _ = write!(title, ", writes {} B", part.intermediate_bytes());
                }
                parts.push(Cluster { title, cut: part.cut().map(ToString::to_string) });
            }
        }
        // A view of an arena tensor (a view of a view, which no part reads, among them) is that
        // memory too.
        if plan.is_partitioned() {
            let aliases = partition::aliases(&graph);
            for (t, alias) in aliases.iter().enumerate() {
                if let Some(a) = alias {
                    let size = partition::stored_type(&graph, a.base, &aliases).size_bytes() as u64;
                    arena[t] = arena[a.base.0].map(|offset| offset + a.elements * size).or(arena[t]);
                }
            }
        }
        let count = plan.parts().len();
        let title = format!(
            "{}: {count} part{}, arena {} B, workspace {} B",
            plan.graph().name,
            if count == 1 { "" } else { "s" },
            plan.arena_bytes(),
            plan.workspace_size()
        );
        Sketch { graph, title, parts, node_part, arena }
    }

    /// The cluster each tensor is drawn in: its producer's part, or, for a by-value scalar, its
    /// readers' part when they share one; `None` (outside every cluster) for graph inputs,
    /// tensors in the arena and views between parts.
    fn homes(&self) -> Vec<Option<usize>> {
        let producer = partition::producers(&self.graph);
        (0..self.graph.tensors.len())
            .map(|t| match (producer[t], self.graph.tensors[t].pass_by_value) {
                _ if self.arena[t].is_some() => None,
                (Some(p), _) => self.node_part[p],
                (None, Some(_)) => {
                    let mut readers =
                        self.graph.nodes.iter().enumerate().filter(|(_, n)| n.inputs.iter().any(|i| i.0 == t));
                    let first = self.node_part[readers.next()?.0]?;
                    readers.all(|(n, _)| self.node_part[n] == Some(first)).then_some(first)
                }
                // A graph input.
                (None, None) => None,
            })
            .collect()
    }

    /// The bytes tensor `t` spans in memory.
    fn bytes(&self, t: usize) -> usize {
        let tensor = &self.graph.tensors[t];
        tensor.storage_len().saturating_mul(tensor.data_type.size_bytes())
    }

    /// What an arena tensor's label adds: where in the arena it is and its size.
    fn arena_line(&self, t: usize, offset: u64) -> String {
        format!("arena +{offset}, {} B", self.bytes(t))
    }

    /// Each cluster's lines and then the lines outside every cluster (last), tensors before ops,
    /// as `tensor(t, arena offset)` and `op(n, whether a part runs it)` write them.
    fn place_lines(
        &self,
        tensor: impl Fn(usize, Option<u64>) -> String,
        op: impl Fn(usize, bool) -> String,
    ) -> Vec<Vec<String>> {
        let mut lines = vec![Vec::new(); self.parts.len() + 1];
        let outside = self.parts.len();
        for (t, home) in self.homes().into_iter().enumerate() {
            lines[home.unwrap_or(outside)].push(tensor(t, self.arena[t]));
        }
        for (n, part) in self.node_part.iter().enumerate() {
            lines[part.unwrap_or(outside)].push(op(n, part.is_some()));
        }
        lines
    }

    fn dot(&self) -> String {
        let g = &self.graph;
        let mut s = String::new();
        pic::dot_header(&mut s, &g.name);
        let _ = writeln!(s, "  label=\"{}\";\n  labelloc=t;\n  fontname=\"Helvetica\";", dot_text(&self.title));
        let mut lines = self.place_lines(
            |t, arena| match arena {
                None => format!("t{t} [{}];", pic::dot_tensor(g, t)),
                Some(offset) => format!(
                    "t{t} [shape=box, style=\"dashed,filled\", fillcolor=\"#fef7e0\", label=\"{}\\n{}\"];",
                    pic::escape(&pic::tensor_label(g, t)),
                    dot_text(&self.arena_line(t, offset))
                ),
            },
            |n, in_part| {
                if in_part {
                    format!("n{n} [{}];", pic::dot_node(g, n))
                } else {
                    format!(
                        "n{n} [shape=ellipse, style=\"filled,dashed\", fillcolor=\"#f1f3f4\", label=\"{}\\nview: no kernel\"];",
                        pic::escape(&pic::node_label(g, n))
                    )
                }
            },
        );
        for line in lines.pop().unwrap_or_default() {
            let _ = writeln!(s, "  {line}");
        }
        for (k, (part, body)) in self.parts.iter().zip(lines).enumerate() {
            let _ = writeln!(s, "  subgraph cluster_{k} {{");
            let label = match &part.cut {
                Some(cut) => {
                    let _ = writeln!(s, "    tooltip=\"{}\";", dot_text(cut));
                    format!("{}\n{}", part.title, wrap(&format!("cut: {cut}"), TITLE_WIDTH))
                }
                None => part.title.clone(),
            };
            let _ = writeln!(s, "    label=\"{}\";\n    style=rounded;\n    color=\"#5f6368\";", dot_text(&label));
            for line in body {
                let _ = writeln!(s, "    {line}");
            }
            s.push_str("  }\n");
        }
        for n in 0..g.nodes.len() {
            for e in pic::edges(g, n) {
                let (from, to) = e.ends(n);
                let style = if self.arena[e.tensor.0].is_some() { ", style=dashed" } else { "" };
                let _ = writeln!(s, "  {from} -> {to} [label=\"{}\"{style}];", e.port);
            }
        }
        s.push_str("}\n");
        s
    }

    fn mermaid(&self) -> String {
        let g = &self.graph;
        let mut s =
            format!("---\ntitle: \"{}\"\n---\nflowchart TD\n", self.title.replace('\\', "\\\\").replace('"', "\\\""));
        let mut lines = self.place_lines(
            |t, arena| match arena {
                None => pic::mermaid_tensor(g, t),
                // Virtual in the graph: slanted, as `Graph::to_mermaid` draws a virtual tensor.
                Some(offset) => format!(
                    "t{t}[/\"{}<br/>{}\"/]:::arena",
                    pic::mermaid_tensor_label(g, t),
                    mermaid_text(&self.arena_line(t, offset))
                ),
            },
            |n, in_part| {
                if in_part {
                    pic::mermaid_node(g, n)
                } else {
                    format!("n{n}((\"{}<br/>view: no kernel\")):::view", pic::mermaid_node_label(g, n))
                }
            },
        );
        for line in lines.pop().unwrap_or_default() {
            let _ = writeln!(s, "  {line}");
        }
        for (k, (part, body)) in self.parts.iter().zip(lines).enumerate() {
            let title = match &part.cut {
                Some(cut) => format!("{}\n{}", part.title, wrap(&format!("cut: {cut}"), TITLE_WIDTH)),
                None => part.title.clone(),
            };
            let _ = writeln!(s, "  subgraph part{k}[\"{}\"]", mermaid_text(&title));
            for line in body {
                let _ = writeln!(s, "    {line}");
            }
            s.push_str("  end\n");
        }
        for n in 0..g.nodes.len() {
            for e in pic::edges(g, n) {
                let (from, to) = e.ends(n);
                let arrow = if self.arena[e.tensor.0].is_some() { "-.->" } else { "-->" };
                let _ = writeln!(s, "  {from} {arrow} {to}");
            }
        }
        if self.arena.iter().any(Option::is_some) {
            s.push_str("  classDef arena fill:#fef7e0,stroke-dasharray:5 5\n");
        }
        if self.node_part.iter().any(Option::is_none) {
            s.push_str("  classDef view fill:#f1f3f4,stroke-dasharray:5 5\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::GraphBuilder;
    use crate::DataType;

    /// x·w, a view of it, then relu(view · 0.5) in a second part: the matmul's output in the
    /// arena, the reshape between the parts, the scalar with the mul that reads it.
    fn sketch() -> Sketch {
        let mut g = GraphBuilder::new("two");
        let x = g.input("x", DataType::F16, &[1, 8, 4]).unwrap();
        let w = g.input("w", DataType::F16, &[1, 4, 16]).unwrap();
        let c = g.matmul(x, w).unwrap();
        let v = g.op("reshape", &[c.into()], &[("shape".into(), vec![1, 16, 8].into())]).unwrap()[0];
        let d = g.op("mul", &[v.into(), 0.5.into()], &[]).unwrap()[0];
        let y = g.op("relu", &[d.into()], &[]).unwrap()[0];
        g.output(y, "y", DataType::F16).unwrap();
        let graph = g.build().unwrap();
        let mut arena = vec![None; graph.tensors.len()];
        arena[c.0] = Some(0);
        arena[v.0] = Some(0);
        let parts = vec![
            Cluster { title: "part 0: eng7, workspace 0 B, writes 512 B".into(), cut: None },
            Cluster {
                title: "part 1: eng3, workspace 0 B".into(),
                cut: Some("cuDNN refused \"mul\" #3 <fused>\\".into()),
            },
        ];
        Sketch { title: "two: 2 parts".into(), parts, node_part: vec![Some(0), None, Some(1), Some(1)], arena, graph }
    }

    /// The lines of each DOT cluster, and the lines outside them.
    fn dot_clusters(dot: &str) -> (Vec<Vec<&str>>, Vec<&str>) {
        let (mut clusters, mut outside, mut open) = (Vec::new(), Vec::new(), None::<Vec<&str>>);
        for line in dot.lines() {
            if line.starts_with("  subgraph cluster_") {
                assert!(open.is_none(), "nested: {dot}");
                open = Some(Vec::new());
            } else if line == "  }" {
                clusters.push(open.take().unwrap());
            } else if let Some(lines) = &mut open {
                lines.push(line.trim());
            } else {
                outside.push(line.trim());
            }
        }
        assert!(open.is_none());
        (clusters, outside)
    }

    #[test]
    fn dot_draws_parts_as_clusters_with_the_arena_between() {
        let s = sketch();
        let dot = s.dot();
        let (clusters, outside) = dot_clusters(&dot);
        assert_eq!(clusters.len(), 2, "{dot}");
        // Part 0: the matmul alone (its output is in the arena); part 1: mul, relu, the scalar,
        // the mul's output and y.
        assert_eq!(clusters[0].iter().filter(|l| l.starts_with('n')).count(), 1, "{dot}");
        assert_eq!(clusters[1].iter().filter(|l| l.starts_with('n')).count(), 2, "{dot}");
        assert!(clusters[1].iter().any(|l| l.contains("label=\"f32 = 0.5\"")), "{dot}");
        assert!(clusters[1].iter().any(|l| l.contains("label=\"y\\nf16[1, 16, 8] row-major\"")), "{dot}");
        // The cut, escaped, as the tooltip and the label's second line.
        let cut = r#"cuDNN refused \"mul\" #3 <fused>\\"#;
        assert!(clusters[1].contains(&format!("tooltip=\"{cut}\";").as_str()), "{dot}");
        assert!(clusters[1].contains(&format!("label=\"part 1: eng3, workspace 0 B\\ncut: {cut}\";").as_str()));
        // The matmul's output and its view: outside, shaded, with offset and size; the view
        // node outside too; every edge touching them dashed.
        assert!(outside.contains(&"t2 [shape=box, style=\"dashed,filled\", fillcolor=\"#fef7e0\", label=\"matmul_0\\nf32[1, 8, 16] row-major\\narena +0, 512 B\"];"), "{dot}");
        assert!(outside.iter().any(|l| l.starts_with("t3 [") && l.contains("arena +0, 512 B")), "{dot}");
        assert!(outside.iter().any(|l| l.starts_with("n1 [") && l.contains("view: no kernel")), "{dot}");
        assert!(outside.contains(&"label=\"two: 2 parts\";"), "{dot}");
        let dashed: Vec<&&str> = outside.iter().filter(|l| l.ends_with("style=dashed];")).collect();
        assert_eq!(
            dashed,
            [
                &"n0 -> t2 [label=\"C\", style=dashed];",
                &"t2 -> n1 [label=\"X\", style=dashed];",
                &"n1 -> t3 [label=\"Y\", style=dashed];",
                &"t3 -> n2 [label=\"IN_0\", style=dashed];"
            ]
        );
        assert_eq!(dot.matches(" -> ").count(), 2 + 1 + 2 + 2 + 1 + 1 + 1, "{dot}");
    }

    #[test]
    fn cuts_wrap_at_spaces() {
        assert_eq!(wrap("aa bb cc", 5), "aa bb\ncc");
        assert_eq!(wrap("a verylongword b", 4), "a\nverylongword\nb");
        assert_eq!(wrap("short", 80), "short");
    }

    #[test]
    fn mermaid_draws_parts_as_subgraphs() {
        let chart = sketch().mermaid();
        assert!(chart.starts_with("---\ntitle: \"two: 2 parts\"\n---\nflowchart TD\n"), "{chart}");
        assert_eq!(chart.matches("\n  subgraph ").count(), 2, "{chart}");
        assert_eq!(chart.matches("\n  end\n").count(), 2, "{chart}");
        assert!(chart.contains("  subgraph part1[\"part 1: eng3, workspace 0 B<br/>cut: cuDNN refused #quot;mul#quot; #35;3 #lt;fused#gt;\\\"]\n"), "{chart}");
        assert!(
            chart.contains("  t2[/\"matmul_0<br/>f32[1, 8, 16] row-major<br/>arena +0, 512 B\"/]:::arena\n"),
            "{chart}"
        );
        assert!(
            chart.contains("  n1((\"reshape_1<br/>reshape(shape=[1, 16, 8])<br/>view: no kernel\")):::view\n"),
            "{chart}"
        );
        assert_eq!(chart.matches(" -.-> ").count(), 4, "{chart}");
        assert_eq!(chart.matches(" --> ").count(), 6, "{chart}");
        assert!(chart.ends_with(
            "classDef arena fill:#fef7e0,stroke-dasharray:5 5\n  classDef view fill:#f1f3f4,stroke-dasharray:5 5\n"
        ));
    }
}
