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
use std::path::{Path, PathBuf};

use anyhow::Context;
use sbs_probes::callgrind::{self, ObjectCosts};
use sbs_probes::elf::Image;
use sbs_probes::valgrind::INSTALL_HINT;

use super::builds::{Build, Side};
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

/// Run both builds under valgrind, side by side (previous and current at once, run `i`
/// of each), as many times as `request.runs` says, adding each run's costs to its build.
/// Returns what each build printed on its first run and, for [`Runs::UnlessRepeated`],
/// whether the previous build's second run repeated its counts; that second run runs
/// beside the first two, so that a check that costs a run costs no wait where a core is
/// free.
///
/// Counts under valgrind do not depend on the timing, so runs at once count what runs one
/// after the other would. Each build runs from a path of its own of the same length and
/// file name (`…/a/NAME` and `…/b/NAME`): `argv[0]`, which valgrind sets to the path it
/// runs, then differs in one letter and not in length, so a program that reads it does
/// the same work in both.
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
    let name = current
        .exe
        .file_name()
        .map_or_else(|| OsString::from("program"), |n| n.to_os_string());
    let mut staged = [PathBuf::new(), PathBuf::new()];
    for (at, (build, sub)) in staged.iter_mut().zip([(&*previous, "a"), (&*current, "b")]) {
        let own = dir.path().join(sub);
        std::fs::create_dir(&own)
            .context("cannot create a directory in pinpoint's temporary directory")?;
        *at = own.join(&name);
        build.stage(at)?;
    }
    let setup = Setup {
        valgrind: &valgrind,
        metric: request.metric,
        dir: dir.path(),
        staged: [&staged[0], &staged[1]],
    };
    let mut outputs: super::Outputs = [None, None];
    let mut repeated = None;
    let mut from = 0;
    if let Runs::UnlessRepeated(_) = request.runs {
        // Run 0 of both builds and run 1 of the previous, at once.
        let [first, second, other] = side_by_side(
            &setup,
            [(&*previous, 0), (&*previous, 1), (&*current, 0)],
            &request.args,
            cancel,
        );
        for (k, result) in [(0, first), (0, second), (1, other)] {
            let (costs, printed) = result?;
            let build = if k == 0 {
                &mut *previous
            } else {
                &mut *current
            };
            build.runs.push(costs);
            outputs[k].get_or_insert(printed.stdout);
        }
        if previous.runs[0] == previous.runs[1] {
            // Counts that repeat exactly: the second run adds nothing.
            previous.runs.truncate(1);
            return Ok((outputs, Some(true)));
        }
        let (costs, _) = measure(&setup, current, &request.args, 1, cancel)?;
        current.runs.push(costs);
        (from, repeated) = (2, Some(false));
    }
    for i in from..request.runs.most() {
        let [p, c] = side_by_side(
            &setup,
            [(&*previous, i), (&*current, i)],
            &request.args,
            cancel,
        );
        for (build, k, result) in [(&mut *previous, 0, p), (&mut *current, 1, c)] {
            let (costs, printed) = result?;
            build.runs.push(costs);
            outputs[k].get_or_insert(printed.stdout);
        }
    }
    Ok((outputs, repeated))
}

/// The runs `(build, index)` at once, one thread each, their results in order.
fn side_by_side<const N: usize>(
    setup: &Setup<'_>,
    runs: [(&Build, usize); N],
    args: &[OsString],
    cancel: &Cancel,
) -> [anyhow::Result<(Costs, Printed)>; N] {
    std::thread::scope(|scope| {
        let started =
            runs.map(|(build, i)| scope.spawn(move || measure(setup, build, args, i, cancel)));
        started.map(|run| {
            run.join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("a valgrind run's thread panicked")))
        })
    })
}

/// Where and how a build runs: valgrind, what it measures, the directory of the run's
/// files, and the path each build is run from (previous, current; see [`run_builds`]).
pub struct Setup<'a> {
    /// The valgrind executable.
    pub valgrind: &'a Path,
    /// What is counted.
    pub metric: Metric,
    /// Where profiles, logs and outputs go.
    pub dir: &'a Path,
    /// Where each build was put ([`Build::stage`]): the previous, the current.
    pub staged: [&'a Path; 2],
}

impl Setup<'_> {
    /// The path `build` runs from.
    fn staged(&self, build: &Build) -> &Path {
        match build.side {
            Side::Previous => self.staged[0],
            Side::Current => self.staged[1],
        }
    }
}

/// Run `build`, staged at its path of `setup.staged`, once under valgrind with `args`: the run's
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
        ..
    } = *setup;
    let staged = setup.staged(build);
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
            let own = own_object(&profile.objects, setup.staged(build)).with_context(|| {
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
