//! Host scalars (issue 18): a by-value scalar supplied at execute, the third kind of tensor
//! beside device memory and by-value constants. cudnn-frontend writes one as
//! `is_pass_by_value` without a value (layernorm's epsilon, a pointwise scale); cudnn-graph reads
//! it as [`Tensor::host_scalar`](cudnn_graph::Tensor::host_scalar): a graph input every engine
//! takes by value, recorded by type and shape only. Each misuse is a typed error naming the
//! tensor. (What cudnn-frontend makes of them both ways is `tests/suite/frontend_oracle.rs`; the GPU
//! execute is `tests/gpu_suite/gpu_frontend_payload.rs`.)

use crate::common;

use cudnn_graph::graph;
use cudnn_graph::reference;
use cudnn_graph::serialize::{structure_from_json, structure_to_json};
use cudnn_graph::{DataType, Graph, GraphBuilder, GraphError};

graph! {
    /// A layer norm whose epsilon is given at execute: `host` marks a host scalar input.
    pub LnHostEps<dyn N>(x: f32[N, 32], scale: f32[1, 32], bias: f32[1, 32], eps: f32[1, 1] host)
        -> (y: f32[N, 32])
    {
        y = layernorm(x, scale, bias, eps);
    }
}

/// A training layer norm over `[4, 32, 1, 1]` whose epsilon is a host scalar, or (`eps =
/// Some(v)`) the constant `v`.
fn layernorm(eps: Option<f64>) -> Graph {
    let mut g = GraphBuilder::new("ln");
    let x = g.input("x", DataType::F32, &[4, 32, 1, 1]).unwrap();
    let scale = g.input("scale", DataType::F32, &[1, 32, 1, 1]).unwrap();
    let bias = g.input("bias", DataType::F32, &[1, 32, 1, 1]).unwrap();
    let epsilon = match eps {
        None => g.host_scalar("epsilon", DataType::F32, 4).unwrap().into(),
        Some(v) => v.into(),
    };
    let outs = g
        .op("layernorm", &[x.into(), scale.into(), bias.into(), epsilon], &[("phase".into(), "training".into())])
        .unwrap();
    g.output(outs[0], "y", DataType::F32).unwrap();
    g.output(outs[1], "mean", DataType::F32).unwrap();
    g.output(outs[2], "inv_variance", DataType::F32).unwrap();
    g.build().unwrap()
}

#[test]
fn a_host_scalar_is_a_graph_input_recorded_by_type_and_shape() {
    let graph = layernorm(None);
    let eps = graph.tensor_by_name("epsilon").unwrap();
    assert!(eps.host_scalar && eps.is_by_value() && eps.pass_by_value.is_none());
    assert_eq!(eps.dims, [1, 1, 1, 1]);
    let inputs: Vec<&str> = graph.inputs().iter().map(|id| graph.tensor(*id).name.as_str()).collect();
    assert_eq!(inputs, ["x", "scale", "bias", "epsilon"]);
    // The flag is part of the fingerprint: the same graph with epsilon in device memory differs.
    let mut device = graph.clone();
    let at = device.id_of("epsilon").unwrap();
    device.tensors[at.0].host_scalar = false;
    device.validate().unwrap();
    assert_ne!(device.fingerprint(), graph.fingerprint());
}

#[test]
fn misused_host_scalars_are_typed_errors_naming_the_tensor() {
    let graph = layernorm(None);
    let at = graph.id_of("epsilon").unwrap().0;
    let edit = |f: &dyn Fn(&mut Graph)| {
        let mut g = graph.clone();
        f(&mut g);
        g.validate().unwrap_err()
    };
    let with_value = edit(&|g| g.tensors[at].pass_by_value = Some(1e-5));
    assert_eq!(with_value, GraphError::HostScalarWithValue { tensor: "epsilon".into() });
    let wide = edit(&|g| {
        g.tensors[at].dims = vec![1, 2, 1, 1];
        g.tensors[at].strides = vec![2, 1, 1, 1];
    });
    assert_eq!(wide, GraphError::BadScalar { tensor: "epsilon".into() });
    let y = graph.id_of("inv_variance").unwrap().0;
    let produced = edit(&|g| {
        g.tensors[y].host_scalar = true;
        g.tensors[y].dims = vec![1, 1, 1, 1];
    });
    assert!(
        matches!(&produced, GraphError::HostScalarProduced { tensor, .. } | GraphError::BadScalar { tensor } if tensor == "inv_variance"),
        "{produced:?}"
    );
    let mut g = GraphBuilder::new("b");
    assert!(matches!(g.host_scalar("s", DataType::F32, 0), Err(GraphError::BadDims { .. })));
    g.host_scalar("s", DataType::F32, 1).unwrap();
    assert!(matches!(g.host_scalar("s", DataType::F32, 1), Err(GraphError::DuplicateName { .. })));
}

