//! A JSON tree that keeps object members in document order, duplicates included.
//!
//! `serde_json::Value` keeps only the last of two equal keys, so a document with a tensor listed
//! twice would silently lose one; this tree keeps both and [`Json::as_obj`] rejects the object
//! naming the key. The writer builds the same tree, so member order (and so the output) is fixed
//! by the code, whatever features `serde_json` is compiled with. Field accessors return
//! [`CodecError`]s naming the field's path.

use std::cell::Cell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::Deserializer;

use super::CodecError;

/// A JSON value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    Int(i64),
    /// A non-negative integer above `i64::MAX`.
    UInt(u64),
    Float(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    /// The JSON type, for error messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Int(_) | Json::UInt(_) => "an integer",
            Json::Float(_) => "a number",
            Json::Str(_) => "a string",
            Json::Arr(_) => "an array",
            Json::Obj(_) => "an object",
        }
    }

    /// An object from members, for the writer.
    pub(crate) fn obj<const N: usize>(members: [(&str, Json); N]) -> Json {
        Json::Obj(members.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }

    /// A string.
    pub(crate) fn str(s: impl Into<String>) -> Json {
        Json::Str(s.into())
    }

    /// The value as an object, checking that no key repeats.
    pub(crate) fn as_obj(&self, path: &str) -> Result<Obj<'_>, CodecError> {
        let Json::Obj(members) = self else {
            return Err(wrong_type(path, "an object", self));
        };
        let mut seen = HashSet::with_capacity(members.len());
        for (k, _) in members {
            if !seen.insert(k.as_str()) {
                return Err(CodecError::DuplicateKey { path: path.to_string(), key: k.clone() });
            }
        }
        Ok(Obj { path: path.to_string(), members })
    }

    /// The value as an `i64`.
    pub(crate) fn as_i64(&self, path: &str) -> Result<i64, CodecError> {
        match self {
            Json::Int(v) => Ok(*v),
            Json::UInt(v) => Err(CodecError::OutOfRange {
                path: path.to_string(),
                value: v.to_string(),
                range: "the 64-bit signed integers",
            }),
            other => Err(wrong_type(path, "an integer", other)),
        }
    }

    /// The value as a list of `i64`.
    pub(crate) fn as_i64_list(&self, path: &str) -> Result<Vec<i64>, CodecError> {
        let Json::Arr(items) = self else {
            return Err(wrong_type(path, "an array of integers", self));
        };
        items.iter().enumerate().map(|(i, v)| v.as_i64(&format!("{path}[{i}]"))).collect()
    }
}

/// A `WrongType` error for `found` at `path`.
pub(crate) fn wrong_type(path: &str, expected: &'static str, found: &Json) -> CodecError {
    CodecError::WrongType { path: path.to_string(), expected, found: found.kind() }
}

/// An object whose keys are known to be unique, with its path for error messages.
pub(crate) struct Obj<'a> {
    path: String,
    members: &'a [(String, Json)],
}

impl<'a> Obj<'a> {
    /// The object's path.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// The path of one of its fields.
    pub(crate) fn field_path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// The members, in document order.
    pub(crate) fn members(&self) -> &'a [(String, Json)] {
        self.members
    }

    /// A field, `null` counting as absent.
    pub(crate) fn get(&self, key: &str) -> Option<&'a Json> {
        self.members.iter().find(|(k, _)| k == key).map(|(_, v)| v).filter(|v| !matches!(v, Json::Null))
    }

    /// A field that must be present and not `null`.
    pub(crate) fn req(&self, key: &str) -> Result<&'a Json, CodecError> {
        self.get(key).ok_or_else(|| CodecError::MissingField { path: self.field_path(key) })
    }

    /// A required string.
    pub(crate) fn str(&self, key: &str) -> Result<&'a str, CodecError> {
        match self.req(key)? {
            Json::Str(s) => Ok(s),
            other => Err(wrong_type(&self.field_path(key), "a string", other)),
        }
    }

    /// An optional string.
    pub(crate) fn opt_str(&self, key: &str) -> Result<Option<&'a str>, CodecError> {
        match self.get(key) {
            None => Ok(None),
            Some(Json::Str(s)) => Ok(Some(s)),
            Some(other) => Err(wrong_type(&self.field_path(key), "a string", other)),
        }
    }

    /// An optional boolean, `default` when absent.
    pub(crate) fn bool_or(&self, key: &str, default: bool) -> Result<bool, CodecError> {
        match self.get(key) {
            None => Ok(default),
            Some(Json::Bool(b)) => Ok(*b),
            Some(other) => Err(wrong_type(&self.field_path(key), "a boolean", other)),
        }
    }

    /// An optional integer.
    pub(crate) fn opt_i64(&self, key: &str) -> Result<Option<i64>, CodecError> {
        self.get(key).map(|v| v.as_i64(&self.field_path(key))).transpose()
    }

    /// An optional list of integers.
    pub(crate) fn opt_i64_list(&self, key: &str) -> Result<Option<Vec<i64>>, CodecError> {
        self.get(key).map(|v| v.as_i64_list(&self.field_path(key))).transpose()
    }

    /// An optional object.
    pub(crate) fn opt_obj(&self, key: &str) -> Result<Option<Obj<'a>>, CodecError> {
        self.get(key).map(|v| v.as_obj(&self.field_path(key))).transpose()
    }

    /// Rejects members not in `accepted` (for our own extension, whose fields are all known).
    pub(crate) fn deny_unknown(&self, accepted: &[&'static str]) -> Result<(), CodecError> {
        match self.members.iter().find(|(k, _)| !accepted.contains(&k.as_str())) {
            Some((k, _)) => Err(CodecError::UnknownField { path: self.field_path(k), accepted: accepted.to_vec() }),
            None => Ok(()),
        }
    }
}

