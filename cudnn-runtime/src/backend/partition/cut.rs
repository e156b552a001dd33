//! Why a part starts a new kernel: the op pair and the rule ([`Cut`], [`CutReason`]), as plans,
//! errors and payloads report it.

use std::fmt;

use crate::ir::Node;

/// Why a part does not share the previous part's kernel: the op pair and the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// The node before the boundary (whose output the next part reads, where one does), and its
    /// op.
    pub before: (String, &'static str),
    /// The first node of the part, and its op.
    pub after: (String, &'static str),
    /// The rule.
    pub reason: CutReason,
}

/// The rule behind a [`Cut`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CutReason {
    /// Both are anchors: cuDNN fuses one per kernel.
    SecondAnchor,
    /// The op before takes no elementwise epilogue.
    NoEpilogue,
    /// The op after takes no elementwise prologue.
    NoPrologue,
    /// The op after reads the memory a view (reshape, transpose, slice) of an earlier part's
    /// output describes, so it runs after that part.
    AfterView,
    /// Nothing connects the two: the op after reads only memory.
    Independent,
    /// The op before is a fill ([`crate::Graph::is_fill`]), which is a kernel of its own: cuDNN
    /// 9.19 plans a fill fused into the kernel reading it (as a matmul's prologue), but on the
    /// H200 that kernel computed wrong results (a bias gradient's matmul by ones: relative error
    /// 1.0, 2026-12-05).
    AfterFill,
    /// cuDNN refused the fused part (at this build, or at an earlier one of the same part with
    /// the same cuDNN version and GPU): the message says how.
    Refused(String),
    /// cuDNN fuses the two, but this partitioning cuts an anchor's elementwise epilogue (or
    /// prologue) off into a kernel of its own so that autotuning can time it against the fused
    /// plan ([`Fusion::Measure`](crate::backend::Fusion::Measure)); it has not been timed yet.
    ToMeasure,
    /// cuDNN fuses the two, and autotuning measured them faster as separate kernels
    /// ([`Fusion::Measure`](crate::backend::Fusion::Measure)): the message gives the times.
    MeasuredFaster(String),
}

impl fmt::Display for Cut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ((a, a_op), (b, b_op)) = (&self.before, &self.after);
        write!(f, "`{a}` ({a_op}) | `{b}` ({b_op}): ")?;
        match &self.reason {
            CutReason::SecondAnchor => {
                write!(f, "both are anchor ops, and cuDNN fuses one (matmul, convolution, normalization, attention) per kernel")
            }
            CutReason::NoEpilogue => write!(f, "cuDNN fuses no elementwise op after a {a_op}"),
            CutReason::NoPrologue => write!(f, "cuDNN fuses no elementwise op before a {b_op}"),
            CutReason::AfterView => write!(f, "`{b}` reads a view of memory an earlier part writes"),
            CutReason::Independent => write!(f, "`{b}` reads only memory, nothing computed in the kernel before"),
            CutReason::AfterFill => {
                write!(f, "a fill is its own kernel (cuDNN 9.19 computed one fused into its reader wrongly)")
            }
            CutReason::Refused(why) => write!(f, "cuDNN refused them fused: {why}"),
            CutReason::ToMeasure => {
                write!(f, "cuDNN fuses them; cut so that autotuning times them apart (not timed yet)")
            }
            CutReason::MeasuredFaster(why) => write!(f, "measured faster as separate kernels: {why}"),
        }
    }
}

/// A node as a cut names it: its name and its op.
pub(crate) fn node_ref(node: &Node) -> (String, &'static str) {
    (node.name.clone(), node.op.call_name())
}