/// The reference takes a host scalar's value with the inputs, and computes what the graph with
/// that value as a constant computes, for each value given.
#[test]
fn the_reference_takes_host_scalars_by_value() {
    let host = layernorm(None);
    let x: Vec<f32> = common::random(1, 128);
    let scale: Vec<f32> = common::random(2, 32);
    let bias: Vec<f32> = common::random(3, 32);
    for eps in [1e-5f32, 0.5] {
        let got = reference::run(
            &host,
            &[
                ("x", x.as_slice().into()),
                ("scale", scale.as_slice().into()),
                ("bias", bias.as_slice().into()),
                ("epsilon", [eps].as_slice().into()),
            ],
        )
        .unwrap();
        let want = reference::run(
            &layernorm(Some(f64::from(eps))),
            &[("x", x.as_slice().into()), ("scale", scale.as_slice().into()), ("bias", bias.as_slice().into())],
        )
        .unwrap();
        assert_eq!(got, want, "epsilon {eps}");
    }
    // Missing, or of another type: typed errors naming it.
    let missing = reference::run(
        &host,
        &[("x", x.as_slice().into()), ("scale", scale.as_slice().into()), ("bias", bias.as_slice().into())],
    );
    assert!(matches!(missing, Err(reference::ArgError::Missing { ref tensor, .. }) if tensor == "epsilon"));
    let f64_eps = reference::run(
        &host,
        &[
            ("x", x.as_slice().into()),
            ("scale", scale.as_slice().into()),
            ("bias", bias.as_slice().into()),
            ("epsilon", [1e-5f64].as_slice().into()),
        ],
    );
    assert!(matches!(f64_eps, Err(reference::ArgError::DType { ref tensor, .. }) if tensor == "epsilon"));
}

/// Written as cudnn-frontend writes one (`is_pass_by_value` without a value) and read back to the
/// same graph.
#[test]
fn host_scalars_round_trip_through_the_structural_json() {
    let graph = layernorm(None);
    let text = structure_to_json(&graph);
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let eps = doc["tensors"].as_array().unwrap().iter().find(|t| t["name"] == "epsilon").unwrap();
    assert_eq!(eps["is_pass_by_value"], true);
    assert!(eps["pass_by_value"].is_null());
    assert!(eps.get("cudnn_graph").is_none(), "no value to keep");
    let back = structure_from_json(&text).unwrap();
    assert_eq!(back, graph);
    assert_eq!(back.fingerprint(), graph.fingerprint());
}

/// `graph!`'s `host` port: a host scalar of the built graph, taken by value by the typed
/// reference, part of the type's fingerprint.
#[test]
fn graph_macro_host_ports_are_host_scalars() {
    let g = LnHostEps::new(4);
    let graph = g.graph().unwrap();
    let eps = graph.tensor_by_name("eps").unwrap();
    assert!(eps.host_scalar && eps.dims == [1, 1]);
    let x: Vec<f32> = common::random(4, 128);
    let scale: Vec<f32> = common::random(5, 32);
    let bias: Vec<f32> = common::random(6, 32);
    let small = g.reference(LnHostEpsInputs { x: &x, scale: &scale, bias: &bias, eps: 1e-5 }).unwrap();
    let large = g.reference(LnHostEpsInputs { x: &x, scale: &scale, bias: &bias, eps: 4.0 }).unwrap();
    // The same as the graph with the value as a constant, for each value.
    for (eps, out) in [(1e-5f32, &small), (4.0, &large)] {
        let mut b = GraphBuilder::new("ln");
        let xi = b.input("x", DataType::F32, &[4, 32]).unwrap();
        let si = b.input("scale", DataType::F32, &[1, 32]).unwrap();
        let bi = b.input("bias", DataType::F32, &[1, 32]).unwrap();
        let y = b.op("layernorm", &[xi.into(), si.into(), bi.into(), f64::from(eps).into()], &[]).unwrap()[0];
        b.output(y, "y", DataType::F32).unwrap();
        let want = reference::run(
            &b.build().unwrap(),
            &[("x", x.as_slice().into()), ("scale", scale.as_slice().into()), ("bias", bias.as_slice().into())],
        )
        .unwrap();
        let want: Vec<f32> = want[0].data.iter().map(|&v| v as f32).collect();
        assert_eq!(out.y, want, "epsilon {eps}");
    }
    assert_ne!(small.y, large.y);
}

