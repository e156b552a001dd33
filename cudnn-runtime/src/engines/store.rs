//! The tuning store: what autotuning learned, kept so that no later process, on this machine or
//! another, pays for it again (TensorRT's timing cache, XLA's autotune cache).
//!
//! [`autotune`](super::autotune) builds every candidate of a plan (and, with
//! [`Fusion::Measure`], every partitioning) and times them all:
//! the Llama layer's first call took 41–43 s so on the H100, where a heuristics build took 4.5 s.
//! A [`TuningStore`] keeps, per [`PlanKey`] (graph fingerprint, runtime-dim binding, SM, cuDNN
//! version), the plan autotuning kept — each part's nodes, engine config and cut — with every
//! candidate's median and fastest sample and every partitioning's sum ([`TunedPlan`]). A hit is
//! built with [`ExecutionPlan::build_chosen`]: one engine config per part, no heuristics, no other
//! candidate compiled, nothing timed.
//!
//! **Format.** One JSON document, versioned ([`TUNING_FORMAT`]), small (a few KB per graph: no
//! kernels, which the plan cache's payloads hold), read with a size limit
//! ([`MAX_TUNING_STORE_BYTES`]) and checked entry by entry: bytes that are not a store are a
//! [`TuningStoreError`], never a panic.
//!
//! ```text
//! {"cudnn_graph_tuning": 1, "entries": [{
//!    "graph_name": "mlp", "graph_fingerprint": "0x…", "binding": null, "sm": 90, "cudnn_version": 91900,
//!    "recorded_at": 1796630400,
//!    "parts": [{"nodes": ["matmul_0", "add_1"], "engine": {"id": 7, "tag": "eng7_k24=41", …}}],
//!    "partitioning": 0, "partitionings": [{"parts": [["matmul_0", "add_1"]], "median_us": 12.5}],
//!    "candidates": [{"partitioning": 0, "part": 0, "candidate": 0, "tag": "eng7_k24=41",
//!                    "median_us": 12.5, "min_us": 12.1, "samples": 9, "runs": 360}, …]}]}
//! ```
//!
//! **Merging.** Stores from several machines merge ([`TuningStore::merge`]): keys are unioned; for
//! one key the newer record wins, and where the two chose differently the merge says so
//! ([`MergeReport::conflicts`]). Keys carry the SM and cuDNN version, so entries of other targets
//! are kept side by side, and a lookup never uses one: where the store has the graph only for
//! another SM or cuDNN, [`TuningStore::lookup`] returns a [`TuningWarning::Foreign`] instead of
//! a plan.
//!
//! **Serving.** [`TuningFile`] is the store behind a file, shared by threads:
//! [`TuningFile::plan`] builds a graph from its entry or, on a miss, builds every candidate,
//! autotunes and records what it kept (writing the file atomically, merged with what other
//! processes wrote meanwhile, under a lock on a `.lock` file beside it so that two writers never
//! lose each other's records). [`build_autotuned`](super::build_autotuned), every `graph!` type's
//! `build_autotuned` and the candle adapter's autotuning consult the store their
//! [`AutotuneOptions`](super::AutotuneOptions) name
//! ([`AutotuneOptions::tuning_store`](super::AutotuneOptions::tuning_store)), by default the one
//! at the path [`TUNING_STORE_ENV`] (`CUDNN_GRAPH_TUNING_STORE`) gives. `cudnn-graph tune`
//! fills a store offline and merges stores.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::keys::PlanKey;
use super::tuning_report::AutotuneReport;
use crate::backend::Cudnn;
use crate::backend::Fusion;
use crate::backend::{BackendError, BuildOptions, ChosenPart, CutReason, ExecutionPlan};
use crate::payload::plan::{EngineRecord, Expect};
use crate::Graph;

/// The store format this build writes and reads.
pub const TUNING_FORMAT: u32 = 1;

/// The variable naming the tuning store that autotuning consults unless its options name
/// another ([`TuningFile::from_env`], [`AutotuneOptions::tuning_store`](super::AutotuneOptions::tuning_store)).
pub const TUNING_STORE_ENV: &str = "CUDNN_GRAPH_TUNING_STORE";

/// The largest store [`TuningStore::from_bytes`] accepts: 16 MiB (thousands of graphs; an
/// entry is about 1 KB plus 150 bytes per candidate timed).
pub const MAX_TUNING_STORE_BYTES: usize = 16 << 20;

/// One part of a tuned plan: its nodes, the engine autotuning kept for it, and why it was cut
/// from the part before (where the fusion table cannot say it again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TunedPart {
    /// The names of the nodes it runs, in order ([`crate::backend::PlanPart::nodes`]).
    pub nodes: Vec<String>,
    /// The engine it runs.
    pub engine: EngineRecord,
    /// cuDNN's refusal that cut it, as a payload records it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Autotuning's times that cut it ([`CutReason::MeasuredFaster`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<String>,
}

/// One candidate's time, as autotuning measured it ([`super::Timing`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CandidateTime {
    /// The partitioning it belongs to (an index of [`TunedPlan::partitionings`]).
    pub partitioning: usize,
    /// Its part in that partitioning.
    pub part: usize,
    /// Its index in the part's candidate list.
    pub candidate: usize,
    /// Its tag, `eng7_k24=41`.
    pub tag: String,
    /// Median device time per execute, µs.
    pub median_us: f64,
    /// Fastest sample, µs: `median_us - min_us` is the spread.
    pub min_us: f64,
    /// Samples taken.
    pub samples: usize,
    /// Executes timed.
    pub runs: usize,
}

/// One partitioning autotuning timed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitioningTime {
    /// Each part's nodes.
    pub parts: Vec<Vec<String>>,
    /// The sum of its parts' selected medians, µs; `None` where a part did not execute.
    pub median_us: Option<f64>,
}

/// What autotuning kept for one [`PlanKey`], and what it measured to decide.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TunedPlan {
    /// The graph's name (informative).
    pub graph_name: String,
    /// [`Graph::fingerprint`], `0x…`.
    pub graph_fingerprint: String,
    /// The `graph!` type's runtime-dim binding, if any.
    pub binding: Option<String>,
    /// The compute capability it was timed on.
    pub sm: Option<u32>,
    /// `cudnnGetVersion()` of the cuDNN it was timed with.
    pub cudnn_version: usize,
    /// When it was timed, seconds since the Unix epoch: the newer record of a key wins a merge.
    pub recorded_at: u64,
    /// The plan kept, part by part.
    pub parts: Vec<TunedPart>,
    /// The index in `partitionings` of the one kept.
    pub partitioning: usize,
    /// Every partitioning timed: the plan's own first.
    pub partitionings: Vec<PartitioningTime>,
    /// Every candidate timed, of every partitioning.
    pub candidates: Vec<CandidateTime>,
}

impl TunedPlan {
    /// What `plan` (autotuned, `report` its table) keeps for `key`, recorded at `recorded_at`.
    pub fn of(key: &PlanKey, plan: &ExecutionPlan, report: &AutotuneReport, recorded_at: u64) -> Self {
        let parts = plan
            .parts()
            .iter()
            .map(|p| TunedPart {
                nodes: p.nodes().to_vec(),
                engine: EngineRecord::of(p.selected()),
                refused: match p.cut().map(|c| &c.reason) {
                    Some(CutReason::Refused(why)) => Some(why.clone()),
                    _ => None,
                },
                measured: match p.cut().map(|c| &c.reason) {
                    Some(CutReason::MeasuredFaster(times)) => Some(times.clone()),
                    _ => None,
                },
            })
            .collect();
        // Every partitioning's candidates; a report without partitionings (made by hand) has
        // its kept one's in `timings`.
        let timed: Vec<(usize, &super::Timing)> = if report.partitionings.is_empty() {
            report.timings.iter().map(|t| (0, t)).collect()
        } else {
            report.partitionings.iter().enumerate().flat_map(|(k, p)| p.timings.iter().map(move |t| (k, t))).collect()
        };
        let candidates = timed
            .into_iter()
            .map(|(partitioning, t)| CandidateTime {
                partitioning,
                part: t.part,
                candidate: t.candidate,
                tag: t.tag.clone(),
                median_us: t.median_us,
                min_us: t.min_us,
                samples: t.samples,
                runs: t.runs,
            })
            .collect();
        TunedPlan {
            graph_name: plan.graph().name.clone(),
            graph_fingerprint: format!("{:#018x}", key.graph_fingerprint),
            binding: key.binding.clone(),
            sm: key.sm,
            cudnn_version: key.cudnn_version,
            recorded_at,
            parts,
            partitioning: report.partitioning,
            partitionings: report
                .partitionings
                .iter()
                .map(|p| PartitioningTime { parts: p.parts.clone(), median_us: p.median_us })
                .collect(),
            candidates,
        }
    }

