//! Comparisons between series of samples, after Georges, Buytaert and Eeckhout,
//! "Statistically Rigorous Java Performance Evaluation" (OOPSLA 2007).
//!
//! Pure functions over numbers: no I/O, no knowledge of where the numbers came from.
//!
//! - Two series: the confidence interval of the difference of means (Welch), Student t with
//!   the Welch-Satterthwaite degrees of freedom, or the normal distribution when both
//!   series have [`LARGE_SAMPLE`] samples or more. A difference is significant when the
//!   interval excludes zero.
//! - Three or more series: a one-way ANOVA (F test). When it rejects "all means equal",
//!   a post-hoc test says which pairs differ: Welch intervals for every pair at the
//!   Bonferroni-adjusted level `1 - alpha / m`, `m = k (k - 1) / 2` (conservative, robust
//!   to unequal variances; Tukey-Kramer and Games-Howell need the studentized range
//!   distribution, which statrs lacks).
//! - Zero variance on every side (exact counters): equal is "no change", anything else an
//!   exact change judged by the threshold alone. For a measured metric compared with saved
//!   sessions that disagree among themselves, the candidate is judged against the
//!   between-session spread instead ([`ComparisonMethod::Sessions`]).
//! - A practical threshold: a significant change whose relative size is within it is
//!   reported ([`Verdict::BelowThreshold`]) but never fails. For every metric, smaller is
//!   better.

use sbs_reports::model::{AnovaSummary, Comparison, ComparisonMethod, PairDifference, Verdict};
use statrs::distribution::{ContinuousCDF, FisherSnedecor, Normal, StudentsT};

/// From this many samples on both sides, Welch's interval uses the normal distribution.
pub const LARGE_SAMPLE: usize = 30;

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
    /// An index does not name a series.
    #[error("series index {index} out of range ({len} series)")]
    BadIndex {
        /// The index.
        index: usize,
        /// Number of series.
        len: usize,
    },
}

/// Sample size, mean and sample variance (n - 1 denominator; 0 for one sample).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Moments {
    /// Number of samples.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample variance.
    pub var: f64,
}

impl Moments {
    /// Moments of `samples` (two passes, numerically stable). `None` when empty.
    pub fn of(samples: &[f64]) -> Option<Moments> {
        if samples.is_empty() {
            return None;
        }
        let n = samples.len();
        if samples.iter().all(|&x| x == samples[0]) {
            // Exactly equal values: no rounding residue in the mean or the variance.
            return Some(Moments {
                n,
                mean: samples[0],
                var: 0.0,
            });
        }
        let mean = samples.iter().sum::<f64>() / n as f64;
        let var = if n < 2 {
            0.0
        } else {
            samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64
        };
        Some(Moments { n, mean, var })
    }
}

/// The interval of a difference of means.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiffInterval {
    /// `mean(candidate) - mean(reference)`.
    pub difference: f64,
    /// Standard error of the difference.
    pub std_error: f64,
    /// Welch-Satterthwaite degrees of freedom; `None` when the normal distribution was used.
    pub df: Option<f64>,
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

fn check_confidence(confidence: f64) -> Result<(), CompareError> {
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

/// Welch's confidence interval for `mean(candidate) - mean(reference)`.
///
/// Uses Student's t with [`welch_df`] degrees of freedom, or the normal distribution when
/// both sides have [`LARGE_SAMPLE`] samples or more.
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
    let upper_quantile = 1.0 - (1.0 - confidence) / 2.0;
    let large = reference.n >= LARGE_SAMPLE && candidate.n >= LARGE_SAMPLE;
    let (critical, p_value, df) = if large {
        let normal = Normal::standard();
        (
            normal.inverse_cdf(upper_quantile),
            2.0 * normal.sf(statistic.abs()),
            None,
        )
    } else {
        // df > 0 is guaranteed by welch_df, so the distribution is always valid.
        let t = StudentsT::new(0.0, 1.0, df).map_err(|_| CompareError::ZeroVariance)?;
        (
            t.inverse_cdf(upper_quantile),
            2.0 * t.sf(statistic.abs()),
            Some(df),
        )
    };
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

/// Result of a one-way ANOVA.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Anova {
    /// Sum of squares between groups.
    pub ss_between: f64,
    /// Sum of squares within groups.
    pub ss_within: f64,
    /// k - 1.
    pub df_between: f64,
    /// N - k.
    pub df_within: f64,
    /// F statistic; `None` when the within-group sum of squares is 0.
    pub f: Option<f64>,
    /// P-value of `f` against F(df_between, df_within). With zero within-group variance:
    /// 1 when all means are equal, 0 otherwise.
    pub p_value: f64,
}

