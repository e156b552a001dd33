//! Stage 2: the checks. Builds the graph symbolically and runs each op's shape rule — the very
//! functions the runtime uses (`cudnn_runtime::ops`) — over [`SymDim`]s, collecting every error of
//! the graph in one pass, each on the tokens at fault.
//!
//! Rules, one function each below:
//! - dim parameters are `const X: usize` or `dyn X`, each declared once;
//! - every port names a known dtype and dims that are positive literals or declared parameters,
//!   and a layout (`order [..]`, `channels_last`) that fits its rank;
//! - names (ports, `let` bindings) are defined once; every name used is defined;
//! - every call names a known op with its arity, attributes and the shape/dtype rule satisfied;
//! - every output is assigned exactly once, with the declared shape and a compatible dtype;
//! - every input and intermediate is used.

use std::collections::HashMap;

use cudnn_runtime::dim::{shape_string, SymDim, Symbolic};
use cudnn_runtime::ir::{channels_last_order, MemoryLayout};
use cudnn_runtime::ops::{self, AttrError, AttrValue, Op, TensorMeta};
use cudnn_runtime::{DataType, Fnv};
use proc_macro2::Span;
use syn::Ident;

use crate::Ctxt;
use crate::parse::{AttrLit, DimTok, Expr, GraphDef, LayoutDecl, PortDecl, Stmt};

/// A port with resolved type and dims.
pub struct Port {
    pub name: Ident,
    /// `None` if the dtype was unknown (already reported).
    pub dtype: Option<DataType>,
    pub dims: Vec<SymDim>,
    /// The memory order of the dims, outermost first, when declared (`order [..]` or
    /// `channels_last`); row-major otherwise.
    pub order: Option<Vec<usize>>,
}

/// An operand of a node, as the generated code will pass it.
pub enum Operand {
    Tensor(String),
    Scalar(f64),
}

/// A node, ready for code generation.
pub struct Node {
    pub name: String,
    pub op: &'static str,
    pub attrs: Vec<(String, AttrValue)>,
    pub inputs: Vec<Operand>,
    pub outputs: Vec<String>,
}

/// An equality over const parameters that only instantiation decides: two `i64` expressions.
pub struct ConstCheck {
    pub lhs: String,
    pub rhs: String,
    pub span: Span,
    pub message: String,
}

/// The checked graph.
pub struct Checked {
    pub compute: DataType,
    pub intermediate: DataType,
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
    pub nodes: Vec<Node>,
    /// `(output port, the tensor assigned to it)`, in declaration order of the outputs.
    pub bindings: Vec<(String, String)>,
    pub const_checks: Vec<ConstCheck>,
    pub fingerprint: u64,
}

struct Value {
    /// The tensor of the generated graph this value is.
    tensor: String,
    dims: Vec<SymDim>,
    dtype: DataType,
    span: Span,
    kind: Kind,
    used: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Input,
    Intermediate,
    /// An assigned graph output, readable by later statements (a non-virtual intermediate, as in
    /// cudnn-frontend when an op's output is marked as a graph output and also consumed).
    Output,
}

struct Checker<'a> {
    cx: &'a Ctxt,
    def: &'a GraphDef,
    params: HashMap<String, bool>,
    compute: DataType,
    intermediate: DataType,
    env: HashMap<String, Value>,
    nodes: Vec<Node>,
    const_checks: Vec<ConstCheck>,
    reserved: Vec<String>,
    /// Names whose definition failed (already reported).
    poisoned: Vec<String>,
}

