//! Convolutions, as cudnn-frontend defines them (`node/conv_fprop.h`, `conv_dgrad.h`,
//! `conv_wgrad.h`): 1-D, 2-D and 3-D, any padding, stride and dilation.
//!
//! | call | inputs | output |
//! | --- | --- | --- |
//! | `conv_fprop(x, w)` | X `[N, C, H, (W, (D))]`, W `[K, C, R, (S, (T))]` | Y `[N, K, P, ...]` |
//! | `conv_dgrad(dy, w)` | DY `[N, K, P, ...]`, W `[K, C, R, ...]` | DX `[N, C, H, ...]` |
//! | `conv_wgrad(x, dy, filter = [R, ...])` | X `[N, C, H, ...]`, DY `[N, K, P, ...]` | DW `[K, C, R, ...]` |
//!
//! Dims are logical `[N, C, spatial...]` as in cudnn-frontend, whatever the memory layout; tensors
//! of these ops are laid out channels-last (NHWC, cudnn-frontend's default) unless their strides are
//! set (see `ir::strides`).
//!
//! Attributes (lists have one value per spatial dim): `pre_padding`, `post_padding` (or `padding`
//! for both; default 0), `stride` (default 1), `dilation` (default 1), `mode = cross_correlation`
//! (the default, what deep learning calls convolution) or `mode = convolution` (the filter is
//! flipped).
//!
//! Shape rules: the spatial output extent of the forward convolution is
//! `P = 1 + (H + pre + post - dilation · (R - 1) - 1) / stride` ([`Dim::window_output`]).
//! - fprop: `Y = [N, K, P...]`; X's and W's channel counts `C` must agree.
//! - dgrad: cuDNN cannot infer DX (the window rule is not invertible for stride > 1), so the rule
//!   gives the smallest `H` whose forward output is `P`, plus `output_padding` (default 0, each
//!   value below the stride or the dilation, as PyTorch's transposed convolution):
//!   `H = (P - 1) · stride - pre - post + dilation · (R - 1) + 1 + output_padding`
//!   ([`Dim::window_input`]). The declared output is checked against it. DY's `K` must equal W's.
//! - wgrad: the filter extents come from the required attribute `filter = [R, ...]`; DY's spatial
//!   dims must be the window rule of X's and the filter's; X's and DY's batch must agree.
//!
//! The CPU reference (f64) is direct loops; the cuDNN lowering is in `lower.rs`.

use serde::{Deserialize, Serialize};

pub(crate) mod codec;
#[cfg(feature = "cudnn")]
pub(crate) mod lower;

use super::signature::{AttrKind, AttrSpec, AttrValue, OpSignature, PortSpec};
use super::attrs::{AttrError, Attrs};
use super::shape::{rule, OutputMeta, ShapeError, ShapeErrorKind, TensorMeta};
use super::window::{check_spatial_rank, check_spatial_type, spatial_list, WindowAttrs};
/// (Also at `ops::Window`.)
pub use super::window::Window;
use super::family::{ChannelsLast, FusionRule, Inferred, LayoutPolicy, OpFamily, OutputLayout};
use super::Family;
use crate::dim::{shape_string, Concrete, Dim, DimCx};
use crate::array::Array;
use crate::DataType;

const fn list(name: &'static str) -> AttrSpec {
    AttrSpec { name, kind: AttrKind::IntList, required: false }
}

/// The values of the `mode` attribute.
pub const MODES: &[&str] = &["cross_correlation", "convolution"];

const FPROP_IN: &[PortSpec] = &[PortSpec::tensor("X"), PortSpec::tensor("W")];
const DGRAD_IN: &[PortSpec] = &[PortSpec::tensor("DY"), PortSpec::tensor("W")];
const WGRAD_IN: &[PortSpec] = &[PortSpec::tensor("X"), PortSpec::tensor("DY")];
const FPROP_OUT: &[&str] = &["Y"];
const DGRAD_OUT: &[&str] = &["DX"];
const WGRAD_OUT: &[&str] = &["DW"];

