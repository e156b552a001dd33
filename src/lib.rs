//! # cudnn-graph
//!
//! Fused cuDNN graphs declared as Rust types. The [`graph!`] macro checks shapes, dtypes and op
//! ports at compile time and generates a type that builds the graph, runs it on the CPU reference
//! engine, and (with the default `cudnn` feature) lowers it to cuDNN's backend API, plans and
//! executes it.
//!
//! ```
//! use cudnn_graph::graph;
//! use half::bf16;
//!
//! graph! {
//!     /// y = relu(a · b + bias)
//!     pub MatmulBiasRelu<const N: usize, const K: usize, dyn M>(
//!         a: bf16[1, M, K],
//!         b: bf16[1, K, N],
//!         bias: bf16[1, 1, N],
//!     ) -> (y: bf16[1, M, N]) {
//!         let c = matmul(a, b);
//!         let d = add(c, bias);
//!         y = relu(d);
//!     }
//! }
//!
//! let g = MatmulBiasRelu::<2, 3>::new(2);
//! let a: Vec<bf16> = [1.0, -2.0, 0.5, 3.0, 1.0, -1.0].map(bf16::from_f32).to_vec();
//! let b: Vec<bf16> = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0].map(bf16::from_f32).to_vec();
//! let bias: Vec<bf16> = [0.25, -10.0].map(bf16::from_f32).to_vec();
//! let out = g.reference(MatmulBiasReluInputs { a: &a, b: &b, bias: &bias }).unwrap();
//! assert_eq!(out.y.iter().map(|v| v.to_f32()).collect::<Vec<_>>(), [1.75, 0.0, 2.25, 0.0]);
//! ```
//!
//! The same graphs can be built at run time, without the macro, through [`GraphBuilder`].

#![warn(missing_docs)]

pub use cudnn_macros::graph;
pub use cudnn_runtime::serving;
pub use cudnn_runtime::{
    capabilities, dim, fp8, ir, ops, reference, rng, serialize, shape_class, ArgError, Bits, Context, DataType,
    Element, Error, Fp8E4M3, Fp8E5M2, Graph, GraphBuilder, GraphError, Operand, Tensor, TensorId,
};

#[cfg(feature = "cudnn")]
pub use cudnn_runtime::backend;
#[cfg(feature = "cudnn")]
pub use cudnn_runtime::engines;
#[cfg(feature = "cudnn")]
pub use cudnn_runtime::payload;

pub mod env_report;

/// The names most programs use, for one glob import: the macro and [`GraphType`], the graph IR
/// and its builder, data types and errors, and with the `cudnn` feature the backend's plan,
/// options, context and buffers and the plan cache.
///
/// ```
/// use cudnn_graph::prelude::*;
///
/// let mut g = GraphBuilder::new("scale");
/// let x = g.input("x", DataType::F32, &[2, 3]).unwrap();
/// let y = g.op("mul", &[x.into(), 0.5.into()], &[]).unwrap()[0];
/// g.output(y, "y", DataType::F32).unwrap();
/// let graph: Graph = g.build().unwrap();
/// assert_eq!(graph.outputs().len(), 1);
/// ```
pub mod prelude {
    pub use crate::{graph, GraphType};
    pub use cudnn_runtime::{DataType, Error, Graph, GraphBuilder, Operand, Result, Tensor, TensorId};

    #[cfg(feature = "cudnn")]
    pub use cudnn_runtime::backend::{BuildOptions, Cudnn, DeviceBuffer, ExecutionPlan, Fusion};
    #[cfg(feature = "cudnn")]
    pub use cudnn_runtime::engines::{autotune, AutotuneOptions, PlanCache};
    #[cfg(feature = "cudnn")]
    pub use cudnn_runtime::payload::plan::Expect;
}

/// What every [`graph!`] type is, for code generic over graph types: framework adapters such as
/// `cudnn-graph-candle`, caches keyed by graph type and runtime dims. The macro implements it
/// with the type's own items (`Name::NAME`, `Name::graph`, ...), which `docs/generated.md`
/// describes.
///
/// ```
/// use cudnn_graph::{graph, GraphType};
///
/// graph! {
///     pub Scale<dyn N>(x: f32[N]) -> (y: f32[N]) {
///         y = mul(x, x);
///     }
/// }
///
/// fn describe<G: GraphType>(g: &G) -> String {
///     format!("{} ({}): {} tensors", G::NAME, g.binding(), g.graph().map(|g| g.tensors.len()).unwrap_or(0))
/// }
/// assert_eq!(describe(&Scale::new(4)), "Scale (N = 4): 2 tensors");
/// ```
pub trait GraphType: Copy + Eq + std::hash::Hash + std::fmt::Debug + Send + Sync + 'static {
    /// The graph's name.
    const NAME: &'static str;
    /// The structural fingerprint of the graph type, computed at expansion.
    const FINGERPRINT: u64;
    /// Whether the graph declares `#[fuse(single)]`: its plans must be one cuDNN kernel.
    const SINGLE_KERNEL: bool;
    /// The graph IR with every dim concrete, validated.
    fn graph(&self) -> Result<Graph, ArgError>;
    /// The runtime-dim binding as text (`M = 3`), for errors and cache keys.
    fn binding(&self) -> String;
    /// The runtime dims by name, in declaration order (`[("M", 3)]`).
    fn runtime_dims(&self) -> Vec<(&'static str, usize)>;
}

