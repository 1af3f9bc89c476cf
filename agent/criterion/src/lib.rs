//! criterion's benchmark API, run by `sbs-harness`: a bench file written for criterion
//! builds against this crate when its dependency line is renamed,
//!
//! ```toml
//! [dev-dependencies]
//! criterion = { package = "sbs-criterion", path = "../sbs-profile/agent/criterion" }
//! ```
//!
//! and works three ways:
//!
//! - `cargo bench`: each benchmark is warmed up and sampled as criterion's configuration
//!   says (`warm_up_time`, `measurement_time`, `sample_size`), and printed as criterion
//!   prints it: `name  time:   [low estimate high]` (the mean time per iteration and its
//!   interval).
//! - `sbs-profile --bench NAME`: each benchmark, by its criterion id
//!   (`group/function/parameter`), runs in child processes through the harness's protocol
//!   (`sbs_harness::adapter`): the routine is the operation, set-ups (`iter_batched`'s,
//!   `iter_with_setup`'s, and everything the closure does before calling `iter`) stay
//!   outside the measured region, and every metric group comes out per operation, with
//!   the harness's calibration and pitfall checks.
//! - `cargo test --benches`: each routine runs once.
//!
//! ```no_run
//! use sbs_criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
//!
//! fn fibonacci(n: u64) -> u64 {
//!     (1..n).fold((0, 1), |(a, b), _| (b, a + b)).1
//! }
//!
//! fn bench(c: &mut Criterion) {
//!     c.bench_function("fib 20", |b| b.iter(|| fibonacci(black_box(20))));
//!     let mut group = c.benchmark_group("fib");
//!     for n in [10u64, 40] {
//!         group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
//!             b.iter(|| fibonacci(black_box(n)))
//!         });
//!     }
//!     group.finish();
//! }
//!
//! criterion_group!(benches, bench);
//! criterion_main!(benches);
//! ```
//!
//! What maps to what, and what cannot be honoured: `docs/criterion-and-divan.md`.

#![forbid(unsafe_code)]

mod bencher;
mod cli;
mod estimate;

use std::fmt::Display;
use std::io::Write;
use std::marker::PhantomData;
use std::sync::Mutex;
use std::time::Duration;

pub use bencher::Bencher;
/// Keeps the optimizer from deleting work whose result is unused (criterion's own is this
/// one since 0.5).
pub use std::hint::black_box;

use bencher::{Job, Outcome};
use cli::Mode;
use estimate::Timing;

/// How the time of a benchmark is measured. Only wall-clock time ([`WallTime`]) exists
/// here: under sbs-profile the other measurements are the tool's own metric groups.
///
/// [`WallTime`]: measurement::WallTime
pub mod measurement {
    /// A way to measure a routine (criterion's trait; here only a name for generic code
    /// such as `BenchmarkGroup<'_, M>`).
    pub trait Measurement {}

    /// Wall-clock time, criterion's default measurement.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct WallTime;

    impl Measurement for WallTime {}
}

use measurement::{Measurement, WallTime};

/// Print `error: MESSAGE` and end the process with exit code 2 (the harness's
/// convention): a bench binary's command line or configuration that cannot run.
pub(crate) fn fail(message: &str) -> ! {
    let _ = writeln!(std::io::stderr(), "error: {message}");
    std::process::exit(2)
}

/// How many inputs each batch of [`Bencher::iter_batched`] prepares before timing them.
/// Under sbs-profile each operation gets its own input whatever the size says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BatchSize {
    /// Inputs are small: 10 batches per sample.
    SmallInput,
    /// Inputs are large: 1000 batches per sample.
    LargeInput,
    /// One input per batch.
    PerIteration,
    /// This many batches per sample.
    NumBatches(u64),
    /// This many inputs per batch.
    NumIterations(u64),
}

/// The amount of work of one iteration, for a throughput next to the time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Throughput {
    /// Bytes per iteration, printed with binary prefixes (KiB/s).
    Bytes(u64),
    /// Bytes per iteration, printed with decimal prefixes (KB/s).
    BytesDecimal(u64),
    /// Bits per iteration.
    Bits(u64),
    /// Elements per iteration.
    Elements(u64),
    /// Elements and bytes per iteration (the elements are printed).
    ElementsAndBytes {
        /// Elements per iteration.
        elements: u64,
        /// Bytes per iteration.
        bytes: u64,
    },
}

