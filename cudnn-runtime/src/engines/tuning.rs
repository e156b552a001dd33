//! What autotuning is asked ([`AutotuneOptions`], [`Fill`], progress callbacks, the tuning store
//! it consults: [`TuningStoreSetting`]); [`autotune`](super::autotune),
//! [`build_autotuned`](super::build_autotuned) and [`measure`](super::measure) use them. What it
//! reports is in `tuning_report.rs`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::store::{TuningFile, TuningStoreError};
use super::tuning_report::Timing;

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

/// What [`autotune`](fn@super::autotune) reports after each candidate.
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

/// How [`autotune`](fn@super::autotune) times candidates.
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
    /// The tuning store [`build_autotuned`](super::build_autotuned) (and every `graph!` type's
    /// `build_autotuned`) consults before measuring and records into after: by default the one
    /// [`TUNING_STORE_ENV`](super::store::TUNING_STORE_ENV) names, if any.
    /// ([`autotune`](fn@super::autotune) itself times the plan it is given, always.)
    pub tuning_store: TuningStoreSetting,
}

/// Which tuning store [`AutotuneOptions`] consult ([`AutotuneOptions::tuning_store`]).
#[derive(Clone, Default)]
pub enum TuningStoreSetting {
    /// The store at the path [`TUNING_STORE_ENV`](super::store::TUNING_STORE_ENV)
    /// (`CUDNN_GRAPH_TUNING_STORE`) names, opened once per process and shared
    /// ([`TuningFile::from_env`]); none where the variable is unset or empty.
    #[default]
    FromEnv,
    /// This store.
    File(Arc<TuningFile>),
    /// None, whatever the environment says: every build measures.
    Off,
}

impl fmt::Debug for TuningStoreSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TuningStoreSetting::FromEnv => f.write_str("FromEnv"),
            TuningStoreSetting::File(file) => match file.path() {
                Some(path) => write!(f, "File({})", path.display()),
                None => f.write_str("File(in memory)"),
            },
            TuningStoreSetting::Off => f.write_str("Off"),
        }
    }
}

impl Default for AutotuneOptions {
    /// 3 warm-up runs, 5 to 50 samples of about 500 µs, 2 % tolerance, 2 s per candidate, a
    /// candidate replaces the plan's choice when at least 2 % faster, random data, the tuning
    /// store of the environment (if any).
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
            tuning_store: TuningStoreSetting::FromEnv,
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
            .field("tuning_store", &self.tuning_store)
            .finish()
    }
}

impl AutotuneOptions {
    /// Whether `challenger` µs beats the plan's own `own` µs by at least [`Self::min_gain`].
    pub(super) fn beats(&self, challenger: f64, own: f64) -> bool {
        challenger < own * (1.0 - self.min_gain.clamp(0.0, 1.0))
    }

    /// Calls `f` after each candidate is timed.
    pub fn on_progress(mut self, f: impl Fn(&AutotuneProgress<'_>) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(f));
        self
    }

    /// Consults `store` before measuring and records into it after
    /// ([`build_autotuned`](super::build_autotuned)): a hit builds the recorded choice without
    /// timing anything; a miss measures and records. Takes a [`TuningFile`] or an
    /// `Arc<TuningFile>` (to share one store between options, threads and graph types).
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::engines::{AutotuneOptions, TuningFile, TuningStore};
    /// let tuning = AutotuneOptions::default().tuning_store(TuningFile::in_memory(TuningStore::new()));
    /// assert!(tuning.store()?.is_some());
    /// assert!(AutotuneOptions::default().without_tuning_store().store()?.is_none());
    /// # Ok::<(), cudnn_graph::engines::TuningStoreError>(())
    /// ```
    pub fn tuning_store(mut self, store: impl Into<Arc<TuningFile>>) -> Self {
        self.tuning_store = TuningStoreSetting::File(store.into());
        self
    }

    /// Consults no tuning store, not even the environment's: every build measures.
    pub fn without_tuning_store(mut self) -> Self {
        self.tuning_store = TuningStoreSetting::Off;
        self
    }

    /// The store these options consult: the one set, or the environment's
    /// ([`TuningFile::from_env`]); an error where the environment names a file that is not a
    /// store.
    pub fn store(&self) -> Result<Option<Arc<TuningFile>>, TuningStoreError> {
        match &self.tuning_store {
            TuningStoreSetting::FromEnv => TuningFile::from_env(),
            TuningStoreSetting::File(file) => Ok(Some(file.clone())),
            TuningStoreSetting::Off => Ok(None),
        }
    }
}