/// Where the plan of a `graph!` type's `build_cached` came from.
#[cfg(feature = "cudnn")]
#[derive(Debug, Clone)]
pub struct CacheOutcome {
    /// Memory, disk, or built.
    pub source: engines::CacheSource,
    /// Cache entries that were ignored (corrupted, for another key) or could not be written.
    pub warnings: Vec<engines::CacheWarning>,
    /// Time from the call to the plan.
    pub elapsed: std::time::Duration,
}

/// What a `graph!` type's `build_autotuned` did: measured every candidate, or built the choice a
/// tuning store recorded ([`engines::AutotuneOptions::tuning_store`], `CUDNN_GRAPH_TUNING_STORE`)
/// without timing anything.
#[cfg(feature = "cudnn")]
#[derive(Debug, Clone)]
pub struct AutotuneOutcome {
    /// The tuning store's entry ([`engines::TuneSource::Store`]) or measured now.
    pub source: engines::TuneSource,
    /// The table, when this build measured.
    pub report: Option<engines::AutotuneReport>,
    /// Store entries not used (another SM or cuDNN, a choice that no longer builds), a store that
    /// could not be opened or written.
    pub warnings: Vec<engines::TuningWarning>,
    /// Time from the call to the plan.
    pub elapsed: std::time::Duration,
}

#[cfg(feature = "cudnn")]
impl AutotuneOutcome {
    /// How many candidates this build timed (or tried to): 0 for a store hit.
    pub fn candidates_timed(&self) -> usize {
        self.report.as_ref().map_or(0, engines::AutotuneReport::candidates_timed)
    }
}

#[cfg(feature = "cudnn")]
impl std::fmt::Display for AutotuneOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for w in &self.warnings {
            writeln!(f, "{w}")?;
        }
        match &self.report {
            Some(report) => write!(f, "{report}"),
            None => writeln!(
                f,
                "built from the tuning store's entry in {:.0} ms: nothing timed",
                self.elapsed.as_secs_f64() * 1e3
            ),
        }
    }
}

/// Emits its input when this crate was built with the `cudnn` feature (for generated code).
#[cfg(feature = "cudnn")]
#[doc(hidden)]
#[macro_export]
macro_rules! __if_cudnn {
    ($($t:tt)*) => { $($t)* };
}

/// Emits its input when this crate was built with the `cudnn` feature (for generated code).
#[cfg(not(feature = "cudnn"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __if_cudnn {
    ($($t:tt)*) => {};
}

