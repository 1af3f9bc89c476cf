//! A single self-contained HTML page: per benchmark, the summary table and, per metric,
//! a strip plot of the raw samples with the mean and its confidence interval, as inline
//! SVG drawn with `plotters`. No scripts, no network fetches; prints cleanly.

use std::fmt::Write as _;
use std::io;

use plotters::prelude::*;

use crate::human;
use crate::markup::escape;
use crate::model::{GrowthFit, MetricResult, Report, Scan};
use crate::Render;

/// Renders the report as one HTML page.
#[derive(Debug, Default)]
pub struct Html;

const STYLE: &str = "
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem auto;max-width:70rem;padding:0 1rem;color:#1b1b1b}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ccc;padding-bottom:.2rem;word-break:break-all}
p.conditions{color:#555;margin-top:0}
p.headline{font-weight:bold}
table{border-collapse:collapse;font-variant-numeric:tabular-nums;margin:.5rem 0 1rem}
th,td{padding:.25rem .6rem;border-bottom:1px solid #e4e4e4;text-align:right}
th:first-child,td:first-child{text-align:left}td.src{text-align:left;color:#666}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(20rem,1fr));gap:1rem}
.row{grid-column:1/-1;display:grid;grid-template-columns:1fr 1fr;gap:1rem}
figure.exact p.value{font-size:1.8rem;font-variant-numeric:tabular-nums;text-align:center;margin:1.5rem 0}
figure{margin:0;border:1px solid #e4e4e4;padding:.4rem}figcaption{font-size:.85rem;color:#333;margin-bottom:.2rem}
figure svg{width:100%;height:auto;display:block}
.warning{color:#8a4b00}.note,.bounds{color:#444;font-size:.9rem}
@media print{body{margin:0;max-width:none}.plots{grid-template-columns:1fr 1fr}figure{break-inside:avoid}}
";

/// A deterministic jitter in [0.2, 0.8] so overlapping samples stay visible.
fn jitter(i: usize) -> f64 {
    let x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
    0.2 + 0.6 * (x as f64 / (1u64 << 24) as f64)
}

/// Strip plot of `m`'s samples: points, the mean as a line, the CI as a band.
pub fn strip_plot(m: &MetricResult) -> Result<String, String> {
    let s = &m.summary;
    let mut lo = s.min.min(s.ci_low.unwrap_or(s.min));
    let mut hi = s.max.max(s.ci_high.unwrap_or(s.max));
    if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        let pad = if hi == 0.0 { 1.0 } else { hi.abs() * 0.01 };
        lo -= pad;
        hi += pad;
    }
    let pad = (hi - lo) * 0.08;
    let (lo, hi) = (lo - pad, hi + pad);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (480, 150)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(28)
            .build_cartesian_2d(lo..hi, 0.0..1.0)
            .map_err(|e| e.to_string())?;
        let unit = m.unit;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_labels(5)
            .x_label_formatter(&|v| human::value(*v, unit))
            .draw()
            .map_err(|e| e.to_string())?;
        if let (Some(cl), Some(ch)) = (s.ci_low, s.ci_high) {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(cl, 0.05), (ch, 0.95)],
                    RGBColor(66, 133, 244).mix(0.18).filled(),
                )))
                .map_err(|e| e.to_string())?;
        }
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(s.mean, 0.0), (s.mean, 1.0)],
                RGBColor(200, 60, 40).stroke_width(2),
            )))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(m.samples.iter().enumerate().map(|(i, &v)| {
                Circle::new((v, jitter(i)), 3, RGBColor(30, 30, 30).mix(0.7).filled())
            }))
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The metric's trend over the saved history: each run's mean with its interval, joined
/// by a line; runs that regressed against the one before are red.
pub fn trend_plot(m: &MetricResult) -> Result<String, String> {
    let t = &m.trend;
    let (lo, hi) = trend_range(t);
    let k = t.len();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (480, 200)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5..(k as f64 - 0.5), lo..hi)
            .map_err(|e| e.to_string())?;
        let unit = m.unit;
        let labels = trend_labels(t);
        chart
            .configure_mesh()
            .x_labels(k.min(6))
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    labels.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_labels(4)
            .y_label_formatter(&|v| human::value(*v, unit))
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(LineSeries::new(
                t.iter().enumerate().map(|(i, p)| (i as f64, p.mean)),
                RGBColor(66, 133, 244).stroke_width(2),
            ))
            .map_err(|e| e.to_string())?;
        let color = trend_color;
        chart
            .draw_series(t.iter().enumerate().map(|(i, p)| {
                ErrorBar::new_vertical(
                    i as f64,
                    p.ci_low.unwrap_or(p.mean),
                    p.mean,
                    p.ci_high.unwrap_or(p.mean),
                    color(p).stroke_width(1),
                    8,
                )
            }))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(
                t.iter()
                    .enumerate()
                    .map(|(i, p)| Circle::new((i as f64, p.mean), 4, color(p).filled())),
            )
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The y range of a trend plot: every point's interval, widened a little (and around a
/// flat line, by 1% of its value, or 1 at zero).
fn trend_range(t: &[crate::model::TrendPoint]) -> (f64, f64) {
    let lows = t.iter().map(|p| p.ci_low.unwrap_or(p.mean));
    let highs = t.iter().map(|p| p.ci_high.unwrap_or(p.mean));
    let mut lo = lows.fold(f64::INFINITY, f64::min);
    let mut hi = highs.fold(f64::NEG_INFINITY, f64::max);
    if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        let pad = if hi == 0.0 { 1.0 } else { hi.abs() * 0.01 };
        lo -= pad;
        hi += pad;
    }
    let pad = (hi - lo) * 0.1;
    (lo - pad, hi + pad)
}

