//! On the GPU: cudnn-frontend 1.32's attention graphs printed after building (K, and backward V,
//! transposed in place by its lowering; `cudnn-runtime/tests/fixtures/cudnn_frontend`, written
//! by `after_build.py` there) are read as given, built and executed, each output against the CPU
//! reference of the graph printed before building, on the same fixed-seed inputs. Skips without
//! a GPU (fails with `CUDNN_GRAPH_REQUIRE_GPU=1`).

#![cfg(feature = "cudnn")]

use crate::common;

use common::{check, gpu, poisoned, uniform, workspace};
use cudnn_graph::backend::cudarc::driver::CudaSlice;
use cudnn_graph::backend::{BuildOptions, DeviceBuffer, ExecutionPlan};
use cudnn_graph::reference::{self, HostSlice};
use cudnn_graph::serialize::structure_from_json;
use cudnn_graph::{DataType, Graph};
use half::f16;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/cudnn-runtime/tests/fixtures/cudnn_frontend");

fn fixture(name: &str) -> Graph {
    let path = format!("{FIXTURES}/{name}.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    structure_from_json(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Host values by tensor name: every fixture's tensors are f16 but the f32 `stats`.
enum Values {
    Half(Vec<f16>),
    Float(Vec<f32>),
}

impl Values {
    fn host(&self) -> HostSlice<'_> {
        match self {
            Values::Half(v) => HostSlice::from(v),
            Values::Float(v) => HostSlice::from(v),
        }
    }
}

/// The reference outputs of `graph`, by name, on `inputs` (by name).
fn reference_outputs(graph: &Graph, inputs: &[(String, Values)]) -> Vec<(String, Values)> {
    let named: Vec<(&str, HostSlice<'_>)> = graph
        .inputs()
        .iter()
        .map(|id| {
            let name = graph.tensor(*id).name.as_str();
            let v = inputs.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no input {name}"));
            (name, v.1.host())
        })
        .collect();
    let out = reference::run(graph, &named).unwrap();
    graph
        .outputs()
        .iter()
        .zip(&out)
        .map(|(id, a)| {
            let t = graph.tensor(*id);
            let v = match t.data_type {
                DataType::F32 => Values::Float(reference::scatter(t, a)),
                _ => Values::Half(reference::scatter(t, a)),
            };
            (t.name.clone(), v)
        })
        .collect()
}

enum Device {
    Half(CudaSlice<f16>),
    Float(CudaSlice<f32>),
}

/// Builds `graph` on the GPU, executes it on `inputs` and checks each output against `want`.
fn execute_and_check(case: &str, graph: &Graph, inputs: &[(String, Values)], want: &[(String, Values)]) {
    let Some((stream, cudnn)) = gpu() else { return };
    let plan = ExecutionPlan::build(&cudnn, graph, &BuildOptions::default()).unwrap_or_else(|e| panic!("{case}: {e}"));
    let upload = |name: &str| -> Device {
        match &inputs.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no input {name}")).1 {
            Values::Half(v) => Device::Half(stream.clone_htod(v).unwrap()),
            Values::Float(v) => Device::Float(stream.clone_htod(v).unwrap()),
        }
    };
    let ins: Vec<Device> = graph.inputs().iter().map(|id| upload(&graph.tensor(*id).name)).collect();
    let mut outs: Vec<Device> = graph
        .outputs()
        .iter()
        .map(|id| {
            let t = graph.tensor(*id);
            match t.data_type {
                DataType::F32 => Device::Float(poisoned::<f32>(&stream, t.storage_len())),
                _ => Device::Half(poisoned::<f16>(&stream, t.storage_len())),
            }
        })
        .collect();
    let mut ws = workspace(&stream, plan.workspace_size());
    {
        let mut io: Vec<DeviceBuffer<'_>> = ins
            .iter()
            .map(|d| match d {
                Device::Half(s) => DeviceBuffer::input(s),
                Device::Float(s) => DeviceBuffer::input(s),
            })
            .collect();
        io.extend(outs.iter_mut().map(|d| match d {
            Device::Half(s) => DeviceBuffer::output(s),
            Device::Float(s) => DeviceBuffer::output(s),
        }));
        plan.execute(&cudnn, &mut io, Some(&mut ws)).unwrap_or_else(|e| panic!("{case}: {e}"));
    }
    let what = format!("{case} ({})", plan.selected().tag());
    for (id, out) in graph.outputs().iter().zip(&outs) {
        let name = &graph.tensor(*id).name;
        let expected = &want.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no output {name}")).1;
        match (out, expected) {
            (Device::Half(d), Values::Half(w)) => check(&what, name, &stream.clone_dtoh(d).unwrap(), w),
            (Device::Float(d), Values::Float(w)) => check(&what, name, &stream.clone_dtoh(d).unwrap(), w),
            _ => panic!("{case}: {name} has another type than the reference's"),
        }
    }
}

/// Fixed-seed values for the fixtures' `[1, 2, s, 64]` inputs.
fn qkv(s: usize) -> Vec<(String, Values)> {
    let n = 2 * s * 64;
    ["q", "k", "v"]
        .iter()
        .enumerate()
        .map(|(i, name)| (name.to_string(), Values::Half(uniform::<f16>(70 + i as u64, n, -1.0, 1.0))))
        .collect()
}

#[needs_gpu]
#[test]
fn gpu_frontend_attention_printed_after_building_runs_as_printed_before() {
    for (case, s) in [("forward", 128), ("forward_square", 64)] {
        let before = fixture(&format!("sdpa_{case}_before"));
        let inputs = qkv(s);
        let want = reference_outputs(&before, &inputs);
        execute_and_check(&format!("sdpa_{case}_before"), &before, &inputs, &want);
        execute_and_check(&format!("sdpa_{case}_built"), &fixture(&format!("sdpa_{case}_built")), &inputs, &want);
    }
    // Backward, on the forward's O and Stats (the same q, k, v).
    let forward = fixture("sdpa_forward_before");
    let mut inputs = qkv(128);
    let mut forward_out = reference_outputs(&forward, &inputs);
    inputs.append(&mut forward_out);
    inputs.push(("do".into(), Values::Half(uniform::<f16>(80, 2 * 128 * 64, -1.0, 1.0))));
    let before = fixture("sdpa_backward_before");
    let want = reference_outputs(&before, &inputs);
    execute_and_check("sdpa_backward_before", &before, &inputs, &want);
    execute_and_check("sdpa_backward_built", &fixture("sdpa_backward_built"), &inputs, &want);
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
