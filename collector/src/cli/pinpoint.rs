//! `sbs-profile pinpoint`: the command line of the search in [`crate::pinpoint`], and the
//! writing of its report.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::args::parse_confidence;
use crate::judge::compare::Thresholds;
use crate::output::{refuse_read_files, refuse_same_files, Output, Unwritten};
use crate::pinpoint::search::Strategy;
use crate::pinpoint::{pinpoint, Metric, PinpointRequest, Runs};
use crate::run::runner::Cancel;
use sbs_reports::pinpoint::{self as render, PinpointReport};

/// `--metric` of pinpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MetricArg {
    /// Instructions executed, inclusive (valgrind callgrind; exact).
    Instructions,
    /// Heap blocks allocated, inclusive (valgrind DHAT; exact).
    Alloc,
    /// Heap bytes allocated, inclusive (valgrind DHAT; exact).
    AllocBytes,
    /// CPU time, inclusive (user call stacks sampled on the cpu-clock software event;
    /// measured, judged on the pairs of runs of the two builds, which run alternately).
    Time,
}

/// `--strategy`: how a layer's call list is narrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StrategyArg {
    /// Halve the list and descend into the half that got worse (SBS's BinaryFind).
    Binary,
    /// Try each call in order (SBS's LinearFind).
    Linear,
}

/// `--format` of pinpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PinpointFormat {
    /// The chain as an indented tree.
    Text,
    /// `{"schema_version": 1, "pinpoint": {"metric", "chain", "bottleneck", "stopped", ...}}`.
    Json,
    /// A table for a pull-request comment.
    Markdown,
}

/// Options of `sbs-profile pinpoint`.
#[derive(Debug, Args)]
#[command(
    after_help = "Both builds run with the same arguments, environment and working directory, \
alternately, --runs times each: under valgrind (instructions, alloc, alloc-bytes), or under a \
stack sampler (time). Without --runs, counts are taken from one run per build when a second \
run of the previous build gives the same counts, from 3 per build when it does not.\n\n\
Example: sbs-profile pinpoint --previous ./old -- ./new --size 1000\n\n\
Exit codes: 0 the inspected function did not get worse, 1 it did (a chain was found), 2 error \
or undecided (time: too few samples to tell), 130 interrupted."
)]
pub struct PinpointArgs {
    /// The previous build (the reference).
    #[arg(long, value_name = "OLD_EXE")]
    pub previous: PathBuf,

    /// The function to inspect (default: the user's `main`; for Rust `crate::main`).
    #[arg(long, value_name = "NAME")]
    pub function: Option<String>,

    /// What to count.
    #[arg(long, value_enum, default_value_t = MetricArg::Instructions)]
    pub metric: MetricArg,

    /// Layers below the inspected function the search may reach (default: unlimited; 0
    /// judges the inspected function alone and digs no layer).
    #[arg(long, value_name = "D")]
    pub depth: Option<usize>,

    /// Functions not to dig into (repeatable; names as for --invocations).
    #[arg(long, value_name = "PATTERN")]
    pub ignore: Vec<String>,

    /// Runs per build (default: 10 for time, at least 2; for the counts, 1 when a second
    /// run of the previous build repeats its counts exactly, else 3).
    #[arg(short = 'r', long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub runs: Option<u64>,

    /// Practical threshold: a change within it is not a bottleneck (`PCT`, or `+N` in
    /// the metric's unit; repeatable).
    #[arg(long, value_name = "PCT|+N")]
    pub threshold: Vec<String>,

    /// Confidence level of the intervals, as a percentage or a fraction.
    #[arg(long, value_name = "LEVEL", default_value = "95", value_parser = parse_confidence)]
    pub confidence: f64,

    /// How each layer's call list is narrowed.
    #[arg(long, value_enum, default_value_t = StrategyArg::Binary)]
    pub strategy: StrategyArg,

    /// Report format.
    #[arg(short = 'f', long, value_enum, default_value_t = PinpointFormat::Text)]
    pub format: PinpointFormat,

    /// Write the report to FILE (atomically) instead of stdout.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Also write an HTML page of the chain (a bar per layer) to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,

    /// The current build and the arguments both builds run with.
    #[arg(last = true, required = true, value_name = "NEW_EXE [ARGS]")]
    pub command: Vec<OsString>,
}

impl PinpointArgs {
    fn request(&self) -> anyhow::Result<PinpointRequest> {
        let Some((current, args)) = self.command.split_first() else {
            anyhow::bail!("no current build given; usage: sbs-profile pinpoint --previous OLD -- NEW [ARGS...]");
        };
        Ok(PinpointRequest {
            previous: self.previous.clone(),
            current: PathBuf::from(current),
            args: args.to_vec(),
            function: self.function.clone(),
            metric: match self.metric {
                MetricArg::Instructions => Metric::Instructions,
                MetricArg::Alloc => Metric::Alloc,
                MetricArg::AllocBytes => Metric::AllocBytes,
                MetricArg::Time => Metric::Time,
            },
            depth: self.depth,
            ignore: self.ignore.clone(),
            runs: match (self.runs, self.metric) {
                (Some(n), _) => Runs::Fixed(usize::try_from(n).unwrap_or(usize::MAX)),
                (None, MetricArg::Time) => Runs::Fixed(10),
                (None, _) => Runs::UnlessRepeated(3),
            },
            thresholds: Thresholds::from_args(&self.threshold)?,
            strategy: match self.strategy {
                StrategyArg::Binary => Strategy::Binary,
                StrategyArg::Linear => Strategy::Linear,
            },
            confidence: self.confidence,
            sampling: sbs_probes::sample::SampleConfig::default(),
        })
    }
}

