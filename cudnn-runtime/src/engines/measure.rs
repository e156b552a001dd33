//! Timing plans on the GPU: scratch buffers for every I/O tensor (non-zero data, see
//! [`Fill`]), CUDA-event samples until their median is stable, and the public [`measure`] and
//! [`measure_padded`]; [`autotune`](super::autotune) times each candidate with them.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtr};

use super::tuning::{AutotuneOptions, Fill};
use super::tuning_report::Timing;
use crate::backend::{BackendError, ByValueScalar, Cudnn, ExecutionPlan, HostScalar, PaddedPlan};
use crate::ir::TensorId;
use crate::rng::SplitMix64;
use crate::{DataType, Graph};

/// Device buffers for every I/O tensor of a plan (host storage for a host scalar, which cuDNN
/// reads on the host), and a workspace large enough for every built candidate.
pub(super) struct Scratch {
    // Kept alive while their addresses are used; each scalar boxed, so its address stays put.
    _buffers: Vec<CudaSlice<u8>>,
    #[allow(clippy::vec_box, reason = "io holds each scalar's address: it must not move as the Vec grows")]
    _scalars: Vec<Box<HostScalar>>,
    _workspace: CudaSlice<u8>,
    io: Vec<u64>,
    workspace: u64,
}

impl Scratch {
    /// Buffers for every I/O tensor of `plan` and its largest workspace.
    pub(super) fn new(stream: &Arc<CudaStream>, plan: &ExecutionPlan, fill: Fill) -> Result<Self, BackendError> {
        let layout = plan.layout();
        Self::of(stream, plan.graph(), layout.io(), |i| layout.is_output(i), plan.max_workspace_size(), fill)
    }

    /// Buffers for the tensors `io` of `graph` (`output(i)`: whether the `i`th is written, so
    /// zeroed rather than filled) and a workspace of `workspace` bytes.
    fn of(
        stream: &Arc<CudaStream>,
        graph: &Graph,
        io: &[TensorId],
        output: impl Fn(usize) -> bool,
        workspace: usize,
        fill: Fill,
    ) -> Result<Self, BackendError> {
        let (mut buffers, mut scalars, mut addresses) = (Vec::new(), Vec::new(), Vec::with_capacity(io.len()));
        for (i, id) in io.iter().enumerate() {
            let t = graph.tensor(*id);
            if t.host_scalar {
                // An input read on the host when the work is enqueued (an epsilon, a scale): a
                // positive value of the fill, as such a scalar would be.
                let value = sample(fill, t.data_type, &mut rng(fill, i as u64)).abs();
                let scalar = Box::new(HostScalar::new(t.data_type, value));
                addresses.push(scalar.address());
                scalars.push(scalar);
                continue;
            }
            let bytes = (t.storage_len() * t.data_type.size_bytes()).max(1);
            let buffer = if output(i) {
                stream.alloc_zeros::<u8>(bytes)
            } else {
                stream.clone_htod(&host_data(t.data_type, bytes, fill, i as u64))
            }
            .map_err(BackendError::driver("allocate autotune buffers"))?;
            // The buffers live as long as this value and are used only on `stream`, after the
            // uploads (stream-ordered): their raw addresses stay valid for every execute below,
            // as do the boxed scalars'.
            addresses.push(buffer.device_ptr(stream).0);
            buffers.push(buffer);
        }
        let workspace =
            stream.alloc_zeros::<u8>(workspace.max(1)).map_err(BackendError::driver("allocate workspace"))?;
        let ws = workspace.device_ptr(stream).0;
        Ok(Scratch { _buffers: buffers, _scalars: scalars, _workspace: workspace, io: addresses, workspace: ws })
    }
}

/// `bytes` of elements of `data_type`: a pattern of a prime number of elements, repeated.
fn host_data(data_type: DataType, bytes: usize, fill: Fill, stream_id: u64) -> Vec<u8> {
    const PATTERN: usize = 4093;
    let mut rng = rng(fill, stream_id);
    let mut pattern = Vec::with_capacity(PATTERN * data_type.size_bytes());
    for _ in 0..PATTERN {
        pattern.extend_from_slice(ByValueScalar::new(0, 0, data_type, sample(fill, data_type, &mut rng)).bytes());
    }
    let mut out = Vec::with_capacity(bytes);
    while out.len() < bytes {
        let take = (bytes - out.len()).min(pattern.len());
        out.extend_from_slice(&pattern[..take]);
    }
    out
}