    /// The key it is filed under; `None` where its fingerprint is not written as the store writes
    /// it, `0x` and 16 lowercase hex digits (another spelling of the same number, such as a
    /// leading zero more, would not survive a write and a read as the same entry).
    pub fn key(&self) -> Option<PlanKey> {
        let hex = self.graph_fingerprint.strip_prefix("0x")?;
        let graph_fingerprint = u64::from_str_radix(hex, 16).ok()?;
        if format!("{graph_fingerprint:#018x}") != self.graph_fingerprint {
            return None;
        }
        Some(PlanKey {
            graph_fingerprint,
            binding: self.binding.clone(),
            sm: self.sm,
            cudnn_version: self.cudnn_version,
        })
    }

    /// The parts to build ([`ExecutionPlan::build_chosen`]); `None` where a part's engine has no
    /// id (the entry's check refuses such an entry).
    pub fn chosen(&self) -> Option<Vec<ChosenPart>> {
        self.parts
            .iter()
            .map(|p| {
                Some(ChosenPart {
                    nodes: p.nodes.clone(),
                    engine: p.engine.config()?,
                    refused: p.refused.clone(),
                    measured: p.measured.clone(),
                })
            })
            .collect()
    }

    /// The choice it records, for comparing two records: each part's nodes and engine tag.
    fn choice(&self) -> Vec<(&[String], &str)> {
        self.parts.iter().map(|p| (p.nodes.as_slice(), p.engine.tag.as_str())).collect()
    }

    /// `matmul_0, add_1: eng7_k24=41 | gelu_2: eng3`.
    pub fn describe(&self) -> String {
        let parts: Vec<String> =
            self.parts.iter().map(|p| format!("{}: {}", p.nodes.join(", "), p.engine.tag)).collect();
        parts.join(" | ")
    }

    /// Why the entry cannot be used, if it cannot: checked when a store is read.
    fn check(&self) -> Result<PlanKey, String> {
        let key = self.key().ok_or_else(|| {
            format!("graph fingerprint `{}` is not `0x` and 16 lowercase hex digits", self.graph_fingerprint)
        })?;
        if self.parts.is_empty() {
            return Err("it records no part".into());
        }
        for (k, p) in self.parts.iter().enumerate() {
            if p.nodes.is_empty() {
                return Err(format!("part {k} runs no node"));
            }
            if p.engine.id.is_none() {
                return Err(format!("part {k}'s engine `{}` has no engine id", p.engine.tag));
            }
        }
        if self.partitioning >= self.partitionings.len().max(1) {
            return Err(format!("it keeps partitioning {} of {} timed", self.partitioning, self.partitionings.len()));
        }
        let bad = |x: f64| !x.is_finite() || x < 0.0;
        if let Some(c) = self.candidates.iter().find(|c| bad(c.median_us) || bad(c.min_us)) {
            return Err(format!("candidate `{}` has time {} µs (median), {} µs (min)", c.tag, c.median_us, c.min_us));
        }
        if self.partitionings.iter().any(|p| p.median_us.is_some_and(bad)) {
            return Err("a partitioning's time is negative or not finite".into());
        }
        Ok(key)
    }
}

/// Why bytes are not a tuning store (or a file cannot be one).
#[derive(Debug, thiserror::Error)]
pub enum TuningStoreError {
    /// The file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Over [`MAX_TUNING_STORE_BYTES`].
    #[error("tuning store of {0} bytes is over the {MAX_TUNING_STORE_BYTES}-byte limit")]
    TooLarge(u64),
    /// Not JSON of the store's shape.
    #[error("not a cudnn-graph tuning store: {0}")]
    Malformed(String),
    /// Another format version.
    #[error("tuning store format {found}, but this build reads format {TUNING_FORMAT}")]
    Format {
        /// The version the store says.
        found: u64,
    },
    /// An entry that cannot be used.
    #[error("tuning store entry {index} ({graph}): {reason}")]
    BadEntry {
        /// Its position in the file.
        index: usize,
        /// Its graph's name.
        graph: String,
        /// What is wrong.
        reason: String,
    },
    /// Two entries of one key.
    #[error("tuning store entries {first} and {second} have one key: {key}")]
    DuplicateKey {
        /// The first entry's position.
        first: usize,
        /// The second's.
        second: usize,
        /// The key.
        key: PlanKey,
    },
}

/// Something a lookup or a build from the store met, that it did not use: never silent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TuningWarning {
    /// The store has this graph (fingerprint and binding) only for other targets: those entries
    /// were not used (a plan timed for another SM or cuDNN is no evidence here).
    Foreign {
        /// The key looked up.
        wanted: PlanKey,
        /// The targets the store has it for: `(sm, cuDNN version)`.
        found: Vec<(Option<u32>, usize)>,
    },
    /// The entry's plan did not build here (an engine this cuDNN no longer builds for its part, a
    /// partition that no longer covers the graph): autotuning ran again and replaced it.
    Stale {
        /// The key.
        key: PlanKey,
        /// Why it did not build.
        reason: String,
    },
    /// The store could not be written; what was learned stays in memory.
    NotSaved {
        /// Why.
        reason: String,
    },
    /// The store the options name could not be opened ([`TUNING_STORE_ENV`] naming a file that is
    /// not a store, or that cannot be read): autotuning measured without it, and recorded nothing
    /// into it (the file is left as it is).
    NotOpened {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

impl fmt::Display for TuningWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TuningWarning::Foreign { wanted, found } => {
                let found: Vec<String> = found
                    .iter()
                    .map(|(sm, v)| format!("sm {} with cuDNN {v}", sm.map_or("?".to_string(), |s| s.to_string())))
                    .collect();
                write!(f, "tuning store: {wanted} is recorded only for {}: not used", found.join(", "))
            }
            TuningWarning::Stale { key, reason } => {
                write!(f, "tuning store: the entry for {key} does not build here ({reason}): tuned again")
            }
            TuningWarning::NotSaved { reason } => write!(f, "tuning store: not saved: {reason}"),
            TuningWarning::NotOpened { path, reason } => {
                write!(f, "tuning store {}: not used: {reason}", path.display())
            }
        }
    }
}

/// Two records of one key that chose differently, met by a merge.
#[derive(Debug, Clone, PartialEq)]
pub struct MergeConflict {
    /// The key.
    pub key: PlanKey,
    /// The choice kept (the newer record's), as [`TunedPlan::describe`] says it.
    pub kept: String,
    /// The choice dropped.
    pub dropped: String,
    /// When each was recorded: `(kept, dropped)`, Unix seconds.
    pub recorded_at: (u64, u64),
}

impl fmt::Display for MergeConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: kept [{}] (recorded at {}) over [{}] (recorded at {})",
            self.key, self.kept, self.recorded_at.0, self.dropped, self.recorded_at.1
        )
    }
}

