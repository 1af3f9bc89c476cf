//! The perf-counter instrument: hardware and software events on the child, opened before
//! it execs (`enable_on_exec`), inherited by its threads and children, read as groups.
//!
//! One instrument measures one series of runs ([`SeriesPlan`]); with `--no-multiplex` the
//! plan has several series and each becomes its own group of runs. A hardware value read
//! from a group that was multiplexed is scaled, reported with its running fraction as the
//! breakdown line `running fraction` of its metric (a detail, so that it is shown and saved
//! in JSON but never gated on), and named in a warning.

use std::collections::BTreeMap;

use anyhow::Context;
use nix::unistd::Pid;
use sbs_probes::counters::{
    CounterBackend, CounterSet, CounterValue, EventClass, EventUnit, SeriesPlan,
};
use sbs_reports::model::Unit;

use crate::run::instrument::{Instrument, MetricSpec, RunOutcome, Sample};
use crate::run::instruments::following::Following;
use crate::run::region_fds::RegionSocket;

/// Label of the breakdown line carrying a hardware counter's running fraction.
pub const RUNNING_FRACTION: &str = "running fraction";

/// Counts perf events on each run's child.
pub struct PerfCounters {
    set: CounterSet,
    runs: usize,
    /// Per event: (runs in which it was scaled, smallest running fraction seen, whether
    /// a running-fraction metric is reported for it).
    scaled: BTreeMap<String, (usize, f64, bool)>,
    plan_warnings: Vec<String>,
    /// Count only inside a harness's measured region (see [`crate::run::region_fds`]).
    region: Option<RegionSocket>,
    /// Whether the kernel kept following every process of the runs.
    following: Following,
}

impl PerfCounters {
    /// The instrument for one series of runs.
    pub fn new(plan: SeriesPlan, backend: Box<dyn CounterBackend>) -> Self {
        PerfCounters {
            set: CounterSet::new(plan, backend),
            runs: 0,
            scaled: BTreeMap::new(),
            plan_warnings: Vec::new(),
            region: None,
            following: Following::default(),
        }
    }

    /// Count only inside the measured region of a harnessed benchmark; the backend must
    /// open the groups without `enable_on_exec` (`PerfBackend { region: true }`).
    pub fn in_region(mut self) -> Self {
        self.region = Some(RegionSocket::new(
            sbs_agent_abi::harness::REGION_SOCKET_COUNTERS,
        ));
        self
    }

    /// Warnings from planning (events skipped, mechanism chosen) to report with this
    /// instrument's own.
    pub fn with_plan_warnings(mut self, warnings: Vec<String>) -> Self {
        self.plan_warnings = warnings;
        self
    }

    fn samples(&mut self, values: Vec<CounterValue>, out: &mut Vec<Sample>) {
        for v in values {
            let unit = match v.request.event.unit {
                EventUnit::Count => Unit::Count,
                EventUnit::Nanoseconds => Unit::Seconds,
            };
            let source = v.request.source();
            let id = v.request.metric_id();
            let hw = v.request.event.class() == EventClass::Hardware;
            if v.scaled {
                let e = self.scaled.entry(id.clone()).or_insert((0, 1.0, hw));
                e.0 += 1;
                e.1 = e.1.min(v.running_fraction);
            }
            let mut sample = Sample::new(MetricSpec::new(&id, unit, source, false), v.value);
            if hw {
                sample
                    .details
                    .push((RUNNING_FRACTION.to_string(), v.running_fraction));
            }
            out.push(sample);
        }
    }
}

impl Instrument for PerfCounters {
    fn name(&self) -> &str {
        "counters"
    }

    fn prepare(&mut self, setup: &mut crate::run::instrument::ChildSetup) -> anyhow::Result<()> {
        if let Some(region) = &mut self.region {
            region.prepare(setup)?;
        }
        Ok(())
    }

    fn attach(&mut self, pid: Pid) -> anyhow::Result<()> {
        self.following.attach(pid);
        self.set
            .attach(pid.as_raw())
            .with_context(|| format!("opening perf counters on child {pid}"))?;
        if let Some(region) = &mut self.region {
            region.send(&self.set.leader_fds())?;
        }
        Ok(())
    }

