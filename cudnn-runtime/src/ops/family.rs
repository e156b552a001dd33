//! [`OpFamily`], the contract every op family's folder fulfils: its ops by name, how a call's
//! attributes build one, its ports, shape rule, CPU reference, layout policy and cuDNN lowering.
//! The `families!` list in `ops/mod.rs` generates [`Op`](super::Op) and its delegating methods
//! from it, so a family that leaves one out does not compile.

use super::attrs::{AttrError, Attrs};
use super::shape::{OutputMeta, ShapeError, StridedMeta, TensorMeta};
use super::signature::{AttrValue, Extents, OpSignature, PortSpec};
use super::Layout;
use crate::array::Array;
use crate::dim::{Dim, DimCx};
use crate::DataType;

/// One op family: the type an [`Op`](super::Op) variant holds.
pub(crate) trait OpFamily: Sized {
    /// What picks one op of the family (`PointwiseMode`, `ConvKind`); `()` for a family of one op.
    type Kind: Copy + 'static;

    /// Every op of the family, in the order [`super::all_names`] lists them.
    const KINDS: &'static [Self::Kind];

    /// The signature of the op of this kind.
    fn signature_of(kind: Self::Kind) -> OpSignature;

    /// The kind of this op.
    fn kind(&self) -> Self::Kind;

    /// Positional input `i` of a call to the op of `kind`: its signature's, unless it takes any
    /// number of inputs (a concatenation).
    fn input_of(kind: Self::Kind, i: usize) -> Option<PortSpec> {
        Self::signature_of(kind).inputs.get(i).copied()
    }

    /// The kind whose call name is `name`, if the family has one.
    fn kind_named(name: &str) -> Option<Self::Kind> {
        Self::KINDS.iter().copied().find(|&k| Self::signature_of(k).name == name)
    }

    /// Builds the op of `kind` from attributes already checked against its signature, for a call
    /// with `inputs` positional arguments.
    fn from_attrs(kind: Self::Kind, attrs: &Attrs<'_>, inputs: usize) -> Result<Self, AttrError>;

    /// The attributes that rebuild this op, defaults omitted: none for a family without
    /// attributes.
    fn call_attrs(&self) -> Vec<(String, AttrValue)> {
        Vec::new()
    }

    /// The inputs this instance takes, in order: its signature's, unless its attributes decide
    /// them (attention's optional ports, a concatenation's count).
    fn inputs(&self) -> Vec<PortSpec> {
        Self::signature_of(self.kind()).inputs.to_vec()
    }

    /// The outputs this instance produces, in order: its signature's, unless its attributes
    /// decide them (a norm's training statistics, pooling's index).
    fn outputs(&self) -> &'static [&'static str] {
        Self::signature_of(self.kind()).outputs
    }

    /// The shape and dtype rule, on as many inputs as [`OpFamily::inputs`] lists.
    fn infer<D: Dim>(&self, inputs: &[TensorMeta<D>], cx: &mut impl DimCx<D>) -> Inferred<D>;

    /// [`OpFamily::infer`] with the extents of the op's attributes of kind
    /// [`AttrKind::Dims`](super::AttrKind::Dims) given: a family that has such attributes
    /// overrides it and reads them through `extents` ([`Extents::read`]), never from the op's own
    /// field (the checker of `graph!` gives its symbolic extents there). The others have none.
    fn infer_with<D: Dim>(
        &self,
        inputs: &[TensorMeta<D>],
        _extents: &Extents<'_, D>,
        cx: &mut impl DimCx<D>,
    ) -> Inferred<D> {
        self.infer(inputs, cx)
    }

    /// The rule this op puts on the graph's compute type, given its inputs' types (an fp8
    /// matmul computes in f32). Checked with the shape rule wherever it runs: `graph!`'s checker,
    /// the builder and [`Graph::validate`](crate::Graph::validate). Most ops take any compute type.
    fn compute_rule(&self, _inputs: &[DataType], _compute: DataType) -> Result<(), ShapeError> {
        Ok(())
    }

