//! `--metric time`: both builds run under the stack sampler, alternately, and each run's
//! stacks become the inclusive time of every function and call site of the build
//! ([`super::builds::Build::time_costs`]).
//!
//! Each run is a child of the runner like every measured run (held at its start latch
//! while the sampler attaches, so sampling starts at its exec), with the caller's
//! environment, its standard output kept to compare the builds' outputs.

use std::ffi::OsString;

use anyhow::Context;
use sbs_probes::sample::SampleConfig;
use sbs_reports::pinpoint::SamplingNote;

use super::builds::Build;
use crate::run::instrument::Instrument;
use crate::run::instruments::stacks::StackSampler;
use crate::run::runner::{run_once, Cancel};

/// Run each build `runs` times under the sampler (previous, current, previous, ...) and
/// add each run's costs to it. Returns what the sampling saw and each build's first output.
/// A signal caught by `cancel` kills the run under way and ends the runs.
pub fn run_builds(
    builds: [&mut Build; 2],
    args: &[OsString],
    runs: usize,
    config: SampleConfig,
    cancel: &Cancel,
) -> anyhow::Result<(SamplingNote, [Option<Vec<u8>>; 2])> {
    let mut note = SamplingNote {
        period_ns: config.period_ns,
        ..SamplingNote::default()
    };
    let mut outputs: [Option<Vec<u8>>; 2] = [None, None];
    let [previous, current] = builds;
    // Both builds see one argv[0]: the current build's path as given.
    let argv0 = current.exe.clone();
    for _ in 0..runs {
        for (k, build) in [&mut *previous, &mut *current].into_iter().enumerate() {
            let printed = run_build(build, &argv0, args, config, cancel, &mut note)?;
            if outputs[k].is_none() {
                outputs[k] = printed;
            }
        }
    }
    Ok((note, outputs))
}

fn run_build(
    build: &mut Build,
    argv0: &std::path::Path,
    args: &[OsString],
    config: SampleConfig,
    cancel: &Cancel,
    note: &mut SamplingNote,
) -> anyhow::Result<Option<Vec<u8>>> {
    let sampler = StackSampler::new(config, true);
    let runs = sampler.runs();
    let mut instruments: Vec<Box<dyn Instrument>> = vec![Box::new(sampler)];
    let run_config = build.run_config(&build.image.path, argv0, args);
    let (outcome, _) = run_once(&run_config, &mut instruments, cancel).with_context(|| {
        format!(
            "cannot sample the {} build {}",
            build.side,
            build.exe.display()
        )
    })?;
    instruments.clear();
    if !outcome.exit.success() {
        use crate::run::instrument::ExitKind;
        let how = match outcome.exit {
            ExitKind::Code(c) => format!("exited with status {c}"),
            ExitKind::Signal(s) => format!("was killed by signal {s}"),
            ExitKind::TimedOut => "timed out".to_string(),
        };
        anyhow::bail!(
            "the {} build {} {how}; pinpoint needs both builds to run to completion with these arguments",
            build.side,
            build.exe.display(),
        );
    }
    let run = runs
        .lock()
        .map_err(|_| anyhow::anyhow!("the stack list was poisoned"))?
        .pop()
        .context("the stack sampler recorded nothing")?;
    let (costs, outside) = build.time_costs(&run.unwound, |period| period as f64 / 1e6);
    note.samples += run.unwound.stacks.len() as u64;
    note.not_unwound += run.unwound.incomplete() as u64;
    note.outside_program += outside;
    note.lost += run.lost;
    note.user_only |= !run.kernel;
    build.runs.push(costs);
    Ok(run.stdout)
}
