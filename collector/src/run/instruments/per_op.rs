//! The harness instrument: the last instrument of every group of a harnessed benchmark
//! (`--bench`, `--harness`). It tells the harness in the child what the run is for
//! (timing, or counting inside the measured region), reads the records the harness wrote,
//! and turns them, and the region counts of the instruments before it, into metrics per
//! operation: `time.op`, `alloc.count/op`, `alloc.bytes/op`, `heap.retained`,
//! `invocations.X/op`, `counter.X/op` (perf events, and valgrind's instructions). See `docs/harness.md`.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::OwnedFd;

use anyhow::Context;
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use sbs_agent_abi::harness as proto;
use sbs_reports::model::{Family, MetricId, Unit, Variant};

use crate::run::instrument::{ChildSetup, InFlight, Instrument, MetricSpec, RunOutcome, Sample};

use crate::judge::pitfalls::{instructions_per_op, FirstCheck};

/// The harness's time per operation, `time.op`.
fn time_op() -> MetricId {
    MetricId::new(Family::Time, "op")
}

/// The empty operation's twin of a per-operation id (`alloc.count/op.empty`).
fn empty(id: &str) -> String {
    match MetricId::parse(id) {
        Ok(id) => id.with_variant(Variant::Empty).to_string(),
        // Every id here was built from a parsed one; keep the grammar's form regardless.
        Err(_) => format!("{id}.empty"),
    }
}

/// Why a drift check is on times alone when no count of the first operations is planned.
pub const NOT_COUNTED: &str = "valgrind is not installed, so the instructions of the first \
     operations, which cold caches do not change, were not counted; install it with `sudo \
     apt-get install -y valgrind`";

/// What the harness in the child does in this group's runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerOpMode {
    /// Time the operation (the timing group).
    Time,
    /// Run `ops` operations inside the region.
    Count {
        /// Operations per run.
        ops: u64,
    },
}

/// Reads the harness's records and reports per-operation metrics.
#[derive(Debug)]
pub struct PerOpRecords {
    benchmark: String,
    mode: PerOpMode,
    /// Metric families of the instruments before this one that counted inside the
    /// region only (`invocations.`): they get a `/op` metric too.
    region: Vec<Family>,
    file: Option<File>,
    runs: usize,
    not_steady: usize,
    /// Per timing run: its time per operation (seconds).
    op_times: Vec<f64>,
    /// Source of the allocation metrics: `agent`, or `harness` (`--alloc-harness`).
    alloc_source: &'static str,
    /// Whether the runs reported per-operation allocations (the group counts them).
    saw_alloc: bool,
    /// The calibration runs: the harness runs the empty operation, and the per-operation
    /// counts become `X/op.empty`.
    empty: bool,
    /// A size probe (`KEY=VALUE`): the harness runs at that size, and only
    /// `counter.instructions/op` is reported, as `counter.instructions/op@KEY=VALUE`.
    size: Option<String>,
    /// Per timing run: the first operations, timed one at a time (seconds), and what the
    /// empty operation timed one at a time costs.
    first: Vec<(Vec<f64>, f64)>,
    /// Per timing run: the kept measurements, seconds per operation, in order.
    kept: Vec<Vec<f64>>,
    /// Who judges the drift of the timing runs, and with what.
    drift: DriftJudge,
}

/// Where a timing group's drift check is made.
#[derive(Debug, Clone)]
pub enum DriftJudge {
    /// Here, on the times alone, for this reason (no instruction count is planned).
    TimingOnly(String),
    /// By the first-operations count ([`super::first_ops::FirstOps`]), which gets the
    /// times through this cell and gives the warnings after its own run.
    Counted(DriftCell),
}

/// What a harnessed benchmark's timing runs and its count of the first operations share:
/// the first operations' times and the kept measurements of each timing process, and the
/// counts (or why there are none).
#[derive(Debug, Default)]
pub struct DriftEvidence {
    /// Per timing run: the first operations timed one at a time, and the empty one's time.
    pub first: Vec<(Vec<f64>, f64)>,
    /// Per timing run: the kept measurements.
    pub kept: Vec<Vec<f64>>,
    /// The instructions of the first operations, or why they were not counted.
    pub counts: Option<Result<crate::judge::pitfalls::FirstCounts, String>>,
}

