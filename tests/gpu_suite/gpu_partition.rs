//! Partitioned plans on the GPU (issue 16): the four blocks of `tests/common/blocks.rs`, which
//! cuDNN plans as several kernels, built online with default options, executed through the typed
//! API on random non-zero inputs and compared with the CPU reference of the whole graph; then, on
//! the MLP, every other way to run a plan: `execute_raw`, a CUDA graph (stream-captured: a
//! partitioned plan is more than one kernel) replayed and pointed at other buffers, autotuning
//! part by part, and payload round trips.
//!
//! Outputs and workspaces (where the parts exchange their tensors) are filled with NaN before
//! every execute, so a part that writes nothing, or reads what no part wrote, cannot pass. An
//! output passes under cudnn-frontend's tolerance for its type (every element within
//! `atol + rtol·|want|`, see [`tolerance`]) and the project's relative-error bound
//! ([`common::GPU_TOLERANCE`]); the figures and each plan's parts are printed.
//!
//! With `CUDNN_GRAPH_DUMP_DIR` set, each block case writes its inputs and our GPU output there
//! (raw little-endian files and a manifest per case) for `tests/torch/compare_blocks.py`, which
//! computes the same blocks in PyTorch (`docs/developing.md`, GPU section).
//!
//! Without a GPU each test is ignored (as it was built), unless `CUDNN_GRAPH_REQUIRE_GPU=1` (set by the
//! GPU bundle's `run-tests`), which makes that a failure.

#![cfg(feature = "cudnn")]

#[path = "../common/blocks.rs"]
mod blocks;
use crate::common;

use std::sync::Arc;

use blocks::{
    AttentionBlock, AttentionBlockArgs, AttentionBlockInputs, Mlp, MlpArgs, MlpInputs, MlpRawArgs, NormLinear,
    NormLinearArgs, NormLinearInputs, ResBlock, ResBlockArgs, ResBlockInputs,
};
use cudnn_graph::backend::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DeviceRepr};
use cudnn_graph::backend::{BuildOptions, Cudnn, DeviceBuffer, ExecutionPlan, GraphMode};
use cudnn_graph::engines::{autotune, AutotuneOptions};
use cudnn_graph::payload::plan::{write_payload, PlanOrigin, SerializeOptions};
use cudnn_graph::rng::SplitMix64;
use cudnn_graph::{DataType, Element, Graph};
use half::{bf16, f16};
use serde_json::{json, Value};

/// cudnn-frontend's tolerance `(atol, rtol)` for an output of type `dt`, an element passing when
/// `|got − want| ≤ atol + rtol·|want|`: bf16 as its SDPA tests check O
/// (`test/python/sdpa/fp16.py`: 2e-2, 2e-2), f16 as its fused f16 convolution tests
/// (`test/python/test_conv_bias.py`, conv3d + bias + leaky relu: 1e-2, 1e-2), f32 as its
/// batch-norm tests (`test/python/test_batchnorm.py`: 1e-3, 1e-3).
fn tolerance(dt: DataType) -> (f64, f64) {
    match dt {
        DataType::BF16 => (2e-2, 2e-2),
        DataType::F16 => (1e-2, 1e-2),
        _ => (1e-3, 1e-3),
    }
}

/// One tensor's host values, in its port's type.
#[derive(Clone)]
enum Values {
    Bf16(Vec<bf16>),
    F16(Vec<f16>),
    F32(Vec<f32>),
}

/// One tensor's device copy.
enum DeviceValues {
    Bf16(CudaSlice<bf16>),
    F16(CudaSlice<f16>),
    F32(CudaSlice<f32>),
}

/// The element types the blocks' ports use.
trait Port: Element + DeviceRepr {
    fn host(v: &Values) -> Option<&[Self]>;
    fn device(v: &DeviceValues) -> Option<&CudaSlice<Self>>;
    fn wrap(v: Vec<Self>) -> Values;
    fn le_bytes(self) -> Vec<u8>;
}

