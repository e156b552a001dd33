//! Pooling: `resample(x, mode = maxpool, window = [2, 2], stride = [2, 2])`, as cudnn-frontend's
//! `ResampleNode` (`node/resample.h`), for 1 to 3 spatial dims.
//!
//! | attribute | values |
//! | --- | --- |
//! | `mode` (required) | `maxpool`, `avgpool_include_padding` (padding counts as zeros in the average), `avgpool_exclude_padding` (the average of the elements inside the input) |
//! | `window` (required) | the window's extent per spatial dim |
//! | `stride` | per spatial dim; default the window (non-overlapping windows) |
//! | `padding`, `pre_padding`, `post_padding` | per spatial dim, each less than the window; default 0 |
//! | `index` | `true` with `maxpool`: a second output, the index of each window's maximum |
//!
//! Shape rule: X is `[N, C, spatial...]` (rank 3 to 5); Y is `[N, C, P...]` with
//! `P = 1 + (H + pre + post - window) / stride` (the window rule without dilation). With
//! `index = true`, `let (y, idx) = resample(...)` binds Y and INDEX, which has Y's dims and type
//! `i8`.
//!
//! The reference's index is the position of the first maximum inside its window, row-major over
//! the window's dims (`0 .. window volume`). cuDNN's index tensor is meant for its own resample
//! backward and its values are not documented, so the GPU tests compare Y only.

use serde::{Deserialize, Serialize};

pub(crate) mod codec;
#[cfg(feature = "cudnn")]
pub(crate) mod lower;

use super::conv::{ConvMode, Taps};
use super::window::{check_spatial_rank, check_spatial_type, spatial_list, Window, WindowAttrs};
use super::signature::{AttrKind, AttrSpec, AttrValue, OpSignature, PortSpec};
use super::attrs::{AttrError, Attrs};
use super::shape::{rule, OutputMeta, ShapeError, ShapeErrorKind, TensorMeta};
use super::family::{ChannelsLast, FusionRule, Inferred, LayoutPolicy, OpFamily, OutputLayout};
use super::Family;
use crate::dim::{shape_string, Dim, DimCx};
use crate::array::Array;
use crate::DataType;

/// The call name.
pub const NAME: &str = "resample";

/// The values of the `mode` attribute.
pub const MODES: &[&str] = &["maxpool", "avgpool_include_padding", "avgpool_exclude_padding"];

const INPUTS: &[PortSpec] = &[PortSpec::tensor("X")];
const OUTPUTS: &[&str] = &["Y", "Index"];
const ATTRS: &[AttrSpec] = &[
    AttrSpec { name: "mode", kind: AttrKind::OneOf(MODES), required: true },
    AttrSpec { name: "window", kind: AttrKind::IntList, required: true },
    AttrSpec { name: "stride", kind: AttrKind::IntList, required: false },
    AttrSpec { name: "padding", kind: AttrKind::IntList, required: false },
    AttrSpec { name: "pre_padding", kind: AttrKind::IntList, required: false },
    AttrSpec { name: "post_padding", kind: AttrKind::IntList, required: false },
    AttrSpec { name: "index", kind: AttrKind::Bool, required: false },
];

/// The signature of `resample`.
pub fn signature() -> OpSignature {
    OpSignature { name: NAME, family: Family::Resample, inputs: INPUTS, outputs: OUTPUTS, attrs: ATTRS }
}

/// A pooling mode (`cudnnResampleMode_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ResampleMode {
    /// `maxpool` (`CUDNN_RESAMPLE_MAXPOOL`, padding is -∞).
    #[serde(rename = "MAXPOOL")]
    MaxPool,
    /// `avgpool_include_padding` (`CUDNN_RESAMPLE_AVGPOOL_INCLUDE_PADDING`, padding is 0).
    #[serde(rename = "AVGPOOL_INCLUDE_PADDING")]
    AvgPoolIncludePadding,
    /// `avgpool_exclude_padding` (`CUDNN_RESAMPLE_AVGPOOL_EXCLUDE_PADDING`).
    #[serde(rename = "AVGPOOL_EXCLUDE_PADDING")]
    AvgPoolExcludePadding,
}

