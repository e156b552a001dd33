//! Dims as written (`64`, `M`, `HQ * D`, `(H + 1) / 2`) → [`SymDim`]s, in a port's dims and in
//! an attribute of kind `Dims` alike.
//!
//! Rules, each reported on the tokens at fault:
//! - every name is a declared dim parameter (`const M: usize` or `dyn M`);
//! - `/` divides by a positive constant only (floor division, as the canonical form has it):
//!   `(H + 1) / 2`, not `S / H`;
//! - no literal, and no step of the arithmetic on literals, overflows `i64`;
//! - a dim that is a constant (`0`, `2 - 3`) is positive (checked by the callers, who name the
//!   port or attribute).

use std::collections::HashMap;

use cudnn_runtime::dim::{Dim, SymDim};
use quote::ToTokens;

use crate::parse::{DimExpr, DimOp};
use crate::Ctxt;

/// `d` as a [`SymDim`]; `None` after an error (reported). Every error in `d` is reported, not
/// only the first.
pub(super) fn sym_dim(cx: &Ctxt, d: &DimExpr, params: &HashMap<String, bool>) -> Option<SymDim> {
    match d {
        DimExpr::Lit { lit, .. } => match d.as_int() {
            Some(v) => Some(SymDim::Lit(v)),
            None => {
                cx.error(d, format!("`{lit}` is too large for a dim (at most i64::MAX)"));
                None
            }
        },
        DimExpr::Param(id) => {
            let name = id.to_string();
            if !params.contains_key(&name) {
                cx.error(id, format!("unknown dim `{name}`; declare it as `const {name}: usize` (compile time) or `dyn {name}` (run time) in the graph's parameters"));
                return None;
            }
            Some(SymDim::Param(name))
        }
        DimExpr::Paren { inner, .. } => sym_dim(cx, inner, params),
        DimExpr::Binary { lhs, op, rhs } => {
            let (a, b) = (sym_dim(cx, lhs, params), sym_dim(cx, rhs, params));
            let (a, b) = (a?, b?);
            let value = match op {
                DimOp::Add(_) => a.checked_add(&b),
                DimOp::Sub(_) => a.checked_sub(&b),
                DimOp::Mul(_) => a.checked_mul(&b),
                DimOp::Div(_) => match b {
                    SymDim::Lit(n) if n >= 1 => a.checked_div_floor(n),
                    _ => {
                        cx.error(
                            rhs,
                            format!(
                                "a dim is divided only by a positive integer (floor division, as in `(H + 1) / 2`), not by `{b}`"
                            ),
                        );
                        return None;
                    }
                },
            };
            if value.is_none() {
                cx.error(d, format!("`{}` overflows i64", d.to_token_stream()));
            }
            value
        }
    }
}

/// The value of a dim that is a constant (`0`, `2 - 3`) which is not positive: what the callers
/// report, naming the port or attribute.
pub(super) fn non_positive(d: &SymDim) -> Option<i64> {
    d.as_lit().filter(|&n| n <= 0)
}
