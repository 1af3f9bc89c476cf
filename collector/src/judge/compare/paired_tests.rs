//! The paired comparisons against reference values computed without statrs.
//!
//! scipy was not at hand, so the reference values come from the textbook formulas in
//! plain Python 3.11 (`statistics`, `math`): the per-pair values, their mean and sample
//! standard deviation, and Student's t by its own integral, not by a library: the CDF as
//! Simpson's rule over the density `Γ((ν+1)/2) / (Γ(ν/2) √(νπ)) · (1 + x²/ν)^(−(ν+1)/2)`
//! on [0, |x|] (200,000 intervals), the quantile by bisection of that CDF. The quantiles
//! it gives agree with printed tables of t: 2.364624 (ν = 7), 2.570582 (ν = 5), 2.262157
//! (ν = 9) at 0.975. With scipy, `stats.ttest_rel(np.log(b), np.log(a))` and its
//! `confidence_interval(0.95)` give the first case.
//!
//! ```python
//! def paired(d, conf):        # t interval of the mean of the per-pair values
//!     n=len(d); m=mean(d); se=stdev(d)/sqrt(n); q=tppf(1-(1-conf)/2, n-1)
//!     return m, se, m-q*se, m+q*se, 2*(1-tcdf(abs(m/se), n-1))
//! def trimmed(d, conf, g=0.2):  # Tukey-McLaughlin
//!     n=len(d); s=sorted(d); k=floor(g*n); kept=s[k:n-k]
//!     w=[min(max(x, s[k]), s[n-k-1]) for x in s]
//!     m=mean(kept); se=stdev(w)/((1-2*g)*sqrt(n)); q=tppf(1-(1-conf)/2, len(kept)-1)
//!     return m, se, m-q*se, m+q*se, 2*(1-tcdf(abs(m/se), len(kept)-1))
//! ```
use super::paired::has_outliers;
use super::*;

/// Runs of a reference whose level moves from run to run (a machine under load).
const A: [f64; 8] = [1.00, 1.10, 0.95, 1.20, 1.05, 0.98, 1.15, 1.02];
/// The candidate, 3% slower in each round, with a little noise of its own.
const B: [f64; 8] = [1.031, 1.129, 0.981, 1.234, 1.083, 1.012, 1.183, 1.049];
/// Ten rounds, one of them caught by a burst of load on the candidate (2.05 -> 3.10).
const C: [f64; 10] = [2.0, 2.2, 1.9, 2.4, 2.1, 2.05, 2.3, 1.95, 2.15, 2.25];
const D: [f64; 10] = [2.04, 2.25, 1.93, 2.45, 2.15, 3.10, 2.34, 1.99, 2.2, 2.29];
/// System times around the accounting's step, some 0: compared by their differences.
const E: [f64; 6] = [0.0, 0.001, 0.0, 0.002, 0.0, 0.001];
const F: [f64; 6] = [0.001, 0.001, 0.002, 0.002, 0.001, 0.003];

fn close(actual: f64, expected: f64, rel: f64) {
    let tol = rel * expected.abs().max(1e-300);
    assert!(
        (actual - expected).abs() <= tol,
        "{actual} differs from {expected} by more than {rel} relative"
    );
}

fn measured() -> Policy {
    Policy {
        confidence: 0.95,
        threshold: 0.02,
        threshold_absolute: 0.0,
        exact: false,
        resolution: 0.0,
    }
}

fn two<'a>(a: &'a [f64], b: &'a [f64]) -> [Series<'a>; 2] {
    [
        Series {
            label: "a",
            samples: a,
        },
        Series {
            label: "b",
            samples: b,
        },
    ]
}

#[test]
fn paired_log_ratios_match_the_reference_at_two_levels() {
    let i = paired_interval(&A, &B, 0.95, 0.0).unwrap();
    assert_eq!(
        (i.scale, i.trimmed, i.pairs, i.df),
        (Scale::LogRatio, false, 8, 7.0)
    );
    close(i.estimate, 0.02950044760366588, 1e-12);
    close(i.std_error, 0.0007908344445169196, 1e-10);
    close(i.low, 0.027630421297166266, 1e-9);
    close(i.high, 0.031370473910165494, 1e-9);
    close(i.p_value, 2.586987513097938e-09, 1e-5);
    let i = paired_interval(&A, &B, 0.90, 0.0).unwrap();
    close(i.low, 0.028002149584915922, 1e-9);
    close(i.high, 0.03099874562241584, 1e-9);
}

