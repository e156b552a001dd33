//! The `cudnn-graph` command.
//!
//! ```text
//! cudnn-graph env [--json]
//!     what this process loads: libcudnn, libcuda, other copies, GPUs, versions, warnings
//! cudnn-graph aot --device-properties DEVPROP.json --graph GRAPH.json --out PAYLOAD.json [--plan-only]
//!     compile a plan ahead of time, without a GPU, for the device the properties describe;
//!     GRAPH.json is a structural JSON (cudnn_graph::serialize::structure_to_json, or cudnn-frontend's)
//! cudnn-graph aot --device-properties DEVPROP.json --graph GRAPH.json --out DIR
//!         --dyn 'S: 64..=8192 pow2 @ q[2] k[2] v[2]' [--dyn ...] [--type NAME=FINGERPRINT]
//!     one plan per class bound of the named dims (every combination), into DIR under the plan
//!     cache's file names: `PlanCache::with_dir(DIR)` or `seed_from_dir(DIR)` serves them all;
//!     with --padded, the padded class graphs, for `PlanCache::padded_plan`
//! cudnn-graph devprop [--device N] [--out DEVPROP.json]
//!     on a GPU machine: the device properties cuDNN plans with, for `aot` and
//!     `Cudnn::deviceless` on machines without that GPU (stdout without --out)
//! cudnn-graph picture GRAPH.json [--mermaid] [--parts (--device-properties DEVPROP.json | --device N)]
//!     the graph as Graphviz DOT (render with `dot -Tsvg`) or a Mermaid flowchart; with --parts,
//!     the plan cuDNN makes of it for that device, each part (kernel) a cluster
//! cudnn-graph convert --to frontend|ours --device-properties DEVPROP.json --in IN --out OUT
//!         [--graph GRAPH.json] [--plan-only]
//!     convert a plan payload between ours (JSON, digest) and cudnn-frontend 1.32's (UBJSON):
//!     the plan is loaded, checked against its graph, into a deviceless cuDNN context for the
//!     device the properties describe, and written in the other format (`--device 0` loads it on
//!     the GPU instead); a plan-only payload takes its graph from GRAPH.json (a structural
//!     JSON); see docs/serialization.md
//! cudnn-graph repro INPUT [--device N | --device-properties DEVPROP.json] [--inputs DIR] [--seed S]
//!         [--all-candidates] [--bundle DIR]
//!     replay a graph (structural JSON, payload or bug bundle) on the CPU reference and on cuDNN,
//!     every output compared under cudnn-frontend's tolerances; a partitioned plan that differs is
//!     replayed part by part; --bundle writes a bug bundle that reproduces elsewhere
//! cudnn-graph tune --store STORE.json (--device N --graph GRAPH.json... | --merge OTHER.json... | --show)
//!     fill a tuning store offline (autotune each graph on a GPU), merge stores, list one
//! ```

use std::process::ExitCode;

#[cfg(feature = "cudnn")]
#[path = "cudnn-graph/repro.rs"]
mod repro;

const USAGE: &str = "usage:
  cudnn-graph env [--json]
  cudnn-graph aot --device-properties DEVPROP.json --graph GRAPH.json --out PAYLOAD.json [--plan-only]
  cudnn-graph aot --device-properties DEVPROP.json --graph GRAPH.json --out DIR --dyn 'S: 64..=8192 pow2 @ q[2] k[2]' [--dyn ...] [--type NAME=FINGERPRINT]
  cudnn-graph devprop [--device N] [--out DEVPROP.json]
  cudnn-graph picture GRAPH.json [--mermaid] [--parts (--device-properties DEVPROP.json | --device N)]
  cudnn-graph convert --to frontend|ours (--device-properties DEVPROP.json | --device N) --in IN --out OUT [--graph GRAPH.json] [--plan-only]
  cudnn-graph repro INPUT [--device N | --device-properties DEVPROP.json] [--inputs DIR] [--seed S] [--all-candidates] [--bundle DIR]
  cudnn-graph tune --store STORE.json (--device N --graph GRAPH.json... | --merge OTHER.json... | --show)";

const CONVERT_HELP: &str = "cudnn-graph convert: a plan payload from our format to cudnn-frontend 1.32's, or back

