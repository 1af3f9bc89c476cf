//! The command line of a bench binary: criterion's options (what `cargo bench` and users
//! pass), or the harness's child run (`--sbs-run NAME`, what `sbs-profile` passes), which
//! `sbs_harness::adapter` parses. Hand-parsed, as the harness's own: no dependency.

use std::time::Duration;

use sbs_harness::adapter::ChildRun;
use sbs_harness::words::{Word, Words};

/// What this process was asked to do.
#[derive(Debug)]
pub(crate) enum Mode {
    /// Run one benchmark for the harness protocol (sbs-profile, or `--sbs-run` by hand).
    Child(ChildRun),
    /// `--list`: print `ID: benchmark` per selected benchmark, as criterion does.
    List,
    /// No `--bench`, or `--test` (`cargo test --benches`): run each routine once.
    Test,
    /// `--bench` (`cargo bench`): measure and print a timing line per benchmark.
    Measure,
    /// `--profile-time SECS`: run each routine for about this long, no analysis.
    Profile(Duration),
    /// `--help`: print the usage.
    Help,
}

/// How `--bench` prints its results (`--output-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutputFormat {
    /// criterion's `name  time: [low estimate high]`.
    Criterion,
    /// libtest's `test name ... bench: N ns/iter (+/- D)`.
    Bencher,
}

/// The parsed command line.
#[derive(Debug)]
pub(crate) struct Cli {
    pub mode: Mode,
    pub filters: Vec<String>,
    pub exact: bool,
    pub format: OutputFormat,
    /// criterion's settings given on the command line (override the bench file's
    /// `Criterion` configuration, not a group's, as in criterion).
    pub sample_size: Option<usize>,
    pub warm_up_time: Option<Duration>,
    pub measurement_time: Option<Duration>,
    pub confidence_level: Option<f64>,
}

/// criterion's options that take a value and change nothing here (baselines and plots are
/// criterion's files; sbs-profile keeps its own history).
const IGNORED_WITH_VALUE: &[&str] = &[
    "--color",
    "-c",
    "--save-baseline",
    "-s",
    "--baseline",
    "-b",
    "--baseline-lenient",
    "--load-baseline",
    "--format",
    "--plotting-backend",
    "--nresamples",
    "--noise-threshold",
    "--significance-level",
];

/// criterion's (and libtest's) flags that change nothing here.
const IGNORED_FLAGS: &[&str] = &[
    "--verbose",
    "-v",
    "--quiet",
    "-q",
    "--noplot",
    "-n",
    "--discard-baseline",
    "--quick",
    "--nocapture",
    "--show-output",
    "--ignored",
    "--include-ignored",
];

pub(crate) const USAGE: &str = "\
Usage: BENCH-BINARY [--bench] [OPTIONS] [FILTER...]

A criterion benchmark built with sbs-criterion. With --bench (cargo bench) each selected
benchmark is measured and printed as criterion does; without it (cargo test --benches)
each runs once. Under sbs-profile (`sbs-profile --bench NAME`) every metric is reported
per operation.

