//! What heuristics propose and the backend reports: [`Candidate`] engine configurations with
//! their [`Knob`]s and notes, why one was [`Rejection`]-ed, the [`Filter`]s that bar them and the
//! [`HeuristicMode`]s that find them. Plain data (and how each prints), so that
//! [`BackendError::NoPlan`](super::BackendError::NoPlan) can list them without depending on the
//! queries that make them (`heuristics.rs`).

use std::fmt;

use cudarc::cudnn::sys;

use crate::cudnn::Status;

/// A cuDNN heuristic mode (`cudnnBackendHeurMode_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeuristicMode {
    /// `CUDNN_HEUR_MODE_A`: fast, good for most graphs.
    A,
    /// `CUDNN_HEUR_MODE_B`: slower to query, sometimes better choices.
    B,
    /// `CUDNN_HEUR_MODE_FALLBACK`: engines that work, without regard for speed.
    Fallback,
}

impl HeuristicMode {
    pub(crate) fn cudnn_value(self) -> u32 {
        match self {
            HeuristicMode::A => sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_A as u32,
            HeuristicMode::B => sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_B as u32,
            HeuristicMode::Fallback => sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_FALLBACK as u32,
        }
    }
}

impl fmt::Display for HeuristicMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HeuristicMode::A => "A",
            HeuristicMode::B => "B",
            HeuristicMode::Fallback => "fallback",
        })
    }
}

/// One knob choice of an engine config (`CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Knob {
    /// The `cudnnBackendKnobType_t` value.
    pub kind: i32,
    /// The chosen value.
    pub value: i64,
}

impl Knob {
    /// The knob type's name without `CUDNN_KNOB_TYPE_`, if this cuDNN generation knows it.
    pub fn name(&self) -> Option<&'static str> {
        const NAMES: [&str; 44] = [
            "SPLIT_K",
            "SWIZZLE",
            "TILE_SIZE",
            "USE_TEX",
            "EDGE",
            "KBLOCK",
            "LDGA",
            "LDGB",
            "CHUNK_K",
            "SPLIT_H",
            "WINO_TILE",
            "MULTIPLY",
            "SPLIT_K_BUF",
            "TILEK",
            "STAGES",
            "REDUCTION_MODE",
            "CTA_SPLIT_K_MODE",
            "SPLIT_K_SLC",
            "IDX_MODE",
            "SLICED",
            "SPLIT_RS",
            "SINGLEBUFFER",
            "LDGC",
            "SPECFILT",
            "KERNEL_CFG",
            "WORKSPACE",
            "TILE_CGA",
            "TILE_CGA_M",
            "TILE_CGA_N",
            "BLOCK_SIZE",
            "OCCUPANCY",
            "ARRAY_SIZE_PER_THREAD",
            "NUM_C_PER_BLOCK",
            "SPLIT_COLS",
            "TILE_ROWS",
            "TILE_COLS",
            "LOAD_SIZE",
            "CTA_COUNT",
            "STREAM_K",
            "SPLIT_P_SLC",
            "TILE_M",
            "TILE_N",
            "WARP_SPEC_CFG",
            "SWAP_AB",
        ];
        usize::try_from(self.kind).ok().and_then(|i| NAMES.get(i).copied())
    }
}

impl fmt::Display for Knob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}={}", self.value),
            None => write!(f, "knob{}={}", self.kind, self.value),
        }
    }
}

macro_rules! notes {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $value:literal, $text:literal;)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $(
                #[doc = concat!("`", $text, "`")]
                $variant,
            )*
            /// A value this cuDNN generation does not name.
            Other(i32),
        }

        impl $name {
            pub(crate) fn from_cudnn(v: i32) -> Self {
                match v {
                    $($value => $name::$variant,)*
                    other => $name::Other(other),
                }
            }

            /// The note named as its [`Display`](fmt::Display) writes it (cuDNN's name without the
            /// prefix, or `note{value}`), as plan payloads record it; `None` for anything else.
            pub fn from_name(name: &str) -> Option<Self> {
                match name {
                    $($text => Some($name::$variant),)*
                    other => other.strip_prefix("note")?.parse().ok().map(Self::from_cudnn),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    $($name::$variant => f.write_str($text),)*
                    $name::Other(v) => write!(f, "note{v}"),
                }
            }
        }
    };
}