const MODE_ATTR: AttrSpec = AttrSpec { name: "mode", kind: AttrKind::OneOf(MODES), required: false };
/// A kind's attributes: the window's (padding, stride, dilation) and `mode`, then the kind's own.
macro_rules! conv_attrs {
    ($($own:expr),*) => {
        &[list("pre_padding"), list("post_padding"), list("padding"), list("stride"), list("dilation"), MODE_ATTR, $($own),*]
    };
}
const FPROP_ATTRS: &[AttrSpec] = conv_attrs![];
const DGRAD_ATTRS: &[AttrSpec] = conv_attrs![list("output_padding")];
const WGRAD_ATTRS: &[AttrSpec] = conv_attrs![AttrSpec { name: "filter", kind: AttrKind::IntList, required: true }];

/// Which convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConvKind {
    /// `conv_fprop(x, w)`: the forward convolution (cudnn-frontend's `CONV_FPROP`).
    #[serde(rename = "conv_fprop")]
    Fprop,
    /// `conv_dgrad(dy, w)`: the gradient with respect to the data (`CONV_DGRAD`).
    #[serde(rename = "conv_dgrad")]
    Dgrad,
    /// `conv_wgrad(x, dy, filter = [..])`: the gradient with respect to the filter (`CONV_WGRAD`).
    #[serde(rename = "conv_wgrad")]
    Wgrad,
}

impl ConvKind {
    /// Every kind.
    pub const ALL: &'static [ConvKind] = &[ConvKind::Fprop, ConvKind::Dgrad, ConvKind::Wgrad];

    /// The DSL call name.
    pub const fn name(self) -> &'static str {
        match self {
            ConvKind::Fprop => "conv_fprop",
            ConvKind::Dgrad => "conv_dgrad",
            ConvKind::Wgrad => "conv_wgrad",
        }
    }

    /// cudnn-frontend's node tag.
    pub const fn frontend_tag(self) -> &'static str {
        match self {
            ConvKind::Fprop => "CONV_FPROP",
            ConvKind::Dgrad => "CONV_DGRAD",
            ConvKind::Wgrad => "CONV_WGRAD",
        }
    }

    /// Looks up a kind by its DSL call name.
    pub fn from_name(name: &str) -> Option<ConvKind> {
        ConvKind::ALL.iter().copied().find(|k| k.name() == name)
    }

    /// Looks up a kind by cudnn-frontend's tag.
    pub fn from_frontend_tag(tag: &str) -> Option<ConvKind> {
        ConvKind::ALL.iter().copied().find(|k| k.frontend_tag() == tag)
    }

    /// The call signature.
    pub fn signature(self) -> OpSignature {
        let (inputs, outputs, attrs) = match self {
            ConvKind::Fprop => (FPROP_IN, FPROP_OUT, FPROP_ATTRS),
            ConvKind::Dgrad => (DGRAD_IN, DGRAD_OUT, DGRAD_ATTRS),
            ConvKind::Wgrad => (WGRAD_IN, WGRAD_OUT, WGRAD_ATTRS),
        };
        OpSignature { name: self.name(), family: Family::Conv(self), inputs, outputs, attrs }
    }
}

/// cuDNN's convolution modes (`cudnnConvolutionMode_t`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConvMode {
    /// `mode = cross_correlation` (`CUDNN_CROSS_CORRELATION`): the filter as is (the default).
    #[default]
    #[serde(rename = "CROSS_CORRELATION")]
    CrossCorrelation,
    /// `mode = convolution` (`CUDNN_CONVOLUTION`): the filter flipped in every spatial dim.
    #[serde(rename = "CONVOLUTION")]
    Convolution,
}

impl ConvMode {
    /// The DSL spelling.
    pub const fn name(self) -> &'static str {
        match self {
            ConvMode::CrossCorrelation => "cross_correlation",
            ConvMode::Convolution => "convolution",
        }
    }

    /// cudnn-frontend's spelling (`math_mode`).
    pub const fn frontend_name(self) -> &'static str {
        match self {
            ConvMode::CrossCorrelation => "CROSS_CORRELATION",
            ConvMode::Convolution => "CONVOLUTION",
        }
    }

    /// The value of `cudnnConvolutionMode_t`.
    pub const fn cudnn_value(self) -> u32 {
        match self {
            ConvMode::Convolution => 0,
            ConvMode::CrossCorrelation => 1,
        }
    }

    /// Looks up a mode by its DSL spelling.
    pub fn from_name(name: &str) -> Option<ConvMode> {
        [ConvMode::CrossCorrelation, ConvMode::Convolution].into_iter().find(|m| m.name() == name)
    }

    /// Looks up a mode by cudnn-frontend's spelling.
    pub fn from_frontend_name(name: &str) -> Option<ConvMode> {
        [ConvMode::CrossCorrelation, ConvMode::Convolution].into_iter().find(|m| m.frontend_name() == name)
    }
}

