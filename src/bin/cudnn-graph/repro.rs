//! `cudnn-graph repro` and `cudnn-graph tune`: replaying a graph against the CPU reference, and
//! the tuning store filled, merged and shown.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use cudnn_graph::backend::capture::{read_captured, CapturedPlan};
use cudnn_graph::backend::{BuildOptions, ChosenPart, Cudnn, ExecutionPlan};
use cudnn_graph::engines::repro::{
    bisect, compare_outputs, execute_arrays, random_inputs, read_inputs, reference_outputs, write_inputs, Piece,
    Tolerance,
};
use cudnn_graph::engines::{AutotuneOptions, TuningFile, TuningStore};
use cudnn_graph::payload::plan::{
    load_payload, parse_payload, write_payload, Expect, Payload, PlanOrigin, SerializeOptions,
};
use cudnn_graph::reference::Array;
use cudnn_graph::serialize::{structure_from_json, structure_to_json};
use cudnn_graph::Graph;

pub const REPRO_HELP: &str = "cudnn-graph repro: replay a graph on the CPU reference and on cuDNN, and compare

usage:
  cudnn-graph repro INPUT [--device N | --device-properties DEVPROP.json] [--inputs DIR] [--seed S]
      [--all-candidates] [--bundle DIR]

  INPUT               a structural JSON (ours or cudnn-frontend's), a plan payload with its structure
                      (ours: `aot`, `serialize`), or a bug bundle directory (`--bundle`: graph.json,
                      plan.json, inputs.json)
  --device N          build (or load the payload's plan) and execute on GPU N; every output compared
                      with the reference; a partitioned plan that differs is replayed part by part,
                      each part fed the reference's inputs, naming the first part and node that diverge
                      (a part of several nodes then one node at a time: the first that diverges
                      alone, or the fusion)
  --device-properties plan deviceless for the device the properties describe and run the plan's
                      parts on the CPU reference through its memory plan (checks the partition and
                      the memory plan; cuDNN's arithmetic needs --device)
  --inputs DIR        the inputs (inputs.json and its files); a bundle's own by default; else random
  --seed S            the seed of random inputs (default 34)
  --all-candidates    build every candidate and execute each (with --device)
  --bundle DIR        write a self-contained bug bundle: the graph, the plan, the inputs, this report
                      and the environment, and how to run it again

Outputs pass when |got - want| <= atol + rtol |want| with cudnn-frontend's tolerance for their type
(bf16 2e-2, f16 1e-2, fp8 0.1, f32 1e-3, integers exact). Exit status 1 when an output differs.";

pub const TUNE_HELP: &str = "cudnn-graph tune: fill, merge and show a tuning store

usage:
  cudnn-graph tune --store STORE.json --device N --graph GRAPH.json [--graph ...] [--measure-partitionings]
  cudnn-graph tune --store STORE.json --device N --graph GRAPH.json --dyn 'S: 64..=8192 pow2 @ q[2] k[2]' [--dyn ...]
      [--padded]
  cudnn-graph tune --store STORE.json --merge OTHER.json [--merge ...]
  cudnn-graph tune --store STORE.json --show

  --store             the store (created if missing); `TuningFile::open` serves it at run time
  --device N          autotune each GRAPH.json (a structural JSON at the shape to tune) on GPU N:
                      every candidate built and timed, the fastest kept and recorded; a graph the
                      store already holds for this GPU and cuDNN is not timed again
  --dyn               a dyn dim, as `aot --dyn` takes it: its name, its classes as `graph!` declares
                      them after `dyn S:`, then `@` and the input dims that are it; GRAPH.json is
                      the graph at one value of each, and each class bound (every combination) is
                      tuned and recorded. Entries are recorded without a binding, so they serve
                      a `graph!` type at each bound (`S = 128`) and an untyped build alike
  --padded            with --dyn: tune each class's padded plan (its masked graph at the bound, as
                      `aot --padded` plans it), which `PlanCache::class_plan` then builds
  --measure-partitionings  also time each graph with its epilogues cut into kernels of their own
  --merge             merge other stores into STORE (the newer record of a key wins; records that
                      chose differently are reported)
  --show              list what STORE holds";

/// The value after `--name`, if given.
fn optional<'a>(args: &'a [String], name: &str) -> Result<Option<&'a str>, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(None),
        Some(i) => args.get(i + 1).map(|v| Some(v.as_str())).ok_or_else(|| format!("{name} needs a value")),
    }
}

