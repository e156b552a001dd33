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
//! cudnn-graph picture GRAPH.json [--mermaid]
//!     the graph as Graphviz DOT (render with `dot -Tsvg`) or a Mermaid flowchart
//! ```

use std::process::ExitCode;

const USAGE: &str = "usage:
  cudnn-graph env [--json]
  cudnn-graph aot --device-properties DEVPROP.json --graph GRAPH.json --out PAYLOAD.json [--plan-only]
  cudnn-graph devprop [--device N] [--out DEVPROP.json]
  cudnn-graph picture GRAPH.json [--mermaid]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("env") => env(&args[1..]),
        Some("aot") => aot(&args[1..]),
        Some("devprop") => devprop(&args[1..]),
        Some("picture") => picture(&args[1..]),
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
    let path = args.iter().find(|a| !a.starts_with("--")).ok_or_else(|| format!("missing GRAPH.json\n{USAGE}"))?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let graph = cudnn_graph::serialize::structure_from_json(&text).map_err(|e| format!("{path}: {e}"))?;
    if args.iter().any(|a| a == "--mermaid") {
        print!("{}", graph.to_mermaid());
    } else {
        print!("{}", graph.to_dot());
    }
    Ok(())
}

/// The value after `--name`, required.
fn value<'a>(args: &'a [String], name: &str) -> Result<&'a str, String> {
    let i = args.iter().position(|a| a == name).ok_or_else(|| format!("missing {name}\n{USAGE}"))?;
    args.get(i + 1).map(String::as_str).ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
}

/// The value after `--name`, if given.
fn optional<'a>(args: &'a [String], name: &str) -> Result<Option<&'a str>, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(None),
        Some(i) => args.get(i + 1).map(|v| Some(v.as_str())).ok_or_else(|| format!("{name} needs a value\n{USAGE}")),
    }
}

#[cfg(feature = "cudnn")]
fn devprop(args: &[String]) -> Result<(), String> {
    use cudnn_graph::backend::{cuda_context, Cudnn};
    let ordinal = match optional(args, "--device")? {
        None => 0,
        Some(n) => n.parse::<usize>().map_err(|_| format!("--device takes a GPU ordinal (0, 1, ...), found `{n}`"))?,
    };
    let context = cuda_context(ordinal).map_err(|e| format!("GPU {ordinal}: {e}"))?;
    let cudnn = Cudnn::new(context.default_stream()).map_err(|e| format!("GPU {ordinal}: {e}"))?;
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
    println!(
        "{}: {} in {:.0} ms, {} B payload -> {out}",
        graph.name,
        plan.selected(),
        start.elapsed().as_secs_f64() * 1e3,
        bytes.len()
    );
    Ok(())
}

#[cfg(not(feature = "cudnn"))]
fn aot(_: &[String]) -> Result<(), String> {
    Err("this build has no cuDNN backend (built without the `cudnn` feature)".into())
}