/// Carry out `pinpoint`: 1 when the inspected function got worse, 0 when it did not, an
/// error (exit 2) when that could not be decided; the report is written in every case.
pub fn execute(args: &PinpointArgs) -> anyhow::Result<ExitCode> {
    let request = args.request()?;
    // Destinations are checked before any run.
    let named: Vec<(&str, &std::path::Path)> = [("--output", &args.output), ("--html", &args.html)]
        .into_iter()
        .filter_map(|(option, path)| path.as_deref().map(|p| (option, p)))
        .collect();
    refuse_same_files(&named)?;
    refuse_read_files(
        &named,
        &[
            ("the previous build", request.previous.as_path()),
            ("the current build", request.current.as_path()),
        ],
    )?;
    let output = Output::open(args.output.as_deref())?;
    let html = match &args.html {
        Some(path) => Some(Output::open_named(path, "--html")?),
        None => None,
    };
    // Installed for the whole command, as for a run: once caught, a signal ends the run
    // under way (its process group killed, the temporary files removed) and exits 130.
    let cancel = Cancel::install()
        .context("cannot install the handlers of Ctrl-C, SIGTERM, SIGHUP and SIGQUIT")?;
    let report = pinpoint(&request, &cancel)?;
    let p = &report.pinpoint;
    {
        let mut err = std::io::stderr().lock();
        for w in &p.warnings {
            let _ = writeln!(err, "warning: {w}");
        }
    }
    write(&report, args.format, output, html)?;
    if p.is_undecided() {
        // The report says what was measured; the exit code must not say "nothing got
        // worse", which was not shown.
        anyhow::bail!("undecided, no verdict: {}", p.stopped);
    }
    Ok(match &p.bottleneck {
        Some(b) => {
            let _ = writeln!(
                std::io::stderr().lock(),
                "regression: {} got worse; bottleneck: {b}",
                p.function
            );
            ExitCode::from(1)
        }
        None => ExitCode::SUCCESS,
    })
}

/// Write the report to its destinations, each that can be: a report file that cannot be
/// written is replaced by the text report on stdout, and its error says so.
fn write(
    report: &PinpointReport,
    format: PinpointFormat,
    output: Output,
    html: Option<Output>,
) -> Result<(), Unwritten> {
    let mut failures = Vec::new();
    let mut bytes = Vec::new();
    let rendered = match format {
        PinpointFormat::Text => render::text(report, &mut bytes),
        PinpointFormat::Json => render::json(report, &mut bytes),
        PinpointFormat::Markdown => render::markdown(report, &mut bytes),
    };
    let path = output.path().map(std::path::Path::to_path_buf);
    if let Err(e) = rendered
        .context("cannot render the report")
        .and_then(|()| Ok(output.write_all(&bytes)?))
    {
        failures.push(match path {
            Some(path) => {
                let mut text = Vec::new();
                let printed = render::text(report, &mut text)
                    .context("cannot render the report")
                    .and_then(|()| Ok(Output::Stdout.write_all(&text)?));
                let instead = match printed {
                    Ok(()) => "the report is on stdout instead".to_string(),
                    Err(p) => format!("nor could the report be printed ({p:#})"),
                };
                anyhow::anyhow!(
                    "cannot write the report to {}: {e:#}; {instead}; free space there or \
                     choose another --output",
                    path.display()
                )
            }
            None => anyhow::anyhow!("cannot write the report to stdout: {e:#}"),
        });
    }
    if let Some(html) = html {
        let mut page = Vec::new();
        let written = render::html(report, &mut page)
            .context("cannot render the HTML page")
            .and_then(|()| Ok(html.write_all(&page)?));
        if let Err(e) = written {
            failures.push(anyhow::anyhow!(
                "cannot write the HTML page: {e:#}; free space there or choose another --html"
            ));
        }
    }
    match failures.is_empty() {
        true => Ok(()),
        false => Err(Unwritten { failures }),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::super::{Cli, Subcommand};
    use super::*;

    #[test]
    fn the_current_build_and_its_arguments_follow_the_double_dash() {
        let cli = Cli::try_parse_from([
            "sbs-profile",
            "pinpoint",
            "--previous",
            "./old",
            "--ignore",
            "a",
            "--ignore",
            "b",
            "--depth",
            "2",
            "--",
            "./new",
            "--runs",
            "9",
        ])
        .unwrap();
        let Some(Subcommand::Pinpoint(args)) = cli.subcommand else {
            panic!("expected pinpoint");
        };
        let request = args.request().unwrap();
        assert_eq!(request.current, PathBuf::from("./new"));
        assert_eq!(request.args, ["--runs", "9"]);
        assert_eq!(request.ignore, ["a", "b"]);
        assert_eq!(
            (request.depth, request.runs),
            (Some(2), Runs::UnlessRepeated(3))
        );
        assert_eq!(request.metric, Metric::Instructions);
        assert!(Cli::try_parse_from(["sbs-profile", "pinpoint", "--previous", "./old"]).is_err());
        assert!(Cli::try_parse_from([
            "sbs-profile",
            "pinpoint",
            "--previous",
            "o",
            "--runs",
            "0",
            "--",
            "n"
        ])
        .is_err());
    }
}
