//! On the GPU: plan payloads written by cudnn-frontend 1.32 (`tests/fixtures/frontend/*.ubjson`,
//! built deviceless for the H200) loaded through `serialize::frontend_payload` and executed,
//! against the CPU reference; and each converted to our payload and back, executing the same.
//! Skips without a GPU (fails with `CUDNN_GRAPH_REQUIRE_GPU=1`).

#![cfg(feature = "cudnn")]

mod common;

use std::sync::Arc;

use common::{check, gpu, poisoned, uniform, upload, workspace};
use cudnn_graph::backend::cudarc::driver::{CudaStream, DeviceRepr};
use cudnn_graph::backend::{Cudnn, DeviceBuffer, ExecutionPlan};
use cudnn_graph::reference::{self, HostSlice};
use cudnn_graph::serialize::frontend_payload::{read_frontend_payload, write_frontend_payload};
use cudnn_graph::serialize::plan::{read_payload, write_payload, Expect, PlanOrigin, SerializeOptions};
use cudnn_graph::Element;
use half::f16;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/frontend");

/// Executes `plan` (whose inputs and outputs are all `T`) on fixed-seed inputs and compares each
/// output with the CPU reference.
fn run<T: Element + DeviceRepr>(case: &str, plan: &ExecutionPlan, cudnn: &Cudnn, stream: &Arc<CudaStream>)
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
    for ((id, out), want) in graph.outputs().iter().zip(&outputs).zip(&want) {
        let got: Vec<T> = stream.clone_dtoh(out).unwrap();
        let want: Vec<T> = reference::scatter(graph.tensor(*id), want);
        check(case, &graph.tensor(*id).name, &got, &want);
    }
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
