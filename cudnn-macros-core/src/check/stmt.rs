//! The statements of a graph's body, one function per kind (`let`, output assignment, tuple
//! assignment), and the rules over the whole body: every output assigned once with its declared
//! shape and dtype, every input and intermediate used.

use cudnn_runtime::dim::{shape_string, DimCx, Symbolic};
use cudnn_runtime::DataType;
use syn::Ident;

use super::{port_memory, Checker, Kind, Port, Unknowns, Value};
use crate::parse::{Expr, PortDecl, Stmt};

impl Checker<'_> {
    /// Puts the inputs in scope.
    pub(super) fn bind_inputs(&mut self, inputs: &[Port]) {
        for (port, decl) in inputs.iter().zip(&self.def.inputs) {
            let value = Value {
                tensor: decl.name.to_string(),
                dims: port.dims.clone(),
                dtype: port.dtype.unwrap_or(DataType::F32),
                forced: None,
                forced_why: None,
                bool_as_float: false,
                span: decl.name.span(),
                kind: Kind::Input,
                used: false,
                memory: port_memory(&port.dims, port.order.as_deref()),
            };
            self.env.entry(decl.name.to_string()).or_insert(value);
        }
    }

    /// The statements, in order. Returns the output bindings.
    pub(super) fn body(&mut self) -> Vec<(String, String)> {
        for stmt in &self.def.body {
            match stmt {
                Stmt::Let { names, expr } => self.let_stmt(names, expr),
                Stmt::Assign { target, expr } => self.assign(target, expr),
                Stmt::AssignTuple { targets, expr } => self.assign_tuple(targets, expr),
            }
        }
        self.bindings()
    }

    /// `let c = expr;` or `let (a, b) = expr;`: new names, each defined once.
    fn let_stmt(&mut self, names: &[Ident], expr: &Expr) {
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
            if self.def.outputs.iter().any(|o| o.name == key) {
                // One error, not a duplicate name plus a never-assigned output: count it assigned.
                self.cx.error(
                    name,
                    format!(
                        "`{key}` is an output of graph `{}`: assign it without `let` (`{key} = ...;`)",
                        self.def.name
                    ),
                );
                self.assigned.entry(key.clone()).or_insert(key);
                continue;
            }
            let Some(mut value) = value else {
                // Already reported: later uses of this name must not cascade.
                self.poisoned.push(key);
                continue;
            };
            if self.env.contains_key(&key) {
                self.cx
                    .error(name, format!("duplicate name `{key}`: it is already defined in graph `{}`", self.def.name));
                // Later statements read the name as the user meant it, the new value: checking
                // them against the old one would report mistakes that are only this one's echo.
            }
            value.span = name.span();
            if names.len() > 1 {
                value.tensor = key.clone();
            }
            value.used = false;
            self.env.insert(key, value);
        }
    }

    /// `y = expr;`: one output, assigned once.
    fn assign(&mut self, target: &Ident, expr: &Expr) {
        let key = target.to_string();
        let Some(idx) = self.output_index(target) else {
            let msg = if self.env.contains_key(&key) {
                format!("`{key}` is not an output; bind intermediates with `let {key} = ...`")
            } else {
                self.not_an_output(&key)
            };
            self.cx.error(target, msg);
            let _ = self.expr(expr, None);
            return;
        };
        if self.assigned.contains_key(&key) {
            self.cx.error(target, format!("output `{key}` is assigned twice"));
            return;
        }
        let is_name = matches!(expr, Expr::Name(_));
        let Some(value) = self.expr(expr, if is_name { None } else { Some(&key) }) else {
            self.assigned.insert(key.clone(), key);
            return;
        };
        self.check_output(idx, &value, expr);
        self.readable_output(target, idx, &value);
        self.assigned.insert(key, value.tensor);
    }

    /// `(o, stats) = op(...);`: the outputs of a multi-output op, each assigned once.
    fn assign_tuple(&mut self, targets: &[Ident], expr: &Expr) {
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
            let Some(idx) = self.output_index(target) else {
                let msg = self.not_an_output(&key);
                self.cx.error(target, msg);
                continue;
            };
            if self.assigned.contains_key(&key) {
                self.cx.error(target, format!("output `{key}` is assigned twice"));
                continue;
            }
            if let Some(mut value) = value {
                value.tensor = key.clone();
                self.check_output(idx, &value, expr);
                self.readable_output(target, idx, &value);
            }
            self.assigned.insert(key.clone(), key);
        }
    }

    /// The position of `target` among the declared outputs.
    fn output_index(&self, target: &Ident) -> Option<usize> {
        self.outputs.iter().position(|o| o.name == *target)
    }

    /// The error for assigning a name that is not an output.
    fn not_an_output(&self, key: &str) -> String {
        let declared: Vec<String> = self.outputs.iter().map(|o| format!("`{}`", o.name)).collect();
        format!("`{key}` is not an output of graph `{}`; its outputs are {}", self.def.name, declared.join(", "))
    }

    /// Every output is assigned: `(output port, tensor)` in declaration order.
    fn bindings(&self) -> Vec<(String, String)> {
        let mut bindings = Vec::new();
        for o in &self.def.outputs {
            match self.assigned.get(&o.name.to_string()) {
                Some(t) => bindings.push((o.name.to_string(), t.clone())),
                None => self.cx.error(
                    &o.name,
                    format!(
                        "output `{}` is never assigned; add `{} = ...;` to the body of `{}`",
                        o.name, o.name, self.def.name
                    ),
                ),
            }
        }
        bindings
    }

    /// Later statements may read an assigned output: the declared port's tensor, whose dims and
    /// dtype are the declaration's.
    fn readable_output(&mut self, target: &Ident, idx: usize, value: &Value) {
        let outputs = self.outputs;
        let port = &outputs[idx];
        let readable = Value {
            tensor: value.tensor.clone(),
            dims: port.dims.clone(),
            dtype: port.dtype.unwrap_or(value.dtype),
            forced: value.forced,
            forced_why: value.forced_why.clone(),
            bool_as_float: value.bool_as_float,
            span: target.span(),
            kind: Kind::Output,
            used: true,
            memory: port_memory(&port.dims, port.order.as_deref()),
        };
        self.env.insert(target.to_string(), readable);
    }

    /// An output gets the declared shape and, if its op forces one, the op's dtype (reported on
    /// the declaration's dtype token).
    fn check_output(&mut self, idx: usize, value: &Value, expr: &Expr) {
        let (def, outputs) = (self.def, self.outputs);
        let (decl, port): (&PortDecl, &Port) = (&def.outputs[idx], &outputs[idx]);
        let mut sym = Symbolic::default();
        let same_rank = value.dims.len() == port.dims.len();
        let mismatch = !same_rank
            || value.dims.iter().zip(&port.dims).any(|(a, b)| !DimCx::require_eq(&mut Unknowns(&mut sym), a, b));
        if mismatch {
            let detail = if same_rank {
                let mut probe = Symbolic::default();
                let differ: Vec<String> = port
                    .dims
                    .iter()
                    .zip(&value.dims)
                    .enumerate()
                    .filter(|(_, (declared, assigned))| !DimCx::require_eq(&mut probe, *assigned, *declared))
                    .map(|(i, (declared, assigned))| format!("dim {i} is {declared} declared, {assigned} assigned"))
                    .collect();
                differ.join("; ")
            } else {
                format!("rank {} declared, rank {} assigned", port.dims.len(), value.dims.len())
            };
            self.cx.error(
                &decl.name,
                format!(
                    "output `{}` is declared {} but is assigned a tensor of shape {}: {detail}",
                    decl.name,
                    shape_string(&port.dims),
                    shape_string(&value.dims)
                ),
            );
        } else {
            let why = format!("output `{}` is declared {}", decl.name, shape_string(&port.dims));
            self.defer(sym, expr.span(), &why);
        }
        if let (Some(declared), Some(forced)) = (port.dtype, value.forced) {
            if !cudnn_runtime::ops::output_type_ok(forced, declared, value.bool_as_float) {
                let produces = value.forced_why.clone().unwrap_or_else(|| format!("its op produces {forced}"));
                self.cx.error(&decl.dtype, format!("output `{}` is declared {declared} but {produces}", decl.name));
            }
        }
    }

    /// Inputs and intermediates are used.
    pub(super) fn unused(&mut self) {
        let mut names: Vec<(&String, &Value)> = self.env.iter().filter(|(_, v)| !v.used).collect();
        names.sort_by_key(|(n, _)| n.as_str());
        for (name, v) in names {
            let what = if v.kind == Kind::Input { "input" } else { "tensor" };
            self.cx.error_span(v.span, format!("{what} `{name}` is never used in graph `{}`", self.def.name));
        }
    }
}