/// Checks a graph; errors go to `cx`. Returns what code generation needs (with placeholders where
/// something was wrong, so the fallback expansion keeps the user's crate type-checking).
pub fn check(cx: &Ctxt, def: &GraphDef) -> Checked {
    let params = check_params(cx, def);
    let (compute, intermediate) = check_settings(cx, def);
    let inputs: Vec<Port> = def.inputs.iter().map(|p| check_port(cx, p, &params)).collect();
    let outputs: Vec<Port> = def.outputs.iter().map(|p| check_port(cx, p, &params)).collect();
    check_port_names(cx, def);
    if def.inputs.is_empty() {
        cx.error(&def.name, format!("graph `{}` needs at least one input", def.name));
    }
    let mut reserved: Vec<String> = def.inputs.iter().chain(&def.outputs).map(|p| p.name.to_string()).collect();
    for stmt in &def.body {
        if let Stmt::Let { names, .. } = stmt {
            reserved.extend(names.iter().map(ToString::to_string));
        }
    }
    let mut ck = Checker {
        cx,
        def,
        params,
        compute,
        intermediate,
        env: HashMap::new(),
        nodes: Vec::new(),
        const_checks: Vec::new(),
        reserved,
        poisoned: Vec::new(),
    };
    for (port, decl) in inputs.iter().zip(&def.inputs) {
        let value = Value {
            tensor: decl.name.to_string(),
            dims: port.dims.clone(),
            dtype: port.dtype.unwrap_or(DataType::F32),
            span: decl.name.span(),
            kind: Kind::Input,
            used: false,
        };
        ck.env.entry(decl.name.to_string()).or_insert(value);
    }
    let bindings = ck.body(&outputs);
    if !cx.has_errors() {
        // After another error, an unused name is usually its consequence.
        ck.unused();
    }
    let fingerprint = fingerprint(def, &inputs, &outputs, &ck.nodes, &bindings, compute, intermediate);
    Checked {
        compute,
        intermediate,
        inputs,
        outputs,
        nodes: ck.nodes,
        bindings,
        const_checks: ck.const_checks,
        fingerprint,
    }
}

/// Dim parameters: `const X: usize` or `dyn X`, each once.
fn check_params(cx: &Ctxt, def: &GraphDef) -> HashMap<String, bool> {
    let mut params = HashMap::new();
    for p in &def.params {
        if let Some(ty) = &p.ty {
            let is_usize = matches!(ty, syn::Type::Path(tp) if tp.path.is_ident("usize"));
            if !is_usize {
                cx.error(ty, "dim parameters are `usize`: write `const M: usize`");
            }
        }
        if params.insert(p.name.to_string(), p.runtime).is_some() {
            cx.error(&p.name, format!("dim parameter `{}` is declared twice", p.name));
        }
    }
    params
}

/// `#[compute(f32)]` and `#[intermediate(f32)]`.
fn check_settings(cx: &Ctxt, def: &GraphDef) -> (DataType, DataType) {
    let (mut compute, mut intermediate) = (DataType::F32, DataType::F32);
    for (key, value) in &def.settings {
        match resolve_dtype(cx, value) {
            Some(dt) if key == "compute" => compute = dt,
            Some(dt) => intermediate = dt,
            None => {}
        }
    }
    (compute, intermediate)
}

fn resolve_dtype(cx: &Ctxt, ident: &Ident) -> Option<DataType> {
    let name = ident.to_string();
    let dt = DataType::from_name(&name);
    if dt.is_none() {
        let hint = ops::closest(&name, DataType::ALL.iter().map(|d| d.name()))
            .map(|s| format!("did you mean `{s}`?"))
            .unwrap_or_else(|| {
                let all: Vec<&str> = DataType::ALL.iter().map(|d| d.name()).collect();
                format!("expected one of {}", all.join(", "))
            });
        cx.error(ident, format!("unknown dtype `{name}`; {hint}"));
    }
    dt
}

