//! Capture: every graph this process plans or executes, recorded to a directory with the plan it
//! runs (each part's nodes and engine config, why it was cut), the cuDNN version and SM, and
//! optionally the inputs of its first executes, so that `cudnn-graph repro DIR/ENTRY` replays it
//! against the CPU reference here or on another machine. A launch of a CUDA graph of a plan
//! ([`super::PlanGraph::launch`]) is an execute like any other: the plan is recorded when the
//! graph is, and each launch's inputs count among its first executes (a host scalar's value is
//! the one the graph was recorded or last updated with).
//!
//! Off unless asked: set `CUDNN_GRAPH_CAPTURE=DIR` before the process plans its first graph
//! (`CUDNN_GRAPH_CAPTURE_INPUTS=N`, the inputs of each plan's first N executes;
//! `CUDNN_GRAPH_CAPTURE_MAX_BYTES`, the budget), or call [`start`]. Off, an execute pays one
//! relaxed atomic load; on without inputs, one more (the plan's own "recorded" flag) after its
//! first execute; the files are written once per plan and selection, at its build and at its
//! first execute after a selection changed (autotuning). The directory holds at most
//! [`CaptureOptions::max_bytes`]: what would pass it is dropped and counted
//! ([`CaptureStats::dropped`]).
//!
//! Each entry is a directory `{fingerprint:016x}-{n}` with `graph.json` (the structural JSON),
//! `capture.json` (this module's [`CapturedPlan`]) and, when inputs are captured, `inputs.json` and
//! `inputs/` for the first execute and `exec-{k}/` for the later ones
//! ([`crate::serialize::inputs`]).
//!
//! ```no_run
//! # use cudnn_runtime as cudnn_graph;
//! use cudnn_graph::backend::capture::{self, CaptureOptions};
//! capture::start(CaptureOptions { inputs: 1, ..CaptureOptions::new("/tmp/captures") })?;
//! // ... build and execute plans ...
//! let stats = capture::stop().unwrap();
//! println!("{} graphs, {} executes' inputs, {} bytes", stats.graphs, stats.executes, stats.bytes);
//! # Ok::<(), std::io::Error>(())
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, Once, PoisonError};

use cudarc::driver::CudaStream;
use serde::{Deserialize, Serialize};

use super::plan::{ChosenPart, ExecutionPlan};
use super::Cudnn;
use crate::array::Array;
use crate::serialize::inputs::{from_storage, write_inputs};
use crate::serialize::structure_to_json;

/// The variable naming the capture directory.
pub const CAPTURE_ENV: &str = "CUDNN_GRAPH_CAPTURE";
/// The variable giving how many executes of each plan have their inputs captured (default 0).
pub const CAPTURE_INPUTS_ENV: &str = "CUDNN_GRAPH_CAPTURE_INPUTS";
/// The variable giving the directory's budget in bytes (default [`DEFAULT_CAPTURE_BYTES`]).
pub const CAPTURE_BYTES_ENV: &str = "CUDNN_GRAPH_CAPTURE_MAX_BYTES";
/// The default budget: 256 MiB.
pub const DEFAULT_CAPTURE_BYTES: u64 = 256 << 20;
/// The format of `capture.json`.
pub const CAPTURE_FORMAT: u32 = 1;

/// What to capture, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureOptions {
    /// The directory (created).
    pub dir: PathBuf,
    /// How many executes of each plan have their inputs saved (0: none).
    pub inputs: usize,
    /// The most bytes written into the directory.
    pub max_bytes: u64,
}

impl CaptureOptions {
    /// Structures and plans into `dir`, no inputs, [`DEFAULT_CAPTURE_BYTES`].
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        CaptureOptions { dir: dir.into(), inputs: 0, max_bytes: DEFAULT_CAPTURE_BYTES }
    }

    /// The options the environment gives ([`CAPTURE_ENV`], [`CAPTURE_INPUTS_ENV`],
    /// [`CAPTURE_BYTES_ENV`]); `None` without [`CAPTURE_ENV`] (or with it empty). A count that
    /// does not parse keeps its default.
    pub fn from_env() -> Option<Self> {
        let dir = std::env::var_os(CAPTURE_ENV).filter(|d| !d.is_empty())?;
        let number = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<u64>().ok());
        Some(CaptureOptions {
            dir: dir.into(),
            inputs: number(CAPTURE_INPUTS_ENV).map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX)),
            max_bytes: number(CAPTURE_BYTES_ENV).unwrap_or(DEFAULT_CAPTURE_BYTES),
        })
    }
}

