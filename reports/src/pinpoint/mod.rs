//! The report of `sbs-profile pinpoint`: the chain from the inspected function to the
//! bottleneck (its model, the JSON schema), and its renderers, one file per format like
//! the run's reports: [`text`], [`json`], [`markdown`], [`html`]. What the formats share
//! (a link's values, change and interval, the verdict line) is here. Every number was
//! computed by the collector; these functions only format.

use serde::{Deserialize, Serialize};

use crate::human;
use crate::model::{Comparison, ComparisonMethod, SCHEMA_VERSION};

mod html;
mod json;
mod markdown;
#[cfg(test)]
mod tests;
mod text;

pub use html::html;
pub use json::json;
pub use markdown::markdown;
pub use text::text;

/// The whole JSON document: `{"schema_version": 1, "pinpoint": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PinpointReport {
    /// See [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The search and its result.
    pub pinpoint: Pinpoint,
}

impl PinpointReport {
    /// Wrap a result with the current schema version.
    pub fn new(pinpoint: Pinpoint) -> PinpointReport {
        PinpointReport {
            schema_version: SCHEMA_VERSION,
            pinpoint,
        }
    }
}

/// A pinpoint search and its result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pinpoint {
    /// `instructions` or `alloc.count`.
    pub metric: String,
    /// What the metric counts, for people (`instructions`, `allocations`).
    pub unit: String,
    /// Where the numbers come from (`valgrind callgrind`, `valgrind dhat`).
    pub source: String,
    /// The previous build.
    pub previous: String,
    /// The current build.
    pub current: String,
    /// The arguments both builds ran with.
    pub args: Vec<String>,
    /// The inspected function.
    pub function: String,
    /// Runs per build.
    pub runs: usize,
    /// Counts without `--runs`: whether a second run of the previous build repeated its
    /// first's counts exactly (then one run per build was compared), or not (then more
    /// runs were made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeated: Option<bool>,
    /// `binary` or `linear`.
    pub strategy: String,
    /// From the inspected function to the bottleneck.
    pub chain: Vec<Link>,
    /// The last function of the chain, or `None` when nothing regressed.
    pub bottleneck: Option<String>,
    /// Inside the bottleneck's code (when the search ended in its own code or its call
    /// list changed; instructions and allocations): the steps into the inlined functions
    /// that explain the change, then the source lines of the last step that grew most.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inside: Vec<InsidePlace>,
    /// The share of the inspected function's change the bottleneck explains, in percent:
    /// its own code's change when the search ended there, else its link's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bottleneck_share_percent: Option<f64>,
    /// Why the search ended, in words.
    pub stopped: String,
    /// Why the search ended, as a code (`own_code`, `call_list_changed`, `depth`,
    /// `ignored`, `external`, `recursion`, `spread`, `no_regression`).
    pub stop: String,
    /// Comparisons made (each a decision of the regression statistics).
    pub comparisons: usize,
    /// Things the user should know (the builds printed different output).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Pieces of code that had too few samples to be judged (`--metric time`): neither
    /// worse nor clean.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undecided: Vec<String>,
    /// How the samples of `--metric time` went, both builds' runs together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<SamplingNote>,
}

/// A place inside the bottleneck's code: a step into an inlined function (`inlined
/// NAME`), a change in the functions inlined into it (`the functions inlined into NAME
/// changed (...)`), or a source line (`file:line`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InsidePlace {
    /// What it is.
    pub what: String,
    /// Its own cost, previous build (mean over the runs).
    pub previous: f64,
    /// The same, current build.
    pub current: f64,
    /// Its change as a share of the inspected function's change, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_percent: Option<f64>,
}

/// The samples behind `--metric time`, over every run of both builds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SamplingNote {
    /// CPU time between two samples, ns.
    pub period_ns: u64,
    /// Samples taken with a user stack.
    pub samples: u64,
    /// Samples whose stack could not be unwound to its root (their frames that were
    /// found still count).
    pub not_unwound: u64,
    /// Samples whose innermost frame is in no function of the program (a shared library,
    /// the kernel's vDSO, another program the benchmark ran).
    pub outside_program: u64,
    /// Samples the kernel dropped or took without a user stack.
    pub lost: u64,
    /// Only user-mode time was sampled (kernel samples not allowed): time in system calls
    /// and page faults is missing.
    #[serde(default)]
    pub user_only: bool,
}

impl SamplingNote {
    /// One line for people.
    pub fn describe(&self) -> String {
        format!(
            "{} samples every {} of {}CPU time; {} not unwound to their root, {} outside the program's functions, {} lost",
            self.samples,
            human::seconds(self.period_ns as f64 / 1e9),
            if self.user_only { "user-mode " } else { "" },
            self.not_unwound,
            self.outside_program,
            self.lost
        )
    }
}