macro_rules! port {
    ($t:ty, $variant:ident) => {
        impl Port for $t {
            fn host(v: &Values) -> Option<&[Self]> {
                match v {
                    Values::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn device(v: &DeviceValues) -> Option<&CudaSlice<Self>> {
                match v {
                    DeviceValues::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn wrap(v: Vec<Self>) -> Values {
                Values::$variant(v)
            }
            fn le_bytes(self) -> Vec<u8> {
                self.to_le_bytes().to_vec()
            }
        }
    };
}
port!(bf16, Bf16);
port!(f16, F16);
port!(f32, F32);

impl Values {
    fn le_bytes(&self) -> Vec<u8> {
        match self {
            Values::Bf16(v) => v.iter().flat_map(|x| x.le_bytes()).collect(),
            Values::F16(v) => v.iter().flat_map(|x| x.le_bytes()).collect(),
            Values::F32(v) => v.iter().flat_map(|x| x.le_bytes()).collect(),
        }
    }
}

/// A block's inputs by name, in storage order (each port's declared layout).
struct Inputs {
    values: Vec<(String, Values)>,
}

impl Inputs {
    /// Fixed-seed non-zero values for every input of `graph`, scaled as a network's would be so
    /// that outputs stay of order one: weights (`w…`) by `1/sqrt(fan-in)`, statistics a batch
    /// norm divides by positive.
    fn random(graph: &Graph, seed: u64) -> Self {
        let values = graph
            .inputs()
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let t = graph.tensor(*id);
                let mut rng = SplitMix64::new(seed.wrapping_mul(1000).wrapping_add(i as u64));
                let (lo, hi, positive) = match t.name.as_str() {
                    name if name.starts_with('w') => {
                        // [1, K, N] matmul weights: K; [K, C, R, S] filters: C·R·S.
                        let fan_in = if t.dims.len() == 3 { t.dims[1] } else { t.dims[1..].iter().product() };
                        let s = 1.0 / (fan_in as f64).sqrt();
                        (0.25 * s, s, false)
                    }
                    "inv_var" => (0.5, 1.5, true),
                    "g" | "scale" => (0.5, 1.5, false),
                    "mean" | "bias" | "b1" | "b2" => (0.05, 0.5, false),
                    _ => (0.25, 1.0, false),
                };
                let draw = (0..t.storage_len()).map(|_| {
                    let v = rng.nonzero(lo, hi);
                    if positive {
                        v.abs()
                    } else {
                        v
                    }
                });
                let v = match t.data_type {
                    DataType::BF16 => Values::Bf16(draw.map(bf16::from_f64_value).collect()),
                    DataType::F16 => Values::F16(draw.map(f16::from_f64_value).collect()),
                    DataType::F32 => Values::F32(draw.map(f32::from_f64_value).collect()),
                    other => panic!("no block has a {other:?} input"),
                };
                (t.name.clone(), v)
            })
            .collect();
        Inputs { values }
    }

    fn get<T: Port>(&self, name: &str) -> &[T] {
        let v = self.values.iter().find(|(n, _)| n == name).map(|(_, v)| v);
        v.and_then(T::host).unwrap_or_else(|| panic!("no input `{name}` of that type"))
    }

    fn upload(&self, stream: &Arc<CudaStream>) -> Device {
        let values = self
            .values
            .iter()
            .map(|(n, v)| {
                let d = match v {
                    Values::Bf16(v) => DeviceValues::Bf16(common::upload(stream, v)),
                    Values::F16(v) => DeviceValues::F16(common::upload(stream, v)),
                    Values::F32(v) => DeviceValues::F32(common::upload(stream, v)),
                };
                (n.clone(), d)
            })
            .collect();
        Device { values }
    }
}

/// A block's inputs on the device.
struct Device {
    values: Vec<(String, DeviceValues)>,
}

impl Device {
    fn get<T: Port>(&self, name: &str) -> &CudaSlice<T> {
        let v = self.values.iter().find(|(n, _)| n == name).map(|(_, v)| v);
        v.and_then(T::device).unwrap_or_else(|| panic!("no device input `{name}` of that type"))
    }

    /// Every input's device address, by name.
    fn pointers(&self, stream: &Arc<CudaStream>) -> Vec<(String, u64)> {
        self.values
            .iter()
            .map(|(n, v)| {
                let p = match v {
                    DeviceValues::Bf16(b) => b.device_ptr(stream).0,
                    DeviceValues::F16(b) => b.device_ptr(stream).0,
                    DeviceValues::F32(b) => b.device_ptr(stream).0,
                };
                (n.clone(), p)
            })
            .collect()
    }
}

/// A workspace of `bytes` (at least one) filled with 0xff bytes: NaN as bf16, f16 and f32, so an
/// intermediate the arena hands on before a part wrote it shows in the output.
fn poisoned_workspace(stream: &Arc<CudaStream>, bytes: usize) -> CudaSlice<u8> {
    stream.clone_htod(&vec![0xffu8; bytes.max(1)]).unwrap()
}

/// Prints a plan's parts (each part's `Display`: nodes, engine, workspace, what it writes, cut).
fn show(case: &str, plan: &ExecutionPlan) {
    println!(
        "{case}: {} parts, arena {} B, workspace {} B, rewrites {}",
        plan.parts().len(),
        plan.arena_bytes(),
        plan.workspace_size(),
        plan.rewrites().len()
    );
    for (k, p) in plan.parts().iter().enumerate() {
        println!("  part {k}: {p}");
    }
}

/// Error figures of one output against the reference.
struct Figures {
    max_abs: f64,
    /// Largest |got − want| over the output's largest |want|.
    max_rel: f64,
    /// ‖got − want‖ / ‖want‖.
    norm_rel: f64,
    /// Elements outside `atol + rtol·|want|` (NaN counts).
    outside: usize,
}

fn figures<T: Element>(got: &[T], want: &[T], (atol, rtol): (f64, f64)) -> Figures {
    assert_eq!(got.len(), want.len());
    let (mut max_abs, mut scale, mut outside) = (0f64, 0f64, 0);
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (g.to_f64_value(), w.to_f64_value());
        let d = (g - w).abs();
        if d.is_nan() || d > atol + rtol * w.abs() {
            outside += 1;
        }
        max_abs = max_abs.max(if d.is_nan() { f64::INFINITY } else { d });
        scale = scale.max(w.abs());
    }
    Figures { max_abs, max_rel: max_abs / scale, norm_rel: common::relative_error(got, want), outside }
}

/// Compares one output with the reference, prints the figures and asserts the tolerances.
fn check<T: Element>(case: &str, what: &str, got: &[T], want: &[T]) {
    let tol = tolerance(T::DTYPE);
    let f = figures(got, want, tol);
    println!(
        "{case}: {what}: max |err| {:.3e}, max |err|/max |want| {:.3e}, relative error {:.3e}, {} of {} outside \
         atol {:.0e} + rtol {:.0e}·|want|",
        f.max_abs,
        f.max_rel,
        f.norm_rel,
        f.outside,
        got.len(),
        tol.0,
        tol.1
    );
    assert_eq!(f.outside, 0, "{case}: {what}: {} elements outside cudnn-frontend's tolerance", f.outside);
    assert!(f.norm_rel <= common::GPU_TOLERANCE, "{case}: {what}: relative error {}", f.norm_rel);
}

fn dtype_name(dt: DataType) -> &'static str {
    match dt {
        DataType::BF16 => "bf16",
        DataType::F16 => "f16",
        DataType::F32 => "f32",
        other => panic!("no block has a {other:?} port"),
    }
}