/// A convolution: its kind and its attributes as written (empty lists take the defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conv {
    /// Which convolution.
    pub kind: ConvKind,
    /// Padding, filter stride and dilation.
    #[serde(flatten)]
    pub window: WindowAttrs,
    /// Cross-correlation (default) or convolution.
    #[serde(default)]
    pub mode: ConvMode,
    /// dgrad only: added to the smallest DX extent (default 0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_padding: Vec<i64>,
    /// wgrad only: the filter's spatial extents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filter: Vec<i64>,
}

/// A window rule whose arithmetic overflows `i64` in spatial dim `i`: the padding, stride or
/// dilation is at fault (and not, as an empty output would say, the input's extent).
fn overflow<D: Dim>(op: &'static str, i: usize, a: &TensorMeta<D>, b: &TensorMeta<D>, w: &Window) -> ShapeError {
    ShapeError::general(rule(
        op,
        format!(
            "{} overflows i64 in spatial dim {i} of {} and {}; give a padding, stride and dilation within the tensors' extents",
            Conv::describe(w),
            shape_string(&a.dims),
            shape_string(&b.dims)
        ),
    ))
}

/// The error for a result with an extent known to be zero or negative ([`empty`]): input 0,
/// `port`, is not what `expected` says.
fn no_extent<D: Dim>(op: &'static str, port: &'static str, input: &TensorMeta<D>, expected: String) -> ShapeError {
    ShapeError::at(0, ShapeErrorKind::PortShape { op, port, expected, found: shape_string(&input.dims) })
}

/// Whether some extent of `dims` is known to be zero or negative.
fn empty<D: Dim>(dims: &[D]) -> bool {
    dims.iter().any(|d| d.as_lit().is_some_and(|v| v <= 0))
}

impl Conv {
    /// A convolution with default attributes (`filter` must still be set for wgrad).
    pub fn new(kind: ConvKind) -> Self {
        Conv {
            kind,
            window: WindowAttrs::default(),
            mode: ConvMode::CrossCorrelation,
            output_padding: Vec::new(),
            filter: Vec::new(),
        }
    }

    /// The padding, stride and dilation for `spatial` spatial dims, defaults filled in.
    pub fn window(&self, spatial: usize) -> Result<Window, ShapeErrorKind> {
        self.window.resolve(self.kind.name(), spatial, &[])
    }

    /// dgrad's `output_padding`, defaults filled in, each below its stride or dilation.
    pub fn output_padding(&self, w: &Window) -> Result<Vec<i64>, ShapeErrorKind> {
        let op = self.kind.name();
        let extra = spatial_list(op, "output_padding", &self.output_padding, w.stride.len(), 0, 0)?;
        for (i, &e) in extra.iter().enumerate() {
            if e >= w.stride[i].max(w.dilation[i]) {
                return Err(rule(
                    op,
                    format!(
                        "attribute `output_padding` {extra:?} has {e} in spatial dim {i}; it must be less than the stride ({}) or the dilation ({})",
                        w.stride[i], w.dilation[i]
                    ),
                ));
            }
        }
        Ok(extra)
    }

    fn describe(w: &Window) -> String {
        format!("padding {:?}/{:?}, stride {:?}, dilation {:?}", w.pre, w.post, w.stride, w.dilation)
    }