/// What [`TuningStore::merge`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MergeReport {
    /// Keys the other store added.
    pub added: usize,
    /// Keys whose record the other store's newer one replaced.
    pub replaced: usize,
    /// Keys whose record stayed (it was as new or newer).
    pub kept: usize,
    /// Keys whose two records chose different plans (counted in `replaced` or `kept` too).
    pub conflicts: Vec<MergeConflict>,
}

/// The sort key of an entry: the [`PlanKey`]'s fields, ordered.
type Slot = (u64, Option<String>, Option<u32>, usize);

fn slot(key: &PlanKey) -> Slot {
    (key.graph_fingerprint, key.binding.clone(), key.sm, key.cudnn_version)
}

/// What autotuning kept, per [`PlanKey`]; see the [module](self) documentation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TuningStore {
    entries: BTreeMap<Slot, TunedPlan>,
}

#[derive(Serialize)]
struct Document<'a> {
    cudnn_graph_tuning: u32,
    entries: Vec<&'a TunedPlan>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DocumentIn {
    cudnn_graph_tuning: u64,
    entries: Vec<serde_json::Value>,
}

impl TuningStore {
    /// An empty store.
    pub fn new() -> Self {
        TuningStore::default()
    }

    /// How many keys it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry, ordered by key.
    pub fn entries(&self) -> impl Iterator<Item = &TunedPlan> {
        self.entries.values()
    }

    /// Reads a store: size, format, then every entry checked (its key, its parts' engines, its
    /// times finite and non-negative), each key once.
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::engines::{TuningStore, TuningStoreError};
    /// let store = TuningStore::from_bytes(br#"{"cudnn_graph_tuning": 1, "entries": []}"#)?;
    /// assert!(store.is_empty());
    /// let e = TuningStore::from_bytes(br#"{"cudnn_graph_tuning": 7, "entries": []}"#).unwrap_err();
    /// assert!(matches!(e, TuningStoreError::Format { found: 7 }));
    /// assert!(TuningStore::from_bytes(b"\xff{").is_err());
    /// # Ok::<(), TuningStoreError>(())
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TuningStoreError> {
        if bytes.len() > MAX_TUNING_STORE_BYTES {
            return Err(TuningStoreError::TooLarge(bytes.len() as u64));
        }
        let doc: DocumentIn = serde_json::from_slice(bytes).map_err(|e| TuningStoreError::Malformed(e.to_string()))?;
        if doc.cudnn_graph_tuning != u64::from(TUNING_FORMAT) {
            return Err(TuningStoreError::Format { found: doc.cudnn_graph_tuning });
        }
        let mut store = TuningStore::new();
        let mut first = BTreeMap::new();
        for (index, value) in doc.entries.into_iter().enumerate() {
            let graph = value.get("graph_name").and_then(|v| v.as_str()).unwrap_or("?").to_string();
            let bad = |reason: String| TuningStoreError::BadEntry { index, graph: graph.clone(), reason };
            let entry: TunedPlan = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
            let key = entry.check().map_err(bad)?;
            if let Some(&first) = first.get(&slot(&key)) {
                return Err(TuningStoreError::DuplicateKey { first, second: index, key });
            }
            first.insert(slot(&key), index);
            store.entries.insert(slot(&key), entry);
        }
        Ok(store)
    }

    /// The store as JSON, entries ordered by key (so equal stores write equal bytes).
    pub fn to_bytes(&self) -> Vec<u8> {
        let doc = Document { cudnn_graph_tuning: TUNING_FORMAT, entries: self.entries.values().collect() };
        // A store of plain records (strings, numbers, finite floats) always serializes.
        serde_json::to_vec_pretty(&doc).unwrap_or_default()
    }

    /// Reads the store at `path`, refusing a file over [`MAX_TUNING_STORE_BYTES`] before reading
    /// it; a missing file is an empty store.
    pub fn read(path: &Path) -> Result<Self, TuningStoreError> {
        use std::io::Read;
        let io = |source| TuningStoreError::Io { path: path.to_path_buf(), source };
        let file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TuningStore::new()),
            Err(e) => return Err(io(e)),
        };
        let limit = MAX_TUNING_STORE_BYTES as u64;
        let len = file.metadata().map_err(io)?.len();
        if len > limit {
            return Err(TuningStoreError::TooLarge(len));
        }
        let mut bytes = Vec::new();
        file.take(limit + 1).read_to_end(&mut bytes).map_err(io)?;
        Self::from_bytes(&bytes)
    }

    /// Writes the store to `path` so that no reader sees a torn file (a temporary in the same
    /// directory, synced, renamed over it).
    pub fn write(&self, path: &Path) -> Result<(), TuningStoreError> {
        super::disk::write_atomically(path, &self.to_bytes())
            .map_err(|source| TuningStoreError::Io { path: path.to_path_buf(), source })
    }

    /// The entry of `key`: `Ok(Some)` a hit; `Ok(None)` where the store has nothing of this
    /// graph; a [`TuningWarning::Foreign`] where it has the graph (fingerprint and binding) only
    /// for other SMs or cuDNN versions, which are never used.
    ///
    /// An entry recorded without a binding (by `cudnn-graph tune` from a structural JSON, or by
    /// any untyped build) serves a key of the same fingerprint, SM and cuDNN version whatever its
    /// binding: the fingerprint covers every dim, stride and type, so a `graph!` type at
    /// `S = 128` is the graph `tune --dyn` planned at 128. An entry of the key's own binding
    /// comes first.
    ///
    /// ```
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::engines::{PlanKey, TuningStore};
    /// let key = PlanKey { graph_fingerprint: 1, binding: Some("S = 128".into()), sm: Some(90), cudnn_version: 91900 };
    /// assert_eq!(TuningStore::new().lookup(&key), Ok(None));
    /// ```
    pub fn lookup(&self, key: &PlanKey) -> Result<Option<&TunedPlan>, TuningWarning> {
        if let Some(entry) = self.entries.get(&slot(key)) {
            return Ok(Some(entry));
        }
        let unbound = PlanKey { binding: None, ..key.clone() };
        if let Some(entry) = self.entries.get(&slot(&unbound)) {
            return Ok(Some(entry));
        }
        let found: Vec<(Option<u32>, usize)> = self
            .entries
            .keys()
            .filter(|(fp, binding, _, _)| {
                *fp == key.graph_fingerprint && (*binding == key.binding || binding.is_none())
            })
            .map(|(_, _, sm, version)| (*sm, *version))
            .collect();
        if found.is_empty() {
            Ok(None)
        } else {
            Err(TuningWarning::Foreign { wanted: key.clone(), found })
        }
    }

    /// Files `entry` under its key, replacing what was there; the key, or `None` (and nothing
    /// filed) where the entry fails its check.
    pub fn insert(&mut self, entry: TunedPlan) -> Option<PlanKey> {
        let key = entry.check().ok()?;
        self.entries.insert(slot(&key), entry);
        Some(key)
    }

    /// Merges `other` into this store: every key of either; for a key both hold, the newer
    /// record (by [`TunedPlan::recorded_at`]; this store's on a tie), with a
    /// [`MergeConflict`] where the two chose different plans.
    pub fn merge(&mut self, other: &TuningStore) -> MergeReport {
        let mut report = MergeReport::default();
        for (slot, theirs) in &other.entries {
            match self.entries.get(slot) {
                None => {
                    self.entries.insert(slot.clone(), theirs.clone());
                    report.added += 1;
                }
                Some(ours) => {
                    let newer = theirs.recorded_at > ours.recorded_at;
                    if ours.choice() != theirs.choice() {
                        let (kept, dropped) = if newer { (theirs, ours) } else { (ours, theirs) };
                        report.conflicts.push(MergeConflict {
                            key: kept.key().unwrap_or_else(|| unreachable_key(slot)),
                            kept: kept.describe(),
                            dropped: dropped.describe(),
                            recorded_at: (kept.recorded_at, dropped.recorded_at),
                        });
                    }
                    if newer {
                        self.entries.insert(slot.clone(), theirs.clone());
                        report.replaced += 1;
                    } else {
                        report.kept += 1;
                    }
                }
            }
        }
        report
    }
}