/// With `CUDNN_GRAPH_DUMP_DIR` set: the case's inputs and our output as raw little-endian files
/// `CASE.NAME.bin`, and `CASE.json` naming each with its dtype, dims and strides (elements), the
/// block, its parameters and the tolerance, for `tests/torch/compare_blocks.py`.
fn dump(case: &str, block: &str, params: Value, graph: &Graph, inputs: &Inputs, output: (&str, Values)) {
    let Some(dir) = std::env::var_os("CUDNN_GRAPH_DUMP_DIR") else { return };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut tensors = Vec::new();
    let outputs = vec![(output.0.to_string(), output.1)];
    for (role, list) in [("input", &inputs.values), ("output", &outputs)] {
        for (name, values) in list {
            let t = graph.tensors.iter().find(|t| &t.name == name).unwrap();
            let file = format!("{case}.{name}.bin");
            std::fs::write(dir.join(&file), values.le_bytes()).unwrap();
            tensors.push(json!({"name": name, "role": role, "dtype": dtype_name(t.data_type),
                                "dims": t.dims, "strides": t.strides, "file": file}));
        }
    }
    let (atol, rtol) = tolerance(graph.tensors.iter().find(|t| t.name == output.0).unwrap().data_type);
    let manifest = json!({"case": case, "block": block, "params": params, "atol": atol, "rtol": rtol,
                          "tensors": tensors});
    std::fs::write(dir.join(format!("{case}.json")), serde_json::to_string_pretty(&manifest).unwrap()).unwrap();
    println!("{case}: inputs and output written to {}", dir.display());
}

