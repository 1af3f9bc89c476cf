//! sbs-profile's collector, in layers that only import downwards:
//!
//! - [`cli`]: the command line (clap) and one module per subcommand; it turns arguments
//!   into the plain values below and is the only layer that knows clap.
//! - [`plan`]: the validated request: benchmarks, their groups of runs, the controls.
//! - [`run`]: the scheduler, the child-process runner and the instruments.
//! - [`judge`]: summaries, comparisons, thresholds and verdicts, and the regression gate
//!   against saved history.
//! - [`history`]: the saved runs and baselines on disk.
//! - [`output`]: where a finished report goes.
pub mod check;
pub mod cli;
pub mod history;
pub mod judge;
pub mod output;
pub mod pinpoint;
pub mod plan;
pub mod run;
