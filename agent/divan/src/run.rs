//! `divan::main()`: the benchmarks the attributes registered, by their divan paths, and
//! what this process does with them (a child run, the list, a test run or sampling).

use std::io::Write;
use std::time::Duration;

use crate::__private::{BenchEntry, GroupEntry, Instances, Options, Run, BENCHES, GROUPS};
use crate::bencher::{Bencher, Job, Measured, Outcome, Plan, State};
use crate::cli::{self, Cli, Mode};
use crate::counter::{AnyCounter, BytesFormat};
use crate::fail;

/// One benchmark instance: its path, merged options and run.
pub(crate) struct Bench {
    pub path: String,
    pub options: Options,
    pub run: Run,
}

/// The path components of module `module_path`, each group's `name` in place of its
/// module's, and the options of the groups on the way, innermost first.
fn module_components(module_path: &str, groups: &[GroupEntry]) -> (Vec<String>, Options) {
    let mut components = Vec::new();
    let mut options = Options::default();
    let mut prefix = String::new();
    for part in module_path.split("::") {
        if !prefix.is_empty() {
            prefix.push_str("::");
        }
        prefix.push_str(part);
        match groups.iter().find(|g| g.module_path == prefix) {
            Some(group) => {
                components.push(group.name.unwrap_or(part).to_string());
                options = (group.options)().over(options);
            }
            None => components.push(part.to_string()),
        }
    }
    (components, options)
}

/// Every registered benchmark instance, ordered by path (the registration order is the
/// linker's).
pub(crate) fn collect(entries: &[BenchEntry], groups: &[GroupEntry]) -> Vec<Bench> {
    let mut ordered: Vec<&BenchEntry> = entries.iter().collect();
    ordered.sort_by(|a, b| (a.module_path, a.name, a.line).cmp(&(b.module_path, b.name, b.line)));
    let mut benches = Vec::new();
    for entry in ordered {
        let (mut path, outer) = module_components(entry.module_path, groups);
        path.push(entry.name.to_string());
        let options = (entry.options)().over(outer);
        let mut instances = Instances::default();
        (entry.instances)(&mut instances);
        for (suffix, run) in instances.list {
            let mut full = path.clone();
            full.extend(suffix);
            benches.push(Bench {
                path: full.join("::"),
                options,
                run,
            });
        }
    }
    benches
}

/// Fail on a path seen twice: `--sbs-run PATH` could not tell them apart.
fn check_unique(benches: &[Bench]) {
    let mut paths: Vec<&str> = benches.iter().map(|b| b.path.as_str()).collect();
    paths.sort_unstable();
    if let Some(w) = paths.windows(2).find(|w| w[0] == w[1]) {
        fail(&format!(
            "benchmark path `{}` is used twice (two arguments with one name?); give each its own",
            w[0]
        ));
    }
}

/// What the `Divan` builder sets for every benchmark.
pub(crate) struct Settings<'a> {
    pub defaults: Options,
    /// Paths to skip: (filter, exact).
    pub skips: &'a [(String, bool)],
    pub bytes_format: BytesFormat,
    /// The counter of benchmarks that declare none.
    pub counter: Option<AnyCounter>,
}

/// Run the program's benchmarks as the command line and `settings` ask.
pub(crate) fn main(settings: Settings<'_>) {
    let skips = settings.skips;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cli = cli::parse(&args)
        .and_then(|c| c.with_env(|name| std::env::var(name).ok()))
        .unwrap_or_else(|e| fail(&e));
    if let Mode::Help = cli.mode {
        print!("{}", cli::USAGE);
        let _ = std::io::stdout().flush();
        return;
    }
    let groups: &[GroupEntry] = &GROUPS;
    let benches = collect(&BENCHES, groups);
    check_unique(&benches);
    if let Mode::Child(child) = &cli.mode {
        let Some(bench) = benches.iter().find(|b| b.path == child.name()) else {
            fail(&format!(
                "no benchmark with path `{}` in this binary; run it with --list to see them",
                child.name()
            ))
        };
        let mut state = State {
            job: Job::Child(child),
            outcome: Outcome::NotRun,
            counter: None,
        };
        (bench.run)(Bencher::new(&mut state));
        finish(&bench.path, state.outcome);
        return;
    }
    let skipped = |path: &str| {
        skips
            .iter()
            .any(|(f, exact)| if *exact { path == f } else { path.contains(f) })
    };
    let selected: Vec<&Bench> = benches
        .iter()
        .filter(|b| cli.selects(&b.path, b.options.ignore.unwrap_or(false)) && !skipped(&b.path))
        .collect();
    let mut out = std::io::stdout().lock();
    match cli.mode {
        Mode::List => {
            for b in selected {
                let _ = writeln!(out, "{}: benchmark", b.path);
            }
        }
        Mode::Test => {
            for b in selected {
                run_job(b, Job::Test);
                let _ = writeln!(out, "{} ... ok", b.path);
            }
        }
        _ => sample_all(&selected, &settings, &cli, &mut out),
    }
}

/// Run `bench` for `job`; what it measured, if anything.
fn run_job(bench: &Bench, job: Job<'_>) -> Option<(Measured, Option<AnyCounter>)> {
    let mut state = State {
        job,
        outcome: Outcome::NotRun,
        counter: None,
    };
    (bench.run)(Bencher::new(&mut state));
    finish(&bench.path, state.outcome).map(|m| (m, state.counter))
}