/// One block case on the GPU: uploads `inputs`, runs `execute` (the typed execute) with a
/// NaN-poisoned output and workspace, compares with `want`, and dumps the case for PyTorch.
#[allow(clippy::too_many_arguments)]
fn run_case<T: Port>(
    stream: &Arc<CudaStream>,
    case: &str,
    block: &str,
    params: Value,
    graph: &Graph,
    plan: &ExecutionPlan,
    inputs: &Inputs,
    want: &[T],
    execute: impl FnOnce(&Device, &mut CudaSlice<T>, &mut CudaSlice<u8>),
) {
    show(case, plan);
    assert!(plan.is_online());
    assert!(plan.is_partitioned(), "{case}: expected several parts");
    let device = inputs.upload(stream);
    let mut y = common::poisoned::<T>(stream, want.len());
    let mut ws = poisoned_workspace(stream, plan.workspace_size());
    execute(&device, &mut y, &mut ws);
    stream.synchronize().unwrap();
    let got = stream.clone_dtoh(&y).unwrap();
    check(case, "y", &got, want);
    dump(case, block, params, graph, inputs, ("y", T::wrap(got)));
}

fn mlp_case<const E: usize, const F: usize>(stream: &Arc<CudaStream>, cudnn: &Cudnn, t: usize, seed: u64) {
    let case = format!("mlp_e{E}_f{F}_t{t}");
    let g = Mlp::<E, F>::new(t);
    let graph = g.graph().unwrap();
    let inputs = Inputs::random(&graph, seed);
    let i = &inputs;
    let want =
        g.reference(MlpInputs { x: i.get("x"), w1: i.get("w1"), b1: i.get("b1"), w2: i.get("w2"), b2: i.get("b2") });
    let want = want.unwrap().y;
    let plan = g.build(cudnn, &BuildOptions::default()).unwrap();
    run_case(stream, &case, "mlp", json!({}), &graph, plan.plan(), &inputs, &want, |d, y, ws| {
        let args = MlpArgs { x: d.get("x"), w1: d.get("w1"), b1: d.get("b1"), w2: d.get("w2"), b2: d.get("b2"), y };
        plan.execute(cudnn, args, Some(ws)).unwrap()
    });
}

fn norm_linear_case<const E: usize, const F: usize>(stream: &Arc<CudaStream>, cudnn: &Cudnn, t: usize, seed: u64) {
    let case = format!("norm_linear_e{E}_f{F}_t{t}");
    let g = NormLinear::<E, F>::new(t);
    let graph = g.graph().unwrap();
    let inputs = Inputs::random(&graph, seed);
    let i = &inputs;
    let want = g.reference(NormLinearInputs { x: i.get("x"), g: i.get("g"), w: i.get("w") }).unwrap().y;
    let plan = g.build(cudnn, &BuildOptions::default()).unwrap();
    run_case(stream, &case, "norm_linear", json!({"eps": 1e-5}), &graph, plan.plan(), &inputs, &want, |d, y, ws| {
        let args = NormLinearArgs { x: d.get("x"), g: d.get("g"), w: d.get("w"), y };
        plan.execute(cudnn, args, Some(ws)).unwrap()
    });
}

