//! Element types: the [`DataType`] tag every tensor carries, and the [`Element`] trait that ties a
//! Rust storage type to it (conversions to and from `f64` for the CPU reference engine).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A tensor element type, spelled as in the DSL (`bf16[1, M, K]`) and in cudnn-frontend's JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DataType {
    /// 32-bit IEEE float.
    #[serde(rename = "FLOAT")]
    F32,
    /// 64-bit IEEE float.
    #[serde(rename = "DOUBLE")]
    F64,
    /// 16-bit IEEE half.
    #[serde(rename = "HALF")]
    F16,
    /// bfloat16.
    #[serde(rename = "BFLOAT16")]
    BF16,
    /// Signed 8-bit integer.
    #[serde(rename = "INT8")]
    I8,
    /// Unsigned 8-bit integer.
    #[serde(rename = "UINT8")]
    U8,
    /// Signed 32-bit integer.
    #[serde(rename = "INT32")]
    I32,
    /// Signed 64-bit integer.
    #[serde(rename = "INT64")]
    I64,
    /// Boolean (one byte per element).
    #[serde(rename = "BOOLEAN")]
    Bool,
    /// 8-bit float, 4 exponent and 3 mantissa bits.
    #[serde(rename = "FP8_E4M3")]
    Fp8E4M3,
    /// 8-bit float, 5 exponent and 2 mantissa bits.
    #[serde(rename = "FP8_E5M2")]
    Fp8E5M2,
}

impl DataType {
    /// Every data type, in declaration order.
    pub const ALL: [DataType; 11] = [
        DataType::F32,
        DataType::F64,
        DataType::F16,
        DataType::BF16,
        DataType::I8,
        DataType::U8,
        DataType::I32,
        DataType::I64,
        DataType::Bool,
        DataType::Fp8E4M3,
        DataType::Fp8E5M2,
    ];

    /// The DSL spelling (`f32`, `bf16`, `fp8_e4m3`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DataType::F32 => "f32",
            DataType::F64 => "f64",
            DataType::F16 => "f16",
            DataType::BF16 => "bf16",
            DataType::I8 => "i8",
            DataType::U8 => "u8",
            DataType::I32 => "i32",
            DataType::I64 => "i64",
            DataType::Bool => "bool",
            DataType::Fp8E4M3 => "fp8_e4m3",
            DataType::Fp8E5M2 => "fp8_e5m2",
        }
    }

    /// Parses the DSL spelling.
    pub fn from_name(name: &str) -> Option<DataType> {
        DataType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bytes per element in device and host storage.
    pub const fn size_bytes(self) -> usize {
        match self {
            DataType::F64 | DataType::I64 => 8,
            DataType::F32 | DataType::I32 => 4,
            DataType::F16 | DataType::BF16 => 2,
            DataType::I8 | DataType::U8 | DataType::Bool | DataType::Fp8E4M3 | DataType::Fp8E5M2 => 1,
        }
    }

    /// Floating-point types (including the 8-bit ones).
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::F32 | DataType::F64 | DataType::F16 | DataType::BF16 | DataType::Fp8E4M3 | DataType::Fp8E5M2
        )
    }

    /// The value of cuDNN's `cudnnDataType_t` for this type (cudnn_graph.h, 9.x).
    pub const fn cudnn_value(self) -> u32 {
        match self {
            DataType::F32 => 0,
            DataType::F64 => 1,
            DataType::F16 => 2,
            DataType::I8 => 3,
            DataType::I32 => 4,
            DataType::U8 => 6,
            DataType::BF16 => 9,
            DataType::I64 => 10,
            DataType::Bool => 11,
            DataType::Fp8E4M3 => 12,
            DataType::Fp8E5M2 => 13,
        }
    }

    /// Rounds an `f64` to the nearest value this type can store, as storage in a tensor of this
    /// type would. Integers saturate; `bool` stores `x != 0`.
    pub fn round(self, x: f64) -> f64 {
        match self {
            DataType::F64 => x,
            DataType::F32 => x as f32 as f64,
            DataType::F16 => half::f16::from_f64(x).to_f64(),
            DataType::BF16 => half::bf16::from_f64(x).to_f64(),
            DataType::Fp8E4M3 => Fp8E4M3::from_f64(x).to_f64(),
            DataType::Fp8E5M2 => Fp8E5M2::from_f64(x).to_f64(),
            DataType::I8 => round_int(x, i8::MIN as f64, i8::MAX as f64),
            DataType::U8 => round_int(x, 0.0, u8::MAX as f64),
            DataType::I32 => round_int(x, i32::MIN as f64, i32::MAX as f64),
            DataType::I64 => round_int(x, i64::MIN as f64, i64::MAX as f64),
            DataType::Bool => f64::from(u8::from(x != 0.0)),
        }
    }
}