/// One-way ANOVA over `groups` (at least 2 non-empty groups, more samples than groups).
pub fn anova(groups: &[&[f64]]) -> Result<Anova, CompareError> {
    if groups.len() < 2 {
        return Err(CompareError::TooFewSeries {
            got: groups.len(),
            needed: 2,
        });
    }
    let moments: Vec<Moments> = groups
        .iter()
        .map(|g| Moments::of(g).ok_or(CompareError::TooFewSamples { n: 0, needed: 1 }))
        .collect::<Result<_, _>>()?;
    let total: usize = moments.iter().map(|m| m.n).sum();
    let k = groups.len();
    if total <= k {
        return Err(CompareError::TooFewSamples {
            n: total,
            needed: k + 1,
        });
    }
    let grand = groups.iter().flat_map(|g| g.iter()).sum::<f64>() / total as f64;
    let ss_between: f64 = moments
        .iter()
        .map(|m| m.n as f64 * (m.mean - grand).powi(2))
        .sum();
    let ss_within: f64 = groups
        .iter()
        .zip(&moments)
        .map(|(g, m)| g.iter().map(|x| (x - m.mean).powi(2)).sum::<f64>())
        .sum();
    let df_between = (k - 1) as f64;
    let df_within = (total - k) as f64;
    let all_equal = moments.iter().all(|m| m.mean == moments[0].mean);
    let (f, p_value) = if ss_within == 0.0 {
        (None, if all_equal { 1.0 } else { 0.0 })
    } else {
        let f = (ss_between / df_between) / (ss_within / df_within);
        let dist = FisherSnedecor::new(df_between, df_within).map_err(|_| {
            CompareError::TooFewSamples {
                n: total,
                needed: k + 1,
            }
        })?;
        (Some(f), dist.sf(f).clamp(0.0, 1.0))
    };
    Ok(Anova {
        ss_between,
        ss_within,
        df_between,
        df_within,
        f,
        p_value,
    })
}

/// One pair of the post-hoc test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairTest {
    /// Index of the first series.
    pub a: usize,
    /// Index of the second series.
    pub b: usize,
    /// `mean(b) - mean(a)`.
    pub difference: f64,
    /// Interval bounds at the adjusted level (equal to `difference` for exact pairs).
    pub low: f64,
    /// Upper bound.
    pub high: f64,
    /// Bonferroni-adjusted p-value, capped at 1; `None` for an exact pair.
    pub p_value: Option<f64>,
    /// Whether the pair differs.
    pub significant: bool,
}

/// Post-hoc test after an ANOVA: Welch intervals for every pair `(a, b)`, `a < b`, at the
/// Bonferroni-adjusted confidence `1 - (1 - confidence) / m`. Pairs with zero variance on
/// both sides are compared exactly. Every group needs at least 2 samples unless its
/// variance is zero and `exact` is set.
pub fn bonferroni_pairs(
    groups: &[&[f64]],
    confidence: f64,
    exact: bool,
) -> Result<Vec<PairTest>, CompareError> {
    check_confidence(confidence)?;
    let k = groups.len();
    let m = (k * k.saturating_sub(1) / 2).max(1) as f64;
    let adjusted = 1.0 - (1.0 - confidence) / m;
    let moments: Vec<Moments> = groups
        .iter()
        .map(|g| Moments::of(g).ok_or(CompareError::TooFewSamples { n: 0, needed: 1 }))
        .collect::<Result<_, _>>()?;
    let mut pairs = Vec::new();
    for a in 0..k {
        for b in a + 1..k {
            let (ma, mb) = (&moments[a], &moments[b]);
            if zero_variance(ma, exact) && zero_variance(mb, exact) {
                let difference = mb.mean - ma.mean;
                pairs.push(PairTest {
                    a,
                    b,
                    difference,
                    low: difference,
                    high: difference,
                    p_value: None,
                    significant: difference != 0.0,
                });
                continue;
            }
            let interval = welch_interval(ma, mb, adjusted)?;
            pairs.push(PairTest {
                a,
                b,
                difference: interval.difference,
                low: interval.low,
                high: interval.high,
                p_value: Some((interval.p_value * m).min(1.0)),
                significant: interval.significant(),
            });
        }
    }
    Ok(pairs)
}

/// Whether a series counts as having zero variance: variance 0 with at least 2 samples,
/// or with any number of samples for an exact metric (one count is enough).
fn zero_variance(m: &Moments, exact: bool) -> bool {
    m.var == 0.0 && (m.n >= 2 || exact)
}

