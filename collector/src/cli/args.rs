//! The options of the measuring commands (a run, `compare`) and of `report`'s output, as
//! clap parses them, and their conversion into the plain values of [`crate::plan`] and
//! [`crate::judge`]. Nothing below the command layer sees these types.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use sbs_reports::human::TimeUnit;

use crate::history;
use crate::judge::regression::Settings;
use crate::output::{Destinations, Export, Format};
use crate::plan::counters::{CounterOptions, InstructionsMode};
use crate::plan::{Controls, FailurePolicy, Measures};
use crate::run::hooks::{Hook, Hooks};
use crate::run::instruments::invocations::Engine;
use crate::run::spec::TargetCi;

/// `--format`: the report formats, as the command line names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    /// An aligned table for people.
    Text,
    /// The JSON schema of `docs/schema.md`.
    Json,
    /// One row per metric.
    Csv,
    /// Bencher Metric Format JSON (bencher.dev).
    Bmf,
    /// A Markdown table for pull-request comments.
    Markdown,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Format {
        match f {
            FormatArg::Text => Format::Text,
            FormatArg::Json => Format::Json,
            FormatArg::Csv => Format::Csv,
            FormatArg::Bmf => Format::Bmf,
            FormatArg::Markdown => Format::Markdown,
        }
    }
}

/// `--color`: when the text report is coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorArg {
    /// On a terminal, unless `NO_COLOR` is set.
    Auto,
    /// Always, even into a file or a pipe.
    Always,
    /// Never.
    Never,
}

/// `--time-unit`: the unit of every time in the text and Markdown reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TimeUnitArg {
    /// Seconds.
    Second,
    /// Milliseconds.
    Millisecond,
    /// Microseconds.
    Microsecond,
    /// Nanoseconds.
    Nanosecond,
}

/// `--instructions`: how instructions are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum InstructionsArg {
    /// The PMU's `instructions` event (source `perf-hw`).
    Perf,
    /// valgrind's cachegrind (source `valgrind`).
    Valgrind,
    /// QEMU's user-mode emulator with a counting plugin (source `qemu:MODEL`).
    Qemu,
    /// The PMU if it works here, otherwise qemu if installed, otherwise valgrind.
    Auto,
}

impl From<InstructionsArg> for InstructionsMode {
    fn from(m: InstructionsArg) -> InstructionsMode {
        match m {
            InstructionsArg::Perf => InstructionsMode::Perf,
            InstructionsArg::Valgrind => InstructionsMode::Valgrind,
            InstructionsArg::Qemu => InstructionsMode::Qemu,
            InstructionsArg::Auto => InstructionsMode::Auto,
        }
    }
}

/// `--invocations-engine`: what counts the calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineArg {
    /// In-process counters where a site can be patched safely, uprobes for the rest.
    Auto,
    /// In-process counters only (no root needed); a site that cannot be patched is an error.
    Inproc,
    /// Uprobes only (root): a trap per call, no preloaded library.
    Uprobe,
}

impl From<EngineArg> for Engine {
    fn from(e: EngineArg) -> Engine {
        match e {
            EngineArg::Auto => Engine::Auto,
            EngineArg::Inproc => Engine::Inproc,
            EngineArg::Uprobe => Engine::Uprobe,
        }
    }
}

/// Where the report goes and in which format (a run, `compare` and `report` share them).
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Report format.
    #[arg(short = 'f', long, value_enum, default_value_t = FormatArg::Text)]
    pub format: FormatArg,

    /// Write the report to FILE (atomically) instead of stdout.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Also write a self-contained HTML page with plots (and trends, with a history) to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,

    /// Colour the text report: `auto` (on a terminal, unless NO_COLOR is set), `always`,
    /// `never`.
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = ColorArg::Auto)]
    pub color: ColorArg,

    /// Print every time of the text and Markdown reports in this unit (default: each in
    /// the unit that suits it). JSON, CSV and BMF keep their fixed units.
    #[arg(short = 'u', long, value_name = "UNIT", value_enum)]
    pub time_unit: Option<TimeUnitArg>,

    /// Also write the JSON report to FILE, from the same measurements.
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,

    /// Also write the CSV report to FILE, from the same measurements.
    #[arg(long, value_name = "FILE")]
    pub export_csv: Option<PathBuf>,

    /// Also write the Markdown report to FILE, from the same measurements.
    #[arg(long, value_name = "FILE")]
    pub export_markdown: Option<PathBuf>,

    /// Also write the Bencher Metric Format report to FILE, from the same measurements.
    #[arg(long, value_name = "FILE")]
    pub export_bmf: Option<PathBuf>,
}

