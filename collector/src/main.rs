//! `sbs-profile`: parse options, build the plan, run it, render the report.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use sbs_collector::cli::{build_plan, Cli};
use sbs_collector::output::Output;
use sbs_collector::plan::Format;
use sbs_collector::runner::{Cancel, RunError};
use sbs_collector::scheduler::execute;
use sbs_reports::Render;

fn renderer(format: Format) -> Box<dyn Render> {
    match format {
        Format::Text => Box::new(sbs_reports::text::Text),
        Format::Json => Box::new(sbs_reports::json::Json),
        Format::Csv => Box::new(sbs_reports::csv::Csv),
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let mut plan = build_plan(cli.run)?;
    // Open the destination first: an unwritable path fails before minutes of runs.
    let output = Output::open(plan.output.as_deref())?;
    let cancel = Cancel::install().context("cannot install the Ctrl-C handler")?;
    let report = execute(&mut plan, &cancel)?;
    let mut buf = Vec::new();
    renderer(plan.format)
        .render(&report, &mut buf)
        .context("cannot render the report")?;
    output.write_all(&buf)?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            if e.chain()
                .any(|c| matches!(c.downcast_ref::<RunError>(), Some(RunError::Interrupted)))
            {
                eprintln!("sbs-profile: interrupted; the child was killed and nothing was written");
                return ExitCode::from(130);
            }
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            ExitCode::from(2)
        }
    }
}
