//! On the GPU: plan payloads written by cudnn-frontend 1.32 (`tests/fixtures/frontend/*.ubjson`,
//! built deviceless for the H200) loaded through `serialize::frontend_payload` and executed,
//! against the CPU reference; and each converted to our payload and back, executing the same.
//! And the other way: plans we build here, written as cudnn-frontend payloads for cudnn-frontend
//! to execute on the same GPU (`tests/frontend/exchange.py` compares its outputs with ours).
//! Skips without a GPU (fails with `CUDNN_GRAPH_REQUIRE_GPU=1`).

#![cfg(feature = "cudnn")]

mod common;

use std::sync::Arc;

use common::{check, gpu, poisoned, uniform, upload, workspace};
use cudnn_graph::backend::cudarc::driver::{CudaStream, DeviceRepr};
use cudnn_graph::backend::{BuildOptions, Cudnn, DeviceBuffer, ExecutionPlan};
use cudnn_graph::reference::{self, HostSlice};
use cudnn_graph::serialize::frontend_payload::{read_frontend_payload, write_frontend_payload};
use cudnn_graph::serialize::plan::{read_payload, write_payload, Expect, PlanOrigin, SerializeOptions};
use cudnn_graph::{DataType, Element, Graph, GraphBuilder};
use half::f16;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/frontend");

/// Executes `plan` (whose inputs and outputs are all `T`) on fixed-seed inputs and compares each
/// output with the CPU reference; returns the inputs and the outputs, in I/O order.
fn run<T: Element + DeviceRepr>(
    case: &str,
    plan: &ExecutionPlan,
    cudnn: &Cudnn,
    stream: &Arc<CudaStream>,
) -> (Vec<Vec<T>>, Vec<Vec<T>>)
where
    for<'a> HostSlice<'a>: From<&'a Vec<T>>,
{
    let graph = plan.graph();
    let inputs: Vec<Vec<T>> = graph
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, id)| uniform::<T>(40 + i as u64, graph.tensor(*id).storage_len(), -1.0, 1.0))
        .collect();
    let names: Vec<String> = graph.inputs().iter().map(|id| graph.tensor(*id).name.clone()).collect();
    let named: Vec<(&str, HostSlice<'_>)> =
        names.iter().zip(&inputs).map(|(n, v)| (n.as_str(), HostSlice::from(v))).collect();
    let want = reference::run(graph, &named).unwrap();
    let device_inputs: Vec<_> = inputs.iter().map(|v| upload(stream, v)).collect();
    let mut outputs: Vec<_> =
        graph.outputs().iter().map(|id| poisoned::<T>(stream, graph.tensor(*id).storage_len())).collect();
    let mut ws = workspace(stream, plan.workspace_size());
    {
        let mut io: Vec<DeviceBuffer<'_>> = device_inputs.iter().map(DeviceBuffer::input).collect();
        io.extend(outputs.iter_mut().map(DeviceBuffer::output));
        plan.execute(cudnn, &mut io, Some(&mut ws)).unwrap_or_else(|e| panic!("{case}: {e}"));
    }
    let mut got_all = Vec::new();
    for ((id, out), want) in graph.outputs().iter().zip(&outputs).zip(&want) {
        let got: Vec<T> = stream.clone_dtoh(out).unwrap();
        let want: Vec<T> = reference::scatter(graph.tensor(*id), want);
        check(case, &graph.tensor(*id).name, &got, &want);
        got_all.push(got);
    }
    (inputs, got_all)
}

fn gpu_case<T: Element + DeviceRepr>(name: &str)
where
    for<'a> HostSlice<'a>: From<&'a Vec<T>>,
{
    let Some((stream, cudnn)) = gpu() else { return };
    let bytes = std::fs::read(format!("{FIXTURES}/{name}.ubjson")).unwrap();
    let plan = read_frontend_payload(&cudnn, &bytes, None).unwrap_or_else(|e| panic!("{name}: {e}"));
    run::<T>(&format!("{name} (cudnn-frontend's payload)"), &plan, &cudnn, &stream);
    // Converted to our payload, and back to cudnn-frontend's: the same plan, the same outputs.
    let ours = write_payload(&plan, &PlanOrigin::of(&cudnn), SerializeOptions::default(), &Expect::default()).unwrap();
    let (plan, payload) = read_payload(&cudnn, &ours, None, &Expect::default()).unwrap();
    run::<T>(&format!("{name} (as our payload)"), &plan, &cudnn, &stream);
    let theirs = write_frontend_payload(&plan, &payload.origin(), SerializeOptions::default()).unwrap();
    let plan = read_frontend_payload(&cudnn, &theirs, None).unwrap();
    run::<T>(&format!("{name} (written back as cudnn-frontend's)"), &plan, &cudnn, &stream);
}

#[test]
fn gpu_frontend_payload_matmul() {
    gpu_case::<f16>("matmul");
}

