//! Attention nodes in cudnn-frontend's layout: `SDPA` (`SDPA_attributes`) and `SDPA_BWD`
//! (`SDPA_backward_attributes`), written with every field cudnn-frontend writes and read back
//! from them; our exact attributes ride in the node's `cudnn_graph.attrs` as for every op.
//!
//! cudnn-frontend's fields map to ours: `attn_scale_value` (absent means no scaling, i.e. 1) to
//! `scale`, `right_bound = 0` to `causal`, `left_bound` to `window`, `diagonal_alignment` to
//! `alignment`, `dropout_probability` to `dropout`, `generate_stats` to `training`,
//! `is_deterministic_algorithm` to `deterministic`, `implementation` (`UNIFIED` is our `fused`),
//! and the presence of the `Attn_scale`, `Bias`, `SEQ_LEN_*`, `Seed`/`Offset` and `dBias` ports to
//! the flags that add them. fp8 attention (`fp8 = e4m3 | e5m2`) is tagged `SDPA_FP8_FWD` with
//! `mma_core_mode` `FP8_E4M3` or `FP8_E5M2` and the ports `Descale_Q`, `Descale_K`, `Descale_V`,
//! `Descale_S`, `Scale_S`, `Scale_O`, `Amax_S`, `Amax_O`, as cudnn-frontend 1.32 writes it; its
//! backward is tagged `SDPA_FP8_BWD` (`SDPA_fp8_backward_attributes`: no `alibi_mask` and no MMA
//! mode, so the fp8 type is read back from Q's; `compute_data_type` and `is_mxfp8` written) with
//! the twelve scale ports of [`super::FP8_BACKWARD_INPUTS`] and `Amax_dQ` ... `Amax_dP`. `stats_use_log2`, `is_mxfp8` and `unfuse_fma` are read when false,
//! and the packed totals `max_total_seq_len_q`/`_kv` are ours of the same names (null: none; the
//! buffers' capacity in tokens, while Stats and the backward's dQ accumulator stay padded, where
//! cudnn-frontend may pack its own). Paged caches (`paged = true`) are
//! the `Page_table_K` and `Page_table_V` ports, with `max_seq_len_kv` (null: table width × page
//! size). Packed sequences (`ragged = true`) are cudnn-frontend's `ragged_offset_uid` and
//! `ragged_offset_name` on the packed tensors (Q, K, V, O; the backward's dO, dQ, dK, dV too),
//! which the document reader turns into the `Ragged_offset_*` ports (`serialize/read/ragged.rs`)
//! and the writer back. Alibi masks, base-2 stats, MXFP8, right bounds other than 0, custom dropout masks and one paged cache of the
//! two are not supported: each is an `Unsupported` error naming the field.

use super::{Alignment, Implementation, Sdpa, SdpaPass};
use crate::codec::json::{Json, Obj};
use crate::codec::{f32_or_null, f32_value, CodecError};
use crate::ops::family::OpFamily;
use crate::ops::codec::{
    call_attrs, deny_unknown_node_fields, has_port, FrontendAttr, FrontendFields, FrontendNode, NodeDims, Pending,
    ReadError, WriteCx,
};
use crate::ops::Op;
use crate::DataType;

/// The forward pass's node tag.
const TAG_FORWARD: &str = "SDPA";
/// The forward pass's node tag in an fp8 `mma_core_mode` (cudnn-frontend 1.32's `sdpa_fp8`).
const TAG_FP8_FORWARD: &str = "SDPA_FP8_FWD";
/// The backward pass's node tag.
const TAG_BACKWARD: &str = "SDPA_BWD";
/// The backward pass's node tag with fp8 (cudnn-frontend 1.32's `sdpa_fp8_backward`, per-tensor
/// scaling).
const TAG_FP8_BACKWARD: &str = "SDPA_FP8_BWD";

/// The node tags.
pub(crate) const TAGS: &[&str] = &[TAG_FORWARD, TAG_FP8_FORWARD, TAG_BACKWARD, TAG_FP8_BACKWARD];

/// cudnn-frontend's `mma_core_mode` of fp8 attention in `dtype`.
fn mma_core_mode(dtype: Option<crate::DataType>) -> &'static str {
    match dtype {
        Some(crate::DataType::Fp8E5M2) => "FP8_E5M2",
        Some(_) => "FP8_E4M3",
        None => "HALF",
    }
}

