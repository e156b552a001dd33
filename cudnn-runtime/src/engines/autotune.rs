//! Autotuning: time every built candidate of a plan on the GPU and select the fastest.
//!
//! Heuristics rank engine configs by a model; the fastest one for a given shape on a given GPU is
//! found by running them. [`autotune`] takes a plan built with
//! [`BuildOptions::build_all`](crate::backend::BuildOptions::build_all), allocates scratch device
//! buffers for every I/O tensor itself (non-zero data, see [`Fill`]), and for each built
//! candidate: warms up, then takes samples — each the CUDA-event time of a batch of back-to-back
//! executes sized to about [`AutotuneOptions::sample_us`], divided by the batch — until the median
//! is stable (the median of the last `min_samples` samples within `tolerance` of the overall
//! median) or `max_samples` or the time budget is reached. The fastest median is selected when
//! it beats the plan's own choice by [`AutotuneOptions::min_gain`] (else the own choice stays);
//! the whole table comes back as data ([`AutotuneReport`]).
//!
//! A plan built with [`Fusion::Measure`](crate::backend::Fusion::Measure) has other
//! partitionings besides its own ([`ExecutionPlan::alternatives`]): each is tuned the same way,
//! part by part, timed as the sum of its parts' selected medians, and the fastest partitioning is
//! kept where it beats the plan's own by `min_gain` ([`AutotuneReport::partitionings`],
//! [`AutotuneReport::partitioning`]).
//!
//! ```no_run
//! # use cudnn_runtime as cudnn_graph;
//! use cudnn_graph::backend::{BuildOptions, Cudnn, ExecutionPlan, HeuristicMode};
//! use cudnn_graph::engines::{autotune, AutotuneOptions};
//! # fn graph() -> cudnn_graph::Graph { unimplemented!() }
//! let stream = cudnn_graph::backend::cuda_context(0)?.default_stream();
//! let cudnn = Cudnn::new(stream)?;
//! let options = BuildOptions::default().modes(&[HeuristicMode::A, HeuristicMode::B]).all_plans();
//! let mut plan = ExecutionPlan::build(&cudnn, &graph(), &options)?;
//! let tune = AutotuneOptions::default()
//!     .on_progress(|p| eprintln!("{}/{} #{}: {:?} µs", p.done, p.total, p.candidate, p.timing.map(|t| t.median_us)));
//! let report = autotune(&cudnn, &mut plan, &tune)?;
//! println!("{report}");
//! assert_eq!(plan.selected().index, report.selected);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::time::Instant;

use super::measure::{online_stream, time_selected, Scratch};
use super::store::{build_tuned, TunedBuild, TuningFile, TuningWarning};
use super::tuning::{AutotuneOptions, AutotuneProgress};
use super::tuning_report::{AutotuneReport, PartitioningTiming, Timing};
use crate::backend::{BackendError, BuildOptions, Cudnn, ExecutionPlan};
use crate::payload::plan::Expect;
use crate::Graph;

/// Times every built candidate of `plan` on `cudnn`'s stream and selects the fastest (by median)
/// where it beats the plan's own choice by [`AutotuneOptions::min_gain`]; returns the table. A
/// partitioned plan is tuned part by part, each candidate timed running its part alone. A plan
/// with [alternatives](ExecutionPlan::alternatives) ([`Fusion::Measure`]) has each partitioning
/// tuned so, and keeps the one whose parts' selected medians sum least (by `min_gain` against
/// its own):
/// [`ExecutionPlan::parts`] are then that one's (an epilogue cut off says
/// [`CutReason::MeasuredFaster`] with the times), and so are its executes and payloads; the
/// others are dropped. Scratch buffers for every I/O tensor and the workspace are allocated here
/// and freed before returning. A candidate that fails to execute is listed in
/// [`AutotuneReport::failures`]; when no partitioning has every part with a candidate that
/// executes, the error lists them all and the selection is left as it was.
///
/// [`Fusion::Measure`]: crate::backend::Fusion::Measure
/// [`CutReason::MeasuredFaster`]: crate::backend::CutReason::MeasuredFaster
pub fn autotune(
    cudnn: &Cudnn,
    plan: &mut ExecutionPlan,
    options: &AutotuneOptions,
) -> Result<AutotuneReport, BackendError> {
    let began = Instant::now();
    let _span = tracing::debug_span!(
        "autotune",
        graph = %plan.graph().name,
        parts = plan.parts().len(),
        partitionings = plan.alternatives().len() + 1
    )
    .entered();
    let stream = online_stream(cudnn, plan)?;
    let scratch = Scratch::new(&stream, plan, options.fill)?;
    let tuned =
        tune(plan, options, began, &mut |plan, part| time_selected(cudnn, &stream, plan, part, &scratch, options));
    // Nothing may still be running on the scratch buffers when they are freed.
    let synced = stream.synchronize().map_err(BackendError::driver("cuStreamSynchronize"));
    drop(scratch);
    synced?;
    tuned
}

