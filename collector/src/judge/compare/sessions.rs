//! The gate of a run with saved history: this run against the saved sessions of the same
//! benchmark, one decision, so no multiple-comparison adjustment, and sharper the more
//! sessions there are.
//!
//! - One usable saved session: Welch (or exact) against it.
//! - Sessions that agree with each other (a one-way ANOVA over them does not reject equal
//!   means at the run's level): their samples are one reference sample, and Welch compares
//!   this run with it, so every saved run adds to the reference.
//! - Sessions that disagree (drift between sessions beyond their within-session noise, or
//!   values repeatable within a session but not across): each session's mean is one
//!   observation of where a session lands, and this run is significant when its mean falls
//!   outside their prediction interval `mean ± t(k-1) · s · sqrt(1 + 1/k)`.
//! - Exact counts: against the latest session (a count that changed in the history is
//!   judged against its newest value).

use crate::judge::stats;
use sbs_reports::model::{Comparison, ComparisonMethod};

use super::{
    anova, compare, relative_to, unjudged, validate, verdict, zero_variance, CompareError, Moments,
    Policy, Series,
};

/// Judge `candidate` against `saved` sessions, oldest first (at least one).
pub fn against_sessions(
    saved: &[Series<'_>],
    candidate: Series<'_>,
    policy: &Policy,
) -> Result<Comparison, CompareError> {
    let mut all = saved.to_vec();
    all.push(candidate);
    validate(&all, all.len().saturating_sub(2), all.len() - 1, policy)?;
    let usable = |s: &Series<'_>| s.samples.len() >= 2 || (policy.exact && !s.samples.is_empty());
    let kept: Vec<Series<'_>> = saved.iter().filter(|s| usable(s)).copied().collect();
    let latest = *kept.last().unwrap_or(&saved[saved.len() - 1]);
    if kept.len() < 2 || !usable(&candidate) {
        return compare(&[latest, candidate], 0, 1, policy);
    }
    let all_zero = kept.iter().chain([&candidate]).all(|s| {
        policy
            .moments(s.samples)
            .is_some_and(|m| zero_variance(&m, policy.exact))
    });
    let means: Vec<f64> = kept
        .iter()
        .filter_map(|s| Moments::of(s.samples).map(|m| m.mean))
        .collect();
    if all_zero {
        let agree = means.iter().all(|&v| v == means[0]);
        if policy.exact || agree {
            return compare(&[latest, candidate], 0, 1, policy);
        }
        return prediction_interval(&means, candidate, policy);
    }
    let groups: Vec<&[f64]> = kept.iter().map(|s| s.samples).collect();
    let Ok(test) = anova(&groups, policy.variance_floor()) else {
        // Single-run sessions of an exact count: no within-session variance to test
        // the sessions' agreement with; the latest is the reference.
        return compare(&[latest, candidate], 0, 1, policy);
    };
    if test.p_value < 1.0 - policy.confidence {
        return prediction_interval(&means, candidate, policy);
    }
    let pooled: Vec<f64> = groups.concat();
    let label = format!("{} saved sessions, pooled", kept.len());
    let reference = Series {
        label: &label,
        samples: &pooled,
    };
    compare(&[reference, candidate], 0, 1, policy)
}

/// `candidate`'s mean against the prediction interval of the session means.
fn prediction_interval(
    sessions: &[f64],
    candidate: Series<'_>,
    policy: &Policy,
) -> Result<Comparison, CompareError> {
    let m = Moments::of(sessions).ok_or(CompareError::TooFewSamples { n: 0, needed: 2 })?;
    let cand =
        Moments::of(candidate.samples).ok_or(CompareError::TooFewSamples { n: 0, needed: 1 })?;
    let label = format!("{} saved sessions", m.n);
    let mut result = unjudged(&label, &m, &cand, policy);
    let k = m.n as f64;
    let se = (m.var * (1.0 + 1.0 / k)).sqrt();
    let critical = stats::t_critical(k - 1.0, policy.confidence)
        .ok_or(CompareError::TooFewSamples { n: m.n, needed: 2 })?;
    let difference = result.difference;
    let (low, high) = (difference - critical * se, difference + critical * se);
    result.method = ComparisonMethod::Sessions;
    result.ci_low = Some(low);
    result.ci_high = Some(high);
    result.relative_ci_low = relative_to(low, m.mean);
    result.relative_ci_high = relative_to(high, m.mean);
    result.df = Some(k - 1.0);
    result.p_value = stats::t_p_value(difference / se, k - 1.0);
    result.verdict = verdict(low > 0.0 || high < 0.0, difference, result.relative, policy);
    Ok(result)
}
