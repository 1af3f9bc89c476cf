//! Drives the runs of a plan: for each group, warm-up runs then measured runs, benchmarks
//! interleaved (A B A B ...), and gathers the samples into series per metric.

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use sbs_reports::model::{
    BenchmarkResult, Conditions, Family, GroupRuns, MetricId, MetricResult, Report, Scan,
    ScanPoint, Variant, SCHEMA_VERSION,
};

use crate::judge::summary::timing_warnings;

use crate::run::hooks::{Hook, Hooks};
use crate::run::instrument::{ExitKind, Group, MetricSpec, RunAgain, RunOutcome, Sample};
use crate::run::runner::{run_once, Cancel, RunConfig, RunError};

/// One command to measure, with its groups of runs.
#[derive(Debug)]
pub struct Benchmark {
    /// Display name (by default the command line).
    pub name: String,
    /// How to start it.
    pub run: RunConfig,
    /// Groups of runs, in order; each its own series of child processes.
    pub groups: Vec<Group>,
    /// Commands run around its runs, unmeasured.
    pub hooks: Hooks,
    /// Its value of a scanned parameter, if it is a point of a scan.
    pub point: Option<Point>,
}

/// One value of a scanned parameter (`-P`/`-L`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// What is scanned: the command with `{NAME}` left in, or the harness benchmark.
    pub series: String,
    /// The parameter's name.
    pub parameter: String,
    /// Its value here, as given.
    pub value: String,
}

/// What to do with a run whose child fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// A non-zero exit, a signal or a timeout aborts with an error.
    Fail,
    /// Keep the run's samples anyway.
    Ignore,
}

/// How the groups of runs are repeated, and what the report says of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// Measured runs per group.
    pub runs: usize,
    /// Discarded runs before each group's measured runs.
    pub warmup: usize,
    /// Confidence level of the intervals, in (0, 1).
    pub confidence: f64,
    /// What a failing child means.
    pub failure: FailurePolicy,
    /// Whether the child started from a clean environment (for the report).
    pub clean_env: bool,
    /// `--target-ci`: keep adding measured runs to a group, from `runs` up to
    /// `target.max_runs`, until the interval of every timing metric is this narrow.
    pub target: Option<Target>,
    /// Show a progress bar.
    pub progress: bool,
}

/// Adaptive runs (`--target-ci PCT`, `--max-runs N`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Target {
    /// The widest relative half-width a timing interval may have (0.02 for ±2%).
    pub ci: f64,
    /// The most measured runs per group.
    pub max_runs: usize,
}

/// All values of one metric of one benchmark.
#[derive(Debug)]
pub(super) struct Series {
    pub(super) spec: MetricSpec,
    group: String,
    pub(super) samples: Vec<f64>,
    /// Indices into `samples` of failed runs.
    pub(super) failed: Vec<usize>,
    pub(super) details: Vec<(String, Vec<f64>)>,
}

#[derive(Debug, Default)]
pub(super) struct Collected {
    pub(super) series: Vec<Series>,
    /// How the measured runs of the current group that failed ended (`--ignore-failure`).
    failed: Vec<ExitKind>,
    /// Processes left behind by the benchmark's runs and killed (`pid (name)`).
    pub(super) survivors: Vec<String>,
    pub(super) warnings: Vec<String>,
    /// `(id prefix, note)` from [`Instrument::metric_notes`].
    notes: Vec<(String, String)>,
    /// The measured runs each group made (`--target-ci` may add to some), in order.
    group_runs: Vec<GroupRuns>,
}

impl Collected {
    /// Remember a failed run (kept by `--ignore-failure`). A run killed at the timeout
    /// measured the timeout, not the program: its time samples are left out.
    pub(super) fn note_failure(&mut self, exit: ExitKind, samples: Vec<Sample>) -> Vec<Sample> {
        if exit.success() {
            return samples;
        }
        self.failed.push(exit);
        if exit != ExitKind::TimedOut {
            return samples;
        }
        samples
            .into_iter()
            .filter(|s| Family::of(&s.metric.id) != Some(Family::Time))
            .collect()
    }

