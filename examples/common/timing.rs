//! How the benchmarks time a call: device time by CUDA events around batches of back-to-back
//! calls (the method of `measure` and of the anchors' `*_batched` figures), host time per call.

use std::sync::Arc;
use std::time::Instant;

use cudnn_graph::backend::cudarc::driver::sys::CUevent_flags;
use cudnn_graph::backend::cudarc::driver::CudaStream;
use cudnn_graph::engines::AutotuneOptions;

pub type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

/// The median of `v` (NaN when empty).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Host µs per call of `f`: median and min of `rounds` batches of `batch` calls (the stream is
/// drained between batches, outside the timing), and the anchor's figure: `calls` calls then a
/// synchronize, divided by `calls`.
pub fn host_time(
    stream: &CudaStream,
    rounds: usize,
    batch: usize,
    calls: usize,
    f: &mut dyn FnMut(),
) -> (f64, f64, f64) {
    for _ in 0..200 {
        f();
    }
    stream.synchronize().ok();
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..batch {
            f();
        }
        samples.push(t.elapsed().as_secs_f64() * 1e6 / batch as f64);
        stream.synchronize().ok();
    }
    let t = Instant::now();
    for _ in 0..calls {
        f();
    }
    stream.synchronize().ok();
    let with_sync = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
    let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
    (median(&mut samples), min, with_sync)
}

/// Device time per call of `f`, as `measure` times a plan (the [`AutotuneOptions`] defaults):
/// warm-up calls, one call timed to size a batch of about `sample_us`, then samples — the
/// CUDA-event time of a batch of back-to-back calls, divided by the batch — until the median of
/// the last `min_samples` is within `tolerance` of the overall median (or `max_samples`, or the
/// time budget). Returns (median µs, fastest sample µs, calls timed, calls per sample).
pub fn device_time(stream: &Arc<CudaStream>, f: &mut dyn FnMut() -> Result<()>) -> Result<(f64, f64, usize, usize)> {
    let o = AutotuneOptions::default();
    // Timing events (`new_event(None)` would disable timing).
    let event = || stream.context().new_event(Some(CUevent_flags::CU_EVENT_DEFAULT));
    let (start, end) = (event()?, event()?);
    let mut time = |n: usize| -> Result<f64> {
        start.record(stream)?;
        for _ in 0..n {
            f()?;
        }
        end.record(stream)?;
        Ok(f64::from(start.elapsed_ms(&end)?) * 1e3 / n as f64)
    };
    time(o.warmup.max(1))?;
    let first = time(1)?;
    let batch = if first > 0.0 { (o.sample_us / first).round().clamp(1.0, 1000.0) as usize } else { 1000 };
    let window = o.min_samples.max(1);
    let began = Instant::now();
    let mut samples = Vec::new();
    loop {
        samples.push(time(batch)?);
        let n = samples.len();
        if n >= o.max_samples.max(window) {
            break;
        }
        if n >= window {
            let all = median(&mut samples.clone());
            let recent = median(&mut samples[n - window..].to_vec());
            if (recent - all).abs() <= o.tolerance * all || began.elapsed() >= o.max_time_per_candidate {
                break;
            }
        }
    }
    let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
    Ok((median(&mut samples), min, samples.len() * batch, batch))
}
