//! sbs-profile's collector, in layers that only import downwards (`tests/layers.rs`):
//!
//! - [`cli`]: the command line (clap) and one module per subcommand; it turns arguments
//!   into the plain values below and is the only layer that knows clap.
//! - `output`: where a finished report goes (stdout, files, atomically).
//! - `plan`: the validated request as data: benchmarks, their groups of runs and the
//!   instruments each carries, the controls; checked before anything heavy.
//! - `check`: `--invocations-check`, the counts against a debug build under callgrind.
//! - `pinpoint`: `sbs-profile pinpoint`, the search for the function that regressed.
//! - `run`: the instruments made from the plan, the scheduler, the child-process runner.
//! - `judge`: summaries, comparisons, thresholds and verdicts, the regression gate against
//!   saved history, the pitfall checks.
//! - `history`: the saved runs and baselines on disk.
//!
//! Only the command layer is public, with the few items the binary, the tests and the
//! benchmarks name; everything else is the crate's own, so an item nothing uses is a
//! warning.
pub(crate) mod check;
pub mod cli;
pub(crate) mod history;
pub(crate) mod judge;
pub(crate) mod output;
pub(crate) mod pinpoint;
pub(crate) mod plan;
pub(crate) mod run;

pub use output::Unwritten;
pub use run::runner::RunError;

/// The allocation agent's report files, read by the tests' own launcher.
pub mod alloc_reports {
    pub use crate::run::instruments::alloc::{ReportFile, Reports, Totals};
}

/// The regression gate and its confirmation rule, driven by the benchmarks' simulations.
pub mod gate {
    pub use crate::judge::compare::{Policy, Series};
    pub use crate::judge::confirm::decide;
    pub use crate::judge::regression::judge_against_history;
}
