//! The declarations: dim parameters, the `#[compute]`/`#[intermediate]` settings, the `#[fuse]`
//! policy, and the ports (dtype, dims, layout, unique names).

use std::collections::HashMap;

use cudnn_runtime::dim::SymDim;
use cudnn_runtime::ir::channels_last_order;
use cudnn_runtime::ops;
use cudnn_runtime::DataType;
use syn::ext::IdentExt;
use syn::Ident;

use super::{dims, ClassBuckets, DimClass, Fusion, Port};
use crate::parse::{BucketsDecl, ClassDecl, DimExpr, FuseArg, GraphDef, LayoutDecl, PortDecl};
use crate::Ctxt;

/// Dim parameters: `const X: usize` or `dyn X`, each once.
pub(super) fn check_params(cx: &Ctxt, def: &GraphDef) -> HashMap<String, bool> {
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

/// Each `dyn` dim's range and classes, in declaration order (see [`check_class`]).
pub(super) fn check_classes(cx: &Ctxt, def: &GraphDef) -> Vec<DimClass> {
    def.params
        .iter()
        .filter(|p| p.runtime)
        .map(|p| {
            let name = p.name.to_string();
            let any = DimClass { name: name.clone(), min: 1, max: usize::MAX, buckets: ClassBuckets::Exact };
            match &p.class {
                Some(decl) => check_class(cx, &name, decl).unwrap_or(any),
                None => any,
            }
        })
        .collect()
}

/// One `dyn` dim's declared values. The rules, each an error on the token at fault:
/// - every number is a `usize` (`dyn S: 1..=-4` does not parse; `1..=1e3` is not an integer);
/// - the range starts at 1 or more (`0..=8`: extents are positive);
/// - the range is not empty (`8192..=1`);
/// - `multiple(k)` has k ≥ 1 (`multiple(0)`);
/// - a list is not empty, starts at 1 or more and ascends strictly (`[512, 128]`, `[64, 64]`).
fn check_class(cx: &Ctxt, name: &str, decl: &ClassDecl) -> Option<DimClass> {
    let value = |lit: &syn::LitInt| match lit.base10_parse::<usize>() {
        Ok(v) => Some(v),
        Err(_) => {
            cx.error(lit, format!("`{lit}` is not a size: the values of dyn dim `{name}` are `usize`"));
            None
        }
    };
    let (min, max) = match (&decl.range, &decl.buckets) {
        (Some((lo, hi)), _) => {
            let (min, max) = (value(lo)?, value(hi)?);
            if min == 0 {
                cx.error(lo, format!("dyn dim `{name}` starts at 0, but extents are positive: start at 1"));
                return None;
            }
            if min > max {
                cx.error(
                    hi,
                    format!("dyn dim `{name}` has an empty range {min}..={max}: write the smaller bound first"),
                );
                return None;
            }
            (min, max)
        }
        (None, BucketsDecl::List(ends, span)) => {
            let Some(last) = ends.last() else {
                cx.error_span(*span, format!("dyn dim `{name}` lists no class: give at least one, e.g. `[128, 512]`"));
                return None;
            };
            (1, value(last)?)
        }
        (None, _) => return None,
    };
    let buckets = match &decl.buckets {
        BucketsDecl::Exact => ClassBuckets::Exact,
        BucketsDecl::Pow2 => ClassBuckets::Pow2,
        BucketsDecl::Multiple(k) => match value(k)? {
            0 => {
                cx.error(k, format!("dyn dim `{name}` has classes of `multiple(0)`: the step is 1 or more"));
                return None;
            }
            k => ClassBuckets::Multiple(k),
        },
        BucketsDecl::List(ends, _) => {
            let mut values = Vec::with_capacity(ends.len());
            for (i, lit) in ends.iter().enumerate() {
                let v = value(lit)?;
                if v == 0 {
                    cx.error(lit, format!("dyn dim `{name}` lists a class ending at 0, but extents are positive"));
                    return None;
                }
                if let Some(&prev) = values.last() {
                    if v <= prev {
                        let msg = format!(
                            "dyn dim `{name}` lists {v} after {prev}: list the classes' ends in ascending order, each once"
                        );
                        cx.error(&ends[i], msg);
                        return None;
                    }
                }
                values.push(v);
            }
            ClassBuckets::List(values)
        }
    };
    Some(DimClass { name: name.to_string(), min, max, buckets })
}

/// `#[compute(f32)]` and `#[intermediate(f32)]`.
pub(super) fn check_settings(cx: &Ctxt, def: &GraphDef) -> (DataType, DataType) {
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

/// `#[fuse(single)]` or `#[fuse(auto)]`, at most once; [`Fusion::Auto`] when absent. Every other
/// form is an error on its tokens saying what to write: `#[fuse(one)]` (an unknown mode),
/// `#[fuse("single")]` (a string), `#[fuse]` (no mode), `#[fuse = single]`, a second `#[fuse]`.
pub(super) fn check_fuse(cx: &Ctxt, def: &GraphDef) -> Fusion {
    const MODES: [&str; 2] = ["single", "auto"];
    const MEANING: &str = "`single` (one kernel, or an error) or `auto` (parts where cuDNN needs them, the default)";
    let mut fusion = None;
    for (i, decl) in def.fuse.iter().enumerate() {
        if i > 0 {
            cx.error(&decl.attr, format!("graph `{}` has more than one `#[fuse(..)]`; keep one", def.name));
        }
        let resolved = match &decl.arg {
            FuseArg::Mode(mode) => match mode.unraw().to_string().as_str() {
                "single" => Some(Fusion::Single),
                "auto" => Some(Fusion::Auto),
                other => {
                    let hint = ops::closest(other, MODES.into_iter())
                        .map_or_else(|| format!("expected {MEANING}"), |m| format!("did you mean `{m}`?"));
                    cx.error(mode, format!("unknown fusion mode `{other}`; {hint}"));
                    None
                }
            },
            FuseArg::Str(s) => {
                let value = s.value();
                let write = MODES
                    .into_iter()
                    .find(|m| *m == value.trim())
                    .map_or_else(String::new, |m| format!(": write `#[fuse({m})]`"));
                cx.error(s, format!("`#[fuse(..)]` takes `single` or `auto`, not a string{write}"));
                None
            }
            FuseArg::Missing => {
                cx.error(&decl.attr, format!("`#[fuse]` needs a mode: {MEANING}, as in `#[fuse(single)]`"));
                None
            }
            FuseArg::Other(tokens) => {
                cx.error(tokens, format!("`#[fuse(..)]` takes one mode, {MEANING}: write `#[fuse(single)]`"));
                None
            }
        };
        fusion = fusion.or(resolved);
    }
    fusion.unwrap_or(Fusion::Auto)
}

/// A dtype token, reported with the closest known dtype when it names none.
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
pub(super) fn check_port(cx: &Ctxt, p: &PortDecl, params: &HashMap<String, bool>) -> Port {
    let dtype = resolve_dtype(cx, &p.dtype);
    if p.dims.is_empty() {
        cx.error_span(p.bracket, format!("tensor `{}` needs at least one dim", p.name));
    }
    let dims = p.dims.iter().map(|d| check_dim(cx, p, d, params)).collect();
    let order = p.layout.as_ref().and_then(|layout| check_layout(cx, p, layout));
    let host = matches!(p.layout, Some(LayoutDecl::Host(_)));
    Port { name: p.name.clone(), dtype, dims, order, host }
}

/// A `host` input is one numeric value: every dim a literal 1 (its rank is the operands' it
/// meets), not `bool`. A wrong one is reported and checked on as all 1s, so the ops reading it
/// report nothing more.
pub(super) fn check_host_inputs(cx: &Ctxt, def: &GraphDef, inputs: &mut [Port]) {
    let one = |d: &DimExpr| matches!(d, DimExpr::Lit { minus: None, lit } if lit.base10_parse::<i64>().ok() == Some(1));
    for (p, port) in def.inputs.iter().zip(inputs) {
        let Some(LayoutDecl::Host(span)) = &p.layout else { continue };
        if port.dtype == Some(DataType::Bool) {
            cx.error_span(
                *span,
                format!("host scalar `{}` cannot be bool: cuDNN takes numeric scalars by value", p.name),
            );
        }
        if !p.dims.iter().all(one) {
            cx.error_span(
                p.bracket,
                format!(
                    "host scalar `{}` is one value given at execute: every dim must be 1 (e.g. `{}: {}[1, 1] host`)",
                    p.name, p.name, p.dtype
                ),
            );
            port.dims = vec![SymDim::Lit(1); port.dims.len().max(1)];
        }
    }
}

/// `host` marks an input: a value the caller supplies at execute. An output is computed.
pub(super) fn check_host_outputs(cx: &Ctxt, def: &GraphDef) {
    for p in &def.outputs {
        if let Some(LayoutDecl::Host(span)) = &p.layout {
            cx.error_span(
                *span,
                format!(
                    "output `{}` cannot be `host`: a host scalar is an input whose value is given at execute",
                    p.name
                ),
            );
        }
    }
}

/// One dim of a port: a positive literal, a declared parameter or an expression over them
/// (`dims`); `1` in place of a wrong one (reported).
fn check_dim(cx: &Ctxt, p: &PortDecl, d: &DimExpr, params: &HashMap<String, bool>) -> SymDim {
    let Some(dim) = dims::sym_dim(cx, d, params) else { return SymDim::Lit(1) };
    if let Some(n) = dims::non_positive(&dim) {
        cx.error(d, format!("dims must be positive integers; `{}` has `{n}`", p.name));
        return SymDim::Lit(1);
    }
    dim
}

/// A port's declared layout (`order [..]` or `channels_last`) as a memory order of its dims, if
/// it fits the port's rank.
fn check_layout(cx: &Ctxt, p: &PortDecl, layout: &LayoutDecl) -> Option<Vec<usize>> {
    match layout {
        LayoutDecl::Order(items, span) => {
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
        // Checked as an input's (`check_host_inputs`) or refused as an output's.
        LayoutDecl::Host(_) => None,
        LayoutDecl::ChannelsLast(span) => {
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
    }
}

/// Port names are unique across inputs and outputs.
pub(super) fn check_port_names(cx: &Ctxt, def: &GraphDef) {
    let mut seen: HashMap<String, &Ident> = HashMap::new();
    for p in def.inputs.iter().chain(&def.outputs) {
        if seen.insert(p.name.to_string(), &p.name).is_some() {
            cx.error(&p.name, format!("duplicate name `{}`: every input and output needs its own name", p.name));
        }
    }
}