/// A port's dtype and dims.
fn check_port(cx: &Ctxt, p: &PortDecl, params: &HashMap<String, bool>) -> Port {
    let dtype = resolve_dtype(cx, &p.dtype);
    if p.dims.is_empty() {
        cx.error_span(p.bracket, format!("tensor `{}` needs at least one dim", p.name));
    }
    let dims = p
        .dims
        .iter()
        .map(|d| match d {
            DimTok::Lit(lit) => match lit.base10_parse::<i64>() {
                Ok(v) if v > 0 => SymDim::Lit(v),
                _ => {
                    cx.error(lit, format!("dims must be positive integers; `{}` has `{lit}`", p.name));
                    SymDim::Lit(1)
                }
            },
            DimTok::Param(id) => {
                let name = id.to_string();
                if !params.contains_key(&name) {
                    cx.error(id, format!("unknown dim `{name}`; declare it as `const {name}: usize` (compile time) or `dyn {name}` (run time) in the graph's parameters"));
                }
                SymDim::Param(name)
            }
        })
        .collect();
    let order = match &p.layout {
        None => None,
        Some(LayoutDecl::Order(items, span)) => {
            let values: Vec<usize> = items.iter().filter_map(|i| i.base10_parse::<usize>().ok()).collect();
            let mut sorted = values.clone();
            sorted.sort_unstable();
            if values.len() == items.len() && sorted == (0..p.dims.len()).collect::<Vec<_>>() {
                Some(values)
            } else {
                cx.error_span(
                    *span,
                    format!(
                        "`order` of `{}` must list each of its {} dims once, outermost in memory first (e.g. [0, 2, 1, 3])",
                        p.name,
                        p.dims.len()
                    ),
                );
                None
            }
        }
        Some(LayoutDecl::ChannelsLast(span)) => {
            let order = channels_last_order(p.dims.len());
            if order.is_none() {
                cx.error_span(
                    *span,
                    format!(
                        "`channels_last` needs 3 to 5 dims ([N, C, W], [N, C, H, W] or [N, C, D, H, W]) but `{}` has {}; \
                         give its memory order with `order [..]` instead",
                        p.name,
                        p.dims.len()
                    ),
                );
            }
            order
        }
    };
    Port { name: p.name.clone(), dtype, dims, order }
}

/// Port names are unique across inputs and outputs.
fn check_port_names(cx: &Ctxt, def: &GraphDef) {
    let mut seen: HashMap<String, &Ident> = HashMap::new();
    for p in def.inputs.iter().chain(&def.outputs) {
        if seen.insert(p.name.to_string(), &p.name).is_some() {
            cx.error(&p.name, format!("duplicate name `{}`: every input and output needs its own name", p.name));
        }
    }
}

