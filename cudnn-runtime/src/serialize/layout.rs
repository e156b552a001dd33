//! cudnn-frontend's vocabulary: the spellings its JSON uses for data types, tags, reduction modes
//! and by-value scalar types, and the mapping between its attribute fields and our DSL attributes.
//! (Pointwise modes and port names live with the op definitions: `PointwiseMode::cudnn_name`,
//! `PortSpec::name`.)

use crate::ops::{NormKind, PointwiseMode, ReductionMode};
use crate::DataType;

/// The `json_version` we write: cudnn-frontend 1.32's (captured from it on an H200: `tensors` is
/// an array of tensors carrying their uids).
pub const JSON_VERSION: &str = "2.0";

/// Every `json_version` we read: `"1.0"` (cudnn-frontend before 1.2x: `tensors` is an object keyed
/// by uid or name) and `"2.0"`.
pub const JSON_VERSIONS: [&str; 2] = ["1.0", "2.0"];

/// The version of our `cudnn_graph` extension.
pub const FORMAT: u64 = 1;

/// The key of our extension, at the top level, in nodes and in tensors.
pub(crate) const EXT: &str = "cudnn_graph";

/// The top-level fields: the structure, cudnn-frontend's version stamps, our extension, and the
/// plan payload's fields (cudnn-frontend's `serialize(std::vector<uint8_t>&)` adds those to the same
/// object; the structural reader leaves them to the plan reader).
pub(crate) const TOP_FIELDS: [&str; 16] = [
    "context",
    "gid",
    "cudnn_graph",
    "json_version",
    "nodes",
    "tensors",
    "cudnn_backend_version",
    "cudnn_frontend_version",
    "cudnn_backend_data",
    "variant_pack_uids",
    "behavior_notes",
    "pass_by_values",
    "workspace_modifications",
    "variant_pack_replacements",
    "fe_workspace_size",
    "tensors_to_dump",
];

/// `context` fields (`Graph::serialize`).
pub(crate) const CONTEXT_FIELDS: [&str; 7] = [
    "compute_data_type",
    "intermediate_data_type",
    "io_data_type",
    "is_dynamic_shape_enabled",
    "is_override_shape_enabled",
    "name",
    "sm_count",
];

/// Tensor fields (`to_json(Tensor_attributes)`), and our extension.
pub(crate) const TENSOR_FIELDS: [&str; 13] = [
    "cudnn_graph",
    "data_type",
    "dim",
    "is_pass_by_value",
    "is_virtual",
    "name",
    "pass_by_value",
    "ragged_offset_name",
    "ragged_offset_uid",
    "reordering_type",
    "stride",
    "uid",
    "uid_assigned",
];

/// Fields every node has (`Attributes`: name, compute type, ports), the tag, and our extension.
pub(crate) const NODE_FIELDS: [&str; 6] = ["compute_data_type", "cudnn_graph", "inputs", "name", "outputs", "tag"];
/// `Matmul_attributes`'s own fields.
pub(crate) const MATMUL_FIELDS: [&str; 1] = ["padding_value"];
/// `Pointwise_attributes`'s own fields.
pub(crate) const POINTWISE_FIELDS: [&str; 8] = [
    "axis",
    "elu_alpha",
    "mode",
    "relu_lower_clip",
    "relu_lower_clip_slope",
    "relu_upper_clip",
    "softplus_beta",
    "swish_beta",
];
/// `Reduction_attributes`'s own fields.
pub(crate) const REDUCTION_FIELDS: [&str; 2] = ["is_deterministic", "mode"];

/// The normalizations' own fields: the forward phase (`Layernorm_attributes`, `Rmsnorm_attributes`,
/// `Instancenorm_attributes`) and batch norm's peer statistics (`Batchnorm_attributes`,
/// `Batchnorm_backward_attributes`).
pub(crate) const NORM_PHASE_FIELD: &str = "forward_phase";
pub(crate) const NORM_PEER_STATS_FIELD: &str = "peer_stats";

/// Node tags.
pub(crate) const TAG_MATMUL: &str = "MATMUL";
pub(crate) const TAG_POINTWISE: &str = "POINTWISE";
pub(crate) const TAG_REDUCTION: &str = "REDUCTION";
/// The normalizations' tags (`NormKind::frontend_tag`; `RMS_NORM` is `rmsnorm` or `rmsnorm_bias`).
pub(crate) const NORM_TAGS: [&str; 10] = [
    "LAYER_NORM",
    "RMS_NORM",
    "BATCHNORM",
    "BATCHNORM_INFERENCE",
    "INSTANCE_NORM",
    "GENSTATS",
    "LAYER_NORM_BPROP",
    "RMS_NORM_BPROP",
    "DBN",
    "INSTANCE_NORM_BPROP",
];
/// The tags this reader supports.
pub(crate) const TAGS: [&str; 3] = [TAG_MATMUL, TAG_POINTWISE, TAG_REDUCTION];

/// The normalization a cudnn-frontend norm tag reads to; `RMS_NORM` reads to `rmsnorm_bias` when
/// the node has a BIAS input (`has_bias`).
pub(crate) fn norm_kind_of_tag(tag: &str, has_bias: bool) -> Option<NormKind> {
    match tag {
        "RMS_NORM" if has_bias => Some(NormKind::RmsNormBias),
        "RMS_NORM" => Some(NormKind::RmsNorm),
        _ => NormKind::ALL.iter().copied().find(|k| k.frontend_tag() == tag),
    }
}

