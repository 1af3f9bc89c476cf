//! The terminal table: one row per metric, aligned, units humanised.

use std::io;

use crate::human;
use crate::model::{
    BenchmarkResult, CheckVerdict, Conditions, InvocationCheck, MetricResult, Report, Scan,
    Summary, Unit,
};
use crate::Render;

/// Renders an aligned table per benchmark.
#[derive(Debug, Default)]
pub struct Text {
    /// Colour the verdicts (only for a terminal, and never with `NO_COLOR`).
    pub color: bool,
    /// Print every time in this unit (`--time-unit`); each in the unit that suits it when
    /// `None`.
    pub time_unit: Option<human::TimeUnit>,
}

const HEADER: [&str; 8] = ["metric", "mean", "CI", "±CI", "CoV", "n", "unit", "source"];

fn row(
    label: String,
    unit: Unit,
    source: &str,
    exact: bool,
    s: &Summary,
    time: Option<human::TimeUnit>,
) -> [String; 8] {
    let value = |v| human::value_in(v, unit, time);
    let ci = match (s.ci_low, s.ci_high) {
        (Some(lo), Some(hi)) if lo == hi && exact => "exact".to_string(),
        (Some(lo), Some(hi)) => format!("[{}, {}]", value(lo), value(hi)),
        _ => "-".to_string(),
    };
    let rel = s
        .relative_ci_half_width()
        .map(human::percent)
        .unwrap_or_else(|| "-".into());
    let cov = s.cov.map(human::percent).unwrap_or_else(|| "-".into());
    let mean = value(s.mean);
    // The unit the mean is printed in (`ms`, `MiB`), not the base unit it is stored in.
    let shown = match mean.rsplit_once(' ') {
        Some((_, suffix)) => suffix.to_string(),
        None => unit.as_str().to_string(),
    };
    [
        label,
        mean,
        ci,
        rel,
        cov,
        s.n.to_string(),
        shown,
        source.to_string(),
    ]
}

fn blank() -> [String; 8] {
    Default::default()
}

fn metric_rows(m: &MetricResult, rows: &mut Vec<[String; 8]>, time: Option<human::TimeUnit>) {
    let mut main = row(m.id.clone(), m.unit, &m.source, m.exact, &m.summary, time);
    if m.distinguishable == Some(false) {
        // A calibrated value that cannot be told from zero: no meaningless small number.
        main[1] = "≈ 0".into();
        main[2] = human::INDISTINGUISHABLE.into();
        main[3] = "-".into();
    }
    rows.push(main);
    // A breakdown line that is 0 in every run (a matched function never called) says
    // nothing in a table; it is counted in one line instead (JSON keeps every line).
    let shown: Vec<_> = m
        .details
        .iter()
        .filter(|d| d.summary.max != 0.0 || d.summary.min != 0.0)
        .collect();
    let hidden = m.details.len() - shown.len();
    for (i, d) in shown.iter().enumerate() {
        let branch = if i + 1 == shown.len() && hidden == 0 {
            "└ "
        } else {
            "├ "
        };
        rows.push(row(
            format!("  {branch}{}", d.label),
            m.unit,
            "",
            m.exact,
            &d.summary,
            time,
        ));
    }
    if hidden > 0 {
        let mut line = blank();
        line[0] = format!("  └ {hidden} more, 0 in every run (listed in the JSON report)");
        rows.push(line);
    }
}

fn conditions_line(c: &Conditions, confidence: Option<f64>) -> String {
    let mut parts = vec![format!(
        "{} + {} warm-up per group",
        c.measured_runs(),
        c.warmup
    )];
    if let Some(conf) = confidence {
        parts.push(format!("{}% CI", human::level(conf)));
    }
    parts.push(
        if c.aslr_disabled {
            "ASLR off"
        } else {
            "ASLR on"
        }
        .into(),
    );
    if let Some(engine) = &c.instructions {
        parts.push(format!("instructions by {engine}"));
    }
    if !c.pinned_cpus.is_empty() {
        let cpus: Vec<String> = c.pinned_cpus.iter().map(|c| c.to_string()).collect();
        parts.push(format!("pinned to CPU {}", cpus.join(",")));
    }
    parts.push(
        if c.clean_env {
            "clean environment"
        } else {
            "caller's environment"
        }
        .into(),
    );
    let mut line = parts.join(", ");
    // A quiet machine goes without saying (the JSON report always has it).
    if let Some(m) = c.machine.as_ref().filter(|m| m.was_busy()) {
        line.push('\n');
        line.push_str(&format!("machine: {}", m.describe()));
    }
    line
}

fn width(s: &str) -> usize {
    s.chars().count()
}

/// The aligned table of one benchmark's metrics, header first.
fn table(b: &BenchmarkResult, time: Option<human::TimeUnit>) -> Vec<String> {
    let mut rows = vec![HEADER.map(String::from)];
    for m in &b.metrics {
        metric_rows(m, &mut rows, time);
    }
    let mut widths = [0usize; 8];
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(width(cell));
        }
    }
    rows.iter()
        .map(|r| {
            let mut line = String::from(" ");
            for (c, (cell, w)) in r.iter().zip(widths).enumerate() {
                let pad = w - width(cell);
                line.push(' ');
                // Text columns left-aligned, numbers right-aligned.
                if matches!(c, 0 | 6 | 7) {
                    line.push_str(cell);
                    line.extend(std::iter::repeat_n(' ', pad));
                } else {
                    line.extend(std::iter::repeat_n(' ', pad));
                    line.push_str(cell);
                }
                line.push(' ');
            }
            line.trim_end().to_string()
        })
        .collect()
}

