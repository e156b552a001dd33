//! The dim contexts a call's shape rule runs under when it fails: one that remembers which
//! extents failed (to blame them in the error, and say why two extents never unify), and one
//! that grants every requirement (the shape the op would give if its failed one held).

use cudnn_runtime::dim::{DimCx, SymDim};

use super::Unknowns;

/// Symbolic equality as [`Unknowns`] decides it, remembering the sides of each requirement
/// that failed, for [`Checker::kept_extents`].
pub(super) struct Blaming<'a> {
    pub(super) cx: Unknowns<'a>,
    pub(super) failed: Vec<SymDim>,
    /// The equalities that failed, as pairs.
    pub(super) unequal: Vec<(SymDim, SymDim)>,
}

/// For a failed equality between extents over parameters (`2 * K` against `K`), why it is an
/// error at expansion: no parameters of at least 1 make them equal. Empty where a side is a
/// literal alone on both sides or two distinct parameters (which never unify; the message says
/// enough).
pub(super) fn never_equal_hint(unequal: &[(SymDim, SymDim)]) -> String {
    let Some((a, b)) = unequal.first() else { return String::new() };
    let mut params = a.params();
    for p in b.params() {
        if !params.contains(&p) {
            params.push(p);
        }
    }
    if params.is_empty() || matches!((a, b), (SymDim::Param(_), SymDim::Param(_))) {
        return String::new();
    }
    params.sort();
    let names: Vec<String> = params.iter().map(|p| format!("`{p}`")).collect();
    let (these, make) = if names.len() == 1 { ("value of", "makes") } else { ("values of", "make") };
    format!(
        "; {a} and {b} differ whatever the instantiation: no {these} {} {make} them equal (every dim is at least 1)",
        names.join(", ")
    )
}

impl DimCx<SymDim> for Blaming<'_> {
    fn require_eq(&mut self, a: &SymDim, b: &SymDim) -> bool {
        let ok = self.cx.require_eq(a, b);
        if !ok {
            self.failed.extend([a.clone(), b.clone()]);
            self.unequal.push((a.clone(), b.clone()));
        }
        ok
    }

    fn require_eq_count(&mut self, a: &[SymDim], b: &[SymDim]) -> bool {
        let ok = self.cx.require_eq_count(a, b);
        if !ok {
            self.failed.extend(a.iter().chain(b).cloned());
        }
        ok
    }

    fn require_le(&mut self, a: &SymDim, b: &SymDim) -> bool {
        let ok = self.cx.require_le(a, b);
        if !ok {
            self.failed.extend([a.clone(), b.clone()]);
        }
        ok
    }
}

/// A dim context that grants every equality: the shape an op would give if its failed
/// requirement held ([`Checker::despite`]).
pub(super) struct Granting;

impl DimCx<SymDim> for Granting {
    fn require_eq(&mut self, _: &SymDim, _: &SymDim) -> bool {
        true
    }

    fn require_eq_count(&mut self, _: &[SymDim], _: &[SymDim]) -> bool {
        true
    }

    fn require_le(&mut self, _: &SymDim, _: &SymDim) -> bool {
        true
    }
}
