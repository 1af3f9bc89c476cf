//! Invocation counts (`--invocations PATTERN`): how often the functions a pattern names
//! are called, exactly, in the child, its threads and its descendants. Inlined instances
//! of a matched function are counted too, at every entry point of each instance (see
//! `sbs_probes::entries`); their rows are labelled `[inlined, N sites]`, or one per site
//! with `--invocations-detail`.
//!
//! Two engines count a site ([`Engine`]): the in-process engine ([`inproc`]: the site is
//! redirected to a trampoline that increments a counter in shared memory, a few
//! nanoseconds per call) wherever patching is provably safe, and uprobes (a trap per
//! call, ~10 µs) for the others and where nothing can be preloaded. Each site is counted
//! by exactly one engine.
//!
//! Resolution (symbols, patterns, inlined instances, which engine counts which site)
//! happens when the plan is built, so a bad pattern fails before any run. The uprobes
//! are defined in tracefs before the first run and removed in `finish` (and by the probe
//! set's `Drop`); definitions left by a killed sbs-profile are removed before ours are
//! made.

mod cache;
mod cache_dir;
mod inproc;
mod sites;

use std::ffi::OsStr;
use std::path::Path;

use anyhow::bail;
use nix::unistd::Pid;
use sbs_probes::hits::{Anchors, RunCounters};
use sbs_probes::overlap::{plan, Candidate};
use sbs_probes::patch::{displace, Patch, PatchRefusal};
use sbs_probes::program::Program;
use sbs_probes::resolve::{match_patterns, PatternMatch};
use sbs_probes::tracefs::{ProbeSet, ProbeTarget, Tracefs};
use sbs_reports::model::CountRange;

use crate::run::instrument::{
    ChildSetup, ExitKind, InFlight, Instrument, RunAgain, RunOutcome, Sample,
};
use crate::run::instruments::following::Following;
use crate::run::region_fds::RegionSocket;
use inproc::{Inproc, InprocRun};
use sites::{PatternRows, Site};

/// The in-process counting library as embedded (for tests of its build).
#[cfg(test)]
pub(crate) fn inproc_library() -> &'static [u8] {
    inproc::INPROC_LIBRARY
}

/// Which engine counts the sites (`--invocations-engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Engine {
    /// In-process where a site can be patched safely, uprobes for the rest.
    #[default]
    Auto,
    /// In-process only: a site that cannot be patched is an error.
    Inproc,
    /// Uprobes only (root).
    Uprobe,
}

/// How the invocations are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Refuse a pattern that needs more sites than this.
    pub max_probes: usize,
    /// One row per inlined site instead of one per function.
    pub detail: bool,
    /// Which engine counts.
    pub engine: Engine,
    /// Count only inside a harness's measured region (uprobes only).
    pub region: bool,
    /// Where uprobes cannot be used, leave their sites out (a lower bound) instead of
    /// stopping (`--invocations-partial`).
    pub partial: bool,
}

/// Which engine counts one site, and its index among that engine's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    Inproc(usize),
    Uprobe(usize),
    /// Left out: it needs a uprobe, which cannot be used here (`--invocations-partial`).
    Skipped,
}

/// Counts calls of the functions named by patterns.
#[derive(Debug)]
pub struct Invocations {
    patterns: Vec<PatternRows>,
    /// How each site (index as in the rows) is counted.
    counted: Vec<Counted>,
    /// The uprobe engine's locations.
    targets: Vec<ProbeTarget>,
    warnings: Vec<String>,
    notes: Vec<(String, String)>,
    tracefs: Option<Tracefs>,
    inproc: Option<Inproc>,
    set: Option<ProbeSet>,
    anchors: Option<Anchors>,
    counters: Option<RunCounters>,
    /// Count only inside a harness's measured region (see [`crate::run::region_fds`]).
    region: Option<RegionSocket>,
    options: Options,
    /// Under `auto`, the uprobe of each site counted in-process (index as in the rows):
    /// what counts them in a program the in-process engine turns out unable to count.
    spare: Vec<(usize, ProbeTarget)>,
    /// Runs collected so far.
    runs: usize,
    /// Per site: the fewest and most calls one counted pass stands for (0 where it may
    /// continue a call counted elsewhere, more than 1 in an unrolled loop; else 1 and 1);
    /// `None` where its count may be off with no bound (an uncertain entry).
    per_pass: Vec<Option<(u64, u64)>>,
    /// Per pattern with such a site: the fewest and most calls its runs may have made.
    bounds: Vec<Option<(f64, f64)>>,
    /// Per pattern with such a site: the fewest and most calls its runs counted (they
    /// differ when the program's calls vary from run to run).
    totals: Vec<Option<(u64, u64)>>,
    /// Per pattern: whether its count may miss calls made before the in-process counting
    /// library started (its range then has no most).
    misses_start_up: Vec<bool>,
    /// Whether the kernel kept following every process the uprobes count in.
    following: Following,
    /// Per site, what a check against a debug build needs, with the last run's count.
    counted_sites: Vec<CountedSite>,
}

