use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::run::hooks::{Hook, Hooks};
use crate::run::instrument::{ExitKind, Group, Instrument, RunOutcome, Sample};
use crate::run::instruments::timing::Timing;
use crate::run::runner::{RunConfig, RunError};
use crate::run::scheduler::execute_with;

/// Scripted runs: the wall time of run n is 10 + n ms, the exit codes given in order
/// (then 0); each run and hook is logged by its benchmark's name.
struct Script {
    exits: Vec<ExitKind>,
    runs: usize,
    log: Vec<String>,
}

impl Executor for Script {
    fn run(
        &mut self,
        config: &RunConfig,
        instruments: &mut [Box<dyn Instrument>],
        _cancel: &Cancel,
    ) -> Result<(RunOutcome, Vec<Sample>), RunError> {
        let n = self.runs;
        self.runs += 1;
        self.log.push(config.args[0].to_string_lossy().into_owned());
        let outcome = RunOutcome {
            pid: nix::unistd::Pid::from_raw(1),
            wall: Duration::from_millis(10 + n as u64),
            user: Duration::ZERO,
            sys: Duration::ZERO,
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

    fn hook(&mut self, hook: &Hook, config: &RunConfig, _: &Cancel) -> anyhow::Result<()> {
        self.log.push(format!(
            "{} {}",
            hook.option,
            config.args[0].to_string_lossy()
        ));
        Ok(())
    }
}

fn hook(option: &'static str) -> Option<Hook> {
    Some(Hook {
        option,
        shell: PathBuf::from("/bin/sh"),
        command: "true".into(),
    })
}

fn benchmarks(names: &[&str]) -> Vec<Benchmark> {
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
            hooks: Hooks {
                setup: hook("--setup"),
                prepare: None,
                cleanup: hook("--cleanup"),
            },
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

fn wall(report: &Report, b: usize) -> &sbs_reports::model::MetricResult {
    report.benchmarks[b]
        .metrics
        .iter()
        .find(|m| m.id == "time.wall")
        .expect("time.wall")
}

#[test]
fn confirmation_runs_extend_only_the_groups_asked_after_their_warm_up_and_setup() {
    let mut benches = benchmarks(&["a", "b"]);
    let s = schedule(2, 1, FailurePolicy::Fail);
    let mut script = Script {
        exits: Vec::new(),
        runs: 0,
        log: Vec::new(),
    };
    let cancel = Cancel::install().unwrap();
    let mut report = execute_with(&mut benches, &s, &cancel, &mut script).unwrap();
    let (before, first_runs) = (wall(&report, 1).summary.mean, script.runs);
    script.log.clear();
    let groups = [(1, "timing".to_string())];
    confirm_with(
        &mut benches,
        &s,
        &cancel,
        &groups,
        3,
        &mut report,
        &mut script,
    )
    .unwrap();
    // b only: its setup, one warm-up and three measured runs, its cleanup.
    assert_eq!(
        script.log,
        ["--setup b", "b", "b", "b", "b", "--cleanup b"],
        "{:?}",
        script.log
    );
    assert_eq!(wall(&report, 0).samples.len(), 2);
    let b = wall(&report, 1);
    assert_eq!(b.samples.len(), 5);
    // The warm-up's sample (run first_runs) is left out; the three after it are kept.
    let kept: Vec<f64> = (first_runs + 1..first_runs + 4)
        .map(|n| (10 + n) as f64 / 1000.0)
        .collect();
    assert_eq!(&b.samples[2..], kept.as_slice());
    assert!(b.summary.mean > before, "summarized again over all runs");
    assert_eq!(b.summary.n, 5);
}

#[test]
fn a_failed_confirmation_run_is_marked_where_it_is_or_stops_the_run() {
    let mut benches = benchmarks(&["a"]);
    let keep = schedule(2, 0, FailurePolicy::Ignore);
    let mut script = Script {
        exits: vec![
            ExitKind::Code(0),
            ExitKind::Code(0),
            ExitKind::Code(0),
            ExitKind::Code(3),
        ],
        runs: 0,
        log: Vec::new(),
    };
    let cancel = Cancel::install().unwrap();
    let mut report = execute_with(&mut benches, &keep, &cancel, &mut script).unwrap();
    let groups = [(0, "timing".to_string())];
    confirm_with(
        &mut benches,
        &keep,
        &cancel,
        &groups,
        2,
        &mut report,
        &mut script,
    )
    .unwrap();
    assert_eq!(wall(&report, 0).failed_runs, [3]);
    assert!(
        report.benchmarks[0]
            .warnings
            .iter()
            .any(|w| w.starts_with("1 of 2 timing confirmation runs failed (1 exited with code 3)")),
        "{:?}",
        report.benchmarks[0].warnings
    );
    // Without --ignore-failure a failing confirmation run is an error, cleaned up after.
    let mut benches = benchmarks(&["a"]);
    let fail = schedule(2, 0, FailurePolicy::Fail);
    script.runs = 0;
    script.log.clear();
    let mut report = execute_with(&mut benches, &fail, &cancel, &mut script).unwrap();
    let err = confirm_with(
        &mut benches,
        &fail,
        &cancel,
        &groups,
        2,
        &mut report,
        &mut script,
    )
    .unwrap_err();
    assert!(
        format!("{err:#}").contains("exited with code 3 in a timing confirmation run"),
        "{err:#}"
    );
    assert_eq!(script.log.last().map(String::as_str), Some("--cleanup a"));
}