/// The evidence of one benchmark, shared by the groups that gather it.
pub type DriftCell = std::sync::Arc<std::sync::Mutex<DriftEvidence>>;

impl PerOpRecords {
    /// The instrument for `benchmark`'s runs in `mode`.
    pub fn new(benchmark: &str, mode: PerOpMode, region: Vec<Family>) -> Self {
        PerOpRecords {
            benchmark: benchmark.to_string(),
            mode,
            region,
            file: None,
            runs: 0,
            not_steady: 0,
            op_times: Vec::new(),
            alloc_source: "agent",
            saw_alloc: false,
            empty: false,
            size: None,
            first: Vec::new(),
            kept: Vec::new(),
            drift: DriftJudge::TimingOnly(NOT_COUNTED.into()),
        }
    }

    /// The coefficient of variation of the processes' times per operation, from 2 on.
    fn op_cov(&self) -> Option<f64> {
        (self.op_times.len() >= 2)
            .then(|| crate::judge::summary::summarize(&self.op_times, 0.95).cov)
            .flatten()
    }

    /// The note on `time.op` when some processes found no steady state yet their times per
    /// operation agree: context, nothing to act on.
    fn unsteady_note(&self) -> Option<(String, String)> {
        if self.not_steady == 0 {
            return None;
        }
        let cov = self.op_cov().unwrap_or(0.0);
        (cov <= crate::judge::summary::NOISY_COV).then(|| {
            (
                "time.op".to_string(),
                format!(
                    "no steady state in {} of {} processes (their last measurements were kept), \
                     yet their times per operation agree within {:.0}% (CoV)",
                    self.not_steady,
                    self.runs,
                    (cov * 100.0).max(1.0)
                ),
            )
        })
    }

    /// Who judges the drift of this timing group's runs.
    pub fn drift(mut self, judge: DriftJudge) -> Self {
        self.drift = judge;
        self
    }

    /// The size-probe runs of a counting group: the harness runs with `probe` (`KEY=VALUE`)
    /// over its parameters, and only the instructions per operation are reported, as
    /// `counter.instructions/op@KEY=VALUE`.
    pub fn at_size(mut self, probe: &str) -> Self {
        self.size = Some(probe.to_string());
        self
    }

    /// The calibration runs of a counting group: the harness runs the empty operation
    /// (same state, loop and region markers) and the per-operation counts are reported as
    /// `X/op.empty`, the region totals not at all.
    pub fn empty_operation(mut self) -> Self {
        self.empty = true;
        self
    }

    /// Allocations come from the program's `CountingAlloc` (`--alloc-harness`).
    pub fn counting_alloc(mut self, yes: bool) -> Self {
        if yes {
            self.alloc_source = "harness";
        }
        self
    }

    /// The error for a record the harness should have written.
    fn missing(&self, key: &str) -> anyhow::Error {
        anyhow::anyhow!(
            "the harness of `{}` reported no `{key}` record; sbs-harness and sbs-profile \
             versions may differ",
            self.benchmark
        )
    }

    /// The id of a metric an instrument before this one counted inside the region, if it
    /// is one.
    fn in_region(&self, id: &str) -> Option<MetricId> {
        MetricId::parse(id)
            .ok()
            .filter(|id| self.region.contains(&id.family()))
    }

