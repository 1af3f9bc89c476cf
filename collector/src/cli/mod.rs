//! The command line (clap derive) and its conversion into a validated [`Plan`].

pub mod report;

use std::ffi::{OsStr, OsString};
use std::io::IsTerminal;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Parser};

use crate::plan::{Benchmark, FailurePolicy, Format, Plan};
use crate::run::instrument::Group;
use crate::run::instruments::alloc::{AgentError, AllocAgent, AllocMetrics, AllocPath};
use crate::run::instruments::boxing::Boxing;
use crate::run::instruments::invocations::Invocations;
use crate::run::instruments::memory::Memory;
use crate::run::instruments::per_op::{HarnessMode, HarnessRecords};
use crate::run::instruments::timing::Timing;
use crate::run::runner::RunConfig;

/// `PATH` of a clean environment (`--clean-env`).
pub const CLEAN_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Count what a stopwatch cannot: invocations, allocations, footprint, instructions, time.
#[derive(Debug, Parser)]
#[command(
    name = "sbs-profile",
    version,
    about,
    after_help = "Each metric group runs in its own series of fresh child processes, so timing is \
never measured in a run that carries an agent, a probe or a counter.\n\n\
Exit codes: 0 success, 1 a metric regressed past its threshold, 2 error, 130 interrupted.",
    after_long_help = "Each metric group runs in its own series of fresh child processes, so timing \
is never measured in a run that carries an agent, a probe or a counter.\n\n\
Examples:\n  sbs-profile -- ./target/release/mybench\n  \
sbs-profile --runs 20 --format json --output result.json -- ./mybench --size 1000\n\n\
Exit codes: 0 success, 1 a metric regressed past its threshold, 2 error, 130 interrupted."
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
    /// Compare two or more commands: they run interleaved (A B A B ...) so drift hits all
    /// alike, and every metric of B, C... gets a verdict against A's (Welch for two
    /// commands, ANOVA for more).
    #[command(
        mut_arg("command", |a| a
            .value_name("COMMANDS")
            .help("Two or more commands, each one quoted argument (split into words, no shell)")),
        after_help = "Each COMMAND is one argument, split into words as a shell would (no shell \
runs it): sbs-profile compare './old --n 100' './new --n 100'\n\n\
Exit codes: 0 no regression, 1 a later command regressed past its threshold against the first, \
2 error, 130 interrupted."
    )]
    Compare(Box<RunArgs>),
    /// Render a report from the saved history without running anything: per benchmark,
    /// its latest entry compared with the ones before, and every metric's trend.
    Report(crate::cli::report::ReportArgs),
}

/// Where the report goes and in which format (a run, `compare` and `report` share them).
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Report format.
    #[arg(short = 'f', long, value_enum, default_value_t = Format::Text)]
    pub format: Format,

    /// Write the report to FILE (atomically) instead of stdout.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Also write a self-contained HTML page with plots (and trends, with a history) to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

