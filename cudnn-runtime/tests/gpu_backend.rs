//! GPU tests of the cuDNN backend: graphs built online (and deviceless, then loaded from JSON),
//! executed, and compared with the CPU reference engine on the same graph.
//!
//! Each test checks for a GPU first and, without one, is ignored (as it was built) — unless
//! `CUDNN_GRAPH_REQUIRE_GPU=1` (set by the GPU bundle's `run-tests`), which makes that a failure.
//! Inputs come from a fixed-seed PRNG and are never zero; outputs are poisoned with NaN before
//! execution; the error figures are printed so the log carries them.
#![cfg(feature = "cudnn")]

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr};
use cudnn_runtime::backend::{BackendError, BuildOptions, Cudnn, CudnnError, DeviceBuffer, ExecutionPlan};
use cudnn_runtime::ops::PointwiseMode;
use cudnn_runtime::reference::{self, HostSlice};
use cudnn_runtime::rng::SplitMix64;
use cudnn_runtime::{ArgError, Bits, DataType, Element, Error, Graph, GraphBuilder};
use half::{bf16, f16};

// `#[needs_cudnn]`, `#[needs_gpu]`: ignored, with the reason, where the requirement was missing
// when the tests were built (cudnn-graph-testkit).
#[macro_use]
extern crate cudnn_graph_testkit;

mod common;

use common::pointwise::{ModeCase, Values};

const DEVPROP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/h200-devprop.json");
const TOLERANCE: f64 = 2e-2;

/// The stream and an online context on GPU 0, or `None` (after saying why) when there is no GPU
/// and that is allowed.
fn gpu() -> Option<(Arc<CudaStream>, Cudnn)> {
    let skip = |why: String| {
        if std::env::var("CUDNN_GRAPH_REQUIRE_GPU").as_deref() == Ok("1") {
            panic!("CUDNN_GRAPH_REQUIRE_GPU=1 but {why}");
        }
        println!("skipped: {why}");
        None
    };
    let ctx = match cudnn_runtime::backend::cuda_context(0) {
        Ok(ctx) => ctx,
        Err(e) => return skip(format!("no CUDA device: {e}")),
    };
    let stream = ctx.default_stream();
    match Cudnn::new(stream.clone()) {
        Ok(cudnn) => Some((stream, cudnn)),
        Err(e @ CudnnError::LibraryMissing { .. }) => skip(e.to_string()),
        Err(e) => panic!("online cuDNN context: {e}"),
    }
}

/// Fixed-seed elements in ±[1/16, 1) (never zero).
fn fill<T: Element>(rng: &mut SplitMix64, n: usize) -> Vec<T> {
    (0..n).map(|_| T::from_f64_value(rng.nonzero(0.0625, 1.0))).collect()
}

/// ‖got − want‖ / ‖want‖ and max |got − want|, in f64; NaN anywhere makes both NaN.
fn errors(got: &[f64], want: &[f64]) -> (f64, f64) {
    assert_eq!(got.len(), want.len());
    let (mut diff, mut norm, mut max) = (0.0f64, 0.0f64, 0.0f64);
    for (g, w) in got.iter().zip(want) {
        let d = g - w;
        diff += d * d;
        norm += w * w;
        max = if d.is_nan() { f64::NAN } else { max.max(d.abs()) };
    }
    ((diff / norm).sqrt(), max)
}

fn check(case: &str, got: &[f64], want: &[f64]) {
    let nans = got.iter().filter(|v| v.is_nan()).count();
    let (rel, max) = errors(got, want);
    println!("{case}: relative error {rel:.3e}, max abs error {max:.3e}, {} values", got.len());
    assert_eq!(nans, 0, "{case}: {nans} NaN outputs (the poison was not overwritten)");
    assert!(rel <= TOLERANCE, "{case}: relative error {rel} > {TOLERANCE}");
}

