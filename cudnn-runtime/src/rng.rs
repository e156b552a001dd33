//! A small deterministic random source (splitmix64) for inputs of tests, examples, benchmarks and
//! the autotuner's scratch buffers: the same values for the same seed on every platform and Rust
//! version, with no dependency. Not for cryptography.
//!
//! ```
//! # use cudnn_runtime as cudnn_graph;
//! use cudnn_graph::rng::SplitMix64;
//!
//! let mut rng = SplitMix64::new(7);
//! let x: Vec<f64> = (0..4).map(|_| rng.uniform(-1.0, 1.0)).collect();
//! assert!(x.iter().all(|v| (-1.0..1.0).contains(v)));
//! assert_eq!(SplitMix64::new(7).uniform(-1.0, 1.0), x[0]); // same seed, same values
//!
//! // Values bounded away from zero, for tests where a zero would hide a bug.
//! let y = SplitMix64::new(1).nonzero(0.25, 2.0);
//! assert!((0.25..2.0).contains(&y.abs()));
//! ```

/// splitmix64's finalizer: a bijective 64-bit hash (each output bit depends on every input bit),
/// for deterministic per-position randomness without a stream (attention dropout's keep mask).
pub const fn mix(z: u64) -> u64 {
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// splitmix64 (Steele, Lea and Flood 2014): a 64-bit state advanced by the golden-ratio gamma
/// and hashed, so consecutive seeds give unrelated streams.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A source seeded with `seed`.
    pub const fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.state)
    }

    /// A value in `[0, 1)` with 53 random bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A value in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// A value whose magnitude is in `[lo, hi)`, of either sign: never zero when `lo > 0`.
    pub fn nonzero(&mut self, lo: f64, hi: f64) -> f64 {
        let bits = self.next_u64();
        let magnitude = lo + (hi - lo) * ((bits >> 11) as f64 / (1u64 << 53) as f64);
        if bits & 1 == 0 {
            magnitude
        } else {
            -magnitude
        }
    }

    /// An index in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        // `n as u64` is exact on every supported target; the remainder is below `n`.
        (self.next_u64() % (n.max(1) as u64)) as usize
    }

    /// `n` values in `[lo, hi)`.
    pub fn uniform_vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    #[test]
    fn matches_the_reference_sequence() {
        // The first outputs of splitmix64 seeded with 1234567, from the reference C code.
        let mut rng = SplitMix64::new(1234567);
        let got: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
        assert_eq!(got, [6457827717110365317, 3203168211198807973, 9817491932198370423]);
    }

    #[test]
    fn ranges_hold() {
        let mut rng = SplitMix64::new(3);
        for _ in 0..10_000 {
            let u = rng.uniform(-2.0, 3.0);
            assert!((-2.0..3.0).contains(&u));
            let v = rng.nonzero(0.0625, 1.0);
            assert!((0.0625..1.0).contains(&v.abs()));
            assert!(rng.below(7) < 7);
        }
        assert_eq!(rng.below(0), 0);
    }

    #[test]
    fn both_signs_and_spread() {
        let mut rng = SplitMix64::new(11);
        let v: Vec<f64> = (0..1000).map(|_| rng.nonzero(0.5, 1.0)).collect();
        let negative = v.iter().filter(|x| **x < 0.0).count();
        assert!((400..600).contains(&negative), "{negative} negative of 1000");
        let mean = rng.uniform_vec(10_000, 0.0, 1.0).iter().sum::<f64>() / 10_000.0;
        assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
    }
}