/// What a capture wrote so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaptureStats {
    /// Entries written (a graph with one plan selection each).
    pub graphs: usize,
    /// Executes whose inputs were saved.
    pub executes: usize,
    /// Bytes written.
    pub bytes: u64,
    /// Entries or inputs not written because they would have passed the budget, or failed to
    /// write.
    pub dropped: u64,
}

/// `capture.json`: the plan an entry's graph ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapturedPlan {
    /// [`CAPTURE_FORMAT`].
    pub cudnn_graph_capture: u32,
    /// The graph's name.
    pub graph_name: String,
    /// [`crate::Graph::fingerprint`], `0x…`.
    pub graph_fingerprint: String,
    /// `cudnnGetVersion()` of the cuDNN that planned it.
    pub cudnn_version: usize,
    /// The target's compute capability.
    pub sm: Option<u32>,
    /// Whether it was planned on a GPU (else deviceless).
    pub online: bool,
    /// Its parts as they run, to build again with
    /// [`ExecutionPlan::build_chosen`]; empty where cuDNN could not name an engine.
    pub parts: Vec<ChosenPart>,
    /// Each part's engine tag, as cudnn-frontend spells it.
    pub tags: Vec<String>,
    /// Bytes of workspace the plan takes.
    pub workspace_size: usize,
}

/// An entry written: its directory, and how many executes' inputs it holds.
struct Entry {
    dir: PathBuf,
    executes: usize,
}

struct State {
    options: CaptureOptions,
    /// By (fingerprint, each part's nodes and engine tag).
    entries: HashMap<(u64, String), Entry>,
    /// Entries per fingerprint, for the next one's name.
    per_graph: HashMap<u64, usize>,
    stats: CaptureStats,
}

static ENABLED: AtomicBool = AtomicBool::new(false);
static INPUTS: AtomicUsize = AtomicUsize::new(0);
static FROM_ENV: Once = Once::new();
static STATE: Mutex<Option<State>> = Mutex::new(None);

