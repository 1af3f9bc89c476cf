//! Comparisons between series of samples, after Georges, Buytaert and Eeckhout,
//! "Statistically Rigorous Java Performance Evaluation" (OOPSLA 2007).
//!
//! Pure functions over numbers: no I/O, no knowledge of where the numbers came from.
//!
//! - Two series: the confidence interval of the difference of means (Welch), Student t with
//!   the Welch-Satterthwaite degrees of freedom at every sample size. A difference is
//!   significant when the interval excludes zero.
//! - Two series whose runs were made in pairs (`compare`, `pinpoint --metric time`):
//!   [`compare_paired`], the interval of the change over the pairs ([`paired_interval`]:
//!   log ratios, a t interval, the trimmed mean when they have outliers).
//! - Three or more series (`compare` with several commands): each later command against
//!   the first, at the level adjusted for the `k - 1` comparisons that decide something
//!   (Bonferroni); a one-way ANOVA and its post-hoc pairs are reported as context.
//! - Zero variance on every side (exact counters): equal is "no change", anything else an
//!   exact change judged by the threshold alone, with no test and no p-value.
//! - A run against its saved history: [`against_sessions`], one decision against the
//!   pooled history or the prediction interval of the session means.
//! - A practical threshold: a significant change whose relative size is within it is
//!   reported ([`Verdict::BelowThreshold`]) but never fails. For every metric, smaller is
//!   better.

mod anova;
mod paired;
#[cfg(test)]
mod paired_tests;
mod sessions;
#[cfg(test)]
mod tests;
mod thresholds;
mod verdict;
mod welch;

use sbs_reports::model::{AnovaSummary, Comparison, ComparisonMethod, PairDifference, Verdict};

pub use crate::judge::summary::Moments;
pub use anova::{anova, bonferroni_pairs};
pub use paired::{paired_interval, Scale};
pub use sessions::against_sessions;
pub use thresholds::Thresholds;
pub use verdict::verdict;
pub use welch::welch_interval;

use anova::zero_variance;
use welch::check_confidence;

/// Label of the current run's series in comparisons.
pub const THIS_RUN: &str = "this run";

/// Name of the post-hoc test reported with an ANOVA.
pub const POST_HOC: &str = "bonferroni-welch";

/// Default practical threshold, as a fraction (2%).
pub const DEFAULT_THRESHOLD: f64 = 0.02;

/// Why a comparison could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompareError {
    /// A series is too small for the requested computation.
    #[error("a series has {n} sample(s) but this computation needs at least {needed}: measure more runs (--runs)")]
    TooFewSamples {
        /// Samples in the offending series.
        n: usize,
        /// Samples needed.
        needed: usize,
    },
    /// Fewer series than the method needs.
    #[error("{got} series given, at least {needed} needed")]
    TooFewSeries {
        /// Series given.
        got: usize,
        /// Series needed.
        needed: usize,
    },
    /// A sample is NaN or infinite.
    #[error("series `{label}` contains a non-finite value ({value}); the instrument that produced it is broken, please report it")]
    NonFinite {
        /// Label of the series.
        label: String,
        /// The value.
        value: f64,
    },
    /// The confidence level is not in (0, 1).
    #[error("confidence level {0} is outside (0, 1); use e.g. 0.95")]
    BadConfidence(f64),
    /// Welch's interval is undefined when both variances are zero.
    #[error("both series have zero variance: compare them exactly instead")]
    ZeroVariance,
    /// Paired series of different lengths.
    #[error("paired series have {reference} and {candidate} samples: runs can be paired only one for one")]
    Unpaired {
        /// Samples of the reference.
        reference: usize,
        /// Samples of the candidate.
        candidate: usize,
    },
    /// An index does not name a series.
    #[error("series index {index} out of range ({len} series)")]
    BadIndex {
        /// The index.
        index: usize,
        /// Number of series.
        len: usize,
    },
}

/// A labelled series of samples.
#[derive(Debug, Clone, Copy)]
pub struct Series<'a> {
    /// Shown in reports, e.g. `baseline main` or `history 2026-11-21T23:40:01Z`.
    pub label: &'a str,
    /// The raw samples.
    pub samples: &'a [f64],
}

/// What the comparison needs to know besides the numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// Confidence level, e.g. 0.95.
    pub confidence: f64,
    /// Practical threshold, as a fraction (0.02 = 2%).
    pub threshold: f64,
    /// Absolute practical threshold in the metric's unit (0: none): a change within it
    /// never fails, whatever its relative size (a count going from 10 to 11).
    pub threshold_absolute: f64,
    /// Whether the metric is an exact count (one sample suffices, zero variance expected).
    pub exact: bool,
    /// The resolution of a measured metric, in its unit (a page for a resident size, the
    /// accounting granularity for CPU times), 0 when it has none worth counting. Samples
    /// that happen to be equal do not make a measurement exact: its variance is taken as
    /// at least that of rounding to the resolution, `resolution² / 12`.
    pub resolution: f64,
}

