//! Issue 16: `ExecutionPlan::to_dot`/`to_mermaid` show a plan's parts. Plans are built deviceless
//! against the H200's properties (CI runs these with real cuDNN); the pictures are checked for
//! their clusters, the tensors exchanged through the arena, the views between parts and the cut
//! reasons, and parsed for balanced structure.

#![cfg(feature = "cudnn")]

use crate::common;

use std::collections::HashSet;

use cudnn_graph::backend::{BuildOptions, ExecutionPlan};
use cudnn_graph::graph;

graph! {
    /// A transformer MLP: y = gelu(x·W1 + b1)·W2 + b2 + x.
    #[intermediate(bf16)]
    pub Mlp<const E: usize, const F: usize, dyn T>(
        x: bf16[1, T, E],
        w1: bf16[1, E, F],
        b1: bf16[1, 1, F],
        w2: bf16[1, F, E],
        b2: bf16[1, 1, E],
    ) -> (y: bf16[1, T, E]) {
        let h = gelu(add(matmul(x, w1), b1));
        y = add(add(matmul(h, w2), b2), x);
    }

    /// One kernel: a matmul with a scaled, clipped epilogue.
    pub MatmulScaleRelu<const M: usize, const K: usize, const N: usize>(a: f16[1, M, K], b: f16[1, K, N])
        -> (y: f16[1, M, N])
    {
        y = relu(mul(matmul(a, b), 0.5));
    }

    /// A ResNet basic block: conv → batchnorm_inference → relu → conv → residual add.
    #[intermediate(f16)]
    pub ResBlock(
        x: f16[4, 32, 16, 16] channels_last,
        w1: f16[32, 32, 3, 3] channels_last,
        mean: f32[1, 32, 1, 1],
        inv_var: f32[1, 32, 1, 1],
        scale: f32[1, 32, 1, 1],
        bias: f32[1, 32, 1, 1],
        w2: f16[32, 32, 3, 3] channels_last,
    ) -> (y: f16[4, 32, 16, 16] channels_last) {
        let a = relu(batchnorm_inference(conv_fprop(x, w1, padding = [1, 1]), mean, inv_var, scale, bias));
        y = add(conv_fprop(a, w2, padding = [1, 1]), x);
    }

    /// Attention between two projections: Q/K/V reach the attention, and O the output
    /// projection, as views of the arena.
    #[intermediate(bf16)]
    pub ProjectedAttention(x: bf16[1, 128, 128], wq: bf16[1, 128, 128], wo: bf16[1, 128, 128])
        -> (y: bf16[1, 128, 128])
    {
        let q = transpose(reshape(matmul(x, wq), shape = [2, 64, 4, 32]), permutation = [0, 2, 1, 3]);
        let o = sdpa(q, q, q, causal = true);
        y = matmul(reshape(transpose(o, permutation = [0, 2, 1, 3]), shape = [1, 128, 128]), wo);
    }
}

/// The ids defined by `lines` (each line's text before the first of `cut`), each at most once.
fn defined<'a>(lines: impl Iterator<Item = &'a str>, cut: &[char]) -> HashSet<String> {
    let mut ids = HashSet::new();
    for line in lines {
        let id: String = line.trim().split(cut).next().unwrap_or_default().to_string();
        assert!(ids.insert(id.clone()), "`{id}` defined twice");
    }
    ids
}

/// Checks a Mermaid chart's structure: front matter, one `flowchart`, `subgraph`/`end` balanced
/// and never nested, every node defined once, every edge between defined nodes. Returns the
/// clusters, each as the ids defined in it, and the ids defined outside every cluster.
fn parse_mermaid(chart: &str) -> (Vec<HashSet<String>>, HashSet<String>) {
    let body = chart.strip_prefix("---\ntitle: \"").expect("front matter with a title");
    let (_, body) = body.split_once("\"\n---\nflowchart TD\n").expect("one flowchart after the front matter");
    let (mut clusters, mut outside, mut edges) = (Vec::new(), Vec::new(), Vec::new());
    let mut open: Option<Vec<&str>> = None;
    for line in body.lines() {
        let t = line.trim();
        if t.starts_with("subgraph ") {
            assert!(open.is_none(), "nested subgraph: {line}");
            open = Some(Vec::new());
        } else if t == "end" {
            clusters.push(defined(open.take().expect("`end` without `subgraph`").into_iter(), &['[', '(']));
        } else if t.contains("-->") || t.contains("-.->") {
            assert!(open.is_none(), "edge inside a subgraph: {line}");
            edges.push(t);
        } else if t.starts_with("classDef ") {
        } else if let Some(lines) = &mut open {
            lines.push(t);
        } else {
            outside.push(t);
        }
    }
    assert!(open.is_none(), "subgraph without `end`");
    let outside = defined(outside.into_iter(), &['[', '(']);
    let all: HashSet<&String> = clusters.iter().flatten().chain(&outside).collect();
    for e in edges {
        let ends: Vec<&str> = e.split_whitespace().collect();
        assert_eq!(ends.len(), 3, "{e}");
        for end in [ends[0], ends[2]] {
            assert!(all.contains(&end.to_string()), "edge `{e}` names undefined `{end}`");
        }
    }
    (clusters, outside)
}