    fn collect(&mut self, _outcome: &RunOutcome, out: &mut Vec<Sample>) -> anyhow::Result<()> {
        let values = self
            .set
            .read()
            .context("reading perf counters of the child")?;
        self.following.lost_one();
        self.runs += 1;
        self.samples(values, out);
        Ok(())
    }

    fn abort_run(&mut self) {
        self.set.abort();
        self.following.abort();
        if let Some(region) = &mut self.region {
            region.abort();
        }
    }

    fn warnings(&self) -> Vec<String> {
        let scaled = self.scaled.iter().map(|(id, (n, min, hw))| {
            let see = if *hw {
                format!(", per run in its `{RUNNING_FRACTION}` line")
            } else {
                String::new()
            };
            format!(
                "{id} was multiplexed in {n} of {} runs (its group counted as little as \
                     {:.1}% of the time): values are scaled estimates (raw x enabled / \
                     running){see}; use --no-multiplex to measure each counter group in runs \
                     of its own",
                self.runs,
                min * 100.0
            )
        });
        let following = self.following.warnings("the counter.* values");
        self.plan_warnings
            .iter()
            .cloned()
            .chain(scaled)
            .chain(following)
            .collect()
    }

    fn finish(&mut self) {
        self.set.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sbs_probes::counters::{
        parse_counter_list, plan_series, CounterRequest, GroupReading, PlanOptions, ScriptedBackend,
    };
    use std::time::Duration;

    use crate::run::instrument::ExitKind;

    fn outcome() -> RunOutcome {
        RunOutcome {
            pid: Pid::from_raw(1),
            wall: Duration::from_millis(1),
            user: Duration::ZERO,
            sys: Duration::ZERO,
            max_rss: 0,
            exit: ExitKind::Code(0),
            survivors: Vec::new(),
        }
    }

    fn run(list: &str, enabled: u64, running: u64) -> (Vec<Sample>, Vec<String>) {
        let reqs = parse_counter_list(list).unwrap();
        let plan = plan_series(&reqs, PlanOptions::default()).remove(0);
        // Every group reads 100, 200, ... (one per member) with the given times.
        let backend = ScriptedBackend(move |_pid, members: &[CounterRequest]| GroupReading {
            time_enabled: enabled,
            time_running: running,
            values: (1..=members.len() as u64).map(|i| i * 100).collect(),
        });
        let mut inst = PerfCounters::new(plan, Box::new(backend));
        let mut out = Vec::new();
        for _ in 0..2 {
            inst.attach(Pid::from_raw(7)).unwrap();
            inst.collect(&outcome(), &mut out).unwrap();
        }
        (out, inst.warnings())
    }

    #[test]
    fn multiplexed_values_are_scaled_with_fraction_and_warning() {
        let (out, warnings) = run("instructions,page-faults", 1000, 500);
        let ids: Vec<(&str, &str, f64)> = out
            .iter()
            .take(2)
            .map(|s| (s.metric.id.as_str(), s.metric.source.as_str(), s.value))
            .collect();
        assert_eq!(
            ids,
            vec![
                ("counter.instructions", "perf-hw", 200.0),
                ("counter.page-faults", "perf-sw", 200.0),
            ]
        );
        assert_eq!(out[0].details, vec![(RUNNING_FRACTION.to_string(), 0.5)]);
        assert!(
            out[1].details.is_empty(),
            "software events have no fraction line"
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("counter.instructions was multiplexed in 2 of 2 runs"));
        assert!(warnings[0].contains("50.0%"));
        assert!(warnings[0].contains("--no-multiplex"));
    }

    #[test]
    fn full_counts_are_not_flagged() {
        let (out, warnings) = run("instructions,task-clock", 1000, 1000);
        assert!(warnings.is_empty(), "{warnings:?}");
        let clock = out
            .iter()
            .find(|s| s.metric.id == "counter.task-clock")
            .unwrap();
        assert_eq!(clock.metric.unit, Unit::Seconds);
        assert_eq!(clock.value, 100e-9, "ns reported as s");
    }
}