    /// A timing run: seconds per operation.
    fn time_samples(
        &mut self,
        records: &[(String, f64)],
        out: &mut Vec<Sample>,
    ) -> anyhow::Result<()> {
        let t = get(records, proto::REC_TIME_OP).ok_or_else(|| self.missing("time.op"))?;
        let seconds = |id: &str| MetricSpec::new(id, Unit::Seconds, "harness", false);
        out.push(Sample::new(seconds("time.op"), t));
        self.op_times.push(t);
        if let Some(e) = get(records, proto::REC_TIME_EMPTY) {
            out.push(Sample::new(
                seconds(&time_op().with_variant(Variant::Empty).to_string()),
                e,
            ));
        }
        if get(records, proto::REC_NOT_STEADY).unwrap_or(0.0) != 0.0 {
            self.not_steady += 1;
        }
        let first = get_all(records, proto::REC_TIME_FIRST);
        let first = match (first.is_empty(), get(records, proto::REC_TIME_FIRST_EMPTY)) {
            (false, Some(e)) => Some((first, e)),
            _ => None,
        };
        let kept = get_all(records, proto::REC_TIME_KEPT);
        let kept = (!kept.is_empty()).then_some(kept);
        match &self.drift {
            DriftJudge::TimingOnly(_) => {
                self.first.extend(first);
                self.kept.extend(kept);
            }
            DriftJudge::Counted(cell) => {
                let mut evidence = cell.lock().unwrap_or_else(|e| e.into_inner());
                evidence.first.extend(first);
                evidence.kept.extend(kept);
            }
        }
        Ok(())
    }

    /// A counting run: the region totals of the instruments before this one, per
    /// operation, and the harness's own allocation counts.
    fn count_samples(
        &mut self,
        records: &[(String, f64)],
        out: &mut Vec<Sample>,
    ) -> anyhow::Result<()> {
        let ops = get(records, proto::REC_OPS).ok_or_else(|| self.missing("ops"))?;
        if ops <= 0.0 {
            anyhow::bail!("the harness of `{}` ran no operation", self.benchmark);
        }
        let mut per_op = Vec::new();
        for s in out.iter() {
            let Some(id) = self.in_region(&s.metric.id) else {
                continue;
            };
            self.check_region_count(records, s)?;
            let mut metric = s.metric.clone();
            metric.id = id.per_op().to_string();
            per_op.push(Sample {
                metric,
                value: s.value / ops,
                details: s
                    .details
                    .iter()
                    .map(|(l, v)| (l.clone(), v / ops))
                    .collect(),
            });
        }
        if let Some(probe) = &self.size {
            out.clear();
            out.extend(
                per_op
                    .into_iter()
                    .filter(|s| s.metric.id == instructions_per_op().to_string())
                    .map(|mut s| {
                        s.metric.id = instructions_per_op().at(probe.as_str()).to_string();
                        s
                    }),
            );
            return Ok(());
        }
        if self.empty {
            // Only what the empty operation costs per operation; its totals mean nothing.
            out.clear();
            out.extend(per_op.into_iter().map(|mut s| {
                s.metric.id = empty(&s.metric.id);
                s
            }));
            return Ok(());
        }
        out.extend(per_op);
        let agent = |id: &str, unit| MetricSpec::new(id, unit, self.alloc_source, true);
        if let Some(n) = get(records, proto::REC_ALLOC_COUNT) {
            self.saw_alloc = true;
            out.push(Sample::new(agent("alloc.count/op", Unit::Count), n / ops));
        }
        if let Some(b) = get(records, proto::REC_ALLOC_BYTES) {
            out.push(Sample::new(agent("alloc.bytes/op", Unit::Bytes), b / ops));
        }
        if let Some(r) = get(records, proto::REC_RETAINED) {
            out.push(Sample::new(agent("heap.retained", Unit::Bytes), r));
        }
        Ok(())
    }