/// One link of the chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// The function (demangled, without Rust's hash).
    pub function: String,
    /// Layers below the inspected function.
    pub depth: usize,
    /// A function without code in the program (a shared library's, an indirect call).
    pub external: bool,
    /// Mean over the previous build's runs: the inspected function's inclusive cost, or
    /// the inclusive cost of the call that led to this function.
    pub previous: f64,
    /// The same, current build.
    pub current: f64,
    /// `(current - previous) / previous`, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_percent: Option<f64>,
    /// `exact` (no variance: compared exactly), `paired_t` or `paired_trimmed` (the
    /// builds' runs in pairs), or `welch_t`.
    pub method: String,
    /// Interval of the change in percent (Welch); absent when exact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_percent: Option<[f64; 2]>,
    /// Runs per build behind the numbers.
    pub runs: usize,
    /// Confidence interval of the previous mean (measured metrics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_interval: Option<[f64; 2]>,
    /// Confidence interval of the current mean (measured metrics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_interval: Option<[f64; 2]>,
    /// Stack samples behind the numbers, `[previous, current]`, over all runs (`--metric
    /// time`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<[u64; 2]>,
    /// The judge's full comparison.
    pub comparison: Comparison,
    /// A recursive cycle taken as one node: its functions, the entered one first. Its
    /// cost is counted once over the recursion (what enters the cycle from outside), and
    /// the search goes on into the calls the cycle makes out of it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cycle: Vec<String>,
    /// This link's change as a share of the inspected function's change, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_percent: Option<f64>,
    /// Why this link costs more than the one above it, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Link {
    /// A link from the means and the comparison of its samples.
    pub fn new(
        function: String,
        depth: usize,
        external: bool,
        runs: usize,
        comparison: Comparison,
    ) -> Link {
        let previous = comparison.reference_mean;
        let current = previous + comparison.difference;
        let exact = comparison.method == ComparisonMethod::Exact;
        let interval_percent = match (comparison.relative_ci_low, comparison.relative_ci_high) {
            (Some(lo), Some(hi)) if !exact => Some([lo * 100.0, hi * 100.0]),
            _ => None,
        };
        Link {
            function,
            depth,
            external,
            previous,
            current,
            change_percent: comparison.relative.map(|r| r * 100.0),
            method: comparison.method.id().to_string(),
            interval_percent,
            runs,
            previous_interval: None,
            current_interval: None,
            samples: None,
            comparison,
            cycle: Vec::new(),
            share_percent: None,
            note: None,
        }
    }

    /// The same link with its recursive cycle, its share of the change and its note.
    pub fn with_context(
        mut self,
        cycle: Vec<String>,
        share: Option<f64>,
        note: Option<String>,
    ) -> Link {
        self.cycle = cycle;
        self.share_percent = share.map(|s| s * 100.0);
        self.note = note;
        self
    }

    /// ` (recursive: a > b, c)` for a cycle.
    fn cycle_note(&self) -> String {
        match self.cycle.as_slice() {
            [] => String::new(),
            [_] => " (recursive, counted once)".to_string(),
            [_, others @ ..] => format!(" (recursive with {}, counted once)", others.join(", ")),
        }
    }

    /// `  75.0% of the change` below the inspected function, when the share is known.
    fn share_note(&self) -> String {
        match self.share_percent {
            Some(p) if self.depth > 0 => format!("  {p:.1}% of the change"),
            _ => String::new(),
        }
    }

    /// The same link with the intervals of both means and the samples behind them.
    pub fn with_means(
        mut self,
        previous: Option<[f64; 2]>,
        current: Option<[f64; 2]>,
        samples: Option<[u64; 2]>,
    ) -> Link {
        self.previous_interval = previous;
        self.current_interval = current;
        self.samples = samples;
        self
    }

    /// A mean, with its confidence interval when there is one.
    fn value(&self, mean: f64, interval: Option<[f64; 2]>) -> String {
        match interval {
            Some([lo, hi]) => format!(
                "{} [{}, {}]",
                human::count(mean),
                human::count(lo),
                human::count(hi)
            ),
            None => human::count(mean),
        }
    }

    /// The previous build's mean, with its interval.
    fn previous_value(&self) -> String {
        self.value(self.previous, self.previous_interval)
    }

    /// The current build's mean, with its interval.
    fn current_value(&self) -> String {
        self.value(self.current, self.current_interval)
    }

    /// `  samples=P/C` when the numbers come from stack samples.
    fn samples_note(&self) -> String {
        match self.samples {
            Some([p, c]) => format!("  samples={p}/{c}"),
            None => String::new(),
        }
    }

    /// The change in percent, signed (`n/a` without one).
    fn change(&self) -> String {
        match self.change_percent {
            Some(p) => format!("{p:+.1}%"),
            None => "n/a".to_string(),
        }
    }

    /// The change's interval and the method that decided, `exact`, or `no interval`.
    fn interval(&self) -> String {
        match self.interval_percent {
            // The method that decided (the builds' runs in pairs, or Welch's).
            Some([lo, hi]) => format!("[{lo:+.1}%, {hi:+.1}%] {}", self.method),
            None if self.method == "exact" => "exact".to_string(),
            // A measured value compared without an interval (too few runs or samples).
            None => "no interval".to_string(),
        }
    }
}

impl Pinpoint {
    /// Whether the search could not tell whether the inspected function got worse.
    pub fn is_undecided(&self) -> bool {
        self.stop == "undecided"
    }

    /// The verdict line: the bottleneck, or why there is none. An undecided search is no
    /// all-clear.
    fn verdict(&self) -> String {
        match &self.bottleneck {
            Some(b) => match self.bottleneck_share_percent {
                Some(share) => format!("bottleneck: {b} ({share:.1}% of the change)"),
                None => format!("bottleneck: {b}"),
            },
            None if self.is_undecided() => format!(
                "no verdict: whether {} got worse is undecided",
                self.function
            ),
            None => format!("no bottleneck: {} did not get worse", self.function),
        }
    }
}
