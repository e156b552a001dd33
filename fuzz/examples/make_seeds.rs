//! Regenerates the fuzz targets' seed corpora from real graphs, one or more per op family:
//!
//! ```text
//! LD_LIBRARY_PATH=… cargo run --manifest-path fuzz/Cargo.toml --example make_seeds
//! ```
//!
//! For each graph it writes `fuzz/corpus/structure/<name>.json` (its structural JSON),
//! `fuzz/corpus/builder/<name>.bin` (the builder program that rebuilds it, checked to rebuild the
//! same fingerprint) and, when cuDNN 9.19 plans it deviceless for the H200,
//! `fuzz/corpus/payload/<name>.json` (the plan payload with structure). Graphs are small, so that
//! the targets also run them on the CPU reference. cuDNN's plan JSON embeds pointers, so payload
//! seeds differ from run to run; the other two are byte-for-byte reproducible.
//!
//! It also writes `fuzz/corpus/macro_input/<file>-<n>.rs`: the body of every `graph!` invocation in
//! the trybuild cases (`tests/ui`) and the examples, as tokens (reproducible too).

use std::path::{Path, PathBuf};

use cudnn_graph_fuzz::program::Program;
use cudnn_runtime::backend::{BuildOptions, ExecutionPlan};
use cudnn_runtime::error::GraphError;
use cudnn_runtime::ops::AttrValue;
use cudnn_runtime::payload::plan::{write_payload, Expect, PlanOrigin, SerializeOptions};
use cudnn_runtime::serialize::structure_to_json;
use cudnn_runtime::{DataType, Graph, GraphBuilder, Operand, TensorId};

use DataType::{BF16, F16, F32, I32};

type Built = Result<Graph, GraphError>;

fn attr(name: &str, v: impl Into<AttrValue>) -> (String, AttrValue) {
    (name.to_string(), v.into())
}

fn ops(ids: &[TensorId]) -> Vec<Operand> {
    ids.iter().map(|&t| t.into()).collect()
}

fn matmul_bias_relu() -> Built {
    let mut g = GraphBuilder::new("matmul_bias_relu");
    let a = g.input("a", BF16, &[2, 8, 16])?;
    let b = g.input("b", BF16, &[2, 16, 8])?;
    let bias = g.input("bias", BF16, &[1, 1, 8])?;
    let c = g.matmul(a, b)?;
    let d = g.op("add", &[c.into(), bias.into()], &[])?[0];
    let y = g.op("relu", &[d.into()], &[attr("upper_clip", 6.0)])?[0];
    g.output(y, "y", BF16)?;
    g.build()
}

fn pointwise_chain() -> Built {
    let mut g = GraphBuilder::new("pointwise_chain");
    let x = g.input("x", F32, &[4, 32])?;
    let m = g.input("m", F32, &[1, 32])?;
    let s = g.op("mul", &[x.into(), 0.125.into()], &[])?[0];
    let e = g.op("gelu", &[s.into()], &[])?[0];
    let c = g.op("cmp_gt", &[e.into(), m.into()], &[])?[0];
    let y = g.op("binary_select", &[e.into(), x.into(), c.into()], &[])?[0];
    let y = g.op("elu", &[y.into()], &[attr("alpha", 0.5)])?[0];
    g.output(y, "y", F32)?;
    g.build()
}

fn matmul_row_sum() -> Built {
    let mut g = GraphBuilder::new("matmul_row_sum");
    let a = g.input("a", F16, &[1, 16, 32])?;
    let b = g.input("b", F16, &[1, 32, 16])?;
    let c = g.matmul(a, b)?;
    let s = g.op("reduce_sum", &[c.into()], &[attr("dims", vec![-1])])?[0];
    g.output(s, "s", F32)?;
    g.build()
}

fn layernorm_training() -> Built {
    let mut g = GraphBuilder::new("layernorm_training");
    let x = g.input("x", BF16, &[8, 64])?;
    let scale = g.input("scale", F32, &[1, 64])?;
    let bias = g.input("bias", F32, &[1, 64])?;
    let outs = g.op("layernorm", &[x.into(), scale.into(), bias.into(), 1e-5.into()], &[attr("phase", "training")])?;
    g.output(outs[0], "y", BF16)?;
    g.output(outs[1], "mean", F32)?;
    g.output(outs[2], "inv_var", F32)?;
    g.build()
}

