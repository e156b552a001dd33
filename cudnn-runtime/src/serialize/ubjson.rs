//! UBJSON (Universal Binary JSON), as cudnn-frontend writes and reads it: its plan payloads
//! (`Graph::serialize` to bytes) are nlohmann::json's `to_ubjson` of a JSON object, and it reads
//! them back with `from_ubjson`.
//!
//! The reader (`from_ubjson`, crate-internal) reads every form nlohmann's `from_ubjson` accepts (strict: one value, then the end of
//! the input) into the crate's JSON tree: the markers `Z T F i U I l L d D H C S [ {`, the no-op
//! `N` before a value or a container's end, and the optimized containers (`#` count, `$` type and
//! count). The writer (`to_ubjson`) writes what nlohmann's `to_ubjson(j)` writes with its defaults (no counts or types):
//! each integer with the smallest of `i U I l L` that holds it (nlohmann's order), an integer above
//! `i64::MAX` as a high-precision `H` number, every float as `D`, strings as `S`, object keys as
//! bare length-prefixed strings. Reading cudnn-frontend's bytes and writing them back gives the
//! same bytes (nlohmann keeps object keys sorted and the tree keeps the document's order).
//!
//! Reading is bounded: at most [`MAX_BYTES`] of input, [`MAX_DEPTH`] nested containers and
//! [`super::MAX_JSON_VALUES`] values (an optimized container of nulls takes no bytes per element,
//! so the input's length alone does not bound the tree). Every failure is an [`UbjsonError`]
//! naming the byte offset; nothing panics.
//!
//! For tools (and the fuzz target) outside the crate: [`canonical_ubjson`] rewrites UBJSON as
//! nlohmann writes it (exactly), [`ubjson_to_json`] and [`json_to_ubjson`] convert between UBJSON
//! bytes and JSON text.

use crate::codec::json::{self, Json};

/// The longest UBJSON input read ([`canonical_ubjson`], [`ubjson_to_json`]): 64 MiB, a plan payload's limit
/// (`payload::plan::MAX_PAYLOAD_BYTES`).
pub const MAX_BYTES: usize = 64 << 20;

/// The deepest nesting of arrays and objects read or written: the deepest serde_json reads, so
/// that whatever is read converts to JSON text and back.
pub const MAX_DEPTH: usize = 127;

/// Why UBJSON bytes (or JSON text to convert) could not be read, or a value not written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UbjsonError {
    /// The input is longer than [`MAX_BYTES`].
    #[error("the input is {len} bytes; at most {max} are read")]
    TooLarge {
        /// Its length in bytes.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// The input ends inside a value.
    #[error("the input ends at byte {offset} inside a value")]
    UnexpectedEnd {
        /// Where it ends.
        offset: usize,
    },
    /// A byte that is no UBJSON marker where one is expected (or one that is not allowed there:
    /// a container end outside a container, `N` as an optimized container's type).
    #[error("byte {offset}: {marker:#04x} is not a UBJSON {expected}")]
    UnknownMarker {
        /// Where.
        offset: usize,
        /// The byte.
        marker: u8,
        /// What was expected there (`value marker`, `length marker`, `type marker`, …).
        expected: &'static str,
    },
    /// A string, key, high-precision number or container count whose length is negative or
    /// longer than the input left.
    #[error("byte {offset}: length {len} is negative or runs past the end of the input")]
    BadLength {
        /// Where the length starts.
        offset: usize,
        /// The length as read.
        len: i64,
    },
    /// A string or key that is not UTF-8, or a `C` char above 0x7F.
    #[error("byte {offset}: the string is not UTF-8")]
    InvalidUtf8 {
        /// Where the string starts.
        offset: usize,
    },
    /// A high-precision (`H`) number whose text is not a JSON number.
    #[error("byte {offset}: the high-precision number {text:?} is not a JSON number")]
    BadNumber {
        /// Where its text starts.
        offset: usize,
        /// The text (lossily decoded).
        text: String,
    },
    /// Containers nested deeper than [`MAX_DEPTH`].
    #[error("byte {offset}: containers nest deeper than {max}")]
    TooDeep {
        /// Where the container that is too deep starts (0 when writing).
        offset: usize,
        /// The cap.
        max: usize,
    },
    /// More values than [`super::MAX_JSON_VALUES`].
    #[error("byte {offset}: more than {max} values")]
    TooManyValues {
        /// Where the counting stopped.
        offset: usize,
        /// The cap.
        max: usize,
    },
    /// Bytes after the value.
    #[error("byte {offset}: {left} bytes after the value")]
    TrailingBytes {
        /// Where the value ends.
        offset: usize,
        /// How many bytes follow it.
        left: usize,
    },
    /// The JSON text given to [`json_to_ubjson`] is not JSON (or holds more than
    /// [`super::MAX_JSON_VALUES`] values).
    #[error("not valid JSON: {0}")]
    Json(String),
}

