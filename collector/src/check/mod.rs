//! `--invocations-check DEBUG`: the counts of an optimised build checked, call line by
//! call line, against a build of the same source without optimisation, where every call
//! is a real call.
//!
//! Two runs with the benchmark's arguments, environment and directory:
//! 1. the measured program, counted once more with the invocations instrument as the
//!    measured runs were (same engines), keeping each site's count;
//! 2. `DEBUG` under callgrind, which counts every call per call instruction and callee
//!    (`calls=` lines). The calls of the functions the patterns match in `DEBUG` are
//!    summed by the source line of the calling instruction.
//!
//! The sites of the measured program are placed on source lines too: an inlined copy
//! on its call site (DWARF), a function's entry on the lines of the direct calls to it
//! (its callers' machine code, decoded, and the line table). [`compare`] joins them into
//! groups that must agree. Sites in shared libraries are not checked (both builds use
//! the same libraries), nor calls the debug build inlined itself (said in a note).

pub mod compare;
pub mod derive;

use std::cell::RefCell;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::Context;
use nix::unistd::Pid;
use sbs_probes::callgrind;
use sbs_probes::calls::{call_sites, CallTargets, Callee};
use sbs_probes::dwarf::{inlined_instances, lines_at};
use sbs_probes::elf::Image;
use sbs_probes::pattern::Pattern;
use sbs_probes::program::Program;
use sbs_probes::resolve::match_patterns;
use sbs_reports::model::InvocationCheck;

use crate::run::instrument::{ChildSetup, ExitKind, Instrument, RunOutcome, Sample};
use crate::run::instruments::invocations::{Invocations, Options, SiteCounts};
use crate::run::instruments::valgrind::ValgrindWrapper;
use crate::run::runner::{run_once, Cancel, RunConfig};
use crate::run::spec::{BenchmarkSpec, InstrumentSpec};
use compare::{Site, Truth};

/// What to check: the patterns, counted with `options`, against `debug`.
#[derive(Debug, Clone)]
struct CheckRequest {
    /// The build without optimisation.
    pub debug: PathBuf,
    /// The `--invocations` patterns, each once.
    pub patterns: Vec<String>,
    /// How the measured runs counted them.
    pub options: Options,
}

/// Check before any run that `debug` can be used: it exists and valgrind is installed.
pub fn preflight(debug: &Path) -> anyhow::Result<PathBuf> {
    let meta = std::fs::metadata(debug).with_context(|| {
        format!(
            "--invocations-check {}: cannot read it; give the program built without \
             optimisation (e.g. target/debug/NAME)",
            debug.display()
        )
    })?;
    anyhow::ensure!(
        meta.is_file(),
        "--invocations-check {}: not a file; give the program built without optimisation",
        debug.display()
    );
    sbs_probes::valgrind::find_valgrind().map_err(|e| {
        anyhow::anyhow!("--invocations-check counts the debug build's calls under callgrind: {e}")
    })
}