#[test]
fn gpu_frontend_payload_conv_fprop() {
    gpu_case::<f16>("conv_fprop");
}

#[test]
fn gpu_frontend_payload_pointwise_add() {
    gpu_case::<f32>("pointwise_add");
}

#[test]
fn gpu_frontend_payload_reduction() {
    gpu_case::<f32>("reduction");
}

/// y = relu(a · b + bias), f16.
fn matmul_bias_relu() -> Graph {
    let mut g = GraphBuilder::new("matmul_bias_relu");
    let a = g.input("a", DataType::F16, &[1, 128, 64]).unwrap();
    let b = g.input("b", DataType::F16, &[1, 64, 96]).unwrap();
    let bias = g.input("bias", DataType::F16, &[1, 1, 96]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let s = g.op("add", &[c.into(), bias.into()], &[]).unwrap()[0];
    let y = g.op("relu", &[s.into()], &[]).unwrap()[0];
    g.output(y, "y", DataType::F16).unwrap();
    g.build().unwrap()
}

/// y = relu(conv(x, w) + bias), f16, channels-last (NHWC) ports.
fn conv_bias_relu() -> Graph {
    let mut g = GraphBuilder::new("conv_bias_relu");
    let x = g.input("x", DataType::F16, &[2, 16, 8, 8]).unwrap();
    g.set_channels_last(x).unwrap();
    let w = g.input("w", DataType::F16, &[32, 16, 3, 3]).unwrap();
    g.set_channels_last(w).unwrap();
    let bias = g.input("bias", DataType::F16, &[1, 32, 1, 1]).unwrap();
    let c = g.op("conv_fprop", &[x.into(), w.into()], &[("padding".into(), vec![1i64, 1].into())]).unwrap()[0];
    let s = g.op("add", &[c.into(), bias.into()], &[]).unwrap()[0];
    let r = g.op("relu", &[s.into()], &[]).unwrap()[0];
    let y = g.output(r, "y", DataType::F16).unwrap();
    g.set_channels_last(y).unwrap();
    g.build().unwrap()
}

/// Writes a case for `tests/frontend/exchange.py`: `payload.ubjson` (cudnn-frontend's form),
/// each I/O tensor's bytes (`<uid>.bin`, inputs as given, outputs as we computed them) and
/// `manifest.json` naming them.
fn write_exchange(dir: &std::path::Path, graph: &Graph, payload: &[u8], inputs: &[Vec<f16>], outputs: &[Vec<f16>]) {
    let case = dir.join(&graph.name);
    std::fs::create_dir_all(&case).unwrap();
    std::fs::write(case.join("payload.ubjson"), payload).unwrap();
    let ids = graph.inputs().into_iter().zip(inputs).map(|(id, v)| (id, v, "input"));
    let ids = ids.chain(graph.outputs().into_iter().zip(outputs).map(|(id, v)| (id, v, "output")));
    let mut tensors = Vec::new();
    for (id, values, role) in ids {
        let t = graph.tensor(id);
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
        let file = format!("{}.bin", t.uid);
        std::fs::write(case.join(&file), bytes).unwrap();
        tensors.push(serde_json::json!({
            "uid": t.uid, "name": t.name, "role": role, "dtype": "f16",
            "dims": t.dims, "strides": t.strides, "file": file,
        }));
    }
    let manifest = serde_json::json!({ "graph": graph.name, "tensors": tensors });
    std::fs::write(case.join("manifest.json"), serde_json::to_string_pretty(&manifest).unwrap()).unwrap();
}

/// Plans built here, against the CPU reference, written as cudnn-frontend payloads that load back
/// as the same graph. With `CUDNN_GRAPH_EXCHANGE_DIR` set, each case (payload, inputs, our
/// outputs) is written there for `tests/frontend/exchange.py`, which executes the payloads with
/// cudnn-frontend on the same GPU and compares.
#[test]
fn gpu_our_payloads_for_cudnn_frontend() {
    let Some((stream, cudnn)) = gpu() else { return };
    let dir = std::env::var_os("CUDNN_GRAPH_EXCHANGE_DIR").map(std::path::PathBuf::from);
    for graph in [matmul_bias_relu(), conv_bias_relu()] {
        let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", graph.name));
        let (inputs, outputs) = run::<f16>(&format!("{} (built here)", graph.name), &plan, &cudnn, &stream);
        let payload = write_frontend_payload(&plan, &PlanOrigin::of(&cudnn), SerializeOptions::default()).unwrap();
        let back = read_frontend_payload(&cudnn, &payload, None).unwrap();
        assert_eq!(back.graph().fingerprint(), graph.fingerprint(), "{}", graph.name);
        if let Some(dir) = &dir {
            write_exchange(dir, &graph, &payload, &inputs, &outputs);
            println!("{}: {} B payload for cudnn-frontend in {}", graph.name, payload.len(), dir.display());
        }
    }
}
