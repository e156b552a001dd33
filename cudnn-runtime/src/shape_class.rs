//! [`ShapeClass`]: the values a `dyn` dim of a `graph!` type may take, and how they are grouped
//! into classes (`dyn S: 1..=8192 pow2`): a value outside the range is an error naming the dim,
//! and each value belongs to the class of the smallest bound at or above it.
//!
//! A class's bound is the value its plans are made for ahead of time (`Name::class_values`
//! lists every combination of bounds, to prebuild). cuDNN 9.19 cannot run a plan at a smaller
//! shape than it was made for (execute-time shape overrides need cuDNN 9.21), so a call still
//! runs the plan of its exact shape; through a plan cache with dynamic shapes
//! (`PlanCache::dynamic_shapes`) that plan finds its kernels already compiled.
//!
//! ```
//! # use cudnn_runtime as cudnn_graph;
//! use cudnn_graph::shape_class::{Buckets, ShapeClass};
//! let s = ShapeClass { dim: "S", min: 1, max: 6000, buckets: Buckets::Pow2 };
//! assert_eq!(s.class_of(100), Ok(128));
//! assert_eq!(s.class_of(5000), Ok(6000)); // the last class ends at the range's end
//! assert!(s.class_of(6001).is_err());
//! assert_eq!(s.bounds().unwrap().len(), 14); // 1, 2, 4, ..., 4096, 6000
//! ```

use std::fmt;

/// How a [`ShapeClass`] groups the values of its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Buckets {
    /// Every value is its own class.
    Exact,
    /// Classes end at powers of two (and at the range's end).
    Pow2,
    /// Classes end at multiples of this (and at the range's end); at least 1.
    Multiple(usize),
    /// Classes end at these values, ascending; the last is the range's end.
    List(&'static [usize]),
}

/// The declared values of one `dyn` dim and their classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShapeClass {
    /// The dim's name.
    pub dim: &'static str,
    /// The smallest value allowed (at least 1).
    pub min: usize,
    /// The largest value allowed.
    pub max: usize,
    /// How values are grouped.
    pub buckets: Buckets,
}

/// A value outside its dim's declared range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("dyn dim `{dim}` = {value} is outside its declared range {min}..={max}")]
pub struct ClassError {
    /// The dim.
    pub dim: &'static str,
    /// The value given.
    pub value: usize,
    /// The declared range.
    pub min: usize,
    /// The declared range's end.
    pub max: usize,
}

impl ShapeClass {
    /// A `dyn` dim declared without a range: any value of at least 1, each its own class.
    pub const fn any(dim: &'static str) -> Self {
        ShapeClass { dim, min: 1, max: usize::MAX, buckets: Buckets::Exact }
    }

    /// The bound of `value`'s class: the smallest class end at or above it.
    pub fn class_of(&self, value: usize) -> Result<usize, ClassError> {
        if value < self.min || value > self.max {
            return Err(ClassError { dim: self.dim, value, min: self.min, max: self.max });
        }
        let bound = match self.buckets {
            Buckets::Exact => value,
            Buckets::Pow2 => value.checked_next_power_of_two().unwrap_or(self.max),
            Buckets::Multiple(k) => value.div_ceil(k.max(1)).checked_mul(k.max(1)).unwrap_or(self.max),
            Buckets::List(ends) => ends.iter().copied().find(|&e| e >= value).unwrap_or(self.max),
        };
        Ok(bound.min(self.max))
    }

    /// Every class's bound, ascending; `None` for [`Buckets::Exact`] (every value its own).
    pub fn bounds(&self) -> Option<Vec<usize>> {
        let mut out = Vec::new();
        match self.buckets {
            Buckets::Exact => return None,
            Buckets::List(ends) => out.extend(ends.iter().copied().filter(|&e| e >= self.min && e <= self.max)),
            Buckets::Pow2 | Buckets::Multiple(_) => {
                let mut v = self.class_of(self.min).ok()?;
                while v < self.max {
                    out.push(v);
                    // The next class starts right after this bound.
                    v = self.class_of(v + 1).ok()?;
                }
                out.push(self.max);
            }
        }
        Some(out)
    }
}

impl fmt::Display for ShapeClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}..={}", self.dim, self.min, self.max)?;
        match self.buckets {
            Buckets::Exact => Ok(()),
            Buckets::Pow2 => f.write_str(" pow2"),
            Buckets::Multiple(k) => write!(f, " multiple({k})"),
            Buckets::List(ends) => write!(f, " {ends:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(min: usize, max: usize, buckets: Buckets) -> ShapeClass {
        ShapeClass { dim: "S", min, max, buckets }
    }

    #[test]
    fn every_value_maps_to_the_smallest_bound_at_or_above_it() {
        let cases = [
            class(1, 8192, Buckets::Pow2),
            class(100, 1000, Buckets::Pow2),
            class(64, 8192, Buckets::Multiple(64)),
            class(1, 1000, Buckets::Multiple(300)),
            class(1, 2048, Buckets::List(&[128, 512, 2048])),
            class(3, 17, Buckets::Exact),
        ];
        for c in cases {
            let bounds = c.bounds();
            for v in c.min..=c.max.min(9000) {
                let b = c.class_of(v).unwrap();
                assert!(b >= v && b <= c.max, "{c}: {v} -> {b}");
                match &bounds {
                    // The smallest bound at or above the value.
                    Some(bounds) => assert_eq!(Some(&b), bounds.iter().find(|&&e| e >= v), "{c}: {v}"),
                    None => assert_eq!(b, v),
                }
            }
            assert!(c.class_of(c.min - 1).is_err() && c.class_of(c.max + 1).is_err(), "{c}");
            if let Some(bounds) = bounds {
                assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{c}: {bounds:?}");
                assert_eq!(bounds.last(), Some(&c.max), "{c}");
            }
        }
        assert_eq!(class(100, 1000, Buckets::Pow2).bounds().unwrap(), [128, 256, 512, 1000]);
        assert_eq!(class(1, 1000, Buckets::Multiple(300)).bounds().unwrap(), [300, 600, 900, 1000]);
        assert_eq!(ShapeClass::any("B").class_of(usize::MAX), Ok(usize::MAX));
        assert_eq!(
            class(1, 8192, Buckets::Pow2).class_of(9000).unwrap_err().to_string(),
            "dyn dim `S` = 9000 is outside its declared range 1..=8192"
        );
    }
}