/// `SDPA_attributes`'s own fields, and the two its node adds (`is_mxfp8`, `unfuse_fma`).
const FORWARD_FIELDS: [&str; 16] = [
    "alibi_mask",
    "attn_scale_value",
    "diagonal_alignment",
    "dropout_probability",
    "generate_stats",
    "implementation",
    "is_mxfp8",
    "left_bound",
    "max_seq_len_kv",
    "max_total_seq_len_kv",
    "max_total_seq_len_q",
    "mma_core_mode",
    "padding_mask",
    "right_bound",
    "stats_use_log2",
    "unfuse_fma",
];

/// `SDPA_backward_attributes`'s own fields.
const BACKWARD_FIELDS: [&str; 10] = [
    "alibi_mask",
    "attn_scale_value",
    "diagonal_alignment",
    "dropout_probability",
    "is_deterministic_algorithm",
    "left_bound",
    "max_total_seq_len_kv",
    "max_total_seq_len_q",
    "padding_mask",
    "right_bound",
];

/// `SDPA_fp8_backward_attributes`'s own fields, and the one its node adds (`is_mxfp8`).
const FP8_BACKWARD_FIELDS: [&str; 10] = [
    "attn_scale_value",
    "diagonal_alignment",
    "dropout_probability",
    "is_deterministic_algorithm",
    "is_mxfp8",
    "left_bound",
    "max_total_seq_len_kv",
    "max_total_seq_len_q",
    "padding_mask",
    "right_bound",
];

/// The head dim of the node's Q (for the default scale), if the graph has it.
fn head_dim(cx: &WriteCx<'_>) -> i64 {
    cx.input_dims.first().copied().flatten().and_then(|d| d.get(3).copied()).unwrap_or(1)
}

/// The implementation written for `i`. cudnn-frontend resolves `AUTO` when the node is built and
/// refuses it in a document ("Implementation cannot be AUTO in serialized form"); the choice
/// depends on the device, which a structure does not name, so `auto` is written as `COMPOSITE`,
/// the lowering every device has (our `cudnn_graph.attrs` keep `auto`; the reader still reads
/// `AUTO`, as documents logged before resolution have it).
fn written_implementation(i: Implementation) -> Implementation {
    match i {
        Implementation::Auto => Implementation::Composite,
        other => other,
    }
}

/// The fields of an attention node.
pub(crate) fn write(a: &Sdpa, cx: &WriteCx<'_>) -> FrontendFields {
    let scale = a.literal_scale(head_dim(cx));
    let fp8_backward = a.pass == SdpaPass::Backward && a.fp8.is_some();
    // `SDPA_fp8_backward_attributes` has no alibi mask.
    let alibi = (!fp8_backward).then_some(("alibi_mask", Json::Bool(false)));
    let mut members: Vec<(&'static str, Json)> = alibi.into_iter().collect();
    members.extend([
        ("attn_scale_value", f32_or_null(scale)),
        ("diagonal_alignment", Json::str(a.alignment.cudnn_name())),
        ("dropout_probability", f32_or_null(a.dropout)),
        ("left_bound", a.window.map_or(Json::Null, Json::Int)),
        ("padding_mask", Json::Bool(a.padding_mask)),
        ("right_bound", if a.causal { Json::Int(0) } else { Json::Null }),
    ]);
    match a.pass {
        // cudnn-frontend 1.32's reader requires every `SDPA_attributes` field (`stats_use_log2`
        // and the packed totals included); `is_mxfp8` and `unfuse_fma` are what its node adds.
        SdpaPass::Forward => members.extend([
            ("generate_stats", Json::Bool(a.training)),
            ("implementation", Json::str(written_implementation(a.implementation).cudnn_name())),
            ("is_mxfp8", Json::Bool(false)),
            ("max_seq_len_kv", a.max_seq_len_kv.map_or(Json::Null, Json::Int)),
            ("max_total_seq_len_kv", a.max_total_seq_len_kv.map_or(Json::Null, Json::Int)),
            ("max_total_seq_len_q", a.max_total_seq_len_q.map_or(Json::Null, Json::Int)),
            ("mma_core_mode", Json::str(mma_core_mode(a.fp8))),
            ("stats_use_log2", Json::Bool(false)),
            ("tag", Json::str(if a.fp8.is_some() { TAG_FP8_FORWARD } else { TAG_FORWARD })),
            ("unfuse_fma", Json::Bool(false)),
        ]),
        SdpaPass::Backward => {
            members.extend([
                ("is_deterministic_algorithm", Json::Bool(a.deterministic)),
                ("max_total_seq_len_kv", a.max_total_seq_len_kv.map_or(Json::Null, Json::Int)),
                ("max_total_seq_len_q", a.max_total_seq_len_q.map_or(Json::Null, Json::Int)),
                ("tag", Json::str(if fp8_backward { TAG_FP8_BACKWARD } else { TAG_BACKWARD })),
            ]);
            if fp8_backward {
                members.push(("is_mxfp8", Json::Bool(false)));
            }
        }
    }
    FrontendFields {
        // `SDPA_backward_attributes` serializes no `compute_data_type`; the fp8 one does.
        compute_data_type: a.pass == SdpaPass::Forward || fp8_backward,
        // `auto` is written `COMPOSITE`: our exact attributes say it is `auto`, even when empty.
        always_exact: written_implementation(a.implementation) != a.implementation,
        ..FrontendFields::plain(members)
    }
}

/// The input ports whose last two dims and strides cudnn-frontend 1.32's lowering swaps in place
/// on a node tagged `tag` (`scaled_dot_product_flash_attention.h`, `sdpa_fp8_bwd.h`): the
/// composite forward's K (`SDPA` or `SDPA_FP8_FWD` with `implementation` `COMPOSITE`, K
/// `[b, h_k, s_kv, d_qk]` becoming Kᵀ `[b, h_k, d_qk, s_kv]`) unless K is a paged cache
/// (`paged_k`), and the backward's K and V (`SDPA_BWD`, `SDPA_FP8_BWD`). The unified forward
/// (`UNIFIED`, cuDNN's `SDPA_FWD` operation) takes K as given. A graph cudnn-frontend prints
/// after building has these ports' tensors so.
pub(crate) fn transposed_by_frontend_lowering(
    tag: &str,
    implementation: Option<&str>,
    paged_k: bool,
) -> &'static [&'static str] {
    match tag {
        TAG_FORWARD | TAG_FP8_FORWARD
            if implementation == Some(Implementation::Composite.cudnn_name()) && !paged_k =>
        {
            &["K"]
        }
        TAG_BACKWARD | TAG_FP8_BACKWARD => &["K", "V"],
        _ => &[],
    }
}

