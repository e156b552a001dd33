//! Per-tensor fp8 scaling: the scale factor that maps a tensor's observed absolute maximum
//! (`amax`, which a graph computes with `reduce_amax`) onto an fp8 format's range, as Transformer
//! Engine's delayed scaling does.
//!
//! A scaled fp8 graph stores `x · scale` in fp8 and multiplies by `descale = 1 / scale` after the
//! matmul. With delayed scaling, the scale used at step `t` comes from the `amax` recorded at
//! earlier steps: [`scale_from_amax`] turns one such `amax` (or the maximum of a window of them)
//! into the next scale.

use crate::DataType;

/// One of the two fp8 formats, for the scaling rules that depend on its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fp8Format {
    /// `fp8_e4m3` (largest finite 448): forward tensors (activations, weights).
    E4M3,
    /// `fp8_e5m2` (largest finite 57344): gradients.
    E5M2,
}

impl Fp8Format {
    /// The format of a tensor type, `None` for a type that is not fp8.
    pub fn of(data_type: DataType) -> Option<Fp8Format> {
        match data_type {
            DataType::Fp8E4M3 => Some(Fp8Format::E4M3),
            DataType::Fp8E5M2 => Some(Fp8Format::E5M2),
            _ => None,
        }
    }

    /// The tensor type of this format.
    pub const fn data_type(self) -> DataType {
        match self {
            Fp8Format::E4M3 => DataType::Fp8E4M3,
            Fp8Format::E5M2 => DataType::Fp8E5M2,
        }
    }

    /// The largest finite value.
    pub const fn max(self) -> f32 {
        match self {
            Fp8Format::E4M3 => 448.0,
            Fp8Format::E5M2 => 57344.0,
        }
    }
}

/// The scale for the next step of delayed scaling, as Transformer Engine computes it
/// (`transformer_engine.pytorch.fp8`, the default `scaling_factor_compute_algo`), in f32:
/// `format.max() / amax / 2^margin`.
///
/// - `amax` zero, negative or not finite (nothing observed yet, or an overflow upstream): the
///   scale stays `previous`, as Transformer Engine keeps it.
/// - `amax` so small that the quotient overflows f32: the largest finite f32.
///
/// `margin` (Transformer Engine's `margin`, usually 0) leaves `2^margin` of headroom for values
/// that grow between steps. The descale that a graph multiplies by after an fp8 matmul is
/// `1 / scale`.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::fp8::{scale_from_amax, Fp8Format};
/// assert_eq!(scale_from_amax(3.5, Fp8Format::E4M3, 0, 1.0), 128.0);
/// assert_eq!(scale_from_amax(3.5, Fp8Format::E4M3, 1, 1.0), 64.0);
/// assert_eq!(scale_from_amax(0.0, Fp8Format::E4M3, 0, 2.0), 2.0); // nothing observed: keep
/// assert_eq!(scale_from_amax(f32::NAN, Fp8Format::E5M2, 0, 2.0), 2.0);
/// ```
pub fn scale_from_amax(amax: f32, format: Fp8Format, margin: i32, previous: f32) -> f32 {
    if !(amax.is_finite() && amax > 0.0) {
        return previous;
    }
    let scale = format.max() / amax / 2f32.powi(margin);
    if scale.is_infinite() {
        f32::MAX
    } else {
        scale
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Fp8E4M3, Fp8E5M2};

    #[test]
    fn formats_match_the_types() {
        assert_eq!(f64::from(Fp8Format::E4M3.max()), Fp8E4M3::MAX.to_f64());
        assert_eq!(f64::from(Fp8Format::E5M2.max()), Fp8E5M2::MAX.to_f64());
        for d in DataType::ALL {
            assert_eq!(
                Fp8Format::of(d).map(Fp8Format::data_type),
                matches!(d, DataType::Fp8E4M3 | DataType::Fp8E5M2).then_some(d)
            );
        }
    }

    #[test]
    fn the_scaled_amax_lands_on_the_largest_finite_value() {
        for amax in [1e-3f32, 0.37, 1.0, 3.5, 1000.0, 6.0e4] {
            for format in [Fp8Format::E4M3, Fp8Format::E5M2] {
                let s = scale_from_amax(amax, format, 0, 1.0);
                assert!(((amax * s) / format.max() - 1.0).abs() < 1e-6, "{amax} {format:?}");
                // Stored in fp8, the scaled amax is the largest finite value, not an overflow.
                let stored = format.data_type().round(f64::from(amax * s));
                assert_eq!(stored, f64::from(format.max()));
                let half = scale_from_amax(amax, format, 1, 1.0);
                assert_eq!(half, s / 2.0);
            }
        }
    }

    #[test]
    fn degenerate_amax_keeps_the_previous_scale() {
        for amax in [0.0, -1.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            assert_eq!(scale_from_amax(amax, Fp8Format::E4M3, 0, 0.25), 0.25, "{amax}");
        }
        assert_eq!(scale_from_amax(1e-45, Fp8Format::E5M2, 0, 1.0), f32::MAX);
    }
}
