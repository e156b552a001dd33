//! Dense row-major `f64` arrays: the value type of the CPU reference engine.

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
    pub fn round_to(&mut self, dtype: crate::DataType) {
        for v in &mut self.data {
            *v = dtype.round(*v);
        }
    }
}