/// One counted site, as a check against a build without optimisation sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountedSite {
    /// Index of its file in the target's images (0: the program).
    pub image: usize,
    /// The function's address, for a function's entry; `None` inside a function (an
    /// inlined copy's entry point).
    pub entry: Option<u64>,
    /// The address of the function holding it.
    pub function: u64,
    /// Where the calls it counts were written (`file:line`), for an inlined copy.
    pub call_lines: Vec<String>,
    /// At most this many calls per counted pass (else 1).
    pub calls_per_pass: u64,
    /// A pass may continue a call counted at another site rather than start one.
    pub may_continue: bool,
    /// Its count may be off with no bound (an uncertain entry).
    pub unbounded: bool,
    /// Its count in the last run.
    pub count: u64,
}

/// A report row: its label, and the indices of the sites it sums.
pub type Row = (String, Vec<usize>);

impl CountedSite {
    /// A site as resolved, not counted yet.
    fn of(s: &Site) -> CountedSite {
        CountedSite {
            image: s.image,
            entry: (s.kind == sbs_probes::patch::SiteKind::Entry).then_some(s.address),
            function: s.function,
            call_lines: s.call_lines.clone(),
            calls_per_pass: s.calls_per_pass,
            may_continue: s.may_continue,
            unbounded: s.unbounded,
            count: 0,
        }
    }
}

/// The sites of one run, and each pattern's rows over them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteCounts {
    pub sites: Vec<CountedSite>,
    /// Per pattern: its metric id and rows.
    pub patterns: Vec<(String, Vec<Row>)>,
}

impl Invocations {
    /// Resolve `patterns` against `program` (with the child's `LD_LIBRARY_PATH`) and
    /// decide which engine counts each site. `ld_preload` is the child's own
    /// `LD_PRELOAD`, kept after the counting library.
    pub fn new(
        program: &Path,
        ld_library_path: Option<&OsStr>,
        ld_preload: Option<&OsStr>,
        patterns: &[String],
        options: Options,
    ) -> anyhow::Result<Invocations> {
        let mut target = Program::load(program, ld_library_path)?;
        // With uprobes only, fail before any run (of any group) when they cannot be used.
        let mut tracefs = match options.engine {
            Engine::Uprobe => Some(Tracefs::open_or_mount()?),
            _ => None,
        };
        let cache = cache::SiteCache::new(
            program,
            ld_library_path,
            patterns,
            options.max_probes,
            options.detail,
        );
        let (match_warnings, sites, mut rows) = match cache.load(&mut target) {
            Some(resolved) => resolved,
            None => {
                let matches = match_patterns(&mut target, patterns, options.max_probes)?;
                let (sites, rows) = sites::sites_and_rows(&target, &matches, options.detail);
                let resolved = (match_warnings(&matches, options.detail), sites, rows);
                cache.store(&mut target, &resolved);
                resolved
            }
        };
        let mut warnings = target_warnings(&target);
        warnings.extend(match_warnings);
        let per_pass: Vec<Option<(u64, u64)>> = sites
            .iter()
            .map(|s| (!s.unbounded).then_some((u64::from(!s.may_continue), s.calls_per_pass)))
            .collect();
        not_exact_where_uncertain(&mut rows, &per_pass);
        let Engines {
            mut counted,
            inproc,
            mut targets,
            fallback,
            shared,
            spare,
        } = choose_engines(program, &target, &sites, options, ld_preload)?;
        let mut notes = Vec::new();
        if !targets.is_empty() && tracefs.is_none() {
            match Tracefs::open_or_mount() {
                Ok(t) => tracefs = Some(t),
                Err(e) => {
                    let left = without_uprobes(&sites, &counted, &fallback, options, e)?;
                    notes = leave_out(&mut rows, &mut counted, &left);
                    targets.clear();
                }
            }
        }
        notes.extend(label_engines(
            &mut rows, &counted, &fallback, &shared, options,
        ));
        let early = not_exact_before_start_up(&mut rows, &counted, &sites, &target);
        // Calls made before the counting library starts: nothing bounds them.
        let misses_start_up: Vec<bool> = rows
            .iter()
            .map(|p| early.iter().any(|(id, _)| *id == p.metric.id))
            .collect();
        notes.extend(early);
        let rows_len = rows.len();
        Ok(Invocations {
            patterns: rows,
            counted,
            targets,
            warnings,
            notes,
            tracefs,
            inproc,
            set: None,
            anchors: None,
            counters: None,
            region: options
                .region
                .then(|| RegionSocket::new(sbs_agent_abi::harness::REGION_SOCKET_UPROBES)),
            options,
            spare,
            runs: 0,
            bounds: vec![None; rows_len],
            totals: vec![None; rows_len],
            misses_start_up,
            following: Following::default(),
            counted_sites: sites.iter().map(CountedSite::of).collect(),
            per_pass,
        })
    }

    /// Every site with its count in the last run, and the patterns' rows over them.
    pub fn site_counts(&self) -> SiteCounts {
        SiteCounts {
            sites: self.counted_sites.clone(),
            patterns: self
                .patterns
                .iter()
                .map(|p| (p.metric.id.clone(), p.rows.clone()))
                .collect(),
        }
    }

