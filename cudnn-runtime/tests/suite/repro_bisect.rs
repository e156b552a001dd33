//! `cudnn-graph repro`'s pieces, deviceless (issue 34): a partitioned plan replayed part by part
//! names the first part (and node) that a deliberately corrupted run gets wrong, then the first
//! node of that part that is wrong alone (or the fusion); outputs compare
//! under cudnn-frontend's tolerances; inputs written to a directory read back bit for bit.
#![cfg(feature = "cudnn")]

use crate::common;

use common::deviceless;
use cudnn_runtime::backend::{BuildOptions, ExecutionPlan};
use cudnn_runtime::engines::repro::{
    bisect, random_inputs, read_inputs, write_inputs, Piece, Tolerance, Verdict, Within,
};
use cudnn_runtime::reference::{self, ArgError, Array};
use cudnn_runtime::{DataType, Graph, GraphBuilder};

/// `((relu(x·w1))·w2 → relu)·w3`, f16: three matmuls, three parts.
fn three_matmuls() -> Graph {
    let mut g = GraphBuilder::new("three_matmuls");
    let x = g.input("x", DataType::F16, &[1, 32, 64]).unwrap();
    let w1 = g.input("w1", DataType::F16, &[1, 64, 64]).unwrap();
    let w2 = g.input("w2", DataType::F16, &[1, 64, 64]).unwrap();
    let w3 = g.input("w3", DataType::F16, &[1, 64, 16]).unwrap();
    let h = g.matmul(x, w1).unwrap();
    let h = g.op("relu", &[h.into()], &[]).unwrap()[0];
    let h = g.matmul(h, w2).unwrap();
    let h = g.op("relu", &[h.into()], &[]).unwrap()[0];
    let y = g.matmul(h, w3).unwrap();
    g.output(y, "y", DataType::F16).unwrap();
    g.build().unwrap()
}

/// A piece run on the CPU reference, with `corrupt(piece, outputs)` applied to what it computed.
fn run_part(
    corrupt: impl Fn(Piece, &mut [Array]),
) -> impl FnMut(Piece, &Graph, &[Array]) -> Result<Vec<Array>, ArgError> {
    move |piece, sub, inputs| {
        let mut values = vec![None; sub.tensors.len()];
        for (id, a) in sub.inputs().into_iter().zip(inputs) {
            values[id.0] = Some(a.clone());
        }
        let mut out = reference::run_arrays(sub, values)?;
        corrupt(piece, &mut out);
        Ok(out)
    }
}

#[needs_cudnn]
#[test]
fn bisection_names_the_part_and_node_a_corrupted_run_gets_wrong() {
    let Some(cudnn) = deviceless() else { return };
    let graph = three_matmuls();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    assert_eq!(plan.parts().len(), 3, "{:?}", plan.parts().iter().map(|p| p.nodes().to_vec()).collect::<Vec<_>>());
    let inputs = random_inputs(&graph, 34);
    // Every part computed right: nothing diverges.
    assert_eq!(bisect(&plan, &inputs, Tolerance::of, run_part(|_, _| {})).unwrap(), None);
    for bad in 0..3 {
        // One element of part `bad`'s output off by 1: outside f16's tolerance whatever its value.
        let found = bisect(
            &plan,
            &inputs,
            Tolerance::of,
            run_part(|piece, out: &mut [Array]| {
                if piece == Piece::Part(bad) {
                    out[0].data[10] += 1.0;
                }
            }),
        )
        .unwrap()
        .expect("the corrupted part diverges");
        println!("{found}");
        assert_eq!(found.part, bad);
        assert_eq!(found.nodes, plan.parts()[bad].nodes());
        let writer = plan.parts()[bad].graph().nodes.last().unwrap();
        assert_eq!((found.node.as_str(), found.op), (writer.name.as_str(), writer.op.call_name()));
        assert_eq!((found.verdict.outside, found.verdict.first_outside.map(|f| f.0)), (1, Some(10)));
        assert!(found.to_string().contains(&format!("part {bad} [")), "{found}");
        // Parts 0 and 1 are `matmul → relu`: replayed one node at a time (each alone right), only
        // the fusion is wrong. Part 2 is one matmul: nothing to look into.
        let expected = if bad < 2 { Some(Within::Fused) } else { None };
        assert_eq!(found.within, expected, "{found}");
    }
    // The part and, alone, its second node (the relu) corrupted: the relu is named, and the
    // matmul before it (its output virtual in the part, materialized alone) agreed.
    let found = bisect(
        &plan,
        &inputs,
        Tolerance::of,
        run_part(|piece, out: &mut [Array]| {
            if matches!(piece, Piece::Part(1) | Piece::Node { part: 1, node: 1 }) {
                out[0].data[10] += 1.0;
            }
        }),
    )
    .unwrap()
    .expect("part 1 diverges");
    println!("{found}");
    match &found.within {
        Some(Within::Node { node, op, verdict }) => {
            assert_eq!((node.as_str(), *op), (plan.parts()[1].nodes()[1].as_str(), "relu"));
            assert_eq!(verdict.first_outside.map(|f| f.0), Some(10));
        }
        other => panic!("expected the relu, got {other:?}"),
    }
    assert!(found.to_string().contains("is the first to diverge alone"), "{found}");
    // A node that cannot run alone ends the search with its error, and the bisection still
    // names the part.
    let mut refusing = run_part(|piece, out: &mut [Array]| {
        if piece == Piece::Part(0) {
            out[0].data[10] += 1.0;
        }
    });
    let found = bisect(&plan, &inputs, Tolerance::of, |piece: Piece, sub: &Graph, given: &[Array]| {
        if piece == (Piece::Node { part: 0, node: 1 }) {
            return Err(ArgError::Missing { graph: sub.name.clone(), tensor: "(refused alone)".into() });
        }
        refusing(piece, sub, given)
    })
    .unwrap()
    .expect("part 0 diverges");
    match &found.within {
        Some(Within::NotRun { node, op: "relu", error }) => {
            assert_eq!(node, &plan.parts()[0].nodes()[1]);
            assert!(error.contains("(refused alone)"), "{error}");
        }
        other => panic!("expected the relu not run, got {other:?}"),
    }
    // A corruption inside the tolerance (f16: 1e-2 + 1e-2·|want|) is not one.
    let small = bisect(
        &plan,
        &inputs,
        Tolerance::of,
        run_part(|piece, out: &mut [Array]| {
            if piece == Piece::Part(1) {
                out[0].data[10] += 1e-3;
            }
        }),
    )
    .unwrap();
    assert_eq!(small, None);
}