/// `graph` built with every candidate (`options` with `build_all`; [`Fusion::Measure`] in
/// `options` makes the partitionings too) and [`autotune`]d with `tuning` on `cudnn`'s GPU,
/// through the tuning store `tuning` names ([`AutotuneOptions::tuning_store`]; by default the
/// one at the path `CUDNN_GRAPH_TUNING_STORE` gives, if set):
///
/// - a **hit** (an entry for this graph, binding, SM and cuDNN version) builds the recorded plan,
///   one engine config per part, and times nothing ([`TuneSource::Store`], no report);
/// - a **miss** measures as [`autotune`] does and records what it kept into the store (the file
///   written atomically, merged with what other processes wrote meanwhile);
/// - an entry only for another SM or cuDNN is never used ([`TuningWarning::Foreign`]), one whose
///   plan no longer builds is measured again and replaced ([`TuningWarning::Stale`]), a store
///   that cannot be opened or written is measured without ([`TuningWarning::NotOpened`],
///   [`TuningWarning::NotSaved`]): every warning is in [`TunedBuild::warnings`] (and traced).
///
/// Options that name an engine or candidate bypass the store, and [`Fusion::Single`] takes
/// only an entry of one kernel. Without a store this is [`ExecutionPlan::build`] then
/// [`autotune`]. A deviceless `cudnn` cannot measure: a miss is an error (before any candidate is
/// compiled), a hit is not.
///
/// ```no_run
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::backend::{BuildOptions, Cudnn};
/// use cudnn_graph::engines::{build_autotuned, AutotuneOptions, TuneSource, TuningFile};
/// use cudnn_graph::payload::plan::Expect;
/// # fn graph() -> cudnn_graph::Graph { unimplemented!() }
/// let cudnn = Cudnn::new(cudnn_graph::backend::cuda_context(0)?.default_stream())?;
/// let tuning = AutotuneOptions::default().tuning_store(TuningFile::open("/var/cache/cudnn-graph/tuning.json")?);
/// let options = BuildOptions::default().measure_partitionings();
/// let built = build_autotuned(&cudnn, &graph(), &Expect::default(), &options, &tuning)?;
/// for w in &built.warnings {
///     eprintln!("{w}");
/// }
/// // The first process measures; every later one (here or where the file is copied) does not.
/// assert!(built.source == TuneSource::Store || built.report.is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`Fusion::Measure`]: crate::backend::Fusion::Measure
/// [`Fusion::Single`]: crate::backend::Fusion::Single
/// [`TuneSource::Store`]: super::TuneSource::Store
pub fn build_autotuned(
    cudnn: &Cudnn,
    graph: &Graph,
    expect: &Expect,
    options: &BuildOptions,
    tuning: &AutotuneOptions,
) -> crate::Result<TunedBuild> {
    build_autotuned_with(cudnn, graph, expect, options, tuning, true, |plan| autotune(cudnn, plan, tuning))
}

/// [`build_autotuned`] with `tune` in place of [`autotune`] on a miss (tests inject times), which
/// times on `cudnn`'s GPU where `on_gpu` says so.
pub(super) fn build_autotuned_with(
    cudnn: &Cudnn,
    graph: &Graph,
    expect: &Expect,
    options: &BuildOptions,
    tuning: &AutotuneOptions,
    on_gpu: bool,
    tune: impl FnOnce(&mut ExecutionPlan) -> Result<AutotuneReport, BackendError>,
) -> crate::Result<TunedBuild> {
    let (store, mut warnings) = match tuning.store() {
        Ok(store) => (store, Vec::new()),
        Err(e) => {
            let path = std::env::var_os(super::store::TUNING_STORE_ENV).unwrap_or_default().into();
            let w = TuningWarning::NotOpened { path, reason: e.to_string() };
            tracing::warn!("{w}");
            (None, vec![w])
        }
    };
    let mut built = build_tuned(store.as_deref(), cudnn, graph, expect, options, on_gpu, tune)?;
    warnings.append(&mut built.warnings);
    built.warnings = warnings;
    Ok(built)
}

