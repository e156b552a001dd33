//! Plan payloads in both modes: structure + plan, and plan only.
//!
//! ```text
//! cargo run --example serialize_roundtrip                    # structural JSON; payloads if libcudnn loads (deviceless)
//! cargo run --example serialize_roundtrip -- --write DIR     # write deviceless H200 payloads to DIR (for --gpu --read DIR)
//! cargo run --release --example serialize_roundtrip -- --gpu [--read DIR]
//! ```
//!
//! With `--gpu`: builds online, executes, writes a plan-only payload, loads it back, executes
//! again and compares, and times build against load. With `--read DIR` it also loads the payload
//! that `--write` compiled on a machine without a GPU and executes it.

use std::time::Instant;

use cudnn_graph::graph;
use cudnn_graph::serialize::structure_to_json;
use half::bf16;

graph! {
    /// y = relu(a · b + bias) · 0.5
    pub ScaledMlp<const N: usize, const K: usize, dyn M>(
        a: bf16[1, M, K],
        b: bf16[1, K, N],
        bias: bf16[1, 1, N],
    ) -> (y: bf16[1, M, N]) {
        y = mul(relu(add(matmul(a, b), bias)), 0.5);
    }
}

const M: usize = 256;
const N: usize = 128;
const K: usize = 64;
type Graph = ScaledMlp<N, K>;
const DEVPROP: &str = include_str!("../tests/fixtures/h200-devprop.json");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().position(|a| a == name).map(|i| args.get(i + 1).cloned());
    let g = Graph::new(M);
    let structure = structure_to_json(&g.graph()?);
    println!("structural JSON: {} bytes, fingerprint of the type {:#018x}", structure.len(), Graph::FINGERPRINT);
    if args.iter().any(|a| a == "--gpu") {
        return gpu(&g, flag("--read").flatten());
    }
    deviceless(&g, flag("--write").flatten())
}

#[cfg(feature = "cudnn")]
fn deviceless(g: &Graph, write: Option<String>) -> Result<(), Box<dyn std::error::Error>> {
    use cudnn_graph::backend::{BuildOptions, Cudnn};
    use cudnn_graph::payload::plan::SerializeOptions;
    let cudnn = match Cudnn::deviceless(DEVPROP) {
        Ok(c) => c,
        Err(e) => {
            println!("payloads need libcudnn (deviceless planning): {e}");
            return Ok(());
        }
    };
    let t = Instant::now();
    let plan = g.build(&cudnn, &BuildOptions::default())?;
    let build_ms = t.elapsed().as_secs_f64() * 1e3;
    let full = plan.serialize(SerializeOptions { structure: true })?;
    let lean = plan.serialize(SerializeOptions { structure: false })?;
    let t = Instant::now();
    let back = Graph::deserialize(&cudnn, &lean)?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    println!(
        "deviceless H200 plan made in {build_ms:.1} ms ({}); payload {} B with structure, {} B plan-only; loaded back in {load_ms:.2} ms (variant pack {:?})",
        plan.plan().selected(),
        full.len(),
        lean.len(),
        back.plan().layout().uids()
    );
    if let Some(dir) = write {
        std::fs::create_dir_all(&dir)?;
        std::fs::write(format!("{dir}/ScaledMlp.plan-only.json"), &lean)?;
        std::fs::write(format!("{dir}/ScaledMlp.structure.json"), &full)?;
        println!("wrote {dir}/ScaledMlp.{{plan-only,structure}}.json");
    }
    Ok(())
}

#[cfg(feature = "cudnn")]
fn gpu(g: &Graph, read: Option<String>) -> Result<(), Box<dyn std::error::Error>> {
    use cudnn_graph::backend::cuda_context;
    use cudnn_graph::backend::{BuildOptions, Cudnn};
    use cudnn_graph::payload::plan::SerializeOptions;
    let stream = cuda_context(0)?.default_stream();
    let cudnn = Cudnn::new(stream.clone())?;
    let fill = |seed: u64, n: usize| -> Vec<bf16> {
        (0..n).map(|i| bf16::from_f64(((i as u64 * 2654435761 + seed * 97) % 1999) as f64 / 1000.0 - 1.0)).collect()
    };
    let (a, b, bias) = (fill(1, M * K), fill(2, K * N), fill(3, N));
    let want = g.reference(ScaledMlpInputs { a: &a, b: &b, bias: &bias })?.y;
    let (a_d, b_d, bias_d) = (stream.clone_htod(&a)?, stream.clone_htod(&b)?, stream.clone_htod(&bias)?);
    let run = |plan: &ScaledMlpPlan<N, K>| -> Result<Vec<bf16>, Box<dyn std::error::Error>> {
        let mut y = stream.clone_htod(&vec![bf16::NAN; M * N])?;
        let mut ws = stream.alloc_zeros::<u8>(plan.workspace_size().max(1))?;
        plan.execute(&cudnn, ScaledMlpArgs { a: &a_d, b: &b_d, bias: &bias_d, y: &mut y }, Some(&mut ws))?;
        Ok(stream.clone_dtoh(&y)?)
    };
    let max_err =
        |got: &[bf16]| got.iter().zip(&want).map(|(g, w)| (g.to_f64() - w.to_f64()).abs()).fold(0.0, f64::max);

    let t = Instant::now();
    let plan = g.build(&cudnn, &BuildOptions::default())?;
    let build_ms = t.elapsed().as_secs_f64() * 1e3;
    let first = run(&plan)?;
    let t = Instant::now();
    let bytes = plan.serialize(SerializeOptions { structure: false })?;
    let serialize_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut loads = Vec::new();
    let mut loaded = None;
    for _ in 0..5 {
        let t = Instant::now();
        loaded = Some(Graph::deserialize(&cudnn, &bytes)?);
        loads.push(t.elapsed().as_secs_f64() * 1e3);
    }
    loads.sort_by(f64::total_cmp);
    let loaded = loaded.ok_or("no load")?;
    let second = run(&loaded)?;
    println!(
        "online: build {build_ms:.1} ms, serialize {serialize_ms:.2} ms ({} B plan-only), deserialize median of 5 {:.2} ms; max |err| vs reference {:.3e} before, {:.3e} after; outputs identical: {}",
        bytes.len(),
        loads[2],
        max_err(&first),
        max_err(&second),
        first == second
    );
    if let Some(dir) = read {
        let bytes = std::fs::read(format!("{dir}/ScaledMlp.plan-only.json"))?;
        let aot = Graph::deserialize(&cudnn, &bytes)?;
        let out = run(&aot)?;
        println!(
            "plan compiled deviceless on a CPU-only machine: max |err| vs reference {:.3e}; identical to the online plan's output: {}",
            max_err(&out),
            out == first
        );
    }
    Ok(())
}

#[cfg(not(feature = "cudnn"))]
fn deviceless(_: &Graph, _: Option<String>) -> Result<(), Box<dyn std::error::Error>> {
    println!("this build has no cuDNN backend: plan payloads need the default `cudnn` feature");
    Ok(())
}

#[cfg(not(feature = "cudnn"))]
fn gpu(_: &Graph, _: Option<String>) -> Result<(), Box<dyn std::error::Error>> {
    Err("this build has no cuDNN backend: build with the default `cudnn` feature".into())
}
