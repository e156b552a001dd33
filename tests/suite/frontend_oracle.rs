//! cudnn-frontend 1.32 as an oracle (issue #18): what it makes of our structural JSON and plan
//! payloads, and what we make of its own, measured family by family.
//!
//! Each direction is an explicit expectation table below:
//!
//! - [`OURS_TO_FRONTEND`]: the structural JSON we write for each graph of the structure corpus
//!   (`fuzz/corpus/structure`, one or more graphs of every family, and [`extra_graphs`]) is deserialized, lowered and
//!   planned by cudnn-frontend (`tests/frontend/oracle.py reprint`), and its re-print compared
//!   with ours field by field.
//! - [`FRONTEND_TO_OURS`]: cudnn-frontend's JSON of each family (`tests/fixtures/frontend/*.json`,
//!   written by `oracle.py fixtures`) read by [`structure_from_json`] and written back, compared
//!   field by field.
//! - [`FRONTEND_TO_FRONTEND`]: the same fixtures into cudnn-frontend itself, the baseline.
//! - [`OUR_PAYLOADS_TO_FRONTEND`] and [`FRONTEND_PAYLOADS_TO_OURS`]: plan payloads across, through
//!   the explicit import/export of [`cudnn_graph::payload::frontend`] on a deviceless
//!   H200 context (`fuzz/corpus/payload` loaded and written in cudnn-frontend's layout, then into
//!   cudnn-frontend's `deserialize`; `tests/fixtures/frontend/*.ubjson` into
//!   [`read_frontend_payload`], which binds their plan JSON to the graph and loads it). Our own
//!   payload reader ([`parse_payload`]) still refuses cudnn-frontend's bytes, and every UBJSON
//!   fixture must read into JSON and write back to the same bytes
//!   ([`cudnn_graph::serialize::ubjson`]).
//!
//! A cell is [`Expect::RoundTrips`] or [`Expect::Fails`] with the exact reason measured; a cell
//! whose outcome changes fails the test, so a fix flips its cell. The directions through
//! cudnn-frontend need it installed (`.ci/setup-frontend.sh` prints the PYTHONPATH and
//! LD_LIBRARY_PATH it needs, which its Python process gets from `CUDNN_GRAPH_FRONTEND_PYTHONPATH`
//! and `CUDNN_GRAPH_FRONTEND_LD_LIBRARY_PATH`, in front of the inherited ones; cuDNN 9.19 and the
//! libcuda stand-in of `.ci/setup-cudnn.sh` on LD_LIBRARY_PATH too): without it they skip with the
//! reason, unless `CUDNN_GRAPH_REQUIRE_FRONTEND=1`. With
//! `CUDNN_GRAPH_ORACLE_PRINT=1` each test prints its measured table as Rust, to paste after a fix.
//! `docs/serialization.md` ("cudnn-frontend interop") is this file's matrix in prose.

#![cfg(feature = "cudnn")]

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use cudnn_graph::payload::frontend::{read_frontend_payload, write_frontend_payload};
use cudnn_graph::payload::plan::{load_payload, parse_payload, Expect as PayloadExpect, SerializeOptions};
use cudnn_graph::serialize::ubjson::canonical_ubjson;
use cudnn_graph::serialize::{structure_from_json, structure_to_json};
use cudnn_graph::{DataType, Graph, GraphBuilder};
use serde_json::Value;

/// The measured outcome of one family in one direction.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    /// Read, lowered and planned (where the reader plans) and re-printed field by field equal.
    RoundTrips,
    /// Refused, or re-printed differently: the exact reason (the reader's error, or each field
    /// that differs).
    Fails(&'static str),
}

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Keys that are not compared: ours (the `cudnn_graph` extension objects cudnn-frontend ignores)
/// and the re-printer's version stamps.
const NOT_COMPARED: &[&str] = &["cudnn_graph", "cudnn_backend_version", "cudnn_frontend_version"];

/// cudnn-frontend's error on a graph whose nodes its JSON reader dropped, all of them.
const NO_OPS: &str = "build_operation_graph: CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: Check and Set the CUDNN_ATTR_OPERATIONGRAPH_OPS Count field cudnn_status: CUDNN_STATUS_BAD_PARAM";
const NOT_OUR_PAYLOAD: &str = "not a cudnn-graph plan payload: key must be a string at line 1 column 2";

