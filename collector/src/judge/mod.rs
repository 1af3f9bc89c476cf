//! Judging measurements: summaries of a series, comparisons between series (Welch,
//! ANOVA, exact), thresholds and verdicts, and the regression gate that compares a run
//! with its saved history or a baseline.
pub mod busy;
pub mod compare;
pub mod confirm;
pub mod fidelity;
pub mod from_history;
pub mod growth;
pub mod headline;
pub mod looks;
pub mod pitfalls;
pub mod regression;
pub mod shape;
pub mod sources;
pub mod stats;
pub mod summary;

use sbs_reports::model::Report;

use confirm::MoreRuns;
use regression::{Reference, Regressed, Regression};

/// Judge a fresh report, every pass in its order, and return the regressions the gate
/// found:
/// 1. harnessed benchmarks: the raw metrics less the empty operation (calibration), and
///    what that says about them (dead work, constant inputs): [`pitfalls::all`];
/// 2. the regression gate against the references (a history, a baseline, or in
///    `compare` the first command);
/// 3. where a measured metric looks regressed, `more_runs` makes the confirmation runs of
///    its groups (`--confirm`; it adds their samples to the report), and the gate decides
///    again on all runs, the first look kept: [`confirm::confirm`];
/// 4. the growth fits of scans, over every run.
///
/// The caller owns the runs; the judge owns the order.
pub fn judge(
    report: &mut Report,
    regression: &Regression,
    references: &[Reference],
    confidence: f64,
    first_runs: usize,
    more_runs: &mut dyn MoreRuns,
) -> anyhow::Result<Vec<Regressed>> {
    pitfalls::all(report, confidence);
    let first = regression.first_look(references, report, first_runs)?;
    let regressions = confirm::confirm(report, regression, references, &first, more_runs)?
        .unwrap_or(first.regressions);
    growth::fit_scans(report);
    Ok(regressions)
}
