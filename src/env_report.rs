//! The environment report (`cudnn-graph env`): which libcudnn and libcuda this process actually
//! loads, other copies on the search path, driver, CUDA and cuDNN versions, GPUs, and the
//! variables that steer loading. It never crashes on a machine that lacks any of them: each part
//! it cannot find is reported as missing, with why.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// A shared library file found on disk.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct LibraryFile {
    /// The path as found.
    pub path: String,
    /// The file it resolves to, if it is a link.
    pub resolves_to: Option<String>,
    /// The version in the resolved file name (`libcudnn.so.9.19.0` → `9.19.0`), if any.
    pub file_version: Option<String>,
}

/// One library (cuDNN or the CUDA driver).
#[derive(Debug, Clone, Serialize)]
pub struct LibraryReport {
    /// `cudnn` or `cuda`.
    pub name: &'static str,
    /// The files this process mapped after loading it (from `/proc/self/maps`).
    pub loaded: Vec<String>,
    /// The version the library itself reports, if it loaded.
    pub version: Option<String>,
    /// Why it did not load, if it did not.
    pub error: Option<String>,
    /// A library that loaded but is not the real thing: a libcuda that lacks the driver's entry
    /// points (a stand-in such as CI's, enough for cuDNN's deviceless planning), with why.
    pub stand_in: Option<String>,
    /// Every copy on the library search path and in the usual places.
    pub copies: Vec<LibraryFile>,
}

/// A GPU as the driver reports it.
#[derive(Debug, Clone, Serialize)]
pub struct GpuReport {
    /// Ordinal.
    pub index: i32,
    /// Name.
    pub name: String,
    /// Compute capability, `9.0`.
    pub sm: String,
    /// Memory in bytes.
    pub memory_bytes: u64,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct EnvReport {
    /// This crate's version.
    pub crate_version: &'static str,
    /// The cuDNN version the bindings were generated for and the one CI pins.
    pub built_for_cudnn: &'static str,
    /// Whether the `cudnn` feature (the backend) is compiled in.
    pub backend_compiled: bool,
    /// libcudnn.
    pub cudnn: LibraryReport,
    /// libcuda.
    pub cuda: LibraryReport,
    /// The driver's CUDA version, `13.0`.
    pub driver_cuda_version: Option<String>,
    /// GPUs.
    pub gpus: Vec<GpuReport>,
    /// Variables that steer loading and device selection.
    pub environment: Vec<(String, String)>,
    /// Problems worth fixing, in plain words.
    pub warnings: Vec<String>,
}

const ENV_VARS: &[&str] = &[
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDNN_PATH",
    "CUDNN_LOGLEVEL_DBG",
    "CUDNN_LOGDEST_DBG",
    "CUDNN_GRAPH_REQUIRE_GPU",
    "CUDNN_GRAPH_REQUIRE_CUDNN",
];

const USUAL_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/local/cuda/lib64",
    "/usr/local/nvidia/lib64",
    "/usr/local/lib",
];

/// Directories searched for copies: `LD_LIBRARY_PATH`, then the usual system places, then the
/// `nvidia/*/lib` folders of Python environments found under `/opt` and `/usr/local/lib`.
fn search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var("LD_LIBRARY_PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect();
    dirs.extend(USUAL_DIRS.iter().map(PathBuf::from));
    for root in ["/opt", "/usr/local/lib", "/usr/lib"] {
        find_nvidia_lib_dirs(Path::new(root), 0, &mut dirs);
    }
    dirs
}

/// `.../site-packages/nvidia/<pkg>/lib`, a few levels deep at most.
fn find_nvidia_lib_dirs(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth > 6 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        // pip's layout: `<site-packages or --target dir>/nvidia/<package>/lib`.
        if p.file_name().is_some_and(|n| n == "nvidia") {
            if let Ok(pkgs) = std::fs::read_dir(&p) {
                out.extend(pkgs.flatten().map(|k| k.path().join("lib")).filter(|l| l.is_dir()));
            }
        } else {
            find_nvidia_lib_dirs(&p, depth + 1, out);
        }
    }
}

fn file_version(name: &str, stem: &str) -> Option<String> {
    let rest = name.strip_prefix(stem)?.strip_prefix('.')?;
    (!rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit() || c == '.')).then(|| rest.to_string())
}