/// Reads one UBJSON value (the whole input) into a JSON tree.
///
/// # Errors
///
/// An [`UbjsonError`] with the byte offset at fault.
pub(crate) fn from_ubjson(bytes: &[u8]) -> Result<Json, UbjsonError> {
    if bytes.len() > MAX_BYTES {
        return Err(UbjsonError::TooLarge { len: bytes.len(), max: MAX_BYTES });
    }
    let mut reader = Reader { bytes, pos: 0, values_left: super::MAX_JSON_VALUES };
    let marker = reader.marker_skipping_noop()?;
    let value = reader.value(marker, 0)?;
    if reader.pos < bytes.len() {
        return Err(UbjsonError::TrailingBytes { offset: reader.pos, left: bytes.len() - reader.pos });
    }
    Ok(value)
}

/// Writes a JSON tree as UBJSON, as nlohmann's `to_ubjson(j)` writes it.
///
/// # Errors
///
/// [`UbjsonError::TooDeep`] for a tree nested deeper than [`MAX_DEPTH`].
pub(crate) fn to_ubjson(value: &Json) -> Result<Vec<u8>, UbjsonError> {
    let mut out = Vec::new();
    write_value(&mut out, value, 0)?;
    Ok(out)
}

/// Reads UBJSON and writes it back as nlohmann's `to_ubjson` would: the bytes cudnn-frontend
/// itself writes for the same value, so its own payloads come back unchanged. Exact: every
/// integer, float bit pattern and string survives.
///
/// # Errors
///
/// An [`UbjsonError`] with the byte offset at fault.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::serialize::ubjson::canonical_ubjson;
/// // A counted array of int16 ones, rewritten with the smallest markers and no count.
/// assert_eq!(canonical_ubjson(b"[#i\x02I\x00\x01I\x00\x01").unwrap(), b"[i\x01i\x01]");
/// ```
pub fn canonical_ubjson(bytes: &[u8]) -> Result<Vec<u8>, UbjsonError> {
    to_ubjson(&from_ubjson(bytes)?)
}

/// Converts UBJSON bytes (a cudnn-frontend plan payload, say) to JSON text, pretty-printed as
/// [`super::structure_to_json`] prints (a float that is not finite becomes `null`, as nlohmann
/// prints it).
///
/// # Errors
///
/// An [`UbjsonError`] with the byte offset at fault.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::serialize::ubjson::ubjson_to_json;
/// assert_eq!(ubjson_to_json(b"{i\x01aU\xc8}").unwrap(), r#"{"a": 200}"#);
/// ```
pub fn ubjson_to_json(bytes: &[u8]) -> Result<String, UbjsonError> {
    Ok(from_ubjson(bytes)?.to_pretty())
}

/// Converts JSON text to UBJSON bytes, as nlohmann's `to_ubjson(json::parse(text))` would
/// (members in the text's order; nlohmann's own objects are sorted by key).
///
/// Floats are parsed by serde_json, which (built without its `float_roundtrip` feature) may
/// land one unit in the last place away from the nearest double for some long decimals (the
/// `ubjson` fuzz target found `1.6852366222828969e+22`); [`canonical_ubjson`] is the exact path
/// from UBJSON to UBJSON.
///
/// # Errors
///
/// [`UbjsonError::Json`] for text that is not JSON or holds more than
/// [`super::MAX_JSON_VALUES`] values (which bounds the memory it takes, whatever its length).
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::serialize::ubjson::json_to_ubjson;
/// assert_eq!(json_to_ubjson(r#"{"a": [true, null, -2]}"#).unwrap(), b"{i\x01a[TZi\xfe]}");
/// ```
pub fn json_to_ubjson(text: &str) -> Result<Vec<u8>, UbjsonError> {
    match json::parse(text, super::MAX_JSON_VALUES) {
        Ok(Some(value)) => to_ubjson(&value),
        Ok(None) => Err(UbjsonError::Json(format!("more than {} values", super::MAX_JSON_VALUES))),
        Err(e) => Err(UbjsonError::Json(e.to_string())),
    }
}