/// The key of a slot (every entry filed was checked, so its own key is always there; this is
/// the same key, rebuilt from the slot).
fn unreachable_key(slot: &Slot) -> PlanKey {
    PlanKey { graph_fingerprint: slot.0, binding: slot.1.clone(), sm: slot.2, cudnn_version: slot.3 }
}

/// Where a [`TunedBuild`]'s plan came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TuneSource {
    /// The store's entry, built with [`ExecutionPlan::build_chosen`]: nothing timed.
    Store,
    /// Built with every candidate and autotuned (then recorded).
    Measured,
}

/// A plan from [`TuningFile::plan`].
#[derive(Debug)]
pub struct TunedBuild {
    /// The plan, with the choice autotuning made (now or in the process that recorded it).
    pub plan: ExecutionPlan,
    /// Where the choice came from.
    pub source: TuneSource,
    /// The table, when autotuning ran now.
    pub report: Option<AutotuneReport>,
    /// Entries not used, and why; a store that could not be written.
    pub warnings: Vec<TuningWarning>,
}

/// A [`TuningStore`] behind a file, shared by threads: lookups in memory, each new record
/// written through (merged with the file as other processes left it). `Send + Sync`.
///
/// ```no_run
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::backend::{BuildOptions, Cudnn};
/// use cudnn_graph::engines::{AutotuneOptions, TuneSource, TuningFile};
/// use cudnn_graph::payload::plan::Expect;
/// # fn graph() -> cudnn_graph::Graph { unimplemented!() }
/// let store = TuningFile::open("/var/cache/cudnn-graph/tuning.json")?;
/// let cudnn = Cudnn::new(cudnn_graph::backend::cuda_context(0)?.default_stream())?;
/// let options = BuildOptions::default().measure_partitionings();
/// let built = store.plan(&cudnn, &graph(), &Expect::default(), &options, &AutotuneOptions::default())?;
/// for w in &built.warnings {
///     eprintln!("{w}");
/// }
/// // The first process measures; every later one (here or where the file is copied) does not.
/// println!("{:?}: {}", built.source, built.plan.selected());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct TuningFile {
    store: Mutex<TuningStore>,
    path: Option<PathBuf>,
}

/// The stores [`TuningFile::from_env`] opened, by path: one per file and process, shared.
static FROM_ENV: Mutex<Vec<(PathBuf, Arc<TuningFile>)>> = Mutex::new(Vec::new());

impl TuningFile {
    /// The store at `path` (an empty one if the file does not exist yet; its directory is
    /// created when first written).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TuningStoreError> {
        let path = path.as_ref().to_path_buf();
        let store = TuningStore::read(&path)?;
        Ok(TuningFile { store: Mutex::new(store), path: Some(path) })
    }

    /// A store in memory only, starting from `store`.
    pub fn in_memory(store: TuningStore) -> Self {
        TuningFile { store: Mutex::new(store), path: None }
    }

    /// The store at the path [`TUNING_STORE_ENV`] (`CUDNN_GRAPH_TUNING_STORE`) names, opened the
    /// first time it is asked for and shared after (every caller of one process gets the same
    /// `Arc`, so records go through one lock); `None` where the variable is unset or empty. A file
    /// that is not a store is an error each time it is asked for (and is opened again once
    /// mended); a missing file is an empty store, written at the first record.
    pub fn from_env() -> Result<Option<Arc<TuningFile>>, TuningStoreError> {
        Self::shared(std::env::var_os(TUNING_STORE_ENV).filter(|p| !p.is_empty()).map(PathBuf::from))
    }

    /// [`TuningFile::from_env`] of the variable's value `path`.
    fn shared(path: Option<PathBuf>) -> Result<Option<Arc<TuningFile>>, TuningStoreError> {
        let Some(path) = path else { return Ok(None) };
        let mut opened = FROM_ENV.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, file)) = opened.iter().find(|(p, _)| *p == path) {
            return Ok(Some(file.clone()));
        }
        let file = Arc::new(TuningFile::open(&path)?);
        tracing::debug!(path = %path.display(), entries = file.snapshot().len(), "tuning store opened");
        opened.push((path, file.clone()));
        Ok(Some(file))
    }

    /// The file, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// A copy of the store as it is now.
    pub fn snapshot(&self) -> TuningStore {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TuningStore> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `entry` and writes the file: the file as it is now (other processes may have
    /// written it) merged with this store, so that no one's records are lost. Writers of one file
    /// take turns: each holds an exclusive lock on `PATH.lock` (beside the store; created, and
    /// left for the next writer) from its read of the file to its atomic rename, so a record
    /// another process wrote between this one's read and its write cannot be overwritten. A file
    /// that is no longer a store is replaced by this one's records.
    pub fn record(&self, entry: TunedPlan) -> Result<(), TuningStoreError> {
        let mut store = self.lock();
        store.insert(entry);
        let Some(path) = &self.path else { return Ok(()) };
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| TuningStoreError::Io { path, source }
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        let lock_path = lock_path(path);
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        lock.lock().map_err(io(&lock_path))?;
        match TuningStore::read(path) {
            Ok(on_disk) => {
                store.merge(&on_disk);
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "tuning store: the file is not a store: replaced")
            }
        }
        // The lock is released when `lock` is closed, after the rename.
        store.write(path)
    }
}

/// The lock file of the store at `path`: `tuning.json` → `tuning.json.lock`.
fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".lock");
    path.with_file_name(name)
}

/// The autotuned plan of `graph`: from `file`'s entry of its key where there is one (built with
/// [`ExecutionPlan::build_chosen`], nothing timed), else built with every candidate and tuned by
/// `tune`, then recorded into `file` (without a file, only built and tuned). See
/// [`TuningFile::plan`]. Where `tune` times on `cudnn`'s GPU (`on_gpu`), a deviceless `cudnn`
/// refuses a miss before building: every candidate would be compiled for nothing.
pub(super) fn build_tuned(
    file: Option<&TuningFile>,
    cudnn: &Cudnn,
    graph: &Graph,
    expect: &Expect,
    options: &BuildOptions,
    on_gpu: bool,
    tune: impl FnOnce(&mut ExecutionPlan) -> Result<AutotuneReport, BackendError>,
) -> crate::Result<TunedBuild> {
    let start = Instant::now();
    let key = PlanKey::new(cudnn, graph, expect);
    let mut warnings = Vec::new();
    if let Some(file) = file {
        match file.recorded_plan(cudnn, graph, &key, options) {
            Ok(Some(plan)) => return Ok(TunedBuild { plan, source: TuneSource::Store, report: None, warnings }),
            Ok(None) => {}
            Err(w) => warnings.push(w),
        }
    }
    if on_gpu && !cudnn.is_online() {
        // What autotuning the deviceless plan would say, before compiling every candidate.
        return Err(BackendError::DevicelessPlan { graph: graph.name.clone() }.into());
    }
    let all = BuildOptions { build_all: true, ..options.clone() };
    let mut plan = ExecutionPlan::build(cudnn, graph, &all)?;
    let report = tune(&mut plan)?;
    if let Some(file) = file {
        let recorded_at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if let Err(e) = file.record(TunedPlan::of(&key, &plan, &report, recorded_at)) {
            let w = TuningWarning::NotSaved { reason: e.to_string() };
            tracing::warn!("{w}");
            warnings.push(w);
        }
        tracing::debug!(
            fingerprint = format_args!("{:#018x}", key.graph_fingerprint),
            elapsed_us = crate::micros(start.elapsed()),
            "tuning store miss: autotuned and recorded"
        );
    }
    Ok(TunedBuild { plan, source: TuneSource::Measured, report: Some(report), warnings })
}

