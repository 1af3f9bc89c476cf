//! Summary statistics shared by every metric: pure functions over numbers. The moments
//! (mean, variance) and the median come from `statrs`; this is the one place that computes
//! them for the collector.

use sbs_reports::model::{Detail, MetricId, MetricResult, Summary, Unit};

use super::{shape, stats};
use statrs::statistics::Statistics;

/// Two-sided critical value of Student's t for a `confidence` interval of the mean of
/// `n >= 2` samples (`df = n - 1`), at every `n`.
pub fn critical_value(confidence: f64, n: usize) -> f64 {
    stats::t_critical(n.saturating_sub(1) as f64, confidence).unwrap_or(f64::NAN)
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
    /// Moments of `samples`. `None` when empty. Exactly equal values (an exact counter)
    /// have their value as mean and variance 0, with no rounding residue.
    pub fn of(samples: &[f64]) -> Option<Moments> {
        let (&first, rest) = samples.split_first()?;
        let n = samples.len();
        if rest.iter().all(|&x| x == first) {
            return Some(Moments {
                n,
                mean: first,
                var: 0.0,
            });
        }
        Some(Moments {
            n,
            mean: samples.mean(),
            var: if n < 2 { 0.0 } else { samples.variance() },
        })
    }
}

/// A metric's result for a report: its samples and breakdown (label, samples) with their
/// summaries, in no group, with no comparison or trend yet.
pub fn metric_result(
    id: String,
    unit: Unit,
    source: String,
    exact: bool,
    samples: Vec<f64>,
    details: Vec<(String, Vec<f64>)>,
    confidence: f64,
) -> MetricResult {
    let mut notes = Vec::new();
    if let Some(note) = exact_but_varied(exact, unit, &samples) {
        notes.push(note);
    }
    let details = details
        .into_iter()
        .map(|(label, samples)| Detail {
            summary: summarize_metric(&id, &samples, confidence),
            label,
            samples,
        })
        .collect();
    MetricResult {
        summary: summarize_metric(&id, &samples, confidence),
        id,
        unit,
        source,
        exact,
        group: String::new(),
        samples,
        failed_runs: Vec::new(),
        details,
        notes,
        comparison: None,
        trend: Vec::new(),
        distinguishable: None,
        bound: None,
        range: None,
    }
}

/// A modified z-score (Iglewicz and Hoaglin) above this marks an outlier.
pub(crate) const OUTLIER_Z: f64 = 3.5;
/// Timing runs whose coefficient of variation is above this are too noisy to trust.
pub(crate) const NOISY_COV: f64 = 0.2;

/// How every warning of [`timing_warnings`] starts: with the id of the time it judges.
pub const NOISY_TIMES: [&str; 2] = ["time.wall", "time.op"];

/// Whether `warning` is one of [`timing_warnings`]' (the busy machine's cause joins them).
pub fn is_noise_warning(warning: &str) -> bool {
    NOISY_TIMES.iter().any(|t| warning.starts_with(t))
}

