//! Golden outputs of every renderer from a fixed, hand-built report.

use sbs_reports::model::*;
use sbs_reports::Render;

fn summary(samples: &[f64], ci: Option<(f64, f64)>) -> Summary {
    let n = samples.len();
    let mean = samples.iter().sum::<f64>() / n as f64;
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let sd = if n > 1 {
        (samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    Summary {
        n,
        mean,
        sd,
        cov: Some(sd / mean),
        median: sorted[n / 2],
        min: sorted[0],
        max: sorted[n - 1],
        ci_low: ci.map(|c| c.0),
        ci_high: ci.map(|c| c.1),
        confidence: 0.95,
    }
}

fn metric(
    id: &str,
    unit: Unit,
    source: &str,
    exact: bool,
    samples: &[f64],
    ci: Option<(f64, f64)>,
) -> MetricResult {
    MetricResult {
        id: id.into(),
        unit,
        source: source.into(),
        exact,
        group: if exact { "invocations" } else { "timing" }.into(),
        samples: samples.to_vec(),
        failed_runs: Vec::new(),
        summary: summary(samples, ci),
        details: Vec::new(),
        notes: Vec::new(),
        comparison: None,
        trend: Vec::new(),
        distinguishable: None,
        bound: None,
        range: None,
    }
}

pub fn report() -> Report {
    let mut calls = metric(
        "invocations.Vec::push",
        Unit::Count,
        "uprobe",
        true,
        &[3000.0, 3000.0, 3000.0],
        Some((3000.0, 3000.0)),
    );
    calls.summary.sd = 0.0;
    calls.summary.cov = Some(0.0);
    calls.details = vec![
        Detail {
            label: "alloc::vec::Vec<T,A>::push".into(),
            samples: vec![1000.0; 3],
            summary: Summary {
                sd: 0.0,
                cov: Some(0.0),
                ..summary(&[1000.0; 3], Some((1000.0, 1000.0)))
            },
        },
        Detail {
            label: "<alloc::vec::Vec<u32>>::push".into(),
            samples: vec![2000.0; 3],
            summary: Summary {
                sd: 0.0,
                cov: Some(0.0),
                ..summary(&[2000.0; 3], Some((2000.0, 2000.0)))
            },
        },
    ];
    let mut wall = metric(
        "time.wall",
        Unit::Seconds,
        "clock",
        false,
        &[0.0121, 0.0125, 0.0119],
        Some((0.0113, 0.0131)),
    );
    wall.comparison = Some(Comparison {
        method: ComparisonMethod::WelchT,
        reference: "baseline main".into(),
        reference_n: 3,
        reference_mean: 0.0110,
        difference: 0.0011666,
        ci_low: Some(0.0004),
        ci_high: Some(0.0019),
        confidence: 0.95,
        relative: Some(0.10606),
        relative_ci_low: Some(0.03636),
        relative_ci_high: Some(0.17273),
        df: Some(3.7),
        p_value: Some(0.012),
        threshold: 0.02,
        threshold_absolute: None,
        verdict: Verdict::Regressed,
        anova: None,
        confirmation: None,
    });
    calls.notes =
        vec!["the measured region only: the 3 operations of each run, set-up excluded".into()];
    calls.comparison = Some(Comparison {
        method: ComparisonMethod::Exact,
        reference: "baseline main".into(),
        reference_n: 3,
        reference_mean: 3000.0,
        difference: 0.0,
        ci_low: None,
        ci_high: None,
        confidence: 0.95,
        relative: Some(0.0),
        relative_ci_low: None,
        relative_ci_high: None,
        df: None,
        p_value: None,
        threshold: 0.02,
        threshold_absolute: None,
        verdict: Verdict::NoChange,
        anova: None,
        confirmation: None,
    });
    Report {
        schema_version: SCHEMA_VERSION,
        tool_version: "0.1.0".into(),
        conditions: Conditions {
            instructions: None,
            runs: 3,
            group_runs: Vec::new(),
            warmup: 1,
            aslr_disabled: true,
            pinned_cpus: vec![1],
            clean_env: false,
            machine: None,
        },
        benchmarks: vec![BenchmarkResult {
            name: "./bench <fast> & \"quoted\"".into(),
            command: vec!["./bench".into(), "<fast>".into()],
            metrics: vec![
                wall,
                metric(
                    "rss.peak",
                    Unit::Bytes,
                    "rusage",
                    false,
                    &[13_000_000.0, 13_100_000.0, 13_050_000.0],
                    Some((12_900_000.0, 13_200_000.0)),
                ),
                calls,
                MetricResult {
                    // Inlined calls counted at an unrolled loop and at a copy whose
                    // entries are uncertain: a count with bounds, one site without.
                    range: Some(CountRange {
                        low: 2502.0,
                        high: Some(9502.0),
                        sites: 6,
                        unbounded_sites: 1,
                    }),
                    group: "invocations".into(),
                    ..metric(
                        "invocations.String::push",
                        Unit::Count,
                        "uprobe",
                        false,
                        &[2502.0, 2502.0, 2502.0],
                        Some((2502.0, 2502.0)),
                    )
                },
                MetricResult {
                    // Threads allocated at once: within a stated bound, not exact.
                    bound: Some(16384.0),
                    group: "alloc".into(),
                    ..metric("heap.peak", Unit::Bytes, "agent", false, &[512.0], None)
                },
            ],
            warnings: vec!["Vec::push also has 37 inlined instances that were not counted".into()],
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
fn markdown() {
    insta::assert_snapshot!(render(&sbs_reports::markdown::Markdown::default()));
}

#[test]
fn colour_only_when_asked() {
    let mut out = Vec::new();
    sbs_reports::text::Text {
        color: true,
        ..Default::default()
    }
    .render(&report(), &mut out)
    .unwrap();
    let coloured = String::from_utf8(out).unwrap();
    assert!(coloured.contains("\x1b[1;31mREGRESSED"), "{coloured}");
    assert!(!render(&sbs_reports::text::Text::default()).contains('\x1b'));
}

#[test]
fn csv() {
    insta::assert_snapshot!(render(&sbs_reports::csv::Csv));
}

#[test]
fn json() {
    let text = render(&sbs_reports::json::Json);
    // Round trip: the schema types read what they write.
    let back: Report = serde_json::from_str(&text).unwrap();
    assert_eq!(back, report());
    insta::assert_snapshot!(text);
}

#[test]
fn bmf() {
    let text = render(&sbs_reports::bmf::Bmf);
    // The documented BMF shape: object of benchmarks -> object of measures -> object with
    // a numeric `value` and optional numeric `lower_value`/`upper_value`, nothing else.
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let benches = doc.as_object().expect("top level is an object");
    assert!(!benches.is_empty());
    for (name, measures) in benches {
        assert!(!name.is_empty() && name.len() <= 1024);
        let measures = measures.as_object().expect("benchmark is an object");
        for (measure, metric) in measures {
            assert!(
                !measure.is_empty() && measure.chars().count() <= 64,
                "{measure}"
            );
            let metric = metric.as_object().expect("metric is an object");
            assert!(metric["value"].is_number(), "{measure}: value required");
            for (k, v) in metric {
                assert!(
                    ["value", "lower_value", "upper_value"].contains(&k.as_str()),
                    "{k}"
                );
                assert!(v.is_number(), "{measure}.{k}");
            }
        }
    }
    assert_eq!(
        doc["./bench <fast> & \"quoted\""]["latency"]["value"]
            .as_f64()
            .unwrap()
            .round(),
        12166667.0
    );
    insta::assert_snapshot!(text);
}

#[test]
fn html_is_self_contained_with_one_plot_per_measured_metric() {
    let page = render(&sbs_reports::html::Html);
    assert!(page.starts_with("<!DOCTYPE html>"));
    // Two measured metrics get a strip plot each; the counts (the same in every run) and
    // the heap peak's one run are a number, not a plot of identical dots.
    assert_eq!(
        page.matches("<svg").count(),
        2,
        "one plot per measured metric"
    );
    assert_eq!(page.matches("<figure>").count(), 2);
    assert_eq!(page.matches("<figure class=exact>").count(), 3);
    assert!(page.contains("invocations.Vec::push — the same in all 3 runs"));
    assert!(!page.contains("<script"), "no scripts");
    assert!(!page.contains("src=\"http"), "no network fetches");
    assert!(!page.contains("href=\"http"), "no network fetches");
    // Names are escaped.
    assert!(page.contains("./bench &lt;fast&gt; &amp; &quot;quoted&quot;"));
    assert!(page.contains("warning: Vec::push also has 37 inlined instances"));
    assert!(page.contains(
        "<p class=note>note (invocations.Vec::push): the measured region only: the 3 operations"
    ));
    // A count that is not exact gives its bounds, and says a site has none.
    assert!(page.contains(
        "<p class=bounds>bounds (invocations.String::push): 2,502 to 9,502 per run, as far \
         as sites are bounded: 1 of 6 unbounded</p>"
    ));
    // Every plot has the CI band and the samples (3 runs of each measured metric).
    let points = 3 + 3;
    assert!(page.matches("<circle").count() >= points);
}

#[test]
fn text_folds_breakdown_lines_that_are_always_zero() {
    let mut r = report();
    let calls = &mut r.benchmarks[0].metrics[2];
    calls.details.push(Detail {
        label: "never::called".into(),
        samples: vec![0.0; 3],
        summary: Summary {
            sd: 0.0,
            cov: Some(0.0),
            ..summary(&[0.0; 3], Some((0.0, 0.0)))
        },
    });
    let mut out = Vec::new();
    sbs_reports::text::Text::default()
        .render(&r, &mut out)
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(!text.contains("never::called"), "{text}");
    assert!(text.contains("├ <alloc::vec::Vec<u32>>::push"), "{text}");
    assert!(
        text.contains("└ 1 more, 0 in every run (listed in the JSON report)"),
        "{text}"
    );
    let mut json = Vec::new();
    sbs_reports::json::Json.render(&r, &mut json).unwrap();
    assert!(String::from_utf8(json).unwrap().contains("never::called"));
}

#[test]
fn a_calibrated_value_indistinguishable_from_zero_and_the_warnings_summary() {
    let mut r = report();
    let mut zero = metric(
        "time.op.calibrated",
        Unit::Seconds,
        "harness",
        false,
        &[1e-10, -2e-10, 0.5e-10],
        Some((-4e-10, 3e-10)),
    );
    zero.distinguishable = Some(false);
    r.benchmarks[0].metrics.push(zero);
    r.benchmarks[0].warnings = vec!["`b`: dead".into(), "`b`: drift".into()];
    let text = {
        let mut buf = Vec::new();
        sbs_reports::text::Text::default()
            .render(&r, &mut buf)
            .unwrap();
        String::from_utf8(buf).unwrap()
    };
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("time.op.calibrated"))
        .unwrap();
    assert!(
        row.contains("≈ 0") && row.contains("indistinguishable from 0") && !row.contains("e-"),
        "{row}"
    );
    assert_eq!(
        text.lines().last(),
        Some("2 warnings in 1 benchmark"),
        "{text}"
    );
    let mut buf = Vec::new();
    sbs_reports::markdown::Markdown::default()
        .render(&r, &mut buf)
        .unwrap();
    let md = String::from_utf8(buf).unwrap();
    assert!(md.contains("≈ 0 (indistinguishable from 0)"), "{md}");
    assert!(
        md.contains(", 2 warnings in 1 benchmark; smaller is better"),
        "{md}"
    );
    let mut buf = Vec::new();
    sbs_reports::html::Html.render(&r, &mut buf).unwrap();
    let page = String::from_utf8(buf).unwrap();
    assert!(page.contains("<p class=warning>2 warnings in 1 benchmark</p>"));
    assert!(page.contains("<td>≈ 0</td><td>indistinguishable from 0</td>"));
}

#[test]
fn a_report_written_before_count_ranges_reads_without_one() {
    // The JSON of a report from before `range` existed: the field is optional.
    let mut old: serde_json::Value =
        serde_json::from_str(&render(&sbs_reports::json::Json)).unwrap();
    for m in old["benchmarks"][0]["metrics"].as_array_mut().unwrap() {
        m.as_object_mut().unwrap().remove("range");
    }
    let back: Report = serde_json::from_value(old).unwrap();
    assert!(back.benchmarks[0].metrics.iter().all(|m| m.range.is_none()));
    // Without a most, `high` is left out and reads back as none.
    let r: CountRange =
        serde_json::from_str(r#"{"low": 7, "sites": 2, "unbounded_sites": 0}"#).unwrap();
    assert_eq!(r.high, None);
    assert_eq!(sbs_reports::human::count_range(&r), "at least 7 per run");
}
