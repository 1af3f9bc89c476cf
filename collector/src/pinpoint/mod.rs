//! `pinpoint`: from "it regressed" to the function that regressed (SBS, Nguyen 2011,
//! chapter 4, on native code).
//!
//! Both builds run alternately, `runs` times each: under valgrind, callgrind gives the
//! inclusive instruction count of every call site and every function, DHAT the
//! allocations of every stack; under the stack sampler ([`sampled`]), the samples give
//! the inclusive time of each. [`builds`] reads each build's call lists from its machine
//! code; [`search`] digs from the inspected function down, layer by layer, each "got
//! worse" decided by the judge's comparison (exact with the threshold for counts that do
//! not vary; for counts and times that do, the interval of the change over the pairs of
//! runs, run i of each build, made one after the other).
//!
//! This layer sits below the command layer and the output, above the runner and the
//! judge: it takes plain values and returns the report model.

pub mod builds;
pub mod costs;
mod cycles;
mod dhat;
mod measure;
mod names;
mod sampled;
pub mod search;
mod source;

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Context;
use sbs_probes::pattern::Pattern;
use sbs_probes::sample::SampleConfig;
use sbs_reports::pinpoint::{InsidePlace, Link, Pinpoint, PinpointReport, SamplingNote};

use crate::judge::compare::{Policy, Thresholds};
use crate::run::runner::Cancel;
use builds::{Build, Pair, Programs, Side};
use search::{Options, Strategy};

/// What is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Instructions executed (callgrind), inclusive.
    Instructions,
    /// Blocks allocated (DHAT), inclusive.
    Alloc,
    /// Bytes allocated (DHAT), inclusive.
    AllocBytes,
    /// CPU time, inclusive, from sampled user stacks.
    Time,
}

impl Metric {
    /// Its id, as `--threshold` and the report name it.
    pub fn id(self) -> &'static str {
        match self {
            Metric::Instructions => "instructions",
            Metric::Alloc => "alloc.count",
            Metric::AllocBytes => "alloc.bytes",
            Metric::Time => "time",
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Metric::Instructions => "instructions",
            Metric::Alloc => "blocks",
            Metric::AllocBytes => "bytes",
            Metric::Time => "ms",
        }
    }

    fn source(self) -> &'static str {
        match self {
            Metric::Instructions => "valgrind callgrind",
            Metric::Alloc | Metric::AllocBytes => "valgrind dhat",
            Metric::Time => "perf cpu-clock stack samples",
        }
    }

    /// Whether the values are counts that repeat exactly (valgrind) rather than times.
    fn exact(self) -> bool {
        self != Metric::Time
    }
}

/// A pinpoint request, in plain values.
#[derive(Debug, Clone)]
pub struct PinpointRequest {
    /// The previous build.
    pub previous: PathBuf,
    /// The current build.
    pub current: PathBuf,
    /// The arguments both run with.
    pub args: Vec<OsString>,
    /// `--function` (the user's `main` when `None`).
    pub function: Option<String>,
    /// What is counted.
    pub metric: Metric,
    /// `--depth`.
    pub depth: Option<usize>,
    /// `--ignore` patterns.
    pub ignore: Vec<String>,
    /// Runs per build.
    pub runs: Runs,
    /// `--threshold` arguments.
    pub thresholds: Thresholds,
    /// How call lists are narrowed.
    pub strategy: Strategy,
    /// Confidence level of the intervals.
    pub confidence: f64,
    /// How `--metric time` samples.
    pub sampling: SampleConfig,
}

/// How many runs each build gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runs {
    /// Exactly this many (`--runs`, or the default for time).
    Fixed(usize),
    /// For counts, by default: one run of each build, then a second run of the previous
    /// build. When it repeats the first's counts exactly, the counts do not vary between
    /// runs and one run per build is compared (exactly); when it does not, this many runs
    /// per build are made and compared in pairs.
    UnlessRepeated(usize),
}

impl Runs {
    /// The most runs per build this can make.
    pub fn most(self) -> usize {
        match self {
            Runs::Fixed(n) | Runs::UnlessRepeated(n) => n,
        }
    }
}

/// The fewest runs per build that can decide whether a time got worse: the interval
/// needs the spread of the pairs of runs, which one pair does not have.
pub const MIN_TIME_RUNS: usize = 2;

