//! Confirmation runs (`--confirm N`, docs/statistics.md): after the first look, more
//! runs of the groups whose measured metric looked regressed, made as the first ones were
//! (the warm-up runs again, `--setup`, `--prepare` and `--cleanup`, the same failure
//! policy), their samples added to the report's series.

use anyhow::Context;
use sbs_reports::model::{BenchmarkResult, Conditions, Detail, GroupRuns, Report};

use crate::judge::confirm::{GroupOf, MoreRuns};
use crate::judge::summary::summarize_metric;
use crate::run::runner::Cancel;
use crate::run::scheduler::series::Collected;
use crate::run::scheduler::{
    check_runs, describe_failure, run_once_more_if_asked, with_hooks, Executor, Processes,
};
use crate::run::spec::{Benchmark, FailurePolicy, Schedule};

/// The confirmation runs a run's judge asks for ([`MoreRuns`]): [`confirm`] on the
/// run's live benchmarks, made as its schedule made the first runs, until `cancel`.
pub struct Confirmer<'a> {
    benchmarks: &'a mut [Benchmark],
    schedule: &'a Schedule,
    cancel: &'a Cancel,
}

impl<'a> Confirmer<'a> {
    /// The confirmation runs of `benchmarks`, run as `schedule` says, until `cancel`.
    pub fn new(
        benchmarks: &'a mut [Benchmark],
        schedule: &'a Schedule,
        cancel: &'a Cancel,
    ) -> Confirmer<'a> {
        Confirmer {
            benchmarks,
            schedule,
            cancel,
        }
    }
}

impl MoreRuns for Confirmer<'_> {
    /// [`confirm`], its error saying how to make none.
    fn more_runs(
        &mut self,
        groups: &[GroupOf],
        runs: usize,
        report: &mut Report,
    ) -> anyhow::Result<()> {
        confirm(
            self.benchmarks,
            self.schedule,
            self.cancel,
            groups,
            runs,
            report,
        )
        .context("making confirmation runs (--confirm 0 makes none)")
    }
}

/// Make `runs` more measured runs of each group of `groups` (benchmark index, group name),
/// after the schedule's warm-up runs, with real child processes, and add their samples
/// to the series of `report`. The machine is read again around them: the report's
/// conditions are those of every run ([`crate::run::machine::and_then`]).
fn confirm(
    benchmarks: &mut [Benchmark],
    schedule: &Schedule,
    cancel: &Cancel,
    groups: &[GroupOf],
    runs: usize,
    report: &mut Report,
) -> anyhow::Result<()> {
    let before = crate::run::machine::before();
    confirm_with(
        benchmarks,
        schedule,
        cancel,
        groups,
        runs,
        report,
        &mut Processes,
    )?;
    let later = before.after();
    report.conditions.machine = Some(match report.conditions.machine.take() {
        Some(first) => crate::run::machine::and_then(first, later),
        None => later,
    });
    Ok(())
}

/// [`confirm`] through `executor`. Every instrument of the groups is finished before
/// this returns, whatever happened.
pub fn confirm_with(
    benchmarks: &mut [Benchmark],
    schedule: &Schedule,
    cancel: &Cancel,
    groups: &[GroupOf],
    runs: usize,
    report: &mut Report,
    executor: &mut dyn Executor,
) -> anyhow::Result<()> {
    let mut involved: Vec<usize> = groups.iter().map(|(b, _)| *b).collect();
    involved.sort_unstable();
    involved.dedup();
    involved.retain(|&b| b < benchmarks.len());
    let result = with_hooks(
        benchmarks,
        &involved,
        executor,
        cancel,
        " again",
        |benchmarks, executor| run_more(benchmarks, schedule, cancel, groups, runs, executor),
    );
    for (b, name) in groups {
        let Some(bench) = benchmarks.get_mut(*b) else {
            continue;
        };
        for group in bench.groups.iter_mut().filter(|g| &g.name == name) {
            for i in group.instruments.iter_mut() {
                i.finish();
            }
        }
    }
    let collected = result?;
    count_runs(report, groups, runs);
    for (b, collected) in collected {
        if let Some(bench) = report.benchmarks.get_mut(b) {
            append(bench, collected, schedule.confidence);
        }
    }
    Ok(())
}

