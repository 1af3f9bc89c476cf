//! The groups of runs of one benchmark, from the metric groups a [`Measures`] asks for.
//! Every benchmark of a plan gets the same list, in the same order (interleaved runs rely
//! on it), except that a harnessed benchmark's size probes come last, as groups of its own.

use std::ffi::OsStr;

use anyhow::bail;
use sbs_reports::model::Family;

use super::counters::{self, CounterOptions};
use super::Measures;
use crate::run::instrument::{Group, Instrument};
use crate::run::instruments::alloc::{AgentError, AllocAgent, AllocMetrics, AllocPath};
use crate::run::instruments::boxing::Boxing;
use crate::run::instruments::first_ops::FirstOps;
use crate::run::instruments::invocations::{Invocations, Options as InvocationOptions};
use crate::run::instruments::memory::Memory;
use crate::run::instruments::per_op::{
    DriftCell, DriftJudge, PerOpMode, PerOpRecords, NOT_COUNTED,
};
use crate::run::instruments::stacks::TimeProfile;
use crate::run::instruments::timing::Timing;
use crate::run::runner::RunConfig;

/// Name of the group that counts a harnessed benchmark's first operations (the drift
/// check), one run under callgrind.
pub const FIRST_OPS_GROUP: &str = "first operations";

/// Suffix of the name of a counting group's calibration twin (the empty operation's runs).
pub const EMPTY_GROUP: &str = " (empty op)";

/// The groups of one benchmark, in run order.
///
/// For a harnessed benchmark (`harness` is its name and its size probes, `KEY=VALUE` each)
/// uprobes, perf counters and valgrind count inside the measured region only, and every
/// group ends with the instrument that reads the harness's records and reports metrics per
/// operation. Each counting group gets a calibration twin (the empty operation), and with
/// `--instructions` each size probe a group that counts the instructions at that size.
pub(super) fn benchmark_groups(
    measures: &Measures,
    run: &RunConfig,
    harness: Option<(&str, &[String])>,
) -> anyhow::Result<Vec<Group>> {
    let region = harness.is_some();
    refuse_credential_change(measures, run)?;
    let counter_options = CounterOptions {
        region,
        ..measures.counters.clone()
    };
    let mut groups = instrument_groups(measures, run, region)?;
    groups.extend(counters::groups(&counter_options)?);
    let others_requested = !groups.is_empty();
    // A harnessed benchmark is always timed: time.op is what it is for.
    if measures.time || !others_requested || region {
        groups.insert(
            0,
            Group {
                name: "timing".into(),
                instruments: vec![Box::new(Timing {
                    rss: !measures.memory,
                })],
            },
        );
    }
    if let Some((name, probes)) = harness {
        add_harness_records(&mut groups, measures, &counter_options, name, probes)?;
    }
    Ok(groups)
}

/// Refuse, before anything heavy, a program whose exec changes credentials when a group
/// counts through perf events attached to the process: the kernel ends them at that exec
/// and every count would read an exact-looking 0.
fn refuse_credential_change(measures: &Measures, run: &RunConfig) -> anyhow::Result<()> {
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
fn instrument_groups(
    measures: &Measures,
    run: &RunConfig,
    region: bool,
) -> anyhow::Result<Vec<Group>> {
    let mut groups = Vec::new();
    if !measures.invocations.is_empty() {
        groups.push(invocations_group(measures, run, region)?);
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
        groups.push(Group {
            name: "alloc".into(),
            instruments: vec![Box::new(AllocAgent::new(
                AllocMetrics::All,
                alloc_path,
                &run.program,
                &run.env,
            )?)],
        });
    }
    if measures.boxing {
        groups.push(boxing_group(measures, run, region)?);
    }
    if measures.memory {
        groups.extend(memory_groups(measures, run, alloc_path)?);
    }
    if measures.profile_time {
        groups.push(Group {
            name: "profile-time".into(),
            instruments: vec![Box::new(TimeProfile::new(
                &run.program,
                sbs_probes::sample::SampleConfig::default(),
            )?)],
        });
    }
    Ok(groups)
}

/// For the harnessed benchmark `name`: every group gets the instrument that reads the
/// harness's records; each counter group gets its calibration twin (the same counters,
/// the harness running the empty operation) right after it; and with `--instructions`,
/// each size probe a group that counts the instructions alone at that size (the
/// constant-input check), at the end.
fn add_harness_records(
    groups: &mut Vec<Group>,
    measures: &Measures,
    counter_options: &CounterOptions,
    name: &str,
    probes: &[String],
) -> anyhow::Result<()> {
    // The drift check counts the first operations under callgrind where valgrind is
    // installed, and judges on the timing runs' times alone where it is not.
    let (judge, first_ops) = match sbs_probes::valgrind::find_valgrind() {
        Ok(valgrind) => {
            let cell = DriftCell::default();
            let group = Group {
                name: FIRST_OPS_GROUP.into(),
                instruments: vec![Box::new(FirstOps::new(name, valgrind, cell.clone()))],
            };
            (DriftJudge::Counted(cell), Some(group))
        }
        Err(_) => (DriftJudge::TimingOnly(NOT_COUNTED.into()), None),
    };
    for g in groups.iter_mut() {
        let mut records = per_op_records(name, &g.name, measures);
        if g.name == "timing" {
            records = records.drift(judge.clone());
        }
        g.instruments.push(Box::new(records));
    }
    if let Some(group) = first_ops {
        // Right after the timing group, whose times it judges with its counts: in the same
        // place for every benchmark of the plan.
        let at = groups
            .iter()
            .position(|g| g.name == "timing")
            .map_or(0, |i| i + 1);
        groups.insert(at, group);
    }
    for mut twin in counters::groups(counter_options)? {
        let records = per_op_records(name, &twin.name, measures).empty_operation();
        twin.instruments.push(Box::new(records));
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
                let records = per_op_records(name, &g.name, measures).at_size(probe);
                g.instruments.push(Box::new(records));
                g.name = format!("{} @{probe}", g.name);
                groups.push(g);
            }
        }
    }
    Ok(())
}

