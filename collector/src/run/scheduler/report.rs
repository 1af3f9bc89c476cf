//! The report of a plan's runs: each metric's series summarized, with the notes that
//! apply to it, the warnings, the runs each group made, and the scans' points.

use sbs_reports::model::{
    BenchmarkResult, Conditions, GroupRuns, MetricId, MetricResult, Report, Scan, ScanPoint,
    Variant, SCHEMA_VERSION,
};

use super::series::Collected;
use crate::judge::summary::timing_warnings;
use crate::run::spec::Benchmark;
use crate::run::spec::Schedule;

/// The scans of the benchmarks that are points of one: their points grouped by series,
/// in the order given (fitted later, by the judge).
fn scans(benchmarks: &[Benchmark]) -> Vec<Scan> {
    let mut scans: Vec<Scan> = Vec::new();
    for (bench, point) in benchmarks
        .iter()
        .filter_map(|b| Some((b, b.point.as_ref()?)))
    {
        let at = ScanPoint {
            benchmark: bench.name.clone(),
            value: point.value.clone(),
            x: point
                .value
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite()),
        };
        match scans.iter_mut().find(|s| s.series == point.series) {
            Some(scan) => scan.points.push(at),
            None => scans.push(Scan {
                series: point.series.clone(),
                parameter: point.parameter.clone(),
                points: vec![at],
                fits: Vec::new(),
            }),
        }
    }
    scans
}

/// The report of the collected series: each metric summarized, with the notes that
/// instruments attached to its id prefix.
/// Whether an instrument's note (`(prefix, note)`, see [`Instrument::metric_notes`]) is
/// for metric `id`: a per-run total whose id starts with `prefix`, not a `/op` metric nor
/// a calibration twin (`time.op.empty` does not get the notes of `time.op`).
fn note_applies(prefix: &str, id: &str) -> bool {
    id.starts_with(prefix)
        && MetricId::parse(id).is_ok_and(|id| !id.is_per_op() && id.variant() == Variant::Raw)
}

pub(super) fn report(
    benchmarks: &[Benchmark],
    collected: Vec<Collected>,
    schedule: &Schedule,
) -> Report {
    let collected_runs: Vec<GroupRuns> = collected
        .iter()
        .flat_map(|c| c.group_runs.iter().cloned())
        .collect();
    let results: Vec<BenchmarkResult> = benchmarks
        .iter()
        .zip(collected)
        .map(|(bench, c)| {
            let mut metrics: Vec<MetricResult> = c
                .series
                .into_iter()
                .map(|s| {
                    let notes: Vec<String> = c
                        .notes
                        .iter()
                        .filter(|(prefix, _)| note_applies(prefix, &s.spec.id))
                        .map(|(_, note)| note.clone())
                        .collect();
                    let mut result =
                        s.spec
                            .result(s.group, s.samples, s.details, schedule.confidence);
                    // The instrument's notes join the summary's own (an exact count that
                    // varied).
                    result.notes.extend(notes);
                    result.failed_runs = s.failed;
                    result
                })
                .collect();
            crate::run::instruments::stacks::order_by_mean(&mut metrics);
            let mut warnings = c.warnings;
            // A harness's unsteady processes whose times disagree already name the spread,
            // with its fix: the spread is not said twice.
            let unsteady = warnings
                .iter()
                .any(|w| w.starts_with("time.op: no steady state"));
            warnings.extend(
                timing_warnings(&metrics)
                    .into_iter()
                    .filter(|w| !(unsteady && w.starts_with("time.op varies"))),
            );
            BenchmarkResult {
                name: bench.name.clone(),
                command: bench
                    .run
                    .args
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect(),
                metrics,
                warnings,
                invocation_checks: Vec::new(),
            }
        })
        .collect();
    let first = benchmarks.first().map(|b| &b.run);
    let scans = scans(benchmarks);
    let (runs, group_runs) = Conditions::runs_made(collected_runs, schedule.runs);
    let instructions = results
        .iter()
        .flat_map(|b: &BenchmarkResult| &b.metrics)
        .find_map(|m| {
            m.source
                .strip_prefix("qemu:")
                .map(|cpu| format!("qemu -cpu {cpu}"))
        });
    Report {
        schema_version: SCHEMA_VERSION,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        conditions: Conditions {
            instructions,
            runs,
            group_runs,
            warmup: schedule.warmup,
            aslr_disabled: first.is_some_and(|r| r.disable_aslr),
            pinned_cpus: first.map(|r| r.cpus.clone()).unwrap_or_default(),
            clean_env: schedule.clean_env,
            machine: None,
        },
        benchmarks: results,
        from_history: None,
        headline: None,
        speed: Vec::new(),
        scans,
    }
}
