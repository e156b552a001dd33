//! Normalizations in cudnn-frontend's JSON: one tag per kind ([`NormKind::frontend_tag`];
//! `RMS_NORM` is `rmsnorm`, or `rmsnorm_bias` when the node has a BIAS input). The forward
//! kinds carry `forward_phase` (required), batch norm and its backward `peer_stats` (only empty
//! ones are supported); an `RMS_NORM_BPROP` with a DBIAS output has `dbias = true`.

use super::{Norm, NormKind, NormPhase};
use crate::codec::json::{wrong_type, Json, Obj};
use crate::codec::CodecError;
use crate::ops::family::OpFamily;
use crate::ops::codec::{
    call_attrs, deny_unknown_node_fields, has_port, FrontendAttr, FrontendFields, FrontendNode, ReadError, WriteCx,
};
use crate::ops::Op;

/// The field of the forward kinds' phase (`Layernorm_attributes`, `Rmsnorm_attributes`,
/// `Instancenorm_attributes`).
const PHASE_FIELD: &str = "forward_phase";

/// The field of batch norm's peer statistics (`Batchnorm_attributes`,
/// `Batchnorm_backward_attributes`).
const PEER_STATS_FIELD: &str = "peer_stats";

/// The normalizations' tags, one per kind (`RMS_NORM` once).
pub(crate) const TAGS: &[&str] = &[
    NormKind::LayerNorm.frontend_tag(),
    NormKind::RmsNorm.frontend_tag(),
    NormKind::BatchNorm.frontend_tag(),
    NormKind::BatchNormInference.frontend_tag(),
    NormKind::InstanceNorm.frontend_tag(),
    NormKind::GenStats.frontend_tag(),
    NormKind::LayerNormBackward.frontend_tag(),
    NormKind::RmsNormBackward.frontend_tag(),
    NormKind::BatchNormBackward.frontend_tag(),
    NormKind::InstanceNormBackward.frontend_tag(),
];

/// The normalization a cudnn-frontend norm tag reads to; `RMS_NORM` reads to `rmsnorm_bias` when
/// the node has a BIAS input (`has_bias`).
fn kind_of_tag(tag: &str, has_bias: bool) -> Option<NormKind> {
    match tag {
        t if t == NormKind::RmsNorm.frontend_tag() && has_bias => Some(NormKind::RmsNormBias),
        _ => NormKind::ALL.iter().copied().find(|k| k.frontend_tag() == tag),
    }
}

/// Whether a kind has peer statistics.
fn takes_peer_stats(kind: NormKind) -> bool {
    matches!(kind, NormKind::BatchNorm | NormKind::BatchNormBackward)
}

/// A normalization node: `forward_phase` gives the phase (cudnn-frontend requires it), an
/// `RMS_NORM` with a BIAS input is `rmsnorm_bias`, an `RMS_NORM_BPROP` with a DBIAS output has
/// `dbias = true`; batch norm needs its running statistics and no peer statistics.
pub(crate) fn read(n: &Obj<'_>, _label: &str, tag: &str) -> Result<FrontendNode, ReadError> {
    let unknown = || CodecError::UnknownEnum { path: n.field_path("tag"), kind: "tag", value: tag.to_string() };
    let kind = kind_of_tag(tag, has_port(n, "inputs", "BIAS")?).ok_or_else(unknown)?;
    let batch = takes_peer_stats(kind);
    let own: Vec<&'static str> = [(kind.takes_phase(), PHASE_FIELD), (batch, PEER_STATS_FIELD)]
        .into_iter()
        .filter_map(|(has, field)| has.then_some(field))
        .collect();
    deny_unknown_node_fields(n, &own)?;
    let mut norm = Norm::new(kind);
    let mut attrs = Vec::new();
    if kind.takes_phase() {
        let path = n.field_path(PHASE_FIELD);
        let name = match n.get(PHASE_FIELD) {
            None => return Err(CodecError::MissingField { path }.into()),
            Some(Json::Str(s)) => s,
            Some(other) => return Err(wrong_type(&path, "a string", other).into()),
        };
        norm.phase = NormPhase::from_frontend_name(name).ok_or_else(|| CodecError::UnknownEnum {
            path,
            kind: "norm forward phase",
            value: name.clone(),
        })?;
        attrs.push((PHASE_FIELD, "phase", FrontendAttr::Name(norm.phase.name())));
    }
    if batch {
        let path = n.field_path(PEER_STATS_FIELD);
        match n.get(PEER_STATS_FIELD) {
            None => {}
            Some(Json::Arr(peers)) if peers.is_empty() => {}
            Some(Json::Arr(_)) => {
                return Err(CodecError::Unsupported { path, feature: "batch norm peer statistics".into() }.into())
            }
            Some(other) => return Err(wrong_type(&path, "an array", other).into()),
        }
    }
    if kind == NormKind::BatchNorm && !has_port(n, "inputs", "PREV_RUNNING_MEAN")? {
        return Err(CodecError::Unsupported {
            path: n.field_path("inputs"),
            feature: "batch norm without running statistics (PREV_RUNNING_MEAN, PREV_RUNNING_VAR, MOMENTUM)".into(),
        }
        .into());
    }
    if kind == NormKind::RmsNormBackward && has_port(n, "outputs", "DBIAS")? {
        norm.dbias = true;
        attrs.push(("outputs", "dbias", FrontendAttr::Bool(true)));
    }
    Ok(FrontendNode {
        outputs: norm.outputs(),
        // cudnn-frontend wires DLN's epsilon only for cuDNN < 8.9.6.
        unsupported_ports: if kind == NormKind::LayerNormBackward { &["EPSILON"] } else { &[] },
        check_exact_op,
        ..FrontendNode::plain(kind.signature(), attrs)
    })
}

/// cudnn-frontend's fields (the phase, the DBIAS port) are authoritative: the op our exact
/// attributes build must be the one they build.
fn check_exact_op(fe: &FrontendNode, op: &Op, n: &Obj<'_>, label: &str, ext_path: &str) -> Result<(), ReadError> {
    let from_fields = Op::from_call(fe.call, &call_attrs(&fe.attrs)).map_err(ReadError::attr(label))?;
    if from_fields != *op {
        let field = fe.attrs.first().map_or("tag", |a| a.0);
        return Err(CodecError::ExtensionMismatch { path: ext_path.to_string(), field: n.field_path(field) }.into());
    }
    Ok(())
}

/// The fields of a normalization node.
pub(crate) fn write(norm: &Norm, _cx: &WriteCx<'_>) -> FrontendFields {
    let mut fields = Vec::new();
    if norm.kind.takes_phase() {
        fields.push((PHASE_FIELD, Json::str(norm.phase.frontend_name())));
    }
    if takes_peer_stats(norm.kind) {
        fields.push((PEER_STATS_FIELD, Json::Arr(Vec::new())));
    }
    fields.push(("tag", Json::str(norm.kind.frontend_tag())));
    FrontendFields::plain(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn norm_tags_are_cudnn_frontends() {
        for &kind in NormKind::ALL {
            let tag = kind.frontend_tag();
            assert!(TAGS.contains(&tag), "{kind:?}");
            assert_eq!(kind_of_tag(tag, kind == NormKind::RmsNormBias), Some(kind));
        }
        assert_eq!(kind_of_tag("ADALAYER_NORM", false), None);
    }
}