impl TuningFile {
    /// The plan this store recorded for `key` (`graph` on `cudnn`), built as recorded
    /// ([`ExecutionPlan::build_chosen`]: one engine config per part, nothing timed): `Ok(None)`
    /// where the store has no entry for it (or `options` name an engine or candidate, which is
    /// their own choice; or demand one kernel, which a partitioned entry is not); a warning
    /// (traced too) where it has one only for other targets, or one that does not build here.
    pub(super) fn recorded_plan(
        &self,
        cudnn: &Cudnn,
        graph: &Graph,
        key: &PlanKey,
        options: &BuildOptions,
    ) -> Result<Option<ExecutionPlan>, TuningWarning> {
        let start = Instant::now();
        if options.engine.is_some() || options.candidate.is_some() {
            return Ok(None);
        }
        let fits = |parts: &Vec<ChosenPart>| options.fusion != Fusion::Single || parts.len() == 1;
        let found = self.lock().lookup(key).map(|e| e.and_then(TunedPlan::chosen).filter(fits));
        let built = match found {
            Ok(None) => return Ok(None),
            Ok(Some(parts)) => ExecutionPlan::build_chosen(cudnn, graph, &parts, options)
                .map_err(|e| TuningWarning::Stale { key: key.clone(), reason: e.to_string() }),
            Err(foreign) => Err(foreign),
        };
        match &built {
            Ok(plan) => tracing::debug!(
                fingerprint = format_args!("{:#018x}", key.graph_fingerprint),
                parts = plan.parts().len(),
                elapsed_us = crate::micros(start.elapsed()),
                "tuning store hit"
            ),
            Err(w) => tracing::warn!("{w}"),
        }
        built.map(Some)
    }

    /// [`TuningFile::plan`] with `tune` in place of [`autotune`](super::autotune) on a miss (to
    /// time with the application's own inputs, say, or with injected times in a test).
    pub fn plan_with(
        &self,
        cudnn: &Cudnn,
        graph: &Graph,
        expect: &Expect,
        options: &BuildOptions,
        tune: impl FnOnce(&mut ExecutionPlan) -> Result<AutotuneReport, BackendError>,
    ) -> crate::Result<TunedBuild> {
        build_tuned(Some(self), cudnn, graph, expect, options, false, tune)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(id: i64, knob: i64) -> EngineRecord {
        EngineRecord {
            id: Some(id),
            tag: format!("eng{id}_k24={knob}"),
            knobs: vec![(24, knob)],
            behavior_notes: Vec::new(),
            numerical_notes: vec!["TENSOR_CORE".into()],
        }
    }

    /// A record of graph `fp` on sm 90 with cuDNN `version`: one part running `mm, relu` on
    /// engine `id`, recorded at `at`.
    fn record(fp: u64, version: usize, id: i64, at: u64) -> TunedPlan {
        TunedPlan {
            graph_name: "mm_relu".into(),
            graph_fingerprint: format!("{fp:#018x}"),
            binding: None,
            sm: Some(90),
            cudnn_version: version,
            recorded_at: at,
            parts: vec![TunedPart {
                nodes: vec!["mm".into(), "relu".into()],
                engine: engine(id, 41),
                refused: None,
                measured: None,
            }],
            partitioning: 0,
            partitionings: vec![PartitioningTime {
                parts: vec![vec!["mm".into(), "relu".into()]],
                median_us: Some(10.5),
            }],
            candidates: vec![
                CandidateTime {
                    partitioning: 0,
                    part: 0,
                    candidate: 0,
                    tag: format!("eng{id}_k24=41"),
                    median_us: 10.5,
                    min_us: 10.25,
                    samples: 7,
                    runs: 700,
                },
                CandidateTime {
                    partitioning: 0,
                    part: 0,
                    candidate: 1,
                    tag: "eng0".into(),
                    median_us: 14.0,
                    min_us: 13.5,
                    samples: 5,
                    runs: 500,
                },
            ],
        }
    }

    fn store(records: impl IntoIterator<Item = TunedPlan>) -> TuningStore {
        let mut s = TuningStore::new();
        for r in records {
            assert!(s.insert(r).is_some());
        }
        s
    }

    #[test]
    fn a_store_reads_back_what_it_wrote_byte_for_byte() {
        let s = store([record(1, 91900, 7, 100), record(2, 91900, 3, 200), record(1, 91400, 7, 50)]);
        let bytes = s.to_bytes();
        let again = TuningStore::from_bytes(&bytes).unwrap();
        assert_eq!(again, s);
        assert_eq!(again.to_bytes(), bytes);
        assert_eq!(again.len(), 3);
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.contains("\"cudnn_graph_tuning\": 1"), "{text}");
        assert!(text.contains("\"graph_fingerprint\": \"0x0000000000000001\""), "{text}");
    }

    /// Every kind of bad input is a typed error naming what is wrong, never a panic.
    #[test]
    fn bad_bytes_are_typed_errors() {
        let good = String::from_utf8(store([record(1, 91900, 7, 100)]).to_bytes()).unwrap();
        let cases: Vec<(String, &str)> = vec![
            (good[..good.len() / 2].to_string(), "not a cudnn-graph tuning store"),
            ("[]".into(), "not a cudnn-graph tuning store"),
            (good.replace("\"cudnn_graph_tuning\": 1", "\"cudnn_graph_tuning\": 2"), "format 2"),
            (good.replace("0x0000000000000001", "0xzz"), "is not `0x` and 16 lowercase hex digits"),
            // The fuzzer's: the same number with a leading zero more wrote back as another entry.
            (good.replace("0x0000000000000001", "0x00000000000000001"), "`0x00000000000000001` is not `0x`"),
            (good.replace("0x0000000000000001", "0x000000000000000A"), "is not `0x` and 16 lowercase"),
            (good.replace("10.25", "-1.0"), "candidate `eng7_k24=41` has time"),
            (good.replace("\"id\": 7", "\"id\": null"), "has no engine id"),
            (good.replace("\"partitioning\": 0,\n", "\"partitioning\": 3,\n"), "keeps partitioning 3 of 1"),
            (good.replace("\"runs\": 700", "\"runs\": 700, \"extra\": 1"), "unknown field `extra`"),
            (good.replace("\"median_us\": 10.5,\n", "\"median_us\": 1e999,\n"), "tuning store"),
        ];
        for (text, want) in cases {
            let e = TuningStore::from_bytes(text.as_bytes()).unwrap_err();
            assert!(e.to_string().contains(want), "{want:?} not in {e}");
        }
        let twice = good.replace(
            "\"entries\": [",
            &format!("\"entries\": [{},", serde_json::to_string(&record(1, 91900, 3, 1)).unwrap()),
        );
        assert!(matches!(
            TuningStore::from_bytes(twice.as_bytes()),
            Err(TuningStoreError::DuplicateKey { first: 0, second: 1, .. })
        ));
        let huge = vec![b' '; MAX_TUNING_STORE_BYTES + 1];
        assert!(matches!(TuningStore::from_bytes(&huge), Err(TuningStoreError::TooLarge(_))));
    }