usage:
  cudnn-graph convert --to frontend|ours (--device-properties DEVPROP.json | --device N) --in IN --out OUT
      [--graph GRAPH.json] [--plan-only]

  --to frontend       IN is our payload (JSON); OUT is cudnn-frontend's (UBJSON, graph.deserialize reads it)
  --to ours           IN is cudnn-frontend's payload (graph.serialize()); OUT is ours
  --device-properties the device-properties JSON of a deviceless cuDNN context (as `aot` takes);
                      the plan is loaded there, without a GPU
  --device N          load the plan on GPU N instead
  --graph GRAPH.json  the graph the plan was made from, as a structural JSON (structure_to_json,
                      or cudnn-frontend's): needed for a plan-only IN, checked against IN's
                      structure (the same graph) where IN has one
  --plan-only         write the plan without the graph's structure

The plan is loaded, not copied: the graph is read from the payload's structure (or GRAPH.json),
cuDNN's plan JSON is checked against the graph's lowering and loaded by cuDNN, and every key of
cudnn-frontend's payload is checked. What cudnn-graph's plans do too is read and written:
pointer replacements (a slice bound by pointer offset, `variant_pack_replacements`), workspace
regions a plan places tensors in (`workspace_modifications` operation 2) and the front-end
workspace they take (`fe_workspace_size`). What it cannot honour (a workspace region to fill
before every execute, operations 0 and 1; cudnn-frontend's own alignment checks,
`aligned_operands`; tensors to dump, `tensors_to_dump`) is refused naming the key.";

const AOT_HELP: &str = "cudnn-graph aot: plans compiled ahead of time, without a GPU

usage:
  cudnn-graph aot --device-properties DEVPROP.json --graph GRAPH.json --out PAYLOAD.json [--plan-only]
  cudnn-graph aot --device-properties DEVPROP.json --graph GRAPH.json --out DIR
      --dyn 'S: 64..=8192 pow2 @ q[2] k[2] v[2]' [--dyn ...] [--type NAME=FINGERPRINT] [--plan-only]
      [--dynamic-shapes | --padded]

  --device-properties the device-properties JSON of the GPU to plan for (`cudnn-graph devprop`)
  --graph             a structural JSON (cudnn_graph::serialize::structure_to_json, or cudnn-frontend's)
  --out               the payload file; with --dyn, a directory (created) of one payload per class
  --plan-only         write the plan without the graph's structure
  --dyn               a dyn dim: its name, its classes as `graph!` declares them after `dyn S:`
                      (`MIN..=MAX`, `MIN..=MAX pow2`, `MIN..=MAX multiple(K)`, `MIN..=MAX exact`,
                      `[A, B, C]`), then after `@` the input dims that are it, as `tensor[axis]`;
                      once per dyn dim
  --type              the graph! type the plans are for, NAME=FINGERPRINT (`Name::FINGERPRINT` in
                      hex): its payloads record the type and the runtime-dim binding (`S = 128`, the
                      --dyn dims in order: give them in the type's declaration order), so that
                      `Name::build_cached` finds them; without it they serve `PlanCache::get_or_build`
                      of the bare graph
  --dynamic-shapes    plan the classes as dynamic-shape operation graphs sharing one kernel cache
                      (the kernels compile once, for every class; shape-generic kernels) instead of
                      one plan specialized to each class (compiled per class; cuDNN may specialize
                      its kernels to the shape); graphs cuDNN plans only statically stay ordinary
  --padded            plan each class bound's padded class graph (`ir::ClassGraph::masked`:
                      attention with its padding masks, or a row-wise graph as it is): the plans
                      `PlanCache::padded_plan` runs every length of a class on (`PaddedPlan`)

With --dyn, GRAPH.json is the graph at one value of each dyn dim (the dims named for it all have
it); the graph at every class bound is derived from it by applying its ops again to inputs of the
new dims, as `GraphBuilder` does, and must give GRAPH.json back at its own values (a graph with
extents in its op attributes, custom output layouts or uids other than the builder's is refused,
naming the difference). Every combination of class bounds gets its plan, in DIR under the name the
plan cache gives its entry: a service starts with every class prebuilt through
`PlanCache::with_dir(DIR)` or `seed_from_dir(DIR)`.";

const PICTURE_HELP: &str = "cudnn-graph picture: a graph, or the plan of its parts, as a picture

usage:
  cudnn-graph picture GRAPH.json [--mermaid] [--parts (--device-properties DEVPROP.json | --device N)]

  GRAPH.json          a structural JSON (cudnn_graph::serialize::structure_to_json, or cudnn-frontend's)
  --mermaid           a Mermaid flowchart instead of Graphviz DOT (render DOT with `dot -Tsvg`)
  --parts             plan the graph first (as `aot` does) and draw the plan: each part, one cuDNN
                      kernel, a cluster labelled with its engine, workspace and why it was cut from
                      the part before; the tensors parts exchange through the arena between them
                      (dashed, with offset and size); views between parts outside every cluster
  --device-properties the device-properties JSON of a deviceless cuDNN context to plan for,
                      without a GPU
  --device N          plan on GPU N instead

Without --parts the graph is drawn as written: boxes are tensors (dashed where virtual), ellipses
ops, edges carry the ops' port names.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("env") => env(&args[1..]),
        Some("aot") if args.iter().any(|a| a == "--help" || a == "-h") => {
            println!("{AOT_HELP}");
            return ExitCode::SUCCESS;
        }
        Some("aot") => aot(&args[1..]),
        Some("devprop") => devprop(&args[1..]),
        Some("picture") if args.iter().any(|a| a == "--help" || a == "-h") => {
            println!("{PICTURE_HELP}");
            return ExitCode::SUCCESS;
        }
        Some("picture") => picture(&args[1..]),
        Some("convert") if args.iter().any(|a| a == "--help" || a == "-h") => {
            println!("{CONVERT_HELP}");
            return ExitCode::SUCCESS;
        }
        Some("convert") => convert(&args[1..]),
        #[cfg(feature = "cudnn")]
        Some("repro") if args.iter().any(|a| a == "--help" || a == "-h") => {
            println!("{}", repro::REPRO_HELP);
            return ExitCode::SUCCESS;
        }
        #[cfg(feature = "cudnn")]
        Some("repro") => repro::repro(&args[1..]),
        #[cfg(feature = "cudnn")]
        Some("tune") if args.iter().any(|a| a == "--help" || a == "-h") => {
            println!("{}", repro::TUNE_HELP);
            return ExitCode::SUCCESS;
        }
        #[cfg(feature = "cudnn")]
        Some("tune") => repro::tune(&args[1..]),
        #[cfg(not(feature = "cudnn"))]
        Some("repro" | "tune") => Err("this build has no cuDNN backend (built without the `cudnn` feature)".into()),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cudnn-graph: {e}");
            ExitCode::FAILURE
        }
    }
}

