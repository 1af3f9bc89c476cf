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
        threshold_absolute: 0.0,
        exact,
        resolution: 0.0,
    }
}

#[test]
fn welch_matches_scipy_unequal_sizes() {
    let i = welch_interval(&m(&A), &m(&B), 0.95).unwrap();
    close(i.df, 9.792242693815217, 1e-12);
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
    close(i.df, 8.927803814223081, 1e-12);
    close(i.low, -0.3214921731265893, 1e-9);
    close(i.high, 0.2948255064599149, 1e-9);
    close(i.p_value, 0.9240978443876927, 1e-9);
    assert!(!i.significant());
}

#[test]
fn welch_with_one_zero_variance_side() {
    let i = welch_interval(&m(&[5.0, 5.0, 5.0]), &m(&[5.5, 5.7, 5.2, 5.9]), 0.95).unwrap();
    close(i.df, 3.0, 1e-12);
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
        close(i.df, 1.2195121951219516, 1e-12);
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
fn welch_uses_student_t_for_large_samples_too() {
    // scipy: ttest_ind(y, x, equal_var=False) and its confidence_interval(0.95). The
    // normal distribution gave [-0.9304, 2.2018], 3.5% narrower.
    let (x, y) = (large_x(), large_y());
    let i = welch_interval(&m(&x), &m(&y), 0.95).unwrap();
    close(i.df, 68.52225067844809, 1e-9);
    close(i.difference, 0.6357142857142861, 1e-12);
    close(i.low, -0.9585128062113033, 1e-9);
    close(i.high, 2.2299413776398755, 1e-9);
    close(i.p_value, 0.42900989372195675, 1e-9);
}

#[test]
fn anova_matches_scipy_unequal_sizes() {
    let a = anova(&[&G1, &G2, &G3], 0.0).unwrap();
    close(a.f.unwrap(), 19.214457831325323, 1e-12);
    close(a.p_value, 0.00018155561990814797, 1e-7);
    assert_eq!((a.df_between, a.df_within), (2.0, 12.0));
    let a = anova(
        &[&G1, &[3.05, 3.15, 2.95, 3.1, 3.2, 2.9], &[3.0, 3.1, 3.2]],
        0.0,
    )
    .unwrap();
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
    let a = anova(&[&[5.0, 5.0], &[5.0, 5.0, 5.0], &[5.0]], 0.0).unwrap();
    assert_eq!((a.f, a.p_value), (None, 1.0));
    let a = anova(&[&[5.0, 5.0], &[6.0, 6.0, 6.0], &[5.0]], 0.0).unwrap();
    assert_eq!((a.f, a.p_value), (None, 0.0));
    assert!(anova(&[&[1.0], &[2.0]], 0.0).is_err());
    assert!(anova(&[&[1.0, 2.0]], 0.0).is_err());
}

#[test]
fn bonferroni_pairs_match_scipy() {
    let pairs = bonferroni_pairs(&[&G1, &G2, &G3], 0.95, false, 0.0).unwrap();
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
fn compare_three_series_judges_each_against_the_first_and_reports_the_anova() {
    // scipy: ttest_ind(cand, ref, equal_var=False).confidence_interval(1 - 0.05 / 2): two
    // comparisons with the reference decide something (not the three pairs).
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
    assert_eq!(c.method, ComparisonMethod::WelchT);
    assert_eq!(c.verdict, Verdict::Regressed);
    close(c.ci_low.unwrap(), 0.20260514611754254, 1e-9);
    close(c.ci_high.unwrap(), 0.9973948538824582, 1e-9);
    close(c.p_value.unwrap(), 2.0 * 0.004645314879344539, 1e-7);
    close(c.confidence, 1.0 - 0.05 / 2.0, 1e-12);
    // The ANOVA and its post-hoc pairs are context.
    let anova = c.anova.as_ref().unwrap();
    assert!(anova.significant);
    close(anova.f.unwrap(), 19.214457831325323, 1e-12);
    let differing: Vec<(&str, &str)> = anova
        .differing
        .iter()
        .map(|p| (p.a.as_str(), p.b.as_str()))
        .collect();
    assert_eq!(differing, [("g1", "g2"), ("g2", "g3")]);
    // Any series can be the reference: the interval is candidate - reference.
    let c = compare(&series, 1, 2, &policy(0.02, false)).unwrap();
    close(c.ci_low.unwrap(), -0.9295289822602333, 1e-9);
    assert_eq!(c.verdict, Verdict::Improved);
    let c = compare(&series, 2, 1, &policy(0.02, false)).unwrap();
    close(c.ci_low.unwrap(), 0.37047101773976837, 1e-9);
    close(c.ci_high.unwrap(), 0.9295289822602335, 1e-9);
    // g1 vs g3 do not differ.
    let c = compare(&series, 0, 2, &policy(0.02, false)).unwrap();
    assert_eq!(c.verdict, Verdict::NoChange);
    close(c.ci_low.unwrap(), -0.4454543567813657, 1e-9);
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
    // Exact values: an exact comparison, no test was run, so no p-value and no ANOVA
    // (it used to report p = 0 or 1 that no test computed).
    assert_eq!((c.p_value, c.anova.is_none()), (None, true));
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
    assert_eq!((c.p_value, c.anova.is_none()), (None, true));
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
    let saved: Vec<Series<'_>> = h
        .iter()
        .map(|s| Series {
            label: "saved",
            samples: s,
        })
        .collect();
    fn now(samples: &[f64]) -> Series<'_> {
        Series {
            label: "now",
            samples,
        }
    }
    let run = |cand: &[f64], exact: bool| {
        against_sessions(&saved, now(cand), &policy(0.02, exact)).unwrap()
    };
    let c = run(&[1105920.0; 2], false);
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
    let c = run(&[1300000.0; 2], false);
    assert_eq!(c.verdict, Verdict::Regressed);
    close(c.ci_low.unwrap(), 122733.37895179336, 1e-9);
    close(c.p_value.unwrap(), 0.005497156638804684, 1e-6);
    // Different commands (compare): compared exactly with the reference, and +4.65% is
    // past the 2% threshold. An exact count: against the latest session, exactly.
    let mut series = saved.clone();
    series.push(now(&[1105920.0; 2]));
    assert_eq!(
        compare(&series, 3, 4, &policy(0.02, false))
            .unwrap()
            .verdict,
        Verdict::Regressed
    );
    assert_eq!(run(&[1105920.0; 2], true).verdict, Verdict::Regressed);
    // All saved sessions agree: no evidence of a spread, compared exactly.
    let same = [[1056768.0; 2]; 3];
    let agreeing: Vec<Series<'_>> = same
        .iter()
        .map(|s| Series {
            label: "saved",
            samples: s,
        })
        .collect();
    let c = against_sessions(&agreeing, now(&[1105920.0; 2]), &policy(0.02, false)).unwrap();
    assert_eq!(
        (c.method, c.verdict),
        (ComparisonMethod::Exact, Verdict::Regressed)
    );
}

#[test]
fn agreeing_sessions_are_one_pooled_reference() {
    // scipy: f_oneway(A, C).pvalue = 0.926 (they agree), then
    // ttest_ind(B, A + C, equal_var=False).confidence_interval(0.95).
    let saved = [
        Series {
            label: "a",
            samples: &A,
        },
        Series {
            label: "c",
            samples: &C,
        },
    ];
    let now = Series {
        label: "now",
        samples: &B,
    };
    let c = against_sessions(&saved, now, &policy(0.02, false)).unwrap();
    assert_eq!(c.method, ComparisonMethod::WelchT);
    assert_eq!(c.reference, "2 saved sessions, pooled");
    assert_eq!(c.reference_n, A.len() + C.len());
    close(c.ci_low.unwrap(), 0.6962152249318261, 1e-9);
    close(c.ci_high.unwrap(), 1.1869016581850578, 1e-9);
    close(c.p_value.unwrap(), 2.3851233681977795e-06, 1e-6);
    close(c.df.unwrap(), 11.99917205261831, 1e-9);
    // Full confidence, not a Bonferroni level: one decision.
    close(c.confidence, 0.95, 1e-12);
    assert_eq!(c.verdict, Verdict::Regressed);
}

#[test]
fn drifting_sessions_judge_the_run_by_the_spread_of_their_means() {
    // Sessions whose means differ far beyond their within-session noise (scipy f_oneway
    // p = 9.6e-8). Prediction interval of a new session mean from the 3 means:
    // m=np.mean(means); s=np.std(means,ddof=1); se=s*np.sqrt(1+1/3); t=stats.t.ppf(0.975,2)
    let s1 = [10.0, 10.1, 9.9, 10.05];
    let s2 = [10.6, 10.5, 10.7, 10.55];
    let s3 = [9.5, 9.6, 9.4, 9.55];
    let saved = [
        Series {
            label: "1",
            samples: &s1,
        },
        Series {
            label: "2",
            samples: &s2,
        },
        Series {
            label: "3",
            samples: &s3,
        },
    ];
    let judge = |samples: &[f64]| {
        let now = Series {
            label: "now",
            samples,
        };
        against_sessions(&saved, now, &policy(0.02, false)).unwrap()
    };
    // +15.7% over the latest session, but within the sessions' own spread: not a
    // regression (Welch against the latest session alone called it one).
    let c = judge(&[10.9, 11.0, 11.1, 10.95]);
    assert_eq!(
        (c.method, c.verdict),
        (ComparisonMethod::Sessions, Verdict::NoChange)
    );
    close(c.reference_mean, 10.0375, 1e-12);
    close(c.ci_low.unwrap(), -1.7226135612660594, 1e-9);
    close(c.ci_high.unwrap(), 3.6226135612660615, 1e-9);
    close(c.p_value.unwrap(), 0.2657832974850908, 1e-7);
    let latest_only = compare(
        &[
            saved[2],
            Series {
                label: "now",
                samples: &[10.9, 11.0, 11.1, 10.95],
            },
        ],
        0,
        1,
        &policy(0.02, false),
    )
    .unwrap();
    assert_eq!(latest_only.verdict, Verdict::Regressed);
    // Far outside the spread: a regression.
    let c = judge(&[14.0, 14.1, 13.9, 14.05]);
    assert_eq!(c.verdict, Verdict::Regressed);
    close(c.ci_low.unwrap(), 1.3023864387339392, 1e-9);
    close(c.p_value.unwrap(), 0.023559354985181826, 1e-7);
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
    let t = Thresholds::from_args(&["5", "alloc.count=0.5", "alloc.*=1%", "time.*=10"]).unwrap();
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

#[test]
fn an_exact_count_from_one_run_against_a_varying_one_is_inconclusive_not_an_error() {
    // A first history saved with --runs 1, then a threaded program whose agent counts
    // vary by one: Welch has no variance on one side. It used to abort the whole run.
    let once = [5000.0];
    let varying = [5000.0, 5001.0, 5000.0];
    let series = [
        Series {
            label: "saved",
            samples: &once,
        },
        Series {
            label: "now",
            samples: &varying,
        },
    ];
    for (r, c) in [(0, 1), (1, 0)] {
        let got = compare(&series, r, c, &policy(0.02, true)).unwrap();
        assert_eq!(got.verdict, Verdict::Inconclusive);
    }
    let now = Series {
        label: "now",
        samples: &varying,
    };
    let saved = [series[0], series[0]];
    let got = against_sessions(&saved, now, &policy(0.02, true)).unwrap();
    assert_eq!(got.verdict, Verdict::Inconclusive);
}

#[test]
fn equal_samples_of_a_measurement_are_not_an_exact_count() {
    // Peak RSS of a small program, 2 runs each, one page apart: +10% but a single step of
    // the instrument's resolution. Taken as exact, it was a certain regression.
    let before = [40960.0, 40960.0];
    let after = [45056.0, 45056.0];
    let series = [
        Series {
            label: "before",
            samples: &before,
        },
        Series {
            label: "after",
            samples: &after,
        },
    ];
    let page = Policy {
        resolution: 4096.0,
        ..policy(0.02, false)
    };
    let c = compare(&series, 0, 1, &page).unwrap();
    assert_eq!(
        (c.method, c.verdict),
        (ComparisonMethod::WelchT, Verdict::NoChange)
    );
    // t = step / sqrt(2 * step^2 / 12 / n) = sqrt(6 n) = 3.46 with df 2: p = 0.074.
    close(c.p_value.unwrap(), 0.07417990022744853, 1e-6);
    // Ten runs each, the same step, is significant; an exact count stays exact.
    let (before, after) = ([40960.0; 10], [45056.0; 10]);
    let ten = [
        Series {
            label: "before",
            samples: &before,
        },
        Series {
            label: "after",
            samples: &after,
        },
    ];
    assert_eq!(
        compare(&ten, 0, 1, &page).unwrap().verdict,
        Verdict::Regressed
    );
    let exact = Policy {
        resolution: 4096.0,
        ..policy(0.02, true)
    };
    let c = compare(&series, 0, 1, &exact).unwrap();
    assert_eq!(
        (c.method, c.verdict),
        (ComparisonMethod::Exact, Verdict::Regressed)
    );
}

#[test]
fn an_absolute_threshold_lets_small_counts_move() {
    let t = Thresholds::from_args(&["alloc.count=+5", "+1", "alloc.*=1", "alloc.*=+2"]).unwrap();
    assert_eq!(t.absolute_for_metric("alloc.count"), 5.0);
    assert_eq!(t.absolute_for_metric("alloc.bytes"), 2.0);
    assert_eq!(t.absolute_for_metric("time.wall"), 1.0);
    assert_eq!(t.for_metric("alloc.count"), 0.01);
    let mut names: Vec<&str> = t.patterns().collect();
    names.sort();
    assert_eq!(names, ["alloc.*", "alloc.*", "alloc.count"]);
    assert!(Thresholds::from_args(&["a=+x"]).is_err());
    assert!(Thresholds::from_args(&["a=+-3"]).is_err());

    // 10 -> 11 allocations is +10%: past the default 2%, within an absolute floor of 5.
    const TEN: [f64; 3] = [10.0; 3];
    const ELEVEN: [f64; 3] = [11.0; 3];
    const ZERO: [f64; 3] = [0.0; 3];
    const ONE: [f64; 3] = [1.0; 3];
    let (ten, eleven, zero, one) = (&TEN, &ELEVEN, &ZERO, &ONE);
    let pair = |a: &'static [f64], b: &'static [f64]| {
        [
            Series {
                label: "before",
                samples: a,
            },
            Series {
                label: "after",
                samples: b,
            },
        ]
    };
    let floor = Policy {
        threshold_absolute: 5.0,
        ..policy(0.02, true)
    };
    assert_eq!(
        compare(&pair(ten, eleven), 0, 1, &policy(0.02, true))
            .unwrap()
            .verdict,
        Verdict::Regressed
    );
    let c = compare(&pair(ten, eleven), 0, 1, &floor).unwrap();
    assert_eq!(
        (c.verdict, c.threshold_absolute),
        (Verdict::BelowThreshold, Some(5.0))
    );
    // From 0: a count that appears is past any relative threshold, not past the floor.
    assert_eq!(
        compare(&pair(zero, one), 0, 1, &policy(0.02, true))
            .unwrap()
            .verdict,
        Verdict::Regressed
    );
    assert_eq!(
        compare(&pair(zero, one), 0, 1, &floor).unwrap().verdict,
        Verdict::BelowThreshold
    );
}

#[test]
fn a_quantity_that_cannot_be_negative_cannot_fall_by_more_than_all_of_it() {
    // time.sys of a few skewed runs near 0: Welch's symmetric interval reached -248.9%.
    let old = [0.004, 0.0, 0.0, 0.012, 0.0];
    let new = [0.0, 0.0, 0.004, 0.0, 0.0];
    let series = [
        Series {
            label: "old",
            samples: &old,
        },
        Series {
            label: "new",
            samples: &new,
        },
    ];
    let raw = compare(&series, 0, 1, &policy(0.02, false)).unwrap();
    assert!(raw.relative_ci_low.unwrap() < -1.0, "{raw:?}");
    for (id, cut) in [("time.sys", true), ("heap.live_at_exit", false)] {
        let mut c = raw.clone();
        bound_by_range(&mut c, id);
        match cut {
            true => {
                assert_eq!(c.relative_ci_low, Some(-1.0), "{id}");
                close(c.ci_low.unwrap(), -c.reference_mean, 1e-12);
            }
            false => assert_eq!(c.relative_ci_low, raw.relative_ci_low, "{id}"),
        }
        assert_eq!(c.ci_high, raw.ci_high);
        assert_eq!(c.verdict, raw.verdict);
    }
}