    /// The rules on both operands whatever the kind: their types, their ranks (3 to 5, equal) and
    /// the extents the two must share; then the window for their spatial dims.
    fn check_operands<D: Dim>(
        &self,
        a: &TensorMeta<D>,
        b: &TensorMeta<D>,
        cx: &mut impl DimCx<D>,
    ) -> Result<Window, ShapeError> {
        let op = self.kind.name();
        let ports = self.kind.signature().inputs;
        for (i, t) in [a, b].into_iter().enumerate() {
            check_spatial_type(op, i, ports[i].name, t)?;
        }
        let r = check_spatial_rank(op, ports[0].name, a)?;
        if b.dims.len() != r {
            return Err(ShapeError::at(
                1,
                ShapeErrorKind::Rank {
                    op,
                    port: ports[1].name,
                    expected: format!("the rank of port {} ({r})", ports[0].name),
                    found: b.dims.len(),
                    shape: shape_string(&b.dims),
                },
            ));
        }
        let w = self.window(r - 2).map_err(ShapeError::general)?;
        // (port, axis) of A and B that must agree, and what they are.
        let (ai, bi, what) = match self.kind {
            ConvKind::Fprop => (1, 1, "channel counts"),
            ConvKind::Dgrad => (1, 0, "output-channel counts"),
            ConvKind::Wgrad => (0, 0, "batch sizes"),
        };
        if !cx.require_eq(&a.dims[ai], &b.dims[bi]) {
            let (pa, pb) = (ports[0].name, ports[1].name);
            return Err(ShapeError::at(
                1,
                rule(
                    op,
                    format!(
                        "{what} differ: {pa} is {} and {pb} is {}, so {pa}[{ai}] = {} must equal {pb}[{bi}] = {}",
                        shape_string(&a.dims),
                        shape_string(&b.dims),
                        a.dims[ai],
                        b.dims[bi]
                    ),
                ),
            ));
        }
        Ok(w)
    }

    /// The forward's Y: `[N, K, spatial]`, each spatial extent the window's output over X's.
    fn fprop_y<D: Dim>(&self, x: &TensorMeta<D>, wt: &TensorMeta<D>, w: &Window) -> Result<Vec<D>, ShapeError> {
        let lead = [x.dims[0].clone(), wt.dims[0].clone()];
        let needs = |filter: String| format!("large enough in each spatial dim for the dilated filter {filter}");
        self.windowed(lead, ("X", x), wt, w, needs, |i| {
            D::window_output(&x.dims[i + 2], &wt.dims[i + 2], w.pre[i], w.post[i], w.stride[i], w.dilation[i])
        })
    }

    /// The data gradient's DX: `[N, C, spatial]`, each spatial extent the input a window of DY's
    /// extent came from (with the output padding that picks among several).
    fn dgrad_dx<D: Dim>(&self, dy: &TensorMeta<D>, wt: &TensorMeta<D>, w: &Window) -> Result<Vec<D>, ShapeError> {
        let extra = self.output_padding(w).map_err(ShapeError::general)?;
        let lead = [dy.dims[0].clone(), wt.dims[1].clone()];
        let needs = |filter: String| format!("the gradient of a convolution by {filter}, which no positive DX extent gives");
        self.windowed(lead, ("DY", dy), wt, w, needs, |i| {
            D::window_input(&dy.dims[i + 2], &wt.dims[i + 2], w.pre[i], w.post[i], w.stride[i], w.dilation[i], extra[i])
        })
    }

