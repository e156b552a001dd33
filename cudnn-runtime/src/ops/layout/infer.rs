//! The layout ops' shape rules (reshape, slice, concatenation) and the view arithmetic they
//! share with the lowering: whether a reshape of strided memory is a view, and its strides.

use super::super::shape::{normalize_axis, OutputMeta, ShapeError, ShapeErrorKind, TensorMeta};
use super::super::signature::PortSpec;
use crate::dim::{shape_string, Dim, DimCx};

/// The most inputs one `concatenate` takes.
pub const MAX_CONCAT_INPUTS: usize = super::super::shape::MAX_INPUT_PORTS;

/// A concatenation's ports, `X[0]` to `X[31]`; an instance with `n` inputs has the first `n`.
pub const CONCAT_PORTS: &[PortSpec; MAX_CONCAT_INPUTS] = &concat_ports();

const fn concat_ports() -> [PortSpec; MAX_CONCAT_INPUTS] {
    const NAMES: [&str; MAX_CONCAT_INPUTS] = [
        "X[0]", "X[1]", "X[2]", "X[3]", "X[4]", "X[5]", "X[6]", "X[7]", "X[8]", "X[9]", "X[10]", "X[11]", "X[12]",
        "X[13]", "X[14]", "X[15]", "X[16]", "X[17]", "X[18]", "X[19]", "X[20]", "X[21]", "X[22]", "X[23]", "X[24]",
        "X[25]", "X[26]", "X[27]", "X[28]", "X[29]", "X[30]", "X[31]",
    ];
    let mut ports = [PortSpec::tensor(""); MAX_CONCAT_INPUTS];
    let mut i = 0;
    while i < MAX_CONCAT_INPUTS {
        ports[i].name = NAMES[i];
        i += 1;
    }
    ports
}

/// A reshape's rule: `shape` is a non-empty list of positive extents (a symbolic one is checked
/// when the graph is built) with X's element count.
pub(super) fn reshape_infer<D: Dim>(
    op: &'static str,
    x: &TensorMeta<D>,
    shape: &[D],
    cx: &mut impl DimCx<D>,
) -> Result<Vec<D>, ShapeError> {
    if shape.is_empty() || shape.iter().any(|d| d.as_lit().is_some_and(|n| n <= 0)) {
        return Err(ShapeError::on_attr(
            "shape",
            ShapeErrorKind::Rule {
                op,
                rule: format!(
                    "attribute `shape` {} must be a non-empty list of positive extents",
                    shape_string(shape)
                ),
            },
        ));
    }
    // Valid inputs never overflow their count (it is within `dim::MAX_BYTES`); one that does
    // differs from every `shape`'s count.
    if !cx.require_eq_count(&x.dims, shape) {
        let count = |dims: &[D]| D::product(dims).map_or_else(|| "more than i64::MAX".to_string(), |n| n.to_string());
        return Err(ShapeError::on_attr(
            "shape",
            ShapeErrorKind::Rule {
                op,
                rule: format!(
                    "X {} cannot be reshaped to {}: the element counts differ ({} against {})",
                    shape_string(&x.dims),
                    shape_string(shape),
                    count(&x.dims),
                    count(shape)
                ),
            },
        ));
    }
    Ok(shape.to_vec())
}

/// `ceil((limit - start) / step)` for `0 <= start < limit` and `step >= 1`, written so that no
/// step overflows (`limit - start + step - 1` does for a step near `i64::MAX`).
pub(super) fn slice_extent(start: i64, limit: i64, step: i64) -> i64 {
    (limit - start - 1) / step + 1
}

/// Packed row-major strides of `dims`; `None` if a stride overflows `i64`.
pub(super) fn packed<D: Dim>(dims: &[D]) -> Option<Vec<D>> {
    let mut strides = vec![D::lit(1); dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = D::product(&[strides[i + 1].clone(), dims[i + 1].clone()])?;
    }
    Some(strides)
}

/// A contiguous run of X's dims: its element count, the stride of its innermost dim, and its
/// outermost and innermost dims.
pub(super) struct Run<D> {
    count: D,
    stride: D,
    outer: usize,
    inner: usize,
}

