//! What a plan will measure, known before anything heavy: the families and ids of the
//! metrics its groups may report, which the `--threshold` names are checked against
//! before a harness is built or a program read.

use std::collections::BTreeSet;

use sbs_reports::model::{Family, MetricId, Variant};

use super::groups::benchmark_groups;
use super::{GroupSpec, InstrumentSpec, Request, Target};
use crate::judge::regression::Measured;

/// What the plan of `request` will measure: the families of its metrics and the id of
/// every one (`PREFIX*` for ids its runs name), from the groups it will give its
/// benchmarks, before anything heavy.
pub fn metrics(request: &Request) -> anyhow::Result<Measured> {
    let planned = planned_groups(request)?;
    Ok(Measured {
        families: families(planned.iter()),
        ids: metric_ids(planned.iter()),
    })
}

/// Stands for every size probe of a harnessed benchmark in [`planned_groups`]: the id
/// of its instruction count, `counter.instructions/op@*`, is a prefix pattern.
const ANY_SIZE: &str = "*";

/// The groups the plan of `request` will give its benchmarks, known before anything heavy
/// (no cargo build, no listing of a harness binary, no program read): what the
/// `--threshold` names are checked against first. A harness's size probes, known only from
/// its listing, stand as one probe of any size.
fn planned_groups(request: &Request) -> anyhow::Result<Vec<GroupSpec>> {
    let mut groups = Vec::new();
    let commands = request
        .targets
        .iter()
        .any(|t| matches!(t, Target::Command { .. }));
    if commands {
        groups.extend(benchmark_groups(&request.measures, None)?);
    }
    if request
        .targets
        .iter()
        .any(|t| matches!(t, Target::Harness(_)))
    {
        let any_size = [ANY_SIZE.to_string()];
        groups.extend(benchmark_groups(&request.measures, Some(("", &any_size)))?);
    }
    Ok(groups)
}

/// The families of metric ids `groups` may report.
fn families<'a>(groups: impl Iterator<Item = &'a GroupSpec>) -> BTreeSet<Family> {
    groups
        .flat_map(|g| &g.instruments)
        .flat_map(InstrumentSpec::families)
        .collect()
}

/// The id of every metric `groups` may report, and the calibrated twin the judge adds for
/// every metric measured on an empty operation.
pub(super) fn metric_ids<'a>(groups: impl Iterator<Item = &'a GroupSpec>) -> BTreeSet<String> {
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
