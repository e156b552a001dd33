//! On the GPU: plan payloads written by cudnn-frontend 1.32 (`tests/fixtures/frontend/*.ubjson`,
//! built deviceless for the H200) loaded through `payload::frontend` and executed,
//! against the CPU reference; and each converted to our payload and back, executing the same.
//! Host scalars (cudnn-frontend's by-value scalars supplied at execute: layer norm's and RMS
//! norm's epsilon, a by-value `mul` operand) are given at execute with
//! `DeviceBuffer::host_scalar`. And the other way: plans we build here (among them a layer norm
//! with a host-scalar epsilon, a slice bound by pointer offset and attention backward's workspace
//! tensors, written as `variant_pack_replacements` and `workspace_modifications`), written as
//! cudnn-frontend payloads for cudnn-frontend to execute on the same GPU
//! (`tests/frontend/exchange.py` compares its outputs with ours). On a cuDNN other than the
//! fixtures' 9.19 (the machines' system 9.14), each fixture must be refused by version and its
//! graph is planned by the loaded cuDNN for the round trips; what the capabilities table says that
//! cuDNN lacks must be refused by name.
//! Ignored without a GPU (fails with `CUDNN_GRAPH_REQUIRE_GPU=1`).

#![cfg(feature = "cudnn")]

use crate::common;

use std::sync::Arc;

use common::{check, gpu, poisoned, uniform, upload, workspace};
use cudnn_graph::backend::cudarc::driver::{CudaStream, DevicePtr, DeviceRepr};
use cudnn_graph::backend::{BackendError, BuildOptions, Cudnn, DeviceBuffer, ExecutionPlan, HostScalar};
use cudnn_graph::capabilities::{self, Capability};
use cudnn_graph::engines::AutotuneOptions;
use cudnn_graph::payload::frontend::{parse_frontend_payload, read_frontend_payload, write_frontend_payload};
use cudnn_graph::payload::plan::{read_payload, write_payload, Expect, PayloadError, PlanOrigin, SerializeOptions};
use cudnn_graph::reference::{self, ArgError, Array, HostSlice};
use cudnn_graph::serialize::structure_from_json;
use cudnn_graph::{DataType, Element, Graph, GraphBuilder, Tensor};
use half::{bf16, f16};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/frontend");

cudnn_graph::graph! {
    /// RMS norm with its epsilon a host scalar, given by value at each execute.
    pub RmsHostEps<dyn N>(x: f32[N, 64], scale: f32[1, 64], eps: f32[1, 1] host) -> (y: f32[N, 64]) {
        y = rmsnorm(x, scale, eps);
    }
}

/// The value a host scalar input is given: positive, as an epsilon, a momentum or a scale is.
fn host_value(i: usize) -> f64 {
    0.25 + 0.125 * i as f64
}