impl TuningFile {
    /// The autotuned plan of `graph` on `cudnn`: from the store's entry of its key where there is
    /// one (built with [`ExecutionPlan::build_chosen`], nothing timed), else built with every
    /// candidate (`options` with `build_all`; [`Fusion::Measure`] in `options` makes the
    /// partitionings too), autotuned with `tuning` on `cudnn`'s GPU and recorded. An entry for
    /// another SM or cuDNN only is never used ([`TuningWarning::Foreign`]); one that no longer
    /// builds is tuned again and replaced ([`TuningWarning::Stale`]). Options that name an engine
    /// or candidate bypass the store, and [`Fusion::Single`] takes only an entry of one kernel.
    /// This store is consulted whatever [`AutotuneOptions::tuning_store`] says;
    /// [`build_autotuned`] is the same through the store the options name.
    ///
    /// ```no_run
    /// # use cudnn_runtime as cudnn_graph;
    /// use cudnn_graph::backend::{BuildOptions, Cudnn};
    /// use cudnn_graph::engines::{AutotuneOptions, TuneSource, TuningFile};
    /// use cudnn_graph::payload::plan::Expect;
    /// # fn graph() -> cudnn_graph::Graph { unimplemented!() }
    /// let store = TuningFile::open("/var/cache/cudnn-graph/tuning.json")?;
    /// let cudnn = Cudnn::new(cudnn_graph::backend::cuda_context(0)?.default_stream())?;
    /// let options = BuildOptions::default().measure_partitionings();
    /// let built = store.plan(&cudnn, &graph(), &Expect::default(), &options, &AutotuneOptions::default())?;
    /// for w in &built.warnings {
    ///     eprintln!("{w}");
    /// }
    /// println!("{:?}: {}", built.source, built.plan.selected());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// [`Fusion::Measure`]: crate::backend::Fusion::Measure
    /// [`Fusion::Single`]: crate::backend::Fusion::Single
    pub fn plan(
        &self,
        cudnn: &Cudnn,
        graph: &Graph,
        expect: &Expect,
        options: &BuildOptions,
        tuning: &AutotuneOptions,
    ) -> crate::Result<TunedBuild> {
        build_tuned(Some(self), cudnn, graph, expect, options, true, |plan| autotune(cudnn, plan, tuning))
    }
}

/// How [`tune`] times the selected candidates of a plan: part `Some(k)` alone, or (`None`) the
/// whole plan of one part. [`autotune`] times on the GPU; tests inject times.
pub(super) type TimeFn<'a> = dyn FnMut(&ExecutionPlan, Option<usize>) -> Result<Timing, BackendError> + 'a;

/// One partitioning tuned: its figures, each part's choice and the choice before.
struct Tuned {
    figures: PartitioningTiming,
    selected: Vec<usize>,
    previous: Vec<usize>,
}