impl Json {
    /// The document as text: objects one member per line (indented by two spaces), except arrays
    /// of scalars and short objects of at most four such members, which stay on one line. The
    /// output depends on nothing but the tree.
    pub(crate) fn to_pretty(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, 0);
        out
    }

    fn is_scalar(&self) -> bool {
        !matches!(self, Json::Arr(_) | Json::Obj(_))
    }

    /// An object printed on one line: at most four members, each a scalar or an array of scalars,
    /// and short.
    fn is_flat(&self) -> bool {
        let Json::Obj(members) = self else { return false };
        let simple = |v: &Json| match v {
            Json::Arr(items) => items.iter().all(Json::is_scalar),
            other => other.is_scalar(),
        };
        if members.len() > 4 || !members.iter().all(|(_, v)| simple(v)) {
            return false;
        }
        let width: usize = members
            .iter()
            .map(|(k, v)| {
                let mut text = String::new();
                v.write(&mut text, 0);
                k.len() + text.len() + 6
            })
            .sum();
        width <= 100
    }

    fn write(&self, out: &mut String, indent: usize) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(v) => out.push_str(&v.to_string()),
            Json::UInt(v) => out.push_str(&v.to_string()),
            Json::Float(v) => out.push_str(&float_text(*v)),
            Json::Str(s) => write_string(out, s),
            Json::Arr(items) if items.is_empty() => out.push_str("[]"),
            Json::Arr(items) if items.iter().all(Json::is_scalar) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write(out, indent);
                }
                out.push(']');
            }
            Json::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    out.push_str(if i > 0 { ",\n" } else { "\n" });
                    push_indent(out, indent + 2);
                    item.write(out, indent + 2);
                }
                out.push('\n');
                push_indent(out, indent);
                out.push(']');
            }
            Json::Obj(members) if members.is_empty() => out.push_str("{}"),
            Json::Obj(members) if self.is_flat() => {
                out.push('{');
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_string(out, k);
                    out.push_str(": ");
                    v.write(out, indent);
                }
                out.push('}');
            }
            Json::Obj(members) => {
                out.push('{');
                for (i, (k, v)) in members.iter().enumerate() {
                    out.push_str(if i > 0 { ",\n" } else { "\n" });
                    push_indent(out, indent + 2);
                    write_string(out, k);
                    out.push_str(": ");
                    v.write(out, indent + 2);
                }
                out.push('\n');
                push_indent(out, indent);
                out.push('}');
            }
        }
    }
}

fn push_indent(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n(' ', n));
}

/// A finite float in the shortest text that reads back as the same value (`null` otherwise, as
/// JSON has no NaN or infinity; nlohmann writes `null` too).
fn float_text(v: f64) -> String {
    if v.is_finite() {
        // serde_json formats with ryu (shortest round-trip digits) and keeps a `.0` on integers.
        serde_json::to_string(&v).unwrap_or_else(|_| "null".to_string())
    } else {
        "null".to_string()
    }
}

/// A JSON string literal.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Parses a document into a tree of at most `max_values` JSON values (so that the tree's memory
/// stays proportional to a sane document, whatever the input). `Ok(None)`: the cap was reached.
pub(crate) fn parse(text: &str, max_values: usize) -> Result<Option<Json>, serde_json::Error> {
    let budget = Budget { left: Cell::new(max_values), exceeded: Cell::new(false) };
    let mut de = serde_json::Deserializer::from_str(text);
    match Seed(&budget).deserialize(&mut de).and_then(|v| de.end().map(|()| v)) {
        Ok(v) => Ok(Some(v)),
        Err(_) if budget.exceeded.get() => Ok(None),
        Err(e) => Err(e),
    }
}

struct Budget {
    left: Cell<usize>,
    exceeded: Cell<bool>,
}

impl Budget {
    fn charge<E: de::Error>(&self) -> Result<(), E> {
        match self.left.get().checked_sub(1) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => {
                self.exceeded.set(true);
                Err(E::custom("too many JSON values"))
            }
        }
    }
}

struct Seed<'b>(&'b Budget);

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Json;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor(self.0))
    }
}

struct JsonVisitor<'b>(&'b Budget);

