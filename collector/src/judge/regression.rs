//! Regression checks of a run: the history and baseline settings, loading the references
//! before the runs, comparing every metric after them, saving, and the verdict that picks
//! the exit code. The statistics are in [`crate::judge::compare`], the files in
//! [`crate::history`].
//!
//! - `sbs-profile -- CMD`: each metric is compared with the latest saved entries of the
//!   same benchmark (Welch with one entry, ANOVA from two on, the reference being the most
//!   recent), or with a named baseline (`--baseline NAME`, Welch).
//! - `sbs-profile compare A B [C...]`: the commands run interleaved, and each metric of B,
//!   C... is compared with A's, run i with run i (paired; Bonferroni over the later
//!   commands, an ANOVA as context for more than two).
//!
//! Series are compared only when metric id, unit and source all match.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{bail, Context};
use sbs_reports::model::{
    BenchmarkResult, Comparison, Conditions, Family, Machine, MetricId, MetricResult, Report,
    TrendPoint, Variant,
};

use crate::history::{Entry, History, HistoryError, SavedMetric, Saving, Wanted};
use crate::judge::busy::{self, BusySide};
use crate::judge::compare::{
    against_sessions, compare, compare_paired, CompareError, Policy, Series, Thresholds,
};
use crate::judge::headline::{headline, speed_ratios};
use crate::judge::looks::FirstLooks;
use crate::judge::sources::ensure_same_source;

pub use crate::judge::compare::THIS_RUN;

/// A group of runs of one benchmark to extend: (benchmark index in the report, group).
pub type GroupOf = (usize, String);

/// The regression settings of a run, as asked for (validated by [`Regression::new`]).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Directory of the saved history and baselines.
    pub history: PathBuf,
    /// Save this run's samples as a new history entry.
    pub save: bool,
    /// Save this run's samples as this baseline, replacing the previous one.
    pub save_baseline: Option<String>,
    /// Compare with this baseline instead of the latest history entries.
    pub baseline: Option<String>,
    /// Practical thresholds: `PCT`, `METRIC=PCT` or `PREFIX*=PCT`.
    pub thresholds: Vec<String>,
    /// Compare with at most this many of the latest history entries.
    pub depth: usize,
    /// Let the saved runs whose child failed serve as references (`--ignore-failure`:
    /// failures are part of what is measured); otherwise they are left out.
    pub include_failed: bool,
    /// Confirmation runs made before a measured metric fails the gate (`--confirm N`;
    /// 0: none); `None` when not given (a run then makes as many as its `--runs`).
    pub confirm: Option<usize>,
    /// Judge measured times also when a side of their comparison ran on a busy machine
    /// (`--judge-busy`); otherwise such a time is not judged ([`crate::judge::busy`]).
    pub judge_busy: bool,
}

/// Whether the benchmarks are compared with saved data or with each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One command, compared with its history or a baseline.
    Run,
    /// Several commands compared with the first (`sbs-profile compare`).
    Compare,
}

/// The validated regression settings.
#[derive(Debug, Clone)]
pub struct Regression {
    mode: Mode,
    /// The store, and what this run saves in it.
    history: History,
    baseline: Option<String>,
    thresholds: Thresholds,
    depth: usize,
    include_failed: bool,
    confidence: f64,
    /// Confirmation runs per group that looks regressed (0: none; `None`: as many as
    /// the first look's runs).
    confirm: Option<usize>,
    /// Judge times measured on a busy machine (`--judge-busy`).
    judge_busy: bool,
}

/// What a benchmark is compared with, loaded before its runs.
#[derive(Debug, Clone)]
pub enum Reference {
    /// Nothing saved: no comparison.
    Nothing,
    /// A named baseline.
    Baseline(String, Box<Entry>),
    /// Saved history entries, oldest first.
    History(Vec<Entry>),
}

/// A metric that regressed, for the summary line and the exit code.
#[derive(Debug, Clone, PartialEq)]
pub struct Regressed {
    /// Benchmark name.
    pub benchmark: String,
    /// Metric id.
    pub metric: String,
    /// Relative change (`None` from a zero reference).
    pub relative: Option<f64>,
    /// The threshold it exceeded.
    pub threshold: f64,
    /// Label of the reference.
    pub reference: String,
    /// The confirmation runs it regressed after (`--confirm`), and the runs in all.
    pub confirmed: Option<(usize, usize)>,
}

impl std::fmt::Display for Regressed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let change = self
            .relative
            .map_or("from 0".to_string(), |r| format!("{:+.2}%", r * 100.0));
        let confirmed = match self.confirmed {
            Some((added, all)) => format!(", confirmed by {added} more runs, {all} in all"),
            None => String::new(),
        };
        write!(
            f,
            "{} of `{}` regressed {change} against {} (threshold {}%{confirmed})",
            self.metric,
            self.benchmark,
            self.reference,
            self.threshold * 100.0
        )
    }
}

