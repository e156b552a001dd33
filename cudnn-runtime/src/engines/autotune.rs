//! Autotuning: time every built candidate of a plan on the GPU and select the fastest.
//!
//! Heuristics rank engine configs by a model; the fastest one for a given shape on a given GPU is
//! found by running them. [`autotune`] takes a plan built with
//! [`BuildOptions::build_all`](crate::backend::BuildOptions::build_all), allocates scratch device
//! buffers for every I/O tensor itself (non-zero data, see [`Fill`]), and for each built
//! candidate: warms up, then takes samples — each the CUDA-event time of a batch of back-to-back
//! executes sized to about [`AutotuneOptions::sample_us`], divided by the batch — until the median
//! is stable (the median of the last `min_samples` samples within `tolerance` of the overall
//! median) or `max_samples` or the time budget is reached. The fastest median is selected when
//! it beats the plan's own choice by [`AutotuneOptions::min_gain`] (else the own choice stays);
//! the whole table comes back as data ([`AutotuneReport`]).
//!
//! A plan built with [`Fusion::Measure`](crate::backend::Fusion::Measure) has other
//! partitionings besides its own ([`ExecutionPlan::alternatives`]): each is tuned the same way,
//! part by part, timed as the sum of its parts' selected medians, and the fastest partitioning is
//! kept where it beats the plan's own by `min_gain` ([`AutotuneReport::partitionings`],
//! [`AutotuneReport::partitioning`]).
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

use crate::backend::{BackendError, ByValueScalar, Cudnn, ExecutionPlan, HostScalar, PaddedPlan};
use crate::ir::TensorId;
use crate::{DataType, Graph};

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
    /// How much faster (a fraction of its median) a candidate must time than the plan's own
    /// choice (the heuristics' pick, or the fused partitioning) to replace it. Timings of a few
    /// milliseconds, taken alone, rank near-ties by noise: on the H100 (2026-12-05) autotuning
    /// swapped the Llama layer's Q projection from `eng0_k24=0` to `eng0` for a 0.2 % gain in its
    /// own timing, and the three projections then ran 13 % slower in the layer.
    pub min_gain: f64,
    /// What the scratch inputs hold.
    pub fill: Fill,
    /// Called after each candidate.
    pub progress: Option<Arc<ProgressFn>>,
}

impl Default for AutotuneOptions {
    /// 3 warm-up runs, 5 to 50 samples of about 500 µs, 2 % tolerance, 2 s per candidate, a
    /// candidate replaces the plan's choice when at least 2 % faster, random data.
    fn default() -> Self {
        AutotuneOptions {
            warmup: 3,
            min_samples: 5,
            max_samples: 50,
            tolerance: 0.02,
            sample_us: 500.0,
            max_time_per_candidate: Duration::from_secs(2),
            min_gain: 0.02,
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
            .field("min_gain", &self.min_gain)
            .field("fill", &self.fill)
            .field("progress", &self.progress.as_ref().map(|_| "Fn"))
            .finish()
    }
}

impl AutotuneOptions {
    /// Whether `challenger` µs beats the plan's own `own` µs by at least [`Self::min_gain`].
    fn beats(&self, challenger: f64, own: f64) -> bool {
        challenger < own * (1.0 - self.min_gain.clamp(0.0, 1.0))
    }

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

/// One partitioning of a plan as [`autotune`] timed it.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitioningTiming {
    /// Each part's nodes ([`crate::backend::PlanPart::nodes`]), in execution order.
    pub parts: Vec<Vec<String>>,
    /// The sum of its parts' selected medians, µs; `None` where a part had no candidate that
    /// executed.
    pub median_us: Option<f64>,
    /// Every candidate of its parts that executed ([`Timing::part`]: its parts).
    pub timings: Vec<Timing>,
}

impl fmt::Display for PartitioningTiming {
    /// `2 kernels [matmul_0, mul_1 | add_2, relu_3]: 812.40 µs`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.parts.iter().map(|p| p.join(", ")).collect();
        let n = self.parts.len();
        write!(f, "{n} kernel{} [{}]: ", if n == 1 { "" } else { "s" }, parts.join(" | "))?;
        match self.median_us {
            Some(us) => write!(f, "{us:.2} µs"),
            None => write!(f, "did not execute"),
        }
    }
}

