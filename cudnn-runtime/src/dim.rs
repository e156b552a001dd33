//! Dimensions that shape rules can reason about, concrete or symbolic.
//!
//! Every op's shape rule is written once, generically over [`Dim`], and runs in two worlds:
//! - at run time over concrete `i64` extents ([`Concrete`]): equality is equality;
//! - in the `graph!` macro over [`SymDim`] ([`Symbolic`]): literals and named parameters
//!   (const generics, runtime symbols). `K` meets `K` and `64` meets `64` are decided at
//!   expansion; two different names never unify; a literal meeting a name is *deferred*: the macro
//!   turns it into a const assertion (const generics) or leaves it to run-time validation (runtime
//!   symbols). Rules that compute dims (convolution's output size) give [`SymDim::Expr`]: an
//!   `i64` Rust expression over the parameters, compared by text now and asserted at
//!   instantiation otherwise.

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
    /// `1 + (x + pre + post - dilation * (w - 1) - 1) / stride` (floor), the output extent of a
    /// convolution or pooling window (cudnn-frontend's rule); a known extent of 0 when the window
    /// does not fit, `None` when a step of the rule overflows `i64` (so the caller can name the
    /// attributes at fault rather than report an empty output).
    fn window_output(x: &Self, w: &Self, pre: i64, post: i64, stride: i64, dilation: i64) -> Option<Self>;
    /// `(y - 1) * stride - pre - post + dilation * (w - 1) + 1 + extra`: the smallest extent whose
    /// window output is `y`, plus `extra` (less than `stride`): the output extent of a convolution's
    /// data gradient (a transposed convolution); 0 when not positive, `None` on overflow.
    fn window_input(y: &Self, w: &Self, pre: i64, post: i64, stride: i64, dilation: i64, extra: i64) -> Option<Self>;
    /// The sum of extents (a concatenation's axis); `None` if known extents overflow `i64`.
    fn sum(terms: &[Self]) -> Option<Self>;
    /// The product of extents (an element count); `None` if known extents overflow `i64`.
    fn product(factors: &[Self]) -> Option<Self>;
}

/// The highest rank a graph's tensors may have (cuDNN itself takes at most 8; the structural JSON
/// reader refuses more too).
pub const MAX_RANK: usize = 16;

/// The most bytes one tensor's storage may span, and so the most elements it may have:
/// `i64::MAX`, the largest extent cuDNN's `int64_t` dims, strides and sizes can express (and
/// `isize::MAX` on a 64-bit host, the largest allocation Rust makes). [`crate::Graph::validate`]
/// and the builder reject a tensor over it ([`crate::GraphError::TooLarge`]), so within a valid graph
/// element counts, storage spans in bytes and every offset into a tensor are `i64` values that do
/// not overflow.
pub const MAX_BYTES: i64 = i64::MAX;

/// The number of elements of `dims`; `None` if it overflows `i64` (or a dim is negative).
pub fn checked_element_count(dims: &[i64]) -> Option<i64> {
    dims.iter().try_fold(1i64, |acc, &d| if d < 0 { None } else { acc.checked_mul(d) })
}

/// The smallest storage, in elements, that strided `dims` address (0 for an empty tensor);
/// `None` if it overflows `i64` or a dim or stride is negative.
pub fn storage_len(dims: &[i64], strides: &[i64]) -> Option<i64> {
    if dims.len() != strides.len() || dims.iter().chain(strides).any(|&v| v < 0) {
        return None;
    }
    if dims.contains(&0) {
        return Some(0);
    }
    dims.iter().zip(strides).try_fold(1i64, |acc, (&d, &s)| acc.checked_add((d - 1).checked_mul(s)?))
}

/// The bytes the storage of strided `dims` of `elements_bytes`-byte elements spans, if it is
/// within [`MAX_BYTES`].
pub fn byte_span(dims: &[i64], strides: &[i64], element_bytes: usize) -> Option<i64> {
    storage_len(dims, strides)?.checked_mul(i64::try_from(element_bytes).ok()?)
}

