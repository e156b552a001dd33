//! Which cuDNN versions this crate drives: a declared range, checked when the library is loaded,
//! and a table of versions inside it known to crash or to compute wrongly for some graphs, each
//! with how it is routed (refused by name, or worked around).
//!
//! A version outside [`SUPPORTED`] is [`crate::backend::CudnnError::UnsupportedVersion`]; a
//! known-bad entry is looked up by [`known_bad`] for the condition it concerns, so the caller can
//! refuse with [`crate::backend::CudnnError::KnownBad`] (naming the version and why) before
//! cuDNN kills the process or returns a wrong result.

use std::ops::RangeInclusive;

use super::devprop::version_string;
use super::CudnnError;

/// The cuDNN versions this crate drives (`cudnnGetVersion()` encoding): 9.10.2, the oldest
/// PyTorch wheel's (cu12 builds), up to 9.28.1, the newest on PyPI when this was measured.
/// 9.8 brought the device-properties descriptor deviceless planning needs; 9.10.2 is the oldest
/// on which the deviceless suite was run (issue 35). Versions newer than the range are refused
/// until measured: a newer cuDNN has changed what it reads before (device properties, 9.27).
pub const SUPPORTED: RangeInclusive<usize> = 91002..=92801;

/// A condition under which a known-bad version misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Condition {
    /// Deviceless heuristics (mode A) for a matmul with one row (M = 1, the decode GEMMs of a
    /// transformer layer at T = 1).
    DevicelessSingleRowMatmul,
    /// On a GPU: an f16 matmul on engine 0 (cuDNN 9.14 computed one reading a sliced view with
    /// infinities, and left the second batch of one with a broadcast `B` unwritten).
    F16MatmulEngine0,
}

/// How a known-bad entry is routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Refused with a typed error naming the version and the reason.
    Refuse,
    /// Worked around as said.
    WorkAround(&'static str),
}

/// One known-bad entry: a version range, the condition, what breaks, and how it is routed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownBad {
    /// The versions concerned (`cudnnGetVersion()` encoding).
    pub versions: RangeInclusive<usize>,
    /// When it happens.
    pub condition: Condition,
    /// What breaks, as measured.
    pub what: &'static str,
    /// What this crate does about it.
    pub route: Route,
    /// A newer version measured not to have the fault.
    pub good_from: usize,
}

/// The known-bad table (issue 35, measured 2026-12-06/07 on the cu12/cu13 wheels and the H100's
/// system cuDNN).
///
/// The one-row matmul crash depends on the shape: deviceless for the H200, bf16 `[1, K] x [K, N]`
/// on 9.14.0 died for K = 2048, 3072, 4096, 8192 with N = 512 or 1024 and planned for K <= 1536
/// (N up to 8192) and for K = 2048, N = 64; 9.10.2 also died on the column-sum rewrite's matmuls.
/// No rule between those points is known, so every one-row matmul is refused on these versions.
pub const KNOWN_BAD: &[KnownBad] = &[
    KnownBad {
        versions: 91002..=91499,
        condition: Condition::DevicelessSingleRowMatmul,
        what: "deviceless heuristics for a one-row matmul divide by zero inside \
               libcudnn_engines_runtime_compiled (EngineHeuristics::finalize_internal): SIGFPE, a dead process",
        route: Route::Refuse,
        good_from: 91900,
    },
    KnownBad {
        versions: 91400..=91499,
        condition: Condition::F16MatmulEngine0,
        what: "f16 matmuls on engine 0 compute wrongly on the H100: `slice [1:3, 8:40, :]` then a \
               matmul gives infinities (gpu_slices_by_pointer_offset), and `[2, 64, 64] x [1, 64, 64]` \
               (B broadcast over the batch) leaves the second batch unwritten (gpu_view_outputs_are_packed_copies, \
               bisected by `cudnn-graph repro --all-candidates`: engines 4 and 7 are right); both pass on 9.19",
        route: Route::WorkAround("deselect engine 0 for every f16 matmul"),
        good_from: 91900,
    },
];

/// Whether `version` is one this crate drives: `Err((oldest, newest))` when it is not.
pub fn check_range(version: usize) -> Result<(), (usize, usize)> {
    if SUPPORTED.contains(&version) {
        Ok(())
    } else {
        Err((*SUPPORTED.start(), *SUPPORTED.end()))
    }
}

/// The known-bad entry for `condition` on `version`, if any.
pub fn known_bad(version: usize, condition: Condition) -> Option<&'static KnownBad> {
    KNOWN_BAD.iter().find(|k| k.condition == condition && k.versions.contains(&version))
}

