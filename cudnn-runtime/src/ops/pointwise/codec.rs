//! Pointwise ops in cudnn-frontend's JSON: tag `POINTWISE` (`Pointwise_attributes`): `mode` in
//! cuDNN's spelling (`RELU_FWD`), `axis`, and the float parameters as hex bit patterns, each
//! readable only for the modes that take it.

use super::{Pointwise, PointwiseMode, AXIS, PARAMS};
use crate::codec::float::same_f32;
use crate::codec::json::{Json, Obj};
use crate::codec::{f32_or_null, f32_value, CodecError};
use crate::ops::codec::{deny_unknown_node_fields, CallAttrs, FrontendAttr, FrontendFields, FrontendNode, ReadError, WriteCx};
use crate::ops::AttrValue;

/// The node tag.
pub(crate) const TAG: &str = "POINTWISE";

/// `Pointwise_attributes`'s own fields, in alphabetical order (as the unknown-field error lists
/// them): the mode, the axis and every parameter's.
fn fields() -> Vec<&'static str> {
    let mut fields: Vec<&'static str> = ["mode", AXIS].into_iter().chain(PARAMS.iter().map(|p| p.field)).collect();
    fields.sort_unstable();
    fields
}

/// The DSL attribute a cudnn-frontend pointwise field sets, for `mode`; `None` if the mode does
/// not take it.
fn dsl_attr_of(field: &str, mode: PointwiseMode) -> Option<&'static str> {
    if field == AXIS {
        return mode.signature().attrs.iter().any(|a| a.name == AXIS).then_some(AXIS);
    }
    mode.params().floats.iter().find(|p| p.field == field).map(|p| p.attr)
}

/// A `POINTWISE` node.
pub(crate) fn read(n: &Obj<'_>, label: &str, _tag: &str) -> Result<FrontendNode, ReadError> {
    deny_unknown_node_fields(n, &fields())?;
    let mode_name = n.str("mode")?;
    let mode = PointwiseMode::from_cudnn_name(mode_name).ok_or_else(|| CodecError::UnknownEnum {
        path: n.field_path("mode"),
        kind: "pointwise mode",
        value: mode_name.to_string(),
    })?;
    let mut attrs = Vec::new();
    for field in std::iter::once(AXIS).chain(PARAMS.iter().map(|p| p.field)) {
        let Some(v) = n.get(field) else { continue };
        let dsl = dsl_attr_of(field, mode).ok_or_else(|| CodecError::AttrNotAccepted {
            node: label.to_string(),
            mode: mode.cudnn_name(),
            field,
        })?;
        let value = if field == AXIS {
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
        let field = std::iter::once(AXIS)
            .chain(PARAMS.iter().map(|p| p.field))
            .find(|f| mode.and_then(|m| dsl_attr_of(f, m)) == Some(k.as_str()))
            .unwrap_or(k.as_str());
        return Err(CodecError::ExtensionMismatch { path: format!("{ext_path}.{k}"), field: n.field_path(field) }.into());
    }
    Ok(())
}

/// The fields of a `POINTWISE` node: every parameter, `null` where unset.
pub(crate) fn write(p: &Pointwise, _cx: &WriteCx<'_>) -> FrontendFields {
    let mut fields = vec![(AXIS, p.axis.map_or(Json::Null, Json::Int)), ("mode", Json::str(p.mode.cudnn_name()))];
    fields.extend(PARAMS.iter().map(|param| (param.field, f32_or_null(param.get(p)))));
    fields.push(("tag", Json::str(TAG)));
    FrontendFields::plain(fields)
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
