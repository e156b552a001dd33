//! Expressions: names, numbers and op calls. A call is checked against the op's signature (name,
//! attributes, ports, outputs) and its shape rule, both from `cudnn_runtime::ops`; nested calls
//! become nodes of their own.

use cudnn_runtime::dim::{Dim, SymDim, Symbolic};
use cudnn_runtime::ops::{
    self, AttrError, AttrKind, AttrValue, Extents, Op, OpSignature, OutputMeta, ShapeErrorKind, TensorMeta,
};
use proc_macro2::Span;
use syn::Ident;

use super::blame::{never_equal_hint, Blaming, Granting};
use super::{is_unknown, strides_in_order, Checker, ConstCheck, Kind, Memory, Node, Operand, Unknowns, Value};
use crate::parse::{Arg, AttrLit, Expr};

/// An operand as checked: what the generated code passes, and the value's metadata when it is a
/// tensor.
type CheckedOperand = (Operand, Option<Value>);

impl Checker<'_> {
    /// Evaluates an expression to one value.
    pub(super) fn expr(&mut self, expr: &Expr, node_name: Option<&str>) -> Option<Value> {
        self.expr_multi(expr, node_name, 1).into_iter().next().flatten()
    }

    /// Evaluates an expression to `want` values (tuple bindings want several).
    pub(super) fn expr_multi(&mut self, expr: &Expr, node_name: Option<&str>, want: usize) -> Vec<Option<Value>> {
        match expr {
            Expr::Name(id) => {
                if want != 1 {
                    self.cx.error(id, format!("`{id}` is one tensor; it cannot be bound to {want} names"));
                }
                vec![self.name(id)]
            }
            Expr::Number { span, .. } => {
                self.cx.error_span(
                    *span,
                    "a number is not a tensor of its own: it can only be an operand of an op, as in `op(x, 0.5)`",
                );
                vec![None]
            }
            Expr::Call { func, args, attrs } => self.call(func, args, attrs, node_name, want),
        }
    }

    /// A name read as an operand or bound to a new name: marks it used.
    fn name(&mut self, id: &Ident) -> Option<Value> {
        let key = id.to_string();
        if self.poisoned.contains(&key) {
            return None;
        }
        if let Some(v) = self.env.get_mut(&key) {
            v.used = true;
            return Some(Value {
                tensor: v.tensor.clone(),
                dims: v.dims.clone(),
                dtype: v.dtype,
                forced: v.forced,
                forced_why: v.forced_why.clone(),
                bool_as_float: v.bool_as_float,
                span: id.span(),
                kind: v.kind,
                used: true,
                memory: v.memory.clone(),
            });
        }
        if self.def.outputs.iter().any(|o| o.name == key) {
            self.cx.error(
                id,
                format!("output `{key}` is read before it is assigned; assign it with `{key} = ...;` first"),
            );
        } else if self.reserved.contains(&key) {
            self.cx.error(
                id,
                format!(
                    "tensor `{key}` is used before its `let` in graph `{}`; move `let {key} = ...;` above this use",
                    self.def.name
                ),
            );
        } else {
            let hint = ops::closest(&key, self.env.keys().map(String::as_str))
                .map(|s| format!("; did you mean `{s}`?"))
                .unwrap_or_default();
            self.cx.error(id, format!("undefined tensor `{key}` in graph `{}`{hint}", self.def.name));
        }
        None
    }

    /// `op(args, attr = value)`: `want` values, one per output of the op (all `None` after an
    /// error, which is reported).
    fn call(
        &mut self,
        func: &Ident,
        args: &[Arg],
        attrs: &[(Ident, AttrLit)],
        node_name: Option<&str>,
        want: usize,
    ) -> Vec<Option<Value>> {
        let none = || (0..want).map(|_| None).collect::<Vec<_>>();
        let name = func.to_string();
        let Some(sig) = ops::lookup(&name) else {
            self.unknown_op(func, args);
            return none();
        };
        // Operands first (nested calls become their own nodes), then the op itself.
        let operands = self.operands(&sig, func, args);
        if !self.strings_as_attrs(&sig, func, attrs) {
            return none();
        }
        let Some((attr_values, extents)) = self.attr_values(&sig, func, attrs) else {
            return none();
        };
        let Some(op) = self.op(func, attrs, &attr_values, args.len()) else {
            return none();
        };
        if !self.arity(&op, &sig, func, args.len())
            || !self.output_count(&op, &sig, func, &attr_values, args.len(), want)
        {
            return none();
        }
        let Some(operands) = operands.into_iter().collect::<Option<Vec<CheckedOperand>>>() else {
            return none();
        };
        let call = Call { func, args, attrs, extents: &extents };
        self.infer(&op, &sig, &call, operands, node_name).unwrap_or_else(none)
    }

    /// An unknown op: reported with the closest known name; its operands are still checked (so
    /// their names count as used).
    fn unknown_op(&mut self, func: &Ident, args: &[Arg]) {
        let name = func.to_string();
        let hint = ops::suggest(&name).map(|s| format!("; did you mean `{s}`?")).unwrap_or_default();
        self.cx.error(func, format!("unknown op `{name}`{hint}"));
        for a in args {
            if !matches!(a.expr, Expr::Number { .. }) {
                let _ = self.expr(&a.expr, None);
            }
        }
    }

    /// The positional operands of a call: `None` for one that failed (already reported).
    fn operands(&mut self, sig: &OpSignature, func: &Ident, args: &[Arg]) -> Vec<Option<CheckedOperand>> {
        let mut operands = Vec::new();
        for (i, a) in args.iter().enumerate() {
            match &a.expr {
                Expr::Number { value, span } => {
                    if sig.input(i).is_some_and(|p| p.scalar_ok) {
                        operands.push(Some((Operand::Scalar(*value), None)));
                    } else {
                        let port = sig.input(i).map_or("?", |p| p.name);
                        self.cx.error_span(*span, format!("`{func}` port {port} takes a tensor, not a number"));
                        operands.push(None);
                    }
                }
                e => {
                    let v = self.expr(e, None);
                    operands.push(v.map(|v| (Operand::Tensor(v.tensor.clone()), Some(v))));
                }
            }
        }
        operands
    }

    /// The op a call builds from its name and attributes; attribute errors go on the attribute
    /// (its name, or its value for a type error).
    fn op(
        &self,
        func: &Ident,
        attrs: &[(Ident, AttrLit)],
        values: &[(String, AttrValue)],
        inputs: usize,
    ) -> Option<Op> {
        match Op::from_call_with_inputs(&func.to_string(), values, inputs) {
            Ok(op) => Some(op),
            Err(e) => {
                let span = match &e {
                    AttrError::Unknown { attr, .. } | AttrError::Duplicate { attr, .. } => {
                        attrs.iter().rev().find(|(k, _)| k == attr).map(|(k, _)| k.span())
                    }
                    AttrError::Type { attr, .. } => attrs.iter().find(|(k, _)| k == attr).map(|(_, v)| v.span()),
                    _ => None,
                };
                self.cx.error_span(span.unwrap_or_else(|| func.span()), e.to_string());
                None
            }
        }
    }

    /// For a port refusing the type of an intermediate that has the graph's intermediate type (an
    /// op's output whose type no rule forced): that the type comes from `#[intermediate(..)]`,
    /// and which setting the port would take.
    fn intermediate_type_hint(&self, kind: &ShapeErrorKind, operand: Option<&Value>) -> String {
        let ShapeErrorKind::DType { found, expected, .. } = kind else { return String::new() };
        let Some(v) = operand else { return String::new() };
        if v.kind != Kind::Intermediate || v.forced.is_some() || *found != self.intermediate {
            return String::new();
        }
        let suggested = ["bf16", "f16", "f32"].into_iter().find(|t| expected.split([' ', ',']).any(|w| w == *t));
        let setting = suggested.map_or_else(|| "#[intermediate(..)]".to_string(), |t| format!("#[intermediate({t})]"));
        format!(
            "; this operand is an intermediate, of the graph's intermediate type {found}: put `{setting}` on graph `{}`",
            self.def.name
        )
    }

    /// No attribute of the op is written as a string (`axis = "1"`): each is an error naming the
    /// attribute, the type it takes and, where the string holds one, the value to write.
    fn strings_as_attrs(&self, sig: &OpSignature, func: &Ident, attrs: &[(Ident, AttrLit)]) -> bool {
        let mut ok = true;
        for (key, value) in attrs {
            let AttrLit::Str(s, span) = value else { continue };
            let Some(spec) = sig.attrs.iter().find(|a| key == a.name) else { continue };
            let unquoted = match &spec.kind {
                AttrKind::Int => s.trim().parse::<i64>().is_ok(),
                AttrKind::Float => s.trim().parse::<f64>().is_ok(),
                AttrKind::Bool => matches!(s.trim(), "true" | "false"),
                AttrKind::OneOf(names) => names.contains(&s.trim()),
                AttrKind::IntList | AttrKind::Dims | AttrKind::Indices => false,
            };
            let hint = if unquoted { format!(": write `{key} = {}`", s.trim()) } else { String::new() };
            self.cx.error_span(*span, format!("attribute `{key}` of `{func}` takes {}, not a string{hint}", spec.kind));
            ok = false;
        }
        ok
    }

    /// The call passes as many operands as the op instance has ports (an op whose attributes add
    /// ports, such as attention's bias or sequence lengths, takes more than its first few).
    fn arity(&self, op: &Op, sig: &OpSignature, func: &Ident, found: usize) -> bool {
        let ports: Vec<&str> = op.inputs().iter().map(|p| p.name).collect();
        if found == ports.len() {
            return true;
        }
        let narrowed = ports.len() != sig.inputs.len();
        self.cx.error(
            func,
            format!(
                "`{func}` takes {} input{}{} ({}), found {found}",
                ports.len(),
                if ports.len() == 1 { "" } else { "s" },
                if narrowed { " with these attributes" } else { "" },
                ports.join(", "),
            ),
        );
        false
    }

    /// As many names are bound as the op instance produces outputs.
    fn output_count(
        &self,
        op: &Op,
        sig: &OpSignature,
        func: &Ident,
        attrs: &[(String, AttrValue)],
        inputs: usize,
        want: usize,
    ) -> bool {
        let produced = op.outputs();
        if want == produced.len() {
            return true;
        }
        let hint = if want > produced.len() { adding_outputs(sig, attrs, inputs, &produced, want) } else { None };
        self.cx.error(
            func,
            format!(
                "`{func}` produces {} output{} ({}) here, but {want} name{} {} bound{}",
                produced.len(),
                if produced.len() == 1 { "" } else { "s" },
                produced.join(", "),
                if want == 1 { "" } else { "s" },
                if want == 1 { "is" } else { "are" },
                hint.map(|h| format!("; {h}")).unwrap_or_default(),
            ),
        );
        false
    }

    /// What the shape rule sees of each operand: a value's dims and type; for a number, a by-value
    /// scalar of its port's type (the compute type unless the port says otherwise) of every dim 1
    /// at the rank of the first value, as the builder makes it.
    fn operand_metas(&self, op: &Op, operands: &[CheckedOperand]) -> Vec<TensorMeta<SymDim>> {
        let rank = operands.iter().find_map(|(_, v)| v.as_ref().map(|v| v.dims.len())).unwrap_or(1);
        let ports = op.inputs();
        operands
            .iter()
            .enumerate()
            .map(|(i, (_, v))| match v {
                Some(v) => TensorMeta { dims: v.dims.clone(), dtype: v.dtype },
                None => TensorMeta {
                    dims: vec![SymDim::Lit(1); rank],
                    dtype: ports.get(i).map_or(self.compute, |p| p.scalar_data_type(self.compute)),
                },
            })
            .collect()
    }

    /// Runs the op's shape rule and adds its node: one value per output, carrying the dtype the op
    /// forces on it. `None` after a shape error (reported on the operand or attribute at fault).
    fn infer(
        &mut self,
        op: &Op,
        sig: &OpSignature,
        call: &Call<'_>,
        operands: Vec<CheckedOperand>,
        node_name: Option<&str>,
    ) -> Option<Vec<Option<Value>>> {
        let Call { func, args, attrs, extents } = *call;
        let name = func.to_string();
        let metas = self.operand_metas(op, &operands);
        let mut sym = Symbolic::default();
        let mut blaming = Blaming { cx: Unknowns(&mut sym), failed: Vec::new(), unequal: Vec::new() };
        let inferred = op.infer_with(&metas, &Extents::given(extents), &mut blaming);
        let Blaming { failed, unequal, .. } = blaming;
        let outs = match inferred {
            Ok(outs) => outs,
            Err(e) => {
                let on_attr = e.attr.and_then(|a| attrs.iter().find(|(k, _)| k == a)).map(|(_, v)| v.span());
                let on_arg = e.arg.and_then(|i| args.get(i)).map(|a| a.expr.span());
                let span = on_attr.or(on_arg).unwrap_or_else(|| func.span());
                let operand = e.arg.and_then(|i| operands.get(i)).and_then(|(_, v)| v.as_ref());
                let hint = self.intermediate_type_hint(&e.kind, operand) + &never_equal_hint(&unequal);
                self.cx.error_span(span, format!("graph `{}`: {e}{hint}", self.def.name));
                return self.despite(op, &metas, extents, &name, &failed);
            }
        };
        let dtypes: Vec<_> = metas.iter().map(|m| m.dtype).collect();
        if let Err(e) = op.check_compute(&dtypes, self.compute) {
            self.cx.error_span(
                func.span(),
                format!("graph `{}`: {e}: put `#[compute(f32)]` on graph `{}`", self.def.name, self.def.name),
            );
        }
        let node = self.fresh(node_name.unwrap_or(&name), node_name.is_none());
        self.defer(sym, func.span(), &format!("`{name}` (node `{node}`) needs it"));
        let x = operands.first().and_then(|(_, v)| v.as_ref());
        let memory: Vec<Memory> = outs.iter().map(|o| self.memory(op, x, &o.dims, call)).collect();
        let out_names: Vec<String> = if outs.len() == 1 {
            vec![node.clone()]
        } else {
            op.outputs().iter().map(|o| format!("{node}_{o}")).collect()
        };
        // A `Dims` attribute with a symbolic extent is evaluated by the generated code; the op
        // holds a placeholder for it.
        let extents: Vec<(String, Vec<SymDim>)> =
            extents.iter().filter(|(_, dims)| dims.iter().any(|d| d.as_lit().is_none())).cloned().collect();
        let attrs = op.call_attrs().into_iter().filter(|(k, _)| !extents.iter().any(|(e, _)| e == k)).collect();
        self.nodes.push(Node {
            name: node,
            op: sig.name,
            attrs,
            extents,
            inputs: operands.into_iter().map(|(o, _)| o).collect(),
            outputs: out_names.clone(),
        });
        let ports = op.outputs();
        let values = outs.into_iter().zip(out_names).zip(memory).zip(ports).map(|(((o, tensor), memory), port)| {
            Some(Value {
                forced_why: forced_why(&o, port, sig.name),
                tensor,
                dims: o.dims,
                dtype: o.dtype.unwrap_or(self.intermediate),
                forced: o.dtype,
                bool_as_float: op.stores_bool_as_float(),
                span: func.span(),
                kind: Kind::Intermediate,
                used: false,
                memory,
            })
        });
        Some(values.collect())
    }

    /// The memory of an op's output of dims `y`: a computed output is packed; a view's follows
    /// from its input `x`'s by the op's own rule (`Op::view_strides`). A reshape that no strides
    /// of X's memory express is an error on X, naming the tensor and the dims it cannot merge
    /// or split, unless the library may still lay X's base out for it ([`Memory::Relayable`]).
    fn memory(&self, op: &Op, x: Option<&Value>, y: &[SymDim], call: &Call<'_>) -> Memory {
        let computed = || strides_in_order(y, None).map_or(Memory::Unknown, Memory::Computed);
        let Some(x) = x else { return computed() };
        let (strides, relayable) = match &x.memory {
            Memory::Fixed(s) | Memory::Computed(s) => (s, false),
            Memory::Relayable(s) => (s, true),
            Memory::Unknown => return if op.is_view() { Memory::Unknown } else { computed() },
        };
        if x.dims.iter().chain(y).any(is_unknown) {
            return Memory::Unknown;
        }
        match op.view_strides(&x.dims, strides, y) {
            None => computed(),
            Some(Ok(view)) if op.is_reordering_view() && matches!(x.memory, Memory::Computed(_)) => {
                Memory::Relayable(view)
            }
            Some(Ok(view)) => Memory::Fixed(view),
            Some(Err(_)) if relayable => strides_in_order(y, None).map_or(Memory::Unknown, Memory::Fixed),
            Some(Err(e)) => {
                let span = call.args.first().map_or_else(|| call.func.span(), |a| a.expr.span());
                self.cx.error_span(span, format!("graph `{}`: {e}; X is `{}`", self.def.name, x.tensor));
                Memory::Unknown
            }
        }
    }

    /// A node name not taken by any user name or other node.
    fn fresh(&mut self, base: &str, anonymous: bool) -> String {
        let name = if !anonymous && !self.node_names.contains(base) {
            base.to_string()
        } else {
            // Names are only ever added, so a suffix found taken once stays taken: each search
            // resumes where the last one for this base ended (linear in the graph, not cubic).
            let reserved = &self.reserved;
            let taken = |n: &str| self.node_names.contains(n) || (anonymous && reserved.contains(n));
            let next = self.suffixes.entry((base.to_string(), anonymous)).or_insert(0);
            let mut i = *next;
            while taken(&format!("{base}_{i}")) {
                i += 1;
            }
            *next = i + 1;
            format!("{base}_{i}")
        };
        self.node_names.insert(name.clone());
        name
    }

    /// The outputs of an op whose shape rule failed (already reported): of the rank and type the
    /// rule gives when every equality it asks for is granted; an extent the failed requirement
    /// (`failed`, its sides) decides is *unknown* ([`Unknowns`]), any other is kept
    /// ([`Checker::kept_extents`]). Later ops are checked with them, so their own mistakes
    /// (attributes, their other operands, their extents, types) surface in the same compile, on
    /// their own tokens, while nothing that involves an unknown extent is reported: no echo of
    /// the first mistake. `None` where the rule fails even so (a type or rank rule): later uses
    /// are then skipped, as for any name whose definition failed.
    fn despite(
        &mut self,
        op: &Op,
        metas: &[TensorMeta<SymDim>],
        extents: &[(String, Vec<SymDim>)],
        name: &str,
        failed: &[SymDim],
    ) -> Option<Vec<Option<Value>>> {
        let outs = op.infer_with(metas, &Extents::given(extents), &mut Granting).ok()?;
        let kept = self.kept_extents(op, metas, extents, failed);
        let node = self.fresh(name, true);
        let values = outs.into_iter().enumerate().map(|(i, o)| {
            let kept = kept.as_ref().and_then(|k| k.get(i)).filter(|k| k.len() == o.dims.len());
            Some(Value {
                tensor: format!("{node}_{i}"),
                // Known rank and type; the extents the failure leaves known, the others unknown.
                dims: match kept {
                    Some(dims) => dims.iter().map(|d| d.clone().unwrap_or_else(|| self.unknown())).collect(),
                    None => o.dims.iter().map(|_| self.unknown()).collect(),
                },
                dtype: o.dtype.unwrap_or(self.intermediate),
                forced_why: op.outputs().get(i).and_then(|port| forced_why(&o, port, op.call_name())),
                forced: o.dtype,
                bool_as_float: op.stores_bool_as_float(),
                span: Span::call_site(),
                kind: Kind::Intermediate,
                used: false,
                memory: Memory::Unknown,
            })
        });
        Some(values.collect())
    }

    /// Deferred equalities: const assertions when they involve const parameters only; run-time
    /// validation covers those with `dyn` ones.
    ///
    /// Two requirements that pin one const parameter to different numbers contradict each other
    /// whatever the instantiation: that is reported here, on the second requirement's token,
    /// naming both, instead of as a const assertion that only `cargo build` evaluates.
    pub(super) fn defer(&mut self, sym: Symbolic, span: Span, why: &str) {
        for (a, b) in sym.deferred {
            let params: Vec<String> = a.params().into_iter().chain(b.params()).collect();
            if !params.iter().all(|p| self.params.get(p) == Some(&false)) {
                continue;
            }
            // `K` against 64, and also `2 * K` against 128 or `K + 1` against 65: K = 64.
            if let Some((param, value)) = a.pinned_value(&b) {
                let why = match (&a, &b) {
                    (SymDim::Param(_), SymDim::Lit(_)) | (SymDim::Lit(_), SymDim::Param(_)) => why.to_string(),
                    _ => format!("{why}: {a} = {b}"),
                };
                let why = why.as_str();
                match self.pins.iter().find(|pin| pin.0 == param) {
                    Some((_, first, first_why)) if *first != value => {
                        let message = format!(
                            "graph `{}`: const parameter `{param}` must equal {value} here ({why}), but it must \
                             also equal {first} ({first_why}): no `{param}` satisfies both",
                            self.def.name
                        );
                        self.cx.error_span(span, message);
                        continue;
                    }
                    Some(_) => {}
                    None => self.pins.push((param, value, why.to_string())),
                }
            }
            let message = format!("graph `{}`: {a} must equal {b}: {why}", self.def.name);
            self.const_checks.push(ConstCheck::new(&a, &b, false, span, message));
        }
        for (a, b) in sym.deferred_le {
            let params: Vec<String> = a.params().into_iter().chain(b.params()).collect();
            if params.iter().all(|p| self.params.get(p) == Some(&false)) {
                let message = format!("graph `{}`: {a} must be at most {b}: {why}", self.def.name);
                self.const_checks.push(ConstCheck::new(&a, &b, true, span, message));
            }
        }
    }
}