fn res_block_case<const C: usize>(stream: &Arc<CudaStream>, cudnn: &Cudnn, n: usize, h: usize, w: usize, seed: u64) {
    let case = format!("res_block_c{C}_n{n}_h{h}_w{w}");
    let g = ResBlock::<C>::new(n, h, w);
    let graph = g.graph().unwrap();
    let inputs = Inputs::random(&graph, seed);
    let i = &inputs;
    let want = g.reference(ResBlockInputs {
        x: i.get("x"),
        w1: i.get("w1"),
        mean: i.get("mean"),
        inv_var: i.get("inv_var"),
        scale: i.get("scale"),
        bias: i.get("bias"),
        w2: i.get("w2"),
    });
    let want = want.unwrap().y;
    let plan = g.build(cudnn, &BuildOptions::default()).unwrap();
    // Build rewrote the batch norm into the first convolution's epilogue.
    assert!(!plan.plan().rewrites().is_empty(), "{case}: batchnorm_inference was not rewritten");
    run_case(stream, &case, "res_block", json!({"padding": 1}), &graph, plan.plan(), &inputs, &want, |d, y, ws| {
        let args = ResBlockArgs {
            x: d.get("x"),
            w1: d.get("w1"),
            mean: d.get("mean"),
            inv_var: d.get("inv_var"),
            scale: d.get("scale"),
            bias: d.get("bias"),
            w2: d.get("w2"),
            y,
        };
        plan.execute(cudnn, args, Some(ws)).unwrap()
    });
}

/// The attention parameters the PyTorch script needs (the declaration fixes them).
fn attention_params(b: usize, s: usize, heads: usize, kv_heads: usize, d: usize) -> Value {
    json!({"B": b, "S": s, "HQ": heads, "HKV": kv_heads, "D": d, "eps": 1e-5, "causal": true})
}

#[needs_gpu]
#[test]
fn gpu_mlp_runs_partitioned() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    mlp_case::<256, 1024>(&stream, &cudnn, 128, 1);
    // A token count that is no multiple of a tile, and a wider model.
    mlp_case::<512, 2048>(&stream, &cudnn, 200, 2);
}

#[needs_gpu]
#[test]
fn gpu_norm_linear_runs_partitioned() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    norm_linear_case::<256, 512>(&stream, &cudnn, 64, 3);
    norm_linear_case::<1024, 1024>(&stream, &cudnn, 200, 4);
}

#[needs_gpu]
#[test]
fn gpu_res_block_runs_partitioned() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    res_block_case::<32>(&stream, &cudnn, 4, 16, 16, 5);
    res_block_case::<64>(&stream, &cudnn, 8, 28, 28, 6);
}

fn attention_case<const HQ: usize, const HKV: usize, const D: usize>(
    stream: &Arc<CudaStream>,
    cudnn: &Cudnn,
    b: usize,
    s: usize,
    seed: u64,
) {
    let case = format!("attention_b{b}_s{s}_h{HQ}x{D}_kv{HKV}");
    let g = AttentionBlock::<HQ, HKV, D>::new(b, s);
    let graph = g.graph().unwrap();
    let inputs = Inputs::random(&graph, seed);
    let i = &inputs;
    let want = g.reference(AttentionBlockInputs {
        x: i.get("x"),
        g: i.get("g"),
        wq: i.get("wq"),
        wk: i.get("wk"),
        wv: i.get("wv"),
        wo: i.get("wo"),
    });
    let want = want.unwrap().y;
    let plan = g.build(cudnn, &BuildOptions::default()).unwrap();
    let params = attention_params(b, s, HQ, HKV, D);
    run_case(stream, &case, "attention", params, &graph, plan.plan(), &inputs, &want, |d, y, ws| {
        let args = AttentionBlockArgs {
            x: d.get("x"),
            g: d.get("g"),
            wq: d.get("wq"),
            wk: d.get("wk"),
            wv: d.get("wv"),
            wo: d.get("wo"),
            y,
        };
        plan.execute(cudnn, args, Some(ws)).unwrap()
    });
}