fn env(args: &[String]) -> Result<(), String> {
    let report = cudnn_graph::env_report::EnvReport::collect();
    if args.iter().any(|a| a == "--json") {
        println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
    } else {
        print!("{}", report.to_text());
    }
    Ok(())
}

fn picture(args: &[String]) -> Result<(), String> {
    let mut path = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            // Their values are not the graph's path.
            "--device-properties" | "--device" => {
                rest.next();
            }
            "--mermaid" | "--parts" => {}
            other if other.starts_with("--") => return Err(format!("unknown option `{other}`\n{USAGE}")),
            other if path.is_some() => return Err(format!("one GRAPH.json, found `{other}` too\n{USAGE}")),
            other => path = Some(other),
        }
    }
    let path = path.ok_or_else(|| format!("missing GRAPH.json\n{USAGE}"))?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let graph = cudnn_graph::serialize::structure_from_json(&text).map_err(|e| format!("{path}: {e}"))?;
    let mermaid = args.iter().any(|a| a == "--mermaid");
    let picture = if args.iter().any(|a| a == "--parts") {
        plan_picture(&graph, args, mermaid)?
    } else if mermaid {
        graph.to_mermaid()
    } else {
        graph.to_dot()
    };
    print!("{picture}");
    Ok(())
}

/// The picture of the plan cuDNN makes of `graph` for the device `args` name, with its parts.
#[cfg(feature = "cudnn")]
fn plan_picture(graph: &cudnn_graph::Graph, args: &[String], mermaid: bool) -> Result<String, String> {
    use cudnn_graph::backend::{BuildOptions, ExecutionPlan};
    let cudnn = context(args)?;
    let plan = ExecutionPlan::build(&cudnn, graph, &BuildOptions::default()).map_err(|e| e.to_string())?;
    Ok(if mermaid { plan.to_mermaid() } else { plan.to_dot() })
}

#[cfg(not(feature = "cudnn"))]
fn plan_picture(_: &cudnn_graph::Graph, _: &[String], _: bool) -> Result<String, String> {
    Err("--parts plans the graph, and this build has no cuDNN backend (built without the `cudnn` feature)".into())
}

/// The value after `--name`, required.
#[cfg(feature = "cudnn")]
fn value<'a>(args: &'a [String], name: &str) -> Result<&'a str, String> {
    let i = args.iter().position(|a| a == name).ok_or_else(|| format!("missing {name}\n{USAGE}"))?;
    args.get(i + 1).map(String::as_str).ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
}

/// The values after every `--name`.
#[cfg(feature = "cudnn")]
fn values<'a>(args: &'a [String], name: &str) -> Result<Vec<&'a str>, String> {
    let mut out = Vec::new();
    for (i, _) in args.iter().enumerate().filter(|(_, a)| *a == name) {
        out.push(args.get(i + 1).map(String::as_str).ok_or_else(|| format!("{name} needs a value\n{USAGE}"))?);
    }
    Ok(out)
}

