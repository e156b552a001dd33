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
    /// type would. Integers saturate, and so do the fp8 types (as cuDNN converts: see
    /// [`Fp8E4M3::from_f64`]); `bool` stores `x != 0`.
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

/// An 8-bit float with 4 exponent and 3 mantissa bits (OCP "E4M3FN", cuDNN's `FP8_E4M3`): no
/// infinities, one NaN per sign (`S.1111.111`), largest finite ±448, smallest subnormal 2⁻⁹.
///
/// Conversions from wider types round as cuDNN's kernels do (see [`Fp8E4M3::from_f64`]).
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::Fp8E4M3;
/// assert_eq!(Fp8E4M3::from_f64(1.0625).to_f64(), 1.0); // a tie: to the even code
/// assert_eq!(Fp8E4M3::from_f64(1e6).to_f64(), 448.0); // beyond the range: saturates
/// assert_eq!(Fp8E4M3::from_f64(f64::INFINITY), Fp8E4M3::MAX);
/// assert!(Fp8E4M3::from_f64(f64::NAN).to_f64().is_nan());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[repr(transparent)]
pub struct Fp8E4M3(pub u8);

/// An 8-bit float with 5 exponent and 2 mantissa bits (OCP "E5M2", cuDNN's `FP8_E5M2`): IEEE-like,
/// with infinities (`S.11111.00`) and NaNs (`S.11111.xx`, `xx` ≠ 0), largest finite ±57344,
/// smallest subnormal 2⁻¹⁶.
///
/// Conversions from wider types round as cuDNN's kernels do (see [`Fp8E5M2::from_f64`]): an
/// infinity is stored as ±57344, never as an infinity.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::Fp8E5M2;
/// assert_eq!(Fp8E5M2(0x7c).to_f64(), f64::INFINITY);
/// assert_eq!(Fp8E5M2::from_f64(f64::INFINITY), Fp8E5M2::MAX);
/// assert_eq!(Fp8E5M2::from_f64(0.875).to_f64(), 0.875);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[repr(transparent)]
pub struct Fp8E5M2(pub u8);

/// The layout of one 8-bit float format: a sign bit over `8 - 1 - man_bits` exponent bits and
/// `man_bits` mantissa bits, exponent bias `bias`; magnitudes above `max_code` are NaN (or, with
/// `inf_code`, that one code is infinity).
struct Fp8Format {
    man_bits: u32,
    bias: i32,
    /// The largest finite magnitude's code (sign bit clear).
    max_code: u8,
    /// The code of +infinity, for formats that have one.
    inf_code: Option<u8>,
}

const E4M3: Fp8Format = Fp8Format { man_bits: 3, bias: 7, max_code: 0x7e, inf_code: None };
const E5M2: Fp8Format = Fp8Format { man_bits: 2, bias: 15, max_code: 0x7b, inf_code: Some(0x7c) };

/// The NaN a conversion produces (PTX's canonical NaN of both formats: every bit but the sign).
const CANONICAL_NAN: u8 = 0x7f;

/// `2^k` for the small exponents the fp8 formats need, exactly.
fn pow2(k: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&k));
    f64::from_bits(((k + 1023) as u64) << 52)
}

impl Fp8Format {
    fn min_exponent(&self) -> i32 {
        1 - self.bias
    }

    /// The value of `code`, exactly.
    fn decode(&self, code: u8) -> f64 {
        let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
        let mag = code & 0x7f;
        if mag > self.max_code {
            return if Some(mag) == self.inf_code { sign * f64::INFINITY } else { f64::NAN };
        }
        let exp = i32::from(mag >> self.man_bits);
        let man = f64::from(mag & ((1 << self.man_bits) - 1));
        let m = self.man_bits as i32;
        if exp == 0 {
            sign * man * pow2(self.min_exponent() - m)
        } else {
            sign * (pow2(m) + man) * pow2(exp - self.bias - m)
        }
    }

    /// The code of `x` as PTX's `cvt.rn.satfinite` stores it: round to nearest, ties to the even
    /// code; a magnitude beyond the largest finite one (an infinity included) becomes the
    /// largest finite one of `x`'s sign; NaN becomes the canonical NaN; `-0.0` keeps its sign.
    fn encode(&self, x: f64) -> u8 {
        if x.is_nan() {
            return CANONICAL_NAN;
        }
        let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
        let a = x.abs();
        if a >= self.decode(self.max_code) {
            return sign | self.max_code;
        }
        // The binade of `a` (subnormals share the smallest normal one), and `a` in units of
        // that binade's spacing: dividing by a power of two is exact.
        let emin = self.min_exponent();
        let biased = ((a.to_bits() >> 52) & 0x7ff) as i32;
        let e = if biased == 0 { emin } else { (biased - 1023).max(emin) };
        let m = self.man_bits as i32;
        let units = (a / pow2(e - m)).round_ties_even();
        // Counting codes from the smallest binade: each binade above it adds 2^m codes; a
        // rounding up to 2^(m+1) units carries into the next binade's first code. Below the
        // largest finite value the sum stays at or below `max_code`.
        let code = (((e - emin) << m) as f64 + units) as u8;
        debug_assert!(code <= self.max_code);
        sign | code
    }
}