fn state() -> std::sync::MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Starts capturing into `options.dir` (created), replacing a capture in progress (whose
/// entries stay).
pub fn start(options: CaptureOptions) -> std::io::Result<()> {
    std::fs::create_dir_all(&options.dir)?;
    // The environment, read once, must not restart a capture started here.
    FROM_ENV.call_once(|| {});
    let mut s = state();
    INPUTS.store(options.inputs, Ordering::Relaxed);
    *s = Some(State { options, entries: HashMap::new(), per_graph: HashMap::new(), stats: CaptureStats::default() });
    ENABLED.store(true, Ordering::Release);
    Ok(())
}

/// Stops capturing; what it wrote, if a capture was on.
pub fn stop() -> Option<CaptureStats> {
    let mut s = state();
    ENABLED.store(false, Ordering::Release);
    INPUTS.store(0, Ordering::Relaxed);
    s.take().map(|s| s.stats)
}

/// What the capture in progress wrote so far.
pub fn stats() -> Option<CaptureStats> {
    state().as_ref().map(|s| s.stats)
}

/// Whether a capture is on (the environment's is started here, the first time).
pub fn is_on() -> bool {
    FROM_ENV.call_once(|| {
        if let Some(options) = CaptureOptions::from_env() {
            let dir = options.dir.clone();
            if let Err(e) = start_from_env(options) {
                tracing::warn!(dir = %dir.display(), error = %e, "capture not started");
            }
        }
    });
    ENABLED.load(Ordering::Acquire)
}

/// [`start`] without touching `FROM_ENV` (called inside its `call_once`).
fn start_from_env(options: CaptureOptions) -> std::io::Result<()> {
    std::fs::create_dir_all(&options.dir)?;
    let mut s = state();
    INPUTS.store(options.inputs, Ordering::Relaxed);
    tracing::info!(dir = %options.dir.display(), inputs = options.inputs, max_bytes = options.max_bytes, "capture on");
    *s = Some(State { options, entries: HashMap::new(), per_graph: HashMap::new(), stats: CaptureStats::default() });
    ENABLED.store(true, Ordering::Release);
    Ok(())
}

/// The key of `plan`'s selection.
fn choice(plan: &ExecutionPlan) -> String {
    let parts: Vec<String> =
        plan.parts().iter().map(|p| format!("{}:{}", p.nodes().join(","), p.selected().tag())).collect();
    parts.join("|")
}

/// Records `plan` (made or loaded by `cudnn`) unless its graph and selection are recorded
/// already: called once a plan is built or loaded, and at the first execute after its selection
/// changed.
pub(crate) fn record_plan(plan: &ExecutionPlan, cudnn: &Cudnn) {
    if !is_on() {
        return;
    }
    let fingerprint = plan.graph().fingerprint();
    let key = (fingerprint, choice(plan));
    let mut guard = state();
    let Some(s) = guard.as_mut() else { return };
    if s.entries.contains_key(&key) {
        return;
    }
    let parts: Option<Vec<ChosenPart>> = plan.parts().iter().map(ChosenPart::of).collect();
    let record = CapturedPlan {
        cudnn_graph_capture: CAPTURE_FORMAT,
        graph_name: plan.graph().name.clone(),
        graph_fingerprint: format!("{fingerprint:#018x}"),
        cudnn_version: cudnn.version(),
        sm: cudnn.sm(),
        online: cudnn.stream().is_some(),
        parts: parts.unwrap_or_default(),
        tags: plan.parts().iter().map(|p| p.selected().tag()).collect(),
        workspace_size: plan.workspace_size(),
    };
    let graph = structure_to_json(plan.graph());
    let record = serde_json::to_string_pretty(&record).unwrap_or_default();
    let size = (graph.len() + record.len()) as u64;
    if s.stats.bytes.saturating_add(size) > s.options.max_bytes {
        s.stats.dropped += 1;
        tracing::debug!(graph = %plan.graph().name, size, "capture: over its budget, not recorded");
        return;
    }
    // The next name no entry has, this process's or an earlier one's in the same directory.
    let n = s.per_graph.entry(fingerprint).or_insert(0);
    let mut dir = s.options.dir.join(format!("{fingerprint:016x}-{n}"));
    while dir.exists() {
        *n += 1;
        dir = s.options.dir.join(format!("{fingerprint:016x}-{n}"));
    }
    *n += 1;
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join("graph.json"), &graph))
        .and_then(|()| std::fs::write(dir.join("capture.json"), &record));
    match written {
        Ok(()) => {
            s.stats.graphs += 1;
            s.stats.bytes += size;
            tracing::debug!(graph = %plan.graph().name, dir = %dir.display(), "captured");
            s.entries.insert(key, Entry { dir, executes: 0 });
        }
        Err(e) => {
            s.stats.dropped += 1;
            tracing::warn!(dir = %dir.display(), error = %e, "capture: not written");
        }
    }
}

/// `plan`, just built or loaded by `cudnn`, recorded if a capture is on.
pub(crate) fn captured(plan: ExecutionPlan, cudnn: &Cudnn) -> ExecutionPlan {
    record_plan(&plan, cudnn);
    plan.set_capture_recorded();
    plan
}

/// After an execute of `plan` on `stream` with I/O `io` (device pointers; a host scalar's host
/// address): records the plan if its selection is not yet, and saves its inputs while it has
/// had fewer than [`CaptureOptions::inputs`] executes saved. Off, one relaxed load.
pub(crate) fn executed(plan: &ExecutionPlan, cudnn: &Cudnn, stream: &CudaStream, io: &[u64]) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    graph_recorded(plan, cudnn);
    launched(plan, stream, io);
}

/// After `cudnn` recorded a CUDA graph of one execute of `plan` ([`super::PlanGraph`]): records
/// the plan if its selection is not yet, as an execute does (the recording ran nothing: its
/// launches are the executes, [`launched`]). Off, one relaxed load.
pub(crate) fn graph_recorded(plan: &ExecutionPlan, cudnn: &Cudnn) {
    if ENABLED.load(Ordering::Relaxed) && !plan.capture_recorded() {
        record_plan(plan, cudnn);
        plan.set_capture_recorded();
    }
}

/// After an execute of `plan` ran on `stream` with I/O `io`, by an execute call or a launch of a
/// CUDA graph recorded with those pointers: saves its inputs while the plan has had fewer than
/// [`CaptureOptions::inputs`] executes saved. Off, one relaxed load.
pub(crate) fn launched(plan: &ExecutionPlan, stream: &CudaStream, io: &[u64]) {
    if !ENABLED.load(Ordering::Relaxed) || INPUTS.load(Ordering::Relaxed) == 0 {
        return;
    }
    save_inputs(plan, stream, io);
}