/// How criterion chooses the iteration counts of its samples. Accepted; samples are
/// always of one iteration count here ("flat").
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum SamplingMode {
    /// criterion's choice.
    #[default]
    Auto,
    /// Linearly growing iteration counts.
    Linear,
    /// One iteration count.
    Flat,
}

/// The scale of a plot's axis. Accepted without effect: no plots are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AxisScale {
    /// Linear.
    Linear,
    /// Logarithmic.
    Logarithmic,
}

/// How a group's summary plot is drawn. Accepted without effect: no plots are drawn.
#[derive(Debug, Clone, Default)]
pub struct PlotConfiguration {
    summary_scale: Option<AxisScale>,
}

impl PlotConfiguration {
    /// The summary plot's axis scale.
    pub fn summary_scale(mut self, scale: AxisScale) -> PlotConfiguration {
        self.summary_scale = Some(scale);
        self
    }
}

/// The plotting library criterion would use. Accepted without effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlottingBackend {
    /// gnuplot.
    Gnuplot,
    /// plotters.
    Plotters,
    /// No plots.
    None,
}

/// The id of a benchmark in a group: a function name, a parameter, or both
/// (`group/function/parameter`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BenchmarkId {
    function: Option<String>,
    parameter: Option<String>,
}

impl BenchmarkId {
    /// `function/parameter`.
    pub fn new<S: Into<String>, P: Display>(function_name: S, parameter: P) -> BenchmarkId {
        BenchmarkId {
            function: Some(function_name.into()),
            parameter: Some(parameter.to_string()),
        }
    }

    /// The parameter alone (the group names the function).
    pub fn from_parameter<P: Display>(parameter: P) -> BenchmarkId {
        BenchmarkId {
            function: None,
            parameter: Some(parameter.to_string()),
        }
    }

    /// `function/parameter`, `function` or `parameter`.
    fn title(&self) -> String {
        match (&self.function, &self.parameter) {
            (Some(f), Some(p)) => format!("{f}/{p}"),
            (Some(f), None) => f.clone(),
            (None, Some(p)) => p.clone(),
            (None, None) => String::new(),
        }
    }
}

/// What a group's `bench_function` accepts as an id: a [`BenchmarkId`] or a name.
pub trait IntoBenchmarkId {
    /// The id.
    fn into_benchmark_id(self) -> BenchmarkId;
}

impl IntoBenchmarkId for BenchmarkId {
    fn into_benchmark_id(self) -> BenchmarkId {
        self
    }
}

impl<S: Into<String>> IntoBenchmarkId for S {
    fn into_benchmark_id(self) -> BenchmarkId {
        BenchmarkId {
            function: Some(self.into()),
            parameter: None,
        }
    }
}

/// The settings of a [`Criterion`] or a [`BenchmarkGroup`].
#[derive(Debug, Clone, Copy, PartialEq)]
struct Settings {
    timing: Timing,
}

impl Default for Settings {
    fn default() -> Self {
        // criterion's defaults.
        Settings {
            timing: Timing {
                sample_size: 100,
                warm_up_time: Duration::from_secs(3),
                measurement_time: Duration::from_secs(5),
                confidence_level: 0.95,
            },
        }
    }
}

impl Settings {
    fn sample_size(&mut self, n: usize) {
        if n < 10 {
            fail(&format!(
                "sample_size({n}) in the bench file: criterion's minimum is 10; raise it"
            ));
        }
        self.timing.sample_size = n;
    }

    fn warm_up_time(&mut self, d: Duration) {
        if d.is_zero() {
            fail("warm_up_time(0) in the bench file: give it a positive duration");
        }
        self.timing.warm_up_time = d;
    }

    fn measurement_time(&mut self, d: Duration) {
        if d.is_zero() {
            fail("measurement_time(0) in the bench file: give it a positive duration");
        }
        self.timing.measurement_time = d;
    }

    fn confidence_level(&mut self, c: f64) {
        if !(c > 0.0 && c < 1.0) {
            fail(&format!(
                "confidence_level({c}) in the bench file: give a fraction between 0 and 1, e.g. 0.95"
            ));
        }
        self.timing.confidence_level = c;
    }
}

/// The benchmark manager: configuration, and the benchmarks run through it.
pub struct Criterion<M: Measurement = WallTime> {
    settings: Settings,
    filter: Option<String>,
    _measurement: PhantomData<M>,
}

impl Default for Criterion<WallTime> {
    fn default() -> Self {
        Criterion {
            settings: Settings::default(),
            filter: None,
            _measurement: PhantomData,
        }
    }
}