/// Options of a measuring run.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Measured runs per metric group.
    #[arg(short = 'r', long, value_name = "N", default_value_t = 10, value_parser = parse_runs, allow_negative_numbers = true)]
    pub runs: u64,

    /// Discarded warm-up runs before each group's measured runs.
    #[arg(
        short = 'w',
        long,
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub warmup: u64,

    /// Measure wall, user and system time and peak RSS (the default when no other group
    /// is asked for).
    #[arg(long)]
    pub time: bool,

    /// Count allocations through the preloaded agent (its own group of runs): alloc.count,
    /// alloc.bytes, alloc.frees, alloc.reallocs, heap.peak, heap.live_at_exit.
    #[arg(long)]
    pub alloc: bool,

    /// Take --alloc and --memory's heap numbers from the program itself instead of the
    /// preloaded agent: for Rust programs whose #[global_allocator] is wrapped in
    /// sbs_harness::CountingAlloc (custom allocators, static binaries). Source `harness`.
    #[arg(long)]
    pub alloc_harness: bool,

    /// Count the values a Rust program boxes (`Box::new`) as boxing.count (its own group
    /// of runs; uprobes, needs root). Exact for out-of-line calls; inlined ones (release
    /// builds) are reported in a warning, not counted. See docs/alloc.md.
    #[arg(long)]
    pub boxing: bool,

    /// Measure the footprint (its own group of runs, without the agent): rss.peak
    /// (rusage), rss.tree_peak (procfs, whole process group); and heap.peak (agent, from
    /// the --alloc runs or from agent runs of its own)
    #[arg(long)]
    pub memory: bool,

    /// Kill a run's whole process group after this long: seconds, or with a unit
    /// (`500ms`, `2s`, `1m`).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_negative_numbers = true)]
    pub timeout: Option<Duration>,

    /// Report format and destinations.
    #[command(flatten)]
    pub report: OutputArgs,

    /// Show the child's stdout and stderr (discarded by default).
    #[arg(long)]
    pub show_output: bool,

    /// Keep measuring when the child exits non-zero, dies from a signal or times out.
    #[arg(short = 'i', long)]
    pub ignore_failure: bool,

    /// Confidence level of the intervals, as a percentage or a fraction (95, 99, 0.9).
    #[arg(long, value_name = "LEVEL", default_value = "95", value_parser = parse_confidence)]
    pub confidence: f64,

    /// Pin the child to these CPUs (comma-separated list, e.g. `1` or `0,1`).
    #[arg(long, value_name = "CPUS", value_delimiter = ',')]
    pub pin: Vec<usize>,

    /// Keep address-space layout randomisation on (by default it is off in the child).
    #[arg(long)]
    pub aslr: bool,

    /// Start the child from an empty environment (plus a fixed PATH and any --env).
    #[arg(long)]
    pub clean_env: bool,

    /// Set an environment variable in the child (repeatable).
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(OsString, OsString)>,

    /// Count perf events (comma-separated, perf's names, optional `:u`/`:k`/`:uk` scope),
    /// e.g. `instructions,cycles,page-faults,context-switches`. See --list-counters.
    #[arg(long, value_name = "LIST")]
    pub counters: Option<String>,

    /// Never let the kernel time-share (multiplex) hardware counters: measure each group of
    /// hardware events in runs of its own.
    #[arg(long)]
    pub no_multiplex: bool,

    /// Skip counter events this machine cannot count (with a warning) instead of failing.
    #[arg(long)]
    pub counters_best_effort: bool,

    /// Count instructions: `perf` (the PMU), `valgrind` (cachegrind, no PMU needed) or
    /// `auto` (the PMU if it works here, otherwise valgrind). The two are never compared.
    #[arg(long, value_name = "MODE", value_enum)]
    pub instructions: Option<crate::plan::counters::InstructionsMode>,

    /// List the perf events this machine can count, and why not and how to fix it for the
    /// others; then exit.
    #[arg(long, exclusive = true)]
    pub list_counters: bool,

    /// Name of the benchmark in reports (default: the command line). `compare` takes one
    /// per command, in the order of the commands (`-n old -n new`), for short labels
    #[arg(short = 'n', long, value_name = "NAME")]
    pub name: Vec<String>,

    /// History, baselines, thresholds.
    #[command(flatten)]
    pub regression: crate::judge::regression::RegressionArgs,

    /// Count calls of the functions a PATTERN names, through uprobes (repeatable; needs
    /// root). Exact, across threads and child processes; these runs carry no timing.
    ///
    /// Names are compared by path segments, with generic arguments, C++ parameter lists
    /// and return types dropped; the pattern must equal the last whole segments:
    /// `Vec::push` matches `alloc::vec::Vec<T,A>::push` and `<alloc::vec::Vec<u32>>::push`
    /// but not `String::push_str` nor `Vec::push_mut`. Trait methods match through the
    /// type or the trait: `Widget::fmt` and `Display::fmt` both match
    /// `<app::Widget as core::fmt::Display>::fmt`. C++: `Widget::draw` matches every
    /// overload of `ns::Widget::draw(...)`. A raw symbol name (`malloc`, `_ZN2ns1fEv`) or
    /// a full demangled name matches exactly. Functions of the shared libraries the
    /// program loads are included (`malloc` finds glibc's); each matched function is its
    /// own row in the report. Calls inlined into their callers are counted too, from the
    /// debug info (in the file or a separate debug file under /usr/lib/debug): a probe on
    /// each place where control enters an inlined copy; their row is labelled
    /// `[inlined, N sites]`. Inlined copies that cannot be probed are counted in a warning.
    #[arg(long = "invocations", value_name = "PATTERN", verbatim_doc_comment)]
    pub invocations: Vec<String>,

    /// With --invocations: one row per inlined site, with the function it was inlined
    /// into and its call site (file:line), and `uncertain` where the entry analysis is.
    #[arg(long)]
    pub invocations_detail: bool,

    /// Build cargo bench target NAME (release, with debug info and symbols kept) and
    /// measure each of its sbs-harness benchmarks in its own child processes, per
    /// operation; arguments after `--` are name filters.
    #[arg(long = "bench", value_name = "NAME", conflicts_with = "harness")]
    pub bench: Option<String>,

    /// COMMAND is a binary built with sbs-harness: measure each of its benchmarks (its
    /// further arguments are name filters) in its own child processes, per operation.
    #[arg(long)]
    pub harness: bool,

    /// List the benchmarks of the harness binary (COMMAND, or the --bench target) and exit.
    #[arg(long)]
    pub list: bool,

    /// Override a harness benchmark parameter (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,

    /// Harness: operations per counting run (invocations, allocations, counters).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = parse_runs)]
    pub ops: u64,

    /// Harness: measurements kept per timing process (also the steady-state window).
    #[arg(long, value_name = "K", default_value_t = 10)]
    pub samples: usize,

    /// Harness: pass ARG to the benchmark binary as it is (repeatable), e.g.
    /// `--harness-arg=--warmup=50` or `--harness-arg=--cov=0.05`.
    #[arg(long = "harness-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub harness_args: Vec<String>,

    /// With --bench: pass ARG to `cargo bench` (repeatable), e.g. `--cargo-arg=-p
    /// --cargo-arg=mypackage`.
    #[arg(long = "cargo-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub cargo_args: Vec<String>,

    /// Refuse a --invocations pattern that matches more functions than this.
    #[arg(long, value_name = "N", default_value_t = sbs_probes::resolve::DEFAULT_MAX_PROBES)]
    pub max_probes: usize,

    /// The benchmark command and its arguments (after `--`).
    #[arg(value_name = "COMMAND", trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

