//! A call's attributes as the runtime takes them: literals, lists of integers, and the extents
//! of `Dims` and `Indices` attributes written as port dims are (`shape = [B, S, H * D]`).

use cudnn_runtime::dim::{Dim, SymDim};
use cudnn_runtime::ops::{AttrKind, AttrValue, OpSignature};
use quote::ToTokens;
use syn::Ident;

use super::{dims, Checker};
use crate::parse::{AttrLit, DimExpr};

/// What a call's attributes give: the values the runtime takes, and the extents of its `Dims`
/// attributes.
pub(super) type AttrValues = (Vec<(String, AttrValue)>, Vec<(String, Vec<SymDim>)>);

impl Checker<'_> {
    /// The attributes of a call as the runtime takes them, and the extents of each attribute
    /// the signature types `Dims` (`shape = [B, S, H * D]`), which the shape rule reads in place
    /// of the op's own: for those the op gets a placeholder (the literal extents, 1 for a
    /// symbolic one). A list for any other attribute holds integer literals. `None` after an
    /// error in a list's items (reported on the item).
    pub(super) fn attr_values(
        &self,
        sig: &OpSignature,
        func: &Ident,
        attrs: &[(Ident, AttrLit)],
    ) -> Option<AttrValues> {
        let (mut values, mut extents, mut ok) = (Vec::new(), Vec::new(), true);
        for (k, v) in attrs {
            let kind = sig.attrs.iter().find(|a| k == a.name).map(|a| a.kind);
            let value = match v {
                AttrLit::Float(f, _) => AttrValue::Float(*f),
                AttrLit::Int(i, _) => AttrValue::Int(*i),
                AttrLit::List(items, _) if matches!(kind, Some(AttrKind::Dims | AttrKind::Indices)) => {
                    let index = kind == Some(AttrKind::Indices);
                    let dims: Vec<Option<SymDim>> = items.iter().map(|d| self.extent(func, k, d, index)).collect();
                    let Some(dims) = dims.into_iter().collect::<Option<Vec<SymDim>>>() else {
                        ok = false;
                        continue;
                    };
                    let placeholder = dims.iter().map(|d| d.as_lit().unwrap_or(i64::from(!index))).collect();
                    extents.push((k.to_string(), dims));
                    AttrValue::IntList(placeholder)
                }
                AttrLit::List(items, _) => {
                    let ints: Vec<Option<i64>> = items.iter().map(DimExpr::as_int).collect();
                    if kind == Some(AttrKind::IntList) {
                        for (item, int) in items.iter().zip(&ints) {
                            if int.is_none() {
                                let what = match item {
                                    DimExpr::Lit { .. } => "does not fit in an i64",
                                    _ => "is not an integer literal",
                                };
                                self.cx.error(
                                    item,
                                    format!(
                                        "attribute `{k}` of `{func}` takes {}; `{}` {what}",
                                        AttrKind::IntList,
                                        item.to_token_stream()
                                    ),
                                );
                                ok = false;
                            }
                        }
                    }
                    // Any other attribute: the op reports the unknown attribute or its type.
                    AttrValue::IntList(ints.into_iter().flatten().collect())
                }
                AttrLit::Bool(b, _) => AttrValue::Bool(*b),
                AttrLit::Name(n) => AttrValue::Name(n.to_string()),
                // Reported by `strings_as_attrs` where the op has the attribute; otherwise the
                // op reports the unknown attribute.
                AttrLit::Str(s, _) => AttrValue::Name(s.clone()),
            };
            values.push((k.to_string(), value));
        }
        ok.then_some((values, extents))
    }

    /// One extent of a `Dims` attribute: a dim as a port declares one, and positive where it is
    /// a constant; or one index of an `Indices` attribute, written alike, and not negative where
    /// it is a constant.
    fn extent(&self, func: &Ident, attr: &Ident, d: &DimExpr, index: bool) -> Option<SymDim> {
        let dim = dims::sym_dim(self.cx, d, &self.params)?;
        if index {
            if let Some(n) = dim.as_lit().filter(|&n| n < 0) {
                self.cx.error(
                    d,
                    format!(
                        "attribute `{attr}` of `{func}` takes indices (0, integers, dim parameters or expressions over them); `{n}` is negative"
                    ),
                );
                return None;
            }
            return Some(dim);
        }
        if let Some(n) = dims::non_positive(&dim) {
            self.cx.error(
                d,
                format!(
                    "attribute `{attr}` of `{func}` takes positive extents (integers, dim parameters or expressions over them); `{n}` is not one"
                ),
            );
            return None;
        }
        Some(dim)
    }
}
