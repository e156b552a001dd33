//! What the op families' cudnn-frontend codecs (`<family>/codec.rs`) share: what a node's fields
//! read to before its ports are known ([`FrontendNode`]), an op read from those fields alone that
//! waits for its tensors' dims ([`Pending`]), what a family writes ([`FrontendFields`]) and the
//! node's tensors it writes them from ([`WriteCx`]). The document around the nodes (header,
//! context, tensors, ports, assembly) is `serialize/`'s.
//!
//! Every family's codec has the same two functions, which `families!` (`list.rs`) calls:
//! `read(node: &Obj, label: &str, tag: &str) -> Result<FrontendNode, ReadError>` reads a node of
//! one of the family's `OpFamily::TAGS` (`label`: the node's name) from its fields, and
//! `write(op: &Family, cx: &WriteCx) -> FrontendFields` gives the op's fields, the tag included.
//! Each takes what it does not need too (`_label`), so that no family needs a forwarder.

use crate::codec::json::{Json, Obj};
use crate::codec::CodecError;

use super::attrs::AttrError;
use super::signature::{AttrValue, OpSignature};
use super::Op;

/// Why a node's fields could not be read: a field, or the attributes they give.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ReadError {
    /// A field (`serialize::SerializeError`'s variant of the same name).
    Codec(CodecError),
    /// The attributes do not make a valid op (`serialize::SerializeError::Attr`).
    Attr {
        /// The node.
        node: String,
        /// What the op definition said.
        source: AttrError,
    },
}

impl From<CodecError> for ReadError {
    fn from(e: CodecError) -> Self {
        ReadError::Codec(e)
    }
}

impl ReadError {
    /// An attribute error of `node`.
    pub(crate) fn attr(node: &str) -> impl FnOnce(AttrError) -> ReadError + '_ {
        move |source| ReadError::Attr { node: node.to_string(), source }
    }
}

/// A cudnn-frontend attribute value as written (f32 fields keep their bits for comparison).
#[derive(Debug, Clone)]
pub(crate) enum FrontendAttr {
    /// A field that maps to a DSL attribute value as is (a convolution's paddings).
    Value(AttrValue),
    /// An integer field.
    Int(i64),
    /// A float field.
    F32(f32),
    /// An enum field, as the DSL spells it (a norm's `forward_phase`).
    Name(&'static str),
    /// Told by the ports (an RMS-norm backward with a DBIAS output).
    Bool(bool),
}

/// cudnn-frontend attributes: the field, the DSL attribute it sets, its value.
pub(crate) type FrontendAttrs = Vec<(&'static str, &'static str, FrontendAttr)>;

/// A call's attributes, as [`Op::from_call`] takes them.
pub(crate) type CallAttrs = Vec<(String, AttrValue)>;

/// The DSL attributes that cudnn-frontend's fields set.
pub(crate) fn call_attrs(attrs: &FrontendAttrs) -> CallAttrs {
    attrs
        .iter()
        .map(|(_, dsl, v)| {
            let v = match v {
                FrontendAttr::Int(x) => AttrValue::Int(*x),
                FrontendAttr::F32(x) => AttrValue::Float(f64::from(*x)),
                FrontendAttr::Name(x) => AttrValue::Name(x.to_string()),
                FrontendAttr::Bool(x) => AttrValue::Bool(*x),
                FrontendAttr::Value(v) => v.clone(),
            };
            (dsl.to_string(), v)
        })
        .collect()
}

/// Rejects fields that neither every node nor this tag's own fields are.
pub(crate) fn deny_unknown_node_fields(n: &Obj<'_>, own: &[&'static str]) -> Result<(), CodecError> {
    let accepted: Vec<&'static str> = crate::codec::names::NODE_FIELDS.iter().chain(own).copied().collect();
    n.deny_unknown(&accepted)
}

/// Whether the node's port map `field` (`inputs` or `outputs`) connects `port`.
pub(crate) fn has_port(n: &Obj<'_>, field: &str, port: &str) -> Result<bool, CodecError> {
    Ok(n.opt_obj(field)?.and_then(|p| p.get(port)).is_some_and(|v| !matches!(v, Json::Null)))
}

