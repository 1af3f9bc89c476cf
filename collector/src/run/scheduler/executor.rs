//! The scheduler's seam: one run started through an [`Executor`], real child processes
//! in the tool ([`Processes`]), scripted outcomes in tests.

use crate::run::hooks::Hook;
use crate::run::instrument::{Instrument, RunOutcome, Sample};
use crate::run::runner::{
    run_once, run_overlapping, Cancel, Planned, RunConfig, RunError, RunResult,
};

/// Starts one run. The real one forks a child ([`Processes`]); tests script outcomes.
pub trait Executor {
    /// Run `config` once with `instruments` attached.
    fn run(
        &mut self,
        config: &RunConfig,
        instruments: &mut [Box<dyn Instrument>],
        cancel: &Cancel,
    ) -> Result<(RunOutcome, Vec<Sample>), RunError>;

    /// Make `runs`, up to `jobs` of them in flight, each measured by its set of
    /// instruments (see [`run_overlapping`]): the results of the runs started, in order,
    /// all of them unless `stop` said yes of one. `done` is told of each end. The default
    /// makes them one at a time, for executors that script outcomes.
    fn run_overlapping(
        &mut self,
        sets: &mut [&mut [Box<dyn Instrument>]],
        runs: &[Planned],
        _jobs: usize,
        cancel: &Cancel,
        stop: &dyn Fn(&RunResult) -> bool,
        done: &mut dyn FnMut(),
    ) -> Vec<RunResult> {
        one_at_a_time(self, sets, runs, cancel, stop, done)
    }

    /// Run a `--setup`, `--prepare` or `--cleanup` command for the benchmark `config`
    /// starts, until its end, its `--timeout` or a stop signal (`cancel`).
    fn hook(&mut self, hook: &Hook, config: &RunConfig, cancel: &Cancel) -> anyhow::Result<()> {
        hook.run(config, cancel)
    }
}

/// The executor that runs real child processes.
#[derive(Debug, Default)]
pub struct Processes;

impl Executor for Processes {
    fn run(
        &mut self,
        config: &RunConfig,
        instruments: &mut [Box<dyn Instrument>],
        cancel: &Cancel,
    ) -> Result<(RunOutcome, Vec<Sample>), RunError> {
        run_once(config, instruments, cancel)
    }

    fn run_overlapping(
        &mut self,
        sets: &mut [&mut [Box<dyn Instrument>]],
        runs: &[Planned],
        jobs: usize,
        cancel: &Cancel,
        stop: &dyn Fn(&RunResult) -> bool,
        done: &mut dyn FnMut(),
    ) -> Vec<RunResult> {
        run_overlapping(sets, runs, jobs, cancel, stop, done)
    }
}

/// [`Executor::run_overlapping`] with one run in flight: each of `runs` in order through
/// `executor.run`, until `stop` says yes of one.
pub fn one_at_a_time<E: Executor + ?Sized>(
    executor: &mut E,
    sets: &mut [&mut [Box<dyn Instrument>]],
    runs: &[Planned],
    cancel: &Cancel,
    stop: &dyn Fn(&RunResult) -> bool,
    done: &mut dyn FnMut(),
) -> Vec<RunResult> {
    let mut results = Vec::new();
    for run in runs {
        let result = executor.run(run.config, sets[run.set], cancel);
        let last = stop(&result);
        results.push(result);
        done();
        if last {
            break;
        }
    }
    results
}
