//! Autotuning: time every built candidate of a plan on the GPU and select the fastest.
//!
//! Heuristics rank engine configs by a model; the fastest one for a given shape on a given GPU is
//! found by running them. [`autotune`] takes a plan built with
//! [`BuildOptions::build_all`](crate::backend::BuildOptions::build_all), allocates scratch device
//! buffers for every I/O tensor itself (non-zero data, see [`Fill`]), and for each built
//! candidate: warms up, then takes samples — each the CUDA-event time of a batch of back-to-back
//! executes sized to about [`AutotuneOptions::sample_us`], divided by the batch — until the median
//! is stable (the median of the last `min_samples` samples within `tolerance` of the overall
//! median) or `max_samples` or the time budget is reached. The fastest median is selected; the
//! whole table comes back as data ([`AutotuneReport`]).
//!
//! ```no_run
//! # use cudnn_runtime as cudnn_graph;
//! use cudnn_graph::backend::{BuildOptions, Cudnn, ExecutionPlan, HeuristicMode};
//! use cudnn_graph::engines::{autotune, AutotuneOptions};
//! # fn graph() -> cudnn_graph::Graph { unimplemented!() }
//! let stream = cudnn_graph::backend::cuda_context(0)?.default_stream();
//! let cudnn = Cudnn::new(stream)?;
//! let options = BuildOptions::default().modes(&[HeuristicMode::A, HeuristicMode::B]).all_plans();
//! let mut plan = ExecutionPlan::build(&cudnn, &graph(), &options)?;
//! let tune = AutotuneOptions::default()
//!     .on_progress(|p| eprintln!("{}/{} #{}: {:?} µs", p.done, p.total, p.candidate, p.timing.map(|t| t.median_us)));
//! let report = autotune(&cudnn, &mut plan, &tune)?;
//! println!("{report}");
//! assert_eq!(plan.selected().index, report.selected);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::rng::SplitMix64;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtr};

use crate::backend::{BackendError, ByValueScalar, Cudnn, ExecutionPlan};
use crate::DataType;

/// What the scratch input buffers hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fill {
    /// Fixed-seed pseudo-random values in ±[1/16, 1] (never zero), in each tensor's type.
    Random {
        /// The seed.
        seed: u64,
    },
    /// One value everywhere, in each tensor's type.
    Constant(f64),
}

impl Default for Fill {
    fn default() -> Self {
        Fill::Random { seed: 0x5eed }
    }
}

/// What [`autotune`] reports after each candidate.
#[derive(Debug)]
pub struct AutotuneProgress<'a> {
    /// Candidates timed so far, this one included.
    pub done: usize,
    /// Candidates to time.
    pub total: usize,
    /// This candidate's timing; `None` if it failed to execute.
    pub timing: Option<&'a Timing>,
    /// The candidate's index.
    pub candidate: usize,
}

/// A progress callback.
pub type ProgressFn = dyn Fn(&AutotuneProgress<'_>) + Send + Sync;

/// How [`autotune`] times candidates.
#[derive(Clone)]
pub struct AutotuneOptions {
    /// Untimed executes before timing each candidate.
    pub warmup: usize,
    /// Samples always taken per candidate (and the window of the stability test).
    pub min_samples: usize,
    /// Samples at most per candidate.
    pub max_samples: usize,
    /// Stable when the median of the last `min_samples` samples is within this fraction of the
    /// median of all of them.
    pub tolerance: f64,
    /// Target length of one sample in µs: executes per sample are chosen from a first timed run
    /// (1 to 1000), so short kernels are timed over many back-to-back launches.
    pub sample_us: f64,
    /// Time budget per candidate; sampling stops once it is spent (after `min_samples`).
    pub max_time_per_candidate: Duration,
    /// What the scratch inputs hold.
    pub fill: Fill,
    /// Called after each candidate.
    pub progress: Option<Arc<ProgressFn>>,
}

impl Default for AutotuneOptions {
    /// 3 warm-up runs, 5 to 50 samples of about 500 µs, 2 % tolerance, 2 s per candidate, random
    /// data.
    fn default() -> Self {
        AutotuneOptions {
            warmup: 3,
            min_samples: 5,
            max_samples: 50,
            tolerance: 0.02,
            sample_us: 500.0,
            max_time_per_candidate: Duration::from_secs(2),
            fill: Fill::default(),
            progress: None,
        }
    }
}

impl fmt::Debug for AutotuneOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AutotuneOptions")
            .field("warmup", &self.warmup)
            .field("min_samples", &self.min_samples)
            .field("max_samples", &self.max_samples)
            .field("tolerance", &self.tolerance)
            .field("sample_us", &self.sample_us)
            .field("max_time_per_candidate", &self.max_time_per_candidate)
            .field("fill", &self.fill)
            .field("progress", &self.progress.as_ref().map(|_| "Fn"))
            .finish()
    }
}