/// Checks a DOT picture's structure: braces balanced outside strings, `cluster_k` subgraphs not
/// nested. Returns each cluster's lines.
fn parse_dot(dot: &str) -> Vec<Vec<String>> {
    let (mut depth, mut quoted, mut escaped) = (0i32, false, false);
    for c in dot.chars() {
        match (quoted, escaped, c) {
            (true, false, '\\') => escaped = true,
            (true, true, _) => escaped = false,
            (_, false, '"') => quoted = !quoted,
            (false, _, '{') => depth += 1,
            (false, _, '}') => depth -= 1,
            _ => {}
        }
        assert!(depth >= 0, "unbalanced braces");
    }
    assert!(!quoted && depth == 0, "unbalanced quotes or braces");
    let mut clusters = Vec::new();
    let mut open: Option<Vec<String>> = None;
    for line in dot.lines() {
        if line.trim_start().starts_with("subgraph cluster_") {
            assert!(open.is_none());
            open = Some(Vec::new());
        } else if line == "  }" {
            clusters.push(open.take().unwrap());
        } else if let Some(lines) = &mut open {
            lines.push(line.trim().to_string());
        }
    }
    clusters
}

#[needs_cudnn]
#[test]
fn mlp_picture_has_two_parts_and_the_arena_tensor_between() {
    let Some(cudnn) = common::deviceless() else { return };
    let graph = Mlp::<256, 1024>::new(128).graph().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    assert_eq!(plan.parts().len(), 2);
    let dot = plan.to_dot();
    println!("{dot}");
    let clusters = parse_dot(&dot);
    assert_eq!(clusters.len(), 2);
    let engine = plan.parts()[0].selected().tag();
    assert!(clusters[0][0].starts_with(&format!("label=\"part 0: {engine}, workspace ")), "{dot}");
    assert!(clusters[0][0].contains(", writes 262144 B\""), "{dot}");
    // The cut is the second cluster's tooltip, and its label's next lines (wrapped).
    let cut = plan.parts()[1].cut().unwrap().to_string();
    assert!(cut.contains("both are anchor ops"));
    let cut_in_dot = cut.replace('"', "\\\"");
    assert!(clusters[1].iter().any(|l| *l == format!("tooltip=\"{cut_in_dot}\";")), "{dot}");
    let label = clusters[1].iter().find(|l| l.starts_with("label=\"part 1: ")).unwrap();
    assert!(label.replace("\\n", " ").contains(&format!(" cut: {cut_in_dot}")), "{label}");
    assert!(label.contains("\\ncut: `matmul_0` (matmul) | `matmul_1` (matmul): both are anchor ops"), "{label}");
    assert!(clusters.iter().all(|c| c.iter().all(|l| !l.contains("arena +"))), "the arena tensor is in a cluster");
    // h: bf16[1, 128, 1024], written by part 0 and read by part 1 through the arena, dashed.
    let h = dot.lines().find(|l| l.contains("arena +0, 262144 B")).unwrap_or_else(|| panic!("{dot}"));
    assert!(h.contains("style=\"dashed,filled\"") && h.contains("\\nbf16[1, 128, 1024]"), "{h}");
    let h_id = h.trim().split(' ').next().unwrap();
    let dashed: Vec<&str> = dot.lines().filter(|l| l.contains("style=dashed]")).collect();
    assert_eq!(dashed.len(), 2, "gelu writes h, the second matmul reads it: {dashed:?}");
    assert!(dashed
        .iter()
        .all(|l| l.contains(&format!("{h_id} ")) || l.ends_with(&format!("-> {h_id} [label=\"Y\", style=dashed];"))));
    assert!(dot.contains("label=\"Mlp: 2 parts, arena 262144 B, workspace "), "{dot}");

    let chart = plan.to_mermaid();
    println!("{chart}");
    let (clusters, outside) = parse_mermaid(&chart);
    assert_eq!(clusters.len(), 2);
    // Three ops in each part, and the tensors they make there (not h, which is in the arena).
    assert_eq!(clusters.iter().map(|c| c.iter().filter(|id| id.starts_with('n')).count()).collect::<Vec<_>>(), [3, 3]);
    assert!(outside.contains(h_id), "{chart}");
    assert!(chart.contains(":::arena") && chart.contains("-.->"), "{chart}");
    assert!(chart.contains("cut: `matmul_0` (matmul) | `matmul_1` (matmul): both are anchor ops"), "{chart}");
}