fn rmsnorm_and_backward() -> Built {
    let mut g = GraphBuilder::new("rmsnorm_backward");
    let dy = g.input("dy", F16, &[8, 64, 1, 1])?;
    let x = g.input("x", F16, &[8, 64, 1, 1])?;
    let scale = g.input("scale", F32, &[1, 64, 1, 1])?;
    let inv_var = g.input("inv_var", F32, &[8, 1, 1, 1])?;
    let outs = g.op("rmsnorm_backward", &ops(&[dy, x, scale, inv_var]), &[attr("dbias", true)])?;
    for (t, (n, dt)) in outs.iter().zip([("dx", F16), ("dscale", F32), ("dbias", F32)]) {
        g.output(*t, n, dt)?;
    }
    g.build()
}

fn batchnorm_training() -> Built {
    let mut g = GraphBuilder::new("batchnorm_training");
    let x = g.input("x", F16, &[2, 8, 4, 4])?;
    let c = [1, 8, 1, 1];
    let [scale, bias, rm, rv] = ["scale", "bias", "rm", "rv"].map(|n| g.input(n, F32, &c));
    let ins = [x.into(), scale?.into(), bias?.into(), rm?.into(), rv?.into(), 1e-5.into(), 0.1.into()];
    let outs = g.op("batchnorm", &ins, &[])?;
    let names = [("y", F16), ("mean", F32), ("inv_var", F32), ("next_mean", F32), ("next_var", F32)];
    for (t, (n, dt)) in outs.iter().zip(names) {
        g.output(*t, n, dt)?;
    }
    g.build()
}

fn batchnorm_inference_drelu_backward() -> Built {
    let mut g = GraphBuilder::new("bn_drelu_bn_backward");
    let x = g.input("x", F16, &[2, 8, 4, 4])?;
    g.set_dim_order(x, &[0, 2, 3, 1])?;
    let dy = g.input("dy", F16, &[2, 8, 4, 4])?;
    g.set_dim_order(dy, &[0, 2, 3, 1])?;
    let c = [1, 8, 1, 1];
    let [mean, inv_var, scale, bias] = ["mean", "inv_var", "scale", "bias"].map(|n| g.input(n, F32, &c));
    let (mean, inv_var, scale, bias) = (mean?, inv_var?, scale?, bias?);
    let y = g.op("batchnorm_inference", &ops(&[x, mean, inv_var, scale, bias]), &[])?[0];
    let d = g.op("relu_bwd", &[dy.into(), y.into()], &[])?[0];
    let outs = g.op("batchnorm_backward", &ops(&[d, x, scale, mean, inv_var]), &[])?;
    let dx = g.output(outs[0], "dx", F16)?;
    g.set_dim_order(dx, &[0, 2, 3, 1])?;
    g.output(outs[1], "dscale", F32)?;
    g.output(outs[2], "dbias", F32)?;
    g.build()
}

fn instancenorm_and_layernorm_backward() -> Built {
    let mut g = GraphBuilder::new("instancenorm_layernorm_backward");
    let x = g.input("x", F32, &[2, 4, 4, 4])?;
    let s = g.input("s", F32, &[1, 4, 1, 1])?;
    let b = g.input("b", F32, &[1, 4, 1, 1])?;
    let y = g.op("instancenorm", &[x.into(), s.into(), b.into(), 1e-5.into()], &[])?[0];
    g.output(y, "y", F32)?;
    let dy = g.input("dy", F32, &[4, 16])?;
    let xl = g.input("xl", F32, &[4, 16])?;
    let sl = g.input("sl", F32, &[1, 16])?;
    let mean = g.input("mean", F32, &[4, 1])?;
    let iv = g.input("iv", F32, &[4, 1])?;
    let outs = g.op("layernorm_backward", &ops(&[dy, xl, sl, mean, iv]), &[])?;
    for (t, n) in outs.iter().zip(["dx", "dscale", "dbias"]) {
        g.output(*t, n, F32)?;
    }
    g.build()
}