/// The report's conditions count the confirmation runs: the groups extended made `runs`
/// more (the footer then lists the runs of each group).
fn count_runs(report: &mut Report, groups: &[GroupOf], runs: usize) {
    let conditions = &report.conditions;
    let mut made: Vec<GroupRuns> = conditions.group_runs.clone();
    for bench in &report.benchmarks {
        for m in &bench.metrics {
            if !m.group.is_empty() && !made.iter().any(|g| g.group == m.group) {
                made.push(GroupRuns {
                    group: m.group.clone(),
                    runs: conditions.runs,
                });
            }
        }
    }
    for g in made.iter_mut() {
        if groups.iter().any(|(_, name)| *name == g.group) {
            g.runs += runs;
        }
    }
    let (most, group_runs) = Conditions::runs_made(made, conditions.runs);
    report.conditions.runs = most;
    report.conditions.group_runs = group_runs;
}

/// The confirmation runs themselves: for each group, its warm-up runs and `runs`
/// measured runs, the benchmarks that extend it interleaved round by round.
fn run_more(
    benchmarks: &mut [Benchmark],
    schedule: &Schedule,
    cancel: &Cancel,
    groups: &[GroupOf],
    runs: usize,
    executor: &mut dyn Executor,
) -> anyhow::Result<Vec<(usize, Collected)>> {
    let mut collected: Vec<(usize, Collected)> = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    for (_, name) in groups {
        if !names.contains(&name.as_str()) {
            names.push(name);
        }
    }
    for name in names {
        if schedule.progress {
            eprintln!(
                "sbs-profile: a measured metric of the {name} runs looks regressed: \
                 {runs} confirmation runs"
            );
        }
        let members: Vec<usize> = groups
            .iter()
            .filter(|(b, g)| g == name && *b < benchmarks.len())
            .map(|(b, _)| *b)
            .collect();
        for round in 0..schedule.warmup + runs {
            for &b in &members {
                let bench = &mut benchmarks[b];
                let Some(group) = bench.groups.iter_mut().find(|g| g.name == name) else {
                    continue;
                };
                if check_runs(group).is_some() {
                    continue;
                }
                let (outcome, samples) = run_once_more_if_asked(
                    executor,
                    &bench.name,
                    &bench.hooks,
                    &bench.run,
                    group,
                    cancel,
                )?;
                if !outcome.exit.success() && schedule.failure == FailurePolicy::Fail {
                    let group = format!("{name} confirmation");
                    anyhow::bail!(describe_failure(
                        &bench.name,
                        &group,
                        &outcome,
                        bench.run.timeout
                    ));
                }
                let c = collected_of(&mut collected, b);
                c.survivors.extend(outcome.survivors.iter().cloned());
                if round >= schedule.warmup {
                    let failed = !outcome.exit.success();
                    let samples = c.note_failure(outcome.exit, samples);
                    c.add(name, round - schedule.warmup, failed, samples);
                }
            }
        }
        for &b in &members {
            let c = collected_of(&mut collected, b);
            let group = format!("{name} confirmation");
            let warnings = [
                c.failures_warning(&group, runs),
                c.survivors_warning(&group),
            ];
            c.warnings.extend(warnings.into_iter().flatten());
        }
    }
    Ok(collected)
}

/// The samples collected for benchmark `b`, made on first use.
fn collected_of(collected: &mut Vec<(usize, Collected)>, b: usize) -> &mut Collected {
    let at = match collected.iter().position(|(i, _)| *i == b) {
        Some(at) => at,
        None => {
            collected.push((b, Collected::default()));
            collected.len() - 1
        }
    };
    &mut collected[at].1
}

/// Add the confirmation runs' samples to the benchmark's series (their failed runs and
/// breakdowns aligned with the runs before them) and summarize each series again. A
/// metric the first runs did not report is not added: it had no first look.
fn append(bench: &mut BenchmarkResult, collected: Collected, confidence: f64) {
    for series in collected.series {
        let Some(m) = bench.metrics.iter_mut().find(|m| m.id == series.spec.id) else {
            continue;
        };
        let (first, added) = (m.samples.len(), series.samples.len());
        m.failed_runs
            .extend(series.failed.iter().map(|i| i + first));
        m.samples.extend(&series.samples);
        m.exact &= series.spec.exact;
        for d in m.details.iter_mut() {
            match series.details.iter().find(|(label, _)| *label == d.label) {
                Some((_, values)) => d.samples.extend(values),
                None => d.samples.resize(first + added, 0.0),
            }
        }
        for (label, values) in &series.details {
            if !m.details.iter().any(|d| &d.label == label) {
                let mut samples = vec![0.0; first];
                samples.extend(values);
                m.details.push(Detail {
                    label: label.clone(),
                    summary: summarize_metric(&m.id, &samples, confidence),
                    samples,
                });
            }
        }
        for d in m.details.iter_mut() {
            d.summary = summarize_metric(&m.id, &d.samples, confidence);
        }
        m.summary = summarize_metric(&m.id, &m.samples, confidence);
    }
    bench.warnings.extend(collected.warnings);
}

#[cfg(test)]
mod tests;