/// The version in a `cudnn_version.h` beside a library folder (`../include`), as pip's wheels
/// ship it: their file names carry only the major version.
fn header_version(lib_dir: &Path) -> Option<String> {
    let header = std::fs::read_to_string(lib_dir.parent()?.join("include/cudnn_version.h")).ok()?;
    let field = |name: &str| -> Option<String> {
        header.lines().find_map(|l| {
            let rest = l.trim().strip_prefix("#define")?.trim().strip_prefix(name)?;
            let v = rest.trim();
            (!v.is_empty() && v.chars().all(|c| c.is_ascii_digit())).then(|| v.to_string())
        })
    };
    Some(format!("{}.{}.{}", field("CUDNN_MAJOR")?, field("CUDNN_MINOR")?, field("CUDNN_PATCHLEVEL")?))
}

/// Copies of `lib<name>.so*` (the main library only, not cuDNN's sub-libraries).
fn copies(name: &str, dirs: &[PathBuf]) -> Vec<LibraryFile> {
    let stem = format!("lib{name}.so");
    let mut found = BTreeSet::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        for e in entries.flatten() {
            let file = e.file_name().to_string_lossy().to_string();
            if file != stem && !file.starts_with(&format!("{stem}.")) {
                continue;
            }
            let path = e.path();
            let resolved = std::fs::canonicalize(&path).ok();
            let resolved_name = resolved.as_ref().and_then(|r| r.file_name()).map(|n| n.to_string_lossy().to_string());
            let version = resolved_name
                .as_deref()
                .and_then(|n| file_version(n, &stem))
                .or_else(|| file_version(&file, &stem))
                .filter(|v| v.matches('.').count() >= 2)
                .or_else(|| header_version(dir))
                .or_else(|| file_version(&file, &stem));
            found.insert(LibraryFile {
                path: path.to_string_lossy().to_string(),
                resolves_to: resolved.filter(|r| *r != path).map(|r| r.to_string_lossy().to_string()),
                file_version: version,
            });
        }
    }
    found.into_iter().collect()
}

/// Files of this process whose name starts with `lib<name>` (from `/proc/self/maps`).
fn mapped(name: &str) -> Vec<String> {
    let prefix = format!("lib{name}.so");
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let set: BTreeSet<String> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| Path::new(p).file_name().is_some_and(|f| f.to_string_lossy().starts_with(&prefix)))
        .map(str::to_string)
        .collect();
    set.into_iter().collect()
}