/// The check compares one program with its debug build: refuse benchmarks that run
/// several programs (`compare A B`), before the runs.
pub fn one_program<'a>(runs: impl Iterator<Item = &'a RunConfig>) -> anyhow::Result<()> {
    let mut programs: Vec<&Path> = runs.map(|r| r.program.as_path()).collect();
    programs.sort_unstable();
    programs.dedup();
    anyhow::ensure!(
        programs.len() <= 1,
        "--invocations-check compares one program with its build without optimisation, but \
         these benchmarks run {} programs ({}); check each program in a run of its own",
        programs.len(),
        programs
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

impl CheckRequest {
    /// What to check of the benchmark `spec` against `debug`: the patterns its
    /// invocations group counts, each once, counted as a command's runs count them (no
    /// harness region).
    fn of(spec: &BenchmarkSpec, debug: &Path) -> anyhow::Result<CheckRequest> {
        let counted = spec
            .groups
            .iter()
            .flat_map(|g| &g.instruments)
            .find_map(|i| match i {
                InstrumentSpec::Invocations { patterns, options } => Some((patterns, options)),
                _ => None,
            });
        let Some((patterns, options)) = counted else {
            anyhow::bail!(
                "--invocations-check checks the counts of --invocations: add --invocations PATTERN"
            );
        };
        Ok(CheckRequest {
            debug: debug.to_path_buf(),
            patterns: patterns.clone(),
            options: Options {
                region: false,
                ..*options
            },
        })
    }
}

/// Check every pattern the benchmark `spec` counts against the build without
/// optimisation `debug`.
pub fn check(
    spec: &BenchmarkSpec,
    debug: &Path,
    valgrind: &Path,
    cancel: &Cancel,
) -> anyhow::Result<Vec<InvocationCheck>> {
    let request = &CheckRequest::of(spec, debug)?;
    let run = &spec.run;
    let counts = count_sites(run, request, cancel)?;
    let release = Image::load(&run.program)?;
    let entry_lines = entry_lines(&release, &counts)?;
    let with_code = lines_with_code(&release, &request.patterns);
    let debug_run = RunConfig {
        program: request.debug.clone(),
        ..run.clone()
    };
    let (matched, debug) = debug_functions(&debug_run, request)?;
    let profile = callgrind_profile(&debug_run, valgrind, cancel)?;
    let debug_name = request.debug.display().to_string();
    let mut out = Vec::new();
    let mut derives = derive::Derives::default();
    for (k, (metric, rows)) in counts.patterns.iter().enumerate() {
        let mut sites = Vec::new();
        let mut in_libraries = 0usize;
        for (label, indices) in rows {
            for &i in indices {
                let s = &counts.sites[i];
                if s.image != 0 {
                    in_libraries += 1;
                    continue;
                }
                let lines = match s.entry {
                    Some(address) => entry_lines.get(&address).cloned().unwrap_or_default(),
                    None => s.call_lines.clone(),
                };
                let mut lines: Vec<String> = lines.iter().map(|l| derives.place(l)).collect();
                lines.sort();
                lines.dedup();
                let function = release.function_label(s.function);
                sites.push(Site {
                    row: label.clone(),
                    lines,
                    function,
                    count: s.count,
                    calls_per_pass: s.calls_per_pass,
                    may_continue: s.may_continue,
                    unbounded: s.unbounded,
                });
            }
        }
        let truth = by_place(
            truth(&profile, &debug, &matched[k].functions)?,
            &mut derives,
        );
        let inlined: HashSet<String> = matched[k]
            .inlined
            .iter()
            .map(|l| derives.place(l))
            .collect();
        let with_code: Option<HashSet<String>> = with_code[k]
            .as_ref()
            .map(|lines| lines.iter().map(|l| derives.place(l)).collect());
        let mut result = compare::compare(
            metric,
            &debug_name,
            &sites,
            &truth,
            &inlined,
            with_code.as_ref(),
        );
        if in_libraries > 0 {
            result.notes.push(format!(
                "{in_libraries} site(s) in shared libraries are not checked: both builds use \
                 the same libraries"
            ));
        }
        out.push(result);
    }
    Ok(out)
}

/// Count the measured program's sites once, as the measured runs did.
fn count_sites(
    run: &RunConfig,
    request: &CheckRequest,
    cancel: &Cancel,
) -> anyhow::Result<SiteCounts> {
    let env = |name: &str| {
        run.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_os_str())
    };
    let invocations = Invocations::new(
        &run.program,
        env("LD_LIBRARY_PATH"),
        env("LD_PRELOAD"),
        &request.patterns,
        Options {
            detail: true,
            ..request.options
        },
    )?;
    let kept = Rc::new(RefCell::new(None));
    let mut instruments: Vec<Box<dyn Instrument>> = vec![Box::new(KeepSites {
        inner: invocations,
        kept: kept.clone(),
    })];
    let (outcome, _) = run_once(run, &mut instruments, cancel)
        .context("--invocations-check: the counting run of the measured program failed")?;
    ensure_success(&run.program, outcome.exit, "")?;
    for i in &mut instruments {
        i.finish();
    }
    let counts = kept.borrow_mut().take();
    counts.context("internal error: the counting run kept no counts")
}

fn ensure_success(program: &Path, exit: ExitKind, how: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        exit.success(),
        "--invocations-check: {} {}{how}; both builds must run to completion with the \
         benchmark's arguments",
        program.display(),
        exit.ended()
    );
    Ok(())
}

/// The invocations instrument, keeping its per-site counts after the run.
struct KeepSites {
    inner: Invocations,
    kept: Rc<RefCell<Option<SiteCounts>>>,
}

impl Instrument for KeepSites {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn needs_start_latch(&self) -> bool {
        self.inner.needs_start_latch()
    }