    /// The metric source of every pattern: `inproc`, `uprobe` or `inproc+uprobe`.
    pub fn source(&self) -> String {
        let mut s: Vec<&str> = self
            .patterns
            .iter()
            .map(|p| p.metric.source.as_str())
            .collect();
        s.sort_unstable();
        s.dedup();
        match s.as_slice() {
            [one] => one.to_string(),
            _ => "inproc+uprobe".into(),
        }
    }

    /// The probe set, defined on first use (before the first run).
    fn define(&mut self) -> anyhow::Result<Option<&ProbeSet>> {
        if self.targets.is_empty() {
            return Ok(None);
        }
        let set = match self.set.take() {
            Some(set) => set,
            None => {
                let Some(tracefs) = &self.tracefs else {
                    bail!("internal error: uprobe sites without tracefs");
                };
                tracefs.clean_stale()?;
                // Hundreds of probes take a while: a Ctrl-C stops them at once (the partial
                // set removes itself) and the runner reports the interruption.
                let stop = crate::run::runner::interrupt_requested;
                let set = ProbeSet::define(tracefs, &self.targets, &stop)?;
                self.anchors = Some(Anchors::open(&set, &stop)?);
                set
            }
        };
        Ok(Some(self.set.insert(set)))
    }
}

/// Warnings about the program and its libraries.
fn target_warnings(target: &Program) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(script) = &target.script {
        warnings.push(format!(
            "{} is a script: probing its interpreter {}",
            script.display(),
            target.exe().path.display()
        ));
    }
    if !target.libraries.missing.is_empty() {
        warnings.push(format!(
            "libraries of {} not found, so not probed (set LD_LIBRARY_PATH with --env?): {}",
            target.exe().file_name(),
            target.libraries.missing.join(", ")
        ));
    }
    warnings
}

/// Warnings about what the patterns' resolution could not see; with `detail`, also the
/// dynamic loader's own inlined copies, which are not the program's calls (said only
/// when asked: they are in every dynamically linked program).
fn match_warnings(matches: &[PatternMatch], detail: bool) -> Vec<String> {
    let mut warnings = Vec::new();
    for m in matches {
        warnings.extend(m.inlined_warnings());
        if let (true, Some((loader, n))) = (detail, &m.in_loader) {
            warnings.push(format!(
                "`{}`: {n} inlined copies inside the dynamic loader {loader} are not counted: \
                 the loader's own code, run while it loads the program, not calls of the program",
                m.pattern.as_str()
            ));
        }
        for e in &m.dwarf_errors {
            warnings.push(format!(
                "`{}`: inlined instances unknown, DWARF unreadable: {e}",
                m.pattern.as_str()
            ));
        }
    }
    warnings
}

/// Which engine counts each site.
struct Engines {
    /// Per site (index as in the rows).
    counted: Vec<Counted>,
    /// The in-process engine, if it counts any site.
    inproc: Option<Inproc>,
    /// The uprobe engine's locations.
    targets: Vec<ProbeTarget>,
    /// Sites left to uprobes and why (`usize::MAX`: all of them).
    fallback: Vec<(usize, PatchRefusal)>,
    /// Per site: counted by the patch of another site, whose displaced bytes hold it.
    shared: Vec<bool>,
    /// Under `auto`, the uprobe of each site counted in-process.
    spare: Vec<(usize, ProbeTarget)>,
}

/// Decide the engine of every site: in-process where it is available and the site can
/// be patched safely (or an error under `--invocations-engine inproc`), uprobes for the
/// rest.
fn choose_engines(
    program: &Path,
    target: &Program,
    sites: &[Site],
    options: Options,
    ld_preload: Option<&OsStr>,
) -> anyhow::Result<Engines> {
    let mut fallback: Vec<(usize, PatchRefusal)> = Vec::new();
    let mut inproc = None;
    let mut counter_of = vec![None; sites.len()];
    let mut shared = vec![false; sites.len()];
    match inproc_unavailable(program, options) {
        Some(why) if options.engine == Engine::Inproc => {
            bail!("--invocations-engine inproc cannot count here: {why}; use --invocations-engine uprobe (root)")
        }
        Some(why) if !why.is_empty() => {
            fallback.push((usize::MAX, PatchRefusal::Unavailable { why }))
        }
        Some(_) => {}
        None => {
            inproc = patch_sites(
                target,
                sites,
                ld_preload,
                &mut counter_of,
                &mut shared,
                &mut fallback,
            )?;
            if let (Engine::Inproc, Some((k, why))) = (options.engine, fallback.first()) {
                let s = &sites[*k];
                bail!(
                    "--invocations-engine inproc: {} at {}:0x{:x} cannot be patched safely: {why}; \
                     --invocations-engine auto counts such sites with uprobes (root)",
                    s.what,
                    s.path.display(),
                    s.address
                );
            }
        }
    }
    let mut targets: Vec<ProbeTarget> = Vec::new();
    let mut spare = Vec::new();
    let uprobe = |s: &Site| ProbeTarget {
        path: s.path.clone(),
        offset: s.uprobe_offset,
        what: s.what.clone(),
    };
    let counted = sites
        .iter()
        .zip(counter_of)
        .enumerate()
        .map(|(i, (s, c))| match c {
            Some(k) => {
                if options.engine == Engine::Auto {
                    spare.push((i, uprobe(s)));
                }
                Counted::Inproc(k)
            }
            None => {
                targets.push(uprobe(s));
                Counted::Uprobe(targets.len() - 1)
            }
        })
        .collect();
    Ok(Engines {
        counted,
        inproc,
        targets,
        fallback,
        shared,
        spare,
    })
}