/// Options of a measuring run.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Measure wall, user and system time and peak RSS (the default when no other group
    /// is asked for).
    #[arg(long)]
    pub time: bool,

    /// Count allocations through the preloaded agent (its own group of runs): alloc.count,
    /// alloc.bytes, alloc.frees, alloc.reallocs, heap.peak, heap.live_at_exit,
    /// alloc.processes, alloc.unmeasured_images (and heap.tree_peak for a process tree).
    #[arg(long)]
    pub alloc: bool,

    /// Take --alloc and --memory's heap numbers from the program itself instead of the
    /// preloaded agent: for Rust programs whose #[global_allocator] is wrapped in
    /// sbs_harness::CountingAlloc (custom allocators, static binaries). Source `harness`.
    #[arg(long)]
    pub alloc_harness: bool,

    /// Count the values a Rust program boxes (`Box::new`) as boxing.count (its own group
    /// of runs), exactly, with the engines of --invocations (root only for the sites left
    /// to uprobes). Calls inlined into their callers (release builds) are counted too;
    /// inlined copies with no code of their own are reported in a warning. See docs/alloc.md.
    #[arg(long)]
    pub boxing: bool,

    /// Measure the footprint (its own group of runs, without the agent): rss.peak
    /// (rusage), rss.tree_peak (procfs, whole process group); and heap.peak and, for a
    /// process tree, heap.tree_peak (agent, from the --alloc runs or from agent runs of
    /// its own)
    #[arg(long)]
    pub memory: bool,

    /// Sample the program's user call stacks on the cpu-clock software event (its own
    /// group of runs; no PMU needed) and report profile.time, the sampled CPU time, with
    /// one line per top function of the program: its inclusive time, with intervals over
    /// the runs. See docs/pinpoint.md for how stacks are sampled and unwound.
    #[arg(long)]
    pub profile_time: bool,

    /// Measured runs per metric group.
    #[arg(short = 'r', long, value_name = "N", default_value_t = 10, value_parser = parse_runs, allow_negative_numbers = true)]
    pub runs: u64,

    /// Keep adding timing runs until the interval of the wall time is within PCT percent
    /// of its mean (`--target-ci 2`: ±2%), from --min-runs up to --max-runs; the report
    /// warns when the maximum came first.
    #[arg(long, value_name = "PCT", value_parser = parse_percent)]
    pub target_ci: Option<f64>,

    /// With --target-ci: the runs to start from (default: --runs).
    #[arg(short = 'm', long, value_name = "N", requires = "target_ci", value_parser = parse_runs)]
    pub min_runs: Option<u64>,

    /// With --target-ci: the most runs per group (default: 10 times the minimum).
    #[arg(short = 'M', long, value_name = "N", requires = "target_ci", value_parser = parse_runs)]
    pub max_runs: Option<u64>,

    /// Discarded warm-up runs before each group's measured runs.
    #[arg(
        short = 'w',
        long,
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub warmup: u64,

    /// Kill a run's whole process group after this long: seconds, or with a unit
    /// (`500ms`, `2s`, `1m`). Each --setup, --prepare and --cleanup command gets the same
    /// limit.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_negative_numbers = true)]
    pub timeout: Option<Duration>,

    /// Report format and destinations.
    #[command(flatten)]
    pub report: OutputArgs,

    /// Show the child's stdout and stderr (discarded by default).
    #[arg(long)]
    pub show_output: bool,

    /// Feed FILE to the benchmark's stdin, from its start in every run (default: /dev/null).
    /// A FIFO's run waits for a writer, within --timeout.
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,

    /// Run CMD before every run, warm-up runs included, unmeasured (e.g. to reset a
    /// database or drop caches); through the --shell (sh by default).
    #[arg(long, value_name = "CMD")]
    pub prepare: Option<String>,

    /// Run CMD once per benchmark before its first run, unmeasured.
    #[arg(long, value_name = "CMD")]
    pub setup: Option<String>,

    /// Run CMD once per benchmark after its last run, unmeasured, also when a run or the
    /// --setup failed, and after Ctrl-C (a second stop signal kills it).
    #[arg(long, value_name = "CMD")]
    pub cleanup: Option<String>,

    /// Run COMMAND through this shell (`SH -c 'COMMAND'`), for command lines with pipes,
    /// globs or variables; the shell's own start-up is then measured with it. Also the
    /// shell of --prepare, --setup and --cleanup (default sh).
    #[arg(short = 'S', long, value_name = "SH")]
    pub shell: Option<PathBuf>,

    /// Scan a parameter: run once per value NAME = START, START+STEP, ... up to END, with
    /// `{NAME}` in the command replaced (harness benchmarks get `--param NAME=VALUE`). Each
    /// value is its own benchmark in the report and the history; the report fits how each
    /// metric grows with NAME (constant, log n, n, n log n, n^2).
    #[arg(short = 'P', long, num_args = 3, value_names = ["NAME", "START", "END"], conflicts_with = "parameter_list", allow_negative_numbers = true)]
    pub parameter_scan: Option<Vec<String>>,

    /// The step of -P (default 1; decimals allowed).
    #[arg(
        short = 'D',
        long,
        value_name = "STEP",
        requires = "parameter_scan",
        allow_negative_numbers = true
    )]
    pub parameter_step_size: Option<String>,

    /// Scan a parameter over listed values: `-L NAME a,b,c` (as -P, for values that are not
    /// a range).
    #[arg(short = 'L', long, num_args = 2, value_names = ["NAME", "VALUES"])]
    pub parameter_list: Option<Vec<String>>,

    /// No progress bar.
    #[arg(short = 'q', long)]
    pub quiet: bool,

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

    /// Make up to N runs at once in groups whose counts do not depend on a quiet machine
    /// (valgrind instructions, --alloc, harness counting runs); timing runs always run
    /// alone, and so does every run with --prepare or --show-output. Default: the CPUs
    /// sbs-profile may run on (those of --pin, if given).
    #[arg(short = 'j', long, value_name = "N", value_parser = parse_jobs)]
    pub jobs: Option<usize>,

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

    /// Count instructions: `perf` (the PMU), `qemu` (QEMU's user mode with a pinned CPU
    /// model: the same count on every x86-64 host, no PMU needed), `valgrind` (cachegrind)
    /// or `auto` (the PMU if it works here, otherwise qemu if installed, otherwise
    /// valgrind). Counts of different engines are never compared.
    #[arg(long, value_name = "MODE", value_enum)]
    pub instructions: Option<InstructionsArg>,

    /// The CPU model `--instructions qemu` emulates (`qemu-x86_64 -cpu help` lists them);
    /// default: Haswell-v2,-pcid,-x2apic,-tsc-deadline,-invpcid (AVX2, no TSX). Counts of
    /// different models are never compared: glibc picks its code by CPUID.
    #[arg(long, value_name = "MODEL")]
    pub qemu_cpu: Option<String>,

    /// List the perf events this machine can count, and why not and how to fix it for the
    /// others; then exit.
    #[arg(long, exclusive = true)]
    pub list_counters: bool,

    /// Name of the benchmark in reports (default: the command line). `compare` takes one
    /// per command, in the order of the commands (`-n old -n new`), for short labels
    #[arg(short = 'n', long, value_name = "NAME", value_parser = parse_name)]
    pub name: Vec<String>,

    /// History, baselines, thresholds.
    #[command(flatten)]
    pub regression: RegressionArgs,

    /// Exit with code 2 when the report has warnings (a harnessed benchmark that measures
    /// nothing, a constant input, state that drifts, probes that could not be placed...),
    /// once the report is written and the history saved: for CI. A regression keeps its
    /// exit code 1 (the warnings are still said on stderr).
    #[arg(long)]
    pub strict: bool,

    /// Count calls of the functions a PATTERN names (repeatable). Exact, across threads
    /// and child processes; these runs carry no timing. A pattern given twice is counted
    /// once. Where it is safe, each counted place is patched in the process to increment
    /// a counter (no root needed); the others, and every place in a static program or a
    /// harnessed benchmark, get a uprobe (root): see --invocations-engine. A program
    /// setuid to another user is refused (the kernel ends perf events at its exec).
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
    /// own row in the report. `LIBRARY:NAME` (a path, or a file name with `.so`) looks in
    /// that library only, also one the program loads at run time with dlopen (counted
    /// from the moment dlopen maps it, its constructors' calls included). Calls inlined
    /// into their callers are counted too, from the debug info (in the file or a separate
    /// debug file under /usr/lib/debug): a counter on each place where control enters an
    /// inlined copy; their row is labelled
    /// `[inlined, N sites]`. Inlined copies that cannot be counted are reported in a warning.
    #[arg(long = "invocations", value_name = "PATTERN", verbatim_doc_comment)]
    pub invocations: Vec<String>,

    /// With --invocations: one row per inlined site, with the function it was inlined
    /// into and its call site (file:line), and `uncertain` where the entry analysis is.
    #[arg(long)]
    pub invocations_detail: bool,

    /// With --invocations or --boxing, where uprobes cannot be used (not root): count the
    /// sites the in-process engine can patch and leave the others out. Each metric that
    /// misses sites is then a lower bound, reported as not exact, with a note naming how
    /// many sites were left out and why. Without it such a run stops before it starts and
    /// says which sites need root.
    #[arg(long)]
    pub invocations_partial: bool,

    /// What counts --invocations and --boxing: `auto` patches each site that can be
    /// patched safely to increment a counter in the process (a few ns per call) and puts a
    /// uprobe (~14 µs per call, root) on the others, and on every site of a static
    /// program or of a harnessed benchmark (--bench, --harness); `inproc` only
    /// patches; `uprobe` only probes (no preloaded library).
    #[arg(long, value_enum, value_name = "ENGINE", default_value_t = EngineArg::Auto)]
    pub invocations_engine: EngineArg,

    /// With --invocations: check the counts against DEBUG_PROGRAM, the same source built
    /// without optimisation (where every call is a real call), run once under callgrind
    /// with the same arguments. The report lists, per source line of the calls, where the
    /// counts differ (JSON `invocation_checks`), and warns if any does. Needs valgrind and
    /// debug info in both builds; not for --bench or --harness.
    #[arg(
        long,
        value_name = "DEBUG_PROGRAM",
        requires = "invocations",
        conflicts_with_all = ["bench", "harness"]
    )]
    pub invocations_check: Option<PathBuf>,

    /// Build cargo bench target NAME (release, with debug info and symbols kept) and
    /// measure each of its sbs-harness benchmarks in its own child processes, per
    /// operation; arguments after `--` are name filters.
    #[arg(long = "bench", value_name = "NAME", conflicts_with = "harness")]
    pub bench: Option<String>,

    /// COMMAND is a binary built with sbs-harness: measure each of its benchmarks (its
    /// further arguments are name filters) in its own child processes, per operation.
    #[arg(long)]
    pub harness: bool,

    /// COMMAND is an application with functions marked #[sbs_harness::capture]: measure
    /// the captured calls (`sbs-profile capture`) of each function whose path PATTERN
    /// matches (whole path segments, as --invocations), one benchmark per function named by
    /// its path, each operation one captured call, per operation as --harness.
    #[arg(long, value_name = "PATTERN", conflicts_with_all = ["bench", "harness"])]
    pub replay: Option<String>,

    /// With --replay: the captures directory [default: sbs-captures].
    #[arg(long, value_name = "DIR", requires = "replay")]
    pub captures: Option<PathBuf>,

    /// List the benchmarks of the harness binary (COMMAND, or the --bench target) and exit.
    #[arg(long)]
    pub list: bool,

    /// Override a harness benchmark parameter (repeatable).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,

    /// Harness: operations per counting run (invocations, allocations, counters).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = parse_ops)]
    pub ops: u64,

    /// Harness: measurements kept per timing process (also the steady-state window).
    #[arg(long, value_name = "K", default_value_t = 10)]
    pub samples: usize,

    /// Harness: pass ARG to the benchmark binary as it is (repeatable), e.g.
    /// `--harness-arg=--warmup=50` or `--harness-arg=--cov=0.05`.
    #[arg(long = "harness-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub harness_args: Vec<String>,

    /// With --bench: the package whose bench target it is (`cargo bench -p PKG`).
    #[arg(short = 'p', long, value_name = "PKG", requires = "bench")]
    pub package: Option<String>,

    /// With --bench: pass ARG to `cargo bench` (repeatable), e.g. `--cargo-arg=--features
    /// --cargo-arg=fast`.
    #[arg(long = "cargo-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub cargo_args: Vec<String>,

    /// Refuse a --invocations pattern that matches more functions than this.
    #[arg(long, value_name = "N", default_value_t = sbs_probes::resolve::DEFAULT_MAX_PROBES)]
    pub max_probes: usize,

    /// The benchmark command and its arguments (after `--`).
    #[arg(value_name = "COMMAND", trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