    fn prepare(&mut self, setup: &mut ChildSetup) -> anyhow::Result<()> {
        self.inner.prepare(setup)
    }

    fn attach(&mut self, pid: Pid) -> anyhow::Result<()> {
        self.inner.attach(pid)
    }

    fn collect(&mut self, outcome: &RunOutcome, out: &mut Vec<Sample>) -> anyhow::Result<()> {
        self.inner.collect(outcome, out)?;
        *self.kept.borrow_mut() = Some(self.inner.site_counts());
        Ok(())
    }

    fn abort_run(&mut self) {
        self.inner.abort_run();
    }

    fn finish(&mut self) {
        self.inner.finish();
    }
}

/// The source lines of the direct calls (and tail calls) to each function entry counted
/// in the program: its callers' machine code decoded, and the line table.
fn entry_lines(image: &Image, counts: &SiteCounts) -> anyhow::Result<HashMap<u64, Vec<String>>> {
    let entries: HashSet<u64> = counts
        .sites
        .iter()
        .filter(|s| s.image == 0)
        .filter_map(|s| s.entry)
        .collect();
    if entries.is_empty() {
        return Ok(HashMap::new());
    }
    let targets = CallTargets::of(image)?;
    let mut calls: Vec<(u64, u64)> = Vec::new();
    for f in &image.functions {
        // Code that does not decode (data in a text section) has no calls to find.
        let Ok(sites) = call_sites(image, &targets, f) else {
            continue;
        };
        calls.extend(sites.into_iter().filter_map(|c| match c.callee {
            Callee::Local { address, .. } if entries.contains(&address) => {
                Some((c.address, address))
            }
            _ => None,
        }));
    }
    let data = image.dwarf_data().with_context(|| {
        format!(
            "--invocations-check: {} has no debug info to place its calls on source lines; \
             build it with debug info",
            image.path.display()
        )
    })?;
    let addresses: Vec<u64> = calls.iter().map(|c| c.0).collect();
    let lines = lines_at(data, &addresses)
        .map_err(|e| anyhow::anyhow!("--invocations-check: {}: {e}", image.path.display()))?;
    let mut out: HashMap<u64, Vec<String>> = HashMap::new();
    for (site, entry) in calls {
        if let Some(line) = lines.get(&site) {
            let at = out.entry(entry).or_default();
            if !at.contains(line) {
                at.push(line.clone());
            }
        }
    }
    Ok(out)
}

/// Per pattern, the call lines of the measured program's inlined copies that have code
/// (DWARF): at any other line, the release build has nothing of the function to count
/// (copies optimised away, with or without a trace in DWARF: the clone of a zero-sized
/// allocator inside `Arc::clone` leaves none). `None` when its DWARF cannot be read.
fn lines_with_code(image: &Image, patterns: &[String]) -> Vec<Option<HashSet<String>>> {
    let data = image.dwarf_data();
    patterns
        .iter()
        .map(|p| {
            let pattern = Pattern::parse(p).ok()?;
            let found = inlined_instances(data?, &pattern).ok()?;
            Some(
                found
                    .into_iter()
                    .filter(|i| !i.ranges.is_empty())
                    .filter_map(|i| i.call_line)
                    .collect(),
            )
        })
        .collect()
}

/// What the debug build has of one pattern.
struct DebugMatch {
    /// The start addresses of the functions it matches in the program.
    functions: HashSet<u64>,
    /// The call lines of the copies that build inlined itself (code compiled with
    /// optimisation: the standard library's), whose calls callgrind cannot see.
    inlined: HashSet<String>,
}

/// Per pattern, what the debug build has of it; and its program's image (read once,
/// for the lines of the calls callgrind counts).
fn debug_functions(
    debug: &RunConfig,
    request: &CheckRequest,
) -> anyhow::Result<(Vec<DebugMatch>, Image)> {
    let ld_library_path = debug
        .env
        .iter()
        .find(|(k, _)| k == "LD_LIBRARY_PATH")
        .map(|(_, v)| v.as_os_str());
    let mut target = Program::load(&debug.program, ld_library_path)?;
    let matches = match_patterns(&mut target, &request.patterns, request.options.max_probes)
        .with_context(|| format!("--invocations-check {}", debug.program.display()))?;
    let exe = target.exe();
    let matched = matches
        .iter()
        .map(|m| DebugMatch {
            functions: m
                .functions
                .iter()
                .filter(|f| f.image == 0)
                .filter_map(|f| exe.functions.iter().find(|g| g.offset == f.offset))
                .map(|g| g.address)
                .collect(),
            inlined: m
                .sites
                .iter()
                .filter(|s| s.image == 0)
                .filter_map(|s| s.call_line.clone())
                .collect(),
        })
        .collect();
    Ok((matched, target.images.swap_remove(0)))
}