/// Why the in-process engine cannot count at all (empty: uprobes were asked for), or
/// `None` when it can.
fn inproc_unavailable(program: &Path, options: Options) -> Option<String> {
    match options.engine {
        Engine::Uprobe => Some(String::new()),
        _ if options.region => {
            Some("it cannot count inside a harness's measured region (uprobes can)".to_string())
        }
        _ => crate::run::instruments::alloc::preflight(program)
            .err()
            .map(|e| format!("it needs LD_PRELOAD: {e}")),
    }
}

/// The note of a pattern whose runs made between `low` and `high` calls: `why` the
/// counted passes bound the calls rather than count them (empty: they count them), with
/// `some_unbounded` sites left out of the bound and the totals that `varied` from run to
/// run.
fn bound_note((low, high): (f64, f64), some_unbounded: bool, why: &[&str], varied: bool) -> String {
    let mut reasons: Vec<&str> = why.to_vec();
    if varied {
        reasons.push("the program made a different number of calls from run to run");
    }
    if reasons.is_empty() {
        reasons.push("the runs' counts differ");
    }
    format!(
        "not exact: each run made between {} and {} calls{} ({}{})",
        sbs_reports::human::count(low),
        sbs_reports::human::count(high),
        if some_unbounded {
            " as far as its other sites bound them"
        } else {
            ""
        },
        reasons.join("; "),
        if why.is_empty() {
            ""
        } else {
            "; rows marked uncertain"
        }
    )
}

/// A pattern with a site whose counted pass may stand for several calls (an unrolled
/// loop) or for none (shared code a counted call may continue into), or whose entries are
/// uncertain, is never compared as an exact count.
fn not_exact_where_uncertain(rows: &mut [PatternRows], per_pass: &[Option<(u64, u64)>]) {
    for p in rows.iter_mut() {
        if p.sites().iter().any(|&i| per_pass[i] != Some((1, 1))) {
            p.metric.exact = false;
        }
    }
}

/// Encode the trampolines of the sites that can be patched safely: each counted site's
/// counter goes in `counter_of` (and `shared` says whether the patch of another site
/// counts it), each other one's reason in `fallback`. Sites closer together than a patch
/// are planned together (`sbs_probes::overlap`): no two patches overlap, and no uprobe
/// lies inside a patch. `None` when no site could be patched.
fn patch_sites(
    target: &Program,
    sites: &[Site],
    ld_preload: Option<&OsStr>,
    counter_of: &mut [Option<usize>],
    shared: &mut [bool],
    fallback: &mut Vec<(usize, PatchRefusal)>,
) -> anyhow::Result<Option<Inproc>> {
    let mut patches: Vec<(usize, Patch)> = Vec::new();
    // Per patch, the sites it counts (indices as in `sites`), in the order of its counts.
    let mut counts: Vec<Vec<usize>> = Vec::new();
    let mut images: Vec<usize> = sites.iter().map(|s| s.image).collect();
    images.sort_unstable();
    images.dedup();
    let mut planned_fallback = Vec::new();
    for image in images {
        let img = &target.images[image];
        let which: Vec<usize> = (0..sites.len())
            .filter(|&k| sites[k].image == image)
            .collect();
        let candidates: Vec<Candidate> = which
            .iter()
            .map(|&k| {
                let s = &sites[k];
                Candidate {
                    address: s.address,
                    function: s.function,
                    kind: s.kind,
                    uprobe: img.address_of_offset(s.uprobe_offset).unwrap_or(s.address),
                    displaced: img
                        .functions
                        .iter()
                        .find(|f| f.address == s.function)
                        .ok_or(PatchRefusal::FunctionUnknown)
                        .and_then(|f| displace(img, f, s.address, s.kind)),
                    what: s.what.clone(),
                }
            })
            .collect();
        let plan = plan(&candidates);
        if let Err(e) = plan.check(&candidates) {
            bail!(
                "internal error: the in-process engine's plan for {} is not safe: {e}; \
                 count with --invocations-engine uprobe",
                img.path.display()
            );
        }
        planned_fallback.extend(plan.uprobes.into_iter().map(|(c, why)| (which[c], why)));
        for p in plan.patches {
            for &c in &p.sites[1..] {
                shared[which[c]] = true;
            }
            counts.push(p.sites.iter().map(|&c| which[c]).collect());
            patches.push((image, p.patch));
        }
    }
    planned_fallback.sort_by_key(|(k, _)| *k);
    fallback.extend(planned_fallback);
    if patches.is_empty() {
        return Ok(None);
    }
    let (engine, firsts, refused) = Inproc::build(target, &patches, ld_preload)?;
    for (n, first) in firsts.into_iter().enumerate() {
        for (j, &k) in counts[n].iter().enumerate() {
            counter_of[k] = first.map(|first| first + j);
        }
    }
    for (n, why) in refused {
        for &k in &counts[n] {
            shared[k] = false;
            fallback.push((k, why.clone()));
        }
    }
    Ok((!engine.is_empty()).then_some(engine))
}