impl Policy {
    /// The smallest variance a series of this metric can honestly claim.
    pub fn variance_floor(&self) -> f64 {
        if self.exact {
            0.0
        } else {
            self.resolution * self.resolution / 12.0
        }
    }

    /// The moments of `samples`, their variance floored at [`Policy::variance_floor`].
    pub fn moments(&self, samples: &[f64]) -> Option<Moments> {
        Moments::of(samples).map(|m| Moments {
            var: m.var.max(self.variance_floor()),
            ..m
        })
    }
}

/// Compare series `candidate` with series `reference` among `series`.
///
/// Two usable series: Welch (or exact). Three or more: one-way ANOVA over all of them, and
/// the verdict comes from the post-hoc pair (reference, candidate), significant only if
/// the ANOVA is. Series with fewer than 2 samples of a measured (not exact) metric are left
/// out; if that hits the reference or the candidate, the verdict is
/// [`Verdict::Inconclusive`].
pub fn compare(
    series: &[Series<'_>],
    reference: usize,
    candidate: usize,
    policy: &Policy,
) -> Result<Comparison, CompareError> {
    compare_with(series, reference, candidate, policy, false)
}

/// [`compare`] for series whose runs were made in pairs, run `i` of every series in the
/// same round (`compare`'s interleaved runs): the change of the candidate is estimated
/// from its pairs with the reference ([`paired_interval`]), the method `paired_t` or
/// `paired_trimmed`. Series of different lengths, or pairs that give no interval (no
/// variance at all), are compared as [`compare`] does.
pub fn compare_paired(
    series: &[Series<'_>],
    reference: usize,
    candidate: usize,
    policy: &Policy,
) -> Result<Comparison, CompareError> {
    compare_with(series, reference, candidate, policy, true)
}

fn compare_with(
    series: &[Series<'_>],
    reference: usize,
    candidate: usize,
    policy: &Policy,
    paired: bool,
) -> Result<Comparison, CompareError> {
    validate(series, reference, candidate, policy)?;
    let ref_m = policy
        .moments(series[reference].samples)
        .ok_or(CompareError::TooFewSamples { n: 0, needed: 1 })?;
    let cand_m = policy
        .moments(series[candidate].samples)
        .ok_or(CompareError::TooFewSamples { n: 0, needed: 1 })?;
    let result = unjudged(series[reference].label, &ref_m, &cand_m, policy);
    let usable = |s: &Series<'_>| s.samples.len() >= 2 || (policy.exact && !s.samples.is_empty());
    if !usable(&series[reference]) || !usable(&series[candidate]) {
        return Ok(result);
    }
    // The usable series, with reference and candidate re-indexed.
    let mut kept: Vec<&Series<'_>> = Vec::new();
    let (mut r, mut c) = (0, 0);
    for (i, s) in series.iter().enumerate() {
        if i == reference {
            r = kept.len();
        }
        if i == candidate {
            c = kept.len();
        }
        if i == reference || i == candidate || usable(s) {
            kept.push(s);
        }
    }
    let all_zero = kept.iter().all(|s| {
        policy
            .moments(s.samples)
            .is_some_and(|m| zero_variance(&m, policy.exact))
    });
    let pairs = (paired && series[reference].samples.len() == series[candidate].samples.len())
        .then_some((series[reference].samples, series[candidate].samples));
    if kept.len() >= 3 {
        return many_series(&kept, (r, c), all_zero, pairs, policy, result);
    }
    two_series(&ref_m, &cand_m, all_zero, pairs, policy, result)
}

/// Refuse what no comparison can be made of: a bad level, bad indices, non-finite values.
pub(super) fn validate(
    series: &[Series<'_>],
    reference: usize,
    candidate: usize,
    policy: &Policy,
) -> Result<(), CompareError> {
    check_confidence(policy.confidence)?;
    for index in [reference, candidate] {
        if index >= series.len() {
            return Err(CompareError::BadIndex {
                index,
                len: series.len(),
            });
        }
    }
    if series.len() < 2 || reference == candidate {
        return Err(CompareError::TooFewSeries {
            got: series.len(),
            needed: 2,
        });
    }
    for s in series {
        if let Some(&value) = s.samples.iter().find(|v| !v.is_finite()) {
            return Err(CompareError::NonFinite {
                label: s.label.to_string(),
                value,
            });
        }
    }
    Ok(())
}

/// The comparison before any test: the difference of means and what the comparison would
/// use; an inconclusive one stays so.
pub(super) fn unjudged(
    reference: &str,
    ref_m: &Moments,
    cand_m: &Moments,
    policy: &Policy,
) -> Comparison {
    let difference = cand_m.mean - ref_m.mean;
    Comparison {
        method: if policy.exact {
            ComparisonMethod::Exact
        } else {
            ComparisonMethod::WelchT
        },
        reference: reference.to_string(),
        reference_n: ref_m.n,
        reference_mean: ref_m.mean,
        difference,
        ci_low: None,
        ci_high: None,
        confidence: policy.confidence,
        relative: relative_to(difference, ref_m.mean),
        relative_ci_low: None,
        relative_ci_high: None,
        df: None,
        p_value: None,
        threshold: policy.threshold,
        threshold_absolute: (policy.threshold_absolute > 0.0).then_some(policy.threshold_absolute),
        verdict: Verdict::Inconclusive,
        anova: None,
        confirmation: None,
    }
}

/// Cut the interval of `c`, the comparison of metric `id`, at what the quantity can take: a
/// quantity that cannot be negative ([`sbs_reports::model::MetricId::never_negative`]: a
/// time, a size, a count) cannot fall by more than its reference mean, so the lower bound
/// of the difference is at least `-reference_mean` and the relative one at least -100%.
/// (The t interval is symmetric and, for a few skewed samples near 0 such as `time.sys`,
/// reached -248.9%.) Cutting off values the difference cannot take keeps every value it
/// can, so the coverage stays at least the confidence; the verdict, decided on the upper
/// bound for a regression and on the whole interval for an improvement, does not change.
pub fn bound_by_range(c: &mut Comparison, id: &str) {
    let never_negative =
        sbs_reports::model::MetricId::parse(id).is_ok_and(|id| id.never_negative());
    if !never_negative || c.reference_mean <= 0.0 {
        return;
    }
    let floor = -c.reference_mean;
    if let Some(low) = c.ci_low.as_mut() {
        *low = low.max(floor);
    }
    if let Some(low) = c.relative_ci_low.as_mut() {
        *low = low.max(-1.0);
    }
}

/// Record the interval of the difference, absolute and relative to the reference mean.
fn set_interval(result: &mut Comparison, low: f64, high: f64) {
    result.ci_low = Some(low);
    result.ci_high = Some(high);
    result.relative_ci_low = relative_to(low, result.reference_mean);
    result.relative_ci_high = relative_to(high, result.reference_mean);
}

/// Two series: exact when both have zero variance, otherwise paired (given `pairs`) or
/// Welch.
fn two_series(
    ref_m: &Moments,
    cand_m: &Moments,
    all_zero: bool,
    pairs: Pairs<'_>,
    policy: &Policy,
    mut result: Comparison,
) -> Result<Comparison, CompareError> {
    let (difference, relative) = (result.difference, result.relative);
    if !all_zero && (ref_m.n < 2 || cand_m.n < 2) {
        // An exact count saved from one run against one that varies (or the reverse):
        // no variance to test with on one side, so no verdict either way.
        return Ok(result);
    }
    if all_zero {
        result.method = ComparisonMethod::Exact;
        result.confidence = 1.0;
        set_interval(&mut result, difference, difference);
        result.verdict = verdict(difference != 0.0, difference, relative, policy);
        return Ok(result);
    }
    let significant = test(ref_m, cand_m, pairs, policy, policy.confidence, &mut result)?;
    result.verdict = verdict(significant, result.difference, result.relative, policy);
    Ok(result)
}

/// Run `i` of the reference and run `i` of the candidate, when the runs were made in pairs.
type Pairs<'a> = Option<(&'a [f64], &'a [f64])>;

/// The interval of the change at `level`, recorded in `result` with its method, degrees
/// of freedom and p-value: from the pairs when there are pairs that give one, otherwise
/// Welch's. Returns whether it excludes no change.
fn test(
    ref_m: &Moments,
    cand_m: &Moments,
    pairs: Pairs<'_>,
    policy: &Policy,
    level: f64,
    result: &mut Comparison,
) -> Result<bool, CompareError> {
    let paired = match pairs {
        Some((r, c)) => match paired_interval(r, c, level, policy.variance_floor()) {
            Ok(interval) => Some(interval),
            // No variance in the pairs (nor a floor): Welch's interval decides, or says
            // why it cannot.
            Err(CompareError::ZeroVariance | CompareError::TooFewSamples { .. }) => None,
            Err(e) => return Err(e),
        },
        None => None,
    };
    let Some(interval) = paired else {
        let interval = welch_interval(ref_m, cand_m, level)?;
        result.method = ComparisonMethod::WelchT;
        set_interval(result, interval.low, interval.high);
        result.df = Some(interval.df);
        result.p_value = Some(interval.p_value);
        return Ok(interval.significant());
    };
    result.method = if interval.trimmed {
        ComparisonMethod::PairedTrimmed
    } else {
        ComparisonMethod::PairedT
    };
    match interval.scale {
        Scale::LogRatio => {
            // The change as a ratio, carried to the reference's level so that the
            // difference and the relative change tell the same story.
            let level_of = |log: f64| ref_m.mean.abs() * log.exp_m1();
            result.difference = level_of(interval.estimate);
            result.relative = Some(interval.estimate.exp_m1());
            set_interval(result, level_of(interval.low), level_of(interval.high));
        }
        Scale::Difference => {
            result.difference = interval.estimate;
            result.relative = relative_to(interval.estimate, ref_m.mean);
            set_interval(result, interval.low, interval.high);
        }
    }
    result.df = Some(interval.df);
    result.p_value = Some(interval.p_value);
    Ok(interval.significant())
}

/// Three or more series (`compare` with several commands): the verdict is the comparison
/// of the candidate with the reference, at the level adjusted (Bonferroni) for the `k - 1`
/// comparisons with the reference that decide something, not for all `k (k - 1) / 2`
/// pairs. The ANOVA over all series and the pairs its post-hoc test finds different are
/// reported as context, but gate nothing (the ANOVA assumes equal variances).
fn many_series(
    kept: &[&Series<'_>],
    (r, c): (usize, usize),
    all_zero: bool,
    pairs: Pairs<'_>,
    policy: &Policy,
    mut result: Comparison,
) -> Result<Comparison, CompareError> {
    let ref_m = policy
        .moments(kept[r].samples)
        .ok_or(CompareError::TooFewSamples { n: 0, needed: 1 })?;
    let cand_m = policy
        .moments(kept[c].samples)
        .ok_or(CompareError::TooFewSamples { n: 0, needed: 1 })?;
    if all_zero {
        // Exact values everywhere: an exact comparison, no test and no p-value.
        return two_series(&ref_m, &cand_m, true, None, policy, result);
    }
    let comparisons = (kept.len() - 1) as f64;
    let level = 1.0 - (1.0 - policy.confidence) / comparisons;
    let (difference, relative) = (result.difference, result.relative);
    let (ref_zero, cand_zero) = (
        zero_variance(&ref_m, policy.exact),
        zero_variance(&cand_m, policy.exact),
    );
    if !(ref_zero && cand_zero) && (ref_m.n < 2 || cand_m.n < 2) {
        return Ok(result);
    }
    if ref_zero && cand_zero {
        result.method = ComparisonMethod::Exact;
        result.confidence = 1.0;
        set_interval(&mut result, difference, difference);
        result.verdict = verdict(difference != 0.0, difference, relative, policy);
    } else {
        let significant = test(&ref_m, &cand_m, pairs, policy, level, &mut result)?;
        result.confidence = level;
        result.p_value = result.p_value.map(|p| (p * comparisons).min(1.0));
        result.verdict = verdict(significant, result.difference, result.relative, policy);
    }
    result.anova = Some(anova_summary(kept, c, policy)?);
    Ok(result)
}

/// The one-way ANOVA over every kept series, with the pairs a Bonferroni-corrected post-hoc
/// test tells apart when the ANOVA is significant; `subject` is the series judged.
fn anova_summary(
    kept: &[&Series<'_>],
    subject: usize,
    policy: &Policy,
) -> Result<AnovaSummary, CompareError> {
    let groups: Vec<&[f64]> = kept.iter().map(|s| s.samples).collect();
    let a = anova(&groups, policy.variance_floor())?;
    let significant = a.p_value < 1.0 - policy.confidence;
    let differing = if significant {
        bonferroni_pairs(
            &groups,
            policy.confidence,
            policy.exact,
            policy.variance_floor(),
        )?
        .iter()
        .filter(|p| p.significant)
        .map(|p| PairDifference {
            a: kept[p.a].label.to_string(),
            b: kept[p.b].label.to_string(),
            difference: p.difference,
            ci_low: p.low,
            ci_high: p.high,
            p_value: p.p_value,
        })
        .collect()
    } else {
        Vec::new()
    };
    Ok(AnovaSummary {
        groups: kept.iter().map(|s| s.label.to_string()).collect(),
        // Against a history, only the pairs with this run matter to the reader; between
        // commands every pair does.
        subject: (kept[subject].label == THIS_RUN).then(|| kept[subject].label.to_string()),
        f: a.f,
        df_between: a.df_between,
        df_within: a.df_within,
        p_value: a.p_value,
        significant,
        post_hoc: POST_HOC.to_string(),
        differing,
    })
}

fn relative_to(value: f64, reference_mean: f64) -> Option<f64> {
    if value == 0.0 {
        Some(0.0)
    } else if reference_mean == 0.0 {
        None
    } else {
        Some(value / reference_mean.abs())
    }
}