/// The child's `LD_LIBRARY_PATH`, where probes look for the libraries it loads.
fn ld_library_path(run: &RunConfig) -> Option<&OsStr> {
    run.env
        .iter()
        .find(|(k, _)| k == "LD_LIBRARY_PATH")
        .map(|(_, v)| v.as_os_str())
}

/// The child's own `LD_PRELOAD`, kept after a preloaded library of ours.
fn ld_preload(run: &RunConfig) -> Option<&OsStr> {
    run.env
        .iter()
        .find(|(k, _)| k == "LD_PRELOAD")
        .map(|(_, v)| v.as_os_str())
}

pub(crate) fn invocation_options(measures: &Measures, region: bool) -> InvocationOptions {
    InvocationOptions {
        max_probes: measures.max_probes,
        detail: measures.invocations_detail,
        partial: measures.invocations_partial,
        engine: measures.invocations_engine,
        region,
    }
}

/// The patterns, each once, in the order first given.
pub(crate) fn unique(patterns: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(patterns.len());
    for p in patterns {
        if !out.contains(p) {
            out.push(p.clone());
        }
    }
    out
}

/// All `--invocations` patterns share one group of runs. A pattern given twice is counted
/// once, in the place it was first given: each copy would otherwise add its count to the
/// same metric as a run of its own (300 copies and `--runs 1` made n = 300).
fn invocations_group(measures: &Measures, run: &RunConfig, region: bool) -> anyhow::Result<Group> {
    let patterns = unique(&measures.invocations);
    let instrument = Invocations::new(
        &run.program,
        ld_library_path(run),
        ld_preload(run),
        &patterns,
        invocation_options(measures, region),
    )?;
    Ok(Group {
        name: "invocations".into(),
        instruments: vec![Box::new(instrument)],
    })
}

fn boxing_group(measures: &Measures, run: &RunConfig, region: bool) -> anyhow::Result<Group> {
    let boxing = Boxing::new(
        &run.program,
        ld_library_path(run),
        ld_preload(run),
        invocation_options(measures, region),
    )?;
    Ok(Group {
        name: "boxing".into(),
        instruments: vec![Box::new(boxing)],
    })
}

/// The `memory` group, and the `heap` group when heap.peak needs agent runs of its own.
///
/// RSS is measured in runs without the agent (its bookkeeping adds to the resident size it
/// would measure). heap.peak comes from the alloc runs with --alloc, else from agent runs
/// of their own (group `heap`), or, with --alloc-harness, from the program's own counting
/// allocator in the memory runs (it adds nothing to RSS). A program the agent cannot load
/// into (static, setuid) still gets its RSS, and a warning instead of heap.peak.
fn memory_groups(
    measures: &Measures,
    run: &RunConfig,
    alloc_path: AllocPath,
) -> anyhow::Result<Vec<Group>> {
    let mut memory = Memory::default();
    let mut heap = None;
    if !measures.alloc {
        match AllocAgent::new(AllocMetrics::HeapPeak, alloc_path, &run.program, &run.env) {
            Ok(agent) => heap = Some(agent),
            Err(e) => match e.downcast_ref::<AgentError>() {
                Some(AgentError::Unsupported { .. }) => {
                    memory.note(format!("heap.peak not measured: {e}"));
                }
                _ => return Err(e),
            },
        }
    }
    let mut instruments: Vec<Box<dyn Instrument>> = vec![Box::new(memory)];
    let mut heap_group = None;
    match heap {
        Some(counting) if alloc_path == AllocPath::Harness => instruments.push(Box::new(counting)),
        Some(agent) => {
            heap_group = Some(Group {
                name: "heap".into(),
                instruments: vec![Box::new(agent)],
            })
        }
        None => {}
    }
    let mut groups = vec![Group {
        name: "memory".into(),
        instruments,
    }];
    groups.extend(heap_group);
    Ok(groups)
}

/// The last instrument of each group of a harnessed benchmark: what the group's runs are
/// for (timing, or counting inside the region) and which metrics it turns per operation.
fn per_op_records(benchmark: &str, group: &str, measures: &Measures) -> PerOpRecords {
    let count = PerOpMode::Count { ops: measures.ops };
    let (mode, prefixes) = match group {
        "timing" => (PerOpMode::Time, Vec::new()),
        "invocations" => (count, vec![Family::Invocations]),
        "boxing" => (count, vec![Family::Boxing]),
        n if n.starts_with("counters") || n == "valgrind" => (count, vec![Family::Counter]),
        _ => (count, Vec::new()),
    };
    PerOpRecords::new(benchmark, mode, prefixes).counting_alloc(measures.alloc_harness)
}