    /// A region total counts only the measured region if the harness switched its
    /// counting on and off: it received the descriptors, or toggled callgrind.
    fn check_region_count(&self, records: &[(String, f64)], s: &Sample) -> anyhow::Result<()> {
        if crate::run::instruments::qemu::is_source(&s.metric.source) {
            // The QEMU instrument checked that the plugin saw the harness's markers.
            return Ok(());
        }
        if s.metric.source == sbs_probes::valgrind::SOURCE {
            // No descriptors: the harness toggles callgrind's collection.
            return match get(records, proto::REC_REGION_VALGRIND) {
                Some(n) if n > 0.0 => Ok(()),
                Some(_) => anyhow::bail!(
                    "the harness of `{}` toggled callgrind's collection but reports \
                     that it does not run under valgrind, so {} is not the region's \
                     count; is valgrind's client-request support available on this \
                     architecture (x86-64 Linux only)?",
                    self.benchmark,
                    s.metric.id
                ),
                None => anyhow::bail!(
                    "the harness of `{}` did not toggle callgrind's collection, so \
                     {} would count nothing; sbs-harness and sbs-profile versions \
                     may differ",
                    self.benchmark,
                    s.metric.id
                ),
            };
        }
        if get(records, proto::REC_REGION_EVENTS).unwrap_or(0.0) == 0.0 {
            anyhow::bail!(
                "the harness of `{}` received no region descriptors, so {} would \
                 count the whole process; sbs-harness and sbs-profile versions may \
                 differ",
                self.benchmark,
                s.metric.id
            );
        }
        Ok(())
    }

    fn records(&self, text: &str) -> Vec<(String, f64)> {
        text.lines()
            .filter_map(proto::parse_record)
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }
}

/// Every value of a repeated record, in order.
fn get_all(records: &[(String, f64)], key: &str) -> Vec<f64> {
    records
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| *v)
        .collect()
}

fn get(records: &[(String, f64)], key: &str) -> Option<f64> {
    records
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| *v)
}

impl Instrument for PerOpRecords {
    fn name(&self) -> &str {
        "harness"
    }

    fn needs_start_latch(&self) -> bool {
        false
    }

    fn prepare(&mut self, setup: &mut ChildSetup) -> anyhow::Result<()> {
        let file = File::from(
            memfd_create(c"sbs-harness-records", MemFdCreateFlag::MFD_CLOEXEC)
                .context("cannot create the harness record file (memfd_create)")?,
        );
        let child: OwnedFd = file
            .try_clone()
            .context("cannot pass the harness record file to the child")?
            .into();
        setup.pass_fds.push((child, proto::OUT_FD));
        setup.env.push((
            proto::ENV_OUT.into(),
            format!("/proc/self/fd/{}", proto::OUT_FD).into(),
        ));
        match self.mode {
            PerOpMode::Time => setup
                .env
                .push((proto::ENV_MODE.into(), proto::MODE_TIME.into())),
            PerOpMode::Count { ops } => {
                setup
                    .env
                    .push((proto::ENV_MODE.into(), proto::MODE_COUNT.into()));
                if self.empty {
                    setup.env.push((proto::ENV_EMPTY.into(), "1".into()));
                }
                if let Some(probe) = &self.size {
                    setup.env.push((proto::ENV_PARAMS.into(), probe.into()));
                }
                setup
                    .env
                    .push((proto::ENV_OPS.into(), ops.to_string().into()));
            }
        }
        self.file = Some(file);
        Ok(())
    }

    fn collect(&mut self, outcome: &RunOutcome, out: &mut Vec<Sample>) -> anyhow::Result<()> {
        let file = self
            .file
            .take()
            .context("internal error: harness collect without prepare")?;
        let mut text = String::new();
        // From the start, whichever descriptor of this file the child wrote through (its
        // own open of /proc/self/fd/1017, or the inherited one, which shares our offset).
        (&file)
            .seek(SeekFrom::Start(0))
            .context("cannot read the harness record file")?;
        (&file)
            .read_to_string(&mut text)
            .context("cannot read the harness record file")?;
        let records = self.records(&text);
        if records.is_empty() {
            if !outcome.exit.success() {
                // The failure itself is reported by the scheduler.
                return Ok(());
            }
            anyhow::bail!(
                "`{}` wrote no harness records: is it a benchmark of a binary built with \
                 sbs-harness (its main must call Suite::main)? Run the binary with --list to see \
                 its benchmarks",
                self.benchmark
            );
        }
        self.runs += 1;
        match self.mode {
            PerOpMode::Time => self.time_samples(&records, out),
            PerOpMode::Count { .. } => self.count_samples(&records, out),
        }
    }

    fn abort_run(&mut self) {
        self.file = None;
    }