impl Checker<'_> {
    /// The output extents of an op whose shape rule failed that do not depend on how the
    /// failure is repaired: `Some(extent)` where known, `None` where unknown, per output; `None`
    /// when nothing can be kept.
    ///
    /// The suspects are the operand extents equal to a side of the failed requirement
    /// (`failed`): `matmul` of `[1, 4, 16]` and `[1, 8, 8]` fails on `16 = 8`, so A's 16 and
    /// both of B's 8s. A repair keeps some suspects and makes the others unknown, such that the
    /// rule holds; each repair here starts from one suspect and keeps every later one that
    /// still lets the rule hold. An output extent is kept where every repair gives it the same
    /// known value: `[1, 4, 8]` for that `matmul` (its N is B's last 8 in every repair), but `?`
    /// for the last extent of `add` of `[1, 4, 8]` and `[1, 4, 9]` (8 or 9, as one repairs it).
    fn kept_extents(
        &mut self,
        op: &Op,
        metas: &[TensorMeta<SymDim>],
        extents: &[(String, Vec<SymDim>)],
        failed: &[SymDim],
    ) -> Option<Vec<Vec<Option<SymDim>>>> {
        let suspects: Vec<(usize, usize)> = metas
            .iter()
            .enumerate()
            .flat_map(|(i, m)| m.dims.iter().enumerate().map(move |(j, d)| (i, j, d)))
            .filter(|(_, _, d)| !is_unknown(d) && failed.contains(d))
            .map(|(i, j, _)| (i, j))
            .collect();
        // Each repair runs the rule once per suspect, and there is one repair per suspect: past
        // a few dozen (a concatenation of many equal operands) every extent is left unknown.
        const MOST_SUSPECTS: usize = 48;
        if suspects.is_empty() || suspects.len() > MOST_SUSPECTS {
            return None;
        }
        // The rule's outputs with only `kept` of the suspects known; `None` if it fails even so.
        let mut outputs = |kept: &[(usize, usize)]| {
            let mut metas = metas.to_vec();
            for &(i, j) in suspects.iter().filter(|s| !kept.contains(s)) {
                metas[i].dims[j] = self.unknown();
            }
            let mut sym = Symbolic::default();
            op.infer_with(&metas, &Extents::given(extents), &mut Unknowns(&mut sym)).ok()
        };
        let mut repairs = Vec::new();
        for first in 0..suspects.len() {
            let mut kept = Vec::new();
            for &s in suspects[first..].iter().chain(&suspects[..first]) {
                kept.push(s);
                if outputs(&kept).is_none() {
                    kept.pop();
                }
            }
            repairs.push(outputs(&kept)?);
        }
        let (first, rest) = repairs.split_first()?;
        let kept = first.iter().enumerate().map(|(o, out)| {
            out.dims
                .iter()
                .enumerate()
                .map(|(k, d)| {
                    let same = rest.iter().all(|r| r.get(o).and_then(|r| r.dims.get(k)) == Some(d));
                    (same && !is_unknown(d)).then(|| d.clone())
                })
                .collect()
        });
        Some(kept.collect())
    }
}