impl<M: Measurement> Criterion<M> {
    /// Samples per benchmark under `cargo bench` (at least 10; 100 by default).
    pub fn sample_size(mut self, n: usize) -> Criterion<M> {
        self.settings.sample_size(n);
        self
    }

    /// Warm-up time under `cargo bench` (3 s by default).
    pub fn warm_up_time(mut self, d: Duration) -> Criterion<M> {
        self.settings.warm_up_time(d);
        self
    }

    /// Time the samples should fill under `cargo bench` (5 s by default).
    pub fn measurement_time(mut self, d: Duration) -> Criterion<M> {
        self.settings.measurement_time(d);
        self
    }

    /// Confidence level of the printed interval (0.95 by default).
    pub fn confidence_level(mut self, c: f64) -> Criterion<M> {
        self.settings.confidence_level(c);
        self
    }

    /// Bootstrap resamples. Accepted without effect: the interval is Student's t.
    pub fn nresamples(self, _n: usize) -> Criterion<M> {
        self
    }

    /// criterion's threshold of a change worth reporting. Accepted without effect: changes
    /// are judged by sbs-profile against its history.
    pub fn noise_threshold(self, _threshold: f64) -> Criterion<M> {
        self
    }

    /// criterion's significance level of a change. Accepted without effect (see
    /// [`Criterion::noise_threshold`]).
    pub fn significance_level(self, _level: f64) -> Criterion<M> {
        self
    }

    /// Accepted without effect: no plots are drawn.
    pub fn with_plots(self) -> Criterion<M> {
        self
    }

    /// Accepted without effect: no plots are drawn.
    pub fn without_plots(self) -> Criterion<M> {
        self
    }

    /// Accepted without effect: no plots are drawn.
    pub fn plotting_backend(self, _backend: PlottingBackend) -> Criterion<M> {
        self
    }

    /// Accepted without effect: the output is plain text.
    pub fn with_output_color(self, _color: bool) -> Criterion<M> {
        self
    }

    /// Accepted without effect: nothing is written to criterion's directory.
    pub fn output_directory(self, _path: &std::path::Path) -> Criterion<M> {
        self
    }

    /// Accepted without effect: criterion's baselines are not kept (sbs-profile keeps a
    /// history and baselines of its own: `--save`, `--baseline`).
    pub fn save_baseline(self, _baseline: String) -> Criterion<M> {
        self
    }

    /// Run each benchmark for this long without analysis (as `--profile-time`). Accepted
    /// without effect from the bench file; the command line's option works.
    pub fn profile_time(self, _time: Option<Duration>) -> Criterion<M> {
        self
    }

    /// Only benchmarks whose id contains `filter` (a plain substring; criterion's is a
    /// regular expression), on top of the command line's filters.
    pub fn with_filter<S: Into<String>>(mut self, filter: S) -> Criterion<M> {
        self.filter = Some(filter.into());
        self
    }

    /// Switch to another measurement; only [`WallTime`] exists here.
    pub fn with_measurement<M2: Measurement>(self, _m: M2) -> Criterion<M2> {
        Criterion {
            settings: self.settings,
            filter: self.filter,
            _measurement: PhantomData,
        }
    }

    /// Apply the command line's settings (`--sample-size`, `--warm-up-time`,
    /// `--measurement-time`, `--confidence-level`); its filters and mode apply in any case.
    pub fn configure_from_args(mut self) -> Criterion<M> {
        let cli = cli::get();
        if let Some(n) = cli.sample_size {
            self.settings.timing.sample_size = n;
        }
        if let Some(d) = cli.warm_up_time {
            self.settings.timing.warm_up_time = d;
        }
        if let Some(d) = cli.measurement_time {
            self.settings.timing.measurement_time = d;
        }
        if let Some(c) = cli.confidence_level {
            self.settings.timing.confidence_level = c;
        }
        self
    }