impl EnvReport {
    /// Gathers the report. Loading the libraries is part of it (that is what shows which files
    /// this process really gets).
    pub fn collect() -> EnvReport {
        let dirs = search_dirs();
        let mut cudnn = LibraryReport {
            name: "cudnn",
            loaded: vec![],
            version: None,
            error: None,
            stand_in: None,
            copies: copies("cudnn", &dirs),
        };
        let mut cuda = LibraryReport {
            name: "cuda",
            loaded: vec![],
            version: None,
            error: None,
            stand_in: None,
            copies: copies("cuda", &dirs),
        };
        let mut driver_cuda_version = None;
        let mut gpus = Vec::new();
        probe(&mut cudnn, &mut cuda, &mut driver_cuda_version, &mut gpus);
        cudnn.loaded = mapped("cudnn");
        cuda.loaded = mapped("cuda");
        let environment = ENV_VARS.iter().filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v))).collect();
        let mut report = EnvReport {
            crate_version: env!("CARGO_PKG_VERSION"),
            built_for_cudnn: "bindings: cudarc 0.19.10 (cuDNN 9.2x headers); CI and plan payloads: cuDNN 9.19.0",
            backend_compiled: cfg!(feature = "cudnn"),
            cudnn,
            cuda,
            driver_cuda_version,
            gpus,
            environment,
            warnings: Vec::new(),
        };
        report.warnings = report.diagnose();
        report
    }

    fn diagnose(&self) -> Vec<String> {
        let mut w = Vec::new();
        if !self.backend_compiled {
            w.push("built without the `cudnn` feature: only the CPU reference engine is available".into());
            return w;
        }
        let versions: BTreeSet<&str> = self
            .cudnn
            .copies
            .iter()
            .filter_map(|c| c.file_version.as_deref())
            .filter(|v| v.matches('.').count() >= 2)
            .collect();
        if versions.len() > 1 {
            let list: Vec<&str> = versions.iter().copied().collect();
            w.push(format!(
                "several cuDNN versions are visible ({}); the one loaded is {}. Serialized plans load only into the exact version that made them: put the folder of the one you want first on LD_LIBRARY_PATH, with a `libcudnn.so` link in it (cudarc tries the unversioned name first)",
                list.join(", "),
                self.cudnn.version.as_deref().unwrap_or("none")
            ));
        }
        if let Some(v) = &self.cudnn.version {
            if !v.starts_with("9.19.") {
                w.push(format!("the loaded cuDNN is {v}; CI and this project's plan payloads use 9.19.0"));
            }
        }
        if self.cudnn.error.is_some() {
            w.push("libcudnn could not be loaded: `pip install nvidia-cudnn-cu13==9.19.0.56` and put its nvidia/cudnn/lib on LD_LIBRARY_PATH (see .ci/setup-cudnn.sh)".into());
        }
        if self.cuda.error.is_some() {
            w.push(
                "libcuda could not be loaded: no NVIDIA driver is visible, so no GPU can be used. cuDNN loads \
                 libcuda.so.1 even to plan deviceless, so only the CPU reference engine is available until a \
                 driver, or a stand-in for deviceless planning (.ci/setup-cudnn.sh builds one), is on the \
                 loader's path"
                    .into(),
            );
        } else if self.cuda.stand_in.is_some() {
            w.push(
                "the libcuda loaded is a stand-in, not an NVIDIA driver: deviceless planning works, executing \
                 on a GPU does not"
                    .into(),
            );
        } else if self.gpus.is_empty() {
            w.push("the CUDA driver loaded but reports no GPU (CUDA_VISIBLE_DEVICES may hide them)".into());
        }
        w
    }

    /// The report as text, one screen.
    pub fn to_text(&self) -> String {
        let mut s = format!("cudnn-graph {} ({})\n", self.crate_version, self.built_for_cudnn);
        s += &format!(
            "backend compiled: {}\n",
            if self.backend_compiled { "yes" } else { "no (CPU reference engine only)" }
        );
        for lib in [&self.cudnn, &self.cuda] {
            s += &format!("\nlib{}:\n", lib.name);
            match (&lib.version, &lib.error, &lib.stand_in) {
                (Some(v), _, _) => s += &format!("  version   {v}\n"),
                (None, _, Some(why)) => s += &format!("  stand-in: {why}\n"),
                (None, Some(e), None) => s += &format!("  not loaded: {e}\n"),
                (None, None, None) => s += "  not loaded\n",
            }
            for l in &lib.loaded {
                s += &format!("  loaded    {l}\n");
            }
            for c in &lib.copies {
                let to = c.resolves_to.as_deref().map(|r| format!(" -> {r}")).unwrap_or_default();
                let v = c.file_version.as_deref().map(|v| format!(" [{v}]")).unwrap_or_default();
                s += &format!("  found     {}{to}{v}\n", c.path);
            }
        }
        s += &format!("\ndriver CUDA version: {}\n", self.driver_cuda_version.as_deref().unwrap_or("unknown"));
        for g in &self.gpus {
            s += &format!(
                "GPU {}: {} (sm {}), {:.1} GiB\n",
                g.index,
                g.name,
                g.sm,
                g.memory_bytes as f64 / (1u64 << 30) as f64
            );
        }
        if !self.environment.is_empty() {
            s += "\nenvironment:\n";
            for (k, v) in &self.environment {
                s += &format!("  {k}={v}\n");
            }
        }
        for warn in &self.warnings {
            s += &format!("\nwarning: {warn}\n");
        }
        s
    }
}

#[cfg(feature = "cudnn")]
fn probe(cudnn: &mut LibraryReport, cuda: &mut LibraryReport, driver: &mut Option<String>, gpus: &mut Vec<GpuReport>) {
    use cudnn_runtime::backend::{probe_libraries, DriverProbe};
    let probe = probe_libraries();
    match probe.cudnn_version {
        Some(v) => cudnn.version = Some(format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100)),
        None => cudnn.error = Some("no libcudnn.so / libcudnn.so.9 on the loader's path".into()),
    }
    match probe.driver {
        DriverProbe::Missing => cuda.error = Some("no libcuda.so / libcuda.so.1 on the loader's path".into()),
        DriverProbe::StandIn { lacks } => {
            cuda.stand_in = Some(format!("loaded, but not a CUDA driver (it lacks {})", lacks.join(", ")));
        }
        DriverProbe::Driver { cuda_version, initialized, gpus: found } => {
            if let Some(v) = cuda_version {
                *driver = Some(format!("{}.{}", v / 1000, (v % 1000) / 10));
                cuda.version = driver.clone();
            }
            if !initialized {
                cuda.error = Some("cuInit failed: no usable GPU".into());
            }
            gpus.extend(found.into_iter().map(|g| GpuReport {
                index: g.ordinal,
                name: g.name,
                sm: format!("{}.{}", g.compute_capability.0, g.compute_capability.1),
                memory_bytes: g.memory_bytes,
            }));
        }
    }
}