#[needs_gpu]
#[test]
fn gpu_attention_block_runs_partitioned() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    attention_case::<4, 2, 32>(&stream, &cudnn, 2, 64, 7);
    attention_case::<4, 2, 128>(&stream, &cudnn, 2, 128, 8);
}

/// The MLP the remaining tests run every other way: E = 512, F = 2048, T = 128.
type TestMlp = Mlp<512, 2048>;
const MLP_T: usize = 128;

/// A set of MLP inputs on the device with its reference output and a poisoned output buffer.
struct MlpSet {
    device: Device,
    want: Vec<bf16>,
    y: CudaSlice<bf16>,
}

impl MlpSet {
    fn new(stream: &Arc<CudaStream>, seed: u64) -> Self {
        let g = TestMlp::new(MLP_T);
        let inputs = Inputs::random(&g.graph().unwrap(), seed);
        let i = &inputs;
        let want = g
            .reference(MlpInputs { x: i.get("x"), w1: i.get("w1"), b1: i.get("b1"), w2: i.get("w2"), b2: i.get("b2") })
            .unwrap()
            .y;
        let device = inputs.upload(stream);
        let y = common::poisoned(stream, want.len());
        MlpSet { device, want, y }
    }

    fn poison(&mut self, stream: &Arc<CudaStream>) {
        self.y = common::poisoned(stream, self.want.len());
    }

    fn args(&mut self) -> MlpArgs<'_> {
        let d = &self.device;
        MlpArgs { x: d.get("x"), w1: d.get("w1"), b1: d.get("b1"), w2: d.get("w2"), b2: d.get("b2"), y: &mut self.y }
    }

    /// The ports' device addresses (as `execute_raw` of the typed plan takes them).
    fn raw(&self, stream: &Arc<CudaStream>) -> MlpRawArgs {
        let p = |n: &str| self.device.get::<bf16>(n).device_ptr(stream).0;
        MlpRawArgs { x: p("x"), w1: p("w1"), b1: p("b1"), w2: p("w2"), b2: p("b2"), y: self.y.device_ptr(stream).0 }
    }

    /// The addresses in `plan`'s I/O order (as the untyped plan's raw calls take them).
    fn io(&self, stream: &Arc<CudaStream>, plan: &ExecutionPlan) -> Vec<u64> {
        let mut named = self.device.pointers(stream);
        named.push(("y".into(), self.y.device_ptr(stream).0));
        let graph = plan.graph();
        plan.layout()
            .io()
            .iter()
            .map(|id| named.iter().find(|(n, _)| *n == graph.tensor(*id).name).unwrap().1)
            .collect()
    }

    fn check(&self, stream: &Arc<CudaStream>, what: &str) {
        stream.synchronize().unwrap();
        check(&format!("mlp_e512_f2048_t{MLP_T}"), what, &stream.clone_dtoh(&self.y).unwrap(), &self.want);
    }

    fn is_all_nan(&self, stream: &Arc<CudaStream>) -> bool {
        stream.clone_dtoh(&self.y).unwrap().iter().all(|v| v.is_nan())
    }
}

/// A stream that CUDA graphs can capture (not the legacy default stream) and a context on it.
fn capturable(stream: &Arc<CudaStream>) -> (Arc<CudaStream>, Cudnn) {
    let stream = stream.context().new_stream().unwrap();
    let cudnn = Cudnn::new(stream.clone()).unwrap();
    (stream, cudnn)
}