    /// The op on the CPU, on as many inputs as [`OpFamily::inputs`] lists.
    fn reference(&self, inputs: &[&Array]) -> Vec<Array>;

    /// The rule on the *values* of the inputs, where the op reads memory through them (a page
    /// table's entries): run before [`OpFamily::reference`], and by the GPU path on the host
    /// copies it checks. Most ops read no memory through values.
    fn check_values(&self, _inputs: &[&Array]) -> Result<(), ShapeError> {
        Ok(())
    }

    /// This op's packed (ragged) ports, each with the input holding its ragged offsets: what the
    /// structural JSON writes as cudnn-frontend's `ragged_offset_uid` on the port's tensor. Most
    /// ops have none.
    fn ragged_ports(&self) -> Vec<RaggedPort> {
        Vec::new()
    }

    /// The input port that holds the ragged offsets of port `port` of a node tagged `tag`, where
    /// the family reads cudnn-frontend's `ragged_offset_uid` on that port's tensor (`None`: the
    /// reader refuses ragged offsets there).
    fn frontend_ragged_offsets(_tag: &str, _port: &str) -> Option<&'static str> {
        None
    }

    /// The rule on the memory layout of this op's ports, where its semantics depend on it (a
    /// ragged attention's packed THD tensors): run by [`Graph::validate`](crate::Graph::validate)
    /// after the shape rule, so the CPU reference and the GPU never read a layout differently.
    /// Most ops take any strides cuDNN takes.
    fn check_layout(&self, _inputs: &[StridedMeta<'_>], _outputs: &[StridedMeta<'_>]) -> Result<(), ShapeError> {
        Ok(())
    }

    /// How the builder lays out the virtual tensors around this op where their strides are unset.
    fn layout_policy(&self) -> LayoutPolicy<'_>;

    /// How this op shares a cuDNN kernel with its neighbours (the partitioner's table of known
    /// patterns).
    fn fusion(&self) -> FusionRule;

    /// Why a dynamic-shape operation graph (kernels compiled once, reused at every shape) must not
    /// hold this op, where it must not: the backend plans a part holding it as an ordinary,
    /// shape-specialized graph instead. Most ops reuse their kernels correctly.
    fn dynamic_shape_refusal(&self) -> Option<&'static str> {
        None
    }

    /// The cudnn-frontend tags its nodes have (`MATMUL`, `CONV_FPROP`, ...).
    const TAGS: &'static [&'static str];
}

/// The [`OpFamily`] items of a family of one op (matmul, bn_finalize, resample): its kind is
/// `()`, and `$signature` gives its signature.
macro_rules! one_op {
    ($signature:expr) => {
        type Kind = ();

        const KINDS: &'static [()] = &[()];

        fn signature_of(_kind: ()) -> $crate::ops::OpSignature {
            $signature
        }

        fn kind(&self) {}
    };
}
pub(crate) use one_op;

/// What a shape rule gives: one [`OutputMeta`] per output, or the error naming the port at fault.
pub(crate) type Inferred<D> = Result<Vec<OutputMeta<D>>, ShapeError>;

/// How an op shares one cuDNN kernel with the ops around it: the table of known patterns that
/// the backend's partitioner starts from (`backend/partition.rs`), for cuDNN 9.19. cuDNN's
/// answers refine it: a part built from it that cuDNN refuses is split further, and the refusal
/// is remembered per cuDNN version and GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FusionRule {
    /// Elementwise (pointwise): fuses into the prologue or epilogue of an anchor that takes one,
    /// and with other elementwise ops in a kernel of its own.
    Elementwise,
    /// A view of its input's memory (reshape, transpose, slice): between two kernels it costs
    /// nothing, since the next kernel reads the memory the view describes.
    View,
    /// An anchor: at most one per kernel.
    Anchor {
        /// Elementwise ops computing its inputs may share its kernel.
        prologue: bool,
        /// Elementwise ops reading its output may share its kernel.
        epilogue: bool,
        /// It may end another anchor's epilogue (a reduction after a matmul, statistics after a
        /// convolution).
        follows: bool,
    },
}

