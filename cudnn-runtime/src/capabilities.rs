//! Which cuDNN version brought which operation, attribute or behaviour that lowering uses only
//! where the loaded cuDNN has it: one table ([`CAPABILITIES`]), asked by name ([`has`],
//! [`require`]) instead of version numbers written at each rule.
//!
//! Lowering takes the newer path where the loaded version has the capability (the fused
//! `SDPA_FWD` operation for [`Implementation::Auto`](crate::ops::Implementation) attention, masks
//! that write `-inf`) and otherwise the older one, or refuses by the rule's name, saying which
//! version brings what is missing; the refusal carries it typed too, as the [`Missing`] of its
//! `SupportRule` error's `needs` (so a caller can tell "upgrade cuDNN" from "not on this GPU"
//! without reading the message). The table lives in the crate's ground layer because the
//! support rules that consult it (`ops::sdpa::support`) build without the `cudnn` feature.
//!
//! Sources: cudnn-frontend's `sdpa_support_surface.h` and its nodes' version checks, and
//! measurement. Measured deviceless (2026-12-07, `cudnnBackendCreateDescriptor` on the PyPI
//! wheels 9.10.2, 9.14.0, 9.19.0, 9.27.0, 9.28.1): `SDPA_FWD` is absent from 9.10.2 and present
//! from 9.14.0; `SDPA_BWD` and `MOE_GROUPED_MATMUL` are absent from 9.14.0 and present from 9.19.0;
//! `DIAGONAL_BAND_MASK` and `SOFTMAX` are absent from 9.19.0 and present from 9.27.0 (none of those
//! four is lowered to yet, so they have no row); every other operation lowering creates is in all
//! of them.
//!
//! ```
//! # use cudnn_runtime as cudnn_graph;
//! use cudnn_graph::capabilities::{has, require, Capability};
//! assert!(!has(91002, Capability::FusedSdpaForward));
//! assert!(has(91900, Capability::FusedSdpaForward));
//! let missing = require(91002, Capability::FusedSdpaForward).unwrap_err();
//! assert_eq!(missing.to_string(), "the fused SDPA_FWD operation needs cuDNN 9.13.1 or newer; loaded 9.10.2");
//! ```

use std::fmt;

/// A capability of cuDNN that lowering uses only where the loaded version has it. The table grows
/// with the lowering, so the enum is `non_exhaustive`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Capability {
    /// fp8 attention (forward and backward).
    Fp8Attention,
    /// Paged K/V caches (the `PAGED_CACHE_LOAD` operation).
    PagedCacheLoad,
    /// The packed (ragged) backward with grouped heads.
    RaggedGqaBackward,
    /// Packed queries over a paged cache.
    RaggedPagedAttention,
    /// Head dims above 128 with a paged cache.
    PagedHeadDimAbove128,
    /// Decoding (S_q = 1) with causal masking.
    DecodeCausal,
    /// Decoding (S_q = 1) with head dims above 128 on Blackwell.
    DecodeHeadDimAbove128Blackwell,
    /// Head dims above 128 on Ampere and Ada (sm 8.x).
    HeadDimAbove128Ampere,
    /// Head dims above 256 on Hopper (sm 9.x).
    HeadDimAbove256Hopper,
    /// Head dims above 128 on Blackwell (sm 10.x).
    HeadDimAbove128Blackwell,
    /// A bottom-right sliding window with S_q == S_kv on Hopper.
    BottomRightWindowSquareHopper,
    /// Attention's masks write `-inf` (before, the lowest finite `f32`), and the padding mask is
    /// applied once, before the statistics (before, again after them).
    NegativeInfinityMasks,
    /// A sliding window without causal masking, or with dropout or a bias.
    GeneralSlidingWindow,
    /// The fused `SDPA_FWD` operation.
    FusedSdpaForward,
    /// The sequence-length (padding) attributes of the fused `SDPA_FWD` operation.
    FusedSdpaSequenceLengths,
    /// The attention backward with S_kv not a multiple of 128 and no padding mask.
    BackwardAnySeqLenKv,
    /// The deterministic attention backward on Blackwell.
    DeterministicBackwardBlackwell,
    /// Packed (ragged) attention below Hopper (sm < 9.0).
    RaggedBelowHopper,
    /// fp8 attention with d_qk = 192, d_v = 128 on Blackwell.
    Fp8HeadDim192Blackwell,
}

