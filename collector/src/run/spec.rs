//! The plan of each benchmark's runs as plain data: which groups of runs, and in each the
//! instruments it carries with their settings. The plan layer builds and checks these
//! before anything heavy (no ELF or DWARF read, no memfd, no tracefs, no child); they are
//! `Clone` and comparable in tests; [`instantiate`] turns them into live instruments just
//! before the first run. What a spec will report (its metric families and ids) is known
//! from the spec alone, so a `--threshold` that can never fire is refused first.

use std::collections::BTreeSet;
use std::ffi::OsStr;

use sbs_probes::counters::{CounterBackend, PerfBackend, SeriesPlan};
use sbs_reports::model::{Family, MetricId, Variant};

use crate::judge::pitfalls::instructions_per_op;
use crate::judge::regression::Measured;
use crate::run::hooks::Hooks;
use crate::run::instrument::{Group, Instrument};
use crate::run::instruments::alloc::{self, AgentError, AllocAgent, AllocMetrics, AllocPath};
use crate::run::instruments::boxing::{self, Boxing};
use crate::run::instruments::counters::PerfCounters;
use crate::run::instruments::first_ops::FirstOps;
use crate::run::instruments::invocations::{Invocations, Options as InvocationOptions};
use crate::run::instruments::memory::{self, Memory};
use crate::run::instruments::per_op::{DriftCell, DriftJudge, PerOpMode, PerOpRecords};
use crate::run::instruments::qemu::{self, QemuInstructions};
use crate::run::instruments::stacks::{self, TimeProfile};
use crate::run::instruments::timing::{self, Timing};
use crate::run::instruments::valgrind::{self, ValgrindInstructions};
use crate::run::runner::RunConfig;

/// One value of a scanned parameter (`-P`/`-L`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// What is scanned: the command with `{NAME}` left in, or the harness benchmark.
    pub series: String,
    /// The parameter's name.
    pub parameter: String,
    /// Its value here, as given.
    pub value: String,
}

/// What to do with a run whose child fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// A non-zero exit, a signal or a timeout aborts with an error.
    Fail,
    /// Keep the run's samples anyway.
    Ignore,
}

/// How the groups of runs are repeated, and what the report says of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// Measured runs per group.
    pub runs: usize,
    /// Discarded runs before each group's measured runs.
    pub warmup: usize,
    /// Confidence level of the intervals, in (0, 1).
    pub confidence: f64,
    /// What a failing child means.
    pub failure: FailurePolicy,
    /// Whether the child started from a clean environment (for the report).
    pub clean_env: bool,
    /// `--target-ci`: keep adding measured runs to a group, from `runs` up to
    /// `target.max_runs`, until the interval of every timing metric is this narrow.
    pub target: Option<TargetCi>,
    /// Show a progress bar.
    pub progress: bool,
    /// Runs in flight at once in a group whose counts no other process changes
    /// (`--jobs`); timing runs always run alone.
    pub jobs: usize,
}

/// Adaptive runs (`--target-ci PCT`, `--max-runs N`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TargetCi {
    /// The widest relative half-width a timing interval may have (0.02 for ±2%).
    pub ci: f64,
    /// The most measured runs per group.
    pub max_runs: usize,
}

/// One benchmark of the plan: how to start it and its groups of runs, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchmarkSpec {
    /// Display name (by default the command line).
    pub name: String,
    /// How to start it.
    pub run: RunConfig,
    /// Groups of runs, in order; each its own series of child processes.
    pub groups: Vec<GroupSpec>,
    /// Commands run around its runs, unmeasured.
    pub hooks: Hooks,
    /// Its value of a scanned parameter, if it is a point of a scan.
    pub point: Option<Point>,
}

/// One command to measure, with its groups of runs: a [`BenchmarkSpec`] whose instruments
/// were made ([`instantiate`]).
#[derive(Debug)]
pub struct Benchmark {
    /// Display name (by default the command line).
    pub name: String,
    /// How to start it.
    pub run: RunConfig,
    /// Groups of runs, in order; each its own series of child processes.
    pub groups: Vec<Group>,
    /// Commands run around its runs, unmeasured.
    pub hooks: Hooks,
    /// Its value of a scanned parameter, if it is a point of a scan.
    pub point: Option<Point>,
    /// Its `--cleanup` that failed after every run of it had succeeded: the measurements
    /// stand (they are judged, reported and saved), and the failure is said at the end.
    pub failed_cleanup: Option<anyhow::Error>,
}

/// A group of runs: instruments that measure the same runs.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    /// `timing`, `invocations`, `alloc`, `memory`, `counters`...
    pub name: String,
    /// The instruments of each run, in order.
    pub instruments: Vec<InstrumentSpec>,
}