impl Fp8E4M3 {
    /// The largest finite value, 448.
    pub const MAX: Fp8E4M3 = Fp8E4M3(0x7e);

    /// The value, exactly (`S.1111.111` is NaN).
    pub fn to_f64(self) -> f64 {
        E4M3.decode(self.0)
    }

    /// The nearest value, as cuDNN's fp8 GEMM and attention epilogues convert (PTX
    /// `cvt.rn.satfinite.e4m3x2.f32`): round to nearest, ties to even; beyond ±448 (infinities
    /// included) saturate to ±448; NaN is NaN (`0x7f`). A kernel of pointwise ops alone does not
    /// saturate: on the H200 with cuDNN 9.19 (2026-12-05, `tests/gpu_suite/gpu_fp8.rs`,
    /// `tests/frontend/probe_cudnn.py`) a value rounding past 448 (from ±464) came out `0x7f`,
    /// NaN, whatever its sign, while the matmul's epilogue wrote `0x7e`. Scale values into range
    /// ([`scale_from_amax`](crate::fp8::scale_from_amax)) before a standalone conversion.
    pub fn from_f64(x: f64) -> Self {
        Fp8E4M3(E4M3.encode(x))
    }
}

impl Fp8E5M2 {
    /// The largest finite value, 57344.
    pub const MAX: Fp8E5M2 = Fp8E5M2(0x7b);

    /// The value, exactly (`S.11111.00` is ±infinity, `S.11111.xx` otherwise NaN).
    pub fn to_f64(self) -> f64 {
        E5M2.decode(self.0)
    }

