//! `cudnn-graph repro` and `cudnn-graph tune` (issue 34): every structure-corpus graph (one or more
//! per op family) replays on the CPU reference, writes a bug bundle and replays from it alike;
//! deviceless, a plan's parts run through its memory plan agree with the reference; stores merge
//! with their conflicts reported; bad input is an error, never a panic.
#![cfg(feature = "cudnn")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cudnn_graph::engines::{CandidateTime, PartitioningTime, TunedPart, TunedPlan, TuningStore};
use cudnn_graph::payload::plan::EngineRecord;

fn cli() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cudnn-graph"))
}

const DEVPROP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/h200-devprop.json");

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/structure");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cudnn-graph-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The lines of a report that depend on the graph and its inputs only.
fn reference_lines(stdout: &str) -> Vec<&str> {
    stdout.lines().filter(|l| l.starts_with("reference: ") || l.starts_with("graph ")).collect()
}

#[test]
fn every_corpus_graph_replays_on_the_reference_and_from_its_bundle() {
    let root = temp("repro-corpus");
    let mut replayed = 0;
    for path in corpus() {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let bundle = root.join(&name);
        let out = cli().arg("repro").arg(&path).args(["--seed", "11", "--bundle"]).arg(&bundle).output().unwrap();
        let (stdout, stderr) = text(&out);
        if name == "structure_dangling" {
            // Not a valid graph: a typed error naming the file, no bundle.
            assert_eq!(out.status.code(), Some(1), "{stderr}");
            assert!(stderr.contains("does not connect its input port"), "{stderr}");
            continue;
        }
        assert!(out.status.success(), "{name}: {stdout}{stderr}");
        assert!(stdout.contains("inputs: random, seed 11"), "{stdout}");
        for file in ["graph.json", "inputs.json", "env.json", "report.txt", "README.md"] {
            assert!(bundle.join(file).is_file(), "{name}: {file} missing");
        }
        // The bundle replays with its recorded inputs, to the same reference results.
        let again = cli().arg("repro").arg(&bundle).output().unwrap();
        let (again_out, again_err) = text(&again);
        assert!(again.status.success(), "{name}: {again_out}{again_err}");
        assert!(again_out.contains("inputs: recorded"), "{again_out}");
        assert_eq!(reference_lines(&again_out), reference_lines(&stdout), "{name}");
        replayed += 1;
    }
    assert!(replayed >= 25, "{replayed}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[needs_cudnn]
#[test]
fn deviceless_replays_run_the_plans_parts_and_bundle_the_plan() {
    let root = temp("repro-deviceless");
    for name in ["matmul_bias_relu", "sdpa_backward", "conv_genstats", "layernorm_training"] {
        let graph = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("fuzz/corpus/structure/{name}.json"));
        let bundle = root.join(name);
        let out = cli()
            .arg("repro")
            .arg(&graph)
            .args(["--device-properties", DEVPROP, "--bundle"])
            .arg(&bundle)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{name}: {stdout}{stderr}");
        // Whichever cuDNN is loaded (CI also runs 9.28.1), planning for the H200's sm 90.
        assert!(stdout.contains("target: cuDNN ") && stdout.contains(", sm 90 (deviceless)"), "{stdout}");
        assert!(stdout.contains("plan: built here"), "{stdout}");
        assert!(!stdout.contains("MISMATCH") && stdout.contains(": ok, max |err|"), "{stdout}");
        assert!(bundle.join("plan.json").is_file());
        // From the bundle: its plan, loaded, not built.
        let again = cli().arg("repro").arg(&bundle).args(["--device-properties", DEVPROP]).output().unwrap();
        let (again_out, again_err) = text(&again);
        assert!(again.status.success(), "{again_out}{again_err}");
        assert!(again_out.contains("plan: the recorded plan"), "{again_out}");
        assert_eq!(reference_lines(&again_out), reference_lines(&stdout));
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn repro_refuses_bad_input_plainly() {
    let root = temp("repro-bad");
    std::fs::create_dir_all(&root).unwrap();
    let junk = root.join("junk.bin");
    std::fs::write(&junk, [0xffu8, 0, 1, 2]).unwrap();
    let out = cli().arg("repro").arg(&junk).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).1.contains("neither a structural JSON nor a plan payload"), "{:?}", text(&out));
    // A bundle whose inputs were cut short.
    let graph = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/structure/matmul_bias_relu.json");
    let bundle = root.join("b");
    assert!(cli().arg("repro").arg(&graph).arg("--bundle").arg(&bundle).output().unwrap().status.success());
    std::fs::write(bundle.join("inputs/0.bin"), [1u8, 2, 3]).unwrap();
    let out = cli().arg("repro").arg(&bundle).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).1.contains("file has 3 bytes"), "{:?}", text(&out));
    let out = cli().args(["repro", "--all-candidates"]).arg(&graph).output().unwrap();
    assert!(text(&out).1.contains("it needs --device"), "{:?}", text(&out));
    let out = cli().args(["repro", "--bogus"]).output().unwrap();
    assert!(text(&out).1.contains("unknown option `--bogus`"));
    std::fs::remove_dir_all(&root).unwrap();
}