/// Uprobes cannot be used here (`error` says why: not root, say). Without
/// `--invocations-partial`, or when no site is counted in-process, that stops the run
/// before it starts, naming the sites that need uprobes and what to do; with it, the
/// reason the uprobe sites are left out.
fn without_uprobes(
    sites: &[Site],
    counted: &[Counted],
    fallback: &[(usize, PatchRefusal)],
    options: Options,
    error: sbs_probes::error::ProbeError,
) -> anyhow::Result<String> {
    let needing: Vec<usize> = (0..counted.len())
        .filter(|&i| matches!(counted[i], Counted::Uprobe(_)))
        .collect();
    let in_process = counted.len() - needing.len();
    let mut reasons: Vec<(String, usize)> = Vec::new();
    for (k, why) in fallback {
        let n = match *k {
            usize::MAX => needing.len(),
            k if needing.contains(&k) => 1,
            _ => continue,
        };
        let general = why.general();
        match reasons.iter_mut().find(|(r, _)| *r == general) {
            Some((_, m)) => *m += n,
            None => reasons.push((general, n)),
        }
    }
    reasons.sort_by_key(|r| std::cmp::Reverse(r.1));
    let reasons: Vec<String> = reasons
        .iter()
        .take(2)
        .map(|(r, n)| format!("{n}: {r}"))
        .collect();
    let first = &sites[needing[0]];
    // A generic caller's name can run to hundreds of characters.
    let what: String = match first.what.chars().count() > 100 {
        true => first.what.chars().take(100).chain(['…']).collect(),
        false => first.what.clone(),
    };
    let which = format!(
        "{} of {} counted site(s) need a uprobe ({}; e.g. {what} at {}:0x{:x})",
        needing.len(),
        counted.len(),
        reasons.join("; "),
        first.path.display(),
        first.address
    );
    if !options.partial || in_process == 0 {
        let choice = match in_process {
            0 => String::new(),
            n => format!(
                "; or add --invocations-partial to count the other {n} in-process (a lower \
                 bound, not reported as exact)"
            ),
        };
        bail!("{which}, and uprobes cannot be used here: {error}{choice}");
    }
    Ok(format!(
        "{which}, and uprobes cannot be used here (not root)"
    ))
}

/// Leave the sites counted by uprobes out (`--invocations-partial`, uprobes unusable):
/// each metric that loses one becomes a lower bound, not exact, with a note saying so.
fn leave_out(
    rows: &mut [PatternRows],
    counted: &mut [Counted],
    why: &str,
) -> Vec<(String, String)> {
    let mut notes = Vec::new();
    for p in rows.iter_mut() {
        let all = p.sites();
        let left = all
            .iter()
            .filter(|&&i| matches!(counted[i], Counted::Uprobe(_)))
            .count();
        if left > 0 {
            p.metric.exact = false;
            notes.push((
                p.metric.id.clone(),
                format!(
                    "partial (--invocations-partial): a lower bound, {left} of its {} site(s) \
                     not counted; {why}",
                    all.len()
                ),
            ));
        }
    }
    for c in counted.iter_mut() {
        if matches!(c, Counted::Uprobe(_)) {
            *c = Counted::Skipped;
        }
    }
    notes
}

/// Set each pattern's source from the engines of its sites, mark each row's engine under
/// `--invocations-detail`, and return a note per pattern saying which engine counted how
/// many sites (and why sites were left to uprobes).
fn label_engines(
    rows: &mut [PatternRows],
    counted: &[Counted],
    fallback: &[(usize, PatchRefusal)],
    shared: &[bool],
    options: Options,
) -> Vec<(String, String)> {
    let engine_of = |indices: &[usize]| {
        let by = |uprobe: bool| {
            indices
                .iter()
                .filter(|&&i| match counted[i] {
                    Counted::Inproc(_) => !uprobe,
                    Counted::Uprobe(_) => uprobe,
                    Counted::Skipped => false,
                })
                .count()
        };
        match (by(false), by(true)) {
            (_, 0) => "inproc",
            (0, _) => "uprobe",
            _ => "inproc+uprobe",
        }
    };
    let mut notes = Vec::new();
    for p in rows.iter_mut() {
        let all = p.sites();
        p.metric.source = engine_of(&all).into();
        if options.detail {
            for (label, indices) in &mut p.rows {
                label.push_str(&format!(" [{}]", engine_of(indices)));
            }
        }
        // Nothing to say where the in-process engine was never an option, nor where
        // `leave_out` said what was counted.
        if options.engine == Engine::Uprobe
            || options.region
            || all.iter().any(|&i| counted[i] == Counted::Skipped)
        {
            continue;
        }
        let by_uprobe: Vec<usize> = all
            .iter()
            .copied()
            .filter(|&i| matches!(counted[i], Counted::Uprobe(_)))
            .collect();
        let by_neighbour = all.iter().filter(|&&i| shared[i]).count();
        let mut note = format!(
            "{} of {} site(s) counted in-process{}, {} by uprobe",
            all.len() - by_uprobe.len(),
            all.len(),
            match by_neighbour {
                0 => String::new(),
                n => format!(" ({n} through the patch of a site a few bytes before)"),
            },
            by_uprobe.len()
        );
        let mut reasons: Vec<(String, usize)> = Vec::new();
        for (k, why) in fallback {
            if *k != usize::MAX && !by_uprobe.contains(k) {
                continue;
            }
            let general = why.general();
            match reasons.iter_mut().find(|(r, _)| *r == general) {
                Some((_, n)) => *n += 1,
                None => reasons.push((general, 1)),
            }
        }
        reasons.sort_by_key(|r| std::cmp::Reverse(r.1));
        if !reasons.is_empty() {
            let listed: Vec<String> = reasons
                .iter()
                .take(3)
                .map(|(r, n)| {
                    if fallback.iter().any(|(k, _)| *k == usize::MAX) {
                        r.clone()
                    } else {
                        format!("{n}: {r}")
                    }
                })
                .collect();
            note.push_str(&format!(" ({})", listed.join("; ")));
        }
        notes.push((p.metric.id.clone(), note));
    }
    notes
}