/// [`CudnnError::KnownBad`] for `what` (`deviceless heuristics for node `mm``) when `version`
/// has a known-bad entry for `condition` routed [`Route::Refuse`]; `Ok` otherwise (a worked-around
/// entry is the caller's to apply).
pub fn refuse_known_bad(version: usize, condition: Condition, what: &str) -> Result<(), CudnnError> {
    match known_bad(version, condition) {
        Some(entry) if entry.route == Route::Refuse => {
            Err(CudnnError::KnownBad { version, what: what.to_string(), reason: reason(version, entry) })
        }
        _ => Ok(()),
    }
}

/// `entry`'s reason for `version`, as errors say it: `cuDNN 9.14.0 is known to ...`.
pub fn reason(version: usize, entry: &KnownBad) -> String {
    format!(
        "cuDNN {} is known to fail here ({}); cuDNN {} is measured not to",
        version_string(version),
        entry.what,
        version_string(entry.good_from)
    )
}

/// The oldest CUDA driver this crate starts on, as `cuDriverGetVersion()` reports it (`12000` is
/// CUDA 12.0). cudarc's driver bindings are built for CUDA 12.0 (its `cuda-12000` feature), so
/// every driver entry point they call (`cuEventElapsedTime`, not CUDA 12.8's `_v2`) is one that
/// every 12.x and 13.x driver exports.
pub const MIN_DRIVER_VERSION: i32 = 12000;

/// Whether a CUDA driver reporting `driver` (`cuDriverGetVersion()`, `12040` is CUDA 12.4) can
/// run this crate's work with a cuDNN built for `cudnn_cuda` (`cudnnGetCudartVersion()`, `13010`
/// for the cu13 wheels; `None` when no cuDNN is loaded). A driver runs what was built for its
/// own CUDA major version or an older one (CUDA's minor-version compatibility), so only majors
/// are compared with cuDNN's.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::backend::{support::check_driver, CudnnError};
/// assert!(check_driver(13000, Some(13010)).is_ok());
/// // A cu13 cuDNN on a CUDA 12.4 driver: cudnnCreate would fail with CUDNN_STATUS_NOT_INITIALIZED.
/// let e = check_driver(12040, Some(13010)).unwrap_err();
/// assert!(matches!(e, CudnnError::DriverTooOld { found: 12040, needs: 13000, .. }));
/// assert!(check_driver(12040, Some(12090)).is_ok());
/// ```
pub fn check_driver(driver: i32, cudnn_cuda: Option<usize>) -> Result<(), CudnnError> {
    if driver < MIN_DRIVER_VERSION {
        return Err(CudnnError::DriverTooOld {
            found: driver,
            needs: MIN_DRIVER_VERSION,
            by: "cudnn-graph (its CUDA driver bindings are CUDA 12.0's)".into(),
        });
    }
    let Some(cuda) = cudnn_cuda.and_then(|v| i32::try_from(v).ok()) else { return Ok(()) };
    if driver / 1000 < cuda / 1000 {
        return Err(CudnnError::DriverTooOld {
            found: driver,
            needs: cuda / 1000 * 1000,
            by: format!(
                "the loaded cuDNN (built for CUDA {}; a cuDNN built for CUDA {} is `nvidia-cudnn-cu{}`)",
                cuda_string(cuda),
                driver / 1000,
                driver / 1000
            ),
        });
    }
    Ok(())
}