fn round_int(x: f64, lo: f64, hi: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.round_ties_even().clamp(lo, hi)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that stores elements of one [`DataType`].
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::{DataType, Element};
/// assert_eq!(<half::bf16 as Element>::DTYPE, DataType::BF16);
/// assert_eq!(half::bf16::from_f64_value(1.5).to_f64_value(), 1.5);
/// ```
pub trait Element: Copy + Send + Sync + 'static {
    /// The tag of this storage type.
    const DTYPE: DataType;
    /// The stored value, exactly, as `f64`.
    fn to_f64_value(self) -> f64;
    /// The nearest storable value (see [`DataType::round`]).
    fn from_f64_value(x: f64) -> Self;
}

macro_rules! element_via_as {
    ($($t:ty => $d:ident),*) => {$(
        impl Element for $t {
            const DTYPE: DataType = DataType::$d;
            fn to_f64_value(self) -> f64 { self as f64 }
            fn from_f64_value(x: f64) -> Self { DataType::$d.round(x) as $t }
        }
    )*};
}
element_via_as!(f32 => F32, f64 => F64, i8 => I8, u8 => U8, i32 => I32, i64 => I64);

impl Element for half::f16 {
    const DTYPE: DataType = DataType::F16;
    fn to_f64_value(self) -> f64 {
        self.to_f64()
    }
    fn from_f64_value(x: f64) -> Self {
        half::f16::from_f64(x)
    }
}

impl Element for half::bf16 {
    const DTYPE: DataType = DataType::BF16;
    fn to_f64_value(self) -> f64 {
        self.to_f64()
    }
    fn from_f64_value(x: f64) -> Self {
        half::bf16::from_f64(x)
    }
}

impl Element for bool {
    const DTYPE: DataType = DataType::Bool;
    fn to_f64_value(self) -> f64 {
        f64::from(u8::from(self))
    }
    fn from_f64_value(x: f64) -> Self {
        x != 0.0
    }
}

/// Eight booleans in one byte: how cuDNN stores a `bool` tensor in device memory (measured on the
/// H200 with cuDNN 9.19: a comparison over 2048 elements writes 256 bytes, and a select reads its
/// mask the same way). Element `8·k + j` is bit `j` of byte `k`, the lowest bit first. Device
/// buffers of `bool` graph inputs and outputs hold `Bits` ([`Bits::units_for`] of them); the host
/// side (the CPU reference, the `Inputs` and `Outputs` that `graph!` generates) keeps one `bool`
/// per element, and [`Bits::pack`] and [`Bits::unpack`] convert.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::Bits;
/// let mask = [true, false, true, true, false, false, false, false, true];
/// let bits = Bits::pack(&mask);
/// assert_eq!(bits, [Bits(0b0000_1101), Bits(0b0000_0001)]);
/// assert_eq!(Bits::unpack(&bits, mask.len()), mask);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct Bits(pub u8);

impl Bits {
    /// The `Bits` that hold `elements` booleans.
    pub const fn units_for(elements: usize) -> usize {
        elements.div_ceil(8)
    }

    /// Element `j` (0 to 7) of these eight.
    pub const fn get(self, j: usize) -> bool {
        self.0 >> j & 1 == 1
    }

    /// Packs booleans, element 0 in the lowest bit of the first byte; unused high bits are 0.
    pub fn pack(values: &[bool]) -> Vec<Bits> {
        values
            .chunks(8)
            .map(|c| Bits(c.iter().enumerate().fold(0u8, |byte, (j, &v)| byte | (u8::from(v) << j))))
            .collect()
    }

    /// The first `elements` booleans of `bits` (fewer if `bits` holds fewer).
    pub fn unpack(bits: &[Bits], elements: usize) -> Vec<bool> {
        bits.iter().flat_map(|b| (0..8).map(move |j| b.get(j))).take(elements).collect()
    }
}

/// An 8-bit float with 4 exponent and 3 mantissa bits (OCP "E4M3FN": no infinities, one NaN
/// pattern per sign, largest finite 448). Conversions round to nearest, ties to even, and saturate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[repr(transparent)]
pub struct Fp8E4M3(pub u8);

/// An 8-bit float with 5 exponent and 2 mantissa bits (IEEE-like, with infinities; largest finite
/// 57344). Conversions round to nearest, ties to even, and saturate to the largest finite value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[repr(transparent)]
pub struct Fp8E5M2(pub u8);