/// Options of the regression machinery, shared by a plain run and `compare`.
#[derive(Debug, Clone, Args)]
pub struct RegressionArgs {
    /// Directory of the saved history and baselines.
    #[arg(long, value_name = "DIR", default_value = history::DEFAULT_DIR)]
    pub history: PathBuf,

    /// Save this run's samples as a new history entry (compared with by later runs).
    #[arg(long)]
    pub save: bool,

    /// Save this run's samples as baseline NAME, replacing the previous one.
    #[arg(long, value_name = "NAME")]
    pub save_baseline: Option<String>,

    /// Compare with baseline NAME instead of the latest history entries.
    #[arg(long, value_name = "NAME")]
    pub baseline: Option<String>,

    /// Practical threshold in percent: a significant change within it is reported but does
    /// not fail. `PCT` for every metric, `METRIC=PCT` or `PREFIX*=PCT` for some
    /// (repeatable; default 2); `+N` adds an absolute floor in the metric's unit
    /// (`alloc.count=+5`).
    #[arg(long, value_name = "[METRIC=]PCT|+N")]
    pub threshold: Vec<String>,

    /// Compare with at most this many of the latest history entries (ANOVA from 2 on).
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub history_depth: u64,

    /// Before a measured metric (a time, a size; not an exact count) fails against the
    /// history or a baseline, make N more runs of its group and decide on all of them
    /// (default: as many as the first runs; 0: fail on the first look, as before).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(0..=100_000))]
    pub confirm: Option<u64>,