impl Checker<'_> {
    /// The statements, in order. Returns the output bindings.
    fn body(&mut self, outputs: &[Port]) -> Vec<(String, String)> {
        let def = self.def;
        let mut assigned: HashMap<String, String> = HashMap::new();
        for stmt in &def.body {
            match stmt {
                Stmt::Let { names, expr } => {
                    let node_name = names.first().map(ToString::to_string);
                    let before = self.nodes.len();
                    let produced = self.expr_multi(expr, node_name.as_deref(), names.len());
                    if names.len() > 1 && self.nodes.len() > before {
                        // A multi-output op's tensors take the tuple's names.
                        if let Some(node) = self.nodes.last_mut() {
                            node.outputs = names.iter().map(ToString::to_string).collect();
                        }
                    }
                    for (name, value) in names.iter().zip(produced) {
                        let key = name.to_string();
                        let Some(mut value) = value else {
                            // Already reported: later uses of this name must not cascade.
                            self.poisoned.push(key);
                            continue;
                        };
                        if self.env.contains_key(&key) || self.def.outputs.iter().any(|o| o.name == key) {
                            self.cx.error(
                                name,
                                format!("duplicate name `{key}`: it is already defined in graph `{}`", def.name),
                            );
                            continue;
                        }
                        value.span = name.span();
                        if names.len() > 1 {
                            value.tensor = key.clone();
                        }
                        value.used = false;
                        self.env.insert(key, value);
                    }
                }
                Stmt::AssignTuple { targets, expr } => {
                    let first = targets.first().map(ToString::to_string);
                    let before = self.nodes.len();
                    let produced = self.expr_multi(expr, first.as_deref(), targets.len());
                    if self.nodes.len() > before {
                        if let Some(node) = self.nodes.last_mut() {
                            node.outputs = targets.iter().map(ToString::to_string).collect();
                        }
                    }
                    for (target, value) in targets.iter().zip(produced) {
                        let key = target.to_string();
                        let Some((idx, port)) = outputs.iter().enumerate().find(|(_, o)| o.name == key) else {
                            let declared: Vec<String> = outputs.iter().map(|o| format!("`{}`", o.name)).collect();
                            self.cx.error(
                                target,
                                format!(
                                    "`{key}` is not an output of graph `{}`; its outputs are {}",
                                    def.name,
                                    declared.join(", ")
                                ),
                            );
                            continue;
                        };
                        if assigned.contains_key(&key) {
                            self.cx.error(target, format!("output `{key}` is assigned twice"));
                            continue;
                        }
                        match value {
                            Some(mut value) => {
                                value.tensor = key.clone();
                                self.check_output(&def.outputs[idx], port, &value, expr);
                                self.readable_output(target, port, &value);
                                assigned.insert(key.clone(), key);
                            }
                            None => {
                                assigned.insert(key.clone(), key);
                            }
                        }
                    }
                }
                Stmt::Assign { target, expr } => {
                    let key = target.to_string();
                    let Some((idx, port)) = outputs.iter().enumerate().find(|(_, o)| o.name == key) else {
                        let declared: Vec<String> = outputs.iter().map(|o| format!("`{}`", o.name)).collect();
                        let msg = if self.env.contains_key(&key) {
                            format!("`{key}` is not an output; bind intermediates with `let {key} = ...`")
                        } else {
                            format!(
                                "`{key}` is not an output of graph `{}`; its outputs are {}",
                                def.name,
                                declared.join(", ")
                            )
                        };
                        self.cx.error(target, msg);
                        let _ = self.expr(expr, None);
                        continue;
                    };
                    if assigned.contains_key(&key) {
                        self.cx.error(target, format!("output `{key}` is assigned twice"));
                        continue;
                    }
                    let is_name = matches!(expr, Expr::Name(_));
                    let Some(value) = self.expr(expr, if is_name { None } else { Some(&key) }) else {
                        assigned.insert(key.clone(), key.clone());
                        continue;
                    };
                    self.check_output(&def.outputs[idx], port, &value, expr);
                    self.readable_output(target, port, &value);
                    assigned.insert(key.clone(), value.tensor);
                }
            }
        }
        let mut bindings = Vec::new();
        for o in &def.outputs {
            match assigned.get(&o.name.to_string()) {
                Some(t) => bindings.push((o.name.to_string(), t.clone())),
                None => self.cx.error(
                    &o.name,
                    format!(
                        "output `{}` is never assigned; add `{} = ...;` to the body of `{}`",
                        o.name, o.name, def.name
                    ),
                ),
            }
        }
        bindings
    }

    /// Later statements may read an assigned output: the declared port's tensor, whose dims and
    /// dtype are the declaration's.
    fn readable_output(&mut self, target: &Ident, port: &Port, value: &Value) {
        let readable = Value {
            tensor: value.tensor.clone(),
            dims: port.dims.clone(),
            dtype: port.dtype.unwrap_or(value.dtype),
            span: target.span(),
            kind: Kind::Output,
            used: true,
        };
        self.env.insert(target.to_string(), readable);
    }

    /// An output gets the declared shape and a compatible dtype.
    fn check_output(&mut self, decl: &PortDecl, port: &Port, value: &Value, expr: &Expr) {
        let mut sym = Symbolic::default();
        let same_rank = value.dims.len() == port.dims.len();
        let mismatch = !same_rank
            || value.dims.iter().zip(&port.dims).any(|(a, b)| !cudnn_runtime::dim::DimCx::require_eq(&mut sym, a, b));
        if mismatch {
            self.cx.error(
                &decl.name,
                format!(
                    "output `{}` is declared {} but is assigned a tensor of shape {}",
                    decl.name,
                    shape_string(&port.dims),
                    shape_string(&value.dims)
                ),
            );
        } else {
            self.defer(sym, expr.span(), &format!("output `{}` is declared {}", decl.name, shape_string(&port.dims)));
        }
        if let (Some(declared), Some(forced)) = (port.dtype, self.forced_dtype(expr)) {
            if declared != forced {
                self.cx.error(
                    &decl.dtype,
                    format!("output `{}` is declared {declared} but its op produces {forced}", decl.name),
                );
            }
        }
    }

    fn forced_dtype(&self, expr: &Expr) -> Option<DataType> {
        match expr {
            Expr::Call { .. } => {
                let node = self.nodes.last()?;
                matches!(node.op, "cmp_eq" | "cmp_neq" | "cmp_gt" | "cmp_ge" | "cmp_lt" | "cmp_le")
                    .then_some(DataType::Bool)
                    .or_else(|| node.op.starts_with("logical_").then_some(DataType::Bool))
                    .or_else(|| (node.op == "gen_index").then_some(DataType::I32))
            }
            _ => None,
        }
    }

    fn expr(&mut self, expr: &Expr, node_name: Option<&str>) -> Option<Value> {
        self.expr_multi(expr, node_name, 1).into_iter().next().flatten()
    }

    /// Evaluates an expression to `want` values (tuple bindings want several).
    fn expr_multi(&mut self, expr: &Expr, node_name: Option<&str>, want: usize) -> Vec<Option<Value>> {
        match expr {
            Expr::Name(id) => {
                let key = id.to_string();
                if want != 1 {
                    self.cx.error(id, format!("`{key}` is one tensor; it cannot be bound to {want} names"));
                }
                if self.poisoned.contains(&key) {
                    return vec![None];
                }
                match self.env.get_mut(&key) {
                    Some(v) => {
                        v.used = true;
                        vec![Some(Value {
                            tensor: v.tensor.clone(),
                            dims: v.dims.clone(),
                            dtype: v.dtype,
                            span: id.span(),
                            kind: v.kind,
                            used: true,
                        })]
                    }
                    None if self.def.outputs.iter().any(|o| o.name == key) => {
                        self.cx.error(
                            id,
                            format!(
                                "output `{key}` is read before it is assigned; assign it with `{key} = ...;` first"
                            ),
                        );
                        vec![None]
                    }
                    None => {
                        let hint = ops::closest(&key, self.env.keys().map(String::as_str))
                            .map(|s| format!("; did you mean `{s}`?"))
                            .unwrap_or_default();
                        self.cx.error(id, format!("undefined tensor `{key}` in graph `{}`{hint}", self.def.name));
                        vec![None]
                    }
                }
            }
            Expr::Number { span, .. } => {
                self.cx.error_span(*span, "a number can only be an operand of an op, e.g. `mul(x, 0.5)`");
                vec![None]
            }
            Expr::Call { func, args, attrs } => self.call(func, args, attrs, node_name, want),
        }
    }

    fn call(
        &mut self,
        func: &Ident,
        args: &[crate::parse::Arg],
        attrs: &[(Ident, AttrLit)],
        node_name: Option<&str>,
        want: usize,
    ) -> Vec<Option<Value>> {
        let name = func.to_string();
        let none = || (0..want).map(|_| None).collect::<Vec<_>>();
        let Some(sig) = ops::lookup(&name) else {
            let hint = ops::suggest(&name).map(|s| format!("; did you mean `{s}`?")).unwrap_or_default();
            self.cx.error(func, format!("unknown op `{name}`{hint}"));
            for a in args {
                if !matches!(a.expr, Expr::Number { .. }) {
                    let _ = self.expr(&a.expr, None);
                }
            }
            return none();
        };
        // Operands first (nested calls become their own nodes), then the op itself.
        let mut operands: Vec<Option<(Operand, Option<Value>)>> = Vec::new();
        for (i, a) in args.iter().enumerate() {
            match &a.expr {
                Expr::Number { value, span } => {
                    if !sig.input(i).is_some_and(|p| p.scalar_ok) {
                        let port = sig.input(i).map_or("?", |p| p.name);
                        self.cx.error_span(*span, format!("`{name}` port {port} takes a tensor, not a number"));
                        operands.push(None);
                    } else {
                        operands.push(Some((Operand::Scalar(*value), None)));
                    }
                }
                e => {
                    let v = self.expr(e, None);
                    operands.push(v.map(|v| (Operand::Tensor(v.tensor.clone()), Some(v))));
                }
            }
        }
        let attr_values: Vec<(String, AttrValue)> = attrs
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    AttrLit::Float(f, _) => AttrValue::Float(*f),
                    AttrLit::Int(i, _) => AttrValue::Int(*i),
                    AttrLit::List(l, _) => AttrValue::IntList(l.clone()),
                    AttrLit::Bool(b, _) => AttrValue::Bool(*b),
                    AttrLit::Name(n) => AttrValue::Name(n.to_string()),
                };
                (k.to_string(), value)
            })
            .collect();
        let op = match Op::from_call_with_inputs(&name, &attr_values, args.len()) {
            Ok(op) => op,
            Err(e) => {
                let span = match &e {
                    AttrError::Unknown { attr, .. } | AttrError::Duplicate { attr, .. } => {
                        attrs.iter().rev().find(|(k, _)| k == attr).map(|(k, _)| k.span())
                    }
                    AttrError::Type { attr, .. } => attrs.iter().find(|(k, _)| k == attr).map(|(_, v)| v.span()),
                    _ => None,
                };
                self.cx.error_span(span.unwrap_or_else(|| func.span()), e.to_string());
                return none();
            }
        };
        // The instance's inputs: an op whose attributes add ports (attention's bias, sequence
        // lengths) takes more than its first few.
        let ports: Vec<&str> = op.inputs().iter().map(|p| p.name).collect();
        if args.len() != ports.len() {
            let narrowed = ports.len() != sig.inputs.len();
            self.cx.error(
                func,
                format!(
                    "`{name}` takes {} input{}{} ({}), found {}",
                    ports.len(),
                    if ports.len() == 1 { "" } else { "s" },
                    if narrowed { " with these attributes" } else { "" },
                    ports.join(", "),
                    args.len()
                ),
            );
            return none();
        }
        let produced = op.outputs();
        if want != produced.len() {
            self.cx.error(
                func,
                format!(
                    "`{name}` produces {} output{} ({}) here, but {want} name{} {} bound{}",
                    produced.len(),
                    if produced.len() == 1 { "" } else { "s" },
                    produced.join(", "),
                    if want == 1 { "" } else { "s" },
                    if want == 1 { "is" } else { "are" },
                    // The outputs of these ops depend on an attribute: say which.
                    if want > produced.len() && sig.attrs.iter().any(|a| a.name == "phase") {
                        "; `phase = training` adds the statistics"
                    } else if want > produced.len() && sig.attrs.iter().any(|a| a.name == "training") {
                        "; `training = true` adds the statistics"
                    } else {
                        ""
                    },
                ),
            );
            return none();
        }
        if operands.iter().any(Option::is_none) {
            return none();
        }
        let operands: Vec<(Operand, Option<Value>)> = operands.into_iter().flatten().collect();
        let rank = operands.iter().find_map(|(_, v)| v.as_ref().map(|v| v.dims.len())).unwrap_or(1);
        let metas: Vec<TensorMeta<SymDim>> = operands
            .iter()
            .map(|(_, v)| match v {
                Some(v) => TensorMeta { dims: v.dims.clone(), dtype: v.dtype },
                None => TensorMeta { dims: vec![SymDim::Lit(1); rank], dtype: self.compute },
            })
            .collect();
        let mut sym = Symbolic::default();
        let outs = match op.infer(&metas, &mut sym) {
            Ok(outs) => outs,
            Err(e) => {
                let span = e.arg.and_then(|i| args.get(i)).map_or_else(|| func.span(), |a| a.expr.span());
                self.cx.error_span(span, format!("graph `{}`: {e}", self.def.name));
                return none();
            }
        };
        let node = self.fresh(node_name.unwrap_or(&name), node_name.is_none());
        self.defer(sym, func.span(), &format!("`{name}` (node `{node}`) needs it"));
        let out_names: Vec<String> =
            if outs.len() == 1 { vec![node.clone()] } else { produced.iter().map(|o| format!("{node}_{o}")).collect() };
        self.nodes.push(Node {
            name: node,
            op: sig.name,
            attrs: op.call_attrs(),
            inputs: operands.into_iter().map(|(o, _)| o).collect(),
            outputs: out_names.clone(),
        });
        outs.into_iter()
            .zip(out_names)
            .map(|(o, tensor)| {
                Some(Value {
                    tensor,
                    dims: o.dims,
                    dtype: o.dtype.unwrap_or(self.intermediate),
                    span: func.span(),
                    kind: Kind::Intermediate,
                    used: false,
                })
            })
            .collect()
    }

    /// A node name not taken by any user name or other node.
    fn fresh(&self, base: &str, anonymous: bool) -> String {
        let taken =
            |n: &str| self.nodes.iter().any(|x| x.name == n) || (anonymous && self.reserved.iter().any(|r| r == n));
        if !taken(base) && !anonymous {
            return base.to_string();
        }
        (0..).map(|i| format!("{base}_{i}")).find(|n| !taken(n)).unwrap_or_default()
    }

    /// Deferred equalities: const assertions when they involve const parameters only; run-time
    /// validation covers those with `dyn` ones.
    fn defer(&mut self, sym: Symbolic, span: Span, why: &str) {
        for (a, b) in sym.deferred {
            let params: Vec<String> = a.params().into_iter().chain(b.params()).collect();
            if params.iter().all(|p| self.params.get(p) == Some(&false)) {
                let message = format!("graph `{}`: {a} must equal {b}: {why}", self.def.name);
                self.const_checks.push(ConstCheck { lhs: a.to_expr(), rhs: b.to_expr(), span, message });
            }
        }
    }

    /// Inputs and intermediates are used.
    fn unused(&mut self) {
        let mut names: Vec<(&String, &Value)> = self.env.iter().filter(|(_, v)| !v.used).collect();
        names.sort_by_key(|(n, _)| n.as_str());
        for (name, v) in names {
            let what = if v.kind == Kind::Input { "input" } else { "tensor" };
            self.cx.error_span(v.span, format!("{what} `{name}` is never used in graph `{}`", self.def.name));
        }
    }
}