/// The value after `--name`, if given.
#[cfg(feature = "cudnn")]
fn optional<'a>(args: &'a [String], name: &str) -> Result<Option<&'a str>, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(None),
        Some(i) => args.get(i + 1).map(|v| Some(v.as_str())).ok_or_else(|| format!("{name} needs a value\n{USAGE}")),
    }
}

/// The GPU ordinal after `--device`, if given.
#[cfg(feature = "cudnn")]
fn device_ordinal(args: &[String]) -> Result<Option<usize>, String> {
    optional(args, "--device")?
        .map(|n| n.parse::<usize>().map_err(|_| format!("--device takes a GPU ordinal (0, 1, ...), found `{n}`")))
        .transpose()
}

/// The cuDNN context `args` name: online on the GPU after `--device`, or deviceless from the
/// device properties after `--device-properties`.
#[cfg(feature = "cudnn")]
fn context(args: &[String]) -> Result<cudnn_graph::backend::Cudnn, String> {
    if let Some(ordinal) = device_ordinal(args)? {
        return online(ordinal);
    }
    let path = value(args, "--device-properties")?;
    let devprop = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    cudnn_graph::backend::Cudnn::deviceless(&devprop).map_err(|e| format!("{path}: {e}"))
}

/// An online cuDNN context on GPU `ordinal`.
#[cfg(feature = "cudnn")]
fn online(ordinal: usize) -> Result<cudnn_graph::backend::Cudnn, String> {
    let context = cudnn_graph::backend::cuda_context(ordinal).map_err(|e| format!("GPU {ordinal}: {e}"))?;
    cudnn_graph::backend::Cudnn::new(context.default_stream()).map_err(|e| format!("GPU {ordinal}: {e}"))
}

#[cfg(feature = "cudnn")]
fn devprop(args: &[String]) -> Result<(), String> {
    use cudnn_graph::backend::Cudnn;
    let ordinal = device_ordinal(args)?.unwrap_or(0);
    let cudnn = online(ordinal)?;
    let json = cudnn.device_properties_json().map_err(|e| format!("GPU {ordinal}: {e}"))?;
    // What a deviceless context needs of it must hold before it is written.
    Cudnn::deviceless(&json).map_err(|e| format!("GPU {ordinal}: its device properties do not load back: {e}"))?;
    match optional(args, "--out")? {
        None => println!("{json}"),
        Some(path) => {
            std::fs::write(path, &json).map_err(|e| format!("{path}: {e}"))?;
            eprintln!("cudnn-graph: GPU {ordinal}'s device properties written to {path} ({} bytes)", json.len());
        }
    }
    Ok(())
}

#[cfg(not(feature = "cudnn"))]
fn devprop(_: &[String]) -> Result<(), String> {
    Err("this build has no cuDNN backend (built without the `cudnn` feature)".into())
}

#[cfg(feature = "cudnn")]
fn aot(args: &[String]) -> Result<(), String> {
    use cudnn_graph::backend::{BuildOptions, Cudnn, ExecutionPlan};
    use cudnn_graph::payload::plan::{write_payload, Expect, PlanOrigin, SerializeOptions};
    let read = |path: &str| std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"));
    let devprop = read(value(args, "--device-properties")?)?;
    let graph_path = value(args, "--graph")?;
    let graph =
        cudnn_graph::serialize::structure_from_json(&read(graph_path)?).map_err(|e| format!("{graph_path}: {e}"))?;
    let out = value(args, "--out")?;
    let dyns = values(args, "--dyn")?;
    if !dyns.is_empty() {
        return classes::aot(&devprop, &graph, graph_path, &dyns, optional(args, "--type")?, out, args);
    }
    if optional(args, "--type")?.is_some() {
        return Err(format!("--type names the graph! type of class plans: it needs --dyn\n{USAGE}"));
    }
    if args.iter().any(|a| a == "--padded") {
        return Err(format!("--padded plans padded class bounds: it needs --dyn\n{USAGE}"));
    }
    let cudnn = Cudnn::deviceless(&devprop).map_err(|e| e.to_string())?;
    let start = std::time::Instant::now();
    let plan = ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()).map_err(|e| e.to_string())?;
    let options = SerializeOptions { structure: !args.iter().any(|a| a == "--plan-only") };
    let bytes =
        write_payload(&plan, &PlanOrigin::of(&cudnn), options, &Expect::default()).map_err(|e| e.to_string())?;
    let tmp = format!("{out}.tmp");
    std::fs::write(&tmp, &bytes).and_then(|()| std::fs::rename(&tmp, out)).map_err(|e| format!("{out}: {e}"))?;
    let name = if graph.name.is_empty() { "(unnamed graph)" } else { graph.name.as_str() };
    let ms = start.elapsed().as_secs_f64() * 1e3;
    if plan.is_partitioned() {
        println!("{name}: {} parts in {ms:.0} ms, {} B payload -> {out}", plan.parts().len(), bytes.len());
        for (k, part) in plan.parts().iter().enumerate() {
            println!("  part {k}: {part}");
        }
    } else {
        println!("{name}: {} in {ms:.0} ms, {} B payload -> {out}", plan.selected(), bytes.len());
    }
    Ok(())
}