    /// The warning for processes the group's runs left behind, if any.
    pub(super) fn survivors_warning(&mut self, group: &str) -> Option<String> {
        let survivors = std::mem::take(&mut self.survivors);
        let first = survivors.first()?;
        Some(format!(
            "{} process(es) started by the {group} runs outlived the benchmark in a session of \
             their own (a daemon, e.g. pid {first}) and were killed; what they did after the \
             benchmark exited is not measured",
            survivors.len()
        ))
    }

    /// The warning for the failed runs of the group just finished, if any.
    pub(super) fn failures_warning(&mut self, group: &str, runs: usize) -> Option<String> {
        if self.failed.is_empty() {
            return None;
        }
        let failed = std::mem::take(&mut self.failed);
        let mut kinds: Vec<(String, usize)> = Vec::new();
        for exit in &failed {
            let what = match *exit {
                ExitKind::Code(c) => format!("exited with code {c}"),
                ExitKind::Signal(s) => nix::sys::signal::Signal::try_from(s)
                    .map(|s| format!("killed by {}", s.as_str()))
                    .unwrap_or_else(|_| format!("killed by signal {s}")),
                ExitKind::TimedOut => "timed out (time.* samples left out)".to_string(),
            };
            match kinds.iter_mut().find(|(k, _)| *k == what) {
                Some((_, n)) => *n += 1,
                None => kinds.push((what, 1)),
            }
        }
        let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
        Some(format!(
            "{} of {runs} {group} runs failed ({}); their samples are in the statistics \
             (--ignore-failure)",
            failed.len(),
            kinds.join(", ")
        ))
    }

    pub(super) fn add(
        &mut self,
        group: &str,
        run_index: usize,
        failed: bool,
        samples: Vec<Sample>,
    ) {
        for s in samples {
            let pos = match self.series.iter().position(|x| x.spec.id == s.metric.id) {
                Some(p) => p,
                None => {
                    self.series.push(Series {
                        spec: s.metric.clone(),
                        group: group.to_string(),
                        samples: Vec::new(),
                        failed: Vec::new(),
                        details: Vec::new(),
                    });
                    self.series.len() - 1
                }
            };
            let series = &mut self.series[pos];
            // Exact only if every run's value was (the heap peak of a run whose threads
            // allocated at once is not).
            series.spec.exact &= s.metric.exact;
            series.spec.bound = match (series.spec.bound, s.metric.bound) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            if failed {
                series.failed.push(series.samples.len());
            }
            series.samples.push(s.value);
            for (label, value) in s.details {
                let d = match series.details.iter().position(|(l, _)| *l == label) {
                    Some(p) => p,
                    None => {
                        // A label first seen now was 0 in the earlier runs.
                        series.details.push((label, vec![0.0; run_index]));
                        series.details.len() - 1
                    }
                };
                series.details[d].1.push(value);
            }
            let n = series.samples.len();
            for (_, values) in series.details.iter_mut() {
                values.resize(n, 0.0);
            }
        }
    }
}

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

/// Starts one run. The real one forks a child ([`Processes`]); tests script outcomes.
pub trait Executor {
    /// Run `config` once with `instruments` attached.
    fn run(
        &mut self,
        config: &RunConfig,
        instruments: &mut [Box<dyn crate::run::instrument::Instrument>],
        cancel: &Cancel,
    ) -> Result<(RunOutcome, Vec<Sample>), RunError>;

    /// Run a `--setup`, `--prepare` or `--cleanup` command for the benchmark `config`
    /// starts.
    fn hook(&mut self, hook: &Hook, config: &RunConfig) -> anyhow::Result<()> {
        hook.run(&config.env, config.show_output)
    }
}

/// The executor that runs real child processes.
#[derive(Debug, Default)]
pub struct Processes;