/// The implementation cudnn-frontend's spelling names.
fn implementation_of(name: &str) -> Option<Implementation> {
    [Implementation::Auto, Implementation::Fused, Implementation::Composite]
        .into_iter()
        .find(|i| i.cudnn_name() == name)
}

/// What cudnn-frontend's fields of an attention node say, as DSL attributes with the field each
/// comes from: `(field, attribute, value)`. Ports decide the flags that add ports.
// Long because it reads every field of cudnn-frontend's attention node in one pass, each refusal
// of a feature we lack beside the field that asks for it, as payload/frontend.rs reads its keys.
fn read_fields(n: &Obj<'_>, tag: &str) -> Result<(SdpaPass, Fields), CodecError> {
    let pass = if [TAG_BACKWARD, TAG_FP8_BACKWARD].contains(&tag) { SdpaPass::Backward } else { SdpaPass::Forward };
    let own: &[&'static str] = match tag {
        TAG_FP8_BACKWARD => &FP8_BACKWARD_FIELDS,
        _ if pass == SdpaPass::Backward => &BACKWARD_FIELDS,
        _ => &FORWARD_FIELDS,
    };
    deny_unknown_node_fields(n, own)?;
    let unsupported =
        |field: &str, feature: &str| CodecError::Unsupported { path: n.field_path(field), feature: feature.into() };
    let has_port = |field: &str, port: &str| has_port(n, field, port);
    let mut out: Fields = Vec::new();
    if n.bool_or("alibi_mask", false)? {
        return Err(unsupported("alibi_mask", "alibi masks"));
    }
    // The bounds on the packed tokens: the buffers' capacity (cudnn-graph keeps Stats and the
    // backward's dQ accumulator padded, B·S rows, whatever the bound).
    for field in ["max_total_seq_len_q", "max_total_seq_len_kv"] {
        if own.contains(&field) {
            if let Some(v) = n.opt_i64(field)? {
                out.push((field, field, FrontendAttr::Int(v)));
            }
        }
    }
    // Packed sequences: the document reader turns the `ragged_offset_uid` of Q (and of the
    // other packed tensors) into these ports.
    if has_port("inputs", "Ragged_offset_Q")? {
        out.push(("inputs", "ragged", FrontendAttr::Bool(true)));
    }
    match (has_port("inputs", "Page_table_K")?, has_port("inputs", "Page_table_V")?) {
        (true, true) => out.push(("inputs", "paged", FrontendAttr::Bool(true))),
        (false, false) => {}
        _ => return Err(unsupported("inputs", "a paged K cache with a dense V (or the reverse): page both")),
    }
    if let Some(n) = n.opt_i64("max_seq_len_kv")? {
        out.push(("max_seq_len_kv", "max_seq_len_kv", FrontendAttr::Int(n)));
    }
    if n.bool_or("unfuse_fma", false)? {
        return Err(unsupported("unfuse_fma", "unfused FMA softmax"));
    }
    // Our stats are the natural log of the softmax's sum (cudnn-frontend's default).
    if n.bool_or("stats_use_log2", false)? {
        return Err(unsupported("stats_use_log2", "softmax stats in base 2"));
    }
    // cudnn-frontend tells it from the `Descale_Q` port (E8M0, F8_128x4 reordering).
    if n.bool_or("is_mxfp8", false)? {
        return Err(unsupported("is_mxfp8", "MXFP8 (block-scaled fp8) attention"));
    }
    // `HALF` (or absent) is ours without `fp8`; an fp8 mode is `fp8 = e4m3 | e5m2`. The fp8
    // backward has no MMA mode: its type is Q's, which `from_fields` reads (`e4m3` until then).
    if tag == TAG_FP8_BACKWARD {
        out.push(("tag", "fp8", FrontendAttr::Name("e4m3")));
    }
    match n.opt_str("mma_core_mode")? {
        None | Some("HALF") if tag != TAG_FP8_FORWARD => {}
        Some("FP8_E4M3") if pass == SdpaPass::Forward => out.push(("mma_core_mode", "fp8", FrontendAttr::Name("e4m3"))),
        Some("FP8_E5M2") if pass == SdpaPass::Forward => out.push(("mma_core_mode", "fp8", FrontendAttr::Name("e5m2"))),
        Some(other) => {
            return Err(unsupported(
                "mma_core_mode",
                &format!("{tag} attention in MMA mode {other} (the forward takes HALF, FP8_E4M3 or FP8_E5M2)"),
            ))
        }
        None => return Err(unsupported("mma_core_mode", "fp8 attention without its MMA mode")),
    }
    match n.get("right_bound") {
        None | Some(Json::Null) => {}
        Some(v) => match v.as_i64(&n.field_path("right_bound"))? {
            0 => out.push(("right_bound", "causal", FrontendAttr::Bool(true))),
            _ => return Err(unsupported("right_bound", "right bounds other than 0 (causal)")),
        },
    }
    if let Some(w) = n.opt_i64("left_bound")? {
        out.push(("left_bound", "window", FrontendAttr::Int(w)));
    }
    if let Some(a) = n.opt_str("diagonal_alignment")? {
        let alignment = [Alignment::TopLeft, Alignment::BottomRight]
            .into_iter()
            .find(|x| x.cudnn_name() == a)
            .ok_or_else(|| CodecError::UnknownEnum {
                path: n.field_path("diagonal_alignment"),
                kind: "diagonal alignment",
                value: a.to_string(),
            })?;
        if alignment != Alignment::TopLeft {
            out.push(("diagonal_alignment", "alignment", FrontendAttr::Name(alignment.name())));
        }
    }
    if let Some(v) = n.get("dropout_probability").filter(|v| !matches!(v, Json::Null)) {
        out.push(("dropout_probability", "dropout", FrontendAttr::F32(f32_value(v, &n.field_path("dropout_probability"))?)));
    }
    if has_port("inputs", "Attn_scale")? {
        out.push(("inputs", "scale_tensor", FrontendAttr::Bool(true)));
    } else {
        // cudnn-frontend scales only when it is given a scale.
        let scale = match n.get("attn_scale_value").filter(|v| !matches!(v, Json::Null)) {
            Some(v) => f32_value(v, &n.field_path("attn_scale_value"))?,
            None => 1.0,
        };
        out.push(("attn_scale_value", "scale", FrontendAttr::F32(scale)));
    }
    if has_port("inputs", "Bias")? {
        out.push(("inputs", "bias", FrontendAttr::Bool(true)));
    }
    if n.bool_or("padding_mask", false)? {
        out.push(("padding_mask", "padding_mask", FrontendAttr::Bool(true)));
    }
    match pass {
        SdpaPass::Forward => {
            if n.bool_or("generate_stats", false)? {
                out.push(("generate_stats", "training", FrontendAttr::Bool(true)));
            }
            if let Some(i) = n.opt_str("implementation")? {
                let implementation = implementation_of(i).ok_or_else(|| CodecError::UnknownEnum {
                    path: n.field_path("implementation"),
                    kind: "attention implementation",
                    value: i.to_string(),
                })?;
                if implementation != Implementation::Auto {
                    out.push(("implementation", "implementation", FrontendAttr::Name(implementation.name())));
                }
            }
        }
        SdpaPass::Backward => {
            if n.bool_or("is_deterministic_algorithm", false)? {
                out.push(("is_deterministic_algorithm", "deterministic", FrontendAttr::Bool(true)));
            }
            if has_port("outputs", "dBias")? {
                out.push(("outputs", "d_bias", FrontendAttr::Bool(true)));
            }
        }
    }
    Ok((pass, out))
}

