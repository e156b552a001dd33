//! Window and layout ops in cudnn-frontend's layout: the convolutions (`CONV_FPROP`, `CONV_DGRAD`,
//! `CONV_WGRAD`: `Conv_*_attributes`) and pooling (`RESAMPLE`: `Resample_attributes`), written with
//! every field cudnn-frontend writes, defaults filled in, and read back from them; our exact
//! attributes ride in the node's `cudnn_graph.attrs` as for every op.
//!
//! cudnn-frontend's convolution fields are `pre_padding`, `post_padding`, `stride`, `dilation`
//! (one value per spatial dim) and `math_mode`. It has no field for the filter extents of a
//! filter gradient or the output padding of a data gradient: a node read from cudnn-frontend's
//! fields alone takes them from its DW or DX tensor ([`resolve`]). Pooling's fields are
//! `resample_mode`, `padding_mode` (which must be the one the mode implies: `NEG_INF_PAD` for max
//! pooling, `ZERO_PAD` for averages), `generate_index`, `window`, `stride` and the paddings.
//!
//! Layout ops: `RESHAPE` (`dim`, `stride`: Y's, and `reshape_mode` `VIEW_ONLY`; a node with an
//! empty `dim` takes Y's dims), `TRANSPOSE` (`permutation`) and `SLICE` (`slices`, one
//! `[start, limit]` pair per dim, and `slice_strides`) and `CONCATENATE` (`axis`,
//! `in_place_index`; its `inputs` are a list of tensors, not a map of ports).

use super::json::{wrong_type, Json, Obj};
use super::layout::NODE_FIELDS;
use super::SerializeError;
use crate::dim::window_input_extent;
use crate::ops::conv::Window;
use crate::ops::{AttrValue, Conv, ConvKind, ConvMode, Layout, LayoutKind, Op, ResampleMode};
use crate::{Graph, Node};

/// `Conv_{fprop,dgrad,wgrad}_attributes`'s own fields.
pub(crate) const CONV_FIELDS: [&str; 5] = ["dilation", "math_mode", "post_padding", "pre_padding", "stride"];

/// `Resample_attributes`'s own fields.
pub(crate) const RESAMPLE_FIELDS: [&str; 7] =
    ["generate_index", "padding_mode", "post_padding", "pre_padding", "resample_mode", "stride", "window"];

/// The pooling tag.
pub(crate) const TAG_RESAMPLE: &str = "RESAMPLE";

/// `Reshape_attributes`'s own fields.
pub(crate) const RESHAPE_FIELDS: [&str; 3] = ["dim", "reshape_mode", "stride"];

/// `Transpose_attributes`'s own fields.
pub(crate) const TRANSPOSE_FIELDS: [&str; 1] = ["permutation"];

/// `Slice_attributes`'s own fields.
pub(crate) const SLICE_FIELDS: [&str; 2] = ["slice_strides", "slices"];

/// `Concatenate_attributes`'s own fields.
pub(crate) const CONCAT_FIELDS: [&str; 2] = ["axis", "in_place_index"];

/// The concatenation tag: the one node whose `inputs` are a list.
pub(crate) const TAG_CONCATENATE: &str = "CONCATENATE";

/// Every tag this module reads.
pub(crate) const TAGS: [&str; 8] =
    ["CONV_FPROP", "CONV_DGRAD", "CONV_WGRAD", TAG_RESAMPLE, "RESHAPE", "TRANSPOSE", "SLICE", TAG_CONCATENATE];

/// cudnn-frontend's fields of a layout node, with the tag.
pub(crate) fn layout_fields(g: &Graph, n: &Node, op: &Layout) -> Vec<(&'static str, Json)> {
    let mut out = match op {
        Layout::Reshape { shape } => {
            let strides =
                n.outputs.first().and_then(|id| g.tensors.get(id.0)).map_or(Vec::new(), |t| t.strides.clone());
            vec![("dim", ints(shape)), ("reshape_mode", Json::str("VIEW_ONLY")), ("stride", ints(&strides))]
        }
        Layout::Transpose { permutation } => vec![("permutation", ints(permutation))],
        Layout::Slice { start, limit, .. } => {
            let rank = start.len();
            let pairs = start.iter().zip(limit).map(|(&a, &b)| ints(&[a, b])).collect();
            vec![("slice_strides", ints(&op.steps(rank))), ("slices", Json::Arr(pairs))]
        }
        Layout::Concatenate { axis, in_place_index, .. } => {
            vec![("axis", Json::Int(*axis)), ("in_place_index", in_place_index.map_or(Json::Null, Json::Int))]
        }
    };
    out.push(("tag", Json::str(op.kind().frontend_tag())));
    out
}