/// `y = act(a · b [+ bias])`.
fn matmul_graph(name: &str, dt: DataType, a_dims: [i64; 3], b_dims: [i64; 3], bias: bool, act: PointwiseMode) -> Graph {
    let mut g = GraphBuilder::new(name);
    let a = g.input("a", dt, &a_dims).unwrap();
    let b = g.input("b", dt, &b_dims).unwrap();
    let mut y = g.matmul(a, b).unwrap();
    if bias {
        let bias = g.input("bias", dt, &[1, 1, b_dims[2]]).unwrap();
        y = g.pointwise(PointwiseMode::Add, &[y.into(), bias.into()]).unwrap();
    }
    y = g.pointwise(act, &[y.into()]).unwrap();
    g.output(y, "y", dt).unwrap();
    g.build().unwrap()
}

/// Device copies of random inputs for every graph input, and the reference outputs.
struct Case<T> {
    inputs: Vec<CudaSlice<T>>,
    expected: Vec<f64>,
    out_len: usize,
}

fn prepare<T>(stream: &Arc<CudaStream>, graph: &Graph, seed: u64) -> Case<T>
where
    T: Element + DeviceRepr,
    for<'a> HostSlice<'a>: From<&'a [T]>,
{
    let mut rng = SplitMix64::new(seed);
    let hosts: Vec<(String, Vec<T>)> = graph
        .inputs()
        .into_iter()
        .map(|id| {
            let t = graph.tensor(id);
            (t.name.clone(), fill::<T>(&mut rng, t.storage_len()))
        })
        .collect();
    let named: Vec<(&str, HostSlice<'_>)> = hosts.iter().map(|(n, v)| (n.as_str(), v.as_slice().into())).collect();
    let expected = reference::run(graph, &named).unwrap().remove(0).data;
    let inputs = hosts.iter().map(|(_, v)| stream.clone_htod(v).unwrap()).collect();
    let out = graph.tensor(graph.outputs()[0]);
    Case { inputs, expected, out_len: out.storage_len() }
}

/// A workspace for `plan`, if it needs one.
fn workspace(stream: &Arc<CudaStream>, plan: &ExecutionPlan) -> Option<CudaSlice<u8>> {
    (plan.workspace_size() > 0).then(|| stream.alloc_zeros::<u8>(plan.workspace_size()).unwrap())
}

/// Executes `plan` on the case's inputs into a NaN-poisoned output; returns the output.
fn run<T: Element + DeviceRepr>(
    stream: &Arc<CudaStream>,
    cudnn: &Cudnn,
    plan: &ExecutionPlan,
    case: &Case<T>,
) -> Vec<f64> {
    let poison = vec![T::from_f64_value(f64::NAN); case.out_len];
    let mut out = stream.clone_htod(&poison).unwrap();
    let mut workspace = workspace(stream, plan);
    {
        let mut io: Vec<DeviceBuffer<'_>> = case.inputs.iter().map(DeviceBuffer::input).collect();
        io.push(DeviceBuffer::output(&mut out));
        plan.execute(cudnn, &mut io, workspace.as_mut()).unwrap();
    }
    stream.clone_dtoh(&out).unwrap().into_iter().map(Element::to_f64_value).collect()
}

const SHAPES: [([i64; 3], [i64; 3]); 3] =
    [([1, 128, 64], [1, 64, 256]), ([4, 96, 160], [4, 160, 72]), ([2, 256, 512], [1, 512, 128])];

fn matmul_cases<T>(dt: DataType)
where
    T: Element + DeviceRepr,
    for<'a> HostSlice<'a>: From<&'a [T]>,
{
    let Some((stream, cudnn)) = gpu() else { return };
    for (i, (a, b)) in SHAPES.into_iter().enumerate() {
        for (bias, act) in [(true, PointwiseMode::Relu), (false, PointwiseMode::Gelu)] {
            let name = format!("matmul{}_{}_{dt}_{a:?}x{b:?}", if bias { "_bias" } else { "" }, act.name());
            let graph = matmul_graph(&name, dt, a, b, bias, act);
            let t0 = Instant::now();
            let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            println!(
                "{name}: {} candidates, built in {:.0} ms: {}",
                plan.candidates().len(),
                t0.elapsed().as_secs_f64() * 1e3,
                plan.selected()
            );
            let case = prepare::<T>(&stream, &graph, 0x5eed + i as u64);
            check(&name, &run(&stream, &cudnn, &plan, &case), &case.expected);
        }
    }
}

#[needs_gpu]
#[test]
fn gpu_matmul_bias_relu_and_gelu_bf16() {
    matmul_cases::<bf16>(DataType::BF16);
}

#[needs_gpu]
#[test]
fn gpu_matmul_bias_relu_and_gelu_f16() {
    matmul_cases::<f16>(DataType::F16);
}

/// Compiled without the GPU (deviceless, from the H200's device properties), serialized, loaded
/// into the online context and executed: same results as the reference and as an online build.
#[needs_gpu]
#[test]
fn gpu_deviceless_plan_loaded_from_json_executes() {
    let Some((stream, cudnn)) = gpu() else { return };
    let json = std::fs::read_to_string(DEVPROP).unwrap();
    let offline = Cudnn::deviceless(&json).unwrap();
    let graph = matmul_graph("aot", DataType::BF16, [4, 96, 160], [4, 160, 72], true, PointwiseMode::Relu);
    let compiled = ExecutionPlan::build(&offline, &graph, &BuildOptions::default()).unwrap();
    let plan_json = compiled.json().unwrap();
    println!("deviceless plan: {} ({} B of JSON)", compiled.selected(), plan_json.len());
    let loaded = ExecutionPlan::from_json(&cudnn, graph.clone(), &plan_json).unwrap();
    assert!(loaded.is_online());
    let online = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let case = prepare::<bf16>(&stream, &graph, 77);
    let from_json = run(&stream, &cudnn, &loaded, &case);
    check("aot plan from JSON", &from_json, &case.expected);
    let built_online = run(&stream, &cudnn, &online, &case);
    check("online plan", &built_online, &case.expected);
    let (_, max) = errors(&from_json, &built_online);
    println!("aot vs online: max abs difference {max:.3e}");
}

/// The GPU's own device properties (what `cudnn-graph devprop` writes) make a deviceless context
/// whose plan loads and executes here, like the checked-in fixture's; and they describe the same
/// device as the fixture read off an H200.
#[needs_gpu]
#[test]
fn gpu_device_properties_read_here_plan_deviceless() {
    let Some((stream, cudnn)) = gpu() else { return };
    let json = cudnn.device_properties_json().unwrap();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    println!("device properties: {} bytes, deviceVer {}", json.len(), value["deviceVer"]);
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(DEVPROP).unwrap()).unwrap();
    if cudnn.sm() == Some(90) {
        assert_eq!(value["deviceVer"], fixture["deviceVer"], "{json}");
    }
    let offline = Cudnn::deviceless(&json).unwrap();
    assert_eq!(offline.device_properties_json().unwrap(), json);
    let graph = matmul_graph("devprop", DataType::BF16, [2, 64, 128], [2, 128, 32], true, PointwiseMode::Relu);
    let compiled = ExecutionPlan::build(&offline, &graph, &BuildOptions::default()).unwrap();
    let loaded = ExecutionPlan::from_json(&cudnn, graph.clone(), &compiled.json().unwrap()).unwrap();
    let case = prepare::<bf16>(&stream, &graph, 78);
    check("plan from this GPU's device properties", &run(&stream, &cudnn, &loaded, &case), &case.expected);
}

