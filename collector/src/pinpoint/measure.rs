//! Running both builds under valgrind and turning each run's profile into [`Costs`] of the
//! program's own code.
//!
//! Runs alternate between the builds (previous, current, previous, ...), with the same
//! arguments, environment and working directory. Each run is a plain child of the
//! collector (`std::process`), its output captured: valgrind follows no child process,
//! and its messages go to a log file of their own.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::Context;
use sbs_probes::callgrind::{self, ObjectCosts};
use sbs_probes::elf::Image;
use sbs_probes::valgrind::INSTALL_HINT;

use super::builds::{Build, Costs};
use super::dhat;
use super::Metric;

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

/// Run `build` once under valgrind with `args` and add the run's costs to it.
pub fn run_once(
    valgrind: &Path,
    metric: Metric,
    build: &mut Build,
    args: &[OsString],
    dir: &Path,
    index: usize,
) -> anyhow::Result<Printed> {
    let out_file = dir.join(format!("{}-{index}.out", build.side));
    let log_file = dir.join(format!("{}-{index}.log", build.side));
    let wrapper = match metric {
        Metric::Instructions => callgrind::profile_wrapper(valgrind, &out_file, &log_file),
        Metric::Alloc | Metric::AllocBytes => dhat::wrapper(valgrind, &out_file, &log_file),
        Metric::Time => anyhow::bail!("time is sampled, not measured under valgrind"),
    };
    let output = Command::new(&wrapper[0])
        .args(&wrapper[1..])
        .arg(&build.image.path)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("cannot start {}", valgrind.display()))?;
    if !output.status.success() {
        use std::os::unix::process::ExitStatusExt;
        let how = match (output.status.code(), output.status.signal()) {
            (_, Some(sig)) => format!("was killed by signal {sig}"),
            (Some(code), _) => format!("exited with status {code}"),
            _ => "failed".to_string(),
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
    Ok(Printed {
        stdout: output.stdout,
    })
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
