//! The result model: what a run of sbs-profile produced, ready to render.
//!
//! These types are the JSON schema (see `docs/schema.md`); they are born here because
//! every renderer and every consumer of the JSON reads them, and the collector fills them.
//! `SCHEMA_VERSION` changes only on incompatible changes.

use serde::{Deserialize, Serialize};

/// Version of the JSON report schema.
pub const SCHEMA_VERSION: u32 = 1;

/// The unit a metric's values are expressed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// Seconds (times).
    Seconds,
    /// Bytes (sizes, footprints).
    Bytes,
    /// A plain count (invocations, allocations, events).
    Count,
}

impl Unit {
    /// The short name used in tables and CSV.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Seconds => "s",
            Unit::Bytes => "B",
            Unit::Count => "count",
        }
    }
}

pub use crate::metric_id::{Family, MetricId, Variant};

/// Summary statistics of one metric's samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (n - 1 denominator); 0 for a single sample.
    pub sd: f64,
    /// Coefficient of variation, `sd / |mean|`; `None` when the mean is 0 and sd is not.
    pub cov: Option<f64>,
    /// Median.
    pub median: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Lower bound of the confidence interval for the mean; `None` with fewer than 2 samples.
    pub ci_low: Option<f64>,
    /// Upper bound of the confidence interval for the mean; `None` with fewer than 2 samples.
    pub ci_high: Option<f64>,
    /// Confidence level of the interval, e.g. 0.95.
    pub confidence: f64,
}

impl Summary {
    /// Half the interval's width relative to the mean (e.g. 0.01 for "mean ± 1%"); of an
    /// interval cut at 0, the longer side.
    pub fn relative_ci_half_width(&self) -> Option<f64> {
        let (lo, hi) = (self.ci_low?, self.ci_high?);
        let half = (hi - self.mean).max(self.mean - lo);
        if half == 0.0 {
            Some(0.0)
        } else if self.mean == 0.0 {
            None
        } else {
            Some(half / self.mean.abs())
        }
    }
}

/// One line of a metric's breakdown (e.g. one probed symbol of an invocation pattern).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Detail {
    /// What this line counts (a demangled symbol name, a process id...).
    pub label: String,
    /// Raw values, one per run, aligned with the metric's samples.
    pub samples: Vec<f64>,
    /// Summary of `samples`.
    pub summary: Summary,
}

/// One metric of one benchmark: raw samples and their summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricResult {
    /// Stable id such as `time.wall`, `alloc.count`, `invocations.Vec::push`.
    pub id: String,
    /// Unit of the samples.
    pub unit: Unit,
    /// The mechanism that produced the numbers (`rusage`, `uprobe`, `agent`, `perf-sw`,
    /// `perf-hw`, `valgrind`...). Series from different sources are never compared.
    pub source: String,
    /// Whether the metric is an exact count (repeatable) rather than a measurement.
    pub exact: bool,
    /// The group of runs that measured it (`timing`, `invocations`...).
    pub group: String,
    /// Raw values, one per measured run.
    pub samples: Vec<f64>,
    /// Indices into `samples` of the runs whose child failed (kept by `--ignore-failure`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_runs: Vec<usize>,
    /// Summary statistics of `samples`.
    pub summary: Summary,
    /// Optional breakdown (per symbol, per process...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<Detail>,
    /// Notes about how the numbers were obtained (scaling, controls, caveats).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Comparison with a reference (history, baseline or the first command of `compare`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparison: Option<Comparison>,
    /// The metric over the saved history, oldest first, this run last (when a history
    /// was read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trend: Vec<TrendPoint>,
    /// Only on a calibrated per-operation metric (`X.calibrated`: the raw `X` minus `X.empty`,
    /// what the empty operation costs): `false` when it cannot be told from zero (its
    /// interval contains 0, or an exact count within the harness's own jitter), and
    /// renderers then say so instead of printing its mean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distinguishable: Option<bool>,
    /// The largest error one run's value may carry, in the metric's unit, where the
    /// instrument states one: `heap.peak` of a run whose threads allocated at once is
    /// within `±bound` bytes of the peak of the true live total (docs/alloc.md). Absent when
    /// the values are what they say (an exact count, or a measurement whose spread the
    /// interval already shows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<f64>,
    /// Where a count that is not exact lies (an inlined function's calls counted at sites
    /// whose passes may be several calls or none, docs/inlined.md): the fewest and the most
    /// calls each run may have made, and how many of the places counted have no bound.
    /// Absent on exact counts and on measurements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<CountRange>,
}