fn ints(values: &[i64]) -> Json {
    Json::Arr(values.iter().map(|&v| Json::Int(v)).collect())
}

/// The spatial rank of a node's first input, as the graph has it.
fn spatial_rank(g: &Graph, n: &Node) -> usize {
    n.inputs.first().and_then(|id| g.tensors.get(id.0)).map_or(0, |t| t.dims.len().saturating_sub(2))
}

fn window_fields(w: &Window) -> [(&'static str, Json); 3] {
    [("post_padding", ints(&w.post)), ("pre_padding", ints(&w.pre)), ("stride", ints(&w.stride))]
}

/// cudnn-frontend's fields of a convolution or pooling node, with the tag. A graph whose
/// attributes do not fit its ranks (it does not validate) gets the attributes as written.
pub(crate) fn frontend_fields(g: &Graph, n: &Node) -> Vec<(&'static str, Json)> {
    let spatial = spatial_rank(g, n);
    match &n.op {
        Op::Conv(c) => {
            let w = c.window(spatial).unwrap_or_else(|_| Window {
                pre: c.pre_padding.clone(),
                post: c.post_padding.clone(),
                stride: c.stride.clone(),
                dilation: c.dilation.clone(),
            });
            let mut out = vec![("dilation", ints(&w.dilation)), ("math_mode", Json::str(c.mode.frontend_name()))];
            out.extend(window_fields(&w));
            out.push(("tag", Json::str(c.kind.frontend_tag())));
            out
        }
        Op::Resample(r) => {
            let (window, w) = r.geometry(spatial).unwrap_or_else(|_| {
                let w = Window {
                    pre: r.pre_padding.clone(),
                    post: r.post_padding.clone(),
                    stride: r.stride.clone(),
                    dilation: Vec::new(),
                };
                (r.window.clone(), w)
            });
            let mut out = vec![
                ("generate_index", Json::Bool(r.index)),
                ("padding_mode", Json::str(r.mode.frontend_padding_mode())),
                ("resample_mode", Json::str(r.mode.frontend_name())),
                ("window", ints(&window)),
            ];
            out.extend(window_fields(&w));
            out.push(("tag", Json::str(TAG_RESAMPLE)));
            out
        }
        _ => Vec::new(),
    }
}

fn list(n: &Obj<'_>, field: &'static str) -> Result<Option<Vec<i64>>, SerializeError> {
    match n.get(field) {
        None | Some(Json::Null) => Ok(None),
        Some(v) => v.as_i64_list(&n.field_path(field)).map(Some),
    }
}

/// DSL attributes by name.
type CallAttrs = Vec<(&'static str, AttrValue)>;

/// The DSL call and attributes that a convolution or pooling node's cudnn-frontend fields give.
pub(crate) fn read_fields(n: &Obj<'_>, tag: &str) -> Result<(&'static str, CallAttrs), SerializeError> {
    let mut attrs = Vec::new();
    let own: &[&'static str] = match tag {
        TAG_RESAMPLE => &RESAMPLE_FIELDS,
        "RESHAPE" => &RESHAPE_FIELDS,
        "TRANSPOSE" => &TRANSPOSE_FIELDS,
        "SLICE" => &SLICE_FIELDS,
        TAG_CONCATENATE => &CONCAT_FIELDS,
        _ => &CONV_FIELDS,
    };
    let accepted: Vec<&'static str> = NODE_FIELDS.iter().chain(own).copied().collect();
    n.deny_unknown(&accepted)?;
    if tag == TAG_CONCATENATE {
        let axis = match n.get("axis") {
            None | Some(Json::Null) => return Err(SerializeError::MissingField { path: n.field_path("axis") }),
            Some(v) => v.as_i64(&n.field_path("axis"))?,
        };
        let mut attrs = vec![("axis", AttrValue::Int(axis))];
        match n.get("in_place_index") {
            None | Some(Json::Null) => {}
            Some(v) => attrs.push(("in_place_index", AttrValue::Int(v.as_i64(&n.field_path("in_place_index"))?))),
        }
        return Ok((LayoutKind::Concatenate.name(), attrs));
    }
    if tag == "TRANSPOSE" {
        let permutation = list(n, "permutation")?
            .ok_or_else(|| SerializeError::MissingField { path: n.field_path("permutation") })?;
        return Ok((LayoutKind::Transpose.name(), vec![("permutation", AttrValue::IntList(permutation))]));
    }
    if tag == "SLICE" {
        let path = n.field_path("slices");
        let pairs = match n.get("slices") {
            Some(Json::Arr(pairs)) => pairs,
            Some(other) => return Err(wrong_type(&path, "an array of [start, limit] pairs", other)),
            None => return Err(SerializeError::MissingField { path }),
        };
        let (mut start, mut limit) = (Vec::new(), Vec::new());
        for (i, pair) in pairs.iter().enumerate() {
            match pair.as_i64_list(&format!("{path}[{i}]"))?.as_slice() {
                [a, b] => {
                    start.push(*a);
                    limit.push(*b);
                }
                _ => return Err(wrong_type(&format!("{path}[{i}]"), "a [start, limit] pair", pair)),
            }
        }
        let mut attrs = vec![("start", AttrValue::IntList(start)), ("limit", AttrValue::IntList(limit))];
        if let Some(step) = list(n, "slice_strides")?.filter(|s| s.iter().any(|&v| v != 1)) {
            attrs.push(("step", AttrValue::IntList(step)));
        }
        return Ok((LayoutKind::Slice.name(), attrs));
    }
    if tag == "RESHAPE" {
        if let Some(mode) = n.opt_str("reshape_mode")? {
            if mode != "VIEW_ONLY" {
                return Err(SerializeError::Unsupported {
                    path: n.field_path("reshape_mode"),
                    feature: format!("reshape mode {mode} (cuDNN 9.22)"),
                });
            }
        }
        // An empty `dim` (Y's dims set on the tensor instead) is resolved from Y by the reader.
        let shape = list(n, "dim")?.unwrap_or_default();
        return Ok((LayoutKind::Reshape.name(), vec![("shape", AttrValue::IntList(shape))]));
    }
    for field in ["pre_padding", "post_padding", "stride"] {
        if let Some(v) = list(n, field)? {
            attrs.push((field, AttrValue::IntList(v)));
        }
    }
    if tag == TAG_RESAMPLE {
        let mode_name = n.str("resample_mode")?;
        let mode = ResampleMode::from_frontend_name(mode_name).ok_or_else(|| SerializeError::UnknownEnum {
            path: n.field_path("resample_mode"),
            kind: "pooling mode",
            value: mode_name.to_string(),
        })?;
        if let Some(padding) = n.opt_str("padding_mode")? {
            if padding != mode.frontend_padding_mode() {
                return Err(SerializeError::Unsupported {
                    path: n.field_path("padding_mode"),
                    feature: format!("{mode_name} with padding mode {padding}"),
                });
            }
        }
        let window = list(n, "window")?.ok_or_else(|| SerializeError::MissingField { path: n.field_path("window") })?;
        attrs.push(("mode", AttrValue::Name(mode.name().into())));
        attrs.push(("window", AttrValue::IntList(window)));
        if let Some(index) = n.get("generate_index") {
            match index {
                Json::Null => {}
                Json::Bool(b) => attrs.push(("index", AttrValue::Bool(*b))),
                other => return Err(wrong_type(&n.field_path("generate_index"), "a boolean", other)),
            }
        }
        return Ok((crate::ops::resample::NAME, attrs));
    }
    let kind = ConvKind::from_frontend_tag(tag).ok_or_else(|| SerializeError::UnknownEnum {
        path: n.field_path("tag"),
        kind: "tag",
        value: tag.into(),
    })?;
    if let Some(v) = list(n, "dilation")? {
        attrs.push(("dilation", AttrValue::IntList(v)));
    }
    if let Some(name) = n.opt_str("math_mode")? {
        let mode = ConvMode::from_frontend_name(name).ok_or_else(|| SerializeError::UnknownEnum {
            path: n.field_path("math_mode"),
            kind: "convolution mode",
            value: name.to_string(),
        })?;
        attrs.push(("mode", AttrValue::Name(mode.name().into())));
    }
    Ok((kind.name(), attrs))
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
