//! A measuring command (a plain run, `compare`): build the plan, load what it is compared
//! with, run it, judge it, save the history and write the reports.

use std::process::ExitCode;

use anyhow::Context;

use super::{exit_for, RunArgs};
use crate::check;
use crate::judge::judge;
use crate::judge::regression::{Mode, Reference, Regression};
use crate::output::{Format, Sinks, Unwritten};
use crate::plan::{self, BenchmarkSpec, Request, Target};
use crate::run::confirm::Confirmer;
use crate::run::runner::Cancel;
use crate::run::scheduler::execute;
use crate::run::spec;
use crate::run::spec::Benchmark;
use sbs_reports::model::Report;

/// Measure `targets` with the options of `args`, judged as `mode` says.
pub(super) fn measure(
    args: &RunArgs,
    targets: Vec<Target>,
    mode: Mode,
) -> anyhow::Result<ExitCode> {
    // A debug build that cannot be read, or no valgrind: before anything else.
    let check = match &args.invocations_check {
        Some(debug) => Some((debug, check::preflight(debug)?)),
        None => None,
    };
    let targets_replay: Vec<Option<plan::replay::ReplaySource>> = targets
        .iter()
        .map(|t| match t {
            Target::Harness(h) => h.replay.clone(),
            _ => None,
        })
        .collect();
    let Checked {
        plan,
        regression,
        references,
        sinks,
    } = checked_plan(args, targets, mode, check.is_some())?;
    let mut benchmarks = instantiate(&plan)?;
    let cancel = Cancel::install()
        .context("cannot install the handlers of Ctrl-C, SIGTERM, SIGHUP and SIGQUIT")?;
    let mut report = execute(&mut benchmarks, &plan.schedule, &cancel)?;
    // A check that cannot be made loses none of the measurements: they are judged, saved
    // and written, and the error is said at the end.
    let unchecked = check.and_then(|(debug, valgrind)| {
        check_all(&plan.benchmarks, debug, &valgrind, &cancel, &mut report).err()
    });
    if let Some(source) = replayed(&targets_replay) {
        let in_situ = in_situ_of(source)?;
        crate::judge::fidelity::check(&mut report, &in_situ, args.ops);
    }
    let schedule = &plan.schedule;
    let regressions = judge(
        &mut report,
        &regression,
        &references,
        schedule.confidence,
        schedule.runs,
        &mut Confirmer::new(&mut benchmarks, schedule, &cancel),
    )?;
    // Save first, then write every report that can be written: a failing destination
    // loses neither the history nor the other reports, and a failing history loses no
    // report. Neither depends on stdout having a reader.
    let finished = regression.finish(&report);
    let written = sinks.write(&report);
    let code = exit_for(&regressions);
    let mut failures = written.err().map(|u| u.failures).unwrap_or_default();
    if let Err(e) = finished.saved {
        failures.insert(0, e);
    }
    failures.extend(unchecked);
    // A --cleanup that failed after the runs: said once the measurements are safe.
    failures.extend(
        benchmarks
            .iter_mut()
            .filter_map(|b| b.failed_cleanup.take()),
    );
    // A --threshold that names no metric switched a gate off: an error, once the
    // measurements are safe.
    if let Err(e) = finished.unnamed {
        failures.push(e);
    }
    // The numbers-only formats have no place for warnings: they go to stderr.
    if matches!(args.report.destinations().format, Format::Csv | Format::Bmf) {
        for b in &report.benchmarks {
            for w in &b.warnings {
                eprintln!("sbs-profile: warning ({}): {w}", b.name);
            }
        }
    }
    if let (true, Some(summary)) = (args.strict, report.warnings_summary()) {
        let strict =
            format!("{summary} and --strict: fix what they say, or drop --strict to let them pass");
        // A regression keeps its exit code 1 under --strict: a gate must see it. The
        // warnings are still said; only an error (2) goes before a regression.
        if failures.is_empty() && !regressions.is_empty() {
            eprintln!("strict: {strict} (exit code 1: the regression comes first)");
            return Ok(code);
        }
        failures.push(anyhow::anyhow!(strict));
    }
    if failures.is_empty() {
        Ok(code)
    } else {
        Err(Unwritten { failures }.into())
    }
}

/// The captures a `--replay` run replays, if it is one.
fn replayed(targets: &[Option<plan::replay::ReplaySource>]) -> Option<&plan::replay::ReplaySource> {
    targets.iter().flatten().next()
}