/// The bounds of a count that is not exact ([`MetricResult::range`]), over every run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CountRange {
    /// The fewest calls any run may have made.
    pub low: f64,
    /// The most calls any run may have made; absent when calls may have gone uncounted
    /// with nothing to bound them (sites left out by `--invocations-partial`, a process
    /// that escaped counting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high: Option<f64>,
    /// The places (inlined copies and out-of-line entries) the count is made at.
    pub sites: usize,
    /// How many of `sites` are uncertain with no bound that can be given: their counts
    /// are taken as counted, so `[low, high]` holds only as far as the other sites go.
    pub unbounded_sites: usize,
}

impl CountRange {
    /// The union of two runs' ranges.
    pub fn union(self, other: CountRange) -> CountRange {
        CountRange {
            low: self.low.min(other.low),
            high: self.high.zip(other.high).map(|(a, b)| a.max(b)),
            sites: self.sites.max(other.sites),
            unbounded_sites: self.unbounded_sites.max(other.unbounded_sites),
        }
    }

    /// Whether it says more than the count itself: bounds apart, or places unbounded.
    pub fn informative(&self) -> bool {
        self.high != Some(self.low) || self.unbounded_sites > 0
    }
}

/// One run of a metric's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrendPoint {
    /// The run's label (time and commit of a history entry, or `this run`).
    pub label: String,
    /// Number of samples.
    pub n: usize,
    /// Mean of the samples.
    pub mean: f64,
    /// Confidence interval of the mean; `None` with fewer than 2 samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_low: Option<f64>,
    /// Upper bound of the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_high: Option<f64>,
    /// Verdict of this run against the one before it (`None` for the first); for the last
    /// point, the run being judged, the verdict of its comparison with the history (the
    /// metric's `comparison`), which may pool several entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
}

/// All metrics of one benchmark (one command).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkResult {
    /// Display name of the benchmark (by default, the command line).
    pub name: String,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Metrics in the order they were measured.
    pub metrics: Vec<MetricResult>,
    /// Warnings worth a reader's attention (e.g. inlined instances not counted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// `--invocations-check`: each pattern's counts against a build without
    /// optimisation, call site by call site.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invocation_checks: Vec<InvocationCheck>,
}

/// One pattern's counts checked against the calls a build without optimisation makes
/// (where every call is a real call), by the source line of each call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvocationCheck {
    /// The metric checked (`invocations.Vec::push`).
    pub metric: String,
    /// The build the calls were counted in.
    pub debug_program: String,
    /// Calls counted in the measured program at the sites checked.
    pub counted: u64,
    /// Calls the debug build made.
    pub made: u64,
    /// The sites and call lines, in groups that must agree: a group joins the counted
    /// sites of the measured program and the call lines that lead to them.
    pub groups: Vec<CheckGroup>,
    /// What the check could not compare, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl InvocationCheck {
    /// The groups whose counts disagree.
    pub fn differing(&self) -> impl Iterator<Item = &CheckGroup> {
        self.groups
            .iter()
            .filter(|g| g.verdict == CheckVerdict::Differs)
    }
}

/// Counted sites and the call lines that lead to them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckGroup {
    /// The source lines of the calls (`file:line`).
    pub lines: Vec<String>,
    /// The report rows of the counted sites.
    pub rows: Vec<String>,
    /// Calls counted at the sites: passes through their entries.
    pub counted: u64,
    /// The fewest calls the counted passes may stand for (fewer than `counted` where a
    /// pass through shared code may continue a call counted elsewhere).
    #[serde(default)]
    pub counted_low: u64,
    /// The most calls the counted passes may stand for.
    pub counted_high: u64,
    /// Calls the debug build made at those lines.
    pub made: u64,
    /// Whether they agree.
    pub verdict: CheckVerdict,
}

/// How a group's counts compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckVerdict {
    /// Counted exactly the calls made.
    Equal,
    /// The calls made lie within the bounds the report states.
    Bounded,
    /// Counted more or fewer calls than were made, beyond any stated bound.
    Differs,
    /// Counted more or fewer calls than were made, at a site the report marks uncertain
    /// with no bound: the disagreement it warned of.
    Uncertain,
    /// Nothing counted for calls made at lines where every inlined copy in the measured
    /// program has no code (optimised away or merged into other instructions: a clone of
    /// a `Copy` value, of a zero-sized one): nothing there can be counted, as its
    /// "not counted" warning says.
    NoCode,
}

