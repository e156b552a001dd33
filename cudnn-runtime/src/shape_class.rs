//! [`ShapeClass`]: the values a `dyn` dim of a `graph!` type may take, and how they are grouped
//! into classes (`dyn S: 1..=8192 pow2`): a value outside the range is an error naming the dim,
//! and each value belongs to the class of the smallest bound at or above it.
//!
//! A class's bound is the value its plans are made for ahead of time (`Name::class_values`
//! lists every combination of bounds, to prebuild). cuDNN 9.19 cannot run a plan at a smaller
//! shape than it was made for (execute-time shape overrides need cuDNN 9.21), so a call still
//! runs the plan of its exact shape; through a plan cache with dynamic shapes
//! (`PlanCache::dynamic_shapes`) that plan finds its kernels already compiled. Attention can do
//! better through its padding mask, and row-wise graphs (norms) through their rows:
//! `backend::PaddedPlan` runs every length of a class on the plan of its bound
//! ([`crate::ir::ClassGraph`]), and `engines::ClassPlan` adds each length's exact plan where the
//! cache's specialization policy builds it.
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
//!
//! [`ClassDecl`] is the same declaration read at run time from its `graph!` spelling
//! (`"64..=8192 pow2"`), as `cudnn-graph aot --dyn` takes it.

use std::fmt;

/// How a [`ShapeClass`] groups the values of its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Buckets<'a> {
    /// Every value is its own class.
    Exact,
    /// Classes end at powers of two (and at the range's end).
    Pow2,
    /// Classes end at multiples of this (and at the range's end); at least 1.
    Multiple(usize),
    /// Classes end at these values, ascending; the last is the range's end.
    List(&'a [usize]),
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
    pub buckets: Buckets<'static>,
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
        Ok(bound_of(self.max, self.buckets, value))
    }

    /// Every class's bound, ascending; `None` for [`Buckets::Exact`] (every value its own).
    pub fn bounds(&self) -> Option<Vec<usize>> {
        match self.buckets {
            Buckets::Exact => None,
            buckets => Some(bounds_of(self.min, self.max, buckets)),
        }
    }
}

/// The bound of the class of `value` (in range) under `buckets`, classes ending at `max`.
fn bound_of(max: usize, buckets: Buckets<'_>, value: usize) -> usize {
    let bound = match buckets {
        Buckets::Exact => value,
        Buckets::Pow2 => value.checked_next_power_of_two().unwrap_or(max),
        Buckets::Multiple(k) => value.div_ceil(k.max(1)).checked_mul(k.max(1)).unwrap_or(max),
        Buckets::List(ends) => ends.iter().copied().find(|&e| e >= value).unwrap_or(max),
    };
    bound.min(max)
}

/// Every class bound of `min..=max` under `buckets`, ascending (every value for `Exact`).
fn bounds_of(min: usize, max: usize, buckets: Buckets<'_>) -> Vec<usize> {
    let mut out = Vec::new();
    match buckets {
        Buckets::List(ends) => out.extend(ends.iter().copied().filter(|&e| e >= min && e <= max)),
        _ => {
            let mut v = bound_of(max, buckets, min);
            while v < max {
                out.push(v);
                // The next class starts right after this bound.
                v = bound_of(max, buckets, v + 1);
            }
            out.push(max);
        }
    }
    out
}

/// A `dyn` dim's class declaration read at run time, in the syntax `graph!` takes after
/// `dyn S:`: `MIN..=MAX` (every value its own class), `MIN..=MAX exact`, `MIN..=MAX pow2`,
/// `MIN..=MAX multiple(K)`, or a list of class ends `[128, 512, 2048]` (the range `1..=2048`).
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::shape_class::{ClassDecl, ClassDeclError};
/// let s: ClassDecl = "64..=512 pow2".parse()?;
/// assert_eq!(s.bounds(), [64, 128, 256, 512]);
/// assert_eq!("[1, 8, 64]".parse::<ClassDecl>()?.bounds(), [1, 8, 64]);
/// assert_eq!("1..=3".parse::<ClassDecl>()?.bounds(), [1, 2, 3]);
/// assert_eq!("64..=8 pow2".parse::<ClassDecl>(), Err(ClassDeclError::Empty { min: 64, max: 8 }));
/// # Ok::<(), ClassDeclError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassDecl {
    /// The smallest value allowed (at least 1).
    pub min: usize,
    /// The largest value allowed.
    pub max: usize,
    /// How values are grouped.
    pub buckets: OwnedBuckets,
}