notes! {
    /// A numerical note of an engine (`cudnnBackendNumericalNote_t`).
    NumericalNote {
        TensorCore = 0, "TENSOR_CORE";
        DownConvertInputs = 1, "DOWN_CONVERT_INPUTS";
        ReducedPrecisionReduction = 2, "REDUCED_PRECISION_REDUCTION";
        Fft = 3, "FFT";
        Nondeterministic = 4, "NONDETERMINISTIC";
        Winograd = 5, "WINOGRAD";
        WinogradTile4x4 = 6, "WINOGRAD_TILE_4x4";
        WinogradTile6x6 = 7, "WINOGRAD_TILE_6x6";
        WinogradTile13x13 = 8, "WINOGRAD_TILE_13x13";
        StrictNanProp = 9, "STRICT_NAN_PROP";
    }
}

notes! {
    /// A behavior note of an engine (`cudnnBackendBehaviorNote_t`).
    BehaviorNote {
        RuntimeCompilation = 0, "RUNTIME_COMPILATION";
        RequiresFilterInt8x32Reorder = 1, "REQUIRES_FILTER_INT8x32_REORDER";
        RequiresBiasInt8x32Reorder = 2, "REQUIRES_BIAS_INT8x32_REORDER";
        SupportsCudaGraphNativeApi = 3, "SUPPORTS_CUDA_GRAPH_NATIVE_API";
        CublasltDependency = 4, "CUBLASLT_DEPENDENCY";
    }
}

/// Why a candidate was not used.
#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    /// cuDNN refused it while it was described or built.
    Cudnn {
        /// The call that failed (`cudnnBackendFinalize`, ...).
        call: &'static str,
        /// The attribute involved, if any.
        attribute: Option<sys::cudnnBackendAttributeName_t>,
        /// What cuDNN returned.
        status: Status,
        /// `cudnnGetLastErrorString`.
        message: String,
    },
    /// It needs more workspace than [`crate::backend::BuildOptions::max_workspace_bytes`].
    Workspace {
        /// Bytes it needs.
        required: usize,
        /// The limit.
        limit: usize,
    },
    /// It needs more shared memory than [`crate::backend::BuildOptions::max_shared_memory_bytes`].
    SharedMemory {
        /// Bytes per block it needs.
        required: usize,
        /// The limit.
        limit: usize,
    },
    /// Barred by one of the note or engine filters of [`crate::backend::BuildOptions`].
    Filtered(Filter),
    /// The same engine and knobs as an earlier candidate (heuristic modes often agree).
    Duplicate {
        /// The earlier candidate's index.
        of: usize,
    },
    /// Another failure (cuDNN reported a value out of range).
    Other {
        /// What happened.
        message: String,
    },
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Cudnn { call, attribute, status, message } => {
                write!(f, "{call}")?;
                if let Some(a) = attribute {
                    write!(f, " ({a:?})")?;
                }
                write!(f, " failed with {status}")?;
                if !message.is_empty() {
                    write!(f, ": {message}")?;
                }
                Ok(())
            }
            Rejection::Workspace { required, limit } => {
                write!(f, "needs {required} bytes of workspace, over the limit of {limit}")
            }
            Rejection::SharedMemory { required, limit } => {
                write!(f, "needs {required} bytes of shared memory, over the limit of {limit}")
            }
            Rejection::Filtered(filter) => write!(f, "barred by {}: {filter}", filter.name()),
            Rejection::Duplicate { of } => write!(f, "same engine and knobs as candidate #{of}"),
            Rejection::Other { message } => f.write_str(message),
        }
    }
}

