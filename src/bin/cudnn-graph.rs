//! The `cudnn-graph` command.
//!
//! ```text
//! cudnn-graph env [--json]
//!     what this process loads: libcudnn, libcuda, other copies, GPUs, versions, warnings
//! cudnn-graph aot --device-properties DEVPROP.json --graph GRAPH.json --out PAYLOAD.json [--plan-only]
//!     compile a plan ahead of time, without a GPU, for the device the properties describe;
//!     GRAPH.json is a structural JSON (cudnn_graph::serialize::structure_to_json, or cudnn-frontend's)
//! cudnn-graph devprop [--device N] [--out DEVPROP.json]
//!     on a GPU machine: the device properties cuDNN plans with, for `aot` and
//!     `Cudnn::deviceless` on machines without that GPU (stdout without --out)
//! cudnn-graph picture GRAPH.json [--mermaid] [--parts (--device-properties DEVPROP.json | --device N)]
//!     the graph as Graphviz DOT (render with `dot -Tsvg`) or a Mermaid flowchart; with --parts,
//!     the plan cuDNN makes of it for that device, each part (kernel) a cluster
//! cudnn-graph convert --to frontend|ours --device-properties DEVPROP.json --in IN --out OUT [--plan-only]
//!     convert a plan payload between ours (JSON, digest) and cudnn-frontend 1.32's (UBJSON):
//!     the plan is loaded, checked against its graph, into a deviceless cuDNN context for the
//!     device the properties describe, and written in the other format (`--device 0` loads it on
//!     the GPU instead); see docs/serialization.md
//! ```

use std::process::ExitCode;

const USAGE: &str = "usage:
  cudnn-graph env [--json]
  cudnn-graph aot --device-properties DEVPROP.json --graph GRAPH.json --out PAYLOAD.json [--plan-only]
  cudnn-graph devprop [--device N] [--out DEVPROP.json]
  cudnn-graph picture GRAPH.json [--mermaid] [--parts (--device-properties DEVPROP.json | --device N)]
  cudnn-graph convert --to frontend|ours (--device-properties DEVPROP.json | --device N) --in IN --out OUT [--plan-only]";

const CONVERT_HELP: &str = "cudnn-graph convert: a plan payload from our format to cudnn-frontend 1.32's, or back

usage:
  cudnn-graph convert --to frontend|ours (--device-properties DEVPROP.json | --device N) --in IN --out OUT [--plan-only]

  --to frontend       IN is our payload (JSON); OUT is cudnn-frontend's (UBJSON, graph.deserialize reads it)
  --to ours           IN is cudnn-frontend's payload (graph.serialize()); OUT is ours
  --device-properties the device-properties JSON of a deviceless cuDNN context (as `aot` takes);
                      the plan is loaded there, without a GPU
  --device N          load the plan on GPU N instead
  --plan-only         write the plan without the graph's structure

The plan is loaded, not copied: the graph is read from the payload's structure, cuDNN's plan JSON
is checked against the graph's lowering and loaded by cuDNN, and every key of cudnn-frontend's
payload is checked; what cudnn-graph cannot honour (workspace modifications, pointer replacements,
tensors to dump, a front-end workspace) is refused naming the key.";

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
    use cudnn_graph::serialize::plan::{write_payload, Expect, PlanOrigin, SerializeOptions};
    let read = |path: &str| std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"));
    let devprop = read(value(args, "--device-properties")?)?;
    let graph_path = value(args, "--graph")?;
    let graph =
        cudnn_graph::serialize::structure_from_json(&read(graph_path)?).map_err(|e| format!("{graph_path}: {e}"))?;
    let out = value(args, "--out")?;
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
    use cudnn_graph::serialize::frontend_payload::{read_frontend_payload, write_frontend_payload};
    use cudnn_graph::serialize::plan::{
        load_payload, parse_payload, write_payload, Expect, PlanOrigin, SerializeOptions,
    };
    let to = value(args, "--to")?;
    let input = value(args, "--in")?;
    let out = value(args, "--out")?;
    let options = SerializeOptions { structure: !args.iter().any(|a| a == "--plan-only") };
    let cudnn = context(args)?;
    let bytes = std::fs::read(input).map_err(|e| format!("{input}: {e}"))?;
    let (converted, graph) = match to {
        "frontend" => {
            let payload = parse_payload(&bytes).map_err(|e| format!("{input}: {e}"))?;
            let plan = load_payload(&cudnn, &payload, None, &Expect::default()).map_err(|e| format!("{input}: {e}"))?;
            let converted =
                write_frontend_payload(&plan, &payload.origin(), options).map_err(|e| format!("{input}: {e}"))?;
            (converted, plan.graph().name.clone())
        }
        "ours" => {
            let plan = read_frontend_payload(&cudnn, &bytes, None).map_err(|e| format!("{input}: {e}"))?;
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