/// Our structural JSON of each corpus graph into cudnn-frontend.
const OURS_TO_FRONTEND: &[(&str, Expect)] = &[
    ("avgpool", Expect::Fails("build_operation_graph: detail::finalize(resample_operation.get_raw_desc()) failed with message: finalize_internal(), and code: CUDNN_STATUS_BAD_PARAM")),
    ("batchnorm_training", Expect::Fails(NO_OPS)),
    ("bn_drelu_bn_backward", Expect::Fails("re-print differs: nodes: ours [\"BATCHNORM_INFERENCE\", \"POINTWISE\", \"DBN\"], cudnn-frontend [\"POINTWISE\"]; tensors: ours 11 items, cudnn-frontend 3")),
    ("causal_mask", Expect::Fails("create_execution_plans: No valid engine configs for ____")),
    ("concat_three", Expect::Fails(NO_OPS)),
    ("conv_3d_dilated", Expect::RoundTrips),
    ("conv_bias_relu", Expect::RoundTrips),
    ("conv_concat", Expect::Fails("re-print differs: nodes: ours [\"CONV_FPROP\", \"CONCATENATE\"], cudnn-frontend [\"CONV_FPROP\"]; tensors: ours 5 items, cudnn-frontend 3")),
    ("conv_dgrad_drelu", Expect::RoundTrips),
    ("conv_genstats", Expect::Fails("re-print differs: nodes: ours [\"CONV_FPROP\", \"GENSTATS\"], cudnn-frontend [\"CONV_FPROP\"]; tensors: ours 5 items, cudnn-frontend 3")),
    ("conv_wgrad", Expect::Fails("create_execution_plans: No valid engine configs for _")),
    ("instancenorm_layernorm_backward", Expect::Fails(NO_OPS)),
    ("layernorm_training", Expect::Fails(NO_OPS)),
    ("matmul_bias_relu", Expect::RoundTrips),
    ("matmul_row_sum", Expect::RoundTrips),
    ("maxpool_index", Expect::Fails("build_operation_graph: detail::finalize(resample_operation.get_raw_desc()) failed with message: finalize_internal(), and code: CUDNN_STATUS_BAD_PARAM")),
    ("pointwise_chain", Expect::Fails("build_plans: [cudnn_frontend] Error: No valid execution plans built.")),
    ("reshape_transpose", Expect::Fails("build_operation_graph: Transpose requires cuDNN v9.22.0")),
    ("rmsnorm_backward", Expect::Fails(NO_OPS)),
    ("rmsnorm_training", Expect::Fails(NO_OPS)),
    ("row_sum_mean_amax", Expect::Fails("create_execution_plans: No valid engine configs for ___")),
    ("scale_shift_pow_prevalidate", Expect::Fails("build_plans: [cudnn_frontend] Error: No valid execution plans built.")),
    ("sdpa", Expect::Fails("validate: cuda_get_device(&device) failed with API call is not supported in the installed CUDA driver")),
    ("sdpa_backward", Expect::Fails("validate: cuda_get_device(&device) failed with API call is not supported in the installed CUDA driver")),
    ("sdpa_bshd_window", Expect::Fails("validate: cuda_get_device(&device) failed with API call is not supported in the installed CUDA driver")),
    ("sdpa_causal_training", Expect::Fails("validate: cuda_get_device(&device) failed with API call is not supported in the installed CUDA driver")),
    ("sdpa_paged_decode", Expect::Fails("validate: cuda_get_device(&device) failed with API call is not supported in the installed CUDA driver")),
    ("sdpa_ragged", Expect::Fails("validate: cuda_get_device(&device) failed with API call is not supported in the installed CUDA driver")),
    ("sdpa_ragged_prefill", Expect::Fails("validate: cuda_get_device(&device) failed with API call is not supported in the installed CUDA driver")),
    ("slice_matmul", Expect::Fails("build_operation_graph: Slice backend operation requires 9.22.0")),
    ("strided_slice_relu", Expect::Fails("build_operation_graph: Slice backend operation requires 9.22.0")),
    ("transpose_matmul", Expect::Fails("build_operation_graph: Transpose requires cuDNN v9.22.0")),
];

/// cudnn-frontend's JSON of each family into our reader.
const FRONTEND_TO_OURS: &[(&str, Expect)] = &[
    ("batchnorm", Expect::RoundTrips),
    ("batchnorm_backward", Expect::RoundTrips),
    ("batchnorm_inference", Expect::RoundTrips),
    ("concatenate", Expect::RoundTrips),
    ("conv_dgrad", Expect::RoundTrips),
    ("conv_fprop", Expect::RoundTrips),
    ("conv_wgrad", Expect::RoundTrips),
    ("genstats", Expect::RoundTrips),
    ("instancenorm", Expect::RoundTrips),
    ("layernorm", Expect::RoundTrips),
    ("layernorm_backward", Expect::RoundTrips),
    ("matmul", Expect::RoundTrips),
    ("pointwise_add", Expect::RoundTrips),
    ("pointwise_cmp_gt", Expect::RoundTrips),
    ("pointwise_leaky_relu", Expect::RoundTrips),
    ("pointwise_mul_by_value", Expect::RoundTrips),
    ("pointwise_relu", Expect::RoundTrips),
    ("reduction", Expect::RoundTrips),
    ("reshape", Expect::RoundTrips),
    ("rmsnorm", Expect::RoundTrips),
    ("rmsnorm_backward", Expect::RoundTrips),
    ("sdpa_backward", Expect::RoundTrips),
    ("sdpa_forward", Expect::RoundTrips),
    ("sdpa_ragged_backward", Expect::RoundTrips),
    ("sdpa_ragged_forward", Expect::RoundTrips),
    ("slice", Expect::RoundTrips),
    ("transpose", Expect::RoundTrips),
];