fn conv_bias_relu() -> Built {
    let mut g = GraphBuilder::new("conv_bias_relu");
    let x = g.input("x", F16, &[2, 8, 6, 6])?;
    let w = g.input("w", F16, &[8, 8, 3, 3])?;
    let bias = g.input("bias", F16, &[1, 8, 1, 1])?;
    let y = g.op("conv_fprop", &[x.into(), w.into()], &[attr("padding", vec![1, 1])])?[0];
    let y = g.op("add", &[y.into(), bias.into()], &[])?[0];
    let y = g.op("relu", &[y.into()], &[])?[0];
    g.output(y, "y", F16)?;
    g.build()
}

fn conv_genstats() -> Built {
    let mut g = GraphBuilder::new("conv_genstats");
    let x = g.input("x", F16, &[2, 8, 4, 4])?;
    let w = g.input("w", F16, &[8, 8, 3, 3])?;
    let y = g.op("conv_fprop", &[x.into(), w.into()], &[attr("padding", vec![1, 1])])?[0];
    let y = g.output(y, "y", F16)?;
    // cuDNN 9.19 fuses a convolution's statistics only channels-last.
    for t in [x, w, y] {
        g.set_channels_last(t)?;
    }
    let stats = g.op("genstats", &[y.into()], &[])?;
    g.output(stats[0], "sum", F32)?;
    g.output(stats[1], "sq_sum", F32)?;
    g.build()
}

fn conv_dgrad_drelu() -> Built {
    let mut g = GraphBuilder::new("conv_dgrad_drelu");
    let dy = g.input("dy", F16, &[2, 8, 5, 5])?;
    let w = g.input("w", F16, &[8, 4, 3, 3])?;
    let x = g.input("x", F16, &[2, 4, 5, 5])?;
    let dx = g.op("conv_dgrad", &[dy.into(), w.into()], &[attr("padding", vec![1, 1])])?[0];
    let d = g.op("relu_bwd", &[dx.into(), x.into()], &[])?[0];
    let d = g.output(d, "dx", F16)?;
    // cuDNN 9.19 has no engine for this fusion NCHW.
    for t in [dy, w, x, d] {
        g.set_channels_last(t)?;
    }
    g.build()
}

fn conv_wgrad() -> Built {
    let mut g = GraphBuilder::new("conv_wgrad");
    let x = g.input("x", F16, &[2, 4, 6, 6])?;
    let dy = g.input("dy", F16, &[2, 8, 3, 3])?;
    let conv = [attr("stride", vec![2, 2]), attr("padding", vec![1, 1]), attr("filter", vec![3, 3])];
    let dw = g.op("conv_wgrad", &[x.into(), dy.into()], &conv)?[0];
    let dw = g.output(dw, "dw", F32)?;
    for t in [x, dy, dw] {
        g.set_channels_last(t)?;
    }
    g.build()
}

fn conv_3d_dilated() -> Built {
    let mut g = GraphBuilder::new("conv_3d_dilated");
    let x = g.input("x", F32, &[1, 2, 5, 5, 5])?;
    let w = g.input("w", F32, &[4, 2, 2, 2, 2])?;
    let conv = [attr("dilation", vec![2, 1, 2]), attr("stride", vec![1, 2, 1]), attr("mode", "convolution")];
    let y = g.op("conv_fprop", &[x.into(), w.into()], &conv)?[0];
    g.output(y, "y", F32)?;
    g.build()
}

fn pooling() -> Built {
    let mut g = GraphBuilder::new("pooling");
    let x = g.input("x", F16, &[2, 4, 8, 8])?;
    let pool = [attr("mode", "maxpool"), attr("window", vec![2, 2]), attr("index", true)];
    let outs = g.op("resample", &[x.into()], &pool)?;
    g.output(outs[0], "max", F16)?;
    g.output(outs[1], "index", DataType::I8)?;
    g.build()
}

