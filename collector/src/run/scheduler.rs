//! Drives the plan: for each group, warm-up runs then measured runs, benchmarks
//! interleaved (A B A B ...), and gathers the samples into series per metric.

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use sbs_reports::model::{BenchmarkResult, Conditions, MetricResult, Report, SCHEMA_VERSION};

use crate::plan::{FailurePolicy, Plan};
use crate::run::instrument::{ExitKind, MetricSpec, RunOutcome, Sample};
use crate::run::runner::{run_once, Cancel, RunConfig, RunError};

/// All values of one metric of one benchmark.
#[derive(Debug)]
struct Series {
    spec: MetricSpec,
    group: String,
    samples: Vec<f64>,
    details: Vec<(String, Vec<f64>)>,
}

#[derive(Debug, Default)]
struct Collected {
    series: Vec<Series>,
    warnings: Vec<String>,
    /// `(id prefix, note)` from [`Instrument::metric_notes`].
    notes: Vec<(String, String)>,
}

impl Collected {
    fn add(&mut self, group: &str, run_index: usize, samples: Vec<Sample>) {
        for s in samples {
            let pos = match self.series.iter().position(|x| x.spec.id == s.metric.id) {
                Some(p) => p,
                None => {
                    self.series.push(Series {
                        spec: s.metric.clone(),
                        group: group.to_string(),
                        samples: Vec::new(),
                        details: Vec::new(),
                    });
                    self.series.len() - 1
                }
            };
            let series = &mut self.series[pos];
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

fn describe_failure(
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
            format!("was killed by {name}")
        }
        ExitKind::TimedOut => format!(
            "timed out after {:.3} s (--timeout) and was killed with its process group",
            timeout.map(|t| t.as_secs_f64()).unwrap_or(0.0)
        ),
    };
    format!(
        "command `{}` {what} in a {group} run; use --show-output to see its output, or \
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

/// Run the whole plan with real child processes and build the report.
pub fn execute(plan: &mut Plan, cancel: &Cancel) -> anyhow::Result<Report> {
    execute_with(plan, cancel, &mut Processes)
}

/// Run the whole plan through `executor` and build the report. Every instrument's
/// `finish` runs before this returns, whatever happened.
pub fn execute_with(
    plan: &mut Plan,
    cancel: &Cancel,
    executor: &mut dyn Executor,
) -> anyhow::Result<Report> {
    let result = execute_inner(plan, cancel, executor);
    for bench in plan.benchmarks.iter_mut() {
        for group in bench.groups.iter_mut() {
            for i in group.instruments.iter_mut() {
                i.finish();
            }
        }
    }
    result
}

fn execute_inner(
    plan: &mut Plan,
    cancel: &Cancel,
    executor: &mut dyn Executor,
) -> anyhow::Result<Report> {
    let group_count = plan.benchmarks.first().map(|b| b.groups.len()).unwrap_or(0);
    let total = (group_count * (plan.warmup + plan.runs) * plan.benchmarks.len()) as u64;
    let bar = if plan.progress {
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} {msg:24} [{bar:30}] {pos}/{len} runs, {elapsed} elapsed, ETA {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut collected: Vec<Collected> = plan
        .benchmarks
        .iter()
        .map(|_| Collected::default())
        .collect();
    let (runs, warmup, failure) = (plan.runs, plan.warmup, plan.failure);
    for g in 0..group_count {
        for round in 0..warmup + runs {
            let measured = round >= warmup;
            for (b, bench) in plan.benchmarks.iter_mut().enumerate() {
                let group = &mut bench.groups[g];
                bar.set_message(format!(
                    "{} {}",
                    group.name,
                    if measured { "run" } else { "warm-up" }
                ));
                let (outcome, samples) =
                    executor
                        .run(&bench.run, &mut group.instruments, cancel)
                        .with_context(|| format!("{} run of `{}`", group.name, bench.name))?;
                if !outcome.exit.success() && failure == FailurePolicy::Fail {
                    let msg =
                        describe_failure(&bench.name, &group.name, &outcome, bench.run.timeout);
                    anyhow::bail!(msg);
                }
                if measured {
                    collected[b].add(&group.name, round - warmup, samples);
                }
                bar.inc(1);
            }
        }
        for (b, bench) in plan.benchmarks.iter_mut().enumerate() {
            for i in bench.groups[g].instruments.iter_mut() {
                collected[b].warnings.extend(i.warnings());
                collected[b].notes.extend(i.metric_notes());
                i.finish();
            }
        }
    }
    bar.finish_and_clear();

    let confidence = plan.confidence;
    let benchmarks = plan
        .benchmarks
        .iter()
        .zip(collected)
        .map(|(bench, c)| BenchmarkResult {
            name: bench.name.clone(),
            command: bench
                .run
                .args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            metrics: c
                .series
                .into_iter()
                .map(|s| {
                    let notes = c
                        .notes
                        .iter()
                        .filter(|(prefix, _)| {
                            s.spec
                                .id
                                .strip_prefix(prefix.as_str())
                                .is_some_and(|rest| !rest.contains('/'))
                        })
                        .map(|(_, note)| note.clone())
                        .collect();
                    MetricResult {
                        notes,
                        ..s.spec.result(s.group, s.samples, s.details, confidence)
                    }
                })
                .collect(),
            warnings: c.warnings,
        })
        .collect();
    let first = plan.benchmarks.first().map(|b| &b.run);
    Ok(Report {
        schema_version: SCHEMA_VERSION,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        conditions: Conditions {
            runs,
            warmup,
            aslr_disabled: first.is_some_and(|r| r.disable_aslr),
            pinned_cpus: first.map(|r| r.cpus.clone()).unwrap_or_default(),
            clean_env: plan.clean_env,
        },
        benchmarks,
        from_history: None,
    })
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

    fn plan(names: &[&str], runs: usize, warmup: usize, failure: FailurePolicy) -> Plan {
        use crate::run::instrument::Group;
        use crate::run::instruments::timing::Timing;
        Plan {
            benchmarks: names
                .iter()
                .map(|n| crate::plan::Benchmark {
                    name: n.to_string(),
                    run: RunConfig {
                        program: n.into(),
                        args: vec![n.into()],
                        env: Vec::new(),
                        show_output: false,
                        disable_aslr: true,
                        cpus: Vec::new(),
                        timeout: None,
                    },
                    groups: vec![Group {
                        name: "timing".into(),
                        instruments: vec![Box::new(Timing { rss: true })],
                    }],
                })
                .collect(),
            runs,
            warmup,
            confidence: 0.95,
            failure,
            clean_env: false,
            report: crate::cli::OutputArgs {
                format: crate::plan::Format::Text,
                output: None,
                html: None,
            },
            progress: false,
        }
    }

    #[test]
    fn warmups_are_discarded_and_benchmarks_interleave() {
        let cancel = Cancel::install().unwrap();
        let mut script = Script {
            exits: Vec::new(),
            calls: Vec::new(),
        };
        let mut p = plan(&["a", "b"], 3, 1, FailurePolicy::Fail);
        let report = execute_with(&mut p, &cancel, &mut script).unwrap();
        assert_eq!(script.calls, ["a", "b", "a", "b", "a", "b", "a", "b"]);
        let wall = |b: usize| report.benchmarks[b].metrics[0].samples.clone();
        // Run n has wall 10 + n ms; runs 0 and 1 were the warm-ups.
        assert_eq!(wall(0), vec![0.012, 0.014, 0.016]);
        assert_eq!(wall(1), vec![0.013, 0.015, 0.017]);
        assert_eq!(report.benchmarks[0].metrics[0].summary.n, 3);
    }

    #[test]
    fn failure_policy_decides_about_failed_runs() {
        let cancel = Cancel::install().unwrap();
        let exits = vec![ExitKind::Code(0), ExitKind::Signal(9), ExitKind::Code(0)];
        let mut script = Script {
            exits: exits.clone(),
            calls: Vec::new(),
        };
        let mut p = plan(&["x"], 3, 0, FailurePolicy::Fail);
        let err = execute_with(&mut p, &cancel, &mut script).unwrap_err();
        assert!(
            format!("{err:#}").contains("`x` was killed by SIGKILL in a timing run"),
            "{err:#}"
        );
        let mut script = Script {
            exits,
            calls: Vec::new(),
        };
        let mut p = plan(&["x"], 3, 0, FailurePolicy::Ignore);
        let report = execute_with(&mut p, &cancel, &mut script).unwrap();
        assert_eq!(report.benchmarks[0].metrics[0].samples.len(), 3);
    }

    #[test]
    fn details_stay_aligned_with_runs() {
        let mut c = Collected::default();
        c.add("g", 0, vec![sample("m", 1.0, &[("a", 1.0)])]);
        c.add("g", 1, vec![sample("m", 3.0, &[("a", 1.0), ("b", 2.0)])]);
        c.add("g", 2, vec![sample("m", 2.0, &[("b", 2.0)])]);
        let s = &c.series[0];
        assert_eq!(s.samples, vec![1.0, 3.0, 2.0]);
        assert_eq!(s.details[0], ("a".to_string(), vec![1.0, 1.0, 0.0]));
        assert_eq!(s.details[1], ("b".to_string(), vec![0.0, 2.0, 2.0]));
    }
}