    /// Judge times also when this run or a saved run it is compared with ran on a busy
    /// machine (other processes took 10% of the CPUs); by default such a time is reported
    /// as not judged and cannot fail, and an exact count decides.
    #[arg(long)]
    pub judge_busy: bool,
}

impl OutputArgs {
    /// Where the report goes.
    pub fn destinations(&self) -> Destinations {
        let exports = [
            ("--export-json", Format::Json, &self.export_json),
            ("--export-csv", Format::Csv, &self.export_csv),
            ("--export-markdown", Format::Markdown, &self.export_markdown),
            ("--export-bmf", Format::Bmf, &self.export_bmf),
        ];
        Destinations {
            format: self.format.into(),
            color: match self.color {
                ColorArg::Auto => None,
                ColorArg::Always => Some(true),
                ColorArg::Never => Some(false),
            },
            time_unit: self.time_unit.map(|u| match u {
                TimeUnitArg::Second => TimeUnit::Second,
                TimeUnitArg::Millisecond => TimeUnit::Millisecond,
                TimeUnitArg::Microsecond => TimeUnit::Microsecond,
                TimeUnitArg::Nanosecond => TimeUnit::Nanosecond,
            }),
            output: self.output.clone(),
            html: self.html.clone(),
            exports: exports
                .into_iter()
                .filter_map(|(option, format, path)| {
                    Some(Export {
                        option,
                        format,
                        path: path.clone()?,
                    })
                })
                .collect(),
        }
    }
}

