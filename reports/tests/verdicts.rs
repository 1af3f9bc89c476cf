//! Golden outputs of the comparison verdicts in the text, CSV and JSON reports.

use sbs_reports::model::*;
use sbs_reports::Render;

fn summary(samples: &[f64]) -> Summary {
    let n = samples.len();
    let mean = samples.iter().sum::<f64>() / n as f64;
    Summary {
        n,
        mean,
        sd: 0.0,
        cov: Some(0.0),
        median: mean,
        min: mean,
        max: mean,
        ci_low: None,
        ci_high: None,
        confidence: 0.95,
    }
}

fn metric(
    id: &str,
    unit: Unit,
    exact: bool,
    samples: &[f64],
    c: Option<Comparison>,
) -> MetricResult {
    MetricResult {
        id: id.into(),
        unit,
        source: "test".into(),
        exact,
        group: "g".into(),
        samples: samples.to_vec(),
        failed_runs: Vec::new(),
        summary: summary(samples),
        details: Vec::new(),
        notes: Vec::new(),
        comparison: c,
        trend: Vec::new(),
        distinguishable: None,
        bound: None,
        range: None,
    }
}

#[allow(clippy::too_many_arguments)]
fn comparison(
    method: ComparisonMethod,
    reference_mean: f64,
    difference: f64,
    ci: Option<(f64, f64)>,
    p_value: Option<f64>,
    threshold: f64,
    verdict: Verdict,
) -> Comparison {
    let rel = |v: f64| (reference_mean != 0.0).then(|| v / reference_mean.abs());
    Comparison {
        method,
        reference: "baseline main".into(),
        reference_n: 5,
        reference_mean,
        difference,
        ci_low: ci.map(|c| c.0),
        ci_high: ci.map(|c| c.1),
        confidence: 0.95,
        relative: rel(difference),
        relative_ci_low: ci.and_then(|c| rel(c.0)),
        relative_ci_high: ci.and_then(|c| rel(c.1)),
        df: p_value.map(|_| 7.5),
        p_value,
        threshold,
        threshold_absolute: None,
        verdict,
        anova: None,
        confirmation: None,
    }
}

fn report() -> Report {
    let mut anova = comparison(
        ComparisonMethod::Anova,
        0.010,
        -0.001,
        Some((-0.0015, -0.0005)),
        Some(0.0004),
        0.02,
        Verdict::Improved,
    );
    anova.reference = "2026-11-21T23:42:08.359Z".into();
    anova.confidence = 1.0 - 0.05 / 3.0;
    anova.anova = Some(AnovaSummary {
        groups: vec![
            "2026-11-21T23:40:00.000Z".into(),
            "2026-11-21T23:42:08.359Z".into(),
            "this run".into(),
        ],
        f: Some(14.25),
        df_between: 2.0,
        df_within: 12.0,
        p_value: 0.00067,
        significant: true,
        post_hoc: "bonferroni-welch".into(),
        subject: None,
        differing: vec![PairDifference {
            a: "2026-11-21T23:42:08.359Z".into(),
            b: "this run".into(),
            difference: -0.001,
            ci_low: -0.0015,
            ci_high: -0.0005,
            p_value: Some(0.0012),
        }],
    });
    Report {
        schema_version: SCHEMA_VERSION,
        tool_version: "0.1.0".into(),
        conditions: Conditions {
            instructions: None,
            runs: 5,
            group_runs: Vec::new(),
            warmup: 1,
            aslr_disabled: true,
            pinned_cpus: vec![],
            clean_env: false,
            machine: None,
        },
        benchmarks: vec![BenchmarkResult {
            name: "bench".into(),
            command: vec!["./bench".into()],
            metrics: vec![
                metric("time.wall", Unit::Seconds, false, &[0.009; 5], Some(anova)),
                metric(
                    "time.user",
                    Unit::Seconds,
                    false,
                    &[0.0101; 5],
                    Some(comparison(
                        ComparisonMethod::WelchT,
                        0.0100,
                        0.0001,
                        Some((0.00005, 0.00015)),
                        Some(0.01),
                        0.02,
                        Verdict::BelowThreshold,
                    )),
                ),
                metric(
                    "rss.peak",
                    Unit::Bytes,
                    false,
                    &[1_050_000.0; 5],
                    Some(comparison(
                        ComparisonMethod::WelchZ,
                        1_000_000.0,
                        50_000.0,
                        Some((40_000.0, 60_000.0)),
                        Some(1e-9),
                        0.02,
                        Verdict::Regressed,
                    )),
                ),
                metric(
                    "alloc.count",
                    Unit::Count,
                    true,
                    &[1000.0; 5],
                    Some(comparison(
                        ComparisonMethod::Exact,
                        1000.0,
                        0.0,
                        Some((0.0, 0.0)),
                        None,
                        0.005,
                        Verdict::NoChange,
                    )),
                ),
                metric(
                    "alloc.bytes",
                    Unit::Bytes,
                    true,
                    &[64.0; 5],
                    Some(comparison(
                        ComparisonMethod::Exact,
                        0.0,
                        64.0,
                        Some((64.0, 64.0)),
                        None,
                        0.02,
                        Verdict::Regressed,
                    )),
                ),
                metric(
                    "time.sys",
                    Unit::Seconds,
                    false,
                    &[0.002],
                    Some(comparison(
                        ComparisonMethod::WelchT,
                        0.001,
                        0.001,
                        None,
                        None,
                        0.02,
                        Verdict::Inconclusive,
                    )),
                ),
                metric("invocations.f", Unit::Count, true, &[3.0; 5], None),
            ],
            warnings: vec![],
            invocation_checks: Vec::new(),
        }],
        from_history: None,
        headline: None,
        speed: Vec::new(),
        scans: Vec::new(),
    }
}

fn render(r: &dyn Render) -> String {
    let mut out = Vec::new();
    r.render(&report(), &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn text() {
    insta::assert_snapshot!(render(&sbs_reports::text::Text::default()));
}

#[test]
fn csv() {
    insta::assert_snapshot!(render(&sbs_reports::csv::Csv));
}

#[test]
fn json() {
    let text = render(&sbs_reports::json::Json);
    let back: Report = serde_json::from_str(&text).unwrap();
    assert_eq!(back, report());
    insta::assert_snapshot!(text);
}

#[test]
fn html_shows_the_comparison_table() {
    let page = render(&sbs_reports::html::Html);
    assert_eq!(page.matches("<table class=comparison>").count(), 1);
    // Two regressions (rss.peak, alloc.bytes), highlighted.
    assert_eq!(
        page.matches("<tr style=\"color:#b00020;font-weight:bold\">")
            .count(),
        2
    );
    assert!(
        page.contains("<td>REGRESSED (&gt; 2.00%)</td>"),
        "escaped verdict"
    );
    assert!(page.contains("<p>time.wall: ANOVA over 3 series, F(2, 12) = 14.250"));
    assert!(!page.contains("<script"));
}