    fn overlaps(&self) -> bool {
        // Counting runs only: a time per operation is the machine's as much as ours.
        matches!(self.mode, PerOpMode::Count { .. })
    }

    fn park(&mut self) -> InFlight {
        InFlight::new(self.file.take())
    }

    fn resume(&mut self, run: InFlight) {
        self.file = run.take().flatten();
    }

    fn metric_notes(&self) -> Vec<(String, String)> {
        // The per-run totals of one harnessed report cover two different spans; say which.
        let PerOpMode::Count { ops } = self.mode else {
            return self.unsteady_note().into_iter().collect();
        };
        if self.empty || self.size.is_some() {
            return Vec::new();
        }
        let mut notes: Vec<(String, String)> = self
            .region
            .iter()
            .map(|family| {
                (
                    family.prefix().to_string(),
                    format!(
                        "the measured region only: the {ops} operations of each run, set-up excluded"
                    ),
                )
            })
            .collect();
        if self.saw_alloc {
            notes.push((
                "alloc.count".into(),
                "the whole process, set-up included (alloc.* totals); the operations alone: \
                 alloc.count/op"
                    .into(),
            ));
        }
        notes
    }

    fn warnings(&self) -> Vec<String> {
        let mut warnings = match &self.drift {
            DriftJudge::TimingOnly(why) => {
                crate::judge::pitfalls::drift_warnings(
                    &self.benchmark,
                    &self.first,
                    &self.kept,
                    FirstCheck::TimingOnly(why),
                )
                .warnings
            }
            // The count of the first operations judges, after its run.
            DriftJudge::Counted(_) => Vec::new(),
        };
        // Processes that found no steady state matter only when their times per operation
        // disagree (the gate then cannot see a small change); otherwise it is a note.
        if self.not_steady == 0 {
            return warnings;
        }
        if let Some(cov) = self
            .op_cov()
            .filter(|c| *c > crate::judge::summary::NOISY_COV)
        {
            warnings.push(format!(
                "time.op: no steady state in {} of {} processes, warm-up runs included (their \
                 last measurements were kept), and their times per operation vary by {:.0}% \
                 (CoV), too much to trust small changes; pass --harness-arg=--max-iterations=N \
                 or --harness-arg=--cov=X, or quiet the machine",
                self.not_steady,
                self.runs,
                cov * 100.0
            ));
        }
        warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::instrument::ExitKind;
    use std::io::Write;

    fn outcome(exit: ExitKind) -> RunOutcome {
        RunOutcome {
            pid: nix::unistd::Pid::from_raw(1),
            wall: std::time::Duration::from_millis(1),
            user: std::time::Duration::ZERO,
            sys: std::time::Duration::ZERO,
            max_rss: 0,
            exit,
            survivors: Vec::new(),
        }
    }

    /// Prepare a run, write `records` as the child would, and collect after `earlier`
    /// samples of the instruments before this one.
    fn run(
        inst: &mut PerOpRecords,
        records: &str,
        earlier: Vec<Sample>,
        exit: ExitKind,
    ) -> anyhow::Result<Vec<Sample>> {
        let mut setup = ChildSetup::default();
        inst.prepare(&mut setup)?;
        assert_eq!(setup.pass_fds[0].1, proto::OUT_FD);
        assert!(setup
            .env
            .iter()
            .any(|(k, v)| k == proto::ENV_OUT && v == "/proc/self/fd/1017"));
        // The child appends through its own descriptor.
        let mut child = File::from(setup.pass_fds.remove(0).0);
        child.write_all(records.as_bytes()).unwrap();
        let mut out = earlier;
        inst.collect(&outcome(exit), &mut out)?;
        Ok(out)
    }

    fn find<'a>(out: &'a [Sample], id: &str) -> &'a Sample {
        out.iter()
            .find(|s| s.metric.id == id)
            .unwrap_or_else(|| panic!("no {id} in {out:?}"))
    }

    #[test]
    fn timing_runs_report_time_per_operation_and_unsteady_processes() {
        let mut inst = PerOpRecords::new("b", PerOpMode::Time, Vec::new());
        let out = run(
            &mut inst,
            "time.op 2.5e-6\nnot_steady 0e0\n",
            vec![],
            ExitKind::Code(0),
        )
        .unwrap();
        let t = find(&out, "time.op");
        assert_eq!(
            (t.value, t.metric.unit, t.metric.exact),
            (2.5e-6, Unit::Seconds, false)
        );
        assert!(inst.warnings().is_empty());
        run(
            &mut inst,
            "time.op 3e-6\nnot_steady 1\n",
            vec![],
            ExitKind::Code(0),
        )
        .unwrap();
        // Two processes within 13% of each other: a note, not a warning.
        assert!(inst.warnings().is_empty(), "{:?}", inst.warnings());
        let notes = inst.metric_notes();
        assert!(
            notes[0].0 == "time.op"
                && notes[0]
                    .1
                    .starts_with("no steady state in 1 of 2 processes"),
            "{notes:?}"
        );
        // A third, unsteady and twice as slow: the spread is the warning, with the fix.
        run(
            &mut inst,
            "time.op 6e-6\nnot_steady 1\n",
            vec![],
            ExitKind::Code(0),
        )
        .unwrap();
        let w = inst.warnings();
        assert!(
            w[0].contains("no steady state in 2 of 3 processes") && w[0].contains("vary by"),
            "{w:?}"
        );
        assert!(inst.metric_notes().is_empty());
    }

    #[test]
    fn counting_runs_divide_region_counts_and_report_allocations() {
        let mut inst =
            PerOpRecords::new("b", PerOpMode::Count { ops: 4 }, vec![Family::Invocations]);
        let mut probe = Sample::new(
            MetricSpec::new("invocations.f", Unit::Count, "uprobe", true),
            4000.0,
        );
        probe.details = vec![("f".into(), 4000.0)];
        let whole = Sample::new(
            MetricSpec::new("alloc.count", Unit::Count, "agent", true),
            1234.0,
        );
        let out = run(
            &mut inst,
            "ops 4\nalloc.count 20\nalloc.bytes 1984\nheap.retained 496\nregion.events 1\n",
            vec![probe, whole],
            ExitKind::Code(0),
        )
        .unwrap();
        let per_op = find(&out, "invocations.f/op");
        assert_eq!(per_op.value, 1000.0);
        assert_eq!(per_op.details, vec![("f".to_string(), 1000.0)]);
        assert_eq!(per_op.metric.source, "uprobe");
        // Whole-process metrics are not region counts: no per-op version of them.
        assert!(out.iter().all(|s| s.metric.id != "alloc.count/op/op"));
        assert_eq!(find(&out, "alloc.count/op").value, 5.0);
        assert_eq!(find(&out, "alloc.bytes/op").value, 496.0);
        assert_eq!(find(&out, "heap.retained").value, 496.0);
        assert_eq!(find(&out, "alloc.count").value, 1234.0);
    }

    #[test]
    fn missing_records_and_descriptors_are_errors_that_say_why() {
        let mut inst = PerOpRecords::new("b", PerOpMode::Time, Vec::new());
        let e = run(&mut inst, "", vec![], ExitKind::Code(0)).unwrap_err();
        assert!(e.to_string().contains("wrote no harness records"), "{e}");
        // A failed child: the scheduler reports the failure, not a missing record.
        assert!(run(&mut inst, "", vec![], ExitKind::Code(2))
            .unwrap()
            .is_empty());
        let mut inst = PerOpRecords::new("b", PerOpMode::Count { ops: 1 }, vec![Family::Counter]);
        let c = Sample::new(
            MetricSpec::new("counter.page-faults", Unit::Count, "perf-sw", false),
            80.0,
        );
        let e = run(
            &mut inst,
            "ops 1\nregion.events 0\n",
            vec![c],
            ExitKind::Code(0),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("received no region descriptors"),
            "{e}"
        );
    }

    #[test]
    fn valgrind_counts_need_the_harness_to_have_toggled_callgrind_not_descriptors() {
        let instructions = || {
            Sample::new(
                MetricSpec::new("counter.instructions", Unit::Count, "valgrind", true),
                3000.0,
            )
        };
        let mut inst = PerOpRecords::new("b", PerOpMode::Count { ops: 3 }, vec![Family::Counter]);
        // No descriptors (valgrind has none), but the harness ran under valgrind.
        let out = run(
            &mut inst,
            "ops 3\nregion.events 0\nregion.valgrind 1\n",
            vec![instructions()],
            ExitKind::Code(0),
        )
        .unwrap();
        let per_op = find(&out, "counter.instructions/op");
        assert_eq!(
            (per_op.value, per_op.metric.source.as_str()),
            (1000.0, "valgrind")
        );
        assert_eq!(
            inst.metric_notes()[0],
            (
                "counter.".to_string(),
                "the measured region only: the 3 operations of each run, set-up excluded".into()
            )
        );
        for (records, needle) in [
            ("ops 3\nregion.events 0\n", "did not toggle callgrind"),
            (
                "ops 3\nregion.events 0\nregion.valgrind 0\n",
                "does not run under valgrind",
            ),
        ] {
            let e = run(&mut inst, records, vec![instructions()], ExitKind::Code(0)).unwrap_err();
            assert!(e.to_string().contains(needle), "{e}");
        }
    }

    #[test]
    fn calibration_and_size_runs_report_only_their_per_operation_counts() {
        let instructions = || {
            Sample::new(
                MetricSpec::new("counter.instructions", Unit::Count, "valgrind", true),
                30.0,
            )
        };
        let records = "ops 3\nregion.events 0\nregion.valgrind 1\n";
        let mut empty = PerOpRecords::new("b", PerOpMode::Count { ops: 3 }, vec![Family::Counter])
            .empty_operation();
        let mut setup = ChildSetup::default();
        empty.prepare(&mut setup).unwrap();
        assert!(setup
            .env
            .iter()
            .any(|(k, v)| k == proto::ENV_EMPTY && v == "1"));
        empty.abort_run();
        let out = run(&mut empty, records, vec![instructions()], ExitKind::Code(0)).unwrap();
        let ids: Vec<&str> = out.iter().map(|s| s.metric.id.as_str()).collect();
        assert_eq!(ids, ["counter.instructions/op.empty"]);
        assert_eq!(out[0].value, 10.0);
        assert!(empty.metric_notes().is_empty());
        let mut size = PerOpRecords::new("b", PerOpMode::Count { ops: 3 }, vec![Family::Counter])
            .at_size("n=20000");
        let mut setup = ChildSetup::default();
        size.prepare(&mut setup).unwrap();
        assert!(setup
            .env
            .iter()
            .any(|(k, v)| k == proto::ENV_PARAMS && v == "n=20000"));
        size.abort_run();
        let out = run(&mut size, records, vec![instructions()], ExitKind::Code(0)).unwrap();
        let ids: Vec<&str> = out.iter().map(|s| s.metric.id.as_str()).collect();
        assert_eq!(ids, ["counter.instructions/op@n=20000"]);
    }

    #[test]
    fn timing_runs_report_the_empty_operation_and_keep_the_sequences_for_the_drift_test() {
        let mut inst = PerOpRecords::new("list/sort", PerOpMode::Time, Vec::new());
        let mut records = String::from("time.op 6e-5\nnot_steady 0\ntime.op.empty 1e-9\n");
        for t in [5e-3, 6e-5, 6.1e-5, 5.9e-5, 6e-5, 6.2e-5, 6e-5, 5.8e-5] {
            records.push_str(&format!("time.first {t:e}\n"));
        }
        records.push_str("time.first.empty 3e-8\n");
        for i in 0..10 {
            records.push_str(&format!("time.kept {:e}\n", 6e-5 + (i % 3) as f64 * 1e-7));
        }
        for _ in 0..3 {
            let out = run(&mut inst, &records, vec![], ExitKind::Code(0)).unwrap();
            assert_eq!(find(&out, "time.op.empty").value, 1e-9);
        }
        let w = inst.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("`list/sort`: time per operation falls by 98%"),
            "{w:?}"
        );
    }
}