/// The in-situ allocations of the calls each replayed capture holds.
fn in_situ_of(
    source: &plan::replay::ReplaySource,
) -> anyhow::Result<Vec<crate::judge::fidelity::InSitu>> {
    plan::replay::matching(source)?
        .into_iter()
        .map(|c| {
            let calls = plan::replay::read_calls(&c.dir)?;
            Ok(crate::judge::fidelity::InSitu {
                function: c.meta.function,
                calls: calls
                    .iter()
                    .map(|call| (call.alloc_count, call.alloc_bytes))
                    .collect(),
            })
        })
        .collect()
}

/// A plan whose every flag was checked, and what its judge and its report need.
struct Checked {
    plan: plan::Plan,
    regression: Regression,
    references: Vec<Reference>,
    sinks: Sinks,
}

/// The plan of `targets` with the options of `args`, every flag checked before anything
/// heavy (a cargo build, debug info read, a probe, a child): the thresholds against what
/// the planned groups will report, the history's directory, the report's destinations.
/// A typo costs no build and no run. Then the plan (a harness's build and listing) and
/// its history (a missing baseline or a corrupt file fails before the runs).
fn checked_plan(
    args: &RunArgs,
    targets: Vec<Target>,
    mode: Mode,
    one_program: bool,
) -> anyhow::Result<Checked> {
    let request = Request {
        targets,
        measures: args.measures(),
        controls: args.controls(),
        scan: args.scan()?,
    };
    // What the plan will measure is data, known from the request alone; the gate says
    // its own errors first.
    let measured = plan::metrics(&request);
    let regression = Regression::prepare(
        &args.regression.settings(args.ignore_failure),
        request.controls.confidence,
        mode,
        measured,
    )?;
    let sinks = Sinks::open(&args.report.destinations())?;
    let plan = plan::build(request)?;
    // A report that would replace what the runs read (-o naming the program).
    let read: Vec<(&str, &std::path::Path)> = plan
        .benchmarks
        .iter()
        .flat_map(|b| {
            let input = b
                .run
                .input
                .as_deref()
                .map(|i| ("the benchmark's --input", i));
            std::iter::once(("the benchmark's program", b.run.program.as_path())).chain(input)
        })
        .collect();
    sinks.refuse_read_files(&read)?;
    let names: Vec<String> = plan.benchmarks.iter().map(|b| b.name.clone()).collect();
    let references = regression.load(&names)?;
    for reference in &references {
        if let Reference::History(entries) = reference {
            for note in entries.iter().flat_map(|e| e.duplicate_notes()) {
                eprintln!("sbs-profile: note: {note}");
            }
        }
    }
    if one_program {
        check::one_program(plan.benchmarks.iter().map(|b| &b.run))?;
    }
    Ok(Checked {
        plan,
        regression,
        references,
        sinks,
    })
}

/// The live benchmarks of `plan`, every instrument made, and a note when its uprobes
/// made sbs-profile mount tracefs (said whether or not they could be made: the mount
/// stays either way).
fn instantiate(plan: &plan::Plan) -> anyhow::Result<Vec<Benchmark>> {
    let benchmarks = plan.benchmarks.iter().map(spec::instantiate).collect();
    if let Some(at) = sbs_probes::tracefs::Tracefs::mounted_by_this_process() {
        eprintln!(
            "sbs-profile: note: tracefs was not mounted; mounted it at {} for the uprobes (it stays mounted)",
            at.display()
        );
    }
    benchmarks
}

/// `--invocations-check`: each benchmark's counts against the debug build, in its report,
/// with a warning where they differ.
fn check_all(
    benchmarks: &[BenchmarkSpec],
    debug: &std::path::Path,
    valgrind: &std::path::Path,
    cancel: &Cancel,
    report: &mut Report,
) -> anyhow::Result<()> {
    for (b, result) in benchmarks.iter().zip(report.benchmarks.iter_mut()) {
        let checks = check::check(b, debug, valgrind, cancel)?;
        for c in &checks {
            let differ: Vec<_> = c.differing().collect();
            if differ.is_empty() {
                continue;
            }
            let lines: usize = differ.iter().map(|g| g.lines.len()).sum();
            result.warnings.push(format!(
                "{}: counted {} calls, {} made {}; {} group(s) of call lines ({lines} lines) \
                 disagree beyond any stated bound, the largest at {} ({} counted, {} made): \
                 see `invocation_checks` in the JSON report",
                c.metric,
                sbs_reports::human::count(c.counted as f64),
                c.debug_program,
                sbs_reports::human::count(c.made as f64),
                differ.len(),
                differ[0].lines.join(", "),
                differ[0].counted,
                differ[0].made,
            ));
        }
        result.invocation_checks = checks;
    }
    Ok(())
}