/// [`Buckets`], owning its list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnedBuckets {
    /// Every value is its own class.
    Exact,
    /// Classes end at powers of two (and at the range's end).
    Pow2,
    /// Classes end at multiples of this (and at the range's end); at least 1.
    Multiple(usize),
    /// Classes end at these values, ascending; the last is the range's end.
    List(Vec<usize>),
}

/// Why a class declaration does not read ([`ClassDecl`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassDeclError {
    /// Nothing, or not a range or list.
    #[error("`{text}` is not a class declaration: write `MIN..=MAX` with `pow2`, `multiple(K)`, `exact` or nothing after it, or a list `[A, B, C]`")]
    Syntax {
        /// The text.
        text: String,
    },
    /// A number that is not a positive integer.
    #[error("`{text}` is not a positive integer")]
    Number {
        /// The text.
        text: String,
    },
    /// A range with no values.
    #[error("the range {min}..={max} is empty")]
    Empty {
        /// Its start.
        min: usize,
        /// Its end.
        max: usize,
    },
    /// An unknown word after the range.
    #[error("unknown classes `{word}`: write `pow2`, `multiple(N)`, `exact` or nothing after the range")]
    Buckets {
        /// The word.
        word: String,
    },
    /// A list that does not ascend.
    #[error("the class ends {ends:?} must ascend strictly")]
    NotAscending {
        /// The list.
        ends: Vec<usize>,
    },
}

impl ClassDecl {
    /// Every class's bound, ascending: for `Exact`, every value of the range.
    pub fn bounds(&self) -> Vec<usize> {
        let view = match &self.buckets {
            OwnedBuckets::Exact => Buckets::Exact,
            OwnedBuckets::Pow2 => Buckets::Pow2,
            OwnedBuckets::Multiple(k) => Buckets::Multiple(*k),
            OwnedBuckets::List(ends) => return bounds_of(self.min, self.max, Buckets::List(ends)),
        };
        bounds_of(self.min, self.max, view)
    }

    /// How many classes [`ClassDecl::bounds`] lists, without listing them (an exact range of a
    /// million values has a million).
    pub fn count(&self) -> usize {
        match &self.buckets {
            OwnedBuckets::Exact => self.max - self.min + 1,
            OwnedBuckets::List(ends) => ends.iter().filter(|&&e| e >= self.min && e <= self.max).count(),
            OwnedBuckets::Pow2 => {
                let first = bound_of(self.max, Buckets::Pow2, self.min);
                if first >= self.max {
                    return 1;
                }
                // The powers of two from `first` below `max`, and `max`.
                (first.trailing_zeros()..usize::BITS).take_while(|&p| (1usize << p) < self.max).count() + 1
            }
            OwnedBuckets::Multiple(k) => {
                let k = (*k).max(1);
                let first = self.min.div_ceil(k);
                let last = self.max / k;
                last.saturating_sub(first) + usize::from(last >= first) + usize::from(!self.max.is_multiple_of(k))
            }
        }
    }
}

