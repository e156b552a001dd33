//! Decides, once per build, whether the tests that need cuDNN or a GPU can run on this machine,
//! and writes the verdicts to `$OUT_DIR/verdicts.rs` for the attributes of `src/lib.rs`.
//!
//! - cuDNN: libcudnn (9.8 or newer: deviceless planning needs its device-properties descriptor)
//!   and libcuda (the driver, or CI's stand-in) can be opened, by the names
//!   `cudnn-runtime/src/cudnn/library.rs` tries. `CUDNN_GRAPH_REQUIRE_CUDNN=1` makes these tests
//!   run whatever is found, so a missing library fails them loudly (CI sets it).
//! - GPU: cuDNN as above and `/dev/nvidiactl` exists; `CUDNN_GRAPH_REQUIRE_GPU=1` makes these
//!   tests run whatever is found (`scripts/gpu-bundle` builds the GPU machine's binaries so).
//!
//! Installing cuDNN later is noticed: the verdicts are remade when `LD_LIBRARY_PATH`, one of its
//! folders, `/etc/ld.so.cache` or a `CUDNN_GRAPH_REQUIRE_*` variable changes.

use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
use std::path::{Path, PathBuf};

/// The oldest libcudnn the runtime drives (`MIN_CUDNN_VERSION` of `cudnn-runtime`).
const MIN_CUDNN_VERSION: usize = 90800;

fn main() {
    for var in ["LD_LIBRARY_PATH", "CUDNN_GRAPH_REQUIRE_CUDNN", "CUDNN_GRAPH_REQUIRE_GPU"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    // Cargo puts its own output folders (`target/<profile>/deps`, ...) on the library path of a
    // build script; they change at every build and say nothing about cuDNN.
    let target = out.ancestors().nth(4).map(Path::to_path_buf).unwrap_or_default();
    for dir in std::env::split_paths(&std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default()) {
        if dir.is_dir() && !(target.as_os_str().len() > 1 && dir.starts_with(&target)) {
            println!("cargo:rerun-if-changed={}", dir.display());
        }
    }
    // Where `ldconfig` records system-wide libraries (a package installing libcudnn updates it).
    // Only paths that exist: cargo reruns a build script every time for a missing one.
    if Path::new("/etc/ld.so.cache").exists() {
        println!("cargo:rerun-if-changed=/etc/ld.so.cache");
    }

    let required = |var: &str| std::env::var(var).is_ok_and(|v| v == "1");
    let libraries = libraries();
    let cudnn = match &libraries {
        _ if required("CUDNN_GRAPH_REQUIRE_CUDNN") => None,
        Ok(()) => None,
        Err(why) => Some(format!(
            "needs libcudnn and libcuda ({why} when this test was built): install cuDNN 9 \
             (`.ci/setup-cudnn.sh DIR`, or `pip install nvidia-cudnn-cu13==9.19.0.56` and a \
             driver), put their folders on LD_LIBRARY_PATH and rebuild"
        )),
    };
    let gpu = if required("CUDNN_GRAPH_REQUIRE_GPU") {
        None
    } else if !Path::new("/dev/nvidiactl").exists() {
        Some(
            "needs a GPU (no /dev/nvidiactl when this test was built); on a GPU machine build with \
              CUDNN_GRAPH_REQUIRE_GPU=1 (`scripts/gpu-bundle` does)"
                .to_string(),
        )
    } else {
        libraries.err().map(|why| format!("needs a GPU with libcudnn and libcuda ({why} when this test was built)"))
    };
    let verdicts = format!(
        "/// Why the tests that need cuDNN are ignored in this build; `None`: they run.\n\
         const CUDNN_MISSING: Option<&str> = {cudnn:?};\n\
         /// Why the tests that need a GPU are ignored in this build; `None`: they run.\n\
         const GPU_MISSING: Option<&str> = {gpu:?};\n"
    );
    if let Err(e) = std::fs::write(out.join("verdicts.rs"), verdicts) {
        // A build script has no caller to return an error to: cargo shows this and stops.
        eprintln!("writing {}: {e}", out.join("verdicts.rs").display());
        std::process::exit(1);
    }
}

/// Whether libcudnn (new enough) and libcuda open here, or what is missing.
fn libraries() -> Result<(), String> {
    let cudnn = open_any("cudnn", &["9"]).ok_or("libcudnn.so.9 cannot be opened")?;
    // SAFETY: `cudnnGetVersion` takes no arguments and returns the version as a `size_t`.
    let version = unsafe { cudnn.get::<unsafe extern "C" fn() -> usize>(b"cudnnGetVersion\0") }
        .map(|f| unsafe { f() })
        .map_err(|e| format!("libcudnn has no cudnnGetVersion: {e}"))?;
    if version < MIN_CUDNN_VERSION {
        return Err(format!("libcudnn is version {version}, older than {MIN_CUDNN_VERSION}"));
    }
    if open_any("cuda", &["1"]).or_else(|| open_any("nvcuda", &[])).is_none() {
        return Err("libcuda.so.1 cannot be opened".into());
    }
    Ok(())
}

/// Opens the first of `lib`'s file names that loads, in the order of
/// `cudnn-runtime/src/cudnn/library.rs` (and cudarc's loader).
fn open_any(lib: &str, sonames: &[&str]) -> Option<libloading::Library> {
    let plain = format!("{DLL_PREFIX}{lib}{DLL_SUFFIX}");
    let windows = sonames.iter().map(|v| format!("{DLL_PREFIX}{lib}64_{v}{DLL_SUFFIX}"));
    let versioned = sonames.iter().map(|v| format!("{DLL_PREFIX}{lib}{DLL_SUFFIX}.{v}"));
    std::iter::once(plain).chain(windows).chain(versioned).find_map(|name| {
        // SAFETY: loading a library runs its initialisers; the tests that this decides for load
        // the same library.
        unsafe { libloading::Library::new(&name) }.ok()
    })
}