/// What a plan will measure, known before anything heavy: the families of its metrics
/// and the id of every metric (`PREFIX*` for ids its runs name).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measured {
    /// The families of metric ids the plan's groups may report.
    pub families: BTreeSet<Family>,
    /// The id of every metric the plan's groups may report.
    pub ids: BTreeSet<String>,
}

/// The gate's first look at a run ([`Regression::first_look`]).
#[derive(Debug, Clone)]
pub struct FirstLook {
    /// The metrics that regressed at the first look.
    pub regressions: Vec<Regressed>,
    /// The confirmation runs to make of a group whose measured metric looks regressed
    /// (0: none).
    pub confirm_runs: usize,
    /// Every metric's first comparison, kept for the second look when runs may follow.
    looks: FirstLooks,
}

/// What the gate says once a run's report is final ([`Regression::finish`]).
#[derive(Debug)]
pub struct Finished {
    /// The history files written (`--save`, `--save-baseline`), or why they could not be.
    pub saved: anyhow::Result<Vec<PathBuf>>,
    /// An error naming every `--threshold` that matched no metric of the report.
    pub unnamed: anyhow::Result<()>,
}

impl Regression {
    /// The gate of a run, every flag of it checked before anything heavy, in this order:
    /// its own settings ([`Regression::new`]); then, only once they are valid, the
    /// thresholds against what the plan will measure (`measured`, or why it cannot be
    /// known: a typo in the settings wins over an error of the plan); then that `--save`
    /// and `--save-baseline` can write the history's directory.
    pub fn prepare(
        args: &Settings,
        confidence: f64,
        mode: Mode,
        measured: anyhow::Result<Measured>,
    ) -> anyhow::Result<Regression> {
        let regression = Regression::new(args, confidence, mode)?;
        let measured = measured?;
        regression.check_thresholds(&measured.families, Some(&measured.ids))?;
        regression.history.check_writable(&[])?;
        Ok(regression)
    }

    /// Validate the options. `confidence` is the plan's.
    pub fn new(args: &Settings, confidence: f64, mode: Mode) -> anyhow::Result<Regression> {
        let thresholds = Thresholds::from_args(&args.thresholds)?;
        let saving = Saving {
            entries: args.save,
            baseline: args.save_baseline.clone(),
        };
        let history = History::open(&args.history, saving, args.baseline.as_deref())?;
        if mode == Mode::Compare && args.confirm.is_some_and(|n| n > 0) {
            bail!(
                "--confirm adds runs before a run fails against its history or a baseline, \
                 while `compare` judges its commands on their pairs of runs: drop --confirm, \
                 or raise --runs"
            );
        }
        if mode == Mode::Compare && args.baseline.is_some() {
            bail!(
                "--baseline compares a run with a saved baseline, while `compare` compares its \
                 commands with each other: drop --baseline, or run each command on its own"
            );
        }
        Ok(Regression {
            mode,
            history,
            baseline: args.baseline.clone(),
            thresholds,
            depth: args.depth,
            include_failed: args.include_failed,
            confidence,
            confirm: args.confirm,
            judge_busy: args.judge_busy,
        })
    }

    /// Load what each benchmark (by name) is compared with, then check that `--save` and
    /// `--save-baseline` can write their history: one read of the store
    /// ([`History::load`]). Runs before the measurements, so a missing baseline, a
    /// corrupt history file or a history that cannot be written fails before minutes of
    /// runs.
    pub fn load(&self, benchmarks: &[String]) -> anyhow::Result<Vec<Reference>> {
        let wanted = match (self.mode, &self.baseline) {
            (Mode::Compare, _) => Wanted::Nothing,
            (Mode::Run, Some(base)) => Wanted::Baseline(base),
            (Mode::Run, None) => Wanted::Latest(self.depth),
        };
        let loaded = self.history.load(benchmarks, wanted).map_err(no_baseline)?;
        Ok(loaded
            .into_iter()
            .map(|mut entries| match (wanted, entries.pop()) {
                (Wanted::Baseline(base), Some(entry)) => {
                    Reference::Baseline(base.to_string(), Box::new(entry))
                }
                (_, None) => Reference::Nothing,
                (_, Some(last)) => {
                    entries.push(last);
                    Reference::History(entries)
                }
            })
            .collect())
    }

    /// Compare every metric of `report` with its reference (or, in `compare` mode, with the
    /// first benchmark) and record the comparisons in the report. Returns the regressions.
    pub fn apply(
        &self,
        references: &[Reference],
        report: &mut Report,
    ) -> anyhow::Result<Vec<Regressed>> {
        self.apply_with(references, report, None)
    }

    /// [`Regression::apply`] to a report made from the history's latest entries, each
    /// benchmark's measured on the machine `latest[b]` (not the report's conditions).
    pub fn apply_to_latest(
        &self,
        references: &[Reference],
        report: &mut Report,
        latest: &[Option<Machine>],
    ) -> anyhow::Result<Vec<Regressed>> {
        self.apply_with(references, report, Some(latest))
    }