#[needs_gpu]
#[test]
fn gpu_mlp_execute_raw() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let plan = TestMlp::new(MLP_T).build(&cudnn, &BuildOptions::default()).unwrap();
    show("mlp execute_raw", plan.plan());
    let mut set = MlpSet::new(&stream, 20);
    for round in 0..2 {
        set.poison(&stream);
        let ws = poisoned_workspace(&stream, plan.workspace_size());
        stream.synchronize().unwrap();
        // SAFETY: every buffer holds its port's tensor, lives on this context, and outlives the
        // work (synchronized in `check`).
        unsafe { plan.execute_raw(&cudnn, set.raw(&stream), ws.device_ptr(&stream).0) }.unwrap();
        set.check(&stream, &format!("typed execute_raw, round {round}"));
        // The untyped plan's raw execute, pointers in its I/O order.
        set.poison(&stream);
        let ws = poisoned_workspace(&stream, plan.workspace_size());
        stream.synchronize().unwrap();
        let io = set.io(&stream, plan.plan());
        // SAFETY: as above.
        unsafe { plan.plan().execute_raw(&cudnn, &io, ws.device_ptr(&stream).0) }.unwrap();
        set.check(&stream, &format!("untyped execute_raw, round {round}"));
    }
}

/// GraphMode::Auto records a partitioned plan by stream capture (every part); the replay
/// computes the MLP; `PlanGraph::update` points it at a second set of buffers, whose replay
/// computes that set's result and leaves the first set's output alone.
#[needs_gpu]
#[test]
fn gpu_mlp_cuda_graph_replays_and_updates() {
    let Some((default_stream, _)) = common::gpu() else { return };
    let (stream, cudnn) = capturable(&default_stream);
    let plan = TestMlp::new(MLP_T).build(&cudnn, &BuildOptions::default()).unwrap();
    let plan = plan.plan();
    show("mlp cuda graph", plan);
    let mut a = MlpSet::new(&stream, 30);
    let b = MlpSet::new(&stream, 31);
    let ws_a = poisoned_workspace(&stream, plan.workspace_size());
    let ws_b = poisoned_workspace(&stream, plan.workspace_size());
    stream.synchronize().unwrap();
    let (io_a, io_b) = (a.io(&stream, plan), b.io(&stream, plan));
    let (wa, wb) = (ws_a.device_ptr(&stream).0, ws_b.device_ptr(&stream).0);
    // SAFETY: both sets of buffers and workspaces outlive the graph (dropped after it, at the end
    // of the test).
    let mut g = unsafe { plan.cuda_graph(&cudnn, &io_a, wa, GraphMode::Auto) }.unwrap();
    println!("{g:?}");
    assert!(!g.is_native(), "a partitioned plan is captured, not populated by cuDNN");
    // Capturing enqueues nothing: the output is still poisoned.
    stream.synchronize().unwrap();
    assert!(a.is_all_nan(&stream), "recording the graph ran it");
    for _ in 0..3 {
        g.launch().unwrap();
    }
    a.check(&stream, "captured graph, 3 replays");
    let started = std::time::Instant::now();
    // SAFETY: as above.
    unsafe { g.update(&cudnn, &io_b, wb) }.unwrap();
    println!("updated the captured graph's pointers in {:?}", started.elapsed());
    // The first set's output poisoned in place (same address): the updated replay must not
    // write it.
    let poison = vec![bf16::NAN; a.want.len()];
    stream.memcpy_htod(&poison, &mut a.y).unwrap();
    g.launch().unwrap();
    b.check(&stream, "captured graph, updated, replayed");
    assert!(a.is_all_nan(&stream), "the updated graph still writes the first set's output");
    // The graph replays these buffers: it goes first.
    drop(g);
    drop((ws_a, ws_b, a, b));
}

