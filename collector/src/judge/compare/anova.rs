//! Three or more series: the one-way ANOVA and its post-hoc test (Welch intervals for
//! every pair at the Bonferroni-adjusted level).

use statrs::distribution::{ContinuousCDF, FisherSnedecor};

use super::welch::check_confidence;
use super::{welch_interval, CompareError, Moments};

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
/// Each group's variance counts as at least `floor` (a measurement's resolution).
pub fn anova(groups: &[&[f64]], floor: f64) -> Result<Anova, CompareError> {
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
        .map(|(g, m)| {
            let ss = g.iter().map(|x| (x - m.mean).powi(2)).sum::<f64>();
            ss.max(m.n.saturating_sub(1) as f64 * floor)
        })
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
    floor: f64,
) -> Result<Vec<PairTest>, CompareError> {
    check_confidence(confidence)?;
    let k = groups.len();
    let m = (k * k.saturating_sub(1) / 2).max(1) as f64;
    let adjusted = 1.0 - (1.0 - confidence) / m;
    let moments: Vec<Moments> = groups
        .iter()
        .map(|g| {
            Moments::of(g)
                .map(|m| Moments {
                    var: m.var.max(floor),
                    ..m
                })
                .ok_or(CompareError::TooFewSamples { n: 0, needed: 1 })
        })
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
pub(super) fn zero_variance(m: &Moments, exact: bool) -> bool {
    m.var == 0.0 && (m.n >= 2 || exact)
}
