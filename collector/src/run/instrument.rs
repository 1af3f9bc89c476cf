//! The plug-in point for every measuring mechanism.
//!
//! A [`Group`] is a set of instruments that share runs without disturbing each other.
//! The runner knows nothing of any particular instrument: for each run it calls, in order,
//! [`Instrument::prepare`] (before fork: env vars, fds to pass, a command wrapper),
//! [`Instrument::attach`] (child forked and held at its start latch: open counters on its
//! pid), then releases the child, reaps it and calls [`Instrument::collect`]. Finally
//! [`Instrument::finish`] runs once per group, also after an error or Ctrl-C.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::time::Duration;

use nix::unistd::Pid;
use sbs_reports::model::{CountRange, MetricResult, Unit};

/// What a metric is: its id, unit, mechanism and kind.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSpec {
    /// Stable id, e.g. `time.wall`, `alloc.count`, `invocations.Vec::push`.
    pub id: String,
    /// Unit of the values.
    pub unit: Unit,
    /// Mechanism: `rusage`, `uprobe`, `agent`, `perf-sw`, `perf-hw`, `valgrind`...
    pub source: String,
    /// An exact count (repeatable) rather than a measurement.
    pub exact: bool,
    /// The largest error the value may carry, in its unit, where the instrument states
    /// one (see `MetricResult::bound`); the series keeps the largest of its runs'.
    pub bound: Option<f64>,
    /// The fewest and most calls a count that is not exact may stand for in this run
    /// (see `MetricResult::range`); the series keeps the union of its runs'.
    pub range: Option<CountRange>,
}

impl MetricSpec {
    /// A new metric description.
    pub fn new(id: impl Into<String>, unit: Unit, source: impl Into<String>, exact: bool) -> Self {
        MetricSpec {
            id: id.into(),
            unit,
            source: source.into(),
            exact,
            bound: None,
            range: None,
        }
    }

    /// The same metric, its value within `±bound` of the truth (`None`: as exact as
    /// `exact` says).
    pub fn with_bound(self, bound: Option<f64>) -> Self {
        MetricSpec { bound, ..self }
    }

    /// The metric's result for a report: its samples, its breakdown (label, samples) and
    /// their summaries, with no comparison or trend yet.
    pub fn result(
        self,
        group: String,
        samples: Vec<f64>,
        details: Vec<(String, Vec<f64>)>,
        confidence: f64,
    ) -> MetricResult {
        MetricResult {
            group,
            bound: self.bound,
            // A range that says no more than the samples (no site with doubt counted a
            // call) is left out.
            range: self.range.filter(CountRange::informative),
            ..crate::judge::summary::metric_result(
                self.id,
                self.unit,
                self.source,
                self.exact,
                samples,
                details,
                confidence,
            )
        }
    }
}

/// One value of one metric from one run, with an optional breakdown.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Which metric.
    pub metric: MetricSpec,
    /// The value for this run.
    pub value: f64,
    /// Breakdown of `value` (label, value), e.g. per probed symbol.
    pub details: Vec<(String, f64)>,
}

impl Sample {
    /// A sample without breakdown.
    pub fn new(metric: MetricSpec, value: f64) -> Self {
        Sample {
            metric,
            value,
            details: Vec::new(),
        }
    }
}

/// How the child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
    /// Killed by us after the timeout.
    TimedOut,
}

impl ExitKind {
    /// Exit code 0.
    pub fn success(self) -> bool {
        self == ExitKind::Code(0)
    }

    /// How the child ended, after its name: `exited with status 3`, `was killed by
    /// signal 9`, `timed out`.
    pub fn ended(self) -> String {
        match self {
            ExitKind::Code(code) => format!("exited with status {code}"),
            ExitKind::Signal(sig) => format!("was killed by signal {sig}"),
            ExitKind::TimedOut => "timed out".to_string(),
        }
    }
}

/// What the runner observed about one child run.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// Pid of the child (the benchmark's main process).
    pub pid: Pid,
    /// From release of the start latch until the child was reaped.
    pub wall: Duration,
    /// User CPU time of the child and its reaped descendants (`wait4` rusage).
    pub user: Duration,
    /// System CPU time of the child and its reaped descendants (`wait4` rusage).
    pub sys: Duration,
    /// Peak resident set size of the child, bytes (`wait4` rusage `ru_maxrss`).
    pub max_rss: u64,
    /// How it ended.
    pub exit: ExitKind,
    /// Processes the benchmark started that outlived it outside its process group (a
    /// daemon in a session of its own), as `pid (name)`; they were killed.
    pub survivors: Vec<String>,
}

/// [`Instrument::collect`]'s answer when the run showed that the instrument cannot measure
/// this program the way it did, and it now measures it another way (the in-process engine
/// refused in a sandboxed program: uprobes count instead): the run is discarded and made
/// again, once. The text says what happened, for the report's warnings.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RunAgain(pub String);

