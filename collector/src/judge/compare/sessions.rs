//! A measured metric that is repeatable within each saved session but not across
//! sessions, judged against the spread between sessions.

use sbs_reports::model::{Comparison, ComparisonMethod};
use statrs::distribution::{ContinuousCDF, StudentsT};

use super::{relative_to, verdict, CompareError, Moments, Policy};

/// A measured metric repeatable within each session but not across sessions (e.g. the
/// peak RSS of a small program, page-granular, that differs by a few pages from one
/// session to the next): each saved session's value is one observation of the
/// between-session spread, and the candidate is significant when it falls outside their
/// prediction interval `mean ± t(k-1) · s · sqrt(1 + 1/k)`.
pub(super) fn between_sessions(
    sessions: &[f64],
    candidate: f64,
    policy: &Policy,
    mut result: Comparison,
) -> Result<Comparison, CompareError> {
    let m = Moments::of(sessions).ok_or(CompareError::TooFewSamples { n: 0, needed: 2 })?;
    let k = m.n as f64;
    let se = (m.var * (1.0 + 1.0 / k)).sqrt();
    let t = StudentsT::new(0.0, 1.0, k - 1.0)
        .map_err(|_| CompareError::TooFewSamples { n: m.n, needed: 2 })?;
    let critical = t.inverse_cdf(1.0 - (1.0 - policy.confidence) / 2.0);
    let difference = candidate - m.mean;
    let (low, high) = (difference - critical * se, difference + critical * se);
    let relative = relative_to(difference, m.mean);
    result.method = ComparisonMethod::Sessions;
    result.reference = format!("{} saved sessions", m.n);
    result.reference_n = m.n;
    result.reference_mean = m.mean;
    result.difference = difference;
    result.ci_low = Some(low);
    result.ci_high = Some(high);
    result.relative = relative;
    result.relative_ci_low = relative_to(low, m.mean);
    result.relative_ci_high = relative_to(high, m.mean);
    result.confidence = policy.confidence;
    result.df = Some(k - 1.0);
    result.p_value = Some((2.0 * t.sf((difference / se).abs())).min(1.0));
    result.anova = None;
    result.verdict = verdict(low > 0.0 || high < 0.0, difference, relative, policy);
    Ok(result)
}