/// The x labels of a trend plot: `#3 @55533dc` (position and commit) for entries of the
/// history; an older report's time label keeps its month, day and minute.
fn trend_labels(t: &[crate::model::TrendPoint]) -> Vec<String> {
    t.iter()
        .map(|p| match p.label.get(..2) {
            Some("20") => p.label.get(5..16).unwrap_or(&p.label).replace('T', " "),
            _ => p.label.chars().take(14).collect(),
        })
        .collect()
}

/// A point's colour: red where the verdict was a regression.
fn trend_color(p: &crate::model::TrendPoint) -> RGBColor {
    if p.verdict == Some(crate::model::Verdict::Regressed) {
        RGBColor(210, 30, 30)
    } else {
        RGBColor(30, 30, 30)
    }
}

/// A metric's figures: its samples (or, when every run gave the same value, the number),
/// and its history beside them on one row when it has one.
fn metric_figures(page: &mut String, m: &MetricResult) -> Result<(), String> {
    // A metric's samples and its history side by side, one metric per row when
    // it has a history.
    let with_trend = m.trend.len() >= 2;
    if with_trend {
        page.push_str("<div class=row>");
    }
    if m.summary.sd == 0.0 && m.summary.n > 0 {
        // Identical samples (an exact count): the number says it all.
        let _ = writeln!(
            page,
            "<figure class=exact><figcaption>{} — the same in all {} runs</figcaption>\
             <p class=value>{}</p></figure>",
            escape(&m.id),
            m.summary.n,
            escape(&human::value(m.summary.mean, m.unit))
        );
    } else {
        let svg = strip_plot(m)?;
        let _ = writeln!(
            page,
            "<figure><figcaption>{} — samples, mean (red) and {}% CI (band)</figcaption>{svg}</figure>",
            escape(&m.id),
            human::level(m.summary.confidence)
        );
    }
    if with_trend {
        let svg = trend_plot(m)?;
        let _ = writeln!(
            page,
            "<figure class=trend><figcaption>{} — history: mean and CI per run, \
             regressions in red</figcaption>{svg}</figure>",
            escape(&m.id)
        );
        page.push_str("</div>");
    }
    Ok(())
}

/// A scan's section: each fitted metric's mean and interval against the parameter, with
/// the fitted curve, and the fit in words.
fn scan_section(page: &mut String, report: &Report, scan: &Scan) -> Result<(), String> {
    let _ = writeln!(
        page,
        "<section class=scan><h2>Growth over {} ({} points of {})</h2><div class=plots>",
        escape(&scan.parameter),
        scan.points.len(),
        escape(&scan.series)
    );
    for fit in &scan.fits {
        let points: Vec<(f64, &MetricResult)> = scan
            .points
            .iter()
            .filter_map(|p| {
                let b = report.benchmarks.iter().find(|b| b.name == p.benchmark)?;
                Some((p.x?, b.metrics.iter().find(|m| m.id == fit.metric)?))
            })
            .collect();
        let svg = scan_plot(&points, fit)?;
        let _ = writeln!(
            page,
            "<figure class=scan><figcaption>{}</figcaption>{svg}</figure>",
            escape(&fit.sentence(&scan.parameter))
        );
    }
    page.push_str("</div></section>\n");
    Ok(())
}

