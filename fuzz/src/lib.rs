//! What the fuzz targets (`fuzz_targets/*.rs`) share: the properties every graph that reads or
//! builds must have ([`check_graph`]), the CPU reference run on fixed-seed non-zero inputs
//! ([`run_reference`]), the deviceless H200 context ([`deviceless`]) and the builder target's
//! program format ([`program`]). The seed generator (`examples/make_seeds.rs`) uses them too.

pub mod program;

use cudnn_runtime::reference::{self, HostSlice};
use cudnn_runtime::rng::SplitMix64;
use cudnn_runtime::serialize::{structure_from_json, structure_to_json};
use cudnn_runtime::{DataType, Element, Fp8E4M3, Fp8E5M2, Graph};

/// The most elements, summed over a graph's tensors' storage, that [`check_graph`] runs the CPU
/// reference on: big enough for every op family at small shapes, small enough that the slowest
/// (a convolution or attention over all of it) stays around a millisecond.
pub const MAX_REFERENCE_ELEMENTS: u64 = 4096;

/// Checks what must hold of any graph that built or read: it validates, its structural JSON reads
/// back as the same graph with the same fingerprint and writes again as the same bytes, and, when
/// small, the CPU reference runs it and returns one array of the right dims per output. A
/// violation panics (it is a bug); returns whether the reference ran.
pub fn check_graph(graph: &Graph) -> bool {
    if let Err(e) = graph.validate() {
        panic!("a graph that built or read does not validate: {e}");
    }
    let fingerprint = graph.fingerprint();
    let text = structure_to_json(graph);
    let back = match structure_from_json(&text) {
        Ok(g) => g,
        Err(e) => panic!("the structural JSON written for a valid graph does not read back: {e}\n{text}"),
    };
    // `Debug` rather than `==`: a NaN scalar is not equal to itself, its `Debug` is.
    assert_eq!(format!("{back:?}"), format!("{graph:?}"), "the graph read back differs");
    assert_eq!(back.fingerprint(), fingerprint, "the fingerprint changed in the round trip");
    assert_eq!(structure_to_json(&back), text, "writing the graph read back gives other bytes");
    match run_reference(graph) {
        Some(outputs) => {
            let ids = graph.outputs();
            assert_eq!(outputs.len(), ids.len(), "the reference returned {} outputs", outputs.len());
            for (array, id) in outputs.iter().zip(ids) {
                let t = graph.tensor(id);
                assert_eq!(array.dims, t.dims, "reference output `{}`", t.name);
                assert_eq!(array.data.len() as u64, element_count(&t.dims), "reference output `{}`", t.name);
            }
            true
        }
        None => false,
    }
}

fn element_count(dims: &[i64]) -> u64 {
    dims.iter().try_fold(1u64, |n, &d| n.checked_mul(u64::try_from(d).ok()?)).unwrap_or(u64::MAX)
}

/// The elements a tensor's buffer spans, or `None` past `u64`.
fn storage(dims: &[i64], strides: &[i64]) -> Option<u64> {
    let mut last = 0u64;
    for (&d, &s) in dims.iter().zip(strides) {
        let extent = u64::try_from(d).ok()?.checked_sub(1)?;
        last = last.checked_add(extent.checked_mul(u64::try_from(s).ok()?)?)?;
    }
    last.checked_add(1)
}

/// Fixed-seed values in ±[0.25, 2), never zero.
fn values(seed: u64, n: usize) -> impl Iterator<Item = f64> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(move |_| rng.nonzero(0.25, 2.0))
}

