use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};
use sbs_reports::model::{BenchmarkResult, Conditions, Report, Unit, SCHEMA_VERSION};

use super::*;
use crate::judge::compare::{compare, Policy, Series};
use crate::judge::looks::FirstLooks;
use crate::judge::regression::judge_against_history;
use crate::judge::summary::metric_result;

const POLICY: Policy = Policy {
    confidence: 0.95,
    threshold: 0.0,
    threshold_absolute: 0.0,
    exact: false,
    resolution: 0.0,
};

/// A metric of `group` with `samples`, compared with `reference` (exact if asked).
fn judged(id: &str, group: &str, exact: bool, reference: &[f64], samples: &[f64]) -> MetricResult {
    let mut m = metric_result(
        id.into(),
        Unit::Seconds,
        "clock".into(),
        exact,
        samples.to_vec(),
        Vec::new(),
        0.95,
    );
    m.group = group.into();
    // A 5% threshold: the runs a confirmation adds pull a first look's +20% under it.
    let policy = Policy {
        exact,
        threshold: 0.05,
        ..POLICY
    };
    let series = [
        Series {
            label: "baseline main",
            samples: reference,
        },
        Series {
            label: "this run",
            samples,
        },
    ];
    m.comparison = Some(compare(&series, 0, 1, &policy).expect("comparable"));
    m
}

fn report(metrics: Vec<MetricResult>) -> Report {
    Report {
        schema_version: SCHEMA_VERSION,
        tool_version: String::new(),
        conditions: Conditions {
            instructions: None,
            runs: 5,
            group_runs: Vec::new(),
            warmup: 0,
            aslr_disabled: true,
            pinned_cpus: Vec::new(),
            clean_env: false,
            machine: None,
        },
        benchmarks: vec![BenchmarkResult {
            name: "b".into(),
            command: vec!["b".into()],
            metrics,
            warnings: Vec::new(),
            invocation_checks: Vec::new(),
        }],
        from_history: None,
        headline: None,
        speed: Vec::new(),
        scans: Vec::new(),
    }
}

const BASE: [f64; 5] = [1.0, 1.01, 0.99, 1.0, 1.005];
const SLOWER: [f64; 5] = [1.2, 1.21, 1.19, 1.2, 1.205];

#[test]
fn only_groups_with_a_measured_metric_that_looks_regressed_are_extended() {
    let r = report(vec![
        judged("time.wall", "timing", false, &BASE, &SLOWER),
        judged("time.user", "timing", false, &BASE, &SLOWER),
        // A count that regressed: repeatable, so no confirmation.
        judged("alloc.count", "alloc", true, &[10.0], &[12.0]),
        // A measured metric that did not move.
        judged("rss.peak", "memory", false, &BASE, &BASE),
        // A harness's group with its calibration: its derived metrics are made once.
        judged("time.op", "harness", false, &BASE, &SLOWER),
        judged("time.op.empty", "harness", false, &BASE, &BASE),
        // A time profile: its functions were chosen by its first run.
        judged(
            "profile.inclusive.main",
            "profile-time",
            false,
            &BASE,
            &SLOWER,
        ),
    ]);
    let verdicts: Vec<Verdict> = r.benchmarks[0]
        .metrics
        .iter()
        .map(|m| m.comparison.as_ref().unwrap().verdict)
        .collect();
    assert_eq!(verdicts[2], Verdict::Regressed, "the count regressed too");
    assert_eq!(groups_to_confirm(&r), [(0, "timing".to_string())]);
    assert!(!looks_regressed(&r.benchmarks[0].metrics[2]));
    assert!(groups_to_confirm(&report(vec![judged(
        "rss.peak", "memory", false, &BASE, &BASE
    )]))
    .is_empty());
}

#[test]
fn the_first_look_is_kept_and_said_beside_the_final_decision() {
    let mut r = report(vec![
        judged("time.wall", "timing", false, &BASE, &SLOWER),
        judged("alloc.count", "alloc", true, &[10.0], &[12.0]),
    ]);
    let groups = groups_to_confirm(&r);
    let first = FirstLooks::take(&r);
    // 25 confirmation runs at the reference's level: the final look over all 30 runs.
    let mut all = SLOWER.to_vec();
    all.extend(BASE.repeat(5));
    r.benchmarks[0].metrics[0] = judged("time.wall", "timing", false, &BASE, &all);
    first.record(&mut r, &groups);
    let wall = &r.benchmarks[0].metrics[0];
    let c = wall.comparison.as_ref().unwrap();
    let confirmation = c.confirmation.as_ref().expect("confirmation recorded");
    assert_eq!((confirmation.first_runs, confirmation.added_runs), (5, 25));
    assert_eq!(confirmation.first_verdict, Verdict::Regressed);
    assert!(confirmation.first_relative.unwrap() > 0.19);
    assert_ne!(c.verdict, Verdict::Regressed, "{c:?}");
    let note = wall.notes.last().unwrap();
    assert!(
        note.starts_with("confirmation runs: the first look, after 5 runs, said REGRESSED +19.98% (p = 1.01e-10); 25 confirmation runs made; over all 30 runs: below threshold +3.33% (p = 0.026)"),
        "{note}"
    );
    // The count's group was not extended: nothing recorded.
    assert!(r.benchmarks[0].metrics[1]
        .comparison
        .as_ref()
        .unwrap()
        .confirmation
        .is_none());
}