/// The samples of an outcome; a benchmark that failed or never ran ends the process.
fn finish(path: &str, outcome: Outcome) -> Option<Measured> {
    match outcome {
        Outcome::NotRun => fail(&format!(
            "benchmark `{path}`: its function never called a `bench` method of its Bencher \
             (bench, bench_local, with_inputs(..).bench_values...); call one with the routine"
        )),
        Outcome::Failed(e) => fail(&format!("benchmark `{path}`: {e}")),
        Outcome::Done => None,
        Outcome::Measured(m) => Some(m),
    }
}

/// divan's defaults: 100 samples, at most 5 s each benchmark.
fn plan(options: Options, defaults: Options, cli: &Cli) -> Plan {
    let o = options.over(defaults);
    Plan {
        sample_count: cli.sample_count.or(o.sample_count).unwrap_or(100),
        sample_size: cli.sample_size.or(o.sample_size),
        min_time: cli.min_time.or(o.min_time).unwrap_or(Duration::ZERO),
        max_time: cli
            .max_time
            .or(o.max_time)
            .unwrap_or(Duration::from_secs(5)),
    }
}

/// Sample each benchmark and print a line for it.
fn sample_all(selected: &[&Bench], settings: &Settings<'_>, cli: &Cli, out: &mut impl Write) {
    let width = selected
        .iter()
        .map(|b| b.path.chars().count())
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        out,
        "{:width$}  {:>10}  {:>10}  {:>10}  {:>10}  {:>7}  {:>9}",
        "benchmark", "fastest", "slowest", "median", "mean", "samples", "iters"
    );
    for b in selected {
        let job = Job::Measure(plan(b.options, settings.defaults, cli));
        let Some((m, counter)) = run_job(b, job) else {
            continue;
        };
        let s = Summary::of(&m.per_iter);
        let mut line = format!(
            "{:width$}  {:>10}  {:>10}  {:>10}  {:>10}  {:>7}  {:>9}",
            b.path,
            time(s.fastest),
            time(s.slowest),
            time(s.median),
            time(s.mean),
            m.per_iter.len(),
            m.iters * m.per_iter.len() as u64
        );
        if let Some(c) = counter.or(settings.counter) {
            let throughput = c.throughput(s.median, settings.bytes_format);
            line.push_str(&format!("  {throughput} (median)"));
        }
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// The statistics of a sample, seconds per iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Summary {
    pub fastest: f64,
    pub slowest: f64,
    pub median: f64,
    pub mean: f64,
}

impl Summary {
    pub(crate) fn of(per_iter: &[f64]) -> Summary {
        let mut sorted = per_iter.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        if n == 0 {
            return Summary {
                fastest: 0.0,
                slowest: 0.0,
                median: 0.0,
                mean: 0.0,
            };
        }
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Summary {
            fastest: sorted[0],
            slowest: sorted[n - 1],
            median,
            mean: sorted.iter().sum::<f64>() / n as f64,
        }
    }
}

/// `secs` with four significant digits and a unit: `12.34 µs`.
pub(crate) fn time(secs: f64) -> String {
    let (value, unit) = if secs >= 1.0 {
        (secs, "s")
    } else if secs >= 1e-3 {
        (secs * 1e3, "ms")
    } else if secs >= 1e-6 {
        (secs * 1e6, "µs")
    } else {
        (secs * 1e9, "ns")
    };
    let decimals = if value >= 100.0 {
        1
    } else if value >= 10.0 {
        2
    } else {
        3
    };
    format!("{value:.decimals$} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_options() -> Options {
        Options::default()
    }

    fn ignored() -> Options {
        Options {
            ignore: Some(true),
            sample_count: Some(5),
            ..Options::default()
        }
    }

    fn two(out: &mut Instances) {
        out.add(vec!["1".into()], |b| b.bench(|| 1));
        out.add(vec!["2".into()], |b| b.bench(|| 2));
    }

    fn one(out: &mut Instances) {
        out.add(vec![], |b| b.bench(|| ()));
    }

    #[test]
    fn paths_follow_modules_groups_and_suffixes() {
        let entries = [
            BenchEntry {
                module_path: "b::m::inner",
                name: "f",
                line: 3,
                options: no_options,
                instances: two,
            },
            BenchEntry {
                module_path: "b",
                name: "a",
                line: 9,
                options: no_options,
                instances: one,
            },
        ];
        let groups = [GroupEntry {
            module_path: "b::m",
            name: Some("renamed"),
            options: ignored,
        }];
        let benches = collect(&entries, &groups);
        let paths: Vec<&str> = benches.iter().map(|b| b.path.as_str()).collect();
        assert_eq!(
            paths,
            ["b::a", "b::renamed::inner::f::1", "b::renamed::inner::f::2"]
        );
        assert_eq!(benches[0].options.ignore, None);
        assert_eq!(benches[1].options.ignore, Some(true), "the group's options");
        assert_eq!(benches[1].options.sample_count, Some(5));
    }

    #[test]
    fn summaries_and_times() {
        let s = Summary::of(&[3.0, 1.0, 2.0, 10.0]);
        assert_eq!(
            (s.fastest, s.slowest, s.median, s.mean),
            (1.0, 10.0, 2.5, 4.0)
        );
        assert_eq!(time(1.5e-6), "1.500 µs");
        assert_eq!(time(0.25), "250.0 ms");
        assert_eq!(time(42e-9), "42.00 ns");
    }
}