/// A plan built with every candidate of every part, tuned part by part (each part's candidates
/// timed alone), computes the MLP; its payload keeps each part's choice.
#[needs_gpu]
#[test]
fn gpu_mlp_autotune_per_part() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let g = TestMlp::new(MLP_T);
    let all = BuildOptions::default().all_plans();
    let options = TestMlp::build_options(&all);
    let mut plan = ExecutionPlan::build(&cudnn, &g.graph().unwrap(), &options).unwrap();
    for (k, p) in plan.parts().iter().enumerate() {
        println!("part {k}: {} of {} candidates built", p.built().len(), p.candidates().len());
    }
    let report = autotune(&cudnn, &mut plan, &AutotuneOptions::default()).unwrap();
    print!("{report}");
    assert_eq!(report.selected_parts.len(), plan.parts().len());
    for (k, p) in plan.parts().iter().enumerate() {
        assert_eq!(p.selected().index, report.selected_parts[k], "part {k}'s selection");
        let fastest = report.timings.iter().filter(|t| t.part == k).map(|t| t.median_us).fold(f64::INFINITY, f64::min);
        let kept = report.part_timing(k, report.selected_parts[k]).unwrap().median_us;
        let own = report.part_timing(k, report.previous_parts[k]).map(|t| t.median_us);
        common::assert_tuned(&format!("part {k}"), kept, own, fastest, AutotuneOptions::default().min_gain);
    }
    assert!(report.speedup().unwrap() >= 1.0);
    show("mlp autotuned", &plan);

    let mut set = MlpSet::new(&stream, 40);
    let mut ws = poisoned_workspace(&stream, plan.workspace_size());
    {
        let d = &set.device;
        let mut io = [
            ("x", DeviceBuffer::input(d.get::<bf16>("x"))),
            ("w1", DeviceBuffer::input(d.get::<bf16>("w1"))),
            ("b1", DeviceBuffer::input(d.get::<bf16>("b1"))),
            ("w2", DeviceBuffer::input(d.get::<bf16>("w2"))),
            ("b2", DeviceBuffer::input(d.get::<bf16>("b2"))),
            ("y", DeviceBuffer::output(&mut set.y)),
        ];
        plan.execute_named(&cudnn, &mut io, Some(&mut ws)).unwrap();
    }
    set.check(&stream, "autotuned");

    // The tuned plan's payload, loaded through the typed API, keeps every part's choice.
    let origin = PlanOrigin::of(&cudnn);
    let bytes = write_payload(&plan, &origin, SerializeOptions::default(), &g.expectation()).unwrap();
    let loaded = TestMlp::deserialize(&cudnn, &bytes).unwrap();
    for (a, b) in loaded.plan().parts().iter().zip(plan.parts()) {
        assert_eq!(a.selected().engine_id, b.selected().engine_id, "a reloaded part keeps its tuned engine");
    }
    set.poison(&stream);
    let mut ws = poisoned_workspace(&stream, loaded.workspace_size());
    loaded.execute(&cudnn, set.args(), Some(&mut ws)).unwrap();
    set.check(&stream, "autotuned, reloaded");
}

/// Both payload modes of a partitioned plan reload through the typed API as the same parts and
/// compute the MLP.
#[needs_gpu]
#[test]
fn gpu_mlp_payload_round_trip() {
    let Some((stream, cudnn)) = common::gpu() else { return };
    let plan = TestMlp::new(MLP_T).build(&cudnn, &BuildOptions::default()).unwrap();
    let mut set = MlpSet::new(&stream, 50);
    for structure in [true, false] {
        let started = std::time::Instant::now();
        let bytes = plan.serialize(SerializeOptions { structure }).unwrap();
        let written = started.elapsed();
        let started = std::time::Instant::now();
        let loaded = TestMlp::deserialize(&cudnn, &bytes).unwrap();
        println!(
            "payload (structure: {structure}): {} B, {} parts, written in {written:?}, loaded in {:?}",
            bytes.len(),
            loaded.plan().parts().len(),
            started.elapsed()
        );
        assert_eq!(loaded.graph, plan.graph);
        assert_eq!(loaded.plan().parts().len(), plan.plan().parts().len());
        assert_eq!(loaded.plan().arena_bytes(), plan.plan().arena_bytes());
        assert_eq!(loaded.workspace_size(), plan.workspace_size());
        for (a, b) in loaded.plan().parts().iter().zip(plan.plan().parts()) {
            assert_eq!(a.nodes(), b.nodes());
            assert_eq!(a.selected().engine_id, b.selected().engine_id);
        }
        set.poison(&stream);
        let mut ws = poisoned_workspace(&stream, loaded.workspace_size());
        loaded.execute(&cudnn, set.args(), Some(&mut ws)).unwrap();
        set.check(&stream, &format!("reloaded payload (structure: {structure})"));
    }
}

// Fails a run that requires the GPU (CUDNN_GRAPH_REQUIRE_GPU=1) of a build that ignored the tests above.
gpu_guard!();
