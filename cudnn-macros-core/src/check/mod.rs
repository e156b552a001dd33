//! Stage 2: the checks. Builds the graph symbolically and runs each op's shape rule — the very
//! functions the runtime uses (`cudnn_runtime::ops`) — over [`SymDim`]s, collecting every error of
//! the graph in one pass, each on the tokens at fault.
//!
//! Rules, one function each in the submodules:
//! - dim parameters are `const X: usize` or `dyn X`, each declared once (`decl`);
//! - `#[fuse(..)]` is given at most once, as `single` or `auto` (`decl`);
//! - every port names a known dtype and dims that are positive literals, declared parameters or
//!   expressions over them (`dims`), and a layout (`order [..]`, `channels_last`) that fits its
//!   rank (`decl`);
//! - names (ports, `let` bindings) are defined once; every name used is defined (`stmt`);
//! - every call names a known op with its arity, attributes and the shape/dtype rule satisfied
//!   (`call`); a list attribute holds integer literals, or, where the op's signature says
//!   `Dims`, positive extents written as port dims are (`dims`), which the shape rule reads
//!   symbolically;
//! - every output is assigned exactly once, with the declared shape and the dtype its op forces,
//!   if any (`stmt`);
//! - every input and intermediate is used (`stmt`).
//!
//! The checker knows no op by name: ports, outputs, attributes and forced dtypes all come from
//! the op's signature and shape rule.

mod attrs;
mod blame;
mod call;
mod decl;
mod dims;
mod fingerprint;
mod stmt;

use std::collections::{HashMap, HashSet};

use cudnn_runtime::dim::{DimCx, SymDim, Symbolic};
use cudnn_runtime::ops::AttrValue;
use cudnn_runtime::DataType;
use proc_macro2::Span;
use syn::Ident;

use crate::parse::{GraphDef, Stmt};
use crate::Ctxt;

/// A port with resolved type and dims.
#[derive(Debug, Clone)]
pub struct Port {
    /// The port's name, as declared.
    pub name: Ident,
    /// `None` if the dtype was unknown (already reported).
    pub dtype: Option<DataType>,
    /// Its dims: literals and parameters.
    pub dims: Vec<SymDim>,
    /// The memory order of the dims, outermost first, when declared (`order [..]` or
    /// `channels_last`); row-major otherwise.
    pub order: Option<Vec<usize>>,
    /// `host`: a host scalar, supplied by value at execute (`Tensor::host_scalar`).
    pub host: bool,
}

/// An operand of a node, as the generated code will pass it.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    /// A tensor of the generated graph, by name.
    Tensor(String),
    /// A numeric literal, passed by value.
    Scalar(f64),
}

/// A node, ready for code generation.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The node's name in the generated graph (the bound name, or a fresh one).
    pub name: String,
    /// The op's call name.
    pub op: &'static str,
    /// The attributes that rebuild the op, defaults omitted; a `Dims` attribute whose extents
    /// are all literals among them.
    pub attrs: Vec<(String, AttrValue)>,
    /// The `Dims` attributes with a symbolic extent (`shape = [B, S, H * D]`), which the
    /// generated code evaluates when it builds the graph.
    pub extents: Vec<(String, Vec<SymDim>)>,
    /// Its operands, in port order.
    pub inputs: Vec<Operand>,
    /// The tensors it produces, in output order.
    pub outputs: Vec<String>,
}

/// The prefix of an unknown extent's name: no parameter can have it (`?` is no identifier).
const UNKNOWN: char = '?';

/// Whether `d` involves an unknown extent.
pub(super) fn is_unknown(d: &SymDim) -> bool {
    d.params().iter().any(|p| p.starts_with(UNKNOWN))
}

/// Symbolic equality where an unknown extent (an output of an op whose rule failed, already
/// reported) equals anything: checking goes on past a mistake without echoing it.
pub(super) struct Unknowns<'a>(pub(super) &'a mut Symbolic);

impl DimCx<SymDim> for Unknowns<'_> {
    fn require_eq(&mut self, a: &SymDim, b: &SymDim) -> bool {
        is_unknown(a) || is_unknown(b) || self.0.require_eq(a, b)
    }

    fn require_eq_count(&mut self, a: &[SymDim], b: &[SymDim]) -> bool {
        a.iter().chain(b).any(is_unknown) || self.0.require_eq_count(a, b)
    }

    fn require_le(&mut self, a: &SymDim, b: &SymDim) -> bool {
        is_unknown(a) || is_unknown(b) || self.0.require_le(a, b)
    }
}

impl Checker<'_> {
    /// A fresh unknown extent.
    pub(super) fn unknown(&mut self) -> SymDim {
        self.unknowns += 1;
        SymDim::Param(format!("{UNKNOWN}{}", self.unknowns))
    }
}

