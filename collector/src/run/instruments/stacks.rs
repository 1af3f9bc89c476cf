//! The stack-sampling instrument: the child's user call stacks on the `cpu-clock`
//! software event ([`sbs_probes::sample`]), opened before it execs and unwound after it
//! was reaped ([`sbs_probes::unwind`]). Each run's unwound stacks go to a shared list that
//! its owner reads after the run (pinpoint's time metric).
//!
//! Sampling copies part of the stack on every sample: it slows the program down, so, like
//! every instrument, it runs in runs of its own and never in a timing run.

use std::fs::File;
use std::io::{Read, Seek};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use nix::unistd::Pid;
use sbs_probes::sample::{SampleConfig, Sampling};
use sbs_probes::unwind::{unwind, Unwound};

use crate::run::instrument::{ChildSetup, Instrument, RunOutcome, Sample};

/// One run's stacks, and what it printed when asked to keep it.
#[derive(Debug, Clone, Default)]
pub struct SampledRun {
    /// The unwound samples.
    pub unwound: Unwound,
    /// Samples the kernel dropped, or took without a user stack.
    pub lost: u64,
    /// Whether time in the kernel on the child's behalf was sampled too.
    pub kernel: bool,
    /// Standard output, when kept.
    pub stdout: Option<Vec<u8>>,
}

/// Samples each run's child; pushes each run's [`SampledRun`] to [`StackSampler::runs`].
pub struct StackSampler {
    config: SampleConfig,
    live: Option<Sampling>,
    keep_stdout: bool,
    stdout: Option<File>,
    runs: Arc<Mutex<Vec<SampledRun>>>,
}

impl StackSampler {
    /// A sampler with `config`; with `keep_stdout`, each run's standard output is kept
    /// (instead of going where the runner sends it).
    pub fn new(config: SampleConfig, keep_stdout: bool) -> Self {
        StackSampler {
            config,
            live: None,
            keep_stdout,
            stdout: None,
            runs: Arc::default(),
        }
    }

    /// The list each run's stacks are appended to.
    pub fn runs(&self) -> Arc<Mutex<Vec<SampledRun>>> {
        self.runs.clone()
    }
}

impl Instrument for StackSampler {
    fn name(&self) -> &str {
        "stack samples"
    }

    fn prepare(&mut self, setup: &mut ChildSetup) -> anyhow::Result<()> {
        if self.keep_stdout {
            let file = tempfile::tempfile().context("cannot create a file for the output")?;
            let fd: OwnedFd = file
                .try_clone()
                .context("cannot share the output file")?
                .into();
            setup.pass_fds.push((fd, 1));
            self.stdout = Some(file);
        }
        Ok(())
    }

    fn attach(&mut self, pid: Pid) -> anyhow::Result<()> {
        let sampling = Sampling::start(pid.as_raw(), self.config)?;
        self.live = Some(sampling);
        Ok(())
    }

    fn collect(&mut self, _outcome: &RunOutcome, _out: &mut Vec<Sample>) -> anyhow::Result<()> {
        let Some(sampling) = self.live.take() else {
            anyhow::bail!("the stack sampler was not attached to the run");
        };
        let recorded = sampling.finish();
        let stdout = match self.stdout.take() {
            Some(mut f) => {
                let mut bytes = Vec::new();
                f.rewind()
                    .and_then(|_| f.read_to_end(&mut bytes))
                    .context("cannot read the run's output back")?;
                Some(bytes)
            }
            None => None,
        };
        let run = SampledRun {
            unwound: unwind(&recorded),
            lost: recorded.lost + recorded.without_stack,
            kernel: recorded.kernel,
            stdout,
        };
        self.runs
            .lock()
            .map_err(|_| anyhow::anyhow!("the stack list was poisoned"))?
            .push(run);
        Ok(())
    }

    fn abort_run(&mut self) {
        self.live = None;
        self.stdout = None;
    }

    fn finish(&mut self) {
        self.live = None;
    }
}

/// Functions [`TimeProfile`] reports: the top ones of its first run.
pub const TOP_FUNCTIONS: usize = 20;

/// `--profile-time`: the sampled CPU time of each run (`profile.time`), and the inclusive
/// time of the program's top functions (`profile.inclusive.<function>`: each sample counted
/// once per function on its stack, recursion included). The functions are the
/// [`TOP_FUNCTIONS`] of the group's first run (the warm-up run, when there is one), so
/// that every run reports the same metrics.
pub struct TimeProfile {
    sampler: StackSampler,
    image: sbs_probes::elf::Image,
    /// The reported functions: start address and name.
    chosen: Option<Vec<(u64, String)>>,
    /// Samples, not unwound to their root, outside the program's functions, lost.
    counts: [u64; 4],
    user_only: bool,
}

impl TimeProfile {
    /// The profile of `program` (which must have a symbol table).
    pub fn new(program: &std::path::Path, config: SampleConfig) -> anyhow::Result<TimeProfile> {
        let image = sbs_probes::elf::Image::load(program).with_context(|| {
            format!(
                "--profile-time reads the functions of {}",
                program.display()
            )
        })?;
        if image.stripped {
            anyhow::bail!(
                "--profile-time names functions from the symbol table, and {} has none (stripped); rebuild without stripping",
                program.display()
            );
        }
        Ok(TimeProfile {
            sampler: StackSampler::new(config, false),
            image,
            chosen: None,
            counts: [0; 4],
            user_only: false,
        })
    }

