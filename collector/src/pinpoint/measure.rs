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
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::Context;
use sbs_probes::callgrind::{self, ObjectCosts};
use sbs_probes::elf::Image;
use sbs_probes::valgrind::INSTALL_HINT;

use super::builds::Build;
use super::costs::Costs;
use super::dhat;
use super::{Metric, PinpointRequest, Runs};
use crate::run::instrument::Instrument;
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

/// Run both builds under valgrind, alternately (previous, current, previous...), as many
/// times as `request.runs` says, adding each run's costs to its build. Returns what each
/// build printed on its first run and, for [`Runs::UnlessRepeated`], whether the previous
/// build's second run repeated its counts.
pub fn run_builds(
    request: &PinpointRequest,
    [previous, current]: [&mut Build; 2],
    cancel: &Cancel,
) -> anyhow::Result<(super::Outputs, Option<bool>)> {
    let valgrind = valgrind()?;
    // Private whatever the umask (mkdtemp's 0700): valgrind writes its profiles at names
    // anyone could guess, and in a directory others can write to, a symlink planted at
    // one would make it write where the link points, with our rights.
    let dir = tempfile::Builder::new()
        .prefix("sbs-pinpoint-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .context("cannot create a temporary directory for valgrind's profiles")?;
    // Both builds run from one path, so that they see the same argv[0].
    let staged_dir = dir.path().join("bin");
    std::fs::create_dir(&staged_dir)
        .context("cannot create a directory in pinpoint's temporary directory")?;
    let name = current
        .exe
        .file_name()
        .map_or_else(|| OsString::from("program"), |n| n.to_os_string());
    let staged = staged_dir.join(name);
    let setup = Setup {
        valgrind: &valgrind,
        metric: request.metric,
        dir: dir.path(),
        staged: &staged,
    };
    let mut outputs: super::Outputs = [None, None];
    let (mut from, mut repeated) = (0, None);
    if let Runs::UnlessRepeated(_) = request.runs {
        // The previous build's two runs side by side: counts under valgrind do not
        // depend on the timing, and a second core makes the check that they repeat
        // cost little more than one run.
        previous.stage(&staged)?;
        let [first, second] = std::thread::scope(|scope| {
            let build = &*previous;
            let args = &request.args;
            let other = scope.spawn(|| measure(&setup, build, args, 1, cancel));
            let first = measure(&setup, build, args, 0, cancel);
            let second = other
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("a valgrind run's thread panicked")));
            [first, second]
        });
        for (costs, printed) in [first?, second?] {
            previous.runs.push(costs);
            outputs[0].get_or_insert(printed.stdout);
        }
    }
    let mut run = |k: usize, build: &mut Build, i: usize| -> anyhow::Result<()> {
        build.stage(&staged)?;
        let (costs, printed) = measure(&setup, build, &request.args, i, cancel)?;
        build.runs.push(costs);
        outputs[k].get_or_insert(printed.stdout);
        Ok(())
    };
    if let Runs::UnlessRepeated(_) = request.runs {
        run(1, current, 0)?;
        if previous.runs[0] == previous.runs[1] {
            // Counts that repeat exactly: the second run adds nothing.
            previous.runs.truncate(1);
            return Ok((outputs, Some(true)));
        }
        run(1, current, 1)?;
        (from, repeated) = (2, Some(false));
    }
    for i in from..request.runs.most() {
        run(0, previous, i)?;
        run(1, current, i)?;
    }
    Ok((outputs, repeated))
}

/// Where and how a build runs: valgrind, what it measures, the directory of the run's
/// files, and the one path both builds are run from (their `argv[0]`).
pub struct Setup<'a> {
    /// The valgrind executable.
    pub valgrind: &'a Path,
    /// What is counted.
    pub metric: Metric,
    /// Where profiles, logs and outputs go.
    pub dir: &'a Path,
    /// Where each build is put before its run ([`Build::stage`]).
    pub staged: &'a Path,
}

