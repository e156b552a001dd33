//! The document level of cudnn-frontend's layout: versions, the top-level, context and tensor
//! fields, and the by-value scalar alternatives. (Each node's tags and fields are its family's:
//! `ops/<family>/codec.rs`; data-type spellings are `codec/names.rs`.)

use crate::DataType;

/// The `json_version` we write: cudnn-frontend 1.32's (captured from it on an H200: `tensors` is
/// an array of tensors carrying their uids).
pub const JSON_VERSION: &str = "2.0";

/// Every `json_version` we read: `"1.0"` (cudnn-frontend before 1.2x: `tensors` is an object keyed
/// by uid or name) and `"2.0"`.
pub const JSON_VERSIONS: [&str; 2] = ["1.0", "2.0"];

/// The top-level `gid` we write for a graph of this fingerprint.
///
/// cudnn-frontend's `gid` (`Graph::gid`, a `uint64_t`) numbers graph instances: a process-wide
/// counter from 1, which it logs ("Executing gid …") and leaves out of its own graph key
/// (`Graph::key` erases it); its reader reads it unchecked, so a document without one is undefined
/// behaviour there. Ours is the fingerprint's low 63 bits (never 0): the same for the same
/// structure, and an `int64` for readers without unsigned integers. The reader type-checks a
/// `gid` and keeps nothing of it.
pub(crate) fn frontend_gid(fingerprint: u64) -> i64 {
    (fingerprint & i64::MAX as u64).max(1) as i64
}

/// The version of our `cudnn_graph` extension.
pub const FORMAT: u64 = 1;

pub(crate) use crate::codec::names::EXT;

/// The top-level fields of a structural document: the structure, cudnn-frontend's version stamps
/// and our extension.
pub(crate) const STRUCTURE_FIELDS: [&str; 8] = [
    "context",
    "gid",
    "cudnn_graph",
    "json_version",
    "nodes",
    "tensors",
    "cudnn_backend_version",
    "cudnn_frontend_version",
];

/// The fields cudnn-frontend's plan payload adds to the same object (its
/// `serialize(std::vector<uint8_t>&)`); the structural reader leaves them to the payload reader
/// (`payload::frontend`).
pub(crate) const PLAN_FIELDS: [&str; 9] = [
    "cudnn_backend_data",
    "variant_pack_uids",
    "behavior_notes",
    "pass_by_values",
    "workspace_modifications",
    "aligned_operands",
    "variant_pack_replacements",
    "fe_workspace_size",
    "tensors_to_dump",
];

/// Every top-level field the structural reader accepts: [`STRUCTURE_FIELDS`] then [`PLAN_FIELDS`].
pub(crate) const TOP_FIELDS: [&str; STRUCTURE_FIELDS.len() + PLAN_FIELDS.len()] = {
    let mut all = [""; STRUCTURE_FIELDS.len() + PLAN_FIELDS.len()];
    let mut i = 0;
    while i < all.len() {
        all[i] = if i < STRUCTURE_FIELDS.len() { STRUCTURE_FIELDS[i] } else { PLAN_FIELDS[i - STRUCTURE_FIELDS.len()] };
        i += 1;
    }
    all
};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scalar_kind_has_its_index() {
        for i in 0..6 {
            assert_eq!(ScalarKind::from_index(i).map(|k| k as i64), Some(i));
        }
        assert_eq!(ScalarKind::from_index(6), None);
        assert_eq!(ScalarKind::from_index(-1), None);
    }
}
