//! A compact Markdown table for pull-request comments: metric, before, after, change with
//! its interval, verdict. Metrics without a comparison show their mean and interval only.

use std::io;

use crate::human;
use crate::model::{ComparisonMethod, MetricResult, Report, Verdict};
use crate::Render;

/// Renders one Markdown table per benchmark.
#[derive(Debug, Default)]
pub struct Markdown {
    /// Print every time in this unit (`--time-unit`); each in the unit that suits it when
    /// `None`.
    pub time_unit: Option<human::TimeUnit>,
}

/// Escape what would break a table cell or render as markup.
fn cell(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '|' => out.push_str("\\|"),
            '`' | '*' | '_' | '<' | '>' | '[' | ']' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn signed(f: f64) -> String {
    if f > 0.0 {
        format!("+{}", human::percent(f))
    } else {
        human::percent(f)
    }
}

fn badge(v: Verdict) -> &'static str {
    match v {
        Verdict::Regressed => "❌ regressed",
        Verdict::Improved => "✅ improved",
        Verdict::NoChange => "no change",
        Verdict::BelowThreshold => "≈ below threshold",
        Verdict::Inconclusive => "inconclusive",
    }
}

fn row(m: &MetricResult, time: Option<human::TimeUnit>) -> [String; 5] {
    let value = |v| human::value_in(v, m.unit, time);
    let zero = m.distinguishable == Some(false);
    let after = if zero {
        format!("≈ 0 ({})", human::INDISTINGUISHABLE)
    } else {
        value(m.summary.mean)
    };
    // A count that is not exact says where the calls lie, after its value and interval.
    let bounds = match &m.range {
        Some(r) => format!(" (bounds {})", crate::human::count_range(r)),
        None => String::new(),
    };
    let Some(c) = &m.comparison else {
        let ci = match (m.summary.ci_low, m.summary.ci_high) {
            _ if zero => String::new(),
            (Some(l), Some(h)) if l != h => format!(" [{}, {}]", value(l), value(h)),
            _ => String::new(),
        };
        return [
            format!("`{}`", m.id.replace('`', "'")),
            "-".into(),
            cell(&format!("{after}{ci}{bounds}")),
            "-".into(),
            "-".into(),
        ];
    };
    let change = match (c.relative, c.method) {
        (Some(r), ComparisonMethod::Exact) => format!("{} (exact)", signed(r)),
        (Some(r), _) => match (c.relative_ci_low, c.relative_ci_high) {
            // With the method that decided (Welch, or the runs in pairs).
            (Some(l), Some(h)) => format!(
                "{} [{}, {}] {}",
                signed(r),
                signed(l),
                signed(h),
                c.method.as_str()
            ),
            _ => signed(r),
        },
        (None, _) => format!("+{} from 0", value(c.difference)),
    };
    [
        format!("`{}`", m.id.replace('`', "'")),
        cell(&value(c.reference_mean)),
        cell(&format!("{after}{bounds}")),
        cell(&change),
        badge(c.verdict).to_string(),
    ]
}

impl Render for Markdown {
    fn render(&self, report: &Report, out: &mut dyn io::Write) -> io::Result<()> {
        if let Some(h) = &report.headline {
            writeln!(out, "**{}**\n", cell(h))?;
        }
        for (i, b) in report.benchmarks.iter().enumerate() {
            if i > 0 {
                writeln!(out)?;
            }
            writeln!(out, "### {}\n", cell(&b.name))?;
            writeln!(out, "| metric | before | after | change [CI] | verdict |")?;
            writeln!(out, "|---|---:|---:|---:|---|")?;
            for m in &b.metrics {
                writeln!(out, "| {} |", row(m, self.time_unit).join(" | "))?;
            }
            for m in &b.metrics {
                for n in &m.notes {
                    writeln!(out, "\n> note ({}): {}", cell(&m.id), cell(n))?;
                }
            }
            for w in &b.warnings {
                writeln!(out, "\n> warning: {}", cell(w))?;
            }
        }
        let regressed = report
            .benchmarks
            .iter()
            .flat_map(|b| &b.metrics)
            .filter(|m| {
                m.comparison
                    .as_ref()
                    .is_some_and(|c| c.verdict == Verdict::Regressed)
            })
            .count();
        for scan in &report.scans {
            writeln!(
                out,
                "\n**Growth over {}** ({} points of {}):\n",
                cell(&scan.parameter),
                scan.points.len(),
                cell(&scan.series)
            )?;
            for fit in &scan.fits {
                writeln!(out, "- {}", cell(&fit.sentence(&scan.parameter)))?;
            }
        }
        if !report.speed.is_empty() {
            writeln!(out)?;
            for r in &report.speed {
                writeln!(out, "- {}", cell(&r.sentence()))?;
            }
        }
        let c = &report.conditions;
        let warnings = report
            .warnings_summary()
            .map(|w| format!(", {w}"))
            .unwrap_or_default();
        writeln!(
            out,
            "\n<sub>sbs-profile {}: {}, {} regression{}{warnings}; smaller is better.</sub>",
            report.tool_version,
            match c.group_runs.is_empty() {
                true => format!("{} per group", c.measured_runs()),
                false => c.measured_runs(),
            },
            regressed,
            if regressed == 1 { "" } else { "s" }
        )
    }
}