impl Executor for Processes {
    fn run(
        &mut self,
        config: &RunConfig,
        instruments: &mut [Box<dyn crate::run::instrument::Instrument>],
        cancel: &Cancel,
    ) -> Result<(RunOutcome, Vec<Sample>), RunError> {
        run_once(config, instruments, cancel)
    }
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
    let Schedule {
        runs,
        warmup,
        failure,
        ..
    } = *schedule;
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
            for (b, bench) in benchmarks.iter_mut().enumerate() {
                let Some(group) = bench.groups.get_mut(g) else {
                    continue;
                };
                let check = check_runs(group);
                if check.is_some_and(|n| round < warmup || round - warmup >= n) {
                    continue;
                }
                let measured = round >= warmup;
                bar.set_message(format!(
                    "{} {}",
                    group.name,
                    if measured { "run" } else { "warm-up" }
                ));
                let (outcome, samples) = run_once_more_if_asked(
                    executor,
                    &bench.name,
                    &bench.hooks,
                    &bench.run,
                    group,
                    cancel,
                )?;
                if check.is_some() {
                    // The instrument judged the run itself, failed or not.
                    bar.inc(1);
                    continue;
                }
                if !outcome.exit.success() && failure == FailurePolicy::Fail {
                    let msg =
                        describe_failure(&bench.name, &group.name, &outcome, bench.run.timeout);
                    anyhow::bail!(msg);
                }
                collected[b]
                    .survivors
                    .extend(outcome.survivors.iter().cloned());
                if measured {
                    let samples = collected[b].note_failure(outcome.exit, samples);
                    let failed = !outcome.exit.success();
                    collected[b].add(&group.name, round - warmup, failed, samples);
                }
                bar.inc(1);
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

/// The relative half-width of the wall-time intervals of `group` collected so far, by
/// metric id.
fn timing_widths<'a>(
    c: &'a Collected,
    group: &str,
    confidence: f64,
) -> Vec<(&'a str, Option<f64>)> {
    c.series
        .iter()
        // Wall time (or a harness's time per operation): user and system time of a short
        // program are near 0 and relatively wide whatever the number of runs.
        .filter(|s| s.group == group && matches!(s.spec.id.as_str(), "time.wall" | "time.op"))
        .map(|s| {
            let summary =
                crate::judge::summary::summarize_metric(&s.spec.id, &s.samples, confidence);
            (s.spec.id.as_str(), summary.relative_ci_half_width())
        })
        .collect()
}

/// Whether every benchmark's timing intervals in `group` are within `target` (a group
/// without timing metrics always is).
fn narrow_enough(collected: &[Collected], group: &str, target: f64, confidence: f64) -> bool {
    collected.iter().all(|c| {
        timing_widths(c, group, confidence)
            .iter()
            .all(|(_, w)| w.is_some_and(|w| w <= target))
    })
}

/// What `--target-ci` came to for one group: a note of the runs it took, or a warning
/// that `--max-runs` came first.
fn target_warning(
    c: &Collected,
    group: &str,
    target: Target,
    runs: usize,
    confidence: f64,
) -> Option<String> {
    let widths = timing_widths(c, group, confidence);
    let wide: Vec<String> = widths
        .iter()
        .filter(|(_, w)| w.is_none_or(|w| w > target.ci))
        .map(|(id, w)| match w {
            Some(w) => format!("{id} ±{:.2}%", w * 100.0),
            None => format!("{id} (no interval)"),
        })
        .collect();
    if widths.is_empty() || wide.is_empty() {
        return None;
    }
    Some(format!(
        "--target-ci {:.2}% not reached in the {group} runs after {runs} runs (--max-runs): \
         {}; the machine is too noisy for it, so raise --max-runs, quiet the machine, or count \
         instead of timing",
        target.ci * 100.0,
        wide.join(", ")
    ))
}

/// The scans of the benchmarks that are points of one: their points grouped by series,
/// in the order given (fitted later, by the judge).
fn scans(benchmarks: &[Benchmark]) -> Vec<Scan> {
    let mut scans: Vec<Scan> = Vec::new();
    for (bench, point) in benchmarks
        .iter()
        .filter_map(|b| Some((b, b.point.as_ref()?)))
    {
        let at = ScanPoint {
            benchmark: bench.name.clone(),
            value: point.value.clone(),
            x: point
                .value
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite()),
        };
        match scans.iter_mut().find(|s| s.series == point.series) {
            Some(scan) => scan.points.push(at),
            None => scans.push(Scan {
                series: point.series.clone(),
                parameter: point.parameter.clone(),
                points: vec![at],
                fits: Vec::new(),
            }),
        }
    }
    scans
}

