//! Host data at the ground of the crate: [`Array`], the dense row-major `f64` array that op
//! shape rules, CPU references and engines exchange, and [`HostSlice`], a borrowed host buffer of
//! any element type. Both are re-exported by [`crate::reference`], their first user.

use crate::{DataType, Element, Fp8E4M3, Fp8E5M2};

/// A dense, row-major array of `f64` with its dims.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    /// Dims, outermost first.
    pub dims: Vec<i64>,
    /// `dims.product()` values, row-major.
    pub data: Vec<f64>,
}

impl Array {
    /// All zeros.
    pub fn zeros(dims: &[i64]) -> Self {
        Array { dims: dims.to_vec(), data: vec![0.0; dims.iter().product::<i64>() as usize] }
    }

    /// Element `i` (row-major position) is `f(i)`.
    pub fn from_fn(dims: &[i64], mut f: impl FnMut(usize) -> f64) -> Self {
        let n = dims.iter().product::<i64>() as usize;
        Array { dims: dims.to_vec(), data: (0..n).map(&mut f).collect() }
    }

    /// The multi-index of row-major position `flat` in `dims`.
    pub fn unravel(mut flat: i64, dims: &[i64]) -> Vec<i64> {
        let mut idx = vec![0; dims.len()];
        for (i, d) in dims.iter().enumerate().rev() {
            if *d > 0 {
                idx[i] = flat % d;
                flat /= d;
            }
        }
        idx
    }

    /// Strides that read this array as if broadcast to `target` (trailing-aligned): a dim of 1
    /// against a larger target dim gets stride 0. Uses the last `target.len()` dims.
    pub fn broadcast_strides(&self, target: &[i64]) -> Vec<i64> {
        let own = crate::dim::packed_strides(&self.dims);
        let off = self.dims.len() - target.len().min(self.dims.len());
        let dims = &self.dims[off..];
        let strides = &own[off..];
        target.iter().zip(dims.iter().zip(strides)).map(|(t, (d, s))| if *d == 1 && *t != 1 { 0 } else { *s }).collect()
    }

    /// Rounds every value as storage of `dtype` would.
    pub fn round_to(&mut self, dtype: DataType) {
        for v in &mut self.data {
            *v = dtype.round(*v);
        }
    }
}

/// A host buffer of any element type, borrowed.
#[derive(Debug, Clone, Copy)]
pub enum HostSlice<'a> {
    /// f32
    F32(&'a [f32]),
    /// f64
    F64(&'a [f64]),
    /// f16
    F16(&'a [half::f16]),
    /// bf16
    BF16(&'a [half::bf16]),
    /// i8
    I8(&'a [i8]),
    /// u8
    U8(&'a [u8]),
    /// i32
    I32(&'a [i32]),
    /// i64
    I64(&'a [i64]),
    /// bool
    Bool(&'a [bool]),
    /// fp8 e4m3
    Fp8E4M3(&'a [Fp8E4M3]),
    /// fp8 e5m2
    Fp8E5M2(&'a [Fp8E5M2]),
}

macro_rules! host_slice_from {
    ($($t:ty => $v:ident),*) => {$(
        impl<'a> From<&'a [$t]> for HostSlice<'a> {
            fn from(s: &'a [$t]) -> Self { HostSlice::$v(s) }
        }
        impl<'a> From<&'a Vec<$t>> for HostSlice<'a> {
            fn from(s: &'a Vec<$t>) -> Self { HostSlice::$v(s) }
        }
    )*
        impl HostSlice<'_> {
            /// The element type.
            pub fn data_type(&self) -> DataType {
                match self { $(HostSlice::$v(_) => <$t as Element>::DTYPE),* }
            }
            /// Elements held.
            pub fn len(&self) -> usize {
                match self { $(HostSlice::$v(s) => s.len()),* }
            }
            /// True if empty.
            pub fn is_empty(&self) -> bool {
                self.len() == 0
            }
            /// Element `i` as `f64` (panics past the end, as indexing does).
            pub(crate) fn get(&self, i: usize) -> f64 {
                match self { $(HostSlice::$v(s) => s[i].to_f64_value()),* }
            }
        }
    };
}
host_slice_from!(f32 => F32, f64 => F64, half::f16 => F16, half::bf16 => BF16, i8 => I8, u8 => U8, i32 => I32, i64 => I64, bool => Bool, Fp8E4M3 => Fp8E4M3, Fp8E5M2 => Fp8E5M2);