impl FusionRule {
    /// An anchor that shares its kernel with nothing.
    pub const ALONE: FusionRule = FusionRule::Anchor { prologue: false, epilogue: false, follows: false };
}

/// A packed (ragged) port of an op: its tensor holds sequence `b` at the element offset entry
/// `b` of the op's input `offsets` gives (cuDNN's `CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaggedPort {
    /// The port's name (`Q`, `dO`).
    pub port: &'static str,
    /// An output port (else an input).
    pub output: bool,
    /// Its index among the op's inputs or outputs.
    pub index: usize,
    /// The index of the input holding its offsets.
    pub offsets: usize,
    /// The packed tokens its buffer holds, where the op bounds them (`max_total_seq_len_q`);
    /// `None`: the tensor's whole storage span.
    pub tokens: Option<i64>,
}

/// How the builder lays out the virtual tensors around an op whose strides are unset (graph
/// ports keep their declared layout).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LayoutPolicy<'a> {
    /// Its channels-last rule.
    pub(crate) channels_last: ChannelsLast,
    /// How its outputs are laid out.
    pub(crate) outputs: OutputLayout<'a>,
}

impl LayoutPolicy<'_> {
    /// No preference: packed row-major.
    pub(crate) const PACKED: LayoutPolicy<'static> =
        LayoutPolicy { channels_last: ChannelsLast::No, outputs: OutputLayout::Packed };
}

/// Whether an op lays its ports out channels-last (NHWC, what cuDNN's fused convolution engines
/// want).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChannelsLast {
    /// Not its concern.
    No,
    /// Its virtual ports of rank 3 to 5 are channels-last (convolutions, pooling).
    Anchor,
    /// Its virtual ports take channels-last from another of its ports of the same rank that has
    /// it (a convolution's biased and activated intermediates, a concatenation of them).
    Follow,
}

/// How an op's outputs with unset strides are laid out.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OutputLayout<'a> {
    /// Packed row-major.
    Packed,
    /// A virtual output packed in the dim order of its first input of the same dims whose
    /// layout is set, so a channels-last input keeps its layout through a fused chain.
    LikeInput,
    /// A virtual Y is a view of X (or X's layout carried over): [`Layout::output_strides`]. A
    /// graph output keeps its declared layout, as every port does.
    View(&'a Layout),
}

/// What a family's lowering (`lower::lower` in its folder) gives, through `Into` where it lowers
/// to one operation ([`LoweredOp`](crate::cudnn::LoweredOp)).
#[cfg(feature = "cudnn")]
pub(crate) type LowerResult = Result<lowering::Lowered, crate::cudnn::CudnnError>;

/// The lowering's vocabulary as the families see it.
#[cfg(feature = "cudnn")]
pub(crate) mod lowering {
    pub(crate) use crate::cudnn::NodeCx;
    use crate::cudnn::{Descriptor, Internals, LoweredOp};

    /// What a family's lowering gets: the node's context, the loaded cuDNN, and the next uid
    /// free for tensors of the lowering's own.
    pub(crate) struct LowerCx<'a, 'n> {
        pub(crate) node: &'a NodeCx<'n>,
        pub(crate) cudnn: &'a crate::cudnn::Cudnn,
        pub(crate) next_uid: &'a mut i64,
    }

    /// A node's operations, the descriptors they refer to, and the tensors the lowering added
    /// that the variant pack binds.
    pub(crate) struct Lowered {
        pub(crate) operations: Vec<Descriptor>,
        pub(crate) parts: Vec<Descriptor>,
        pub(crate) internals: Internals,
    }

    impl From<LoweredOp> for Lowered {
        fn from(op: LoweredOp) -> Self {
            Lowered { operations: vec![op.operation], parts: op.parts, internals: Internals::default() }
        }
    }
}