/// Run `build`, staged at `setup.staged`, once under valgrind with `args`: the run's
/// costs and what it printed. A signal caught by `cancel` kills the run and ends with
/// [`crate::run::runner::RunError::Interrupted`].
pub fn measure(
    setup: &Setup<'_>,
    build: &Build,
    args: &[OsString],
    index: usize,
    cancel: &Cancel,
) -> anyhow::Result<(Costs, Printed)> {
    let Setup {
        valgrind,
        metric,
        dir,
        staged,
    } = *setup;
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
    let config = build.run_config(staged, staged, args);
    let (outcome, _) = run_child(&config, &mut instruments, cancel).with_context(|| {
        format!(
            "cannot run the {} build {} under {}",
            build.side,
            build.exe.display(),
            valgrind.display()
        )
    })?;
    if !outcome.exit.success() {
        let log = std::fs::read_to_string(&log_file).unwrap_or_default();
        let hint = sbs_probes::valgrind::log_hint(&log)
            .map(|m| format!(" (valgrind: {m})"))
            .unwrap_or_default();
        anyhow::bail!(
            "the {} build {} {} under valgrind{hint}; pinpoint needs both builds to run to completion with these arguments",
            build.side,
            build.exe.display(),
            outcome.exit.ended()
        );
    }
    let mut printed = Vec::new();
    stdout
        .rewind()
        .and_then(|_| stdout.read_to_end(&mut printed))
        .context("cannot read the run's output back")?;
    let costs = read_profile(setup, build, &out_file)?;
    Ok((costs, Printed { stdout: printed }))
}

/// The costs in the profile valgrind wrote at `out_file` for a run of `build`.
fn read_profile(setup: &Setup<'_>, build: &Build, out_file: &Path) -> anyhow::Result<Costs> {
    let text = std::fs::read_to_string(out_file).with_context(|| {
        format!(
            "valgrind wrote no profile for the {} build {}",
            build.side,
            build.exe.display()
        )
    })?;
    Ok(match setup.metric {
        Metric::Instructions => {
            let profile = callgrind::parse(&text).with_context(|| {
                format!("cannot read callgrind's profile {}", out_file.display())
            })?;
            let own = own_object(&profile.objects, setup.staged).with_context(|| {
                format!(
                    "callgrind's profile of {} has no cost in the program itself",
                    build.exe.display()
                )
            })?;
            instruction_costs(own, &build.image)
        }
        metric @ (Metric::Alloc | Metric::AllocBytes | Metric::Time) => {
            let profile = dhat::parse(&text)
                .with_context(|| format!("cannot read DHAT's profile {}", out_file.display()))?;
            dhat::costs(&profile, &build.image, metric == Metric::AllocBytes)
        }
    })
}

/// The costs callgrind recorded for the program's own object file, run from `staged`.
fn own_object<'a>(
    objects: &'a HashMap<String, ObjectCosts>,
    staged: &Path,
) -> Option<&'a ObjectCosts> {
    let staged = staged.canonicalize().ok()?;
    objects
        .iter()
        .find(|(name, _)| Path::new(name).canonicalize().is_ok_and(|p| p == staged))
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
        edges: edges(own, image, bias),
        stacks: None,
        timed: false,
        own_at: own
            .own_at
            .iter()
            .map(|(a, c)| (a.wrapping_sub(bias), *c as f64))
            .collect(),
    }
}

/// The call edges between the image's own functions, by caller and callee start, with
/// their inclusive cost (an edge at several call sites of one caller summed).
fn edges(own: &ObjectCosts, image: &Image, bias: u64) -> HashMap<(u64, u64), f64> {
    let mut edges: HashMap<(u64, u64), f64> = HashMap::new();
    for (&(site, target), cost) in &own.edges {
        let site = site.wrapping_sub(bias);
        let Some(caller) = image.function_at(site) else {
            continue;
        };
        *edges
            .entry((caller.address, target.wrapping_sub(bias)))
            .or_default() += cost.inclusive as f64;
    }
    edges
}