/// One run of the debug build under callgrind, and its profile.
fn callgrind_profile(
    debug: &RunConfig,
    valgrind: &Path,
    cancel: &Cancel,
) -> anyhow::Result<callgrind::Profile> {
    let dir = tempfile::Builder::new()
        .prefix("sbs-check-")
        .tempdir()
        .context("cannot create a temporary directory for callgrind's profile")?;
    let out_file = dir.path().join("callgrind.out");
    let log_file = dir.path().join("valgrind.log");
    let wrapper = callgrind::profile_wrapper(valgrind, &out_file, &log_file);
    let mut instruments: Vec<Box<dyn Instrument>> =
        vec![Box::new(ValgrindWrapper::new(wrapper, None))];
    let (outcome, _) = run_once(debug, &mut instruments, cancel).with_context(|| {
        format!(
            "--invocations-check: cannot run {} under callgrind",
            debug.program.display()
        )
    })?;
    let log = std::fs::read_to_string(&log_file).unwrap_or_default();
    let hint = sbs_probes::valgrind::log_hint(&log)
        .map(|m| format!(" under callgrind (valgrind: {m})"))
        .unwrap_or_else(|| " under callgrind".to_string());
    ensure_success(&debug.program, outcome.exit, &hint)?;
    let text = std::fs::read_to_string(&out_file).with_context(|| {
        format!(
            "--invocations-check: callgrind wrote no profile for {}",
            debug.program.display()
        )
    })?;
    callgrind::parse(&text).with_context(|| {
        format!(
            "--invocations-check: cannot read callgrind's profile {}",
            out_file.display()
        )
    })
}

/// `truth` with each line read as the place it belongs to (the lines of a derived item
/// as one: [`derive`]).
fn by_place(truth: Truth, derives: &mut derive::Derives) -> Truth {
    let mut out = Truth {
        without_line: truth.without_line,
        ..Truth::default()
    };
    for (line, n) in truth.by_line {
        *out.by_line.entry(derives.place(&line)).or_default() += n;
    }
    for (line, function) in truth.function_of {
        out.function_of
            .entry(derives.place(&line))
            .or_insert(function);
    }
    out
}

/// The calls the debug build made to `functions` (start addresses in its program), by
/// the source line of the calling instruction.
fn truth(
    profile: &callgrind::Profile,
    debug: &Image,
    functions: &HashSet<u64>,
) -> anyhow::Result<Truth> {
    let is_program = |object: &str| {
        Path::new(object)
            .canonicalize()
            .is_ok_and(|p| p == debug.path)
    };
    let mut names: HashMap<String, bool> = HashMap::new();
    let mut program = |object: &str| match names.get(object) {
        Some(&is) => is,
        None => *names
            .entry(object.to_string())
            .or_insert(is_program(object)),
    };
    let mut calls: Vec<(u64, u64)> = Vec::new();
    let mut truth = Truth::default();
    for (arc, &n) in &profile.arcs {
        if !functions.contains(&arc.target) || !program(&arc.callee_object) {
            continue;
        }
        if program(&arc.caller_object) {
            calls.push((arc.site, n));
        } else {
            truth.without_line += n;
        }
    }
    let data = debug.dwarf_data().with_context(|| {
        format!(
            "--invocations-check {}: no debug info to place its calls on source lines; \
             build it with debug info",
            debug.path.display()
        )
    })?;
    let addresses: Vec<u64> = calls.iter().map(|c| c.0).collect();
    let lines = lines_at(data, &addresses)
        .map_err(|e| anyhow::anyhow!("--invocations-check {}: {e}", debug.path.display()))?;
    for (site, n) in calls {
        match lines.get(&site) {
            Some(line) => {
                *truth.by_line.entry(line.clone()).or_default() += n;
                if let Entry::Vacant(at) = truth.function_of.entry(line.clone()) {
                    if let Some(label) = debug.function_label(site) {
                        at.insert(label);
                    }
                }
            }
            None => truth.without_line += n,
        }
    }
    Ok(truth)
}
