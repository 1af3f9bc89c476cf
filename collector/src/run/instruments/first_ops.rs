//! The drift check's count: the instructions of a harnessed benchmark's first operations,
//! each counted alone, in one run under callgrind (`SBS_HARNESS_MODE=first`).
//!
//! A first operation that takes longer than the next ones met cold caches, or changed
//! its own input (a sort in place without a reset); only the second changes what the next
//! operations execute. The harness toggles callgrind's collection around each operation
//! and dumps the counts after it (`CALLGRIND_DUMP_STATS`), so dump `i` of the run holds
//! operation `i` alone: [`FIRST_OPS`] operations on the set-up, then
//! [`proto::FIRST_FRESH_OPS`] on a second set-up (a fresh input in a warm process, which
//! tells one-time work of the process from a changed input). The instrument reports no
//! metric: it hands the counts to the drift check ([`crate::judge::pitfalls::drift_warnings`])
//! with the timing runs' times, and gives its warnings and its note.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use anyhow::Context;
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use sbs_agent_abi::harness as proto;

use crate::judge::pitfalls::{drift_warnings, DriftVerdict, FirstCheck, FirstCounts};
use crate::run::instrument::{ChildSetup, Instrument, RunOutcome, Sample};
use crate::run::instruments::per_op::DriftCell;

/// Operations counted one at a time on the first set-up: the first, and enough after it to
/// see the later ones agree (or drift from one another).
pub const FIRST_OPS: u64 = 4;

/// Counts the first operations of one harnessed benchmark, once.
pub struct FirstOps {
    benchmark: String,
    valgrind: PathBuf,
    dir: Option<tempfile::TempDir>,
    records: Option<File>,
    evidence: DriftCell,
}

impl FirstOps {
    /// The count for `benchmark` under `valgrind`, its result and the timing runs' times
    /// in `evidence`.
    pub fn new(benchmark: &str, valgrind: PathBuf, evidence: DriftCell) -> Self {
        FirstOps {
            benchmark: benchmark.to_string(),
            valgrind,
            dir: None,
            records: None,
            evidence,
        }
    }

    /// The counts of a run that ended as `outcome`, or why there are none.
    fn counts(&self, outcome: &RunOutcome, dir: &Path, text: &str) -> Result<FirstCounts, String> {
        if !outcome.exit.success() {
            return Err(format!(
                "the callgrind run that counts the first operations failed ({:?}; valgrind's \
                 log: {})",
                outcome.exit,
                last_line(&std::fs::read_to_string(dir.join("log")).unwrap_or_default())
            ));
        }
        let records: Vec<(&str, f64)> = text.lines().filter_map(proto::parse_record).collect();
        let get = |key: &str| {
            records
                .iter()
                .rev()
                .find(|(k, _)| *k == key)
                .map(|&(_, v)| v)
        };
        match get(proto::REC_REGION_VALGRIND) {
            Some(n) if n > 0.0 => {}
            _ => {
                return Err(
                    "the harness's client requests reached no valgrind (they exist on \
                            x86-64 Linux only), so the first operations were not counted"
                        .into(),
                )
            }
        }
        let (Some(ops), Some(fresh)) = (get(proto::REC_FIRST_OPS), get(proto::REC_FIRST_FRESH_OPS))
        else {
            return Err(
                "the harness reported no count of its first operations; sbs-harness \
                        and sbs-profile versions may differ"
                    .into(),
            );
        };
        let (ops, fresh) = (ops as usize, fresh as usize);
        let mut all = Vec::with_capacity(ops + fresh);
        for dump in 1..=ops + fresh {
            let path = dir.join(format!("callgrind.{dump}"));
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("callgrind's dump {} is missing: {e}", path.display()))?;
            let n = sbs_probes::valgrind::parse_out_file_summary(&text)
                .map_err(|e| format!("callgrind's dump {}: {e}", path.display()))?;
            all.push(n);
        }
        let fresh = all.split_off(ops);
        Ok(FirstCounts {
            process: all,
            fresh,
        })
    }

    /// The drift check with what the timing runs and this run gathered.
    fn verdict(&self) -> DriftVerdict {
        let evidence = self.evidence.lock().unwrap_or_else(|e| e.into_inner());
        let check = match &evidence.counts {
            Some(Ok(counts)) => FirstCheck::Counted(counts),
            Some(Err(why)) => FirstCheck::TimingOnly(why),
            None => FirstCheck::TimingOnly("the first operations were not counted"),
        };
        drift_warnings(&self.benchmark, &evidence.first, &evidence.kept, check)
    }
}

/// The last non-empty line of valgrind's log, without its `==PID==` prefix.
fn last_line(log: &str) -> String {
    log.lines()
        .map(|l| match l.strip_prefix("==") {
            Some(rest) => rest.split_once("==").map_or(l, |(_, msg)| msg).trim(),
            None => l.trim(),
        })
        .rfind(|l| !l.is_empty())
        .unwrap_or("empty")
        .to_string()
}

impl Instrument for FirstOps {
    fn name(&self) -> &str {
        "first operations"
    }

    fn needs_start_latch(&self) -> bool {
        false
    }

    fn check_runs(&self) -> Option<usize> {
        Some(1)
    }

    fn prepare(&mut self, setup: &mut ChildSetup) -> anyhow::Result<()> {
        let dir = tempfile::Builder::new()
            .prefix("sbs-first-ops")
            .tempdir()
            .context("cannot create a directory for callgrind's dumps")?;
        let records = File::from(
            memfd_create(c"sbs-harness-records", MemFdCreateFlag::MFD_CLOEXEC)
                .context("cannot create the harness record file (memfd_create)")?,
        );
        let child: OwnedFd = records
            .try_clone()
            .context("cannot pass the harness record file to the child")?
            .into();
        setup.pass_fds.push((child, proto::OUT_FD));
        let env = [
            (proto::ENV_OUT, format!("/proc/self/fd/{}", proto::OUT_FD)),
            (proto::ENV_MODE, proto::MODE_FIRST.to_string()),
            (proto::ENV_OPS, FIRST_OPS.to_string()),
            (proto::ENV_REGION_CALLGRIND, "1".to_string()),
        ];
        setup
            .env
            .extend(env.into_iter().map(|(k, v)| (k.into(), v.into())));
        setup.wrapper = sbs_probes::valgrind::dumps_wrapper(
            &self.valgrind,
            &dir.path().join("callgrind"),
            &dir.path().join("log"),
        );
        self.dir = Some(dir);
        self.records = Some(records);
        Ok(())
    }

    fn collect(&mut self, outcome: &RunOutcome, _out: &mut Vec<Sample>) -> anyhow::Result<()> {
        let (Some(dir), Some(file)) = (self.dir.take(), self.records.take()) else {
            anyhow::bail!("internal error: first-operations collect without prepare");
        };
        let mut text = String::new();
        (&file)
            .seek(SeekFrom::Start(0))
            .and_then(|_| (&file).read_to_string(&mut text))
            .context("cannot read the harness record file")?;
        let counts = self.counts(outcome, dir.path(), &text);
        self.evidence
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .counts = Some(counts);
        Ok(())
    }

    fn abort_run(&mut self) {
        self.dir = None;
        self.records = None;
    }

    fn warnings(&self) -> Vec<String> {
        self.verdict().warnings
    }

    fn metric_notes(&self) -> Vec<(String, String)> {
        self.verdict()
            .note
            .map(|n| ("time.op".to_string(), n))
            .into_iter()
            .collect()
    }

    fn finish(&mut self) {
        self.dir = None;
        self.records = None;
    }
}