    #[test]
    fn a_merge_keeps_the_newer_record_and_reports_conflicting_choices() {
        // Machine A timed graphs 1 and 2; machine B graph 1 later (another engine won there), graph
        // 2 earlier with the same choice, and graph 3.
        let mut a = store([record(1, 91900, 7, 100), record(2, 91900, 3, 300)]);
        let b = store([record(1, 91900, 9, 200), record(2, 91900, 3, 250), record(3, 91900, 1, 10)]);
        let report = a.merge(&b);
        assert_eq!((report.added, report.replaced, report.kept), (1, 1, 1), "{report:?}");
        assert_eq!(report.conflicts.len(), 1);
        let c = &report.conflicts[0];
        assert_eq!(c.key.graph_fingerprint, 1);
        assert_eq!((c.kept.as_str(), c.dropped.as_str()), ("mm, relu: eng9_k24=41", "mm, relu: eng7_k24=41"));
        assert_eq!(c.recorded_at, (200, 100));
        assert!(c.to_string().contains("kept [mm, relu: eng9_k24=41] (recorded at 200)"), "{c}");
        let key = |fp| PlanKey { graph_fingerprint: fp, binding: None, sm: Some(90), cudnn_version: 91900 };
        assert_eq!(a.lookup(&key(1)).unwrap().unwrap().parts[0].engine.id, Some(9));
        assert_eq!(a.lookup(&key(2)).unwrap().unwrap().recorded_at, 300);
        assert_eq!(a.len(), 3);
        // Merging again changes nothing and reports no conflict.
        let before = a.clone();
        let again = a.merge(&b);
        assert_eq!((again.added, again.replaced, again.conflicts.len()), (0, 0, 0));
        assert_eq!(a, before);
    }

    #[test]
    fn entries_of_another_sm_or_cudnn_are_never_used() {
        let s = store([record(1, 91400, 7, 100), {
            let mut r = record(1, 91900, 7, 100);
            r.sm = Some(100);
            r
        }]);
        let here = PlanKey { graph_fingerprint: 1, binding: None, sm: Some(90), cudnn_version: 91900 };
        let w = s.lookup(&here).unwrap_err();
        let TuningWarning::Foreign { wanted, found } = &w else { panic!("{w}") };
        assert_eq!(wanted, &here);
        assert_eq!(found, &[(Some(90), 91400), (Some(100), 91900)]);
        assert!(
            w.to_string().contains("recorded only for sm 90 with cuDNN 91400, sm 100 with cuDNN 91900: not used"),
            "{w}"
        );
        // Another graph: nothing, no warning. A binding of this one: the entries without a
        // binding would serve it, so they are named too.
        assert_eq!(s.lookup(&PlanKey { graph_fingerprint: 2, ..here.clone() }), Ok(None));
        let bound = PlanKey { binding: Some("M = 4".into()), ..here.clone() };
        assert!(matches!(s.lookup(&bound), Err(TuningWarning::Foreign { found, .. }) if found.len() == 2));
        // Entries of another binding only: nothing, no warning.
        let mut other = record(1, 91400, 7, 100);
        other.binding = Some("M = 8".into());
        assert_eq!(store([other]).lookup(&PlanKey { cudnn_version: 91400, ..bound }), Ok(None));
    }

    /// An entry without a binding (`cudnn-graph tune` of a structural JSON) serves every binding
    /// of its fingerprint on its target; one of the key's own binding comes first.
    #[test]
    fn entries_without_a_binding_serve_every_binding_of_their_graph() {
        let here = |binding: Option<&str>| PlanKey {
            graph_fingerprint: 1,
            binding: binding.map(str::to_string),
            sm: Some(90),
            cudnn_version: 91900,
        };
        let mut s = store([record(1, 91900, 7, 100)]);
        for binding in [None, Some("S = 128"), Some("no runtime dims")] {
            assert_eq!(s.lookup(&here(binding)).unwrap().unwrap().parts[0].engine.id, Some(7), "{binding:?}");
        }
        let mut own = record(1, 91900, 9, 50);
        own.binding = Some("S = 128".into());
        s.insert(own);
        assert_eq!(s.lookup(&here(Some("S = 128"))).unwrap().unwrap().parts[0].engine.id, Some(9));
        assert_eq!(s.lookup(&here(Some("S = 256"))).unwrap().unwrap().parts[0].engine.id, Some(7));
        assert_eq!(s.lookup(&PlanKey { graph_fingerprint: 2, ..here(Some("S = 128")) }), Ok(None));
    }

