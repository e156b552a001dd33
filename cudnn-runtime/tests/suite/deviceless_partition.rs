//! Partitioning with the builder API (issue 16), deviceless on cuDNN 9.19 for the H200: what is
//! materialized between parts, in which type, and that the parts computed through the plan's
//! memory agree with the whole graph on the CPU reference.
#![cfg(feature = "cudnn")]

use crate::common;

use common::{deviceless, emulated_error};
use cudnn_runtime::backend::{BuildOptions, CutReason, ExecutionPlan};
use cudnn_runtime::{Context, DataType, GraphBuilder};

/// Two f16 matmuls with the builder's default f32 intermediates: cuDNN 9.19 has no engine for an
/// f32 × f16 matmul, so the intermediate between the parts is stored in f16, the type of the
/// operand the second matmul reads it beside (a split by hand would do the same). The result
/// differs from the whole graph's (which rounds the intermediate to f32) by that rounding.
#[needs_cudnn]
#[test]
fn an_intermediate_is_stored_in_the_type_its_reader_takes() {
    let Some(cudnn) = deviceless() else { return };
    let mut g = GraphBuilder::new("two_matmuls");
    let x = g.input("x", DataType::F16, &[1, 64, 64]).unwrap();
    let w1 = g.input("w1", DataType::F16, &[1, 64, 128]).unwrap();
    let w2 = g.input("w2", DataType::F16, &[1, 128, 32]).unwrap();
    let h = g.matmul(x, w1).unwrap();
    let h = g.op("relu", &[h.into()], &[]).unwrap()[0];
    let y = g.matmul(h, w2).unwrap();
    g.output(y, "y", DataType::F16).unwrap();
    let graph = g.build().unwrap();
    let h_id = graph.nodes[1].outputs[0];
    assert_eq!(graph.tensor(h_id).data_type, DataType::F32, "the builder's intermediate type");
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    for part in plan.parts() {
        println!("{part}");
    }
    assert_eq!(plan.parts().len(), 2);
    let h_in_part = plan.parts()[1].graph().tensor_by_name(&graph.tensor(h_id).name).unwrap();
    assert_eq!(h_in_part.data_type, DataType::F16);
    assert_eq!(plan.arena_bytes(), 64 * 128 * 2);
    let error = emulated_error(&plan, 1);
    println!("parts vs whole graph: {error:.3e}");
    assert!(error > 0.0 && error < 2e-3, "{error}");
}

/// A slice of a computed tensor read by the next part is a view of the arena at its offset.
#[needs_cudnn]
#[test]
fn a_slice_between_parts_is_an_offset_into_the_arena() {
    use cudnn_runtime::ops::AttrValue;
    let Some(cudnn) = deviceless() else { return };
    let mut g = GraphBuilder::new("sliced");
    let x = g.input("x", DataType::BF16, &[1, 64, 64]).unwrap();
    let w1 = g.input("w1", DataType::BF16, &[1, 64, 128]).unwrap();
    let w2 = g.input("w2", DataType::BF16, &[1, 64, 32]).unwrap();
    g.context(Context { intermediate_data_type: DataType::BF16, compute_data_type: DataType::F32 });
    let h = g.matmul(x, w1).unwrap();
    let attrs = [
        ("start".to_string(), AttrValue::IntList(vec![0, 0, 64])),
        ("limit".to_string(), AttrValue::IntList(vec![1, 64, 128])),
    ];
    let right = g.op("slice", &[h.into()], &attrs).unwrap()[0];
    let y = g.matmul(right, w2).unwrap();
    g.output(y, "y", DataType::BF16).unwrap();
    let graph = g.build().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    for part in plan.parts() {
        println!("{part}");
    }
    assert_eq!(plan.parts().len(), 2);
    assert_eq!(emulated_error(&plan, 2), 0.0);
}

/// A pattern the table fuses but cuDNN refuses is split by cuDNN's answer: the refusal is the
/// cut's reason, and is remembered (a second build of the same graph splits without asking).
/// Here a matmul's prologue computes its A as an f32 intermediate (the builder's default) beside
/// a bf16 B: cuDNN 9.19 proposes no engine for that (with bf16 intermediates the same prologue
/// fuses, engine 7), so the tanh runs as a kernel of its own.
#[needs_cudnn]
#[test]
fn a_refused_part_is_split_and_remembered() {
    let Some(cudnn) = deviceless() else { return };
    let mut g = GraphBuilder::new("prologue");
    let x = g.input("x", DataType::BF16, &[1, 128, 64]).unwrap();
    let w = g.input("w", DataType::BF16, &[1, 64, 128]).unwrap();
    let r = g.op("tanh", &[x.into()], &[]).unwrap()[0];
    let y = g.matmul(r, w).unwrap();
    g.output(y, "y", DataType::BF16).unwrap();
    let graph = g.build().unwrap();
    let first = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    for part in first.parts() {
        println!("{part}");
    }
    assert_eq!(first.parts().len(), 2);
    let refused = |p: &ExecutionPlan| match &p.parts()[1].cut().unwrap().reason {
        CutReason::Refused(why) => why.clone(),
        other => panic!("{other:?}"),
    };
    assert!(refused(&first).contains("heuristics proposed no engine configuration"), "{}", refused(&first));
    let second = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    assert_eq!(refused(&second), refused(&first), "remembered");
    // One kernel was asked of cuDNN and refused: with Fusion::Single that is the error.
    assert!(ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default().single_kernel()).is_err());
    assert!(emulated_error(&second, 3) < 1e-2);
    // A payload keeps the refusal: loaded, the part says why it was cut, as built.
    use cudnn_runtime::payload::plan::{read_payload, write_payload, Expect, PlanOrigin, SerializeOptions};
    let bytes =
        write_payload(&first, &PlanOrigin::of(&cudnn), SerializeOptions { structure: true }, &Expect::default())
            .unwrap();
    let (loaded, payload) = read_payload(&cudnn, &bytes, None, &Expect::default()).unwrap();
    assert_eq!(payload.plan.parts[1].refused.as_deref(), Some(refused(&first).as_str()));
    assert_eq!(loaded.parts()[1].cut(), first.parts()[1].cut());
}