#[cfg(not(feature = "cudnn"))]
fn aot(_: &[String]) -> Result<(), String> {
    Err("this build has no cuDNN backend (built without the `cudnn` feature)".into())
}

#[cfg(feature = "cudnn")]
fn convert(args: &[String]) -> Result<(), String> {
    use cudnn_graph::payload::frontend::{read_frontend_payload, write_frontend_payload};
    use cudnn_graph::payload::plan::{
        load_payload, parse_payload, write_payload, Expect, PayloadError, PlanOrigin, SerializeOptions,
    };
    let to = value(args, "--to")?;
    let input = value(args, "--in")?;
    let out = value(args, "--out")?;
    let options = SerializeOptions { structure: !args.iter().any(|a| a == "--plan-only") };
    // The graph of a plan-only payload (or, with a structure, the one it must be).
    let given = match optional(args, "--graph")? {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            Some(cudnn_graph::serialize::structure_from_json(&text).map_err(|e| format!("{path}: {e}"))?)
        }
    };
    let cudnn = context(args)?;
    let bytes = std::fs::read(input).map_err(|e| format!("{input}: {e}"))?;
    let failed = |e: PayloadError| match e {
        PayloadError::NeedsGraph { .. } => format!("{input}: {e}: pass it with --graph GRAPH.json"),
        e => format!("{input}: {e}"),
    };
    let (converted, graph) = match to {
        "frontend" => {
            let payload = parse_payload(&bytes).map_err(failed)?;
            let plan = load_payload(&cudnn, &payload, given, &Expect::default()).map_err(failed)?;
            let converted =
                write_frontend_payload(&plan, &payload.origin(), options).map_err(|e| format!("{input}: {e}"))?;
            (converted, plan.graph().name.clone())
        }
        "ours" => {
            let plan = read_frontend_payload(&cudnn, &bytes, given).map_err(failed)?;
            let converted = write_payload(&plan, &PlanOrigin::of(&cudnn), options, &Expect::default())
                .map_err(|e| format!("{input}: {e}"))?;
            (converted, plan.graph().name.clone())
        }
        other => return Err(format!("--to takes `frontend` or `ours`, not `{other}`\n{USAGE}")),
    };
    let tmp = format!("{out}.tmp");
    std::fs::write(&tmp, &converted).and_then(|()| std::fs::rename(&tmp, out)).map_err(|e| format!("{out}: {e}"))?;
    println!("{graph}: {} B -> {} B ({to}) -> {out}", bytes.len(), converted.len());
    Ok(())
}

#[cfg(not(feature = "cudnn"))]
fn convert(_: &[String]) -> Result<(), String> {
    Err("this build has no cuDNN backend (built without the `cudnn` feature)".into())
}

/// `aot --dyn`: one plan per class bound.
#[cfg(feature = "cudnn")]
mod classes {
    use std::collections::HashMap;
    use std::path::Path;

    use cudnn_graph::backend::{BuildOptions, Cudnn, ExecutionPlan, KernelCache};
    use cudnn_graph::engines::PlanKey;
    use cudnn_graph::ir::ClassGraph;
    use cudnn_graph::payload::plan::{write_payload, Expect, PlanOrigin, SerializeOptions};
    use cudnn_graph::shape_class::ClassDecl;
    use cudnn_graph::{Graph, GraphBuilder, GraphError, Operand, TensorId};

    /// The most plans one `aot --dyn` makes (every combination of the dims' class bounds).
    const MAX_CLASS_PLANS: usize = 4096;

    /// One `--dyn`: a dyn dim, its classes, the input dims that are it and their value in the
    /// graph given.
    struct DynDim {
        name: String,
        class: ClassDecl,
        /// (input, axis), in the order written.
        dims: Vec<(TensorId, usize)>,
        value: i64,
    }

