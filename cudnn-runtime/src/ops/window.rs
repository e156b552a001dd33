//! What a convolution and a pooling op share: their padding, stride and dilation attributes as a
//! call writes them ([`WindowAttrs`]), resolved for a spatial rank into a [`Window`], and the
//! per-spatial-dim list rule both check them with, and the rules on the tensors they slide over.

use serde::{Deserialize, Serialize};

use super::attrs::{AttrError, Attrs};
use super::shape::{rule, ShapeError, ShapeErrorKind, TensorMeta};
use super::signature::AttrValue;
use crate::dim::{shape_string, Dim};
use crate::DataType;

/// The types a window slides over (convolution's operands, pooling's X): input `index` of `op`,
/// on port `port`, must be one.
pub(crate) fn check_spatial_type<D: Dim>(
    op: &'static str,
    index: usize,
    port: &'static str,
    t: &TensorMeta<D>,
) -> Result<(), ShapeError> {
    use DataType::*;
    if matches!(t.dtype, F16 | BF16 | F32 | F64 | I8 | Fp8E4M3 | Fp8E5M2) {
        return Ok(());
    }
    let expected = "f16, bf16, f32, f64, fp8 or i8";
    Err(ShapeError::at(index, ShapeErrorKind::DType { op, port, found: t.dtype, expected }))
}

/// The rank a window slides over: `[N, C]` and 1 to 3 spatial dims. Input 0 of `op`, on port
/// `port`; its rank.
pub(crate) fn check_spatial_rank<D: Dim>(
    op: &'static str,
    port: &'static str,
    t: &TensorMeta<D>,
) -> Result<usize, ShapeError> {
    let r = t.dims.len();
    if (3..=5).contains(&r) {
        return Ok(r);
    }
    Err(ShapeError::at(
        0,
        ShapeErrorKind::Rank {
            op,
            port,
            expected: "rank 3, 4 or 5 ([N, C] and 1 to 3 spatial dims)".into(),
            found: r,
            shape: shape_string(&t.dims),
        },
    ))
}

/// A convolution's or pooling window's geometry, one value per spatial dim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// Padding before.
    pub pre: Vec<i64>,
    /// Padding after.
    pub post: Vec<i64>,
    /// Stride.
    pub stride: Vec<i64>,
    /// Dilation.
    pub dilation: Vec<i64>,
}

/// The padding, stride and dilation attributes of a convolution or pooling op as written, one
/// value per spatial dim (empty lists take the defaults; pooling has no dilation).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowAttrs {
    /// Padding before each spatial dim (default 0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_padding: Vec<i64>,
    /// Padding after each spatial dim (default 0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_padding: Vec<i64>,
    /// The stride per spatial dim (default 1 for a convolution, the window for pooling).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stride: Vec<i64>,
    /// The filter dilation per spatial dim (default 1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dilation: Vec<i64>,
}

impl WindowAttrs {
    /// `padding` (setting both), `pre_padding`, `post_padding`, `stride` and `dilation` of a call.
    pub(crate) fn from_attrs(op: &str, a: &Attrs<'_>) -> Result<Self, AttrError> {
        let both = a.int_list("padding");
        let (pre, post) = (a.int_list("pre_padding"), a.int_list("post_padding"));
        if both.is_some() {
            for (name, given) in [("pre_padding", &pre), ("post_padding", &post)] {
                if given.is_some() {
                    return Err(AttrError::Invalid {
                        op: op.to_string(),
                        attr: name.to_string(),
                        reason: "cannot be given with `padding` (which sets both paddings)".into(),
                    });
                }
            }
        }
        Ok(WindowAttrs {
            pre_padding: pre.or_else(|| both.clone()).unwrap_or_default(),
            post_padding: post.or(both).unwrap_or_default(),
            stride: a.int_list("stride").unwrap_or_default(),
            dilation: a.int_list("dilation").unwrap_or_default(),
        })
    }

    /// The attribute names to blame for the paddings: `padding` when they agree (as `padding`
    /// sets them), else their own.
    pub(crate) fn padding_names(&self) -> (&'static str, &'static str) {
        if self.pre_padding == self.post_padding {
            ("padding", "padding")
        } else {
            ("pre_padding", "post_padding")
        }
    }

    /// The call attributes of the paddings: `padding` when they agree.
    pub(crate) fn padding_attrs(&self, out: &mut Vec<(String, AttrValue)>) {
        let (pre, post) = (&self.pre_padding, &self.post_padding);
        if !pre.is_empty() && pre == post {
            out.push(("padding".into(), AttrValue::IntList(pre.clone())));
            return;
        }
        if !pre.is_empty() {
            out.push(("pre_padding".into(), AttrValue::IntList(pre.clone())));
        }
        if !post.is_empty() {
            out.push(("post_padding".into(), AttrValue::IntList(post.clone())));
        }
    }

    /// The call attribute `name` of a list, if it is set.
    pub(crate) fn list_attr(name: &str, list: &[i64], out: &mut Vec<(String, AttrValue)>) {
        if !list.is_empty() {
            out.push((name.into(), AttrValue::IntList(list.to_vec())));
        }
    }

    /// The window of `op` for `spatial` spatial dims, defaults filled in: paddings 0, the stride
    /// `default_stride` (1s if empty), dilation 1.
    pub(crate) fn resolve(
        &self,
        op: &'static str,
        spatial: usize,
        default_stride: &[i64],
    ) -> Result<Window, ShapeErrorKind> {
        let (pre_name, post_name) = self.padding_names();
        let stride = if self.stride.is_empty() { default_stride } else { &self.stride };
        Ok(Window {
            pre: spatial_list(op, pre_name, &self.pre_padding, spatial, 0, 0)?,
            post: spatial_list(op, post_name, &self.post_padding, spatial, 0, 0)?,
            stride: spatial_list(op, "stride", stride, spatial, 1, 1)?,
            dilation: spatial_list(op, "dilation", &self.dilation, spatial, 1, 1)?,
        })
    }

    /// The attributes as written, for a graph whose attributes do not fit its ranks.
    pub(crate) fn as_written(&self) -> Window {
        Window {
            pre: self.pre_padding.clone(),
            post: self.post_padding.clone(),
            stride: self.stride.clone(),
            dilation: self.dilation.clone(),
        }
    }
}

/// A per-spatial-dim list attribute with its default, checked against the spatial rank and `min`.
pub(crate) fn spatial_list(
    op: &'static str,
    attr: &str,
    given: &[i64],
    spatial: usize,
    default: i64,
    min: i64,
) -> Result<Vec<i64>, ShapeErrorKind> {
    if given.is_empty() {
        return Ok(vec![default; spatial]);
    }
    if given.len() != spatial {
        return Err(rule(
            op,
            format!(
                "attribute `{attr}` {given:?} has {} value{} but the op has {spatial} spatial dim{} (one value each)",
                given.len(),
                if given.len() == 1 { "" } else { "s" },
                if spatial == 1 { "" } else { "s" }
            ),
        ));
    }
    if let Some(v) = given.iter().find(|&&v| v < min) {
        return Err(rule(op, format!("attribute `{attr}` {given:?} has {v}; each value must be at least {min}")));
    }
    Ok(given.to_vec())
}