#[cfg(not(feature = "cudnn"))]
fn probe(cudnn: &mut LibraryReport, cuda: &mut LibraryReport, _: &mut Option<String>, _: &mut Vec<GpuReport>) {
    let why = "this build has no cuDNN backend (built without the `cudnn` feature)".to_string();
    cudnn.error = Some(why.clone());
    cuda.error = Some(why);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_file_names() {
        assert_eq!(file_version("libcudnn.so.9.19.0", "libcudnn.so").as_deref(), Some("9.19.0"));
        assert_eq!(file_version("libcudnn.so.9", "libcudnn.so").as_deref(), Some("9"));
        assert_eq!(file_version("libcudnn.so", "libcudnn.so"), None);
        assert_eq!(file_version("libcudnn.so.bak", "libcudnn.so"), None);
    }

    #[test]
    fn header_versions() {
        let dir = std::env::temp_dir().join(format!("cudnn-graph-env-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("include")).unwrap();
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::fs::write(
            dir.join("include/cudnn_version.h"),
            "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 19\n#define CUDNN_PATCHLEVEL 0\n#define CUDNN_VERSION (x)\n",
        )
        .unwrap();
        assert_eq!(header_version(&dir.join("lib")).as_deref(), Some("9.19.0"));
        std::fs::write(dir.join("lib/libcudnn.so.9"), b"").unwrap();
        let found = copies("cudnn", &[dir.join("lib")]);
        assert_eq!(found[0].file_version.as_deref(), Some("9.19.0"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn two_versions_warn() {
        let mut r = EnvReport::collect();
        r.backend_compiled = true;
        r.cudnn.copies = vec![
            LibraryFile { path: "/a/libcudnn.so.9".into(), resolves_to: None, file_version: Some("9.14.0".into()) },
            LibraryFile { path: "/b/libcudnn.so.9".into(), resolves_to: None, file_version: Some("9.19.0".into()) },
        ];
        r.cudnn.version = Some("9.14.0".into());
        let w = r.diagnose();
        assert!(w.iter().any(|w| w.contains("several cuDNN versions are visible (9.14.0, 9.19.0)")), "{w:?}");
        assert!(w.iter().any(|w| w.contains("the loaded cuDNN is 9.14.0")));
        let text = r.to_text();
        assert!(text.contains("libcudnn:"));
        assert!(serde_json::to_string(&r).unwrap().contains("\"warnings\""));
    }

    #[test]
    fn libcuda_states_say_one_thing_each() {
        let mut r = EnvReport::collect();
        r.backend_compiled = true;
        r.gpus.clear();
        r.cuda.version = None;

        r.cuda.error = Some("no libcuda.so / libcuda.so.1 on the loader's path".into());
        r.cuda.stand_in = None;
        let w = r.diagnose().join("\n");
        assert!(w.contains("libcuda could not be loaded") && w.contains("only the CPU reference engine"), "{w}");
        assert!(!w.contains("deviceless planning works"), "{w}");
        assert!(r.to_text().contains("  not loaded: no libcuda.so"));

        r.cuda.error = None;
        r.cuda.stand_in = Some("loaded, but not a CUDA driver (it lacks cuDeviceGetName)".into());
        let w = r.diagnose().join("\n");
        assert!(w.contains("is a stand-in") && w.contains("deviceless planning works"), "{w}");
        assert!(!w.contains("could not be loaded: no NVIDIA"), "{w}");
        let text = r.to_text();
        assert!(text.contains("  stand-in: loaded, but not a CUDA driver"), "{text}");
        assert!(!text.contains("not loaded: the libcuda"), "{text}");

        r.cuda.stand_in = None;
        let w = r.diagnose().join("\n");
        assert!(w.contains("reports no GPU") && !w.contains("stand-in"), "{w}");
    }
}