/// The filter of [`crate::backend::BuildOptions`] that barred a candidate, with cudnn-frontend's
/// semantics: a `select_*` list keeps the candidates that have *all* of its notes, a `deselect_*`
/// list drops the candidates that have *any* of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Filter {
    /// `select_behavior_notes`: the candidate lacks this note.
    LacksBehaviorNote(BehaviorNote),
    /// `deselect_behavior_notes`: the candidate has this note.
    HasBehaviorNote(BehaviorNote),
    /// `select_numerical_notes`: the candidate lacks this note.
    LacksNumericalNote(NumericalNote),
    /// `deselect_numerical_notes`: the candidate has this note.
    HasNumericalNote(NumericalNote),
    /// `deselect_engines`: the candidate's engine is on the list.
    DeselectedEngine(i64),
}

impl Filter {
    /// The [`crate::backend::BuildOptions`] field that holds this filter.
    pub fn name(&self) -> &'static str {
        match self {
            Filter::LacksBehaviorNote(_) => "select_behavior_notes",
            Filter::HasBehaviorNote(_) => "deselect_behavior_notes",
            Filter::LacksNumericalNote(_) => "select_numerical_notes",
            Filter::HasNumericalNote(_) => "deselect_numerical_notes",
            Filter::DeselectedEngine(_) => "deselect_engines",
        }
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Filter::LacksBehaviorNote(n) => write!(f, "lacks behavior note {n}"),
            Filter::HasBehaviorNote(n) => write!(f, "has behavior note {n}"),
            Filter::LacksNumericalNote(n) => write!(f, "lacks numerical note {n}"),
            Filter::HasNumericalNote(n) => write!(f, "has numerical note {n}"),
            Filter::DeselectedEngine(id) => write!(f, "engine {id} is deselected"),
        }
    }
}

/// Where a candidate stands.
#[derive(Debug, Clone, PartialEq)]
pub enum CandidateState {
    /// Not tried: an earlier candidate was built and [`crate::backend::BuildOptions::build_all`]
    /// is off, or [`crate::backend::BuildOptions::candidate`] asked for another one.
    Untried,
    /// Built into an execution plan.
    Built,
    /// Rejected, and why.
    Rejected(Rejection),
}

/// An engine configuration proposed by heuristics (or read back from a plan's JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Position in the concatenated candidate list.
    pub index: usize,
    /// The heuristic mode that proposed it; `None` for a plan loaded from JSON.
    pub mode: Option<HeuristicMode>,
    /// cuDNN's global engine index; `None` if cuDNN could not describe the config.
    pub engine_id: Option<i64>,
    /// The knob choices.
    pub knobs: Vec<Knob>,
    /// The engine's numerical notes.
    pub numerical_notes: Vec<NumericalNote>,
    /// The engine's behavior notes.
    pub behavior_notes: Vec<BehaviorNote>,
    /// Workspace bytes, when cuDNN could tell without compiling (or, once built, the plan's).
    pub workspace_bytes: Option<usize>,
    /// Shared memory bytes per block, when cuDNN could tell without compiling.
    pub shared_memory_bytes: Option<usize>,
    /// Built, rejected or untried.
    pub state: CandidateState,
}

impl Candidate {
    /// cudnn-frontend's tag for this config: `eng{id}_k{type}={value}...`.
    pub fn tag(&self) -> String {
        let mut s = match self.engine_id {
            Some(id) => format!("eng{id}"),
            None => "eng?".to_string(),
        };
        for k in &self.knobs {
            s += &format!("_k{}={}", k.kind, k.value);
        }
        s
    }

    /// Whether two candidates are the same engine with the same knobs.
    pub(crate) fn same_config(&self, other: &Candidate) -> bool {
        self.engine_id.is_some() && self.engine_id == other.engine_id && self.knobs == other.knobs
    }
}