fn parse_runs(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{s}' is not a whole number of runs")),
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    let value: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a duration; write seconds (2.5) or 500ms, 2s, 1m"))?;
    let secs = value * scale;
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("'{s}' must be a positive duration"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("'{s}': {e}"))
}

pub(crate) fn parse_confidence(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches('%');
    let v: f64 = t
        .parse()
        .map_err(|_| format!("'{s}' is not a confidence level; write 95 or 0.95"))?;
    let v = if v >= 1.0 { v / 100.0 } else { v };
    if v > 0.0 && v < 1.0 {
        Ok(v)
    } else {
        Err(format!("'{s}' must lie strictly between 0 and 100 percent"))
    }
}

fn parse_env(s: &str) -> Result<(OsString, OsString), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.into(), v.into())),
        _ => Err(format!("'{s}' is not KEY=VALUE")),
    }
}

/// Find the program the way `execvp` would, with a message that says what to fix.
pub fn resolve_program(program: &OsStr, path_var: Option<&OsStr>) -> anyhow::Result<PathBuf> {
    let shown = Path::new(program).display().to_string();
    if program.as_encoded_bytes().contains(&b'/') {
        let path = PathBuf::from(program);
        let meta = std::fs::metadata(&path).with_context(|| {
            format!("command not found: '{shown}' does not exist; check the path")
        })?;
        if meta.is_dir() {
            bail!("'{shown}' is a directory, not a program");
        }
        if meta.permissions().mode() & 0o111 == 0 {
            bail!(
                "'{shown}' is not executable (mode {:o}); run `chmod +x {shown}`",
                meta.permissions().mode() & 0o777
            );
        }
        return Ok(path);
    }
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    which::which_in(program, path_var, cwd).map_err(|_| {
        anyhow::anyhow!(
            "command not found: '{shown}' is not an executable in PATH; give its path (e.g. ./{shown}) or fix PATH"
        )
    })
}

