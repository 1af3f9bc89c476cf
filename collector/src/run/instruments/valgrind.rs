//! Instruction counts without a PMU: the benchmark runs under valgrind's cachegrind (its
//! simulations off), which reports `I refs` on a private descriptor.
//!
//! The report channel is an anonymous temporary file passed to the child as descriptor
//! [`LOG_FD`] (`--log-fd`): it never mixes with the benchmark's own stderr, and unlike a
//! pipe it cannot fill up and block the child. The metric is `counter.instructions` with
//! source `valgrind`, never compared with `perf-hw` counts of the same name.
//!
//! In a harnessed benchmark's counting runs ([`ValgrindInstructions::in_region`]) the
//! benchmark runs under callgrind with collection off at start instead, and the harness
//! toggles collection on just before each operation and off just after it
//! (`SBS_REGION_CALLGRIND`): the count is then the measured region's (all operations of
//! the run), and the harness instrument divides it into `counter.instructions/op`.

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use anyhow::Context;
use nix::unistd::Pid;
use sbs_agent_abi::harness::ENV_REGION_CALLGRIND;
use sbs_probes::valgrind;
use sbs_reports::model::Unit;

use crate::run::instrument::{ChildSetup, InFlight, Instrument, MetricSpec, RunOutcome, Sample};

/// Descriptor number of valgrind's log in the child.
pub const LOG_FD: i32 = 61;

/// Metric id of instruction counts (shared with the perf `instructions` event; the
/// source tells them apart).
pub const METRIC: &str = "counter.instructions";

/// Runs the benchmark under cachegrind and reads its instruction count.
pub struct ValgrindInstructions {
    valgrind: PathBuf,
    log: Option<File>,
    processes: Option<(usize, usize)>,
    plan_warnings: Vec<String>,
    /// Count only inside a harness's measured region (callgrind, toggled by the harness).
    region: bool,
    /// The run's process (valgrind's), while it runs.
    pid: Option<Pid>,
}

impl ValgrindInstructions {
    /// Find valgrind; a clear error with the install command if it is missing.
    pub fn new() -> anyhow::Result<Self> {
        let valgrind = valgrind::find_valgrind()?;
        Ok(ValgrindInstructions {
            valgrind,
            log: None,
            processes: None,
            plan_warnings: Vec::new(),
            region: false,
            pid: None,
        })
    }

    /// Count only inside the measured region of a harnessed benchmark: run it under
    /// callgrind with collection off at start and ask the harness to toggle collection
    /// around each operation.
    pub fn in_region(mut self) -> Self {
        self.region = true;
        self
    }

    /// Warnings from planning (e.g. why `auto` chose valgrind) to report with this
    /// instrument's own.
    pub fn with_plan_warnings(mut self, warnings: Vec<String>) -> Self {
        self.plan_warnings = warnings;
        self
    }

    /// The metric this instrument yields.
    pub fn metric() -> MetricSpec {
        MetricSpec::new(METRIC, Unit::Count, valgrind::SOURCE, true)
    }
}

impl Instrument for ValgrindInstructions {
    fn name(&self) -> &str {
        "valgrind"
    }

    fn attach(&mut self, pid: Pid) -> anyhow::Result<()> {
        // Nothing to attach (valgrind counts from its own exec): the pid, to remove what
        // a killed valgrind leaves in TMPDIR.
        self.pid = Some(pid);
        Ok(())
    }

    fn prepare(&mut self, setup: &mut ChildSetup) -> anyhow::Result<()> {
        let file =
            tempfile::tempfile().context("creating the temporary file for valgrind's log")?;
        let child_copy: OwnedFd = file
            .try_clone()
            .context("duplicating valgrind's log descriptor")?
            .into();
        setup.pass_fds.push((child_copy, LOG_FD));
        if self.region {
            setup.wrapper = valgrind::callgrind_wrapper(&self.valgrind, LOG_FD);
            setup.env.push((ENV_REGION_CALLGRIND.into(), "1".into()));
        } else {
            setup.wrapper = valgrind::wrapper(&self.valgrind, LOG_FD);
        }
        self.log = Some(file);
        Ok(())
    }

