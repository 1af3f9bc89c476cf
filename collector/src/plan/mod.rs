//! The validated request: what to run, how often, under which controls, measuring what.
//! Built in one place ([`build`], from a [`Request`] of plain values that the command
//! line fills in); everything after it trusts it.

pub mod bench_binary;
mod build;
pub mod counters;
mod groups;
mod request;

use std::collections::BTreeSet;

use sbs_reports::model::{Family, MetricId, Variant};

pub use crate::run::spec::{BenchmarkSpec, GroupSpec, InstrumentSpec};
pub use crate::run::spec::{FailurePolicy, Point, Schedule};
pub use build::{build, planned_groups, resolve_program};
pub(crate) use groups::{invocation_options, unique};
pub use request::{Controls, HarnessBinary, HarnessTarget, Measures, Request, ScanRequest, Target};

/// The whole validated request, as data: what each benchmark's runs will carry, not the
/// instruments themselves ([`crate::run::spec::instantiate`] makes them).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The benchmarks; several are run interleaved (A B A B ...).
    pub benchmarks: Vec<BenchmarkSpec>,
    /// How often each group runs, and what a failing child means.
    pub schedule: Schedule,
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