/// One instrument and its settings.
#[derive(Debug, Clone, PartialEq)]
pub enum InstrumentSpec {
    /// Wall and CPU times, and `rss.peak` when `rss` (no memory group measures it).
    Timing {
        /// Also the peak RSS.
        rss: bool,
    },
    /// Peak RSS of the process and of its tree.
    Memory,
    /// The allocation agent (or the program's counting allocator).
    Alloc {
        /// Every allocation metric, or only the heap peaks.
        metrics: AllocMetrics,
        /// Who counts inside the child.
        path: AllocPath,
    },
    /// Calls of the functions `patterns` name.
    Invocations {
        /// The patterns, each once.
        patterns: Vec<String>,
        /// Engines, limits, rows.
        options: InvocationOptions,
    },
    /// Calls of `Box::new`.
    Boxing {
        /// Engines and limits.
        options: InvocationOptions,
    },
    /// Sampled CPU time per function.
    TimeProfile,
    /// perf_event counters, one series of groups opened together.
    Counters {
        /// The events, as the machine allows them.
        series: SeriesPlan,
        /// What planning them decided (dropped events, the mechanism chosen).
        notes: Vec<String>,
        /// Count inside a harness's measured region only.
        region: bool,
    },
    /// Instructions under valgrind.
    ValgrindInstructions {
        /// What planning them decided.
        notes: Vec<String>,
        /// Count inside a harness's measured region only.
        region: bool,
    },
    /// Instructions under QEMU with the counting plugin.
    QemuInstructions {
        /// What planning them decided.
        notes: Vec<String>,
        /// Count inside a harness's measured region only.
        region: bool,
        /// The CPU model (`-cpu`).
        cpu: String,
    },
    /// A harnessed benchmark's first operations counted under callgrind (the drift check).
    FirstOps {
        /// The benchmark's name in the harness.
        benchmark: String,
    },
    /// The harness's records, turned into metrics per operation.
    PerOp(PerOpSpec),
}

/// The settings of the harness records instrument ([`PerOpRecords`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PerOpSpec {
    /// The benchmark's name in the harness.
    pub benchmark: String,
    /// Timing or counting runs.
    pub mode: PerOpMode,
    /// Families the instruments before it count inside the region: each gets `/op`.
    pub region: Vec<Family>,
    /// Allocations come from the program's counting allocator.
    pub alloc_harness: bool,
    /// The calibration twin: the empty operation.
    pub empty: bool,
    /// A size probe (`KEY=VALUE`).
    pub size: Option<String>,
    /// Of a timing group: who judges the drift.
    pub drift: Option<Drift>,
}

/// Who judges a timing group's drift.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    /// The first-operations count of the same benchmark.
    Counted,
    /// The times alone, for this reason.
    TimingOnly(String),
}

/// What `groups` may report, known from their specs alone, before anything heavy: the
/// families of their metrics and the id of every metric (`PREFIX*` for ids the runs
/// name), with the calibrated twin the judge adds for every metric measured on an empty
/// operation.
pub fn measured<'a>(groups: impl IntoIterator<Item = &'a GroupSpec>) -> Measured {
    let mut families = BTreeSet::new();
    let mut ids = BTreeSet::new();
    for g in groups {
        let mut group: Vec<String> = Vec::new();
        for i in &g.instruments {
            families.extend(i.families());
            let more = i.metric_ids_after(&group);
            group.extend(more);
        }
        ids.extend(group);
    }
    let calibrated: Vec<String> = ids
        .iter()
        .filter_map(|id| MetricId::parse(id).ok())
        .filter(|id| id.variant() == Variant::Empty)
        .map(|id| id.with_variant(Variant::Calibrated).to_string())
        .collect();
    ids.extend(calibrated);
    Measured { families, ids }
}

impl InstrumentSpec {
    /// The families of metric ids it may report.
    fn families(&self) -> Vec<Family> {
        match self {
            InstrumentSpec::Timing { rss } => timing::families(*rss),
            InstrumentSpec::Memory => vec![Family::Rss],
            InstrumentSpec::Alloc { metrics, .. } => alloc::families(*metrics),
            InstrumentSpec::Invocations { .. } => vec![Family::Invocations],
            InstrumentSpec::Boxing { .. } => vec![Family::Boxing],
            InstrumentSpec::TimeProfile => vec![Family::Profile],
            InstrumentSpec::Counters { .. }
            | InstrumentSpec::ValgrindInstructions { .. }
            | InstrumentSpec::QemuInstructions { .. } => {
                vec![Family::Counter]
            }
            InstrumentSpec::FirstOps { .. } => Vec::new(),
            InstrumentSpec::PerOp(p) => p.families(),
        }
    }

