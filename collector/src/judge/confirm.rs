//! Confirmation runs before the gate fails (`--confirm N`): which groups of runs a
//! benchmark makes again when a measured metric looks regressed against its history or a
//! baseline, and what the report keeps of the first look.
//!
//! The rule (docs/statistics.md, "Confirmation runs"): the first look is today's
//! comparison over the `--runs` runs. Where a measured (not exact) metric of a group
//! looks regressed, the benchmark makes `N` more runs of that group, and every metric of
//! the group is judged again over all its runs, at the run's own level. Only that
//! final comparison can fail the gate. Failing needs a regression in a comparison over a
//! fixed number of runs (the first ones and `N` more) at level α, so the false alarm rate
//! of each metric is at most α, whichever metric asked for the runs and whatever the
//! first look said: the first look spends none of α, it only decides whether the runs
//! are worth making. Exact counts are repeatable, so more runs cannot change them: they
//! never ask for confirmation.

use sbs_reports::model::{
    Comparison, ComparisonMethod, Confirmation, Family, MetricId, MetricResult, Report, Variant,
    Verdict,
};

pub use crate::judge::regression::GroupOf;
use crate::judge::regression::{regressions, Reference, Regressed, Regression};

/// What makes the confirmation runs: more runs of some groups, their samples added to
/// the report's series. A run makes them with child processes
/// ([`crate::run::confirm::Confirmer`]); the judge only says which, and how many.
pub trait MoreRuns {
    /// Make `runs` more runs of each group of `groups`, and add their samples to the
    /// series of `report`.
    fn more_runs(
        &mut self,
        groups: &[GroupOf],
        runs: usize,
        report: &mut Report,
    ) -> anyhow::Result<()>;
}

/// After the gate's first look at `report` (made over `first_runs` runs): where a
/// measured metric looks regressed, `runner` makes the confirmation runs of its groups,
/// the gate judges those groups again over all their runs against the same
/// `references`, and each final comparison keeps its first look. Returns the verdict's
/// regressions after the second look, or `None` when no runs were made (the first look
/// stands).
pub fn confirm(
    report: &mut Report,
    regression: &Regression,
    references: &[Reference],
    first_runs: usize,
    runner: &mut dyn MoreRuns,
) -> anyhow::Result<Option<Vec<Regressed>>> {
    let runs = regression.confirm_runs(first_runs);
    let groups = match runs {
        0 => Vec::new(),
        _ => groups_to_confirm(report),
    };
    if groups.is_empty() {
        return Ok(None);
    }
    let first = FirstLooks::take(report, &groups);
    runner.more_runs(&groups, runs, report)?;
    regression.apply_again(references, report, &groups)?;
    // The first looks go into the final comparisons, and the regressions say so.
    first.record(report);
    Ok(Some(regressions(report)))
}

/// Whether `metric`'s comparison asks for confirmation runs: a regression of a measured
/// metric, not decided exactly. A harness's calibrated metric (`X.calibrated`, derived
/// from two series after the runs) is left out: its group is not extended.
pub fn looks_regressed(metric: &MetricResult) -> bool {
    metric
        .comparison
        .as_ref()
        .is_some_and(|c| asks_confirmation(c, metric.exact))
}

/// Whether a first look `c` of a metric (`exact`: a count) asks for confirmation runs:
/// it says regressed, of a measured metric, not by an exact comparison.
pub fn asks_confirmation(c: &Comparison, exact: bool) -> bool {
    c.verdict == Verdict::Regressed && !exact && c.method != ComparisonMethod::Exact
}

/// The groups of runs to extend: each benchmark's groups that hold a metric that
/// [`looks_regressed`], except groups with a harness's calibration (`X.empty`), whose
/// derived metrics are computed once, after the first runs, and a time profile's
/// (`profile.*`), whose functions its first run chose and whose sampler is done.
pub fn groups_to_confirm(report: &Report) -> Vec<GroupOf> {
    let mut groups: Vec<GroupOf> = Vec::new();
    for (b, bench) in report.benchmarks.iter().enumerate() {
        let made_once = |group: &str| {
            bench.metrics.iter().any(|m| {
                m.group == group
                    && MetricId::parse(&m.id).is_ok_and(|id| {
                        id.variant() == Variant::Empty || id.family() == Family::Profile
                    })
            })
        };
        for m in bench.metrics.iter().filter(|m| looks_regressed(m)) {
            let key = (b, m.group.clone());
            if m.group.is_empty() || made_once(&m.group) || groups.contains(&key) {
                continue;
            }
            groups.push(key);
        }
    }
    groups
}

/// The first look of every metric in `groups`: its comparison and its number of runs,
/// taken before the confirmation runs.
#[derive(Debug, Clone)]
pub struct FirstLooks {
    looks: Vec<(usize, String, usize, Comparison)>,
}

impl FirstLooks {
    /// The comparisons of the metrics of `groups` in `report`, as they are now.
    pub fn take(report: &Report, groups: &[GroupOf]) -> FirstLooks {
        let mut looks = Vec::new();
        for (b, group) in groups {
            let Some(bench) = report.benchmarks.get(*b) else {
                continue;
            };
            for m in bench.metrics.iter().filter(|m| &m.group == group) {
                if let Some(c) = &m.comparison {
                    looks.push((*b, m.id.clone(), m.samples.len(), c.clone()));
                }
            }
        }
        FirstLooks { looks }
    }

    /// Record in each final comparison of `report` its first look and how many runs were
    /// added, and, where either look is a regression, a note that says both, for every
    /// format.
    pub fn record(&self, report: &mut Report) {
        for (b, id, first_runs, first) in &self.looks {
            let Some(metric) = report
                .benchmarks
                .get_mut(*b)
                .and_then(|bench| bench.metrics.iter_mut().find(|m| &m.id == id))
            else {
                continue;
            };
            let added_runs = metric.samples.len().saturating_sub(*first_runs);
            let Some(last) = metric.comparison.as_mut() else {
                continue;
            };
            let confirmation = Confirmation {
                first_runs: *first_runs,
                added_runs,
                first_verdict: first.verdict,
                first_relative: first.relative,
                first_relative_ci_low: first.relative_ci_low,
                first_relative_ci_high: first.relative_ci_high,
                first_p_value: first.p_value,
            };
            // Said in every format where it matters: a regression at either look. The
            // JSON keeps every metric's first look.
            if first.verdict == Verdict::Regressed || last.verdict == Verdict::Regressed {
                metric.notes.push(confirmation.describe(last));
            }
            last.confirmation = Some(confirmation);
        }
    }
}

/// The gate of one measured metric with confirmation, over numbers only (the simulation
/// in `benches/confirm.rs` and the tests use it; a run goes through the same steps with
/// real runs): `judge` compares a series of runs with the reference; `first` is the
/// first look's runs, `more` the confirmation runs that would follow. Returns the first
/// look and, when it asked for them, the comparison over every run. The gate fails on
/// the last comparison returned.
pub fn decide<E>(
    first: &[f64],
    more: impl FnOnce() -> Vec<f64>,
    exact: bool,
    mut judge: impl FnMut(&[f64]) -> Result<Comparison, E>,
) -> Result<(Comparison, Option<Comparison>), E> {
    let look = judge(first)?;
    if !asks_confirmation(&look, exact) {
        return Ok((look, None));
    }
    let mut all = first.to_vec();
    all.extend(more());
    let last = judge(&all)?;
    Ok((look, Some(last)))
}

#[cfg(test)]
mod tests;