#[needs_gpu]
#[test]
fn gpu_pointwise_scalar_and_reduction_graphs() {
    let Some((stream, cudnn)) = gpu() else { return };
    // Rank 2 (padded to 3 in cuDNN) with a by-value scalar: y = relu(x * 0.5 + z).
    let mut g = GraphBuilder::new("scale_add_relu");
    let x = g.input("x", DataType::F32, &[64, 256]).unwrap();
    let z = g.input("z", DataType::F32, &[64, 256]).unwrap();
    let s = g.op("mul", &[x.into(), 0.5.into()], &[]).unwrap()[0];
    let a = g.pointwise(PointwiseMode::Add, &[s.into(), z.into()]).unwrap();
    let r = g.pointwise(PointwiseMode::Relu, &[a.into()]).unwrap();
    g.output(r, "y", DataType::F32).unwrap();
    let graph = g.build().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let case = prepare::<f32>(&stream, &graph, 5);
    check("scale_add_relu f32", &run(&stream, &cudnn, &plan, &case), &case.expected);

    // A row sum as the epilogue of a matmul.
    let mut g = GraphBuilder::new("matmul_row_sum");
    let a = g.input("a", DataType::F16, &[1, 128, 64]).unwrap();
    let b = g.input("b", DataType::F16, &[1, 64, 256]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let s = g.op("reduce_sum", &[c.into()], &[("dims".into(), vec![2i64].into())]).unwrap()[0];
    g.output(s, "s", DataType::F32).unwrap();
    let graph = g.build().unwrap();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let case = prepare::<f16>(&stream, &graph, 6);
    let poison = vec![f32::NAN; case.out_len];
    let mut out = stream.clone_htod(&poison).unwrap();
    let mut workspace = workspace(&stream, &plan);
    {
        let mut io: Vec<DeviceBuffer<'_>> = case.inputs.iter().map(DeviceBuffer::input).collect();
        io.push(DeviceBuffer::output(&mut out));
        plan.execute(&cudnn, &mut io, workspace.as_mut()).unwrap();
    }
    let got: Vec<f64> = stream.clone_dtoh(&out).unwrap().into_iter().map(f64::from).collect();
    check("matmul_row_sum f16 -> f32", &got, &case.expected);
}

#[needs_gpu]
#[test]
fn gpu_execute_raw_matches_execute_and_host_overhead() {
    let Some((stream, cudnn)) = gpu() else { return };
    let graph = matmul_graph("raw", DataType::F16, [1, 128, 64], [1, 64, 256], true, PointwiseMode::Relu);
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let case = prepare::<f16>(&stream, &graph, 9);
    let poison = vec![f16::NAN; case.out_len];
    let mut out = stream.clone_htod(&poison).unwrap();
    let mut ws_buffer = workspace(&stream, &plan);
    let iterations = 200;
    let seconds = {
        let (a, _ga) = case.inputs[0].device_ptr(&stream);
        let (b, _gb) = case.inputs[1].device_ptr(&stream);
        let (bias, _gc) = case.inputs[2].device_ptr(&stream);
        let (y, _gy) = out.device_ptr_mut(&stream);
        let (ws, _gw) = match &ws_buffer {
            Some(w) => {
                let (ptr, guard) = w.device_ptr(&stream);
                (ptr, Some(guard))
            }
            None => (0, None),
        };
        let io = [a, b, bias, y];
        // SAFETY: live buffers of this context, sized for their tensors (prepared from the
        // graph), cudarc allocations (256-byte aligned), kept alive and ordered by the guards.
        unsafe { plan.execute_raw(&cudnn, &io, ws) }.unwrap();
        stream.synchronize().unwrap();
        let t0 = Instant::now();
        for _ in 0..iterations {
            // SAFETY: as above.
            unsafe { plan.execute_raw(&cudnn, &io, ws) }.unwrap();
        }
        let host = t0.elapsed().as_secs_f64();
        stream.synchronize().unwrap();
        host
    };
    println!("execute_raw: {:.1} us host time per call ({iterations} calls)", seconds / iterations as f64 * 1e6);
    let got: Vec<f64> = stream.clone_dtoh(&out).unwrap().into_iter().map(Element::to_f64_value).collect();
    check("execute_raw", &got, &case.expected);
    let t0 = Instant::now();
    for _ in 0..iterations {
        let mut io = [
            DeviceBuffer::input(&case.inputs[0]),
            DeviceBuffer::input(&case.inputs[1]),
            DeviceBuffer::input(&case.inputs[2]),
            DeviceBuffer::output(&mut out),
        ];
        plan.execute(&cudnn, &mut io, ws_buffer.as_mut()).unwrap();
    }
    let host = t0.elapsed().as_secs_f64();
    stream.synchronize().unwrap();
    println!("execute: {:.1} us host time per call ({iterations} calls)", host / iterations as f64 * 1e6);
}

#[needs_gpu]
#[test]
fn gpu_bad_buffers_are_typed_errors() {
    let Some((stream, cudnn)) = gpu() else { return };
    let graph = matmul_graph("bad_args", DataType::BF16, [1, 64, 32], [1, 32, 16], true, PointwiseMode::Relu);
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let case = prepare::<bf16>(&stream, &graph, 3);
    let [a, b, bias] = [&case.inputs[0], &case.inputs[1], &case.inputs[2]];
    let mut ws = workspace(&stream, &plan);

    let mut short = stream.alloc_zeros::<bf16>(case.out_len - 1).unwrap();
    let mut io =
        [DeviceBuffer::input(a), DeviceBuffer::input(b), DeviceBuffer::input(bias), DeviceBuffer::output(&mut short)];
    match plan.execute(&cudnn, &mut io, ws.as_mut()).map_err(Error::from) {
        Err(Error::Arg(ArgError::Length { tensor, expected, found, .. })) => {
            assert_eq!((tensor.as_str(), expected, found), ("y", case.out_len, case.out_len - 1));
        }
        other => panic!("short output: {other:?}"),
    }

    let mut wrong_type = stream.alloc_zeros::<f32>(case.out_len).unwrap();
    let mut io = [
        DeviceBuffer::input(a),
        DeviceBuffer::input(b),
        DeviceBuffer::input(bias),
        DeviceBuffer::output(&mut wrong_type),
    ];
    match plan.execute(&cudnn, &mut io, ws.as_mut()).map_err(Error::from) {
        Err(Error::Arg(ArgError::DType { tensor, expected: DataType::BF16, found: DataType::F32 })) => {
            assert_eq!(tensor, "y");
        }
        other => panic!("f32 output for a bf16 tensor: {other:?}"),
    }

    let out = stream.alloc_zeros::<bf16>(case.out_len).unwrap();
    let mut io = [DeviceBuffer::input(a), DeviceBuffer::input(b), DeviceBuffer::input(bias), DeviceBuffer::input(&out)];
    match plan.execute(&cudnn, &mut io, ws.as_mut()) {
        Err(BackendError::ReadOnlyOutput { tensor }) => assert_eq!(tensor, "y"),
        other => panic!("read-only output: {other:?}"),
    }

    let mut io = [DeviceBuffer::input(a), DeviceBuffer::input(b)];
    match plan.execute(&cudnn, &mut io, ws.as_mut()) {
        Err(BackendError::IoCount { expected: 4, found: 2, .. }) => {}
        other => panic!("two buffers for four tensors: {other:?}"),
    }

    let mut out = stream.alloc_zeros::<bf16>(case.out_len + 8).unwrap();
    let mut view = out.slice_mut(1..);
    let mut io =
        [DeviceBuffer::input(a), DeviceBuffer::input(b), DeviceBuffer::input(bias), DeviceBuffer::output(&mut view)];
    match plan.execute(&cudnn, &mut io, ws.as_mut()) {
        Err(BackendError::Misaligned { tensor, alignment: 16, .. }) => assert_eq!(tensor, "y"),
        other => panic!("misaligned view: {other:?}"),
    }
    if plan.workspace_size() > 0 {
        let mut out = stream.alloc_zeros::<bf16>(case.out_len).unwrap();
        let mut io =
            [DeviceBuffer::input(a), DeviceBuffer::input(b), DeviceBuffer::input(bias), DeviceBuffer::output(&mut out)];
        match plan.execute(&cudnn, &mut io, None) {
            Err(BackendError::Workspace { given: 0, .. }) => {}
            other => panic!("missing workspace: {other:?}"),
        }
    }
    println!("bad buffers: length, type, read-only output, count and alignment are typed errors");
}

#[needs_gpu]
#[test]
fn gpu_execute_named_takes_any_order() {
    let Some((stream, cudnn)) = gpu() else { return };
    let graph = matmul_graph("named", DataType::F16, [2, 64, 32], [2, 32, 48], true, PointwiseMode::Relu);
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
    let case = prepare::<f16>(&stream, &graph, 11);
    let [a, b, bias] = [&case.inputs[0], &case.inputs[1], &case.inputs[2]];
    let mut ws = workspace(&stream, &plan);
    let mut out = stream.clone_htod(&vec![f16::NAN; case.out_len]).unwrap();
    {
        let mut io = [
            ("y", DeviceBuffer::output(&mut out)),
            ("bias", DeviceBuffer::input(bias)),
            ("b", DeviceBuffer::input(b)),
            ("a", DeviceBuffer::input(a)),
        ];
        plan.execute_named(&cudnn, &mut io, ws.as_mut()).unwrap();
    }
    let got: Vec<f64> = stream.clone_dtoh(&out).unwrap().into_iter().map(Element::to_f64_value).collect();
    check("execute_named", &got, &case.expected);
    for wrong in ["c", "a"] {
        let mut io = [
            ("y", DeviceBuffer::output(&mut out)),
            ("bias", DeviceBuffer::input(bias)),
            (wrong, DeviceBuffer::input(b)),
            ("a", DeviceBuffer::input(a)),
        ];
        match plan.execute_named(&cudnn, &mut io, ws.as_mut()).map_err(Error::from) {
            Err(Error::Arg(ArgError::Unexpected { tensor, .. })) => assert_eq!(tensor, wrong),
            other => panic!("buffer named {wrong:?}: {other:?}"),
        }
    }
}

/// The f32 results of a pointwise mode on the GPU may differ from the f64 reference by this much
/// (‖got − want‖ / ‖want‖): cuDNN's f32 math, not a bf16/f16 output's rounding.
const POINTWISE_F32_TOLERANCE: f64 = 1e-5;

/// A pointwise case's input on the device.
enum Device {
    F32(CudaSlice<f32>),
    Bool(CudaSlice<Bits>),
}

/// Executes `plan` on `inputs` into a fresh output of `fill`s (`Bits` for a bool output), which
/// `output` wraps; returns the output.
fn execute_into<T: DeviceRepr + Clone>(
    stream: &Arc<CudaStream>,
    cudnn: &Cudnn,
    plan: &ExecutionPlan,
    inputs: &[Device],
    fill: T,
    len: usize,
    output: fn(&mut CudaSlice<T>) -> DeviceBuffer<'_>,
) -> Result<Vec<T>, Error> {
    let mut y = stream.clone_htod(&vec![fill; len]).unwrap();
    let mut ws = workspace(stream, plan);
    {
        let mut io: Vec<DeviceBuffer<'_>> = inputs
            .iter()
            .map(|d| match d {
                Device::F32(b) => DeviceBuffer::input(b),
                Device::Bool(b) => DeviceBuffer::bits_input(b),
            })
            .collect();
        io.push(output(&mut y));
        plan.execute(cudnn, &mut io, ws.as_mut())?;
    }
    Ok(stream.clone_dtoh(&y).unwrap())
}

/// Runs one mode's case on the GPU; its output as f64. An f32 output starts as NaN; a bool or
/// i32 output is written twice, over two different fills, and a value that differs between the
/// runs (cuDNN left it unwritten) is NaN.
fn run_mode(stream: &Arc<CudaStream>, cudnn: &Cudnn, case: &ModeCase) -> Result<Vec<f64>, Error> {
    let plan = ExecutionPlan::build(cudnn, &case.graph, &BuildOptions::default())?;
    let inputs: Vec<Device> = case
        .inputs
        .iter()
        .map(|(_, v)| match v {
            Values::F32(v) => Device::F32(stream.clone_htod(v).unwrap()),
            Values::Bool(v) => Device::Bool(stream.clone_htod(&Bits::pack(v)).unwrap()),
        })
        .collect();
    let len = case.inputs[0].1.host().len();
    let merge = |a: Vec<f64>, b: Vec<f64>| a.iter().zip(&b).map(|(&a, &b)| if a == b { a } else { f64::NAN }).collect();
    Ok(match case.output {
        DataType::F32 => {
            let y = execute_into(stream, cudnn, &plan, &inputs, f32::NAN, len, |y| DeviceBuffer::output(y))?;
            y.into_iter().map(f64::from).collect()
        }
        DataType::Bool => {
            let run = |fill| -> Result<Vec<f64>, Error> {
                let y = execute_into(stream, cudnn, &plan, &inputs, fill, Bits::units_for(len), |y| {
                    DeviceBuffer::bits_output(y)
                })?;
                Ok(Bits::unpack(&y, len).into_iter().map(|v| f64::from(u8::from(v))).collect())
            };
            merge(run(Bits(0xff))?, run(Bits(0))?)
        }
        DataType::I32 => {
            let run = |fill| -> Result<Vec<f64>, Error> {
                let y = execute_into(stream, cudnn, &plan, &inputs, fill, len, |y| DeviceBuffer::output(y))?;
                Ok(y.into_iter().map(f64::from).collect())
            };
            merge(run(-1i32)?, run(i32::MAX)?)
        }
        other => panic!("no pointwise case has a {other} output"),
    })
}

/// Every cuDNN pointwise mode on the H200 (the cases `deviceless.rs` plans) against the CPU
/// reference: f32 outputs within [`POINTWISE_F32_TOLERANCE`], bool and i32 outputs exactly.
/// Every mode runs before the test fails, so one run reports them all.
#[needs_gpu]
#[test]
fn gpu_every_pointwise_mode() {
    let Some((stream, cudnn)) = gpu() else { return };
    let mut failures = Vec::new();
    for case in common::pointwise::cases() {
        let name = case.mode.name();
        let named: Vec<(&str, HostSlice<'_>)> = case.inputs.iter().map(|(n, v)| (n.as_str(), v.host())).collect();
        let want = reference::run(&case.graph, &named).unwrap().remove(0).data;
        let got = match run_mode(&stream, &cudnn, &case) {
            Ok(got) => got,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let nans = got.iter().filter(|v| v.is_nan()).count();
        if case.output == DataType::F32 {
            let (rel, max) = errors(&got, &want);
            println!("pointwise {name} f32: relative error {rel:.3e}, max abs error {max:.3e}");
            if nans > 0 || rel.is_nan() || rel > POINTWISE_F32_TOLERANCE {
                failures.push(format!("{name}: relative error {rel:.3e}, {nans} NaN"));
            }
        } else {
            let wrong = got.iter().zip(&want).filter(|(g, w)| g != w).count();
            println!("pointwise {name} {}: {wrong} of {} differ ({nans} unwritten)", case.output, got.len());
            if wrong > 0 {
                failures.push(format!("{name}: {wrong} of {} differ ({nans} unwritten)", got.len()));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