/// The patterns with sites counted in-process that the program may run before the
/// counting library's constructor patches them are not exact (lower bounds), with a note
/// each. The library starts after the dynamic loader, libc's start-up and the
/// constructors of the libraries initialised before it (every library loaded at start:
/// a preloaded library is initialised after them), which may call into any of those
/// libraries, and into the program's exported functions (a library's call of `malloc`
/// goes to a program that defines its own). jq 1.6's `libjq` calls `malloc` from its
/// constructor: 21,587 counted against 21,588 made. Uprobes, which count from the exec,
/// count those calls. A library loaded at run time is patched before its constructors
/// run, and the program's own code runs after them: sites there stay exact.
fn not_exact_before_start_up(
    rows: &mut [PatternRows],
    counted: &[Counted],
    sites: &[Site],
    target: &Program,
) -> Vec<(String, String)> {
    let mut notes = Vec::new();
    for p in rows {
        let early = |i: usize| {
            let site = &sites[i];
            let Some(image) = target.images.get(site.image) else {
                return true;
            };
            if site.image != 0 {
                return !target.loaded_at_run_time(site.image);
            }
            image
                .functions
                .iter()
                .any(|f| f.address == site.function && f.exported)
        };
        let (in_libraries, exported) = p
            .sites()
            .iter()
            .filter(|&&i| matches!(counted[i], Counted::Inproc(_)) && early(i))
            .fold((0, 0), |(l, e), &i| match sites[i].image {
                0 => (l, e + 1),
                _ => (l + 1, e),
            });
        if in_libraries + exported == 0 {
            continue;
        }
        p.metric.exact = false;
        let mut places = Vec::new();
        if in_libraries > 0 {
            places.push(format!(
                "{in_libraries} site(s) in shared libraries loaded at start"
            ));
        }
        if exported > 0 {
            places.push(format!(
                "{exported} site(s) in functions the program exports (libraries may call them)"
            ));
        }
        notes.push((
            p.metric.id.clone(),
            format!(
                "not exact (a lower bound): calls made while the program starts, before the \
                 in-process counting library does (by the dynamic loader, libc's start-up, \
                 and constructors of libraries initialised first), are not counted at the {} \
                 counted in-process; --invocations-engine uprobe (root) counts them",
                places.join(" and the ")
            ),
        ));
    }
    notes
}

impl Invocations {
    /// The in-process counters of the run. A program the engine cannot count (its
    /// library declined to patch, or the program was killed by SIGSYS: a seccomp filter's
    /// answer, maybe to the patching) is an error naming the engine; under `auto`, before
    /// any run was collected, the sites are counted with uprobes from then on and the run
    /// is asked again ([`RunAgain`]).
    fn read_inproc(&mut self, outcome: &RunOutcome) -> anyhow::Result<Vec<u64>> {
        let Some(engine) = &mut self.inproc else {
            return Ok(Vec::new());
        };
        let why = if outcome.exit == ExitKind::Signal(libc::SIGSYS) {
            engine.abort();
            PatchRefusal::Sigsys
        } else {
            match engine.read() {
                Ok(counts) => return Ok(counts),
                Err(e) => e.downcast::<inproc::Refused>()?.0,
            }
        };
        if self.options.engine != Engine::Auto || self.runs > 0 {
            bail!("{why}; count with uprobes instead: --invocations-engine uprobe");
        }
        self.count_with_uprobes(&why)?;
        Err(RunAgain(format!("{why}; counting with uprobes instead")).into())
    }