    /// Reads `--dyn NAME: CLASSES @ tensor[axis] ...` against `graph`'s inputs.
    fn parse_dyn(text: &str, graph: &Graph) -> Result<DynDim, String> {
        let example = "`S: 64..=8192 pow2 @ q[2] k[2]`";
        let (decl, at) =
            text.split_once('@').ok_or_else(|| format!("--dyn `{text}`: name its dims after `@`, as in {example}"))?;
        let (name, class) = decl
            .split_once(':')
            .ok_or_else(|| format!("--dyn `{text}`: no `:` after the dim's name, as in {example}"))?;
        let name = name.trim();
        let identifier = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !identifier {
            return Err(format!("--dyn `{text}`: `{name}` is not a dim name (letters, digits, `_`)"));
        }
        let class: ClassDecl = class.parse().map_err(|e| format!("--dyn `{name}`: {e}"))?;
        let inputs = graph.inputs();
        let names = || inputs.iter().map(|&i| graph.tensor(i).name.as_str()).collect::<Vec<_>>().join(", ");
        let mut dims = Vec::new();
        let mut value: Option<(i64, &str)> = None;
        for item in at.split(|c: char| c == ',' || c.is_whitespace()).filter(|t| !t.is_empty()) {
            let Some((tensor, axis)) = item.strip_suffix(']').and_then(|t| t.split_once('[')) else {
                return Err(format!("--dyn `{name}`: `{item}` is not a dim: write `tensor[axis]`, as `q[2]`"));
            };
            let id = inputs.iter().copied().find(|&i| graph.tensor(i).name == tensor).ok_or_else(|| {
                format!("--dyn `{name}`: `{item}`: `{tensor}` is not an input of the graph (its inputs: {})", names())
            })?;
            let rank = graph.tensor(id).dims.len();
            let axis = axis.parse::<usize>().ok().filter(|&a| a < rank).ok_or_else(|| {
                format!("--dyn `{name}`: `{item}`: `{tensor}` has {rank} dims, axes 0 to {}", rank - 1)
            })?;
            let here = graph.tensor(id).dims[axis];
            match value {
                Some((v, first)) if v != here => {
                    return Err(format!(
                    "--dyn `{name}`: `{first}` is {v} but `{item}` is {here}: the dims of one dyn dim have one value"
                ))
                }
                Some(_) => {}
                None => value = Some((here, item)),
            }
            if dims.contains(&(id, axis)) {
                return Err(format!("--dyn `{name}`: `{item}` is named twice"));
            }
            dims.push((id, axis));
        }
        let (value, _) = value.ok_or_else(|| format!("--dyn `{name}`: no dims after `@`, as in {example}"))?;
        Ok(DynDim { name: name.to_string(), class, dims, value })
    }

