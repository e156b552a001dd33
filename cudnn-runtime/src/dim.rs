//! Dimensions that shape rules can reason about, concrete or symbolic.
//!
//! Every op's shape rule is written once, generically over [`Dim`], and runs in two worlds:
//! - at run time over concrete `i64` extents ([`Concrete`]): equality is equality;
//! - in the `graph!` macro over [`SymDim`] ([`Symbolic`]): literals and named parameters
//!   (const generics, runtime symbols). `K` meets `K` and `64` meets `64` are decided at
//!   expansion; two different names never unify; a literal meeting a name is *deferred*: the macro
//!   turns it into a const assertion (const generics) or leaves it to run-time validation (runtime
//!   symbols).

use std::fmt;

/// An extent a shape rule can compare.
pub trait Dim: Clone + PartialEq + fmt::Display {
    /// The dimension with a known extent `n`.
    fn lit(n: i64) -> Self;
    /// The extent, if known.
    fn as_lit(&self) -> Option<i64>;
    /// True if this dimension is known to be 1 (and so broadcasts).
    fn is_one(&self) -> bool {
        self.as_lit() == Some(1)
    }
}

impl Dim for i64 {
    fn lit(n: i64) -> Self {
        n
    }
    fn as_lit(&self) -> Option<i64> {
        Some(*self)
    }
}

/// A dimension as written in the DSL: a literal or a named parameter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SymDim {
    /// `64`
    Lit(i64),
    /// `K` (a const generic) or `batch` (a runtime symbol).
    Param(String),
}

impl fmt::Display for SymDim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SymDim::Lit(n) => write!(f, "{n}"),
            SymDim::Param(p) => f.write_str(p),
        }
    }
}

impl Dim for SymDim {
    fn lit(n: i64) -> Self {
        SymDim::Lit(n)
    }
    fn as_lit(&self) -> Option<i64> {
        match self {
            SymDim::Lit(n) => Some(*n),
            SymDim::Param(_) => None,
        }
    }
}

/// Decides dimension equalities for a shape rule.
pub trait DimCx<D: Dim> {
    /// Requires `a == b`. Returns false if they certainly differ; may record the requirement for
    /// later when it cannot be decided now.
    fn require_eq(&mut self, a: &D, b: &D) -> bool;
}

/// Concrete dimensions: equality is decided now.
#[derive(Debug, Default, Clone, Copy)]
pub struct Concrete;

impl DimCx<i64> for Concrete {
    fn require_eq(&mut self, a: &i64, b: &i64) -> bool {
        a == b
    }
}

/// Symbolic dimensions: collects the equalities between a literal and a name that only
/// instantiation can decide.
#[derive(Debug, Default, Clone)]
pub struct Symbolic {
    /// `(param, literal)` pairs that must be equal once the parameter is known.
    pub deferred: Vec<(String, i64)>,
}

impl DimCx<SymDim> for Symbolic {
    fn require_eq(&mut self, a: &SymDim, b: &SymDim) -> bool {
        match (a, b) {
            (SymDim::Lit(x), SymDim::Lit(y)) => x == y,
            (SymDim::Param(x), SymDim::Param(y)) => x == y,
            (SymDim::Param(p), SymDim::Lit(n)) | (SymDim::Lit(n), SymDim::Param(p)) => {
                self.deferred.push((p.clone(), *n));
                true
            }
        }
    }
}

/// Renders a shape as `[1, M, K]`.
pub fn shape_string<D: Dim>(dims: &[D]) -> String {
    let parts: Vec<String> = dims.iter().map(ToString::to_string).collect();
    format!("[{}]", parts.join(", "))
}

/// Packed row-major strides for `dims` (the last dimension contiguous).
pub fn packed_strides(dims: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1].max(1);
    }
    strides
}

/// The number of elements of a tensor of these dims.
pub fn element_count(dims: &[i64]) -> i64 {
    dims.iter().product()
}

/// The smallest storage, in elements, that strided `dims` address (0 for an empty tensor).
pub fn storage_len(dims: &[i64], strides: &[i64]) -> i64 {
    if dims.contains(&0) {
        return 0;
    }
    1 + dims.iter().zip(strides).map(|(d, s)| (d - 1) * s).sum::<i64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbolic_equalities() {
        let mut cx = Symbolic::default();
        let k = SymDim::Param("K".into());
        assert!(cx.require_eq(&k, &k));
        assert!(!cx.require_eq(&k, &SymDim::Param("N".into())));
        assert!(!cx.require_eq(&SymDim::Lit(3), &SymDim::Lit(4)));
        assert!(cx.require_eq(&k, &SymDim::Lit(64)));
        assert_eq!(cx.deferred, vec![("K".to_string(), 64)]);
    }

    #[test]
    fn strides_and_sizes() {
        assert_eq!(packed_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(storage_len(&[2, 3, 4], &[12, 4, 1]), 24);
        assert_eq!(storage_len(&[2, 3], &[1, 2]), 6);
        assert_eq!(storage_len(&[2, 0], &[1, 2]), 0);
        assert_eq!(shape_string(&[SymDim::Lit(1), SymDim::Param("M".into())]), "[1, M]");
    }
}