/// Decodes a small float with `e` exponent bits and `m` mantissa bits (sign bit on top).
fn decode_minifloat(bits: u8, e: u32, m: u32, has_inf: bool) -> f64 {
    let sign = if bits & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = u32::from(bits >> m) & ((1 << e) - 1);
    let man = u32::from(bits) & ((1 << m) - 1);
    let bias = (1i32 << (e - 1)) - 1;
    let max_exp = (1 << e) - 1;
    if exp == max_exp {
        if has_inf {
            return if man == 0 { sign * f64::INFINITY } else { f64::NAN };
        }
        if man == (1 << m) - 1 {
            return f64::NAN;
        }
    }
    if exp == 0 {
        sign * f64::from(man) * 2f64.powi(1 - bias - m as i32)
    } else {
        sign * (1.0 + f64::from(man) / f64::from(1u32 << m)) * 2f64.powi(exp as i32 - bias)
    }
}

/// Encodes by searching the 128 non-negative codes for the nearest value (ties to the even code).
/// Exhaustive search is exact by construction and fast enough for a reference engine.
fn encode_minifloat(x: f64, e: u32, m: u32, has_inf: bool, nan: u8) -> u8 {
    if x.is_nan() {
        return nan;
    }
    let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
    let a = x.abs();
    let mut best = 0u8;
    let mut best_err = f64::INFINITY;
    for code in 0u8..0x80 {
        let v = decode_minifloat(code, e, m, has_inf);
        if !v.is_finite() {
            continue;
        }
        let err = (v - a).abs();
        if err < best_err || (err == best_err && code % 2 == 0) {
            best = code;
            best_err = err;
        }
    }
    sign | best
}

impl Fp8E4M3 {
    /// The value, exactly.
    pub fn to_f64(self) -> f64 {
        decode_minifloat(self.0, 4, 3, false)
    }
    /// The nearest representable value, saturating at ±448.
    pub fn from_f64(x: f64) -> Self {
        Fp8E4M3(encode_minifloat(x, 4, 3, false, 0x7f))
    }
}

impl Fp8E5M2 {
    /// The value, exactly.
    pub fn to_f64(self) -> f64 {
        decode_minifloat(self.0, 5, 2, true)
    }
    /// The nearest finite value, saturating at ±57344.
    pub fn from_f64(x: f64) -> Self {
        Fp8E5M2(encode_minifloat(x, 5, 2, true, 0x7f))
    }
}

impl Element for Fp8E4M3 {
    const DTYPE: DataType = DataType::Fp8E4M3;
    fn to_f64_value(self) -> f64 {
        self.to_f64()
    }
    fn from_f64_value(x: f64) -> Self {
        Fp8E4M3::from_f64(x)
    }
}

impl Element for Fp8E5M2 {
    const DTYPE: DataType = DataType::Fp8E5M2;
    fn to_f64_value(self) -> f64 {
        self.to_f64()
    }
    fn from_f64_value(x: f64) -> Self {
        Fp8E5M2::from_f64(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DataType::ALL {
            assert_eq!(DataType::from_name(d.name()), Some(d));
        }
        assert_eq!(DataType::from_name("float"), None);
    }

    #[test]
    fn fp8_e4m3_known_values() {
        assert_eq!(Fp8E4M3(0x7e).to_f64(), 448.0);
        assert!(Fp8E4M3(0x7f).to_f64().is_nan());
        assert_eq!(Fp8E4M3(0x08).to_f64(), 2f64.powi(-6));
        assert_eq!(Fp8E4M3(0x01).to_f64(), 2f64.powi(-9));
        assert_eq!(Fp8E4M3::from_f64(1000.0).to_f64(), 448.0);
        assert_eq!(Fp8E4M3::from_f64(-1.0625).to_f64(), -1.0);
        assert_eq!(Fp8E4M3::from_f64(1.1875).to_f64(), 1.25);
        for code in 0u8..=255 {
            let v = Fp8E4M3(code).to_f64();
            if v.is_finite() && v != 0.0 {
                assert_eq!(Fp8E4M3::from_f64(v).0, code, "code {code:#x}");
            }
        }
    }

    #[test]
    fn fp8_e5m2_known_values() {
        assert_eq!(Fp8E5M2(0x7b).to_f64(), 57344.0);
        assert_eq!(Fp8E5M2(0x7c).to_f64(), f64::INFINITY);
        assert_eq!(Fp8E5M2::from_f64(1e9).to_f64(), 57344.0);
        assert_eq!(Fp8E5M2::from_f64(0.75).to_f64(), 0.75);
    }

    #[test]
    fn integer_rounding_saturates() {
        assert_eq!(DataType::I8.round(300.0), 127.0);
        assert_eq!(DataType::U8.round(-3.0), 0.0);
        assert_eq!(DataType::I32.round(2.5), 2.0);
        assert_eq!(DataType::Bool.round(0.25), 1.0);
    }
}
