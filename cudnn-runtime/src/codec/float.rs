//! Floats as IEEE bit patterns in hex, so that every value (negative zero, subnormals, infinities,
//! NaN payloads) survives a round trip bit for bit.
//!
//! Two encodings:
//! - **cudnn-frontend's `float`**: its JSON serializer writes every `float` (pointwise attributes,
//!   `float`/`half`/`bfloat16` by-value scalars) as the 32-bit pattern in 8 upper-case hex digits
//!   with no prefix: `0.1f` is `"3DCCCCCD"`. We write the same, so cudnn-frontend reads our files.
//! - **ours for `f64`**: `"0x"` and 16 lower-case hex digits, `0.5` is `"0x3fe0000000000000"`, used
//!   in the `cudnn_graph` extension where cudnn-frontend's fields cannot hold the exact value.
//!
//! Readers also take plain JSON numbers, for hand-written files.
//!
//! ```
//! # use cudnn_runtime as cudnn_graph;
//! use cudnn_graph::serialize::float;
//! assert_eq!(float::f32_to_hex(0.1), "3DCCCCCD");
//! assert_eq!(float::hex_to_f32("0x3dcccccd"), Some(0.1));
//! assert_eq!(float::f64_to_hex(0.5), "0x3fe0000000000000");
//! assert_eq!(float::hex_to_f64("0x3fe0000000000000"), Some(0.5));
//! ```

/// cudnn-frontend's encoding of an `f32`: 8 upper-case hex digits, no prefix.
pub fn f32_to_hex(x: f32) -> String {
    format!("{:08X}", x.to_bits())
}

/// Our encoding of an `f64`: `0x` and 16 lower-case hex digits.
pub fn f64_to_hex(x: f64) -> String {
    format!("0x{:016x}", x.to_bits())
}

/// Parses 1 to `max_digits` hex digits (either case), with an optional `0x`/`0X` prefix.
pub(crate) fn parse_hex(s: &str, max_digits: usize) -> Option<u64> {
    let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s);
    if digits.is_empty() || digits.len() > max_digits || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// Reads an `f32` bit pattern: up to 8 hex digits, with or without `0x` (cudnn-frontend reads it
/// with `std::hex`, which accepts both).
pub fn hex_to_f32(s: &str) -> Option<f32> {
    parse_hex(s, 8).and_then(|b| u32::try_from(b).ok()).map(f32::from_bits)
}

/// Reads an `f64` bit pattern: up to 16 hex digits, with or without `0x`.
pub fn hex_to_f64(s: &str) -> Option<f64> {
    parse_hex(s, 16).map(f64::from_bits)
}

/// Whether two floats have the same bits, or are both NaN (whose payloads a conversion through
/// another width may change).
pub(crate) fn same_f32(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Whether a decimal `f64` read back by a JSON parser that may be one or two units in the last place
/// off (serde_json's default float parsing is not correctly rounded) is the value `exact`.
pub(crate) fn near_f64(parsed: f64, exact: f64) -> bool {
    if parsed.to_bits() == exact.to_bits() {
        return true;
    }
    if !parsed.is_finite() || !exact.is_finite() || parsed.is_sign_negative() != exact.is_sign_negative() {
        return false;
    }
    parsed.to_bits().abs_diff(exact.to_bits()) <= 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_matches_cudnn_frontend() {
        assert_eq!(f32_to_hex(1.0), "3F800000");
        assert_eq!(f32_to_hex(-0.0), "80000000");
        assert_eq!(f32_to_hex(6.25), "40C80000");
        assert_eq!(f32_to_hex(f32::from_bits(1)), "00000001");
        for bits in [0u32, 1, 0x3dcc_cccd, 0x7f80_0000, 0xff80_0000, 0x7fc0_1234, 0x8000_0001, u32::MAX] {
            let x = f32::from_bits(bits);
            assert_eq!(hex_to_f32(&f32_to_hex(x)).map(f32::to_bits), Some(bits));
        }
        assert_eq!(hex_to_f32("3dcccccd"), Some(0.1));
        assert_eq!(hex_to_f32("0X3F800000"), Some(1.0));
        assert_eq!(hex_to_f32("1"), Some(f32::from_bits(1)));
    }

    #[test]
    fn f64_round_trips_every_class() {
        for x in [0.5, -0.0, 0.1, f64::MIN_POSITIVE / 3.0, f64::INFINITY, f64::from_bits(0x7ff8_0000_dead_beef)] {
            assert_eq!(hex_to_f64(&f64_to_hex(x)).map(f64::to_bits), Some(x.to_bits()));
        }
        assert_eq!(f64_to_hex(0.5), "0x3fe0000000000000");
    }

    #[test]
    fn rejects_malformed_hex() {
        for bad in ["", "0x", "0x123456789", "3F80000G", "-1", "+1", " 1", "0x-1", "３"] {
            assert_eq!(hex_to_f32(bad), None, "{bad:?}");
        }
        assert_eq!(hex_to_f64("0x12345678901234567"), None);
        assert_eq!(hex_to_f64("1.5"), None);
    }

    #[test]
    fn nearness() {
        assert!(near_f64(0.1, 0.1));
        assert!(near_f64(f64::from_bits(0.1f64.to_bits() + 1), 0.1));
        assert!(!near_f64(f64::from_bits(0.1f64.to_bits() + 3), 0.1));
        assert!(!near_f64(0.0, -0.0));
        assert!(near_f64(f64::NAN, f64::NAN));
        assert!(!near_f64(f64::NAN, f64::from_bits(f64::NAN.to_bits() + 1)));
        assert!(same_f32(f32::NAN, f32::from_bits(0x7fc0_0001)));
    }
}