impl AutotuneOptions {
    /// Calls `f` after each candidate is timed.
    pub fn on_progress(mut self, f: impl Fn(&AutotuneProgress<'_>) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(f));
        self
    }
}

/// One candidate's device time.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// The part of the plan it belongs to (0 for a plan of one kernel; see
    /// [`ExecutionPlan::parts`]); its time is that part's alone.
    pub part: usize,
    /// The candidate's index ([`crate::backend::Candidate::index`]).
    pub candidate: usize,
    /// Its tag ([`crate::backend::Candidate::tag`]).
    pub tag: String,
    /// Median device time per execute, µs.
    pub median_us: f64,
    /// Fastest sample, µs per execute.
    pub min_us: f64,
    /// Executes timed (samples × executes per sample).
    pub runs: usize,
    /// Samples taken.
    pub samples: usize,
    /// Executes per sample.
    pub batch: usize,
}

impl fmt::Display for Timing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} {}: median {:.2} µs, min {:.2} µs ({} runs in {} samples)",
            self.candidate, self.tag, self.median_us, self.min_us, self.runs, self.samples
        )
    }
}

/// What [`autotune`] found. A partitioned plan's parts are tuned one by one, each timed alone:
/// `timings` holds every part's candidates (see [`Timing::part`]), `selected_parts` and
/// `previous_parts` each part's choice, and `selected`/`previous` the first part's.
#[derive(Debug, Clone, PartialEq)]
pub struct AutotuneReport {
    /// Every candidate that executed, part by part, in build order.
    pub timings: Vec<Timing>,
    /// Candidates that failed to execute, with why (part, candidate, error).
    pub failures: Vec<(usize, String)>,
    /// The candidate selected now (the fastest median) of the first part.
    pub selected: usize,
    /// The candidate that was selected before (the heuristics' pick) of the first part.
    pub previous: usize,
    /// Each part's selected candidate.
    pub selected_parts: Vec<usize>,
    /// Each part's candidate selected before.
    pub previous_parts: Vec<usize>,
    /// Wall time of the whole tune.
    pub elapsed: Duration,
}

impl AutotuneReport {
    /// The timing of candidate `index` of the first part.
    pub fn timing(&self, index: usize) -> Option<&Timing> {
        self.part_timing(0, index)
    }

    /// The timing of candidate `index` of part `part`.
    pub fn part_timing(&self, part: usize, index: usize) -> Option<&Timing> {
        self.timings.iter().find(|t| t.part == part && t.candidate == index)
    }

    /// How many times faster the selected candidates are than the previous ones (≥ 1): the sum
    /// of the parts' previous medians over the sum of their selected ones.
    pub fn speedup(&self) -> Option<f64> {
        let sum = |choice: &[usize]| -> Option<f64> {
            choice.iter().enumerate().map(|(part, &c)| Some(self.part_timing(part, c)?.median_us)).sum()
        };
        Some(sum(&self.previous_parts)? / sum(&self.selected_parts)?)
    }
}

impl fmt::Display for AutotuneReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "autotuned {} candidates in {:.0} ms:", self.timings.len(), self.elapsed.as_secs_f64() * 1e3)?;
        let parts = self.selected_parts.len();
        for part in 0..parts {
            if parts > 1 {
                writeln!(f, " part {part}:")?;
            }
            let mut sorted: Vec<&Timing> = self.timings.iter().filter(|t| t.part == part).collect();
            sorted.sort_by(|a, b| a.median_us.total_cmp(&b.median_us));
            for t in sorted {
                let chosen = |list: &[usize]| list.get(part) == Some(&t.candidate);
                let mark = match (chosen(&self.selected_parts), chosen(&self.previous_parts)) {
                    (true, true) => " (selected, heuristics' pick)",
                    (true, false) => " (selected)",
                    (false, true) => " (heuristics' pick)",
                    (false, false) => "",
                };
                writeln!(f, "  {t}{mark}")?;
            }
        }
        for (i, e) in &self.failures {
            writeln!(f, "  #{i}: failed: {e}")?;
        }
        Ok(())
    }
}