    fn apply_with(
        &self,
        references: &[Reference],
        report: &mut Report,
        latest: Option<&[Option<Machine>]>,
    ) -> anyhow::Result<Vec<Regressed>> {
        match self.mode {
            Mode::Run => self.judge_saved(references, report, None, latest)?,
            Mode::Compare => self.compare_benchmarks(&mut report.benchmarks, &report.conditions)?,
        }
        if self.mode == Mode::Compare {
            report.speed = speed_ratios(report);
        }
        report.headline = headline(report, &against(self.mode, references, report));
        Ok(regressions(report))
    }

    /// The gate's first look at a fresh `report` of `first_runs` runs per group: its
    /// comparisons recorded ([`Regression::apply`]), its regressions, and the
    /// confirmation runs the gate allows before a measured metric fails (with the first
    /// comparisons, kept for [`Regression::second_look`] when runs may follow).
    pub fn first_look(
        &self,
        references: &[Reference],
        report: &mut Report,
        first_runs: usize,
    ) -> anyhow::Result<FirstLook> {
        let regressions = self.apply(references, report)?;
        let confirm_runs = self.confirm_runs(first_runs);
        let looks = match confirm_runs {
            0 => FirstLooks::default(),
            _ => FirstLooks::take(report),
        };
        Ok(FirstLook {
            regressions,
            confirm_runs,
            looks,
        })
    }

    /// The confirmation runs to make after a first look of `first_runs` runs whose
    /// measured metric looked regressed (`--confirm N`; by default as many again): 0 when
    /// disabled, and always 0 in `compare`, whose commands are judged on their pairs.
    fn confirm_runs(&self, first_runs: usize) -> usize {
        match self.mode {
            Mode::Run => self.confirm.unwrap_or(first_runs),
            Mode::Compare => 0,
        }
    }

    /// After confirmation runs were added to `groups` (benchmark index, group name) of
    /// `report`: judge every metric of those groups again, over all its runs, against the
    /// same references, give the report its headline again, and record in each final
    /// comparison its `first` look. Returns the regressions of the whole report then
    /// ([`regressions`]).
    pub fn second_look(
        &self,
        references: &[Reference],
        report: &mut Report,
        groups: &[GroupOf],
        first: &FirstLook,
    ) -> anyhow::Result<Vec<Regressed>> {
        self.judge_saved(references, report, Some(groups), None)?;
        report.headline = headline(report, &against(self.mode, references, report));
        // The first looks go into the final comparisons, and the regressions say so.
        first.looks.record(report, groups);
        Ok(regressions(report))
    }

    /// Compare each gated metric of `report` with its benchmark's saved reference; with
    /// `only`, just the metrics of those groups, judged again (their notes are not
    /// repeated).
    fn judge_saved(
        &self,
        references: &[Reference],
        report: &mut Report,
        only: Option<&[GroupOf]>,
        latest: Option<&[Option<Machine>]>,
    ) -> anyhow::Result<()> {
        let conditions = report.conditions.machine.clone();
        for (b, (bench, reference)) in report.benchmarks.iter_mut().zip(references).enumerate() {
            let this_run = match latest {
                Some(machines) => machines.get(b).cloned().flatten(),
                None => conditions.clone(),
            };
            let chosen = |m: &MetricResult| {
                only.is_none_or(|groups| groups.iter().any(|(gb, g)| *gb == b && *g == m.group))
            };
            for metric in bench.metrics.iter_mut().filter(|m| gated(m) && chosen(m)) {
                let before = metric.notes.len();
                metric.comparison = None;
                metric.trend.clear();
                self.compare_with_saved(metric, reference)
                    .with_context(|| format!("comparing {} of `{}`", metric.id, bench.name))?;
                // Judged again: a note the first judgement made is not made twice.
                let new: Vec<String> = metric.notes.drain(before..).collect();
                for note in new {
                    if !metric.notes.contains(&note) {
                        metric.notes.push(note);
                    }
                }
            }
            if !self.judge_busy {
                busy::set_aside(bench, &self.busy_sides(this_run.as_ref(), reference));
            }
        }
        Ok(())
    }

    /// The sides of a benchmark's comparisons that ran on a busy machine: this run, and
    /// the saved entries within the history depth (or the baseline) it is compared with.
    fn busy_sides(&self, this_run: Option<&Machine>, reference: &Reference) -> Vec<BusySide> {
        let saved: Vec<&Entry> = match reference {
            Reference::Nothing => Vec::new(),
            Reference::Baseline(_, entry) => vec![entry.as_ref()],
            Reference::History(entries) => entries[entries.len().saturating_sub(self.depth)..]
                .iter()
                .collect(),
        };
        BusySide::of(THIS_RUN, this_run)
            .into_iter()
            .chain(saved.into_iter().filter_map(|e| {
                let label = match reference {
                    Reference::Baseline(name, _) => format!("baseline {name}"),
                    _ => e.label(),
                };
                BusySide::of(label, e.meta.machine.as_ref())
            }))
            .collect()
    }

