//! The command layer: the command line (clap derive), one module per subcommand, and the
//! conversion of arguments into the plain values the layers below take. It is the only
//! part of the collector that knows clap.
//!
//! - a plain run (`sbs-profile [OPTIONS] -- COMMAND`) and `compare`: [`run`], with the
//!   commands of `compare` split in [`compare`];
//! - `report`: [`report`];
//! - `pinpoint`: [`pinpoint`] (the search itself is [`crate::pinpoint`]);
//! - `capture`: [`capture`] (`--replay` is a plain run's, through [`crate::plan::replay`]);
//! - `completions` and `man`: [`completions`], [`man`];
//! - the options they share and their conversion: [`args`]; the values of a parameter
//!   scan: [`scan`].

pub mod args;
pub mod capture;
mod compare;
mod completions;
pub mod help;
pub mod man;
pub mod pinpoint;
pub mod report;
mod run;
mod scan;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use crate::judge::regression::{Mode, Regressed};
use crate::plan::{bench_binary, HarnessBinary, HarnessTarget, Target};

pub use args::{OutputArgs, RunArgs};

/// Count what a stopwatch cannot: invocations, allocations, footprint, instructions, time.
#[derive(Debug, Parser)]
#[command(
    name = "sbs-profile",
    version,
    about,
    after_help = "Exit codes: 0 success, 1 regression, 2 error, 130 interrupted. \
All options: --help; the manual: sbs-profile man.",
    after_long_help = "Each metric group runs in its own series of fresh child processes, so timing \
is never measured in a run that carries an agent, a probe or a counter.\n\n\
Examples:\n  sbs-profile -- ./target/release/mybench\n  \
sbs-profile --runs 20 --format json --output result.json -- ./mybench --size 1000\n\n\
Exit codes: 0 success, 1 a metric regressed past its threshold (also with --strict and \
warnings), 2 error (it comes before 1; the regressions are still named), 130 interrupted."
)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// `compare`, or none for a plain run.
    #[command(subcommand)]
    pub subcommand: Option<Subcommand>,

    /// What to run and measure.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Subcommand {
    /// Compare two or more commands, run interleaved
    ///
    /// The commands run interleaved (A B A B ...) so drift hits all alike, and every metric of B, C... gets a verdict against A's, judged on the pairs
    /// of runs of each round (a paired t interval of the log ratios; an ANOVA as context
    /// for three or more).
    #[command(
        mut_arg("command", |a| a
            .value_name("COMMANDS")
            .help("Two or more commands, each one quoted argument (split into words; no shell unless --shell)")),
        after_help = "Each COMMAND is one argument, split into words as a shell would (no shell \
runs it): sbs-profile compare './old --n 100' './new --n 100'\n\n\
Exit codes: 0 no regression, 1 a later command regressed past its threshold against the first \
(also with --strict and warnings), 2 error (it comes before 1; the regressions are still named), 130 interrupted."
    )]
    Compare(Box<RunArgs>),
    /// Report from the saved history, without running anything
    ///
    /// Per benchmark,
    /// its latest entry compared with the ones before, and every metric's trend over the
    /// history (in the JSON report and the HTML page).
    Report(Box<report::ReportArgs>),
    /// Print a completion script for SHELL
    ///
    /// On stdout, e.g. `sbs-profile completions bash >
    /// ~/.local/share/bash-completion/completions/sbs-profile`.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Show the manual page (through `man` on a terminal)
    ///
    /// On a terminal the page is shown through `man -l -` (or `less`); into a pipe or a
    /// file it is printed as roff, e.g. `sbs-profile man >
    /// ~/.local/share/man/man1/sbs-profile.1`. `sbs-profile man pinpoint` shows a
    /// subcommand's page; `--dir DIR` writes them all.
    Man(man::ManArgs),
    /// Find the code where a regression is
    ///
    /// Dig from a function of two builds (previous and
    /// current) down the call tree, layer by layer, to the smallest piece of code whose
    /// instruction count (or allocations, or CPU time) got worse (SBS's DiggingFind and
    /// BinaryFind).
    Pinpoint(Box<pinpoint::PinpointArgs>),
    /// Record the calls of an application's marked functions, to replay as benchmarks
    ///
    /// Run an application once as it runs alone (its output and exit code pass through)
    /// and record the calls of its functions marked #[sbs_harness::capture]: up to N per
    /// function, chosen across the whole run, each with its in-situ allocations, into
    /// ./sbs-captures/ (one directory per function). `--replay PATTERN -- PROGRAM` then
    /// measures them.
    Capture(Box<capture::CaptureArgs>),
    /// List the bench targets of the cargo workspace here, for the completion of --bench.
    #[command(name = "bench-targets", hide = true)]
    BenchTargets,
}

