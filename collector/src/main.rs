//! `sbs-profile`: parse options, build the plan, run it, render the report.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use sbs_profile::cli::{build_plan, Cli, OutputArgs, Subcommand};
use sbs_profile::judge::regression::{build_compare_plan, Mode, Regression};
use sbs_profile::output::Output;
use sbs_profile::plan::Format;
use sbs_profile::run::runner::{Cancel, RunError};
use sbs_profile::run::scheduler::execute;
use sbs_reports::Render;

fn renderer(format: Format, to_terminal: bool) -> Box<dyn Render> {
    match format {
        Format::Text => Box::new(sbs_reports::text::Text {
            // Colour only on a terminal, and never with NO_COLOR (https://no-color.org).
            color: to_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }),
        Format::Markdown => Box::new(sbs_reports::markdown::Markdown),
        Format::Json => Box::new(sbs_reports::json::Json),
        Format::Csv => Box::new(sbs_reports::csv::Csv),
        Format::Bmf => Box::new(sbs_reports::bmf::Bmf),
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if cli.run.list_counters {
        let table = sbs_profile::plan::counters::list_counters();
        std::io::stdout()
            .write_all(table.as_bytes())
            .context("cannot write the counter list")?;
        return Ok(ExitCode::SUCCESS);
    }
    if cli.run.list {
        let (exe, filters) = sbs_profile::cli::harness_target(&cli.run)?;
        let mut text = String::new();
        for l in sbs_profile::plan::bench_binary::list(&exe, &filters)? {
            text.push_str(&l.name);
            if !l.params.is_empty() {
                text.push_str(&format!("  ({})", l.params));
            }
            text.push('\n');
        }
        std::io::stdout()
            .write_all(text.as_bytes())
            .context("cannot write the benchmark list")?;
        return Ok(ExitCode::SUCCESS);
    }
    let (args, mode) = match cli.subcommand {
        Some(Subcommand::Compare(args)) => (*args, Mode::Compare),
        Some(Subcommand::Report(args)) => return report_from_history(&args),
        None => (cli.run, Mode::Run),
    };
    let regression_args = args.regression.clone();
    let mut plan = match mode {
        Mode::Compare => build_compare_plan(args)?,
        Mode::Run => build_plan(args)?,
    };
    let regression = Regression::new(&regression_args, plan.confidence, mode)?;
    // Read the history first: a missing baseline or a corrupt file fails before the runs.
    let names: Vec<String> = plan.benchmarks.iter().map(|b| b.name.clone()).collect();
    let references = regression.load(&names)?;
    // Open the destinations first: an unwritable path fails before minutes of runs.
    let sinks = Sinks::open(&plan.report)?;
    let cancel = Cancel::install().context("cannot install the Ctrl-C handler")?;
    let mut report = execute(&mut plan, &cancel)?;
    let regressions = regression.apply(&references, &mut report)?;
    sinks.write(&report)?;
    // After the report is out: a history that cannot be written loses no measurements.
    regression.save(&report)?;
    Ok(exit_for(&regressions))
}

/// Where a finished report goes: the main output in its format, and the HTML page.
struct Sinks {
    output: Output,
    html: Option<Output>,
    format: Format,
    to_stdout: bool,
}

impl Sinks {
    fn open(args: &OutputArgs) -> anyhow::Result<Sinks> {
        Ok(Sinks {
            output: Output::open(args.output.as_deref())?,
            html: args
                .html
                .as_deref()
                .map(|p| Output::open_named(p, "--html"))
                .transpose()?,
            format: args.format,
            to_stdout: args.output.is_none(),
        })
    }

    fn write(self, report: &sbs_reports::model::Report) -> anyhow::Result<()> {
        let mut buf = Vec::new();
        let to_terminal = self.to_stdout && std::io::stdout().is_terminal();
        renderer(self.format, to_terminal)
            .render(report, &mut buf)
            .context("cannot render the report")?;
        if let Some(html) = self.html {
            let mut page = Vec::new();
            sbs_reports::html::Html
                .render(report, &mut page)
                .context("cannot render the HTML page")?;
            html.write_all(&page)?;
        }
        self.output.write_all(&buf)
    }
}

fn exit_for(regressions: &[sbs_profile::judge::regression::Regressed]) -> ExitCode {
    if regressions.is_empty() {
        return ExitCode::SUCCESS;
    }
    let mut err = std::io::stderr().lock();
    for r in regressions {
        let _ = writeln!(err, "regression: {r}");
    }
    ExitCode::from(1)
}

fn report_from_history(args: &sbs_profile::cli::report::ReportArgs) -> anyhow::Result<ExitCode> {
    let sinks = Sinks::open(&args.report)?;
    let (report, regressions) = sbs_profile::cli::report::build(args)?;
    sinks.write(&report)?;
    Ok(exit_for(&regressions))
}

/// The error and its causes on one line, each cause once: many errors already quote
/// their cause in their own message.
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out.replace('\n', " ")
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
            let _ = writeln!(std::io::stderr(), "error: {}", one_line(&e));
            ExitCode::from(2)
        }
    }
}
