//! From a [`Request`] to a [`Plan`]: find the programs, list harness benchmarks, check
//! the controls, and give every benchmark its groups of runs.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::groups::{benchmark_groups, refuse_credential_change};
use super::{
    bench_binary, BenchmarkSpec, Controls, HarnessTarget, Plan, Point, Request, Schedule, Target,
};
use crate::run::hooks::{Hook, Hooks};
use crate::run::runner::RunConfig;

/// The most runs (warm-up included) a group may ask for: far beyond any useful series,
/// and far below where counting them could overflow.
pub const MAX_RUNS: usize = 1_000_000_000;

/// `PATH` of a clean environment (`--clean-env`).
pub const CLEAN_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Validate the request and build the plan.
pub fn build(request: Request) -> anyhow::Result<Plan> {
    let Controls {
        runs,
        warmup,
        target,
        ..
    } = request.controls;
    if let Some(t) = target {
        if t.max_runs < runs {
            bail!(
                "--max-runs {} is below --min-runs/--runs {runs}; give a maximum at least as large",
                t.max_runs
            );
        }
        if t.max_runs.checked_add(warmup).is_none_or(|n| n > MAX_RUNS) {
            bail!(
                "--max-runs {} is more than {MAX_RUNS} runs per group",
                t.max_runs
            );
        }
    }
    if runs.checked_add(warmup).is_none_or(|n| n > MAX_RUNS) {
        bail!(
            "--runs {runs} with --warmup {warmup} is more than {MAX_RUNS} runs per group; \
             measure with fewer (a few dozen runs already give a tight interval)"
        );
    }
    if let Some(input) = &request.controls.input {
        use std::os::unix::fs::FileTypeExt;
        let unreadable = || {
            format!(
                "--input {}: cannot be read; check the path",
                input.display()
            )
        };
        let kind = std::fs::metadata(input)
            .with_context(unreadable)?
            .file_type();
        if kind.is_dir() {
            bail!("--input {}: is a directory; give a file", input.display());
        }
        if kind.is_fifo() {
            // Not opened: that would wait for a writer, or end the session of one that
            // waits for a reader before any run reads it. Each run opens it.
            nix::unistd::access(input.as_path(), nix::unistd::AccessFlags::R_OK)
                .with_context(unreadable)?;
        } else {
            std::fs::File::open(input).with_context(unreadable)?;
        }
    }
    let mut benchmarks = Vec::new();
    let values: Vec<Option<&String>> = match &request.scan {
        Some(scan) => scan.values.iter().map(Some).collect(),
        None => vec![None],
    };
    for value in values {
        for target in &request.targets {
            let point = value
                .zip(request.scan.as_ref())
                .map(|(v, scan)| (scan.parameter.as_str(), v.as_str()));
            match target {
                Target::Command { argv, name } => {
                    benchmarks.push(command_benchmark(&request, argv, name.as_deref(), point)?)
                }
                Target::Harness(h) => benchmarks.extend(harness_benchmarks(&request, h, point)?),
            }
        }
    }
    let controls = request.controls;
    Ok(Plan {
        benchmarks,
        schedule: Schedule {
            runs: controls.runs,
            warmup: controls.warmup,
            confidence: controls.confidence,
            failure: controls.failure,
            clean_env: controls.clean_env,
            progress: controls.progress,
            target: controls.target,
            jobs: controls.jobs,
        },
    })
}

/// The hooks of a scan point: `{NAME}` replaced by its value in each command.
fn hooks_at(hooks: &Hooks, point: Option<&Point>) -> Hooks {
    let Some(point) = point else {
        return hooks.clone();
    };
    let placeholder = format!("{{{}}}", point.parameter);
    let at = |hook: &Option<Hook>| {
        hook.clone().map(|h| Hook {
            command: h.command.replace(&placeholder, &point.value),
            ..h
        })
    };
    Hooks {
        setup: at(&hooks.setup),
        prepare: at(&hooks.prepare),
        cleanup: at(&hooks.cleanup),
    }
}

/// `{NAME}` replaced by `value` in every word of `argv`; an error when no word has it.
fn substitute(argv: &[OsString], parameter: &str, value: &str) -> anyhow::Result<Vec<OsString>> {
    let placeholder = format!("{{{parameter}}}");
    let mut found = false;
    let out = argv
        .iter()
        .map(|w| {
            let text = w.to_string_lossy();
            if text.contains(&placeholder) {
                found = true;
                OsString::from(text.replace(&placeholder, value))
            } else {
                w.clone()
            }
        })
        .collect();
    if !found {
        bail!(
            "the scanned parameter `{parameter}` appears nowhere in the command; write \
             {placeholder} where its value goes, e.g. -- ./bench --size {placeholder}"
        );
    }
    Ok(out)
}

fn command_benchmark(
    request: &Request,
    template: &[OsString],
    name: Option<&str>,
    point: Option<(&str, &str)>,
) -> anyhow::Result<BenchmarkSpec> {
    let text = |argv: &[OsString]| {
        argv.iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let series = name.map(str::to_string).unwrap_or_else(|| text(template));
    let (argv, name, point) = match point {
        Some((parameter, value)) => {
            let argv = substitute(template, parameter, value)?;
            let name = match name {
                Some(n) if n.contains(&format!("{{{parameter}}}")) => {
                    n.replace(&format!("{{{parameter}}}"), value)
                }
                Some(n) => format!("{n} [{parameter}={value}]"),
                None => text(&argv),
            };
            let point = Point {
                series,
                parameter: parameter.to_string(),
                value: value.to_string(),
            };
            (argv, Some(name), Some(point))
        }
        None => (template.to_vec(), name.map(str::to_string), None),
    };
    let argv = &argv[..];
    let name = name.as_deref();
    let Some(program) = argv.first() else {
        bail!("no command given; usage: sbs-profile [OPTIONS] -- COMMAND [ARGS...]");
    };
    let env = child_env(&request.controls);
    let path_var = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_os_str());
    let resolved = resolve_program(program, path_var)?;
    let name = name.map(str::to_string).unwrap_or_else(|| {
        argv.iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    });
    let run = run_config(&request.controls, resolved, argv.to_vec(), env)?;
    refuse_credential_change(&request.measures, &run)?;
    let groups = benchmark_groups(&request.measures, None)?;
    Ok(BenchmarkSpec {
        name,
        run,
        groups,
        hooks: hooks_at(&request.controls.hooks, point.as_ref()),
        point,
    })
}