    fn policy(&self, metric: &MetricResult) -> Policy {
        Policy {
            confidence: self.confidence,
            threshold: self.thresholds.for_metric(&metric.id),
            threshold_absolute: self.thresholds.absolute_for_metric(&metric.id),
            exact: metric.exact,
            resolution: crate::judge::sources::resolution(&metric.source, metric.unit),
        }
    }

    /// Each saved entry's samples of `metric` within the history depth (failed runs left
    /// out unless asked), labelled; an entry whose every run failed has no samples.
    fn saved_samples(
        &self,
        metric: &MetricResult,
        reference: &Reference,
    ) -> Vec<(String, Vec<f64>)> {
        let samples = |m: &SavedMetric| {
            if self.include_failed {
                m.samples.clone()
            } else {
                m.good_samples()
            }
        };
        match reference {
            Reference::Nothing => Vec::new(),
            Reference::Baseline(name, entry) => entry
                .metric(&metric.id, metric.unit, &metric.source)
                .map(|m| (format!("baseline {name}"), samples(m)))
                .into_iter()
                .collect(),
            Reference::History(entries) => {
                let with_metric: Vec<(String, Vec<f64>)> = entries
                    .iter()
                    .filter_map(|e| {
                        let m = e.metric(&metric.id, metric.unit, &metric.source)?;
                        Some((e.label(), samples(m)))
                    })
                    .collect();
                let skip = with_metric.len().saturating_sub(self.depth);
                with_metric.into_iter().skip(skip).collect()
            }
        }
    }

    fn compare_with_saved(
        &self,
        metric: &mut MetricResult,
        reference: &Reference,
    ) -> anyhow::Result<()> {
        if let Reference::Nothing = reference {
            return Ok(());
        }
        let found = self.saved_samples(metric, reference);
        let all_failed = found.iter().filter(|(_, s)| s.is_empty()).count();
        if all_failed > 0 {
            metric.notes.push(format!(
                "{all_failed} saved entr{} left out: every run of {} failed (saved with \
                 --ignore-failure); pass --ignore-failure to compare with such runs too",
                if all_failed == 1 { "y" } else { "ies" },
                if all_failed == 1 { "it" } else { "them" },
            ));
        }
        let (labels, saved): (Vec<String>, Vec<Vec<f64>>) =
            found.into_iter().filter(|(_, s)| !s.is_empty()).unzip();
        if saved.is_empty() {
            metric.notes.push(not_compared(metric, reference));
            return Ok(());
        }
        if let Reference::History(_) = reference {
            let mut runs: Vec<(&str, &[f64])> = labels
                .iter()
                .map(String::as_str)
                .zip(saved.iter().map(Vec::as_slice))
                .collect();
            runs.push((THIS_RUN, &metric.samples));
            metric.trend = self.trend(&runs, metric)?;
        }
        let series: Vec<Series<'_>> = labels
            .iter()
            .zip(&saved)
            .map(|(label, samples)| Series { label, samples })
            .collect();
        let mut comparison = judge_against_history(&series, &metric.samples, &self.policy(metric))?;
        crate::judge::compare::bound_by_range(&mut comparison, &metric.id);
        // The trend's last point is this run: it carries the verdict the table gives (and
        // the gate acts on), against the history as a whole, not a step against the entry
        // before it alone, so that the plot and the table agree.
        if let Some(last) = metric.trend.last_mut() {
            last.verdict = Some(comparison.verdict);
        }
        metric.comparison = Some(comparison);
        Ok(())
    }

    /// Each run of a metric's history with its interval and its verdict against the run
    /// before it (a two-series comparison, so each step is judged on its own). The caller
    /// gives the last point, this run, the verdict of its comparison with the history.
    pub fn trend(
        &self,
        runs: &[(&str, &[f64])],
        metric: &MetricResult,
    ) -> anyhow::Result<Vec<TrendPoint>> {
        let policy = self.policy(metric);
        let mut points = Vec::with_capacity(runs.len());
        for (i, &(label, samples)) in runs.iter().enumerate() {
            let summary =
                crate::judge::summary::summarize_metric(&metric.id, samples, self.confidence);
            let verdict = match i {
                0 => None,
                _ => {
                    let (prev_label, prev) = runs[i - 1];
                    let pair = [
                        Series {
                            label: prev_label,
                            samples: prev,
                        },
                        Series { label, samples },
                    ];
                    Some(compare(&pair, 0, 1, &policy)?.verdict)
                }
            };
            points.push(TrendPoint {
                label: label.to_string(),
                n: summary.n,
                mean: summary.mean,
                ci_low: summary.ci_low,
                ci_high: summary.ci_high,
                verdict,
            });
        }
        Ok(points)
    }

