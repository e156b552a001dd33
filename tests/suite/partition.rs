//! Issue 16: graphs cuDNN 9.19 will not fuse into one kernel plan as parts, deviceless, and run on
//! the CPU reference engine as one graph. Each test lists the parts it expects.
#![cfg(feature = "cudnn")]

use crate::blocks;
use crate::common;

use blocks::{AttentionBlock, Mlp, NormLinear, ResBlock};
use cudnn_graph::backend::{BackendError, BuildOptions, CutReason, ExecutionPlan};
use cudnn_graph::reference::{self, Array};
use cudnn_graph::rng::SplitMix64;
use cudnn_graph::Graph;

/// The parts of a plan, each as its nodes' ops.
fn parts(plan: &ExecutionPlan) -> Vec<Vec<&'static str>> {
    plan.parts()
        .iter()
        .map(|p| {
            p.nodes().iter().map(|n| plan.graph().nodes.iter().find(|m| m.name == *n).unwrap().op.call_name()).collect()
        })
        .collect()
}

fn show(plan: &ExecutionPlan) {
    println!(
        "{}: {} parts, arena {} B, workspace {} B",
        plan.graph().name,
        plan.parts().len(),
        plan.arena_bytes(),
        plan.workspace_size()
    );
    for (k, p) in plan.parts().iter().enumerate() {
        println!("  part {k}: {p}");
    }
}

/// Random inputs (never zeros) for every graph input, rounded to its type; the whole graph on
/// the reference engine; the plan emulated part by part through its memory plan. Returns the
/// largest difference relative to the output's largest magnitude.
fn emulated_against_whole(plan: &ExecutionPlan, seed: u64) -> f64 {
    let graph: &Graph = plan.graph();
    let mut rng = SplitMix64::new(seed);
    let inputs: Vec<Array> = graph
        .inputs()
        .iter()
        .map(|id| {
            let t = graph.tensor(*id);
            let mut a = Array::from_fn(&t.dims, |_| {
                let v = rng.uniform(0.25, 1.0);
                if rng.uniform(0.0, 1.0) < 0.5 {
                    -v
                } else {
                    v
                }
            });
            // Statistics a batch norm divides by stay positive.
            if t.name == "inv_var" {
                a.data.iter_mut().for_each(|v| *v = v.abs());
            }
            a.round_to(t.data_type);
            a
        })
        .collect();
    let mut values = vec![None; graph.tensors.len()];
    for (id, a) in graph.inputs().iter().zip(&inputs) {
        values[id.0] = Some(a.clone());
    }
    let want = reference::run_arrays(graph, values).unwrap();
    let got = plan.emulate(&inputs).unwrap();
    let mut worst: f64 = 0.0;
    for (g, w) in got.iter().zip(&want) {
        let scale = w.data.iter().fold(0f64, |m, v| m.max(v.abs()));
        assert!(scale > 0.0);
        for (a, b) in g.data.iter().zip(&w.data) {
            assert!(a.is_finite(), "{}: emulated output reads memory no part wrote", graph.name);
            worst = worst.max((a - b).abs() / scale);
        }
    }
    worst
}

#[needs_cudnn]
#[test]
fn mlp_plans_as_two_matmul_parts() {
    let Some(cudnn) = common::deviceless() else { return };
    let graph = Mlp::<256, 1024>::new(128).graph().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    show(&plan);
    assert_eq!(parts(&plan), [vec!["matmul", "add", "gelu"], vec!["matmul", "add", "add"]]);
    assert_eq!(plan.parts()[1].cut().unwrap().reason, CutReason::SecondAnchor);
    // h (bf16 [1, 128, 1024]) is the one intermediate in the arena.
    assert_eq!(plan.arena_bytes(), 128 * 1024 * 2);
    assert_eq!(plan.parts()[0].intermediate_bytes(), 128 * 1024 * 2);
    assert!(plan.workspace_size() >= plan.arena_bytes());
    // The intermediate is materialized in its declared type, as the whole graph rounds it.
    assert_eq!(emulated_against_whole(&plan, 1), 0.0);
    // One kernel or an error naming the pair.
    let single = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default().single_kernel()).unwrap_err();
    let BackendError::CannotFuse { cut: Some(cut), .. } = &single else { panic!("{single}") };
    assert_eq!((cut.before.1, cut.after.1), ("matmul", "matmul"));
    println!("{single}");
    assert!(single.to_string().contains("`matmul_0` (matmul) | `matmul_1` (matmul)"), "{single}");
}