/// `(field, DSL attribute, value)` for each attribute cudnn-frontend's fields set.
type Fields = Vec<(&'static str, &'static str, FrontendAttr)>;

/// cudnn-frontend ports of attention nodes that we do not support (the fp8 ones last: the
/// forward's, then those only the backward has).
const UNSUPPORTED_PORTS: &[&str] = &[
    "Dropout_mask",
    "Dropout_scale",
    "Block_mask",
    "SINK_TOKEN",
    "Max",
    "Sum_exp",
    "RNG_DUMP",
    "DSINK_TOKEN",
    "Descale_Q",
    "Descale_K",
    "Descale_V",
    "Descale_S",
    "Scale_S",
    "Scale_O",
    "Amax_S",
    "Amax_O",
    "Descale_O",
    "Descale_dO",
    "Descale_dP",
    "Scale_dQ",
    "Scale_dK",
    "Scale_dV",
    "Scale_dP",
    "Amax_dQ",
    "Amax_dK",
    "Amax_dV",
    "Amax_dP",
];
/// [`UNSUPPORTED_PORTS`] less the fp8 ones, for fp8 attention.
const FP8_UNSUPPORTED_PORTS: &[&str] = UNSUPPORTED_PORTS.split_at(UNSUPPORTED_PORTS.len() - 19).0;

