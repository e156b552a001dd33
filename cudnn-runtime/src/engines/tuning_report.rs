//! What autotuning reports: each candidate's [`Timing`], each partitioning's
//! [`PartitioningTiming`], and the whole [`AutotuneReport`]. Apart from the options
//! (`tuning.rs`) so that the tuning store, which records reports and is named by the options,
//! sits between the two.

use std::fmt;
use std::time::Duration;

#[cfg(doc)]
use crate::backend::ExecutionPlan;

/// One candidate's device time.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// The part of the plan it belongs to (0 for a plan of one kernel; see
    /// [`ExecutionPlan::parts`]); its time is that part's alone.
    pub part: usize,
    /// The candidate's index ([`crate::backend::Candidate::index`]).
    pub candidate: usize,
    /// Its tag ([`crate::backend::Candidate::tag`]).
    pub tag: String,
    /// Median device time per execute, µs.
    pub median_us: f64,
    /// Fastest sample, µs per execute.
    pub min_us: f64,
    /// Executes timed (samples × executes per sample).
    pub runs: usize,
    /// Samples taken.
    pub samples: usize,
    /// Executes per sample.
    pub batch: usize,
}

impl fmt::Display for Timing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} {}: median {:.2} µs, min {:.2} µs ({} runs in {} samples)",
            self.candidate, self.tag, self.median_us, self.min_us, self.runs, self.samples
        )
    }
}

/// One partitioning of a plan as [`autotune`](fn@super::autotune) timed it.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitioningTiming {
    /// Each part's nodes ([`crate::backend::PlanPart::nodes`]), in execution order.
    pub parts: Vec<Vec<String>>,
    /// The sum of its parts' selected medians, µs; `None` where a part had no candidate that
    /// executed.
    pub median_us: Option<f64>,
    /// Every candidate of its parts that executed ([`Timing::part`]: its parts).
    pub timings: Vec<Timing>,
}

impl fmt::Display for PartitioningTiming {
    /// `2 kernels [matmul_0, mul_1 | add_2, relu_3]: 812.40 µs`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.parts.iter().map(|p| p.join(", ")).collect();
        let n = self.parts.len();
        write!(f, "{n} kernel{} [{}]: ", if n == 1 { "" } else { "s" }, parts.join(" | "))?;
        match self.median_us {
            Some(us) => write!(f, "{us:.2} µs"),
            None => write!(f, "did not execute"),
        }
    }
}

/// What [`autotune`](fn@super::autotune) found. A partitioned plan's parts are tuned one by one, each timed alone:
/// `timings` holds every part's candidates (see [`Timing::part`]), `selected_parts` and
/// `previous_parts` each part's choice, and `selected`/`previous` the first part's. For a plan
/// with [alternatives](ExecutionPlan::alternatives), those are of the partitioning kept, and
/// `partitionings` has every partitioning's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct AutotuneReport {
    /// Every candidate that executed, part by part, in build order (of the partitioning kept).
    pub timings: Vec<Timing>,
    /// Candidates that failed to execute, with why (part, candidate, error).
    pub failures: Vec<(usize, String)>,
    /// The candidate selected now (the fastest median, unless it did not beat the previous one
    /// by [`AutotuneOptions::min_gain`](super::AutotuneOptions::min_gain)) of the first part.
    pub selected: usize,
    /// The candidate that was selected before (the heuristics' pick) of the first part.
    pub previous: usize,
    /// Each part's selected candidate.
    pub selected_parts: Vec<usize>,
    /// Each part's candidate selected before.
    pub previous_parts: Vec<usize>,
    /// Every partitioning timed: the plan's own first (as it was built), then its
    /// [alternatives](ExecutionPlan::alternatives) in build order.
    pub partitionings: Vec<PartitioningTiming>,
    /// The index in `partitionings` of the one kept (the fastest, where it beats the plan's own
    /// by [`AutotuneOptions::min_gain`](super::AutotuneOptions::min_gain)), which the plan now runs.
    pub partitioning: usize,
    /// Wall time of the whole tune.
    pub elapsed: Duration,
}

impl AutotuneReport {
    /// How many candidates were timed, or tried and failed, across every partitioning: what the
    /// tune cost in measurements (a build from a tuning store's entry has no report, and times
    /// none).
    pub fn candidates_timed(&self) -> usize {
        let timed = match self.partitionings.is_empty() {
            // A report made by hand, without partitionings: its kept one's.
            true => self.timings.len(),
            false => self.partitionings.iter().map(|p| p.timings.len()).sum(),
        };
        timed + self.failures.len()
    }

