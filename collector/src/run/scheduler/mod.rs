//! Drives the runs of a plan: for each group, warm-up runs then measured runs, benchmarks
//! interleaved (A B A B ...), and gathers the samples into series per metric.

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use sbs_reports::model::{GroupRuns, Report};

use crate::run::hooks::Hooks;
use crate::run::instrument::{ExitKind, Group, Instrument, RunOutcome, Sample};
use crate::run::runner::{Cancel, Planned, RunConfig, RunError, RunResult};
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
                if crate::judge::summary::is_noise_warning(w) {
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
    with_hooks(
        benchmarks,
        &all,
        executor,
        cancel,
        "",
        |benchmarks, executor| run_groups(benchmarks, schedule, cancel, executor),
    )
}

/// `body` between the `--setup` and the `--cleanup` of the benchmarks `involved`: a
/// cleanup runs for every benchmark whose setup began, also after a failure, its setup's
/// included (a setup that failed halfway may have made what the cleanup removes; a
/// cleanup that fails then is a warning on stderr, the first error stands). A cleanup
/// that fails after `body` succeeded loses nothing it measured: the failure is kept in
/// the benchmark's `failed_cleanup`, for the command layer to say once the report and
/// the history are written. `again` ends the name of a failed setup in its error
/// (` again` for the confirmation runs).
pub(super) fn with_hooks<T>(
    benchmarks: &mut [Benchmark],
    involved: &[usize],
    executor: &mut dyn Executor,
    cancel: &Cancel,
    again: &str,
    body: impl FnOnce(&mut [Benchmark], &mut dyn Executor) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mut set_up = 0;
    let mut setup_error = None;
    for &b in involved {
        set_up += 1;
        let bench = &benchmarks[b];
        if let Some(setup) = &bench.hooks.setup {
            if let Err(e) = executor.hook(setup, &bench.run, cancel) {
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
        let bench = &mut benchmarks[b];
        let Some(cleanup) = &bench.hooks.cleanup else {
            continue;
        };
        let Err(e) = executor.hook(cleanup, &bench.run, cancel) else {
            continue;
        };
        if result.is_err() {
            eprintln!("warning: {:#}", e.context(cleaning_up(&bench.name)));
        } else if e
            .chain()
            .any(|c| matches!(c.downcast_ref(), Some(RunError::Interrupted)))
        {
            // Stopped by a signal: the run ends as every interrupted one does.
            result = Err(e);
        } else if bench.failed_cleanup.is_none() {
            bench.failed_cleanup = Some(e.context(format!(
                "{} (its measurements were kept: reported, and saved if asked)",
                cleaning_up(&bench.name)
            )));
        }
    }
    result
}

/// What a failed `--cleanup` of the benchmark `name` was doing.
fn cleaning_up(name: &str) -> String {
    format!("cleaning up after `{name}`")
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
        let mut rounds = Rounds {
            benchmarks: &mut *benchmarks,
            group: g,
            collected: &mut collected,
            schedule,
            bar: &bar,
            cancel,
        };
        let done = match overlaps(rounds.benchmarks, g, schedule) {
            true => rounds.overlapped(executor)?,
            false => rounds.one_at_a_time(executor)?,
        };
        for (bench, c) in benchmarks.iter_mut().zip(collected.iter_mut()) {
            if let Some(group) = bench.groups.get_mut(g) {
                end_group(group, c, schedule, done);
            }
        }
    }
    bar.finish_and_clear();
    Ok(collected)
}

/// Whether the runs of group `g` may overlap (`--jobs` above 1): every instrument of it
/// counts exactly whatever else runs ([`Instrument::overlaps`]), it makes its runs
/// rather than checks, and no benchmark has a `--prepare` (which prepares the one run
/// that follows it), a FIFO for input (whose writer feeds one run at a time) or
/// `--show-output` (whose outputs would interleave).
///
/// [`Instrument::overlaps`]: crate::run::instrument::Instrument::overlaps
fn overlaps(benchmarks: &[Benchmark], g: usize, schedule: &Schedule) -> bool {
    schedule.jobs > 1
        && benchmarks.iter().all(|b| {
            b.hooks.prepare.is_none()
                && !b.run.show_output
                && b.run.input.as_ref().is_none_or(|p| p.is_file())
                && b.groups.get(g).is_none_or(|group| {
                    check_runs(group).is_none() && group.instruments.iter().all(|i| i.overlaps())
                })
        })
}

/// The rounds of one group for every benchmark: what they run and where the samples go.
struct Rounds<'a> {
    benchmarks: &'a mut [Benchmark],
    group: usize,
    collected: &'a mut [Collected],
    schedule: &'a Schedule,
    bar: &'a ProgressBar,
    cancel: &'a Cancel,
}