    fn collect(&mut self, outcome: &RunOutcome, out: &mut Vec<Sample>) -> anyhow::Result<()> {
        self.pid = None;
        let mut file = self
            .log
            .take()
            .context("valgrind instrument: collect without prepare")?;
        let mut text = String::new();
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.read_to_string(&mut text))
            .context("reading valgrind's log")?;
        let count = valgrind::parse_log(&text).with_context(|| {
            format!(
                "valgrind run of child {} ({:?}) gave no instruction count",
                outcome.pid, outcome.exit
            )
        })?;
        let n = count.per_process.len();
        self.processes = Some(match self.processes {
            Some((lo, hi)) => (lo.min(n), hi.max(n)),
            None => (n, n),
        });
        out.push(Sample::new(Self::metric(), count.total as f64));
        Ok(())
    }

    fn abort_run(&mut self) {
        self.log = None;
        if let Some(pid) = self.pid.take() {
            valgrind::remove_leftovers(pid.as_raw(), &std::env::temp_dir());
        }
    }

    fn warnings(&self) -> Vec<String> {
        let mut w = self.plan_warnings.clone();
        match self.processes {
            Some((lo, hi)) if lo != hi => w.push(format!(
                "counter.instructions (valgrind): the number of processes varied between runs \
                 ({lo} to {hi}); counts include every process the benchmark started"
            )),
            _ => {}
        }
        w
    }

    fn finish(&mut self) {
        self.log = None;
    }

    fn overlaps(&self) -> bool {
        true
    }

    fn park(&mut self) -> InFlight {
        InFlight::new((self.log.take(), self.pid.take()))
    }

    fn resume(&mut self, run: InFlight) {
        (self.log, self.pid) = run.take().unwrap_or_default();
    }
}

/// Puts valgrind (callgrind or DHAT, its profile and log written to files of the
/// caller's) in front of the program for one run, and sends the program's standard
/// output to a file of the caller's, if given. It attaches nothing (valgrind measures
/// from its own start) but learns the run's pid at the latch, to remove what a killed
/// valgrind leaves in TMPDIR. Used by pinpoint and `--invocations-check`.
pub struct ValgrindWrapper {
    /// valgrind and its options.
    wrapper: Vec<OsString>,
    /// Where the run's standard output goes.
    stdout: Option<OwnedFd>,
    /// The run's process: valgrind's.
    pid: Option<Pid>,
}

impl ValgrindWrapper {
    /// One run under `wrapper` (valgrind and its options), its output to `stdout`.
    pub fn new(wrapper: Vec<OsString>, stdout: Option<OwnedFd>) -> Self {
        ValgrindWrapper {
            wrapper,
            stdout,
            pid: None,
        }
    }
}

impl Instrument for ValgrindWrapper {
    fn name(&self) -> &str {
        "valgrind"
    }

    fn attach(&mut self, pid: Pid) -> anyhow::Result<()> {
        self.pid = Some(pid);
        Ok(())
    }

    fn abort_run(&mut self) {
        if let Some(pid) = self.pid.take() {
            valgrind::remove_leftovers(pid.as_raw(), &std::env::temp_dir());
        }
    }

    fn prepare(&mut self, setup: &mut ChildSetup) -> anyhow::Result<()> {
        setup.wrapper = self.wrapper.clone();
        if let Some(stdout) = self.stdout.take() {
            setup.pass_fds.push((stdout, 1));
        }
        Ok(())
    }

    fn collect(&mut self, _outcome: &RunOutcome, _out: &mut Vec<Sample>) -> anyhow::Result<()> {
        self.pid = None;
        Ok(())
    }
}