    /// The timing of candidate `index` of the first part.
    pub fn timing(&self, index: usize) -> Option<&Timing> {
        self.part_timing(0, index)
    }

    /// The timing of candidate `index` of part `part`.
    pub fn part_timing(&self, part: usize, index: usize) -> Option<&Timing> {
        self.timings.iter().find(|t| t.part == part && t.candidate == index)
    }

    /// How many times faster the selected candidates are than the previous ones (≥ 1): the sum
    /// of the parts' previous medians over the sum of their selected ones.
    pub fn speedup(&self) -> Option<f64> {
        let sum = |choice: &[usize]| -> Option<f64> {
            choice.iter().enumerate().map(|(part, &c)| Some(self.part_timing(part, c)?.median_us)).sum()
        };
        Some(sum(&self.previous_parts)? / sum(&self.selected_parts)?)
    }

    /// How many times faster the partitioning kept is than the plan's own (≥ 1; 1 when that
    /// was kept): the plan's partitioning as built over the one kept, each the sum of its
    /// parts' selected medians. `None` where the plan's own did not execute.
    pub fn partitioning_speedup(&self) -> Option<f64> {
        Some(self.partitionings.first()?.median_us? / self.partitionings.get(self.partitioning)?.median_us?)
    }
}

impl fmt::Display for AutotuneReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "autotuned {} candidates in {:.0} ms:", self.timings.len(), self.elapsed.as_secs_f64() * 1e3)?;
        let parts = self.selected_parts.len();
        for part in 0..parts {
            if parts > 1 {
                writeln!(f, " part {part}:")?;
            }
            let mut sorted: Vec<&Timing> = self.timings.iter().filter(|t| t.part == part).collect();
            sorted.sort_by(|a, b| a.median_us.total_cmp(&b.median_us));
            for t in sorted {
                let chosen = |list: &[usize]| list.get(part) == Some(&t.candidate);
                let mark = match (chosen(&self.selected_parts), chosen(&self.previous_parts)) {
                    (true, true) => " (selected, heuristics' pick)",
                    (true, false) => " (selected)",
                    (false, true) => " (heuristics' pick)",
                    (false, false) => "",
                };
                writeln!(f, "  {t}{mark}")?;
            }
        }
        for (i, e) in &self.failures {
            writeln!(f, "  #{i}: failed: {e}")?;
        }
        if self.partitionings.len() > 1 {
            writeln!(f, " partitionings, each the sum of its parts' fastest:")?;
            for (i, p) in self.partitionings.iter().enumerate() {
                let mark = match (i == self.partitioning, i == 0) {
                    (true, true) => " (kept, as built)".to_string(),
                    (true, false) => match self.partitioning_speedup() {
                        Some(x) => format!(" (kept, {x:.2}× faster than as built)"),
                        None => " (kept)".to_string(),
                    },
                    (false, true) => " (as built)".to_string(),
                    (false, false) => String::new(),
                };
                writeln!(f, "  #{i} {p}{mark}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_print_fastest_first_and_compute_speedup() {
        let t = |candidate, median_us| Timing {
            part: 0,
            candidate,
            tag: format!("eng{candidate}"),
            median_us,
            min_us: median_us * 0.9,
            runs: 10,
            samples: 5,
            batch: 2,
        };
        let r = AutotuneReport {
            timings: vec![t(0, 20.0), t(3, 10.0)],
            failures: vec![(5, "boom".into())],
            selected: 3,
            previous: 0,
            selected_parts: vec![3],
            previous_parts: vec![0],
            partitionings: Vec::new(),
            partitioning: 0,
            elapsed: Duration::from_millis(12),
        };
        assert_eq!(r.speedup(), Some(2.0));
        assert_eq!(r.candidates_timed(), 3, "two timed, one failed");
        let text = r.to_string();
        let (fast, slow) = (text.find("#3 eng3").unwrap(), text.find("#0 eng0").unwrap());
        assert!(fast < slow, "{text}");
        assert!(
            text.contains("(selected)") && text.contains("(heuristics' pick)") && text.contains("#5: failed: boom")
        );
    }
}