/// Conditions the runs were measured under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conditions {
    /// Measured runs per group: the runs made, the most of any group when they differ
    /// (`--target-ci` adds runs to the groups with timing metrics only).
    pub runs: usize,
    /// The measured runs each group made, in the order they ran, when the groups did not
    /// all make the same number (empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group_runs: Vec<GroupRuns>,
    /// Discarded warm-up runs per group.
    pub warmup: usize,
    /// Whether address-space randomisation was disabled in the child.
    pub aslr_disabled: bool,
    /// CPUs the child was pinned to, if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pinned_cpus: Vec<usize>,
    /// Whether the child started from a clean environment.
    pub clean_env: bool,
    /// The instruction engine and its CPU model where it pins one (`qemu -cpu MODEL`):
    /// counts of another engine or model are another series.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// What the machine was like during the runs, where it could be read: what spoils
    /// timings, so that a reader of a saved report sees why two entries differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<Machine>,
}

/// The machine the runs ran on, as far as it spoils timings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// CPUs online.
    pub cpus: usize,
    /// The 1-minute load average when the runs started.
    pub load_start: f64,
    /// The 1-minute load average when they ended (the runs' own load included).
    pub load_end: f64,
    /// The share of all CPUs' time that other processes (alive before and after the
    /// runs) took while the runs ran, 0 to 1.
    pub others: f64,
    /// The share of all CPUs' time the hypervisor took (steal time), 0 to 1.
    pub steal: f64,
    /// The busiest of those processes, as `name (pid) N%` of one CPU, busiest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub busy: Vec<String>,
    /// The CPU frequency governor(s) (`performance`, `powersave`...), where cpufreq says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub governor: Option<String>,
    /// Whether turbo (boost) is on, where the driver says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turbo: Option<bool>,
    /// The hypervisor, when this is a virtual machine (`KVM`, `VMware`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine: Option<String>,
}

impl Machine {
    /// The share of the CPUs' time other processes must take during the runs (half of it
    /// for steal time) for the machine to count as busy.
    pub const BUSY_SHARE: f64 = 0.10;

    /// Whether other processes or the hypervisor took enough of the CPUs to blur times.
    pub fn was_busy(&self) -> bool {
        self.others >= Self::BUSY_SHARE || self.steal >= Self::BUSY_SHARE / 2.0
    }

    /// `2 CPUs, virtual machine (QEMU), governor performance, load 0.31 to 1.05, other
    /// processes 3% of the CPUs`.
    pub fn describe(&self) -> String {
        let mut parts = vec![format!("{} CPUs", self.cpus)];
        if let Some(vm) = &self.virtual_machine {
            parts.push(format!("virtual machine ({vm})"));
        }
        if let Some(g) = &self.governor {
            parts.push(format!("governor {g}"));
        }
        if let Some(t) = self.turbo {
            parts.push(format!("turbo {}", if t { "on" } else { "off" }));
        }
        parts.push(format!(
            "load {:.2} to {:.2}",
            self.load_start, self.load_end
        ));
        parts.push(format!(
            "other processes {:.0}% of the CPUs",
            self.others * 100.0
        ));
        if self.steal > 0.0 {
            parts.push(format!("steal {:.0}%", self.steal * 100.0));
        }
        parts.join(", ")
    }
}

impl Conditions {
    /// `runs` and `group_runs` from the measured runs each group `made` (a group may come
    /// more than once: the most it made counts): the runs of every group when they all
    /// made the same number (`asked` when there was no group), and no list; otherwise
    /// the most any group made, and each group's, in the order they first came.
    pub fn runs_made(
        made: impl IntoIterator<Item = GroupRuns>,
        asked: usize,
    ) -> (usize, Vec<GroupRuns>) {
        let mut groups: Vec<GroupRuns> = Vec::new();
        for g in made {
            match groups.iter_mut().find(|seen| seen.group == g.group) {
                Some(seen) => seen.runs = seen.runs.max(g.runs),
                None => groups.push(g),
            }
        }
        let most = groups.iter().map(|g| g.runs).max().unwrap_or(asked);
        if groups.iter().all(|g| g.runs == most) {
            return (most, Vec::new());
        }
        (most, groups)
    }

