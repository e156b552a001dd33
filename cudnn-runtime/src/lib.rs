//! # cudnn-runtime
//!
//! The library behind `cudnn-graph`: the graph IR and builder API ([`ir`]), the op vocabulary with
//! one definition per op family ([`ops`]), the CPU reference engine ([`reference`](mod@reference)) and, with the
//! `cudnn` feature, the cuDNN backend-API layer ([`backend`]) and the engines over it ([`engines`]:
//! routing, autotuning, the plan cache).
//!
//! Without default features this crate needs neither cudarc nor a GPU: the `graph!` macro depends
//! on it that way to run the very same shape rules at expansion.

#![warn(missing_docs)]

// `#[needs_cudnn]` on the unit tests that plan deviceless: ignored, with the reason, where libcudnn
// or libcuda was missing when they were built (cudnn-graph-testkit).
#[cfg(test)]
#[macro_use]
extern crate cudnn_graph_testkit;

#[cfg(test)]
mod test_support;

pub mod array;
pub mod capabilities;
mod codec;
#[cfg(any(feature = "cudnn", test))]
mod cudnn;
pub mod dim;
pub mod dtype;
pub mod error;
pub mod fp8;
pub mod ir;
pub mod ops;
pub mod reference;
pub mod rng;
pub mod serialize;
pub mod serving;
pub mod shape_class;

#[cfg(feature = "cudnn")]
pub mod backend;
#[cfg(feature = "cudnn")]
pub mod engines;
#[cfg(feature = "cudnn")]
pub mod payload;

pub use dtype::{Bits, DataType, Element, Fp8E4M3, Fp8E5M2};
pub use error::{ArgError, Error, GraphError, Result};
pub use ir::{Context, Graph, GraphBuilder, Node, Operand, Tensor, TensorId};

/// 64-bit FNV-1a, the project's stable hash for fingerprints (the same in the macro and at run
/// time, on every platform and Rust version, unlike `std`'s hashers).
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    /// Mixes in bytes.
    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    /// Mixes in a string and a separator, so `("ab", "c")` and `("a", "bc")` differ.
    pub fn write_str(&mut self, s: &str) {
        self.write(s.as_bytes());
        self.write(&[0xff]);
    }
    /// The hash.
    pub fn finish(self) -> u64 {
        self.0
    }
}

/// Whole microseconds of `d`, the unit of every `elapsed_us` field of this crate's tracing
/// events (saturating; no duration a process sees comes near it).
pub(crate) fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
