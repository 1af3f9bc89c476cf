//! Two series whose runs were made in pairs (`compare` runs its commands interleaved,
//! A B A B ...; `pinpoint --metric time` runs the builds alternately): the change is
//! estimated from each pair on its own, so that what the machine did during a pair (a
//! neighbour's busy phase, a frequency change) cancels within the pair instead of widening
//! both series.
//!
//! - Each pair gives one value: the log of the ratio `ln(candidate / reference)` when
//!   every value is positive (a time, a size: noise that slows a run by a factor moves
//!   the log by a constant), otherwise the difference `candidate - reference` (a count
//!   of 0, a system time under the accounting's resolution).
//! - Their mean, with Student's t interval on `n - 1` degrees of freedom (a paired t
//!   test: `scipy.stats.ttest_rel`).
//! - When the per-pair values have outliers (a modified z-score above 3.5, from 5 pairs
//!   on: one run caught by a burst of load), the 20% trimmed mean instead, with the
//!   Tukey-McLaughlin interval (winsorized variance, `n - 2g - 1` degrees of freedom,
//!   Wilcox, *Introduction to Robust Estimation and Hypothesis Testing*, ch. 4): one wild
//!   pair can neither make nor hide a change.

use statrs::statistics::Statistics;

use super::CompareError;
use crate::judge::stats;
use crate::judge::summary::OUTLIER_Z;

/// The share of pairs trimmed from each end when the per-pair values have outliers.
pub const TRIM: f64 = 0.2;

/// What each pair's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// `ln(candidate / reference)`.
    LogRatio,
    /// `candidate - reference`.
    Difference,
}

/// The interval of the per-pair change, on its [`Scale`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairedInterval {
    /// What each pair's value is.
    pub scale: Scale,
    /// Whether the 20% trimmed mean decided (the per-pair values had outliers).
    pub trimmed: bool,
    /// Number of pairs.
    pub pairs: usize,
    /// The mean (or trimmed mean) of the per-pair values.
    pub estimate: f64,
    /// Its standard error.
    pub std_error: f64,
    /// Degrees of freedom of Student's t.
    pub df: f64,
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
    /// Two-sided p-value of "no change".
    pub p_value: f64,
}

impl PairedInterval {
    /// Whether the interval excludes zero.
    pub fn significant(&self) -> bool {
        self.low > 0.0 || self.high < 0.0
    }
}

/// The per-pair values of two series of equal length, and their scale.
pub fn per_pair(reference: &[f64], candidate: &[f64]) -> (Scale, Vec<f64>) {
    let positive = reference.iter().chain(candidate).all(|&v| v > 0.0);
    let pairs = reference.iter().zip(candidate);
    if positive {
        (Scale::LogRatio, pairs.map(|(r, c)| (c / r).ln()).collect())
    } else {
        (Scale::Difference, pairs.map(|(r, c)| c - r).collect())
    }
}

/// Whether any value's modified z-score (Iglewicz and Hoaglin, `0.6745 · |x − median| /
/// MAD`) is above [`OUTLIER_Z`]; never with fewer than 5 values or a MAD of 0.
pub fn has_outliers(values: &[f64]) -> bool {
    if values.len() < 5 {
        return false;
    }
    stats::RobustZ::of(values).is_some_and(|robust| values.iter().any(|&x| robust.z(x) > OUTLIER_Z))
}

/// The interval of the change of `candidate` against `reference`, run `i` of one paired
/// with run `i` of the other, at `confidence`. `variance_floor` is the smallest variance
/// one value of the metric can claim ([`super::Policy::variance_floor`]), carried over to
/// the per-pair values.
///
/// Errors: series of different lengths (not pairs), fewer than 2 pairs, per-pair values
/// with no variance and no floor (nothing to build an interval from; compare otherwise).
pub fn paired_interval(
    reference: &[f64],
    candidate: &[f64],
    confidence: f64,
    variance_floor: f64,
) -> Result<PairedInterval, CompareError> {
    super::welch::check_confidence(confidence)?;
    if reference.len() != candidate.len() {
        return Err(CompareError::Unpaired {
            reference: reference.len(),
            candidate: candidate.len(),
        });
    }
    let n = reference.len();
    if n < 2 {
        return Err(CompareError::TooFewSamples { n, needed: 2 });
    }
    let (scale, values) = per_pair(reference, candidate);
    // One value's floor, carried to a difference of two values (twice it) or to the
    // log of a ratio (by the delta method, relative to each side's mean).
    let floor = match scale {
        Scale::Difference => 2.0 * variance_floor,
        Scale::LogRatio => variance_floor * (reference.mean().powi(-2) + candidate.mean().powi(-2)),
    };
    let trimmed = n >= 5 && has_outliers(&values);
    // The mean of the values and the variance of one value's share in it, on df degrees
    // of freedom.
    let (estimate, var, df) = if trimmed {
        let (mean, winsorized_var, kept) = trimmed_moments(&values, TRIM);
        // Tukey-McLaughlin: the standard error of the trimmed mean is the winsorized
        // standard deviation over (1 - 2γ) √n.
        let shrink = (1.0 - 2.0 * TRIM).powi(2);
        (mean, winsorized_var.max(floor) / shrink, (kept - 1) as f64)
    } else {
        let values = values.as_slice();
        (values.mean(), values.variance().max(floor), (n - 1) as f64)
    };
    if var <= 0.0 || !var.is_finite() {
        return Err(CompareError::ZeroVariance);
    }
    let std_error = (var / n as f64).sqrt();
    let critical = stats::t_critical(df, confidence).ok_or(CompareError::ZeroVariance)?;
    let p_value = stats::t_p_value(estimate / std_error, df).ok_or(CompareError::ZeroVariance)?;
    Ok(PairedInterval {
        scale,
        trimmed,
        pairs: n,
        estimate,
        std_error,
        df,
        low: estimate - critical * std_error,
        high: estimate + critical * std_error,
        p_value,
    })
}

/// The `gamma`-trimmed mean of `values`, the sample variance of the values winsorized
/// at the same points, and how many values the trimmed mean keeps.
fn trimmed_moments(values: &[f64], gamma: f64) -> (f64, f64, usize) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let g = (gamma * n as f64).floor() as usize;
    let kept = &sorted[g..n - g];
    let (low, high) = (sorted[g], sorted[n - g - 1]);
    let winsorized: Vec<f64> = sorted.iter().map(|x| x.clamp(low, high)).collect();
    (kept.mean(), winsorized.as_slice().variance(), kept.len())
}