/// [`Dim::window_input`] on known extents; `None` if it does not give a positive extent, a
/// stride is not positive or a step overflows `i64`.
pub fn window_input_extent(y: i64, w: i64, pre: i64, post: i64, stride: i64, dilation: i64, extra: i64) -> Option<i64> {
    if stride <= 0 || dilation <= 0 {
        return None;
    }
    window_input_unchecked_sign(y, w, pre, post, stride, dilation, extra).filter(|&x| x > 0)
}

/// The transposed window rule, any sign; `None` only on overflow.
fn window_input_unchecked_sign(
    y: i64,
    w: i64,
    pre: i64,
    post: i64,
    stride: i64,
    dilation: i64,
    extra: i64,
) -> Option<i64> {
    y.checked_sub(1)?
        .checked_mul(stride)?
        .checked_sub(pre)?
        .checked_sub(post)?
        .checked_add(dilation.checked_mul(w.checked_sub(1)?)?)?
        .checked_add(1)?
        .checked_add(extra)
}

/// The window rule on known extents; `None` if it does not give a positive extent, a stride is
/// not positive, or a step of the rule overflows `i64` (user attributes can be any `i64`: the
/// rule must not wrap into a plausible extent).
pub fn window_output_extent(x: i64, w: i64, pre: i64, post: i64, stride: i64, dilation: i64) -> Option<i64> {
    if stride <= 0 || dilation <= 0 {
        return None;
    }
    window_output_or_zero(x, w, pre, post, stride, dilation).filter(|&y| y > 0)
}

/// The window rule, 0 when the window does not fit; `None` only on overflow.
fn window_output_or_zero(x: i64, w: i64, pre: i64, post: i64, stride: i64, dilation: i64) -> Option<i64> {
    let span =
        x.checked_add(pre)?.checked_add(post)?.checked_sub(dilation.checked_mul(w.checked_sub(1)?)?)?.checked_sub(1)?;
    // `stride` is positive here or the division below would be meaningless: the rules check it
    // (`spatial_list`'s minimum) and the public wrappers return `None` before.
    if span < 0 || stride <= 0 {
        return Some(0);
    }
    Some(1 + span / stride)
}

impl Dim for i64 {
    fn lit(n: i64) -> Self {
        n
    }
    fn as_lit(&self) -> Option<i64> {
        Some(*self)
    }
    fn window_output(x: &Self, w: &Self, pre: i64, post: i64, stride: i64, dilation: i64) -> Option<Self> {
        // Shape rules check the extent is positive before they use it.
        window_output_or_zero(*x, *w, pre, post, stride, dilation)
    }
    fn window_input(y: &Self, w: &Self, pre: i64, post: i64, stride: i64, dilation: i64, extra: i64) -> Option<Self> {
        window_input_unchecked_sign(*y, *w, pre, post, stride, dilation, extra).map(|x| x.max(0))
    }
    fn sum(terms: &[Self]) -> Option<Self> {
        terms.iter().try_fold(0i64, |a, b| a.checked_add(*b))
    }
    fn product(factors: &[Self]) -> Option<Self> {
        factors.iter().try_fold(1i64, |a, b| a.checked_mul(*b))
    }
}

/// A dimension as written in the DSL: a literal or a named parameter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SymDim {
    /// `64`
    Lit(i64),
    /// `K` (a const generic) or `batch` (a runtime symbol).
    Param(String),
    /// A computed extent: an `i64` Rust expression in which each parameter `P` appears as
    /// `(P as i64)`, e.g. `(1 + ((H as i64) + 2 - 3) / 1)`.
    Expr(String),
}

impl SymDim {
    /// This dim as an `i64` Rust expression.
    pub fn to_expr(&self) -> String {
        match self {
            SymDim::Lit(n) => n.to_string(),
            SymDim::Param(p) => format!("({p} as i64)"),
            SymDim::Expr(e) => format!("({e})"),
        }
    }