#[needs_cudnn]
#[test]
fn one_kernel_is_one_cluster() {
    let Some(cudnn) = common::deviceless() else { return };
    let graph = MatmulScaleRelu::<64, 32, 16>::new().graph().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    assert!(!plan.is_partitioned());
    let dot = plan.to_dot();
    let clusters = parse_dot(&dot);
    assert_eq!(clusters.len(), 1, "{dot}");
    assert!(!dot.contains("arena +") && !dot.contains("cut:") && !dot.contains("tooltip"), "{dot}");
    // Every op in the cluster; the by-value 0.5 with the mul that reads it; the inputs outside.
    assert_eq!(clusters[0].iter().filter(|l| l.contains("shape=ellipse")).count(), 3, "{dot}");
    assert!(clusters[0].iter().any(|l| l.contains("f32 = 0.5")), "{dot}");
    assert!(dot.lines().any(|l| l.starts_with("  t") && l.contains("label=\"a\\nf16[1, 64, 32]")), "{dot}");
    assert!(dot.contains("label=\"MatmulScaleRelu: 1 part, arena 0 B, workspace "), "{dot}");
    let chart = plan.to_mermaid();
    let (clusters, outside) = parse_mermaid(&chart);
    assert_eq!(clusters.len(), 1, "{chart}");
    assert_eq!(outside.len(), 2, "a and b: {chart}");
    assert!(!chart.contains("classDef"), "{chart}");
}

#[needs_cudnn]
#[test]
fn views_between_parts_are_outside_every_cluster() {
    let Some(cudnn) = common::deviceless() else { return };
    let graph = ProjectedAttention::new().graph().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let ops: Vec<Vec<&str>> = plan
        .parts()
        .iter()
        .map(|p| p.nodes().iter().map(|n| graph.nodes.iter().find(|m| m.name == *n).unwrap().op.call_name()).collect())
        .collect();
    assert_eq!(ops, [vec!["matmul"], vec!["sdpa"], vec!["matmul"]]);
    let dot = plan.to_dot();
    println!("{dot}");
    let clusters = parse_dot(&dot);
    assert_eq!(clusters.len(), 3);
    // The reshapes and transposes: four views, no kernel, outside every cluster.
    let views: Vec<&str> = dot.lines().filter(|l| l.contains("view: no kernel")).collect();
    assert_eq!(views.len(), 4, "{dot}");
    assert!(views.iter().all(|l| l.starts_with("  n")));
    assert!(clusters.iter().flatten().all(|l| !l.contains("view: no kernel")));
    assert!(clusters[1][0].contains("reads a view of memory an earlier part writes"), "{dot}");
    // A view of a view no part reads is the arena's memory too.
    assert!(dot.contains("label=\"reshape_0\\nbf16[2, 64, 4, 32] row-major\\narena +0, 32768 B\""), "{dot}");
    let (clusters, outside) = parse_mermaid(&plan.to_mermaid());
    assert_eq!(clusters.len(), 3);
    assert_eq!(outside.iter().filter(|id| id.starts_with('n')).count(), 4);
}

#[needs_cudnn]
#[test]
fn the_rewritten_graph_is_drawn() {
    let Some(cudnn) = common::deviceless() else { return };
    let graph = ResBlock::new().graph().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    assert_eq!(plan.rewrites().len(), 1);
    let dot = plan.to_dot();
    // The parts name the nodes of the rewritten graph (the batch norm as sub/mul/mul/add), and
    // every one of them is drawn in its part.
    let clusters = parse_dot(&dot);
    let ops: Vec<usize> = clusters.iter().map(|c| c.iter().filter(|l| l.contains("shape=ellipse")).count()).collect();
    assert_eq!(ops, plan.parts().iter().map(|p| p.nodes().len()).collect::<Vec<_>>(), "{dot}");
    assert_eq!(ops.iter().sum::<usize>(), dot.matches("shape=ellipse").count(), "every op in a part: {dot}");
    for name in plan.parts().iter().flat_map(|p| p.nodes()) {
        assert!(dot.contains(&format!("label=\"{name}\\n")), "`{name}` is not drawn: {dot}");
    }
    assert!(!dot.contains("batchnorm_inference(") && dot.contains("\\nsub\""), "{dot}");
    assert_eq!(parse_mermaid(&plan.to_mermaid()).0.len(), 2);
}