    /// `graph` with each (input, axis) of `values` set to its value and every op applied again
    /// through `GraphBuilder` (as the graph's own builder did), so that every other dim and
    /// stride follows.
    fn rebind(graph: &Graph, values: &[((TensorId, usize), i64)]) -> Result<Graph, GraphError> {
        let mut b = GraphBuilder::new(graph.name.clone());
        b.context(graph.context);
        let mut map: Vec<Option<TensorId>> = vec![None; graph.tensors.len()];
        for id in graph.inputs() {
            let t = graph.tensor(id);
            let new = if t.host_scalar {
                b.host_scalar(&t.name, t.data_type, t.dims.len())?
            } else {
                let mut dims = t.dims.clone();
                for &((tensor, axis), v) in values {
                    if tensor == id {
                        dims[axis] = v;
                    }
                }
                let new = b.input(&t.name, t.data_type, &dims)?;
                // A layout other than packed row-major: the same order of the dims in memory.
                let mut order: Vec<usize> = (0..t.dims.len()).collect();
                order.sort_by_key(|&a| std::cmp::Reverse(t.strides[a]));
                if order.iter().enumerate().any(|(i, &a)| i != a) {
                    b.set_dim_order(new, &order)?;
                }
                new
            };
            map[id.0] = Some(new);
        }
        for node in &graph.nodes {
            let operands = node
                .inputs
                .iter()
                .map(|&i| match (map[i.0], graph.tensor(i).pass_by_value) {
                    (Some(t), _) => Ok(Operand::Tensor(t)),
                    (None, Some(v)) => Ok(Operand::Scalar(v)),
                    (None, None) => Err(GraphError::UnknownTensor { node: node.name.clone(), index: i.0 }),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let outs = b.apply_named(&node.name, node.op.clone(), &operands)?;
            for (o, n) in node.outputs.iter().zip(outs) {
                map[o.0] = Some(n);
            }
        }
        for id in graph.outputs() {
            let t = graph.tensor(id);
            if let Some(new) = map[id.0] {
                b.output(new, &t.name, t.data_type)?;
            }
        }
        b.build()
    }

    /// The first difference between `given` and `again` (its ops applied again at its own
    /// values): why `given` cannot be derived at other values.
    fn difference(given: &Graph, again: &Graph) -> String {
        if given.tensors.len() != again.tensors.len() || given.nodes.len() != again.nodes.len() {
            return format!(
                "it has {} tensors and {} nodes, applying its ops again gives {} and {}",
                given.tensors.len(),
                given.nodes.len(),
                again.tensors.len(),
                again.nodes.len()
            );
        }
        for (a, b) in given.tensors.iter().zip(&again.tensors) {
            let field = if a.name != b.name {
                Some(("name", format!("{:?}", a.name), format!("{:?}", b.name)))
            } else if a.dims != b.dims {
                Some(("dims", format!("{:?}", a.dims), format!("{:?}", b.dims)))
            } else if a.strides != b.strides {
                Some(("strides", format!("{:?}", a.strides), format!("{:?}", b.strides)))
            } else if a.uid != b.uid {
                Some(("uid", a.uid.to_string(), b.uid.to_string()))
            } else if a != b {
                Some(("type and flags", format!("{a:?}"), format!("{b:?}")))
            } else {
                None
            };
            if let Some((what, has, gives)) = field {
                return format!("tensor `{}`: its {what} is {has}, applying the ops again gives {gives}", a.name);
            }
        }
        match given.nodes.iter().zip(&again.nodes).find(|(a, b)| a != b) {
            Some((a, _)) => format!("node `{}` is not what its op gives when applied again", a.name),
            None => "the graph is not what its ops give when applied again".into(),
        }
    }

    /// `--type NAME=FINGERPRINT`.
    fn graph_type(text: &str) -> Result<(String, u64), String> {
        let (name, fp) = text
            .split_once('=')
            .ok_or_else(|| format!("--type `{text}`: write NAME=FINGERPRINT (`Name::FINGERPRINT` in hex)"))?;
        let hex = fp.trim().trim_start_matches("0x");
        let fp = u64::from_str_radix(hex, 16)
            .map_err(|_| format!("--type `{text}`: `{}` is not a 64-bit hex fingerprint", fp.trim()))?;
        Ok((name.trim().to_string(), fp))
    }

    /// One class bound: its binding (`S = 128`), each dyn dim's value, and the graph there.
    pub(crate) type ClassBound = (String, Vec<(String, i64)>, Graph);

    /// The graph of `graph_path` at every combination of the class bounds of `dyns` (`--dyn`
    /// texts), the last dim fastest: each with its binding (`S = 128, B = 4`, as a `graph!`
    /// type's) and its dyn dims' values. Every `--dyn` is checked against the graph, and the
    /// graph against its ops (it must be what they give at its own values); with `padded`, each
    /// is the padded class graph at its bound.
    pub(crate) fn class_graphs(
        graph: &Graph,
        graph_path: &str,
        dyns: &[&str],
        padded: bool,
    ) -> Result<Vec<ClassBound>, String> {
        let dyns = dyns.iter().map(|t| parse_dyn(t, graph)).collect::<Result<Vec<_>, _>>()?;
        let mut named: HashMap<(TensorId, usize), &str> = HashMap::new();
        for d in &dyns {
            if dyns.iter().filter(|o| o.name == d.name).count() > 1 {
                return Err(format!("--dyn `{}` is given twice", d.name));
            }
            for &dim in &d.dims {
                if let Some(other) = named.insert(dim, &d.name) {
                    let t = &graph.tensor(dim.0).name;
                    return Err(format!(
                        "`{t}[{}]` is named by --dyn `{other}` and `{}`: a dim is one dyn dim",
                        dim.1, d.name
                    ));
                }
            }
        }
        let combinations = dyns.iter().try_fold(1usize, |n, d| n.checked_mul(d.class.count()));
        if combinations.is_none_or(|n| n > MAX_CLASS_PLANS) {
            let counts: Vec<String> = dyns.iter().map(|d| format!("{} has {}", d.name, d.class.count())).collect();
            return Err(format!(
                "the classes make more than {MAX_CLASS_PLANS} plans ({}): declare coarser classes",
                counts.join(", ")
            ));
        }
        if padded {
            ClassGraph::new(graph).map_err(|e| format!("{graph_path}: --padded: {e}"))?;
        }
        // GRAPH.json must be what its ops give at its own values, or the graphs derived at other
        // values would not be the ones a service builds.
        let own: Vec<((TensorId, usize), i64)> =
            dyns.iter().flat_map(|d| d.dims.iter().map(move |&k| (k, d.value))).collect();
        let again = rebind(graph, &own).map_err(|e| format!("{graph_path}: its ops do not apply again: {e}"))?;
        if again != *graph {
            let why = difference(graph, &again);
            return Err(format!("{graph_path}: cannot be derived at other values of its dyn dims: {why}"));
        }
        let bounds: Vec<Vec<usize>> = dyns.iter().map(|d| d.class.bounds()).collect();
        let mut index = vec![0usize; dyns.len()];
        let mut out = Vec::new();
        loop {
            let values: Vec<i64> =
                index.iter().zip(&bounds).map(|(&i, b)| i64::try_from(b[i]).unwrap_or(i64::MAX)).collect();
            let binding =
                dyns.iter().zip(&values).map(|(d, v)| format!("{} = {v}", d.name)).collect::<Vec<_>>().join(", ");
            let at: Vec<((TensorId, usize), i64)> =
                dyns.iter().zip(&values).flat_map(|(d, &v)| d.dims.iter().map(move |&k| (k, v))).collect();
            let g = rebind(graph, &at).map_err(|e| format!("{binding}: {e}"))?;
            let g = match padded {
                true => ClassGraph::new(&g).map_err(|e| format!("{binding}: {e}"))?.masked().clone(),
                false => g,
            };
            out.push((binding, dyns.iter().zip(&values).map(|(d, &v)| (d.name.clone(), v)).collect(), g));
            // The next combination, the last dim fastest.
            let Some(k) = (0..index.len()).rev().find(|&k| index[k] + 1 < bounds[k].len()) else { break };
            index[k] += 1;
            index[k + 1..].iter_mut().for_each(|i| *i = 0);
        }
        Ok(out)
    }

    /// Plans every combination of the class bounds of `dyns` for the device `devprop` describes
    /// and writes each payload into `out`; every input is checked before cuDNN is loaded.
    pub fn aot(
        devprop: &str,
        graph: &Graph,
        graph_path: &str,
        dyns: &[&str],
        type_text: Option<&str>,
        out: &str,
        args: &[String],
    ) -> Result<(), String> {
        let padded = args.iter().any(|a| a == "--padded");
        if padded && args.iter().any(|a| a == "--dynamic-shapes") {
            return Err(format!(
                "--padded and --dynamic-shapes: a padded class plan is planned at its bound, choose one\n{}",
                crate::USAGE
            ));
        }
        let classes = class_graphs(graph, graph_path, dyns, padded)?;
        let type_of = type_text.map(graph_type).transpose()?;
        let dir = Path::new(out);
        if dir.is_file() {
            return Err(format!("{out}: with --dyn, --out is a directory (one payload per class), not a file"));
        }
        // Every input checked: now cuDNN.
        let cudnn = &Cudnn::deviceless(devprop).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(dir).map_err(|e| format!("{out}: {e}"))?;
        let options = SerializeOptions { structure: !args.iter().any(|a| a == "--plan-only") };
        let build = if args.iter().any(|a| a == "--dynamic-shapes") {
            BuildOptions::default().dynamic_shapes(KernelCache::new())
        } else {
            BuildOptions::default()
        };
        let start = std::time::Instant::now();
        let mut written = 0;
        for (binding, runtime_dims, g) in classes {
            let expect = match &type_of {
                Some((name, fp)) => Expect {
                    type_fingerprint: Some(*fp),
                    type_name: Some(name.clone()),
                    binding: Some(binding.clone()),
                    runtime_dims,
                },
                None => Expect::default(),
            };
            let began = std::time::Instant::now();
            let plan = ExecutionPlan::build(cudnn, &g, &build).map_err(|e| format!("{binding}: {e}"))?;
            let bytes = write_payload(&plan, &PlanOrigin::of(cudnn), options, &expect)
                .map_err(|e| format!("{binding}: {e}"))?;
            let path = dir.join(PlanKey::new(cudnn, &g, &expect).file_name());
            // Atomically, for the plan cache's readers: dot-prefixed temporaries are skipped.
            let tmp = dir.join(format!(".aot-{written}.tmp"));
            std::fs::write(&tmp, &bytes)
                .and_then(|()| std::fs::rename(&tmp, &path))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let ms = began.elapsed().as_secs_f64() * 1e3;
            let kind = match (padded, plan.is_dynamic_shape()) {
                (true, _) => "padded",
                (false, true) => "dynamic-shape",
                (false, false) => "specialized",
            };
            println!("{binding}: {kind}, {} in {ms:.0} ms, {} B -> {}", plan.selected(), bytes.len(), path.display());
            written += 1;
        }
        let name = if graph.name.is_empty() { "(unnamed graph)" } else { graph.name.as_str() };
        println!("{name}: {written} class plans in {:.0} ms -> {out}", start.elapsed().as_secs_f64() * 1e3);
        Ok(())
    }
}