impl<'de> Visitor<'de> for JsonVisitor<'_> {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        self.0.charge()?;
        Ok(Json::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Json, E> {
        self.0.charge()?;
        Ok(Json::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Json, E> {
        self.0.charge()?;
        Ok(Json::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Json, E> {
        self.0.charge()?;
        Ok(Json::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Json, E> {
        self.0.charge()?;
        Ok(i64::try_from(v).map_or(Json::UInt(v), Json::Int))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        self.0.charge()?;
        Ok(Json::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Json, E> {
        self.0.charge()?;
        Ok(Json::Str(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Json, E> {
        self.0.charge()?;
        Ok(Json::Str(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        self.0.charge()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Seed(self.0))? {
            items.push(item);
        }
        Ok(Json::Arr(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        self.0.charge()?;
        let mut members = Vec::new();
        while let Some(k) = map.next_key::<String>()? {
            self.0.charge()?;
            members.push((k, map.next_value_seed(Seed(self.0))?));
        }
        Ok(Json::Obj(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Json {
        super::parse(s, 1000).unwrap().unwrap()
    }

    #[test]
    fn the_value_budget_is_enforced() {
        // 1 array + 3 numbers; an object costs 1 plus 2 per member.
        assert_eq!(
            super::parse("[1, 2, 3]", 4).unwrap(),
            Some(Json::Arr(vec![Json::Int(1), Json::Int(2), Json::Int(3)]))
        );
        assert_eq!(super::parse("[1, 2, 3]", 3).unwrap(), None);
        assert!(super::parse(r#"{"a": 1}"#, 3).unwrap().is_some());
        assert_eq!(super::parse(r#"{"a": 1}"#, 2).unwrap(), None);
        assert!(super::parse("[1, 2", 100).is_err());
        assert!(super::parse("[1] 2", 100).is_err());
    }

    #[test]
    fn keeps_order_and_duplicates() {
        let j = parse(r#"{"b": 1, "a": [true, null, -2, 1.5, "x"], "b": 18446744073709551615}"#);
        let Json::Obj(members) = &j else { panic!("not an object") };
        let keys: Vec<&str> = members.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["b", "a", "b"]);
        assert_eq!(members[2].1, Json::UInt(u64::MAX));
        assert_eq!(
            j.as_obj("tensors").err(),
            Some(CodecError::DuplicateKey { path: "tensors".into(), key: "b".into() })
        );
        assert_eq!(j.to_pretty(), r#"{"b": 1, "a": [true, null, -2, 1.5, "x"], "b": 18446744073709551615}"#);
    }

    #[test]
    fn pretty_printing_is_stable_and_reads_back() {
        let j = Json::obj([
            ("ports", Json::obj([("A", Json::Int(1)), ("B", Json::Int(2))])),
            ("empty", Json::Obj(Vec::new())),
            ("none", Json::Arr(Vec::new())),
            ("f", Json::Arr(vec![Json::Float(0.0), Json::Float(0.1), Json::Float(f64::NAN), Json::Float(-1e300)])),
            ("s", Json::str("q\"\\\n\u{1}é")),
            ("nested", Json::Arr(vec![Json::obj([("x", Json::Arr(vec![Json::Int(1)]))])])),
        ]);
        let text = j.to_pretty();
        assert_eq!(
            text,
            r#"{
  "ports": {"A": 1, "B": 2},
  "empty": {},
  "none": [],
  "f": [0.0, 0.1, null, -1e+300],
  "s": "q\"\\\n\u0001é",
  "nested": [
    {"x": [1]}
  ]
}"#
        );
        let back = parse(&text);
        let Json::Obj(members) = back else { panic!("not an object") };
        assert_eq!(members[4].1, Json::str("q\"\\\n\u{1}é"));
        assert_eq!(members[3].1, Json::Arr(vec![Json::Float(0.0), Json::Float(0.1), Json::Null, Json::Float(-1e300)]));
    }

    #[test]
    fn accessors_name_the_path() {
        let j = parse(r#"{"dim": [1, "2"], "n": null, "s": 3, "big": 9223372036854775808}"#);
        let o = j.as_obj("tensors[\"a\"]").unwrap();
        assert_eq!(
            o.req("dim").and_then(|d| d.as_i64_list("tensors[\"a\"].dim")).unwrap_err(),
            CodecError::WrongType { path: "tensors[\"a\"].dim[1]".into(), expected: "an integer", found: "a string" }
        );
        assert_eq!(o.req("n").unwrap_err(), CodecError::MissingField { path: "tensors[\"a\"].n".into() });
        assert!(matches!(o.str("s"), Err(CodecError::WrongType { found: "an integer", .. })));
        assert!(matches!(o.opt_i64("big"), Err(CodecError::OutOfRange { .. })));
        assert_eq!(o.opt_i64("missing").unwrap(), None);
        assert!(matches!(o.deny_unknown(&["dim"]), Err(CodecError::UnknownField { .. })));
    }
}