/// An attention node (`SDPA`, `SDPA_BWD`): its fields and which optional ports it has decide
/// the attributes, and those decide the ports ([`Op::inputs`](crate::ops::Op::inputs)).
pub(crate) fn read(n: &Obj<'_>, _label: &str, tag: &str) -> Result<FrontendNode, ReadError> {
    let (pass, attrs) = read_fields(n, tag)?;
    let op = Op::from_call(pass.name(), &call_attrs(&attrs)).map_err(ReadError::attr(n.path()))?;
    let Op::Sdpa(sdpa) = &op else {
        return Err(CodecError::UnknownEnum { path: n.field_path("tag"), kind: "tag", value: tag.to_string() }.into());
    };
    Ok(FrontendNode {
        inputs: sdpa.inputs().iter().map(|p| p.name).collect(),
        outputs: sdpa.outputs(),
        unsupported_ports: if sdpa.fp8.is_some() { FP8_UNSUPPORTED_PORTS } else { UNSUPPORTED_PORTS },
        check_exact_op,
        from_fields,
        ..FrontendNode::plain(pass.signature(), attrs)
    })
}

/// The exact attributes must ask for the ports the node has.
fn check_exact_op(fe: &FrontendNode, op: &Op, n: &Obj<'_>, _label: &str, ext_path: &str) -> Result<(), ReadError> {
    if op.inputs().iter().map(|p| p.name).ne(fe.inputs.iter().copied()) || op.outputs() != fe.outputs {
        return Err(CodecError::ExtensionMismatch { path: ext_path.to_string(), field: n.field_path("inputs") }.into());
    }
    Ok(())
}

/// An attention node read from cudnn-frontend's fields alone: a scale equal (as an f32) to the
/// default for Q's head dim reads as the default; fp8 attention's backward is in Q's fp8 type.
fn from_fields(fe: &FrontendNode, _inputs: usize, label: &str) -> Result<Pending, ReadError> {
    Ok(match Op::from_call(fe.call, &call_attrs(&fe.attrs)).map_err(ReadError::attr(label))? {
        Op::Sdpa(a) => Pending::Resolve(Box::new(move |t: &NodeDims<'_>| {
            let d_qk = t.input(0).get(3).copied().unwrap_or(0);
            let mut a = a.default_scale_folded(d_qk);
            if a.pass == SdpaPass::Backward && a.fp8.is_some() {
                if let Some(q @ (DataType::Fp8E4M3 | DataType::Fp8E5M2)) = t.input_type(0) {
                    a.fp8 = Some(q);
                }
            }
            Ok(Op::Sdpa(a))
        })),
        other => Pending::Ready(other),
    })
}
