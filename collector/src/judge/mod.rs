//! Judging measurements: summaries of a series, comparisons between series (Welch,
//! ANOVA, exact), thresholds and verdicts, and the regression gate that compares a run
//! with its saved history or a baseline.
pub mod compare;
pub mod confirm;
pub mod from_history;
pub mod growth;
pub mod headline;
pub mod pitfalls;
pub mod regression;
pub mod shape;
pub mod sources;
pub mod stats;
pub mod summary;

use sbs_reports::model::Report;

use confirm::{groups_to_confirm, FirstLooks, GroupOf};
use regression::{Reference, Regressed, Regression};

/// Judge a fresh report, every pass in its order, and return the regressions the gate
/// found:
/// 1. harnessed benchmarks: the raw metrics less the empty operation (calibration), and
///    what that says about them (dead work, constant inputs);
/// 2. the regression gate against the references (a history, a baseline, or in
///    `compare` the first command);
/// 3. where a measured metric looks regressed, `more_runs` makes the confirmation runs of
///    its groups (`--confirm`; it adds their samples to the report), and the gate decides
///    again on all runs, the first look kept;
/// 4. the growth fits of scans, over every run.
///
/// The caller owns the runs; the judge owns the order.
pub fn judge(
    report: &mut Report,
    regression: &Regression,
    references: &[Reference],
    confidence: f64,
    first_runs: usize,
    more_runs: impl FnOnce(&[GroupOf], usize, &mut Report) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Regressed>> {
    pitfalls::calibrate(report, confidence);
    pitfalls::dead_work(report);
    pitfalls::constant_inputs(report);
    let mut regressions = regression.apply(references, report)?;
    let confirm_runs = regression.confirm_runs(first_runs);
    let groups = match confirm_runs {
        0 => Vec::new(),
        _ => groups_to_confirm(report),
    };
    if !groups.is_empty() {
        let first = FirstLooks::take(report, &groups);
        more_runs(&groups, confirm_runs, report)?;
        regression.apply_again(references, report, &groups)?;
        // The first looks go into the final comparisons, and the regressions say so.
        first.record(report);
        regressions = regression::regressions(report);
    }
    growth::fit_scans(report);
    Ok(regressions)
}
