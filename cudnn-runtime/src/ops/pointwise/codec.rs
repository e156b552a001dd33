//! Pointwise ops in cudnn-frontend's JSON: tag `POINTWISE` (`Pointwise_attributes`): `mode` in
//! cuDNN's spelling (`RELU_FWD`), `axis`, and the float parameters as hex bit patterns, each
//! readable only for the modes that take it.

use super::{Pointwise, PointwiseMode};
use crate::codec::float::same_f32;
use crate::codec::json::{Json, Obj};
use crate::codec::{f32_or_null, f32_value, CodecError};
use crate::ops::codec::{deny_unknown_node_fields, CallAttrs, FrontendAttr, FrontendFields, FrontendNode, ReadError};
use crate::ops::AttrValue;

/// The node tag.
pub(crate) const TAG: &str = "POINTWISE";

/// `Pointwise_attributes`'s own fields.
const FIELDS: [&str; 8] = [
    "axis",
    "elu_alpha",
    "mode",
    "relu_lower_clip",
    "relu_lower_clip_slope",
    "relu_upper_clip",
    "softplus_beta",
    "swish_beta",
];

/// cudnn-frontend's `Pointwise_attributes` float fields, in the order its JSON lists them.
const FLOAT_FIELDS: [&str; 6] =
    ["relu_lower_clip", "relu_upper_clip", "relu_lower_clip_slope", "swish_beta", "elu_alpha", "softplus_beta"];

/// The DSL attribute a cudnn-frontend pointwise field sets, for `mode`; `None` if the mode does not
/// take it. (`beta` is `swish_beta` for swish and `softplus_beta` for softplus.)
fn dsl_attr_of(field: &str, mode: PointwiseMode) -> Option<&'static str> {
    use PointwiseMode as M;
    let name = match field {
        "relu_lower_clip" => "lower_clip",
        "relu_upper_clip" => "upper_clip",
        "relu_lower_clip_slope" => "lower_clip_slope",
        "elu_alpha" => "alpha",
        "axis" => "axis",
        "swish_beta" if matches!(mode, M::Swish | M::SwishBwd) => "beta",
        "softplus_beta" if matches!(mode, M::Softplus | M::SoftplusBwd) => "beta",
        _ => return None,
    };
    mode.signature().attrs.iter().any(|a| a.name == name).then_some(name)
}

/// A `POINTWISE` node.
pub(crate) fn read(n: &Obj<'_>, label: &str) -> Result<FrontendNode, ReadError> {
    deny_unknown_node_fields(n, &FIELDS)?;
    let mode_name = n.str("mode")?;
    let mode = PointwiseMode::from_cudnn_name(mode_name).ok_or_else(|| CodecError::UnknownEnum {
        path: n.field_path("mode"),
        kind: "pointwise mode",
        value: mode_name.to_string(),
    })?;
    let mut attrs = Vec::new();
    for field in std::iter::once("axis").chain(FLOAT_FIELDS) {
        let Some(v) = n.get(field) else { continue };
        let dsl = dsl_attr_of(field, mode).ok_or_else(|| CodecError::AttrNotAccepted {
            node: label.to_string(),
            mode: mode.cudnn_name(),
            field,
        })?;
        let value = if field == "axis" {
            FrontendAttr::Int(v.as_i64(&n.field_path(field))?)
        } else {
            FrontendAttr::F32(f32_value(v, &n.field_path(field))?)
        };
        attrs.push((field, dsl, value));
    }
    Ok(FrontendNode { check_exact_attrs, ..FrontendNode::plain(mode.signature(), attrs) })
}

/// Our exact attributes must agree with cudnn-frontend's fields, both ways: each field's value is
/// the exact attribute's rounded to f32, and each exact attribute has its field.
fn check_exact_attrs(fe: &FrontendNode, n: &Obj<'_>, ext_path: &str, ext: &CallAttrs) -> Result<(), ReadError> {
    for (field, dsl, value) in &fe.attrs {
        let agrees = match (ext.iter().find(|(k, _)| k == dsl).map(|(_, v)| v), value) {
            (Some(AttrValue::Int(a)), FrontendAttr::Int(b)) => a == b,
            (Some(AttrValue::Float(a)), FrontendAttr::F32(b)) => same_f32(*a as f32, *b),
            (Some(AttrValue::Int(a)), FrontendAttr::F32(b)) => same_f32(*a as f32, *b),
            _ => false,
        };
        if !agrees {
            return Err(CodecError::ExtensionMismatch { path: format!("{ext_path}.{dsl}"), field: n.field_path(field) }
                .into());
        }
    }
    let mode = PointwiseMode::from_name(fe.call);
    if let Some((k, _)) = ext.iter().find(|(k, _)| !fe.attrs.iter().any(|(_, dsl, _)| dsl == k)) {
        let field = std::iter::once("axis")
            .chain(FLOAT_FIELDS)
            .find(|f| mode.and_then(|m| dsl_attr_of(f, m)) == Some(k.as_str()))
            .unwrap_or(k.as_str());
        return Err(CodecError::ExtensionMismatch { path: format!("{ext_path}.{k}"), field: n.field_path(field) }.into());
    }
    Ok(())
}

/// The fields of a `POINTWISE` node: every parameter, `null` where unset.
pub(crate) fn write(p: &Pointwise) -> FrontendFields {
    FrontendFields::plain(vec![
        ("axis", p.axis.map_or(Json::Null, Json::Int)),
        ("elu_alpha", f32_or_null(p.elu_alpha)),
        ("mode", Json::str(p.mode.cudnn_name())),
        ("relu_lower_clip", f32_or_null(p.relu_lower_clip)),
        ("relu_lower_clip_slope", f32_or_null(p.relu_lower_clip_slope)),
        ("relu_upper_clip", f32_or_null(p.relu_upper_clip)),
        ("softplus_beta", f32_or_null(p.softplus_beta)),
        ("swish_beta", f32_or_null(p.swish_beta)),
        ("tag", Json::str(TAG)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointwise_fields_map_to_dsl_attributes() {
        assert_eq!(dsl_attr_of("relu_upper_clip", PointwiseMode::Relu), Some("upper_clip"));
        assert_eq!(dsl_attr_of("relu_upper_clip", PointwiseMode::ReluBwd), Some("upper_clip"));
        assert_eq!(dsl_attr_of("relu_upper_clip", PointwiseMode::Add), None);
        assert_eq!(dsl_attr_of("swish_beta", PointwiseMode::Swish), Some("beta"));
        assert_eq!(dsl_attr_of("swish_beta", PointwiseMode::Softplus), None);
        assert_eq!(dsl_attr_of("softplus_beta", PointwiseMode::SoftplusBwd), Some("beta"));
        assert_eq!(dsl_attr_of("elu_alpha", PointwiseMode::EluBwd), Some("alpha"));
        assert_eq!(dsl_attr_of("axis", PointwiseMode::GenIndex), Some("axis"));
        assert_eq!(dsl_attr_of("axis", PointwiseMode::Exp), None);
    }
}
