//! Drives the runs of a plan: for each group, warm-up runs then measured runs, benchmarks
//! interleaved (A B A B ...), and gathers the samples into series per metric.

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use sbs_reports::model::{GroupRuns, Report};

use crate::run::hooks::Hooks;
use crate::run::instrument::{ExitKind, Group, RunAgain, RunOutcome, Sample};
use crate::run::runner::{Cancel, RunConfig, RunError};
use crate::run::spec::{Benchmark, FailurePolicy, Schedule};

mod executor;
mod report;
pub(in crate::run) mod series;
#[cfg(test)]
mod tests;

pub use executor::{Executor, Processes};
use report::report;
use series::{narrow_enough, target_warning, Collected};

pub(super) fn describe_failure(
    name: &str,
    group: &str,
    outcome: &RunOutcome,
    timeout: Option<std::time::Duration>,
) -> String {
    let what = match outcome.exit {
        ExitKind::Code(c) => format!("exited with code {c}"),
        ExitKind::Signal(s) => {
            let name = nix::sys::signal::Signal::try_from(s)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| format!("signal {s}"));
            match s {
                libc::SIGSYS => format!(
                    "was killed by {name} (a seccomp filter refused one of its system calls)"
                ),
                _ => format!("was killed by {name}"),
            }
        }
        ExitKind::TimedOut => format!(
            "timed out after {:.3} s (--timeout) and was killed with its process group",
            timeout.map(|t| t.as_secs_f64()).unwrap_or(0.0)
        ),
    };
    let a = match group.starts_with(['a', 'e', 'i', 'o', 'u']) {
        true => "an",
        false => "a",
    };
    format!(
        "command `{}` {what} in {a} {group} run; use --show-output to see its output, or \
         --ignore-failure to keep its samples anyway",
        name
    )
}

/// Run every benchmark's groups with real child processes and build the report.
pub fn execute(
    benchmarks: &mut [Benchmark],
    schedule: &Schedule,
    cancel: &Cancel,
) -> anyhow::Result<Report> {
    crate::run::runner::adopt_orphans()
        .context("cannot become the subreaper of the benchmark's processes (prctl)")?;
    let before = crate::run::machine::before();
    let mut report = execute_with(benchmarks, schedule, cancel, &mut Processes)?;
    let machine = before.after();
    if let Some(cause) = crate::run::machine::busy_cause(&machine) {
        // After each warning about noisy times, which it explains.
        for b in report.benchmarks.iter_mut() {
            for w in b.warnings.iter_mut() {
                if w.starts_with(crate::judge::summary::NOISY_TIMES) {
                    if !w.ends_with('.') {
                        w.push('.');
                    }
                    w.push(' ');
                    w.push_str(&cause);
                }
            }
        }
    }
    report.conditions.machine = Some(machine);
    Ok(report)
}

/// Run every benchmark's groups through `executor` and build the report. Every
/// instrument's `finish` runs before this returns, whatever happened.
pub fn execute_with(
    benchmarks: &mut [Benchmark],
    schedule: &Schedule,
    cancel: &Cancel,
    executor: &mut dyn Executor,
) -> anyhow::Result<Report> {
    let result = run_all(benchmarks, schedule, cancel, executor);
    for bench in benchmarks.iter_mut() {
        for group in bench.groups.iter_mut() {
            for i in group.instruments.iter_mut() {
                i.finish();
            }
        }
    }
    let collected = result?;
    Ok(report(benchmarks, collected, schedule))
}