/// Where an optimized container's elements come from.
#[derive(Clone, Copy)]
enum Shape {
    /// Until the end marker.
    Open,
    /// `#`: this many, each with its own marker.
    Counted(usize),
    /// `$` and `#`: this many, all of this marker (which is not written before each).
    Typed(u8, usize),
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    values_left: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, UbjsonError> {
        let b = *self.bytes.get(self.pos).ok_or(UbjsonError::UnexpectedEnd { offset: self.pos })?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&[u8], UbjsonError> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.bytes.len());
        let end = end.ok_or(UbjsonError::UnexpectedEnd { offset: self.bytes.len() })?;
        let slice = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], UbjsonError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// The next marker, past any `N` no-ops.
    fn marker_skipping_noop(&mut self) -> Result<u8, UbjsonError> {
        loop {
            let b = self.byte()?;
            if b != b'N' {
                return Ok(b);
            }
        }
    }

    fn charge(&mut self) -> Result<(), UbjsonError> {
        self.values_left = self
            .values_left
            .checked_sub(1)
            .ok_or(UbjsonError::TooManyValues { offset: self.pos, max: super::MAX_JSON_VALUES })?;
        Ok(())
    }

    /// An integer of the given marker, if it is an integer marker.
    fn integer(&mut self, marker: u8) -> Result<Option<i64>, UbjsonError> {
        Ok(Some(match marker {
            b'i' => i64::from(i8::from_be_bytes(self.array()?)),
            b'U' => i64::from(u8::from_be_bytes(self.array()?)),
            b'I' => i64::from(i16::from_be_bytes(self.array()?)),
            b'l' => i64::from(i32::from_be_bytes(self.array()?)),
            b'L' => i64::from_be_bytes(self.array()?),
            _ => return Ok(None),
        }))
    }

    /// A length (of a string, key or container): an integer marker, then a non-negative value
    /// that fits what is left of the input when `min_size` bytes are needed per unit.
    fn length(&mut self, min_size: usize) -> Result<usize, UbjsonError> {
        let offset = self.pos;
        let marker = self.byte()?;
        let len = self.integer(marker)?.ok_or(UbjsonError::UnknownMarker {
            offset,
            marker,
            expected: "length marker (i, U, I, l or L)",
        })?;
        let left = self.bytes.len() - self.pos;
        match usize::try_from(len) {
            Ok(n) if n.saturating_mul(min_size) <= left => Ok(n),
            _ => Err(UbjsonError::BadLength { offset, len }),
        }
    }

    /// A length-prefixed UTF-8 string (the prefix's marker included).
    fn string(&mut self) -> Result<String, UbjsonError> {
        let n = self.length(1)?;
        let offset = self.pos;
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| UbjsonError::InvalidUtf8 { offset })
    }

    fn value(&mut self, marker: u8, depth: usize) -> Result<Json, UbjsonError> {
        let offset = self.pos.saturating_sub(1);
        self.charge()?;
        if let Some(v) = self.integer(marker)? {
            return Ok(Json::Int(v));
        }
        Ok(match marker {
            b'Z' => Json::Null,
            b'T' => Json::Bool(true),
            b'F' => Json::Bool(false),
            b'd' => Json::Float(f64::from(f32::from_be_bytes(self.array()?))),
            b'D' => Json::Float(f64::from_be_bytes(self.array()?)),
            b'C' => {
                let c = self.byte()?;
                if !c.is_ascii() {
                    return Err(UbjsonError::InvalidUtf8 { offset });
                }
                Json::Str(char::from(c).to_string())
            }
            b'S' => Json::Str(self.string()?),
            b'H' => self.high_precision()?,
            b'[' | b'{' => {
                if depth >= MAX_DEPTH {
                    return Err(UbjsonError::TooDeep { offset, max: MAX_DEPTH });
                }
                let shape = self.shape()?;
                if marker == b'[' {
                    self.array_body(shape, depth + 1)?
                } else {
                    self.object_body(shape, depth + 1)?
                }
            }
            other => return Err(UbjsonError::UnknownMarker { offset, marker: other, expected: "value marker" }),
        })
    }

    /// A high-precision number: a length-prefixed string holding a JSON number.
    fn high_precision(&mut self) -> Result<Json, UbjsonError> {
        let n = self.length(1)?;
        let offset = self.pos;
        let text = self.take(n)?;
        let bad = || UbjsonError::BadNumber { offset, text: String::from_utf8_lossy(text).into_owned() };
        let text = std::str::from_utf8(text).map_err(|_| bad())?;
        match json::parse(text, 1) {
            Ok(Some(v @ (Json::Int(_) | Json::UInt(_) | Json::Float(_)))) => Ok(v),
            _ => Err(bad()),
        }
    }

    /// What follows a container's opening marker: `$` type and `#` count, `#` count, or neither.
    fn shape(&mut self) -> Result<Shape, UbjsonError> {
        match self.bytes.get(self.pos) {
            Some(b'$') => {
                self.pos += 1;
                let offset = self.pos;
                let ty = self.byte()?;
                if matches!(ty, b'N' | b']' | b'}' | b'#' | b'$') {
                    return Err(UbjsonError::UnknownMarker { offset, marker: ty, expected: "container type marker" });
                }
                let offset = self.pos;
                let hash = self.byte()?;
                if hash != b'#' {
                    return Err(UbjsonError::UnknownMarker {
                        offset,
                        marker: hash,
                        expected: "count marker (#) after a type",
                    });
                }
                // Elements of a zero-byte type (Z, T, F) take no input; the value budget bounds them.
                let min_size = usize::from(!matches!(ty, b'Z' | b'T' | b'F'));
                Ok(Shape::Typed(ty, self.length(min_size)?))
            }
            Some(b'#') => {
                self.pos += 1;
                Ok(Shape::Counted(self.length(1)?))
            }
            _ => Ok(Shape::Open),
        }
    }

    /// The marker of the next element of a container, or `None` at its end (consumed).
    fn next_marker(&mut self, shape: Shape, index: usize, end: u8) -> Result<Option<u8>, UbjsonError> {
        match shape {
            Shape::Open => {
                let m = self.marker_skipping_noop()?;
                Ok((m != end).then_some(m))
            }
            Shape::Counted(n) if index < n => self.marker_skipping_noop().map(Some),
            Shape::Counted(_) => Ok(None),
            Shape::Typed(ty, n) => Ok((index < n).then_some(ty)),
        }
    }

    fn array_body(&mut self, shape: Shape, depth: usize) -> Result<Json, UbjsonError> {
        let mut items = Vec::new();
        while let Some(marker) = self.next_marker(shape, items.len(), b']')? {
            items.push(self.value(marker, depth)?);
        }
        Ok(Json::Arr(items))
    }

    fn object_body(&mut self, shape: Shape, depth: usize) -> Result<Json, UbjsonError> {
        let mut members = Vec::new();
        loop {
            // A key has no marker of its own: its length's integer marker comes first.
            let key = match shape {
                Shape::Open => {
                    let m = self.marker_skipping_noop()?;
                    if m == b'}' {
                        break;
                    }
                    self.pos -= 1;
                    self.string()?
                }
                Shape::Counted(n) | Shape::Typed(_, n) if members.len() < n => self.string()?,
                Shape::Counted(_) | Shape::Typed(..) => break,
            };
            self.charge()?;
            let marker = match shape {
                Shape::Typed(ty, _) => ty,
                Shape::Open | Shape::Counted(_) => self.marker_skipping_noop()?,
            };
            members.push((key, self.value(marker, depth)?));
        }
        Ok(Json::Obj(members))
    }
}