    /// Benchmark `f` under the id `id`.
    pub fn bench_function<F>(&mut self, id: &str, f: F) -> &mut Criterion<M>
    where
        F: FnMut(&mut Bencher<'_, M>),
    {
        run_one(self.settings, self.filter.as_deref(), id, None, f);
        self
    }

    /// Benchmark `f` on `input` under the id `function/parameter` of `id`.
    pub fn bench_with_input<F, I>(
        &mut self,
        id: BenchmarkId,
        input: &I,
        mut f: F,
    ) -> &mut Criterion<M>
    where
        F: FnMut(&mut Bencher<'_, M>, &I),
        I: ?Sized,
    {
        let title = id.title();
        run_one(
            self.settings,
            self.filter.as_deref(),
            &title,
            None,
            |b: &mut Bencher<'_, M>| f(b, input),
        );
        self
    }

    /// A group of related benchmarks, whose ids start with `group_name/`.
    pub fn benchmark_group<S: Into<String>>(&mut self, group_name: S) -> BenchmarkGroup<'_, M> {
        BenchmarkGroup {
            settings: self.settings,
            name: group_name.into(),
            throughput: None,
            criterion: self,
        }
    }

    /// What criterion prints after all groups. Under sbs-profile, reaching it means that
    /// the benchmark asked for does not exist: an error.
    pub fn final_summary(&self) {
        let cli = cli::get();
        match &cli.mode {
            Mode::Child(child) => fail(&format!(
                "no benchmark with id `{}` in this binary; run it with --list to see the ids",
                child.name()
            )),
            Mode::Help => help(),
            _ => {}
        }
    }
}

/// Benchmarks whose ids share a prefix, and settings that override the [`Criterion`]'s.
pub struct BenchmarkGroup<'a, M: Measurement = WallTime> {
    criterion: &'a mut Criterion<M>,
    name: String,
    settings: Settings,
    throughput: Option<Throughput>,
}

impl<M: Measurement> BenchmarkGroup<'_, M> {
    /// Samples per benchmark of this group under `cargo bench` (at least 10).
    pub fn sample_size(&mut self, n: usize) -> &mut Self {
        self.settings.sample_size(n);
        self
    }

    /// Warm-up time of this group's benchmarks under `cargo bench`.
    pub fn warm_up_time(&mut self, d: Duration) -> &mut Self {
        self.settings.warm_up_time(d);
        self
    }

    /// Time the samples of this group's benchmarks should fill under `cargo bench`.
    pub fn measurement_time(&mut self, d: Duration) -> &mut Self {
        self.settings.measurement_time(d);
        self
    }

    /// Confidence level of the printed interval.
    pub fn confidence_level(&mut self, c: f64) -> &mut Self {
        self.settings.confidence_level(c);
        self
    }

    /// Accepted without effect (see [`Criterion::nresamples`]).
    pub fn nresamples(&mut self, _n: usize) -> &mut Self {
        self
    }

    /// Accepted without effect (see [`Criterion::noise_threshold`]).
    pub fn noise_threshold(&mut self, _threshold: f64) -> &mut Self {
        self
    }

    /// Accepted without effect (see [`Criterion::significance_level`]).
    pub fn significance_level(&mut self, _level: f64) -> &mut Self {
        self
    }

    /// Accepted without effect: samples are always flat here.
    pub fn sampling_mode(&mut self, _mode: SamplingMode) -> &mut Self {
        self
    }

    /// Accepted without effect: no plots are drawn.
    pub fn plot_config(&mut self, _config: PlotConfiguration) -> &mut Self {
        self
    }

    /// The work of one iteration of the benchmarks that follow: `cargo bench` prints a
    /// throughput line too.
    pub fn throughput(&mut self, throughput: Throughput) -> &mut Self {
        self.throughput = Some(throughput);
        self
    }

    /// Benchmark `f` under `group/id`.
    pub fn bench_function<ID: IntoBenchmarkId, F>(&mut self, id: ID, f: F) -> &mut Self
    where
        F: FnMut(&mut Bencher<'_, M>),
    {
        let full = self.full_id(id.into_benchmark_id());
        run_one(
            self.settings,
            self.criterion.filter.as_deref(),
            &full,
            self.throughput.as_ref(),
            f,
        );
        self
    }

    /// Benchmark `f` on `input` under `group/id`.
    pub fn bench_with_input<ID: IntoBenchmarkId, F, I>(
        &mut self,
        id: ID,
        input: &I,
        mut f: F,
    ) -> &mut Self
    where
        F: FnMut(&mut Bencher<'_, M>, &I),
        I: ?Sized,
    {
        let full = self.full_id(id.into_benchmark_id());
        run_one(
            self.settings,
            self.criterion.filter.as_deref(),
            &full,
            self.throughput.as_ref(),
            |b: &mut Bencher<'_, M>| f(b, input),
        );
        self
    }

    /// End the group (criterion draws its summary here; nothing to do).
    pub fn finish(self) {}

    fn full_id(&self, id: BenchmarkId) -> String {
        let title = id.title();
        if title.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{title}", self.name)
        }
    }
}