#[test]
fn tolerances_are_cudnn_frontends_per_type() {
    assert_eq!(Tolerance::of(DataType::BF16), Tolerance { atol: 2e-2, rtol: 2e-2 });
    assert_eq!(Tolerance::of(DataType::F16), Tolerance { atol: 1e-2, rtol: 1e-2 });
    assert_eq!(Tolerance::of(DataType::Fp8E4M3), Tolerance { atol: 0.1, rtol: 0.1 });
    assert_eq!(Tolerance::of(DataType::F32), Tolerance { atol: 1e-3, rtol: 1e-3 });
    let exact = Tolerance::of(DataType::I32);
    assert!(exact.accepts(3.0, 3.0) && !exact.accepts(3.0, 4.0));
    let t = Tolerance::of(DataType::BF16);
    assert!(t.accepts(1.03, 1.0) && !t.accepts(1.05, 1.0));
    assert!(t.accepts(f64::NAN, f64::NAN) && !t.accepts(f64::NAN, 1.0) && !t.accepts(1.0, f64::NAN));
    assert!(t.accepts(f64::INFINITY, f64::INFINITY) && !t.accepts(f64::INFINITY, 1e30));
    // A verdict over arrays of other lengths fails every element, never panics.
    let graph = three_matmuls();
    let y = graph.tensor(graph.outputs()[0]);
    let v = Verdict::compare(y, &Array::zeros(&[3]), &Array::zeros(&[1, 32, 16]), Tolerance::of(y.data_type));
    assert!(!v.passed() && v.to_string().contains("MISMATCH"), "{v}");
}

#[test]
fn inputs_written_to_a_directory_read_back_bit_for_bit() {
    let dir = std::env::temp_dir().join(format!("cudnn-graph-inputs-{}", std::process::id()));
    let mut g = GraphBuilder::new("every_type");
    let mut ids = Vec::new();
    for (k, dt) in DataType::ALL.into_iter().enumerate() {
        ids.push(g.input(&format!("in{k}"), dt, &[2, 3]).unwrap());
    }
    let y = g.op("add", &[ids[0].into(), ids[0].into()], &[]).unwrap()[0];
    g.output(y, "y", DataType::F32).unwrap();
    let graph = g.build().unwrap();
    let inputs = random_inputs(&graph, 5);
    assert!(inputs.iter().all(|a| a.data.iter().all(|v| *v != 0.0)), "never zero");
    write_inputs(&dir, &graph, &inputs).unwrap();
    let back = read_inputs(&dir, &graph).unwrap();
    for (a, b) in inputs.iter().zip(&back) {
        assert_eq!(a.dims, b.dims);
        assert!(a.data.iter().zip(&b.data).all(|(x, y)| x.to_bits() == y.to_bits()), "{a:?} {b:?}");
    }
    // A file cut short, or a manifest for another graph, is an error naming the input.
    std::fs::write(dir.join("inputs/3.bin"), [0u8; 5]).unwrap();
    let e = read_inputs(&dir, &graph).unwrap_err();
    assert!(e.to_string().contains("input `in3`'s file has 5 bytes, 6 elements need 12"), "{e}");
    let e = read_inputs(&dir, &three_matmuls()).unwrap_err();
    assert!(e.to_string().contains("no input `x`"), "{e}");
    std::fs::write(dir.join("inputs.json"), b"{\"cudnn_graph_inputs\": 1").unwrap();
    assert!(read_inputs(&dir, &graph).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
