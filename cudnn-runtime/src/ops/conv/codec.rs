//! Convolutions in cudnn-frontend's JSON: tags `CONV_FPROP`, `CONV_DGRAD`, `CONV_WGRAD`
//! (`Conv_*_attributes`), written with every field cudnn-frontend writes, defaults filled in:
//! `pre_padding`, `post_padding`, `stride`, `dilation` (one value per spatial dim) and
//! `math_mode`. Our exact attributes ride in the node's `cudnn_graph.attrs`, always.
//!
//! cudnn-frontend has no field for the filter extents of a filter gradient or the output padding
//! of a data gradient: a node read from its fields alone takes them from its DW or DX tensor
//! ([`resolve`]).

use super::{Conv, ConvKind, ConvMode, Window};
use crate::codec::json::{Json, Obj};
use crate::codec::{ints, CodecError};
use crate::dim::{shape_string, window_input_extent};
use crate::ops::codec::{
    call_attrs, deny_unknown_node_fields, FrontendAttr, FrontendFields, FrontendNode, NodeDims, Pending, ReadError,
    WriteCx,
};
use crate::ops::{AttrValue, Op};

/// `Conv_{fprop,dgrad,wgrad}_attributes`'s own fields.
const FIELDS: [&str; 5] = ["dilation", "math_mode", "post_padding", "pre_padding", "stride"];

/// The padding and stride fields a convolution and a pooling window share, as DSL attributes
/// (the DSL spells them as cudnn-frontend does).
pub(crate) fn read_window(n: &Obj<'_>, attrs: &mut Vec<(&'static str, &'static str, FrontendAttr)>) -> Result<(), CodecError> {
    for field in ["pre_padding", "post_padding", "stride"] {
        if let Some(v) = n.opt_i64_list(field)? {
            attrs.push((field, field, FrontendAttr::Value(AttrValue::IntList(v))));
        }
    }
    Ok(())
}

/// The padding and stride fields of a window, as cudnn-frontend writes them.
pub(crate) fn write_window(w: &Window) -> [(&'static str, Json); 3] {
    [("post_padding", ints(&w.post)), ("pre_padding", ints(&w.pre)), ("stride", ints(&w.stride))]
}

/// The spatial rank of the node's first input (X, or DY for a data gradient), as the graph has it.
pub(crate) fn spatial_rank(cx: &WriteCx<'_>) -> usize {
    cx.input_dims.first().copied().flatten().map_or(0, |d| d.len().saturating_sub(2))
}

/// A convolution node.
pub(crate) fn read(n: &Obj<'_>, _label: &str, tag: &str) -> Result<FrontendNode, ReadError> {
    deny_unknown_node_fields(n, &FIELDS)?;
    let mut attrs = Vec::new();
    read_window(n, &mut attrs)?;
    let kind = ConvKind::from_frontend_tag(tag).ok_or_else(|| CodecError::UnknownEnum {
        path: n.field_path("tag"),
        kind: "tag",
        value: tag.into(),
    })?;
    if let Some(v) = n.opt_i64_list("dilation")? {
        attrs.push(("dilation", "dilation", FrontendAttr::Value(AttrValue::IntList(v))));
    }
    if let Some(name) = n.opt_str("math_mode")? {
        let mode = ConvMode::from_frontend_name(name).ok_or_else(|| CodecError::UnknownEnum {
            path: n.field_path("math_mode"),
            kind: "convolution mode",
            value: name.to_string(),
        })?;
        attrs.push(("mode", "mode", FrontendAttr::Value(AttrValue::Name(mode.name().into()))));
    }
    Ok(FrontendNode { from_fields, ..FrontendNode::plain(kind.signature(), attrs) })
}

/// A convolution from cudnn-frontend's fields alone: its geometry waits for the tensors.
fn from_fields(fe: &FrontendNode, _inputs: usize, label: &str) -> Result<Pending, ReadError> {
    let mut attrs = call_attrs(&fe.attrs);
    if fe.call == ConvKind::Wgrad.name() {
        // cudnn-frontend has no field for the filter: `resolve` takes it from DW.
        attrs.push(("filter".into(), AttrValue::IntList(Vec::new())));
    }
    Ok(match Op::from_call(fe.call, &attrs).map_err(ReadError::attr(label))? {
        Op::Conv(c) => Pending::Resolve(Box::new(move |t: &NodeDims<'_>| {
            let (a, b, out) = (t.input(0), t.input(1), t.output(0));
            let conv = resolve(&c, a, b, out).ok_or_else(|| CodecError::ConvGeometry {
                node: t.label.to_string(),
                output: shape_string(out),
                inputs: format!("{} and {}", shape_string(a), shape_string(b)),
            })?;
            Ok(Op::Conv(conv))
        })),
        other => Pending::Ready(other),
    })
}

/// The fields of a convolution node. A graph whose attributes do not fit its ranks (it does not
/// validate) gets the attributes as written.
pub(crate) fn write(c: &Conv, cx: &WriteCx<'_>) -> FrontendFields {
    let w = c.window(spatial_rank(cx)).unwrap_or_else(|_| c.window.as_written());
    let mut fields = vec![("dilation", ints(&w.dilation)), ("math_mode", Json::str(c.mode.frontend_name()))];
    fields.extend(write_window(&w));
    fields.push(("tag", Json::str(c.kind.frontend_tag())));
    // Written even when there are none: cudnn-frontend's fields spell out the defaults
    // (`pre_padding: [0, 0]`) that the op leaves unset, and read alone they would give another
    // op, with another fingerprint (found by the structure fuzz target).
    FrontendFields { always_exact: true, ..FrontendFields::plain(fields) }
}

/// What cudnn-frontend has no field for, told from the tensors: a filter gradient's filter
/// extents (DW's spatial dims) and a data gradient's output padding (how far DX exceeds the
/// smallest extent whose forward output is DY). `None` when the tensors cannot give them.
pub(crate) fn resolve(conv: &Conv, dy_or_x: &[i64], w_or_dy: &[i64], out: &[i64]) -> Option<Conv> {
    let mut conv = conv.clone();
    let spatial = out.len().checked_sub(2)?;
    match conv.kind {
        ConvKind::Fprop => {}
        ConvKind::Wgrad => conv.filter = out[2..].to_vec(),
        ConvKind::Dgrad => {
            let w = conv.window(spatial).ok()?;
            if dy_or_x.len() != out.len() || w_or_dy.len() != out.len() {
                return None;
            }
            let extra: Vec<i64> = (0..spatial)
                .map(|i| {
                    let smallest = window_input_extent(
                        dy_or_x[i + 2],
                        w_or_dy[i + 2],
                        w.pre[i],
                        w.post[i],
                        w.stride[i],
                        w.dilation[i],
                        0,
                    )?;
                    Some(out[i + 2] - smallest)
                })
                .collect::<Option<_>>()?;
            if extra.iter().any(|&e| e != 0) {
                conv.output_padding = extra;
            }
        }
    }
    Some(conv)
}
