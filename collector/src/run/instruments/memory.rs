//! Footprint (`--memory`): peak resident set size of the benchmark.
//!
//! Two views: `rss.peak` is the kernel's high-water mark of the largest single process
//! (`wait4` rusage `ru_maxrss`, which covers the child and the descendants it waited
//! for); `rss.tree_peak` is the largest sum of the resident sizes of all processes in
//! the benchmark's process group, sampled from `/proc` (procfs) every
//! [`SAMPLE_INTERVAL`] while the run lasts, so it can miss a spike shorter than that.
//! The memory runs never carry the allocation agent: `heap.peak` comes from runs of its
//! own (see `plan::groups` and `alloc.rs`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use nix::unistd::Pid;
use sbs_reports::model::Unit;

use crate::run::instrument::{Instrument, MetricSpec, RunOutcome, Sample};

/// How often the process tree's resident size is sampled.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(5);

/// The ids of a memory run's metrics.
pub const METRIC_IDS: &[&str] = &["rss.peak", "rss.tree_peak"];

/// Peak RSS of the main process (rusage) and of the process tree (procfs sampling).
#[derive(Debug, Default)]
pub struct Memory {
    notes: Vec<String>,
    sampler: Option<Sampler>,
    /// Runs that ended before the first procfs sample, of `sampled` runs.
    short_runs: usize,
    sampled: usize,
}

impl Memory {
    /// Add a warning for the report (e.g. why heap.peak is missing).
    pub fn note(&mut self, note: String) {
        self.notes.push(note);
    }
}

#[derive(Debug)]
struct Sampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    samples: Arc<AtomicU64>,
    thread: JoinHandle<()>,
}

impl Sampler {
    fn start(pid: Pid) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let samples = Arc::new(AtomicU64::new(0));
        // Started at the latch: the child is still a copy of the launcher.
        let before_exec = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
        let (s, p, n) = (stop.clone(), peak.clone(), samples.clone());
        let thread = std::thread::Builder::new()
            .name("sbs-rss-sampler".into())
            .spawn(move || {
                let page = procfs::page_size();
                let mut started = false;
                while !s.load(Ordering::Relaxed) {
                    // Until the child has exec'd it is the launcher's copy: not the benchmark.
                    if !started {
                        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
                        started = exe.is_some() && exe != before_exec;
                    }
                    if started {
                        p.fetch_max(group_rss(pid.as_raw(), page), Ordering::Relaxed);
                        n.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(SAMPLE_INTERVAL);
                }
            })?;
        Ok(Sampler {
            stop,
            peak,
            samples,
            thread,
        })
    }

    /// Stop and return (peak bytes, number of samples).
    fn finish(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        (
            self.peak.load(Ordering::Relaxed),
            self.samples.load(Ordering::Relaxed),
        )
    }
}

/// Sum of the resident sizes of the processes in process group `pgrp`, in bytes.
fn group_rss(pgrp: i32, page: u64) -> u64 {
    let Ok(all) = procfs::process::all_processes() else {
        return 0;
    };
    all.filter_map(Result::ok)
        .filter_map(|p| p.stat().ok())
        .filter(|st| st.pgrp == pgrp)
        .map(|st| st.rss * page)
        .sum()
}

impl Instrument for Memory {
    fn name(&self) -> &str {
        "memory"
    }

    fn attach(&mut self, pid: Pid) -> anyhow::Result<()> {
        self.sampler = Some(Sampler::start(pid).context("cannot start the RSS sampler thread")?);
        Ok(())
    }

    fn collect(&mut self, outcome: &RunOutcome, out: &mut Vec<Sample>) -> anyhow::Result<()> {
        out.push(Sample::new(
            MetricSpec::new("rss.peak", Unit::Bytes, "rusage", false),
            outcome.max_rss as f64,
        ));
        if let Some(sampler) = self.sampler.take() {
            let (tree, samples) = sampler.finish();
            self.sampled += 1;
            if samples == 0 {
                self.short_runs += 1;
            }
            // A run shorter than one interval has no sample; rusage still saw its peak.
            out.push(Sample::new(
                MetricSpec::new("rss.tree_peak", Unit::Bytes, "procfs", false),
                tree.max(outcome.max_rss) as f64,
            ));
        }
        Ok(())
    }

    fn abort_run(&mut self) {
        if let Some(s) = self.sampler.take() {
            s.finish();
        }
    }

    fn warnings(&self) -> Vec<String> {
        self.notes.clone()
    }

    /// The sampling interval is a property of the method, true of every run: a note on
    /// the metric, not a warning about this run (which `--strict` would fail on).
    /// So is a program shorter than one interval: its peak is then rusage's, exact for
    /// the benchmark's own process.
    fn metric_notes(&self) -> Vec<(String, String)> {
        let mut notes = vec![(
            "rss.tree_peak".to_string(),
            format!(
                "sampled from procfs every {} ms: a shorter spike can be missed",
                SAMPLE_INTERVAL.as_millis()
            ),
        )];
        if self.short_runs > 0 {
            notes.push((
                "rss.tree_peak".to_string(),
                format!(
                    "{} of {} runs (warm-ups included) ended before the first sample: their \
                     rss.tree_peak is the peak of the benchmark's own process (rusage), \
                     without its descendants'",
                    self.short_runs, self.sampled
                ),
            ));
        }
        notes
    }

    fn finish(&mut self) {
        self.abort_run();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_rss_of_our_own_group_is_positive() {
        let pgrp = nix::unistd::getpgrp().as_raw();
        assert!(group_rss(pgrp, procfs::page_size()) > 0);
        assert_eq!(group_rss(i32::MAX, procfs::page_size()), 0);
    }
}