impl Rounds<'_> {
    /// One run at a time, benchmarks interleaved, adding runs up to `--max-runs` while a
    /// `--target-ci` is not met. Returns the measured runs made per benchmark.
    fn one_at_a_time(&mut self, executor: &mut dyn Executor) -> anyhow::Result<usize> {
        let (g, schedule) = (self.group, self.schedule);
        let Schedule { runs, warmup, .. } = *schedule;
        let most = schedule.target.map_or(runs, |t| t.max_runs.max(runs));
        let mut done = 0;
        for round in 0..warmup + most {
            if round >= warmup + runs
                && schedule.target.is_some_and(|t| {
                    // The group's name, from a benchmark that has it (size probes are some
                    // benchmarks' own).
                    self.benchmarks
                        .iter()
                        .find_map(|b| b.groups.get(g))
                        .is_none_or(|group| {
                            narrow_enough(self.collected, &group.name, t.ci, schedule.confidence)
                        })
                })
            {
                break;
            }
            done = (round + 1).saturating_sub(warmup);
            for (bench, c) in self.benchmarks.iter_mut().zip(self.collected.iter_mut()) {
                let Some((run, group)) = Round::of(bench, g, round) else {
                    continue;
                };
                one_run(run, group, c, schedule, self.bar, self.cancel, executor)?;
            }
        }
        Ok(done)
    }

    /// The same rounds, up to `--jobs` runs in flight ([`overlaps`]): each benchmark's
    /// warm-ups and `--runs` measured runs (its counts are exact, so `--target-ci` adds
    /// none), recorded in the order they would have run one at a time.
    fn overlapped(&mut self, executor: &mut dyn Executor) -> anyhow::Result<usize> {
        let (g, schedule) = (self.group, self.schedule);
        let Schedule { runs, warmup, .. } = *schedule;
        let mut order = Vec::new();
        for round in 0..warmup + runs {
            for (b, bench) in self.benchmarks.iter().enumerate() {
                if let Some(group) = bench.groups.get(g) {
                    order.push((b, round));
                    self.bar.set_message(format!("{} runs", group.name));
                }
            }
        }
        let fail = schedule.failure == FailurePolicy::Fail;
        // An error ends the plan, and so does a failed run unless failures are kept; an
        // instrument that asks for a run again does not (see below).
        let stop = |r: &RunResult| match r {
            Ok((outcome, _)) => fail && !outcome.exit.success(),
            Err(e) => !e.asks_again(),
        };
        // Each benchmark's instruments are one set; its runs name it by its place.
        let configs: Vec<RunConfig> = self.benchmarks.iter().map(|b| b.run.clone()).collect();
        let mut sets: Vec<&mut [Box<dyn Instrument>]> = self
            .benchmarks
            .iter_mut()
            .map(|b| match b.groups.get_mut(g) {
                Some(group) => group.instruments.as_mut_slice(),
                None => &mut [],
            })
            .collect();
        let planned: Vec<Planned> = order
            .iter()
            .map(|&(b, _)| Planned {
                config: &configs[b],
                set: b,
            })
            .collect();
        let bar = self.bar;
        let results = executor.run_overlapping(
            &mut sets,
            &planned,
            schedule.jobs,
            self.cancel,
            &stop,
            &mut || bar.inc(1),
        );
        let made = results.len();
        for ((b, round), result) in order.iter().copied().zip(results) {
            let Some((run, group)) = Round::of(&mut self.benchmarks[b], g, round) else {
                continue;
            };
            let result = match result {
                // The instrument changed how it measures: this run again, alone.
                Err(e) if e.asks_again() => run_once_more_if_asked(
                    executor,
                    run.name,
                    run.hooks,
                    run.config,
                    group,
                    self.cancel,
                ),
                other => other.with_context(|| format!("{} run of `{}`", group.name, run.name)),
            };
            let (outcome, samples) = result?;
            record(
                &run,
                group,
                &mut self.collected[b],
                schedule,
                outcome,
                samples,
            )?;
        }
        if made < order.len() {
            // Only an error or a failed run stops the runs early, and either ended above.
            anyhow::bail!(
                "internal error: {made} of the {} runs of a group were made",
                order.len()
            );
        }
        Ok(runs)
    }
}

/// Which benchmark a run is of, and its place in the group's rounds (warm-ups first).
struct Round<'a> {
    name: &'a str,
    hooks: &'a Hooks,
    config: &'a RunConfig,
    round: usize,
}

impl<'a> Round<'a> {
    /// Round `round` of group `g` of `bench`, with the group; `None` if `bench` has no
    /// such group (size probes are some benchmarks' own).
    fn of(bench: &'a mut Benchmark, g: usize, round: usize) -> Option<(Round<'a>, &'a mut Group)> {
        let Benchmark {
            name,
            hooks,
            run,
            groups,
            ..
        } = bench;
        let group = groups.get_mut(g)?;
        let round = Round {
            name,
            hooks,
            config: run,
            round,
        };
        Some((round, group))
    }
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
    record(&run, group, c, schedule, outcome, samples)?;
    bar.inc(1);
    Ok(())
}

/// What a measured or warm-up run of `group` came to: its samples added to `c` if it was
/// measured, or the error a failed run is (unless failures are kept).
fn record(
    run: &Round,
    group: &Group,
    c: &mut Collected,
    schedule: &Schedule,
    outcome: RunOutcome,
    samples: Vec<Sample>,
) -> anyhow::Result<()> {
    if !outcome.exit.success() && schedule.failure == FailurePolicy::Fail {
        anyhow::bail!(describe_failure(
            run.name,
            &group.name,
            &outcome,
            run.config.timeout
        ));
    }
    c.survivors.extend(outcome.survivors.iter().cloned());
    if run.round >= schedule.warmup {
        let samples = c.note_failure(outcome.exit, samples);
        let failed = !outcome.exit.success();
        c.add(&group.name, run.round - schedule.warmup, failed, samples);
    }
    Ok(())
}

/// One run of `group` for `bench`, after its `--prepare`; made again (with its
/// `--prepare`) when an instrument answers [`RunAgain`](crate::run::instrument::RunAgain): it
/// changed how it measures.
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
                .hook(prepare, config, cancel)
                .with_context(|| format!("before a {} run of `{name}`", group.name))?;
        }
        match executor.run(config, &mut group.instruments, cancel) {
            Err(e) if !asked && e.asks_again() => {
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