    /// The measured runs made, for a report's footer: `10 runs`, or per group when they
    /// differ (`100 timing runs, 10 alloc runs`).
    pub fn measured_runs(&self) -> String {
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        if self.group_runs.is_empty() {
            return format!("{} run{}", self.runs, plural(self.runs));
        }
        self.group_runs
            .iter()
            .map(|g| format!("{} {} run{}", g.runs, g.group, plural(g.runs)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The measured runs one group of runs made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRuns {
    /// The group (`timing`, `alloc`, ...), as metrics name it in `group`.
    pub group: String,
    /// Its measured runs.
    pub runs: usize,
}

/// A whole report: what one invocation of sbs-profile measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// See [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `sbs-profile` version that produced the report.
    pub tool_version: String,
    /// Measurement conditions.
    pub conditions: Conditions,
    /// One entry per benchmark.
    pub benchmarks: Vec<BenchmarkResult>,
    /// Set when the report was rendered from a saved history (`sbs-profile report`)
    /// rather than measured now: the history directory. `conditions` then only tells the
    /// number of samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_history: Option<String>,
    /// The comparisons in one line, for people ("2 of 12 metrics regressed against ...");
    /// absent when nothing was compared. Every format that has room for it shows it first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headline: Option<String>,
    /// `compare`: how many times slower or faster each later command ran than the first,
    /// from the comparison of their wall times.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub speed: Vec<SpeedRatio>,
    /// Parameter scans (`-P`/`-L`): one per scanned command or harness benchmark, with its
    /// points (one benchmark each) and how every metric grows over the parameter.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scans: Vec<Scan>,
}

/// A run over several values of one parameter, each value its own benchmark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scan {
    /// What was scanned: the command with `{NAME}` left in, or the harness benchmark.
    pub series: String,
    /// The parameter's name (`{NAME}` in the command).
    pub parameter: String,
    /// The points, in the order given.
    pub points: Vec<ScanPoint>,
    /// One fit per metric measured at every numeric point (at least 3 distinct values).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fits: Vec<GrowthFit>,
}

/// One value of a scanned parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScanPoint {
    /// The benchmark measured at this value.
    pub benchmark: String,
    /// The value as given.
    pub value: String,
    /// The value as a number, if it is one (only numeric points are fitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x: Option<f64>,
}

/// The shape that best explains a metric's means over a scan: `mean ≈ intercept + slope ·
/// f(x)` by least squares, `f` one of `1`, `log n`, `n`, `n log n`, `n^2`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GrowthFit {
    /// The metric id.
    pub metric: String,
    /// `1` (constant), `log n`, `n`, `n log n` or `n^2`.
    pub shape: String,
    /// `a` of `a + b·f(x)`.
    pub intercept: f64,
    /// `b` of `a + b·f(x)` (0 for a constant).
    pub slope: f64,
    /// Coefficient of determination of the fit.
    pub r2: f64,
    /// Points fitted.
    pub points: usize,
    /// Whether the fit explains the points (R² of at least 0.5); otherwise the growth is
    /// unclear (noise larger than the change).
    pub clear: bool,
}

impl GrowthFit {
    /// "alloc.count grows as n: 2.00 per unit of n, R^2 = 1.000", with `parameter` for n.
    pub fn sentence(&self, parameter: &str) -> String {
        let shape = self.shape.replace('n', parameter);
        let per = match self.shape.as_str() {
            "1" => return format!("{} is constant over {parameter}", self.metric),
            "n" => format!("{} per unit of {parameter}", significant(self.slope)),
            _ => format!("{} x {shape}", significant(self.slope)),
        };
        if self.clear {
            format!(
                "{} grows as {shape}: {per}, R^2 = {:.3}",
                self.metric, self.r2
            )
        } else {
            format!(
                "{} has no clear growth over {parameter} (best: {shape}, R^2 = {:.3})",
                self.metric, self.r2
            )
        }
    }
}

/// Three significant digits, without an exponent for ordinary magnitudes.
fn significant(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 || (1e-3..1e6).contains(&a) {
        let digits = if a >= 100.0 {
            0
        } else if a >= 10.0 {
            1
        } else {
            2
        };
        let digits = if a < 1.0 && a > 0.0 {
            3 - a.log10().floor() as i32 - 1
        } else {
            digits
        };
        format!("{v:.*}", digits.max(0) as usize)
    } else {
        format!("{v:.2e}")
    }
}

