//! The stack-sampling instrument: the child's user call stacks on the `cpu-clock`
//! software event ([`sbs_probes::sample`]), opened before it execs and unwound after it
//! was reaped ([`sbs_probes::unwind`]). Each run's unwound stacks go to a shared list that
//! its owner reads after the run (pinpoint's time metric).
//!
//! Sampling copies part of the stack on every sample: it slows the program down, so, like
//! every instrument, it runs in runs of its own and never in a timing run.

use std::fs::File;
use std::io::{Read, Seek};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use nix::unistd::Pid;
use sbs_probes::sample::{SampleConfig, Sampling};
use sbs_probes::unwind::{unwind, Unwound};

use crate::run::instrument::{ChildSetup, Instrument, RunOutcome, Sample};

/// One run's stacks, and what it printed when asked to keep it.
#[derive(Debug, Clone, Default)]
pub struct SampledRun {
    /// The unwound samples.
    pub unwound: Unwound,
    /// Samples the kernel dropped, or took without a user stack.
    pub lost: u64,
    /// Whether time in the kernel on the child's behalf was sampled too.
    pub kernel: bool,
    /// Standard output, when kept.
    pub stdout: Option<Vec<u8>>,
}

/// Samples each run's child; pushes each run's [`SampledRun`] to [`StackSampler::runs`].
pub struct StackSampler {
    config: SampleConfig,
    live: Option<Sampling>,
    keep_stdout: bool,
    stdout: Option<File>,
    runs: Arc<Mutex<Vec<SampledRun>>>,
}

impl StackSampler {
    /// A sampler with `config`; with `keep_stdout`, each run's standard output is kept
    /// (instead of going where the runner sends it).
    pub fn new(config: SampleConfig, keep_stdout: bool) -> Self {
        StackSampler {
            config,
            live: None,
            keep_stdout,
            stdout: None,
            runs: Arc::default(),
        }
    }

    /// The list each run's stacks are appended to.
    pub fn runs(&self) -> Arc<Mutex<Vec<SampledRun>>> {
        self.runs.clone()
    }
}

impl Instrument for StackSampler {
    fn name(&self) -> &str {
        "stack samples"
    }

    fn prepare(&mut self, setup: &mut ChildSetup) -> anyhow::Result<()> {
        if self.keep_stdout {
            let file = tempfile::tempfile().context("cannot create a file for the output")?;
            let fd: OwnedFd = file
                .try_clone()
                .context("cannot share the output file")?
                .into();
            setup.pass_fds.push((fd, 1));
            self.stdout = Some(file);
        }
        Ok(())
    }

    fn attach(&mut self, pid: Pid) -> anyhow::Result<()> {
        let sampling = Sampling::start(pid.as_raw(), self.config)?;
        self.live = Some(sampling);
        Ok(())
    }

    fn collect(&mut self, _outcome: &RunOutcome, _out: &mut Vec<Sample>) -> anyhow::Result<()> {
        let Some(sampling) = self.live.take() else {
            anyhow::bail!("the stack sampler was not attached to the run");
        };
        let recorded = sampling.finish();
        let stdout = match self.stdout.take() {
            Some(mut f) => {
                let mut bytes = Vec::new();
                f.rewind()
                    .and_then(|_| f.read_to_end(&mut bytes))
                    .context("cannot read the run's output back")?;
                Some(bytes)
            }
            None => None,
        };
        let run = SampledRun {
            unwound: unwind(&recorded),
            lost: recorded.lost + recorded.without_stack,
            kernel: recorded.kernel,
            stdout,
        };
        self.runs
            .lock()
            .map_err(|_| anyhow::anyhow!("the stack list was poisoned"))?
            .push(run);
        Ok(())
    }

    fn abort_run(&mut self) {
        self.live = None;
        self.stdout = None;
    }

    fn finish(&mut self) {
        self.live = None;
    }
}