    /// The nearest finite value, as cuDNN's fp8 GEMM and attention epilogues convert (PTX
    /// `cvt.rn.satfinite.e5m2x2.f32`): round to nearest, ties to even; beyond ±57344 (infinities
    /// included) saturate to ±57344; NaN is NaN (`0x7f`). A kernel of pointwise ops alone does
    /// not saturate (H200, cuDNN 9.19): from ±61440 it wrote ±infinity, and NaN for ±1e6 and
    /// beyond.
    pub fn from_f64(x: f64) -> Self {
        Fp8E5M2(E5M2.encode(x))
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

    /// The oracle the conversions are checked against: the nearest finite code by exhaustive
    /// search (ties to the even code), saturating beyond the largest finite value.
    fn nearest_by_search(format: &Fp8Format, x: f64) -> u8 {
        let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
        let a = x.abs().min(format.decode(format.max_code));
        let mut best = (0u8, f64::INFINITY);
        for code in 0..=format.max_code {
            let err = (format.decode(code) - a).abs();
            if err < best.1 || (err == best.1 && code % 2 == 0) {
                best = (code, err);
            }
        }
        sign | best.0
    }

    /// Every code's value from the format's definition, written independently of `decode`:
    /// `(-1)^s · 2^(E − bias) · (1 + M/2^m)`, subnormal `(-1)^s · 2^(1 − bias) · M/2^m`.
    fn by_definition(code: u8, exp_bits: u32, man_bits: u32) -> f64 {
        let s = if code >> 7 == 1 { -1.0 } else { 1.0 };
        let e = i32::from(code >> man_bits) & ((1 << exp_bits) - 1);
        let m = f64::from(code & ((1 << man_bits) - 1)) / f64::from(1u32 << man_bits);
        let bias = (1 << (exp_bits - 1)) - 1;
        if e == 0 {
            s * 2f64.powi(1 - bias) * m
        } else {
            s * 2f64.powi(e - bias) * (1.0 + m)
        }
    }

    #[test]
    fn e4m3_decodes_all_256_codes() {
        let mut finite = 0;
        for code in 0..=255u8 {
            let v = Fp8E4M3(code).to_f64();
            if code & 0x7f == 0x7f {
                assert!(v.is_nan(), "{code:#04x}");
                continue;
            }
            finite += 1;
            assert_eq!(v.to_bits(), by_definition(code, 4, 3).to_bits(), "{code:#04x}");
        }
        assert_eq!(finite, 254);
        assert_eq!(Fp8E4M3(0x7e).to_f64(), 448.0);
        assert_eq!(Fp8E4M3(0x08).to_f64(), 2f64.powi(-6));
        assert_eq!(Fp8E4M3(0x01).to_f64(), 2f64.powi(-9));
        assert_eq!(Fp8E4M3(0x38).to_f64(), 1.0);
        assert_eq!(Fp8E4M3(0x80).to_f64().to_bits(), (-0.0f64).to_bits());
    }

    #[test]
    fn e5m2_decodes_all_256_codes() {
        let mut finite = 0;
        for code in 0..=255u8 {
            let v = Fp8E5M2(code).to_f64();
            match code & 0x7f {
                0x7c => assert_eq!(v, if code & 0x80 == 0 { f64::INFINITY } else { f64::NEG_INFINITY }),
                0x7d..=0x7f => assert!(v.is_nan(), "{code:#04x}"),
                _ => {
                    finite += 1;
                    assert_eq!(v.to_bits(), by_definition(code, 5, 2).to_bits(), "{code:#04x}");
                }
            }
        }
        assert_eq!(finite, 248);
        assert_eq!(Fp8E5M2(0x7b).to_f64(), 57344.0);
        assert_eq!(Fp8E5M2(0x01).to_f64(), 2f64.powi(-16));
        assert_eq!(Fp8E5M2(0x3c).to_f64(), 1.0);
    }

    /// Every finite code encodes back to itself; every midpoint between neighbours goes to the
    /// even code, and just off it to the nearer one; all as the search oracle says.
    fn round_trip_and_ties(format: &Fp8Format, decode: fn(u8) -> f64, encode: fn(f64) -> u8) {
        for code in 0..=255u8 {
            let v = decode(code);
            if v.is_nan() {
                assert_eq!(encode(v), CANONICAL_NAN);
                continue;
            }
            let want = if v.is_infinite() { (code & 0x80) | format.max_code } else { code };
            assert_eq!(encode(v), want, "{code:#04x} = {v}");
        }
        for code in 0..format.max_code {
            let (lo, hi) = (decode(code), decode(code + 1));
            let mid = (lo + hi) / 2.0;
            let even = if code % 2 == 0 { code } else { code + 1 };
            for sign in [0u8, 0x80] {
                let s = if sign == 0 { 1.0 } else { -1.0 };
                assert_eq!(encode(s * mid), sign | even, "tie {lo}..{hi}");
                let below = s * (mid - (hi - lo) * 1e-6);
                let above = s * (mid + (hi - lo) * 1e-6);
                assert_eq!(encode(below), sign | code, "{below}");
                assert_eq!(encode(above), sign | (code + 1), "{above}");
                for x in [s * mid, below, above] {
                    assert_eq!(encode(x), nearest_by_search(format, x), "{x}");
                }
            }
        }
        let max = decode(format.max_code);
        for x in [max * 1.01, max * 2.0, 1e300, f64::INFINITY, f64::MAX] {
            assert_eq!(encode(x), format.max_code, "{x} saturates");
            assert_eq!(encode(-x), 0x80 | format.max_code, "-{x} saturates");
        }
        assert_eq!(encode(f64::NAN), CANONICAL_NAN);
        assert_eq!(encode(-f64::NAN), CANONICAL_NAN);
        assert_eq!(encode(-0.0), 0x80);
        assert_eq!(encode(f64::MIN_POSITIVE / 4.0), 0x00);
        // Below half the smallest subnormal: zero; above: the smallest subnormal.
        let tiny = decode(1);
        assert_eq!(encode(tiny * 0.5), 0x00);
        assert_eq!(encode(tiny * 0.51), 0x01);
        let mut rng = crate::rng::SplitMix64::new(20);
        for x in rng.uniform_vec(20_000, -1.2 * max, 1.2 * max) {
            let x = x * pow2((x.to_bits() % 24) as i32 - 20);
            assert_eq!(encode(x), nearest_by_search(format, x), "{x}");
        }
    }

    #[test]
    fn e4m3_rounds_to_nearest_even_and_saturates() {
        round_trip_and_ties(&E4M3, |c| Fp8E4M3(c).to_f64(), |x| Fp8E4M3::from_f64(x).0);
        assert_eq!(Fp8E4M3::from_f64(-1.0625).to_f64(), -1.0);
        assert_eq!(Fp8E4M3::from_f64(1.1875).to_f64(), 1.25);
        assert_eq!(Fp8E4M3::from_f64(464.0).to_f64(), 448.0);
    }

    #[test]
    fn e5m2_rounds_to_nearest_even_and_saturates() {
        round_trip_and_ties(&E5M2, |c| Fp8E5M2(c).to_f64(), |x| Fp8E5M2::from_f64(x).0);
        assert_eq!(Fp8E5M2::from_f64(61440.0).to_f64(), 57344.0);
        assert_eq!(Fp8E5M2::from_f64(f64::NEG_INFINITY).to_f64(), -57344.0);
    }

    #[test]
    fn integer_rounding_saturates() {
        assert_eq!(DataType::I8.round(300.0), 127.0);
        assert_eq!(DataType::U8.round(-3.0), 0.0);
        assert_eq!(DataType::I32.round(2.5), 2.0);
        assert_eq!(DataType::Bool.round(0.25), 1.0);
    }
}