/// One row of [`CAPABILITIES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapabilityRow {
    /// The capability.
    pub capability: Capability,
    /// The first cuDNN version that has it (`cudnnGetVersion()` encoding: `91301` is 9.13.1).
    pub since: usize,
    /// What it is, as messages say it (`the fused SDPA_FWD operation`).
    pub what: &'static str,
    /// Where the version comes from: cudnn-frontend's check, or a measurement.
    pub source: &'static str,
}

const FRONTEND: &str = "cudnn-frontend's sdpa_support_surface.h";

impl Capability {
    /// Every capability, in the order of [`CAPABILITIES`].
    pub const ALL: &'static [Capability] = &[
        Capability::Fp8Attention,
        Capability::PagedCacheLoad,
        Capability::RaggedGqaBackward,
        Capability::RaggedPagedAttention,
        Capability::PagedHeadDimAbove128,
        Capability::DecodeCausal,
        Capability::DecodeHeadDimAbove128Blackwell,
        Capability::HeadDimAbove128Ampere,
        Capability::HeadDimAbove256Hopper,
        Capability::HeadDimAbove128Blackwell,
        Capability::BottomRightWindowSquareHopper,
        Capability::NegativeInfinityMasks,
        Capability::GeneralSlidingWindow,
        Capability::FusedSdpaForward,
        Capability::FusedSdpaSequenceLengths,
        Capability::BackwardAnySeqLenKv,
        Capability::DeterministicBackwardBlackwell,
        Capability::RaggedBelowHopper,
        Capability::Fp8HeadDim192Blackwell,
    ];
}

/// `capability`'s row of the table: the version that brought it, what it is, where that comes
/// from.
pub const fn row(capability: Capability) -> CapabilityRow {
    let (since, what, source) = match capability {
        Capability::Fp8Attention => (90100, "fp8 attention", FRONTEND),
        Capability::PagedCacheLoad => {
            (90500, "a paged K/V cache (the PAGED_CACHE_LOAD operation)", "cudnn-frontend's paged_cache_load node")
        }
        Capability::RaggedGqaBackward => {
            (90600, "the packed backward with grouped heads", "cudnn-frontend's sdpa_backward node")
        }
        Capability::RaggedPagedAttention => (90700, "packed attention over a paged cache", FRONTEND),
        Capability::PagedHeadDimAbove128 => (91000, "a paged K/V cache with head dims above 128", FRONTEND),
        Capability::DecodeCausal => (91000, "decoding (S_q = 1) with causal masking", FRONTEND),
        Capability::DecodeHeadDimAbove128Blackwell => {
            (91000, "decoding (S_q = 1) with head dims above 128 on Blackwell", FRONTEND)
        }
        Capability::HeadDimAbove128Ampere => (91000, "a head dim above 128 on sm 8.x", FRONTEND),
        Capability::HeadDimAbove256Hopper => (91000, "a head dim above 256 on sm 9.x", FRONTEND),
        Capability::HeadDimAbove128Blackwell => (90900, "a head dim above 128 on sm 10.x", FRONTEND),
        Capability::BottomRightWindowSquareHopper => {
            (91000, "a bottom-right sliding window with S_q == S_kv on Hopper", FRONTEND)
        }
        Capability::NegativeInfinityMasks => (
            91000,
            "masking with -inf (the padding mask applied once)",
            "cudnn-frontend's scaled_dot_product_flash_attention node",
        ),
        Capability::GeneralSlidingWindow => {
            (91002, "a sliding window without causal masking, or with dropout or a bias", FRONTEND)
        }
        Capability::FusedSdpaForward => {
            (91301, "the fused SDPA_FWD operation", "cudnn-frontend; measured: absent from 9.10.2, present from 9.14.0")
        }
        Capability::FusedSdpaSequenceLengths => {
            (91500, "the fused SDPA_FWD operation's sequence lengths", "cudnn-frontend's sdpa_fwd node")
        }
        Capability::BackwardAnySeqLenKv => (
            91501,
            "the attention backward with S_kv % 128 != 0 and no padding mask",
            "cudnn-frontend's sdpa_backward node (which adds a hidden padding mask before)",
        ),
        Capability::DeterministicBackwardBlackwell => (91800, "the deterministic backward on Blackwell", FRONTEND),
        Capability::RaggedBelowHopper => (91801, "packed (ragged, THD) attention below Hopper (sm 9.0)", FRONTEND),
        Capability::Fp8HeadDim192Blackwell => {
            (91900, "fp8 attention with d_qk = 192, d_v = 128 on Blackwell", FRONTEND)
        }
    };
    CapabilityRow { capability, since, what, source }
}

