use super::*;
use sbs_reports::model::Unit;

use crate::run::instrument::{MetricSpec, RunAgain};
use crate::run::runner::RunError;
use crate::run::spec::TargetCi;

fn sample(id: &str, v: f64, details: &[(&str, f64)]) -> Sample {
    Sample {
        metric: MetricSpec::new(id, Unit::Count, "test", true),
        value: v,
        details: details.iter().map(|(l, v)| (l.to_string(), *v)).collect(),
    }
}

/// Scripted runs: exit codes in order, and a value per run that counts up.
#[derive(Default)]
struct Script {
    exits: Vec<ExitKind>,
    calls: Vec<String>,
    /// Each call of `run_overlapping`: its runs and `jobs`.
    overlapped: Vec<(usize, usize)>,
}

impl Executor for Script {
    /// Hooks are recorded, not run: a real shell here could be killed by the survivor
    /// check of a runner test running beside it in this test binary.
    fn hook(
        &mut self,
        hook: &crate::run::hooks::Hook,
        _: &RunConfig,
        _: &Cancel,
    ) -> anyhow::Result<()> {
        self.calls.push(format!("hook {}", hook.command));
        Ok(())
    }

    fn run_overlapping(
        &mut self,
        sets: &mut [&mut [Box<dyn crate::run::instrument::Instrument>]],
        runs: &[Planned],
        jobs: usize,
        cancel: &Cancel,
        stop: &dyn Fn(&RunResult) -> bool,
        done: &mut dyn FnMut(),
    ) -> Vec<RunResult> {
        self.overlapped.push((runs.len(), jobs));
        executor::one_at_a_time(self, sets, runs, cancel, stop, done)
    }

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
            failed_cleanup: None,
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
        jobs: 1,
    }
}