#[test]
fn an_outlying_pair_switches_to_the_trimmed_mean() {
    let logs: Vec<f64> = C.iter().zip(&D).map(|(c, d)| (d / c).ln()).collect();
    assert!(has_outliers(&logs));
    let i = paired_interval(&C, &D, 0.95, 0.0).unwrap();
    assert_eq!((i.scale, i.trimmed, i.df), (Scale::LogRatio, true, 5.0));
    close(i.estimate, 0.020635192681039676, 1e-12);
    close(i.std_error, 0.001215628265943773, 1e-10);
    close(i.low, 0.01751032074171872, 1e-9);
    close(i.high, 0.023760064620360632, 1e-9);
    close(i.p_value, 1.297928602639331e-05, 1e-6);
    // The plain mean would carry the burst: (ln(3.10 / 2.05) + ...) / 10 is over 5%.
    assert!(logs.iter().sum::<f64>() / 10.0 > 0.05);
}

#[test]
fn values_of_zero_are_compared_by_their_differences() {
    let i = paired_interval(&E, &F, 0.95, 0.0).unwrap();
    assert_eq!((i.scale, i.trimmed, i.df), (Scale::Difference, false, 5.0));
    close(i.estimate, 0.001, 1e-12);
    close(i.std_error, 0.0003651483716701108, 1e-10);
    close(i.low, 6.135622847268916e-05, 1e-8);
    close(i.high, 0.0019386437715273109, 1e-9);
    close(i.p_value, 0.040859403859295984, 1e-6);
}

#[test]
fn pairs_decide_what_welch_cannot_and_say_so() {
    let series = two(&A, &B);
    // The level moves by ±10% between rounds: the two series overlap, Welch sees nothing.
    let welch = compare(&series, 0, 1, &measured()).unwrap();
    assert_eq!(
        (welch.method, welch.verdict),
        (ComparisonMethod::WelchT, Verdict::NoChange)
    );
    let paired = compare_paired(&series, 0, 1, &measured()).unwrap();
    assert_eq!(
        (paired.method, paired.verdict),
        (ComparisonMethod::PairedT, Verdict::Regressed)
    );
    // The change is the ratio the pairs give, exp(mean log ratio) - 1, its interval the
    // interval's bounds likewise, and the difference agrees with it.
    close(
        paired.relative.unwrap(),
        0.02950044760366588f64.exp_m1(),
        1e-12,
    );
    close(
        paired.relative_ci_low.unwrap(),
        0.027630421297166266f64.exp_m1(),
        1e-9,
    );
    close(
        paired.relative_ci_high.unwrap(),
        0.031370473910165494f64.exp_m1(),
        1e-9,
    );
    close(
        paired.difference / paired.reference_mean,
        paired.relative.unwrap(),
        1e-12,
    );
    assert_eq!(paired.df, Some(7.0));
    assert_eq!(ComparisonMethod::PairedT.id(), "paired_t");
}

#[test]
fn series_that_are_not_pairs_fall_back_to_welch() {
    let series = two(&A, &B[..7]);
    let c = compare_paired(&series, 0, 1, &measured()).unwrap();
    assert_eq!(c.method, ComparisonMethod::WelchT);
    assert_eq!(
        paired_interval(&A, &B[..7], 0.95, 0.0),
        Err(CompareError::Unpaired {
            reference: 8,
            candidate: 7
        })
    );
}

#[test]
fn equal_pairs_of_a_measurement_keep_its_resolution() {
    // The same CPU time in every run on both sides: no change, judged with the 1 ms
    // accounting step as the least variance, not as an exact count.
    let same = [0.25; 6];
    let cpu = Policy {
        resolution: 1e-3,
        ..measured()
    };
    let c = compare_paired(&two(&same, &same), 0, 1, &cpu).unwrap();
    assert_eq!(c.verdict, Verdict::NoChange);
    // One step more in every run of six is a change the pairs can show.
    let more = [0.251; 6];
    let c = compare_paired(&two(&same, &more), 0, 1, &cpu).unwrap();
    assert_eq!(
        (c.method, c.verdict),
        (ComparisonMethod::PairedT, Verdict::BelowThreshold)
    );
}

#[test]
fn three_commands_pair_each_with_the_first_at_the_adjusted_level() {
    let series = [
        Series {
            label: "a",
            samples: &A,
        },
        Series {
            label: "b",
            samples: &B,
        },
        Series {
            label: "a again",
            samples: &A,
        },
    ];
    let c = compare_paired(&series, 0, 1, &measured()).unwrap();
    assert_eq!(c.method, ComparisonMethod::PairedT);
    close(c.confidence, 0.975, 1e-12);
    let i = paired_interval(&A, &B, 0.975, 0.0).unwrap();
    close(c.relative_ci_low.unwrap(), i.low.exp_m1(), 1e-12);
    close(c.p_value.unwrap(), 2.0 * i.p_value, 1e-12);
    assert!(c.anova.is_some());
}
