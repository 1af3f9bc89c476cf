//! Confirmation runs before the gate fails (`--confirm N`): which groups of runs a
//! benchmark makes again when a measured metric looks regressed against its history or a
//! baseline (what the report keeps of the first look is [`crate::judge::looks`]'s).
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
    Comparison, ComparisonMethod, Family, MetricId, MetricResult, Report, Variant, Verdict,
};

pub use crate::judge::regression::GroupOf;
use crate::judge::regression::{FirstLook, Reference, Regressed, Regression};

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

/// After the gate's `first` look at `report` ([`Regression::first_look`]): where a
/// measured metric looks regressed, `runner` makes the confirmation runs of its groups
/// (as many as the first look allows), and the gate judges those groups again over all
/// their runs against the same `references`, each final comparison keeping its first
/// look ([`Regression::second_look`]). Returns the verdict's regressions after the
/// second look, or `None` when no runs were made (the first look stands).
pub fn confirm(
    report: &mut Report,
    regression: &Regression,
    references: &[Reference],
    first: &FirstLook,
    runner: &mut dyn MoreRuns,
) -> anyhow::Result<Option<Vec<Regressed>>> {
    let groups = match first.confirm_runs {
        0 => Vec::new(),
        _ => groups_to_confirm(report),
    };
    if groups.is_empty() {
        return Ok(None);
    }
    runner.more_runs(&groups, first.confirm_runs, report)?;
    let regressed = regression.second_look(references, report, &groups, first)?;
    Ok(Some(regressed))
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