/// The progress bar of `total` runs, hidden unless asked for.
fn progress_bar(total: u64, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {msg:24} [{bar:30}] {pos}/{len} runs, {elapsed} elapsed, ETA {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar
}

/// Every benchmark's `--setup`, then every run, then every `--cleanup` of a benchmark
/// whose setup began (see [`with_hooks`]).
fn run_all(
    benchmarks: &mut [Benchmark],
    schedule: &Schedule,
    cancel: &Cancel,
    executor: &mut dyn Executor,
) -> anyhow::Result<Vec<Collected>> {
    let all: Vec<usize> = (0..benchmarks.len()).collect();
    with_hooks(benchmarks, &all, executor, "", |benchmarks, executor| {
        run_groups(benchmarks, schedule, cancel, executor)
    })
}

/// `body` between the `--setup` and the `--cleanup` of the benchmarks `involved`: a
/// cleanup runs for every benchmark whose setup began, also after a failure, its setup's
/// included (a setup that failed halfway may have made what the cleanup removes; a
/// cleanup that fails then is a warning on stderr, the first error stands). `again` ends
/// the name of a failed setup in its error (` again` for the confirmation runs).
pub(super) fn with_hooks<T>(
    benchmarks: &mut [Benchmark],
    involved: &[usize],
    executor: &mut dyn Executor,
    again: &str,
    body: impl FnOnce(&mut [Benchmark], &mut dyn Executor) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mut set_up = 0;
    let mut setup_error = None;
    for &b in involved {
        set_up += 1;
        let bench = &benchmarks[b];
        if let Some(setup) = &bench.hooks.setup {
            if let Err(e) = executor.hook(setup, &bench.run) {
                setup_error = Some(e.context(format!("setting up `{}`{again}", bench.name)));
                break;
            }
        }
    }
    let mut result = match setup_error {
        Some(e) => Err(e),
        None => body(benchmarks, executor),
    };
    for &b in &involved[..set_up] {
        let bench = &benchmarks[b];
        let Some(cleanup) = &bench.hooks.cleanup else {
            continue;
        };
        if let Err(e) = executor.hook(cleanup, &bench.run) {
            let e = e.context(format!("cleaning up after `{}`", bench.name));
            if result.is_ok() {
                result = Err(e);
            } else {
                eprintln!("warning: {e:#}");
            }
        }
    }
    result
}

/// Every run of every group, benchmarks interleaved: the samples of the measured runs.
fn run_groups(
    benchmarks: &mut [Benchmark],
    schedule: &Schedule,
    cancel: &Cancel,
    executor: &mut dyn Executor,
) -> anyhow::Result<Vec<Collected>> {
    // Benchmarks share their groups in the same order; a harnessed benchmark with size
    // parameters has groups of its own after them (its size probes), which the others skip.
    let group_count = benchmarks.iter().map(|b| b.groups.len()).max().unwrap_or(0);
    let Schedule { runs, warmup, .. } = *schedule;
    let most = schedule.target.map_or(runs, |t| t.max_runs.max(runs));
    let total: usize = benchmarks
        .iter()
        .flat_map(|b| &b.groups)
        .map(|g| check_runs(g).unwrap_or(warmup + most))
        .sum();
    let total = total as u64;
    let bar = progress_bar(total, schedule.progress);
    let mut collected: Vec<Collected> = benchmarks.iter().map(|_| Collected::default()).collect();
    for g in 0..group_count {
        let mut done = 0;
        for round in 0..warmup + most {
            if round >= warmup + runs
                && schedule.target.is_some_and(|t| {
                    // The group's name, from a benchmark that has it (size probes are some
                    // benchmarks' own).
                    benchmarks
                        .iter()
                        .find_map(|b| b.groups.get(g))
                        .is_none_or(|group| {
                            narrow_enough(&collected, &group.name, t.ci, schedule.confidence)
                        })
                })
            {
                break;
            }
            done = (round + 1).saturating_sub(warmup);
            for (bench, c) in benchmarks.iter_mut().zip(collected.iter_mut()) {
                let Some(group) = bench.groups.get_mut(g) else {
                    continue;
                };
                let run = Round {
                    name: &bench.name,
                    hooks: &bench.hooks,
                    config: &bench.run,
                    round,
                };
                one_run(run, group, c, schedule, &bar, cancel, executor)?;
            }
        }
        for (bench, c) in benchmarks.iter_mut().zip(collected.iter_mut()) {
            if let Some(group) = bench.groups.get_mut(g) {
                end_group(group, c, schedule, done);
            }
        }
    }
    bar.finish_and_clear();
    Ok(collected)
}

/// Which benchmark a run is of, and its place in the group's rounds (warm-ups first).
struct Round<'a> {
    name: &'a str,
    hooks: &'a Hooks,
    config: &'a RunConfig,
    round: usize,
}