/// cudnn-frontend's JSON of each family into cudnn-frontend itself: which of its own documents it
/// reloads (its reader drops the norm, genstats, concatenation and reshape nodes). In the reasons,
/// "ours" is the fixture as cudnn-frontend wrote it.
const FRONTEND_TO_FRONTEND: &[(&str, Expect)] = &[
    ("batchnorm", Expect::Fails(NO_OPS)),
    ("batchnorm_backward", Expect::Fails(NO_OPS)),
    ("batchnorm_inference", Expect::Fails(NO_OPS)),
    ("concatenate", Expect::Fails(NO_OPS)),
    ("conv_dgrad", Expect::RoundTrips),
    ("conv_fprop", Expect::RoundTrips),
    ("conv_wgrad", Expect::RoundTrips),
    ("genstats", Expect::Fails(NO_OPS)),
    ("instancenorm", Expect::Fails(NO_OPS)),
    ("layernorm", Expect::Fails(NO_OPS)),
    ("layernorm_backward", Expect::Fails(NO_OPS)),
    ("matmul", Expect::RoundTrips),
    ("pointwise_add", Expect::RoundTrips),
    ("pointwise_cmp_gt", Expect::RoundTrips),
    ("pointwise_leaky_relu", Expect::RoundTrips),
    ("pointwise_mul_by_value", Expect::RoundTrips),
    ("pointwise_relu", Expect::RoundTrips),
    ("reduction", Expect::RoundTrips),
    ("reshape", Expect::Fails("re-print differs: nodes: ours [\"RESHAPE\", \"POINTWISE\"], cudnn-frontend [\"POINTWISE\"]; tensors: ours 3 items, cudnn-frontend 2")),
    ("rmsnorm", Expect::Fails(NO_OPS)),
    ("rmsnorm_backward", Expect::Fails(NO_OPS)),
    ("sdpa_backward", Expect::Fails("validate: cuda_get_device(&device) failed with API call is not supported in the installed CUDA driver")),
    ("sdpa_forward", Expect::Fails("validate: cuda_get_device(&device) failed with API call is not supported in the installed CUDA driver")),
    ("sdpa_ragged_backward", Expect::Fails("validate: cuda_get_device(&device) failed with API call is not supported in the installed CUDA driver")),
    ("sdpa_ragged_forward", Expect::Fails("validate: cuda_get_device(&device) failed with API call is not supported in the installed CUDA driver")),
    ("slice", Expect::Fails("build_operation_graph: Slice backend operation requires 9.22.0")),
    ("transpose", Expect::Fails("build_operation_graph: Transpose requires cuDNN v9.22.0")),
];

/// Our plan payloads (the payload corpus) into cudnn-frontend.
const OUR_PAYLOADS_TO_FRONTEND: &[(&str, Expect)] = &[
    ("avgpool", Expect::RoundTrips),
    ("batchnorm_training", Expect::RoundTrips),
    ("conv_3d_dilated", Expect::RoundTrips),
    ("conv_bias_relu", Expect::RoundTrips),
    ("conv_concat", Expect::RoundTrips),
    ("conv_dgrad_drelu", Expect::RoundTrips),
    ("conv_genstats", Expect::RoundTrips),
    ("instancenorm_layernorm_backward", Expect::RoundTrips),
    ("layernorm_training", Expect::RoundTrips),
    ("matmul_bias_relu", Expect::RoundTrips),
    ("matmul_row_sum", Expect::RoundTrips),
    // Row-major (NCHW) with indices: refused by `resample.index_layout` (cuDNN 9.19 never writes
    // the indices there), so the payload no longer loads.
    ("maxpool_index", Expect::Fails("convert: cuDNN could not load the plan: node `resample_0` (resample) breaks cuDNN support rule `resample.index_layout`: a max pooling with `index = true` over row-major ports (`x` (strides [256, 64, 8, 1]), `max` (strides [64, 16, 4, 1]), `index` (strides [64, 16, 4, 1])) plans on cuDNN 9.19 but never writes its indices (measured on the H100); declare X, Y and the index `channels_last`")),
    ("payload_empty_plan", Expect::Fails("convert: payload format 1 is not supported (this build reads 2)")),
    ("payload_scaled_mlp", Expect::Fails("convert: payload format 1 is not supported (this build reads 2)")),
    ("pointwise_chain", Expect::RoundTrips),
    ("rmsnorm_backward", Expect::RoundTrips),
    ("sdpa", Expect::RoundTrips),
    ("sdpa_backward", Expect::RoundTrips),
    ("sdpa_bshd_window", Expect::RoundTrips),
    ("sdpa_causal_training", Expect::RoundTrips),
    ("sdpa_ragged", Expect::RoundTrips),
    ("slice_matmul", Expect::RoundTrips),
];