/// The generator of I/O tensor `stream_id`'s values under `fill`.
fn rng(fill: Fill, stream_id: u64) -> SplitMix64 {
    SplitMix64::new(match fill {
        Fill::Random { seed } => seed ^ stream_id.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        Fill::Constant(_) => 0,
    })
}

/// One value of `fill` for a tensor of `data_type`: the constant, or a random one of magnitude
/// in `[0.0625, 1)` (integer and boolean tensors get small non-zero integers instead).
fn sample(fill: Fill, data_type: DataType, rng: &mut SplitMix64) -> f64 {
    match fill {
        Fill::Constant(v) => v,
        Fill::Random { .. } => {
            let v = rng.nonzero(0.0625, 1.0);
            match data_type {
                DataType::I8 | DataType::I32 | DataType::I64 => (v * 8.0).round().clamp(-8.0, 8.0).max(1.0),
                DataType::U8 | DataType::Bool => 1.0 + rng.below(3) as f64,
                _ => v,
            }
        }
    }
}

fn median(samples: &[f64]) -> f64 {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// Times the selected plan of `plan` (with scratch buffers from `scratch`): part `part` alone,
/// or the whole plan.
pub(super) fn time_selected(
    cudnn: &Cudnn,
    stream: &CudaStream,
    plan: &ExecutionPlan,
    part: Option<usize>,
    scratch: &Scratch,
    options: &AutotuneOptions,
) -> Result<Timing, BackendError> {
    let run = |n: usize| -> Result<(), BackendError> {
        for _ in 0..n {
            // SAFETY: the scratch buffers hold every I/O tensor's storage (sized from its dims and
            // strides), are 256-byte aligned (cuMemAlloc), live on this context and outlive the
            // enqueued work (the stream is synchronized before they are freed); the workspace is
            // the largest built plan's, after the arena.
            match part {
                Some(k) => unsafe { plan.execute_part_raw(cudnn, k, &scratch.io, scratch.workspace) }?,
                None => unsafe { plan.execute_raw(cudnn, &scratch.io, scratch.workspace) }?,
            }
        }
        Ok(())
    };
    let samples = sample_runs(stream, options, run)?;
    let selected = plan.parts()[part.unwrap_or(0)].selected();
    Ok(samples.timing(part.unwrap_or(0), selected.index, selected.tag()))
}

/// What [`sample_runs`] measured: µs per execute of each sample, and executes per sample.
struct Samples {
    us: Vec<f64>,
    batch: usize,
}

impl Samples {
    fn timing(&self, part: usize, candidate: usize, tag: String) -> Timing {
        Timing {
            part,
            candidate,
            tag,
            median_us: median(&self.us),
            min_us: self.us.iter().copied().fold(f64::INFINITY, f64::min),
            runs: self.us.len() * self.batch,
            samples: self.us.len(),
            batch: self.batch,
        }
    }
}

/// Times `run(n)` (`n` executes enqueued back to back on `stream`) as `options` say: warm-up,
/// a first timed execute to size the batch to [`AutotuneOptions::sample_us`], then CUDA-event
/// samples until their median is stable, `max_samples` are taken or the time per candidate is
/// spent.
fn sample_runs(
    stream: &CudaStream,
    options: &AutotuneOptions,
    mut run: impl FnMut(usize) -> Result<(), BackendError>,
) -> Result<Samples, BackendError> {
    run(options.warmup)?;
    let event = || {
        stream.context().new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(BackendError::driver("cuEventCreate"))
    };
    let (start, end): (CudaEvent, CudaEvent) = (event()?, event()?);
    let mut time = |n: usize| -> Result<f64, BackendError> {
        start.record(stream).map_err(BackendError::driver("cuEventRecord"))?;
        run(n)?;
        end.record(stream).map_err(BackendError::driver("cuEventRecord"))?;
        let ms = start.elapsed_ms(&end).map_err(BackendError::driver("cuEventElapsedTime"))?;
        Ok(f64::from(ms) * 1e3 / n as f64)
    };
    stream.synchronize().map_err(BackendError::driver("cuStreamSynchronize"))?;
    let first = time(1)?;
    let batch = if first > 0.0 { (options.sample_us / first).round().clamp(1.0, 1000.0) as usize } else { 1000 };
    let window = options.min_samples.max(1);
    let began = Instant::now();
    let mut samples = Vec::with_capacity(options.max_samples.max(window));
    loop {
        samples.push(time(batch)?);
        let n = samples.len();
        if n >= options.max_samples.max(window) {
            break;
        }
        if n >= window {
            let all = median(&samples);
            let recent = median(&samples[n - window..]);
            if (recent - all).abs() <= options.tolerance * all || began.elapsed() >= options.max_time_per_candidate {
                break;
            }
        }
    }
    Ok(Samples { us: samples, batch })
}

pub(super) fn online_stream(cudnn: &Cudnn, plan: &ExecutionPlan) -> Result<Arc<CudaStream>, BackendError> {
    if !plan.is_online() {
        return Err(BackendError::DevicelessPlan { graph: plan.graph().name.clone() });
    }
    cudnn.stream().cloned().ok_or(BackendError::NotOnline { what: "autotuning" })
}

/// Times the selected plan of `plan` as [`autotune`](fn@super::autotune) times each candidate, without changing the
/// selection (for benchmarks: the heuristics' pick, a plan loaded from a payload).
pub fn measure(cudnn: &Cudnn, plan: &ExecutionPlan, options: &AutotuneOptions) -> Result<Timing, BackendError> {
    let stream = online_stream(cudnn, plan)?;
    let scratch = Scratch::new(&stream, plan, options.fill)?;
    let timed = time_selected(cudnn, &stream, plan, None, &scratch, options);
    let synced = stream.synchronize().map_err(BackendError::driver("cuStreamSynchronize"));
    drop(scratch);
    synced?;
    timed
}

/// Times `call` run on the padded plan `padded` ([`PaddedPlan::execute`]: its copies in and
/// out, the class plan at the class extents) as [`measure`] times a plan, with scratch buffers
/// of the call's tensors: the device time a call at that length costs on the class plan, to set
/// against the plan made for the call's exact shape (what [`PlanCache::class_plan`]'s lazy policy
/// compares).
///
/// [`PlanCache::class_plan`]: super::PlanCache::class_plan
pub fn measure_padded(
    cudnn: &Cudnn,
    padded: &mut PaddedPlan,
    call: &Graph,
    options: &AutotuneOptions,
) -> Result<Timing, BackendError> {
    let stream = online_stream(cudnn, padded.plan())?;
    let io = call.io();
    let inputs = call.inputs().len();
    let scratch = Scratch::of(&stream, call, &io, |i| i >= inputs, 0, options.fill)?;
    let run = |n: usize| -> Result<(), BackendError> {
        for _ in 0..n {
            // SAFETY: the scratch buffers hold every I/O tensor of the call (sized from its dims
            // and strides), are 256-byte aligned (cuMemAlloc), live on this context and outlive
            // the enqueued work (the stream is synchronized before they are freed).
            unsafe { padded.execute_raw(cudnn, call, &scratch.io) }?;
        }
        Ok(())
    };
    let timed = sample_runs(&stream, options, run);
    let synced = stream.synchronize().map_err(BackendError::driver("cuStreamSynchronize"));
    drop(scratch);
    synced?;
    let selected = padded.plan().parts()[0].selected();
    Ok(timed?.timing(0, selected.index, selected.tag()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_data_is_never_zero_and_tiles_to_length() {
        for dt in [DataType::BF16, DataType::F16, DataType::F32, DataType::I8, DataType::Bool, DataType::Fp8E4M3] {
            let bytes = 3 * 4093 * dt.size_bytes() + 5;
            let data = host_data(dt, bytes, Fill::default(), 1);
            assert_eq!(data.len(), bytes);
            let n = dt.size_bytes();
            assert!(data[..4093 * n].chunks(n).all(|e| e.iter().any(|&b| b != 0)), "{dt:?} has a zero element");
            assert_eq!(data[..n], data[4093 * n..4094 * n]);
        }
        let c = host_data(DataType::F32, 16, Fill::Constant(0.5), 0);
        assert_eq!(c, [0.5f32.to_ne_bytes(); 4].concat());
        assert_ne!(host_data(DataType::F32, 64, Fill::default(), 0), host_data(DataType::F32, 64, Fill::default(), 1));
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