/// A metric's mean with its interval at each point of a scan, and the fitted curve.
pub fn scan_plot(points: &[(f64, &MetricResult)], fit: &GrowthFit) -> Result<String, String> {
    let Some(&(_, first)) = points.first() else {
        return Ok(String::new());
    };
    let unit = first.unit;
    let f = |x: f64| -> f64 {
        let shape = match fit.shape.as_str() {
            "log n" => x.ln(),
            "n" => x,
            "n log n" => x * x.ln(),
            "n^2" => x * x,
            _ => 0.0,
        };
        fit.intercept + fit.slope * shape
    };
    let xs = points.iter().map(|p| p.0);
    let (x_lo, x_hi) = (
        xs.clone().fold(f64::INFINITY, f64::min),
        xs.fold(f64::NEG_INFINITY, f64::max),
    );
    let low = |m: &MetricResult| m.summary.ci_low.unwrap_or(m.summary.mean);
    let high = |m: &MetricResult| m.summary.ci_high.unwrap_or(m.summary.mean);
    let mut lo = points
        .iter()
        .map(|p| low(p.1))
        .fold(f64::INFINITY, f64::min);
    let mut hi = points
        .iter()
        .map(|p| high(p.1))
        .fold(f64::NEG_INFINITY, f64::max);
    if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        let pad = if hi == 0.0 { 1.0 } else { hi.abs() * 0.01 };
        lo -= pad;
        hi += pad;
    }
    let (pad_x, pad_y) = ((x_hi - x_lo).max(1e-9) * 0.05, (hi - lo) * 0.1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (480, 220)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(70)
            .build_cartesian_2d((x_lo - pad_x)..(x_hi + pad_x), (lo - pad_y)..(hi + pad_y))
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_labels(6)
            .y_labels(4)
            .y_label_formatter(&|v| human::value(*v, unit))
            .draw()
            .map_err(|e| e.to_string())?;
        let steps = 60;
        chart
            .draw_series(LineSeries::new(
                (0..=steps).map(|i| {
                    let x = x_lo + (x_hi - x_lo) * i as f64 / steps as f64;
                    (x, f(x))
                }),
                RGBColor(66, 133, 244).stroke_width(2),
            ))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(points.iter().map(|&(x, m)| {
                ErrorBar::new_vertical(x, low(m), m.summary.mean, high(m), BLACK.stroke_width(1), 8)
            }))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&(x, m)| Circle::new((x, m.summary.mean), 4, BLACK.filled())),
            )
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

fn summary_table(out: &mut String, metrics: &[MetricResult]) {
    out.push_str("<table><thead><tr><th>metric</th><th>mean</th><th>CI</th><th>±CI</th><th>CoV</th><th>n</th><th>source</th></tr></thead><tbody>\n");
    for m in metrics {
        let s = &m.summary;
        let zero = m.distinguishable == Some(false);
        let ci = match (s.ci_low, s.ci_high) {
            _ if zero => human::INDISTINGUISHABLE.to_string(),
            (Some(l), Some(h)) if l == h && m.exact => "exact".to_string(),
            (Some(l), Some(h)) => {
                format!("[{}, {}]", human::value(l, m.unit), human::value(h, m.unit))
            }
            _ => "-".into(),
        };
        let mean = if zero {
            "≈ 0".to_string()
        } else {
            human::value(s.mean, m.unit)
        };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=src>{}</td></tr>",
            escape(&m.id),
            escape(&mean),
            escape(&ci),
            s.relative_ci_half_width().map(human::percent).unwrap_or_else(|| "-".into()),
            s.cov.map(human::percent).unwrap_or_else(|| "-".into()),
            s.n,
            escape(&m.source),
        );
    }
    out.push_str("</tbody></table>\n");
}

impl Render for Html {
    fn render(&self, report: &Report, out: &mut dyn io::Write) -> io::Result<()> {
        let mut page = String::new();
        page.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
        page.push_str("<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">");
        page.push_str("<title>sbs-profile report</title><style>");
        page.push_str(STYLE);
        page.push_str("</style></head><body>\n<h1>sbs-profile report</h1>\n");
        let c = &report.conditions;
        let _ = writeln!(
            page,
            "<p class=conditions>sbs-profile {} · {} + {} warm-up per group · ASLR {} · {} environment</p>",
            escape(&report.tool_version),
            escape(&c.measured_runs()),
            c.warmup,
            if c.aslr_disabled { "off" } else { "on" },
            if c.clean_env { "clean" } else { "caller's" }
        );
        if let Some(h) = &report.headline {
            let _ = writeln!(page, "<p class=headline>{}</p>", escape(h));
        }
        if !report.speed.is_empty() {
            page.push_str("<ul class=speed>");
            for r in &report.speed {
                let _ = write!(page, "<li>{}</li>", escape(&r.sentence()));
            }
            page.push_str("</ul>\n");
        }
        if let Some(w) = report.warnings_summary() {
            let _ = writeln!(page, "<p class=warning>{}</p>", escape(&w));
        }
        let mut anovas = crate::verdicts::Written::default();
        for b in &report.benchmarks {
            let _ = writeln!(page, "<section><h2>{}</h2>", escape(&b.name));
            summary_table(&mut page, &b.metrics);
            page.push_str(&crate::verdicts::html_table(b, &mut anovas));
            for m in &b.metrics {
                if let Some(r) = &m.range {
                    let _ = writeln!(
                        page,
                        "<p class=bounds>bounds ({}): {}</p>",
                        escape(&m.id),
                        escape(&crate::human::count_range(r))
                    );
                }
                for n in &m.notes {
                    let _ = writeln!(
                        page,
                        "<p class=note>note ({}): {}</p>",
                        escape(&m.id),
                        escape(n)
                    );
                }
            }
            for w in &b.warnings {
                let _ = writeln!(page, "<p class=warning>warning: {}</p>", escape(w));
            }
            page.push_str("<div class=plots>\n");
            for m in &b.metrics {
                metric_figures(&mut page, m).map_err(io::Error::other)?;
            }
            page.push_str("</div></section>\n");
        }
        for scan in &report.scans {
            scan_section(&mut page, report, scan).map_err(io::Error::other)?;
        }
        page.push_str("</body></html>\n");
        out.write_all(page.as_bytes())
    }
}