fn driver(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> BackendError {
    move |e| BackendError::Driver { call, message: e.to_string() }
}

/// Device buffers for every I/O tensor of a plan, and a workspace large enough for every built
/// candidate.
struct Scratch {
    // Kept alive while their addresses are used.
    _buffers: Vec<CudaSlice<u8>>,
    _workspace: CudaSlice<u8>,
    io: Vec<u64>,
    workspace: u64,
}

impl Scratch {
    fn new(stream: &Arc<CudaStream>, plan: &ExecutionPlan, fill: Fill) -> Result<Self, BackendError> {
        let (graph, layout) = (plan.graph(), plan.layout());
        let mut buffers = Vec::with_capacity(layout.io().len());
        for (i, id) in layout.io().iter().enumerate() {
            let t = graph.tensor(*id);
            let bytes = (t.storage_len() * t.data_type.size_bytes()).max(1);
            let buffer = if layout.is_output(i) {
                stream.alloc_zeros::<u8>(bytes)
            } else {
                stream.clone_htod(&host_data(t.data_type, bytes, fill, i as u64))
            }
            .map_err(driver("allocate autotune buffers"))?;
            buffers.push(buffer);
        }
        let workspace =
            stream.alloc_zeros::<u8>(plan.max_workspace_size().max(1)).map_err(driver("allocate workspace"))?;
        // The buffers live as long as this value and are used only on `stream`, after the
        // uploads (stream-ordered): their raw addresses stay valid for every execute below.
        let io = buffers.iter().map(|b| b.device_ptr(stream).0).collect();
        let ws = workspace.device_ptr(stream).0;
        Ok(Scratch { _buffers: buffers, _workspace: workspace, io, workspace: ws })
    }
}

/// `bytes` of elements of `data_type`: a pattern of a prime number of elements, repeated.
fn host_data(data_type: DataType, bytes: usize, fill: Fill, stream_id: u64) -> Vec<u8> {
    const PATTERN: usize = 4093;
    let mut rng = SplitMix64::new(match fill {
        Fill::Random { seed } => seed ^ stream_id.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        Fill::Constant(_) => 0,
    });
    let mut pattern = Vec::with_capacity(PATTERN * data_type.size_bytes());
    for _ in 0..PATTERN {
        let value = match fill {
            Fill::Constant(v) => v,
            Fill::Random { .. } => {
                let v = rng.nonzero(0.0625, 1.0);
                // Integer and boolean tensors get small non-zero integers instead.
                match data_type {
                    DataType::I8 | DataType::I32 | DataType::I64 => (v * 8.0).round().clamp(-8.0, 8.0).max(1.0),
                    DataType::U8 | DataType::Bool => 1.0 + rng.below(3) as f64,
                    _ => v,
                }
            }
        };
        pattern.extend_from_slice(ByValueScalar::new(0, 0, data_type, value).bytes());
    }
    let mut out = Vec::with_capacity(bytes);
    while out.len() < bytes {
        let take = (bytes - out.len()).min(pattern.len());
        out.extend_from_slice(&pattern[..take]);
    }
    out
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
fn time_selected(
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
    let event = || stream.context().new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(driver("cuEventCreate"));
    let (start, end): (CudaEvent, CudaEvent) = (event()?, event()?);
    let time = |n: usize| -> Result<f64, BackendError> {
        start.record(stream).map_err(driver("cuEventRecord"))?;
        run(n)?;
        end.record(stream).map_err(driver("cuEventRecord"))?;
        let ms = start.elapsed_ms(&end).map_err(driver("cuEventElapsedTime"))?;
        Ok(f64::from(ms) * 1e3 / n as f64)
    };
    run(options.warmup)?;
    stream.synchronize().map_err(driver("cuStreamSynchronize"))?;
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
    let selected = plan.parts()[part.unwrap_or(0)].selected();
    Ok(Timing {
        part: part.unwrap_or(0),
        candidate: selected.index,
        tag: selected.tag(),
        median_us: median(&samples),
        min_us: samples.iter().copied().fold(f64::INFINITY, f64::min),
        runs: samples.len() * batch,
        samples: samples.len(),
        batch,
    })
}

fn online_stream(cudnn: &Cudnn, plan: &ExecutionPlan) -> Result<Arc<CudaStream>, BackendError> {
    if !plan.is_online() {
        return Err(BackendError::DevicelessPlan { graph: plan.graph().name.clone() });
    }
    cudnn.stream().cloned().ok_or(BackendError::NotOnline { what: "autotuning" })
}

/// Times every built candidate of `plan` on `cudnn`'s stream and selects the fastest (by median);
/// returns the table. A partitioned plan is tuned part by part, each candidate timed running its
/// part alone. Scratch buffers for every I/O tensor and the workspace are allocated here and
/// freed before returning. A candidate that fails to execute is listed in
/// [`AutotuneReport::failures`]; when no candidate of a part executes, the error lists them all
/// and the selection is left as it was.
pub fn autotune(
    cudnn: &Cudnn,
    plan: &mut ExecutionPlan,
    options: &AutotuneOptions,
) -> Result<AutotuneReport, BackendError> {
    let began = Instant::now();
    let _span = tracing::debug_span!("autotune", graph = %plan.graph().name, parts = plan.parts().len()).entered();
    let stream = online_stream(cudnn, plan)?;
    let scratch = Scratch::new(&stream, plan, options.fill)?;
    let previous: Vec<usize> = plan.parts().iter().map(|p| p.selected().index).collect();
    let total: usize = plan.parts().iter().map(|p| p.built().len()).sum();
    let partitioned = plan.is_partitioned();
    let mut timings = Vec::with_capacity(total);
    let mut failures = Vec::new();
    let mut selected = previous.clone();
    let mut done = 0;
    let mut failed = None;
    for (part, choice) in selected.iter_mut().enumerate() {
        let built = plan.parts()[part].built();
        let first = timings.len();
        for &candidate in &built {
            plan.select_in(part, candidate)?;
            let timed = time_selected(cudnn, &stream, plan, partitioned.then_some(part), &scratch, options);
            match timed {
                Ok(t) => {
                    tracing::debug!(part, candidate, tag = %t.tag, median_us = t.median_us, runs = t.runs, "candidate timed");
                    timings.push(t)
                }
                Err(e) => {
                    tracing::debug!(part, candidate, error = %e, "candidate failed to execute");
                    failures.push((candidate, e.to_string()))
                }
            }
            done += 1;
            if let Some(progress) = &options.progress {
                let timing = timings.last().filter(|t: &&Timing| t.part == part && t.candidate == candidate);
                progress(&AutotuneProgress { done, total, timing, candidate });
            }
        }
        let fastest = timings[first..].iter().min_by(|a, b| a.median_us.total_cmp(&b.median_us)).map(|t| t.candidate);
        match fastest {
            Some(c) => {
                *choice = c;
                plan.select_in(part, c)?;
            }
            None => {
                failed = Some(part);
                break;
            }
        }
    }
    // Nothing may still be running on the scratch buffers when they are freed.
    let synced = stream.synchronize().map_err(driver("cuStreamSynchronize"));
    drop(scratch);
    synced?;
    if failed.is_some() {
        for (part, &c) in previous.iter().enumerate() {
            plan.select_in(part, c)?;
        }
        return Err(BackendError::Autotune { graph: plan.graph().name.clone(), failures });
    }
    tracing::debug!(selected = ?selected, previous = ?previous, elapsed_us = crate::micros(began.elapsed()), "autotuned");
    Ok(AutotuneReport {
        timings,
        failures,
        selected: selected[0],
        previous: previous[0],
        selected_parts: selected,
        previous_parts: previous,
        elapsed: began.elapsed(),
    })
}

/// Times the selected plan of `plan` as [`autotune`] times each candidate, without changing the
/// selection (for benchmarks: the heuristics' pick, a plan loaded from a payload).
pub fn measure(cudnn: &Cudnn, plan: &ExecutionPlan, options: &AutotuneOptions) -> Result<Timing, BackendError> {
    let stream = online_stream(cudnn, plan)?;
    let scratch = Scratch::new(&stream, plan, options.fill)?;
    let timed = time_selected(cudnn, &stream, plan, None, &scratch, options);
    let synced = stream.synchronize().map_err(driver("cuStreamSynchronize"));
    drop(scratch);
    synced?;
    timed
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

    #[test]
    fn reports_print_fastest_first_and_compute_speedup() {
        let t = |candidate, median_us| Timing {
            part: 0,
            candidate,
            tag: format!("eng{candidate}"),
            median_us,
            min_us: median_us * 0.9,
            runs: 10,
            samples: 5,
            batch: 2,
        };
        let r = AutotuneReport {
            timings: vec![t(0, 20.0), t(3, 10.0)],
            failures: vec![(5, "boom".into())],
            selected: 3,
            previous: 0,
            selected_parts: vec![3],
            previous_parts: vec![0],
            elapsed: Duration::from_millis(12),
        };
        assert_eq!(r.speedup(), Some(2.0));
        let text = r.to_string();
        let (fast, slow) = (text.find("#3 eng3").unwrap(), text.find("#0 eng0").unwrap());
        assert!(fast < slow, "{text}");
        assert!(
            text.contains("(selected)") && text.contains("(heuristics' pick)") && text.contains("#5: failed: boom")
        );
    }
}