/// Warnings about the times of a benchmark's timing runs, as hyperfine gives them: runs far
/// from the others (a modified z-score, `0.6745 · |x − median| / MAD`, above 3.5, from 5
/// runs on) or, without them, a spread too wide to trust (CoV above 20%, from 3 runs on);
/// and, from 8 runs on, the series' shape in run order ([`shape`]): a drift, or two modes
/// (which replace the outlier and spread warnings they explain).
///
/// The time judged is the one a reader compares: `time.wall` for a command, `time.op` for a
/// harnessed benchmark. A harnessed process's wall time is not one: the harness runs as
/// many operations as each process needs to reach a steady state, so its wall time varies
/// by design (58% on a quiet machine), and a warning about it would fire on every healthy
/// benchmark.
pub fn timing_warnings(metrics: &[MetricResult]) -> Vec<String> {
    let judged = metrics
        .iter()
        .find(|m| m.id == "time.op")
        .or_else(|| metrics.iter().find(|m| m.id == "time.wall"));
    let Some(wall) = judged else {
        return Vec::new();
    };
    let id = wall.id.as_str();
    let (samples, unit) = (&wall.samples, wall.unit);
    let show = |v: f64| sbs_reports::human::value(v, unit);
    let mut warnings = Vec::new();
    let remedy = "close other programs, pin with --pin, or count instead of timing \
                  (--instructions valgrind, --counters task-clock), which noise does not blur";
    if let Some(d) = shape::drift(samples) {
        warnings.push(format!(
            "{id} drifts over the runs: the last third took {} (median) against {} in \
             the first third (Mann-Kendall p = {:.1e}): the machine's state changed while \
             the runs went on (warming up, throttling, a neighbour starting); add warm-up \
             runs, compare interleaved (`sbs-profile compare`), or {remedy}",
            show(d.last),
            show(d.first),
            d.p
        ));
    }
    // Two modes explain outliers and a wide spread: said once, as modes.
    if let Some(m) = shape::modes(samples) {
        warnings.push(format!(
            "{id} has two modes: {} runs near {} and {} near {}: the program or the \
             machine alternates between two states (CPU frequency, a slower core, an \
             allocator or cache effect), and the mean describes neither; pin with --pin, \
             look at the runs one by one (`samples` in the JSON report), or {remedy}",
            m.low_runs,
            show(m.low),
            m.high_runs,
            show(m.high)
        ));
        return warnings;
    }
    if samples.len() >= 5 {
        if let Some(robust) = stats::RobustZ::of(samples) {
            let median = stats::median(samples);
            let z = |x: f64| robust.z(x);
            let outliers: Vec<usize> = (0..samples.len())
                .filter(|&i| z(samples[i]) > OUTLIER_Z)
                .collect();
            if let Some(&worst) = outliers
                .iter()
                .max_by(|&&a, &&b| z(samples[a]).total_cmp(&z(samples[b])))
            {
                let first = if outliers == [0] && samples[0] > median {
                    " Only the first run: caches or the page cache were cold; add warm-up runs (--warmup)."
                } else {
                    ""
                };
                warnings.push(format!(
                    "{id}: {} of {} runs are outliers (e.g. run {} took {} against a median \
                     of {}): something else ran at the same time; {remedy}.{first}",
                    outliers.len(),
                    samples.len(),
                    worst + 1,
                    show(samples[worst]),
                    show(median)
                ));
            }
        }
    }
    // Outliers alone widen the CoV: the spread is named only when they do not explain it.
    if !warnings.iter().any(|w| w.contains("outliers")) && samples.len() >= 3 {
        if let Some(cov) = wall.summary.cov.filter(|c| *c > NOISY_COV) {
            warnings.push(format!(
                "{id} varies by {:.0}% (CoV) between runs, too much to trust small \
                 changes; {remedy}",
                cov * 100.0
            ));
        }
    }
    warnings
}

/// The note for a metric whose mechanism counts exactly but whose samples differ (a
/// threaded program whose allocation count depends on scheduling, a HashMap's random
/// seed under valgrind): the comparisons then treat it as measured, and the report says
/// why.
fn exact_but_varied(exact: bool, unit: Unit, samples: &[f64]) -> Option<String> {
    let (&first, rest) = samples.split_first()?;
    if !exact || rest.iter().all(|&x| x == first) {
        return None;
    }
    let (min, max) = (samples.min(), samples.max());
    let show = |v: f64| match unit {
        Unit::Count => sbs_reports::human::count(v),
        Unit::Bytes => format!("{} B", sbs_reports::human::count(v)),
        Unit::Seconds => sbs_reports::human::value(v, unit),
    };
    Some(format!(
        "an exact count that varied between runs: {} to {}; compared as a measurement",
        show(min),
        show(max)
    ))
}

/// [`summarize`] for metric `id`: the interval of a quantity that cannot be negative
/// ([`MetricId::never_negative`]) is cut at 0. The t interval is symmetric,
/// and for a few skewed samples near 0 (`time.sys`) it reaches below 0; cutting off values
/// the mean cannot take keeps every value it can, so the coverage stays at least
/// `confidence`.
pub fn summarize_metric(id: &str, samples: &[f64], confidence: f64) -> Summary {
    let mut s = summarize(samples, confidence);
    if MetricId::parse(id).is_ok_and(|id| id.never_negative()) {
        s.ci_low = s.ci_low.map(|low| low.max(0.0));
    }
    s
}

