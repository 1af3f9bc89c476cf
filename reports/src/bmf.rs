//! Bencher Metric Format (BMF) JSON, for bencher.dev and github-action-benchmark.
//!
//! `{ benchmark: { measure: { value, lower_value, upper_value } } }`. The value is the
//! mean and the bounds are its confidence interval (omitted with fewer than 2 samples).
//! `time.wall` becomes Bencher's built-in `latency` measure, in nanoseconds as Bencher
//! expects; every other metric keeps its id as the measure name, times in nanoseconds
//! and sizes in bytes.

use std::collections::BTreeMap;
use std::io;

use serde::Serialize;

use crate::model::{Report, Unit};
use crate::Render;

/// Renders the report as BMF JSON.
#[derive(Debug, Default)]
pub struct Bmf;

#[derive(Serialize)]
struct Metric {
    value: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    lower_value: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    upper_value: Option<f64>,
}

/// The measure name Bencher will file a metric under.
pub fn measure_name(id: &str) -> String {
    match id {
        "time.wall" => "latency".to_string(),
        // Bencher's measure names are at most 64 characters.
        other => other.chars().take(64).collect(),
    }
}

impl Render for Bmf {
    fn render(&self, report: &Report, out: &mut dyn io::Write) -> io::Result<()> {
        let mut doc: BTreeMap<&str, BTreeMap<String, Metric>> = BTreeMap::new();
        for b in &report.benchmarks {
            let measures = doc.entry(&b.name).or_default();
            for m in &b.metrics {
                let scale = if m.unit == Unit::Seconds { 1e9 } else { 1.0 };
                let s = &m.summary;
                measures.insert(
                    measure_name(&m.id),
                    Metric {
                        value: s.mean * scale,
                        lower_value: s.ci_low.map(|v| v * scale),
                        upper_value: s.ci_high.map(|v| v * scale),
                    },
                );
            }
        }
        serde_json::to_writer_pretty(&mut *out, &doc)?;
        writeln!(out)
    }
}
