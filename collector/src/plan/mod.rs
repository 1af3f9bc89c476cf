//! The validated request: what to run, how often, under which controls, measuring what.
//! Built in one place (`cli.rs`); everything after it trusts it.

pub mod bench_binary;
pub mod counters;

use crate::run::instrument::Group;
use crate::run::runner::RunConfig;

/// One command to measure, with its groups of runs.
#[derive(Debug)]
pub struct Benchmark {
    /// Display name (by default the command line).
    pub name: String,
    /// How to start it.
    pub run: RunConfig,
    /// Groups of runs, in order; each its own series of child processes.
    pub groups: Vec<Group>,
}

/// What to do with a run whose child fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// A non-zero exit, a signal or a timeout aborts with an error.
    Fail,
    /// Keep the run's samples anyway.
    Ignore,
}

/// Where and how to write the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// An aligned table for people.
    Text,
    /// The JSON schema of `docs/schema.md`.
    Json,
    /// One row per metric.
    Csv,
    /// Bencher Metric Format JSON (bencher.dev, github-action-benchmark).
    Bmf,
    /// A Markdown table for pull-request comments.
    Markdown,
}

/// The whole validated request.
#[derive(Debug)]
pub struct Plan {
    /// The benchmarks; several are run interleaved (A B A B ...).
    pub benchmarks: Vec<Benchmark>,
    /// Measured runs per group.
    pub runs: usize,
    /// Discarded runs before each group's measured runs.
    pub warmup: usize,
    /// Confidence level of the intervals, in (0, 1).
    pub confidence: f64,
    /// What a failing child means.
    pub failure: FailurePolicy,
    /// Whether the child started from a clean environment.
    pub clean_env: bool,
    /// Report format and destinations.
    pub report: crate::cli::OutputArgs,
    /// Show a progress bar (stderr is a terminal).
    pub progress: bool,
}
