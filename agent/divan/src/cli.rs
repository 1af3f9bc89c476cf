//! The command line of a bench binary: divan's options (what `cargo bench` and users
//! pass), or the harness's child run (`--sbs-run NAME`, what `sbs-profile` passes), which
//! `sbs_harness::adapter` parses. Hand-parsed, as the harness's own.

use std::time::Duration;

use sbs_harness::adapter::ChildRun;
use sbs_harness::words::{Word, Words};

/// What this process was asked to do.
#[derive(Debug)]
pub(crate) enum Mode {
    /// Run one benchmark for the harness protocol (sbs-profile, or `--sbs-run` by hand).
    Child(ChildRun),
    /// `--list`: print `PATH: benchmark` per selected benchmark, as divan does.
    List,
    /// No `--bench`, or `--test` (`cargo test --benches`): run each benchmark once.
    Test,
    /// `--bench` (`cargo bench`): sample and print a timing line per benchmark.
    Bench,
    /// `--help`.
    Help,
}

/// Which benchmarks marked `ignore` run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ignored {
    /// Not them (the default).
    Skip,
    /// Only them (`--ignored`).
    Only,
    /// Them too (`--include-ignored`).
    Include,
}

/// The parsed command line.
#[derive(Debug)]
pub(crate) struct Cli {
    pub mode: Mode,
    pub filters: Vec<String>,
    pub skips: Vec<String>,
    pub exact: bool,
    pub ignored: Ignored,
    /// Sampling options given on the command line (override the bench file's).
    pub sample_count: Option<u32>,
    pub sample_size: Option<u32>,
    pub min_time: Option<Duration>,
    pub max_time: Option<Duration>,
}

/// divan's options that take a value and change nothing here.
const IGNORED_WITH_VALUE: &[&str] = &[
    "--color",
    "--sort",
    "--sortr",
    "--timer",
    "--threads",
    "--format",
    "--bytes-format",
    "--bytes-count",
    "--chars-count",
    "--items-count",
];

/// divan's (and libtest's) flags that change nothing here.
const IGNORED_FLAGS: &[&str] = &[
    "--nocapture",
    "--show-output",
    "--quiet",
    "-q",
    "--skip-ext-time",
];

pub(crate) const USAGE: &str = "\
Usage: BENCH-BINARY [--bench] [OPTIONS] [FILTER...]

A divan benchmark built with sbs-divan. With --bench (cargo bench) each selected
benchmark is sampled and printed; without it (cargo test --benches) each runs once. Under
sbs-profile (`sbs-profile --bench NAME`) every metric is reported per operation.

Options (divan's):
  FILTER              run the benchmarks whose path contains FILTER (a plain substring)
  --exact             FILTER must equal the path (`bench::function::arg`)
  --skip FILTER       skip the benchmarks FILTER selects
  --list              print `PATH: benchmark` per benchmark and exit
  --test              run each benchmark once
  --ignored           run only the benchmarks marked `ignore`
  --include-ignored   run those too
  --sample-count N    samples per benchmark [100]
  --sample-size N     iterations per sample [chosen so that a sample takes 100 us]
  --min-time SECS     sample for at least this long
  --max-time SECS     sample for at most this long [5]
Accepted and without effect here: --color, --sort, --sortr, --timer, --threads, --format,
--bytes-format, --bytes-count, --chars-count, --items-count, --skip-ext-time.
";

fn seconds(flag: &str, text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{flag} {text}: expected a number of seconds, e.g. {flag} 2.5"))?;
    Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("{flag} {text}: must be a number of seconds, 0 or more"))
}

fn count(flag: &str, text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{flag} {text}: expected a whole number, 1 or more")),
    }
}

fn empty() -> Cli {
    Cli {
        mode: Mode::Test,
        filters: Vec::new(),
        skips: Vec::new(),
        exact: false,
        ignored: Ignored::Skip,
        sample_count: None,
        sample_size: None,
        min_time: None,
        max_time: None,
    }
}

/// Parse the arguments after the program name. An error is one line saying what to do.
pub(crate) fn parse(args: &[String]) -> Result<Cli, String> {
    let mut cli = empty();
    if let Some(child) = ChildRun::from_args(args).map_err(|e| e.to_string())? {
        cli.mode = Mode::Child(child);
        return Ok(cli);
    }
    let (mut bench, mut test, mut list, mut help) = (false, false, false, false);
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
            "--ignored" => cli.ignored = Ignored::Only,
            "--include-ignored" => cli.ignored = Ignored::Include,
            "-h" | "--help" => help = true,
            "--skip" => cli.skips.push(value()?),
            "--sample-count" => cli.sample_count = Some(count(&flag, &value()?)?),
            "--sample-size" => cli.sample_size = Some(count(&flag, &value()?)?),
            "--min-time" => cli.min_time = Some(seconds(&flag, &value()?)?),
            "--max-time" => cli.max_time = Some(seconds(&flag, &value()?)?),
            f if IGNORED_WITH_VALUE.contains(&f) => {
                value()?;
            }
            f if IGNORED_FLAGS.contains(&f) => {}
            _ => {
                return Err(format!(
                    "unknown option {flag}; run with --help for the options sbs-divan accepts"
                ));
            }
        }
    }
    cli.mode = if help {
        Mode::Help
    } else if list {
        Mode::List
    } else if bench && !test {
        Mode::Bench
    } else {
        Mode::Test
    };
    Ok(cli)
}