fn join<T: fmt::Display>(items: &[T]) -> String {
    items.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} ", self.index)?;
        match self.engine_id {
            Some(id) => write!(f, "engine {id}")?,
            None => f.write_str("engine ?")?,
        }
        if let Some(m) = self.mode {
            write!(f, " (mode {m})")?;
        }
        if !self.knobs.is_empty() {
            write!(f, " knobs [{}]", join(&self.knobs))?;
        }
        if !self.numerical_notes.is_empty() {
            write!(f, " numerical [{}]", join(&self.numerical_notes))?;
        }
        if !self.behavior_notes.is_empty() {
            write!(f, " behavior [{}]", join(&self.behavior_notes))?;
        }
        if let Some(w) = self.workspace_bytes {
            write!(f, " workspace {w} B")?;
        }
        match &self.state {
            CandidateState::Untried => f.write_str(": not tried"),
            CandidateState::Built => f.write_str(": built"),
            CandidateState::Rejected(r) => write!(f, ": rejected: {r}"),
        }
    }
}

/// A heuristic mode that failed outright.
#[derive(Debug, Clone, PartialEq)]
pub struct HeuristicFailure {
    /// The mode.
    pub mode: HeuristicMode,
    /// What went wrong.
    pub reason: Rejection,
}

impl fmt::Display for HeuristicFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "heuristics mode {} failed: {}", self.mode, self.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(index: usize, engine: i64, state: CandidateState) -> Candidate {
        Candidate {
            index,
            mode: Some(HeuristicMode::A),
            engine_id: Some(engine),
            knobs: vec![Knob { kind: 2, value: 3 }, Knob { kind: 99, value: 1 }],
            numerical_notes: vec![NumericalNote::TensorCore],
            behavior_notes: vec![BehaviorNote::from_cudnn(0), BehaviorNote::from_cudnn(77)],
            workspace_bytes: Some(4096),
            shared_memory_bytes: None,
            state,
        }
    }

    #[test]
    fn candidates_print_everything_needed_to_act() {
        let c = candidate(
            1,
            8,
            CandidateState::Rejected(Rejection::Cudnn {
                call: "cudnnBackendFinalize",
                attribute: None,
                status: Status::from_sys(sys::cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED),
                message: "no kernel for this shape".into(),
            }),
        );
        assert_eq!(
            c.to_string(),
            "#1 engine 8 (mode A) knobs [TILE_SIZE=3, knob99=1] numerical [TENSOR_CORE] behavior \
             [RUNTIME_COMPILATION, note77] workspace 4096 B: rejected: cudnnBackendFinalize failed with \
             CUDNN_STATUS_NOT_SUPPORTED (3000): no kernel for this shape"
        );
        assert_eq!(c.tag(), "eng8_k2=3_k99=1");
        let w = Rejection::Workspace { required: 10, limit: 4 };
        assert_eq!(w.to_string(), "needs 10 bytes of workspace, over the limit of 4");
        assert!(c.same_config(&candidate(2, 8, CandidateState::Built)));
        assert!(!c.same_config(&candidate(2, 9, CandidateState::Built)));
    }

    #[test]
    fn notes_read_back_from_their_names() {
        for n in [NumericalNote::TensorCore, NumericalNote::WinogradTile4x4, NumericalNote::Other(42)] {
            assert_eq!(NumericalNote::from_name(&n.to_string()), Some(n));
        }
        for n in [BehaviorNote::RuntimeCompilation, BehaviorNote::SupportsCudaGraphNativeApi, BehaviorNote::Other(9)] {
            assert_eq!(BehaviorNote::from_name(&n.to_string()), Some(n));
        }
        assert_eq!(BehaviorNote::from_name("note3"), Some(BehaviorNote::SupportsCudaGraphNativeApi));
        assert_eq!(BehaviorNote::from_name("FAST"), None);
        assert_eq!(NumericalNote::from_name("notex"), None);
    }
}