    #[test]
    fn files_are_written_merged_with_what_other_processes_wrote() {
        let dir = std::env::temp_dir().join(format!("cudnn-graph-store-{}-{}", std::process::id(), line!()));
        let path = dir.join("sub").join("tuning.json");
        let one = TuningFile::open(&path).unwrap();
        let two = TuningFile::open(&path).unwrap();
        one.record(record(1, 91900, 7, 100)).unwrap();
        two.record(record(2, 91900, 3, 100)).unwrap();
        let read = TuningStore::read(&path).unwrap();
        assert_eq!(read.len(), 2, "the second writer kept the first one's record");
        std::fs::write(&path, b"{").unwrap();
        assert!(matches!(TuningFile::open(&path), Err(TuningStoreError::Malformed(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Writers of one file take turns (the `.lock` beside it): threads with a file each, as
    /// processes would be, each writing records of its own at once, lose none of them (without
    /// the lock, a writer's read-merge-write overwrote records written between its read and its
    /// rename).
    #[test]
    fn concurrent_writers_lose_no_record() {
        let dir = std::env::temp_dir().join(format!("cudnn-graph-store-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("tuning.json");
        let (writers, each) = (4u64, 12u64);
        std::thread::scope(|s| {
            for w in 0..writers {
                let path = &path;
                s.spawn(move || {
                    let file = TuningFile::open(path).unwrap();
                    for k in 0..each {
                        file.record(record(1 + w * 100 + k, 91900, 7, k)).unwrap();
                    }
                });
            }
        });
        let read = TuningStore::read(&path).unwrap();
        assert_eq!(read.len() as u64, writers * each, "records lost");
        assert!(lock_path(&path).ends_with("tuning.json.lock"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `CUDNN_GRAPH_TUNING_STORE`'s store: opened once per path and shared (one lock for every
    /// caller); unset, none; a file that is not a store, a typed error each time (not cached,
    /// so a mended file is opened).
    #[test]
    fn the_environment_store_is_opened_once_and_shared() {
        let dir = std::env::temp_dir().join(format!("cudnn-graph-store-env-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tuning.json");
        store([record(1, 91900, 7, 100)]).write(&path).unwrap();
        let a = TuningFile::shared(Some(path.clone())).unwrap().unwrap();
        let b = TuningFile::shared(Some(path.clone())).unwrap().unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!((a.path(), a.snapshot().len()), (Some(path.as_path()), 1));
        assert!(TuningFile::shared(None).unwrap().is_none());
        let bad = dir.join("bad.json");
        std::fs::write(&bad, b"{\"cudnn_graph_tuning\": 1").unwrap();
        assert!(matches!(TuningFile::shared(Some(bad.clone())), Err(TuningStoreError::Malformed(_))));
        std::fs::write(&bad, b"{\"cudnn_graph_tuning\": 1, \"entries\": []}").unwrap();
        assert!(TuningFile::shared(Some(bad)).unwrap().unwrap().snapshot().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The deviceless cases: a miss autotunes (injected times) and records; a later process's
    /// hit builds exactly the recorded partitioning and engines without timing anything.
    mod deviceless {
        use super::*;
        use crate::backend::{BuildOptions, ExecutionPlan};
        use crate::engines::autotune::tune;
        use crate::engines::AutotuneOptions;
        use crate::engines::Timing;

        use crate::test_support::deviceless;

        fn bias_gelu() -> Graph {
            crate::test_support::bf16_bias_gelu("bias_gelu")
        }

        /// Injected times favouring the epilogue cut off after the matmul, and, in every part,
        /// the last built candidate (so the choice differs from the heuristics' pick).
        fn times(plan: &ExecutionPlan, part: Option<usize>) -> Result<Timing, BackendError> {
            let k = part.unwrap_or(0);
            let p = &plan.parts()[k];
            let ops: Vec<&str> = p.graph().nodes.iter().map(|n| n.op.call_name()).collect();
            let base = match (plan.parts().len(), ops.as_slice()) {
                (1, _) => 1000.0,
                (_, ["matmul"]) => 700.0,
                _ => 100.0,
            };
            let last = *p.built().last().unwrap();
            let selected = p.selected().index;
            let median_us = if selected == last { base * 0.5 } else { base };
            Ok(Timing {
                part: k,
                candidate: selected,
                tag: p.selected().tag(),
                median_us,
                min_us: median_us,
                runs: 1,
                samples: 1,
                batch: 1,
            })
        }

        fn choice(plan: &ExecutionPlan) -> Vec<(Vec<String>, String)> {
            plan.parts().iter().map(|p| (p.nodes().to_vec(), p.selected().tag())).collect()
        }

        #[needs_cudnn]
        #[test]
        fn a_hit_builds_the_recorded_plan_and_times_nothing() {
            let Some(cudnn) = deviceless() else { return };
            let dir = std::env::temp_dir().join(format!("cudnn-graph-store-hit-{}", std::process::id()));
            let path = dir.join("tuning.json");
            let _ = std::fs::remove_file(&path);
            let graph = bias_gelu();
            let options = BuildOptions::default().measure_partitionings();
            let expect = Expect::default();
            let tuning = AutotuneOptions::default();

            let first = TuningFile::open(&path).unwrap();
            let mut tuned = 0;
            let miss = first
                .plan_with(&cudnn, &graph, &expect, &options, |plan| {
                    tuned += 1;
                    tune(plan, &tuning, Instant::now(), &mut times)
                })
                .unwrap();
            assert_eq!((miss.source, tuned), (TuneSource::Measured, 1));
            assert!(miss.warnings.is_empty(), "{:?}", miss.warnings);
            let report = miss.report.as_ref().unwrap();
            assert!(report.partitioning > 0, "{report}");
            assert_eq!(miss.plan.parts().len(), 2);

            // What the file holds: the kept plan, every partitioning and candidate timed.
            let stored = TuningStore::read(&path).unwrap();
            let entry = stored.entries().next().unwrap();
            assert_eq!(entry.partitioning, report.partitioning);
            assert_eq!(entry.partitionings.len(), report.partitionings.len());
            let timed: usize = report.partitionings.iter().map(|p| p.timings.len()).sum();
            assert_eq!(entry.candidates.len(), timed);
            assert!(entry.parts[1].measured.is_some(), "{entry:?}");

            // Another process: the file's entry, built as recorded, nothing timed.
            let second = TuningFile::open(&path).unwrap();
            let hit = second
                .plan_with(&cudnn, &graph, &expect, &options, |_| panic!("a hit must not time anything"))
                .unwrap();
            assert_eq!(hit.source, TuneSource::Store);
            assert!(hit.report.is_none() && hit.warnings.is_empty());
            assert_eq!(choice(&hit.plan), choice(&miss.plan));
            assert_eq!(hit.plan.parts()[1].cut(), miss.plan.parts()[1].cut());
            // One plan built per part, and no alternatives: no other candidate compiled.
            assert!(hit.plan.parts().iter().all(|p| p.built().len() == 1));
            assert!(hit.plan.alternatives().is_empty());
            let tags = |p: &ExecutionPlan| p.parts().iter().map(|p| p.selected().tag()).collect::<Vec<_>>();
            let heuristics = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).unwrap();
            assert_ne!(tags(&hit.plan), tags(&heuristics), "the store's choice is not the heuristics' pick");

            // The same file read for another cuDNN version: a warning, and tuned again.
            let mut foreign = TuningStore::new();
            for mut e in stored.entries().cloned() {
                e.cudnn_version += 1;
                foreign.insert(e);
            }
            let third = TuningFile::in_memory(foreign);
            let mut tuned = 0;
            let again = third
                .plan_with(&cudnn, &graph, &expect, &options, |plan| {
                    tuned += 1;
                    tune(plan, &tuning, Instant::now(), &mut times)
                })
                .unwrap();
            assert_eq!((again.source, tuned), (TuneSource::Measured, 1));
            assert!(matches!(again.warnings.as_slice(), [TuningWarning::Foreign { .. }]), "{:?}", again.warnings);
            assert_eq!(third.snapshot().len(), 2, "both versions' entries are kept");

            // An entry whose engine does not build here: stale, tuned again, replaced.
            let mut stale = stored.clone();
            let mut e = stale.entries().next().unwrap().clone();
            e.parts[0].engine = engine(9999, 1);
            stale.insert(e);
            let fourth = TuningFile::in_memory(stale);
            let again = fourth
                .plan_with(&cudnn, &graph, &expect, &options, |plan| tune(plan, &tuning, Instant::now(), &mut times))
                .unwrap();
            assert_eq!(again.source, TuneSource::Measured);
            assert!(matches!(again.warnings.as_slice(), [TuningWarning::Stale { .. }]), "{:?}", again.warnings);
            assert_eq!(
                fourth.snapshot().entries().next().unwrap().parts[0].engine,
                stored.entries().next().unwrap().parts[0].engine
            );

            // A build that demands one kernel does not take the partitioned entry; one that names
            // its engine bypasses the store.
            let fifth = TuningFile::in_memory(stored.clone());
            let mut tuned = 0;
            let single = fifth
                .plan_with(&cudnn, &graph, &expect, &BuildOptions::default().single_kernel(), |plan| {
                    tuned += 1;
                    tune(plan, &tuning, Instant::now(), &mut times)
                })
                .unwrap();
            assert_eq!((single.source, tuned, single.plan.parts().len()), (TuneSource::Measured, 1, 1));
            let named = hit.plan.parts()[0].selected().clone();
            let engine = crate::backend::EngineConfig { id: named.engine_id.unwrap(), knobs: named.knobs.clone() };
            let explicit = BuildOptions { engine: Some(engine), ..BuildOptions::default() };
            let sixth = TuningFile::in_memory(stored.clone());
            let mut tuned = 0;
            let own = sixth
                .plan_with(&cudnn, &graph, &expect, &explicit, |plan| {
                    tuned += 1;
                    tune(plan, &tuning, Instant::now(), &mut times)
                })
                .unwrap();
            assert_eq!((own.source, tuned), (TuneSource::Measured, 1));
            std::fs::remove_dir_all(&dir).unwrap();
        }

        /// A plan cache with a tuning store: a miss builds the recorded plan (no heuristics'
        /// pick, nothing timed) and says so; the next lookup is a memory hit. An entry for
        /// another cuDNN only is not used: a warning, and the usual plan.
        #[needs_cudnn]
        #[test]
        fn a_plan_cache_miss_builds_the_store_entry() {
            use crate::engines::{CacheSource, PlanCache, ServeReason};
            let Some(cudnn) = deviceless() else { return };
            let graph = bias_gelu();
            let expect = Expect::default();
            let options = BuildOptions::default().measure_partitionings();
            let file = TuningFile::in_memory(TuningStore::new());
            let tuned = file
                .plan_with(&cudnn, &graph, &expect, &options, |plan| {
                    tune(plan, &AutotuneOptions::default(), Instant::now(), &mut times)
                })
                .unwrap();
            let recorded = file.snapshot();
            let cache = PlanCache::in_memory().with_tuning_store(file);
            let plain = BuildOptions::default();
            let first = cache.get_or_build(&cudnn, &graph, &expect, &plain).unwrap();
            assert_eq!((first.source, &first.reason), (CacheSource::Built, &ServeReason::Tuned));
            assert!(first.warnings.is_empty(), "{:?}", first.warnings);
            assert_eq!(choice(&first.plan), choice(&tuned.plan));
            assert!(first.plan.parts().iter().all(|p| p.built().len() == 1));
            let again = cache.get_or_build(&cudnn, &graph, &expect, &plain).unwrap();
            assert_eq!(again.source, CacheSource::Memory);
            assert!(std::sync::Arc::ptr_eq(&first.plan, &again.plan));

            let mut foreign = TuningStore::new();
            for mut e in recorded.entries().cloned() {
                e.cudnn_version += 1;
                foreign.insert(e);
            }
            let cache = PlanCache::in_memory().with_tuning_store(TuningFile::in_memory(foreign));
            let built = cache.get_or_build(&cudnn, &graph, &expect, &plain).unwrap();
            assert_eq!(built.reason, ServeReason::Specialized);
            assert_eq!(built.plan.parts().len(), 1, "the heuristics' plan, one kernel");
            assert!(
                matches!(built.warnings.as_slice(), [w] if w.reason.contains("is recorded only for")),
                "{:?}",
                built.warnings
            );
        }

        /// A padded class plan consults the store too: its masked graph at the class bound (what
        /// `cudnn-graph tune --dyn … --padded` tunes) is built as recorded, nothing timed; without
        /// the store, heuristics' pick.
        #[needs_cudnn]
        #[test]
        fn a_class_plan_builds_the_store_entry_of_its_masked_graph() {
            use crate::engines::{CacheSource, PlanCache, ServeReason};
            use crate::ir::ClassGraph;
            use crate::{DataType, GraphBuilder};
            let Some(cudnn) = deviceless() else { return };
            let mut g = GraphBuilder::new("attention");
            let qkv: Vec<_> =
                ["q", "k", "v"].iter().map(|n| g.input(n, DataType::BF16, &[2, 4, 512, 64]).unwrap().into()).collect();
            let o = g.op("sdpa", &qkv, &[("causal".into(), true.into())]).unwrap()[0];
            g.output(o, "o", DataType::BF16).unwrap();
            let class = ClassGraph::new(&g.build().unwrap()).unwrap();
            let (expect, plain) = (Expect::default(), BuildOptions::default());
            let file = TuningFile::in_memory(TuningStore::new());
            let tuned = file
                .plan_with(&cudnn, class.masked(), &expect, &plain, |plan| {
                    tune(plan, &AutotuneOptions::default(), Instant::now(), &mut times)
                })
                .unwrap();
            assert_eq!(tuned.source, TuneSource::Measured);
            let heuristics = PlanCache::in_memory().class_plan_of(&cudnn, &class, &expect, &plain).unwrap();
            assert_eq!(heuristics.reason, ServeReason::Specialized);
            assert_ne!(choice(&heuristics.plan), choice(&tuned.plan), "the injected times pick another engine");
            let cache = PlanCache::in_memory().with_tuning_store(file);
            let got = cache.class_plan_of(&cudnn, &class, &expect, &plain).unwrap();
            assert_eq!((got.source, &got.reason), (CacheSource::Built, &ServeReason::Tuned));
            assert!(got.warnings.is_empty(), "{:?}", got.warnings);
            assert_eq!(choice(&got.plan), choice(&tuned.plan));
            assert!(got.plan.parts().iter().all(|p| p.built().len() == 1), "one candidate built");
        }

        /// [`build_autotuned`](crate::engines::build_autotuned) through the store
        /// [`AutotuneOptions::tuning_store`] names: a miss measures once and records into the
        /// file; a later process's options find it and time nothing (the public function,
        /// which measures on the GPU, succeeds on a deviceless context only because it measures
        /// nothing); options without a store measure; a recorded choice that no longer covers
        /// the graph, or one for another cuDNN only, is measured again with a warning.
        #[needs_cudnn]
        #[test]
        fn autotune_options_consult_the_store_they_name() {
            use crate::engines::autotune::build_autotuned_with;
            use crate::engines::build_autotuned;
            let Some(cudnn) = deviceless() else { return };
            let dir = std::env::temp_dir().join(format!("cudnn-graph-store-options-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let path = dir.join("tuning.json");
            let graph = bias_gelu();
            let options = BuildOptions::default().measure_partitionings();
            let expect = Expect::default();
            fn counted<'a>(
                count: &'a mut usize,
                tuning: &AutotuneOptions,
            ) -> impl FnOnce(&mut ExecutionPlan) -> Result<AutotuneReport, BackendError> + 'a {
                let tuning = tuning.clone();
                move |plan| {
                    *count += 1;
                    tune(plan, &tuning, Instant::now(), &mut times)
                }
            }
            let opened = || AutotuneOptions::default().tuning_store(TuningFile::open(&path).unwrap());

            // A miss: measured once, recorded into the file.
            let tuning = opened();
            let mut tuned = 0;
            let miss =
                build_autotuned_with(&cudnn, &graph, &expect, &options, &tuning, false, counted(&mut tuned, &tuning))
                    .unwrap();
            assert_eq!((miss.source, tuned), (TuneSource::Measured, 1));
            assert!(miss.report.as_ref().unwrap().candidates_timed() > 1);
            assert!(miss.warnings.is_empty(), "{:?}", miss.warnings);
            assert_eq!(TuningStore::read(&path).unwrap().len(), 1);

            // Another process: its options open the file; nothing timed, the recorded plan built.
            let tuning = opened();
            let mut tuned = 0;
            let hit =
                build_autotuned_with(&cudnn, &graph, &expect, &options, &tuning, false, counted(&mut tuned, &tuning))
                    .unwrap();
            assert_eq!((hit.source, tuned), (TuneSource::Store, 0));
            assert!(hit.report.is_none() && hit.warnings.is_empty());
            assert_eq!(choice(&hit.plan), choice(&miss.plan));
            let public = build_autotuned(&cudnn, &graph, &expect, &options, &opened()).unwrap();
            assert_eq!((public.source, choice(&public.plan)), (TuneSource::Store, choice(&miss.plan)));
            // Without the store, the public function measures, which a deviceless context refuses.
            let off = AutotuneOptions::default().without_tuning_store();
            let e = build_autotuned(&cudnn, &graph, &expect, &options, &off).unwrap_err();
            assert!(e.to_string().contains("deviceless"), "{e}");
            let mut tuned = 0;
            let measured =
                build_autotuned_with(&cudnn, &graph, &expect, &options, &off, false, counted(&mut tuned, &off));
            assert_eq!((measured.unwrap().source, tuned), (TuneSource::Measured, 1));

            // A recorded choice whose parts no longer cover the graph: measured again, with a
            // warning naming why, and the file's entry replaced by one that builds.
            let mut corrupted = TuningStore::read(&path).unwrap();
            let mut entry = corrupted.entries().next().unwrap().clone();
            entry.parts[0].nodes = vec!["no_such_node".into()];
            corrupted.insert(entry);
            // `store` written to the file, then a build through it: measured once.
            let measured_again = |store: TuningStore| {
                store.write(&path).unwrap();
                let tuning = opened();
                let mut tuned = 0;
                let built = build_autotuned_with(
                    &cudnn,
                    &graph,
                    &expect,
                    &options,
                    &tuning,
                    false,
                    counted(&mut tuned, &tuning),
                );
                assert_eq!((built.as_ref().unwrap().source, tuned), (TuneSource::Measured, 1));
                built.unwrap()
            };
            let again = measured_again(corrupted);
            let [TuningWarning::Stale { reason, .. }] = again.warnings.as_slice() else {
                panic!("{:?}", again.warnings)
            };
            assert!(reason.contains("no_such_node"), "{reason}");
            let mended = TuningStore::read(&path).unwrap();
            assert_eq!(mended.entries().next().unwrap().parts[0].nodes, miss.plan.parts()[0].nodes());
            assert_eq!(
                build_autotuned(&cudnn, &graph, &expect, &options, &opened()).unwrap().source,
                TuneSource::Store
            );

            // The same file, recorded for another cuDNN only: never used, measured, both kept.
            let mut foreign = TuningStore::new();
            for mut e in mended.entries().cloned() {
                e.cudnn_version += 1;
                foreign.insert(e);
            }
            let again = measured_again(foreign);
            assert!(matches!(again.warnings.as_slice(), [TuningWarning::Foreign { .. }]), "{:?}", again.warnings);
            assert_eq!(TuningStore::read(&path).unwrap().len(), 2);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}