impl RegressionArgs {
    /// The regression settings; saved runs that failed serve as references only when
    /// this run keeps failing runs too (`include_failed`, from `--ignore-failure`).
    pub fn settings(&self, include_failed: bool) -> Settings {
        Settings {
            history: self.history.clone(),
            save: self.save,
            save_baseline: self.save_baseline.clone(),
            baseline: self.baseline.clone(),
            thresholds: self.threshold.clone(),
            depth: usize::try_from(self.history_depth).unwrap_or(usize::MAX),
            include_failed,
            confirm: self
                .confirm
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            judge_busy: self.judge_busy,
        }
    }
}

impl RunArgs {
    /// The metric groups asked for.
    pub fn measures(&self) -> Measures {
        Measures {
            time: self.time,
            alloc: self.alloc,
            alloc_harness: self.alloc_harness,
            boxing: self.boxing,
            memory: self.memory,
            profile_time: self.profile_time,
            invocations: self.invocations.clone(),
            invocations_detail: self.invocations_detail,
            invocations_partial: self.invocations_partial,
            invocations_engine: self.invocations_engine.into(),
            max_probes: self.max_probes,
            counters: CounterOptions {
                counters: self.counters.clone(),
                no_multiplex: self.no_multiplex,
                best_effort: self.counters_best_effort,
                instructions: self.instructions.map(Into::into),
                region: false,
                qemu_cpu: self.qemu_cpu.clone(),
            },
            ops: self.ops,
        }
    }

