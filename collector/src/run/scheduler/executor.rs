//! The scheduler's seam: one run started through an [`Executor`], real child processes
//! in the tool ([`Processes`]), scripted outcomes in tests.

use crate::run::hooks::Hook;
use crate::run::instrument::{RunOutcome, Sample};
use crate::run::runner::{run_once, Cancel, RunConfig, RunError};

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