/// How many times longer a command's wall time is than the reference's (hyperfine's
/// summary), with the interval of the ratio from the comparison of the two, and the same
/// ratio in CPU time where it was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeedRatio {
    /// The command.
    pub benchmark: String,
    /// The command it is compared with.
    pub reference: String,
    /// `mean(benchmark) / mean(reference)`: above 1 is slower.
    pub ratio: f64,
    /// Lower bound of the ratio's interval.
    pub ratio_low: f64,
    /// Upper bound of the ratio's interval.
    pub ratio_high: f64,
    /// Confidence level of the interval.
    pub confidence: f64,
    /// The verdict of the comparison behind it.
    pub verdict: Verdict,
    /// The method of the comparison behind it (absent in reports written before it was
    /// recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<ComparisonMethod>,
    /// The larger coefficient of variation of the two commands' wall times: how much the
    /// machine moved them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_cov: Option<f64>,
    /// The same ratio in CPU time (`time.cpu`, user + system), which a neighbour on the
    /// machine moves much less than wall time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Ratio>,
}

/// A ratio of two commands' means in one metric, with its interval and verdict.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    /// `mean(benchmark) / mean(reference)`: above 1 is slower.
    pub ratio: f64,
    /// Lower bound of the ratio's interval.
    pub ratio_low: f64,
    /// Upper bound of the ratio's interval.
    pub ratio_high: f64,
    /// Confidence level of the interval.
    pub confidence: f64,
    /// The verdict of the comparison behind it.
    pub verdict: Verdict,
    /// The method of the comparison behind it.
    pub method: ComparisonMethod,
}

impl Ratio {
    /// Whether its comparison found a difference (past the threshold or within it).
    pub fn significant(&self) -> bool {
        verdict_significant(self.verdict)
    }

    /// "1.033 ± 0.008 times slower" (the inverse ratio for faster).
    pub fn times(&self) -> String {
        times(self.ratio, self.ratio_low, self.ratio_high)
    }
}

fn verdict_significant(verdict: Verdict) -> bool {
    matches!(
        verdict,
        Verdict::Regressed | Verdict::Improved | Verdict::BelowThreshold
    )
}

/// A ratio and its interval as "1.19 ± 0.04 times slower", faster said with the inverse
/// ratio (0.8 of the time is 1.25 times faster); the `±` is the interval's half-width, with
/// a third decimal when it is under 0.01.
fn times(ratio: f64, low: f64, high: f64) -> String {
    let (factor, low, high, how) = if ratio >= 1.0 {
        (ratio, low, high, "slower")
    } else {
        let inv = |x: f64| if x > 0.0 { 1.0 / x } else { f64::INFINITY };
        (inv(ratio), inv(high), inv(low), "faster")
    };
    let pm = (high - low).abs() / 2.0;
    if !pm.is_finite() {
        return format!("{factor:.2} ± ∞ times {how}");
    }
    if pm < 0.01 {
        format!("{factor:.3} ± {pm:.3} times {how}")
    } else {
        format!("{factor:.2} ± {pm:.2} times {how}")
    }
}

impl SpeedRatio {
    /// The wall-time ratio alone.
    pub fn wall(&self) -> Ratio {
        Ratio {
            ratio: self.ratio,
            ratio_low: self.ratio_low,
            ratio_high: self.ratio_high,
            confidence: self.confidence,
            verdict: self.verdict,
            method: self.method.unwrap_or(ComparisonMethod::WelchT),
        }
    }

    /// The summary in one line, hyperfine's sentence with the half-width of the interval
    /// as the `±`: "`b` ran 1.19 ± 0.04 times slower than `a`"; with CPU time beside it,
    /// and when wall time cannot decide what CPU time does, that said first: "`b` against
    /// `a`: wall time varies 15% here; CPU time: 1.033 ± 0.008 times slower".
    pub fn sentence(&self) -> String {
        let wall = self.wall();
        let names = format!(
            "`{}` ran {} than `{}`",
            self.benchmark,
            wall.times(),
            self.reference
        );
        let Some(cpu) = self.cpu else {
            let verdict = match self.verdict {
                Verdict::NoChange | Verdict::Inconclusive => " (not a significant difference)",
                Verdict::BelowThreshold => " (within the threshold)",
                Verdict::Regressed | Verdict::Improved => "",
            };
            return format!("{names}{verdict}");
        };
        let within = |r: &Ratio| {
            if r.verdict == Verdict::BelowThreshold {
                ", within the threshold"
            } else {
                ""
            }
        };
        match (wall.significant(), cpu.significant()) {
            (true, _) => format!(
                "{names} ({}CPU time: {}{})",
                if within(&wall).is_empty() {
                    ""
                } else {
                    "within the threshold; "
                },
                cpu.times(),
                if cpu.significant() {
                    within(&cpu)
                } else {
                    ", not significant"
                }
            ),
            (false, true) => format!(
                "`{}` against `{}`: wall time {} here ({}, not significant); CPU time: {}{}",
                self.benchmark,
                self.reference,
                match self.wall_cov {
                    Some(cov) => format!("varies {:.0}%", cov * 100.0),
                    None => "does not decide".to_string(),
                },
                wall.times(),
                cpu.times(),
                within(&cpu)
            ),
            (false, false) => format!(
                "{names} (not a significant difference; CPU time: {}, not significant either)",
                cpu.times()
            ),
        }
    }
}