impl ResampleMode {
    /// Every mode.
    pub const ALL: &'static [ResampleMode] =
        &[ResampleMode::MaxPool, ResampleMode::AvgPoolIncludePadding, ResampleMode::AvgPoolExcludePadding];

    /// The DSL spelling.
    pub const fn name(self) -> &'static str {
        match self {
            ResampleMode::MaxPool => "maxpool",
            ResampleMode::AvgPoolIncludePadding => "avgpool_include_padding",
            ResampleMode::AvgPoolExcludePadding => "avgpool_exclude_padding",
        }
    }

    /// cudnn-frontend's spelling (`resample_mode`).
    pub const fn frontend_name(self) -> &'static str {
        match self {
            ResampleMode::MaxPool => "MAXPOOL",
            ResampleMode::AvgPoolIncludePadding => "AVGPOOL_INCLUDE_PADDING",
            ResampleMode::AvgPoolExcludePadding => "AVGPOOL_EXCLUDE_PADDING",
        }
    }

    /// cudnn-frontend's `padding_mode` for this mode: -∞ for max pooling, zeros for averages.
    pub const fn frontend_padding_mode(self) -> &'static str {
        match self {
            ResampleMode::MaxPool => "NEG_INF_PAD",
            _ => "ZERO_PAD",
        }
    }

    /// The value of `cudnnResampleMode_t`.
    pub const fn cudnn_value(self) -> u32 {
        match self {
            ResampleMode::MaxPool => 3,
            ResampleMode::AvgPoolIncludePadding => 2,
            ResampleMode::AvgPoolExcludePadding => 4,
        }
    }

    /// The value of `cudnnPaddingMode_t` for this mode.
    pub const fn cudnn_padding_mode(self) -> u32 {
        match self {
            ResampleMode::MaxPool => 1,
            _ => 0,
        }
    }

    /// Looks up a mode by its DSL spelling.
    pub fn from_name(name: &str) -> Option<ResampleMode> {
        ResampleMode::ALL.iter().copied().find(|m| m.name() == name)
    }

    /// Looks up a mode by cudnn-frontend's spelling.
    pub fn from_frontend_name(name: &str) -> Option<ResampleMode> {
        ResampleMode::ALL.iter().copied().find(|m| m.frontend_name() == name)
    }
}

/// A pooling op: its mode and window as written (empty lists take the defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resample {
    /// The mode.
    pub mode: ResampleMode,
    /// The window's extents.
    pub window: Vec<i64>,
    /// Padding and stride (default: the window); pooling has no dilation.
    #[serde(flatten)]
    pub geometry: WindowAttrs,
    /// Whether the op also outputs the index of each maximum (max pooling only).
    #[serde(default)]
    pub index: bool,
}

impl Resample {
    /// A pooling op with `window`, stride the window and no padding.
    pub fn new(mode: ResampleMode, window: Vec<i64>) -> Self {
        Resample { mode, window, geometry: WindowAttrs::default(), index: false }
    }

    /// The window extents and geometry (dilation 1) for `spatial` spatial dims, defaults filled in.
    pub fn geometry(&self, spatial: usize) -> Result<(Vec<i64>, Window), ShapeErrorKind> {
        let window = spatial_list(NAME, "window", &self.window, spatial, 1, 1)?;
        let (pre_name, post_name) = self.geometry.padding_names();
        let w = self.geometry.resolve(NAME, spatial, &window)?;
        for (attr, pad) in [(pre_name, &w.pre), (post_name, &w.post)] {
            if let Some(i) = (0..spatial).find(|&i| pad[i] >= window[i]) {
                return Err(rule(
                    NAME,
                    format!(
                        "attribute `{attr}` {pad:?} has {} in spatial dim {i}; padding must be less than the window ({window:?})",
                        pad[i]
                    ),
                ));
            }
        }
        Ok((window, w))
    }
}
impl OpFamily for Resample {
    super::family::one_op!(signature());

