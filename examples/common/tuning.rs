//! What the fp8 benchmarks share: a timing's figures, the best time found, and a graph timed as
//! the heuristics pick it and as autotuning across every mode picks it.

use std::time::{Duration, Instant};

use cudnn_graph::backend::{BuildOptions, Cudnn, ExecutionPlan, HeuristicMode};
use cudnn_graph::engines::{autotune, measure, AutotuneOptions, Timing};
use cudnn_graph::Graph;
use serde_json::{json, Value};

use super::json_lines::Out;

pub type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A timing's figures; `flops` where the case has them (the epilogue kernels of a split have none
/// of their own: their time counts toward the GEMM's case).
pub fn figures(t: &Timing, flops: Option<f64>) -> Value {
    json!({"gpu_ms": t.median_us * 1e-3, "gpu_ms_min": t.min_us * 1e-3, "runs": t.runs, "engine": t.tag,
           "tflops": flops.map(|f| f / (t.median_us * 1e-6) / 1e12)})
}

/// `a` with `b`'s members added.
pub fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// The best device time (µs) found for a graph and the plan that gave it.
pub struct Best {
    pub us: f64,
    pub how: String,
}

impl Best {
    /// Keeps `us` if it is the best so far.
    pub fn offer(best: &mut Option<Best>, us: f64, how: String) {
        if best.as_ref().is_none_or(|b| us < b.us) {
            *best = Some(Best { us, how });
        }
    }
}

/// Times `graph` as the heuristics pick it (row `cudnn-graph`) and autotuned across modes A, B
/// and fallback (row `cudnn-graph-autotuned`), offering both to `best`; returns the heuristics'
/// pick.
pub fn pick_and_autotune(
    out: &mut Out,
    cudnn: &Cudnn,
    case: &str,
    graph: &Graph,
    flops: Option<f64>,
    best: &mut Option<Best>,
) -> Result<ExecutionPlan> {
    let options = AutotuneOptions::default();
    let started = Instant::now();
    let pick = ExecutionPlan::build(cudnn, graph, &BuildOptions::default())?;
    let build_ms = ms(started.elapsed());
    let t = measure(cudnn, &pick, &options)?;
    out.record(
        case,
        "cudnn-graph",
        merge(figures(&t, flops), json!({"build_ms": build_ms, "parts": pick.parts().len()})),
    );
    Best::offer(best, t.median_us, format!("heuristics' pick {}", t.tag));

    let all = BuildOptions::default().modes(&[HeuristicMode::A, HeuristicMode::B, HeuristicMode::Fallback]).all_plans();
    let mut plan = ExecutionPlan::build(cudnn, graph, &all)?;
    let report = autotune(cudnn, &mut plan, &options)?;
    eprint!("{case}: {report}");
    if let Some(t) = report.timing(report.selected) {
        out.record(
            case,
            "cudnn-graph-autotuned",
            merge(figures(t, flops), json!({"built": plan.built().len(), "tune_ms": ms(report.elapsed)})),
        );
        Best::offer(best, t.median_us, format!("autotuned {}", t.tag));
    }
    Ok(pick)
}