/// A scan's growth section.
/// The heading of the speed summary: what its sentences measure.
fn speed_heading(speed: &[crate::model::SpeedRatio]) -> &'static str {
    if speed.iter().any(|r| r.cpu.is_some()) {
        "Summary (wall and CPU time)"
    } else {
        "Summary (wall time)"
    }
}

/// Groups of a check listed at most, the ones that differ first.
const CHECK_GROUPS_SHOWN: usize = 8;

/// `--invocations-check`: one line per pattern, then the groups that disagree (the most
/// calls first) and the notes.
fn check_lines(c: &InvocationCheck) -> Vec<String> {
    let of = |v: CheckVerdict| c.groups.iter().filter(|g| g.verdict == v).count();
    let mut lines = vec![format!(
        "  check ({}) against {}: {} counted, {} made; {} group(s) of call lines equal, {} \
         within their bound, {} off at uncertain sites, {} differ{}",
        c.metric,
        c.debug_program,
        human::count(c.counted as f64),
        human::count(c.made as f64),
        of(CheckVerdict::Equal),
        of(CheckVerdict::Bounded),
        of(CheckVerdict::Uncertain),
        of(CheckVerdict::Differs),
        match of(CheckVerdict::NoCode) {
            0 => String::new(),
            n => format!(
                "; {n} made calls where {} has no code to count (optimised away)",
                c.metric
            ),
        },
    )];
    let off = || {
        c.groups
            .iter()
            .filter(|g| matches!(g.verdict, CheckVerdict::Differs | CheckVerdict::Uncertain))
    };
    for g in off().take(CHECK_GROUPS_SHOWN) {
        let at = match g.lines.as_slice() {
            [] => "no line".to_string(),
            [a, b, c, rest @ ..] if !rest.is_empty() => {
                format!("{a}, {b}, {c} and {} more", rest.len())
            }
            all => all.join(", "),
        };
        let sites = match g.rows.len() {
            0 => "no counted site".to_string(),
            1 => "1 row".to_string(),
            n => format!("{n} rows"),
        };
        let how = match g.verdict {
            CheckVerdict::Uncertain => "off (uncertain sites)",
            _ => "differs",
        };
        lines.push(format!(
            "    {how} at {at}: {} counted, {} made ({sites})",
            human::count(g.counted as f64),
            human::count(g.made as f64)
        ));
    }
    let more = off().count().saturating_sub(CHECK_GROUPS_SHOWN);
    if more > 0 {
        lines.push(format!("    ... and {more} more (all in the JSON report)"));
    }
    lines.extend(c.notes.iter().map(|n| format!("    note: {n}")));
    lines
}

fn scan_lines(scan: &Scan, out: &mut dyn io::Write) -> io::Result<()> {
    writeln!(
        out,
        "\nGrowth over {} ({} points of `{}`):",
        scan.parameter,
        scan.points.len(),
        scan.series
    )?;
    if scan.fits.is_empty() {
        writeln!(
            out,
            "  no fit: it takes at least 3 distinct numeric values of {}",
            scan.parameter
        )?;
    }
    for fit in &scan.fits {
        writeln!(out, "  {}", fit.sentence(&scan.parameter))?;
    }
    Ok(())
}

impl Render for Text {
    fn render(&self, report: &Report, out: &mut dyn io::Write) -> io::Result<()> {
        let mut anovas = crate::verdicts::Written::default();
        if let Some(h) = &report.headline {
            writeln!(out, "{h}\n")?;
        }
        for (i, b) in report.benchmarks.iter().enumerate() {
            if i > 0 {
                writeln!(out)?;
            }
            writeln!(out, "Benchmark: {}", b.name)?;
            for line in table(b, self.time_unit) {
                writeln!(out, "{line}")?;
            }
            for line in crate::verdicts::styled_lines(b, self.color, &mut anovas) {
                writeln!(out, "{line}")?;
            }
            for m in &b.metrics {
                if let Some(r) = &m.range {
                    writeln!(out, "  bounds ({}): {}", m.id, human::count_range(r))?;
                }
            }
            for m in &b.metrics {
                for n in &m.notes {
                    writeln!(out, "  note ({}): {n}", m.id)?;
                }
            }
            for w in &b.warnings {
                writeln!(out, "  warning: {w}")?;
            }
            for c in &b.invocation_checks {
                for line in check_lines(c) {
                    writeln!(out, "{line}")?;
                }
            }
        }
        let confidence = report
            .benchmarks
            .iter()
            .flat_map(|b| &b.metrics)
            .map(|m| m.summary.confidence)
            .next();
        for scan in &report.scans {
            scan_lines(scan, out)?;
        }
        if !report.speed.is_empty() {
            writeln!(out, "\n{}:", speed_heading(&report.speed))?;
            for r in &report.speed {
                writeln!(out, "  {}", r.sentence())?;
            }
        }
        match &report.from_history {
            Some(dir) => writeln!(
                out,
                "\nrendered from the history in {dir}: latest entry of each benchmark against the ones before"
            )?,
            None => writeln!(out, "\n{}", conditions_line(&report.conditions, confidence))?,
        }
        match report.warnings_summary() {
            Some(line) => writeln!(out, "{line}"),
            None => Ok(()),
        }
    }
}