/// The verdict for a difference (positive = worse) of relative size `relative`.
///
/// Not significant: [`Verdict::NoChange`]. Significant and larger than `threshold` in
/// relative terms: [`Verdict::Regressed`] or [`Verdict::Improved`]. Significant but within
/// the threshold: [`Verdict::BelowThreshold`]. A change from a reference mean of 0 has no
/// relative size: for an exact count it is past any threshold (a count appeared), for a
/// measured metric it is [`Verdict::Inconclusive`] (a time of 0 is below the clock's
/// resolution, not a value a relative threshold can be applied to).
pub fn verdict(
    significant: bool,
    difference: f64,
    relative: Option<f64>,
    policy: &Policy,
) -> Verdict {
    if !significant || difference == 0.0 {
        return Verdict::NoChange;
    }
    let past = match relative {
        Some(r) => r.abs() > policy.threshold,
        None if policy.exact => true,
        None => return Verdict::Inconclusive,
    };
    match (past, difference > 0.0) {
        (false, _) => Verdict::BelowThreshold,
        (true, true) => Verdict::Regressed,
        (true, false) => Verdict::Improved,
    }
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
    /// Whether the metric is an exact count (one sample suffices, zero variance expected).
    pub exact: bool,
    /// Whether the series other than the candidate are saved sessions of the same
    /// benchmark (history), rather than different commands. Only then is a measured metric
    /// with zero variance within each session but different values between sessions
    /// judged against the spread between sessions ([`ComparisonMethod::Sessions`]).
    pub sessions: bool,
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
    let ref_m = Moments::of(series[reference].samples)
        .ok_or(CompareError::TooFewSamples { n: 0, needed: 1 })?;
    let cand_m = Moments::of(series[candidate].samples)
        .ok_or(CompareError::TooFewSamples { n: 0, needed: 1 })?;
    let usable = |s: &Series<'_>| s.samples.len() >= 2 || (policy.exact && !s.samples.is_empty());
    let difference = cand_m.mean - ref_m.mean;
    let relative = relative_to(difference, ref_m.mean);
    let mut result = Comparison {
        // What the comparison would use; stays so for an inconclusive one.
        method: if policy.exact {
            ComparisonMethod::Exact
        } else {
            ComparisonMethod::WelchT
        },
        reference: series[reference].label.to_string(),
        reference_n: ref_m.n,
        reference_mean: ref_m.mean,
        difference,
        ci_low: None,
        ci_high: None,
        confidence: policy.confidence,
        relative,
        relative_ci_low: None,
        relative_ci_high: None,
        df: None,
        p_value: None,
        threshold: policy.threshold,
        verdict: Verdict::Inconclusive,
        anova: None,
    };
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
    let groups: Vec<&[f64]> = kept.iter().map(|s| s.samples).collect();
    let all_zero = groups
        .iter()
        .all(|g| Moments::of(g).is_some_and(|m| zero_variance(&m, policy.exact)));

    let set_interval = |result: &mut Comparison, low: f64, high: f64| {
        result.ci_low = Some(low);
        result.ci_high = Some(high);
        result.relative_ci_low = relative_to(low, ref_m.mean);
        result.relative_ci_high = relative_to(high, ref_m.mean);
    };

    if all_zero && !policy.exact && policy.sessions && kept.len() >= 3 {
        let others: Vec<f64> = kept
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != c)
            .map(|(_, s)| s.samples[0])
            .collect();
        if others.iter().any(|&v| v != others[0]) {
            return between_sessions(&others, cand_m.mean, policy, result);
        }
    }

    if kept.len() >= 3 {
        let pairs = bonferroni_pairs(&groups, policy.confidence, policy.exact)?;
        let (f, p_value, df_between, df_within) = if all_zero {
            let differ = pairs.iter().any(|p| p.significant);
            (
                None,
                if differ { 0.0 } else { 1.0 },
                (kept.len() - 1) as f64,
                0.0,
            )
        } else {
            let a = anova(&groups)?;
            (a.f, a.p_value, a.df_between, a.df_within)
        };
        let significant = p_value < 1.0 - policy.confidence;
        let pair = pairs
            .iter()
            .find(|p| (p.a, p.b) == (r.min(c), r.max(c)))
            .copied()
            .ok_or(CompareError::BadIndex {
                index: candidate,
                len: series.len(),
            })?;
        // Pairs are stored as mean(b) - mean(a); orient as candidate - reference.
        let (low, high) = if r < c {
            (pair.low, pair.high)
        } else {
            (-pair.high, -pair.low)
        };
        let m = (kept.len() * (kept.len() - 1) / 2) as f64;
        result.confidence = if all_zero {
            1.0
        } else {
            1.0 - (1.0 - policy.confidence) / m
        };
        set_interval(&mut result, low, high);
        result.p_value = pair.p_value;
        result.method = if all_zero {
            ComparisonMethod::Exact
        } else {
            ComparisonMethod::Anova
        };
        result.verdict = verdict(
            significant && pair.significant,
            difference,
            relative,
            policy,
        );
        result.anova = Some(AnovaSummary {
            groups: kept.iter().map(|s| s.label.to_string()).collect(),
            f,
            df_between,
            df_within,
            p_value,
            significant,
            post_hoc: POST_HOC.to_string(),
            differing: if significant {
                pairs
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
            },
        });
        return Ok(result);
    }

    if all_zero {
        result.method = ComparisonMethod::Exact;
        result.confidence = 1.0;
        set_interval(&mut result, difference, difference);
        result.verdict = verdict(difference != 0.0, difference, relative, policy);
        return Ok(result);
    }
    let interval = welch_interval(&ref_m, &cand_m, policy.confidence)?;
    result.method = if interval.df.is_some() {
        ComparisonMethod::WelchT
    } else {
        ComparisonMethod::WelchZ
    };
    set_interval(&mut result, interval.low, interval.high);
    result.df = interval.df;
    result.p_value = Some(interval.p_value);
    result.verdict = verdict(interval.significant(), difference, relative, policy);
    Ok(result)
}

/// A measured metric repeatable within each session but not across sessions (e.g. the
/// peak RSS of a small program, page-granular, that differs by a few pages from one
/// session to the next): each saved session's value is one observation of the
/// between-session spread, and the candidate is significant when it falls outside their
/// prediction interval `mean ± t(k-1) · s · sqrt(1 + 1/k)`.
fn between_sessions(
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

fn relative_to(value: f64, reference_mean: f64) -> Option<f64> {
    if value == 0.0 {
        Some(0.0)
    } else if reference_mean == 0.0 {
        None
    } else {
        Some(value / reference_mean.abs())
    }
}

/// Practical thresholds: a default and per-metric overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// For metrics without an override, as a fraction.
    pub default: f64,
    /// `(pattern, fraction)`: a pattern is a metric id, or a prefix ending in `*`.
    pub per_metric: Vec<(String, f64)>,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            default: DEFAULT_THRESHOLD,
            per_metric: Vec::new(),
        }
    }
}