/// What [`autotune`] found. A partitioned plan's parts are tuned one by one, each timed alone:
/// `timings` holds every part's candidates (see [`Timing::part`]), `selected_parts` and
/// `previous_parts` each part's choice, and `selected`/`previous` the first part's. For a plan
/// with [alternatives](ExecutionPlan::alternatives), those are of the partitioning kept, and
/// `partitionings` has every partitioning's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct AutotuneReport {
    /// Every candidate that executed, part by part, in build order (of the partitioning kept).
    pub timings: Vec<Timing>,
    /// Candidates that failed to execute, with why (part, candidate, error).
    pub failures: Vec<(usize, String)>,
    /// The candidate selected now (the fastest median, unless it did not beat the previous one
    /// by [`AutotuneOptions::min_gain`]) of the first part.
    pub selected: usize,
    /// The candidate that was selected before (the heuristics' pick) of the first part.
    pub previous: usize,
    /// Each part's selected candidate.
    pub selected_parts: Vec<usize>,
    /// Each part's candidate selected before.
    pub previous_parts: Vec<usize>,
    /// Every partitioning timed: the plan's own first (as it was built), then its
    /// [alternatives](ExecutionPlan::alternatives) in build order.
    pub partitionings: Vec<PartitioningTiming>,
    /// The index in `partitionings` of the one kept (the fastest, where it beats the plan's own
    /// by [`AutotuneOptions::min_gain`]), which the plan now runs.
    pub partitioning: usize,
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

    /// How many times faster the partitioning kept is than the plan's own (≥ 1; 1 when that
    /// was kept): the plan's partitioning as built over the one kept, each the sum of its
    /// parts' selected medians. `None` where the plan's own did not execute.
    pub fn partitioning_speedup(&self) -> Option<f64> {
        Some(self.partitionings.first()?.median_us? / self.partitionings.get(self.partitioning)?.median_us?)
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
        if self.partitionings.len() > 1 {
            writeln!(f, " partitionings, each the sum of its parts' fastest:")?;
            for (i, p) in self.partitionings.iter().enumerate() {
                let mark = match (i == self.partitioning, i == 0) {
                    (true, true) => " (kept, as built)".to_string(),
                    (true, false) => match self.partitioning_speedup() {
                        Some(x) => format!(" (kept, {x:.2}× faster than as built)"),
                        None => " (kept)".to_string(),
                    },
                    (false, true) => " (as built)".to_string(),
                    (false, false) => String::new(),
                };
                writeln!(f, "  #{i} {p}{mark}")?;
            }
        }
        Ok(())
    }
}