impl Report {
    /// Warnings over all benchmarks: what the summary line of each format counts, and what
    /// `--strict` fails on.
    pub fn warning_count(&self) -> usize {
        self.benchmarks.iter().map(|b| b.warnings.len()).sum()
    }

    /// The summary line of the warnings, e.g. `3 warnings in 2 benchmarks`; `None` without.
    pub fn warnings_summary(&self) -> Option<String> {
        let n = self.warning_count();
        let k = self
            .benchmarks
            .iter()
            .filter(|b| !b.warnings.is_empty())
            .count();
        let s = |n: usize| if n == 1 { "" } else { "s" };
        (n > 0).then(|| format!("{n} warning{} in {k} benchmark{}", s(n), s(k)))
    }
}

/// What a comparison concluded about one metric. For every metric, smaller is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No statistically significant difference (or, for exact counts, identical values).
    NoChange,
    /// Significantly smaller, by more than the threshold.
    Improved,
    /// Significantly larger, by more than the threshold: fails the CI gate.
    Regressed,
    /// A significant difference, in either direction, within the practical threshold:
    /// reported, never fails.
    BelowThreshold,
    /// Not enough data to decide (e.g. fewer than 2 samples of a measured metric).
    Inconclusive,
}

impl Verdict {
    /// The short name used in text and CSV reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::NoChange => "no change",
            Verdict::Improved => "improved",
            Verdict::Regressed => "REGRESSED",
            Verdict::BelowThreshold => "below threshold",
            Verdict::Inconclusive => "inconclusive",
        }
    }

    /// The machine-readable name, as in JSON (`no_change`, `regressed`...).
    pub fn id(self) -> &'static str {
        match self {
            Verdict::NoChange => "no_change",
            Verdict::Improved => "improved",
            Verdict::Regressed => "regressed",
            Verdict::BelowThreshold => "below_threshold",
            Verdict::Inconclusive => "inconclusive",
        }
    }

    /// Whether this verdict makes the run fail (exit code 1).
    pub fn is_regression(self) -> bool {
        self == Verdict::Regressed
    }
}

/// The statistical method behind a [`Comparison`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComparisonMethod {
    /// Welch's interval for the difference of means, Student t with the
    /// Welch-Satterthwaite degrees of freedom.
    WelchT,
    /// Welch's interval with the normal distribution: written by versions before
    /// 2026-11-23 for 30 samples or more a side; kept so their JSON still reads.
    WelchZ,
    /// One-way ANOVA gating a post-hoc pair interval: written by versions before
    /// 2026-11-23; kept so their JSON still reads. An ANOVA is now context only
    /// ([`Comparison::anova`]).
    Anova,
    /// Zero variance on every side: values compared exactly.
    Exact,
    /// A measured metric with zero variance within each saved session but differing
    /// between sessions: the candidate is judged against the spread of the sessions'
    /// means (prediction interval, Student t with k - 1 degrees of freedom).
    Sessions,
    /// Runs made in pairs (`compare`'s interleaved runs): Student's t interval of the
    /// mean per-pair change, the log of the ratio of the two runs (or their difference
    /// where a value is 0 or less), on `n - 1` degrees of freedom (a paired t test).
    PairedT,
    /// Runs made in pairs whose per-pair changes have outliers: the 20% trimmed mean of
    /// the per-pair changes with the Tukey-McLaughlin interval (winsorized variance,
    /// `n - 2g - 1` degrees of freedom).
    PairedTrimmed,
}

