//! A measuring command (a plain run, `compare`): build the plan, load what it is compared
//! with, run it, judge it, save the history and write the reports.

use std::process::ExitCode;

use anyhow::Context;

use super::{exit_for, RunArgs};
use crate::check::{self, CheckRequest};
use crate::judge::judge;
use crate::judge::regression::{Mode, Regression};
use crate::output::{Sinks, Unwritten};
use crate::plan::{self, Format, Request, Target};
use crate::run::confirm::confirm;
use crate::run::runner::Cancel;
use crate::run::scheduler::{execute, Benchmark};
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
    let mut plan = build_plan(args, targets)?;
    let regression = Regression::new(
        &args.regression.settings(args.ignore_failure),
        plan.schedule.confidence,
        mode,
    )?;
    // Read the history first: a missing baseline or a corrupt file fails before the runs.
    let names: Vec<String> = plan.benchmarks.iter().map(|b| b.name.clone()).collect();
    let references = regression.load(&names)?;
    // Thresholds of no measured family, a history that cannot be written: before the runs.
    regression.check_before_runs(&names, &plan.metric_families(), plan.metric_ids().as_ref())?;
    if check.is_some() {
        check::one_program(&plan.benchmarks)?;
    }
    // Open the destinations first: an unwritable path fails before minutes of runs.
    let sinks = Sinks::open(&plan.destinations)?;
    let cancel = Cancel::install()
        .context("cannot install the handlers of Ctrl-C, SIGTERM, SIGHUP and SIGQUIT")?;
    let mut report = execute(&mut plan.benchmarks, &plan.schedule, &cancel)?;
    // A check that cannot be made loses none of the measurements: they are judged, saved
    // and written, and the error is said at the end.
    let unchecked = check.and_then(|(debug, valgrind)| {
        let request = CheckRequest {
            debug: debug.clone(),
            patterns: plan::unique(&args.measures().invocations),
            options: plan::invocation_options(&args.measures(), false),
        };
        check_all(&plan.benchmarks, &request, &valgrind, &cancel, &mut report).err()
    });
    let (benchmarks, schedule) = (&mut plan.benchmarks, &plan.schedule);
    let regressions = judge(
        &mut report,
        &regression,
        &references,
        schedule.confidence,
        schedule.runs,
        |groups, runs, report| {
            confirm(benchmarks, schedule, &cancel, groups, runs, report)
                .context("making confirmation runs (--confirm 0 makes none)")
        },
    )?;
    // Save first, then write every report that can be written: a failing destination
    // loses neither the history nor the other reports, and a failing history loses no
    // report. Neither depends on stdout having a reader.
    let saved = regression.save(&report);
    let written = sinks.write(&report);
    let code = exit_for(&regressions);
    let mut failures = written.err().map(|u| u.failures).unwrap_or_default();
    if let Err(e) = saved {
        failures.insert(0, e);
    }
    failures.extend(unchecked);
    // A --threshold that names no metric switched a gate off: an error, once the
    // measurements are safe.
    if let Err(e) = regression.check_threshold_names(&report) {
        failures.push(e);
    }
    // The numbers-only formats have no place for warnings: they go to stderr.
    if matches!(plan.destinations.format, Format::Csv | Format::Bmf) {
        for b in &report.benchmarks {
            for w in &b.warnings {
                eprintln!("sbs-profile: warning ({}): {w}", b.name);
            }
        }
    }
    if let (true, Some(summary)) = (args.strict, report.warnings_summary()) {
        failures.push(anyhow::anyhow!(
            "{summary} and --strict: fix what they say, or drop --strict to let them pass"
        ));
    }
    if failures.is_empty() {
        Ok(code)
    } else {
        Err(Unwritten { failures }.into())
    }
}

/// The plan of `targets` with the options of `args`, and a note when its uprobes made
/// sbs-profile mount tracefs (said whether or not the plan could be built: the mount
/// stays either way).
fn build_plan(args: &RunArgs, targets: Vec<Target>) -> anyhow::Result<plan::Plan> {
    let plan = plan::build(Request {
        targets,
        measures: args.measures(),
        controls: args.controls(),
        destinations: args.report.destinations(),
        scan: args.scan()?,
    });
    if let Some(at) = sbs_probes::tracefs::Tracefs::mounted_by_this_process() {
        eprintln!(
            "sbs-profile: note: tracefs was not mounted; mounted it at {} for the uprobes (it stays mounted)",
            at.display()
        );
    }
    plan
}

/// `--invocations-check`: each benchmark's counts against the debug build, in its report,
/// with a warning where they differ.
fn check_all(
    benchmarks: &[Benchmark],
    request: &CheckRequest,
    valgrind: &std::path::Path,
    cancel: &Cancel,
    report: &mut Report,
) -> anyhow::Result<()> {
    for (b, result) in benchmarks.iter().zip(report.benchmarks.iter_mut()) {
        let checks = check::check(&b.run, request, valgrind, cancel)?;
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