/// Fixed-seed values for input `i` of `graph` (`host_value` for a host scalar).
fn input_values<T: Element>(graph: &Graph, i: usize) -> Vec<T> {
    let t = graph.tensor(graph.inputs()[i]);
    if t.host_scalar {
        vec![T::from_f64_value(host_value(i))]
    } else {
        uniform::<T>(40 + i as u64, t.storage_len(), -1.0, 1.0)
    }
}

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
    let inputs: Vec<Vec<T>> = (0..graph.inputs().len()).map(|i| input_values::<T>(graph, i)).collect();
    let names: Vec<String> = graph.inputs().iter().map(|id| graph.tensor(*id).name.clone()).collect();
    let named: Vec<(&str, HostSlice<'_>)> =
        names.iter().zip(&inputs).map(|(n, v)| (n.as_str(), HostSlice::from(v))).collect();
    let want = reference::run(graph, &named).unwrap();
    let device_inputs: Vec<_> = inputs.iter().map(|v| upload(stream, v)).collect();
    // Host scalars by value, the others in device memory.
    let scalars: Vec<HostScalar> = graph
        .inputs()
        .iter()
        .zip(&inputs)
        .map(|(id, v)| HostScalar::new(graph.tensor(*id).data_type, v[0].to_f64_value()))
        .collect();
    let mut outputs: Vec<_> =
        graph.outputs().iter().map(|id| poisoned::<T>(stream, graph.tensor(*id).storage_len())).collect();
    let mut ws = workspace(stream, plan.workspace_size());
    {
        let mut io: Vec<DeviceBuffer<'_>> = graph
            .inputs()
            .iter()
            .zip(device_inputs.iter().zip(&scalars))
            .map(|(id, (device, host))| {
                if graph.tensor(*id).host_scalar {
                    DeviceBuffer::host_scalar(host)
                } else {
                    DeviceBuffer::input(device)
                }
            })
            .collect();
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
    let fixture = parse_frontend_payload(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    let plan = if fixture.cudnn_version == Some(cudnn.version()) {
        let plan = read_frontend_payload(&cudnn, &bytes, None).unwrap_or_else(|e| panic!("{name}: {e}"));
        run::<T>(&format!("{name} (cudnn-frontend's payload)"), &plan, &cudnn, &stream);
        plan
    } else {
        // The fixtures are cuDNN 9.19's plans, and plans are version-exact: another cuDNN (the
        // machines' system 9.14, issue 35) refuses them by version, and the round trips below
        // start from the fixture's graph planned by the loaded cuDNN.
        match read_frontend_payload(&cudnn, &bytes, None) {
            Err(PayloadError::CudnnVersion { payload, runtime }) => {
                assert_eq!((Some(payload), runtime), (fixture.cudnn_version, cudnn.version()), "{name}")
            }
            other => panic!("{name}: expected the version refusal, got {:?}", other.map(|p| p.graph().name.clone())),
        }
        let graph = fixture.structure.clone().unwrap_or_else(|| panic!("{name}: no structure"));
        println!("{name}: a cuDNN {:?} plan; planned here for {} instead", fixture.cudnn_version, cudnn.version());
        ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    // Converted to our payload, and back to cudnn-frontend's: the same plan, the same outputs.
    let ours = write_payload(&plan, &PlanOrigin::of(&cudnn), SerializeOptions::default(), &Expect::default()).unwrap();
    let (plan, payload) = read_payload(&cudnn, &ours, None, &Expect::default()).unwrap();
    run::<T>(&format!("{name} (as our payload)"), &plan, &cudnn, &stream);
    let theirs = write_frontend_payload(&plan, &payload.origin(), SerializeOptions::default()).unwrap();
    let plan = read_frontend_payload(&cudnn, &theirs, None).unwrap();
    run::<T>(&format!("{name} (written back as cudnn-frontend's)"), &plan, &cudnn, &stream);
}

#[needs_gpu]
#[test]
fn gpu_frontend_payload_matmul() {
    gpu_case::<f16>("matmul");
}

#[needs_gpu]
#[test]
fn gpu_frontend_payload_conv_fprop() {
    gpu_case::<f16>("conv_fprop");
}

#[needs_gpu]
#[test]
fn gpu_frontend_payload_pointwise_add() {
    gpu_case::<f32>("pointwise_add");
}

#[needs_gpu]
#[test]
fn gpu_frontend_payload_reduction() {
    gpu_case::<f32>("reduction");
}

/// cuDNN writes the comparison's 0 or 1 into the f32 output.
#[needs_gpu]
#[test]
fn gpu_frontend_payload_pointwise_cmp_gt() {
    gpu_case::<f32>("pointwise_cmp_gt");
}

#[needs_gpu]
#[test]
fn gpu_frontend_payload_layernorm() {
    gpu_case::<f32>("layernorm");
}

#[needs_gpu]
#[test]
fn gpu_frontend_payload_rmsnorm() {
    gpu_case::<f32>("rmsnorm");
}

#[needs_gpu]
#[test]
fn gpu_frontend_payload_pointwise_mul_by_value() {
    gpu_case::<f32>("pointwise_mul_by_value");
}

/// A `graph!` type's `host` port: the typed execute takes the value itself, and each execute
/// computes with the value it was given, as the typed reference does.
#[needs_gpu]
#[test]
fn gpu_graph_macro_host_scalar_by_value() {
    let Some((stream, cudnn)) = gpu() else { return };
    let n = 32;
    let g = RmsHostEps::new(n);
    let plan = g.build(&cudnn, &BuildOptions::default()).unwrap();
    // Autotuning times the plan with its epsilon in host memory, where cuDNN reads it (a device
    // address crashed the process before 2026-12-05); the tuned plan computes the reference's.
    let tuning = AutotuneOptions::default().without_tuning_store();
    let (tuned, outcome) = g.build_autotuned(&cudnn, &BuildOptions::default(), &tuning).unwrap();
    print!("{outcome}");
    assert!(!outcome.report.as_ref().unwrap().timings.is_empty());
    run::<f32>("rmsnorm, host epsilon, autotuned", tuned.plan(), &cudnn, &stream);
    let x: Vec<f32> = uniform(80, n * 64, -1.0, 1.0);
    let scale: Vec<f32> = uniform(81, 64, 0.5, 1.5);
    let (x_d, scale_d) = (upload(&stream, &x), upload(&stream, &scale));
    let mut y_d = poisoned::<f32>(&stream, n * 64);
    let mut ws = workspace(&stream, plan.workspace_size());
    let mut outputs = Vec::new();
    for eps in [1e-5f32, 2.0] {
        plan.execute(&cudnn, RmsHostEpsArgs { x: &x_d, scale: &scale_d, eps, y: &mut y_d }, Some(&mut ws)).unwrap();
        let got: Vec<f32> = stream.clone_dtoh(&y_d).unwrap();
        let want = g.reference(RmsHostEpsInputs { x: &x, scale: &scale, eps }).unwrap().y;
        check(&format!("rmsnorm, host epsilon {eps}"), "y", &got, &want);
        outputs.push(got);
    }
    assert_ne!(outputs[0], outputs[1], "the second execute used its own epsilon");
}

/// The argument error inside a backend error.
fn arg(e: &BackendError) -> Option<&ArgError> {
    match e {
        BackendError::Arg(a) => Some(a),
        _ => None,
    }
}

/// A host scalar given another value at the next execute computes with it (cuDNN reads it when
/// the work is enqueued); given as a device buffer, or a device tensor given a host scalar, it is
/// a typed error naming the tensor.
#[needs_gpu]
#[test]
fn gpu_host_scalars_are_read_at_each_execute() {
    let Some((stream, cudnn)) = gpu() else { return };
    let bytes = std::fs::read(format!("{FIXTURES}/pointwise_mul_by_value.ubjson")).unwrap();
    // The fixture is cuDNN 9.19's plan: on another cuDNN its graph is planned here.
    let plan = match read_frontend_payload(&cudnn, &bytes, None) {
        Err(PayloadError::CudnnVersion { .. }) => {
            let graph = parse_frontend_payload(&bytes).unwrap().structure.expect("the fixture's structure");
            ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap()
        }
        read => read.unwrap(),
    };
    let graph = plan.graph();
    let (s, a) = (graph.tensor_by_name("s").unwrap(), graph.tensor_by_name("a").unwrap());
    assert!(s.host_scalar);
    let values: Vec<f32> = uniform(7, a.storage_len(), -1.0, 1.0);
    let device_a = upload(&stream, &values);
    let device_s = upload(&stream, &[2.0f32]);
    let mut y = poisoned::<f32>(&stream, values.len());
    for factor in [3.0f32, -0.5] {
        let host = HostScalar::new(DataType::F32, f64::from(factor));
        plan.execute_named(
            &cudnn,
            &mut [
                ("a", DeviceBuffer::input(&device_a)),
                ("s", DeviceBuffer::host_scalar(&host)),
                ("y", DeviceBuffer::output(&mut y)),
            ],
            None,
        )
        .unwrap();
        let got: Vec<f32> = stream.clone_dtoh(&y).unwrap();
        let want: Vec<f32> = values.iter().map(|v| v * factor).collect();
        check(&format!("mul by a host scalar {factor}"), "y", &got, &want);
    }
    let host = HostScalar::new(DataType::F32, 1.0);
    let e = plan
        .execute_named(
            &cudnn,
            &mut [
                ("a", DeviceBuffer::input(&device_a)),
                ("s", DeviceBuffer::input(&device_s)),
                ("y", DeviceBuffer::output(&mut y)),
            ],
            None,
        )
        .unwrap_err();
    assert!(matches!(arg(&e), Some(ArgError::HostScalar { tensor, host_scalar: true }) if tensor == "s"), "{e}");
    let e = plan
        .execute_named(
            &cudnn,
            &mut [
                ("a", DeviceBuffer::host_scalar(&host)),
                ("s", DeviceBuffer::host_scalar(&host)),
                ("y", DeviceBuffer::output(&mut y)),
            ],
            None,
        )
        .unwrap_err();
    assert!(matches!(arg(&e), Some(ArgError::HostScalar { tensor, host_scalar: false }) if tensor == "a"), "{e}");
    let f64_scalar = HostScalar::new(DataType::F64, 1.0);
    let e = plan
        .execute_named(
            &cudnn,
            &mut [
                ("a", DeviceBuffer::input(&device_a)),
                ("s", DeviceBuffer::host_scalar(&f64_scalar)),
                ("y", DeviceBuffer::output(&mut y)),
            ],
            None,
        )
        .unwrap_err();
    assert!(matches!(arg(&e), Some(ArgError::DType { tensor, .. }) if tensor == "s"), "{e}");
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

/// A layer norm (training) whose epsilon is a host scalar, f32.
fn layernorm_host_epsilon() -> Graph {
    let mut g = GraphBuilder::new("layernorm_host_epsilon");
    let x = g.input("x", DataType::F32, &[8, 64, 1, 1]).unwrap();
    let scale = g.input("scale", DataType::F32, &[1, 64, 1, 1]).unwrap();
    let bias = g.input("bias", DataType::F32, &[1, 64, 1, 1]).unwrap();
    let eps = g.host_scalar("epsilon", DataType::F32, 4).unwrap();
    let outs = g
        .op("layernorm", &[x.into(), scale.into(), bias.into(), eps.into()], &[("phase".into(), "training".into())])
        .unwrap();
    g.output(outs[0], "y", DataType::F32).unwrap();
    g.output(outs[1], "mean", DataType::F32).unwrap();
    g.output(outs[2], "inv_variance", DataType::F32).unwrap();
    g.build().unwrap()
}

/// A graph of the structure corpus (`fuzz/corpus/structure`).
fn corpus_graph(name: &str) -> Graph {
    let path = format!("{}/fuzz/corpus/structure/{name}.json", env!("CARGO_MANIFEST_DIR"));
    structure_from_json(&std::fs::read_to_string(&path).unwrap()).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `v` in a tensor of type `dt`, little endian (the types of the exchanged graphs).
fn encode(dt: DataType, v: f64) -> Vec<u8> {
    match dt {
        DataType::F16 => f16::from_f64(v).to_bits().to_le_bytes().to_vec(),
        DataType::BF16 => bf16::from_f64(v).to_bits().to_le_bytes().to_vec(),
        DataType::F32 => (v as f32).to_le_bytes().to_vec(),
        other => panic!("no exchange encoding for {other}"),
    }
}

/// One element of type `dt` from its little-endian bytes.
fn decode(dt: DataType, b: &[u8]) -> f64 {
    match dt {
        DataType::F16 => f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
        DataType::BF16 => bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
        DataType::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        other => panic!("no exchange encoding for {other}"),
    }
}

/// The spelling `tests/frontend/exchange.py` reads.
fn dtype_name(dt: DataType) -> &'static str {
    match dt {
        DataType::F16 => "f16",
        DataType::BF16 => "bf16",
        DataType::F32 => "f32",
        other => panic!("no exchange encoding for {other}"),
    }
}

/// A tensor's storage as bytes, from values in storage order.
fn storage_bytes(t: &Tensor, storage: &[f64]) -> Vec<u8> {
    storage.iter().flat_map(|v| encode(t.data_type, *v)).collect()
}

/// Executes `plan` through `execute_raw` with inputs of any of the exchanged types (host
/// scalars by their host address), against the CPU reference; returns each input's and
/// output's storage bytes, in I/O order.
fn run_raw(case: &str, plan: &ExecutionPlan, cudnn: &Cudnn, stream: &Arc<CudaStream>) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let graph = plan.graph();
    let mut values: Vec<Option<Array>> = vec![None; graph.tensors.len()];
    let mut input_bytes = Vec::new();
    let mut scalars = Vec::new();
    for (i, id) in graph.inputs().into_iter().enumerate() {
        let t = graph.tensor(id);
        assert_eq!(t.storage_len() as i64, t.element_count(), "{case}: `{}` is packed", t.name);
        // Values the tensor's type holds exactly, so the reference sees what the GPU reads.
        let dense: Vec<f64> = if t.host_scalar {
            vec![t.data_type.round(host_value(i))]
        } else {
            uniform::<f64>(60 + i as u64, t.storage_len(), -1.0, 1.0)
                .into_iter()
                .map(|v| t.data_type.round(v))
                .collect()
        };
        let array = Array { dims: t.dims.clone(), data: dense };
        input_bytes.push(storage_bytes(t, &reference::scatter::<f64>(t, &array)));
        scalars.push(HostScalar::new(t.data_type, array.data[0]));
        values[id.0] = Some(array);
    }
    let want = reference::run_arrays(graph, values).unwrap();
    let device_inputs: Vec<_> = input_bytes.iter().map(|b| upload(stream, b)).collect();
    let outputs: Vec<_> = graph
        .outputs()
        .iter()
        .map(|id| {
            let t = graph.tensor(*id);
            upload(stream, &storage_bytes(t, &vec![f64::NAN; t.storage_len()]))
        })
        .collect();
    let ws = workspace(stream, plan.workspace_size());
    {
        let inputs = graph.inputs();
        let mut guards = Vec::new();
        let mut io = Vec::new();
        for ((id, device), host) in inputs.iter().zip(&device_inputs).zip(&scalars) {
            if graph.tensor(*id).host_scalar {
                io.push(host.address());
            } else {
                let (address, guard) = device.device_ptr(stream);
                io.push(address);
                guards.push(guard);
            }
        }
        for out in &outputs {
            let (address, guard) = out.device_ptr(stream);
            io.push(address);
            guards.push(guard);
        }
        let (ws_address, ws_guard) = ws.device_ptr(stream);
        // SAFETY: each pointer addresses a live buffer of its tensor's storage in its type (host
        // scalars their host value, alive until this call returns), the workspace is the plan's.
        unsafe { plan.execute_raw(cudnn, &io, ws_address) }.unwrap_or_else(|e| panic!("{case}: {e}"));
        drop((guards, ws_guard));
    }
    stream.synchronize().unwrap();
    let mut output_bytes = Vec::new();
    for ((id, out), want) in graph.outputs().iter().zip(&outputs).zip(&want) {
        let t = graph.tensor(*id);
        let bytes: Vec<u8> = stream.clone_dtoh(out).unwrap();
        let got: Vec<f64> = bytes.chunks(t.data_type.size_bytes()).map(|b| decode(t.data_type, b)).collect();
        let want: Vec<f64> = reference::scatter::<f64>(t, want).into_iter().map(|v| t.data_type.round(v)).collect();
        check(case, &t.name, &got, &want);
        output_bytes.push(bytes);
    }
    (input_bytes, output_bytes)
}

/// Writes a case for `tests/frontend/exchange.py`: `payload.ubjson` (cudnn-frontend's form),
/// each I/O tensor's bytes (`<uid>.bin`, inputs as given, outputs as we computed them) and
/// `manifest.json` naming them (a host scalar's role is `host_scalar`: cudnn-frontend is given
/// its host address).
fn write_exchange(dir: &std::path::Path, graph: &Graph, payload: &[u8], inputs: &[Vec<u8>], outputs: &[Vec<u8>]) {
    let case = dir.join(&graph.name);
    std::fs::create_dir_all(&case).unwrap();
    std::fs::write(case.join("payload.ubjson"), payload).unwrap();
    let ids = graph.inputs().into_iter().zip(inputs).map(|(id, v)| (id, v, "input"));
    let ids = ids.chain(graph.outputs().into_iter().zip(outputs).map(|(id, v)| (id, v, "output")));
    let mut tensors = Vec::new();
    for (id, bytes, role) in ids {
        let t = graph.tensor(id);
        let role = if t.host_scalar { "host_scalar" } else { role };
        let file = format!("{}.bin", t.uid);
        std::fs::write(case.join(&file), bytes).unwrap();
        tensors.push(serde_json::json!({
            "uid": t.uid, "name": t.name, "role": role, "dtype": dtype_name(t.data_type),
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
#[needs_gpu]
#[test]
fn gpu_our_payloads_for_cudnn_frontend() {
    let Some((stream, cudnn)) = gpu() else { return };
    let dir = std::env::var_os("CUDNN_GRAPH_EXCHANGE_DIR").map(std::path::PathBuf::from);
    let graphs = [
        matmul_bias_relu(),
        conv_bias_relu(),
        layernorm_host_epsilon(),
        corpus_graph("slice_matmul"),
        corpus_graph("sdpa_backward"),
    ];
    for graph in graphs {
        let built = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default());
        // The corpus's attention backward has S_kv % 128 != 0 and no padding mask: below
        // cuDNN 9.15.1 (the machines' system 9.14) the capabilities table refuses it by name.
        if graph.name == "sdpa_backward" && !capabilities::has(cudnn.version(), Capability::BackwardAnySeqLenKv) {
            let e = built.expect_err("sdpa_backward planned on a cuDNN without the capability");
            let text = e.to_string();
            assert!(text.contains("S_kv % 128 != 0") && text.contains("9.15.1"), "{text}");
            println!("sdpa_backward: refused on cuDNN {}: {text}", cudnn.version());
            continue;
        }
        let plan = built.unwrap_or_else(|e| panic!("{}: {e}", graph.name));
        let (inputs, outputs) = run_raw(&format!("{} (built here)", graph.name), &plan, &cudnn, &stream);
        let payload = write_frontend_payload(&plan, &PlanOrigin::of(&cudnn), SerializeOptions::default()).unwrap();
        let back = read_frontend_payload(&cudnn, &payload, None).unwrap();
        assert_eq!(back.graph().fingerprint(), graph.fingerprint(), "{}", graph.name);
        if let Some(dir) = &dir {
            write_exchange(dir, &graph, &payload, &inputs, &outputs);
            println!("{}: {} B payload for cudnn-frontend in {}", graph.name, payload.len(), dir.display());
        }
    }
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