/// cudnn-frontend's plan payloads into our payload reader.
const FRONTEND_PAYLOADS_TO_OURS: &[(&str, Expect)] = &[
    ("batchnorm", Expect::RoundTrips),
    ("batchnorm_backward", Expect::RoundTrips),
    ("conv_dgrad", Expect::RoundTrips),
    ("conv_fprop", Expect::RoundTrips),
    ("conv_wgrad", Expect::RoundTrips),
    ("instancenorm", Expect::RoundTrips),
    ("layernorm", Expect::RoundTrips),
    ("layernorm_backward", Expect::RoundTrips),
    ("matmul", Expect::RoundTrips),
    ("pointwise_add", Expect::RoundTrips),
    ("pointwise_cmp_gt", Expect::RoundTrips),
    ("pointwise_leaky_relu", Expect::RoundTrips),
    ("pointwise_mul_by_value", Expect::RoundTrips),
    ("pointwise_relu", Expect::RoundTrips),
    ("reduction", Expect::RoundTrips),
    ("rmsnorm", Expect::RoundTrips),
    ("rmsnorm_backward", Expect::RoundTrips),
];

/// The files of `dir` ending in `ext`, sorted, with their stems.
fn files(dir: &str, ext: &str) -> Vec<(String, PathBuf)> {
    let dir = Path::new(ROOT).join(dir);
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .filter_map(|p| Some((p.file_stem()?.to_str()?.to_string(), p)))
        .collect();
    out.sort();
    out
}