/// The report of the collected series: each metric summarized, with the notes that
/// instruments attached to its id prefix.
/// Whether an instrument's note (`(prefix, note)`, see [`Instrument::metric_notes`]) is
/// for metric `id`: a per-run total whose id starts with `prefix`, not a `/op` metric nor
/// a calibration twin (`time.op.empty` does not get the notes of `time.op`).
fn note_applies(prefix: &str, id: &str) -> bool {
    id.starts_with(prefix)
        && MetricId::parse(id).is_ok_and(|id| !id.is_per_op() && id.variant() == Variant::Raw)
}

fn report(benchmarks: &[Benchmark], collected: Vec<Collected>, schedule: &Schedule) -> Report {
    let collected_runs: Vec<GroupRuns> = collected
        .iter()
        .flat_map(|c| c.group_runs.iter().cloned())
        .collect();
    let results = benchmarks
        .iter()
        .zip(collected)
        .map(|(bench, c)| {
            let mut metrics: Vec<MetricResult> = c
                .series
                .into_iter()
                .map(|s| {
                    let notes: Vec<String> = c
                        .notes
                        .iter()
                        .filter(|(prefix, _)| note_applies(prefix, &s.spec.id))
                        .map(|(_, note)| note.clone())
                        .collect();
                    let mut result =
                        s.spec
                            .result(s.group, s.samples, s.details, schedule.confidence);
                    // The instrument's notes join the summary's own (an exact count that
                    // varied).
                    result.notes.extend(notes);
                    result.failed_runs = s.failed;
                    result
                })
                .collect();
            crate::run::instruments::stacks::order_by_mean(&mut metrics);
            let mut warnings = c.warnings;
            warnings.extend(timing_warnings(&metrics));
            BenchmarkResult {
                name: bench.name.clone(),
                command: bench
                    .run
                    .args
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect(),
                metrics,
                warnings,
                invocation_checks: Vec::new(),
            }
        })
        .collect();
    let first = benchmarks.first().map(|b| &b.run);
    let scans = scans(benchmarks);
    let (runs, group_runs) = Conditions::runs_made(collected_runs, schedule.runs);
    Report {
        schema_version: SCHEMA_VERSION,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        conditions: Conditions {
            runs,
            group_runs,
            warmup: schedule.warmup,
            aslr_disabled: first.is_some_and(|r| r.disable_aslr),
            pinned_cpus: first.map(|r| r.cpus.clone()).unwrap_or_default(),
            clean_env: schedule.clean_env,
            machine: None,
        },
        benchmarks: results,
        from_history: None,
        headline: None,
        speed: Vec::new(),
        scans,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sbs_reports::model::Unit;

    fn sample(id: &str, v: f64, details: &[(&str, f64)]) -> Sample {
        Sample {
            metric: MetricSpec::new(id, Unit::Count, "test", true),
            value: v,
            details: details.iter().map(|(l, v)| (l.to_string(), *v)).collect(),
        }
    }

    /// Scripted runs: exit codes in order, and a value per run that counts up.
    struct Script {
        exits: Vec<ExitKind>,
        calls: Vec<String>,
    }

    impl Executor for Script {
        fn run(
            &mut self,
            config: &RunConfig,
            instruments: &mut [Box<dyn crate::run::instrument::Instrument>],
            _cancel: &Cancel,
        ) -> Result<(RunOutcome, Vec<Sample>), RunError> {
            let n = self.calls.len();
            self.calls
                .push(config.args[0].to_string_lossy().into_owned());
            let outcome = RunOutcome {
                pid: nix::unistd::Pid::from_raw(1),
                wall: std::time::Duration::from_millis(10 + n as u64),
                user: std::time::Duration::ZERO,
                sys: std::time::Duration::ZERO,
                max_rss: 1024,
                exit: self.exits.get(n).copied().unwrap_or(ExitKind::Code(0)),
                survivors: Vec::new(),
            };
            let mut samples = Vec::new();
            for i in instruments.iter_mut() {
                i.collect(&outcome, &mut samples)
                    .map_err(|e| RunError::Instrument {
                        instrument: "test".into(),
                        source: e,
                    })?;
            }
            Ok((outcome, samples))
        }
    }

    fn benchmarks(names: &[&str]) -> Vec<Benchmark> {
        use crate::run::instruments::timing::Timing;
        names
            .iter()
            .map(|n| Benchmark {
                name: n.to_string(),
                run: RunConfig {
                    program: n.into(),
                    args: vec![n.into()],
                    env: Vec::new(),
                    show_output: false,
                    disable_aslr: true,
                    cpus: Vec::new(),
                    timeout: None,
                    input: None,
                },
                groups: vec![Group {
                    name: "timing".into(),
                    instruments: vec![Box::new(Timing { rss: true })],
                }],
                hooks: Hooks::default(),
                point: None,
            })
            .collect()
    }

    fn schedule(runs: usize, warmup: usize, failure: FailurePolicy) -> Schedule {
        Schedule {
            runs,
            warmup,
            confidence: 0.95,
            failure,
            clean_env: false,
            progress: false,
            target: None,
        }
    }

    #[test]
    fn target_ci_adds_runs_until_the_interval_is_narrow_or_the_maximum_comes() {
        // Scripted walls are 10, 11, 12... ms: ±60% after 2 runs, ±22% after 3, and
        // never below ±10% before 40.
        let run = |ci: f64, max_runs: usize| {
            let mut benches = benchmarks(&["a"]);
            let mut script = Script {
                exits: Vec::new(),
                calls: Vec::new(),
            };
            let schedule = Schedule {
                target: Some(Target { ci, max_runs }),
                ..schedule(2, 0, FailurePolicy::Fail)
            };
            let cancel = Cancel::install().unwrap();
            let report = execute_with(&mut benches, &schedule, &cancel, &mut script).unwrap();
            (script.calls.len(), report.benchmarks[0].warnings.clone())
        };
        let (calls, warnings) = run(0.3, 20);
        assert_eq!(calls, 3);
        assert!(
            warnings.iter().all(|w| !w.contains("--target-ci")),
            "{warnings:?}"
        );
        let (calls, warnings) = run(0.01, 6);
        assert_eq!(calls, 6);
        assert!(
            warnings
                .iter()
                .any(|w| w
                    .starts_with("--target-ci 1.00% not reached in the timing runs after 6 runs")),
            "{warnings:?}"
        );
    }

    /// Answers [`RunAgain`] in the runs listed, counts the rest.
    struct Changes {
        again_in: Vec<usize>,
        seen: usize,
    }

    impl crate::run::instrument::Instrument for Changes {
        fn name(&self) -> &str {
            "changes"
        }

        fn collect(&mut self, _: &RunOutcome, out: &mut Vec<Sample>) -> anyhow::Result<()> {
            self.seen += 1;
            if self.again_in.contains(&self.seen) {
                return Err(RunAgain(format!("changed after run {}", self.seen)).into());
            }
            out.push(sample("changes.seen", self.seen as f64, &[]));
            Ok(())
        }
    }

    #[test]
    fn a_run_an_instrument_asks_again_is_made_again_once() {
        let cancel = Cancel::install().unwrap();
        let run = |again_in: Vec<usize>| {
            let mut benches = benchmarks(&["a"]);
            benches[0].groups[0].instruments = vec![Box::new(Changes { again_in, seen: 0 })];
            let mut script = Script {
                exits: Vec::new(),
                calls: Vec::new(),
            };
            let result = execute_with(
                &mut benches,
                &schedule(3, 0, FailurePolicy::Fail),
                &cancel,
                &mut script,
            );
            (result, script.calls.len())
        };
        // Asked in the first run: it is made again and the series has no hole.
        let (report, calls) = run(vec![1]);
        let report = report.unwrap();
        assert_eq!(calls, 4);
        let m = &report.benchmarks[0].metrics[0];
        assert_eq!(m.samples, vec![2.0, 3.0, 4.0]);
        // Asked twice for the same run: the second answer is the error.
        let (report, calls) = run(vec![1, 2]);
        assert_eq!(calls, 2);
        let err = format!("{:#}", report.unwrap_err());
        assert!(err.contains("changed after run 2"), "{err}");
    }

    /// An instrument that checks: one run, whatever `--runs`, its failure its own.
    struct Check {
        runs: std::rc::Rc<std::cell::Cell<usize>>,
    }

    impl crate::run::instrument::Instrument for Check {
        fn name(&self) -> &str {
            "check"
        }
        fn collect(&mut self, _: &RunOutcome, _: &mut Vec<Sample>) -> anyhow::Result<()> {
            self.runs.set(self.runs.get() + 1);
            Ok(())
        }
        fn check_runs(&self) -> Option<usize> {
            Some(1)
        }
    }

    #[test]
    fn a_check_group_runs_once_without_warm_up_and_its_failure_stops_nothing() {
        let cancel = Cancel::install().unwrap();
        let runs = std::rc::Rc::new(std::cell::Cell::new(0));
        let mut b = benchmarks(&["a"]);
        b[0].groups.push(Group {
            name: "check".into(),
            instruments: vec![Box::new(Check { runs: runs.clone() })],
        });
        // Runs 0-3: timing (1 warm-up, 3 measured); run 4, the check, exits 1.
        let mut script = Script {
            exits: vec![ExitKind::Code(0); 4]
                .into_iter()
                .chain([ExitKind::Code(1)])
                .collect(),
            calls: Vec::new(),
        };
        let report = execute_with(
            &mut b,
            &schedule(3, 1, FailurePolicy::Fail),
            &cancel,
            &mut script,
        )
        .unwrap();
        assert_eq!((script.calls.len(), runs.get()), (5, 1));
        assert!(
            report.benchmarks[0].warnings.is_empty(),
            "{:?}",
            report.benchmarks[0].warnings
        );
        // Not a measured group: the runs per group are the timing group's.
        assert_eq!(
            (report.conditions.runs, report.conditions.group_runs.len()),
            (3, 0)
        );
    }

    #[test]
    fn warmups_are_discarded_and_benchmarks_interleave() {
        let cancel = Cancel::install().unwrap();
        let mut script = Script {
            exits: Vec::new(),
            calls: Vec::new(),
        };
        let mut b = benchmarks(&["a", "b"]);
        let report = execute_with(
            &mut b,
            &schedule(3, 1, FailurePolicy::Fail),
            &cancel,
            &mut script,
        )
        .unwrap();
        assert_eq!(script.calls, ["a", "b", "a", "b", "a", "b", "a", "b"]);
        let wall = |b: usize| report.benchmarks[b].metrics[0].samples.clone();
        // Run n has wall 10 + n ms; runs 0 and 1 were the warm-ups.
        assert_eq!(wall(0), vec![0.012, 0.014, 0.016]);
        assert_eq!(wall(1), vec![0.013, 0.015, 0.017]);
        assert_eq!(report.benchmarks[0].metrics[0].summary.n, 3);
    }

    #[test]
    fn a_benchmark_with_groups_of_its_own_runs_them_after_the_shared_ones() {
        use crate::run::instruments::timing::Timing;
        let cancel = Cancel::install().unwrap();
        let mut script = Script {
            exits: Vec::new(),
            calls: Vec::new(),
        };
        let mut b = benchmarks(&["a", "b"]);
        // `b` has a size probe: a group `a` lacks.
        b[1].groups.push(Group {
            name: "probe".into(),
            instruments: vec![Box::new(Timing { rss: false })],
        });
        let report = execute_with(
            &mut b,
            &schedule(2, 0, FailurePolicy::Fail),
            &cancel,
            &mut script,
        )
        .unwrap();
        assert_eq!(script.calls, ["a", "b", "a", "b", "b", "b"]);
        assert_eq!(report.benchmarks[0].metrics[0].samples.len(), 2);
    }

    #[test]
    fn failure_policy_decides_about_failed_runs() {
        let cancel = Cancel::install().unwrap();
        let exits = vec![ExitKind::Code(0), ExitKind::Signal(9), ExitKind::Code(0)];
        let mut script = Script {
            exits: exits.clone(),
            calls: Vec::new(),
        };
        let mut b = benchmarks(&["x"]);
        let err = execute_with(
            &mut b,
            &schedule(3, 0, FailurePolicy::Fail),
            &cancel,
            &mut script,
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("`x` was killed by SIGKILL in a timing run"),
            "{err:#}"
        );
        let mut script = Script {
            exits,
            calls: Vec::new(),
        };
        let mut b = benchmarks(&["x"]);
        let report = execute_with(
            &mut b,
            &schedule(3, 0, FailurePolicy::Ignore),
            &cancel,
            &mut script,
        )
        .unwrap();
        assert_eq!(report.benchmarks[0].metrics[0].samples.len(), 3);
        // The report says how many runs failed and how; they used to leave no trace.
        assert_eq!(
            report.benchmarks[0].warnings,
            [
                "1 of 3 timing runs failed (1 killed by SIGKILL); their samples are in the \
              statistics (--ignore-failure)"
            ]
        );
    }

    #[test]
    fn timed_out_runs_keep_no_time_samples_and_are_counted() {
        let cancel = Cancel::install().unwrap();
        let mut script = Script {
            exits: vec![
                ExitKind::Code(0),
                ExitKind::TimedOut,
                ExitKind::Code(3),
                ExitKind::Code(3),
            ],
            calls: Vec::new(),
        };
        let mut b = benchmarks(&["x"]);
        let report = execute_with(
            &mut b,
            &schedule(4, 0, FailurePolicy::Ignore),
            &cancel,
            &mut script,
        )
        .unwrap();
        let bench = &report.benchmarks[0];
        let wall = bench.metrics.iter().find(|m| m.id == "time.wall").unwrap();
        assert_eq!(
            wall.samples.len(),
            3,
            "the timed-out run measured the timeout"
        );
        let rss = bench.metrics.iter().find(|m| m.id == "rss.peak").unwrap();
        assert_eq!(rss.samples.len(), 4);
        assert_eq!(
            bench.warnings,
            [
                "3 of 4 timing runs failed (1 timed out (time.* samples left out), 2 exited \
              with code 3); their samples are in the statistics (--ignore-failure)"
            ]
        );
    }

    #[test]
    fn details_stay_aligned_with_runs() {
        let mut c = Collected::default();
        c.add("g", 0, false, vec![sample("m", 1.0, &[("a", 1.0)])]);
        c.add(
            "g",
            1,
            false,
            vec![sample("m", 3.0, &[("a", 1.0), ("b", 2.0)])],
        );
        c.add("g", 2, true, vec![sample("m", 2.0, &[("b", 2.0)])]);
        let s = &c.series[0];
        assert_eq!(s.samples, vec![1.0, 3.0, 2.0]);
        assert_eq!(s.failed, vec![2]);
        assert_eq!(s.details[0], ("a".to_string(), vec![1.0, 1.0, 0.0]));
        assert_eq!(s.details[1], ("b".to_string(), vec![0.0, 2.0, 2.0]));
    }
}