    /// How runs are started and repeated.
    pub fn controls(&self) -> Controls {
        let runs = self.min_runs.unwrap_or(self.runs) as usize;
        Controls {
            runs,
            target: self.target_ci.map(|ci| TargetCi {
                ci,
                max_runs: self
                    .max_runs
                    .map_or(runs.saturating_mul(10), |m| m as usize),
            }),
            warmup: self.warmup as usize,
            confidence: self.confidence,
            failure: if self.ignore_failure {
                FailurePolicy::Ignore
            } else {
                FailurePolicy::Fail
            },
            clean_env: self.clean_env,
            env: self.env.clone(),
            pin: self.pin.clone(),
            jobs: self.jobs.unwrap_or_else(|| default_jobs(&self.pin)),
            aslr: self.aslr,
            timeout: self.timeout,
            show_output: self.show_output,
            progress: !self.quiet && std::io::stderr().is_terminal(),
            hooks: self.hooks(),
            input: self.input.clone(),
        }
    }

    /// The shell of `--shell` and of the hooks.
    pub fn shell(&self) -> PathBuf {
        self.shell.clone().unwrap_or_else(|| PathBuf::from("sh"))
    }

    fn hooks(&self) -> Hooks {
        let hook = |option, command: &Option<String>| {
            command.as_ref().map(|c| Hook {
                option,
                shell: self.shell(),
                command: c.clone(),
            })
        };
        Hooks {
            setup: hook("--setup", &self.setup),
            prepare: hook("--prepare", &self.prepare),
            cleanup: hook("--cleanup", &self.cleanup),
        }
    }