/// Saves the inputs of this execute of `plan`, if its entry wants more.
fn save_inputs(plan: &ExecutionPlan, stream: &CudaStream, io: &[u64]) {
    let key = (plan.graph().fingerprint(), choice(plan));
    let (dir, k) = {
        let mut guard = state();
        let Some(s) = guard.as_mut() else { return };
        let wanted = s.options.inputs;
        let Some(entry) = s.entries.get_mut(&key) else { return };
        if entry.executes >= wanted {
            return;
        }
        entry.executes += 1;
        (entry.dir.clone(), entry.executes - 1)
    };
    let graph = plan.graph();
    let ids = graph.inputs();
    let need: u64 = ids
        .iter()
        .map(|id| (graph.tensor(*id).element_count().max(0) as u64) * graph.tensor(*id).data_type.size_bytes() as u64)
        .sum();
    {
        let mut guard = state();
        let Some(s) = guard.as_mut() else { return };
        if s.stats.bytes.saturating_add(need) > s.options.max_bytes {
            s.stats.dropped += 1;
            return;
        }
    }
    let inputs = match download(plan, stream, io) {
        Ok(inputs) => inputs,
        Err(e) => {
            tracing::warn!(graph = %graph.name, error = %e, "capture: inputs not read");
            if let Some(s) = state().as_mut() {
                s.stats.dropped += 1;
            }
            return;
        }
    };
    let target = if k == 0 { dir } else { dir.join(format!("exec-{k}")) };
    let written = write_inputs(&target, graph, &inputs);
    if let Some(s) = state().as_mut() {
        match written {
            Ok(bytes) => {
                s.stats.executes += 1;
                s.stats.bytes += bytes as u64;
            }
            Err(e) => {
                s.stats.dropped += 1;
                tracing::warn!(dir = %target.display(), error = %e, "capture: inputs not written");
            }
        }
    }
}

/// The inputs of an execute, read back: each device buffer once the stream has finished the
/// work enqueued before it, each host scalar from its host address.
fn download(plan: &ExecutionPlan, stream: &CudaStream, io: &[u64]) -> Result<Vec<Array>, String> {
    // An execute recorded into a CUDA graph has run nothing yet, and a synchronize would end the
    // recording: such an execute's inputs are not read.
    let status = stream.capture_status().map_err(|e| e.to_string())?;
    if status != cudarc::driver::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
        return Err("the stream is recording a CUDA graph".into());
    }
    stream.synchronize().map_err(|e| e.to_string())?;
    let graph = plan.graph();
    let mut out = Vec::new();
    for (id, &address) in graph.inputs().iter().zip(io) {
        let t = graph.tensor(*id);
        let size = t.data_type.size_bytes();
        let mut bytes = vec![0u8; if t.host_scalar { size } else { t.storage_len().saturating_mul(size) }];
        if t.host_scalar {
            // SAFETY: a host scalar's address points at its value, in its type, valid for the
            // duration of the execute call this runs in (execute_raw's contract).
            unsafe { std::ptr::copy_nonoverlapping(address as *const u8, bytes.as_mut_ptr(), size) };
        } else if !bytes.is_empty() {
            // SAFETY: the execute checked that `address` holds the tensor's storage on this
            // context; the stream is synchronized, so what it computes is there.
            unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut bytes, address) }.map_err(|e| e.to_string())?;
        }
        out.push(from_storage(t, &bytes));
    }
    Ok(out)
}

/// Reads `capture.json` of an entry directory.
pub fn read_captured(dir: &Path) -> Result<CapturedPlan, String> {
    let path = dir.join("capture.json");
    // A record is a few KB; anything near this is not one.
    const MAX_RECORD_BYTES: u64 = 16 << 20;
    let len = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?.len();
    if len > MAX_RECORD_BYTES {
        return Err(format!(
            "{}: {len} bytes, over the {MAX_RECORD_BYTES}-byte limit of a capture record",
            path.display()
        ));
    }
    let text = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let plan: CapturedPlan = serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if plan.cudnn_graph_capture != CAPTURE_FORMAT {
        return Err(format!(
            "{}: capture format {}, this build reads {CAPTURE_FORMAT}",
            path.display(),
            plan.cudnn_graph_capture
        ));
    }
    Ok(plan)
}