#[test]
fn decide_confirms_only_a_measured_regression_and_decides_on_all_runs() {
    let judge = |s: &[f64]| {
        let series = [
            Series {
                label: "baseline",
                samples: &BASE,
            },
            Series {
                label: "this run",
                samples: s,
            },
        ];
        compare(
            &series,
            0,
            1,
            &Policy {
                threshold: 0.05,
                ..POLICY
            },
        )
    };
    let mut asked = 0;
    let (first, last) = decide(
        &SLOWER,
        || {
            asked += 1;
            BASE.repeat(4)
        },
        false,
        judge,
    )
    .unwrap();
    assert_eq!(first.verdict, Verdict::Regressed);
    let last = last.expect("confirmed");
    assert_eq!(last.reference_n, 5);
    assert_ne!(last.verdict, Verdict::Regressed, "{last:?}");
    assert_eq!(asked, 1);
    // Nothing regressed: no runs asked for.
    let (first, last) = decide(&BASE, || panic!("no runs needed"), false, judge).unwrap();
    assert_ne!(first.verdict, Verdict::Regressed);
    assert!(last.is_none());
    // An exact count never asks.
    let exact = |s: &[f64]| {
        let series = [
            Series {
                label: "baseline",
                samples: &[10.0],
            },
            Series {
                label: "this run",
                samples: s,
            },
        ];
        compare(
            &series,
            0,
            1,
            &Policy {
                exact: true,
                ..POLICY
            },
        )
    };
    let (first, last) = decide(&[12.0], || panic!("no runs for a count"), true, exact).unwrap();
    assert_eq!(first.verdict, Verdict::Regressed);
    assert!(last.is_none());
}

/// The gate's failures over `trials` seeded trials of independent normal runs (sd 2% of
/// the mean): `depth` saved sessions of 10 runs, this run `effect` slower; returns the
/// share failed by the first look alone and the share failed with 10 confirmation runs,
/// both judged on the same draws.
fn rates(depth: usize, effect: f64, trials: usize, seed: u64) -> (f64, f64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let noise = Normal::new(100.0, 2.0).expect("valid sd");
    let runs = 10;
    let (mut first_failed, mut failed) = (0, 0);
    for _ in 0..trials {
        let history: Vec<Vec<f64>> = (0..depth)
            .map(|_| (0..runs).map(|_| noise.sample(&mut rng)).collect())
            .collect();
        let labels: Vec<String> = (0..depth).map(|i| format!("session {i}")).collect();
        let saved: Vec<Series<'_>> = labels
            .iter()
            .zip(&history)
            .map(|(label, samples)| Series { label, samples })
            .collect();
        let mut draw = |n: usize| -> Vec<f64> {
            (0..n)
                .map(|_| noise.sample(&mut rng) * (1.0 + effect))
                .collect()
        };
        let (first, more) = (draw(runs), draw(runs));
        let judge = |s: &[f64]| judge_against_history(&saved, s, &POLICY);
        let (look, last) = decide(&first, || more, false, judge).expect("comparable");
        first_failed += usize::from(look.verdict == Verdict::Regressed);
        failed += usize::from(last.is_some_and(|c| c.verdict == Verdict::Regressed));
    }
    let share = |k: usize| k as f64 / trials as f64;
    (share(first_failed), share(failed))
}

#[test]
fn confirmation_keeps_the_false_alarm_rate_within_alpha_and_the_power() {
    // 95% confidence: a regression is the worse side of a two-sided test, 2.5% of A/A
    // runs at most. 3000 trials: one standard error of a 2.5% rate is 0.29%.
    for depth in [1, 5] {
        let (without, with) = rates(depth, 0.0, 3000, 7 + depth as u64);
        assert!(
            without > 0.015 && without < 0.035,
            "the first look alone fires at about alpha/2: {without}"
        );
        assert!(with <= without, "depth {depth}: {with} > {without}");
        assert!(with < 0.025, "depth {depth}: {with}");
        // A 3% regression (1.5 standard deviations of a run) is found about as often.
        let (power_without, power) = rates(depth, 0.03, 1000, 99 + depth as u64);
        assert!(power > 0.8, "depth {depth}: power {power}");
        assert!(
            power > power_without - 0.05,
            "depth {depth}: {power} against {power_without}"
        );
    }
}
