//! The `cudnn-graph` command.
//!
//! ```text
//! cudnn-graph env [--json]     what this process loads: libcudnn, libcuda, GPUs, versions
//! ```

use std::process::ExitCode;

fn usage() -> ExitCode {
    eprintln!("usage: cudnn-graph env [--json]");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("env") => {
            let report = cudnn_graph::env_report::EnvReport::collect();
            if args.iter().any(|a| a == "--json") {
                match serde_json::to_string_pretty(&report) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("cudnn-graph env: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                print!("{}", report.to_text());
            }
            ExitCode::SUCCESS
        }
        _ => usage(),
    }
}