/// A `--threshold` argument that cannot be parsed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid threshold `{arg}`: {reason}; write a percentage such as `2` (all metrics) or `alloc.count=0.5` / `alloc.*=1` (per metric)")]
pub struct ThresholdError {
    /// The argument.
    pub arg: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Thresholds {
    /// Thresholds from `--threshold` arguments: `PCT` sets the default, `METRIC=PCT`
    /// overrides one metric (or a prefix, `alloc.*=PCT`). Percentages, not fractions.
    /// Later arguments win.
    pub fn from_args<S: AsRef<str>>(args: &[S]) -> Result<Thresholds, ThresholdError> {
        let mut thresholds = Thresholds::default();
        for arg in args {
            let arg = arg.as_ref();
            let error = |reason: &str| ThresholdError {
                arg: arg.to_string(),
                reason: reason.to_string(),
            };
            let (pattern, pct) = match arg.rsplit_once('=') {
                Some((p, v)) => (Some(p.trim()), v),
                None => (None, arg),
            };
            let pct = pct.trim().trim_end_matches('%');
            let value: f64 = pct
                .parse()
                .map_err(|_| error("the percentage is not a number"))?;
            if !value.is_finite() || value < 0.0 {
                return Err(error("the percentage must be a finite number >= 0"));
            }
            let fraction = value / 100.0;
            match pattern {
                None => thresholds.default = fraction,
                Some("") => return Err(error("the metric name before `=` is empty")),
                Some(p) if p.contains('*') && !p.ends_with('*') || p.matches('*').count() > 1 => {
                    return Err(error(
                        "`*` is allowed only once, at the end of the metric name",
                    ))
                }
                Some(p) => {
                    thresholds.per_metric.retain(|(q, _)| q != p);
                    thresholds.per_metric.push((p.to_string(), fraction));
                }
            }
        }
        Ok(thresholds)
    }

    /// The threshold of `metric`: an exact id match, else the longest matching prefix
    /// pattern, else the default.
    pub fn for_metric(&self, metric: &str) -> f64 {
        if let Some((_, t)) = self.per_metric.iter().find(|(p, _)| p == metric) {
            return *t;
        }
        self.per_metric
            .iter()
            .filter_map(|(p, t)| {
                let prefix = p.strip_suffix('*')?;
                metric.starts_with(prefix).then_some((prefix.len(), *t))
            })
            .max_by_key(|(len, _)| *len)
            .map_or(self.default, |(_, t)| t)
    }
}

#[cfg(test)]
mod tests {
    //! Reference values computed independently with scipy 1.17 (numpy, Python 3.11):
    //!
    //! ```python
    //! from scipy import stats; import numpy as np
    //! a=[10.1,10.3,9.8,10.0,10.2]; b=[10.9,11.2,10.7,11.0,11.4,10.8,11.1]
    //! r=stats.ttest_ind(b,a,equal_var=False); ci=r.confidence_interval(0.95)
    //! c=[10.0,10.4,9.9,10.3,10.1,9.7]        # ttest_ind(c,a,equal_var=False)
    //! d=[5.0,5.0,5.0]; e=[5.5,5.7,5.2,5.9]   # ttest_ind(e,d,equal_var=False)
    //! x=[100+((i*37)%11)-5 for i in range(40)]; y=[101+((i*53)%13)-6 for i in range(35)]
    //! se=np.sqrt(np.var(x,ddof=1)/40+np.var(y,ddof=1)/35); z=stats.norm.ppf(0.975)
    //! g1=[3.1,2.9,3.4,3.0]; g2=[3.6,3.8,3.5,3.9,3.7]; g3=[3.0,3.2,2.8,3.1,3.3,2.9]
    //! stats.f_oneway(g1,g2,g3)
    //! for p,q in [(g1,g2),(g1,g3),(g2,g3)]:
    //!     r=stats.ttest_ind(q,p,equal_var=False); r.confidence_interval(1-0.05/3); 3*r.pvalue
    //! ```
    use super::*;

    const A: [f64; 5] = [10.1, 10.3, 9.8, 10.0, 10.2];
    const B: [f64; 7] = [10.9, 11.2, 10.7, 11.0, 11.4, 10.8, 11.1];
    const C: [f64; 6] = [10.0, 10.4, 9.9, 10.3, 10.1, 9.7];
    const G1: [f64; 4] = [3.1, 2.9, 3.4, 3.0];
    const G2: [f64; 5] = [3.6, 3.8, 3.5, 3.9, 3.7];
    const G3: [f64; 6] = [3.0, 3.2, 2.8, 3.1, 3.3, 2.9];

    fn close(actual: f64, expected: f64, rel: f64) {
        let tol = rel * expected.abs().max(1e-300);
        assert!(
            (actual - expected).abs() <= tol,
            "{actual} differs from {expected} by more than {rel} relative"
        );
    }

    fn m(samples: &[f64]) -> Moments {
        Moments::of(samples).expect("non-empty")
    }

