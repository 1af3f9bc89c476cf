//! The result model: what a run of sbs-profile produced, ready to render.
//!
//! These types are the JSON schema (see `docs/schema.md`); they are born here because
//! every renderer and every consumer of the JSON reads them, and the collector fills them.
//! `SCHEMA_VERSION` changes only on incompatible changes.

use serde::{Deserialize, Serialize};

/// Version of the JSON report schema.
pub const SCHEMA_VERSION: u32 = 1;

/// The unit a metric's values are expressed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// Seconds (times).
    Seconds,
    /// Bytes (sizes, footprints).
    Bytes,
    /// A plain count (invocations, allocations, events).
    Count,
}

impl Unit {
    /// The short name used in tables and CSV.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Seconds => "s",
            Unit::Bytes => "B",
            Unit::Count => "count",
        }
    }
}

/// Summary statistics of one metric's samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (n - 1 denominator); 0 for a single sample.
    pub sd: f64,
    /// Coefficient of variation, `sd / |mean|`; `None` when the mean is 0 and sd is not.
    pub cov: Option<f64>,
    /// Median.
    pub median: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Lower bound of the confidence interval for the mean; `None` with fewer than 2 samples.
    pub ci_low: Option<f64>,
    /// Upper bound of the confidence interval for the mean; `None` with fewer than 2 samples.
    pub ci_high: Option<f64>,
    /// Confidence level of the interval, e.g. 0.95.
    pub confidence: f64,
}

impl Summary {
    /// Half the interval's width relative to the mean (e.g. 0.01 for "mean ± 1%").
    pub fn relative_ci_half_width(&self) -> Option<f64> {
        let (lo, hi) = (self.ci_low?, self.ci_high?);
        let half = (hi - lo) / 2.0;
        if half == 0.0 {
            Some(0.0)
        } else if self.mean == 0.0 {
            None
        } else {
            Some(half / self.mean.abs())
        }
    }
}

/// One line of a metric's breakdown (e.g. one probed symbol of an invocation pattern).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Detail {
    /// What this line counts (a demangled symbol name, a process id...).
    pub label: String,
    /// Raw values, one per run, aligned with the metric's samples.
    pub samples: Vec<f64>,
    /// Summary of `samples`.
    pub summary: Summary,
}

/// One metric of one benchmark: raw samples and their summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricResult {
    /// Stable id such as `time.wall`, `alloc.count`, `invocations.Vec::push`.
    pub id: String,
    /// Unit of the samples.
    pub unit: Unit,
    /// The mechanism that produced the numbers (`rusage`, `uprobe`, `agent`, `perf-sw`,
    /// `perf-hw`, `valgrind`...). Series from different sources are never compared.
    pub source: String,
    /// Whether the metric is an exact count (repeatable) rather than a measurement.
    pub exact: bool,
    /// The group of runs that measured it (`timing`, `invocations`...).
    pub group: String,
    /// Raw values, one per measured run.
    pub samples: Vec<f64>,
    /// Summary statistics of `samples`.
    pub summary: Summary,
    /// Optional breakdown (per symbol, per process...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<Detail>,
    /// Notes about how the numbers were obtained (scaling, controls, caveats).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// All metrics of one benchmark (one command).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkResult {
    /// Display name of the benchmark (by default, the command line).
    pub name: String,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Metrics in the order they were measured.
    pub metrics: Vec<MetricResult>,
    /// Warnings worth a reader's attention (e.g. inlined instances not counted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Conditions the runs were measured under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conditions {
    /// Measured runs per group.
    pub runs: usize,
    /// Discarded warm-up runs per group.
    pub warmup: usize,
    /// Whether address-space randomisation was disabled in the child.
    pub aslr_disabled: bool,
    /// CPUs the child was pinned to, if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pinned_cpus: Vec<usize>,
    /// Whether the child started from a clean environment.
    pub clean_env: bool,
}

/// A whole report: what one invocation of sbs-profile measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// See [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `sbs-profile` version that produced the report.
    pub tool_version: String,
    /// Measurement conditions.
    pub conditions: Conditions,
    /// One entry per benchmark.
    pub benchmarks: Vec<BenchmarkResult>,
}