/// [`autotune`]'s choices, with `time` timing the plan's selection: every partitioning of
/// `plan` (its own, then each alternative swapped in and back) tuned part by part, then the
/// fastest kept.
pub(super) fn tune(
    plan: &mut ExecutionPlan,
    options: &AutotuneOptions,
    began: Instant,
    time: &mut TimeFn<'_>,
) -> Result<AutotuneReport, BackendError> {
    let built = |parts: &[crate::backend::PlanPart]| parts.iter().map(|p| p.built().len()).sum::<usize>();
    let total = built(plan.parts()) + plan.alternatives().iter().map(|a| built(a.parts())).sum::<usize>();
    let count = plan.alternatives().len() + 1;
    let (mut done, mut failures) = (0, Vec::new());
    let mut tuned: Vec<Tuned> = Vec::with_capacity(count);
    for index in 0..count {
        // Partitioning `index` runs while it is tuned; the plan's own is back after.
        if index > 0 {
            plan.swap_alternative(index - 1);
        }
        let result = tune_parts(plan, options, time, &mut done, total, &mut failures);
        if index > 0 {
            plan.swap_alternative(index - 1);
        }
        let t = result?;
        tracing::debug!(partitioning = index, figures = %t.figures, "partitioning timed");
        tuned.push(t);
    }
    let kept = (0..count)
        .filter_map(|i| Some((i, tuned[i].figures.median_us?)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, us)| match tuned[0].figures.median_us {
            // The plan's own partitioning stays unless beaten by `min_gain`.
            Some(own) if !options.beats(us, own) => 0,
            _ => i,
        });
    let Some(kept) = kept else {
        return Err(BackendError::Autotune { graph: plan.graph().name.clone(), failures });
    };
    let measured = (kept > 0).then(|| {
        let us = tuned[kept].figures.median_us.unwrap_or(f64::NAN);
        let kernels = tuned[kept].figures.parts.len();
        match tuned[0].figures.median_us {
            Some(own) => {
                format!("{us:.1} µs in {kernels} kernels against {own:.1} µs as built ({:.2}× faster)", own / us)
            }
            None => format!("{us:.1} µs in {kernels} kernels; the plan as built did not execute"),
        }
    });
    if kept > 0 {
        plan.swap_alternative(kept - 1);
    }
    tracing::debug!(
        partitioning = kept,
        kernels = tuned[kept].figures.parts.len(),
        times = measured.as_deref().unwrap_or("the plan as built is kept"),
        "partitioning kept"
    );
    plan.keep_partitioning(measured);
    let partitionings: Vec<PartitioningTiming> = tuned.iter().map(|t| t.figures.clone()).collect();
    let Tuned { figures, selected, previous } = tuned.swap_remove(kept);
    tracing::debug!(selected = ?selected, previous = ?previous, partitioning = kept, elapsed_us = crate::micros(began.elapsed()), "autotuned");
    Ok(AutotuneReport {
        timings: figures.timings,
        failures,
        selected: selected[0],
        previous: previous[0],
        selected_parts: selected,
        previous_parts: previous,
        partitionings,
        partitioning: kept,
        elapsed: began.elapsed(),
    })
}

/// Tunes the parts of the partitioning `plan` runs now, each selecting its fastest candidate.
/// Where a part has no candidate that executes, the partitioning's selections are restored and
/// its `median_us` is `None`.
fn tune_parts(
    plan: &mut ExecutionPlan,
    options: &AutotuneOptions,
    time: &mut TimeFn<'_>,
    done: &mut usize,
    total: usize,
    failures: &mut Vec<(usize, String)>,
) -> Result<Tuned, BackendError> {
    let previous: Vec<usize> = plan.parts().iter().map(|p| p.selected().index).collect();
    let parts = plan.parts().iter().map(|p| p.nodes().to_vec()).collect();
    let partitioned = plan.is_partitioned();
    let mut timings: Vec<Timing> = Vec::new();
    let mut selected = previous.clone();
    let mut sum = Some(0.0);
    for (part, choice) in selected.iter_mut().enumerate() {
        let first = timings.len();
        for candidate in plan.parts()[part].built() {
            plan.select_in(part, candidate)?;
            match time(plan, partitioned.then_some(part)) {
                Ok(t) => {
                    tracing::debug!(part, candidate, tag = %t.tag, median_us = t.median_us, runs = t.runs, "candidate timed");
                    timings.push(t)
                }
                Err(e) => {
                    tracing::debug!(part, candidate, error = %e, "candidate failed to execute");
                    failures.push((candidate, e.to_string()))
                }
            }
            *done += 1;
            if let Some(progress) = &options.progress {
                let timing = timings.last().filter(|t: &&Timing| t.part == part && t.candidate == candidate);
                progress(&AutotuneProgress { done: *done, total, timing, candidate });
            }
        }
        let timed = &timings[first..];
        let fastest = timed.iter().min_by(|a, b| a.median_us.total_cmp(&b.median_us));
        // The plan's own choice stays unless beaten by `min_gain`.
        let own = timed.iter().find(|t| t.candidate == previous[part]);
        let fastest = match (fastest, own) {
            (Some(f), Some(o)) if !options.beats(f.median_us, o.median_us) => Some(o),
            (f, _) => f,
        };
        match fastest {
            Some(t) => {
                *choice = t.candidate;
                sum = sum.map(|s| s + t.median_us);
                plan.select_in(part, t.candidate)?;
            }
            None => {
                sum = None;
                break;
            }
        }
    }
    if sum.is_none() {
        for (part, &c) in previous.iter().enumerate() {
            plan.select_in(part, c)?;
        }
        selected.clone_from(&previous);
    }
    Ok(Tuned { figures: PartitioningTiming { parts, median_us: sum, timings }, selected, previous })
}

