//! The series of one benchmark's runs: every metric's samples and details in run order,
//! the failed runs and the processes left behind, the instruments' notes, the runs each
//! group made; and the interval widths `--target-ci` reads from them.

use sbs_reports::model::{Family, GroupRuns};

use crate::run::instrument::{ExitKind, MetricSpec, Sample};
use crate::run::spec::TargetCi;

/// All values of one metric of one benchmark.
#[derive(Debug)]
pub(in crate::run) struct Series {
    pub(in crate::run) spec: MetricSpec,
    pub(in crate::run) group: String,
    pub(in crate::run) samples: Vec<f64>,
    /// Indices into `samples` of failed runs.
    pub(in crate::run) failed: Vec<usize>,
    pub(in crate::run) details: Vec<(String, Vec<f64>)>,
}

#[derive(Debug, Default)]
pub(in crate::run) struct Collected {
    pub(in crate::run) series: Vec<Series>,
    /// How the measured runs of the current group that failed ended (`--ignore-failure`).
    pub(in crate::run) failed: Vec<ExitKind>,
    /// Processes left behind by the benchmark's runs and killed (`pid (name)`).
    pub(in crate::run) survivors: Vec<String>,
    pub(in crate::run) warnings: Vec<String>,
    /// `(id prefix, note)` from [`Instrument::metric_notes`].
    pub(in crate::run) notes: Vec<(String, String)>,
    /// The measured runs each group made (`--target-ci` may add to some), in order.
    pub(in crate::run) group_runs: Vec<GroupRuns>,
}

impl Collected {
    /// Remember a failed run (kept by `--ignore-failure`). A run killed at the timeout
    /// measured the timeout, not the program: its time samples are left out.
    pub(in crate::run) fn note_failure(
        &mut self,
        exit: ExitKind,
        samples: Vec<Sample>,
    ) -> Vec<Sample> {
        if exit.success() {
            return samples;
        }
        self.failed.push(exit);
        if exit != ExitKind::TimedOut {
            return samples;
        }
        samples
            .into_iter()
            .filter(|s| Family::of(&s.metric.id) != Some(Family::Time))
            .collect()
    }

    /// The warning for processes the group's runs left behind, if any.
    pub(in crate::run) fn survivors_warning(&mut self, group: &str) -> Option<String> {
        let survivors = std::mem::take(&mut self.survivors);
        let first = survivors.first()?;
        Some(format!(
            "{} process(es) started by the {group} runs outlived the benchmark in a session of \
             their own (a daemon, e.g. pid {first}) and were killed; what they did after the \
             benchmark exited is not measured",
            survivors.len()
        ))
    }

    /// The warning for the failed runs of the group just finished, if any.
    pub(in crate::run) fn failures_warning(&mut self, group: &str, runs: usize) -> Option<String> {
        if self.failed.is_empty() {
            return None;
        }
        let failed = std::mem::take(&mut self.failed);
        let mut kinds: Vec<(String, usize)> = Vec::new();
        for exit in &failed {
            let what = match *exit {
                ExitKind::Code(c) => format!("exited with code {c}"),
                ExitKind::Signal(s) => nix::sys::signal::Signal::try_from(s)
                    .map(|s| format!("killed by {}", s.as_str()))
                    .unwrap_or_else(|_| format!("killed by signal {s}")),
                ExitKind::TimedOut => "timed out (time.* samples left out)".to_string(),
            };
            match kinds.iter_mut().find(|(k, _)| *k == what) {
                Some((_, n)) => *n += 1,
                None => kinds.push((what, 1)),
            }
        }
        let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
        Some(format!(
            "{} of {runs} {group} runs failed ({}); their samples are in the statistics \
             (--ignore-failure)",
            failed.len(),
            kinds.join(", ")
        ))
    }

    pub(in crate::run) fn add(
        &mut self,
        group: &str,
        run_index: usize,
        failed: bool,
        samples: Vec<Sample>,
    ) {
        for s in samples {
            let pos = match self.series.iter().position(|x| x.spec.id == s.metric.id) {
                Some(p) => p,
                None => {
                    self.series.push(Series {
                        spec: s.metric.clone(),
                        group: group.to_string(),
                        samples: Vec::new(),
                        failed: Vec::new(),
                        details: Vec::new(),
                    });
                    self.series.len() - 1
                }
            };
            let series = &mut self.series[pos];
            // Exact only if every run's value was (the heap peak of a run whose threads
            // allocated at once is not).
            series.spec.exact &= s.metric.exact;
            series.spec.bound = match (series.spec.bound, s.metric.bound) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            series.spec.range = match (series.spec.range, s.metric.range) {
                (Some(a), Some(b)) => Some(a.union(b)),
                (a, b) => a.or(b),
            };
            if failed {
                series.failed.push(series.samples.len());
            }
            series.samples.push(s.value);
            for (label, value) in s.details {
                let d = match series.details.iter().position(|(l, _)| *l == label) {
                    Some(p) => p,
                    None => {
                        // A label first seen now was 0 in the earlier runs.
                        series.details.push((label, vec![0.0; run_index]));
                        series.details.len() - 1
                    }
                };
                series.details[d].1.push(value);
            }
            let n = series.samples.len();
            for (_, values) in series.details.iter_mut() {
                values.resize(n, 0.0);
            }
        }
    }
}

/// The relative half-width of the wall-time intervals of `group` collected so far, by
/// metric id.
pub(super) fn timing_widths<'a>(
    c: &'a Collected,
    group: &str,
    confidence: f64,
) -> Vec<(&'a str, Option<f64>)> {
    c.series
        .iter()
        // Wall time (or a harness's time per operation): user and system time of a short
        // program are near 0 and relatively wide whatever the number of runs.
        .filter(|s| s.group == group && matches!(s.spec.id.as_str(), "time.wall" | "time.op"))
        .map(|s| {
            let summary =
                crate::judge::summary::summarize_metric(&s.spec.id, &s.samples, confidence);
            (s.spec.id.as_str(), summary.relative_ci_half_width())
        })
        .collect()
}

/// Whether every benchmark's timing intervals in `group` are within `target` (a group
/// without timing metrics always is).
pub(super) fn narrow_enough(
    collected: &[Collected],
    group: &str,
    target: f64,
    confidence: f64,
) -> bool {
    collected.iter().all(|c| {
        timing_widths(c, group, confidence)
            .iter()
            .all(|(_, w)| w.is_some_and(|w| w <= target))
    })
}

/// What `--target-ci` came to for one group: a note of the runs it took, or a warning
/// that `--max-runs` came first.
pub(super) fn target_warning(
    c: &Collected,
    group: &str,
    target: TargetCi,
    runs: usize,
    confidence: f64,
) -> Option<String> {
    let widths = timing_widths(c, group, confidence);
    let wide: Vec<String> = widths
        .iter()
        .filter(|(_, w)| w.is_none_or(|w| w > target.ci))
        .map(|(id, w)| match w {
            Some(w) => format!("{id} ±{:.2}%", w * 100.0),
            None => format!("{id} (no interval)"),
        })
        .collect();
    if widths.is_empty() || wide.is_empty() {
        return None;
    }
    Some(format!(
        "--target-ci {:.2}% not reached in the {group} runs after {runs} runs (--max-runs): \
         {}; the machine is too noisy for it, so raise --max-runs, quiet the machine, or count \
         instead of timing",
        target.ci * 100.0,
        wide.join(", ")
    ))
}
