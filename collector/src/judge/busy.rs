//! A time measured while the machine was busy is not judged.
//!
//! Other processes (or the hypervisor) that take a share of the CPUs during one side of a
//! comparison move its times by more than any practical threshold: an identical binary
//! saved four times on a busy machine read +19.2% `time.cpu` on the fourth, confirmation
//! runs included. Exact counts do not move with load, so they decide then. A measured time
//! whose comparison says `regressed` or `improved` while this run, or a saved entry it is
//! compared with, ran on a busy machine ([`Machine::was_busy`]) is set aside as
//! [`Verdict::Inconclusive`] with a note saying which side was busy and what decides
//! instead; `--judge-busy` keeps the verdict.

use sbs_reports::model::{BenchmarkResult, Machine, MetricResult, Unit, Verdict};

/// One side of a comparison that ran on a busy machine: its label (`this run`, an
/// entry's) and the machine then.
#[derive(Debug, Clone)]
pub struct BusySide {
    /// Which side: `this run`, `#3 @abc1234`, `baseline main`...
    pub label: String,
    /// The machine during that side's runs.
    pub machine: Machine,
}

impl BusySide {
    /// The side, if its machine was busy.
    pub fn of(label: impl Into<String>, machine: Option<&Machine>) -> Option<BusySide> {
        let machine = machine.filter(|m| m.was_busy())?;
        Some(BusySide {
            label: label.into(),
            machine: machine.clone(),
        })
    }

    /// `this run (other processes took 60% of the 2 CPUs' time)`.
    fn describe(&self) -> String {
        let m = &self.machine;
        let mut took = Vec::new();
        if m.others >= Machine::BUSY_SHARE {
            took.push(format!(
                "other processes took {:.0}% of the {} CPUs' time",
                m.others * 100.0,
                m.cpus
            ));
        }
        if m.steal >= Machine::BUSY_SHARE / 2.0 {
            took.push(format!("the hypervisor took {:.0}%", m.steal * 100.0));
        }
        format!("{} ({})", self.label, took.join(", "))
    }
}

/// Whether `metric` is a measured time: what load moves.
fn is_measured_time(metric: &MetricResult) -> bool {
    metric.unit == Unit::Seconds && !metric.exact
}

/// Set aside the verdicts of the measured times of `bench` that would regress or improve
/// while one of `busy` (the sides of their comparison that ran on a busy machine) was
/// busy. Returns the ids set aside; each gets a note, and the benchmark one warning.
pub fn set_aside(bench: &mut BenchmarkResult, busy: &[BusySide]) -> Vec<String> {
    if busy.is_empty() {
        return Vec::new();
    }
    let decider = deciding_count(bench);
    let sides = busy
        .iter()
        .map(BusySide::describe)
        .collect::<Vec<_>>()
        .join("; ");
    let mut ids = Vec::new();
    for metric in bench.metrics.iter_mut().filter(|m| is_measured_time(m)) {
        let Some(comparison) = metric.comparison.as_mut() else {
            continue;
        };
        let was = comparison.verdict;
        if !matches!(was, Verdict::Regressed | Verdict::Improved) {
            continue;
        }
        comparison.verdict = Verdict::Inconclusive;
        if let Some(last) = metric.trend.last_mut() {
            last.verdict = Some(Verdict::Inconclusive);
        }
        let note = format!(
            "not judged: the machine was busy during {sides}, and load moves times more than \
             the threshold ({} without it)",
            was.as_str()
        );
        if !metric.notes.contains(&note) {
            metric.notes.push(note);
        }
        ids.push(metric.id.clone());
    }
    if !ids.is_empty() {
        let warning = format!(
            "{} not judged: the machine was busy during {sides}; {decider}, or pass \
             --judge-busy to judge times anyway",
            ids.join(", ")
        );
        if !bench.warnings.contains(&warning) {
            bench.warnings.push(warning);
        }
    }
    ids
}