/// A requirement over const parameters that only instantiation decides: two `i64` expressions,
/// equal or ordered.
#[derive(Debug, Clone)]
pub struct ConstCheck {
    /// The left side, as a Rust expression over the const parameters.
    pub lhs: String,
    /// The right side, likewise.
    pub rhs: String,
    /// `lhs <= rhs` (a slice's bound) rather than `lhs == rhs`.
    pub at_most: bool,
    /// Where the failed assertion points.
    pub span: Span,
    /// The assertion's message.
    pub message: String,
    /// The const parameters the two sides involve, each once, in order: the failed assertion
    /// prints their values in the instantiation.
    pub params: Vec<String>,
    /// Each side that is an expression rather than a lone parameter or a literal, as written in
    /// the message (`HQ * D`) and as a Rust expression: the failed assertion prints its value too.
    pub derived: Vec<(String, String)>,
}

impl ConstCheck {
    /// The requirement `a == b` (or `a <= b` where `at_most`) with `message`, spanned on `span`.
    pub(super) fn new(a: &SymDim, b: &SymDim, at_most: bool, span: Span, message: String) -> Self {
        let mut params = Vec::new();
        for p in a.params().into_iter().chain(b.params()) {
            if !params.contains(&p) {
                params.push(p);
            }
        }
        let derived = [a, b]
            .into_iter()
            .filter(|side| matches!(side, SymDim::Expr(_)))
            .map(|side| (side.to_string(), side.to_expr()))
            .collect();
        ConstCheck { lhs: a.to_expr(), rhs: b.to_expr(), at_most, span, message, params, derived }
    }
}

/// How many kernels the graph may become (`#[fuse(..)]`): the runtime's `Fusion`, which the
/// checker cannot name (it lives behind cudnn-runtime's `cudnn` feature, which the macro does
/// not build).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fusion {
    /// `#[fuse(auto)]`, the default: the caller's build options decide.
    Auto,
    /// `#[fuse(single)]`: one kernel, or the build fails.
    Single,
}

/// The checked graph.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The compute data type (`#[compute(..)]`, `f32` by default).
    pub compute: DataType,
    /// The intermediate data type (`#[intermediate(..)]`, `f32` by default).
    pub intermediate: DataType,
    /// The fusion policy (`#[fuse(..)]`, [`Fusion::Auto`] by default).
    pub fusion: Fusion,
    /// The input ports, in declaration order.
    pub inputs: Vec<Port>,
    /// The output ports, in declaration order.
    pub outputs: Vec<Port>,
    /// The nodes, in execution order (operands before their users).
    pub nodes: Vec<Node>,
    /// `(output port, the tensor assigned to it)`, in declaration order of the outputs.
    pub bindings: Vec<(String, String)>,
    /// Equalities over const parameters, asserted when the type is instantiated.
    pub const_checks: Vec<ConstCheck>,
    /// The structural fingerprint of the graph type.
    pub fingerprint: u64,
    /// Each `dyn` dim's declared range and classes, in declaration order.
    pub classes: Vec<DimClass>,
}

/// A `dyn` dim's values and classes, checked (`dyn S: 1..=8192 pow2`); a dim declared without
/// them takes every value of at least 1, each its own class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DimClass {
    /// The dim.
    pub name: String,
    /// The smallest value allowed.
    pub min: usize,
    /// The largest value allowed.
    pub max: usize,
    /// How values are grouped.
    pub buckets: ClassBuckets,
}

/// How a [`DimClass`] groups its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassBuckets {
    /// Every value its own class.
    Exact,
    /// Classes end at powers of two.
    Pow2,
    /// Classes end at multiples of this.
    Multiple(usize),
    /// Classes end at these values.
    List(Vec<usize>),
}

/// A name in scope of the body: an input, a `let` binding or an assigned output.
struct Value {
    /// The tensor of the generated graph this value is.
    tensor: String,
    dims: Vec<SymDim>,
    dtype: DataType,
    /// The dtype the producing op forces on this tensor (`OutputMeta::dtype`), which a graph
    /// output bound to it must declare ([`cudnn_runtime::ops::output_type_ok`]).
    forced: Option<DataType>,
    /// Where a forced type is a limit of cuDNN's (`OutputMeta::reason`): the producing port and
    /// why, as the error for a declaration of another type says it ("port O of `sdpa` produces
    /// fp8_e4m3; fp8 attention writes O in its fp8 type: ...").
    forced_why: Option<String>,
    /// Whether the producing op may store its forced `bool` as a float
    /// (`Op::stores_bool_as_float`: a comparison).
    bool_as_float: bool,
    span: Span,
    kind: Kind,
    used: bool,
    /// What is known of its memory, for the views that read it.
    memory: Memory,
}

/// A value's memory as the views reading it see it ([`cudnn_runtime::ops::Op::view_strides`]).
#[derive(Debug, Clone)]
enum Memory {
    /// Laid out as these strides say, whatever reads it: a graph port (its declared layout),
    /// or a view that a slice pinned (a slice reads its base in place, as the library lays it).
    Fixed(Vec<SymDim>),
    /// Computed by an op: packed, as the library lays it out by default.
    Computed(Vec<SymDim>),
    /// A reordering view (a transpose) of a computed tensor: the library may store that tensor
    /// in the order that makes a reshape of this view packed (attention's O stored BSHD so that
    /// its merged heads are a view), so a reshape of it is never refused here.
    Relayable(Vec<SymDim>),
    /// After an error (reported).
    Unknown,
}