/// Device buffers for every I/O tensor of a plan (host storage for a host scalar, which cuDNN
/// reads on the host), and a workspace large enough for every built candidate.
struct Scratch {
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
    fn new(stream: &Arc<CudaStream>, plan: &ExecutionPlan, fill: Fill) -> Result<Self, BackendError> {
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

fn online_stream(cudnn: &Cudnn, plan: &ExecutionPlan) -> Result<Arc<CudaStream>, BackendError> {
    if !plan.is_online() {
        return Err(BackendError::DevicelessPlan { graph: plan.graph().name.clone() });
    }
    cudnn.stream().cloned().ok_or(BackendError::NotOnline { what: "autotuning" })
}

/// Times every built candidate of `plan` on `cudnn`'s stream and selects the fastest (by median)
/// where it beats the plan's own choice by [`AutotuneOptions::min_gain`]; returns the table. A
/// partitioned plan is tuned part by part, each candidate timed running its part alone. A plan
/// with [alternatives](ExecutionPlan::alternatives) ([`Fusion::Measure`]) has each partitioning
/// tuned so, and keeps the one whose parts' selected medians sum least (by `min_gain` against
/// its own):
/// [`ExecutionPlan::parts`] are then that one's (an epilogue cut off says
/// [`CutReason::MeasuredFaster`] with the times), and so are its executes and payloads; the
/// others are dropped. Scratch buffers for every I/O tensor and the workspace are allocated here
/// and freed before returning. A candidate that fails to execute is listed in
/// [`AutotuneReport::failures`]; when no partitioning has every part with a candidate that
/// executes, the error lists them all and the selection is left as it was.
///
/// [`Fusion::Measure`]: crate::backend::Fusion::Measure
/// [`CutReason::MeasuredFaster`]: crate::backend::CutReason::MeasuredFaster
pub fn autotune(
    cudnn: &Cudnn,
    plan: &mut ExecutionPlan,
    options: &AutotuneOptions,
) -> Result<AutotuneReport, BackendError> {
    let began = Instant::now();
    let _span = tracing::debug_span!(
        "autotune",
        graph = %plan.graph().name,
        parts = plan.parts().len(),
        partitionings = plan.alternatives().len() + 1
    )
    .entered();
    let stream = online_stream(cudnn, plan)?;
    let scratch = Scratch::new(&stream, plan, options.fill)?;
    let tuned =
        tune(plan, options, began, &mut |plan, part| time_selected(cudnn, &stream, plan, part, &scratch, options));
    // Nothing may still be running on the scratch buffers when they are freed.
    let synced = stream.synchronize().map_err(BackendError::driver("cuStreamSynchronize"));
    drop(scratch);
    synced?;
    tuned
}

/// How [`tune`] times the selected candidates of a plan: part `Some(k)` alone, or (`None`) the
/// whole plan of one part. [`autotune`] times on the GPU; tests inject times.
type TimeFn<'a> = dyn FnMut(&ExecutionPlan, Option<usize>) -> Result<Timing, BackendError> + 'a;

/// One partitioning tuned: its figures, each part's choice and the choice before.
struct Tuned {
    figures: PartitioningTiming,
    selected: Vec<usize>,
    previous: Vec<usize>,
}

/// [`autotune`]'s choices, with `time` timing the plan's selection: every partitioning of
/// `plan` (its own, then each alternative swapped in and back) tuned part by part, then the
/// fastest kept.
fn tune(
    plan: &mut ExecutionPlan,
    options: &AutotuneOptions,
    began: Instant,
    time: &mut TimeFn<'_>,
) -> Result<AutotuneReport, BackendError> {
    let built = |parts: &[crate::backend::PlanPart]| parts.iter().map(|p| p.built().len()).sum::<usize>();
    let total = built(plan.parts()) + plan.alternatives().iter().map(|a| built(a.parts())).sum::<usize>();
    let count = plan.alternatives().len() + 1;
    let (mut done, mut failures) = (0, Vec::new());
    let mut tuned: Vec<Tuned> = Vec::with_capacity(count);
    for index in 0..count {
        // Partitioning `index` runs while it is tuned; the plan's own is back after.
        if index > 0 {
            plan.swap_alternative(index - 1);
        }
        let result = tune_parts(plan, options, time, &mut done, total, &mut failures);
        if index > 0 {
            plan.swap_alternative(index - 1);
        }
        let t = result?;
        tracing::debug!(partitioning = index, figures = %t.figures, "partitioning timed");
        tuned.push(t);
    }
    let kept = (0..count)
        .filter_map(|i| Some((i, tuned[i].figures.median_us?)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, us)| match tuned[0].figures.median_us {
            // The plan's own partitioning stays unless beaten by `min_gain`.
            Some(own) if !options.beats(us, own) => 0,
            _ => i,
        });
    let Some(kept) = kept else {
        return Err(BackendError::Autotune { graph: plan.graph().name.clone(), failures });
    };
    let measured = (kept > 0).then(|| {
        let us = tuned[kept].figures.median_us.unwrap_or(f64::NAN);
        let kernels = tuned[kept].figures.parts.len();
        match tuned[0].figures.median_us {
            Some(own) => {
                format!("{us:.1} µs in {kernels} kernels against {own:.1} µs as built ({:.2}× faster)", own / us)
            }
            None => format!("{us:.1} µs in {kernels} kernels; the plan as built did not execute"),
        }
    });
    if kept > 0 {
        plan.swap_alternative(kept - 1);
    }
    tracing::debug!(
        partitioning = kept,
        kernels = tuned[kept].figures.parts.len(),
        times = measured.as_deref().unwrap_or("the plan as built is kept"),
        "partitioning kept"
    );
    plan.keep_partitioning(measured);
    let partitionings: Vec<PartitioningTiming> = tuned.iter().map(|t| t.figures.clone()).collect();
    let Tuned { figures, selected, previous } = tuned.swap_remove(kept);
    tracing::debug!(selected = ?selected, previous = ?previous, partitioning = kept, elapsed_us = crate::micros(began.elapsed()), "autotuned");
    Ok(AutotuneReport {
        timings: figures.timings,
        failures,
        selected: selected[0],
        previous: previous[0],
        selected_parts: selected,
        previous_parts: previous,
        partitionings,
        partitioning: kept,
        elapsed: began.elapsed(),
    })
}

/// Tunes the parts of the partitioning `plan` runs now, each selecting its fastest candidate.
/// Where a part has no candidate that executes, the partitioning's selections are restored and
/// its `median_us` is `None`.
fn tune_parts(
    plan: &mut ExecutionPlan,
    options: &AutotuneOptions,
    time: &mut TimeFn<'_>,
    done: &mut usize,
    total: usize,
    failures: &mut Vec<(usize, String)>,
) -> Result<Tuned, BackendError> {
    let previous: Vec<usize> = plan.parts().iter().map(|p| p.selected().index).collect();
    let parts = plan.parts().iter().map(|p| p.nodes().to_vec()).collect();
    let partitioned = plan.is_partitioned();
    let mut timings: Vec<Timing> = Vec::new();
    let mut selected = previous.clone();
    let mut sum = Some(0.0);
    for (part, choice) in selected.iter_mut().enumerate() {
        let first = timings.len();
        for candidate in plan.parts()[part].built() {
            plan.select_in(part, candidate)?;
            match time(plan, partitioned.then_some(part)) {
                Ok(t) => {
                    tracing::debug!(part, candidate, tag = %t.tag, median_us = t.median_us, runs = t.runs, "candidate timed");
                    timings.push(t)
                }
                Err(e) => {
                    tracing::debug!(part, candidate, error = %e, "candidate failed to execute");
                    failures.push((candidate, e.to_string()))
                }
            }
            *done += 1;
            if let Some(progress) = &options.progress {
                let timing = timings.last().filter(|t: &&Timing| t.part == part && t.candidate == candidate);
                progress(&AutotuneProgress { done: *done, total, timing, candidate });
            }
        }
        let timed = &timings[first..];
        let fastest = timed.iter().min_by(|a, b| a.median_us.total_cmp(&b.median_us));
        // The plan's own choice stays unless beaten by `min_gain`.
        let own = timed.iter().find(|t| t.candidate == previous[part]);
        let fastest = match (fastest, own) {
            (Some(f), Some(o)) if !options.beats(f.median_us, o.median_us) => Some(o),
            (f, _) => f,
        };
        match fastest {
            Some(t) => {
                *choice = t.candidate;
                sum = sum.map(|s| s + t.median_us);
                plan.select_in(part, t.candidate)?;
            }
            None => {
                sum = None;
                break;
            }
        }
    }
    if sum.is_none() {
        for (part, &c) in previous.iter().enumerate() {
            plan.select_in(part, c)?;
        }
        selected.clone_from(&previous);
    }
    Ok(Tuned { figures: PartitioningTiming { parts, median_us: sum, timings }, selected, previous })
}

/// Times the selected plan of `plan` as [`autotune`] times each candidate, without changing the
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
            partitionings: Vec::new(),
            partitioning: 0,
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

/// [`Fusion::Measure`](crate::backend::Fusion::Measure) plans, deviceless on the H200's
/// properties, tuned with injected times instead of the GPU's: the partitioning kept is the one
/// the times say, what the plan then runs (emulated part by part on the CPU reference) differs
/// from the fused graph only by the intermediate's bf16 rounding, and a payload keeps it.
#[cfg(test)]
mod measured {
    use super::*;
    use crate::array::Array;
    use crate::backend::{BuildOptions, CutReason, ExecutionPlan};
    use crate::cudnn::CudnnError;
    use crate::ops::PointwiseMode;
    use crate::payload::plan::{read_payload, write_payload, Expect, PlanOrigin, SerializeOptions};
    use crate::{Graph, GraphBuilder};

    const DEVPROP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/h200-devprop.json");

    /// The deviceless context, or `None` where the libraries are missing and that is allowed
    /// (`CUDNN_GRAPH_REQUIRE_CUDNN` is not `1`), as the integration tests' helper.
    fn deviceless() -> Option<Cudnn> {
        let json = std::fs::read_to_string(DEVPROP).unwrap();
        match Cudnn::deviceless(&json) {
            Ok(cudnn) => Some(cudnn),
            Err(e @ CudnnError::LibraryMissing { .. }) => {
                assert_ne!(std::env::var("CUDNN_GRAPH_REQUIRE_CUDNN").as_deref(), Ok("1"), "{e}");
                println!("skipped: {e}");
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// `relu((a·b)·da·db + bias)` → bf16: e4m3 A `[1, 128, 64]`, B column-major, as
    /// `examples/bench_fp8.rs` (smaller).
    fn fp8_bias_relu() -> Graph {
        let (m, n, k) = (128, 128, 64);
        let mut g = GraphBuilder::new("fp8_bias_relu");
        let a = g.input("a", DataType::Fp8E4M3, &[1, m, k]).unwrap();
        let b = g.input("b", DataType::Fp8E4M3, &[1, k, n]).unwrap();
        g.set_dim_order(b, &[0, 2, 1]).unwrap();
        let da = g.input("descale_a", DataType::F32, &[1, 1, 1]).unwrap();
        let db = g.input("descale_b", DataType::F32, &[1, 1, 1]).unwrap();
        let bias = g.input("bias", DataType::BF16, &[1, 1, n]).unwrap();
        let c = g.matmul(a, b).unwrap();
        let c = g.pointwise(PointwiseMode::Mul, &[c.into(), da.into()]).unwrap();
        let c = g.pointwise(PointwiseMode::Mul, &[c.into(), db.into()]).unwrap();
        let c = g.pointwise(PointwiseMode::Add, &[c.into(), bias.into()]).unwrap();
        let y = g.pointwise(PointwiseMode::Relu, &[c.into()]).unwrap();
        g.output(y, "y", DataType::BF16).unwrap();
        g.build().unwrap()
    }

    fn ops(plan: &ExecutionPlan, part: usize) -> Vec<&'static str> {
        plan.parts()[part].graph().nodes.iter().map(|n| n.op.call_name()).collect()
    }

    /// Injected times, µs, by a part's ops: `fused` for the whole graph in one kernel; `gemm.0`
    /// for a kernel with the matmul plus `gemm.1` per other op of it; `pass.0` for an elementwise
    /// kernel plus `pass.1` per op.
    fn timer(
        fused: f64,
        gemm: (f64, f64),
        pass: (f64, f64),
    ) -> impl FnMut(&ExecutionPlan, Option<usize>) -> Result<Timing, BackendError> {
        move |plan, part| {
            let k = part.unwrap_or(0);
            let ops = ops(plan, k);
            let n = ops.len() as f64;
            let median_us = match (plan.parts().len(), ops.contains(&"matmul")) {
                (1, _) => fused,
                (_, true) => gemm.0 + gemm.1 * (n - 1.0),
                (_, false) => pass.0 + pass.1 * n,
            };
            Ok(injected(plan, k, median_us))
        }
    }

    /// An injected timing of part `part`'s selected candidate.
    fn injected(plan: &ExecutionPlan, part: usize, median_us: f64) -> Timing {
        Timing {
            part,
            candidate: plan.parts()[part].selected().index,
            tag: "injected".into(),
            median_us,
            min_us: median_us,
            runs: 1,
            samples: 1,
            batch: 1,
        }
    }

    fn tuned(cudnn: &Cudnn, graph: &Graph, time: &mut TimeFn<'_>) -> (ExecutionPlan, AutotuneReport) {
        let options = BuildOptions::default().measure_partitionings();
        let mut plan = ExecutionPlan::build(cudnn, graph, &options).unwrap();
        assert_eq!(plan.alternatives().len(), 2);
        let report = tune(&mut plan, &AutotuneOptions::default(), Instant::now(), time).unwrap();
        println!("{report}");
        (plan, report)
    }

    fn inputs(graph: &Graph) -> Vec<Array> {
        let mut rng = SplitMix64::new(20);
        graph
            .inputs()
            .iter()
            .map(|id| {
                let t = graph.tensor(*id);
                // Descales near 1/8, the rest of either sign (relu clips about half).
                let mut a = Array::from_fn(&t.dims, |_| match t.element_count() {
                    1 => rng.nonzero(0.1, 0.2).abs(),
                    _ => rng.nonzero(0.25, 2.0),
                });
                a.round_to(t.data_type);
                a
            })
            .collect()
    }

    /// `gelu(x·w + bias)`, bf16, the builder's f32 intermediates.
    fn bf16_bias_gelu() -> Graph {
        let mut g = GraphBuilder::new("bf16_bias_gelu");
        let x = g.input("x", DataType::BF16, &[1, 64, 128]).unwrap();
        let w = g.input("w", DataType::BF16, &[1, 128, 96]).unwrap();
        let bias = g.input("bias", DataType::BF16, &[1, 1, 96]).unwrap();
        let h = g.matmul(x, w).unwrap();
        let h = g.op("add", &[h.into(), bias.into()], &[]).unwrap()[0];
        let y = g.op("gelu", &[h.into()], &[]).unwrap()[0];
        g.output(y, "y", DataType::BF16).unwrap();
        g.build().unwrap()
    }

    /// The input of part 1 that the graph does not take: the tensor its cut materializes.
    fn crossing(plan: &ExecutionPlan) -> crate::ir::Tensor {
        let (graph, sub) = (plan.graph(), plan.parts()[1].graph());
        let named = |name: &str| graph.inputs().iter().any(|id| graph.tensor(*id).name == name);
        sub.inputs().into_iter().map(|id| sub.tensor(id).clone()).find(|t| !named(&t.name)).unwrap()
    }

    /// The largest difference between two outputs, relative to the largest magnitude of `want`.
    fn relative(got: &Array, want: &Array) -> f64 {
        let scale = want.data.iter().fold(0f64, |m, v| m.max(v.abs()));
        got.data.iter().zip(&want.data).map(|(a, b)| (a - b).abs()).fold(0f64, f64::max) / scale
    }

    /// The graph on the CPU reference, with its tensor `name` stored as `dtype`.
    fn reference(graph: &Graph, inputs: &[Array], retype: Option<(&str, DataType)>) -> Vec<Array> {
        let mut graph = graph.clone();
        if let Some((name, dtype)) = retype {
            let t = graph.tensors.iter_mut().find(|t| t.name == name).unwrap();
            t.data_type = dtype;
        }
        let mut values = vec![None; graph.tensors.len()];
        for (id, a) in graph.inputs().iter().zip(inputs) {
            values[id.0] = Some(a.clone());
        }
        crate::reference::run_arrays(&graph, values).unwrap()
    }

    #[needs_cudnn]
    #[test]
    fn the_fused_plan_is_kept_when_it_times_fastest() {
        let Some(cudnn) = deviceless() else { return };
        let (plan, report) = tuned(&cudnn, &fp8_bias_relu(), &mut timer(800.0, (700.0, 20.0), (100.0, 20.0)));
        assert_eq!(report.partitioning, 0);
        assert_eq!(report.partitionings.len(), 3);
        assert_eq!(report.partitioning_speedup(), Some(1.0));
        assert_eq!(plan.parts().len(), 1);
        assert!(plan.alternatives().is_empty(), "autotuning drops what it does not keep");
        // [matmul, mul, mul | add, relu]: 700 + 40 + 100 + 40; [matmul, mul, mul, add | relu]: 760 + 120.
        assert_eq!(report.partitionings[1].median_us, Some(880.0));
        assert_eq!(report.partitionings[2].median_us, Some(880.0));
        // Split 1.5 % faster (985 µs against 1000): less than `min_gain`, so the fused plan stays.
        let (plan, report) = tuned(&cudnn, &fp8_bias_relu(), &mut timer(1000.0, (790.0, 10.0), (155.0, 10.0)));
        assert_eq!(report.partitionings[1].median_us, Some(985.0));
        assert_eq!((report.partitioning, plan.parts().len()), (0, 1), "{report}");
    }

    #[needs_cudnn]
    #[test]
    fn the_partitioning_the_times_favour_is_kept_executed_and_saved() {
        let Some(cudnn) = deviceless() else { return };
        let graph = fp8_bias_relu();
        let input = inputs(&graph);
        let fused = reference(&graph, &input, None);
        // Each cut point wins under some times: where an epilogue op costs the GEMM's kernel more
        // than it costs an elementwise pass, the earlier cut; where less, the later.
        let early = ["matmul", "mul", "mul"].as_slice();
        let late = ["matmul", "mul", "mul", "add"].as_slice();
        // Rounding `(a·b)·da·db` to bf16 before the bias changes results; rounding the biased
        // sum before relu does not (relu of a bf16 value is one, and the output is bf16 anyway).
        for (in_gemm, in_pass, first, changes) in [(30.0, 5.0, early, true), (5.0, 30.0, late, false)] {
            let (plan, report) =
                tuned(&cudnn, &fp8_bias_relu(), &mut timer(1000.0, (700.0, in_gemm), (100.0, in_pass)));
            let kept = report.partitionings[report.partitioning].clone();
            let best = report.partitionings.iter().filter_map(|p| p.median_us).fold(f64::INFINITY, f64::min);
            assert_eq!(kept.median_us, Some(best), "{report}");
            assert!(report.partitioning > 0);
            assert_eq!(ops(&plan, 0), first);
            assert_eq!(plan.parts().len(), 2);
            assert!(plan.alternatives().is_empty());
            let speedup = report.partitioning_speedup().unwrap();
            assert!((speedup - 1000.0 / best).abs() < 1e-9);
            let cut = plan.parts()[1].cut().unwrap();
            let CutReason::MeasuredFaster(times) = &cut.reason else { panic!("{cut}") };
            assert!(times.contains(&format!("{best:.1} µs in 2 kernels against 1000.0 µs")), "{times}");
            assert!(cut.to_string().contains("measured faster"), "{cut}");
            assert!(plan.to_dot().contains("measured faster"));
            assert!(report.to_string().contains("(kept, "), "{report}");

            // The intermediate crosses in bf16 (the output's type), and that rounding is all that
            // differs from the fused graph.
            let crossing = crossing(&plan);
            assert_eq!(crossing.data_type, DataType::BF16);
            let emulated = plan.emulate(&input).unwrap();
            // (Compared as data: a failing `assert_eq!` on arrays prints all of them.)
            let rounded = reference(&graph, &input, Some((&crossing.name, DataType::BF16)));
            assert!(emulated[0].data == rounded[0].data, "the parts differ from the graph with a bf16 intermediate");
            let worst = relative(&emulated[0], &fused[0]);
            println!("kept {:?}: {worst:.2e} from the fused graph", kept.parts);
            assert_eq!(worst > 0.0, changes, "{worst}");
            assert!(worst < 1e-2, "{worst}");

            // A payload keeps the partitioning, its reason and its types.
            let (origin, options) = (PlanOrigin::of(&cudnn), SerializeOptions::default());
            let bytes = write_payload(&plan, &origin, options, &Expect::default()).unwrap();
            let (loaded, payload) = read_payload(&cudnn, &bytes, None, &Expect::default()).unwrap();
            assert_eq!(payload.plan.parts[1].measured.as_deref(), Some(times.as_str()));
            assert_eq!(payload.plan.parts[1].refused, None);
            let nodes = |p: &ExecutionPlan| p.parts().iter().map(|p| p.nodes().to_vec()).collect::<Vec<_>>();
            assert_eq!(nodes(&loaded), nodes(&plan));
            assert_eq!(loaded.parts()[1].cut(), plan.parts()[1].cut());
            assert_eq!(loaded.arena_bytes(), plan.arena_bytes());
            assert_eq!(loaded.emulate(&input).unwrap(), emulated);
            let again = write_payload(&loaded, &origin, options, &Expect::default()).unwrap();
            // Written again, it records the same parts and cuts (cuDNN's JSON embeds pointers).
            let cuts = |parts: &[crate::payload::plan::PartRecord]| {
                parts.iter().map(|p| (p.nodes.clone(), p.refused.clone(), p.measured.clone())).collect::<Vec<_>>()
            };
            let again = crate::payload::plan::parse_payload(&again).unwrap();
            assert_eq!(cuts(&again.plan.parts), cuts(&payload.plan.parts));
        }
    }

    /// A candidate replaces the plan's own choice only when it times `min_gain` faster: near-ties
    /// are noise, and the heuristics' order is the better guess then.
    #[needs_cudnn]
    #[test]
    fn the_plans_own_choice_stays_unless_beaten_by_min_gain() {
        let Some(cudnn) = deviceless() else { return };
        let graph = bf16_bias_gelu();
        let options = BuildOptions::default().all_plans();
        for (gain, min_gain, switches) in [(0.005, 0.02, false), (0.03, 0.02, true), (0.005, 0.0, true)] {
            let mut plan = ExecutionPlan::build(&cudnn, &graph, &options).unwrap();
            let built = plan.built();
            assert!(built.len() >= 2, "{built:?}");
            let own = plan.selected().index;
            let rival = *built.iter().find(|&&c| c != own).unwrap();
            // Every candidate 100 µs, but the rival `gain` faster.
            let mut time = |plan: &ExecutionPlan, part: Option<usize>| -> Result<Timing, BackendError> {
                let fast = plan.parts()[0].selected().index == rival;
                Ok(injected(plan, part.unwrap_or(0), if fast { 100.0 * (1.0 - gain) } else { 100.0 }))
            };
            let tuning = AutotuneOptions { min_gain, ..AutotuneOptions::default() };
            let report = tune(&mut plan, &tuning, Instant::now(), &mut time).unwrap();
            let want = if switches { rival } else { own };
            assert_eq!((report.selected, plan.selected().index), (want, want), "gain {gain}, min_gain {min_gain}");
        }
    }

    /// bf16 matmul + bias + gelu, cut after the matmul: the parts compute the graph with its
    /// matmul output rounded to bf16 (the output's type) and nothing else changed.
    #[needs_cudnn]
    #[test]
    fn a_gelu_epilogue_cut_off_rounds_only_its_intermediate() {
        let Some(cudnn) = deviceless() else { return };
        let graph = bf16_bias_gelu();
        let (plan, report) = tuned(&cudnn, &graph, &mut timer(1000.0, (700.0, 30.0), (100.0, 5.0)));
        assert_eq!(report.partitionings.len(), 3);
        assert_eq!((ops(&plan, 0), ops(&plan, 1)), (vec!["matmul"], vec!["add", "gelu"]));
        let crossing = crossing(&plan);
        assert_eq!(crossing.data_type, DataType::BF16);
        let input = inputs(&graph);
        let emulated = plan.emulate(&input).unwrap();
        let rounded = reference(&graph, &input, Some((&crossing.name, DataType::BF16)));
        assert!(emulated[0].data == rounded[0].data, "the parts differ from the graph with a bf16 intermediate");
        let worst = relative(&emulated[0], &reference(&graph, &input, None)[0]);
        println!("{worst:.2e} from the fused graph");
        assert!(worst > 0.0 && worst < 2e-2, "{worst}");
    }

    #[needs_cudnn]
    #[test]
    fn a_partitioning_that_fails_to_execute_is_not_kept() {
        let Some(cudnn) = deviceless() else { return };
        // The fused plan fails; the cuts time as in the favouring case above.
        let mut inner = timer(0.0, (700.0, 30.0), (100.0, 5.0));
        let mut time = |plan: &ExecutionPlan, part: Option<usize>| {
            if plan.parts().len() == 1 {
                return Err(BackendError::NotOnline { what: "an injected failure" });
            }
            inner(plan, part)
        };
        let (plan, report) = tuned(&cudnn, &fp8_bias_relu(), &mut time);
        assert_eq!(report.partitionings[0].median_us, None);
        assert!(report.partitioning > 0 && plan.parts().len() == 2);
        assert_eq!(report.partitioning_speedup(), None);
        assert_eq!(report.failures.len(), 1);
        let CutReason::MeasuredFaster(times) = &plan.parts()[1].cut().unwrap().reason else { panic!() };
        assert!(times.contains("the plan as built did not execute"), "{times}");
        // Nothing executes: an error, and the plan runs what it ran before.
        let options = BuildOptions::default().measure_partitionings();
        let mut plan = ExecutionPlan::build(&cudnn, &fp8_bias_relu(), &options).unwrap();
        let mut fail =
            |_: &ExecutionPlan, _: Option<usize>| Err(BackendError::NotOnline { what: "an injected failure" });
        let e = tune(&mut plan, &AutotuneOptions::default(), Instant::now(), &mut fail).unwrap_err();
        assert!(matches!(e, BackendError::Autotune { .. }), "{e}");
        assert_eq!(plan.parts().len(), 1);
        assert_eq!(plan.alternatives().len(), 2);
    }
}