fn avgpool() -> Built {
    let mut g = GraphBuilder::new("avgpool");
    let x = g.input("x", F16, &[2, 4, 8, 8])?;
    let pool = [
        attr("mode", "avgpool_exclude_padding"),
        attr("window", vec![3, 3]),
        attr("stride", vec![2, 2]),
        attr("padding", vec![1, 1]),
    ];
    let y = g.op("resample", &[x.into()], &pool)?[0];
    g.output(y, "y", F16)?;
    g.build()
}

fn reshape_transpose() -> Built {
    let mut g = GraphBuilder::new("reshape_transpose");
    let x = g.input("x", F16, &[2, 4, 6])?;
    let r = g.op("reshape", &[x.into()], &[attr("shape", vec![4, 2, 6])])?[0];
    let t = g.op("transpose", &[r.into()], &[attr("permutation", vec![2, 0, 1])])?[0];
    g.output(t, "t", F16)?;
    g.build()
}

fn transpose_matmul() -> Built {
    let mut g = GraphBuilder::new("transpose_matmul");
    let a = g.input("a", F16, &[1, 16, 8])?;
    let b = g.input("b", F16, &[1, 16, 8])?;
    let bt = g.op("transpose", &[b.into()], &[attr("permutation", vec![0, 2, 1])])?[0];
    let c = g.matmul(a, bt)?;
    g.output(c, "c", F16)?;
    g.build()
}

fn slice_matmul() -> Built {
    let mut g = GraphBuilder::new("slice_matmul");
    let a = g.input("a", F16, &[4, 16, 8])?;
    let b = g.input("b", F16, &[1, 8, 16])?;
    let s = g.op("slice", &[a.into()], &[attr("start", vec![1, 8, 0]), attr("limit", vec![3, 16, 8])])?[0];
    let c = g.matmul(s, b)?;
    g.output(c, "c", F16)?;
    g.build()
}

fn strided_slice_relu() -> Built {
    let mut g = GraphBuilder::new("strided_slice_relu");
    let x = g.input("x", F32, &[8, 16])?;
    let attrs = [attr("start", vec![0, 1]), attr("limit", vec![8, 15]), attr("step", vec![2, 3])];
    let s = g.op("slice", &[x.into()], &attrs)?[0];
    let y = g.op("relu", &[s.into()], &[])?[0];
    g.output(y, "y", F32)?;
    g.build()
}

fn conv_concat() -> Built {
    let mut g = GraphBuilder::new("conv_concat");
    let x = g.input("x", F16, &[2, 8, 4, 4])?;
    let w = g.input("w", F16, &[16, 8, 1, 1])?;
    let c = g.op("conv_fprop", &[x.into(), w.into()], &[])?[0];
    let y0 = g.input("y0", F16, &[2, 16, 4, 4])?;
    let y = g.op("concatenate", &[c.into(), y0.into()], &[attr("axis", 1), attr("in_place_index", 1)])?[0];
    let y = g.output(y, "y", F16)?;
    // The one form cuDNN 9.19 computes: channels-last (support rule `concat.fused_in_place`).
    for t in [x, w, y0, y] {
        g.set_channels_last(t)?;
    }
    g.build()
}

fn concat_three() -> Built {
    let mut g = GraphBuilder::new("concat_three");
    let a = g.input("a", F32, &[2, 3, 4])?;
    let b = g.input("b", F32, &[2, 1, 4])?;
    let c = g.input("c", F32, &[2, 2, 4])?;
    let y = g.op("concatenate", &ops(&[a, b, c]), &[attr("axis", -2)])?[0];
    g.output(y, "y", F32)?;
    g.build()
}

fn sdpa_forward(causal: bool, training: bool) -> Built {
    let name = format!("sdpa{}{}", if causal { "_causal" } else { "" }, if training { "_training" } else { "" });
    let mut g = GraphBuilder::new(name);
    let q = g.input("q", BF16, &[1, 2, 8, 16])?;
    let k = g.input("k", BF16, &[1, 1, 8, 16])?;
    let v = g.input("v", BF16, &[1, 1, 8, 16])?;
    let attrs = [attr("causal", causal), attr("training", training)];
    let outs = g.op("sdpa", &ops(&[q, k, v]), &attrs)?;
    g.output(outs[0], "o", BF16)?;
    if training {
        g.output(outs[1], "stats", F32)?;
    }
    g.build()
}