fn write_value(out: &mut Vec<u8>, value: &Json, depth: usize) -> Result<(), UbjsonError> {
    match value {
        Json::Null => out.push(b'Z'),
        Json::Bool(b) => out.push(if *b { b'T' } else { b'F' }),
        Json::Int(v) => write_int(out, *v),
        Json::UInt(v) => match i64::try_from(*v) {
            Ok(v) => write_int(out, v),
            Err(_) => {
                // nlohmann: an unsigned integer above i64::MAX is a high-precision number.
                let digits = v.to_string();
                out.push(b'H');
                write_len(out, digits.len());
                out.extend_from_slice(digits.as_bytes());
            }
        },
        Json::Float(v) => {
            out.push(b'D');
            out.extend_from_slice(&v.to_be_bytes());
        }
        Json::Str(s) => {
            out.push(b'S');
            write_str(out, s);
        }
        Json::Arr(items) => {
            if depth >= MAX_DEPTH {
                return Err(UbjsonError::TooDeep { offset: 0, max: MAX_DEPTH });
            }
            out.push(b'[');
            for item in items {
                write_value(out, item, depth + 1)?;
            }
            out.push(b']');
        }
        Json::Obj(members) => {
            if depth >= MAX_DEPTH {
                return Err(UbjsonError::TooDeep { offset: 0, max: MAX_DEPTH });
            }
            out.push(b'{');
            for (key, item) in members {
                write_str(out, key);
                write_value(out, item, depth + 1)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

/// An integer with the smallest marker that holds it, in nlohmann's order (`i`, `U`, `I`, `l`,
/// `L`).
fn write_int(out: &mut Vec<u8>, v: i64) {
    if let Ok(v) = i8::try_from(v) {
        out.push(b'i');
        out.extend_from_slice(&v.to_be_bytes());
    } else if let Ok(v) = u8::try_from(v) {
        out.push(b'U');
        out.push(v);
    } else if let Ok(v) = i16::try_from(v) {
        out.push(b'I');
        out.extend_from_slice(&v.to_be_bytes());
    } else if let Ok(v) = i32::try_from(v) {
        out.push(b'l');
        out.extend_from_slice(&v.to_be_bytes());
    } else {
        out.push(b'L');
        out.extend_from_slice(&v.to_be_bytes());
    }
}

fn write_len(out: &mut Vec<u8>, len: usize) {
    // A length over i64::MAX cannot exist in memory; saturating keeps this total.
    write_int(out, i64::try_from(len).unwrap_or(i64::MAX));
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    write_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8]) -> Result<Json, UbjsonError> {
        from_ubjson(bytes)
    }

    #[test]
    fn scalars_read_and_write_as_nlohmann_does() {
        let cases: &[(Json, &[u8])] = &[
            (Json::Null, b"Z"),
            (Json::Bool(true), b"T"),
            (Json::Bool(false), b"F"),
            (Json::Int(0), b"i\x00"),
            (Json::Int(-128), b"i\x80"),
            (Json::Int(127), b"i\x7f"),
            (Json::Int(128), b"U\x80"),
            (Json::Int(255), b"U\xff"),
            (Json::Int(256), b"I\x01\x00"),
            (Json::Int(-129), b"I\xff\x7f"),
            (Json::Int(32768), b"l\x00\x00\x80\x00"),
            (Json::Int(1 << 31), b"L\x00\x00\x00\x00\x80\x00\x00\x00"),
            (Json::Int(i64::MIN), b"L\x80\x00\x00\x00\x00\x00\x00\x00"),
            (Json::UInt(u64::MAX), b"Hi\x1418446744073709551615"),
            (Json::Float(1.5), b"D\x3f\xf8\x00\x00\x00\x00\x00\x00"),
            (Json::str("ab"), b"Si\x02ab"),
        ];
        for (value, bytes) in cases {
            assert_eq!(to_ubjson(value).as_deref(), Ok(*bytes), "{value:?}");
            assert_eq!(read(bytes).as_ref(), Ok(value), "{bytes:?}");
        }
    }

    #[test]
    fn containers_in_every_form() {
        let want = Json::Arr(vec![Json::Int(1), Json::Int(2)]);
        assert_eq!(read(b"[i\x01i\x02]"), Ok(want.clone()));
        assert_eq!(read(b"[#i\x02i\x01i\x02"), Ok(want.clone()));
        assert_eq!(read(b"[$i#i\x02\x01\x02"), Ok(want.clone()));
        assert_eq!(read(b"N[Ni\x01Ni\x02N]"), Ok(want));
        let obj = Json::obj([("a", Json::Null), ("bc", Json::Bool(true))]);
        assert_eq!(to_ubjson(&obj).as_deref(), Ok(&b"{i\x01aZi\x02bcT}"[..]));
        assert_eq!(read(b"{i\x01aZi\x02bcT}"), Ok(obj.clone()));
        assert_eq!(read(b"{#i\x02i\x01aZi\x02bcT"), Ok(obj));
        let typed = Json::obj([("a", Json::Null), ("b", Json::Null)]);
        assert_eq!(read(b"{$Z#i\x02i\x01ai\x01b"), Ok(typed));
        assert_eq!(read(b"C\x41"), Ok(Json::str("A")));
        assert_eq!(read(b"d\x3f\xc0\x00\x00"), Ok(Json::Float(1.5)));
        assert_eq!(read(b"Hi\x032.5"), Ok(Json::Float(2.5)));
    }

    #[test]
    fn malformed_input_gives_typed_errors() {
        assert_eq!(read(b""), Err(UbjsonError::UnexpectedEnd { offset: 0 }));
        assert_eq!(read(b"Si\x05ab"), Err(UbjsonError::BadLength { offset: 1, len: 5 }));
        assert_eq!(read(b"Si\xffab"), Err(UbjsonError::BadLength { offset: 1, len: -1 }));
        assert!(matches!(read(b"X"), Err(UbjsonError::UnknownMarker { offset: 0, marker: b'X', .. })));
        assert!(matches!(read(b"]"), Err(UbjsonError::UnknownMarker { marker: b']', .. })));
        assert!(matches!(read(b"{Si\x01aZ}"), Err(UbjsonError::UnknownMarker { marker: b'S', .. })));
        assert_eq!(read(b"ZZ"), Err(UbjsonError::TrailingBytes { offset: 1, left: 1 }));
        assert_eq!(read(b"Si\x01\xff"), Err(UbjsonError::InvalidUtf8 { offset: 3 }));
        assert_eq!(read(b"C\x80"), Err(UbjsonError::InvalidUtf8 { offset: 0 }));
        assert!(matches!(read(b"Hi\x01x"), Err(UbjsonError::BadNumber { .. })));
        assert!(matches!(read(b"[$N#i\x01"), Err(UbjsonError::UnknownMarker { marker: b'N', .. })));
        assert!(matches!(read(b"[$i\x01"), Err(UbjsonError::UnknownMarker { marker: 0x01, .. })));
        assert_eq!(read(b"[#i\x05i\x01"), Err(UbjsonError::BadLength { offset: 2, len: 5 }));
    }

    #[test]
    fn nesting_and_value_counts_are_bounded() {
        let deep = vec![b'['; MAX_DEPTH + 1];
        assert_eq!(read(&deep), Err(UbjsonError::TooDeep { offset: MAX_DEPTH, max: MAX_DEPTH }));
        let mut ok = vec![b'['; MAX_DEPTH];
        ok.extend(vec![b']'; MAX_DEPTH]);
        let value = read(&ok).unwrap();
        assert_eq!(to_ubjson(&value), Ok(ok));
        let too_deep = Json::Arr(vec![value]);
        assert_eq!(to_ubjson(&too_deep), Err(UbjsonError::TooDeep { offset: 0, max: MAX_DEPTH }));
        // A billion nulls in nine bytes: refused by the value budget, not allocated.
        let nulls = b"[$Z#l\x40\x00\x00\x00";
        assert!(matches!(read(nulls), Err(UbjsonError::TooManyValues { .. })));
        let huge = vec![0; MAX_BYTES + 1];
        assert_eq!(read(&huge), Err(UbjsonError::TooLarge { len: MAX_BYTES + 1, max: MAX_BYTES }));
    }

    #[test]
    fn canonical_form_is_exact() {
        let mut bytes = b"[D".to_vec();
        bytes.extend_from_slice(&1.685_236_622_282_896_9e22_f64.to_bits().wrapping_add(1).to_be_bytes());
        bytes.extend_from_slice(b"D\x7f\xf8\x00\x00\x00\x00\x00\x01]");
        assert_eq!(canonical_ubjson(&bytes), Ok(bytes));
    }

    #[test]
    fn text_conversions() {
        assert_eq!(ubjson_to_json(b"[Si\x01x{}]").as_deref(), Ok("[\n  \"x\",\n  {}\n]"));
        assert_eq!(json_to_ubjson("[1.0, 300]").as_deref(), Ok(&b"[D\x3f\xf0\x00\x00\x00\x00\x00\x00I\x01\x2c]"[..]));
        assert!(matches!(json_to_ubjson("[1,"), Err(UbjsonError::Json(_))));
        // The deepest UBJSON read converts to text and back (serde_json's nesting limit is ours).
        let mut deep = vec![b'['; MAX_DEPTH];
        deep.extend(vec![b']'; MAX_DEPTH]);
        assert_eq!(json_to_ubjson(&ubjson_to_json(&deep).unwrap()), Ok(deep));
    }
}
