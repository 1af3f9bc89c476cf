//! What a user asks for, in plain values: the command line (or a test, or another front
//! end) fills a [`Request`] in and [`crate::plan::build`] validates it into a plan.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use super::counters::CounterOptions;
use super::FailurePolicy;
use crate::run::hooks::Hooks;

/// Everything a plan is built from.
#[derive(Debug, Clone)]
pub struct Request {
    /// What to run: one command, several (compared with the first), or the benchmarks of
    /// a harness binary. Every target's benchmarks join the plan in this order.
    pub targets: Vec<Target>,
    /// Which metric groups to measure.
    pub measures: Measures,
    /// How each run is started and how many there are.
    pub controls: Controls,
    /// A parameter to scan: every target runs once per value, each its own benchmark.
    pub scan: Option<ScanRequest>,
}

/// `-P NAME START END [-D STEP]` or `-L NAME A,B,C`, its values listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanRequest {
    /// The parameter: `{NAME}` in a command, `--param NAME=VALUE` for a harness.
    pub parameter: String,
    /// Its values, in order.
    pub values: Vec<String>,
}

/// Something to run.
#[derive(Debug, Clone)]
pub enum Target {
    /// A command: the program (found as `execvp` would) and its arguments.
    Command {
        /// argv, the program first.
        argv: Vec<OsString>,
        /// Name in reports; the command line when `None`.
        name: Option<String>,
    },
    /// Each benchmark of a binary built with sbs-harness, in its own child processes.
    Harness(HarnessTarget),
}

/// A binary built with sbs-harness and which of its benchmarks to measure.
#[derive(Debug, Clone)]
pub struct HarnessTarget {
    /// The binary.
    pub binary: HarnessBinary,
    /// Benchmark name filters (all benchmarks when empty).
    pub filters: Vec<OsString>,
    /// Parameter overrides, `KEY=VALUE`.
    pub params: Vec<String>,
    /// Measurements kept per timing process (also the steady-state window).
    pub samples: usize,
    /// Arguments passed to the binary as they are.
    pub harness_args: Vec<String>,
    /// `--replay`: the binary is an application whose captured calls are its benchmarks.
    pub replay: Option<super::replay::ReplaySource>,
}

impl HarnessTarget {
    /// Variables the binary needs in every run (its listing included): `--replay`'s
    /// captures directory.
    pub fn env(&self) -> Vec<(OsString, OsString)> {
        self.replay
            .iter()
            .map(|r| {
                (
                    sbs_agent_abi::harness::capture::ENV_REPLAY.into(),
                    r.dir.clone().into_os_string(),
                )
            })
            .collect()
    }
}

/// Where a harness binary comes from.
#[derive(Debug, Clone)]
pub enum HarnessBinary {
    /// A cargo bench target, built in release mode with debug info and symbols kept.
    Bench {
        /// The bench target's name.
        name: String,
        /// Further arguments to `cargo bench`.
        cargo_args: Vec<String>,
    },
    /// A binary already built, found as `execvp` would.
    Path(OsString),
}

/// The metric groups asked for.
#[derive(Debug, Clone, Default)]
pub struct Measures {
    /// Timing runs even when other groups are asked for.
    pub time: bool,
    /// Allocation counts (agent runs).
    pub alloc: bool,
    /// Allocation and heap numbers from the program's own counting allocator.
    pub alloc_harness: bool,
    /// `Box::new` counts (uprobes).
    pub boxing: bool,
    /// Footprint runs (no agent) and heap.peak.
    pub memory: bool,
    /// Sampled CPU time per function (stack samples).
    pub profile_time: bool,
    /// Function patterns whose calls are counted (uprobes).
    pub invocations: Vec<String>,
    /// One row per inlined site of the invocation counts.
    pub invocations_detail: bool,
    /// Without uprobes, count the sites the in-process engine can patch (a lower bound).
    pub invocations_partial: bool,
    /// Which engine counts invocations.
    pub invocations_engine: crate::run::instruments::invocations::Engine,
    /// Refuse a pattern that matches more functions than this.
    pub max_probes: usize,
    /// Perf counters and instruction counting (its `region` is set per benchmark).
    pub counters: CounterOptions,
    /// Harness: operations per counting run.
    pub ops: u64,
}

/// How runs are started and repeated.
#[derive(Debug, Clone)]
pub struct Controls {
    /// Measured runs per group.
    pub runs: usize,
    /// Discarded runs before each group's measured runs.
    pub warmup: usize,
    /// Confidence level of the intervals, in (0, 1).
    pub confidence: f64,
    /// What a failing child means.
    pub failure: FailurePolicy,
    /// Start the child from an empty environment plus [`crate::plan::CLEAN_PATH`].
    pub clean_env: bool,
    /// Environment variables set in the child, over the base environment.
    pub env: Vec<(OsString, OsString)>,
    /// CPUs to pin the child to (empty: no pinning).
    pub pin: Vec<usize>,
    /// Keep address-space layout randomisation on.
    pub aslr: bool,
    /// Kill a run's process group after this long.
    pub timeout: Option<Duration>,
    /// Show the child's stdout and stderr.
    pub show_output: bool,
    /// Show a progress bar.
    pub progress: bool,
    /// Runs in flight at once where counts allow (`--jobs`).
    pub jobs: usize,
    /// Commands run around the runs (`--setup`, `--prepare`, `--cleanup`).
    pub hooks: Hooks,
    /// A file the child reads as its stdin (`/dev/null` when `None`).
    pub input: Option<PathBuf>,
    /// Adaptive runs: from `runs` up to a maximum until the timing intervals are narrow.
    pub target: Option<crate::run::spec::TargetCi>,
}