/// What a node's tag and fields read to before its ports are known.
pub(crate) struct FrontendNode {
    /// The DSL call.
    pub(crate) call: &'static str,
    /// Its input ports, in order.
    pub(crate) inputs: Vec<&'static str>,
    /// Its output ports, in order.
    pub(crate) outputs: &'static [&'static str],
    /// Ports cudnn-frontend has that we do not support.
    pub(crate) unsupported_ports: &'static [&'static str],
    /// Whether `inputs` is a list of tensors rather than a port map (a concatenation).
    pub(crate) listed_inputs: bool,
    /// The attributes cudnn-frontend's fields set.
    pub(crate) attrs: FrontendAttrs,
    /// Checks our exact attributes against the fields, before the op is built from them.
    pub(crate) check_exact_attrs: fn(&FrontendNode, &Obj<'_>, &str, &CallAttrs) -> Result<(), ReadError>,
    /// Checks the op built from our exact attributes against the fields.
    pub(crate) check_exact_op: fn(&FrontendNode, &Op, &Obj<'_>, &str, &str) -> Result<(), ReadError>,
    /// Builds the op from the fields alone (no exact attributes), for a node of this many inputs.
    pub(crate) from_fields: fn(&FrontendNode, usize, &str) -> Result<Pending, ReadError>,
}

impl FrontendNode {
    /// A node with the ports of `sig`, whose exact attributes need no check beyond building the
    /// op, and whose fields alone build the op at once.
    pub(crate) fn plain(sig: OpSignature, attrs: FrontendAttrs) -> FrontendNode {
        FrontendNode {
            call: sig.name,
            inputs: sig.inputs.iter().map(|p| p.name).collect(),
            outputs: sig.outputs,
            unsupported_ports: &[],
            listed_inputs: false,
            attrs,
            check_exact_attrs: |_, _, _, _| Ok(()),
            check_exact_op: |_, _, _, _, _| Ok(()),
            from_fields: |fe, inputs, label| {
                Op::from_call_with_inputs(fe.call, &call_attrs(&fe.attrs), inputs)
                    .map(Pending::Ready)
                    .map_err(ReadError::attr(label))
            },
        }
    }
}

/// An op read from cudnn-frontend's fields alone.
pub(crate) enum Pending {
    /// Complete.
    Ready(Op),
    /// Completed from the node's tensors' dims, which cudnn-frontend may leave to its own
    /// inference (a reduction's dims, a convolution gradient's geometry, a reshape's shape, the
    /// attention scale's default).
    Resolve(Resolver),
}

/// How a [`Pending::Resolve`] op is completed.
pub(crate) type Resolver = Box<dyn FnOnce(&NodeDims<'_>) -> Result<Op, ReadError>>;

/// The dims of a node's tensors as the document gives them (empty where it gives none), for
/// [`Pending::Resolve`].
pub(crate) struct NodeDims<'a> {
    /// The node, for error messages.
    pub(crate) label: &'a str,
    /// Each input's dims.
    pub(crate) inputs: Vec<&'a [i64]>,
    /// Each input's type (the context's where the tensor names none), if known.
    pub(crate) input_types: Vec<Option<crate::DataType>>,
    /// Each output's dims.
    pub(crate) outputs: Vec<&'a [i64]>,
}

impl NodeDims<'_> {
    /// The dims of input `i` (empty if unknown).
    pub(crate) fn input(&self, i: usize) -> &[i64] {
        self.inputs.get(i).copied().unwrap_or_default()
    }

    /// The type of input `i`, if known (fp8 attention's backward reads its fp8 type from Q's).
    pub(crate) fn input_type(&self, i: usize) -> Option<crate::DataType> {
        self.input_types.get(i).copied().flatten()
    }

    /// The dims of output `i` (empty if unknown).
    pub(crate) fn output(&self, i: usize) -> &[i64] {
        self.outputs.get(i).copied().unwrap_or_default()
    }
}

/// What a family writes for one node.
pub(crate) struct FrontendFields {
    /// cudnn-frontend's fields, the tag included.
    pub(crate) fields: Vec<(&'static str, Json)>,
    /// Whether `inputs` is written as a list of tensors rather than a port map.
    pub(crate) listed_inputs: bool,
    /// Whether our exact attributes are written even when there are none (cudnn-frontend's
    /// fields spell out defaults that the op leaves unset).
    pub(crate) always_exact: bool,
    /// Whether cudnn-frontend's node has a `compute_data_type` field. Without one (`SDPA_BWD`) it
    /// computes in the context's type, and the node's is written only where it differs from that
    /// (for our reader; cudnn-frontend reads past it).
    pub(crate) compute_data_type: bool,
}

impl FrontendFields {
    /// Fields with ports as a map and exact attributes only when there are some.
    pub(crate) fn plain(fields: Vec<(&'static str, Json)>) -> FrontendFields {
        FrontendFields { fields, listed_inputs: false, always_exact: false, compute_data_type: true }
    }
}

/// The node's tensors as the writer sees them: what a family's fields are computed from.
pub(crate) struct WriteCx<'a> {
    /// Each input's dims (`None` for a reference to a tensor the graph does not have).
    pub(crate) input_dims: Vec<Option<&'a [i64]>>,
}