fn available_cpus() -> Vec<usize> {
    match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        Ok(set) => (0..nix::sched::CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The metric groups of one benchmark, in run order. Every benchmark of a plan gets the
/// same list (interleaved runs rely on it).
///
/// For a harnessed benchmark (`harness` is its name) uprobes, perf counters and valgrind
/// count inside the measured region only, and every group ends with the harness instrument that reports metrics per
/// operation.
fn build_groups(
    args: &RunArgs,
    run: &RunConfig,
    harness: Option<&str>,
) -> anyhow::Result<Vec<Group>> {
    let mut groups = Vec::new();
    if !args.invocations.is_empty() {
        groups.push(invocations_group(args, run, harness.is_some())?);
    } else if args.invocations_detail {
        bail!("--invocations-detail details the rows of --invocations; add --invocations PATTERN");
    }
    let alloc_path = if args.alloc_harness {
        AllocPath::Harness
    } else {
        AllocPath::Agent
    };
    if args.alloc_harness && !args.alloc && !args.memory {
        bail!(
            "--alloc-harness changes where --alloc and --memory get their numbers; add one of them"
        );
    }
    if args.alloc {
        groups.push(Group {
            name: "alloc".into(),
            instruments: vec![Box::new(AllocAgent::new(
                AllocMetrics::All,
                alloc_path,
                &run.program,
                &run.env,
            )?)],
        });
    }
    if args.boxing {
        let ld_library_path = run
            .env
            .iter()
            .find(|(k, _)| k == "LD_LIBRARY_PATH")
            .map(|(_, v)| v.as_os_str());
        let boxing = Boxing::new(&run.program, ld_library_path, args.max_probes)?;
        let boxing = if harness.is_some() {
            boxing.in_region()
        } else {
            boxing
        };
        groups.push(Group {
            name: "boxing".into(),
            instruments: vec![Box::new(boxing)],
        });
    }
    if args.memory {
        // RSS is measured in runs without the agent (its bookkeeping adds to the resident
        // size it would measure). heap.peak comes from the alloc runs with --alloc, else
        // from agent runs of their own (group `heap`), or, with --alloc-harness, from the
        // program's own counting allocator in the memory runs (it adds nothing to RSS). A
        // program the agent cannot load into (static, setuid) still gets its RSS, and a
        // warning instead of heap.peak.
        let mut memory = Memory::default();
        let mut heap = None;
        if !args.alloc {
            match AllocAgent::new(AllocMetrics::HeapPeak, alloc_path, &run.program, &run.env) {
                Ok(agent) => heap = Some(agent),
                Err(e) => match e.downcast_ref::<AgentError>() {
                    Some(AgentError::Unsupported { .. }) => {
                        memory.note(format!("heap.peak not measured: {e}"));
                    }
                    _ => return Err(e),
                },
            }
        }
        let mut instruments: Vec<Box<dyn crate::run::instrument::Instrument>> =
            vec![Box::new(memory)];
        let mut heap_group = None;
        match heap {
            Some(counting) if alloc_path == AllocPath::Harness => {
                instruments.push(Box::new(counting))
            }
            Some(agent) => {
                heap_group = Some(Group {
                    name: "heap".into(),
                    instruments: vec![Box::new(agent)],
                })
            }
            None => {}
        }
        groups.push(Group {
            name: "memory".into(),
            instruments,
        });
        groups.extend(heap_group);
    }
    groups.extend(crate::plan::counters::groups_for(args, harness.is_some())?);
    let others_requested = !groups.is_empty();
    // A harnessed benchmark is always timed: time.op is what it is for.
    if args.time || !others_requested || harness.is_some() {
        groups.insert(
            0,
            Group {
                name: "timing".into(),
                instruments: vec![Box::new(Timing { rss: !args.memory })],
            },
        );
    }
    if let Some(name) = harness {
        for g in groups.iter_mut() {
            let (mode, prefixes) = match g.name.as_str() {
                "timing" => (HarnessMode::Time, Vec::new()),
                "invocations" => (
                    HarnessMode::Count { ops: args.ops },
                    vec!["invocations.".to_string()],
                ),
                "boxing" => (
                    HarnessMode::Count { ops: args.ops },
                    vec!["boxing.".to_string()],
                ),
                n if n.starts_with("counters") || n == "valgrind" => (
                    HarnessMode::Count { ops: args.ops },
                    vec!["counter.".to_string()],
                ),
                _ => (HarnessMode::Count { ops: args.ops }, Vec::new()),
            };
            g.instruments.push(Box::new(
                HarnessRecords::new(name, mode, prefixes).counting_alloc(args.alloc_harness),
            ));
        }
    }
    Ok(groups)
}

/// All `--invocations` patterns share one group of runs.
fn invocations_group(args: &RunArgs, run: &RunConfig, region: bool) -> anyhow::Result<Group> {
    let ld_library_path = run
        .env
        .iter()
        .find(|(k, _)| k == "LD_LIBRARY_PATH")
        .map(|(_, v)| v.as_os_str());
    let instrument = Invocations::new(
        &run.program,
        ld_library_path,
        &args.invocations,
        args.max_probes,
        args.invocations_detail,
    )?;
    let instrument = if region {
        instrument.in_region()
    } else {
        instrument
    };
    Ok(Group {
        name: "invocations".into(),
        instruments: vec![Box::new(instrument)],
    })
}

/// The harness binary and the name filters of `--bench`/`--harness`/`--list`.
pub fn harness_target(args: &RunArgs) -> anyhow::Result<(PathBuf, Vec<OsString>)> {
    if let Some(bench) = &args.bench {
        let exe = crate::plan::bench_binary::build_bench(bench, &args.cargo_args)?;
        return Ok((exe, args.command.clone()));
    }
    let Some(program) = args.command.first() else {
        bail!("no harness binary given; usage: sbs-profile --harness [OPTIONS] -- BINARY [FILTER...] or sbs-profile --bench NAME [-- FILTER...]");
    };
    let path_var = std::env::var_os("PATH");
    let exe = resolve_program(program, path_var.as_deref())?;
    Ok((exe, args.command[1..].to_vec()))
}

/// Validate the arguments and build the plan.
pub fn build_plan(args: RunArgs) -> anyhow::Result<Plan> {
    if args.bench.is_some() || args.harness {
        return build_harness_plan(args);
    }
    let Some(program) = args.command.first() else {
        bail!("no command given; usage: sbs-profile [OPTIONS] -- COMMAND [ARGS...]");
    };
    let env = child_env(&args);
    let path_var = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_os_str());
    let resolved = resolve_program(program, path_var)?;
    if args.name.len() > 1 {
        bail!(
            "--name was given {} times; a run names its one benchmark once (compare takes one per command)",
            args.name.len()
        );
    }
    let name = args.name.first().cloned().unwrap_or_else(|| {
        args.command
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    });
    let run = run_config(&args, resolved, args.command.clone(), env)?;
    let groups = build_groups(&args, &run, None)?;
    Ok(plan_of(args, vec![Benchmark { name, run, groups }]))
}

/// One benchmark per harness benchmark selected, each in its own child processes
/// (`BINARY --sbs-run NAME`), run interleaved like commands of `compare`.
fn build_harness_plan(args: RunArgs) -> anyhow::Result<Plan> {
    if args.samples < 2 {
        bail!(
            "--samples {}: at least 2 measurements are needed",
            args.samples
        );
    }
    let (exe, filters) = harness_target(&args)?;
    let listed = crate::plan::bench_binary::list(&exe, &filters)?;
    crate::plan::bench_binary::check_params(&args.params, &listed)?;
    let env = child_env(&args);
    let mut benchmarks = Vec::new();
    for l in listed {
        let child_args = crate::plan::bench_binary::child_args(
            &exe,
            &l.name,
            &args.params,
            args.samples,
            &args.harness_args,
        );
        let run = run_config(&args, exe.clone(), child_args, env.clone())?;
        let groups = build_groups(&args, &run, Some(&l.name))?;
        benchmarks.push(Benchmark {
            name: l.name,
            run,
            groups,
        });
    }
    Ok(plan_of(args, benchmarks))
}

fn child_env(args: &RunArgs) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = if args.clean_env {
        vec![("PATH".into(), CLEAN_PATH.into())]
    } else {
        std::env::vars_os().collect()
    };
    for (k, v) in &args.env {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    env
}

fn run_config(
    args: &RunArgs,
    program: PathBuf,
    argv: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
) -> anyhow::Result<RunConfig> {
    if !args.pin.is_empty() {
        let cpus = available_cpus();
        if let Some(bad) = args.pin.iter().find(|c| !cpus.contains(c)) {
            bail!("--pin {bad}: no such CPU available to this process (available: {cpus:?})");
        }
    }
    Ok(RunConfig {
        program,
        args: argv,
        env,
        show_output: args.show_output,
        disable_aslr: !args.aslr,
        cpus: args.pin.clone(),
        timeout: args.timeout,
    })
}

fn plan_of(args: RunArgs, benchmarks: Vec<Benchmark>) -> Plan {
    Plan {
        benchmarks,
        runs: args.runs as usize,
        warmup: args.warmup as usize,
        confidence: args.confidence,
        failure: if args.ignore_failure {
            FailurePolicy::Ignore
        } else {
            FailurePolicy::Fail
        },
        clean_env: args.clean_env,
        report: args.report,
        progress: std::io::stderr().is_terminal(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("abc").is_err());
    }

    #[test]
    fn confidence_levels() {
        assert_eq!(parse_confidence("95"), Ok(0.95));
        assert_eq!(parse_confidence("0.99"), Ok(0.99));
        assert_eq!(parse_confidence("90%"), Ok(0.9));
        assert!(parse_confidence("100").is_err());
        assert!(parse_confidence("0").is_err());
    }

    #[test]
    fn trailing_command_keeps_its_flags() {
        let cli = Cli::try_parse_from(["sbs-profile", "--runs", "3", "--", "prog", "--runs", "9"])
            .unwrap();
        assert_eq!(cli.run.runs, 3);
        assert_eq!(cli.run.command, vec!["prog", "--runs", "9"]);
    }
}
