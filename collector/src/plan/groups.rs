//! The groups of runs of one benchmark, from the metric groups a [`Measures`] asks for.
//! Every benchmark of a plan gets the same list, in the same order (interleaved runs rely
//! on it), except that a harnessed benchmark's size probes come last, as groups of its own.
//! What a plan will measure is known from these groups before anything heavy
//! ([`metrics`]): the `--threshold` names are checked against it before a harness is
//! built or a program read.

use anyhow::bail;
use sbs_reports::model::Family;

use super::counters::{self, CounterOptions};
use super::{Measures, Request, Target};
use crate::judge::regression::Measured;
use crate::run::instruments::alloc::{AllocMetrics, AllocPath};
use crate::run::instruments::invocations::Options as InvocationOptions;
use crate::run::instruments::per_op::{PerOpMode, NOT_COUNTED};
use crate::run::runner::RunConfig;
use crate::run::spec::{self, Drift, GroupSpec, InstrumentSpec, PerOpSpec};

/// Name of the group that counts a harnessed benchmark's first operations (the drift
/// check), one run under callgrind.
pub const FIRST_OPS_GROUP: &str = "first operations";

/// Suffix of the name of a counting group's calibration twin (the empty operation's runs).
pub const EMPTY_GROUP: &str = " (empty op)";