impl std::str::FromStr for ClassDecl {
    type Err = ClassDeclError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let syntax = || ClassDeclError::Syntax { text: text.to_string() };
        let number = |t: &str| -> Result<usize, ClassDeclError> {
            match t.trim().parse::<usize>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => Err(ClassDeclError::Number { text: t.trim().to_string() }),
            }
        };
        let text = text.trim();
        if let Some(list) = text.strip_prefix('[') {
            let inner = list.strip_suffix(']').ok_or_else(syntax)?;
            let ends = inner.split(',').map(number).collect::<Result<Vec<_>, _>>()?;
            if ends.windows(2).any(|w| w[0] >= w[1]) {
                return Err(ClassDeclError::NotAscending { ends });
            }
            let max = *ends.last().ok_or_else(syntax)?;
            return Ok(ClassDecl { min: 1, max, buckets: OwnedBuckets::List(ends) });
        }
        let (min, rest) = text.split_once("..=").ok_or_else(syntax)?;
        let rest = rest.trim_start();
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let (max, word) = (number(&rest[..digits])?, rest[digits..].trim());
        let min = number(min)?;
        if min > max {
            return Err(ClassDeclError::Empty { min, max });
        }
        let buckets = match word {
            "" | "exact" => OwnedBuckets::Exact,
            "pow2" => OwnedBuckets::Pow2,
            w => match w.strip_prefix("multiple").map(str::trim).and_then(|a| a.strip_prefix('(')?.strip_suffix(')')) {
                Some(k) => OwnedBuckets::Multiple(number(k)?),
                None => return Err(ClassDeclError::Buckets { word: w.to_string() }),
            },
        };
        Ok(ClassDecl { min, max, buckets })
    }
}

impl fmt::Display for ClassDecl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.buckets {
            OwnedBuckets::List(ends) => write!(f, "{ends:?}"),
            OwnedBuckets::Exact => write!(f, "{}..={}", self.min, self.max),
            OwnedBuckets::Pow2 => write!(f, "{}..={} pow2", self.min, self.max),
            OwnedBuckets::Multiple(k) => write!(f, "{}..={} multiple({k})", self.min, self.max),
        }
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

    fn class(min: usize, max: usize, buckets: Buckets<'static>) -> ShapeClass {
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

    #[test]
    fn declarations_read_at_run_time_list_the_same_bounds_and_count_them() {
        let cases: [(&str, ShapeClass); 6] = [
            ("1..=8192 pow2", class(1, 8192, Buckets::Pow2)),
            ("100..=1000 pow2", class(100, 1000, Buckets::Pow2)),
            ("64..=8192 multiple(64)", class(64, 8192, Buckets::Multiple(64))),
            ("1..=1000 multiple( 300 )", class(1, 1000, Buckets::Multiple(300))),
            ("[128, 512, 2048]", class(1, 2048, Buckets::List(&[128, 512, 2048]))),
            (" 3..=17 exact ", class(3, 17, Buckets::Exact)),
        ];
        for (text, c) in cases {
            let d: ClassDecl = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!((d.min, d.max), (c.min, c.max), "{text}");
            let want = c.bounds().unwrap_or_else(|| (c.min..=c.max).collect());
            assert_eq!(d.bounds(), want, "{text}");
            assert_eq!(d.count(), want.len(), "{text}");
            assert_eq!(d.to_string().parse::<ClassDecl>().as_ref(), Ok(&d), "{text}: Display reads back");
        }
        assert_eq!("7..=7".parse::<ClassDecl>().unwrap().bounds(), [7]);
        for (text, bounds) in [("5..=6 pow2", vec![6]), ("5..=8 multiple(10)", vec![8]), ("3..=4 pow2", vec![4])] {
            let d: ClassDecl = text.parse().unwrap();
            assert_eq!((d.bounds(), d.count()), (bounds.clone(), bounds.len()), "{text}");
        }
        assert_eq!("5..=100 multiple(10)".parse::<ClassDecl>().unwrap().count(), 10);
        let err = |t: &str| t.parse::<ClassDecl>().unwrap_err().to_string();
        assert_eq!(err("64..=8 pow2"), "the range 64..=8 is empty");
        assert_eq!(err("0..=8"), "`0` is not a positive integer");
        assert_eq!(
            err("1..=8 pow3"),
            "unknown classes `pow3`: write `pow2`, `multiple(N)`, `exact` or nothing after the range"
        );
        assert_eq!(err("1..=8 multiple(0)"), "`0` is not a positive integer");
        assert_eq!(err("[8, 8]"), "the class ends [8, 8] must ascend strictly");
        assert_eq!(err("[8, x]"), "`x` is not a positive integer");
        assert!(err("S").starts_with("`S` is not a class declaration"));
        assert!(err("[1, 2").starts_with("`[1, 2` is not a class declaration"));
    }
}