    fn large_x() -> Vec<f64> {
        (0..40).map(|i| (100 + (i * 37) % 11 - 5) as f64).collect()
    }

    fn large_y() -> Vec<f64> {
        (0..35).map(|i| (101 + (i * 53) % 13 - 6) as f64).collect()
    }

    fn policy(threshold: f64, exact: bool) -> Policy {
        Policy {
            confidence: 0.95,
            threshold,
            exact,
            sessions: false,
        }
    }

    #[test]
    fn welch_matches_scipy_unequal_sizes() {
        let i = welch_interval(&m(&A), &m(&B), 0.95).unwrap();
        close(i.df.unwrap(), 9.792242693815217, 1e-12);
        close(i.difference / i.std_error, 7.45657329546792, 1e-12);
        close(i.low, 0.6543017965634152, 1e-9);
        close(i.high, 1.2142696320080095, 1e-9);
        close(i.p_value, 2.4366122458964945e-05, 1e-6);
        assert!(i.significant());
        let i99 = welch_interval(&m(&A), &m(&B), 0.99).unwrap();
        close(i99.low, 0.5352904491176456, 1e-9);
        close(i99.high, 1.3332809794537792, 1e-9);
    }

    #[test]
    fn welch_not_significant_matches_scipy() {
        let i = welch_interval(&m(&A), &m(&C), 0.95).unwrap();
        close(i.df.unwrap(), 8.927803814223081, 1e-12);
        close(i.low, -0.3214921731265893, 1e-9);
        close(i.high, 0.2948255064599149, 1e-9);
        close(i.p_value, 0.9240978443876927, 1e-9);
        assert!(!i.significant());
    }

    #[test]
    fn welch_with_one_zero_variance_side() {
        let i = welch_interval(&m(&[5.0, 5.0, 5.0]), &m(&[5.5, 5.7, 5.2, 5.9]), 0.95).unwrap();
        close(i.df.unwrap(), 3.0, 1e-12);
        close(i.low, 0.09984822600135324, 1e-9);
        close(i.high, 1.0501517739986452, 1e-9);
        close(i.p_value, 0.030915207201608046, 1e-7);
    }

    #[test]
    fn welch_with_fractional_df_and_bonferroni_levels() {
        // a=[1.0,1.3]; b=[2.0,2.9]; r=stats.ttest_ind(b,a,equal_var=False)
        // r.confidence_interval(c) for c in (0.95, 0.99, 1-0.05/15)
        let (a, b) = (m(&[1.0, 1.3]), m(&[2.0, 2.9]));
        let cases = [
            (0.95, -2.6816326668641897, 5.281632666864191),
            (0.99, -13.683220889035862, 16.283220889035864),
            (1.0 - 0.05 / 15.0, -35.59753164517331, 38.19753164517229),
        ];
        for (confidence, low, high) in cases {
            let i = welch_interval(&a, &b, confidence).unwrap();
            close(i.df.unwrap(), 1.2195121951219516, 1e-12);
            close(i.low, low, 1e-8);
            close(i.high, high, 1e-8);
            close(i.p_value, 0.18502068652558937, 1e-8);
        }
    }

    #[test]
    fn welch_rejects_zero_variance_on_both_sides_and_single_samples() {
        assert_eq!(
            welch_interval(&m(&[1.0, 1.0]), &m(&[2.0, 2.0]), 0.95),
            Err(CompareError::ZeroVariance)
        );
        assert_eq!(
            welch_interval(&m(&[1.0]), &m(&[2.0, 2.5]), 0.95),
            Err(CompareError::TooFewSamples { n: 1, needed: 2 })
        );
        assert_eq!(
            welch_interval(&m(&A), &m(&B), 1.0),
            Err(CompareError::BadConfidence(1.0))
        );
    }

    #[test]
    fn welch_uses_z_for_large_samples() {
        let (x, y) = (large_x(), large_y());
        let i = welch_interval(&m(&x), &m(&y), 0.95).unwrap();
        assert_eq!(i.df, None);
        close(i.difference, 0.6357142857142861, 1e-12);
        close(i.low, -0.9303631648977055, 1e-9);
        close(i.high, 2.201791736326278, 1e-9);
        close(i.p_value, 0.42626238183156184, 1e-9);
        // 29 samples on one side: back to Student t.
        let i = welch_interval(&m(&x[..29]), &m(&y), 0.95).unwrap();
        assert!(i.df.is_some());
    }

    #[test]
    fn anova_matches_scipy_unequal_sizes() {
        let a = anova(&[&G1, &G2, &G3]).unwrap();
        close(a.f.unwrap(), 19.214457831325323, 1e-12);
        close(a.p_value, 0.00018155561990814797, 1e-7);
        assert_eq!((a.df_between, a.df_within), (2.0, 12.0));
        let a = anova(&[&G1, &[3.05, 3.15, 2.95, 3.1, 3.2, 2.9], &[3.0, 3.1, 3.2]]).unwrap();
        close(a.f.unwrap(), 0.12350035285815106, 1e-9);
        close(a.p_value, 0.885148564589297, 1e-9);
    }