/// What the plan of `request` will measure: the families of its metrics and the id of
/// every one (`PREFIX*` for ids its runs name), from the groups it will give its
/// benchmarks, before anything heavy.
pub fn metrics(request: &Request) -> anyhow::Result<Measured> {
    Ok(spec::measured(&planned_groups(request)?))
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

/// The groups of one benchmark, in run order.
///
/// For a harnessed benchmark (`harness` is its name and its size probes, `KEY=VALUE` each)
/// uprobes, perf counters and valgrind count inside the measured region only, and every
/// group ends with the instrument that reads the harness's records and reports metrics per
/// operation. Each counting group gets a calibration twin (the empty operation), and with
/// `--instructions` each size probe a group that counts the instructions at that size.
pub(super) fn benchmark_groups(
    measures: &Measures,
    harness: Option<(&str, &[String])>,
) -> anyhow::Result<Vec<GroupSpec>> {
    let region = harness.is_some();
    let counter_options = CounterOptions {
        region,
        ..measures.counters.clone()
    };
    let mut groups = instrument_groups(measures, region)?;
    groups.extend(counters::groups(&counter_options)?);
    let others_requested = !groups.is_empty();
    // A harnessed benchmark is always timed: time.op is what it is for.
    if measures.time || !others_requested || region {
        groups.insert(
            0,
            group(
                "timing",
                InstrumentSpec::Timing {
                    rss: !measures.memory,
                },
            ),
        );
    }
    if let Some((name, probes)) = harness {
        add_harness_records(&mut groups, measures, &counter_options, name, probes)?;
    }
    Ok(groups)
}

/// A group of one instrument.
fn group(name: &str, instrument: InstrumentSpec) -> GroupSpec {
    GroupSpec {
        name: name.into(),
        instruments: vec![instrument],
    }
}

/// Refuse, before anything heavy, a program whose exec changes credentials when a group
/// counts through perf events attached to the process: the kernel ends them at that exec
/// and every count would read an exact-looking 0.
pub(super) fn refuse_credential_change(measures: &Measures, run: &RunConfig) -> anyhow::Result<()> {
    let mut perf = Vec::new();
    if !measures.invocations.is_empty() {
        perf.push("--invocations");
    }
    if measures.boxing {
        perf.push("--boxing");
    }
    if measures.counters.counters.is_some() {
        perf.push("--counters");
    }
    if measures.counters.instructions == Some(counters::InstructionsMode::Perf) {
        perf.push("--instructions perf");
    }
    if measures.profile_time {
        perf.push("--profile-time");
    }
    if perf.is_empty() {
        return Ok(());
    }
    let program = &run.program;
    let why = sbs_probes::capability::credential_change(program).map_err(|e| {
        anyhow::anyhow!("cannot inspect {}: {e}; check the path", program.display())
    })?;
    if let Some(why) = why {
        bail!(
            "{}: {why}, and the kernel stops every perf event of a process at an exec that \
             changes its credentials, so {} would read 0; measure a copy without the bit \
             (cp {} /tmp/), or run sbs-profile as that user",
            program.display(),
            perf.join(", "),
            program.display()
        );
    }
    Ok(())
}

/// The groups of every instrument but the counters and timing: invocations, allocations,
/// boxing, memory, the time profile, in that order.
fn instrument_groups(measures: &Measures, region: bool) -> anyhow::Result<Vec<GroupSpec>> {
    let mut groups = Vec::new();
    if !measures.invocations.is_empty() {
        // All patterns share one group of runs. A pattern given twice is counted once, in
        // the place it was first given: each copy would otherwise add its count to the
        // same metric as a run of its own (300 copies and `--runs 1` made n = 300).
        groups.push(group(
            "invocations",
            InstrumentSpec::Invocations {
                patterns: unique(&measures.invocations),
                options: invocation_options(measures, region),
            },
        ));
    } else if measures.invocations_detail {
        bail!("--invocations-detail details the rows of --invocations; add --invocations PATTERN");
    }
    let alloc_path = if measures.alloc_harness {
        AllocPath::Harness
    } else {
        AllocPath::Agent
    };
    if measures.alloc_harness && !measures.alloc && !measures.memory {
        bail!(
            "--alloc-harness changes where --alloc and --memory get their numbers; add one of them"
        );
    }
    if measures.alloc {
        groups.push(group(
            "alloc",
            InstrumentSpec::Alloc {
                metrics: AllocMetrics::All,
                path: alloc_path,
            },
        ));
    }
    if measures.boxing {
        groups.push(group(
            "boxing",
            InstrumentSpec::Boxing {
                options: invocation_options(measures, region),
            },
        ));
    }
    if measures.memory {
        groups.extend(memory_groups(measures, alloc_path));
    }
    if measures.profile_time {
        groups.push(group("profile-time", InstrumentSpec::TimeProfile));
    }
    Ok(groups)
}

/// For the harnessed benchmark `name`: every group gets the instrument that reads the
/// harness's records; each counter group gets its calibration twin (the same counters,
/// the harness running the empty operation) right after it; and with `--instructions`,
/// each size probe a group that counts the instructions alone at that size (the
/// constant-input check), at the end.
fn add_harness_records(
    groups: &mut Vec<GroupSpec>,
    measures: &Measures,
    counter_options: &CounterOptions,
    name: &str,
    probes: &[String],
) -> anyhow::Result<()> {
    // The drift check counts the first operations under callgrind where valgrind is
    // installed, and judges on the timing runs' times alone where it is not.
    let counted = sbs_probes::valgrind::find_valgrind().is_ok();
    for g in groups.iter_mut() {
        let mut records = per_op_records(name, &g.name, measures);
        if g.name == "timing" {
            records.drift = Some(match counted {
                true => Drift::Counted,
                false => Drift::TimingOnly(NOT_COUNTED.into()),
            });
        }
        g.instruments.push(InstrumentSpec::PerOp(records));
    }
    if counted {
        // Right after the timing group, whose times it judges with its counts: in the same
        // place for every benchmark of the plan.
        let at = groups
            .iter()
            .position(|g| g.name == "timing")
            .map_or(0, |i| i + 1);
        let benchmark = name.to_string();
        groups.insert(
            at,
            group(FIRST_OPS_GROUP, InstrumentSpec::FirstOps { benchmark }),
        );
    }
    for mut twin in counters::groups(counter_options)? {
        let mut records = per_op_records(name, &twin.name, measures);
        records.empty = true;
        twin.instruments.push(InstrumentSpec::PerOp(records));
        let at = groups
            .iter()
            .position(|g| g.name == twin.name)
            .map_or(groups.len(), |i| i + 1);
        twin.name.push_str(EMPTY_GROUP);
        groups.insert(at, twin);
    }
    if measures.counters.instructions.is_some() {
        let instructions_only = CounterOptions {
            counters: None,
            ..counter_options.clone()
        };
        for probe in probes {
            for mut g in counters::groups(&instructions_only)? {
                let mut records = per_op_records(name, &g.name, measures);
                records.size = Some(probe.clone());
                g.instruments.push(InstrumentSpec::PerOp(records));
                g.name = format!("{} @{probe}", g.name);
                groups.push(g);
            }
        }
    }
    Ok(())
}

/// How the invocation counts of `measures` are made (`region`: only inside a harness's
/// measured region).
fn invocation_options(measures: &Measures, region: bool) -> InvocationOptions {
    InvocationOptions {
        max_probes: measures.max_probes,
        detail: measures.invocations_detail,
        partial: measures.invocations_partial,
        engine: measures.invocations_engine,
        region,
    }
}

/// The patterns, each once, in the order first given.
fn unique(patterns: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(patterns.len());
    for p in patterns {
        if !out.contains(p) {
            out.push(p.clone());
        }
    }
    out
}

/// The `memory` group, and the `heap` group when heap.peak needs agent runs of its own.
///
/// RSS is measured in runs without the agent (its bookkeeping adds to the resident size it
/// would measure). heap.peak comes from the alloc runs with --alloc, else from agent runs
/// of their own (group `heap`), or, with --alloc-harness, from the program's own counting
/// allocator in the memory runs (it adds nothing to RSS). A program the agent cannot load
/// into (static, setuid) still gets its RSS, and a warning instead of heap.peak (see
/// [`crate::run::spec::instantiate`]).
fn memory_groups(measures: &Measures, alloc_path: AllocPath) -> Vec<GroupSpec> {
    let mut memory = group("memory", InstrumentSpec::Memory);
    if measures.alloc {
        return vec![memory];
    }
    let heap = InstrumentSpec::Alloc {
        metrics: AllocMetrics::HeapPeak,
        path: alloc_path,
    };
    match alloc_path {
        AllocPath::Harness => {
            memory.instruments.push(heap);
            vec![memory]
        }
        AllocPath::Agent => vec![memory, group("heap", heap)],
    }
}

/// The last instrument of each group of a harnessed benchmark: what the group's runs are
/// for (timing, or counting inside the region) and which metrics it turns per operation.
fn per_op_records(benchmark: &str, group: &str, measures: &Measures) -> PerOpSpec {
    let count = PerOpMode::Count { ops: measures.ops };
    let (mode, region) = match group {
        "timing" => (PerOpMode::Time, Vec::new()),
        "invocations" => (count, vec![Family::Invocations]),
        "boxing" => (count, vec![Family::Boxing]),
        n if n.starts_with("counters") || n == "valgrind" || n == "qemu" => {
            (count, vec![Family::Counter])
        }
        _ => (count, Vec::new()),
    };
    PerOpSpec {
        benchmark: benchmark.to_string(),
        mode,
        region,
        alloc_harness: measures.alloc_harness,
        empty: false,
        size: None,
        drift: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(groups: &[GroupSpec]) -> Vec<&str> {
        groups.iter().map(|g| g.name.as_str()).collect()
    }

    #[test]
    fn the_groups_are_data_known_from_the_measures_alone() {
        let measures = Measures {
            memory: true,
            invocations: vec!["push".into(), "pop".into(), "push".into()],
            ..Measures::default()
        };
        let groups = benchmark_groups(&measures, None).unwrap();
        assert_eq!(names(&groups), ["invocations", "memory", "heap"]);
        assert_eq!(
            groups[0].instruments,
            [InstrumentSpec::Invocations {
                patterns: vec!["push".into(), "pop".into()],
                options: invocation_options(&measures, false),
            }]
        );
        assert_eq!(groups, benchmark_groups(&measures, None).unwrap());
        let ids = spec::measured(&groups).ids;
        for id in [
            "invocations.push",
            "invocations.pop",
            "rss.tree_peak",
            "heap.peak",
        ] {
            assert!(ids.contains(id), "{id}: {ids:?}");
        }
        assert!(!ids.iter().any(|id| id.starts_with("time.")), "{ids:?}");
        // With the counting allocator, heap.peak comes from the memory runs themselves.
        let harness_alloc = Measures {
            alloc_harness: true,
            ..measures
        };
        let groups = benchmark_groups(&harness_alloc, None).unwrap();
        assert_eq!(names(&groups), ["invocations", "memory"]);
    }

    #[test]
    fn every_group_of_a_harnessed_benchmark_ends_with_its_records() {
        let measures = Measures {
            alloc: true,
            ops: 10,
            ..Measures::default()
        };
        let groups = benchmark_groups(&measures, Some(("sort", &[]))).unwrap();
        let counted = sbs_probes::valgrind::find_valgrind().is_ok();
        let expected: &[&str] = match counted {
            true => &["timing", FIRST_OPS_GROUP, "alloc"],
            false => &["timing", "alloc"],
        };
        assert_eq!(names(&groups), expected);
        for g in groups.iter().filter(|g| g.name != FIRST_OPS_GROUP) {
            let Some(InstrumentSpec::PerOp(records)) = g.instruments.last() else {
                panic!("{} does not end with the harness's records", g.name);
            };
            assert_eq!(records.benchmark, "sort");
            assert_eq!(records.drift.is_some(), g.name == "timing", "{}", g.name);
        }
        let ids = spec::measured(&groups).ids;
        for id in [
            "time.op",
            "time.op.empty",
            "alloc.count/op",
            "heap.retained",
        ] {
            assert!(ids.contains(id), "{id}: {ids:?}");
        }
    }
}