    fn compare_benchmarks(
        &self,
        benchmarks: &mut [BenchmarkResult],
        conditions: &Conditions,
    ) -> anyhow::Result<()> {
        let Some(first) = benchmarks.first() else {
            return Ok(());
        };
        let metric_keys: Vec<_> = first
            .metrics
            .iter()
            .filter(|m| gated(m))
            .map(|m| (m.id.clone(), m.unit, m.source.clone()))
            .collect();
        for (id, unit, source) in metric_keys {
            // (benchmark index, metric index) of every benchmark that has this metric.
            let found: Vec<(usize, usize)> = benchmarks
                .iter()
                .enumerate()
                .filter_map(|(b, bench)| {
                    let m = bench
                        .metrics
                        .iter()
                        .position(|m| m.id == id && m.unit == unit && m.source == source)?;
                    Some((b, m))
                })
                .collect();
            // The same metric from another mechanism in another command: refused, saying so.
            for bench in benchmarks.iter_mut().skip(1) {
                if let Some(m) = bench
                    .metrics
                    .iter_mut()
                    .find(|m| m.id == id && m.source != source)
                {
                    if let Err(e) = ensure_same_source(&id, &source, &m.source) {
                        m.notes.push(format!("not compared: {e}"));
                    }
                }
            }
            if found.len() < 2 {
                continue;
            }
            let comparisons = {
                let series: Vec<Series<'_>> = found
                    .iter()
                    .map(|&(b, m)| Series {
                        label: &benchmarks[b].name,
                        samples: &benchmarks[b].metrics[m].samples,
                    })
                    .collect();
                let (b0, m0) = found[0];
                let policy = self.policy(&benchmarks[b0].metrics[m0]);
                // The commands ran interleaved, run i of each in round i: their runs are
                // compared in pairs, where every run of the group gave one sample. A run
                // that timed out (--ignore-failure) leaves no time sample, and the runs
                // after it would pair with the wrong round: Welch then.
                let group = &benchmarks[b0].metrics[m0].group;
                let runs = conditions
                    .group_runs
                    .iter()
                    .find(|g| &g.group == group)
                    .map_or(conditions.runs, |g| g.runs);
                let one_per_run = found
                    .iter()
                    .all(|&(b, m)| benchmarks[b].metrics[m].samples.len() == runs);
                let judge = if one_per_run { compare_paired } else { compare };
                (1..found.len())
                    .map(|candidate| {
                        judge(&series, 0, candidate, &policy)
                            .with_context(|| format!("comparing {id} across the commands"))
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?
            };
            for (&(b, m), mut comparison) in found[1..].iter().zip(comparisons) {
                crate::judge::compare::bound_by_range(&mut comparison, &id);
                benchmarks[b].metrics[m].comparison = Some(comparison);
            }
        }
        // The commands ran interleaved on the same machine: a busy spell was both sides'.
        if !self.judge_busy {
            let sides: Vec<BusySide> = BusySide::of("these runs", conditions.machine.as_ref())
                .into_iter()
                .collect();
            for bench in benchmarks.iter_mut().skip(1) {
                busy::set_aside(bench, &sides);
            }
        }
        Ok(())
    }

    /// Check, before anything heavy, that every `--threshold` names a metric the plan will
    /// measure (`families` and, when known, `ids`), so that a typo fails before minutes of
    /// runs. A misspelt name the plan cannot tell from a real one (a harness's metrics
    /// named by its runs) is caught after them, by [`Regression::check_threshold_names`].
    fn check_thresholds(
        &self,
        families: &BTreeSet<Family>,
        ids: Option<&BTreeSet<String>>,
    ) -> anyhow::Result<()> {
        let refused = thresholds_outside(&self.thresholds, families, ids);
        if !refused.is_empty() {
            bail!(
                "--threshold names no metric this run will measure: {}; the gate of such a \
                 metric would never fire: fix the name, or add the option that measures it",
                refused.join(", ")
            );
        }
        Ok(())
    }

    /// An error naming every `--threshold` metric that matched no metric of `report`.
    pub fn check_threshold_names(&self, report: &Report) -> anyhow::Result<()> {
        let unknown = unknown_threshold_names(&self.thresholds, report);
        if unknown.is_empty() {
            return Ok(());
        }
        bail!(
            "--threshold names no metric of this run: {}; the gate of a misspelt metric \
             would never fire: fix the name (metric ids are listed in the report)",
            unknown.join(", ")
        )
    }

    /// Once the report of a run is final: save it as asked, then check that every
    /// `--threshold` named one of its metrics. Neither stops the other; the caller says
    /// both once the reports are written.
    pub fn finish(&self, report: &Report) -> Finished {
        Finished {
            saved: self.save(report),
            unnamed: self.check_threshold_names(report),
        }
    }

    /// Save the report's benchmarks as asked (`--save`, `--save-baseline`). Returns the
    /// files written.
    fn save(&self, report: &Report) -> anyhow::Result<Vec<PathBuf>> {
        let machine = report.conditions.machine.clone();
        Ok(self.history.save_run(&report.benchmarks, machine)?)
    }
}

/// A baseline that has no entry for a benchmark, said with what to do (and the closest
/// saved name, for a typo such as `mian`); any other error of the store as it is.
fn no_baseline(e: HistoryError) -> anyhow::Error {
    let HistoryError::NoBaseline {
        name: base,
        benchmark: name,
        path,
        saved,
    } = e
    else {
        return e.into();
    };
    let path = path.display();
    let hint = closest(&base, saved.iter().map(String::as_str))
        .map(|n| format!("did you mean `{n}`? Else "))
        .unwrap_or_default();
    anyhow::anyhow!(
        "baseline `{base}` has no entry for benchmark `{name}` ({path} does \
         not exist): {hint}save one first with --save-baseline {base}, or \
         check --history and --name"
    )
}

/// The option that measures a family of metrics, for messages.
fn measured_by(family: Family) -> &'static str {
    match family {
        Family::Time => "--time",
        Family::Rss => "--memory",
        Family::Alloc => "--alloc",
        Family::Heap => "--alloc or --memory",
        Family::Invocations => "--invocations",
        Family::Boxing => "--boxing",
        Family::Counter => "--counters or --instructions",
        Family::Profile => "--profile-time",
    }
}

/// Whether a pattern's prefix (`alloc.c` of `alloc.c*`, or `al`) is of a family or may
/// become one.
fn prefix_of_a_family(prefix: &str) -> bool {
    Family::ALL
        .map(Family::prefix)
        .iter()
        .any(|f| prefix.starts_with(f) || f.starts_with(prefix))
}

/// The candidate closest to `name`, if one is close (Jaro-Winkler above 0.8).
fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .map(|c| (strsim::jaro_winkler(name, c), c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// Whether `name` is one of `ids`, where an id `PREFIX*` stands for every id that starts
/// with `PREFIX`.
fn names_one_of(name: &str, ids: &BTreeSet<String>) -> bool {
    ids.contains(name)
        || ids
            .iter()
            .filter_map(|id| id.strip_suffix('*'))
            .any(|prefix| name.starts_with(prefix))
}

/// `--threshold` patterns that cannot name a metric of a run measuring `families` (and,
/// if known, exactly the metrics `ids`), each with why: an exact name of a family the run
/// does not measure (with the option that would), an exact name that is none of `ids`
/// (with the closest), or a name or prefix of no family at all (with the closest family).
/// A prefix of a family (`time.*` in an `--alloc` run) is fine, measured or not: one set
/// of thresholds can serve several CI jobs.
pub fn thresholds_outside(
    thresholds: &Thresholds,
    families: &BTreeSet<Family>,
    ids: Option<&BTreeSet<String>>,
) -> Vec<String> {
    let patterns: BTreeSet<&str> = thresholds.patterns().collect();
    patterns
        .into_iter()
        .filter_map(|pattern| {
            let family = match pattern.strip_suffix('*') {
                Some(prefix) if prefix_of_a_family(prefix) => return None,
                Some(_) => None,
                None => Family::of(pattern),
            };
            match family {
                Some(f) if families.contains(&f) => match ids {
                    Some(ids) if !pattern.ends_with('*') && !names_one_of(pattern, ids) => Some(
                        match closest(
                            pattern,
                            ids.iter().map(String::as_str).filter(|i| !i.ends_with('*')),
                        ) {
                            Some(id) => format!("`{pattern}` (did you mean `{id}`?)"),
                            None => format!("`{pattern}`"),
                        },
                    ),
                    _ => None,
                },
                Some(f) => Some(format!(
                    "`{pattern}` ({}* metrics are measured with {})",
                    f.prefix(),
                    measured_by(f)
                )),
                None => {
                    // `tme.wall`: the closest family with the rest as given.
                    let (head, rest) = match pattern.find('.') {
                        Some(dot) => pattern.split_at(dot + 1),
                        None => (pattern, ""),
                    };
                    let prefixes = Family::ALL.map(Family::prefix);
                    Some(match closest(head, prefixes.into_iter()) {
                        Some(f) => format!("`{pattern}` (did you mean `{f}{rest}`?)"),
                        None => format!(
                            "`{pattern}` (metric ids start with {})",
                            prefixes.join(", ")
                        ),
                    })
                }
            }
        })
        .collect()
}

/// `--threshold` patterns that name no metric of `report`, each with the closest metric
/// id when one is close: a typo in a CI job would otherwise switch its gate off without
/// a word. An exact name must be a metric of the run; a prefix (`alloc.*`) must match one,
/// or be a family of metrics this run did not measure.
pub fn unknown_threshold_names(thresholds: &Thresholds, report: &Report) -> Vec<String> {
    let ids: BTreeSet<&str> = report
        .benchmarks
        .iter()
        .flat_map(|b| &b.metrics)
        .map(|m| m.id.as_str())
        .collect();
    let patterns: BTreeSet<&str> = thresholds.patterns().collect();
    patterns
        .into_iter()
        .filter(|pattern| match pattern.strip_suffix('*') {
            // A family this run did not measure (`time.*` in an --alloc run) is fine; a
            // prefix of no family at all is a typo.
            Some(prefix) => {
                !ids.iter().any(|id| id.starts_with(prefix)) && !prefix_of_a_family(prefix)
            }
            None => !ids.contains(pattern),
        })
        .map(|pattern| {
            let closest = ids
                .iter()
                .map(|id| (strsim::jaro_winkler(pattern.trim_end_matches('*'), id), *id))
                .filter(|(score, _)| *score > 0.8)
                .max_by(|a, b| a.0.total_cmp(&b.0));
            match closest {
                Some((_, id)) => format!("`{pattern}` (did you mean `{id}`?)"),
                None => format!("`{pattern}`"),
            }
        })
        .collect()
}

/// The gate of a run with saved history: `current` (this run's samples) judged against
/// the saved sessions, oldest first (at least one); see [`against_sessions`].
pub fn judge_against_history(
    saved: &[Series<'_>],
    current: &[f64],
    policy: &Policy,
) -> Result<Comparison, CompareError> {
    let candidate = Series {
        label: THIS_RUN,
        samples: current,
    };
    against_sessions(saved, candidate, policy)
}

/// The regressed metrics of a report (verdict [`Verdict::Regressed`](sbs_reports::model::Verdict)).
pub fn regressions(report: &Report) -> Vec<Regressed> {
    report
        .benchmarks
        .iter()
        .flat_map(|b| {
            b.metrics.iter().filter_map(move |m| {
                let c = m.comparison.as_ref()?;
                c.verdict.is_regression().then(|| Regressed {
                    benchmark: b.name.clone(),
                    metric: m.id.clone(),
                    relative: c.relative,
                    threshold: c.threshold,
                    reference: c.reference.clone(),
                    confirmed: c
                        .confirmation
                        .as_ref()
                        .map(|k| (k.added_runs, k.first_runs + k.added_runs)),
                })
            })
        })
        .collect()
}

/// What the comparisons of `report` were made against, for its headline.
fn against(mode: Mode, references: &[Reference], report: &Report) -> String {
    if mode == Mode::Compare {
        return match report.benchmarks.first() {
            Some(first) => format!("`{}`", first.name),
            None => "the first command".to_string(),
        };
    }
    let mut baselines = references.iter().filter_map(|r| match r {
        Reference::Baseline(name, _) => Some(name),
        _ => None,
    });
    if let Some(name) = baselines.next() {
        return format!("baseline `{name}`");
    }
    let mut latest = references.iter().filter_map(|r| match r {
        Reference::History(entries) => entries.last().map(|e| e.label()),
        _ => None,
    });
    match (latest.next(), report.benchmarks.len()) {
        (Some(label), 1) => format!("the history up to {label}"),
        _ => "the history".to_string(),
    }
}

/// Why `metric` could not be compared with `reference`: the same metric was saved from
/// another mechanism (refused, saying so), or not saved at all.
fn not_compared(metric: &MetricResult, reference: &Reference) -> String {
    // The same metric saved from another mechanism is refused, saying so.
    let saved_entries: Vec<&Entry> = match reference {
        Reference::Nothing => Vec::new(),
        Reference::Baseline(_, entry) => vec![entry.as_ref()],
        Reference::History(entries) => entries.iter().collect(),
    };
    if let Some(other) = saved_entries
        .iter()
        .flat_map(|e| &e.metrics)
        .find(|m| m.id == metric.id && m.source != metric.source)
    {
        if let Err(e) = ensure_same_source(&metric.id, &other.source, &metric.source) {
            return format!("not compared: {e}");
        }
    }
    format!(
        "not compared: no saved samples of {} from source {} in {}",
        metric.id,
        metric.source,
        match reference {
            Reference::Baseline(name, _) => format!("baseline {name}"),
            _ => "the history".to_string(),
        }
    )
}

/// Whether a metric is compared and can fail the gate: not the empty operation's cost
/// (`X.empty`, the calibration), which measures the harness, not the benchmark; its
/// changes show in `X.calibrated`, which is.
fn gated(metric: &MetricResult) -> bool {
    MetricId::parse(&metric.id).map_or(true, |id| id.variant() != Variant::Empty)
}

#[cfg(test)]
mod tests {
    use sbs_reports::model::{ComparisonMethod, Conditions, Unit, SCHEMA_VERSION};

    use super::*;
    use crate::judge::summary::metric_result;

    fn report(ids: &[&str]) -> Report {
        let metrics = ids
            .iter()
            .map(|id| {
                let unit = Unit::Count;
                metric_result(
                    id.to_string(),
                    unit,
                    "agent".into(),
                    true,
                    vec![1.0],
                    vec![],
                    0.95,
                )
            })
            .collect();
        Report {
            schema_version: SCHEMA_VERSION,
            tool_version: String::new(),
            conditions: Conditions {
                instructions: None,
                runs: 1,
                group_runs: Vec::new(),
                warmup: 0,
                aslr_disabled: true,
                pinned_cpus: Vec::new(),
                clean_env: false,
                machine: None,
            },
            benchmarks: vec![BenchmarkResult {
                name: "b".into(),
                command: vec!["b".into()],
                metrics,
                warnings: Vec::new(),
                invocation_checks: Vec::new(),
            }],
            from_history: None,
            headline: None,
            speed: Vec::new(),
            scans: Vec::new(),
        }
    }

    #[test]
    fn threshold_names_that_match_no_metric_are_named_with_the_closest_id() {
        let r = report(&["alloc.count", "alloc.bytes", "time.wall"]);
        let t = Thresholds::from_args(&[
            "alloc.cuont=0",
            "time.*=10",
            "alloc.count=+5",
            "bogus.*=1",
            "counter.*=4",
            "3",
        ])
        .unwrap();
        assert_eq!(
            unknown_threshold_names(&t, &r),
            ["`alloc.cuont` (did you mean `alloc.count`?)", "`bogus.*`"]
        );
        let fine = Thresholds::from_args(&["alloc.*=1", "time.wall=+0.001"]).unwrap();
        assert!(unknown_threshold_names(&fine, &r).is_empty());
    }

    #[test]
    fn before_the_runs_a_threshold_must_name_a_measured_family_and_a_known_id() {
        let families: BTreeSet<Family> =
            [Family::Time, Family::Rss, Family::Alloc, Family::Heap].into();
        let ids: BTreeSet<String> = ["time.wall", "alloc.count", "heap.peak"]
            .map(String::from)
            .into();
        let t = Thresholds::from_args(&[
            "alloc.cuont=0",
            "time.*=10",
            "counter.*=4",
            "alloc.cou*=1",
            "counter.instructions=1",
            "tme.wall=1",
            "bogus.*=1",
            "heap.peak=+5",
            "3",
        ])
        .unwrap();
        assert_eq!(
            thresholds_outside(&t, &families, Some(&ids)),
            [
                "`alloc.cuont` (did you mean `alloc.count`?)",
                "`bogus.*` (metric ids start with time., rss., alloc., heap., invocations., \
                 boxing., counter., profile.)",
                "`counter.instructions` (counter.* metrics are measured with --counters or \
                 --instructions)",
                "`tme.wall` (did you mean `time.wall`?)",
            ]
        );
        // Without the ids (a harness), a name in a measured family waits for the runs.
        assert_eq!(thresholds_outside(&t, &families, None).len(), 3);
    }

    /// A `compare` report of two commands' wall times, `runs` measured runs each.
    fn compared(a: &[f64], b: &[f64], runs: usize) -> Report {
        let bench = |name: &str, samples: &[f64]| {
            let mut m = metric_result(
                "time.wall".into(),
                Unit::Seconds,
                "clock".into(),
                false,
                samples.to_vec(),
                vec![],
                0.95,
            );
            m.group = "timing".into();
            BenchmarkResult {
                name: name.into(),
                command: vec![name.into()],
                metrics: vec![m],
                warnings: Vec::new(),
                invocation_checks: Vec::new(),
            }
        };
        let mut r = report(&[]);
        r.conditions.runs = runs;
        r.benchmarks = vec![bench("a", a), bench("b", b)];
        r
    }

    #[test]
    fn compare_pairs_a_metric_only_where_every_run_gave_a_sample() {
        let settings = Settings {
            history: PathBuf::from("/nonexistent"),
            save: false,
            save_baseline: None,
            baseline: None,
            thresholds: Vec::new(),
            depth: 5,
            include_failed: true,
            confirm: None,
            judge_busy: false,
        };
        let regression = Regression::new(&settings, 0.95, Mode::Compare).unwrap();
        let (a, b) = ([1.0, 1.2, 0.9, 1.1], [1.03, 1.23, 0.93, 1.14]);
        let method = |a: &[f64], b: &[f64], runs| {
            let mut r = compared(a, b, runs);
            regression.apply(&[], &mut r).unwrap();
            r.benchmarks[1].metrics[0]
                .comparison
                .as_ref()
                .map(|c| c.method)
        };
        assert_eq!(method(&a, &b, 4), Some(ComparisonMethod::PairedT));
        // One run of each timed out (--ignore-failure): 3 samples of 4 runs, which need
        // not be the same rounds.
        assert_eq!(method(&a[..3], &b[1..], 4), Some(ComparisonMethod::WelchT));
    }

    #[test]
    fn the_empty_operation_is_not_gated_its_calibrated_difference_is() {
        let r = report(&["time.op", "time.op.empty", "time.op.calibrated"]);
        let gates: Vec<bool> = r.benchmarks[0].metrics.iter().map(gated).collect();
        assert_eq!(gates, [true, false, true]);
    }
}
