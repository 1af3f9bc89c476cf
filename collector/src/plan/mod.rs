//! The validated request: what to run, how often, under which controls, measuring what.
//! Built in one place ([`build`], from a [`Request`] of plain values that the command
//! line fills in); everything after it trusts it.

pub mod bench_binary;
mod build;
pub mod counters;
mod groups;
mod request;

use std::collections::BTreeSet;
use std::path::PathBuf;

use sbs_reports::model::{Family, MetricId, Variant};

pub use crate::run::spec::{BenchmarkSpec, GroupSpec, InstrumentSpec};
pub use crate::run::spec::{FailurePolicy, Point, Schedule};
pub use build::{build, planned_groups, resolve_program};
pub(crate) use groups::{invocation_options, unique};
pub use request::{Controls, HarnessBinary, HarnessTarget, Measures, Request, ScanRequest, Target};

/// The format of a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// An aligned table for people.
    Text,
    /// The JSON schema of `docs/schema.md`.
    Json,
    /// One row per metric.
    Csv,
    /// Bencher Metric Format JSON (bencher.dev, github-action-benchmark).
    Bmf,
    /// A Markdown table for pull-request comments.
    Markdown,
}

/// Where the report goes and in which format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destinations {
    /// Format of the main report.
    pub format: Format,
    /// Colour the text report (`None`: on a terminal, unless `NO_COLOR` is set).
    pub color: Option<bool>,
    /// The unit of every time in the text and Markdown reports (`None`: each its own).
    pub time_unit: Option<sbs_reports::human::TimeUnit>,
    /// A file for the main report (stdout when `None`).
    pub output: Option<PathBuf>,
    /// A file for the HTML page, if one is asked for.
    pub html: Option<PathBuf>,
    /// Further files, each in its own format, written from the same measurements
    /// (`--export-json FILE`...), with the option that named each.
    pub exports: Vec<Export>,
}

/// One `--export-FORMAT FILE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    /// The option that asked for it, for messages (`--export-json`).
    pub option: &'static str,
    /// Its format.
    pub format: Format,
    /// Its file.
    pub path: PathBuf,
}

/// The whole validated request, as data: what each benchmark's runs will carry, not the
/// instruments themselves ([`crate::run::spec::instantiate`] makes them).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The benchmarks; several are run interleaved (A B A B ...).
    pub benchmarks: Vec<BenchmarkSpec>,
    /// How often each group runs, and what a failing child means.
    pub schedule: Schedule,
    /// Report format and destinations.
    pub destinations: Destinations,
}

/// The families of metric ids `groups` may report.
pub fn families<'a>(groups: impl Iterator<Item = &'a GroupSpec>) -> BTreeSet<Family> {
    groups
        .flat_map(|g| &g.instruments)
        .flat_map(InstrumentSpec::families)
        .collect()
}

/// The id of every metric `groups` may report, and the calibrated twin the judge adds for
/// every metric measured on an empty operation.
pub fn metric_ids<'a>(groups: impl Iterator<Item = &'a GroupSpec>) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for g in groups {
        let mut group: Vec<String> = Vec::new();
        for i in &g.instruments {
            let more = i.metric_ids_after(&group);
            group.extend(more);
        }
        ids.extend(group);
    }
    let calibrated: Vec<String> = ids
        .iter()
        .filter_map(|id| MetricId::parse(id).ok())
        .filter(|id| id.variant() == Variant::Empty)
        .map(|id| id.with_variant(Variant::Calibrated).to_string())
        .collect();
    ids.extend(calibrated);
    ids
}