/// What an instrument may change about the child before it is forked.
#[derive(Debug, Default)]
pub struct ChildSetup {
    /// Environment variables to set (after the base environment is built).
    pub env: Vec<(OsString, OsString)>,
    /// Descriptors to pass to the child: `(fd, number it gets in the child)`.
    /// The runner `dup2`s them in the child; the parent's copies are dropped after fork.
    pub pass_fds: Vec<(OwnedFd, i32)>,
    /// A command prefix the benchmark runs under (e.g. `valgrind --tool=...`).
    pub wrapper: Vec<OsString>,
    /// The wrapper's option that sets the program's argv[0] (QEMU's `-0`): the runner
    /// then passes it with the argv[0] the user gave, followed by the program's resolved
    /// path (such a wrapper searches no `PATH`).
    pub argv0_option: Option<OsString>,
}

/// A measuring mechanism, driven by the runner once per run.
pub trait Instrument {
    /// Short name for messages, e.g. `uprobes`.
    fn name(&self) -> &str;

    /// Before fork: set env vars, pass descriptors, wrap the command.
    fn prepare(&mut self, _setup: &mut ChildSetup) -> anyhow::Result<()> {
        Ok(())
    }

    /// Whether the child must wait at a start latch (a pipe it reads one byte from before
    /// its exec; "gate" is the regression gate's word) until [`Instrument::attach`] has run.
    /// The default is yes; an instrument that attaches nothing (timing) says no: the child
    /// then execs as soon as the launcher forks it, which saves two wake-ups per run, and
    /// the launcher times it.
    fn needs_start_latch(&self) -> bool {
        true
    }

    /// The child exists and waits at its start latch (it has not exec'd yet): attach to it,
    /// e.g. open counters on `pid` with `inherit` and `enable_on_exec`.
    fn attach(&mut self, _pid: Pid) -> anyhow::Result<()> {
        Ok(())
    }

    /// The child was reaped: append this run's samples to `out`. Called also for failed
    /// runs that the user chose to keep (`--ignore-failure`), and before the runner looks
    /// at how the child ended. An instrument that learned from the run that it must measure
    /// differently, and did change, returns [`RunAgain`]: the run is made again, once.
    fn collect(&mut self, outcome: &RunOutcome, out: &mut Vec<Sample>) -> anyhow::Result<()>;

    /// Called after a run that did not reach `collect` (spawn error, timeout, Ctrl-C):
    /// drop per-run state such as open counters.
    fn abort_run(&mut self) {}

    /// Warnings for the report, gathered once after the group's runs.
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// Notes for the report's metrics, gathered once after the group's runs: each
    /// `(prefix, note)` is attached to every metric of the benchmark whose id starts with
    /// `prefix` and is a per-run total (no `/` after the prefix, so not a `/op` metric),
    /// but not to a calibration twin (`time.op.empty` does not get the notes of `time.op`).
    /// For what a reader could otherwise misread, e.g. a total that covers only part of
    /// the run.
    fn metric_notes(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// `Some(n)` for an instrument that checks rather than measures (the drift check's
    /// count of the first operations): its group makes exactly `n` runs, without warm-up,
    /// whatever `--runs` says; it is left out of the report's runs per group, and a run
    /// that fails is the instrument's to report (it does not stop the plan). `None`, the
    /// default, for a measurement.
    fn check_runs(&self) -> Option<usize> {
        None
    }

    /// After the group's last run, also after an error: release what the instrument holds
    /// (probe definitions, temporary files). May be called more than once.
    fn finish(&mut self) {}

    /// Whether runs of its group may overlap (`--jobs`): what it measures is an exact
    /// count that no other process on the machine changes, and it keeps what it holds
    /// about a run in flight apart ([`Instrument::park`]). The default is no: a time, a
    /// sampled or a perf software count, which other runs beside it would change.
    fn overlaps(&self) -> bool {
        false
    }

    /// The run just started (prepared and attached) goes on in the background: take out
    /// what the instrument holds about it, so that it can prepare the next one. It gets
    /// it back ([`Instrument::resume`]) before that run's `collect` or `abort_run`. Only
    /// called on an instrument that [`overlaps`](Instrument::overlaps).
    fn park(&mut self) -> InFlight {
        InFlight::none()
    }

    /// Give back what [`Instrument::park`] took out of it for one run.
    fn resume(&mut self, _run: InFlight) {}
}

/// What an instrument holds about one run in flight ([`Instrument::park`]): its own
/// type, opaque to the runner, which only keeps it until the run ends.
pub struct InFlight(Option<Box<dyn std::any::Any>>);

impl InFlight {
    /// Nothing held.
    pub fn none() -> Self {
        InFlight(None)
    }

    /// Hold `state` for the run.
    pub fn new<T: 'static>(state: T) -> Self {
        InFlight(Some(Box::new(state)))
    }

    /// The state held, as the instrument that parked it put it in; `None` if it held
    /// nothing (or another type, which would be a bug of that instrument).
    pub fn take<T: 'static>(self) -> Option<T> {
        self.0.and_then(|b| b.downcast::<T>().ok()).map(|b| *b)
    }
}

/// A set of instruments that share a series of runs.
pub struct Group {
    /// `timing`, `invocations`, `alloc`, `memory`, `counters`...
    pub name: String,
    /// The instruments measured together in each run of this group.
    pub instruments: Vec<Box<dyn Instrument>>,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.instruments.iter().map(|i| i.name()).collect();
        f.debug_struct("Group")
            .field("name", &self.name)
            .field("instruments", &names)
            .finish()
    }
}