/// Summarise `samples` with a `confidence` interval for the mean (e.g. 0.95).
///
/// Never produces NaN: an empty series gives zeros, a single sample has no interval, and a
/// zero-variance series (an exact counter) has sd 0, CoV 0 and an interval of zero width.
pub fn summarize(samples: &[f64], confidence: f64) -> Summary {
    let n = samples.len();
    let Some(moments) = Moments::of(samples) else {
        return Summary {
            n: 0,
            mean: 0.0,
            sd: 0.0,
            cov: None,
            median: 0.0,
            min: 0.0,
            max: 0.0,
            ci_low: None,
            ci_high: None,
            confidence,
        };
    };
    let (mean, sd) = (moments.mean, moments.var.sqrt());
    let cov = if sd == 0.0 {
        Some(0.0)
    } else if mean == 0.0 {
        None
    } else {
        Some(sd / mean.abs())
    };
    let median = stats::median(samples);
    let (ci_low, ci_high) = if n < 2 {
        (None, None)
    } else if sd == 0.0 {
        (Some(mean), Some(mean))
    } else {
        let half = critical_value(confidence, n) * sd / (n as f64).sqrt();
        (Some(mean - half), Some(mean + half))
    };
    Summary {
        n,
        mean,
        sd,
        cov,
        median,
        min: samples.min(),
        max: samples.max(),
        ci_low,
        ci_high,
        confidence,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn hand_computed_t_interval() {
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, sum of squares 32, sd = sqrt(32/7) = 2.138090.
        // t(0.975, 7) = 2.364624 (tables); half width = 2.364624 * 2.138090 / sqrt(8) = 1.787492.
        let s = summarize(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0], 0.95);
        assert_eq!(s.n, 8);
        assert!(close(s.mean, 5.0, 1e-12));
        assert!(close(s.sd, 2.138_089_935, 1e-9));
        assert!(close(critical_value(0.95, 8), 2.364_624_252, 1e-6));
        assert!(close(s.ci_low.unwrap(), 5.0 - 1.787_492, 1e-5));
        assert!(close(s.ci_high.unwrap(), 5.0 + 1.787_492, 1e-5));
        assert!(close(s.median, 4.5, 1e-12));
        assert_eq!((s.min, s.max), (2.0, 9.0));
        assert!(close(s.cov.unwrap(), 2.138_089_935 / 5.0, 1e-9));
    }

    #[test]
    fn other_confidence_level() {
        // t(0.995, 4) = 4.604095 for a 99% interval over 5 samples.
        assert!(close(critical_value(0.99, 5), 4.604_094_871, 1e-6));
        let s = summarize(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.99);
        let half = 4.604_094_871 * (2.5f64).sqrt() / 5f64.sqrt();
        assert!(close(s.ci_high.unwrap() - 3.0, half, 1e-6));
    }

    #[test]
    fn large_samples_use_student_t_too() {
        // scipy.stats.t.ppf(0.975, df): 29 -> 2.045229642, 28 -> 2.048407142, 99 -> 1.984216952.
        // The normal quantile (1.959964) made n = 30 intervals about 4% too narrow.
        assert!(close(critical_value(0.95, 30), 2.045_229_642, 1e-6));
        assert!(close(critical_value(0.95, 29), 2.048_407_142, 1e-6));
        let xs: Vec<f64> = (0..100).map(f64::from).collect();
        let s = summarize(&xs, 0.95);
        // sd of 0..99 = sqrt(841.666..) = 29.011492
        let half = 1.984_216_952 * 29.011_491_975 / 10.0;
        assert!(close(s.ci_low.unwrap(), 49.5 - half, 1e-5));
    }

    #[test]
    fn zero_variance_has_no_nan() {
        let s = summarize(&[1000.0; 7], 0.95);
        assert_eq!(s.sd, 0.0);
        assert_eq!(s.cov, Some(0.0));
        assert_eq!(s.ci_low, Some(1000.0));
        assert_eq!(s.ci_high, Some(1000.0));
        assert_eq!(s.relative_ci_half_width(), Some(0.0));
        let z = summarize(&[0.0; 3], 0.95);
        assert_eq!(z.cov, Some(0.0));
        assert_eq!(z.relative_ci_half_width(), Some(0.0));
        // 0.1 repeated sums with rounding error; still exactly zero spread.
        let r = summarize(&[0.1; 10], 0.95);
        assert_eq!(r.sd, 0.0);
    }

    #[test]
    fn tiny_series() {
        let one = summarize(&[3.0], 0.95);
        assert_eq!((one.n, one.mean, one.sd, one.median), (1, 3.0, 0.0, 3.0));
        assert_eq!(one.ci_low, None);
        let none = summarize(&[], 0.95);
        assert_eq!(none.n, 0);
        assert!(!none.mean.is_nan());
        let zero_mean = summarize(&[-1.0, 1.0], 0.95);
        assert_eq!(zero_mean.cov, None);
    }

    #[test]
    fn an_exact_count_that_varies_says_so() {
        let r = metric_result(
            "alloc.count".into(),
            Unit::Count,
            "agent".into(),
            true,
            vec![40_000_002.0, 40_000_004.0, 40_000_002.0],
            Vec::new(),
            0.95,
        );
        assert_eq!(
            r.notes,
            [
                "an exact count that varied between runs: 40,000,002 to 40,000,004; compared as \
              a measurement"
            ]
        );
        // Steady exact counts and measured metrics carry no such note.
        let steady = metric_result(
            "alloc.count".into(),
            Unit::Count,
            "agent".into(),
            true,
            vec![7.0; 3],
            Vec::new(),
            0.95,
        );
        let measured = metric_result(
            "time.wall".into(),
            Unit::Seconds,
            "clock".into(),
            false,
            vec![1.0, 2.0],
            Vec::new(),
            0.95,
        );
        assert!(steady.notes.is_empty() && measured.notes.is_empty());
    }

    #[test]
    fn intervals_of_quantities_that_cannot_be_negative_stop_at_zero() {
        let skewed = [0.0, 0.0, 0.003];
        let raw = summarize(&skewed, 0.95);
        assert!(
            raw.ci_low.unwrap() < 0.0,
            "the t interval reaches below 0 here"
        );
        let cut = summarize_metric("time.sys", &skewed, 0.95);
        assert_eq!(cut.ci_low, Some(0.0));
        assert_eq!(cut.ci_high, raw.ci_high);
        // The longer side is the ± of the report.
        let half = raw.ci_high.unwrap() - raw.mean;
        assert!(close(
            cut.relative_ci_half_width().unwrap(),
            half / raw.mean,
            1e-12
        ));
        // A quantity that can be negative keeps its interval.
        assert_eq!(summarize_metric("heap.live_at_exit", &skewed, 0.95), raw);
    }

    fn wall(samples: &[f64]) -> Vec<MetricResult> {
        vec![metric_result(
            "time.wall".into(),
            Unit::Seconds,
            "clock".into(),
            false,
            samples.to_vec(),
            Vec::new(),
            0.95,
        )]
    }

    #[test]
    fn noisy_timing_runs_are_warned_about() {
        let quiet = [0.010, 0.0101, 0.0099, 0.0100, 0.0102, 0.0098];
        assert!(timing_warnings(&wall(&quiet)).is_empty());
        let mut spiked = quiet.to_vec();
        spiked[3] = 0.030;
        let w = timing_warnings(&wall(&spiked));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("time.wall: 1 of 6 runs are outliers (e.g. run 4 took 30.00 ms"),
            "{w:?}"
        );
        let mut cold = quiet.to_vec();
        cold[0] = 0.025;
        assert!(timing_warnings(&wall(&cold))[0].contains("Only the first run"));
        let noisy = [0.010, 0.016, 0.007, 0.013, 0.004];
        let w = timing_warnings(&wall(&noisy));
        assert!(
            w.iter()
                .any(|w| w.starts_with("time.wall varies by 47% (CoV)")),
            "{w:?}"
        );
    }

    #[test]
    fn a_harnessed_benchmark_is_judged_on_its_time_per_operation() {
        // The harness runs each process until its time per operation is steady, so the
        // processes' wall times differ by design: no warning for them.
        let mut metrics = wall(&[0.010, 0.016, 0.007, 0.013, 0.004]);
        let steady_op = [3.0e-6, 3.01e-6, 2.99e-6, 3.0e-6, 3.02e-6];
        metrics.push(metric_result(
            "time.op".into(),
            Unit::Seconds,
            "harness".into(),
            false,
            steady_op.to_vec(),
            Vec::new(),
            0.95,
        ));
        assert!(
            timing_warnings(&metrics).is_empty(),
            "{:?}",
            timing_warnings(&metrics)
        );
        // A time per operation that varies between processes is warned about, by its id.
        metrics[1].samples = vec![3.0e-6, 4.8e-6, 2.1e-6, 3.9e-6, 1.2e-6];
        metrics[1].summary = summarize(&metrics[1].samples, 0.95);
        let w = timing_warnings(&metrics);
        assert!(
            w.iter().any(|w| w.starts_with("time.op varies by")),
            "{w:?}"
        );
        assert!(w.iter().all(|w| is_noise_warning(w)), "{w:?}");
    }
}
