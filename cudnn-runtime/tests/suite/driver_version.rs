//! The CUDA driver's version (issue 35): a driver older than CUDA 12.0, or older than the CUDA
//! major version the loaded cuDNN was built for, is `CudnnError::DriverTooOld` naming both
//! versions when online work begins (`cuda_context`), never a panic or cuDNN's bare
//! `CUDNN_STATUS_NOT_INITIALIZED`; deviceless planning does not depend on the driver's version.
//!
//! The libcuda stand-in (`.ci/libcuda_stub.c`) reports the version `CUDNN_GRAPH_STUB_DRIVER_VERSION`
//! gives, so each case runs in a child process of this binary with that variable set. On a
//! machine whose libcuda is a real driver the variable does nothing, and the test says so and
//! checks nothing (the GPU machines run only the `gpu_*` tests).
#![cfg(feature = "cudnn")]

use cudnn_runtime::backend::cudarc::cudnn::sys as cudnn_sys;
use cudnn_runtime::backend::{cuda_context, probe_libraries, CudnnError, DriverProbe};
use cudnn_runtime::ops::PointwiseMode;
use cudnn_runtime::{DataType, GraphBuilder};

use crate::common;

/// What a child reporting the stand-in's own 13.0 most likely means.
const STALE: &str = "\n(a stand-in built before it read CUDNN_GRAPH_STUB_DRIVER_VERSION reports 13.0 whatever the \
                     variable says: rebuild it with `.ci/setup-cudnn.sh DIR`)";

/// The name the test harness gives `test` of this module, for `--exact`.
fn test_name(test: &str) -> String {
    match module_path!().split_once("::") {
        Some((_crate, module)) => format!("{module}::{test}"),
        None => test.to_string(),
    }
}

/// Runs the child half with the stand-in posing as driver `version`; returns its `CHILD:` line.
fn child_report(version: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["--exact", &test_name("child_with_posing_driver"), "--nocapture", "--test-threads", "1"])
        .env("CUDNN_GRAPH_STUB_DRIVER_VERSION", version)
        .env("CUDNN_GRAPH_CHILD_DRIVER", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let report = stdout.find("CHILD:").map(|i| stdout[i..].lines().next().unwrap_or_default().to_string());
    report.unwrap_or_else(|| panic!("no report from the child:\n{stdout}"))
}

/// Whether the libcuda on the path is the stand-in (which can pose as another driver).
fn stand_in() -> bool {
    match probe_libraries().driver {
        DriverProbe::StandIn { .. } => true,
        other => {
            println!("not the stand-in ({other:?}): a real driver cannot pose as another version");
            false
        }
    }
}

#[needs_cudnn]
#[test]
fn a_driver_older_than_loaded_cudnns_cuda_is_refused_by_version() {
    if std::env::var_os("CUDNN_GRAPH_CHILD_DRIVER").is_some() || common::deviceless().is_none() || !stand_in() {
        return;
    }
    // SAFETY: cuDNN loads (checked by `deviceless` above); the call takes no arguments.
    let cudnn_cuda = unsafe { cudnn_sys::cudnnGetCudartVersion() };
    let report = child_report("12040");
    println!("cuDNN built for CUDA {cudnn_cuda}; stand-in as CUDA 12.4: {report}");
    if cudnn_cuda >= 13000 {
        // The cu13 wheels (CI's 9.19 and 9.28.1).
        assert!(report.starts_with("CHILD: DriverTooOld 12040 13000 "), "{report}{STALE}");
        assert!(report.contains(&format!("CUDA {}.{}", cudnn_cuda / 1000, cudnn_cuda % 1000 / 10)), "{report}");
    } else {
        // A cu12 cuDNN runs on a 12.4 driver: the stand-in then fails as it does for 13.0.
        assert!(report.starts_with("CHILD: Driver "), "{report}");
    }
    assert!(report.ends_with("deviceless plan built"), "{report}");
}

#[needs_cudnn]
#[test]
fn a_driver_older_than_cuda_12_is_refused_by_version() {
    if std::env::var_os("CUDNN_GRAPH_CHILD_DRIVER").is_some() || common::deviceless().is_none() || !stand_in() {
        return;
    }
    let report = child_report("11080");
    println!("stand-in as CUDA 11.8: {report}");
    assert!(report.starts_with("CHILD: DriverTooOld 11080 12000 "), "{report}{STALE}");
    assert!(report.ends_with("deviceless plan built"), "{report}");
}

/// The child half of the tests above (does nothing on its own): `cuda_context(0)`'s error, then
/// a deviceless plan, on one line.
#[test]
fn child_with_posing_driver() {
    if std::env::var_os("CUDNN_GRAPH_CHILD_DRIVER").is_none() {
        return;
    }
    let online = match cuda_context(0) {
        Err(CudnnError::DriverTooOld { found, needs, by }) => format!("DriverTooOld {found} {needs} {by}"),
        Err(CudnnError::Driver { call, .. }) => format!("Driver {call}"),
        Err(e) => format!("other error: {e}"),
        Ok(_) => "a context".into(),
    };
    let Some(cudnn) = common::deviceless() else { panic!("no deviceless context in the child") };
    let mut b = GraphBuilder::new("driver_version");
    let x = b.input("x", DataType::F16, &[1, 64, 64]).unwrap();
    let w = b.input("w", DataType::F16, &[1, 64, 64]).unwrap();
    let y = b.matmul(x, w).unwrap();
    let y = b.pointwise(PointwiseMode::Relu, &[y.into()]).unwrap();
    b.output(y, "y", DataType::F16).unwrap();
    let graph = b.build().unwrap();
    common::plan(&cudnn, &graph);
    println!("CHILD: {online}; deviceless plan built");
}