/// What the code generated by [`graph!`] uses. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::__if_cudnn as if_cudnn;
    pub use crate::GraphType;
    pub use cudnn_runtime::ops::AttrValue;
    pub use cudnn_runtime::reference::{run_arrays, Array, HostSlice};
    pub use cudnn_runtime::shape_class::{Buckets, ClassError, ShapeClass};
    pub use cudnn_runtime::{
        ArgError, Bits, Context, DataType, Element, Error, Fp8E4M3, Fp8E5M2, Graph, GraphBuilder, GraphError, Operand,
    };
    pub use half;
    pub use serde;

    /// The serde form of a `graph!` type's value: its name, fingerprint and every dim.
    #[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct GraphDescription {
        graph: String,
        fingerprint: String,
        dims: Vec<(String, i64)>,
    }

    impl GraphDescription {
        /// The description of graph `graph` with these dims.
        pub fn new(graph: &str, fingerprint: u64, dims: Vec<(&str, i64)>) -> Self {
            GraphDescription {
                graph: graph.to_string(),
                fingerprint: format!("{fingerprint:#018x}"),
                dims: dims.into_iter().map(|(n, v)| (n.to_string(), v)).collect(),
            }
        }

        /// Checks the graph type and its const dims.
        pub fn check(&self, graph: &str, fingerprint: u64, consts: &[(&str, i64)]) -> Result<(), String> {
            if self.graph != graph || self.fingerprint != format!("{fingerprint:#018x}") {
                return Err(format!(
                    "this describes graph `{}` (fingerprint {}), not `{graph}` ({fingerprint:#018x})",
                    self.graph, self.fingerprint
                ));
            }
            for (name, value) in consts {
                match self.dims.iter().find(|(n, _)| n == name) {
                    Some((_, v)) if v == value => {}
                    Some((_, v)) => return Err(format!("`{graph}` has {name} = {value}, but the description has {v}")),
                    None => return Err(format!("the description of `{graph}` has no dim {name}")),
                }
            }
            Ok(())
        }

        /// A runtime dim.
        pub fn dim(&self, name: &str) -> Result<usize, String> {
            let (_, v) = self
                .dims
                .iter()
                .find(|(n, _)| n == name)
                .ok_or_else(|| format!("the description of `{}` has no dim {name}", self.graph))?;
            usize::try_from(*v).map_err(|_| format!("dim {name} = {v} is not a size"))
        }
    }

    #[cfg(feature = "cudnn")]
    pub use cudnn_runtime::backend::{
        cudarc, BuildOptions, Cudnn, DeviceBuffer, ExecutionPlan, Fusion, HostScalar, InputBuffer, OutputBuffer,
    };
    #[cfg(feature = "cudnn")]
    pub use cudnn_runtime::engines::{build_autotuned, AutotuneOptions};

    /// The options a `graph!` type declaring `declared` plans with: `options` themselves, unless
    /// the graph demands one kernel and they do not (then a copy with `fusion` set to
    /// [`Fusion::Single`]). An `Auto` graph leaves the caller's choice alone.
    #[cfg(feature = "cudnn")]
    pub fn declared_fusion(options: &BuildOptions, declared: Fusion) -> std::borrow::Cow<'_, BuildOptions> {
        match declared {
            Fusion::Single if options.fusion != Fusion::Single => {
                std::borrow::Cow::Owned(BuildOptions { fusion: Fusion::Single, ..options.clone() })
            }
            _ => std::borrow::Cow::Borrowed(options),
        }
    }
    #[cfg(feature = "cudnn")]
    pub use cudnn_runtime::engines::PlanCache;

    #[cfg(feature = "cudnn")]
    pub use crate::{AutotuneOutcome, CacheOutcome};

    #[cfg(feature = "cudnn")]
    pub use cudnn_runtime::payload::plan::{
        load_payload, parse_payload, parse_signed_payload, write_payload, write_signed_payload, Expect, Payload,
        PayloadKey, PlanOrigin, SerializeOptions,
    };

    /// The message of a `graph!` requirement on const parameters that the macro could only defer
    /// and that this instantiation breaks, built at compile time: the requirement, then the values
    /// the instantiation gives, `here K = 32` (each parameter it involves, then each side that is
    /// an expression: `so HQ * D = 256`). The generated const panics with [`text`](Self::text), so
    /// the error points at the op that needs it. Text past 1 KiB is cut.
    pub struct UnmetRequirement {
        buf: [u8; UNMET_CAP],
        len: usize,
    }

    const UNMET_CAP: usize = 1024;

    impl UnmetRequirement {
        /// The message for `requirement` with the values of `params` and `derived`.
        pub const fn new(requirement: &str, params: &[(&str, i64)], derived: &[(&str, i64)]) -> Self {
            let mut buf = [0u8; UNMET_CAP];
            let mut n = push_str(&mut buf, 0, requirement);
            let mut i = 0;
            while i < params.len() {
                n = push_str(&mut buf, n, if i == 0 { "; here " } else { ", " });
                n = push_str(&mut buf, n, params[i].0);
                n = push_str(&mut buf, n, " = ");
                n = push_int(&mut buf, n, params[i].1);
                i += 1;
            }
            let mut i = 0;
            while i < derived.len() {
                n = push_str(&mut buf, n, if i == 0 { ", so " } else { " and " });
                n = push_str(&mut buf, n, derived[i].0);
                n = push_str(&mut buf, n, " = ");
                n = push_int(&mut buf, n, derived[i].1);
                i += 1;
            }
            UnmetRequirement { buf, len: n }
        }

        /// The message (up to the last whole character, where the cut fell inside one).
        pub const fn text(&self) -> &str {
            let bytes = self.buf.split_at(self.len).0;
            match core::str::from_utf8(bytes) {
                Ok(text) => text,
                Err(e) => match core::str::from_utf8(bytes.split_at(e.valid_up_to()).0) {
                    Ok(text) => text,
                    Err(_) => "",
                },
            }
        }
    }

    /// Appends `text` at `at`, as much as fits; the new end.
    const fn push_str(buf: &mut [u8; UNMET_CAP], mut at: usize, text: &str) -> usize {
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() && at < UNMET_CAP {
            buf[at] = bytes[i];
            at += 1;
            i += 1;
        }
        at
    }

    /// Appends `value` in decimal at `at`, as much as fits; the new end.
    const fn push_int(buf: &mut [u8; UNMET_CAP], at: usize, value: i64) -> usize {
        let mut digits = [0u8; 20];
        let mut len = 0;
        let mut rest = value.unsigned_abs();
        loop {
            digits[len] = b'0' + (rest % 10) as u8;
            len += 1;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        let mut at = if value < 0 { push_str(buf, at, "-") } else { at };
        while len > 0 && at < UNMET_CAP {
            len -= 1;
            buf[at] = digits[len];
            at += 1;
        }
        at
    }

    /// A dim parameter's value as an extent: `usize` values past `i64::MAX` are an error naming
    /// the dim, not a wrapped extent.
    pub fn dim_value(dim: &str, value: usize) -> Result<i64, GraphError> {
        i64::try_from(value).map_err(|_| GraphError::DimTooLarge { dim: dim.to_string(), value: value as u64 })
    }

    /// An extent computed from dim parameters: `value`, the evaluation of
    /// [`SymDim::to_checked_expr`](cudnn_runtime::dim::SymDim::to_checked_expr), is `None` where
    /// it overflows `i64`, an error naming the extent and the values of its parameters `dims`.
    pub fn extent(extent: &str, dims: &[(&str, i64)], value: Option<i64>) -> Result<i64, GraphError> {
        value.ok_or_else(|| GraphError::ExtentOverflow {
            extent: extent.to_string(),
            dims: dims.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
        })
    }

    /// Gathers the host buffer of input `name` into its slot of `values`.
    pub fn set_input(
        graph: &Graph,
        values: &mut [Option<Array>],
        name: &str,
        data: HostSlice<'_>,
    ) -> Result<(), ArgError> {
        let id = graph
            .id_of(name)
            .ok_or_else(|| ArgError::Unexpected { graph: graph.name.clone(), tensor: name.to_string() })?;
        values[id.0] = Some(cudnn_runtime::reference::gather(graph.tensor(id), data)?);
        Ok(())
    }

    /// The reference result for output `name`, in the output's layout.
    pub fn take_output<T: Element>(graph: &Graph, outs: &[Array], name: &str) -> Vec<T> {
        let outputs = graph.outputs();
        let found = outputs.iter().zip(outs).find(|(id, _)| graph.tensor(**id).name == name);
        debug_assert!(found.is_some(), "generated code asks only for declared outputs");
        found.map(|(id, a)| cudnn_runtime::reference::scatter(graph.tensor(*id), a)).unwrap_or_default()
    }

    /// For each declared port (inputs then outputs, by name), its position in `graph`'s I/O order
    /// (`Graph::inputs` then `Graph::outputs`), computed once when a typed plan is built.
    pub fn io_order<const N: usize>(graph: &Graph, ports: [&str; N]) -> Result<[usize; N], ArgError> {
        let io = graph.io();
        let mut order = [0; N];
        for (slot, port) in order.iter_mut().zip(ports) {
            *slot = io
                .iter()
                .position(|id| graph.tensor(*id).name == port)
                .ok_or_else(|| ArgError::Unexpected { graph: graph.name.clone(), tensor: port.to_string() })?;
        }
        Ok(order)
    }

    /// Executes `plan` with device buffers named by port.
    #[cfg(feature = "cudnn")]
    pub fn execute_named(
        plan: &ExecutionPlan,
        cudnn: &Cudnn,
        io: &mut [(&str, DeviceBuffer<'_>)],
        workspace: Option<&mut cudarc::driver::CudaSlice<u8>>,
    ) -> Result<(), Error> {
        Ok(plan.execute_named(cudnn, io, workspace)?)
    }
}

#[cfg(test)]
mod tests {
    use super::__private::UnmetRequirement;

    #[test]
    fn an_unmet_requirement_gives_the_instantiation_values() {
        const M: UnmetRequirement =
            UnmetRequirement::new("D * H must equal 64", &[("D", 8), ("H", -4)], &[("D * H", -32)]);
        assert_eq!(M.text(), "D * H must equal 64; here D = 8, H = -4, so D * H = -32");
        assert_eq!(UnmetRequirement::new("K must equal 64", &[("K", 0)], &[]).text(), "K must equal 64; here K = 0");
        let extreme = UnmetRequirement::new("", &[("A", i64::MIN), ("B", i64::MAX)], &[]);
        assert_eq!(extreme.text(), "; here A = -9223372036854775808, B = 9223372036854775807");
    }

    #[test]
    fn an_unmet_requirement_is_cut_at_a_whole_character() {
        // 1 + 2 · 600 bytes: the 1 KiB cut falls inside the 512th `é`.
        let long = format!("x{}", "é".repeat(600));
        let text = UnmetRequirement::new(&long, &[("K", 1)], &[]).text().to_string();
        assert_eq!(text.len(), 1023);
        assert!(long.starts_with(&text));
    }
}