/// Carry out what the command line asks for; the exit code on success.
pub fn execute(cli: Cli) -> anyhow::Result<ExitCode> {
    if cli.run.list_counters {
        let table = crate::plan::counters::list_counters();
        std::io::stdout()
            .write_all(table.as_bytes())
            .context("cannot write the counter list")?;
        return Ok(ExitCode::SUCCESS);
    }
    if cli.run.list {
        return list_benchmarks(&cli.run);
    }
    match cli.subcommand {
        Some(Subcommand::Compare(args)) => {
            let targets = compare::targets(&args)?;
            run::measure(&args, targets, Mode::Compare)
        }
        Some(Subcommand::Report(args)) => report::execute(&args),
        Some(Subcommand::Completions { shell }) => {
            write_stdout(&completions::script(shell), "the completion script")
        }
        Some(Subcommand::Man(args)) => man::execute(&args),
        Some(Subcommand::Pinpoint(args)) => pinpoint::execute(&args),
        Some(Subcommand::Capture(args)) => capture::execute(&args),
        Some(Subcommand::BenchTargets) => completions::bench_targets(),
        None => {
            let targets = vec![run_target(&cli.run)?];
            run::measure(&cli.run, targets, Mode::Run)
        }
    }
}

/// Write `bytes` to stdout; a reader that went away (`| head`) is not an error.
fn write_stdout(bytes: &[u8], what: &str) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        other => {
            other.with_context(|| format!("cannot write {what}"))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `--list`: the benchmarks of a harness binary, one per line.
fn list_benchmarks(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let target = harness_target(args)?;
    let exe = bench_binary::locate(&target.binary)?;
    let mut text = String::new();
    let mut listed = bench_binary::list(&exe, &target.filters, &target.env())?;
    if let Some(source) = &target.replay {
        listed = crate::plan::replay::select(source, &exe, listed)?;
    }
    for l in listed {
        text.push_str(&l.name);
        if !l.params.is_empty() {
            text.push_str(&format!("  ({})", l.params));
        }
        text.push('\n');
    }
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("cannot write the benchmark list")?;
    Ok(ExitCode::SUCCESS)
}

/// What a plain run measures: its command, or the benchmarks of a harness binary.
fn run_target(args: &RunArgs) -> anyhow::Result<Target> {
    if args.bench.is_some() || args.harness || args.replay.is_some() {
        if args.shell.is_some() {
            anyhow::bail!(
                "--shell does not apply to --bench or --harness: their binary is run directly"
            );
        }
        return Ok(Target::Harness(harness_target(args)?));
    }
    if args.name.len() > 1 {
        anyhow::bail!(
            "--name was given {} times; a run names its one benchmark once (compare takes one per command)",
            args.name.len()
        );
    }
    if args.shell.is_some() {
        let text: Vec<String> = args
            .command
            .iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect();
        let text = text.join(" ");
        return Ok(Target::Command {
            argv: shell_argv(args, &text)?,
            name: Some(args.name.first().cloned().unwrap_or(text)),
        });
    }
    Ok(Target::Command {
        argv: args.command.clone(),
        name: args.name.first().cloned(),
    })
}

/// `SH -c TEXT` for `--shell`, refused where the shell would be measured in place of the
/// program in a way that misleads.
fn shell_argv(args: &RunArgs, text: &str) -> anyhow::Result<Vec<std::ffi::OsString>> {
    if !args.invocations.is_empty() || args.boxing {
        anyhow::bail!(
            "--shell runs COMMAND through a shell, so --invocations and --boxing would probe \
             the shell, not your program; drop --shell and give the program after `--`"
        );
    }
    if text.trim().is_empty() {
        anyhow::bail!("no command given; usage: sbs-profile --shell sh [OPTIONS] 'COMMAND LINE'");
    }
    Ok(vec![args.shell().into(), "-c".into(), text.into()])
}

/// The harness binary and the name filters of `--bench`/`--harness`/`--list`.
fn harness_target(args: &RunArgs) -> anyhow::Result<HarnessTarget> {
    let (binary, filters) = if let Some(bench) = &args.bench {
        let binary = HarnessBinary::Bench {
            name: bench.clone(),
            cargo_args: args.cargo_args(),
        };
        (binary, args.command.clone())
    } else {
        let Some(program) = args.command.first() else {
            anyhow::bail!("no harness binary given; usage: sbs-profile --harness [OPTIONS] -- BINARY [FILTER...] or sbs-profile --bench NAME [-- FILTER...]");
        };
        (
            HarnessBinary::Path(program.clone()),
            args.command[1..].to_vec(),
        )
    };
    let replay = match &args.replay {
        Some(pattern) => {
            if filters.iter().any(|f| !f.is_empty()) {
                anyhow::bail!(
                    "--replay runs PROGRAM in replay mode, its arguments unused; give only the \
                     program after `--` (PATTERN selects the functions)"
                );
            }
            let dir = args
                .captures
                .clone()
                .unwrap_or_else(|| sbs_agent_abi::harness::capture::DEFAULT_DIR.into());
            let dir = std::path::absolute(&dir).with_context(|| {
                format!("--captures {}: cannot make it absolute", dir.display())
            })?;
            Some(crate::plan::replay::ReplaySource {
                dir,
                pattern: pattern.clone(),
            })
        }
        None => None,
    };
    Ok(HarnessTarget {
        binary,
        filters: if replay.is_some() {
            Vec::new()
        } else {
            filters
        },
        params: args.params.clone(),
        samples: args.samples,
        harness_args: args.harness_args.clone(),
        replay,
    })
}

/// Exit code 1 and a line per regression on stderr when anything regressed.
fn exit_for(regressions: &[Regressed]) -> ExitCode {
    if regressions.is_empty() {
        return ExitCode::SUCCESS;
    }
    let mut err = std::io::stderr().lock();
    for r in regressions {
        let _ = writeln!(err, "regression: {r}");
    }
    ExitCode::from(1)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use clap::CommandFactory;

    use super::*;
    use crate::judge::regression::Regression;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn trailing_command_keeps_its_flags() {
        let cli = Cli::try_parse_from(["sbs-profile", "--runs", "3", "--", "prog", "--runs", "9"])
            .unwrap();
        assert_eq!(cli.run.runs, 3);
        assert_eq!(cli.run.command, vec!["prog", "--runs", "9"]);
    }

    #[test]
    fn compare_subcommand_and_regression_options_parse() {
        let cli = Cli::try_parse_from([
            "sbs-profile",
            "compare",
            "--runs",
            "3",
            "--threshold",
            "rss.peak=10",
            "./a 1",
            "./b 1",
        ])
        .unwrap();
        let Some(Subcommand::Compare(args)) = cli.subcommand else {
            panic!("expected compare");
        };
        assert_eq!(args.runs, 3);
        assert_eq!(args.command, ["./a 1", "./b 1"]);
        assert_eq!(args.regression.threshold, ["rss.peak=10"]);

        let cli = Cli::try_parse_from([
            "sbs-profile",
            "--save",
            "--baseline",
            "main",
            "--history",
            "/tmp/h",
            "--threshold",
            "5",
            "--",
            "prog",
            "--save",
        ])
        .unwrap();
        assert!(cli.subcommand.is_none());
        let r = &cli.run.regression;
        assert!(r.save);
        assert_eq!(r.baseline.as_deref(), Some("main"));
        assert_eq!(r.history, PathBuf::from("/tmp/h"));
        assert_eq!(r.history_depth, 5);
        assert_eq!(cli.run.command, ["prog", "--save"]);
        assert!(Cli::try_parse_from(["sbs-profile", "--history-depth", "0", "--", "p"]).is_err());
    }

    #[test]
    fn package_goes_to_cargo_before_the_cargo_args() {
        let cli = Cli::try_parse_from([
            "sbs-profile",
            "--bench",
            "b",
            "-p",
            "mycrate",
            "--cargo-arg=--features=x",
        ])
        .unwrap();
        assert_eq!(cli.run.cargo_args(), ["-p", "mycrate", "--features=x"]);
        let e = Cli::try_parse_from(["sbs-profile", "-p", "mycrate", "--", "prog"]).unwrap_err();
        assert!(e.to_string().contains("--bench"), "{e}");
    }

    #[test]
    fn invalid_settings_are_rejected_with_the_fix() {
        let cli = Cli::try_parse_from(["sbs-profile", "--threshold", "lots", "--", "p"]).unwrap();
        let e = Regression::new(&cli.run.regression.settings(false), 0.95, Mode::Run).unwrap_err();
        assert!(e.to_string().contains("invalid threshold `lots`"), "{e}");
        let cli = Cli::try_parse_from(["sbs-profile", "--save-baseline", ".x", "--", "p"]).unwrap();
        let e = Regression::new(&cli.run.regression.settings(false), 0.95, Mode::Run).unwrap_err();
        assert!(
            e.to_string().contains("baseline name `.x` is invalid"),
            "{e}"
        );
        let cli = Cli::try_parse_from(["sbs-profile", "--baseline", "m", "--", "p"]).unwrap();
        let e =
            Regression::new(&cli.run.regression.settings(false), 0.95, Mode::Compare).unwrap_err();
        assert!(e.to_string().contains("drop --baseline"), "{e}");
    }
}