/// A scratch directory for this test process.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cudnn-graph-oracle-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `oracle.py MODE FILES…`: one answer per file, or `None` (after printing why) when
/// cudnn-frontend is not installed and not required.
fn oracle(mode: &str, paths: &[PathBuf]) -> Option<Vec<Value>> {
    let required = std::env::var("CUDNN_GRAPH_REQUIRE_FRONTEND").is_ok_and(|v| v == "1");
    let python = std::env::var("CUDNN_GRAPH_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(ROOT).join("tests/frontend/oracle.py");
    let skip = |why: String| {
        assert!(!required, "CUDNN_GRAPH_REQUIRE_FRONTEND=1 but cudnn-frontend cannot run: {why}");
        eprintln!("skipped: cudnn-frontend is not available ({why}); .ci/setup-frontend.sh installs it");
        None
    };
    let mut command = Command::new(&python);
    for var in ["PYTHONPATH", "LD_LIBRARY_PATH"] {
        if let Ok(extra) = std::env::var(format!("CUDNN_GRAPH_FRONTEND_{var}")) {
            let joined = match std::env::var(var) {
                Ok(old) if !old.is_empty() => format!("{extra}:{old}"),
                _ => extra,
            };
            command.env(var, joined);
        }
    }
    let output = match command.arg(&script).arg(mode).args(paths).output() {
        Ok(output) => output,
        Err(e) => return skip(format!("{python}: {e}")),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    if output.status.code() == Some(3) {
        return skip(stdout.trim().to_string());
    }
    assert!(output.status.success(), "oracle.py {mode} failed: {}", String::from_utf8_lossy(&output.stderr));
    let answers: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(answers.len(), paths.len(), "oracle.py {mode}: one answer per file");
    Some(answers)
}

/// Appended to a difference that is only [`unset_before_validate`].
const UNSET_MARK: &str = " (unset before validate)";

/// Fields cudnn-frontend leaves unset in a document printed before its `validate` (SDPA's node
/// `compute_data_type`, an output's `dim` and `stride`; deviceless, SDPA cannot validate), which
/// validate fills in exactly as our reader does when it reads the document.
const UNSET_BEFORE_VALIDATE: &[&str] = &["compute_data_type", "dim", "stride"];

/// Whether `theirs` is such a field left unset (`null` or `[]`) where ours holds the value
/// our reader inferred for it.
fn unset_before_validate(path: &str, ours: &Value, theirs: &Value) -> bool {
    let field = path.rsplit('.').next().unwrap_or(path);
    let unset = theirs.is_null() || theirs.as_array().is_some_and(Vec::is_empty);
    let set = !ours.is_null() && ours.as_array().is_none_or(|a| !a.is_empty());
    UNSET_BEFORE_VALIDATE.contains(&field) && unset && set
}

/// Each field where `ours` and `theirs` differ, as `path: ours X, cudnn-frontend Y`.
fn diff(path: &str, ours: &Value, theirs: &Value, out: &mut Vec<String>) {
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys.into_iter().filter(|k| !NOT_COMPARED.contains(&k.as_str())) {
                let sub = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => diff(&sub, x, y, out),
                    (Some(x), None) => out.push(format!("{sub}: ours {x}, cudnn-frontend absent")),
                    (None, Some(y)) => out.push(format!("{sub}: ours absent, cudnn-frontend {y}")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}[{i}]"), x, y, out);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.iter().chain(b).all(|v| v.get("tag").is_some()) => {
            let tags = |v: &[Value]| v.iter().map(|n| n["tag"].as_str().unwrap_or("?").to_string()).collect::<Vec<_>>();
            out.push(format!("{path}: ours {:?}, cudnn-frontend {:?}", tags(a), tags(b)));
        }
        (Value::Array(a), Value::Array(b)) => {
            let mark = if unset_before_validate(path, ours, theirs) { UNSET_MARK } else { "" };
            out.push(format!("{path}: ours {} items, cudnn-frontend {}{mark}", a.len(), b.len()));
        }
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        (a, b) if a == b => {}
        (a, b) => {
            let mark = if unset_before_validate(path, a, b) { UNSET_MARK } else { "" };
            out.push(format!("{path}: ours {a}, cudnn-frontend {b}{mark}"))
        }
    }
}

/// The outcome of a comparison: equal, or each differing field.
fn compare(ours: &Value, theirs: &Value) -> Result<(), String> {
    compare_with(ours, theirs, false)
}

/// [`compare`], where `allow_unset` also counts as equal a field cudnn-frontend left unset before
/// validate and ours holds inferred ([`UNSET_BEFORE_VALIDATE`]).
fn compare_with(ours: &Value, theirs: &Value, allow_unset: bool) -> Result<(), String> {
    let mut out = Vec::new();
    diff("", ours, theirs, &mut out);
    if allow_unset {
        out.retain(|d| !d.ends_with(UNSET_MARK));
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(format!("re-print differs: {}", out.join("; ")))
    }
}

/// An oracle answer as an outcome.
fn answer(a: &Value, ours: Option<&Value>) -> Result<(), String> {
    if a["ok"] != Value::Bool(true) {
        let stage = a["stage"].as_str().unwrap_or("?");
        let error = a["error"].as_str().unwrap_or("?").lines().next().unwrap_or("").trim();
        return Err(format!("{stage}: {error}"));
    }
    match ours {
        Some(ours) => compare(ours, &a["json"]),
        None => Ok(()),
    }
}

/// Checks measured outcomes against a table (or prints them as one), naming every cell that
/// changed.
fn check(table_name: &str, table: &[(&str, Expect)], measured: &[(String, Result<(), String>)]) {
    if std::env::var("CUDNN_GRAPH_ORACLE_PRINT").is_ok_and(|v| v == "1") {
        println!("const {table_name}: &[(&str, Expect)] = &[");
        for (name, outcome) in measured {
            match outcome {
                Ok(()) => println!("    ({name:?}, Expect::RoundTrips),"),
                Err(e) => println!("    ({name:?}, Expect::Fails({e:?})),"),
            }
        }
        println!("];");
    }
    let mut wrong = Vec::new();
    let names: Vec<&str> = measured.iter().map(|(n, _)| n.as_str()).collect();
    let listed: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
    if names != listed {
        wrong.push(format!("{table_name} lists {listed:?}, the files are {names:?}"));
    }
    for ((name, outcome), (_, expect)) in measured.iter().zip(table) {
        let matches = match (outcome, expect) {
            (Ok(()), Expect::RoundTrips) => true,
            (Err(e), Expect::Fails(want)) => e == want,
            _ => false,
        };
        if !matches {
            wrong.push(format!("{table_name} {name}: expected {expect:?}, measured {outcome:?}"));
        }
    }
    assert!(wrong.is_empty(), "outcomes changed (flip the cells; see the module docs):\n{}", wrong.join("\n"));
}

/// A graph of each family the structure corpus lacks (a forward RMS norm, paged attention,
/// ragged attention).
fn extra_graphs() -> Vec<(String, Graph)> {
    let mut g = GraphBuilder::new("rmsnorm_training");
    let x = g.input("x", DataType::F16, &[8, 64, 1, 1]).unwrap();
    let scale = g.input("scale", DataType::F32, &[1, 64, 1, 1]).unwrap();
    let outs = g.op("rmsnorm", &[x.into(), scale.into(), 1e-5.into()], &[("phase".into(), "training".into())]).unwrap();
    g.output(outs[0], "y", DataType::F16).unwrap();
    g.output(outs[1], "inv_var", DataType::F32).unwrap();
    let rmsnorm = g.build().unwrap();
    // Paged decode attention: K and V pools read through one page table.
    let mut g = GraphBuilder::new("sdpa_paged_decode");
    let q = g.input("q", DataType::BF16, &[4, 8, 1, 64]).unwrap();
    let k = g.input("k_pool", DataType::BF16, &[40, 2, 16, 64]).unwrap();
    let v = g.input("v_pool", DataType::BF16, &[40, 2, 16, 64]).unwrap();
    let seq_q = g.input("seq_len_q", DataType::I32, &[4, 1, 1, 1]).unwrap();
    let seq_kv = g.input("seq_len_kv", DataType::I32, &[4, 1, 1, 1]).unwrap();
    let table = g.input("page_table", DataType::I32, &[4, 1, 8, 1]).unwrap();
    let attrs =
        [("paged".into(), true.into()), ("padding_mask".into(), true.into()), ("max_seq_len_kv".into(), 128.into())];
    let o = g.op("sdpa", &[q, k, v, seq_q, seq_kv, table, table].map(Into::into), &attrs).unwrap()[0];
    g.output(o, "o", DataType::BF16).unwrap();
    let paged = g.build().unwrap();
    // Ragged prefill: packed (THD) Q, K, V and O, each with its offsets.
    let mut g = GraphBuilder::new("sdpa_ragged_prefill");
    let mut ins = Vec::new();
    for name in ["q", "k", "v"] {
        let t = g.input(name, DataType::BF16, &[3, 4, 64, 64]).unwrap();
        g.set_dim_order(t, &[0, 2, 1, 3]).unwrap();
        ins.push(t);
    }
    for name in ["seq_len_q", "seq_len_kv"] {
        ins.push(g.input(name, DataType::I32, &[3, 1, 1, 1]).unwrap());
    }
    for name in ["q", "k", "v", "o"] {
        ins.push(g.input(&format!("ragged_offset_{name}"), DataType::I32, &[4, 1, 1, 1]).unwrap());
    }
    let attrs = [("ragged".into(), true.into()), ("padding_mask".into(), true.into()), ("causal".into(), true.into())];
    let ins: Vec<cudnn_graph::Operand> = ins.into_iter().map(Into::into).collect();
    let o = g.op("sdpa", &ins, &attrs).unwrap()[0];
    let o = g.output(o, "o", DataType::BF16).unwrap();
    g.set_dim_order(o, &[0, 2, 1, 3]).unwrap();
    vec![
        ("rmsnorm_training".into(), rmsnorm),
        ("sdpa_paged_decode".into(), paged),
        ("sdpa_ragged_prefill".into(), g.build().unwrap()),
    ]
}

/// Our structural JSON of each graph of the structure corpus (those our reader reads) and of
/// [`extra_graphs`], as JSON values, sorted by name.
fn our_documents() -> Vec<(String, Value)> {
    let corpus = files("fuzz/corpus/structure", "json")
        .into_iter()
        .filter_map(|(name, path)| Some((name, structure_from_json(&std::fs::read_to_string(path).unwrap()).ok()?)));
    let mut docs: Vec<(String, Value)> = corpus
        .chain(extra_graphs())
        .map(|(name, graph)| (name, serde_json::from_str(&structure_to_json(&graph)).unwrap()))
        .collect();
    docs.sort_by(|a, b| a.0.cmp(&b.0));
    docs
}

fn ours_through_frontend(table_name: &str, table: &[(&str, Expect)]) {
    let dir = scratch(table_name);
    let docs = our_documents();
    // cudnn-frontend 1.32 reads `gid` unchecked: a document without one is undefined behaviour
    // there (type_error.302 naming a random type, or a garbage gid).
    for (name, doc) in &docs {
        assert!(doc["gid"].is_u64(), "{name}: we write no `gid`");
    }
    let paths: Vec<PathBuf> = docs
        .iter()
        .map(|(name, doc)| {
            let path = dir.join(format!("{name}.json"));
            std::fs::write(&path, serde_json::to_string_pretty(doc).unwrap()).unwrap();
            path
        })
        .collect();
    let answers = oracle("reprint", &paths);
    std::fs::remove_dir_all(&dir).ok();
    let Some(answers) = answers else { return };
    let measured: Vec<(String, Result<(), String>)> =
        docs.iter().zip(&answers).map(|((name, doc), a)| (name.clone(), answer(a, Some(doc)))).collect();
    check(table_name, table, &measured);
}

#[test]
fn our_json_through_frontend() {
    ours_through_frontend("OURS_TO_FRONTEND", OURS_TO_FRONTEND);
}

#[test]
fn frontend_json_through_ours() {
    let measured: Vec<(String, Result<(), String>)> = files("tests/fixtures/frontend", "json")
        .into_iter()
        .filter(|(name, _)| name != "manifest")
        .map(|(name, path)| {
            let text = std::fs::read_to_string(path).unwrap();
            let outcome = structure_from_json(&text).map_err(|e| e.to_string()).and_then(|graph| {
                let mut ours: Value = serde_json::from_str(&structure_to_json(&graph)).unwrap();
                let theirs: Value = serde_json::from_str(&text).unwrap();
                // `gid` numbers cudnn-frontend's graph instances (a process-wide counter, which its
                // own graph key leaves out); ours is the fingerprint's: both must be there.
                assert!(ours["gid"].is_u64() && theirs["gid"].is_u64(), "{name}: a `gid` is missing");
                ours["gid"] = theirs["gid"].clone();
                // A field cudnn-frontend's document leaves for its validate to fill in (SDPA's,
                // printed deviceless before validate) is read as validate fills it in.
                compare_with(&ours, &theirs, true)
            });
            (name, outcome)
        })
        .collect();
    check("FRONTEND_TO_OURS", FRONTEND_TO_OURS, &measured);
}

/// cudnn-frontend's SDPA document, printed before its `validate` (deviceless, SDPA cannot
/// validate), leaves the node's `compute_data_type` null and `Stats`' `dim`/`stride` empty; our
/// reader fills them in as that validate does (the context's compute type; `[b, h, s_q, 1]`,
/// packed), which is what [`FRONTEND_TO_OURS`] accepts for those fields.
#[test]
fn fields_unset_before_validate_are_read_as_validate_fills_them() {
    let path = Path::new(ROOT).join("tests/fixtures/frontend/sdpa_forward.json");
    let text = std::fs::read_to_string(path).unwrap();
    let theirs: Value = serde_json::from_str(&text).unwrap();
    assert!(theirs["nodes"][0]["compute_data_type"].is_null());
    let graph = structure_from_json(&text).unwrap();
    assert_eq!(graph.nodes[0].compute_data_type, graph.context.compute_data_type);
    let stats = graph.tensor_by_name("stats").unwrap();
    assert_eq!((stats.dims.as_slice(), stats.strides.as_slice()), (&[1, 2, 128, 1][..], &[256, 128, 1, 1][..]));
}

#[test]
fn frontend_json_through_frontend() {
    let fixtures: Vec<(String, PathBuf)> =
        files("tests/fixtures/frontend", "json").into_iter().filter(|(name, _)| name != "manifest").collect();
    let paths: Vec<PathBuf> = fixtures.iter().map(|(_, p)| p.clone()).collect();
    let Some(answers) = oracle("reprint", &paths) else { return };
    let measured: Vec<(String, Result<(), String>)> = fixtures
        .iter()
        .zip(&answers)
        .map(|((name, path), a)| {
            let written: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
            (name.clone(), answer(a, Some(&written)))
        })
        .collect();
    check("FRONTEND_TO_FRONTEND", FRONTEND_TO_FRONTEND, &measured);
}

/// A payload converted to cudnn-frontend's layout, written to a file, with our plan's workspace
/// size; or why it did not convert.
type Converted = Result<(PathBuf, usize), String>;

/// Our payload `bytes` loaded deviceless and written as cudnn-frontend's payload, with the
/// plan's workspace size.
fn to_frontend(cudnn: &cudnn_graph::backend::Cudnn, bytes: &[u8]) -> Result<(Vec<u8>, usize), String> {
    let payload = parse_payload(bytes).map_err(|e| format!("convert: {e}"))?;
    let plan = load_payload(cudnn, &payload, None, &PayloadExpect::default()).map_err(|e| format!("convert: {e}"))?;
    let bytes = write_frontend_payload(&plan, &payload.origin(), SerializeOptions::default())
        .map_err(|e| format!("convert: {e}"))?;
    Ok((bytes, plan.workspace_size()))
}

#[needs_cudnn]
#[test]
fn our_payloads_through_frontend() {
    let Some(cudnn) = common::deviceless() else { return };
    let dir = scratch("OUR_PAYLOADS_TO_FRONTEND");
    let payloads = files("fuzz/corpus/payload", "json");
    // Each payload converted to cudnn-frontend's layout (`payload::frontend`); those
    // that do not convert are measured as the conversion's error.
    let converted: Vec<(String, Converted)> = payloads
        .iter()
        .map(|(name, path)| {
            let out = to_frontend(&cudnn, &std::fs::read(path).unwrap()).map(|(bytes, workspace)| {
                let out = dir.join(format!("{name}.ubjson"));
                std::fs::write(&out, bytes).unwrap();
                (out, workspace)
            });
            (name.clone(), out)
        })
        .collect();
    let paths: Vec<PathBuf> = converted.iter().filter_map(|(_, p)| p.as_ref().ok().map(|(p, _)| p.clone())).collect();
    let answers = oracle("load", &paths);
    std::fs::remove_dir_all(&dir).ok();
    let Some(answers) = answers else { return };
    let mut answers = answers.iter();
    let measured: Vec<(String, Result<(), String>)> = converted
        .into_iter()
        .map(|(name, path)| {
            // Deserialized, and cudnn-frontend's execute asks for the workspace ours does (its
            // `fe_workspace_size` in front of cuDNN's: the workspace tensors understood).
            let outcome = match path {
                Ok((_, workspace)) => {
                    let a = answers.next().unwrap();
                    answer(a, None).and_then(|()| match a["workspace_size"].as_u64() {
                        Some(w) if w == workspace as u64 => Ok(()),
                        other => Err(format!("workspace: ours {workspace}, cudnn-frontend {other:?}")),
                    })
                }
                Err(e) => Err(e),
            };
            (name, outcome)
        })
        .collect();
    check("OUR_PAYLOADS_TO_FRONTEND", OUR_PAYLOADS_TO_FRONTEND, &measured);
}

#[needs_cudnn]
#[test]
fn frontend_payloads_through_ours() {
    let Some(cudnn) = common::deviceless() else { return };
    let mut measured = Vec::new();
    for (name, path) in files("tests/fixtures/frontend", "ubjson") {
        let bytes = std::fs::read(&path).unwrap();
        // The UBJSON codec reads cudnn-frontend's payload and writes the same bytes back.
        let canonical = canonical_ubjson(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(canonical == bytes, "{name}: UBJSON written back differs");
        // Our own payload reader refuses it (another format)...
        let ours = parse_payload(&bytes).map(|_| ()).map_err(|e| e.to_string());
        assert_eq!(ours, Err(NOT_OUR_PAYLOAD.to_string()), "{name}");
        // ...the cudnn-frontend import reads it, binds its plan JSON to the graph and loads it.
        measured.push((name, read_frontend_payload(&cudnn, &bytes, None).map(|_| ()).map_err(|e| e.to_string())));
    }
    check("FRONTEND_PAYLOADS_TO_OURS", FRONTEND_PAYLOADS_TO_OURS, &measured);
}

/// A comparison written to a float output (cudnn-frontend's `cmp_gt` fixture does so) holds 0
/// or 1: the reference computes that, and cuDNN plans it deviceless, as it plans
/// cudnn-frontend's own. An integer output stays an error naming the tensor.
#[needs_cudnn]
#[test]
fn comparisons_store_into_float_outputs() {
    let build = |out: DataType| {
        let mut g = GraphBuilder::new("gt");
        let a = g.input("a", DataType::F32, &[1, 8, 16]).unwrap();
        let b = g.input("b", DataType::F32, &[1, 8, 16]).unwrap();
        let y = g.op("cmp_gt", &[a.into(), b.into()], &[]).unwrap()[0];
        g.output(y, "y", out).map(|_| g.build().unwrap())
    };
    let graph = build(DataType::F32).unwrap();
    let a: Vec<f32> = common::random(1, 128);
    let b: Vec<f32> = common::random(2, 128);
    let out = cudnn_graph::reference::run(&graph, &[("a", a.as_slice().into()), ("b", b.as_slice().into())]).unwrap();
    let want: Vec<f64> = a.iter().zip(&b).map(|(x, y)| f64::from(u8::from(x > y))).collect();
    assert_eq!(out[0].data, want);
    assert!(want.contains(&0.0) && want.contains(&1.0));
    let e = build(DataType::I32).unwrap_err();
    assert!(matches!(e, cudnn_graph::GraphError::DeclaredType { ref tensor, .. } if tensor == "y"), "{e}");
    // A logical op's bool stays bool: cuDNN 9.19 plans none into a float output.
    let mut g = GraphBuilder::new("and");
    let a = g.input("a", DataType::F32, &[1, 8, 16]).unwrap();
    let x = g.op("cmp_gt", &[a.into(), 0.5.into()], &[]).unwrap()[0];
    let z = g.op("cmp_lt", &[a.into(), 0.75.into()], &[]).unwrap()[0];
    let y = g.op("logical_and", &[x.into(), z.into()], &[]).unwrap()[0];
    let e = g.output(y, "y", DataType::F32).unwrap_err();
    assert!(matches!(e, cudnn_graph::GraphError::DeclaredType { ref tensor, .. } if tensor == "y"), "{e}");
    let Some(cudnn) = common::deviceless() else { return };
    cudnn_graph::backend::ExecutionPlan::build(&cudnn, &graph, &Default::default()).unwrap();
}
