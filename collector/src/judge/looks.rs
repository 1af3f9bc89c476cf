//! What a report keeps of the gate's first look at a run when confirmation runs follow
//! (`--confirm`, [`crate::judge::confirm`]): each metric's first comparison and number of
//! runs, taken before the runs and recorded in its final comparison after them.

use sbs_reports::model::{Comparison, Confirmation, Report, Verdict};

/// The first look of every compared metric of a report: its comparison and its number
/// of runs, taken before the confirmation runs.
#[derive(Debug, Clone, Default)]
pub struct FirstLooks {
    /// (benchmark index, metric id, group, runs, comparison).
    looks: Vec<(usize, String, String, usize, Comparison)>,
}

impl FirstLooks {
    /// The comparisons of the metrics of `report`, as they are now.
    pub fn take(report: &Report) -> FirstLooks {
        let mut looks = Vec::new();
        for (b, bench) in report.benchmarks.iter().enumerate() {
            for m in &bench.metrics {
                if let Some(c) = &m.comparison {
                    let look = (b, m.id.clone(), m.group.clone(), m.samples.len(), c.clone());
                    looks.push(look);
                }
            }
        }
        FirstLooks { looks }
    }

    /// Record in the final comparison of each metric of `groups` (benchmark index, group)
    /// in `report` its first look and how many runs were added, and, where either look is
    /// a regression, a note that says both, for every format.
    pub fn record(&self, report: &mut Report, groups: &[(usize, String)]) {
        for (b, group) in groups {
            let looks = self.looks.iter().filter(|l| l.0 == *b && l.2 == *group);
            for (b, id, _, first_runs, first) in looks {
                record_one(report, *b, id, *first_runs, first);
            }
        }
    }
}

/// Record in the final comparison of metric `id` of benchmark `b` its first look.
fn record_one(report: &mut Report, b: usize, id: &str, first_runs: usize, first: &Comparison) {
    let Some(metric) = report
        .benchmarks
        .get_mut(b)
        .and_then(|bench| bench.metrics.iter_mut().find(|m| m.id == id))
    else {
        return;
    };
    let added_runs = metric.samples.len().saturating_sub(first_runs);
    let Some(last) = metric.comparison.as_mut() else {
        return;
    };
    let confirmation = Confirmation {
        first_runs,
        added_runs,
        first_verdict: first.verdict,
        first_relative: first.relative,
        first_relative_ci_low: first.relative_ci_low,
        first_relative_ci_high: first.relative_ci_high,
        first_p_value: first.p_value,
    };
    // Said in every format where it matters: a regression at either look. The JSON keeps
    // every metric's first look.
    if first.verdict == Verdict::Regressed || last.verdict == Verdict::Regressed {
        metric.notes.push(confirmation.describe(last));
    }
    last.confirmation = Some(confirmation);
}