/// The table: every capability with the version that brought it ([`row`] for each of
/// [`Capability::ALL`]). Rows below 9.10.2 (the oldest version the backend's support range admits)
/// are kept for the support rules' own users (`ops::sdpa::support::check` takes any target).
pub const CAPABILITIES: &[CapabilityRow] = &ROWS;

const ROWS: [CapabilityRow; Capability::ALL.len()] = {
    let mut rows = [row(Capability::Fp8Attention); Capability::ALL.len()];
    let mut i = 0;
    while i < rows.len() {
        rows[i] = row(Capability::ALL[i]);
        i += 1;
    }
    rows
};

/// Whether cuDNN `version` (`cudnnGetVersion()`) has `capability`.
pub fn has(version: usize, capability: Capability) -> bool {
    version >= row(capability).since
}

/// A capability the loaded cuDNN lacks: what it is, the version that brings it, the one loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Missing {
    /// The capability.
    pub capability: Capability,
    /// The first version that has it.
    pub since: usize,
    /// The loaded version.
    pub loaded: usize,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} needs cuDNN {} or newer; loaded {}",
            row(self.capability).what,
            version_string(self.since),
            version_string(self.loaded)
        )
    }
}

/// `Ok` when `version` has `capability`, else what is missing (its `Display` names the
/// capability, the version that brings it and the loaded one).
pub fn require(version: usize, capability: Capability) -> Result<(), Missing> {
    let since = row(capability).since;
    if version >= since {
        Ok(())
    } else {
        Err(Missing { capability, since, loaded: version })
    }
}

/// `cudnnGetVersion()`'s encoding (`92801`) as `9.28.1`.
pub fn version_string(version: usize) -> String {
    format!("{}.{}.{}", version / 10000, version / 100 % 100, version % 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_capability_is_listed_once() {
        for (i, r) in CAPABILITIES.iter().enumerate() {
            assert_eq!(CAPABILITIES.iter().filter(|o| o.capability == r.capability).count(), 1, "{:?}", r.capability);
            assert_eq!(r.capability, Capability::ALL[i]);
        }
        // Every variant is in `ALL`, in order: this match names them all (a new variant does not
        // compile here until it gets the next position, and then `ALL` must hold it there).
        let position = |c: Capability| match c {
            Capability::Fp8Attention => 0,
            Capability::PagedCacheLoad => 1,
            Capability::RaggedGqaBackward => 2,
            Capability::RaggedPagedAttention => 3,
            Capability::PagedHeadDimAbove128 => 4,
            Capability::DecodeCausal => 5,
            Capability::DecodeHeadDimAbove128Blackwell => 6,
            Capability::HeadDimAbove128Ampere => 7,
            Capability::HeadDimAbove256Hopper => 8,
            Capability::HeadDimAbove128Blackwell => 9,
            Capability::BottomRightWindowSquareHopper => 10,
            Capability::NegativeInfinityMasks => 11,
            Capability::GeneralSlidingWindow => 12,
            Capability::FusedSdpaForward => 13,
            Capability::FusedSdpaSequenceLengths => 14,
            Capability::BackwardAnySeqLenKv => 15,
            Capability::DeterministicBackwardBlackwell => 16,
            Capability::RaggedBelowHopper => 17,
            Capability::Fp8HeadDim192Blackwell => 18,
        };
        assert_eq!(Capability::ALL.len(), 19);
        for (i, &c) in Capability::ALL.iter().enumerate() {
            assert_eq!(position(c), i, "{c:?}");
        }
    }

    #[test]
    fn each_row_holds_from_its_version_on_and_not_before() {
        for r in CAPABILITIES {
            assert!(!has(r.since - 1, r.capability), "{:?}", r.capability);
            assert!(has(r.since, r.capability), "{:?}", r.capability);
            assert!(has(92801, r.capability), "{:?}: the newest supported version has every capability", r.capability);
            let missing = require(r.since - 1, r.capability).unwrap_err();
            assert_eq!(missing, Missing { capability: r.capability, since: r.since, loaded: r.since - 1 });
            let text = missing.to_string();
            assert!(text.starts_with(r.what) && text.contains(&version_string(r.since)), "{text}");
            assert_eq!(require(r.since, r.capability), Ok(()));
        }
    }

    #[test]
    fn versions_are_written_as_cudnn_writes_them() {
        assert_eq!(version_string(92801), "9.28.1");
        assert_eq!(version_string(91301), "9.13.1");
        assert_eq!(version_string(91002), "9.10.2");
    }
}
