//! Users depend on `cudnn-graph`, and rustdoc shows the runtime's doc examples on the facade's
//! re-exported items: so an example names `cudnn_graph::…` (a hidden
//! `# use cudnn_runtime as cudnn_graph;` makes it compile as a doctest of the runtime). Only items
//! the facade does not re-export keep `cudnn_runtime::` paths, listed here.

/// `file: line` of the doc lines still naming `cudnn_runtime::` in visible code, with why.
const EXCEPTIONS: &[(&str, &str)] = &[
    ("engines/engine.rs", "implements Engine with cudnn_runtime::Result, which the facade does not re-export"),
    ("ir/layout.rs", "MemoryLayout and type_string live in ir, which the facade does not re-export"),
    ("ir/rewrite.rs", "batchnorm_as_pointwise lives in ir, which the facade does not re-export"),
];

fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn runtime_doc_examples_name_the_facade() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/cudnn-runtime/src"));
    let mut files = Vec::new();
    rust_files(root, &mut files);
    assert!(files.len() > 50, "only {} files under {}", files.len(), root.display());
    let mut offenders = Vec::new();
    for path in files {
        let rel = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
        if EXCEPTIONS.iter().any(|(f, _)| *f == rel) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, line) in text.lines().enumerate() {
            let doc = line.trim_start();
            let code = doc.strip_prefix("///").or_else(|| doc.strip_prefix("//!")).map(str::trim_start);
            // Visible doc lines (not `# hidden` ones) that name the runtime crate in code.
            if code.is_some_and(|c| !c.starts_with('#') && c.contains("cudnn_runtime::") && !c.contains('`')) {
                offenders.push(format!("cudnn-runtime/src/{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(offenders.is_empty(), "doc examples should name cudnn_graph::\n{}", offenders.join("\n"));
}
