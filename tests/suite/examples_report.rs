//! The examples report what they did, and why they failed, in words: `bench_dynamic` without a
//! GPU ends with a readable error and exit status 1 (not a `Debug` dump of a driver error), and
//! `serialize_roundtrip`'s deviceless line reads as a sentence.
//!
//! The examples are run from where `cargo test` builds them (`target/<profile>/examples/`, as
//! CI's `cargo test --workspace` does); a run that selects only this test target has not built
//! them, and says so and skips.

use std::path::PathBuf;
use std::process::Command;

/// The built example `name`, if this `cargo test` built the examples.
fn example(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("examples").join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if path.exists() {
        Some(path)
    } else {
        println!("skipped: {} is not built (cargo build --examples, or cargo test --workspace)", path.display());
        None
    }
}

#[test]
fn bench_dynamic_without_a_gpu_says_why_and_exits_1() {
    let Some(bench) = example("bench_dynamic") else { return };
    // No GPU visible, whatever the machine: the online context cannot be made.
    let out = Command::new(&bench).env("CUDA_VISIBLE_DEVICES", "").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("bench_dynamic: no GPU to time on: "), "{stderr}");
    assert!(stderr.contains("pass --device-properties DEVPROP.json"), "{stderr}");
    assert!(!stderr.contains("Error: ") && !stderr.contains("DriverError(") && !stderr.contains(" { "), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let out = Command::new(&bench).args(["--shapes", "128,x"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim(), "bench_dynamic: --shapes takes lengths such as 128,512: `x` is not one");
}

#[cfg(feature = "cudnn")]
#[needs_cudnn]
#[test]
fn serialize_roundtrip_reports_the_plan_in_a_sentence() {
    let Some(example) = example("serialize_roundtrip") else { return };
    let out = Command::new(example).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(!stdout.contains("built built"), "{stdout}");
    let line = stdout.lines().find(|l| l.starts_with("deviceless H200 plan ")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.starts_with("deviceless H200 plan made in "), "{line}");
    assert!(line.contains(": built); payload "), "{line}");
}
