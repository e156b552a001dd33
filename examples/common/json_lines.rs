//! The benchmarks' output: one JSON object per line, on stdout and in the `--json` file.

use std::io::Write;

use serde_json::{json, Value};

/// Writes each record as a JSON line to stdout and to the `--json` file.
pub struct Out {
    file: Option<std::fs::File>,
}

impl Out {
    /// Records go to stdout, and to a new file at `path` where one is given.
    pub fn create(path: Option<&String>) -> std::io::Result<Out> {
        Ok(Out { file: path.map(std::fs::File::create).transpose()? })
    }

    /// One row: `case`, `impl` and the members of `figures`.
    pub fn record(&mut self, case: &str, implementation: &str, figures: Value) {
        let mut row = json!({"case": case, "impl": implementation});
        if let (Some(row), Value::Object(f)) = (row.as_object_mut(), figures) {
            row.extend(f);
        }
        let line = row.to_string();
        println!("{line}");
        if let Some(f) = &mut self.file {
            // A full disk loses the file, not the run: stdout has every line.
            let _ = writeln!(f, "{line}").and_then(|()| f.flush());
        }
    }
}
