//! The command line of a harness binary. Hand-parsed (no dependency) and tolerant of the
//! `--bench` flag cargo passes to `harness = false` targets.

use std::time::Duration;

use sbs_agent_abi::harness::{ARG_LIST, ARG_RUN};

use crate::error::HarnessError;
use crate::params::parse_assignment;

/// How warm-up ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Warmup {
    /// When the CoV over a window of `samples` measurements drops below the threshold.
    Steady,
    /// After this many measurements.
    Fixed(usize),
}

/// What the binary was asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Print the benchmarks.
    List,
    /// Run one benchmark in this process (the collector's or our own child process).
    Child,
    /// Measure: each benchmark in its own child processes.
    Measure,
    /// `cargo test`: run each benchmark's set-up and one operation.
    Smoke,
    /// Print the usage.
    Help,
}

/// Parsed options.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Options {
    pub action: Action,
    pub run: Option<String>,
    pub filters: Vec<String>,
    pub exact: bool,
    pub params: Vec<(String, String)>,
    pub samples: usize,
    pub warmup: Warmup,
    pub max_iterations: usize,
    pub cov: f64,
    pub batch_time: Duration,
    pub processes: usize,
    pub ops: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            action: Action::Smoke,
            run: None,
            filters: Vec::new(),
            exact: false,
            params: Vec::new(),
            samples: 10,
            warmup: Warmup::Steady,
            max_iterations: 1000,
            cov: 0.02,
            batch_time: Duration::from_millis(5),
            processes: 5,
            ops: 10,
        }
    }
}

pub(crate) const USAGE: &str = "\
Usage: BENCH-BINARY [--bench] [OPTIONS] [FILTER...]

Without --bench (as under `cargo test`), each benchmark runs its set-up and one operation.
With --bench (as under `cargo bench`), each selected benchmark is measured in --processes
fresh child processes: warm-up to steady state, then --samples measurements; the interval
is computed over the per-process means. Under sbs-profile (`sbs-profile --bench NAME`)
allocations, uprobe counts and perf counters are also reported per operation.

Options:
  --list                 print the benchmarks (name, TAB, default parameters) and exit
  --exact                FILTERs must equal a name (default: a name containing one matches)
  --param KEY=VALUE      override a benchmark parameter (repeatable)
  --samples K            measurements kept per process (and steady-state window) [10]
  --warmup steady|N      warm up until the window's CoV is under --cov, or N measurements [steady]
  --cov X                steady-state CoV threshold, e.g. 0.02 for 2% [0.02]
  --max-iterations N     give up on steady state after N measurements [1000]
  --batch-time MS        target duration of one measurement, milliseconds [5]
  --processes P          child processes per benchmark [5]
  --ops N                operations per counting run (under sbs-profile) [10]
  --sbs-run NAME         run benchmark NAME in this process (used by sbs-profile)
  -h, --help             print this help
";

fn value<'a>(
    it: &mut impl Iterator<Item = &'a String>,
    flag: &str,
) -> Result<&'a str, HarnessError> {
    it.next()
        .map(String::as_str)
        .ok_or_else(|| HarnessError::Usage(format!("{flag} needs a value")))
}

fn number<T: std::str::FromStr>(text: &str, flag: &str, what: &str) -> Result<T, HarnessError> {
    text.trim()
        .parse()
        .map_err(|_| HarnessError::Usage(format!("{flag} {text}: expected {what}")))
}

/// Parse the arguments after the program name.
pub(crate) fn parse(args: &[String]) -> Result<Options, HarnessError> {
    let mut o = Options::default();
    let mut bench = false;
    let mut list = false;
    let mut help = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let take = |it: &mut std::slice::Iter<'_, String>| -> Result<String, HarnessError> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => value(it, flag).map(str::to_string),
            }
        };
        match flag {
            "--bench" => bench = true,
            f if f == ARG_LIST => list = true,
            "-h" | "--help" => help = true,
            "--exact" => o.exact = true,
            f if takes_value(f) => set_value(&mut o, f, take(&mut it)?)?,
            // libtest flags cargo may pass along; meaningless here.
            "--nocapture" | "--quiet" | "-q" | "--show-output" => {}
            f if f.starts_with('-') => {
                return Err(HarnessError::Usage(format!("unknown option {arg}")));
            }
            _ => o.filters.push(arg.clone()),
        }
    }
    o.action = if help {
        Action::Help
    } else if list {
        Action::List
    } else if o.run.is_some() {
        Action::Child
    } else if bench {
        Action::Measure
    } else {
        Action::Smoke
    };
    Ok(o)
}

/// Whether `flag` is an option with a value (`--flag V` or `--flag=V`).
fn takes_value(flag: &str) -> bool {
    flag == ARG_RUN
        || matches!(
            flag,
            "--param"
                | "--samples"
                | "--warmup"
                | "--cov"
                | "--max-iterations"
                | "--batch-time"
                | "--processes"
                | "--ops"
        )
}

