//! Two series: the confidence interval of the difference of means after Welch, with
//! Student's t (Welch-Satterthwaite degrees of freedom) or the normal distribution for
//! large samples.

use crate::judge::stats;

use super::{CompareError, Moments};

/// The interval of a difference of means.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiffInterval {
    /// `mean(candidate) - mean(reference)`.
    pub difference: f64,
    /// Standard error of the difference.
    pub std_error: f64,
    /// Welch-Satterthwaite degrees of freedom.
    pub df: f64,
    /// Critical value (t or z quantile at `1 - alpha / 2`).
    pub critical: f64,
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
    /// Two-sided p-value of "no difference".
    pub p_value: f64,
    /// Confidence level of the interval.
    pub confidence: f64,
}

impl DiffInterval {
    /// Whether the interval excludes zero.
    pub fn significant(&self) -> bool {
        self.low > 0.0 || self.high < 0.0
    }
}

/// `Ok` for a confidence level strictly between 0 and 1.
pub(super) fn check_confidence(confidence: f64) -> Result<(), CompareError> {
    if confidence > 0.0 && confidence < 1.0 {
        Ok(())
    } else {
        Err(CompareError::BadConfidence(confidence))
    }
}

/// Welch-Satterthwaite degrees of freedom of the difference of two means.
///
/// Requires `n >= 2` on both sides and at least one non-zero variance.
pub fn welch_df(a: &Moments, b: &Moments) -> Result<f64, CompareError> {
    for m in [a, b] {
        if m.n < 2 {
            return Err(CompareError::TooFewSamples { n: m.n, needed: 2 });
        }
    }
    let (qa, qb) = (a.var / a.n as f64, b.var / b.n as f64);
    if qa == 0.0 && qb == 0.0 {
        return Err(CompareError::ZeroVariance);
    }
    let denominator = qa * qa / (a.n - 1) as f64 + qb * qb / (b.n - 1) as f64;
    Ok((qa + qb).powi(2) / denominator)
}

/// Welch's confidence interval for `mean(candidate) - mean(reference)`, with Student's t
/// at [`welch_df`] degrees of freedom.
pub fn welch_interval(
    reference: &Moments,
    candidate: &Moments,
    confidence: f64,
) -> Result<DiffInterval, CompareError> {
    check_confidence(confidence)?;
    let df = welch_df(reference, candidate)?;
    let std_error =
        (reference.var / reference.n as f64 + candidate.var / candidate.n as f64).sqrt();
    let difference = candidate.mean - reference.mean;
    let statistic = difference / std_error;
    // Student's t at any sample size: the normal distribution is only its limit, and
    // at n = 30 it makes the interval about 4% too narrow. df > 0 is guaranteed by
    // welch_df, so the distribution is always valid.
    let critical = stats::t_critical(df, confidence).ok_or(CompareError::ZeroVariance)?;
    let p_value = stats::t_p_value(statistic, df).ok_or(CompareError::ZeroVariance)?;
    Ok(DiffInterval {
        difference,
        std_error,
        df,
        critical,
        low: difference - critical * std_error,
        high: difference + critical * std_error,
        p_value: p_value.min(1.0),
        confidence,
    })
}