    #[test]
    fn moments_of_equal_values_are_exact() {
        let m = Moments::of(&[0.1; 7]).unwrap();
        assert_eq!((m.n, m.mean, m.var), (7, 0.1, 0.0));
        let m = Moments::of(&[1.0, 2.0, 4.0]).unwrap();
        assert!((m.var - 7.0 / 3.0).abs() < 1e-15);
        assert_eq!(Moments::of(&[]), None);
    }

    #[test]
    fn anova_with_zero_within_variance() {
        let a = anova(&[&[5.0, 5.0], &[5.0, 5.0, 5.0], &[5.0]]).unwrap();
        assert_eq!((a.f, a.p_value), (None, 1.0));
        let a = anova(&[&[5.0, 5.0], &[6.0, 6.0, 6.0], &[5.0]]).unwrap();
        assert_eq!((a.f, a.p_value), (None, 0.0));
        assert!(anova(&[&[1.0], &[2.0]]).is_err());
        assert!(anova(&[&[1.0, 2.0]]).is_err());
    }

    #[test]
    fn bonferroni_pairs_match_scipy() {
        let pairs = bonferroni_pairs(&[&G1, &G2, &G3], 0.95, false).unwrap();
        let expected = [
            (
                0.1577228174580878,
                1.042277182541913,
                0.013935944638033618,
                true,
            ),
            (-0.4883355292166054, 0.3883355292166047, 1.0, false),
            (
                -0.9553894315456396,
                -0.34461056845436155,
                0.00045387322824537533,
                true,
            ),
        ];
        assert_eq!(pairs.len(), 3);
        for (p, (low, high, pv, sig)) in pairs.iter().zip(expected) {
            close(p.low, low, 1e-9);
            close(p.high, high, 1e-9);
            close(p.p_value.unwrap(), pv, 1e-6);
            assert_eq!(p.significant, sig);
        }
    }

    #[test]
    fn compare_two_series_with_welch() {
        let series = [
            Series {
                label: "old",
                samples: &A,
            },
            Series {
                label: "new",
                samples: &B,
            },
        ];
        let c = compare(&series, 0, 1, &policy(0.02, false)).unwrap();
        assert_eq!(c.method, ComparisonMethod::WelchT);
        assert_eq!(c.verdict, Verdict::Regressed);
        assert_eq!(c.reference, "old");
        close(c.ci_low.unwrap(), 0.6543017965634152, 1e-9);
        close(c.relative.unwrap(), c.difference / 10.08, 1e-12);
        close(c.relative_ci_low.unwrap(), 0.6543017965634152 / 10.08, 1e-9);
        // Reversed: the new one is faster.
        let c = compare(&series, 1, 0, &policy(0.02, false)).unwrap();
        assert_eq!(c.verdict, Verdict::Improved);
        // A 9% change under a 10% threshold is reported but does not fail.
        let c = compare(&series, 0, 1, &policy(0.10, false)).unwrap();
        assert_eq!(c.verdict, Verdict::BelowThreshold);
        assert!(!c.verdict.is_regression());
        // Not significant.
        let series = [
            Series {
                label: "old",
                samples: &A,
            },
            Series {
                label: "new",
                samples: &C,
            },
        ];
        let c = compare(&series, 0, 1, &policy(0.0, false)).unwrap();
        assert_eq!(c.verdict, Verdict::NoChange);
    }

    #[test]
    fn compare_exact_counters() {
        let base = [1000.0, 1000.0, 1000.0];
        let same = [1000.0, 1000.0];
        let more = [1050.0, 1050.0, 1050.0];
        let tiny = [1001.0, 1001.0];
        let run = |cand: &[f64], threshold: f64| {
            let series = [
                Series {
                    label: "base",
                    samples: &base,
                },
                Series {
                    label: "now",
                    samples: cand,
                },
            ];
            compare(&series, 0, 1, &policy(threshold, true)).unwrap()
        };
        let c = run(&same, 0.02);
        assert_eq!(
            (c.method, c.verdict),
            (ComparisonMethod::Exact, Verdict::NoChange)
        );
        let c = run(&more, 0.02);
        assert_eq!(
            (c.method, c.verdict),
            (ComparisonMethod::Exact, Verdict::Regressed)
        );
        close(c.relative.unwrap(), 0.05, 1e-12);
        assert_eq!((c.ci_low, c.ci_high), (Some(50.0), Some(50.0)));
        // 0.1% more: an exact change, below the threshold.
        assert_eq!(run(&tiny, 0.02).verdict, Verdict::BelowThreshold);
        assert_eq!(run(&tiny, 0.0).verdict, Verdict::Regressed);
        // One sample is enough for an exact metric.
        assert_eq!(run(&[1050.0], 0.02).verdict, Verdict::Regressed);
        // From zero: any increase is past any threshold.
        let zero = [0.0, 0.0];
        let series = [
            Series {
                label: "base",
                samples: &zero,
            },
            Series {
                label: "now",
                samples: &[1.0, 1.0],
            },
        ];
        let c = compare(&series, 0, 1, &policy(0.5, true)).unwrap();
        assert_eq!((c.relative, c.verdict), (None, Verdict::Regressed));
    }

    #[test]
    fn compare_measured_single_samples_is_inconclusive() {
        let series = [
            Series {
                label: "base",
                samples: &[1.0],
            },
            Series {
                label: "now",
                samples: &[2.0],
            },
        ];
        let c = compare(&series, 0, 1, &policy(0.02, false)).unwrap();
        assert_eq!(c.verdict, Verdict::Inconclusive);
        assert_eq!(c.difference, 1.0);
    }