/// [`Fusion::Measure`](crate::backend::Fusion::Measure) plans, deviceless on the H200's
/// properties, tuned with injected times instead of the GPU's: the partitioning kept is the one
/// the times say, what the plan then runs (emulated part by part on the CPU reference) differs
/// from the fused graph only by the intermediate's bf16 rounding, and a payload keeps it.
#[cfg(test)]
mod measured {
    use super::*;
    use crate::array::Array;
    use crate::backend::{BuildOptions, CutReason, ExecutionPlan};
    use crate::ops::PointwiseMode;
    use crate::payload::plan::{read_payload, write_payload, Expect, PlanOrigin, SerializeOptions};
    use crate::rng::SplitMix64;
    use crate::DataType;
    use crate::{Graph, GraphBuilder};

    use crate::test_support::deviceless;

    /// `relu((a·b)·da·db + bias)` → bf16: e4m3 A `[1, 128, 64]`, B column-major, as
    /// `examples/bench_fp8.rs` (smaller).
    fn fp8_bias_relu() -> Graph {
        let (m, n, k) = (128, 128, 64);
        let mut g = GraphBuilder::new("fp8_bias_relu");
        let a = g.input("a", DataType::Fp8E4M3, &[1, m, k]).unwrap();
        let b = g.input("b", DataType::Fp8E4M3, &[1, k, n]).unwrap();
        g.set_dim_order(b, &[0, 2, 1]).unwrap();
        let da = g.input("descale_a", DataType::F32, &[1, 1, 1]).unwrap();
        let db = g.input("descale_b", DataType::F32, &[1, 1, 1]).unwrap();
        let bias = g.input("bias", DataType::BF16, &[1, 1, n]).unwrap();
        let c = g.matmul(a, b).unwrap();
        let c = g.pointwise(PointwiseMode::Mul, &[c.into(), da.into()]).unwrap();
        let c = g.pointwise(PointwiseMode::Mul, &[c.into(), db.into()]).unwrap();
        let c = g.pointwise(PointwiseMode::Add, &[c.into(), bias.into()]).unwrap();
        let y = g.pointwise(PointwiseMode::Relu, &[c.into()]).unwrap();
        g.output(y, "y", DataType::BF16).unwrap();
        g.build().unwrap()
    }