    /// `[lead…, extent(0), extent(1), …]` over the window's spatial dims, where `extent` is the
    /// window arithmetic over `input` (fprop's X, dgrad's DY) and W: an extent that overflows
    /// `i64` is an error naming both, and one known to be zero or negative is `input`'s, saying
    /// what it must be: `needs` of W and the window (`W [K, C, 3, 3] (padding …)`).
    fn windowed<D: Dim>(
        &self,
        lead: [D; 2],
        (port, input): (&'static str, &TensorMeta<D>),
        wt: &TensorMeta<D>,
        w: &Window,
        needs: impl FnOnce(String) -> String,
        extent: impl Fn(usize) -> Option<D>,
    ) -> Result<Vec<D>, ShapeError> {
        let op = self.kind.name();
        let mut dims = lead.to_vec();
        for i in 0..w.pre.len() {
            dims.push(extent(i).ok_or_else(|| overflow(op, i, input, wt, w))?);
        }
        if empty(&dims) {
            let filter = format!("W {} ({})", shape_string(&wt.dims), Self::describe(w));
            return Err(no_extent(op, port, input, needs(filter)));
        }
        Ok(dims)
    }

    /// The filter gradient's DW: `[K, C, filter]`, once DY's spatial extents are those X convolved
    /// by that filter gives.
    fn wgrad_dw<D: Dim>(
        &self,
        x: &TensorMeta<D>,
        dy: &TensorMeta<D>,
        w: &Window,
        cx: &mut impl DimCx<D>,
    ) -> Result<Vec<D>, ShapeError> {
        let op = self.kind.name();
        let r = x.dims.len();
        // Required: DW's spatial extents come from nowhere else (an empty list must not default
        // to 1s, or the graph would not read back from its own JSON).
        if self.filter.is_empty() {
            return Err(ShapeError::general(rule(
                op,
                "`conv_wgrad` needs the attribute `filter` (a list of integers, one per spatial dim)".into(),
            )));
        }
        let filter = spatial_list(op, "filter", &self.filter, r - 2, 1, 1).map_err(ShapeError::general)?;
        let mut expected = vec![x.dims[0].clone(), dy.dims[1].clone()];
        for (i, &f) in filter.iter().enumerate() {
            expected.push(
                D::window_output(&x.dims[i + 2], &D::lit(f), w.pre[i], w.post[i], w.stride[i], w.dilation[i])
                    .ok_or_else(|| overflow(op, i, x, dy, w))?,
            );
        }
        let agrees = !empty(&expected) && (2..r).all(|i| cx.require_eq(&dy.dims[i], &expected[i]));
        if !agrees {
            return Err(ShapeError::at(
                1,
                ShapeErrorKind::PortShape {
                    op,
                    port: "DY",
                    expected: format!(
                        "{} (X {} convolved by a {filter:?} filter, {})",
                        shape_string(&expected),
                        shape_string(&x.dims),
                        Self::describe(w)
                    ),
                    found: shape_string(&dy.dims),
                },
            ));
        }
        let mut dw = vec![dy.dims[1].clone(), x.dims[1].clone()];
        dw.extend(filter.iter().map(|&f| D::lit(f)));
        Ok(dw)
    }
}

/// Every (output position, filter tap, input position) of a window operation whose input position
/// falls inside the input (padding reads zeros), with positions flattened row-major over the
/// spatial dims and the filter tap already flipped for [`ConvMode::Convolution`].
pub(crate) struct Taps {
    pub(crate) list: Vec<(usize, usize, usize)>,
    pub(crate) outputs: usize,
    pub(crate) filter: usize,
    pub(crate) inputs: usize,
}

impl Taps {
    pub(crate) fn new(out: &[i64], filter: &[i64], input: &[i64], w: &Window, mode: ConvMode) -> Taps {
        let count = |d: &[i64]| d.iter().product::<i64>().max(0);
        let (n_out, n_filter) = (count(out), count(filter));
        let mut list = Vec::new();
        for o in 0..n_out {
            let oi = Array::unravel(o, out);
            for f in 0..n_filter {
                let fi = Array::unravel(f, filter);
                let (mut at, mut tap, mut inside) = (0i64, 0i64, true);
                for d in 0..out.len() {
                    let x = oi[d] * w.stride[d] - w.pre[d] + fi[d] * w.dilation[d];
                    if x < 0 || x >= input[d] {
                        inside = false;
                        break;
                    }
                    at = at * input[d] + x;
                    let t = if mode == ConvMode::Convolution { filter[d] - 1 - fi[d] } else { fi[d] };
                    tap = tap * filter[d] + t;
                }
                if inside {
                    list.push((o as usize, tap as usize, at as usize));
                }
            }
        }
        Taps { list, outputs: n_out as usize, filter: n_filter as usize, inputs: count(input) as usize }
    }
}
impl OpFamily for Conv {
    type Kind = ConvKind;

    const KINDS: &'static [ConvKind] = ConvKind::ALL;

    const TAGS: &'static [&'static str] = &[ConvKind::Fprop.frontend_tag(), ConvKind::Dgrad.frontend_tag(), ConvKind::Wgrad.frontend_tag()];

    fn signature_of(kind: ConvKind) -> OpSignature {
        kind.signature()
    }

    fn kind(&self) -> ConvKind {
        self.kind
    }

    fn from_attrs(kind: ConvKind, a: &Attrs<'_>, _inputs: usize) -> Result<Self, AttrError> {
        Ok(Conv {
            kind,
            window: WindowAttrs::from_attrs(kind.name(), a)?,
            mode: a.name("mode").and_then(ConvMode::from_name).unwrap_or_default(),
            output_padding: a.int_list("output_padding").unwrap_or_default(),
            filter: a.int_list("filter").unwrap_or_default(),
        })
    }