/// A CUDA version as the driver and cuDNN encode it (`12040`), written `12.4`.
pub fn cuda_string(version: i32) -> String {
    format!("{}.{}", version / 1000, version % 1000 / 10)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::{has, Capability};

    /// Re-measures the capabilities table's measured operation row on the loaded cuDNN: the
    /// `SDPA_FWD` descriptor can be created exactly where the table says the version has the fused
    /// operation (absent from 9.10.2, present from 9.14.0; run deviceless against 9.10.2, 9.14.0,
    /// 9.19.0, 9.27.0 and 9.28.1 on 2026-12-07).
    #[needs_cudnn]
    #[test]
    fn the_fused_attention_operation_exists_exactly_where_the_table_says() {
        let version = super::super::library::require_cudnn().unwrap();
        let kind = cudarc::cudnn::sys::cudnnBackendDescriptorType_t::CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR;
        let made = super::super::descriptor::Descriptor::new(kind).is_ok();
        println!("cuDNN {}: SDPA_FWD {}", version_string(version), if made { "made" } else { "refused" });
        assert_eq!(made, has(version, Capability::FusedSdpaForward), "cuDNN {}", version_string(version));
    }

    #[test]
    fn the_range_holds_the_measured_versions_and_no_other() {
        for v in [91002, 91400, 91900, 92700, 92801] {
            assert_eq!(check_range(v), Ok(()), "{v}");
        }
        assert_eq!(check_range(90800), Err((91002, 92801)));
        assert_eq!(check_range(91001), Err((91002, 92801)));
        assert_eq!(check_range(92900), Err((91002, 92801)));
        assert_eq!(check_range(100000), Err((91002, 92801)));
    }

    #[test]
    fn drivers_older_than_cuda_12_are_refused_whatever_cudnn() {
        for cudnn in [None, Some(12090), Some(13010)] {
            let e = check_driver(11080, cudnn).unwrap_err();
            assert!(matches!(e, CudnnError::DriverTooOld { found: 11080, needs: 12000, .. }), "{e}");
            assert!(e.to_string().contains("11.8"), "{e}");
        }
        assert!(check_driver(12000, None).is_ok());
    }

    #[test]
    fn a_driver_older_than_cudnns_cuda_major_is_refused_naming_both() {
        let e = check_driver(12040, Some(13010)).unwrap_err();
        let CudnnError::DriverTooOld { found: 12040, needs: 13000, by } = &e else { panic!("{e:?}") };
        assert!(by.contains("CUDA 13.1") && by.contains("nvidia-cudnn-cu12"), "{by}");
        let text = e.to_string();
        assert!(text.contains("12.4") && text.contains("13.0"), "{text}");
        // Minor-version compatibility: a 13.0 driver runs a cuDNN built with CUDA 13.1, a 13.x
        // driver one built for 12.x.
        assert!(check_driver(13000, Some(13010)).is_ok());
        assert!(check_driver(13000, Some(12090)).is_ok());
        assert!(check_driver(12000, Some(12090)).is_ok());
    }

    #[test]
    fn cuda_versions_are_written_major_dot_minor() {
        assert_eq!(cuda_string(12040), "12.4");
        assert_eq!(cuda_string(13010), "13.1");
        assert_eq!(cuda_string(12000), "12.0");
    }

    #[test]
    fn the_decode_gemm_crash_is_refused_on_9_10_and_9_14_only() {
        for v in [91002, 91400] {
            let e = known_bad(v, Condition::DevicelessSingleRowMatmul).unwrap();
            assert_eq!(e.route, Route::Refuse);
        }
        for v in [91500, 91900, 92801] {
            assert_eq!(known_bad(v, Condition::DevicelessSingleRowMatmul), None, "{v}");
        }
    }

    #[test]
    fn the_wrong_sliced_matmul_is_worked_around_on_9_14_only() {
        assert!(matches!(known_bad(91400, Condition::F16MatmulEngine0).unwrap().route, Route::WorkAround(_)));
        assert_eq!(known_bad(91002, Condition::F16MatmulEngine0), None);
        assert_eq!(known_bad(91900, Condition::F16MatmulEngine0), None);
    }

    #[test]
    fn reasons_name_the_version_and_the_fix() {
        let e = known_bad(91400, Condition::DevicelessSingleRowMatmul).unwrap();
        let r = reason(91400, e);
        assert!(r.starts_with("cuDNN 9.14.0 is known to fail here (deviceless heuristics"), "{r}");
        assert!(r.ends_with("cuDNN 9.19.0 is measured not to"), "{r}");
    }

    #[test]
    fn a_refused_entry_is_a_typed_error_naming_the_version() {
        let what = "deviceless heuristics for node `wq`";
        match refuse_known_bad(91002, Condition::DevicelessSingleRowMatmul, what) {
            Err(e @ CudnnError::KnownBad { version: 91002, .. }) => {
                let m = e.to_string();
                assert!(m.starts_with("deviceless heuristics for node `wq`: cuDNN 9.10.2 is known to fail"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        assert!(refuse_known_bad(91900, Condition::DevicelessSingleRowMatmul, what).is_ok());
        // Worked around, not refused.
        assert!(refuse_known_bad(91400, Condition::F16MatmulEngine0, what).is_ok());
    }

    #[test]
    fn every_entry_lies_inside_the_range() {
        for k in KNOWN_BAD {
            assert!(SUPPORTED.contains(k.versions.start()), "{k:?}");
            assert!(SUPPORTED.contains(&k.good_from) && !k.versions.contains(&k.good_from), "{k:?}");
        }
    }
}