    /// Count every site with uprobes from the next run on, because `why`.
    fn count_with_uprobes(&mut self, why: &PatchRefusal) -> anyhow::Result<()> {
        if self.tracefs.is_none() {
            let tracefs = Tracefs::open_or_mount().map_err(|e| {
                anyhow::anyhow!(
                    "{why}; and uprobes, which would count it, cannot be used here: {e}"
                )
            })?;
            self.tracefs = Some(tracefs);
        }
        // The probe set of the other sites, if any, is defined again with all of them.
        self.counters = None;
        self.anchors = None;
        if let Some(mut set) = self.set.take() {
            set.remove()?;
        }
        for (i, target) in self.spare.drain(..) {
            self.targets.push(target);
            self.counted[i] = Counted::Uprobe(self.targets.len() - 1);
        }
        self.inproc = None;
        if self.options.detail {
            // The engine label `label_engines` added.
            for p in self.patterns.iter_mut() {
                for (label, _) in p.rows.iter_mut() {
                    if let Some(at) = label.rfind(" [") {
                        label.truncate(at);
                    }
                }
            }
        }
        let fallback = [(usize::MAX, why.clone())];
        let shared = vec![false; self.counted.len()];
        self.notes = label_engines(
            &mut self.patterns,
            &self.counted,
            &fallback,
            &shared,
            self.options,
        );
        Ok(())
    }
}

/// What the instrument holds about one run in flight ([`Instrument::park`]).
struct InvocationsRun {
    counters: Option<RunCounters>,
    following: Option<sbs_probes::execs::ExecWatch>,
    inproc: Option<InprocRun>,
}

impl Invocations {
    /// The fewest and most calls this run's counts at the sites of `p` may stand for:
    /// each site's count times the calls one pass there may be, a site without a bound
    /// taken as counted (the note says so).
    fn site_bounds(&self, p: &PatternRows, count: &dyn Fn(usize) -> u64) -> (f64, f64) {
        let all = p.sites();
        let bound = |f: fn((u64, u64)) -> u64| -> f64 {
            all.iter()
                .map(|&i| count(i).saturating_mul(self.per_pass[i].map_or(1, f)))
                .sum::<u64>() as f64
        };
        (bound(|p| p.0), bound(|p| p.1))
    }

    /// [`Self::site_bounds`] for the report of pattern `k`, with no most when calls went
    /// uncounted with nothing to bound them: sites left out (`--invocations-partial`),
    /// calls before the in-process counting library started, or a process that escaped
    /// counting (`lost`).
    fn run_range(&self, k: usize, count: &dyn Fn(usize) -> u64, lost: bool) -> CountRange {
        let p = &self.patterns[k];
        let all = p.sites();
        let (low, high) = self.site_bounds(p, count);
        let skipped = all.iter().any(|&i| self.counted[i] == Counted::Skipped);
        let uncounted = skipped || lost || self.misses_start_up[k];
        CountRange {
            low,
            high: (!uncounted).then_some(high),
            sites: all.len(),
            unbounded_sites: all.iter().filter(|&&i| self.per_pass[i].is_none()).count(),
        }
    }
}

impl Instrument for Invocations {
    fn name(&self) -> &str {
        "invocations"
    }

    fn needs_start_latch(&self) -> bool {
        // Uprobe counters attach to the child before it execs; the in-process engine
        // passes descriptors and env vars, and counts the child's execs.
        !self.targets.is_empty()
            || self.region.is_some()
            || self.inproc.as_ref().is_some_and(Inproc::counts_execs)
    }

    fn prepare(&mut self, setup: &mut ChildSetup) -> anyhow::Result<()> {
        self.define()?;
        if let Some(region) = &mut self.region {
            region.prepare(setup)?;
        }
        if let Some(inproc) = &mut self.inproc {
            inproc.prepare(setup)?;
        }
        Ok(())
    }

    fn attach(&mut self, pid: Pid) -> anyhow::Result<()> {
        if let Some(inproc) = &mut self.inproc {
            inproc.attach(pid.as_raw());
        }
        let in_region = self.region.is_some();
        if !self.targets.is_empty() {
            self.following.attach(pid);
        }
        let Some(set) = self.define()? else {
            return Ok(());
        };
        let counters = if in_region {
            RunCounters::open_for_region(set, pid.as_raw())?
        } else {
            RunCounters::open(set, pid.as_raw())?
        };
        if let Some(region) = &mut self.region {
            region.send(&counters.raw_fds())?;
        }
        self.counters = Some(counters);
        Ok(())
    }

