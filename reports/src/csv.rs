//! CSV: one row per benchmark and metric, plain numbers in base units.

use std::io;

use crate::model::Report;
use crate::Render;

/// Renders one row per benchmark and metric.
#[derive(Debug, Default)]
pub struct Csv;

#[derive(serde::Serialize)]
struct Row<'a> {
    benchmark: &'a str,
    metric: &'a str,
    unit: &'a str,
    source: &'a str,
    group: &'a str,
    n: usize,
    mean: f64,
    sd: f64,
    cov: Option<f64>,
    median: f64,
    min: f64,
    max: f64,
    ci_low: Option<f64>,
    ci_high: Option<f64>,
    confidence: f64,
    reference: Option<&'a str>,
    change: Option<f64>,
    change_low: Option<f64>,
    change_high: Option<f64>,
    p_value: Option<f64>,
    method: Option<&'static str>,
    threshold: Option<f64>,
    verdict: Option<&'static str>,
    /// The metric's notes, joined by "; " (an exact count that varied, what a total
    /// covers...), so no format drops them.
    notes: String,
    /// The largest error one run's value may carry (`MetricResult::bound`), empty when
    /// none is stated.
    bound: Option<f64>,
    /// The fewest calls a count that is not exact may stand for (`MetricResult::range`),
    /// empty on exact counts and measurements.
    range_low: Option<f64>,
    /// The most, empty also when nothing bounds it (`range_low` then given).
    range_high: Option<f64>,
    /// The places the count is made at, when `range_low` is given.
    range_sites: Option<usize>,
    /// How many of them have no bound: `range_low`-`range_high` then holds only as far
    /// as the other sites go.
    range_unbounded_sites: Option<usize>,
}

impl Render for Csv {
    fn render(&self, report: &Report, out: &mut dyn io::Write) -> io::Result<()> {
        let mut w = csv::Writer::from_writer(out);
        for b in &report.benchmarks {
            for m in &b.metrics {
                let s = &m.summary;
                let c = m.comparison.as_ref();
                w.serialize(Row {
                    benchmark: &b.name,
                    metric: &m.id,
                    unit: m.unit.as_str(),
                    source: &m.source,
                    group: &m.group,
                    n: s.n,
                    mean: s.mean,
                    sd: s.sd,
                    cov: s.cov,
                    median: s.median,
                    min: s.min,
                    max: s.max,
                    ci_low: s.ci_low,
                    ci_high: s.ci_high,
                    confidence: s.confidence,
                    reference: c.map(|c| c.reference.as_str()),
                    change: c.and_then(|c| c.relative),
                    change_low: c.and_then(|c| c.relative_ci_low),
                    change_high: c.and_then(|c| c.relative_ci_high),
                    p_value: c.and_then(|c| c.p_value),
                    method: c.map(|c| c.method.id()),
                    threshold: c.map(|c| c.threshold),
                    verdict: c.map(|c| c.verdict.id()),
                    notes: m.notes.join("; "),
                    bound: m.bound,
                    range_low: m.range.map(|r| r.low),
                    range_high: m.range.and_then(|r| r.high),
                    range_sites: m.range.map(|r| r.sites),
                    range_unbounded_sites: m.range.map(|r| r.unbounded_sites),
                })
                .map_err(io::Error::other)?;
            }
        }
        w.flush()
    }
}