    const TAGS: &'static [&'static str] = &[codec::TAG];

    fn from_attrs(_kind: (), a: &Attrs<'_>, _inputs: usize) -> Result<Self, AttrError> {
        let mode = a.name("mode").and_then(ResampleMode::from_name).unwrap_or(ResampleMode::MaxPool);
        let geometry = WindowAttrs::from_attrs(NAME, a)?;
        let index = a.bool("index").unwrap_or(false);
        if index && mode != ResampleMode::MaxPool {
            return Err(AttrError::Invalid {
                op: NAME.into(),
                attr: "index".into(),
                reason: format!("needs `mode = maxpool` (the mode is `{}`)", mode.name()),
            });
        }
        Ok(Resample {
            mode,
            window: a.int_list("window").unwrap_or_default(),
            geometry,
            index,
        })
    }

    fn call_attrs(&self) -> Vec<(String, AttrValue)> {
        let mut out = vec![
            ("mode".into(), AttrValue::Name(self.mode.name().into())),
            ("window".into(), AttrValue::IntList(self.window.clone())),
        ];
        WindowAttrs::list_attr("stride", &self.geometry.stride, &mut out);
        self.geometry.padding_attrs(&mut out);
        if self.index {
            out.push(("index".into(), AttrValue::Bool(true)));
        }
        out
    }

    /// The outputs this instance produces: Y, and INDEX with `index = true`.
    fn outputs(&self) -> &'static [&'static str] {
        if self.index {
            OUTPUTS
        } else {
            &OUTPUTS[..1]
        }
    }

    fn infer<D: Dim>(&self, inputs: &[TensorMeta<D>], _cx: &mut impl DimCx<D>) -> Inferred<D> {
        let x = &inputs[0];
        check_spatial_type(NAME, 0, "X", x)?;
        let r = check_spatial_rank(NAME, "X", x)?;
        let (window, w) = self.geometry(r - 2).map_err(ShapeError::general)?;
        let mut dims = vec![x.dims[0].clone(), x.dims[1].clone()];
        for (i, &extent) in window.iter().enumerate() {
            let Some(y) = D::window_output(&x.dims[i + 2], &D::lit(extent), w.pre[i], w.post[i], w.stride[i], 1) else {
                return Err(ShapeError::general(ShapeErrorKind::Rule {
                    op: NAME,
                    rule: format!(
                        "window {window:?} with padding {:?}/{:?} and stride {:?} overflows i64 in spatial dim {i} of X {}",
                        w.pre,
                        w.post,
                        w.stride,
                        shape_string(&x.dims)
                    ),
                }));
            };
            dims.push(y);
        }
        if dims.iter().any(|d| d.as_lit().is_some_and(|v| v <= 0)) {
            return Err(ShapeError::at(
                0,
                ShapeErrorKind::PortShape {
                    op: NAME,
                    port: "X",
                    expected: format!("large enough in each spatial dim for the window {window:?} and its padding"),
                    found: shape_string(&x.dims),
                },
            ));
        }
        let mut out = vec![OutputMeta { dims: dims.clone(), dtype: None, reason: None }];
        if self.index {
            out.push(OutputMeta { dims, dtype: Some(DataType::I8), reason: None });
        }
        Ok(out)
    }

    /// Pooling in f64: the maximum or average of each window's elements inside the input.
    fn reference(&self, inputs: &[&Array]) -> Vec<Array> {
        let x = inputs[0];
        let r = x.dims.len();
        let metas = [TensorMeta { dims: x.dims.clone(), dtype: DataType::F32 }];
        let (Ok(outs), Ok((window, w))) = (self.infer(&metas, &mut crate::dim::Concrete), self.geometry(r.saturating_sub(2))) else {
            // Validated graphs never get here.
            return self.outputs().iter().map(|_| Array::zeros(&[0])).collect();
        };
        let out_dims = outs[0].dims.clone();
        let taps = Taps::new(&out_dims[2..], &window, &x.dims[2..], &w, ConvMode::CrossCorrelation);
        // In f64: a window that fits a huge padded input can have a volume past i64.
        let volume: f64 = window.iter().map(|&v| v as f64).product();
        let (mut y, mut index) = (Array::zeros(&out_dims), Array::zeros(&out_dims));
        let planes = (x.dims[0] * x.dims[1]) as usize;
        for plane in 0..planes {
            let (xo, yo) = (plane * taps.inputs, plane * taps.outputs);
            let mut start = 0;
            while start < taps.list.len() {
                let o = taps.list[start].0;
                let end = start + taps.list[start..].iter().take_while(|t| t.0 == o).count();
                let window_taps = &taps.list[start..end];
                let values = window_taps.iter().map(|&(_, f, i)| (f, x.data[xo + i]));
                let (value, at) = match self.mode {
                    ResampleMode::MaxPool => {
                        values.fold((f64::NEG_INFINITY, 0usize), |best, (f, v)| if v > best.0 { (v, f) } else { best })
                    }
                    ResampleMode::AvgPoolIncludePadding => (values.map(|(_, v)| v).sum::<f64>() / volume, 0),
                    ResampleMode::AvgPoolExcludePadding => {
                        (values.map(|(_, v)| v).sum::<f64>() / window_taps.len() as f64, 0)
                    }
                };
                y.data[yo + o] = value;
                index.data[yo + o] = at as f64;
                start = end;
            }
        }
        if self.index {
            vec![y, index]
        } else {
            vec![y]
        }
    }

    fn fusion(&self) -> FusionRule {
        FusionRule::ALONE
    }

    fn layout_policy(&self) -> LayoutPolicy<'_> {
        LayoutPolicy { channels_last: ChannelsLast::Anchor, outputs: OutputLayout::Packed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dim::Concrete;
    use crate::ops::Op;

    fn pool(attrs: &[(&str, AttrValue)]) -> Op {
        let attrs: Vec<(String, AttrValue)> = attrs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        Op::from_call(NAME, &attrs).unwrap()
    }

    #[test]
    fn shapes_and_outputs() {
        let p = pool(&[("mode", "maxpool".into()), ("window", vec![2, 3].into()), ("index", true.into())]);
        assert_eq!(p.outputs(), vec!["Y", "Index"]);
        let x = TensorMeta { dims: vec![2i64, 4, 8, 9], dtype: DataType::F16 };
        let out = p.infer(std::slice::from_ref(&x), &mut Concrete).unwrap();
        assert_eq!(out[0].dims, vec![2, 4, 4, 3]);
        assert_eq!(out[1].dtype, Some(DataType::I8));
        let avg = pool(&[
            ("mode", "avgpool_include_padding".into()),
            ("window", vec![3, 3].into()),
            ("stride", vec![1, 1].into()),
            ("padding", vec![1, 1].into()),
        ]);
        assert_eq!(avg.outputs(), vec!["Y"]);
        assert_eq!(avg.infer(std::slice::from_ref(&x), &mut Concrete).unwrap()[0].dims, vec![2, 4, 8, 9]);
        let e = Op::from_call(
            NAME,
            &[
                ("mode".into(), "avgpool_exclude_padding".into()),
                ("window".into(), vec![2i64].into()),
                ("index".into(), true.into()),
            ],
        )
        .unwrap_err();
        assert!(e.to_string().contains("needs `mode = maxpool`"), "{e}");
        let wide = pool(&[("mode", "maxpool".into()), ("window", vec![2, 2].into()), ("padding", vec![2, 0].into())]);
        assert!(wide.infer(&[x], &mut Concrete).unwrap_err().to_string().contains("less than the window"));
    }

    #[test]
    fn reference_against_hand_computations() {
        let x = Array::from_fn(&[1, 1, 4], |i| [3.0, -1.0, 5.0, 2.0][i]);
        let Op::Resample(max) = pool(&[("mode", "maxpool".into()), ("window", vec![2].into()), ("index", true.into())])
        else {
            unreachable!()
        };
        let out = max.reference(&[&x]);
        assert_eq!(out[0].data, vec![3.0, 5.0]);
        assert_eq!(out[1].data, vec![0.0, 0.0]);
        let Op::Resample(inc) = pool(&[
            ("mode", "avgpool_include_padding".into()),
            ("window", vec![2].into()),
            ("pre_padding", vec![1].into()),
        ]) else {
            unreachable!()
        };
        assert_eq!(inc.reference(&[&x])[0].data, vec![1.5, 2.0]);
        let Op::Resample(exc) = pool(&[
            ("mode", "avgpool_exclude_padding".into()),
            ("window", vec![2].into()),
            ("pre_padding", vec![1].into()),
        ]) else {
            unreachable!()
        };
        assert_eq!(exc.reference(&[&x])[0].data, vec![3.0, 2.0]);
    }
}