/// One round of `group` for one benchmark: a warm-up or a measured run (none where the
/// group checks rather than measures and has made its runs), its samples added to `c`.
fn one_run(
    run: Round,
    group: &mut Group,
    c: &mut Collected,
    schedule: &Schedule,
    bar: &ProgressBar,
    cancel: &Cancel,
    executor: &mut dyn Executor,
) -> anyhow::Result<()> {
    let (warmup, round) = (schedule.warmup, run.round);
    let check = check_runs(group);
    if check.is_some_and(|n| round < warmup || round - warmup >= n) {
        return Ok(());
    }
    let measured = round >= warmup;
    bar.set_message(format!(
        "{} {}",
        group.name,
        if measured { "run" } else { "warm-up" }
    ));
    let (outcome, samples) =
        run_once_more_if_asked(executor, run.name, run.hooks, run.config, group, cancel)?;
    if check.is_some() {
        // The instrument judged the run itself, failed or not.
        bar.inc(1);
        return Ok(());
    }
    if !outcome.exit.success() && schedule.failure == FailurePolicy::Fail {
        anyhow::bail!(describe_failure(
            run.name,
            &group.name,
            &outcome,
            run.config.timeout
        ));
    }
    c.survivors.extend(outcome.survivors.iter().cloned());
    if measured {
        let samples = c.note_failure(outcome.exit, samples);
        let failed = !outcome.exit.success();
        c.add(&group.name, round - warmup, failed, samples);
    }
    bar.inc(1);
    Ok(())
}

/// One run of `group` for `bench`, after its `--prepare`; made again (with its
/// `--prepare`) when an instrument answers [`RunAgain`]: it changed how it measures.
pub(super) fn run_once_more_if_asked(
    executor: &mut dyn Executor,
    name: &str,
    hooks: &Hooks,
    config: &RunConfig,
    group: &mut Group,
    cancel: &Cancel,
) -> anyhow::Result<(RunOutcome, Vec<Sample>)> {
    let mut asked = false;
    loop {
        if let Some(prepare) = &hooks.prepare {
            executor
                .hook(prepare, config)
                .with_context(|| format!("before a {} run of `{name}`", group.name))?;
        }
        match executor.run(config, &mut group.instruments, cancel) {
            Err(RunError::Instrument { source, .. }) if !asked && source.is::<RunAgain>() => {
                asked = true;
            }
            result => return result.with_context(|| format!("{} run of `{name}`", group.name)),
        }
    }
}

/// The runs of a group that checks rather than measures
/// ([`crate::run::instrument::Instrument::check_runs`]).
pub(super) fn check_runs(group: &Group) -> Option<usize> {
    group.instruments.iter().find_map(|i| i.check_runs())
}

/// After a group's `runs` measured runs of one benchmark: the warnings of what happened
/// (target not reached, failed runs, survivors), the instruments' warnings and notes,
/// and their finish.
fn end_group(group: &mut Group, c: &mut Collected, schedule: &Schedule, runs: usize) {
    if check_runs(group).is_none() {
        c.group_runs.push(GroupRuns {
            group: group.name.clone(),
            runs,
        });
    }
    if let Some(t) = schedule.target {
        let warning = target_warning(c, &group.name, t, runs, schedule.confidence);
        c.warnings.extend(warning);
    }
    if let Some(w) = c.failures_warning(&group.name, runs) {
        c.warnings.push(w);
    }
    if let Some(w) = c.survivors_warning(&group.name) {
        c.warnings.push(w);
    }
    for i in group.instruments.iter_mut() {
        c.warnings.extend(i.warnings());
        c.notes.extend(i.metric_notes());
        i.finish();
    }
}