    /// The id of every metric it may report (`PREFIX*` for ids the runs name), given the
    /// ids of the instruments before it in its group (the harness reports `/op` of theirs).
    fn metric_ids_after(&self, before: &[String]) -> Vec<String> {
        let owned = |ids: &[&str]| ids.iter().map(|id| id.to_string()).collect();
        match self {
            InstrumentSpec::Timing { rss } => owned(timing::metric_ids(*rss)),
            InstrumentSpec::Memory => owned(memory::METRIC_IDS),
            InstrumentSpec::Alloc { metrics, .. } => owned(alloc::metric_ids(*metrics)),
            InstrumentSpec::Invocations { patterns, .. } => patterns
                .iter()
                .map(|p| MetricId::new(Family::Invocations, p.as_str()).to_string())
                .collect(),
            InstrumentSpec::Boxing { .. } => owned(&[boxing::METRIC]),
            InstrumentSpec::TimeProfile => stacks::metric_ids(),
            InstrumentSpec::Counters { series, .. } => {
                series.events().map(|e| e.metric_id()).collect()
            }
            InstrumentSpec::ValgrindInstructions { .. } => owned(&[valgrind::METRIC]),
            InstrumentSpec::QemuInstructions { .. } => owned(&[qemu::METRIC]),
            InstrumentSpec::FirstOps { .. } => Vec::new(),
            InstrumentSpec::PerOp(p) => p.metric_ids_after(before),
        }
    }
}

impl PerOpSpec {
    /// Time per operation in a timing group; in a counting group, the `/op` metrics of
    /// the instruments before it and the harness's own allocation counts.
    fn families(&self) -> Vec<Family> {
        match self.mode {
            PerOpMode::Time => vec![Family::Time],
            PerOpMode::Count { .. } => [Family::Alloc, Family::Heap]
                .into_iter()
                .chain(self.region.iter().copied())
                .collect(),
        }
    }

    /// The `/op` metric of each metric before it that counts inside the region (or only
    /// `counter.instructions/op@KEY=VALUE` in a size probe, or `X/op.empty` in a
    /// calibration group), and the harness's own.
    fn metric_ids_after(&self, before: &[String]) -> Vec<String> {
        let time_op = MetricId::new(Family::Time, "op");
        if let PerOpMode::Time = self.mode {
            return vec![
                time_op.to_string(),
                time_op.with_variant(Variant::Empty).to_string(),
            ];
        }
        if let Some(probe) = &self.size {
            return vec![instructions_per_op().at(probe.as_str()).to_string()];
        }
        let per_op = before
            .iter()
            .filter_map(|id| MetricId::parse(id).ok())
            .filter(|id| self.region.contains(&id.family()))
            .map(MetricId::per_op);
        if self.empty {
            return per_op
                .map(|id| id.with_variant(Variant::Empty).to_string())
                .collect();
        }
        let mut ids: Vec<String> = per_op.map(|id| id.to_string()).collect();
        ids.extend(["alloc.count/op", "alloc.bytes/op", "heap.retained"].map(String::from));
        ids
    }

    fn instrument(&self, drift: &DriftCell) -> PerOpRecords {
        let mut records = PerOpRecords::new(&self.benchmark, self.mode, self.region.clone())
            .counting_alloc(self.alloc_harness);
        if self.empty {
            records = records.empty_operation();
        }
        if let Some(probe) = &self.size {
            records = records.at_size(probe);
        }
        match &self.drift {
            Some(Drift::Counted) => records.drift(DriftJudge::Counted(drift.clone())),
            Some(Drift::TimingOnly(why)) => records.drift(DriftJudge::TimingOnly(why.clone())),
            None => records,
        }
    }
}

/// The perf counters instrument of a [`InstrumentSpec::Counters`], counting through
/// `backend` (the kernel, or a script in tests).
pub fn perf_counters(
    series: &SeriesPlan,
    notes: &[String],
    region: bool,
    backend: Box<dyn CounterBackend>,
) -> PerfCounters {
    let counters = PerfCounters::new(series.clone(), backend).with_plan_warnings(notes.to_vec());
    if region {
        counters.in_region()
    } else {
        counters
    }
}