fn fingerprint(
    def: &GraphDef,
    inputs: &[Port],
    outputs: &[Port],
    nodes: &[Node],
    bindings: &[(String, String)],
    compute: DataType,
    intermediate: DataType,
) -> u64 {
    let mut h = Fnv::default();
    h.write_str(&format!("graph|{}|{compute}|{intermediate}", def.name));
    for p in def.params.iter() {
        h.write_str(&format!("param|{}|{}", p.name, p.runtime));
    }
    for (kind, ports) in [("in", inputs), ("out", outputs)] {
        for p in ports {
            h.write_str(&format!("{kind}|{}|{:?}|{}", p.name, p.dtype, shape_string(&p.dims)));
            // A declared layout is part of the type: a plan of NHWC ports must not load into the
            // NCHW declaration. Row-major ports hash as they always did.
            if let Some(order) = p.order.as_deref().filter(|o| MemoryLayout::from_order(o) != MemoryLayout::RowMajor) {
                h.write_str(&format!("layout|{order:?}"));
            }
        }
    }
    for n in nodes {
        let ins: Vec<String> = n
            .inputs
            .iter()
            .map(|o| match o {
                Operand::Tensor(t) => t.clone(),
                Operand::Scalar(v) => format!("{:#x}", v.to_bits()),
            })
            .collect();
        h.write_str(&format!("node|{}|{}|{:?}|{:?}|{:?}", n.name, n.op, n.attrs, ins, n.outputs));
    }
    for (o, t) in bindings {
        h.write_str(&format!("bind|{o}|{t}"));
    }
    h.finish()
}
