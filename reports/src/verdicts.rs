//! The comparison section of the text report: per metric, the change against its
//! reference with its interval, the verdict, the threshold and the method.

use std::collections::HashSet;

use crate::human;
use crate::model::{BenchmarkResult, Comparison, ComparisonMethod, Verdict};

const HEADER: [&str; 6] = [
    "metric",
    "change",
    "CI of change",
    "verdict",
    "method",
    "against",
];

use crate::human::signed_percent;

fn change(c: &Comparison, unit: crate::model::Unit) -> (String, String) {
    let change = match c.relative {
        Some(r) => signed_percent(r),
        None => format!("+{} from 0", human::value(c.difference, unit)),
    };
    let ci = match (c.method, c.relative_ci_low, c.relative_ci_high) {
        _ if c.verdict == Verdict::Inconclusive => "-".to_string(),
        (ComparisonMethod::Exact, _, _) => "exact".to_string(),
        (_, Some(lo), Some(hi)) => format!("[{}, {}]", signed_percent(lo), signed_percent(hi)),
        _ => match (c.ci_low, c.ci_high) {
            (Some(lo), Some(hi)) => {
                format!("[{}, {}]", human::value(lo, unit), human::value(hi, unit))
            }
            _ => "-".to_string(),
        },
    };
    (change, ci)
}

fn method(c: &Comparison) -> String {
    if c.verdict == Verdict::Inconclusive {
        return "-".to_string();
    }
    let mut s = c.method.as_str().to_string();
    if let Some(p) = c.p_value {
        s.push_str(&format!(" p={}", p_value(p)));
    }
    s
}

/// A p-value for people: three decimals, or scientific notation below 0.001.
fn p_value(p: f64) -> String {
    if p >= 0.001 {
        format!("{p:.3}")
    } else {
        format!("{p:.1e}")
    }
}

fn verdict(c: &Comparison) -> String {
    match c.verdict {
        Verdict::Regressed | Verdict::Improved | Verdict::BelowThreshold => format!(
            "{} ({}{})",
            c.verdict.as_str(),
            if c.verdict == Verdict::BelowThreshold {
                "<= "
            } else {
                "> "
            },
            match c.threshold_absolute {
                Some(a) => format!("{} and {}", human::percent(c.threshold), human::count(a)),
                None => human::percent(c.threshold),
            }
        ),
        v => v.as_str().to_string(),
    }
}

/// The cells of the comparison table, one row per compared metric (no header).
fn cells(b: &BenchmarkResult) -> Vec<([String; 6], Verdict)> {
    b.metrics
        .iter()
        .filter_map(|m| {
            let c = m.comparison.as_ref()?;
            let (change, ci) = change(c, m.unit);
            Some((
                [
                    m.id.clone(),
                    change,
                    ci,
                    verdict(c),
                    method(c),
                    format!("{} (n={})", c.reference, c.reference_n),
                ],
                c.verdict,
            ))
        })
        .collect()
}

/// The ANOVA lines of one benchmark's metrics already written in a report. An ANOVA
/// covers all the series compared: in a `compare` report every benchmark after the first
/// carries the same one, so it is written once, under the first benchmark that has it.
#[derive(Debug, Default)]
pub struct Written(HashSet<String>);

/// The ANOVA lines (one per metric compared by an ANOVA) not yet in `written`, without
/// indentation.
fn anova_lines(b: &BenchmarkResult, written: &mut Written) -> Vec<String> {
    let mut lines = Vec::new();
    for m in &b.metrics {
        let Some(c) = &m.comparison else { continue };
        let Some(a) = &c.anova else { continue };
        let test = match a.f {
            Some(f) => format!(
                "ANOVA over {} series, F({}, {}) = {f:.3}, p = {}",
                a.groups.len(),
                a.df_between,
                a.df_within,
                p_value(a.p_value)
            ),
            None => format!("{} series of exact values", a.groups.len()),
        };
        let mut line = format!(
            "{}: {test}: {}",
            m.id,
            if a.significant {
                "means differ"
            } else {
                "no significant difference"
            }
        );
        let (shown, others) = a.pairs_of_subject();
        if !shown.is_empty() || others > 0 {
            let mut pairs: Vec<String> = shown
                .iter()
                .map(|p| format!("{} vs {}", p.a, p.b))
                .collect();
            if others > 0 {
                pairs.push(format!(
                    "{} pair{} not involving {} (in the JSON report)",
                    others,
                    if others == 1 { "" } else { "s" },
                    a.subject.as_deref().unwrap_or("it")
                ));
            }
            line.push_str(&format!("; {} finds: {}", a.post_hoc, pairs.join(", ")));
        }
        if written.0.insert(line.clone()) {
            lines.push(line);
        }
    }
    lines
}