/// What decides instead of the times: the benchmark's exact instruction count when it
/// has one, otherwise the option that gives it one.
fn deciding_count(bench: &BenchmarkResult) -> String {
    let counted = bench
        .metrics
        .iter()
        .find(|m| m.id == "counter.instructions" && m.exact && m.comparison.is_some());
    match counted.and_then(|m| m.comparison.as_ref()) {
        Some(c) => format!(
            "counter.instructions ({}), which load does not move, says {}",
            counted.map_or("", |m| m.source.as_str()),
            c.verdict.as_str()
        ),
        None => "an exact count decides where times cannot: measure with --instructions \
                 valgrind (its count does not move with load)"
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use sbs_reports::model::{Comparison, ComparisonMethod};

    use super::*;

    fn comparison(verdict: Verdict) -> Comparison {
        Comparison {
            method: ComparisonMethod::WelchT,
            reference: "#1".into(),
            reference_n: 2,
            reference_mean: 1.0,
            difference: 0.5,
            ci_low: None,
            ci_high: None,
            confidence: 0.95,
            relative: Some(0.5),
            relative_ci_low: None,
            relative_ci_high: None,
            df: None,
            p_value: None,
            threshold: 0.02,
            threshold_absolute: None,
            verdict,
            anova: None,
            confirmation: None,
        }
    }

    fn machine(others: f64) -> Machine {
        Machine {
            cpus: 2,
            load_start: 0.0,
            load_end: 0.0,
            others,
            steal: 0.0,
            busy: Vec::new(),
            governor: None,
            turbo: None,
            virtual_machine: None,
        }
    }

    fn metric(id: &str, unit: Unit, exact: bool, verdict: Verdict) -> MetricResult {
        MetricResult {
            id: id.into(),
            unit,
            source: "rusage".into(),
            exact,
            group: "time".into(),
            samples: vec![1.0, 1.0],
            failed_runs: Vec::new(),
            summary: crate::judge::summary::summarize(&[1.0, 1.0], 0.95),
            details: Vec::new(),
            notes: Vec::new(),
            comparison: Some(comparison(verdict)),
            trend: Vec::new(),
            distinguishable: None,
            bound: None,
            range: None,
        }
    }

    fn bench(metrics: Vec<MetricResult>) -> BenchmarkResult {
        BenchmarkResult {
            name: "b".into(),
            command: vec!["b".into()],
            metrics,
            warnings: Vec::new(),
            invocation_checks: Vec::new(),
        }
    }

    #[test]
    fn a_quiet_machine_sets_nothing_aside() {
        assert!(BusySide::of("this run", Some(&machine(0.05))).is_none());
        assert!(BusySide::of("this run", None).is_none());
        let mut b = bench(vec![metric(
            "time.cpu",
            Unit::Seconds,
            false,
            Verdict::Regressed,
        )]);
        assert!(set_aside(&mut b, &[]).is_empty());
        assert_eq!(
            b.metrics[0].comparison.as_ref().unwrap().verdict,
            Verdict::Regressed
        );
    }

    #[test]
    fn a_busy_side_sets_aside_the_times_that_moved_and_nothing_else() {
        let busy = [BusySide::of("this run", Some(&machine(0.6))).unwrap()];
        let mut b = bench(vec![
            metric("time.cpu", Unit::Seconds, false, Verdict::Regressed),
            metric("time.wall", Unit::Seconds, false, Verdict::Improved),
            metric("time.user", Unit::Seconds, false, Verdict::BelowThreshold),
            metric("rss.peak", Unit::Bytes, false, Verdict::Regressed),
            metric("alloc.count", Unit::Count, true, Verdict::Regressed),
        ]);
        assert_eq!(set_aside(&mut b, &busy), ["time.cpu", "time.wall"]);
        let verdicts: Vec<Verdict> = b
            .metrics
            .iter()
            .map(|m| m.comparison.as_ref().unwrap().verdict)
            .collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Inconclusive,
                Verdict::Inconclusive,
                Verdict::BelowThreshold,
                Verdict::Regressed,
                Verdict::Regressed
            ]
        );
        let note = &b.metrics[0].notes[0];
        assert!(
            note.contains("not judged: the machine was busy during this run (other processes took 60% of the 2 CPUs' time)")
                && note.contains("REGRESSED without it"),
            "{note}"
        );
        assert_eq!(b.warnings.len(), 1);
        assert!(
            b.warnings[0].contains("--instructions valgrind"),
            "{:?}",
            b.warnings
        );
    }

    #[test]
    fn an_exact_instruction_count_is_named_as_what_decides() {
        let busy = [BusySide::of("#2 2026-12-01 10:00", Some(&machine(0.3))).unwrap()];
        let mut count = metric("counter.instructions", Unit::Count, true, Verdict::NoChange);
        count.source = "valgrind".into();
        let mut b = bench(vec![
            metric("time.cpu", Unit::Seconds, false, Verdict::Regressed),
            count,
        ]);
        set_aside(&mut b, &busy);
        assert!(
            b.warnings[0].contains(
                "counter.instructions (valgrind), which load does not move, says no change"
            ),
            "{:?}",
            b.warnings
        );
        assert!(b.warnings[0].contains("#2 2026-12-01 10:00 (other processes took 30%"));
    }
}