#[needs_cudnn]
#[test]
fn norm_then_matmul_plans_as_two_parts() {
    let Some(cudnn) = common::deviceless() else { return };
    let graph = NormLinear::<256, 512>::new(64).graph().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    show(&plan);
    assert_eq!(parts(&plan), [vec!["rmsnorm"], vec!["matmul"]]);
    assert_eq!(plan.parts()[1].cut().unwrap().reason, CutReason::SecondAnchor);
    assert_eq!(emulated_against_whole(&plan, 2), 0.0);
}

#[needs_cudnn]
#[test]
fn resnet_block_plans_as_two_conv_parts() {
    let Some(cudnn) = common::deviceless() else { return };
    let graph = ResBlock::<32>::new(4, 16, 16).graph().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    show(&plan);
    assert_eq!(plan.parts().len(), 2);
}

#[needs_cudnn]
#[test]
fn attention_block_plans_in_parts() {
    let Some(cudnn) = common::deviceless() else { return };
    let graph = AttentionBlock::<4, 2, 32>::new(2, 64).graph().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    show(&plan);
    assert_eq!(
        parts(&plan),
        [vec!["rmsnorm"], vec!["matmul"], vec!["matmul"], vec!["matmul"], vec!["sdpa"], vec!["matmul", "add"]]
    );
    // Q/K/V reach the attention and O the output projection as views of the arena (no copies),
    // O stored BSHD so that its [1, T, H·D] view is the memory the projection reads.
    assert_eq!(emulated_against_whole(&plan, 3), 0.0);
}

/// A partitioned plan's payload holds every part and reloads as the same plan; parts that do not
/// partition the graph are refused before cuDNN sees them.
#[needs_cudnn]
#[test]
fn partitioned_payload_round_trips() {
    use cudnn_graph::serialize::plan::{parse_payload, read_payload, seal, Expect, PlanOrigin, SerializeOptions};
    let Some(cudnn) = common::deviceless() else { return };
    let graph = AttentionBlock::<4, 2, 32>::new(2, 64).graph().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let origin = PlanOrigin::of(&cudnn);
    let bytes = cudnn_graph::serialize::plan::write_payload(
        &plan,
        &origin,
        SerializeOptions { structure: true },
        &Expect::default(),
    )
    .unwrap();
    let parsed = parse_payload(&bytes).unwrap();
    assert_eq!(parsed.plan.parts.len(), plan.parts().len());
    assert!(parsed.plan.plan_json.is_empty());
    let (loaded, _) = read_payload(&cudnn, &bytes, None, &Expect::default()).unwrap();
    assert_eq!(parts(&loaded), parts(&plan));
    assert_eq!(loaded.workspace_size(), plan.workspace_size());
    assert_eq!(loaded.arena_bytes(), plan.arena_bytes());
    for (a, b) in loaded.parts().iter().zip(plan.parts()) {
        assert_eq!(a.selected().engine_id, b.selected().engine_id);
        assert_eq!(a.cut(), b.cut(), "the table's cuts are known again after loading");
    }
    assert_eq!(emulated_against_whole(&loaded, 4), 0.0);

    // Two parts swapped: the second reads what the first computes.
    let text = std::str::from_utf8(&bytes).unwrap();
    let body_at = text.find(r#""body":"#).unwrap() + 7;
    let mut body: serde_json::Value = serde_json::from_str(&text[body_at..text.len() - 1]).unwrap();
    body["plan"]["parts"].as_array_mut().unwrap().swap(3, 4);
    let tampered = seal(&body.to_string(), None);
    let e = read_payload(&cudnn, &tampered, None, &Expect::default()).unwrap_err();
    println!("{e}");
    assert!(e.to_string().contains("its parts do not partition the graph"), "{e}");
}
