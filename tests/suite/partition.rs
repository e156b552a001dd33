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

cudnn_graph::graph! {
    /// [`ResBlock`] as a user writes it without `channels_last` (issue 36): every port NCHW.
    #[intermediate(f16)]
    pub ResBlockNchw<const C: usize, dyn N, dyn H, dyn W>(
        x: f16[N, C, H, W],
        w1: f16[C, C, 3, 3],
        mean: f32[1, C, 1, 1],
        inv_var: f32[1, C, 1, 1],
        scale: f32[1, C, 1, 1],
        bias: f32[1, C, 1, 1],
        w2: f16[C, C, 3, 3],
    ) -> (y: f16[N, C, H, W]) {
        let a = relu(batchnorm_inference(conv_fprop(x, w1, padding = [1, 1]), mean, inv_var, scale, bias));
        y = add(conv_fprop(a, w2, padding = [1, 1]), x);
    }
}

/// The ResNet block without `channels_last`: its residual add, planned apart from the second
/// convolution, reads that convolution's channels-last output into the NCHW port `y`, which rule
/// `pointwise.axis_order` refuses. The error says so (channels-last against row-major, no view or
/// transpose) and names the convolution ports to declare `channels_last`, as docs/guide.md
/// promises; with them declared ([`ResBlock`]) the block plans.
#[needs_cudnn]
#[test]
fn resnet_block_without_channels_last_names_the_ports_to_declare() {
    let Some(cudnn) = common::deviceless() else { return };
    let graph = ResBlockNchw::<32>::new(4, 16, 16).graph().unwrap();
    let e = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap_err();
    println!("{e}");
    let BackendError::SupportRule { node, rule, message, .. } = &e else { panic!("{e:?}") };
    assert_eq!((node.as_str(), *rule), ("y", "pointwise.axis_order"));
    assert!(!message.contains("transpose") && !message.contains("view"), "{message}");
    assert!(message.contains("is channels-last (NHWC) but is read elementwise into `y`"), "{message}");
    assert!(message.contains("which is row-major (NCHW)"), "{message}");
    let declare =
        message.split_once("declare the convolution ports of graph `ResBlockNchw` `channels_last`").map(|s| s.1);
    let declare = declare.unwrap_or_else(|| panic!("no ports named: {message}"));
    let named: Vec<&str> = declare.split('`').skip(1).step_by(4).collect();
    // `x: f16[N, C, H, W] channels_last` and `GraphBuilder::set_channels_last` come first.
    assert_eq!(named, ["x: f16[N, C, H, W] channels_last", "x", "w1", "w2", "y"], "{message}");
    assert!(declare.contains("`x` (f16[4, 32, 16, 16] row-major) of node `conv_fprop_0` (conv_fprop)"), "{message}");
    let fixed = ResBlock::<32>::new(4, 16, 16).graph().unwrap();
    assert!(ExecutionPlan::build(&cudnn, &fixed, &BuildOptions::default()).is_ok());
}

cudnn_graph::graph! {
    /// A relu from a channels-last port into a row-major one: no convolution, no view.
    pub MixedRelu(x: f16[2, 8, 4, 4] channels_last) -> (y: f16[2, 8, 4, 4]) {
        y = relu(x);
    }
}

/// An elementwise kernel mixing channels-last and row-major ports is refused by rule
/// `pointwise.axis_order` saying so and to use one order; without a convolution it names no
/// convolution ports and says nothing of views or transposes.
#[needs_cudnn]
#[test]
fn an_elementwise_graph_mixing_layouts_is_told_to_use_one() {
    let Some(cudnn) = common::deviceless() else { return };
    let graph = MixedRelu::new().graph().unwrap();
    let e = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap_err();
    println!("{e}");
    let BackendError::SupportRule { rule: "pointwise.axis_order", message, .. } = &e else { panic!("{e:?}") };
    assert!(message.starts_with("`x` (strides [128, 1, 32, 8]) is channels-last (NHWC)"), "{message}");
    assert!(message.ends_with("(`channels_last` on every port of rank 3 to 5, or on none)"), "{message}");
    assert!(!message.contains("transpose") && !message.contains("convolution"), "{message}");
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

/// At decode (B = 1, S = 1) every matmul of every part reads row-major operands, as the same
/// block split by hand into typed graphs does: the output projection's A (attention's output,
/// heads merged back by a transpose and a reshape) was `[1, 1, H·D]` with strides `[1, 1, 1]`,
/// which cuDNN read as a column-major matrix of leading dimension 1 and ran 5x slower on the
/// H100 (72 us against 14; `bench --only partition`, 2026-12-07).
#[needs_cudnn]
#[test]
fn decode_attention_block_parts_read_row_major_operands() {
    let Some(cudnn) = common::deviceless() else { return };
    let graph = AttentionBlock::<4, 2, 32>::new(1, 1).graph().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    show(&plan);
    let mut matmuls = 0;
    for part in plan.parts() {
        let g = part.graph();
        for node in g.nodes.iter().filter(|n| n.op.call_name() == "matmul") {
            for &id in &node.inputs {
                let t = g.tensor(id);
                assert_eq!(
                    t.strides,
                    cudnn_graph::dim::packed_strides(&t.dims),
                    "{}: operand `{}` of `{}`",
                    g.name,
                    t.name,
                    node.name
                );
            }
            matmuls += 1;
        }
    }
    assert_eq!(matmuls, 4);
    assert_eq!(emulated_against_whole(&plan, 5), 0.0);
}

/// A partitioned plan's payload holds every part and reloads as the same plan; parts that do not
/// partition the graph are refused before cuDNN sees them.
#[needs_cudnn]
#[test]
fn partitioned_payload_round_trips() {
    use cudnn_graph::payload::plan::{parse_payload, read_payload, seal, Expect, PlanOrigin, SerializeOptions};
    let Some(cudnn) = common::deviceless() else { return };
    let graph = AttentionBlock::<4, 2, 32>::new(2, 64).graph().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let origin = PlanOrigin::of(&cudnn);
    let bytes = cudnn_graph::payload::plan::write_payload(
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