/// A host buffer of any element type, owned.
enum HostVec {
    F32(Vec<f32>),
    F64(Vec<f64>),
    F16(Vec<half::f16>),
    BF16(Vec<half::bf16>),
    I8(Vec<i8>),
    U8(Vec<u8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    Fp8E4M3(Vec<Fp8E4M3>),
    Fp8E5M2(Vec<Fp8E5M2>),
}

fn fill<T: Element>(seed: u64, n: usize) -> Vec<T> {
    values(seed, n).map(T::from_f64_value).collect()
}

impl HostVec {
    /// `n` non-zero values of `data_type` (integers in ±1..=4, booleans mixed).
    fn random(data_type: DataType, seed: u64, n: usize) -> HostVec {
        let ints = || values(seed, n).map(|v| (v * 2.0).trunc() + v.signum());
        match data_type {
            DataType::F32 => HostVec::F32(fill(seed, n)),
            DataType::F64 => HostVec::F64(fill(seed, n)),
            DataType::F16 => HostVec::F16(fill(seed, n)),
            DataType::BF16 => HostVec::BF16(fill(seed, n)),
            DataType::I8 => HostVec::I8(ints().map(|v| v as i8).collect()),
            DataType::U8 => HostVec::U8(ints().map(|v| v.abs() as u8).collect()),
            DataType::I32 => HostVec::I32(ints().map(|v| v as i32).collect()),
            DataType::I64 => HostVec::I64(ints().map(|v| v as i64).collect()),
            DataType::Bool => HostVec::Bool(values(seed, n).map(|v| v > 0.0).collect()),
            DataType::Fp8E4M3 => HostVec::Fp8E4M3(fill(seed, n)),
            DataType::Fp8E5M2 => HostVec::Fp8E5M2(fill(seed, n)),
        }
    }

    fn slice(&self) -> HostSlice<'_> {
        match self {
            HostVec::F32(v) => v.into(),
            HostVec::F64(v) => v.into(),
            HostVec::F16(v) => v.into(),
            HostVec::BF16(v) => v.into(),
            HostVec::I8(v) => v.into(),
            HostVec::U8(v) => v.into(),
            HostVec::I32(v) => v.into(),
            HostVec::I64(v) => v.into(),
            HostVec::Bool(v) => v.into(),
            HostVec::Fp8E4M3(v) => v.into(),
            HostVec::Fp8E5M2(v) => v.into(),
        }
    }
}

/// Runs the CPU reference on `graph` with fixed-seed non-zero inputs, if its tensors span at most
/// [`MAX_REFERENCE_ELEMENTS`] in all; `None` if larger. A valid graph with inputs of its own
/// dims and types must run: an error here panics.
pub fn run_reference(graph: &Graph) -> Option<Vec<reference::Array>> {
    let mut total = 0u64;
    for t in &graph.tensors {
        total = total.saturating_add(storage(&t.dims, &t.strides)?.max(element_count(&t.dims)));
    }
    if total > MAX_REFERENCE_ELEMENTS {
        return None;
    }
    let inputs: Vec<(String, HostVec)> = graph
        .inputs()
        .into_iter()
        .enumerate()
        .map(|(k, id)| {
            let t = graph.tensor(id);
            (t.name.clone(), HostVec::random(t.data_type, k as u64 + 1, t.storage_len()))
        })
        .collect();
    let named: Vec<(&str, HostSlice<'_>)> = inputs.iter().map(|(n, v)| (n.as_str(), v.slice())).collect();
    // Random integers are rarely valid page tables or ragged offsets: where an op's value rule
    // refuses them (as it must, naming the port), there is nothing to compute.
    if reference::check_values(graph, &named).is_err() {
        return None;
    }
    match reference::run(graph, &named) {
        Ok(outputs) => Some(outputs),
        Err(e) => panic!("the reference refused inputs made from the graph's own tensors: {e}"),
    }
}

/// The H200's device properties, compiled in so that a target needs no file at run time.
pub const H200_DEVPROP: &str = include_str!("../../tests/fixtures/h200-devprop.json");

/// The deviceless H200 context (real cuDNN lowering and planning, no GPU), made once per
/// process. cuDNN must be loadable (`LD_LIBRARY_PATH`, see `fuzz/README.md`): without it the
/// target cannot test anything, so this panics at the first input, naming the cause.
pub fn deviceless() -> std::sync::MutexGuard<'static, cudnn_runtime::backend::Cudnn> {
    use std::sync::{Mutex, OnceLock};
    // `Cudnn` is `Send` but not `Sync` (one handle, one thread at a time); libFuzzer runs one
    // thread, the mutex makes that a type-checked fact.
    static CUDNN: OnceLock<Mutex<cudnn_runtime::backend::Cudnn>> = OnceLock::new();
    let cudnn = CUDNN.get_or_init(|| match cudnn_runtime::backend::Cudnn::deviceless(H200_DEVPROP) {
        Ok(c) => Mutex::new(c),
        Err(e) => panic!("the fuzz target needs cuDNN 9.19 on LD_LIBRARY_PATH: {e}"),
    });
    cudnn.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