    /// Per function of the program (start address), the inclusive time of `run` in
    /// seconds; and how many samples had their innermost frame outside the program's
    /// functions.
    fn inclusive(&self, run: &SampledRun) -> (std::collections::HashMap<u64, f64>, u64) {
        let object = run.unwound.object_index(&self.image.path);
        let mut by_function: std::collections::HashMap<u64, f64> = Default::default();
        let mut outside = 0;
        for stack in &run.unwound.stacks {
            let mut seen: Vec<u64> = stack
                .frames
                .iter()
                .flatten()
                .filter(|f| Some(f.object) == object)
                .filter_map(|f| self.image.function_at(f.address).map(|f| f.address))
                .collect();
            let innermost = stack.frames.first().copied().flatten();
            let inside = innermost.is_some_and(|f| {
                Some(f.object) == object && self.image.function_at(f.address).is_some()
            });
            outside += u64::from(!inside);
            seen.sort_unstable();
            seen.dedup();
            for f in seen {
                *by_function.entry(f).or_default() += stack.period as f64 / 1e9;
            }
        }
        (by_function, outside)
    }

    /// The [`TOP_FUNCTIONS`] of a run, by inclusive time.
    fn top(&self, by_function: &std::collections::HashMap<u64, f64>) -> Vec<(u64, String)> {
        let mut lines: Vec<(u64, String, f64)> = by_function
            .iter()
            .filter_map(|(&at, &t)| {
                let f = self.image.functions.iter().find(|f| f.address == at)?;
                Some((at, sbs_probes::demangle::demangle(&f.name).label, t))
            })
            .collect();
        lines.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| a.1.cmp(&b.1)));
        lines.truncate(TOP_FUNCTIONS);
        lines.into_iter().map(|(at, name, _)| (at, name)).collect()
    }
}

impl Instrument for TimeProfile {
    fn name(&self) -> &str {
        "time profile"
    }

    fn attach(&mut self, pid: Pid) -> anyhow::Result<()> {
        self.sampler.attach(pid)
    }

    fn collect(&mut self, outcome: &RunOutcome, out: &mut Vec<Sample>) -> anyhow::Result<()> {
        self.sampler.collect(outcome, out)?;
        let run = self
            .sampler
            .runs
            .lock()
            .map_err(|_| anyhow::anyhow!("the stack list was poisoned"))?
            .pop()
            .context("the stack sampler recorded nothing")?;
        let (by_function, outside) = self.inclusive(&run);
        let chosen = match &self.chosen {
            Some(c) => c.clone(),
            None => self.chosen.insert(self.top(&by_function)).clone(),
        };
        let total: f64 = run
            .unwound
            .stacks
            .iter()
            .map(|s| s.period as f64 / 1e9)
            .sum();
        self.counts[0] += run.unwound.stacks.len() as u64;
        self.counts[1] += run.unwound.incomplete() as u64;
        self.counts[2] += outside;
        self.counts[3] += run.lost;
        self.user_only |= !run.kernel;
        let metric = |id: String| {
            crate::run::instrument::MetricSpec::new(
                id,
                sbs_reports::model::Unit::Seconds,
                "perf-sw samples",
                false,
            )
        };
        out.push(Sample::new(metric(PROFILE_TIME.to_string()), total));
        // In the first run's order; the report orders them by mean ([`order_by_mean`]).
        for (at, name) in chosen {
            let value = by_function.get(&at).copied().unwrap_or(0.0);
            out.push(Sample::new(
                metric(format!("{PROFILE_INCLUSIVE}.{name}")),
                value,
            ));
        }
        Ok(())
    }

    fn abort_run(&mut self) {
        self.sampler.abort_run();
    }

    fn metric_notes(&self) -> Vec<(String, String)> {
        let [samples, not_unwound, outside, lost] = self.counts;
        vec![(
            PROFILE_TIME.to_string(),
            format!(
                "{}CPU time from {samples} stack samples every {} (warm-up runs included); profile.inclusive.F: the inclusive time of the program's function F; {not_unwound} samples not unwound to their root, {outside} outside the program's functions, {lost} lost",
                if self.user_only { "user-mode " } else { "" },
                sbs_reports::human::seconds(self.sampler.config.period_ns as f64 / 1e9),
            ),
        )]
    }

    fn finish(&mut self) {
        self.sampler.finish();
    }
}

/// Put the `profile.inclusive.*` rows of a benchmark's `metrics` in the order of their
/// means over the measured runs, largest first (equal means by id), in the places they
/// hold: the table reads from the costliest function down, by the same runs its numbers
/// come from. The functions are chosen by the group's first run and came in its order.
pub fn order_by_mean(metrics: &mut [sbs_reports::model::MetricResult]) {
    let prefix = format!("{PROFILE_INCLUSIVE}.");
    let places: Vec<usize> = (0..metrics.len())
        .filter(|&i| metrics[i].id.starts_with(&prefix))
        .collect();
    let mut rows: Vec<_> = places.iter().map(|&i| metrics[i].clone()).collect();
    rows.sort_by(|a, b| {
        b.summary
            .mean
            .total_cmp(&a.summary.mean)
            .then_with(|| a.id.cmp(&b.id))
    });
    for (i, row) in places.into_iter().zip(rows) {
        metrics[i] = row;
    }
}

/// The sampled CPU time of `--profile-time`.
pub const PROFILE_TIME: &str = "profile.time";
/// The prefix of the inclusive time of each reported function.
pub const PROFILE_INCLUSIVE: &str = "profile.inclusive";

/// The ids of a time profile's metrics: the functions are chosen by the first run, so any
/// `profile.inclusive.` id may come.
pub fn metric_ids() -> Vec<String> {
    vec![PROFILE_TIME.to_string(), format!("{PROFILE_INCLUSIVE}.*")]
}
