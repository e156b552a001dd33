//! The `cudnn-graph` command: `env` never fails, `aot` compiles a structural JSON graph into a
//! payload deviceless (when libcudnn loads), `convert` turns cudnn-frontend's payloads into ours
//! and back, `picture --parts` draws a graph's plan with its parts, and each reports bad input
//! plainly.

use std::process::Command;

#[cfg(feature = "cudnn")]
use crate::padded;

fn cli() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cudnn-graph"))
}

#[test]
fn env_reports_without_crashing() {
    let out = cli().arg("env").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("libcudnn:") && text.contains("libcuda:"), "{text}");
    let out = cli().args(["env", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["warnings"].is_array() && v["cudnn"]["copies"].is_array());
}

#[test]
fn usage_and_bad_input() {
    let out = cli().output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = cli().args(["aot", "--graph"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing --device-properties"));
    let out = cli().args(["devprop", "--device", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--device takes a GPU ordinal (0, 1, ...), found `x`"));
}

#[cfg(feature = "cudnn")]
#[needs_cudnn]
#[test]
fn aot_compiles_a_structural_graph() {
    use cudnn_graph::{DataType, GraphBuilder};
    let dir = std::env::temp_dir().join(format!("cudnn-graph-aot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut g = GraphBuilder::new("mm");
    let a = g.input("a", DataType::F16, &[1, 64, 32]).unwrap();
    let b = g.input("b", DataType::F16, &[1, 32, 16]).unwrap();
    let c = g.matmul(a, b).unwrap();
    g.output(c, "c", DataType::F16).unwrap();
    let graph = g.build().unwrap();
    std::fs::write(dir.join("g.json"), cudnn_graph::serialize::structure_to_json(&graph)).unwrap();
    let devprop = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/h200-devprop.json");
    let out = cli()
        .args(["aot", "--device-properties", devprop, "--graph"])
        .arg(dir.join("g.json"))
        .arg("--out")
        .arg(dir.join("p.json"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("could not be loaded") {
        assert!(std::env::var("CUDNN_GRAPH_REQUIRE_CUDNN").as_deref() != Ok("1"), "{stderr}");
        println!("skipped: {stderr}");
        return;
    }
    assert!(out.status.success(), "{stderr}");
    let payload = cudnn_graph::payload::plan::parse_payload(&std::fs::read(dir.join("p.json")).unwrap()).unwrap();
    assert_eq!(payload.structure.as_ref(), Some(&graph));
    assert_eq!(payload.plan.sm, Some(90));

    // Two chained matmuls, no name: two parts, each listed; the payload holds both.
    let mut g = GraphBuilder::new("");
    let a = g.input("a", DataType::F16, &[1, 64, 32]).unwrap();
    let b = g.input("b", DataType::F16, &[1, 32, 32]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let d = g.matmul(c, b).unwrap();
    g.output(d, "d", DataType::F16).unwrap();
    std::fs::write(dir.join("g2.json"), cudnn_graph::serialize::structure_to_json(&g.build().unwrap())).unwrap();
    let out = cli()
        .args(["aot", "--device-properties", devprop, "--graph"])
        .arg(dir.join("g2.json"))
        .arg("--out")
        .arg(dir.join("p2.json"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    println!("{stdout}");
    assert!(stdout.starts_with("(unnamed graph): 2 parts in "), "{stdout}");
    assert!(
        stdout.contains("  part 1: matmul_1: ") && stdout.contains("cut: `matmul_0` (matmul) | `matmul_1`"),
        "{stdout}"
    );
    let payload = cudnn_graph::payload::plan::parse_payload(&std::fs::read(dir.join("p2.json")).unwrap()).unwrap();
    assert_eq!(payload.plan.parts.len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(feature = "cudnn")]
#[needs_cudnn]
#[test]
fn convert_between_frontend_and_our_payloads() {
    let out = cli().args(["convert", "--help"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--to frontend|ours"));
    let out = cli().args(["convert", "--to", "ours"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing --in"), "{out:?}");

    let dir = std::env::temp_dir().join(format!("cudnn-graph-convert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let devprop = format!("{root}/tests/fixtures/h200-devprop.json");
    let convert = |to: &str, input: &std::path::Path, output: &std::path::Path| {
        cli()
            .args(["convert", "--to", to, "--device-properties", &devprop, "--in"])
            .arg(input)
            .arg("--out")
            .arg(output)
            .output()
            .unwrap()
    };
    let theirs = std::path::PathBuf::from(format!("{root}/tests/fixtures/frontend/matmul.ubjson"));
    let out = convert("ours", &theirs, &dir.join("ours.json"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("could not be loaded") {
        assert!(std::env::var("CUDNN_GRAPH_REQUIRE_CUDNN").as_deref() != Ok("1"), "{stderr}");
        println!("skipped: {stderr}");
        return;
    }
    assert!(out.status.success(), "{stderr}");
    let ours = cudnn_graph::payload::plan::parse_payload(&std::fs::read(dir.join("ours.json")).unwrap()).unwrap();
    let out = convert("frontend", &dir.join("ours.json"), &dir.join("back.ubjson"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let back = cudnn_graph::payload::frontend::parse_frontend_payload(&std::fs::read(dir.join("back.ubjson")).unwrap())
        .unwrap();
    assert_eq!(back.structure.as_ref(), ours.structure.as_ref());
    // A cudnn-frontend payload is not ours, and the reverse: typed errors, exit status 1.
    let out = convert("frontend", &theirs, &dir.join("x"));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a cudnn-graph plan payload"));
    let out = convert("ours", &dir.join("ours.json"), &dir.join("x"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a cudnn-frontend plan payload"), "{out:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(feature = "cudnn")]
#[needs_cudnn]
#[test]
fn convert_takes_the_graph_of_a_plan_only_payload() {
    // --help says what is read and what refused, as the code does: pointer replacements and
    // workspace regions are read.
    let out = cli().args(["convert", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--graph GRAPH.json"), "{help}");
    assert!(help.contains("read and written:\npointer replacements"), "{help}");
    assert!(!help.contains("(workspace modifications, pointer replacements"), "{help}");

    let dir = std::env::temp_dir().join(format!("cudnn-graph-convert-plan-only-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let devprop = format!("{root}/tests/fixtures/h200-devprop.json");
    let convert = |to: &str, input: &std::path::Path, output: &str, extra: &[&std::ffi::OsStr]| {
        cli()
            .args(["convert", "--to", to, "--device-properties", &devprop, "--in"])
            .arg(input)
            .arg("--out")
            .arg(dir.join(output))
            .args(extra)
            .output()
            .unwrap()
    };
    // A slice bound by pointer offset: cudnn-frontend's payload of it has a pointer replacement.
    let ours = std::path::PathBuf::from(format!("{root}/fuzz/corpus/payload/slice_matmul.json"));
    let graph = cudnn_graph::payload::plan::parse_payload(&std::fs::read(&ours).unwrap()).unwrap().structure.unwrap();
    let graph_path = dir.join("graph.json");
    std::fs::write(&graph_path, cudnn_graph::serialize::structure_to_json(&graph)).unwrap();
    let out = convert("frontend", &ours, "theirs.ubjson", &["--plan-only".as_ref()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("could not be loaded") {
        assert!(std::env::var("CUDNN_GRAPH_REQUIRE_CUDNN").as_deref() != Ok("1"), "{stderr}");
        println!("skipped: {stderr}");
        return;
    }
    assert!(out.status.success(), "{stderr}");
    let theirs = dir.join("theirs.ubjson");
    let parsed = cudnn_graph::payload::frontend::parse_frontend_payload(&std::fs::read(&theirs).unwrap()).unwrap();
    assert!(parsed.structure.is_none());
    assert_eq!(parsed.replacements.len(), 1, "the slice is a pointer replacement");

    // Plan-only, each way: without the graph a typed error that says how to give it (exit 1);
    // with --graph, converted, the structure written from the graph given.
    let our_plan_only = dir.join("ours_plan_only.json");
    let out = convert("frontend", &ours, "ours_plan_only.json", &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = cli()
        .args(["convert", "--to", "ours", "--device-properties", &devprop, "--plan-only", "--in"])
        .arg(&theirs)
        .arg("--out")
        .arg(&our_plan_only)
        .args(["--graph".as_ref(), graph_path.as_os_str()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for (to, input) in [("ours", &theirs), ("frontend", &our_plan_only)] {
        let out = convert(to, input, "x", &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{to}: {stderr}");
        assert!(stderr.contains("has no structure") && stderr.contains("pass it with --graph GRAPH.json"), "{stderr}");
        let out = convert(to, input, "converted", &["--graph".as_ref(), graph_path.as_os_str()]);
        assert!(out.status.success(), "{to}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let back =
        cudnn_graph::payload::frontend::parse_frontend_payload(&std::fs::read(dir.join("converted")).unwrap()).unwrap();
    assert_eq!(back.structure.as_ref(), Some(&graph));
    assert_eq!(back.replacements, parsed.replacements);
    // Another graph is refused: the plan was made for this one.
    let other = std::fs::read(format!("{root}/fuzz/corpus/payload/matmul_bias_relu.json")).unwrap();
    let other = cudnn_graph::payload::plan::parse_payload(&other).unwrap().structure.unwrap();
    let other_path = dir.join("other.json");
    std::fs::write(&other_path, cudnn_graph::serialize::structure_to_json(&other)).unwrap();
    let out = convert("ours", &theirs, "x", &["--graph".as_ref(), other_path.as_os_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("theirs.ubjson: ") && !stderr.contains("--graph"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(feature = "cudnn")]
#[needs_cudnn]
#[test]
fn picture_draws_the_parts_of_a_plan() {
    use cudnn_graph::{Context, DataType, GraphBuilder};
    let out = cli().args(["picture", "--help"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--parts"));
    let dir = std::env::temp_dir().join(format!("cudnn-graph-picture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Two matmuls: two parts, h (f16 [1, 64, 128]) between them in the arena.
    let mut g = GraphBuilder::new("two_matmuls");
    g.context(Context { intermediate_data_type: DataType::F16, ..Context::default() });
    let x = g.input("x", DataType::F16, &[1, 64, 32]).unwrap();
    let w1 = g.input("w1", DataType::F16, &[1, 32, 128]).unwrap();
    let w2 = g.input("w2", DataType::F16, &[1, 128, 32]).unwrap();
    let h = g.matmul(x, w1).unwrap();
    let y = g.matmul(h, w2).unwrap();
    g.output(y, "y", DataType::F16).unwrap();
    let graph = g.build().unwrap();
    let json = dir.join("g.json");
    std::fs::write(&json, cudnn_graph::serialize::structure_to_json(&graph)).unwrap();
    // Without --parts: the graph's own picture, as before.
    let out = cli().arg("picture").arg(&json).output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), graph.to_dot());
    // --parts needs a device to plan for.
    let out = cli().args(["picture", "--parts"]).arg(&json).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing --device-properties"), "{out:?}");
    let devprop = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/h200-devprop.json");
    let parts = |mermaid: bool| {
        let mut c = cli();
        // The options before the path: their values are not taken for it.
        c.args(["picture", "--parts", "--device-properties", devprop]).arg(&json);
        if mermaid {
            c.arg("--mermaid");
        }
        c.output().unwrap()
    };
    let out = parts(false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("could not be loaded") {
        assert!(std::env::var("CUDNN_GRAPH_REQUIRE_CUDNN").as_deref() != Ok("1"), "{stderr}");
        println!("skipped: {stderr}");
        return;
    }
    assert!(out.status.success(), "{stderr}");
    let dot = String::from_utf8_lossy(&out.stdout);
    assert_eq!(dot.matches("subgraph cluster_").count(), 2, "{dot}");
    assert!(dot.contains("both are anchor ops") && dot.contains("arena +0, 16384 B"), "{dot}");
    let out = parts(true);
    assert!(out.status.success());
    let chart = String::from_utf8_lossy(&out.stdout);
    assert_eq!(chart.matches("\n  subgraph part").count(), 2, "{chart}");
    assert_eq!(chart.matches("\n  end\n").count(), 2, "{chart}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(feature = "cudnn")]
cudnn_graph::graph! {
    /// A service's graph: sequence lengths in power-of-two classes.
    pub Served<dyn S: 64..=512 pow2>(a: bf16[1, S, 64], b: bf16[1, 64, 128], bias: bf16[1, 1, 128]) -> (y: bf16[1, S, 128]) {
        y = relu(add(matmul(a, b), bias));
    }
}

/// Runs `aot --dyn` on `graph`'s structural JSON (written to `dir/g.json`) with `extra` flags.
#[cfg(feature = "cudnn")]
fn aot_classes(dir: &std::path::Path, graph: &cudnn_graph::Graph, extra: &[&str]) -> std::process::Output {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("g.json"), cudnn_graph::serialize::structure_to_json(graph)).unwrap();
    let devprop = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/h200-devprop.json");
    cli().args(["aot", "--device-properties", devprop, "--graph"]).arg(dir.join("g.json")).args(extra).output().unwrap()
}

/// What a successful `aot` printed; `None` (the test skips) where libcudnn does not load and
/// `CUDNN_GRAPH_REQUIRE_CUDNN` is not set.
#[cfg(feature = "cudnn")]
fn aot_output(out: &std::process::Output) -> Option<String> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("could not be loaded") {
        assert!(std::env::var("CUDNN_GRAPH_REQUIRE_CUDNN").as_deref() != Ok("1"), "{stderr}");
        println!("skipped: {stderr}");
        return None;
    }
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}");
    Some(stdout)
}

/// Asserts that `aot --dyn` of `graph` with `extra` exits 1 saying `expected`.
#[cfg(feature = "cudnn")]
fn assert_refused(dir: &std::path::Path, graph: &cudnn_graph::Graph, extra: &[&str], expected: &str) {
    let out_dir = dir.join("out");
    let out = aot_classes(dir, graph, &[&["--out", out_dir.to_str().unwrap()][..], extra].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{extra:?}: {stderr}");
    assert!(stderr.contains(expected), "{extra:?}: `{expected}` not in: {stderr}");
    assert!(!out_dir.exists(), "nothing is written for refused input");
}

#[cfg(feature = "cudnn")]
#[needs_cudnn]
#[test]
fn aot_plans_every_class_and_a_service_starts_with_them_all() {
    use cudnn_graph::backend::{BuildOptions, Cudnn};
    use cudnn_graph::engines::{CacheSource, PlanCache};
    use cudnn_graph::payload::plan::Expect;
    let out = cli().args(["aot", "--help"]).output().unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("--dyn"));
    let dir = std::env::temp_dir().join(format!("cudnn-graph-aot-classes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The graph at S = 128, as the service's type writes it; the classes as it declares them.
    let template = Served::new(128).graph().unwrap();
    let typed = dir.join("typed");
    let fingerprint = format!("Served={:#018x}", Served::FINGERPRINT);
    let dyn_s = "S: 64..=512 pow2 @ a[1]";
    let out = aot_classes(&dir, &template, &["--out", typed.to_str().unwrap(), "--dyn", dyn_s, "--type", &fingerprint]);
    let Some(stdout) = aot_output(&out) else { return };
    for s in [64, 128, 256, 512] {
        assert!(stdout.contains(&format!("S = {s}: ")), "{stdout}");
    }
    assert!(stdout.contains("Served: 4 class plans in "), "{stdout}");
    assert_eq!(std::fs::read_dir(&typed).unwrap().count(), 4, "one payload per class, no temporaries");

    // The service: seeded from the directory, its type finds every class plan, nothing built.
    let cudnn = Cudnn::deviceless(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/h200-devprop.json")).unwrap(),
    )
    .unwrap();
    let cache = PlanCache::in_memory();
    assert_eq!(cache.seed_from_dir(&typed).unwrap().seeded, 4);
    for v in Served::class_values().unwrap() {
        let (plan, outcome) = v.build_cached(&cache, &cudnn, &BuildOptions::default()).unwrap();
        assert_eq!(outcome.source, CacheSource::Memory, "S = {}", v.S);
        assert_eq!(plan.plan().graph(), &v.graph().unwrap());
    }
    assert_eq!(cache.stats().builds, 0);
    // Through the cache directory itself, and the serialized type and binding load by payload.
    let on_disk = PlanCache::with_dir(&typed).unwrap();
    let (_, outcome) = Served::new(256).build_cached(&on_disk, &cudnn, &BuildOptions::default()).unwrap();
    assert_eq!(outcome.source, CacheSource::Disk);

    for v in Served::class_values().unwrap() {
        let (plan, _) = v.build_cached(&on_disk, &cudnn, &BuildOptions::default()).unwrap();
        assert!(!plan.plan().is_dynamic_shape(), "each class specialized");
    }

    // Without --type: plans for the bare graphs, as `get_or_build` looks them up; with
    // --dynamic-shapes, dynamic-shape plans whose kernels compiled once.
    let bare = dir.join("bare");
    let flags = ["--out", bare.to_str().unwrap(), "--dyn", dyn_s, "--plan-only", "--dynamic-shapes"];
    let out = aot_classes(&dir, &template, &flags);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).matches(": dynamic-shape, ").count(), 4);
    let cache = PlanCache::with_dir(&bare).unwrap();
    for s in [64, 512] {
        let g = Served::new(s).graph().unwrap();
        let got = cache.get_or_build(&cudnn, &g, &Expect::default(), &BuildOptions::default()).unwrap();
        assert_eq!(got.source, CacheSource::Disk, "S = {s}");
        assert!(got.plan.is_dynamic_shape(), "S = {s}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(feature = "cudnn")]
#[needs_cudnn]
#[test]
fn aot_padded_class_plans_serve_a_plan_cache_with_no_planning() {
    use cudnn_graph::backend::{BackendError, BuildOptions, Cudnn};
    use cudnn_graph::engines::{CacheSource, PlanCache};
    use cudnn_graph::ir::ClassGraph;
    use cudnn_graph::payload::plan::Expect;
    use padded::Causal;
    let dir = std::env::temp_dir().join(format!("cudnn-graph-aot-padded-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out_dir = dir.join("out");
    let template = Causal::<64>::new(64).graph().unwrap();
    let flags = ["--out", out_dir.to_str().unwrap(), "--dyn", "S: 1..=1024 pow2 @ q[2] k[2] v[2]", "--padded"];
    let out = aot_classes(&dir, &template, &flags);
    let Some(stdout) = aot_output(&out) else { return };
    // 1, 2, 4, ..., 1024 as the type declares them: eleven class bounds, each its masked graph's plan.
    assert_eq!(stdout.matches(": padded, ").count(), 11, "{stdout}");

    // The service: every class's masked graph is in the cache, so no plan is built.
    let devprop = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/h200-devprop.json");
    let cudnn = Cudnn::deviceless(&std::fs::read_to_string(devprop).unwrap()).unwrap();
    let cache = PlanCache::with_dir(&out_dir).unwrap();
    let options = BuildOptions::default();
    for v in Causal::<64>::class_values().unwrap() {
        let class = ClassGraph::new(&v.graph().unwrap()).unwrap();
        let got = cache.get_or_build(&cudnn, class.masked(), &Expect::default(), &options).unwrap();
        assert_eq!(got.source, CacheSource::Disk, "S = {}", v.S);
        assert_eq!(got.plan.graph(), class.masked(), "S = {}", v.S);
        // `padded_plan` takes the same entry; its buffers need the GPU this machine may lack.
        let e = cache.padded_plan(&cudnn, class.class(), &Expect::default(), &options).unwrap_err();
        assert!(matches!(e, cudnn_graph::Error::Backend(BackendError::NotOnline { .. })), "{e:?}");
    }
    assert_eq!(cache.stats().builds, 0);

    // Refused: without --dyn, with --dynamic-shapes, and a graph that cannot be padded.
    std::fs::remove_dir_all(&out_dir).unwrap();
    let refused = |graph: &cudnn_graph::Graph, extra: &[&str], expected: &str| {
        assert_refused(&dir, graph, extra, expected);
    };
    refused(&template, &["--padded"], "--padded plans padded class bounds: it needs --dyn");
    let both = ["--dyn", "S: 1..=256 pow2 @ q[2] k[2] v[2]", "--padded", "--dynamic-shapes"];
    refused(&template, &both, "--padded and --dynamic-shapes");
    let served = Served::new(128).graph().unwrap();
    refused(
        &served,
        &["--dyn", "S: 64..=512 pow2 @ a[1]", "--padded"],
        "--padded: graph `Served` cannot be padded: node",
    );
    assert!(!dir.join("no").exists(), "nothing is written for refused input");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(feature = "cudnn")]
#[needs_cudnn]
#[test]
fn aot_classes_refuse_bad_input_naming_the_cause() {
    use cudnn_graph::{DataType, GraphBuilder};
    let dir = std::env::temp_dir().join(format!("cudnn-graph-aot-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let template = Served::new(128).graph().unwrap();
    let refused = |graph: &cudnn_graph::Graph, extra: &[&str], expected: &str| {
        assert_refused(&dir, graph, extra, expected);
    };
    let cases: [(&[&str], &str); 13] = [
        (&["--dyn", "S: 64..=512 pow2"], "--dyn `S: 64..=512 pow2`: name its dims after `@`"),
        (&["--dyn", "S 64..=512 @ a[1]"], "no `:` after the dim's name"),
        (&["--dyn", "1S: 64..=512 @ a[1]"], "`1S` is not a dim name"),
        (&["--dyn", "S: 512..=64 pow2 @ a[1]"], "--dyn `S`: the range 512..=64 is empty"),
        (&["--dyn", "S: 64..=512 pow3 @ a[1]"], "unknown classes `pow3`"),
        (&["--dyn", "S: 64..=512 @"], "--dyn `S`: no dims after `@`"),
        (&["--dyn", "S: 64..=512 @ x[1]"], "`x[1]`: `x` is not an input of the graph (its inputs: a, b, bias)"),
        (&["--dyn", "S: 64..=512 @ a[3]"], "`a[3]`: `a` has 3 dims, axes 0 to 2"),
        (&["--dyn", "S: 64..=512 @ a.1"], "`a.1` is not a dim: write `tensor[axis]`"),
        (
            &["--dyn", "S: 64..=512 @ a[1] b[1]"],
            "`a[1]` is 128 but `b[1]` is 64: the dims of one dyn dim have one value",
        ),
        (&["--dyn", "S: 64..=512 @ a[1]", "--dyn", "T: [64] @ a[1]"], "`a[1]` is named by --dyn `S` and `T`"),
        (&["--dyn", "S: 1..=100000 @ a[1]"], "the classes make more than 4096 plans (S has 100000)"),
        (
            &["--dyn", "S: 64..=512 pow2 @ a[1]", "--type", "Served=xyz"],
            "--type `Served=xyz`: `xyz` is not a 64-bit hex fingerprint",
        ),
    ];
    for (extra, expected) in cases {
        refused(&template, extra, expected);
    }
    refused(&template, &["--type", "Served=0x1"], "--type names the graph! type of class plans: it needs --dyn");
    refused(&template, &["--dyn", "S: [64] @ a[1]", "--dyn", "S: [64] @ b[1]"], "--dyn `S` is given twice");
    // A graph its ops do not give back: an input with a uid of its own.
    let mut g = GraphBuilder::new("own_uids");
    let a = g.input("a", DataType::F16, &[1, 128, 32]).unwrap();
    g.set_uid(a, 77).unwrap();
    let b = g.input("b", DataType::F16, &[1, 32, 16]).unwrap();
    let c = g.matmul(a, b).unwrap();
    g.output(c, "c", DataType::F16).unwrap();
    refused(
        &g.build().unwrap(),
        &["--dyn", "S: 64..=512 pow2 @ a[1]"],
        "cannot be derived at other values of its dyn dims: tensor `a`: its uid is 77, applying the ops again gives",
    );
    // --out must be a directory.
    std::fs::write(dir.join("file"), b"x").unwrap();
    let out = aot_classes(&dir, &template, &["--out", dir.join("file").to_str().unwrap(), "--dyn", "S: [64] @ a[1]"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("with --dyn, --out is a directory"), "{out:?}");
    assert!(!dir.join("out").exists(), "nothing is written for refused input");
    std::fs::remove_dir_all(&dir).unwrap();
}

cudnn_graph::graph! {
    /// A paged decode step served in capacity classes (issue 33): the batch padded to 8, 16, 32
    /// or 64 rows, the page table 8 or 24 pages wide (512 or 1536 tokens of pages of 64), over
    /// one pool of 1536 pages.
    pub ServedPagedDecode<dyn B: 8..=64 pow2, dyn W: [8, 24]>(
        q: bf16[B, 32, 1, 128],
        k_pool: bf16[1536, 8, 64, 128],
        v_pool: bf16[1536, 8, 64, 128],
        seq_q: i32[B, 1, 1, 1],
        seq_kv: i32[B, 1, 1, 1],
        table: i32[B, 1, W, 1],
    ) -> (o: bf16[B, 32, 1, 128]) {
        o = sdpa(q, k_pool, v_pool, seq_q, seq_kv, table, table, paged = true, padding_mask = true);
    }
}

/// A serving engine's paged decode capacities, prebuilt without a GPU: `aot --dyn` plans every
/// (batch bucket, table width) of the type, and a service seeded from the directory finds each
/// one without building.
#[cfg(feature = "cudnn")]
#[needs_cudnn]
#[test]
fn aot_prebuilds_every_paged_decode_capacity() {
    use cudnn_graph::backend::{BuildOptions, Cudnn};
    use cudnn_graph::engines::{CacheSource, PlanCache};
    let dir = std::env::temp_dir().join(format!("cudnn-graph-aot-paged-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out_dir = dir.join("out");
    let template = ServedPagedDecode::new(8, 8).graph().unwrap();
    let fingerprint = format!("ServedPagedDecode={:#018x}", ServedPagedDecode::FINGERPRINT);
    let flags = [
        "--out",
        out_dir.to_str().unwrap(),
        "--dyn",
        "B: 8..=64 pow2 @ q[0] seq_q[0] seq_kv[0] table[0]",
        "--dyn",
        "W: [8, 24] @ table[2]",
        "--type",
        &fingerprint,
    ];
    let out = aot_classes(&dir, &template, &flags);
    let Some(stdout) = aot_output(&out) else { return };
    assert!(stdout.contains("ServedPagedDecode: 8 class plans in "), "{stdout}");
    assert_eq!(std::fs::read_dir(&out_dir).unwrap().count(), 8, "one payload per capacity");

    let devprop = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/h200-devprop.json");
    let cudnn = Cudnn::deviceless(&std::fs::read_to_string(devprop).unwrap()).unwrap();
    let cache = PlanCache::with_dir(&out_dir).unwrap();
    let values = ServedPagedDecode::class_values().unwrap();
    assert_eq!(values.len(), 8);
    for v in values {
        let (plan, outcome) = v.build_cached(&cache, &cudnn, &BuildOptions::default()).unwrap();
        assert_eq!(outcome.source, CacheSource::Disk, "B = {}, W = {}", v.B, v.W);
        assert_eq!(plan.plan().graph(), &v.graph().unwrap(), "B = {}, W = {}", v.B, v.W);
    }
    assert_eq!(cache.stats().builds, 0, "a capacity was planned at run time");
    std::fs::remove_dir_all(&dir).unwrap();
}
