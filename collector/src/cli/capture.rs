//! `sbs-profile capture [--calls N] -- PROGRAM ARGS`: run an application once, as it runs
//! alone (its output and exit code pass through), with the allocation agent loaded and
//! the variables that make its `#[sbs_harness::capture]` functions record their calls;
//! then move each function's capture into the captures directory and say what was kept.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context};
use sbs_agent_abi::harness::capture::{DEFAULT_DIR, ENV_CAPTURE, ENV_CAPTURE_CALLS};

use crate::plan::replay;
use crate::run::instruments::alloc::ReportFile;

/// Calls kept per function unless `--calls` says.
pub const DEFAULT_CALLS: u64 = 300;

/// `capture`'s options.
#[derive(Debug, clap::Args)]
pub struct CaptureArgs {
    /// Calls kept per marked function: a uniform sample of all its calls in the run
    /// (reservoir sampling), not the first ones.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_CALLS,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub calls: u64,

    /// The captures directory, one subdirectory per function.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DIR)]
    pub out: PathBuf,

    /// Replace the captures of the functions this run captures again (the others stay).
    /// Without it, a captures directory that already holds captures is refused.
    #[arg(long)]
    pub force: bool,

    /// The application and its arguments (after `--`).
    #[arg(value_name = "PROGRAM", trailing_var_arg = true, required = true)]
    pub command: Vec<OsString>,
}

/// Run the capture; the exit code is the program's.
pub fn execute(args: &CaptureArgs) -> anyhow::Result<ExitCode> {
    let Some(program) = args.command.first() else {
        bail!("no program given; usage: sbs-profile capture [--calls N] -- PROGRAM [ARGS...]");
    };
    let path_var = std::env::var_os("PATH");
    let exe = crate::plan::resolve_program(program, path_var.as_deref())?;
    let out = &args.out;
    if out.exists() && !out.is_dir() {
        bail!("--out {}: is not a directory", out.display());
    }
    if out.is_dir() && !args.force {
        let held = replay::captures(out)?;
        if !held.is_empty() {
            let names: Vec<&str> = held.iter().map(|c| c.meta.function.as_str()).collect();
            bail!(
                "{} already holds captures ({}); pass --force to replace those this run \
                 captures again, or --out DIR for a new directory",
                out.display(),
                names.join(", ")
            );
        }
    }
    std::fs::create_dir_all(out)
        .with_context(|| format!("cannot create the captures directory {}", out.display()))?;
    // Written beside the captures, then moved: a run that fails to write leaves the
    // directory as it was.
    let staging = tempfile::Builder::new()
        .prefix(".sbs-capture-")
        .tempdir_in(out)
        .with_context(|| format!("cannot create a directory in {}", out.display()))?;
    let report = ReportFile::new().context("cannot set up the allocation agent")?;
    let library = report
        .agent_library()
        .context("cannot set up the allocation agent")?;
    let preload = library.ld_preload(std::env::var_os("LD_PRELOAD").as_deref());
    let status = Command::new(&exe)
        .args(&args.command[1..])
        .env("LD_PRELOAD", preload)
        .env(ENV_CAPTURE, staging.path())
        .env(ENV_CAPTURE_CALLS, args.calls.to_string())
        .status()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    drop(library);
    let moved = move_captures(staging.path(), out, args.force)?;
    let mut err = std::io::stderr().lock();
    if moved.is_empty() {
        let _ = writeln!(
            err,
            "sbs-profile capture: nothing captured: {} called no function marked \
             #[sbs_harness::capture] (is it built with sbs-harness, and does this run reach them?)",
            exe.display()
        );
    } else {
        let _ = writeln!(err, "sbs-profile capture: into {}", out.display());
        let width = moved.iter().map(|m| m.function.len()).max().unwrap_or(0);
        for m in &moved {
            let _ = writeln!(
                err,
                "  {:width$}  {} calls seen, {} kept, {}",
                m.function,
                m.seen,
                m.kept,
                sbs_reports::human::bytes(m.bytes as f64),
            );
        }
    }
    Ok(exit_code(status))
}

/// What one function's capture holds.
struct Moved {
    function: String,
    seen: u64,
    kept: u64,
    bytes: u64,
}

/// Move each capture of `staging` into `out` (replacing one there only with `force`).
fn move_captures(staging: &Path, out: &Path, force: bool) -> anyhow::Result<Vec<Moved>> {
    let mut moved = Vec::new();
    for c in replay::captures(staging)? {
        let name = c
            .dir
            .file_name()
            .context("a capture directory without a name")?
            .to_owned();
        let target = out.join(&name);
        if target.exists() {
            if !force {
                bail!(
                    "{} exists; pass --force to replace it, or --out DIR",
                    target.display()
                );
            }
            std::fs::remove_dir_all(&target)
                .with_context(|| format!("cannot replace {}", target.display()))?;
        }
        let bytes = dir_bytes(&c.dir);
        std::fs::rename(&c.dir, &target)
            .with_context(|| format!("cannot move {} to {}", c.dir.display(), target.display()))?;
        moved.push(Moved {
            function: c.meta.function,
            seen: c.meta.calls_seen,
            kept: c.meta.calls_kept,
            bytes,
        });
    }
    Ok(moved)
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The program's exit code as ours: its code, or 128 + the signal that ended it.
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1)),
        (None, Some(signal)) => ExitCode::from(u8::try_from(128 + signal).unwrap_or(1)),
        (None, None) => ExitCode::from(1),
    }
}