/// The comparison section of one benchmark as an HTML table (empty when nothing was
/// compared); regressions in bold red. ANOVA lines already in `written` are left out.
pub fn html_table(b: &BenchmarkResult, written: &mut Written) -> String {
    use crate::markup::escape;
    let rows = cells(b);
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from("<table class=comparison><thead><tr>");
    for h in HEADER {
        out.push_str(&format!("<th>{}</th>", escape(h)));
    }
    out.push_str("</tr></thead><tbody>\n");
    for (row, v) in rows {
        let style = if v.is_regression() {
            " style=\"color:#b00020;font-weight:bold\""
        } else {
            ""
        };
        out.push_str(&format!("<tr{style}>"));
        for cell in row {
            out.push_str(&format!("<td>{}</td>", escape(&cell)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table>\n");
    for line in anova_lines(b, written) {
        out.push_str(&format!("<p>{}</p>\n", escape(&line)));
    }
    out
}

/// Lines of the comparison section of one benchmark; empty when nothing was compared.
pub fn text_lines(b: &BenchmarkResult) -> Vec<String> {
    styled_lines(b, false, &mut Written::default())
}

/// ANSI colour of a verdict cell: red for a regression, green for an improvement.
fn paint(verdict: Verdict, text: &str) -> String {
    match verdict {
        Verdict::Regressed => format!("\x1b[1;31m{text}\x1b[0m"),
        Verdict::Improved => format!("\x1b[32m{text}\x1b[0m"),
        _ => text.to_string(),
    }
}

/// Like [`text_lines`], with the verdicts coloured when `color` is set, and the ANOVA lines
/// already in `written` left out.
pub fn styled_lines(b: &BenchmarkResult, color: bool, written: &mut Written) -> Vec<String> {
    let compared = cells(b);
    let verdicts: Vec<Verdict> = compared.iter().map(|(_, v)| *v).collect();
    if compared.is_empty() {
        return Vec::new();
    }
    let mut rows = vec![HEADER.map(String::from)];
    rows.extend(compared.into_iter().map(|(row, _)| row));
    let mut widths = [0usize; 6];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut lines = vec![
        String::new(),
        "  Comparison (smaller is better):".to_string(),
    ];
    for (i, r) in rows.iter().enumerate() {
        let mut line = String::from(" ");
        for (c, (cell, w)) in r.iter().zip(widths).enumerate() {
            let pad = " ".repeat(w - cell.chars().count());
            line.push(' ');
            if matches!(c, 1 | 2) {
                line.push_str(&pad);
                line.push_str(cell);
            } else if c == 3 && color && i > 0 {
                line.push_str(&paint(verdicts[i - 1], cell));
                line.push_str(&pad);
            } else {
                line.push_str(cell);
                line.push_str(&pad);
            }
            line.push(' ');
        }
        lines.push(line.trim_end().to_string());
    }
    lines.extend(
        anova_lines(b, written)
            .into_iter()
            .map(|l| format!("  {l}")),
    );
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AnovaSummary, MetricResult, PairDifference, Summary, Unit};

    fn metric(id: &str, unit: Unit, comparison: Option<Comparison>) -> MetricResult {
        MetricResult {
            id: id.into(),
            unit,
            source: "s".into(),
            exact: false,
            group: "g".into(),
            samples: vec![1.0],
            failed_runs: Vec::new(),
            summary: Summary {
                n: 1,
                mean: 1.0,
                sd: 0.0,
                cov: Some(0.0),
                median: 1.0,
                min: 1.0,
                max: 1.0,
                ci_low: None,
                ci_high: None,
                confidence: 0.95,
            },
            details: vec![],
            notes: vec![],
            comparison,
            trend: vec![],
            distinguishable: None,
            bound: None,
            range: None,
        }
    }

    fn comparison(method: ComparisonMethod, verdict: Verdict) -> Comparison {
        Comparison {
            method,
            reference: "baseline main".into(),
            reference_n: 10,
            reference_mean: 100.0,
            difference: 5.0,
            ci_low: Some(4.0),
            ci_high: Some(6.0),
            confidence: 0.95,
            relative: Some(0.05),
            relative_ci_low: Some(0.04),
            relative_ci_high: Some(0.06),
            df: Some(17.5),
            p_value: Some(0.00012),
            threshold: 0.02,
            threshold_absolute: None,
            verdict,
            anova: None,
            confirmation: None,
        }
    }

    #[test]
    fn section_shows_change_interval_and_verdict() {
        let mut anova = comparison(ComparisonMethod::Anova, Verdict::Regressed);
        anova.anova = Some(AnovaSummary {
            groups: vec!["a".into(), "b".into(), "this run".into()],
            f: Some(12.5),
            df_between: 2.0,
            df_within: 27.0,
            p_value: 0.0001,
            significant: true,
            post_hoc: "bonferroni-welch".into(),
            subject: None,
            differing: vec![PairDifference {
                a: "a".into(),
                b: "this run".into(),
                difference: 5.0,
                ci_low: 3.0,
                ci_high: 7.0,
                p_value: Some(0.001),
            }],
        });
        let mut exact = comparison(ComparisonMethod::Exact, Verdict::NoChange);
        exact.relative = Some(0.0);
        exact.p_value = None;
        let b = BenchmarkResult {
            name: "b".into(),
            command: vec![],
            metrics: vec![
                metric(
                    "time.wall",
                    Unit::Seconds,
                    Some(comparison(ComparisonMethod::WelchT, Verdict::Regressed)),
                ),
                metric("alloc.count", Unit::Count, Some(exact)),
                metric("rss.peak", Unit::Bytes, Some(anova)),
                metric("time.user", Unit::Seconds, None),
            ],
            warnings: vec![],
            invocation_checks: Vec::new(),
        };
        let text = text_lines(&b).join("\n");
        assert!(text.contains("time.wall    +5.00%  [+4.00%, +6.00%]  REGRESSED (> 2.00%)  welch-t p=1.2e-4  baseline main (n=10)"), "{text}");
        assert!(
            text.contains("alloc.count      0%             exact  no change"),
            "{text}"
        );
        assert!(text.contains("rss.peak: ANOVA over 3 series, F(2, 27) = 12.500, p = 1.0e-4: means differ; bonferroni-welch finds: a vs this run"), "{text}");
        assert!(!text.contains("time.user"));
        let none = BenchmarkResult {
            metrics: vec![metric("x", Unit::Count, None)],
            ..b
        };
        assert!(text_lines(&none).is_empty());
    }

    #[test]
    fn an_anova_shared_by_benchmarks_is_written_once_per_report() {
        let mut c = comparison(ComparisonMethod::Anova, Verdict::NoChange);
        c.anova = Some(AnovaSummary {
            groups: vec!["old".into(), "new".into(), "newer".into()],
            f: Some(1.5),
            df_between: 2.0,
            df_within: 27.0,
            p_value: 0.24,
            significant: false,
            post_hoc: "bonferroni-welch".into(),
            subject: None,
            differing: vec![],
        });
        let bench = |name: &str| BenchmarkResult {
            name: name.into(),
            command: vec![],
            metrics: vec![metric("time.wall", Unit::Seconds, Some(c.clone()))],
            warnings: vec![],
            invocation_checks: Vec::new(),
        };
        let (new, newer) = (bench("new"), bench("newer"));
        let mut written = Written::default();
        let first = styled_lines(&new, false, &mut written).join("\n");
        let second = styled_lines(&newer, false, &mut written).join("\n");
        assert!(first.contains("time.wall: ANOVA over 3 series"), "{first}");
        assert!(!second.contains("ANOVA"), "{second}");
        // Each benchmark still has its own comparison table.
        assert!(
            second.contains("Comparison (smaller is better)"),
            "{second}"
        );
        let mut html_written = Written::default();
        assert!(html_table(&new, &mut html_written).contains("ANOVA over 3 series"));
        assert!(!html_table(&newer, &mut html_written).contains("ANOVA"));
    }
}