    #[test]
    fn compare_three_series_uses_anova_and_post_hoc() {
        let series = [
            Series {
                label: "g1",
                samples: &G1,
            },
            Series {
                label: "g2",
                samples: &G2,
            },
            Series {
                label: "g3",
                samples: &G3,
            },
        ];
        let c = compare(&series, 0, 1, &policy(0.02, false)).unwrap();
        assert_eq!(c.method, ComparisonMethod::Anova);
        assert_eq!(c.verdict, Verdict::Regressed);
        close(c.ci_low.unwrap(), 0.1577228174580878, 1e-9);
        close(c.confidence, 1.0 - 0.05 / 3.0, 1e-12);
        let anova = c.anova.as_ref().unwrap();
        assert!(anova.significant);
        close(anova.f.unwrap(), 19.214457831325323, 1e-12);
        let differing: Vec<(&str, &str)> = anova
            .differing
            .iter()
            .map(|p| (p.a.as_str(), p.b.as_str()))
            .collect();
        assert_eq!(differing, [("g1", "g2"), ("g2", "g3")]);
        // Reference after candidate: the interval is re-oriented.
        let c = compare(&series, 1, 2, &policy(0.02, false)).unwrap();
        close(c.ci_low.unwrap(), -0.9553894315456396, 1e-9);
        assert_eq!(c.verdict, Verdict::Improved);
        let c = compare(&series, 2, 1, &policy(0.02, false)).unwrap();
        close(c.ci_high.unwrap(), 0.9553894315456396, 1e-9);
        close(c.ci_low.unwrap(), 0.34461056845436155, 1e-9);
        // g1 vs g3 do not differ.
        let c = compare(&series, 0, 2, &policy(0.02, false)).unwrap();
        assert_eq!(c.verdict, Verdict::NoChange);
    }

    #[test]
    fn compare_anova_not_significant_means_no_change() {
        let h = [3.05, 3.15, 2.95, 3.1, 3.2, 2.9];
        let series = [
            Series {
                label: "1",
                samples: &G1,
            },
            Series {
                label: "2",
                samples: &h,
            },
            Series {
                label: "3",
                samples: &[3.0, 3.1, 3.2],
            },
        ];
        let c = compare(&series, 1, 2, &policy(0.0, false)).unwrap();
        assert_eq!(c.verdict, Verdict::NoChange);
        let anova = c.anova.unwrap();
        assert!(!anova.significant);
        assert!(anova.differing.is_empty());
    }

    #[test]
    fn compare_three_exact_series() {
        let h = [500.0, 500.0];
        let now = [525.0, 525.0];
        let series = [
            Series {
                label: "h1",
                samples: &h,
            },
            Series {
                label: "h2",
                samples: &h,
            },
            Series {
                label: "h3",
                samples: &h,
            },
            Series {
                label: "now",
                samples: &now,
            },
        ];
        let c = compare(&series, 2, 3, &policy(0.02, true)).unwrap();
        assert_eq!(
            (c.method, c.verdict),
            (ComparisonMethod::Exact, Verdict::Regressed)
        );
        let anova = c.anova.unwrap();
        assert_eq!(anova.groups.len(), 4);
        assert!(anova.significant);
        assert_eq!(anova.differing.len(), 3);
        let series = [
            Series {
                label: "h1",
                samples: &h,
            },
            Series {
                label: "h2",
                samples: &h,
            },
            Series {
                label: "now",
                samples: &h,
            },
        ];
        let c = compare(&series, 1, 2, &policy(0.02, true)).unwrap();
        assert_eq!(c.verdict, Verdict::NoChange);
        assert!(!c.anova.unwrap().significant);
    }