/// Packed strides of `dims` in a memory `order` (outermost first; row-major without one);
/// `None` where a stride overflows or the order is not one of `dims` (both reported elsewhere).
fn strides_in_order(dims: &[SymDim], order: Option<&[usize]>) -> Option<Vec<SymDim>> {
    let row_major: Vec<usize> = (0..dims.len()).collect();
    let order = order.unwrap_or(&row_major);
    let mut strides = vec![SymDim::Lit(1); dims.len()];
    let mut next = SymDim::Lit(1);
    for &d in order.iter().rev() {
        *strides.get_mut(d)? = next.clone();
        next = next.checked_mul(dims.get(d)?)?;
    }
    Some(strides)
}

/// A graph port's memory: its declared layout.
fn port_memory(dims: &[SymDim], order: Option<&[usize]>) -> Memory {
    strides_in_order(dims, order).map_or(Memory::Unknown, Memory::Fixed)
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Input,
    Intermediate,
    /// An assigned graph output, readable by later statements (a non-virtual intermediate, as in
    /// cudnn-frontend when an op's output is marked as a graph output and also consumed).
    Output,
}

/// The state of one pass over a graph's body.
struct Checker<'a> {
    cx: &'a Ctxt,
    def: &'a GraphDef,
    /// The checked output ports, in declaration order (parallel to `def.outputs`).
    outputs: &'a [Port],
    /// Dim parameters: name → whether it is bound at run time (`dyn`).
    params: HashMap<String, bool>,
    compute: DataType,
    intermediate: DataType,
    env: HashMap<String, Value>,
    nodes: Vec<Node>,
    const_checks: Vec<ConstCheck>,
    /// Output port → the tensor assigned to it.
    assigned: HashMap<String, String>,
    /// Every user name (ports and `let` bindings), which generated node names avoid.
    reserved: HashSet<String>,
    /// Every node name given out (`Checker::fresh`), and per (base name, anonymous) the suffix
    /// its next search starts from.
    node_names: HashSet<String>,
    suffixes: HashMap<(String, bool), usize>,
    /// Names whose definition failed (already reported).
    poisoned: Vec<String>,
    /// Unknown extents made so far (the outputs of ops whose rule failed).
    unknowns: usize,
    /// Const parameters a requirement pinned to a number, with the requirement (`matmul` (node
    /// `c`) needs it), to find two that contradict.
    pins: Vec<(String, i64, String)>,
}

/// Checks a graph; errors go to `cx`. Returns what code generation needs (with placeholders where
/// something was wrong, so the fallback expansion keeps the user's crate type-checking).
pub fn check(cx: &Ctxt, def: &GraphDef) -> Checked {
    let params = decl::check_params(cx, def);
    let classes = decl::check_classes(cx, def);
    let (compute, intermediate) = decl::check_settings(cx, def);
    let fusion = decl::check_fuse(cx, def);
    let mut inputs: Vec<Port> = def.inputs.iter().map(|p| decl::check_port(cx, p, &params)).collect();
    decl::check_host_inputs(cx, def, &mut inputs);
    let outputs: Vec<Port> = def.outputs.iter().map(|p| decl::check_port(cx, p, &params)).collect();
    decl::check_host_outputs(cx, def);
    decl::check_port_names(cx, def);
    if def.inputs.is_empty() {
        cx.error(&def.name, format!("graph `{}` needs at least one input", def.name));
    }
    if def.outputs.is_empty() {
        cx.error(
            &def.name,
            format!("graph `{}` declares no outputs; list at least one after `->`: `-> (y: f32[..])`", def.name),
        );
    }
    let mut ck = Checker {
        cx,
        def,
        outputs: &outputs,
        params,
        compute,
        intermediate,
        env: HashMap::new(),
        nodes: Vec::new(),
        const_checks: Vec::new(),
        assigned: HashMap::new(),
        reserved: reserved_names(def),
        node_names: HashSet::new(),
        suffixes: HashMap::new(),
        poisoned: Vec::new(),
        pins: Vec::new(),
        unknowns: 0,
    };
    ck.bind_inputs(&inputs);
    let bindings = ck.body();
    if !cx.has_errors() {
        // After another error, an unused name is usually its consequence.
        ck.unused();
    }
    let Checker { nodes, const_checks, .. } = ck;
    let settings = fingerprint::Settings { compute, intermediate, fusion };
    let fingerprint = fingerprint::fingerprint(def, &inputs, &outputs, &nodes, &bindings, settings);
    Checked { compute, intermediate, fusion, inputs, outputs, nodes, bindings, const_checks, fingerprint, classes }
}

/// Every name the user gives: ports and `let` bindings.
fn reserved_names(def: &GraphDef) -> HashSet<String> {
    let ports = def.inputs.iter().chain(&def.outputs).map(|p| p.name.to_string());
    let lets = def.body.iter().flat_map(|stmt| match stmt {
        Stmt::Let { names, .. } => names.iter().map(ToString::to_string).collect(),
        _ => Vec::new(),
    });
    ports.chain(lets).collect()
}

#[cfg(test)]
mod tests;