    fn call_attrs(&self) -> Vec<(String, AttrValue)> {
        let mut out = Vec::new();
        self.window.padding_attrs(&mut out);
        WindowAttrs::list_attr("stride", &self.window.stride, &mut out);
        WindowAttrs::list_attr("dilation", &self.window.dilation, &mut out);
        if self.mode != ConvMode::CrossCorrelation {
            out.push(("mode".into(), AttrValue::Name(self.mode.name().into())));
        }
        if !self.output_padding.is_empty() {
            out.push(("output_padding".into(), AttrValue::IntList(self.output_padding.clone())));
        }
        if !self.filter.is_empty() {
            out.push(("filter".into(), AttrValue::IntList(self.filter.clone())));
        }
        out
    }

    fn infer<D: Dim>(&self, inputs: &[TensorMeta<D>], cx: &mut impl DimCx<D>) -> Inferred<D> {
        let (a, b) = (&inputs[0], &inputs[1]);
        let w = self.check_operands(a, b, cx)?;
        let dims = match self.kind {
            ConvKind::Fprop => self.fprop_y(a, b, &w)?,
            ConvKind::Dgrad => self.dgrad_dx(a, b, &w)?,
            ConvKind::Wgrad => self.wgrad_dw(a, b, &w, cx)?,
        };
        Ok(vec![OutputMeta { dims, dtype: None, reason: None }])
    }

    /// The convolution in f64, by direct loops over every output element and filter tap.
    fn reference(&self, inputs: &[&Array]) -> Vec<Array> {
        let (a, b) = (inputs[0], inputs[1]);
        let metas = [
            TensorMeta { dims: a.dims.clone(), dtype: DataType::F32 },
            TensorMeta { dims: b.dims.clone(), dtype: DataType::F32 },
        ];
        let (Ok(out), Ok(w)) =
            (self.infer(&metas, &mut Concrete), self.window(a.dims.len().saturating_sub(2)))
        else {
            // Validated graphs never get here.
            return vec![Array::zeros(&[0])];
        };
        let mut out = Array::zeros(&out[0].dims);
        let spatial = |dims: &[i64]| dims[2..].to_vec();
        let (n, c, k, taps) = match self.kind {
            ConvKind::Fprop => (
                a.dims[0],
                a.dims[1],
                b.dims[0],
                Taps::new(&spatial(&out.dims), &spatial(&b.dims), &spatial(&a.dims), &w, self.mode),
            ),
            ConvKind::Dgrad => (
                a.dims[0],
                b.dims[1],
                b.dims[0],
                Taps::new(&spatial(&a.dims), &spatial(&b.dims), &spatial(&out.dims), &w, self.mode),
            ),
            ConvKind::Wgrad => (
                a.dims[0],
                a.dims[1],
                b.dims[1],
                Taps::new(&spatial(&b.dims), &spatial(&out.dims), &spatial(&a.dims), &w, self.mode),
            ),
        };
        let (n, c, k) = (n as usize, c as usize, k as usize);
        let (so, sf, si) = (taps.outputs, taps.filter, taps.inputs);
        for ni in 0..n {
            for ki in 0..k {
                for ci in 0..c {
                    for &(o, f, i) in &taps.list {
                        let (y, wt, x) = ((ni * k + ki) * so + o, (ki * c + ci) * sf + f, (ni * c + ci) * si + i);
                        match self.kind {
                            ConvKind::Fprop => out.data[y] += a.data[x] * b.data[wt],
                            ConvKind::Dgrad => out.data[x] += a.data[y] * b.data[wt],
                            ConvKind::Wgrad => out.data[wt] += b.data[y] * a.data[x],
                        }
                    }
                }
            }
        }
        vec![out]
    }

    fn fusion(&self) -> FusionRule {
        match self.kind {
            // Elementwise epilogues (bias, activation, residual, a folded batch norm), ending in
            // statistics or a reduction.
            ConvKind::Fprop | ConvKind::Dgrad => FusionRule::Anchor { prologue: false, epilogue: true, follows: false },
            ConvKind::Wgrad => FusionRule::ALONE,
        }
    }