fn record(fp: u64, id: i64, at: u64) -> TunedPlan {
    let tag = format!("eng{id}");
    TunedPlan {
        graph_name: "g".into(),
        graph_fingerprint: format!("{fp:#018x}"),
        binding: None,
        sm: Some(90),
        cudnn_version: 91900,
        recorded_at: at,
        parts: vec![TunedPart {
            nodes: vec!["mm".into()],
            engine: EngineRecord {
                id: Some(id),
                tag: tag.clone(),
                knobs: Vec::new(),
                behavior_notes: Vec::new(),
                numerical_notes: Vec::new(),
            },
            refused: None,
            measured: None,
        }],
        partitioning: 0,
        partitionings: vec![PartitioningTime { parts: vec![vec!["mm".into()]], median_us: Some(5.0) }],
        candidates: vec![CandidateTime {
            partitioning: 0,
            part: 0,
            candidate: 0,
            tag,
            median_us: 5.0,
            min_us: 4.5,
            samples: 5,
            runs: 50,
        }],
    }
}

#[test]
fn tune_merges_stores_reporting_conflicts_and_shows_them() {
    let root = temp("tune-merge");
    std::fs::create_dir_all(&root).unwrap();
    let (a, b) = (root.join("a.json"), root.join("b.json"));
    let store = |records: Vec<TunedPlan>| {
        let mut s = TuningStore::new();
        for r in records {
            s.insert(r);
        }
        s
    };
    store(vec![record(1, 7, 100), record(2, 3, 100)]).write(&a).unwrap();
    store(vec![record(1, 9, 200), record(3, 1, 100)]).write(&b).unwrap();
    let out = cli().args(["tune", "--store"]).arg(&a).arg("--merge").arg(&b).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("1 added, 1 replaced by newer records, 0 kept"), "{stdout}");
    assert!(stdout.contains("conflict: graph 0x0000000000000001, sm 90, cuDNN 91900: kept [mm: eng9]"), "{stdout}");
    assert_eq!(TuningStore::read(&a).unwrap().len(), 3);
    let out = cli().args(["tune", "--store"]).arg(&a).arg("--show").output().unwrap();
    let (stdout, _) = text(&out);
    assert!(stdout.contains("3 entries") && stdout.contains("mm: eng9 [5.00 µs, 1 candidates timed"), "{stdout}");
    // A store that is not one: refused, and the file left as it was.
    std::fs::write(&b, b"{\"cudnn_graph_tuning\": 99, \"entries\": []}").unwrap();
    let out = cli().args(["tune", "--store"]).arg(&a).arg("--merge").arg(&b).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).1.contains("tuning store format 99"), "{:?}", text(&out));
    assert_eq!(TuningStore::read(&a).unwrap().len(), 3);
    let out = cli().args(["tune", "--store"]).arg(&a).output().unwrap();
    assert!(text(&out).1.contains("give --device N"), "{:?}", text(&out));
    std::fs::remove_dir_all(&root).unwrap();
}