/// cudnn-frontend's `DataType_t` spelling of an IR data type.
pub(crate) const fn data_type_name(d: DataType) -> &'static str {
    match d {
        DataType::F32 => "FLOAT",
        DataType::F64 => "DOUBLE",
        DataType::F16 => "HALF",
        DataType::BF16 => "BFLOAT16",
        DataType::I8 => "INT8",
        DataType::U8 => "UINT8",
        DataType::I32 => "INT32",
        DataType::I64 => "INT64",
        DataType::Bool => "BOOLEAN",
        DataType::Fp8E4M3 => "FP8_E4M3",
        DataType::Fp8E5M2 => "FP8_E5M2",
    }
}

/// cudnn-frontend data types the IR has no equivalent for.
const UNSUPPORTED_DATA_TYPES: [&str; 9] = [
    "INT8x4",
    "UINT8x4",
    "INT8x32",
    "FAST_FLOAT_FOR_FP8",
    "FP8_E8M0",
    "FP4_E2M1",
    "INT4",
    "COMPLEX_FP32",
    "COMPLEX_FP64",
];

/// What a data-type spelling is.
pub(crate) enum DataTypeName {
    /// One of ours.
    Known(DataType),
    /// One of cudnn-frontend's that we do not support.
    Unsupported,
    /// Nobody's.
    Unknown,
}

/// Parses cudnn-frontend's spelling of a data type.
pub(crate) fn parse_data_type(s: &str) -> DataTypeName {
    if let Some(d) = DataType::ALL.into_iter().find(|d| data_type_name(*d) == s) {
        DataTypeName::Known(d)
    } else if UNSUPPORTED_DATA_TYPES.contains(&s) {
        DataTypeName::Unsupported
    } else {
        DataTypeName::Unknown
    }
}

/// Parses cudnn-frontend's spelling of a reduction mode (`ADD`, `AVG`, ...).
pub(crate) fn parse_reduction_mode(s: &str) -> Option<ReductionMode> {
    ReductionMode::ALL.iter().copied().find(|m| m.cudnn_name() == s)
}

/// The alternatives of cudnn-frontend's `pass_by_values_t`
/// (`std::variant<int64_t, int32_t, half, float, double, nv_bfloat16>`), serialized as
/// `{"index": <alternative>, "value": ...}`: integers as JSON integers, `half`/`float`/`bfloat16` as
/// the `float` hex pattern, `double` as a JSON number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScalarKind {
    Int64 = 0,
    Int32 = 1,
    Half = 2,
    Float = 3,
    Double = 4,
    BFloat16 = 5,
}

impl ScalarKind {
    /// The alternative for `index`.
    pub(crate) fn from_index(index: i64) -> Option<ScalarKind> {
        Some(match index {
            0 => ScalarKind::Int64,
            1 => ScalarKind::Int32,
            2 => ScalarKind::Half,
            3 => ScalarKind::Float,
            4 => ScalarKind::Double,
            5 => ScalarKind::BFloat16,
            _ => return None,
        })
    }

    /// The alternative we write for a scalar of type `d`. cudnn-frontend's variant has no 8-bit or
    /// boolean alternative: those go as `int32_t` (integers, booleans) or `float` (fp8), exactly.
    pub(crate) const fn for_data_type(d: DataType) -> ScalarKind {
        match d {
            DataType::I64 => ScalarKind::Int64,
            DataType::I32 | DataType::I8 | DataType::U8 | DataType::Bool => ScalarKind::Int32,
            DataType::F16 => ScalarKind::Half,
            DataType::BF16 => ScalarKind::BFloat16,
            DataType::F64 => ScalarKind::Double,
            DataType::F32 | DataType::Fp8E4M3 | DataType::Fp8E5M2 => ScalarKind::Float,
        }
    }
}

/// cudnn-frontend's `Pointwise_attributes` float fields, in the order its JSON lists them, with the
/// DSL attribute each one is for the modes that take it.
pub(crate) const POINTWISE_FLOAT_FIELDS: [&str; 6] =
    ["relu_lower_clip", "relu_upper_clip", "relu_lower_clip_slope", "swish_beta", "elu_alpha", "softplus_beta"];

/// The DSL attribute a cudnn-frontend pointwise field sets, for `mode`; `None` if the mode does not
/// take it. (`beta` is `swish_beta` for swish and `softplus_beta` for softplus.)
pub(crate) fn dsl_attr_of(field: &str, mode: PointwiseMode) -> Option<&'static str> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_type_names_agree_with_the_ir_serde_names() {
        for d in DataType::ALL {
            let serde_name = serde_json::to_string(&d).unwrap();
            assert_eq!(serde_name, format!("\"{}\"", data_type_name(d)));
            assert!(matches!(parse_data_type(data_type_name(d)), DataTypeName::Known(x) if x == d));
        }
        assert!(matches!(parse_data_type("INT4"), DataTypeName::Unsupported));
        assert!(matches!(parse_data_type("float"), DataTypeName::Unknown));
    }

    #[test]
    fn norm_tags_are_cudnn_frontends() {
        for &kind in NormKind::ALL {
            let tag = kind.frontend_tag();
            assert!(NORM_TAGS.contains(&tag), "{kind:?}");
            assert_eq!(norm_kind_of_tag(tag, kind == NormKind::RmsNormBias), Some(kind));
        }
        assert_eq!(norm_kind_of_tag("ADALAYER_NORM", false), None);
    }

    #[test]
    fn every_scalar_kind_has_its_index() {
        for i in 0..6 {
            assert_eq!(ScalarKind::from_index(i).map(|k| k as i64), Some(i));
        }
        assert_eq!(ScalarKind::from_index(6), None);
        assert_eq!(ScalarKind::from_index(-1), None);
    }

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