fn sdpa_bshd_window() -> Built {
    let mut g = GraphBuilder::new("sdpa_bshd_window");
    let dims = [1, 2, 8, 16];
    let mut ids = Vec::new();
    for n in ["q", "k", "v"] {
        let t = g.input(n, F16, &dims)?;
        g.set_dim_order(t, &[0, 2, 1, 3])?;
        ids.push(t);
    }
    let attrs = [attr("window", 4), attr("alignment", "bottom_right"), attr("scale", 0.25)];
    let o = g.op("sdpa", &ops(&ids), &attrs)?[0];
    let o = g.output(o, "o", F16)?;
    g.set_dim_order(o, &[0, 2, 1, 3])?;
    g.build()
}

fn sdpa_backward() -> Built {
    let mut g = GraphBuilder::new("sdpa_backward");
    let d = [1, 2, 8, 16];
    let [q, k, v, o, d_o] = ["q", "k", "v", "o", "d_o"].map(|n| g.input(n, BF16, &d));
    let stats = g.input("stats", F32, &[1, 2, 8, 1])?;
    let ins = [q?, k?, v?, o?, d_o?, stats];
    let outs = g.op("sdpa_backward", &ops(&ins), &[attr("causal", true)])?;
    for (t, n) in outs.iter().zip(["d_q", "d_k", "d_v"]) {
        g.output(*t, n, BF16)?;
    }
    g.build()
}

fn sdpa_ragged() -> Built {
    // Packed (THD) Q, K, V and O of 2 sequences of up to 8 tokens; Q and O share their offsets.
    let mut g = GraphBuilder::new("sdpa_ragged");
    let mut ids = Vec::new();
    for n in ["q", "k", "v"] {
        let t = g.input(n, BF16, &[2, 2, 8, 16])?;
        g.set_dim_order(t, &[0, 2, 1, 3])?;
        ids.push(t);
    }
    let lens = g.input("seq_len", I32, &[2, 1, 1, 1])?;
    let off_q = g.input("ragged_offset_q", I32, &[3, 1, 1, 1])?;
    let off_kv = g.input("ragged_offset_kv", I32, &[3, 1, 1, 1])?;
    ids.extend([lens, lens, off_q, off_kv, off_kv, off_q]);
    let attrs = [attr("ragged", true), attr("padding_mask", true), attr("causal", true)];
    let o = g.op("sdpa", &ops(&ids), &attrs)?[0];
    let o = g.output(o, "o", BF16)?;
    g.set_dim_order(o, &[0, 2, 1, 3])?;
    g.build()
}

fn graphs() -> Vec<(&'static str, Built)> {
    vec![
        ("matmul_bias_relu", matmul_bias_relu()),
        ("pointwise_chain", pointwise_chain()),
        ("matmul_row_sum", matmul_row_sum()),
        ("layernorm_training", layernorm_training()),
        ("rmsnorm_backward", rmsnorm_and_backward()),
        ("batchnorm_training", batchnorm_training()),
        ("bn_drelu_bn_backward", batchnorm_inference_drelu_backward()),
        ("instancenorm_layernorm_backward", instancenorm_and_layernorm_backward()),
        ("conv_bias_relu", conv_bias_relu()),
        ("conv_genstats", conv_genstats()),
        ("conv_dgrad_drelu", conv_dgrad_drelu()),
        ("conv_wgrad", conv_wgrad()),
        ("conv_3d_dilated", conv_3d_dilated()),
        ("maxpool_index", pooling()),
        ("avgpool", avgpool()),
        ("reshape_transpose", reshape_transpose()),
        ("transpose_matmul", transpose_matmul()),
        ("slice_matmul", slice_matmul()),
        ("strided_slice_relu", strided_slice_relu()),
        ("conv_concat", conv_concat()),
        ("concat_three", concat_three()),
        ("sdpa", sdpa_forward(false, false)),
        ("sdpa_causal_training", sdpa_forward(true, true)),
        ("sdpa_bshd_window", sdpa_bshd_window()),
        ("sdpa_backward", sdpa_backward()),
        ("sdpa_ragged", sdpa_ragged()),
    ]
}