/// A reshape of strided X as a view ([`Layout::view_strides`]): Y's strides, or the two X dims
/// (outer, inner) across whose gap Y would have to merge or split. Equalities are exact (over
/// [`SymDim`](crate::dim::SymDim), equal canonical forms), so a symbolic run that only some
/// parameter values would match counts as a gap.
pub(super) fn reshape_view<D: Dim>(x_dims: &[D], x_strides: &[D], y_dims: &[D]) -> Result<Vec<D>, (usize, usize)> {
    let kept: Vec<usize> = (0..x_dims.len()).filter(|&i| !x_dims[i].is_one()).collect();
    let mut runs: Vec<Run<D>> = Vec::new();
    for &i in kept.iter().rev() {
        if let Some(run) = runs.last_mut() {
            let next = D::product(&[x_strides[run.outer].clone(), x_dims[run.outer].clone()]);
            if next.as_ref() == Some(&x_strides[i]) {
                run.count = D::product(&[run.count.clone(), x_dims[i].clone()]).ok_or((i, run.outer))?;
                run.outer = i;
                continue;
            }
        }
        runs.push(Run { count: x_dims[i].clone(), stride: x_strides[i].clone(), outer: i, inner: i });
    }
    let gap = |r: usize| match (runs.get(r), runs.get(r + 1)) {
        (Some(run), Some(next)) => (next.inner, run.outer),
        (Some(run), None) => (run.outer, run.inner),
        (None, _) => (0, 0),
    };
    let mut strides = vec![D::lit(1); y_dims.len()];
    let (mut r, mut acc) = (0usize, D::lit(1));
    for (j, y) in y_dims.iter().enumerate().rev() {
        let Some(run) = runs.get(r) else {
            // Past X's last run only dims of one element remain (the counts are equal). Each
            // takes the stride a packed layout gives it, the span of the dims inside it, never
            // 1: cuDNN reads a matrix `[1, K]` with strides `[1, 1]` as column-major with
            // leading dimension 1, and on the H100 (cuDNN 9.19) the decode attention block's
            // output projection, whose A is such a reshape of attention's transposed output,
            // ran its GEMV 5x slower (72 us against 14) than with `[K, 1]`.
            if !y.is_one() {
                return Err(gap(runs.len().saturating_sub(1)));
            }
            if let Some(inner) = y_dims.get(j + 1) {
                strides[j] = D::product(&[strides[j + 1].clone(), inner.clone()])
                    .ok_or(gap(runs.len().saturating_sub(1)))?;
            }
            continue;
        };
        strides[j] = D::product(&[run.stride.clone(), acc.clone()]).ok_or(gap(r))?;
        if y.is_one() {
            continue;
        }
        acc = D::product(&[acc.clone(), y.clone()]).ok_or(gap(r))?;
        if acc == run.count {
            (r, acc) = (r + 1, D::lit(1));
        }
    }
    if r < runs.len() {
        return Err(gap(r));
    }
    Ok(strides)
}

