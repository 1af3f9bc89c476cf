//! How the options are shown: the help headings (what to measure, how to run, statistics
//! and the gate, output, history), and which options the short help (`-h`) lists, each with
//! a one-line summary. `--help`, the manual pages and the completion scripts are built from
//! the same [`command`], so they all group the options alike.
//!
//! An option of a run that no group names is an error of the test below: give each new
//! option its heading here. An option not in the short list appears under its heading in
//! `--help` only.

use clap::{Arg, CommandFactory};

use super::Cli;

/// What the run measures: the metric groups and the benchmarks.
pub const MEASURE: &str = "What to measure";
/// How each run is started and repeated.
pub const RUN: &str = "How to run";
/// The intervals and the regression gate.
pub const STATS: &str = "Statistics and the gate";
/// Where the report goes.
pub const OUTPUT: &str = "Output";
/// The saved history and baselines.
pub const HISTORY: &str = "History";

/// An option's id (its field's name) and its summary in `-h`, if `-h` lists it.
type Entry = (&'static str, Option<&'static str>);

/// The options of a run (and of `compare`) by heading, in the order `--help` shows the
/// headings. An entry with a summary is listed by `-h` with that summary; the others only
/// by `--help`, with their full text.
const GROUPS: &[(&str, &[Entry])] = &[
    (
        MEASURE,
        &[
            (
                "time",
                Some("Wall, user and system time, peak RSS (default)"),
            ),
            ("alloc", Some("Count allocations (preloaded agent)")),
            ("alloc_harness", None),
            ("boxing", None),
            ("memory", Some("Peak RSS and heap footprint")),
            ("profile_time", None),
            ("counters", Some("Count perf events (see --list-counters)")),
            ("no_multiplex", None),
            ("counters_best_effort", None),
            ("instructions", Some("Count instructions")),
            ("qemu_cpu", None),
            ("list_counters", None),
            (
                "invocations",
                Some("Count calls of the functions PATTERN names"),
            ),
            ("invocations_detail", None),
            ("invocations_partial", None),
            ("invocations_engine", None),
            ("invocations_check", None),
            ("max_probes", None),
            (
                "bench",
                Some("Measure the sbs-harness benchmarks of a bench target"),
            ),
            (
                "harness",
                Some("COMMAND is a binary built with sbs-harness"),
            ),
            ("list", None),
            ("params", None),
            (
                "replay",
                Some("Replay the captured calls of functions PATTERN names"),
            ),
            ("captures", None),
        ],
    ),
    (
        RUN,
        &[
            ("runs", Some("Measured runs per metric group")),
            ("warmup", Some("Discarded warm-up runs")),
            ("timeout", Some("Kill a run after DURATION (500ms, 2s, 1m)")),
            ("show_output", Some("Show the child's stdout and stderr")),
            ("input", None),
            ("prepare", Some("Run CMD before every run, unmeasured")),
            ("setup", None),
            ("cleanup", None),
            ("shell", Some("Run COMMAND through a shell (pipes, globs)")),
            ("parameter_scan", None),
            ("parameter_step_size", None),
            ("parameter_list", None),
            (
                "ignore_failure",
                Some("Keep measuring when the child fails"),
            ),
            ("pin", None),
            ("aslr", None),
            ("jobs", None),
            ("clean_env", None),
            ("env", None),
            ("ops", None),
            ("samples", None),
            ("harness_args", None),
            ("package", None),
            ("cargo_args", None),
        ],
    ),
    (
        STATS,
        &[
            ("target_ci", None),
            ("min_runs", None),
            ("max_runs", None),
            ("confidence", Some("Confidence level of the intervals")),
            (
                "threshold",
                Some("Change in percent that fails (default 2)"),
            ),
            ("confirm", None),
            ("judge_busy", None),
            ("strict", Some("Exit 2 when the report has warnings")),
        ],
    ),
    (
        OUTPUT,
        &[
            ("format", Some("Report format")),
            ("output", Some("Write the report to FILE")),
            ("html", Some("Also write an HTML page with plots to FILE")),
            ("color", None),
            ("time_unit", None),
            ("export_json", None),
            ("export_csv", None),
            ("export_markdown", None),
            ("export_bmf", None),
            ("name", Some("Name of the benchmark in reports")),
            ("quiet", None),
        ],
    ),
    (
        HISTORY,
        &[
            ("history", None),
            ("save", Some("Save this run in the history")),
            ("save_baseline", Some("Save this run as baseline NAME")),
            ("baseline", Some("Compare with baseline NAME")),
            ("history_depth", None),
        ],
    ),
];

/// The subcommands whose options are those of a run.
const RUN_LIKE: &[&str] = &["compare"];

