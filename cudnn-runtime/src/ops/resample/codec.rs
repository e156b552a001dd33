//! Pooling in cudnn-frontend's JSON: tag `RESAMPLE` (`Resample_attributes`): `resample_mode`,
//! `padding_mode` (which must be the one the mode implies: `NEG_INF_PAD` for max pooling,
//! `ZERO_PAD` for averages), `generate_index`, `window`, `stride` and the paddings, written with
//! every field, defaults filled in.

use super::{signature, Resample, ResampleMode, NAME};
use crate::codec::json::{wrong_type, Json, Obj};
use crate::codec::{ints, CodecError};
use crate::ops::family::OpFamily;
use crate::ops::codec::{
    call_attrs, deny_unknown_node_fields, FrontendAttr, FrontendFields, FrontendNode, ReadError, WriteCx,
};
use crate::ops::conv::codec::{read_window, spatial_rank, write_window};
use crate::ops::{AttrValue, Op};

/// The node tag.
pub(crate) const TAG: &str = "RESAMPLE";

/// `Resample_attributes`'s own fields.
const FIELDS: [&str; 7] =
    ["generate_index", "padding_mode", "post_padding", "pre_padding", "resample_mode", "stride", "window"];

/// A `RESAMPLE` node: its outputs follow `generate_index`.
pub(crate) fn read(n: &Obj<'_>, label: &str, _tag: &str) -> Result<FrontendNode, ReadError> {
    deny_unknown_node_fields(n, &FIELDS)?;
    let mut attrs = Vec::new();
    read_window(n, &mut attrs)?;
    let mode_name = n.str("resample_mode")?;
    let mode = ResampleMode::from_frontend_name(mode_name).ok_or_else(|| CodecError::UnknownEnum {
        path: n.field_path("resample_mode"),
        kind: "pooling mode",
        value: mode_name.to_string(),
    })?;
    if let Some(padding) = n.opt_str("padding_mode")? {
        if padding != mode.frontend_padding_mode() {
            return Err(CodecError::Unsupported {
                path: n.field_path("padding_mode"),
                feature: format!("{mode_name} with padding mode {padding}"),
            }
            .into());
        }
    }
    let window =
        n.opt_i64_list("window")?.ok_or_else(|| CodecError::MissingField { path: n.field_path("window") })?;
    attrs.push(("mode", "mode", FrontendAttr::Value(AttrValue::Name(mode.name().into()))));
    attrs.push(("window", "window", FrontendAttr::Value(AttrValue::IntList(window))));
    if let Some(index) = n.get("generate_index") {
        match index {
            Json::Null => {}
            Json::Bool(b) => attrs.push(("index", "index", FrontendAttr::Value(AttrValue::Bool(*b)))),
            other => return Err(wrong_type(&n.field_path("generate_index"), "a boolean", other).into()),
        }
    }
    let outputs = match Op::from_call(NAME, &call_attrs(&attrs)).map_err(ReadError::attr(label))? {
        Op::Resample(r) => r.outputs(),
        _ => signature().outputs,
    };
    Ok(FrontendNode { outputs, ..FrontendNode::plain(signature(), attrs) })
}

/// The fields of a `RESAMPLE` node. A graph whose attributes do not fit its ranks (it does not
/// validate) gets the attributes as written.
pub(crate) fn write(r: &Resample, cx: &WriteCx<'_>) -> FrontendFields {
    let (window, w) = r.geometry(spatial_rank(cx)).unwrap_or_else(|_| (r.window.clone(), r.geometry.as_written()));
    let mut fields = vec![
        ("generate_index", Json::Bool(r.index)),
        ("padding_mode", Json::str(r.mode.frontend_padding_mode())),
        ("resample_mode", Json::str(r.mode.frontend_name())),
        ("window", ints(&window)),
    ];
    fields.extend(write_window(&w));
    fields.push(("tag", Json::str(TAG)));
    FrontendFields::plain(fields)
}