/// The bodies of the `graph! { .. }` invocations in `source`, as token text: the trybuild cases
/// (accepted and refused) and the examples are every form of the DSL the project knows. A file
/// that does not lex (none should) gives none.
fn graph_bodies(source: &str) -> Vec<String> {
    use proc_macro2::{TokenStream, TokenTree};
    fn walk(stream: TokenStream, out: &mut Vec<String>) {
        let trees: Vec<TokenTree> = stream.into_iter().collect();
        for (i, tree) in trees.iter().enumerate() {
            if let TokenTree::Group(group) = tree {
                let invoked = i >= 2
                    && matches!(
                        (&trees[i - 2], &trees[i - 1]),
                        (TokenTree::Ident(name), TokenTree::Punct(bang)) if name == "graph" && bang.as_char() == '!'
                    );
                if invoked {
                    out.push(group.stream().to_string());
                } else {
                    walk(group.stream(), out);
                }
            }
        }
    }
    let mut out = Vec::new();
    if let Ok(tokens) = source.parse::<TokenStream>() {
        walk(tokens, &mut out);
    }
    out
}

/// Writes `corpus/macro_input/`: every `graph!` body of `tests/ui/*/` and `examples/`.
fn macro_seeds(repo: &Path, corpus: &Path) -> Result<usize, String> {
    let mut files = Vec::new();
    for dir in ["tests/ui/pass", "tests/ui/fail", "tests/ui/fail-build", "examples"] {
        let entries = std::fs::read_dir(repo.join(dir)).map_err(|e| format!("{dir}: {e}"))?;
        for entry in entries {
            let path = entry.map_err(|e| format!("{dir}: {e}"))?.path();
            if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut written = 0;
    for path in files {
        let source = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("graph");
        for (n, body) in graph_bodies(&source).into_iter().enumerate() {
            write(&corpus.join("macro_input"), &format!("{stem}-{n}.rs"), body.as_bytes())?;
            written += 1;
        }
    }
    Ok(written)
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

fn run() -> Result<(), String> {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let seeds = macro_seeds(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."), &corpus)?;
    println!("macro_input: {seeds} graph! bodies");
    let cudnn = cudnn_runtime::backend::Cudnn::deviceless(cudnn_graph_fuzz::H200_DEVPROP)
        .map_err(|e| format!("payload seeds need cuDNN 9.19 on LD_LIBRARY_PATH: {e}"))?;
    for (name, graph) in graphs() {
        let graph = graph.map_err(|e| format!("{name}: {e}"))?;
        let ran = cudnn_graph_fuzz::check_graph(&graph);
        write(&corpus.join("structure"), &format!("{name}.json"), structure_to_json(&graph).as_bytes())?;

        let program = Program::of_graph(&graph).map_err(|e| format!("{name}: {e}"))?;
        let bytes = program.encode().map_err(|e| format!("{name}: {e}"))?;
        let decoded = Program::decode(&bytes);
        if decoded != program {
            return Err(format!("{name}: the program does not decode as written"));
        }
        let rebuilt = decoded.build().map_err(|e| format!("{name}: the program does not rebuild: {e}"))?;
        if rebuilt.fingerprint() != graph.fingerprint() {
            return Err(format!("{name}: the program rebuilds another graph"));
        }
        write(&corpus.join("builder"), &format!("{name}.bin"), &bytes)?;

        let planned = match ExecutionPlan::build(&cudnn, &graph, &BuildOptions::default()) {
            Ok(plan) => {
                let options = SerializeOptions { structure: true };
                let bytes = write_payload(&plan, &PlanOrigin::of(&cudnn), options, &Expect::default())
                    .map_err(|e| format!("{name}: payload: {e}"))?;
                write(&corpus.join("payload"), &format!("{name}.json"), &bytes)?;
                format!("planned ({})", plan.selected())
            }
            Err(e) => format!("not planned: {}", e.to_string().lines().next().unwrap_or_default()),
        };
        println!("{name}: reference {}, {planned}", if ran { "ran" } else { "skipped (large)" });
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("make_seeds: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