/// A slice's rule: one `start`, `limit` and `step` per dim of X with `0 <= start < limit <=
/// X[i]` and `step >= 1`; `Y[i] = ceil((limit - start) / step)`. Bounds may be symbolic
/// (`start = [0, 0, H, 0]`, `limit = [B, S, 2 * H, D]`): an inequality that holds or fails
/// whatever the parameters is decided now, any other waits for them ([`DimCx::require_le`]).
pub(super) fn slice_infer<D: Dim>(
    op: &'static str,
    x: &TensorMeta<D>,
    start: &[D],
    limit: &[D],
    steps: &[i64],
    cx: &mut impl DimCx<D>,
) -> Result<Vec<D>, ShapeError> {
    let rank = x.dims.len();
    let x_shape = shape_string(&x.dims);
    let rule = |attr: &'static str, rule: String| Err(ShapeError::on_attr(attr, ShapeErrorKind::Rule { op, rule }));
    for (attr, list) in [("start", start.len()), ("limit", limit.len()), ("step", steps.len())] {
        if list != rank {
            return rule(attr, format!("`{attr}` has {list} values, but X {x_shape} has {rank} dims: give one per dim"));
        }
    }
    let mut dims = Vec::with_capacity(rank);
    for i in 0..rank {
        let (s, l, step) = (&start[i], &limit[i], steps[i]);
        if step < 1 {
            return rule("step", format!("`step` {step} of dim {i} must be at least 1"));
        }
        if !cx.require_le(&D::lit(0), s) {
            return rule("start", format!("`start` {s} of dim {i} is negative"));
        }
        if !cx.require_le(l, &x.dims[i]) {
            return rule(
                "limit",
                format!(
                    "`limit` {l} of dim {i} reaches past X {x_shape}, whose dim {i} is {}: a slice is a view \
                     and stays inside its base",
                    x.dims[i]
                ),
            );
        }
        let first_past = D::sum(&[s.clone(), D::lit(1)]);
        if !first_past.is_some_and(|p| cx.require_le(&p, l)) {
            return rule("limit", format!("dim {i} is sliced {s}..{l}, which is empty: `start` must be less than `limit`"));
        }
        let Some(extent) = D::slice_extent(s, l, step) else {
            return rule("limit", format!("dim {i} sliced {s}..{l} by {step} overflows i64"));
        };
        dims.push(extent);
    }
    Ok(dims)
}

/// A concatenation's rule: one rank, equal dims outside `axis`, Y's `axis` the sum; the in-place
/// index names an input.
pub(super) fn concat_infer<D: Dim>(
    op: &'static str,
    axis: i64,
    in_place_index: Option<i64>,
    inputs: &[TensorMeta<D>],
    cx: &mut impl DimCx<D>,
) -> Result<OutputMeta<D>, ShapeError> {
    let Some(x0) = inputs.first() else {
        return Err(ShapeError::general(ShapeErrorKind::Arity { op, expected: 1, found: 0 }));
    };
    let rank = x0.dims.len();
    let axis = normalize_axis(op, axis, rank).map_err(ShapeError::general)?;
    for (k, x) in inputs.iter().enumerate().skip(1) {
        let port = CONCAT_PORTS[k].name;
        if x.dims.len() != rank {
            return Err(ShapeError::at(
                k,
                ShapeErrorKind::Rank {
                    op,
                    port,
                    expected: format!("the rank of X[0] {} ({rank})", shape_string(&x0.dims)),
                    found: x.dims.len(),
                    shape: shape_string(&x.dims),
                },
            ));
        }
        for d in (0..rank).filter(|&d| d != axis) {
            if !cx.require_eq(&x.dims[d], &x0.dims[d]) {
                return Err(ShapeError::at(
                    k,
                    ShapeErrorKind::PortShape {
                        op,
                        port,
                        expected: format!(
                            "equal to X[0] {} outside axis {axis} (dim {d} is {})",
                            shape_string(&x0.dims),
                            x0.dims[d]
                        ),
                        found: shape_string(&x.dims),
                    },
                ));
            }
        }
    }
    if let Some(i) = in_place_index {
        if usize::try_from(i).map_or(true, |i| i >= inputs.len()) {
            return Err(ShapeError::general(ShapeErrorKind::Rule {
                op,
                rule: format!("attribute `in_place_index` {i} names no input (there are {})", inputs.len()),
            }));
        }
    }
    let mut dims = x0.dims.clone();
    let along: Vec<D> = inputs.iter().map(|x| x.dims[axis].clone()).collect();
    let Some(total) = D::sum(&along) else {
        let extents: Vec<String> = along.iter().map(ToString::to_string).collect();
        return Err(ShapeError::general(ShapeErrorKind::Rule {
            op,
            rule: format!(
                "the inputs' extents along axis {axis} ({}) add up to more than i64::MAX",
                extents.join(" + ")
            ),
        }));
    };
    dims[axis] = total;
    // Y's type is the graph's (the intermediate type, or the declared output type), as for a
    // pointwise op: an f32 intermediate and an f16 input concatenate into either.
    Ok(OutputMeta { dims, dtype: None, reason: None })
}