    fn collect(&mut self, outcome: &RunOutcome, out: &mut Vec<Sample>) -> anyhow::Result<()> {
        let uprobe = match self.counters.take() {
            Some(mut counters) => counters.read()?,
            None if self.targets.is_empty() => Vec::new(),
            None => {
                bail!("internal error: no uprobe counters for this run (attach was not called)")
            }
        };
        let inproc = self.read_inproc(outcome)?;
        // A process the kernel stopped following made calls no uprobe counted; an image
        // without the counting library, calls not counted in-process.
        let lost_uprobe = self.following.lost_one() | self.following.forked_while_threaded();
        let lost_inproc = self.inproc.as_ref().is_some_and(Inproc::missed_images);
        self.runs += 1;
        let count = |i: usize| match self.counted[i] {
            Counted::Inproc(k) => inproc[k],
            Counted::Uprobe(k) => uprobe[k],
            Counted::Skipped => 0,
        };
        for (i, site) in self.counted_sites.iter_mut().enumerate() {
            site.count = count(i);
        }
        for (k, p) in self.patterns.iter().enumerate() {
            let details: Vec<(String, f64)> = p
                .rows
                .iter()
                .map(|(label, sites)| {
                    let n: u64 = sites.iter().map(|&i| count(i)).sum();
                    (label.clone(), n as f64)
                })
                .collect();
            let lost = match p.metric.source.as_str() {
                "uprobe" => lost_uprobe,
                "inproc" => lost_inproc,
                _ => lost_uprobe || lost_inproc,
            };
            if !p.metric.exact {
                let (low, high) = self.site_bounds(p, &count);
                let total: u64 = p.sites().iter().map(|&i| count(i)).sum();
                self.totals[k] = Some(match self.totals[k] {
                    Some((l, h)) => (l.min(total), h.max(total)),
                    None => (total, total),
                });
                self.bounds[k] = Some(match self.bounds[k] {
                    Some((l, h)) => (l.min(low), h.max(high)),
                    None => (low, high),
                });
            }
            let mut metric = p.metric.clone();
            metric.exact &= !lost;
            metric.range = Some(self.run_range(k, &count, lost));
            out.push(Sample {
                metric,
                value: details.iter().map(|(_, v)| v).sum(),
                details,
            });
        }
        Ok(())
    }

    fn abort_run(&mut self) {
        self.counters = None;
        self.following.abort();
        if let Some(region) = &mut self.region {
            region.abort();
        }
        if let Some(inproc) = &mut self.inproc {
            inproc.abort();
        }
    }

    fn warnings(&self) -> Vec<String> {
        let mut out = self.warnings.clone();
        if let Some(inproc) = &self.inproc {
            out.extend(inproc.warnings());
        }
        out.extend(self.following.warnings("the counts made with uprobes"));
        out.extend(self.following.fork_warning("the counts made with uprobes"));
        out
    }

    fn metric_notes(&self) -> Vec<(String, String)> {
        let mut notes = self.notes.clone();
        for ((p, bounds), totals) in self.patterns.iter().zip(&self.bounds).zip(&self.totals) {
            let sites = p.sites();
            let unbounded = sites
                .iter()
                .filter(|&&i| self.per_pass[i].is_none())
                .count();
            if unbounded > 0 {
                notes.push((
                    p.metric.id.clone(),
                    format!(
                        "not exact: {unbounded} of the {} places it counts at belong to \
                         copies whose entries are uncertain (rows marked uncertain with \
                         --invocations-detail; the warning says why): their counts may be \
                         off, by no bound that can be given",
                        sites.len()
                    ),
                ));
            }
            if let Some((low, high)) = bounds.filter(|(l, h)| h > l) {
                let bounded = |i: usize| self.per_pass[i].unwrap_or((1, 1));
                let mut why = Vec::new();
                if sites.iter().any(|&i| bounded(i).1 > 1) {
                    why.push(
                        "the code of an inlined copy repeats as in a loop the optimizer \
                         unrolled, so one counted pass may be several calls",
                    );
                }
                if sites.iter().any(|&i| bounded(i).0 == 0) {
                    why.push(
                        "a pass at some places may continue a call counted already, so it \
                         may be no call of its own (code that calls of a function share, \
                         two entries that one call may both pass, a landing pad entered \
                         while a panic unwinds)",
                    );
                }
                notes.push((
                    p.metric.id.clone(),
                    bound_note(
                        (low, high),
                        unbounded > 0,
                        &why,
                        totals.is_some_and(|(l, h)| h > l),
                    ),
                ));
            }
        }
        if let Some(note) = self.inproc.as_ref().and_then(Inproc::note) {
            for p in self.patterns.iter().filter(|p| p.metric.source != "uprobe") {
                notes.push((p.metric.id.clone(), note.clone()));
            }
        }
        notes
    }

    fn overlaps(&self) -> bool {
        // Uprobes only, or in-process only (whose fallback to uprobes defines a probe
        // set of its own): not both, where a fallback would remove the probe set that
        // other runs in flight count with.
        self.targets.is_empty() || self.inproc.is_none()
    }

    fn park(&mut self) -> InFlight {
        InFlight::new(InvocationsRun {
            counters: self.counters.take(),
            following: self.following.park(),
            inproc: self.inproc.as_mut().map(Inproc::park),
        })
    }

    fn resume(&mut self, run: InFlight) {
        let Some(run) = run.take::<InvocationsRun>() else {
            return;
        };
        self.counters = run.counters;
        self.following.resume(run.following);
        if let (Some(engine), Some(parked)) = (&mut self.inproc, run.inproc) {
            engine.resume(parked);
        }
    }

    fn finish(&mut self) {
        // Counters hold the events busy: close them before removing the definitions.
        self.counters = None;
        self.anchors = None;
        if let Some(mut set) = self.set.take() {
            if let Err(e) = set.remove() {
                eprintln!(
                    "sbs-profile: warning: {e}; remove what is left with `grep {} /sys/kernel/tracing/uprobe_events` and `echo '-:GROUP/EVENT' >> /sys/kernel/tracing/uprobe_events`",
                    set.group()
                );
            }
        }
    }
}