    /// The arguments of `cargo bench` for `--bench`: `-p PKG` first, then `--cargo-arg`s.
    pub fn cargo_args(&self) -> Vec<String> {
        let package = self
            .package
            .iter()
            .flat_map(|p| ["-p".to_string(), p.clone()]);
        package.chain(self.cargo_args.iter().cloned()).collect()
    }
}

fn parse_percent(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches('%');
    match t.parse::<f64>() {
        Ok(p) if p > 0.0 && p < 100.0 => Ok(p / 100.0),
        _ => Err(format!(
            "'{s}' is not a percentage between 0 and 100 (e.g. 2 for ±2%)"
        )),
    }
}

/// Runs at once by default: one per CPU the runs may use (the CPUs of `--pin`, else
/// those this process may run on).
fn default_jobs(pin: &[usize]) -> usize {
    let mut cpus: Vec<usize> = pin.to_vec();
    cpus.sort_unstable();
    cpus.dedup();
    match cpus.len() {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    }
}

fn parse_jobs(s: &str) -> Result<usize, String> {
    let n = whole(s, "runs at once", usize::MAX as u64)?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

fn parse_runs(s: &str) -> Result<u64, String> {
    whole(s, "runs per group", crate::plan::MAX_RUNS as u64)
}

fn parse_ops(s: &str) -> Result<u64, String> {
    whole(s, "operations", u64::MAX)
}

/// A whole number of `what` from 1 to `most`, with an error that says which bound it
/// missed.
fn whole(s: &str, what: &str, most: u64) -> Result<u64, String> {
    use std::num::IntErrorKind;
    match s.trim().parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) if n > most => Err(format!("'{s}' is too large: at most {most} {what}")),
        Ok(n) => Ok(n),
        Err(e) if *e.kind() == IntErrorKind::PosOverflow => {
            Err(format!("'{s}' is too large: at most {most} {what}"))
        }
        Err(_) => Err(format!("'{s}' is not a whole number of {what}")),
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

pub(super) fn parse_confidence(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches('%');
    let v: f64 = t
        .parse()
        .map_err(|_| format!("'{s}' is not a confidence level; write 95 or 0.95"))?;
    let v = if v >= 1.0 { v / 100.0 } else { v };
    if !(v > 0.0 && v < 1.0) {
        return Err(format!("'{s}' must lie strictly between 0 and 100 percent"));
    }
    // Reports print the level in full, to LEVEL_DECIMALS decimals of a percent: a finer
    // one would print rounded (99.999999999999 as 100).
    let decimals = sbs_reports::human::LEVEL_DECIMALS;
    let scale = 10f64.powi(decimals as i32);
    let percent = v * 100.0;
    let shown = (percent * scale).round() / scale;
    if (percent - shown).abs() > 1e-12 || shown >= 100.0 || shown <= 0.0 {
        return Err(format!(
            "'{s}' is finer than a report can print: give the level as a percentage with at \
             most {decimals} decimals, below 100 (e.g. 99.9999999999)"
        ));
    }
    Ok(v)
}

/// A benchmark's name: anything but blank, which no report, no history directory and no
/// `--baseline` lookup could tell apart.
fn parse_name(s: &str) -> Result<String, String> {
    match s.trim().is_empty() {
        true => Err(
            "a benchmark's name cannot be empty or blank: give a name with a visible \
             character, or drop --name to name it by its command line"
                .into(),
        ),
        false => Ok(s.to_string()),
    }
}

fn parse_env(s: &str) -> Result<(OsString, OsString), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.into(), v.into())),
        _ => Err(format!("'{s}' is not KEY=VALUE")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let fine = parse_confidence("99.99999999").unwrap();
        assert_eq!(sbs_reports::human::level(fine), "99.99999999");
        let e = parse_confidence("99.999999999999").unwrap_err();
        assert!(e.contains("at most 10 decimals"), "{e}");
        assert_eq!(sbs_reports::human::level(0.9999999999), "99.99999999");
        assert_eq!(sbs_reports::human::level(0.995), "99.5");
        assert_eq!(sbs_reports::human::level(0.95), "95");
        assert!(parse_confidence("0").is_err());
    }
}