/// The command line as every reader sees it: clap's definition with the headings and the
/// short help of [`GROUPS`].
pub fn command() -> clap::Command {
    let mut cmd = group(Cli::command());
    for name in RUN_LIKE {
        cmd = cmd.mut_subcommand(name, group);
    }
    // clap keeps a possible value as a `&'static str` (without its `string` feature): the
    // few names are leaked, once per command line built (a process builds one or two).
    let names: Vec<&'static str> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| &*Box::leak(s.get_name().to_string().into_boxed_str()))
        .collect();
    // `sbs-profile man SUBCOMMAND` takes the name of a page: completed from the list.
    cmd.mut_subcommand("man", |man| {
        man.mut_arg("page", |a| {
            a.value_parser(clap::builder::PossibleValuesParser::new(names))
        })
    })
}

/// Parse the process's arguments with [`command`] (clap prints help and errors itself).
pub fn parse() -> Cli {
    use clap::FromArgMatches;
    let matches = command().get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// `cmd` with each option of [`GROUPS`] under its heading, and every option that has no
/// summary hidden from `-h`.
fn group(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|arg| match place(&arg) {
        Some((heading, summary)) => {
            let arg = arg.help_heading(heading);
            match summary {
                Some(summary) => {
                    let long = arg
                        .get_long_help()
                        .or_else(|| arg.get_help())
                        .cloned()
                        .unwrap_or_default();
                    arg.help(summary).long_help(long)
                }
                None => arg.hide_short_help(true),
            }
        }
        None => arg,
    })
}

/// The heading and the `-h` summary of `arg`, if [`GROUPS`] names it.
fn place(arg: &Arg) -> Option<(&'static str, Option<&'static str>)> {
    let id = arg.get_id().as_str();
    GROUPS.iter().find_map(|(heading, args)| {
        args.iter()
            .find(|(name, _)| *name == id)
            .map(|(_, summary)| (*heading, *summary))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(cmd: &mut clap::Command, long: bool) -> String {
        let help = if long {
            cmd.render_long_help()
        } else {
            cmd.render_help()
        };
        help.to_string()
    }

    #[test]
    fn every_option_of_a_run_has_a_heading() {
        let cmd = command();
        for name in std::iter::once(None).chain(RUN_LIKE.iter().map(Some)) {
            let c = match name {
                Some(n) => cmd.find_subcommand(n).unwrap(),
                None => &cmd,
            };
            for arg in c.get_arguments().filter(|a| !a.is_positional()) {
                assert!(
                    arg.get_help_heading().is_some(),
                    "--{} has no heading: add it to GROUPS in cli/help.rs",
                    arg.get_id()
                );
            }
        }
        for (_, args) in GROUPS {
            for (id, _) in *args {
                assert!(
                    cmd.get_arguments().any(|a| a.get_id() == id),
                    "GROUPS names `{id}`, which is no option"
                );
            }
        }
        command().debug_assert();
    }

    #[test]
    fn short_help_fits_a_screen_and_long_help_is_grouped() {
        let mut cmd = command();
        let short = render(&mut cmd, false);
        let lines = short.lines().count();
        assert!(lines <= 60, "-h has {lines} lines:\n{short}");
        for heading in [MEASURE, RUN, STATS, OUTPUT, HISTORY] {
            assert!(short.contains(&format!("{heading}:")), "{short}");
        }
        // One line per option in -h: no summary so long that clap moves every help text
        // of its section onto a line of its own.
        for line in short.lines().filter(|l| l.trim_start().starts_with('-')) {
            assert!(
                line.contains("  "),
                "an option without its summary: {line:?}"
            );
        }
        assert!(short.contains("--runs <N>"), "{short}");
        assert!(!short.contains("--export-csv"), "{short}");

        let long = render(&mut cmd, true);
        let order: Vec<usize> = [MEASURE, RUN, STATS, OUTPUT, HISTORY]
            .iter()
            .map(|h| long.find(&format!("\n{h}:\n")).unwrap_or(usize::MAX))
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}\n{long}");
        assert!(!long.contains("\nOptions:\n  -r"), "{long}");
        assert!(long.contains("--export-csv"), "{long}");
        // The long help keeps each option's full text.
        assert!(long.contains("Keep adding timing runs until"), "{long}");
        assert!(
            long.contains("Count calls of the functions a PATTERN names"),
            "{long}"
        );
    }

    #[test]
    fn compare_has_the_same_headings() {
        let mut cmd = command();
        let compare = cmd.find_subcommand_mut("compare").unwrap();
        let short = compare.render_help().to_string();
        assert!(short.contains(&format!("{STATS}:")), "{short}");
        assert!(short.lines().count() <= 60, "{short}");
    }

    #[test]
    fn man_takes_only_the_name_of_a_page() {
        let cmd = command();
        assert!(cmd
            .clone()
            .try_get_matches_from(["sbs-profile", "man", "pinpoint"])
            .is_ok());
        let e = cmd
            .try_get_matches_from(["sbs-profile", "man", "nosuch"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("compare") && e.contains("pinpoint"), "{e}");
    }
}