/// A call as the shape rule's errors need it: where to put them, and the symbolic extents of its
/// `Dims` attributes.
struct Call<'a> {
    func: &'a Ident,
    args: &'a [Arg],
    attrs: &'a [(Ident, AttrLit)],
    extents: &'a [(String, Vec<SymDim>)],
}

/// Which attribute setting would make the op produce more outputs than `produced`, as a hint
/// (`` `phase = training` adds MEAN, INV_VARIANCE ``): asks the op itself, by rebuilding it with
/// each `true` flag and each named choice of its signature; a setting that gives exactly `want`
/// outputs is preferred.
fn adding_outputs(
    sig: &OpSignature,
    attrs: &[(String, AttrValue)],
    inputs: usize,
    produced: &[&str],
    want: usize,
) -> Option<String> {
    let settings = sig.attrs.iter().flat_map(|a| {
        let values: Vec<(AttrValue, String)> = match a.kind {
            AttrKind::Bool => vec![(AttrValue::Bool(true), "true".to_string())],
            AttrKind::OneOf(names) => names.iter().map(|n| (AttrValue::Name(n.to_string()), n.to_string())).collect(),
            AttrKind::Float | AttrKind::Int | AttrKind::IntList | AttrKind::Dims | AttrKind::Indices => Vec::new(),
        };
        values.into_iter().map(move |(value, shown)| (a.name, value, shown))
    });
    let mut found: Vec<(usize, String)> = Vec::new();
    for (attr, value, shown) in settings {
        let mut with: Vec<(String, AttrValue)> = attrs.iter().filter(|(k, _)| k != attr).cloned().collect();
        with.push((attr.to_string(), value));
        let Ok(op) = Op::from_call_with_inputs(sig.name, &with, inputs) else { continue };
        let outputs = op.outputs();
        if outputs.len() > produced.len() {
            let added: Vec<&str> = outputs.into_iter().filter(|o| !produced.contains(o)).collect();
            found.push((added.len() + produced.len(), format!("`{attr} = {shown}` adds {}", added.join(", "))));
        }
    }
    let exact = found.iter().position(|(n, _)| *n == want).unwrap_or(0);
    (exact < found.len()).then(|| found.swap_remove(exact).1)
}

/// [`Value::forced_why`] of output `port` of call `call`, inferred as `o`.
fn forced_why(o: &OutputMeta<SymDim>, port: &str, call: &str) -> Option<String> {
    let (dtype, reason) = (o.dtype?, o.reason?);
    Some(format!("port {port} of `{call}` produces {dtype}; {reason}"))
}
