//! The report of `sbs-profile pinpoint`: the chain from the inspected function to the
//! bottleneck, and its renderers (text, JSON, Markdown, HTML). Every number was computed
//! by the collector; these functions only format.

use std::fmt::Write as _;
use std::io;

use serde::{Deserialize, Serialize};

use crate::human;
use crate::markup::escape;
use crate::model::{Comparison, ComparisonMethod, SCHEMA_VERSION};

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

    fn previous_value(&self) -> String {
        self.value(self.previous, self.previous_interval)
    }

    fn current_value(&self) -> String {
        self.value(self.current, self.current_interval)
    }

    fn samples_note(&self) -> String {
        match self.samples {
            Some([p, c]) => format!("  samples={p}/{c}"),
            None => String::new(),
        }
    }

    fn change(&self) -> String {
        match self.change_percent {
            Some(p) => format!("{p:+.1}%"),
            None => "n/a".to_string(),
        }
    }

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

/// The text report: the chain as an indented tree, the bottleneck marked.
pub fn text(report: &PinpointReport, out: &mut dyn io::Write) -> io::Result<()> {
    let p = &report.pinpoint;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "pinpoint: {} ({}, {} run{} per build, {} comparisons, {})",
        p.function,
        p.source,
        p.runs,
        if p.runs == 1 { "" } else { "s" },
        p.comparisons,
        p.strategy
    );
    match p.repeated {
        Some(true) => {
            let _ = writeln!(
                s,
                "  runs: one per build: a second run of the previous build repeated its counts exactly"
            );
        }
        Some(false) => {
            let _ = writeln!(
                s,
                "  runs: {} per build: a second run of the previous build did not repeat its counts",
                p.runs
            );
        }
        None => {}
    }
    let _ = writeln!(s, "  previous: {}", p.previous);
    let _ = writeln!(s, "  current:  {}", p.current);
    for w in &p.warnings {
        let _ = writeln!(s, "  warning: {w}");
    }
    let _ = writeln!(s);
    let last = p.chain.len().saturating_sub(1);
    for (i, link) in p.chain.iter().enumerate() {
        let indent = "   ".repeat(link.depth);
        let branch = if link.depth == 0 { "" } else { "└─ " };
        let mark = if i == last && p.bottleneck.is_some() {
            "  <== bottleneck"
        } else {
            ""
        };
        let external = if link.external { " (external)" } else { "" };
        let _ = writeln!(
            s,
            "{indent}{branch}{}{}{external}  {} -> {} {}  {} {}  n={}{}{}{mark}",
            link.function,
            link.cycle_note(),
            link.previous_value(),
            link.current_value(),
            p.unit,
            link.change(),
            link.interval(),
            link.runs,
            link.samples_note(),
            link.share_note(),
        );
        if let Some(note) = &link.note {
            let _ = writeln!(s, "{indent}   ({note})");
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "{}", p.verdict());
    let _ = writeln!(s, "stopped: {}", p.stopped);
    for place in &p.inside {
        let share = place
            .share_percent
            .map(|x| format!(" ({x:.1}% of the change)"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "inside: {}  {} -> {} {}{share}",
            place.what,
            human::count(place.previous),
            human::count(place.current),
            p.unit
        );
    }
    for u in &p.undecided {
        let _ = writeln!(s, "undecided (too few samples): {u}");
    }
    if let Some(note) = &p.sampling {
        let _ = writeln!(s, "sampling: {}", note.describe());
    }
    out.write_all(s.as_bytes())
}

/// The JSON report.
pub fn json(report: &PinpointReport, out: &mut dyn io::Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, report)?;
    writeln!(out)
}

/// A Markdown table of the chain, for a pull-request comment.
pub fn markdown(report: &PinpointReport, out: &mut dyn io::Write) -> io::Result<()> {
    let p = &report.pinpoint;
    let mut s = String::new();
    let _ = writeln!(s, "### pinpoint: `{}` ({})\n", p.function, p.metric);
    let _ = writeln!(
        s,
        "| layer | function | previous | current | change | interval | runs | samples |"
    );
    let _ = writeln!(s, "| ---: | --- | ---: | ---: | ---: | --- | ---: | ---: |");
    let last = p.chain.len().saturating_sub(1);
    for (i, link) in p.chain.iter().enumerate() {
        let name = if i == last && p.bottleneck.is_some() {
            format!("**`{}`** (bottleneck)", link.function)
        } else {
            format!("`{}`", link.function)
        };
        let _ = writeln!(
            s,
            "| {} | {}{} | {} | {} | {} | {} | {} | {} |",
            link.depth,
            name,
            if link.external { " (external)" } else { "" },
            link.previous_value(),
            link.current_value(),
            link.change(),
            link.interval(),
            link.runs,
            link.samples
                .map_or_else(|| "".to_string(), |[p, c]| format!("{p} / {c}"))
        );
    }
    let _ = writeln!(s);
    for w in &p.warnings {
        let _ = writeln!(s, "> warning: {w}\n");
    }
    let _ = writeln!(s, "Stopped: {}", p.stopped);
    for u in &p.undecided {
        let _ = writeln!(s, "\nUndecided (too few samples): {u}");
    }
    if let Some(note) = &p.sampling {
        let _ = writeln!(s, "\nSampling: {}", note.describe());
    }
    out.write_all(s.as_bytes())
}