#[test]
fn target_ci_adds_runs_until_the_interval_is_narrow_or_the_maximum_comes() {
    // Scripted walls are 10, 11, 12... ms: ±60% after 2 runs, ±22% after 3, and
    // never below ±10% before 40.
    let run = |ci: f64, max_runs: usize| {
        let mut benches = benchmarks(&["a"]);
        let mut script = Script::default();
        let schedule = Schedule {
            target: Some(TargetCi { ci, max_runs }),
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
    overlaps: bool,
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

    fn overlaps(&self) -> bool {
        self.overlaps
    }
}

#[test]
fn a_run_an_instrument_asks_again_is_made_again_once() {
    let cancel = Cancel::install().unwrap();
    let run = |again_in: Vec<usize>| {
        let mut benches = benchmarks(&["a"]);
        benches[0].groups[0].instruments = vec![Box::new(Changes {
            again_in,
            seen: 0,
            overlaps: false,
        })];
        let mut script = Script::default();
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
        ..Script::default()
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
    let mut script = Script::default();
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
    let mut script = Script::default();
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
        ..Script::default()
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
        ..Script::default()
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
        ..Script::default()
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

/// Counts something no other process changes: its runs may overlap.
struct Exact {
    runs: usize,
}

impl crate::run::instrument::Instrument for Exact {
    fn name(&self) -> &str {
        "exact"
    }
    fn collect(&mut self, o: &RunOutcome, out: &mut Vec<Sample>) -> anyhow::Result<()> {
        self.runs += 1;
        out.push(sample("count", o.wall.as_millis() as f64, &[]));
        Ok(())
    }
    fn overlaps(&self) -> bool {
        true
    }
}

fn counting(names: &[&str]) -> Vec<Benchmark> {
    let mut b = benchmarks(names);
    for bench in &mut b {
        bench.groups.push(Group {
            name: "exact".into(),
            instruments: vec![Box::new(Exact { runs: 0 })],
        });
    }
    b
}

/// With `--jobs 2`, a group whose instruments all overlap makes its runs in one call of
/// `run_overlapping` (warm-ups and benchmarks interleaved, in the order of one at a
/// time), and records them in that order; the timing group runs one at a time.
#[test]
fn runs_of_a_counting_group_overlap_and_keep_their_order() {
    let cancel = Cancel::install().unwrap();
    let mut script = Script::default();
    let mut b = counting(&["a", "b"]);
    let schedule = Schedule {
        jobs: 2,
        ..schedule(3, 1, FailurePolicy::Fail)
    };
    let report = execute_with(&mut b, &schedule, &cancel, &mut script).unwrap();
    assert_eq!(script.overlapped, [(8, 2)]);
    assert_eq!(script.calls.len(), 16);
    assert_eq!(&script.calls[8..], ["a", "b", "a", "b", "a", "b", "a", "b"]);
    let count = |b: usize| {
        let m = report.benchmarks[b]
            .metrics
            .iter()
            .find(|m| m.id == "count");
        m.unwrap().samples.clone()
    };
    // Runs 8 and 9 were the warm-ups: run n has wall 10 + n ms.
    assert_eq!(count(0), vec![20.0, 22.0, 24.0]);
    assert_eq!(count(1), vec![21.0, 23.0, 25.0]);
    // One at a time: `--jobs 1`, or a `--prepare` that readies the one run after it.
    let mut script = Script::default();
    let one = Schedule {
        jobs: 1,
        ..schedule
    };
    execute_with(&mut counting(&["a"]), &one, &cancel, &mut script).unwrap();
    assert!(script.overlapped.is_empty());
    let mut script = Script::default();
    let mut b = counting(&["a"]);
    b[0].hooks.prepare = Some(crate::run::hooks::Hook {
        option: "--prepare",
        command: "true".into(),
        shell: "sh".into(),
    });
    execute_with(&mut b, &schedule, &cancel, &mut script).unwrap();
    assert!(script.overlapped.is_empty());
    // Or `--show-output`, whose outputs would interleave.
    let mut script = Script::default();
    let mut b = counting(&["a"]);
    b[0].run.show_output = true;
    execute_with(&mut b, &schedule, &cancel, &mut script).unwrap();
    assert!(script.overlapped.is_empty());
}

/// A failed run among overlapping ones ends the plan with its error, as one at a time.
#[test]
fn a_failed_overlapping_run_stops_the_plan() {
    let cancel = Cancel::install().unwrap();
    // Timing: runs 0-3; the counting group's third run (6) exits 1.
    let mut script = Script {
        exits: [0, 0, 0, 0, 0, 0, 1, 0].map(ExitKind::Code).to_vec(),
        ..Script::default()
    };
    let schedule = Schedule {
        jobs: 2,
        ..schedule(3, 1, FailurePolicy::Fail)
    };
    let err = execute_with(&mut counting(&["a"]), &schedule, &cancel, &mut script).unwrap_err();
    assert!(
        format!("{err:#}").contains("exited with code 1 in an exact run"),
        "{err:#}"
    );
    assert_eq!(script.calls.len(), 7);
}

/// Among overlapping runs, a run whose instrument asks again does not stop the others;
/// it is made again alone, and the group has all its samples.
#[test]
fn an_overlapping_run_asked_again_is_made_again_and_the_others_go_on() {
    let cancel = Cancel::install().unwrap();
    let mut b = benchmarks(&["a"]);
    b[0].groups[0].instruments = vec![Box::new(Changes {
        again_in: vec![1],
        seen: 0,
        overlaps: true,
    })];
    let mut script = Script::default();
    let schedule = Schedule {
        jobs: 2,
        ..schedule(3, 0, FailurePolicy::Fail)
    };
    let report = execute_with(&mut b, &schedule, &cancel, &mut script).unwrap();
    assert_eq!(script.overlapped, [(3, 2)]);
    assert_eq!(script.calls.len(), 4);
    // The first run, made again after the other two, is the fourth collected.
    let m = &report.benchmarks[0].metrics[0];
    assert_eq!(m.samples, vec![4.0, 2.0, 3.0]);
}