/// The live benchmark of a spec: every instrument made, just before the first run. This
/// is where the heavy work is (programs and their debug info read, patterns resolved,
/// memfds made, tracefs mounted). A program the allocation agent cannot load into loses
/// its heap peak (the heap group, or the counting allocator of the memory group) with a
/// warning on its RSS instead of failing the plan.
pub fn instantiate(spec: &BenchmarkSpec) -> anyhow::Result<Benchmark> {
    let drift = DriftCell::default();
    let mut heap_note = None;
    let mut groups = Vec::new();
    for g in &spec.groups {
        // Each made instrument with its spec.
        let mut instruments: Vec<(&InstrumentSpec, Box<dyn Instrument>)> = Vec::new();
        let mut lost_heap = false;
        for i in &g.instruments {
            match make(i, &spec.run, &drift) {
                Ok(made) => instruments.push((i, made)),
                Err(e) => match (i, e.downcast_ref::<AgentError>()) {
                    (
                        InstrumentSpec::Alloc {
                            metrics: AllocMetrics::HeapPeak,
                            ..
                        },
                        Some(AgentError::Unsupported { .. }),
                    ) => {
                        heap_note = Some(format!("heap.peak not measured: {e}"));
                        lost_heap = true;
                    }
                    _ => return Err(e),
                },
            }
        }
        // A group that was only there for the heap peak has nothing left to measure.
        let only_heap = g.instruments.iter().all(|i| {
            matches!(
                i,
                InstrumentSpec::Alloc {
                    metrics: AllocMetrics::HeapPeak,
                    ..
                } | InstrumentSpec::PerOp(_)
            )
        });
        if !(lost_heap && only_heap) {
            groups.push((g, instruments));
        }
    }
    let groups = groups
        .into_iter()
        .map(|(g, instruments)| Group {
            name: g.name.clone(),
            instruments: instruments
                .into_iter()
                .map(|(i, made)| match (i, &heap_note) {
                    // It has measured nothing yet: one that carries the note instead.
                    (InstrumentSpec::Memory, Some(note)) => {
                        let mut memory = Memory::default();
                        memory.note(note.clone());
                        Box::new(memory)
                    }
                    _ => made,
                })
                .collect(),
        })
        .collect();
    Ok(Benchmark {
        name: spec.name.clone(),
        run: spec.run.clone(),
        groups,
        hooks: spec.hooks.clone(),
        point: spec.point.clone(),
        failed_cleanup: None,
    })
}

/// One live instrument.
fn make(
    spec: &InstrumentSpec,
    run: &RunConfig,
    drift: &DriftCell,
) -> anyhow::Result<Box<dyn Instrument>> {
    Ok(match spec {
        InstrumentSpec::Timing { rss } => Box::new(Timing { rss: *rss }),
        InstrumentSpec::Memory => Box::new(Memory::default()),
        InstrumentSpec::Alloc { metrics, path } => {
            Box::new(AllocAgent::new(*metrics, *path, &run.program, &run.env)?)
        }
        InstrumentSpec::Invocations { patterns, options } => Box::new(Invocations::new(
            &run.program,
            env(run, "LD_LIBRARY_PATH"),
            env(run, "LD_PRELOAD"),
            patterns,
            *options,
        )?),
        InstrumentSpec::Boxing { options } => Box::new(Boxing::new(
            &run.program,
            env(run, "LD_LIBRARY_PATH"),
            env(run, "LD_PRELOAD"),
            *options,
        )?),
        InstrumentSpec::TimeProfile => Box::new(TimeProfile::new(
            &run.program,
            sbs_probes::sample::SampleConfig::default(),
        )?),
        InstrumentSpec::Counters {
            series,
            notes,
            region,
        } => Box::new(perf_counters(
            series,
            notes,
            *region,
            Box::new(PerfBackend { region: *region }),
        )),
        InstrumentSpec::ValgrindInstructions { notes, region } => {
            let inst = ValgrindInstructions::new()?.with_plan_warnings(notes.clone());
            Box::new(if *region { inst.in_region() } else { inst })
        }
        InstrumentSpec::QemuInstructions { notes, region, cpu } => {
            let inst = QemuInstructions::new(cpu)?.with_plan_warnings(notes.clone());
            Box::new(if *region { inst.in_region() } else { inst })
        }
        InstrumentSpec::FirstOps { benchmark } => {
            let valgrind = sbs_probes::valgrind::find_valgrind()?;
            Box::new(FirstOps::new(benchmark, valgrind, drift.clone()))
        }
        InstrumentSpec::PerOp(p) => Box::new(p.instrument(drift)),
    })
}

/// A variable of the child's environment (`LD_LIBRARY_PATH`, where probes look for the
/// libraries it loads; its own `LD_PRELOAD`, kept after a preloaded library of ours).
fn env<'a>(run: &'a RunConfig, name: &str) -> Option<&'a OsStr> {
    run.env
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_os_str())
}