/// A self-contained HTML page: the chain, one pair of bars per layer (previous, current).
pub fn html(report: &PinpointReport, out: &mut dyn io::Write) -> io::Result<()> {
    let p = &report.pinpoint;
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>pinpoint: {}</title><style>{}</style></head><body>",
        escape(&p.function),
        STYLE
    );
    let _ = write!(
        s,
        "<h1>pinpoint: <code>{}</code></h1><p class=\"conditions\">{} ({}), {} runs per build, {} comparisons ({})<br>previous: {}<br>current: {}</p>",
        escape(&p.function),
        escape(&p.metric),
        escape(&p.source),
        p.runs,
        p.comparisons,
        escape(&p.strategy),
        escape(&p.previous),
        escape(&p.current)
    );
    for w in &p.warnings {
        let _ = write!(s, "<p class=\"warning\">warning: {}</p>", escape(w));
    }
    let last = p.chain.len().saturating_sub(1);
    for (i, link) in p.chain.iter().enumerate() {
        let bottleneck = i == last && p.bottleneck.is_some();
        let top = link.previous.max(link.current).max(1.0);
        let width = |v: f64| 100.0 * v / top;
        let _ = write!(
            s,
            "<div class=\"link{}\" style=\"margin-left:{}rem\"><div class=\"name\"><code>{}</code>{}{} <span class=\"change\">{} {}, n={}</span></div>\
<div class=\"bar prev\" style=\"width:{:.1}%\">previous {}</div><div class=\"bar cur\" style=\"width:{:.1}%\">current {}{}</div></div>",
            if bottleneck { " bottleneck" } else { "" },
            link.depth * 2,
            escape(&link.function),
            if link.external { " (external)" } else { "" },
            if bottleneck { " &larr; bottleneck" } else { "" },
            link.change(),
            escape(&link.interval()),
            link.runs,
            width(link.previous),
            link.previous_value(),
            width(link.current),
            link.current_value(),
            link.samples_note(),
        );
    }
    let _ = writeln!(
        s,
        "<p><b>{}</b><br>stopped: {}</p>",
        escape(&p.verdict()),
        escape(&p.stopped)
    );
    for u in &p.undecided {
        let _ = writeln!(s, "<p>undecided (too few samples): {}</p>", escape(u));
    }
    if let Some(note) = &p.sampling {
        let _ = writeln!(s, "<p>sampling: {}</p>", escape(&note.describe()));
    }
    s.push_str("</body></html>\n");
    out.write_all(s.as_bytes())
}