#[cfg(feature = "cudnn")]
mod deviceless {
    use super::*;
    use cudnn_graph::backend::{BuildOptions, ExecutionPlan};
    use cudnn_graph::payload::frontend::{parse_frontend_payload, read_frontend_payload, write_frontend_payload};
    use cudnn_graph::payload::plan::{parse_payload, write_payload, Expect, PlanOrigin, SerializeOptions};

    /// Lowered as a by-value tensor bound at execute: in the variant pack as an I/O pointer, not
    /// among the plan's constants; in cudnn-frontend's payload in `variant_pack_uids`, not in
    /// `pass_by_values`; both payloads read back.
    #[needs_cudnn]
    #[test]
    fn host_scalars_plan_and_travel_in_both_payloads() {
        let Some(cudnn) = common::deviceless() else { return };
        let graph = layernorm(None);
        let uid = graph.tensor_by_name("epsilon").unwrap().uid;
        let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
        let layout = plan.layout();
        assert!(layout.uids().contains(&uid));
        assert!(layout.scalars().iter().all(|s| s.uid != uid));
        let position = layout.io().iter().position(|id| graph.tensor(*id).uid == uid).unwrap();
        assert!(!layout.is_output(position));

        let origin = PlanOrigin::of(&cudnn);
        let theirs = write_frontend_payload(&plan, &origin, SerializeOptions::default()).unwrap();
        let parsed = parse_frontend_payload(&theirs).unwrap();
        assert!(parsed.variant_pack_uids.contains(&uid));
        assert!(parsed.pass_by_values.iter().all(|(u, _)| *u != uid));
        let back = read_frontend_payload(&cudnn, &theirs, None).unwrap();
        assert_eq!(back.graph().fingerprint(), graph.fingerprint());

        let ours = write_payload(&plan, &origin, SerializeOptions::default(), &Expect::default()).unwrap();
        let payload = parse_payload(&ours).unwrap();
        assert!(payload.plan.scalars.iter().all(|s| s.uid != uid), "no value recorded");
        let loaded = cudnn_graph::payload::plan::load_payload(&cudnn, &payload, None, &Expect::default()).unwrap();
        assert!(loaded.graph().tensor_by_name("epsilon").unwrap().host_scalar);
    }

    /// A `graph!` type with a `host` port plans deviceless, its scalar bound at execute.
    #[needs_cudnn]
    #[test]
    fn graph_macro_host_ports_plan() {
        let Some(cudnn) = common::deviceless() else { return };
        LnHostEps::new(8).build(&cudnn, &BuildOptions::default()).unwrap();
    }

    /// cudnn-frontend's own layer norm payload: its epsilon is a host scalar of the graph read.
    #[needs_cudnn]
    #[test]
    fn cudnn_frontend_epsilon_reads_as_a_host_scalar() {
        let Some(cudnn) = common::deviceless() else { return };
        let bytes =
            std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/frontend/layernorm.ubjson")).unwrap();
        let plan = read_frontend_payload(&cudnn, &bytes, None).unwrap();
        let eps = plan.graph().tensor_by_name("epsilon").unwrap();
        assert!(eps.host_scalar && eps.data_type == DataType::F32);
        assert!(plan.graph().inputs().iter().any(|id| plan.graph().tensor(*id).name == "epsilon"));
    }
}