/// The values after every `--name`.
fn values<'a>(args: &'a [String], name: &str) -> Result<Vec<&'a str>, String> {
    let mut out = Vec::new();
    for (i, _) in args.iter().enumerate().filter(|(_, a)| *a == name) {
        out.push(args.get(i + 1).map(String::as_str).ok_or_else(|| format!("{name} needs a value"))?);
    }
    Ok(out)
}

/// Options that take a value.
const VALUED: [&str; 7] = ["--device", "--device-properties", "--inputs", "--seed", "--bundle", "--store", "--graph"];

/// What INPUT held: the graph, a payload, the directory of a bundle.
struct Loaded {
    graph: Graph,
    payload: Option<Payload>,
    /// The payload's bytes, as read.
    payload_bytes: Option<Vec<u8>>,
    /// A capture entry's record of the plan that ran.
    captured: Option<CapturedPlan>,
    bundle: Option<PathBuf>,
}

fn read_text(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// A structural JSON, a payload with structure, or a bundle directory.
fn load(input: &str) -> Result<Loaded, String> {
    let path = Path::new(input);
    if path.is_dir() {
        let graph_path = path.join("graph.json");
        let graph =
            structure_from_json(&read_text(&graph_path)?).map_err(|e| format!("{}: {e}", graph_path.display()))?;
        let plan_path = path.join("plan.json");
        let (payload, payload_bytes) = match std::fs::read(&plan_path) {
            Ok(bytes) => {
                (Some(parse_payload(&bytes).map_err(|e| format!("{}: {e}", plan_path.display()))?), Some(bytes))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (None, None),
            Err(e) => return Err(format!("{}: {e}", plan_path.display())),
        };
        let captured = if path.join("capture.json").is_file() { Some(read_captured(path)?) } else { None };
        return Ok(Loaded { graph, payload, payload_bytes, captured, bundle: Some(path.to_path_buf()) });
    }
    let bytes = std::fs::read(path).map_err(|e| format!("{input}: {e}"))?;
    if let Ok(payload) = parse_payload(&bytes) {
        let graph = payload
            .structure
            .clone()
            .ok_or_else(|| format!("{input}: a plan-only payload: replay its graph's structural JSON instead"))?;
        return Ok(Loaded { graph, payload: Some(payload), payload_bytes: Some(bytes), captured: None, bundle: None });
    }
    let text =
        String::from_utf8(bytes).map_err(|_| format!("{input}: neither a structural JSON nor a plan payload"))?;
    let graph = structure_from_json(&text).map_err(|e| format!("{input}: {e}"))?;
    Ok(Loaded { graph, payload: None, payload_bytes: None, captured: None, bundle: None })
}

/// The reference's outputs of `graph` given `inputs`.
fn run_reference(graph: &Graph, inputs: &[Array]) -> Result<Vec<Array>, String> {
    reference_outputs(graph, inputs).map_err(|e| format!("the CPU reference: {e}"))
}

/// The plan to replay: the payload's, where it loads into `cudnn`, else built (every candidate
/// with `all`).
fn plan_for(cudnn: &Cudnn, loaded: &Loaded, all: bool, report: &mut String) -> Result<ExecutionPlan, String> {
    if let (Some(payload), false) = (&loaded.payload, all) {
        match load_payload(cudnn, payload, Some(loaded.graph.clone()), &Expect::default()) {
            Ok(plan) => {
                let sm = payload.plan.sm.map_or_else(|| "?".to_string(), |s| s.to_string());
                let _ = writeln!(report, "plan: the recorded plan (cuDNN {}, sm {sm})", payload.plan.cudnn_version);
                return Ok(plan);
            }
            Err(e) => {
                let _ = writeln!(report, "plan: the recorded plan does not load here ({e}); built again");
            }
        }
    }
    if let (Some(c), false) = (&loaded.captured, all) {
        let sm = c.sm.map_or_else(|| "?".to_string(), |s| s.to_string());
        if c.cudnn_version != cudnn.version() || c.sm != cudnn.sm() {
            let _ = writeln!(
                report,
                "plan: captured with cuDNN {} on sm {sm}, not this target: built here",
                c.cudnn_version
            );
        } else if c.parts.is_empty() {
            let _ = writeln!(report, "plan: the capture names no engine: built here");
        } else {
            match ExecutionPlan::build_chosen(cudnn, &loaded.graph, &c.parts, &BuildOptions::default()) {
                Ok(plan) => {
                    let _ = writeln!(report, "plan: the captured engines (cuDNN {}, sm {sm})", c.cudnn_version);
                    return Ok(plan);
                }
                Err(e) => {
                    let _ = writeln!(report, "plan: the captured engines do not build here ({e}); built again");
                }
            }
        }
    }
    let options = if all { BuildOptions::default().all_plans() } else { BuildOptions::default() };
    let plan = ExecutionPlan::build(cudnn, &loaded.graph, &options).map_err(|e| e.to_string())?;
    let _ = writeln!(report, "plan: built here, {} part(s)", plan.parts().len());
    Ok(plan)
}

fn describe_plan(plan: &ExecutionPlan, report: &mut String) {
    for (k, part) in plan.parts().iter().enumerate() {
        let _ = writeln!(report, "  part {k}: [{}] {}", part.nodes().join(", "), part.selected().tag());
    }
}

/// Compares `got` with `want`, output by output, into `report`; how many differ.
fn verdicts(graph: &Graph, got: &[Array], want: &[Array], what: &str, report: &mut String) -> usize {
    let _ = writeln!(report, "{what}:");
    let all = compare_outputs(graph, got, want);
    for v in &all {
        let _ = writeln!(report, "  {v}");
    }
    all.iter().filter(|v| !v.passed()).count()
}

pub fn repro(args: &[String]) -> Result<(), String> {
    let mut input = None;
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        match a.as_str() {
            v if VALUED.contains(&v) => {
                rest.next();
            }
            "--all-candidates" => {}
            other if other.starts_with("--") => return Err(format!("unknown option `{other}`\n{REPRO_HELP}")),
            other if input.is_some() => return Err(format!("one INPUT, found `{other}` too")),
            other => input = Some(other),
        }
    }
    let input = input.ok_or_else(|| format!("missing INPUT\n{REPRO_HELP}"))?;
    let loaded = load(input)?;
    let graph = &loaded.graph;
    let seed = match optional(args, "--seed")? {
        Some(s) => s.parse::<u64>().map_err(|_| format!("--seed takes an integer, found `{s}`"))?,
        None => 34,
    };
    let inputs_dir = optional(args, "--inputs")?
        .map(PathBuf::from)
        .or_else(|| loaded.bundle.as_ref().filter(|d| d.join("inputs.json").is_file()).cloned());
    let mut report = String::new();
    let name = if graph.name.is_empty() { "(unnamed graph)" } else { graph.name.as_str() };
    let _ = writeln!(
        report,
        "graph {name} ({:#018x}): {} nodes, {} inputs, {} outputs",
        graph.fingerprint(),
        graph.nodes.len(),
        graph.inputs().len(),
        graph.outputs().len()
    );
    let inputs = match &inputs_dir {
        Some(dir) => {
            let _ = writeln!(report, "inputs: recorded ({})", dir.display());
            read_inputs(dir, graph).map_err(|e| e.to_string())?
        }
        None => {
            let _ = writeln!(report, "inputs: random, seed {seed}");
            random_inputs(graph, seed)
        }
    };
    let want = run_reference(graph, &inputs)?;
    for (id, a) in graph.outputs().into_iter().zip(&want) {
        let t = graph.tensor(id);
        let sum: f64 = a.data.iter().sum();
        let _ = writeln!(report, "reference: {} {} checksum {sum:.6e}", t.name, t.type_string());
    }
    let replayed = replay(args, &loaded, &inputs, &want, &mut report);
    print!("{report}");
    let (failed, plan) = replayed?;
    if let Some(dir) = optional(args, "--bundle")? {
        bundle(Path::new(dir), &loaded, plan.as_ref(), &inputs, &report, args)?;
        println!("bundle written to {dir}: `cudnn-graph repro {dir} --device 0` replays it");
    }
    if failed > 0 {
        return Err(format!("{failed} comparison(s) outside the tolerance"));
    }
    Ok(())
}

/// `--all-candidates`: executes every built candidate of every part in turn (the other parts on
/// their selection) and compares each with the reference. Returns how many comparisons failed;
/// the plan keeps its selection.
fn every_candidate(
    cudnn: &Cudnn,
    plan: &mut ExecutionPlan,
    graph: &Graph,
    inputs: &[Array],
    want: &[Array],
    report: &mut String,
) -> Result<usize, String> {
    let mut failed = 0;
    for part in 0..plan.parts().len() {
        let chosen = plan.parts()[part].selected().index;
        for c in plan.parts()[part].built() {
            plan.select_in(part, c).map_err(|e| e.to_string())?;
            let tag = plan.parts()[part].selected().tag();
            match execute_arrays(cudnn, plan, inputs) {
                Ok(got) => failed += verdicts(graph, &got, want, &format!("part {part} candidate {c} ({tag})"), report),
                Err(e) => {
                    failed += 1;
                    let _ = writeln!(report, "part {part} candidate {c} ({tag}): did not execute: {e}");
                }
            }
        }
        plan.select_in(part, chosen).map_err(|e| e.to_string())?;
    }
    Ok(failed)
}

/// The cuDNN half: nothing without a target; with one, the plan and its comparisons. Returns how
/// many comparisons failed and the plan.
fn replay(
    args: &[String],
    loaded: &Loaded,
    inputs: &[Array],
    want: &[Array],
    report: &mut String,
) -> Result<(usize, Option<(ExecutionPlan, PlanOrigin)>), String> {
    let graph = &loaded.graph;
    let all = args.iter().any(|a| a == "--all-candidates");
    if let Some(n) = optional(args, "--device")? {
        let ordinal = n.parse::<usize>().map_err(|_| format!("--device takes a GPU ordinal, found `{n}`"))?;
        let context = cudnn_graph::backend::cuda_context(ordinal).map_err(|e| format!("GPU {ordinal}: {e}"))?;
        let cudnn = Cudnn::new(context.default_stream()).map_err(|e| format!("GPU {ordinal}: {e}"))?;
        let _ = writeln!(report, "target: {}", cudnn_graph::engines::repro::describe_target(&cudnn));
        let mut plan = plan_for(&cudnn, loaded, all, report)?;
        describe_plan(&plan, report);
        let mut failed = if all { every_candidate(&cudnn, &mut plan, graph, inputs, want, report)? } else { 0 };
        let got = execute_arrays(&cudnn, &plan, inputs).map_err(|e| e.to_string())?;
        let wrong = verdicts(graph, &got, want, "cuDNN (the plan's selection) against the reference", report);
        failed += wrong;
        if wrong > 0 && plan.is_partitioned() {
            let run_part = |piece: Piece, sub: &Graph, given: &[Array]| -> Result<Vec<Array>, cudnn_graph::Error> {
                // A part alone, on its own engine: its graph is already the rewritten one, and
                // its I/O are the tensors the parts exchange. A node alone: cuDNN's choice.
                let chosen = match piece {
                    Piece::Part(k) => ChosenPart::of(&plan.parts()[k]),
                    Piece::Node { .. } => None,
                };
                let plan = match chosen {
                    Some(chosen) => {
                        let chosen = [ChosenPart { refused: None, measured: None, ..chosen }];
                        ExecutionPlan::build_chosen(&cudnn, sub, &chosen, &BuildOptions::default())?
                    }
                    None => ExecutionPlan::build(&cudnn, sub, &BuildOptions::default())?,
                };
                Ok(execute_arrays(&cudnn, &plan, given)?)
            };
            match bisect(&plan, inputs, Tolerance::of, run_part) {
                Ok(Some(d)) => {
                    let _ = writeln!(report, "bisection: {d}");
                }
                Ok(None) => {
                    let _ = writeln!(report, "bisection: every part agrees when fed the reference's inputs: the difference comes from what the parts exchange (the arena, a view between parts) or builds up across parts");
                }
                Err(e) => {
                    let _ = writeln!(report, "bisection failed: {e}");
                }
            }
        }
        return Ok((failed, Some((plan, PlanOrigin::of(&cudnn)))));
    }
    if let Some(path) = optional(args, "--device-properties")? {
        let cudnn = Cudnn::deviceless(&read_text(Path::new(path))?).map_err(|e| format!("{path}: {e}"))?;
        let _ = writeln!(report, "target: {}", cudnn_graph::engines::repro::describe_target(&cudnn));
        let plan = plan_for(&cudnn, loaded, false, report)?;
        describe_plan(&plan, report);
        let got = plan.emulate(inputs).map_err(|e| e.to_string())?;
        let failed =
            verdicts(graph, &got, want, "the plan's parts on the CPU reference, through its memory plan", report);
        return Ok((failed, Some((plan, PlanOrigin::of(&cudnn)))));
    }
    if all {
        return Err("--all-candidates executes candidates: it needs --device".into());
    }
    let _ = writeln!(report, "target: none (the CPU reference only; --device N executes on a GPU)");
    Ok((0, None))
}

/// Writes a bug bundle: everything `repro DIR` needs on another machine, and what this run saw.
fn bundle(
    dir: &Path,
    loaded: &Loaded,
    plan: Option<&(ExecutionPlan, PlanOrigin)>,
    inputs: &[Array],
    report: &str,
    args: &[String],
) -> Result<(), String> {
    let io = |p: &Path| {
        let shown = p.display().to_string();
        move |e: std::io::Error| format!("{shown}: {e}")
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let graph_path = dir.join("graph.json");
    std::fs::write(&graph_path, structure_to_json(&loaded.graph)).map_err(io(&graph_path))?;
    let plan_path = dir.join("plan.json");
    match (plan, &loaded.payload_bytes) {
        (Some((plan, origin)), _) => {
            let bytes = write_payload(plan, origin, SerializeOptions { structure: true }, &Expect::default())
                .map_err(|e| format!("the plan cannot be written: {e}"))?;
            std::fs::write(&plan_path, bytes).map_err(io(&plan_path))?;
        }
        // No target here: the plan the input recorded travels as it was.
        (None, Some(bytes)) => std::fs::write(&plan_path, bytes).map_err(io(&plan_path))?,
        (None, None) => {}
    }
    write_inputs(dir, &loaded.graph, inputs).map_err(|e| e.to_string())?;
    let env = cudnn_graph::env_report::EnvReport::collect();
    let env_path = dir.join("env.json");
    std::fs::write(&env_path, serde_json::to_string_pretty(&env).map_err(|e| e.to_string())?).map_err(io(&env_path))?;
    let report_path = dir.join("report.txt");
    std::fs::write(&report_path, report).map_err(io(&report_path))?;
    let readme = format!(
        "# cudnn-graph bug bundle\n\n`{}`: {} nodes. Made with `cudnn-graph repro {}`.\n\n\
         - `graph.json`: the graph (structural JSON; cudnn-frontend's layout)\n\
         - `plan.json`: the plan that ran, with its engines and cuDNN's plan JSON (a payload)\n\
         - `inputs.json`, `inputs/`: the inputs, in each tensor's type, little-endian\n\
         - `report.txt`: what this run saw; `env.json`: the machine (libraries, GPUs, versions)\n\n\
         Reproduce: `cudnn-graph repro . --device 0` (the recorded plan where the GPU and cuDNN \
         match, else one built there), or `--device-properties DEVPROP.json` without a GPU.\n",
        loaded.graph.name,
        loaded.graph.nodes.len(),
        args.join(" ")
    );
    let readme_path = dir.join("README.md");
    std::fs::write(&readme_path, readme).map_err(io(&readme_path))
}

/// `tune --merge`: the records of each other store merged into the store at `store_path`.
fn merge_stores(store_path: &str, merges: &[&str]) -> Result<(), String> {
    let mut store = TuningStore::read(Path::new(store_path)).map_err(|e| e.to_string())?;
    for other in merges {
        let theirs = TuningStore::read(Path::new(other)).map_err(|e| e.to_string())?;
        let r = store.merge(&theirs);
        println!("{other}: {} added, {} replaced by newer records, {} kept", r.added, r.replaced, r.kept);
        for c in &r.conflicts {
            println!("  conflict: {c}");
        }
    }
    store.write(Path::new(store_path)).map_err(|e| e.to_string())?;
    println!("{store_path}: {} entries", store.len());
    Ok(())
}

/// `tune --show`: each entry of the store at `store_path`, with its best time.
fn show_store(store_path: &str) -> Result<(), String> {
    let store = TuningStore::read(Path::new(store_path)).map_err(|e| e.to_string())?;
    println!("{store_path}: {} entries", store.len());
    for e in store.entries() {
        let best = e.partitionings.get(e.partitioning).and_then(|p| p.median_us);
        let key = e.key().map(|k| k.to_string()).unwrap_or_default();
        let best = best.map_or_else(|| "?".to_string(), |us| format!("{us:.2} µs"));
        println!(
            "  {} ({key}): {} [{best}, {} candidates timed, recorded at {}]",
            e.graph_name,
            e.describe(),
            e.candidates.len(),
            e.recorded_at
        );
    }
    Ok(())
}

pub fn tune(args: &[String]) -> Result<(), String> {
    let store_path = optional(args, "--store")?.ok_or_else(|| format!("missing --store\n{TUNE_HELP}"))?;
    let merges = values(args, "--merge")?;
    if !merges.is_empty() {
        return merge_stores(store_path, &merges);
    }
    if args.iter().any(|a| a == "--show") {
        return show_store(store_path);
    }
    let n = optional(args, "--device")?
        .ok_or_else(|| format!("give --device N (to tune), --merge or --show\n{TUNE_HELP}"))?;
    let ordinal = n.parse::<usize>().map_err(|_| format!("--device takes a GPU ordinal, found `{n}`"))?;
    let graphs = values(args, "--graph")?;
    if graphs.is_empty() {
        return Err(format!("--device tunes the graphs given with --graph\n{TUNE_HELP}"));
    }
    let dyns = values(args, "--dyn")?;
    let padded = args.iter().any(|a| a == "--padded");
    if padded && dyns.is_empty() {
        return Err(format!("--padded tunes the padded plans of the classes --dyn declares: give --dyn\n{TUNE_HELP}"));
    }
    if !dyns.is_empty() && graphs.len() != 1 {
        return Err(format!("--dyn names dims of one graph: give one --graph, not {}\n{TUNE_HELP}", graphs.len()));
    }
    // Every graph read (and, with --dyn, derived at every class bound) before the GPU is opened.
    let mut tunes: Vec<(String, Graph)> = Vec::new();
    for path in graphs {
        let graph = structure_from_json(&read_text(Path::new(path))?).map_err(|e| format!("{path}: {e}"))?;
        if dyns.is_empty() {
            tunes.push((path.to_string(), graph));
            continue;
        }
        for (binding, _, g) in crate::classes::class_graphs(&graph, path, &dyns, padded)? {
            tunes.push((format!("{path} [{binding}]"), g));
        }
    }
    let file = TuningFile::open(store_path).map_err(|e| e.to_string())?;
    let context = cudnn_graph::backend::cuda_context(ordinal).map_err(|e| format!("GPU {ordinal}: {e}"))?;
    let cudnn = Cudnn::new(context.default_stream()).map_err(|e| format!("GPU {ordinal}: {e}"))?;
    let options = if args.iter().any(|a| a == "--measure-partitionings") {
        BuildOptions::default().measure_partitionings()
    } else {
        BuildOptions::default()
    };
    for (path, graph) in tunes {
        let start = std::time::Instant::now();
        let built = file
            .plan(&cudnn, &graph, &Expect::default(), &options, &AutotuneOptions::default())
            .map_err(|e| format!("{path}: {e}"))?;
        for w in &built.warnings {
            println!("{path}: {w}");
        }
        let ms = start.elapsed().as_secs_f64() * 1e3;
        match &built.report {
            Some(r) => print!("{path}: tuned in {ms:.0} ms\n{r}"),
            None => println!("{path}: in the store already ({ms:.0} ms to build its plan)"),
        }
    }
    println!("{store_path}: {} entries", file.snapshot().len());
    Ok(())
}