/// Run both builds, dig, and return the report. A signal caught by `cancel` kills the
/// run under way and ends with [`crate::run::runner::RunError::Interrupted`], once every
/// child is gone and the temporary files are removed.
pub fn pinpoint(request: &PinpointRequest, cancel: &Cancel) -> anyhow::Result<PinpointReport> {
    if request.runs.most() == 0 {
        anyhow::bail!("--runs must be at least 1");
    }
    // Refused before any work: with one run a build, every comparison of a time would be
    // inconclusive, and the search could only end undecided.
    if !request.metric.exact() && request.runs.most() < MIN_TIME_RUNS {
        anyhow::bail!(
            "--metric time needs at least {MIN_TIME_RUNS} runs per build to decide whether a \
             time got worse (one run has no spread to judge a change by), got --runs {}: give \
             --runs {MIN_TIME_RUNS} or more (10 by default)",
            request.runs.most()
        );
    }
    let mut previous = Build::load(Side::Previous, &request.previous)?;
    let mut current = Build::load(Side::Current, &request.current)?;
    let ignore = request
        .ignore
        .iter()
        .map(|p| Pattern::parse(p).with_context(|| format!("--ignore `{p}`")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let f_previous = previous.find(request.function.as_deref())?.clone();
    let f_current = current.find(request.function.as_deref())?.clone();
    let name = current.label_at(f_current.address);
    let measured = measure_builds(request, &mut previous, &mut current, cancel)?;
    let (outputs, sampling) = (&measured.outputs, measured.sampling.clone());
    let runs = previous.runs.len();
    let mut warnings = Vec::new();
    if outputs[0] != outputs[1] {
        warnings.push(
            "the two builds printed different output: they may not run the same work".to_string(),
        );
    }
    let exact = request.metric.exact();
    let policy = Policy {
        confidence: request.confidence,
        threshold: request.thresholds.for_metric(request.metric.id()),
        threshold_absolute: request.thresholds.absolute_for_metric(request.metric.id()),
        exact,
        // A sampled time is a whole number of periods.
        resolution: if exact {
            0.0
        } else {
            request.sampling.period_ns as f64 / 1e6
        },
    };
    let options = Options {
        depth: request.depth,
        ignore,
        strategy: request.strategy,
        policy,
    };
    let programs = Programs::new(previous, current);
    let inspected = Pair::inspected(name.clone(), f_previous.address, f_current.address);
    let outcome = search::dig(&programs, &inspected, &options)?;
    let measured = Measured {
        sampling,
        ..measured
    };
    Ok(report(request, name, outcome, warnings, runs, measured))
}

/// What each build printed on its first run.
type Outputs = [Option<Vec<u8>>; 2];

/// What running the builds gave besides their costs.
struct Measured {
    /// Each build's output (of its first run).
    outputs: Outputs,
    /// For sampled time, what the sampling saw.
    sampling: Option<SamplingNote>,
    /// For [`Runs::UnlessRepeated`]: whether the second run of the previous build
    /// repeated its first's counts exactly.
    repeated: Option<bool>,
}

/// Run both builds alternately, as many times as `request.runs` says, and give each its
/// runs' costs.
fn measure_builds(
    request: &PinpointRequest,
    previous: &mut Build,
    current: &mut Build,
    cancel: &Cancel,
) -> anyhow::Result<Measured> {
    // As for a run: what a build leaves behind out of its process group comes back to us,
    // to be killed after its run.
    crate::run::runner::adopt_orphans()
        .context("cannot become the subreaper of the builds' processes (prctl)")?;
    if request.metric == Metric::Time {
        let (note, outputs) = sampled::run_builds(
            [previous, current],
            &request.args,
            request.runs.most(),
            request.sampling,
            cancel,
        )?;
        return Ok(Measured {
            outputs,
            sampling: Some(note),
            repeated: None,
        });
    }
    let (outputs, repeated) = measure::run_builds(request, [previous, current], cancel)?;
    Ok(Measured {
        outputs,
        sampling: None,
        repeated,
    })
}

/// The report of a search.
fn report(
    request: &PinpointRequest,
    name: String,
    outcome: search::Outcome,
    warnings: Vec<String>,
    runs: usize,
    measured: Measured,
) -> PinpointReport {
    let total_change = outcome.chain.first().map(|l| search::delta(&l.samples));
    let chain = outcome
        .chain
        .iter()
        .map(|l| link(l, request.confidence))
        .collect();
    PinpointReport::new(Pinpoint {
        metric: request.metric.id().to_string(),
        unit: request.metric.unit().to_string(),
        source: request.metric.source().to_string(),
        previous: request.previous.display().to_string(),
        current: request.current.display().to_string(),
        args: request
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        function: name,
        runs,
        repeated: measured.repeated,
        strategy: match request.strategy {
            Strategy::Binary => "binary",
            Strategy::Linear => "linear",
        }
        .to_string(),
        chain,
        bottleneck: outcome.bottleneck,
        bottleneck_share_percent: outcome.bottleneck_share.map(|s| s * 100.0),
        inside: outcome
            .inside
            .iter()
            .map(|p| InsidePlace {
                what: p.what.clone(),
                previous: p.previous,
                current: p.current,
                share_percent: total_change
                    .filter(|t| *t != 0.0)
                    .map(|t| (p.current - p.previous) / t * 100.0),
            })
            .collect(),
        stopped: outcome.stopped.to_string(),
        stop: outcome.stopped.code().to_string(),
        comparisons: outcome.comparisons,
        warnings,
        undecided: outcome.undecided,
        sampling: measured.sampling,
    })
}

/// A link of the report: the comparison, and for measured values the interval of each
/// mean and the samples behind them.
fn link(l: &search::Link, confidence: f64) -> Link {
    let runs = l.samples.current.len().min(l.samples.previous.len());
    let mut link = Link::new(
        l.function.clone(),
        l.depth,
        l.external,
        runs,
        l.comparison.clone(),
    )
    .with_context(l.cycle.clone(), l.share, l.note.clone());
    // The current build's mean over its runs: a change judged on the pairs of runs is the
    // mean of their log ratios, which the difference of the two means need not equal.
    if let Some(m) = crate::judge::compare::Moments::of(&l.samples.current) {
        link.current = m.mean;
    }
    let Some(hits) = l.samples.hits else {
        return link;
    };
    let interval = |v: &[f64]| {
        let s = crate::judge::summary::summarize(v, confidence);
        s.ci_low.zip(s.ci_high).map(|(lo, hi)| [lo, hi])
    };
    link.with_means(
        interval(&l.samples.previous),
        interval(&l.samples.current),
        Some(hits),
    )
}