    /// The parameters this dim depends on.
    pub fn params(&self) -> Vec<String> {
        match self {
            SymDim::Lit(_) => Vec::new(),
            SymDim::Param(p) => vec![p.clone()],
            SymDim::Expr(e) => {
                let mut out: Vec<String> = Vec::new();
                for word in e.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
                    let is_param = word.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
                        && word != "as"
                        && word != "i64";
                    if is_param && !out.iter().any(|o| o == word) {
                        out.push(word.to_string());
                    }
                }
                out
            }
        }
    }
}

impl fmt::Display for SymDim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SymDim::Lit(n) => write!(f, "{n}"),
            SymDim::Param(p) => f.write_str(p),
            SymDim::Expr(e) => write!(f, "({})", e.replace(" as i64", "")),
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
            SymDim::Param(_) | SymDim::Expr(_) => None,
        }
    }
    fn window_output(x: &Self, w: &Self, pre: i64, post: i64, stride: i64, dilation: i64) -> Option<Self> {
        Some(match (x.as_lit(), w.as_lit()) {
            (Some(x), Some(w)) => SymDim::Lit(<i64 as Dim>::window_output(&x, &w, pre, post, stride, dilation)?),
            _ => SymDim::Expr(format!(
                "1 + ({} + {pre} + {post} - {dilation} * ({} - 1) - 1) / {stride}",
                x.to_expr(),
                w.to_expr()
            )),
        })
    }
    fn window_input(y: &Self, w: &Self, pre: i64, post: i64, stride: i64, dilation: i64, extra: i64) -> Option<Self> {
        Some(match (y.as_lit(), w.as_lit()) {
            (Some(y), Some(w)) => SymDim::Lit(<i64 as Dim>::window_input(&y, &w, pre, post, stride, dilation, extra)?),
            _ => SymDim::Expr(format!(
                "({} - 1) * {stride} - {pre} - {post} + {dilation} * ({} - 1) + 1 + {extra}",
                y.to_expr(),
                w.to_expr()
            )),
        })
    }
    fn sum(terms: &[Self]) -> Option<Self> {
        Some(match terms.iter().map(Dim::as_lit).collect::<Option<Vec<i64>>>() {
            Some(lits) => SymDim::Lit(<i64 as Dim>::sum(&lits)?),
            None if terms.len() == 1 => terms[0].clone(),
            None => SymDim::Expr(terms.iter().map(SymDim::to_expr).collect::<Vec<_>>().join(" + ")),
        })
    }
    fn product(factors: &[Self]) -> Option<Self> {
        Some(match factors.iter().map(Dim::as_lit).collect::<Option<Vec<i64>>>() {
            Some(lits) => SymDim::Lit(<i64 as Dim>::product(&lits)?),
            None if factors.len() == 1 => factors[0].clone(),
            None => SymDim::Expr(factors.iter().map(SymDim::to_expr).collect::<Vec<_>>().join(" * ")),
        })
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

/// Symbolic dimensions: collects the equalities that only instantiation can decide (a name
/// against a literal, or a computed extent against anything it is not textually equal to).
#[derive(Debug, Default, Clone)]
pub struct Symbolic {
    /// Pairs that must be equal once the parameters are known.
    pub deferred: Vec<(SymDim, SymDim)>,
}

impl DimCx<SymDim> for Symbolic {
    fn require_eq(&mut self, a: &SymDim, b: &SymDim) -> bool {
        match (a, b) {
            (SymDim::Lit(x), SymDim::Lit(y)) => x == y,
            (SymDim::Param(x), SymDim::Param(y)) => x == y,
            (SymDim::Expr(x), SymDim::Expr(y)) if x == y => true,
            _ => {
                self.deferred.push((a.clone(), b.clone()));
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
///
/// Strides of dims whose element count is over [`MAX_BYTES`] saturate at `i64::MAX` rather than
/// wrap, so such a tensor keeps failing validation as too large instead of passing with strides
/// that alias.
pub fn packed_strides(dims: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].saturating_mul(dims[i + 1].max(1));
    }
    strides
}

/// Packed strides with the channel dim (1) innermost: `[N, C, H, W]` stored NHWC (saturating
/// as [`packed_strides`]).
///
/// ```
/// assert_eq!(cudnn_runtime::dim::channels_last_strides(&[2, 3, 4, 5]), vec![60, 1, 15, 3]);
/// ```
pub fn channels_last_strides(dims: &[i64]) -> Vec<i64> {
    let mut strides = vec![0; dims.len()];
    let mut next = 1i64;
    let order = std::iter::once(1).chain((2..dims.len()).rev()).chain(std::iter::once(0));
    for axis in order.take(dims.len()) {
        strides[axis] = next;
        next = next.saturating_mul(dims[axis].max(1));
    }
    strides
}

/// Packed strides for `dims` that keep the dim order of `like` (largest stride outermost; ties
/// keep the earlier dim outer), as cudnn-frontend's `generate_stride_order_preserving_format`
/// (saturating as [`packed_strides`]).
pub(crate) fn strides_in_order_of(like: &[i64], dims: &[i64]) -> Vec<i64> {
    if like.len() != dims.len() {
        return packed_strides(dims);
    }
    let mut order: Vec<usize> = (0..dims.len()).collect();
    order.sort_by(|&a, &b| like[b].cmp(&like[a]).then(a.cmp(&b)));
    let mut strides = vec![0; dims.len()];
    let mut next = 1i64;
    for &d in order.iter().rev() {
        strides[d] = next;
        next = next.saturating_mul(dims[d].max(1));
    }
    strides
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
        assert_eq!(cx.deferred, vec![(k.clone(), SymDim::Lit(64))]);
    }

    #[test]
    fn window_rule() {
        assert_eq!(window_output_extent(32, 3, 1, 1, 1, 1), Some(32));
        assert_eq!(window_output_extent(32, 3, 0, 0, 2, 1), Some(15));
        assert_eq!(window_output_extent(7, 3, 0, 0, 1, 4), None);
        let h = SymDim::Param("H".into());
        let out = SymDim::window_output(&h, &SymDim::Lit(3), 1, 1, 2, 1).unwrap();
        assert_eq!(out.to_string(), "(1 + ((H) + 1 + 1 - 1 * (3 - 1) - 1) / 2)");
        assert_eq!(out.params(), vec!["H".to_string()]);
        assert_eq!(SymDim::window_output(&SymDim::Lit(32), &SymDim::Lit(3), 1, 1, 1, 1), Some(SymDim::Lit(32)));
        assert_eq!(SymDim::window_output(&SymDim::Lit(7), &SymDim::Lit(3), 0, 0, 1, 4), Some(SymDim::Lit(0)));
        assert_eq!(SymDim::window_output(&SymDim::Lit(7), &SymDim::Lit(3), i64::MAX, 1, 1, 1), None);
    }

    #[test]
    fn transposed_window_rule_inverts_the_window_rule() {
        for (x, w, pre, post, stride, dilation) in [(32, 3, 1, 1, 1, 1), (33, 3, 1, 1, 2, 1), (17, 5, 2, 0, 3, 2)] {
            let y = window_output_extent(x, w, pre, post, stride, dilation).unwrap();
            let smallest = window_input_extent(y, w, pre, post, stride, dilation, 0).unwrap();
            assert!(smallest <= x && x < smallest + stride, "{x} {smallest}");
            assert_eq!(window_output_extent(smallest, w, pre, post, stride, dilation), Some(y));
        }
        assert_eq!(window_input_extent(1, 3, 5, 5, 1, 1, 0), None);
        let h = SymDim::Param("H".into());
        let x = SymDim::window_input(&h, &SymDim::Lit(3), 1, 1, 1, 1, 0).unwrap();
        assert_eq!(x.to_string(), "(((H) - 1) * 1 - 1 - 1 + 1 * (3 - 1) + 1 + 0)");
    }

    #[test]
    fn sums_and_products() {
        let h = SymDim::Param("H".into());
        assert_eq!(SymDim::sum(&[SymDim::Lit(2), SymDim::Lit(3)]), Some(SymDim::Lit(5)));
        assert_eq!(SymDim::sum(&[h.clone(), SymDim::Lit(3)]).unwrap().to_string(), "((H) + 3)");
        assert_eq!(SymDim::sum(std::slice::from_ref(&h)), Some(h.clone()));
        assert_eq!(SymDim::product(&[SymDim::Lit(2), SymDim::Lit(3)]), Some(SymDim::Lit(6)));
        assert_eq!(SymDim::product(&[h.clone(), SymDim::Lit(3)]).unwrap().params(), vec!["H".to_string()]);
        assert_eq!(<i64 as Dim>::sum(&[2, 3]), Some(5));
        assert_eq!(<i64 as Dim>::product(&[2, 3, 4]), Some(24));
    }

    #[test]
    fn huge_extents_overflow_to_none_instead_of_wrapping_or_saturating() {
        let big = i64::MAX;
        assert_eq!(<i64 as Dim>::sum(&[big, 1]), None);
        assert_eq!(SymDim::sum(&[SymDim::Lit(big), SymDim::Lit(1)]), None);
        assert_eq!(<i64 as Dim>::product(&[1 << 32, 1 << 32]), None);
        assert_eq!(SymDim::product(&[SymDim::Lit(1 << 32), SymDim::Lit(1 << 32)]), None);
        assert_eq!(checked_element_count(&[1 << 55, 1 << 10]), None);
        assert_eq!(checked_element_count(&[1 << 31, 1 << 31]), Some(1 << 62));
        assert_eq!(storage_len(&[3, 2], &[big, 1]), None);
        assert_eq!(storage_len(&[1, 2], &[big, 1]), Some(2), "a dim of extent 1 adds no span whatever its stride");
        assert_eq!(byte_span(&[1 << 62], &[1], 4), None);
        assert_eq!(byte_span(&[1 << 60], &[1], 4), Some(1 << 62));
        // Padding, dilation and strides of any i64 value: no overflow, no wrapped extent.
        assert_eq!(window_output_extent(32, 3, big, big, 1, 1), None);
        assert_eq!(window_output_extent(32, 3, big - 40, 0, big, 1), Some(1));
        assert_eq!(window_output_extent(32, 3, 1, 1, 1, big), None);
        assert_eq!(window_output_extent(32, i64::MIN, 1, 1, 1, 1), None);
        assert_eq!(window_input_extent(1 << 40, 3, 0, 0, 1 << 40, 1, 0), None);
        assert_eq!(window_input_extent(2, 3, 0, 0, 1, 1, big), None);
        assert_eq!(window_input_extent(2, i64::MIN, 0, 0, 1, 1, 0), None);
        assert_eq!(packed_strides(&[1 << 40, 1 << 40, 1 << 40]), vec![i64::MAX, 1 << 40, 1]);
        assert_eq!(channels_last_strides(&[1 << 40, 1 << 40, 1 << 40])[0], i64::MAX);
    }

    #[test]
    fn strides_and_sizes() {
        assert_eq!(packed_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(storage_len(&[2, 3, 4], &[12, 4, 1]), Some(24));
        assert_eq!(storage_len(&[2, 3], &[1, 2]), Some(6));
        assert_eq!(storage_len(&[2, 0], &[1, 2]), Some(0));
        assert_eq!(shape_string(&[SymDim::Lit(1), SymDim::Param("M".into())]), "[1, M]");
    }
}
