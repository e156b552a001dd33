//! Attribute checking: a call's attributes against its op's signature ([`Attrs::check`]), the
//! typed accessors the family constructors read them with, and [`AttrError`], what a wrong one is.
//! Also the edit-distance suggestion both misspelled ops and misspelled attributes get.

use super::signature::{AttrKind, AttrValue, OpSignature};

/// The candidate nearest to `name` by edit distance, if it is within a third of its length.
pub fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.len() / 3).max(1);
    candidates.map(|c| (edit_distance(name, c), c)).filter(|(d, _)| *d <= limit).min_by_key(|(d, _)| *d).map(|(_, c)| c)
}

/// Optimal-string-alignment distance: insertions, deletions, substitutions and adjacent
/// transpositions (`rleu` is one step from `relu`).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// A wrong attribute in a call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AttrError {
    /// The op has no attribute of that name.
    #[error("`{op}` has no attribute `{attr}`{}", hint(.suggestion, .accepted))]
    Unknown {
        /// The op.
        op: String,
        /// The attribute given.
        attr: String,
        /// The closest accepted attribute, if any is close.
        suggestion: Option<&'static str>,
        /// Every accepted attribute.
        accepted: Vec<&'static str>,
    },
    /// The value has the wrong type.
    #[error("attribute `{attr}` of `{op}` must be {expected}")]
    Type {
        /// The op.
        op: String,
        /// The attribute.
        attr: String,
        /// What it takes.
        expected: AttrKind,
    },
    /// A required attribute was not given.
    #[error("`{op}` needs the attribute `{attr}` ({kind})")]
    Missing {
        /// The op.
        op: String,
        /// The attribute.
        attr: &'static str,
        /// What it takes.
        kind: AttrKind,
    },
    /// Given twice.
    #[error("attribute `{attr}` of `{op}` is given twice")]
    Duplicate {
        /// The op.
        op: String,
        /// The attribute.
        attr: String,
    },
    /// Attributes that are each well typed but do not go together.
    #[error("attribute `{attr}` of `{op}` {reason}")]
    Invalid {
        /// The op.
        op: String,
        /// The attribute at fault.
        attr: String,
        /// Why, in words that name the other attribute.
        reason: String,
    },
    /// A call with a number of inputs the op cannot take (a concatenation of none).
    #[error("`{op}` {reason}")]
    Inputs {
        /// The op.
        op: String,
        /// What it takes and what was given.
        reason: String,
    },
    /// No op of this name.
    #[error("unknown op `{op}`{}", .suggestion.map(|s| format!("; did you mean `{s}`?")).unwrap_or_default())]
    UnknownOp {
        /// The name given.
        op: String,
        /// The closest known op.
        suggestion: Option<&'static str>,
    },
}

fn hint(suggestion: &Option<&'static str>, accepted: &[&'static str]) -> String {
    match (suggestion, accepted.is_empty()) {
        (Some(s), _) => format!("; did you mean `{s}`?"),
        (None, true) => "; it takes no attributes".to_string(),
        (None, false) => {
            format!("; it takes {}", accepted.iter().map(|a| format!("`{a}`")).collect::<Vec<_>>().join(", "))
        }
    }
}

/// Checked attributes of one call, read by the family constructors.
pub(crate) struct Attrs<'a> {
    op: &'static str,
    given: &'a [(String, AttrValue)],
}

impl<'a> Attrs<'a> {
    /// Checks names, duplicates, value types and required attributes against `sig`.
    pub(crate) fn check(sig: &OpSignature, given: &'a [(String, AttrValue)]) -> Result<Self, AttrError> {
        for (i, (name, value)) in given.iter().enumerate() {
            let Some(spec) = sig.attrs.iter().find(|a| a.name == name) else {
                return Err(AttrError::Unknown {
                    op: sig.name.to_string(),
                    attr: name.clone(),
                    suggestion: closest(name, sig.attrs.iter().map(|a| a.name)),
                    accepted: sig.attrs.iter().map(|a| a.name).collect(),
                });
            };
            if given[..i].iter().any(|(n, _)| n == name) {
                return Err(AttrError::Duplicate { op: sig.name.to_string(), attr: name.clone() });
            }
            let ok = match (spec.kind, value) {
                (AttrKind::Float, AttrValue::Float(_) | AttrValue::Int(_))
                | (AttrKind::Int, AttrValue::Int(_))
                | (AttrKind::IntList | AttrKind::Dims | AttrKind::Indices, AttrValue::IntList(_))
                | (AttrKind::Bool, AttrValue::Bool(_)) => true,
                (AttrKind::OneOf(names), AttrValue::Name(n)) => names.contains(&n.as_str()),
                _ => false,
            };
            if !ok {
                return Err(AttrError::Type { op: sig.name.to_string(), attr: name.clone(), expected: spec.kind });
            }
        }
        for spec in sig.attrs.iter().filter(|a| a.required) {
            if !given.iter().any(|(n, _)| n == spec.name) {
                return Err(AttrError::Missing { op: sig.name.to_string(), attr: spec.name, kind: spec.kind });
            }
        }
        Ok(Attrs { op: sig.name, given })
    }

    fn get(&self, name: &str) -> Option<&AttrValue> {
        debug_assert!(!self.op.is_empty());
        self.given.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub(crate) fn float(&self, name: &str) -> Option<f64> {
        match self.get(name)? {
            AttrValue::Float(v) => Some(*v),
            AttrValue::Int(v) => Some(*v as f64),
            _ => None,
        }
    }

    pub(crate) fn bool(&self, name: &str) -> Option<bool> {
        match self.get(name)? {
            AttrValue::Bool(v) => Some(*v),
            _ => None,
        }
    }

    pub(crate) fn name(&self, name: &str) -> Option<&str> {
        match self.get(name)? {
            AttrValue::Name(v) => Some(v),
            _ => None,
        }
    }

    pub(crate) fn int(&self, name: &str) -> Option<i64> {
        match self.get(name)? {
            AttrValue::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub(crate) fn int_list(&self, name: &str) -> Option<Vec<i64>> {
        match self.get(name)? {
            AttrValue::IntList(v) => Some(v.clone()),
            _ => None,
        }
    }
}