/// `tune --dyn` reads its classes as `aot --dyn` does, and refuses bad ones (and `--dyn` over
/// several graphs, `--padded` without `--dyn` or of a graph with no class plan) before any GPU is
/// opened: nothing is written.
#[cfg(feature = "cudnn")]
#[test]
fn tune_dyn_refuses_bad_classes_before_the_gpu() {
    let root = temp("tune-dyn");
    std::fs::create_dir_all(&root).unwrap();
    let graph = root.join("g.json");
    let mut g = cudnn_graph::GraphBuilder::new("mm");
    let a = g.input("a", cudnn_graph::DataType::BF16, &[1, 128, 64]).unwrap();
    let b = g.input("b", cudnn_graph::DataType::BF16, &[1, 64, 32]).unwrap();
    let y = g.matmul(a, b).unwrap();
    g.output(y, "y", cudnn_graph::DataType::BF16).unwrap();
    std::fs::write(&graph, cudnn_graph::serialize::structure_to_json(&g.build().unwrap())).unwrap();
    let store = root.join("store.json");
    let tune = |extra: &[&str]| {
        let out = cli()
            .args(["tune", "--store"])
            .arg(&store)
            .args(["--device", "0", "--graph"])
            .arg(&graph)
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {:?}", text(&out));
        text(&out).1
    };
    let cases: [(&[&str], &str); 6] = [
        (&["--dyn", "S: 64..=512 pow2 @ q[1]"], "`q` is not an input of the graph (its inputs: a, b)"),
        (&["--dyn", "S: 64..=512 pow2 @ a[7]"], "`a` has 3 dims"),
        (&["--dyn", "S: 64..=512 pow2"], "name its dims after `@`"),
        (&["--dyn", "S: 64..=512 pow2 @ a[1]", "--graph", "other.json"], "give one --graph, not 2"),
        (&["--padded"], "--padded tunes the padded plans of the classes --dyn declares: give --dyn"),
        // A matmul's rows are not padded: it has no class plan to tune.
        (&["--dyn", "S: 64..=512 pow2 @ a[1]", "--padded"], "g.json: --padded: "),
    ];
    for (extra, want) in cases {
        let stderr = tune(extra);
        assert!(stderr.contains(want), "{extra:?}: `{want}` not in {stderr}");
    }
    assert!(!store.exists(), "nothing is written for refused input");
    let help = cli().args(["tune", "--help"]).output().unwrap();
    assert!(text(&help).0.contains("--dyn"), "{:?}", text(&help));
    std::fs::remove_dir_all(&root).unwrap();
}

/// `CUDNN_GRAPH_CAPTURE=DIR` on any process that plans (here `aot`) records each graph; `repro`
/// replays an entry with its captured engines.
#[needs_cudnn]
#[test]
fn the_capture_variable_records_what_a_process_plans_and_repro_replays_it() {
    let root = temp("capture-env");
    let captures = root.join("captures");
    let graph = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/structure/conv_bias_relu.json");
    let out = cli()
        .env("CUDNN_GRAPH_CAPTURE", &captures)
        .args(["aot", "--device-properties", DEVPROP, "--graph"])
        .arg(&graph)
        .arg("--out")
        .arg(root.join("p.json"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let entries: Vec<PathBuf> = std::fs::read_dir(&captures).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = &entries[0];
    assert!(entry.join("graph.json").is_file() && entry.join("capture.json").is_file());
    let out = cli().arg("repro").arg(entry).args(["--device-properties", DEVPROP]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("plan: the captured engines (cuDNN ") && stdout.contains(", sm 90)"), "{stdout}");
    assert!(stdout.contains(": ok, max |err|"), "{stdout}");
    std::fs::remove_dir_all(&root).unwrap();
}