    fn layout_policy(&self) -> LayoutPolicy<'_> {
        LayoutPolicy { channels_last: ChannelsLast::Anchor, outputs: OutputLayout::Packed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dim::{SymDim, Symbolic};
    use crate::ops::Op;

    fn meta<D: Dim>(dims: Vec<D>) -> TensorMeta<D> {
        TensorMeta { dims, dtype: DataType::F16 }
    }

    fn op(name: &str, attrs: &[(&str, AttrValue)]) -> Op {
        let attrs: Vec<(String, AttrValue)> = attrs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        Op::from_call(name, &attrs).unwrap()
    }

    #[test]
    fn fprop_shapes() {
        let conv = op("conv_fprop", &[("padding", vec![1, 1].into()), ("stride", vec![2, 2].into())]);
        let out = conv.infer(&[meta(vec![2, 3, 32, 31]), meta(vec![8, 3, 3, 3])], &mut Concrete).unwrap();
        assert_eq!(out[0].dims, vec![2, 8, 16, 16]);
        let e = conv.infer(&[meta(vec![2, 3, 32, 32]), meta(vec![8, 4, 3, 3])], &mut Concrete).unwrap_err();
        assert_eq!(e.arg, Some(1));
        assert_eq!(
            e.to_string(),
            "`conv_fprop`: channel counts differ: X is [2, 3, 32, 32] and W is [8, 4, 3, 3], so X[1] = 3 must equal W[1] = 4"
        );
        let e = conv.infer(&[meta(vec![2, 3, 32]), meta(vec![8, 3, 3])], &mut Concrete).unwrap_err();
        assert!(e.to_string().contains("attribute `padding`") || e.to_string().contains("has 2 values"), "{e}");
        let e = conv.infer(&[meta(vec![2, 3]), meta(vec![8, 3])], &mut Concrete).unwrap_err();
        assert!(e.to_string().contains("rank 3, 4 or 5"), "{e}");
        let tiny = op("conv_fprop", &[]);
        let e = tiny.infer(&[meta(vec![1, 3, 2, 2]), meta(vec![8, 3, 3, 3])], &mut Concrete).unwrap_err();
        assert!(e.to_string().contains("large enough"), "{e}");
    }

    #[test]
    fn symbolic_fprop_gives_expressions() {
        let p = |s: &str| SymDim::Param(s.into());
        let conv = op("conv_fprop", &[("padding", vec![1].into())]);
        let mut cx = Symbolic::default();
        let out = conv
            .infer(
                &[meta(vec![p("N"), p("C"), p("H")]), meta(vec![SymDim::Lit(8), SymDim::Lit(4), SymDim::Lit(3)])],
                &mut cx,
            )
            .unwrap();
        assert_eq!(out[0].dims[0], p("N"));
        assert_eq!(out[0].dims[1], SymDim::Lit(8));
        assert_eq!(out[0].dims[2], p("H"), "padding 1 around a 3-wide filter keeps H");
        assert_eq!(cx.deferred, vec![(p("C"), SymDim::Lit(4))]);
        let strided = op("conv_fprop", &[("padding", vec![1].into()), ("stride", vec![2].into())]);
        let out = strided
            .infer(
                &[
                    meta(vec![p("N"), SymDim::Lit(4), p("H")]),
                    meta(vec![SymDim::Lit(8), SymDim::Lit(4), SymDim::Lit(3)]),
                ],
                &mut cx,
            )
            .unwrap();
        assert!(matches!(out[0].dims[2], SymDim::Expr(_)));
        assert_eq!(out[0].dims[2].to_string(), "(H + 1) / 2");
    }

    #[test]
    fn dgrad_and_wgrad_shapes() {
        let dgrad = op("conv_dgrad", &[("padding", vec![1, 1].into()), ("stride", vec![2, 2].into())]);
        let out = dgrad.infer(&[meta(vec![2, 8, 16, 16]), meta(vec![8, 3, 3, 3])], &mut Concrete).unwrap();
        assert_eq!(out[0].dims, vec![2, 3, 31, 31]);
        let dgrad = op(
            "conv_dgrad",
            &[("padding", vec![1, 1].into()), ("stride", vec![2, 2].into()), ("output_padding", vec![1, 0].into())],
        );
        let out = dgrad.infer(&[meta(vec![2, 8, 16, 16]), meta(vec![8, 3, 3, 3])], &mut Concrete).unwrap();
        assert_eq!(out[0].dims, vec![2, 3, 32, 31]);
        let bad = op("conv_dgrad", &[("output_padding", vec![1, 1].into())]);
        let e = bad.infer(&[meta(vec![2, 8, 16, 16]), meta(vec![8, 3, 3, 3])], &mut Concrete).unwrap_err();
        assert!(e.to_string().contains("must be less than the stride"), "{e}");
        let e = dgrad.infer(&[meta(vec![2, 7, 16, 16]), meta(vec![8, 3, 3, 3])], &mut Concrete).unwrap_err();
        assert!(e.to_string().contains("DY[1] = 7 must equal W[0] = 8"), "{e}");

        let wgrad = op("conv_wgrad", &[("padding", vec![1, 1].into()), ("filter", vec![3, 3].into())]);
        let out = wgrad.infer(&[meta(vec![2, 3, 16, 16]), meta(vec![2, 8, 16, 16])], &mut Concrete).unwrap();
        assert_eq!(out[0].dims, vec![8, 3, 3, 3]);
        let e = wgrad.infer(&[meta(vec![2, 3, 16, 16]), meta(vec![2, 8, 14, 16])], &mut Concrete).unwrap_err();
        assert_eq!(e.arg, Some(1));
        assert!(e.to_string().contains("port DY must be [2, 8, 16, 16]"), "{e}");
        assert!(Op::from_call("conv_wgrad", &[]).is_err());
    }

    #[test]
    fn an_empty_result_is_its_inputs_error_saying_what_it_needs() {
        let fprop = op("conv_fprop", &[]);
        let e = fprop.infer(&[meta(vec![2, 3, 4, 4]), meta(vec![8, 3, 5, 5])], &mut Concrete).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("X") && text.contains("large enough in each spatial dim for the dilated filter W [8, 3, 5, 5]"), "{text}");
        // DX = (1 - 1)·1 − 2·2 + 3 = −1 in each spatial dim.
        let dgrad = op("conv_dgrad", &[("padding", vec![2, 2].into())]);
        let e = dgrad.infer(&[meta(vec![2, 8, 1, 1]), meta(vec![8, 3, 3, 3])], &mut Concrete).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("DY"), "{text}");
        assert!(text.contains("the gradient of a convolution by W [8, 3, 3, 3] ("), "{text}");
        assert!(text.contains("), which no positive DX extent gives"), "{text}");
    }

    #[test]
    fn padding_conflicts_are_attribute_errors() {
        let e = Op::from_call(
            "conv_fprop",
            &[("padding".into(), vec![1i64].into()), ("pre_padding".into(), vec![1i64].into())],
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "attribute `pre_padding` of `conv_fprop` cannot be given with `padding` (which sets both paddings)"
        );
    }

    #[test]
    fn call_attrs_round_trip() {
        let conv = op(
            "conv_dgrad",
            &[
                ("pre_padding", vec![1, 2].into()),
                ("post_padding", vec![0, 2].into()),
                ("dilation", vec![2, 1].into()),
                ("mode", "convolution".into()),
                ("output_padding", vec![1, 0].into()),
            ],
        );
        assert_eq!(Op::from_call("conv_dgrad", &conv.call_attrs()).unwrap(), conv);
    }

    #[test]
    fn reference_1d_against_a_hand_computation() {
        let x = Array::from_fn(&[1, 1, 5], |i| (i + 1) as f64);
        let w = Array::from_fn(&[1, 1, 3], |i| [1.0, 10.0, 100.0][i]);
        let Op::Conv(cc) = op("conv_fprop", &[("padding", vec![1].into())]) else { unreachable!() };
        assert_eq!(cc.reference(&[&x, &w])[0].data, vec![210.0, 321.0, 432.0, 543.0, 54.0]);
        let Op::Conv(cv) = op("conv_fprop", &[("padding", vec![1].into()), ("mode", "convolution".into())]) else {
            unreachable!()
        };
        assert_eq!(cv.reference(&[&x, &w])[0].data, vec![12.0, 123.0, 234.0, 345.0, 450.0]);
    }
}