impl ComparisonMethod {
    /// The machine-readable name, as in JSON (`welch_t`, `anova`...).
    pub fn id(self) -> &'static str {
        match self {
            ComparisonMethod::WelchT => "welch_t",
            ComparisonMethod::WelchZ => "welch_z",
            ComparisonMethod::Anova => "anova",
            ComparisonMethod::Exact => "exact",
            ComparisonMethod::Sessions => "sessions",
            ComparisonMethod::PairedT => "paired_t",
            ComparisonMethod::PairedTrimmed => "paired_trimmed",
        }
    }

    /// The short name used in the text report.
    pub fn as_str(self) -> &'static str {
        match self {
            ComparisonMethod::WelchT => "welch-t",
            ComparisonMethod::WelchZ => "welch-z",
            ComparisonMethod::Anova => "anova",
            ComparisonMethod::Exact => "exact",
            ComparisonMethod::Sessions => "sessions",
            ComparisonMethod::PairedT => "paired-t",
            ComparisonMethod::PairedTrimmed => "paired-trimmed",
        }
    }

    /// Whether the runs were compared in pairs.
    pub fn paired(self) -> bool {
        matches!(
            self,
            ComparisonMethod::PairedT | ComparisonMethod::PairedTrimmed
        )
    }
}

/// One pair of series found to differ by the post-hoc test after an ANOVA.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairDifference {
    /// Label of the first series.
    pub a: String,
    /// Label of the second series.
    pub b: String,
    /// `mean(b) - mean(a)`.
    pub difference: f64,
    /// Lower bound of the (Bonferroni-adjusted) interval of the difference.
    pub ci_low: f64,
    /// Upper bound of the (Bonferroni-adjusted) interval of the difference.
    pub ci_high: f64,
    /// Bonferroni-adjusted p-value (capped at 1); `None` for exact comparisons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p_value: Option<f64>,
}

/// A one-way ANOVA over three or more series and its post-hoc test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnovaSummary {
    /// Labels of the series, in the order they were tested.
    pub groups: Vec<String>,
    /// The F statistic; `None` when every series has zero variance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub f: Option<f64>,
    /// Degrees of freedom between groups (k - 1).
    pub df_between: f64,
    /// Degrees of freedom within groups (N - k).
    pub df_within: f64,
    /// P-value of F against the F(df_between, df_within) distribution.
    pub p_value: f64,
    /// Whether the ANOVA rejects "all means equal" at the comparison's level.
    pub significant: bool,
    /// Name of the post-hoc test, e.g. `bonferroni-welch`.
    pub post_hoc: String,
    /// The pairs the post-hoc test found to differ (empty if none or not significant).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differing: Vec<PairDifference>,
    /// The series being judged (this run, or the later command); the text and HTML reports
    /// show only the differing pairs that involve it, the JSON keeps them all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

impl AnovaSummary {
    /// The differing pairs that involve the subject (all of them without one), and how
    /// many others there are.
    pub fn pairs_of_subject(&self) -> (Vec<&PairDifference>, usize) {
        let shown: Vec<&PairDifference> = self
            .differing
            .iter()
            .filter(|p| self.subject.as_ref().is_none_or(|s| p.a == *s || p.b == *s))
            .collect();
        let others = self.differing.len() - shown.len();
        (shown, others)
    }
}

/// How a metric compares with a reference (history entry, baseline or first command).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Method used for the verdict.
    pub method: ComparisonMethod,
    /// Label of the reference series (e.g. `baseline main`, `history 2026-11-21T23:40:01Z`).
    pub reference: String,
    /// Number of samples in the reference.
    pub reference_n: usize,
    /// Mean of the reference.
    pub reference_mean: f64,
    /// `mean(this) - mean(reference)`: positive is worse. For runs compared in pairs on
    /// the log of their ratios ([`ComparisonMethod::PairedT`]), the reference mean times
    /// the relative change the pairs give, so that it and `relative` agree.
    pub difference: f64,
    /// Lower bound of the interval of the difference; `None` when it cannot be computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_low: Option<f64>,
    /// Upper bound of the interval of the difference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_high: Option<f64>,
    /// Confidence level of the interval (after any multiple-comparison adjustment).
    pub confidence: f64,
    /// `difference / |reference_mean|`; `None` when the reference mean is 0. For runs
    /// compared in pairs on the log of their ratios, the geometric mean of the ratios
    /// minus 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relative: Option<f64>,
    /// `ci_low / |reference_mean|`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relative_ci_low: Option<f64>,
    /// `ci_high / |reference_mean|`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relative_ci_high: Option<f64>,
    /// Degrees of freedom of the t distribution used (Welch-Satterthwaite), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub df: Option<f64>,
    /// Two-sided p-value of the difference, if a test was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p_value: Option<f64>,
    /// Practical threshold, as a fraction (0.02 = 2%).
    pub threshold: f64,
    /// Absolute practical threshold, in the metric's unit (`--threshold METRIC=+N`): a
    /// change must also be larger than this to count. Absent when none was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_absolute: Option<f64>,
    /// The conclusion.
    pub verdict: Verdict,
    /// The ANOVA, when three or more series were compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anova: Option<AnovaSummary>,
    /// When confirmation runs were made (`--confirm`): the first look, before them. The
    /// rest of this comparison is the final decision, over every run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<Confirmation>,
}