    fn ops(plan: &ExecutionPlan, part: usize) -> Vec<&'static str> {
        plan.parts()[part].graph().nodes.iter().map(|n| n.op.call_name()).collect()
    }

    /// Injected times, µs, by a part's ops: `fused` for the whole graph in one kernel; `gemm.0`
    /// for a kernel with the matmul plus `gemm.1` per other op of it; `pass.0` for an elementwise
    /// kernel plus `pass.1` per op.
    fn timer(
        fused: f64,
        gemm: (f64, f64),
        pass: (f64, f64),
    ) -> impl FnMut(&ExecutionPlan, Option<usize>) -> Result<Timing, BackendError> {
        move |plan, part| {
            let k = part.unwrap_or(0);
            let ops = ops(plan, k);
            let n = ops.len() as f64;
            let median_us = match (plan.parts().len(), ops.contains(&"matmul")) {
                (1, _) => fused,
                (_, true) => gemm.0 + gemm.1 * (n - 1.0),
                (_, false) => pass.0 + pass.1 * n,
            };
            Ok(injected(plan, k, median_us))
        }
    }

    /// An injected timing of part `part`'s selected candidate.
    fn injected(plan: &ExecutionPlan, part: usize, median_us: f64) -> Timing {
        Timing {
            part,
            candidate: plan.parts()[part].selected().index,
            tag: "injected".into(),
            median_us,
            min_us: median_us,
            runs: 1,
            samples: 1,
            batch: 1,
        }
    }

    fn tuned(cudnn: &Cudnn, graph: &Graph, time: &mut TimeFn<'_>) -> (ExecutionPlan, AutotuneReport) {
        let options = BuildOptions::default().measure_partitionings();
        let mut plan = ExecutionPlan::build(cudnn, graph, &options).unwrap();
        assert_eq!(plan.alternatives().len(), 2);
        let report = tune(&mut plan, &AutotuneOptions::default(), Instant::now(), time).unwrap();
        println!("{report}");
        (plan, report)
    }

    fn inputs(graph: &Graph) -> Vec<Array> {
        let mut rng = SplitMix64::new(20);
        graph
            .inputs()
            .iter()
            .map(|id| {
                let t = graph.tensor(*id);
                // Descales near 1/8, the rest of either sign (relu clips about half).
                let mut a = Array::from_fn(&t.dims, |_| match t.element_count() {
                    1 => rng.nonzero(0.1, 0.2).abs(),
                    _ => rng.nonzero(0.25, 2.0),
                });
                a.round_to(t.data_type);
                a
            })
            .collect()
    }

    fn bf16_bias_gelu() -> Graph {
        crate::test_support::bf16_bias_gelu("bf16_bias_gelu")
    }

    /// The input of part 1 that the graph does not take: the tensor its cut materializes.
    fn crossing(plan: &ExecutionPlan) -> crate::ir::Tensor {
        let (graph, sub) = (plan.graph(), plan.parts()[1].graph());
        let named = |name: &str| graph.inputs().iter().any(|id| graph.tensor(*id).name == name);
        sub.inputs().into_iter().map(|id| sub.tensor(id).clone()).find(|t| !named(&t.name)).unwrap()
    }

    /// The largest difference between two outputs, relative to the largest magnitude of `want`.
    fn relative(got: &Array, want: &Array) -> f64 {
        let scale = want.data.iter().fold(0f64, |m, v| m.max(v.abs()));
        got.data.iter().zip(&want.data).map(|(a, b)| (a - b).abs()).fold(0f64, f64::max) / scale
    }

    /// The graph on the CPU reference, with its tensor `name` stored as `dtype`.
    fn reference(graph: &Graph, inputs: &[Array], retype: Option<(&str, DataType)>) -> Vec<Array> {
        let mut graph = graph.clone();
        if let Some((name, dtype)) = retype {
            let t = graph.tensors.iter_mut().find(|t| t.name == name).unwrap();
            t.data_type = dtype;
        }
        let mut values = vec![None; graph.tensors.len()];
        for (id, a) in graph.inputs().iter().zip(inputs) {
            values[id.0] = Some(a.clone());
        }
        crate::reference::run_arrays(&graph, values).unwrap()
    }

    #[needs_cudnn]
    #[test]
    fn the_fused_plan_is_kept_when_it_times_fastest() {
        let Some(cudnn) = deviceless() else { return };
        let (plan, report) = tuned(&cudnn, &fp8_bias_relu(), &mut timer(800.0, (700.0, 20.0), (100.0, 20.0)));
        assert_eq!(report.partitioning, 0);
        assert_eq!(report.partitionings.len(), 3);
        assert_eq!(report.partitioning_speedup(), Some(1.0));
        assert_eq!(plan.parts().len(), 1);
        assert!(plan.alternatives().is_empty(), "autotuning drops what it does not keep");
        // [matmul, mul, mul | add, relu]: 700 + 40 + 100 + 40; [matmul, mul, mul, add | relu]: 760 + 120.
        assert_eq!(report.partitionings[1].median_us, Some(880.0));
        assert_eq!(report.partitionings[2].median_us, Some(880.0));
        // Split 1.5 % faster (985 µs against 1000): less than `min_gain`, so the fused plan stays.
        let (plan, report) = tuned(&cudnn, &fp8_bias_relu(), &mut timer(1000.0, (790.0, 10.0), (155.0, 10.0)));
        assert_eq!(report.partitionings[1].median_us, Some(985.0));
        assert_eq!((report.partitioning, plan.parts().len()), (0, 1), "{report}");
    }

    #[needs_cudnn]
    #[test]
    fn the_partitioning_the_times_favour_is_kept_executed_and_saved() {
        let Some(cudnn) = deviceless() else { return };
        let graph = fp8_bias_relu();
        let input = inputs(&graph);
        let fused = reference(&graph, &input, None);
        // Each cut point wins under some times: where an epilogue op costs the GEMM's kernel more
        // than it costs an elementwise pass, the earlier cut; where less, the later.
        let early = ["matmul", "mul", "mul"].as_slice();
        let late = ["matmul", "mul", "mul", "add"].as_slice();
        // Rounding `(a·b)·da·db` to bf16 before the bias changes results; rounding the biased
        // sum before relu does not (relu of a bf16 value is one, and the output is bf16 anyway).
        for (in_gemm, in_pass, first, changes) in [(30.0, 5.0, early, true), (5.0, 30.0, late, false)] {
            let (plan, report) =
                tuned(&cudnn, &fp8_bias_relu(), &mut timer(1000.0, (700.0, in_gemm), (100.0, in_pass)));
            let kept = report.partitionings[report.partitioning].clone();
            let best = report.partitionings.iter().filter_map(|p| p.median_us).fold(f64::INFINITY, f64::min);
            assert_eq!(kept.median_us, Some(best), "{report}");
            assert!(report.partitioning > 0);
            assert_eq!(ops(&plan, 0), first);
            assert_eq!(plan.parts().len(), 2);
            assert!(plan.alternatives().is_empty());
            let speedup = report.partitioning_speedup().unwrap();
            assert!((speedup - 1000.0 / best).abs() < 1e-9);
            let cut = plan.parts()[1].cut().unwrap();
            let CutReason::MeasuredFaster(times) = &cut.reason else { panic!("{cut}") };
            assert!(times.contains(&format!("{best:.1} µs in 2 kernels against 1000.0 µs")), "{times}");
            assert!(cut.to_string().contains("measured faster"), "{cut}");
            assert!(plan.to_dot().contains("measured faster"));
            assert!(report.to_string().contains("(kept, "), "{report}");

            // The intermediate crosses in bf16 (the output's type), and that rounding is all that
            // differs from the fused graph.
            let crossing = crossing(&plan);
            assert_eq!(crossing.data_type, DataType::BF16);
            let emulated = plan.emulate(&input).unwrap();
            // (Compared as data: a failing `assert_eq!` on arrays prints all of them.)
            let rounded = reference(&graph, &input, Some((&crossing.name, DataType::BF16)));
            assert!(emulated[0].data == rounded[0].data, "the parts differ from the graph with a bf16 intermediate");
            let worst = relative(&emulated[0], &fused[0]);
            println!("kept {:?}: {worst:.2e} from the fused graph", kept.parts);
            assert_eq!(worst > 0.0, changes, "{worst}");
            assert!(worst < 1e-2, "{worst}");

            // A payload keeps the partitioning, its reason and its types.
            let (origin, options) = (PlanOrigin::of(&cudnn), SerializeOptions::default());
            let bytes = write_payload(&plan, &origin, options, &Expect::default()).unwrap();
            let (loaded, payload) = read_payload(&cudnn, &bytes, None, &Expect::default()).unwrap();
            assert_eq!(payload.plan.parts[1].measured.as_deref(), Some(times.as_str()));
            assert_eq!(payload.plan.parts[1].refused, None);
            let nodes = |p: &ExecutionPlan| p.parts().iter().map(|p| p.nodes().to_vec()).collect::<Vec<_>>();
            assert_eq!(nodes(&loaded), nodes(&plan));
            assert_eq!(loaded.parts()[1].cut(), plan.parts()[1].cut());
            assert_eq!(loaded.arena_bytes(), plan.arena_bytes());
            assert_eq!(loaded.emulate(&input).unwrap(), emulated);
            let again = write_payload(&loaded, &origin, options, &Expect::default()).unwrap();
            // Written again, it records the same parts and cuts (cuDNN's JSON embeds pointers).
            let cuts = |parts: &[crate::payload::plan::PartRecord]| {
                parts.iter().map(|p| (p.nodes.clone(), p.refused.clone(), p.measured.clone())).collect::<Vec<_>>()
            };
            let again = crate::payload::plan::parse_payload(&again).unwrap();
            assert_eq!(cuts(&again.plan.parts), cuts(&payload.plan.parts));
        }
    }

    /// A candidate replaces the plan's own choice only when it times `min_gain` faster: near-ties
    /// are noise, and the heuristics' order is the better guess then.
    #[needs_cudnn]
    #[test]
    fn the_plans_own_choice_stays_unless_beaten_by_min_gain() {
        let Some(cudnn) = deviceless() else { return };
        let graph = bf16_bias_gelu();
        let options = BuildOptions::default().all_plans();
        for (gain, min_gain, switches) in [(0.005, 0.02, false), (0.03, 0.02, true), (0.005, 0.0, true)] {
            let mut plan = ExecutionPlan::build(&cudnn, &graph, &options).unwrap();
            let built = plan.built();
            assert!(built.len() >= 2, "{built:?}");
            let own = plan.selected().index;
            let rival = *built.iter().find(|&&c| c != own).unwrap();
            // Every candidate 100 µs, but the rival `gain` faster.
            let mut time = |plan: &ExecutionPlan, part: Option<usize>| -> Result<Timing, BackendError> {
                let fast = plan.parts()[0].selected().index == rival;
                Ok(injected(plan, part.unwrap_or(0), if fast { 100.0 * (1.0 - gain) } else { 100.0 }))
            };
            let tuning = AutotuneOptions { min_gain, ..AutotuneOptions::default() };
            let report = tune(&mut plan, &tuning, Instant::now(), &mut time).unwrap();
            let want = if switches { rival } else { own };
            assert_eq!((report.selected, plan.selected().index), (want, want), "gain {gain}, min_gain {min_gain}");
        }
    }

    /// bf16 matmul + bias + gelu, cut after the matmul: the parts compute the graph with its
    /// matmul output rounded to bf16 (the output's type) and nothing else changed.
    #[needs_cudnn]
    #[test]
    fn a_gelu_epilogue_cut_off_rounds_only_its_intermediate() {
        let Some(cudnn) = deviceless() else { return };
        let graph = bf16_bias_gelu();
        let (plan, report) = tuned(&cudnn, &graph, &mut timer(1000.0, (700.0, 30.0), (100.0, 5.0)));
        assert_eq!(report.partitionings.len(), 3);
        assert_eq!((ops(&plan, 0), ops(&plan, 1)), (vec!["matmul"], vec!["add", "gelu"]));
        let crossing = crossing(&plan);
        assert_eq!(crossing.data_type, DataType::BF16);
        let input = inputs(&graph);
        let emulated = plan.emulate(&input).unwrap();
        let rounded = reference(&graph, &input, Some((&crossing.name, DataType::BF16)));
        assert!(emulated[0].data == rounded[0].data, "the parts differ from the graph with a bf16 intermediate");
        let worst = relative(&emulated[0], &reference(&graph, &input, None)[0]);
        println!("{worst:.2e} from the fused graph");
        assert!(worst > 0.0 && worst < 2e-2, "{worst}");
    }

    #[needs_cudnn]
    #[test]
    fn a_partitioning_that_fails_to_execute_is_not_kept() {
        let Some(cudnn) = deviceless() else { return };
        // The fused plan fails; the cuts time as in the favouring case above.
        let mut inner = timer(0.0, (700.0, 30.0), (100.0, 5.0));
        let mut time = |plan: &ExecutionPlan, part: Option<usize>| {
            if plan.parts().len() == 1 {
                return Err(BackendError::NotOnline { what: "an injected failure" });
            }
            inner(plan, part)
        };
        let (plan, report) = tuned(&cudnn, &fp8_bias_relu(), &mut time);
        assert_eq!(report.partitionings[0].median_us, None);
        assert!(report.partitioning > 0 && plan.parts().len() == 2);
        assert_eq!(report.partitioning_speedup(), None);
        assert_eq!(report.failures.len(), 1);
        let CutReason::MeasuredFaster(times) = &plan.parts()[1].cut().unwrap().reason else { panic!() };
        assert!(times.contains("the plan as built did not execute"), "{times}");
        // Nothing executes: an error, and the plan runs what it ran before.
        let options = BuildOptions::default().measure_partitionings();
        let mut plan = ExecutionPlan::build(&cudnn, &fp8_bias_relu(), &options).unwrap();
        let mut fail =
            |_: &ExecutionPlan, _: Option<usize>| Err(BackendError::NotOnline { what: "an injected failure" });
        let e = tune(&mut plan, &AutotuneOptions::default(), Instant::now(), &mut fail).unwrap_err();
        assert!(matches!(e, BackendError::Autotune { .. }), "{e}");
        assert_eq!(plan.parts().len(), 1);
        assert_eq!(plan.alternatives().len(), 2);
    }
}
