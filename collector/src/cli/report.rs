//! `sbs-profile report`: a report from the saved history, without running anything (the
//! work is [`crate::judge::from_history`]).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::args::{parse_confidence, OutputArgs};
use super::exit_for;
use crate::history;
use crate::judge::from_history;
use crate::output::Sinks;

/// Options of `sbs-profile report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Directory of the saved history.
    #[arg(long, value_name = "DIR", default_value = history::DEFAULT_DIR)]
    pub history: PathBuf,

    /// Only these benchmarks (repeatable; default: all in the history).
    #[arg(long, value_name = "NAME")]
    pub name: Vec<String>,

    /// Report format and destinations.
    #[command(flatten)]
    pub report: OutputArgs,

    /// Practical threshold(s) as for a run (`PCT`, `METRIC=PCT`, `PREFIX*=PCT`, `METRIC=+N`).
    #[arg(long, value_name = "[METRIC=]PCT|+N")]
    pub threshold: Vec<String>,

    /// Compare the latest entry with at most this many entries before it.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub history_depth: u64,

    /// Confidence level of the intervals, as a percentage or a fraction.
    #[arg(long, value_name = "LEVEL", default_value = "95", value_parser = parse_confidence)]
    pub confidence: f64,

    /// Judge times also where the latest entry or one it is compared with was measured on
    /// a busy machine (by default such a time is not judged and cannot fail).
    #[arg(long)]
    pub judge_busy: bool,
}

/// Render the report of the saved history.
pub(super) fn execute(args: &ReportArgs) -> anyhow::Result<ExitCode> {
    let sinks = Sinks::open(&args.report.destinations())?;
    let (report, regressions, notes) = from_history::build(&from_history::HistoryRequest {
        history: args.history.clone(),
        names: args.name.clone(),
        thresholds: args.threshold.clone(),
        depth: usize::try_from(args.history_depth).unwrap_or(usize::MAX),
        confidence: args.confidence,
        judge_busy: args.judge_busy,
    })?;
    for note in notes {
        eprintln!("sbs-profile: note: {note}");
    }
    let written = sinks.write(&report);
    let code = exit_for(&regressions);
    written?;
    Ok(code)
}