/// The first look of a measured metric whose group of runs was extended by confirmation
/// runs (`--confirm N`) because a measured metric of the group looked regressed: what the
/// comparison said before them. The comparison that holds it is the final decision, over
/// the first runs and the confirmation runs together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Confirmation {
    /// Measured runs of the first look.
    pub first_runs: usize,
    /// Confirmation runs added after it.
    pub added_runs: usize,
    /// The first look's verdict.
    pub first_verdict: Verdict,
    /// The first look's relative change (`None` from a reference mean of 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_relative: Option<f64>,
    /// Lower bound of the first look's interval of the relative change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_relative_ci_low: Option<f64>,
    /// Upper bound of the first look's interval of the relative change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_relative_ci_high: Option<f64>,
    /// The first look's two-sided p-value, if a test was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_p_value: Option<f64>,
}

impl Confirmation {
    /// One line for a report: the first look, the runs added and the final verdict
    /// `last` (the comparison's own), e.g. `confirmation runs: the first look, after 5
    /// runs, said REGRESSED +19.98% (p = 1.01e-10); 25 confirmation runs made; over all 30
    /// runs: below threshold +3.33% (p = 0.026)`.
    pub fn describe(&self, last: &Comparison) -> String {
        let change =
            |r: Option<f64>| r.map_or("from 0".to_string(), |r| format!("{:+.2}%", r * 100.0));
        let p = |p: Option<f64>| match p {
            Some(p) if p < 0.001 => format!(" (p = {p:.2e})"),
            Some(p) => format!(" (p = {p:.3})"),
            None => String::new(),
        };
        format!(
            "confirmation runs: the first look, after {} runs, said {} {}{}; {} \
             confirmation run{} made; over all {} runs: {} {}{}",
            self.first_runs,
            self.first_verdict.as_str(),
            change(self.first_relative),
            p(self.first_p_value),
            self.added_runs,
            if self.added_runs == 1 { "" } else { "s" },
            self.first_runs + self.added_runs,
            last.verdict.as_str(),
            change(last.relative),
            p(last.p_value),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runs_made_are_listed_per_group_only_when_groups_differ() {
        let g = |group: &str, runs| GroupRuns {
            group: group.into(),
            runs,
        };
        // Two benchmarks through the same groups.
        let same = [
            g("timing", 10),
            g("alloc", 10),
            g("timing", 10),
            g("alloc", 10),
        ];
        assert_eq!(Conditions::runs_made(same, 10), (10, vec![]));
        assert_eq!(Conditions::runs_made([], 7), (7, vec![]));
        let (runs, groups) = Conditions::runs_made([g("timing", 100), g("alloc", 10)], 10);
        assert_eq!(
            (runs, groups.clone()),
            (100, vec![g("timing", 100), g("alloc", 10)])
        );
        let c = Conditions {
            instructions: None,
            runs,
            group_runs: groups,
            warmup: 1,
            aslr_disabled: true,
            pinned_cpus: vec![],
            clean_env: false,
            machine: None,
        };
        assert_eq!(c.measured_runs(), "100 timing runs, 10 alloc runs");
        let one = Conditions {
            instructions: None,
            runs: 1,
            group_runs: vec![],
            ..c
        };
        assert_eq!(one.measured_runs(), "1 run");
    }

    #[test]
    fn only_the_pairs_of_the_subject_are_shown() {
        let pair = |a: &str, b: &str| PairDifference {
            a: a.into(),
            b: b.into(),
            difference: 1.0,
            ci_low: 0.5,
            ci_high: 1.5,
            p_value: Some(0.01),
        };
        let mut anova = AnovaSummary {
            groups: vec!["#1".into(), "#2".into(), "#3".into(), "this run".into()],
            f: Some(10.0),
            df_between: 3.0,
            df_within: 8.0,
            p_value: 0.001,
            significant: true,
            post_hoc: "bonferroni-welch".into(),
            differing: vec![pair("#1", "#2"), pair("#2", "this run"), pair("#1", "#3")],
            subject: Some("this run".into()),
        };
        let (shown, others) = anova.pairs_of_subject();
        assert_eq!((shown.len(), others), (1, 2));
        assert_eq!(shown[0].a, "#2");
        anova.subject = None;
        assert_eq!(anova.pairs_of_subject().0.len(), 3);
    }
}