const STYLE: &str = "
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem auto;max-width:60rem;padding:0 1rem;color:#1b1b1b}
h1{font-size:1.4rem}p.conditions{color:#555}.warning{color:#8a4b00}
.link{margin-bottom:.8rem;border-left:3px solid #ddd;padding-left:.5rem}.link.bottleneck{border-left-color:#c0392b}
.name{font-size:.95rem;margin-bottom:.2rem}.change{color:#555;font-variant-numeric:tabular-nums}
.bar{font-size:.75rem;color:#fff;padding:.1rem .3rem;margin:.1rem 0;white-space:nowrap;min-width:6rem;box-sizing:border-box}
.bar.prev{background:#7f8c8d}.bar.cur{background:#2c7bb6}.bottleneck .bar.cur{background:#c0392b}
";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Verdict;

    fn comparison(previous: f64, current: f64) -> Comparison {
        Comparison {
            method: ComparisonMethod::Exact,
            reference: "previous".into(),
            reference_n: 3,
            reference_mean: previous,
            difference: current - previous,
            ci_low: Some(current - previous),
            ci_high: Some(current - previous),
            confidence: 1.0,
            relative: Some((current - previous) / previous),
            relative_ci_low: None,
            relative_ci_high: None,
            df: None,
            p_value: None,
            threshold: 0.02,
            threshold_absolute: None,
            verdict: Verdict::Regressed,
            anova: None,
            confirmation: None,
        }
    }

    fn report() -> PinpointReport {
        PinpointReport::new(Pinpoint {
            metric: "instructions".into(),
            unit: "instructions".into(),
            source: "valgrind callgrind".into(),
            previous: "old".into(),
            current: "new".into(),
            args: Vec::new(),
            function: "main".into(),
            runs: 3,
            strategy: "binary".into(),
            chain: vec![
                Link::new("main".into(), 0, false, 3, comparison(1000.0, 1300.0)),
                Link::new("deep<T>".into(), 1, false, 3, comparison(400.0, 700.0)),
            ],
            bottleneck: Some("deep<T>".into()),
            bottleneck_share_percent: None,
            repeated: None,
            inside: Vec::new(),
            stopped: "no call made by deep got worse".into(),
            stop: "own_code".into(),
            comparisons: 5,
            warnings: vec!["the builds printed different output".into()],
            undecided: Vec::new(),
            sampling: None,
        })
    }

    #[test]
    fn an_undecided_search_is_no_all_clear_and_a_time_without_interval_is_not_exact() {
        let mut r = report();
        let p = &mut r.pinpoint;
        let mut welch = comparison(37.75, 71.25);
        welch.method = ComparisonMethod::WelchT;
        welch.verdict = Verdict::Inconclusive;
        p.chain = vec![Link::new("main".into(), 0, false, 1, welch)];
        p.bottleneck = None;
        p.stop = "undecided".into();
        p.stopped = "main had too few samples".into();
        assert!(p.is_undecided());
        let mut out = Vec::new();
        text(&r, &mut out).unwrap();
        let t = String::from_utf8(out).unwrap();
        assert!(t.contains("+88.7% no interval  n=1"), "{t}");
        assert!(
            !t.contains("exact") && !t.contains("did not get worse"),
            "{t}"
        );
        assert!(
            t.contains("no verdict: whether main got worse is undecided"),
            "{t}"
        );
        let mut out = Vec::new();
        html(&r, &mut out).unwrap();
        let page = String::from_utf8(out).unwrap();
        assert!(!page.contains("did not get worse"), "{page}");
    }

    #[test]
    fn text_is_an_indented_chain_with_the_bottleneck_marked() {
        let mut out = Vec::new();
        text(&report(), &mut out).unwrap();
        let t = String::from_utf8(out).unwrap();
        assert!(
            t.contains("\nmain  1,000 -> 1,300 instructions  +30.0% exact  n=3\n"),
            "{t}"
        );
        assert!(
            t.contains("   └─ deep<T>  400 -> 700 instructions  +75.0% exact  n=3  <== bottleneck"),
            "{t}"
        );
        assert!(t.contains("stopped: no call made by deep got worse"), "{t}");
    }

    #[test]
    fn json_has_the_top_level_pinpoint_object_and_html_escapes() {
        let mut out = Vec::new();
        json(&report(), &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["pinpoint"]["bottleneck"], "deep<T>");
        assert_eq!(v["pinpoint"]["chain"][1]["previous"], 400.0);
        assert_eq!(v["pinpoint"]["chain"][0]["method"], "exact");
        let mut out = Vec::new();
        html(&report(), &mut out).unwrap();
        let h = String::from_utf8(out).unwrap();
        assert!(h.contains("deep&lt;T&gt;") && !h.contains("deep<T>"), "{h}");
        assert_eq!(h.matches("class=\"bar prev\"").count(), 2);
        let mut out = Vec::new();
        markdown(&report(), &mut out).unwrap();
        let m = String::from_utf8(out).unwrap();
        assert!(
            m.contains("| 1 | **`deep<T>`** (bottleneck) | 400 | 700 | +75.0% | exact | 3 |"),
            "{m}"
        );
    }

    #[test]
    fn text_shows_the_cycle_the_shares_the_note_and_how_many_runs_were_made() {
        let mut r = report();
        let p = &mut r.pinpoint;
        p.repeated = Some(true);
        p.runs = 1;
        p.bottleneck_share_percent = Some(99.5);
        p.chain[1] = p.chain[1].clone().with_context(
            vec!["deep<T>".into(), "deeper".into()],
            Some(0.75),
            Some("more than the call above it: why".into()),
        );
        let mut out = Vec::new();
        text(&r, &mut out).unwrap();
        let t = String::from_utf8(out).unwrap();
        assert!(
            t.contains("runs: one per build: a second run of the previous build repeated its counts exactly"),
            "{t}"
        );
        assert!(
            t.contains("└─ deep<T> (recursive with deeper, counted once)  400 -> 700"),
            "{t}"
        );
        assert!(
            t.contains("n=3  75.0% of the change  <== bottleneck"),
            "{t}"
        );
        assert!(
            t.contains("\n      (more than the call above it: why)\n"),
            "{t}"
        );
        assert!(
            t.contains("bottleneck: deep<T> (99.5% of the change)"),
            "{t}"
        );
        let mut out = Vec::new();
        json(&r, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let link = &v["pinpoint"]["chain"][1];
        assert_eq!(link["cycle"], serde_json::json!(["deep<T>", "deeper"]));
        assert_eq!(link["share_percent"], 75.0);
        assert_eq!(v["pinpoint"]["repeated"], true);
    }
}