fn help() -> ! {
    print!("{}", cli::USAGE);
    let _ = std::io::stdout().flush();
    std::process::exit(0)
}

/// Fail on an id seen before in this process: `--sbs-run ID` could not tell them apart.
fn check_unique(id: &str) {
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.iter().any(|s| s == id) {
        fail(&format!(
            "benchmark id `{id}` is used twice; give each benchmark an id of its own"
        ));
    }
    seen.push(id.to_string());
}

/// Do with benchmark `id` what this process was asked to.
fn run_one<M: Measurement, F: FnMut(&mut Bencher<'_, M>)>(
    settings: Settings,
    filter: Option<&str>,
    id: &str,
    throughput: Option<&Throughput>,
    mut f: F,
) {
    let cli = cli::get();
    let job = match &cli.mode {
        Mode::Help => help(),
        Mode::Child(child) => {
            if child.name() != id {
                return;
            }
            Job::Child(child)
        }
        _ => {
            check_unique(id);
            if !cli.selects(id) || filter.is_some_and(|f| !id.contains(f)) {
                return;
            }
            match cli.mode {
                Mode::List => {
                    println!("{id}: benchmark");
                    return;
                }
                Mode::Measure => Job::Measure(settings.timing),
                Mode::Profile(d) => Job::Profile(d),
                _ => Job::Test,
            }
        }
    };
    let mut bencher = Bencher::<M>::new(job);
    f(&mut bencher);
    let mut out = std::io::stdout().lock();
    match std::mem::take(&mut bencher.outcome) {
        Outcome::NotRun => fail(&format!(
            "benchmark `{id}`: its closure never called an `iter` method of its Bencher \
             (iter, iter_batched, iter_custom...); call one with the routine to measure"
        )),
        Outcome::Failed(e) => fail(&format!("benchmark `{id}`: {e}")),
        Outcome::Done => match job {
            Job::Child(_) => {
                drop(out);
                std::process::exit(0)
            }
            Job::Profile(_) => {
                let _ = writeln!(out, "Benchmarking {id}: Complete (Analysis Disabled)");
            }
            _ => {
                let _ = writeln!(out, "Testing {id}\nSuccess\n");
            }
        },
        Outcome::Measured(m) => {
            let text = match cli.format {
                cli::OutputFormat::Criterion => {
                    let est = estimate::interval(&m.per_iter, settings.timing.confidence_level);
                    format!("{}\n", estimate::criterion_lines(id, est, throughput))
                }
                cli::OutputFormat::Bencher => estimate::bencher_line(id, &m.per_iter),
            };
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
            if let Some(took) = m.overran {
                let _ = writeln!(
                    std::io::stderr(),
                    "Warning: Unable to complete {} samples in {:.1}s. You may wish to increase target time to {:.1}s.",
                    m.per_iter.len(),
                    settings.timing.measurement_time.as_secs_f64(),
                    took.as_secs_f64()
                );
            }
        }
    }
}

/// Define a group of benchmark functions run with one configuration: either
/// `criterion_group!(benches, f1, f2)` or
/// `criterion_group! { name = benches; config = Criterion::default()...; targets = f1, f2 }`.
#[macro_export]
macro_rules! criterion_group {
    (name = $name:ident; config = $config:expr; targets = $( $target:path ),+ $(,)*) => {
        pub fn $name() {
            let mut criterion: $crate::Criterion<_> = $config.configure_from_args();
            $(
                $target(&mut criterion);
            )+
        }
    };
    ($name:ident, $( $target:path ),+ $(,)*) => {
        $crate::criterion_group! {
            name = $name;
            config = $crate::Criterion::default();
            targets = $( $target ),+
        }
    };
}

/// The `main` of a bench target: run the groups in order.
#[macro_export]
macro_rules! criterion_main {
    ( $( $group:path ),+ $(,)* ) => {
        fn main() {
            $(
                $group();
            )+
            $crate::Criterion::default()
                .configure_from_args()
                .final_summary();
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_criterions() {
        let mut c = Criterion::default();
        let g = c.benchmark_group("g");
        assert_eq!(g.full_id(BenchmarkId::new("f", 3)), "g/f/3");
        assert_eq!(g.full_id(BenchmarkId::from_parameter("x y")), "g/x y");
        assert_eq!(g.full_id("plain".into_benchmark_id()), "g/plain");
        assert_eq!(
            g.full_id(String::from("owned").into_benchmark_id()),
            "g/owned"
        );
        assert_eq!(BenchmarkId::new("f", 1.5).title(), "f/1.5");
    }
}