impl Cli {
    /// divan's environment variables for the sampling options the command line left
    /// unset (`DIVAN_SAMPLE_COUNT`, `DIVAN_SAMPLE_SIZE`, `DIVAN_MIN_TIME`,
    /// `DIVAN_MAX_TIME`); a value that does not parse is an error.
    pub(crate) fn with_env(mut self, var: impl Fn(&str) -> Option<String>) -> Result<Cli, String> {
        let read = |name: &str, flag: &str| var(name).map(|v| (flag.to_string(), v));
        if let (None, Some((f, v))) = (
            self.sample_count,
            read("DIVAN_SAMPLE_COUNT", "--sample-count"),
        ) {
            self.sample_count = Some(count(&f, &v)?);
        }
        if let (None, Some((f, v))) = (self.sample_size, read("DIVAN_SAMPLE_SIZE", "--sample-size"))
        {
            self.sample_size = Some(count(&f, &v)?);
        }
        if let (None, Some((f, v))) = (self.min_time, read("DIVAN_MIN_TIME", "--min-time")) {
            self.min_time = Some(seconds(&f, &v)?);
        }
        if let (None, Some((f, v))) = (self.max_time, read("DIVAN_MAX_TIME", "--max-time")) {
            self.max_time = Some(seconds(&f, &v)?);
        }
        Ok(self)
    }

    fn matches(&self, filter: &str, path: &str) -> bool {
        if self.exact {
            path == filter
        } else {
            path.contains(filter)
        }
    }

    /// Whether benchmark `path` (marked `ignore` or not) is selected.
    pub(crate) fn selects(&self, path: &str, ignore: bool) -> bool {
        let by_ignore = match self.ignored {
            Ignored::Skip => !ignore,
            Ignored::Only => ignore,
            Ignored::Include => true,
        };
        by_ignore
            && (self.filters.is_empty() || self.filters.iter().any(|f| self.matches(f, path)))
            && !self.skips.iter().any(|f| self.matches(f, path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Cli, String> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn modes_filters_and_ignored() {
        assert!(matches!(p(&["--bench"]).unwrap().mode, Mode::Bench));
        assert!(matches!(p(&[]).unwrap().mode, Mode::Test));
        assert!(matches!(
            p(&["--bench", "--test"]).unwrap().mode,
            Mode::Test
        ));
        assert!(matches!(
            p(&["--bench", "--list"]).unwrap().mode,
            Mode::List
        ));
        let c = p(&["--bench", "count", "--skip", "top", "--color", "never"]).unwrap();
        assert!(c.selects("b::count::10", false));
        assert!(!c.selects("b::count::10", true), "ignored");
        assert!(!c.selects("b::count_top", false), "skipped");
        let c = p(&["--exact", "b::f", "--include-ignored"]).unwrap();
        assert!(c.selects("b::f", true) && !c.selects("b::f::1", false));
        let c = p(&["--ignored"]).unwrap();
        assert!(c.selects("x", true) && !c.selects("x", false));
        let c = p(&["--bench", "--max-time=0.5", "--sample-count", "20"]).unwrap();
        assert_eq!(c.max_time, Some(Duration::from_millis(500)));
        assert_eq!(c.sample_count, Some(20));
        let env = |name: &str| match name {
            "DIVAN_SAMPLE_COUNT" => Some("1000".to_string()),
            "DIVAN_MIN_TIME" => Some("0.25".to_string()),
            _ => None,
        };
        let c = c.with_env(env).unwrap();
        assert_eq!(c.sample_count, Some(20), "the command line wins");
        assert_eq!(c.min_time, Some(Duration::from_millis(250)));
        let e = p(&[]).unwrap().with_env(|_| Some("x".into())).unwrap_err();
        assert!(e.contains("--sample-count x"), "{e}");
        match p(&["--sbs-run", "b::f", "--samples", "3"]).unwrap().mode {
            Mode::Child(c) => assert_eq!(c.name(), "b::f"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_options_say_what_is_wrong() {
        for (args, needle) in [
            (&["--sample-count", "0"][..], "1 or more"),
            (&["--max-time", "soon"][..], "number of seconds"),
            (&["--frobnicate"][..], "unknown option --frobnicate"),
            (&["--skip"][..], "needs a value"),
        ] {
            let e = p(args).unwrap_err();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }
}
