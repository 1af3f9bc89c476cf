//! The validated request: what to run, how often, under which controls, measuring what.
//! Built in one place ([`build`], from a [`Request`] of plain values that the command
//! line fills in); everything after it trusts it.

pub mod bench_binary;
mod build;
pub mod counters;
mod groups;
pub mod replay;
mod request;

pub use crate::run::spec::BenchmarkSpec;
pub use crate::run::spec::{FailurePolicy, Point, Schedule};
pub use build::{build, resolve_program, MAX_RUNS};
pub(crate) use groups::metrics;
pub use request::{Controls, HarnessBinary, HarnessTarget, Measures, Request, ScanRequest, Target};

/// The whole validated request, as data: what each benchmark's runs will carry, not the
/// instruments themselves ([`crate::run::spec::instantiate`] makes them).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The benchmarks; several are run interleaved (A B A B ...).
    pub benchmarks: Vec<BenchmarkSpec>,
    /// How often each group runs, and what a failing child means.
    pub schedule: Schedule,
}