/// Set the option `flag` (one of [`takes_value`]'s) to `v`, checked.
fn set_value(o: &mut Options, flag: &str, v: String) -> Result<(), HarnessError> {
    match flag {
        f if f == ARG_RUN => o.run = Some(v),
        "--param" => o.params.push(parse_assignment(&v)?),
        "--samples" => {
            o.samples = number(&v, flag, "a whole number of measurements")?;
            if o.samples < 2 {
                return Err(HarnessError::Usage(
                    "--samples must be at least 2 (a variance needs two)".into(),
                ));
            }
        }
        "--warmup" => {
            o.warmup = if v == "steady" {
                Warmup::Steady
            } else {
                Warmup::Fixed(number(&v, flag, "`steady` or a number of measurements")?)
            };
        }
        "--cov" => o.cov = number(&v, flag, "a fraction such as 0.02")?,
        "--max-iterations" => o.max_iterations = number(&v, flag, "a number of measurements")?,
        "--batch-time" => {
            let ms: f64 = number(&v, flag, "milliseconds")?;
            if !(ms.is_finite() && ms > 0.0) {
                return Err(HarnessError::Usage(format!(
                    "--batch-time {ms}: must be a positive number of milliseconds"
                )));
            }
            o.batch_time = Duration::from_secs_f64(ms / 1000.0);
        }
        "--processes" => {
            o.processes = number(&v, flag, "a number of processes")?;
            if o.processes == 0 {
                return Err(HarnessError::Usage("--processes must be at least 1".into()));
            }
        }
        "--ops" => {
            o.ops = number(&v, flag, "a number of operations")?;
            if o.ops == 0 {
                return Err(HarnessError::Usage("--ops must be at least 1".into()));
            }
        }
        _ => return Err(HarnessError::Usage(format!("unknown option {flag}"))),
    }
    Ok(())
}

impl Options {
    /// The options a child process needs to measure as this process was asked to.
    pub(crate) fn forwarded(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (k, v) in &self.params {
            out.push("--param".to_string());
            out.push(format!("{k}={v}"));
        }
        out.push("--samples".into());
        out.push(self.samples.to_string());
        out.push("--warmup".into());
        out.push(match self.warmup {
            Warmup::Steady => "steady".into(),
            Warmup::Fixed(n) => n.to_string(),
        });
        out.push("--cov".into());
        out.push(self.cov.to_string());
        out.push("--max-iterations".into());
        out.push(self.max_iterations.to_string());
        out.push("--batch-time".into());
        out.push((self.batch_time.as_secs_f64() * 1000.0).to_string());
        out
    }

    /// Whether `name` is selected by the filters.
    pub(crate) fn selects(&self, name: &str) -> bool {
        self.filters.is_empty()
            || self.filters.iter().any(|f| {
                if self.exact {
                    name == f
                } else {
                    name.contains(f.as_str())
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Options, HarnessError> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn cargo_bench_and_test_modes() {
        assert_eq!(p(&["--bench"]).unwrap().action, Action::Measure);
        assert_eq!(p(&[]).unwrap().action, Action::Smoke);
        let o = p(&["push", "--bench", "--param", "n=5", "--exact"]).unwrap();
        assert_eq!(o.filters, ["push"]);
        assert!(o.exact && o.selects("push") && !o.selects("push2"));
        assert_eq!(o.params, [("n".to_string(), "5".to_string())]);
        assert_eq!(p(&["--list", "x"]).unwrap().action, Action::List);
        let o = p(&["--sbs-run=a b", "--warmup", "3", "--samples=4"]).unwrap();
        assert_eq!(o.action, Action::Child);
        assert_eq!(o.run.as_deref(), Some("a b"));
        assert_eq!((o.warmup, o.samples), (Warmup::Fixed(3), 4));
    }

    #[test]
    fn forwarded_options_parse_back_to_the_same() {
        let o = p(&[
            "--param",
            "k=v",
            "--samples",
            "7",
            "--cov",
            "0.05",
            "--batch-time",
            "2.5",
        ])
        .unwrap();
        let mut back = parse(&o.forwarded()).unwrap();
        back.action = o.action;
        assert_eq!(back, o);
    }

    #[test]
    fn bad_options_say_what_is_wrong() {
        for (args, needle) in [
            (&["--samples", "1"][..], "at least 2"),
            (&["--samples"][..], "needs a value"),
            (&["--warmup", "soon"][..], "`steady` or a number"),
            (&["--frobnicate"][..], "unknown option --frobnicate"),
            (&["--param", "noequals"][..], "KEY=VALUE"),
            (&["--processes", "0"][..], "at least 1"),
        ] {
            let e = p(args).unwrap_err().to_string();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }
}
