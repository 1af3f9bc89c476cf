//! Running both builds under valgrind and turning each run's profile into [`Costs`] of the
//! program's own code.
//!
//! Runs alternate between the builds (previous, current, previous, ...), with the same
//! arguments, environment and working directory. Each run is a run of the runner, like
//! every measured run, valgrind in front of the build as the wrapper of an instrument
//! ([`ValgrindProfile`]): it starts through the launcher in a process group of its own,
//! dies with the collector, and Ctrl-C, SIGTERM, SIGHUP or SIGQUIT (the [`Cancel`]) kill
//! its group and end pinpoint as they end a run. Its standard output is kept to compare
//! the builds' outputs; valgrind follows no child process, and its messages go to a log
//! file of their own.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{Read, Seek};
use std::path::Path;

use anyhow::Context;
use sbs_probes::callgrind::{self, ObjectCosts};
use sbs_probes::elf::Image;
use sbs_probes::valgrind::INSTALL_HINT;

use super::builds::{Build, Costs};
use super::dhat;
use super::Metric;
use crate::run::instrument::{ExitKind, Instrument};
use crate::run::instruments::valgrind::ValgrindWrapper;
use crate::run::runner::{run_once as run_child, Cancel};

/// What a run printed, to compare the builds' outputs.
pub struct Printed {
    /// Standard output.
    pub stdout: Vec<u8>,
}

/// The `valgrind` executable, or the error saying how to install it.
pub fn valgrind() -> anyhow::Result<std::path::PathBuf> {
    which::which("valgrind").map_err(|_| {
        anyhow::anyhow!(
            "valgrind is not installed (not found on PATH); pinpoint measures both builds under it: install it with `{INSTALL_HINT}`"
        )
    })
}

/// Run `build` once under valgrind with `args` and add the run's costs to it. The run's
/// files go to `dir`; a signal caught by `cancel` kills the run and ends with
/// [`crate::run::runner::RunError::Interrupted`].
pub fn run_once(
    valgrind: &Path,
    metric: Metric,
    build: &mut Build,
    args: &[OsString],
    dir: &Path,
    index: usize,
    cancel: &Cancel,
) -> anyhow::Result<Printed> {
    let out_file = dir.join(format!("{}-{index}.out", build.side));
    let log_file = dir.join(format!("{}-{index}.log", build.side));
    let wrapper = match metric {
        Metric::Instructions => callgrind::profile_wrapper(valgrind, &out_file, &log_file),
        Metric::Alloc | Metric::AllocBytes => dhat::wrapper(valgrind, &out_file, &log_file),
        Metric::Time => anyhow::bail!("time is sampled, not measured under valgrind"),
    };
    let mut stdout = tempfile::tempfile_in(dir)
        .context("cannot create a file in pinpoint's temporary directory for the output")?;
    let instrument = ValgrindWrapper::new(
        wrapper,
        Some(
            stdout
                .try_clone()
                .context("cannot share the output file")?
                .into(),
        ),
    );
    let mut instruments: Vec<Box<dyn Instrument>> = vec![Box::new(instrument)];
    let config = build.run_config(args);
    let (outcome, _) = run_child(&config, &mut instruments, cancel).with_context(|| {
        format!(
            "cannot run the {} build {} under {}",
            build.side,
            build.exe.display(),
            valgrind.display()
        )
    })?;
    if !outcome.exit.success() {
        let how = match outcome.exit {
            ExitKind::Code(code) => format!("exited with status {code}"),
            ExitKind::Signal(sig) => format!("was killed by signal {sig}"),
            ExitKind::TimedOut => "timed out".to_string(),
        };
        let log = std::fs::read_to_string(&log_file).unwrap_or_default();
        let hint = log
            .lines()
            .filter_map(|l| l.split_once("== ").map(|(_, m)| m.trim()))
            .find(|m| {
                m.starts_with("Process terminating")
                    || m.contains("valgrind: ")
                    || m.starts_with("Bad option")
            })
            .map(|m| format!(" (valgrind: {m})"))
            .unwrap_or_default();
        anyhow::bail!(
            "the {} build {} {how} under valgrind{hint}; pinpoint needs both builds to run to completion with these arguments",
            build.side,
            build.exe.display()
        );
    }
    let mut printed = Vec::new();
    stdout
        .rewind()
        .and_then(|_| stdout.read_to_end(&mut printed))
        .context("cannot read the run's output back")?;
    let text = std::fs::read_to_string(&out_file).with_context(|| {
        format!(
            "valgrind wrote no profile for the {} build {}",
            build.side,
            build.exe.display()
        )
    })?;
    let costs = match metric {
        Metric::Instructions => {
            let profile = callgrind::parse(&text).with_context(|| {
                format!("cannot read callgrind's profile {}", out_file.display())
            })?;
            let own = own_object(&profile.objects, &build.image).with_context(|| {
                format!(
                    "callgrind's profile of {} has no cost in the program itself",
                    build.exe.display()
                )
            })?;
            instruction_costs(own, &build.image)
        }
        Metric::Alloc | Metric::AllocBytes | Metric::Time => {
            let profile = dhat::parse(&text)
                .with_context(|| format!("cannot read DHAT's profile {}", out_file.display()))?;
            dhat::costs(&profile, &build.image, metric == Metric::AllocBytes)
        }
    };
    build.runs.push(costs);
    Ok(Printed { stdout: printed })
}

/// The costs callgrind recorded for `image`'s own object file.
fn own_object<'a>(
    objects: &'a HashMap<String, ObjectCosts>,
    image: &Image,
) -> Option<&'a ObjectCosts> {
    objects
        .iter()
        .find(|(name, _)| {
            Path::new(name)
                .canonicalize()
                .is_ok_and(|p| p == image.path)
        })
        .map(|(_, o)| o)
}

/// Site and function costs at the image's own addresses. Callgrind writes them so already
/// (valgrind 3.19 and later); should a version write load addresses instead, the offset
/// is found from the functions it named, whose symbols give their addresses.
fn instruction_costs(own: &ObjectCosts, image: &Image) -> Costs {
    let by_name: HashMap<&str, u64> = image
        .functions
        .iter()
        .map(|f| (f.name.as_str(), f.address))
        .collect();
    let mut offsets: HashMap<u64, usize> = HashMap::new();
    for (address, name) in &own.callees {
        if let Some(symbol) = by_name.get(name.as_str()) {
            *offsets.entry(address.wrapping_sub(*symbol)).or_default() += 1;
        }
    }
    let bias = offsets
        .into_iter()
        .max_by_key(|&(offset, n)| (n, std::cmp::Reverse(offset)))
        .map_or(0, |(offset, _)| offset);
    Costs {
        sites: own
            .sites
            .iter()
            .map(|(a, c)| (a.wrapping_sub(bias), c.inclusive as f64))
            .collect(),
        functions: own
            .entries
            .iter()
            .map(|(a, c)| (a.wrapping_sub(bias), c.inclusive as f64))
            .collect(),
        stacks: None,
    }
}