Options (criterion's):
  FILTER                   run the benchmarks whose id contains FILTER (a plain substring)
  --exact                  FILTER must equal the id
  --list                   print `ID: benchmark` per benchmark and exit
  --sample-size N          samples per benchmark (at least 10) [100]
  --warm-up-time SECS      warm-up time [3]
  --measurement-time SECS  measurement time [5]
  --confidence-level X     confidence of the printed interval [0.95]
  --profile-time SECS      run each benchmark for SECS, no analysis
  --output-format criterion|bencher
  --test                   run each benchmark once
Accepted and without effect here: --color, --save-baseline, --baseline, --load-baseline,
--discard-baseline, --noplot, --plotting-backend, --nresamples, --noise-threshold,
--significance-level, --format, --quick, --verbose, --quiet.
";

fn seconds(flag: &str, text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{flag} {text}: expected a number of seconds, e.g. {flag} 2.5"))?;
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!(
            "{flag} {text}: must be a positive number of seconds"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `--sample-size`'s value: a whole number, at least criterion's minimum of 10.
fn sample_size(v: &str) -> Result<usize, String> {
    let n: usize = v
        .trim()
        .parse()
        .map_err(|_| format!("--sample-size {v}: expected a whole number of samples"))?;
    if n < 10 {
        return Err(format!(
            "--sample-size {v}: must be at least 10 (criterion's minimum)"
        ));
    }
    Ok(n)
}

/// `--confidence-level`'s value: a fraction strictly between 0 and 1.
fn confidence(v: &str) -> Result<f64, String> {
    let c: f64 = v
        .trim()
        .parse()
        .map_err(|_| format!("--confidence-level {v}: expected a fraction such as 0.95"))?;
    if !(c > 0.0 && c < 1.0) {
        return Err(format!(
            "--confidence-level {v}: must be between 0 and 1, e.g. 0.95"
        ));
    }
    Ok(c)
}

/// `--output-format`'s value.
fn output_format(v: &str) -> Result<OutputFormat, String> {
    match v {
        "criterion" => Ok(OutputFormat::Criterion),
        "bencher" => Ok(OutputFormat::Bencher),
        _ => Err(format!(
            "--output-format {v}: expected `criterion` or `bencher`"
        )),
    }
}

/// Parse the arguments after the program name. An error is one line saying what to do.
pub(crate) fn parse(args: &[String]) -> Result<Cli, String> {
    let child = ChildRun::from_args(args).map_err(|e| e.to_string())?;
    let mut cli = Cli {
        mode: Mode::Test,
        filters: Vec::new(),
        exact: false,
        format: OutputFormat::Criterion,
        sample_size: None,
        warm_up_time: None,
        measurement_time: None,
        confidence_level: None,
    };
    if let Some(child) = child {
        cli.mode = Mode::Child(child);
        return Ok(cli);
    }
    let (mut bench, mut test, mut list, mut help, mut profile) = (false, false, false, false, None);
    let mut words = Words::new(args);
    while let Some(word) = words.next_word()? {
        let flag = match word {
            Word::Flag(flag) => flag,
            Word::Filter(filter) => {
                cli.filters.push(filter);
                continue;
            }
        };
        let mut value = || words.value(&flag);
        match flag.as_str() {
            "--bench" => bench = true,
            "--test" => test = true,
            "--list" => list = true,
            "--exact" => cli.exact = true,
            "-h" | "--help" => help = true,
            "--sample-size" => cli.sample_size = Some(sample_size(&value()?)?),
            "--warm-up-time" => cli.warm_up_time = Some(seconds(&flag, &value()?)?),
            "--measurement-time" => cli.measurement_time = Some(seconds(&flag, &value()?)?),
            "--profile-time" => profile = Some(seconds(&flag, &value()?)?),
            "--confidence-level" => cli.confidence_level = Some(confidence(&value()?)?),
            "--output-format" => cli.format = output_format(&value()?)?,
            f if IGNORED_WITH_VALUE.contains(&f) => {
                value()?;
            }
            f if IGNORED_FLAGS.contains(&f) => {}
            _ => {
                return Err(format!(
                    "unknown option {flag}; run with --help for the options sbs-criterion accepts"
                ));
            }
        }
    }
    cli.mode = if help {
        Mode::Help
    } else if list {
        Mode::List
    } else if let Some(d) = profile {
        Mode::Profile(d)
    } else if bench && !test {
        Mode::Measure
    } else {
        Mode::Test
    };
    Ok(cli)
}

impl Cli {
    /// Whether benchmark `id` is selected by the filters (criterion's own take a regex;
    /// here a filter is a plain substring, or the whole id with `--exact`).
    pub(crate) fn selects(&self, id: &str) -> bool {
        self.filters.is_empty()
            || self.filters.iter().any(|f| {
                if self.exact {
                    id == f
                } else {
                    id.contains(f.as_str())
                }
            })
    }
}

/// The command line of this process, parsed once; a bad one ends the process with its
/// one-line error and exit code 2.
pub(crate) fn get() -> &'static Cli {
    static CLI: std::sync::OnceLock<Cli> = std::sync::OnceLock::new();
    CLI.get_or_init(|| {
        let args: Vec<String> = std::env::args().skip(1).collect();
        match parse(&args) {
            Ok(cli) => cli,
            Err(e) => crate::fail(&e),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Cli, String> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn cargo_modes_filters_and_exact() {
        assert!(matches!(p(&["--bench"]).unwrap().mode, Mode::Measure));
        assert!(matches!(p(&[]).unwrap().mode, Mode::Test));
        assert!(matches!(
            p(&["--bench", "--test"]).unwrap().mode,
            Mode::Test
        ));
        assert!(matches!(
            p(&["--bench", "--list"]).unwrap().mode,
            Mode::List
        ));
        let c = p(&["--bench", "enc", "--noplot", "--save-baseline", "main"]).unwrap();
        assert!(c.selects("hex_encode") && !c.selects("hex_decode"));
        let c = p(&["--exact", "g/f", "--bench"]).unwrap();
        assert!(c.selects("g/f") && !c.selects("g/f/1"));
        let c = p(&["--bench", "--warm-up-time=0.5", "--sample-size", "20"]).unwrap();
        assert_eq!(c.warm_up_time, Some(Duration::from_millis(500)));
        assert_eq!(c.sample_size, Some(20));
        match p(&["--sbs-run", "g/f", "--samples", "3"]).unwrap().mode {
            Mode::Child(c) => assert_eq!(c.name(), "g/f"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_options_say_what_is_wrong() {
        for (args, needle) in [
            (&["--sample-size", "5"][..], "at least 10"),
            (&["--measurement-time", "soon"][..], "number of seconds"),
            (&["--warm-up-time", "-1"][..], "positive"),
            (&["--frobnicate"][..], "unknown option --frobnicate"),
            (&["--baseline"][..], "needs a value"),
            (&["--output-format", "json"][..], "`criterion` or `bencher`"),
        ] {
            let e = p(args).unwrap_err();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }
}