    #[test]
    fn measured_metric_steady_within_but_not_between_sessions() {
        // Peak RSS of `true`, 2 runs per session, as measured on this machine. Reference
        // values: scipy, prediction interval of a new observation:
        // m=np.mean(h); s=np.std(h,ddof=1); se=s*np.sqrt(1+1/k); t=stats.t.ppf(0.975,k-1)
        // d=c-m; (d-t*se, d+t*se), 2*stats.t.sf(abs(d)/se,k-1)
        let h = [
            [1056768.0; 2],
            [1105920.0; 2],
            [1101824.0; 2],
            [1056768.0; 2],
        ];
        let run = |cand: &[f64], sessions: bool, exact: bool| {
            let mut series: Vec<Series<'_>> = h
                .iter()
                .map(|s| Series {
                    label: "saved",
                    samples: s,
                })
                .collect();
            series.push(Series {
                label: "now",
                samples: cand,
            });
            let p = Policy {
                sessions,
                ..policy(0.02, exact)
            };
            compare(&series, 3, 4, &p).unwrap()
        };
        let c = run(&[1105920.0; 2], true, false);
        assert_eq!(c.method, ComparisonMethod::Sessions);
        assert_eq!(c.verdict, Verdict::NoChange);
        assert_eq!(
            (c.reference.as_str(), c.reference_n),
            ("4 saved sessions", 4)
        );
        close(c.difference, 25600.0, 1e-12);
        close(c.ci_low.unwrap(), -71346.62104820664, 1e-9);
        close(c.ci_high.unwrap(), 122546.62104820664, 1e-9);
        close(c.p_value.unwrap(), 0.4624001957114069, 1e-7);
        let c = run(&[1300000.0; 2], true, false);
        assert_eq!(c.verdict, Verdict::Regressed);
        close(c.ci_low.unwrap(), 122733.37895179336, 1e-9);
        close(c.p_value.unwrap(), 0.005497156638804684, 1e-6);
        // Different commands (compare), or an exact count: compared exactly with the
        // reference, and +4.65% is past the 2% threshold.
        assert_eq!(
            run(&[1105920.0; 2], false, false).verdict,
            Verdict::Regressed
        );
        assert_eq!(run(&[1105920.0; 2], true, true).verdict, Verdict::Regressed);
        // All saved sessions agree: no evidence of a spread, compared exactly.
        let same = [[1056768.0; 2]; 3];
        let series: Vec<Series<'_>> = same
            .iter()
            .map(|s| Series {
                label: "saved",
                samples: s,
            })
            .chain([Series {
                label: "now",
                samples: &[1105920.0; 2],
            }])
            .collect();
        let p = Policy {
            sessions: true,
            ..policy(0.02, false)
        };
        let c = compare(&series, 2, 3, &p).unwrap();
        assert_eq!(
            (c.method, c.verdict),
            (ComparisonMethod::Exact, Verdict::Regressed)
        );
    }

    #[test]
    fn compare_drops_too_small_history_entries() {
        let series = [
            Series {
                label: "tiny",
                samples: &[9.0],
            },
            Series {
                label: "old",
                samples: &A,
            },
            Series {
                label: "new",
                samples: &B,
            },
        ];
        let c = compare(&series, 1, 2, &policy(0.02, false)).unwrap();
        assert_eq!(c.method, ComparisonMethod::WelchT);
        assert_eq!(c.verdict, Verdict::Regressed);
    }

    #[test]
    fn compare_rejects_bad_input() {
        let series = [
            Series {
                label: "old",
                samples: &A,
            },
            Series {
                label: "bad",
                samples: &[1.0, f64::NAN],
            },
        ];
        assert!(matches!(
            compare(&series, 0, 1, &policy(0.02, false)),
            Err(CompareError::NonFinite { .. })
        ));
        assert!(compare(&series, 0, 2, &policy(0.02, false)).is_err());
        assert!(compare(&series, 0, 0, &policy(0.02, false)).is_err());
    }

    #[test]
    fn a_measured_metric_leaving_zero_is_inconclusive_not_a_regression() {
        // time.user of a very short program: 0 in every baseline run (below the tick),
        // a few milliseconds in some later runs.
        let series = [
            Series {
                label: "baseline",
                samples: &[0.0; 5],
            },
            Series {
                label: "now",
                samples: &[0.004, 0.0, 0.004, 0.004, 0.004],
            },
        ];
        let c = compare(&series, 0, 1, &policy(0.02, false)).unwrap();
        assert_eq!((c.relative, c.verdict), (None, Verdict::Inconclusive));
    }

    #[test]
    fn verdict_rules() {
        let p = policy(0.02, false);
        assert_eq!(verdict(false, 5.0, Some(0.5), &p), Verdict::NoChange);
        assert_eq!(verdict(true, 5.0, Some(0.5), &p), Verdict::Regressed);
        assert_eq!(verdict(true, -5.0, Some(-0.5), &p), Verdict::Improved);
        assert_eq!(verdict(true, 0.1, Some(0.01), &p), Verdict::BelowThreshold);
        assert_eq!(
            verdict(true, -0.1, Some(-0.01), &p),
            Verdict::BelowThreshold
        );
        assert_eq!(verdict(true, 0.1, Some(0.02), &p), Verdict::BelowThreshold);
        // From a reference of 0: a count that appears is past any threshold; a measured
        // value that leaves 0 (below the clock's resolution before) cannot be judged.
        assert_eq!(
            verdict(true, 1.0, None, &policy(10.0, true)),
            Verdict::Regressed
        );
        assert_eq!(
            verdict(true, 1.0, None, &policy(10.0, false)),
            Verdict::Inconclusive
        );
    }

    #[test]
    fn thresholds_parse_and_match() {
        let t =
            Thresholds::from_args(&["5", "alloc.count=0.5", "alloc.*=1%", "time.*=10"]).unwrap();
        assert_eq!(t.default, 0.05);
        close(t.for_metric("alloc.count"), 0.005, 1e-12);
        close(t.for_metric("alloc.bytes"), 0.01, 1e-12);
        close(t.for_metric("time.wall"), 0.10, 1e-12);
        close(t.for_metric("memory.peak_rss"), 0.05, 1e-12);
        assert_eq!(
            Thresholds::from_args::<&str>(&[]).unwrap(),
            Thresholds::default()
        );
        let t = Thresholds::from_args(&["alloc.count=1", "alloc.count=3"]).unwrap();
        assert_eq!(t.per_metric, vec![("alloc.count".to_string(), 0.03)]);
        for bad in ["x", "-1", "=3", "a*b=1", "inf", "a=NaN"] {
            let e = Thresholds::from_args(&[bad]).unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
    }
}
