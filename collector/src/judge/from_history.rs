//! A report from the saved history, without running anything (`sbs-profile report`).
//! Each benchmark's latest entry is compared with the entries before it, exactly as a run
//! with `--history` would have been, and every metric carries its trend.

use std::path::PathBuf;

use anyhow::bail;
use sbs_reports::model::{BenchmarkResult, Conditions, MetricResult, Report, SCHEMA_VERSION};

use crate::history::{Entry, History};
use crate::judge::regression::{Mode, Reference, Regressed, Regression, Settings, THIS_RUN};
use crate::judge::summary::metric_result;

/// What to report on.
#[derive(Debug, Clone)]
pub struct HistoryRequest {
    /// Directory of the saved history.
    pub history: PathBuf,
    /// Only these benchmarks (all in the history when empty).
    pub names: Vec<String>,
    /// Practical thresholds, as for a run.
    pub thresholds: Vec<String>,
    /// Compare the latest entry with at most this many entries before it.
    pub depth: usize,
    /// Confidence level of the intervals, in (0, 1).
    pub confidence: f64,
    /// Judge times measured on a busy machine (`--judge-busy`).
    pub judge_busy: bool,
}

/// Build the report and the regressions of the latest entries, with a note for each copy
/// of an entry the history holds (counted once).
pub fn build(args: &HistoryRequest) -> anyhow::Result<(Report, Vec<Regressed>, Vec<String>)> {
    let store = History::new(&args.history);
    let names = benchmark_names(&store, args)?;
    let regression = Regression::new(
        &Settings {
            history: args.history.clone(),
            save: false,
            save_baseline: None,
            baseline: None,
            thresholds: args.thresholds.clone(),
            depth: args.depth,
            include_failed: false,
            confirm: Some(0),
            judge_busy: args.judge_busy,
        },
        args.confidence,
        Mode::Run,
    )?;
    let mut benchmarks = Vec::new();
    let mut references = Vec::new();
    let mut latest_labels = Vec::new();
    let mut latest_machines = Vec::new();
    let mut notes = Vec::new();
    for name in &names {
        let mut entries = store.entries(name)?;
        notes.extend(entries.iter().flat_map(|e| e.duplicate_notes()));
        let Some(latest) = entries.pop() else {
            continue;
        };
        let mut result = latest_result(name, &latest, args.confidence);
        let window = entries.len().saturating_sub(args.depth);
        result.warnings = busy_entries(entries[window..].iter().chain([&latest]));
        benchmarks.push(result);
        latest_machines.push(latest.meta.machine.clone());
        references.push(if entries.is_empty() {
            Reference::Nothing
        } else {
            Reference::History(entries)
        });
        latest_labels.push(latest.label());
    }
    let max_n = benchmarks
        .iter()
        .flat_map(|b| &b.metrics)
        .map(|m| m.samples.len())
        .max()
        .unwrap_or(0);
    let mut report = Report {
        schema_version: SCHEMA_VERSION,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        conditions: Conditions {
            instructions: None,
            runs: max_n,
            // Saved entries keep no group names: the runs of the metric with the most.
            group_runs: Vec::new(),
            warmup: 0,
            aslr_disabled: false,
            pinned_cpus: Vec::new(),
            clean_env: false,
            // The machine of the latest entry, when the report is of one benchmark.
            machine: match latest_machines.as_slice() {
                [one] => one.clone(),
                _ => None,
            },
        },
        benchmarks,
        from_history: Some(args.history.display().to_string()),
        headline: None,
        speed: Vec::new(),
        scans: Vec::new(),
    };
    let regressions = regression.apply_to_latest(&references, &mut report, &latest_machines)?;
    regression.check_threshold_names(&report)?;
    for (bench, label) in report.benchmarks.iter_mut().zip(latest_labels) {
        name_latest(bench, &label);
    }
    Ok((report, regressions, notes))
}

/// The benchmarks asked for (all saved ones by default), each checked to be saved.
fn benchmark_names(store: &History, args: &HistoryRequest) -> anyhow::Result<Vec<String>> {
    let all = store.benchmarks()?;
    if all.is_empty() {
        bail!(
            "no saved history in {}: save runs first with `sbs-profile --save -- COMMAND`, or \
             point --history at the right directory",
            args.history.display()
        );
    }
    if args.names.is_empty() {
        return Ok(all);
    }
    for n in &args.names {
        if !all.contains(n) {
            bail!(
                "--name {n}: no such benchmark in {}; saved benchmarks: {}",
                args.history.display(),
                all.join(", ")
            );
        }
    }
    Ok(args.names.clone())
}

/// The latest saved entry of a benchmark as a result, as if it had just been measured.
fn latest_result(name: &str, latest: &Entry, confidence: f64) -> BenchmarkResult {
    let metrics: Vec<MetricResult> = latest
        .metrics
        .iter()
        .map(|m| {
            metric_result(
                m.id.clone(),
                m.unit,
                m.source.clone(),
                m.exact,
                m.samples.clone(),
                m.details.clone(),
                confidence,
            )
        })
        .collect();
    BenchmarkResult {
        name: name.to_string(),
        command: vec![latest.command.clone()],
        metrics,
        warnings: Vec::new(),
        invocation_checks: Vec::new(),
    }
}

/// A warning for each entry measured while the machine was busy (saved with its
/// conditions, history schema 4): why its times may differ from the others'.
fn busy_entries<'a>(entries: impl Iterator<Item = &'a Entry>) -> Vec<String> {
    entries
        .filter_map(|e| {
            let m = e.meta.machine.as_ref().filter(|m| m.was_busy())?;
            Some(format!(
                "{} was measured on a busy machine ({}): its times may differ from the \
                 other entries' for that reason",
                e.label(),
                m.describe()
            ))
        })
        .collect()
}

/// The latest entry is "this run" to the comparison; name it by its time instead.
fn name_latest(bench: &mut BenchmarkResult, label: &str) {
    let rename = |l: &mut String| {
        if l == THIS_RUN {
            *l = label.to_string();
        }
    };
    for m in bench.metrics.iter_mut() {
        m.trend.iter_mut().for_each(|p| rename(&mut p.label));
        if let Some(anova) = m.comparison.as_mut().and_then(|c| c.anova.as_mut()) {
            anova.groups.iter_mut().for_each(rename);
            anova.subject.iter_mut().for_each(rename);
            for pair in anova.differing.iter_mut() {
                rename(&mut pair.a);
                rename(&mut pair.b);
            }
        }
    }
}