/// One benchmark per harness benchmark selected, each in its own child processes
/// (`BINARY --sbs-run NAME`), run interleaved like commands of `compare`.
/// A scan point gives every benchmark `--param NAME=VALUE` and a name of its own.
fn harness_benchmarks(
    request: &Request,
    h: &HarnessTarget,
    point: Option<(&str, &str)>,
) -> anyhow::Result<Vec<BenchmarkSpec>> {
    let mut params = h.params.clone();
    if let Some((parameter, value)) = point {
        if params
            .iter()
            .any(|p| p.split_once('=').is_some_and(|(k, _)| k == parameter))
        {
            bail!("--param {parameter}=... and a scan of {parameter} were both given; drop one");
        }
        params.push(format!("{parameter}={value}"));
    }
    let h = &HarnessTarget {
        params,
        ..h.clone()
    };
    if h.samples < 2 {
        bail!(
            "--samples {}: at least 2 measurements are needed",
            h.samples
        );
    }
    let exe = bench_binary::locate(&h.binary)?;
    let listed = bench_binary::list(&exe, &h.filters, &h.env())?;
    let listed = match &h.replay {
        Some(source) => super::replay::select(source, &exe, listed)?,
        None => listed,
    };
    bench_binary::check_params(&h.params, &listed)?;
    let mut env = child_env(&request.controls);
    for (k, v) in h.env() {
        env.retain(|(ek, _)| *ek != k);
        env.push((k, v));
    }
    let mut benchmarks = Vec::new();
    for l in listed {
        let child_args =
            bench_binary::child_args(&exe, &l.name, &h.params, h.samples, &h.harness_args);
        let run = run_config(&request.controls, exe.clone(), child_args, env.clone())?;
        let probes = l.size_probes(&h.params);
        refuse_credential_change(&request.measures, &run)?;
        let groups = benchmark_groups(&request.measures, Some((&l.name, &probes)))?;
        let (name, point) = match point {
            Some((parameter, value)) => (
                format!("{} [{parameter}={value}]", l.name),
                Some(Point {
                    series: l.name,
                    parameter: parameter.to_string(),
                    value: value.to_string(),
                }),
            ),
            None => (l.name, None),
        };
        benchmarks.push(BenchmarkSpec {
            name,
            run,
            groups,
            hooks: hooks_at(&request.controls.hooks, point.as_ref()),
            point,
        });
    }
    Ok(benchmarks)
}

/// Find the program the way `execvp` would, with a message that says what to fix.
pub fn resolve_program(program: &OsStr, path_var: Option<&OsStr>) -> anyhow::Result<PathBuf> {
    let shown = Path::new(program).display().to_string();
    if program.as_encoded_bytes().contains(&b'/') {
        let path = PathBuf::from(program);
        let meta = std::fs::metadata(&path).with_context(|| {
            format!("command not found: '{shown}' does not exist; check the path")
        })?;
        if meta.is_dir() {
            bail!("'{shown}' is a directory, not a program");
        }
        if meta.permissions().mode() & 0o111 == 0 {
            bail!(
                "'{shown}' is not executable (mode {:o}); run `chmod +x {shown}`",
                meta.permissions().mode() & 0o777
            );
        }
        return Ok(path);
    }
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    which::which_in(program, path_var, cwd).map_err(|_| {
        if shown.split_whitespace().nth(1).is_some() {
            // `sbs-profile 'sleep 0.1'`: one argument holding a whole command line.
            let words = shown.split_whitespace().collect::<Vec<_>>().join(" ");
            anyhow::anyhow!(
                "command not found: '{shown}' is one argument; give the command's words after \
                 `--` (sbs-profile -- {words}), or run the line through a shell with --shell sh"
            )
        } else {
            anyhow::anyhow!(
                "command not found: '{shown}' is not an executable in PATH; give its path (e.g. ./{shown}) or fix PATH"
            )
        }
    })
}

fn available_cpus() -> Vec<usize> {
    match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        Ok(set) => (0..nix::sched::CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn child_env(controls: &Controls) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = if controls.clean_env {
        vec![("PATH".into(), CLEAN_PATH.into())]
    } else {
        std::env::vars_os().collect()
    };
    for (k, v) in &controls.env {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    env
}

fn run_config(
    controls: &Controls,
    program: PathBuf,
    argv: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
) -> anyhow::Result<RunConfig> {
    if !controls.pin.is_empty() {
        let cpus = available_cpus();
        if let Some(bad) = controls.pin.iter().find(|c| !cpus.contains(c)) {
            bail!("--pin {bad}: no such CPU available to this process (available: {cpus:?})");
        }
    }
    Ok(RunConfig {
        program,
        args: argv,
        env,
        show_output: controls.show_output,
        disable_aslr: !controls.aslr,
        cpus: controls.pin.clone(),
        timeout: controls.timeout,
        input: controls.input.clone(),
    })
}
