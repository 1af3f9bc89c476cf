//! Invocation counts through uprobes (`--invocations PATTERN`): one uprobe per matched
//! function, counted exactly in the child, its threads and its descendants. Inlined
//! instances of a matched function are counted too: one uprobe per entry point of each
//! instance, summed per instance (see `sbs_probes::entries`); their rows are labelled
//! `[inlined, N sites]`, or one per site with `--invocations-detail`.
//!
//! Resolution (symbols, patterns, inlined instances) happens when the plan is built, so
//! a bad pattern fails before any run. The probes are defined in tracefs before the first
//! run and removed in `finish` (and by the probe set's `Drop`); definitions left by a
//! killed sbs-profile are removed before ours are made.

use std::ffi::OsStr;
use std::path::Path;

use nix::unistd::Pid;
use sbs_probes::hits::{Anchors, RunCounters};
use sbs_probes::resolve::{match_patterns, InlinedSite, Target};
use sbs_probes::tracefs::{ProbeSet, ProbeTarget, Tracefs};
use sbs_probes::ProbeError;
use sbs_reports::model::Unit;

use crate::run::instrument::{Instrument, MetricSpec, RunOutcome, Sample};
use crate::run::region_fds::RegionSocket;

/// One pattern's metric and its rows: (label, indices of the probes summed in it).
#[derive(Debug)]
struct PatternRows {
    metric: MetricSpec,
    rows: Vec<(String, Vec<usize>)>,
}

/// Counts calls of the functions named by patterns.
#[derive(Debug)]
pub struct Invocations {
    patterns: Vec<PatternRows>,
    /// Distinct probe locations.
    targets: Vec<ProbeTarget>,
    warnings: Vec<String>,
    tracefs: Tracefs,
    set: Option<ProbeSet>,
    anchors: Option<Anchors>,
    counters: Option<RunCounters>,
    /// Count only inside a harness's measured region (see [`crate::run::region_fds`]).
    region: Option<RegionSocket>,
}

impl Invocations {
    /// Resolve `patterns` against `program` (with the child's `LD_LIBRARY_PATH`).
    /// `max_probes` limits the probes one pattern may need; `detail` gives each inlined
    /// site its own row (with its caller and call site) instead of one row per function.
    pub fn new(
        program: &Path,
        ld_library_path: Option<&OsStr>,
        patterns: &[String],
        max_probes: usize,
        detail: bool,
    ) -> Result<Invocations, ProbeError> {
        let mut target = Target::load(program, ld_library_path)?;
        // Fail before any run (of any group) when uprobes cannot be used at all.
        let tracefs = Tracefs::open_or_mount()?;
        let matches = match_patterns(&mut target, patterns, max_probes)?;
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
        let mut targets: Vec<ProbeTarget> = Vec::new();
        let mut rows_of = Vec::new();
        for m in &matches {
            warnings.extend(m.inlined_warnings());
            for e in &m.dwarf_errors {
                warnings.push(format!(
                    "`{}`: inlined instances unknown, DWARF unreadable: {e}",
                    m.pattern.as_str()
                ));
            }
            let mut probe = |path: &Path, offset: u64, what: &dyn Fn() -> String| match targets
                .iter()
                .position(|t| t.path == path && t.offset == offset)
            {
                Some(i) => i,
                None => {
                    targets.push(ProbeTarget {
                        path: path.to_path_buf(),
                        offset,
                        what: what(),
                    });
                    targets.len() - 1
                }
            };
            let mut rows: Vec<(String, Vec<usize>)> = m
                .functions
                .iter()
                .map(|f| {
                    let what = || format!("`{}`", f.label);
                    (f.label.clone(), vec![probe(&f.path, f.probe, &what)])
                })
                .collect();
            let library = |s: &InlinedSite| {
                if s.image == 0 {
                    String::new()
                } else {
                    let name = s.path.file_name().unwrap_or(s.path.as_os_str());
                    format!(" [{}]", name.to_string_lossy())
                }
            };
            let mut inlined: Vec<(String, Vec<usize>, usize)> = Vec::new();
            for site in &m.sites {
                let what = || {
                    format!(
                        "an inlined copy of `{}` in `{}`",
                        site.function, site.caller
                    )
                };
                let probes: Vec<usize> = site
                    .points
                    .iter()
                    .map(|p| probe(&site.path, p.offset, &what))
                    .collect();
                let label = if detail {
                    format!(
                        "{} [inlined in {} at {}{}]{}",
                        site.function,
                        site.caller,
                        site.call_site.as_deref().unwrap_or("?"),
                        if site.uncertain.is_some() {
                            ", uncertain"
                        } else {
                            ""
                        },
                        library(site)
                    )
                } else {
                    format!("{}{}", site.function, library(site))
                };
                match inlined.iter_mut().find(|(l, _, _)| *l == label) {
                    Some((_, p, n)) => {
                        p.extend(probes);
                        *n += 1;
                    }
                    None => inlined.push((label, probes, 1)),
                }
            }
            for (label, probes, sites) in inlined {
                let label = if detail && sites > 1 {
                    format!("{label} [{sites} sites]")
                } else if detail {
                    label
                } else {
                    format!(
                        "{label} [inlined, {sites} site{}]",
                        if sites == 1 { "" } else { "s" }
                    )
                };
                rows.push((label, probes));
            }
            rows_of.push(PatternRows {
                metric: MetricSpec::new(
                    format!("invocations.{}", m.pattern.as_str()),
                    Unit::Count,
                    "uprobe",
                    true,
                ),
                rows,
            });
        }
        Ok(Invocations {
            patterns: rows_of,
            targets,
            warnings,
            tracefs,
            set: None,
            anchors: None,
            counters: None,
            region: None,
        })
    }

    /// Count only inside the measured region of a harnessed benchmark: the counters are
    /// opened disabled and passed to the harness, which switches them around each
    /// operation.
    pub fn in_region(mut self) -> Self {
        self.region = Some(RegionSocket::new(
            sbs_agent_abi::harness::REGION_SOCKET_UPROBES,
        ));
        self
    }

    /// How many distinct locations (functions and inlined entry points) are probed.
    pub fn probe_count(&self) -> usize {
        self.targets.len()
    }

    /// The probe set, defined on first use (before the first run).
    fn define(&mut self) -> Result<&ProbeSet, ProbeError> {
        let set = match self.set.take() {
            Some(set) => set,
            None => {
                self.tracefs.clean_stale()?;
                // Hundreds of probes take a while: a Ctrl-C stops them at once (the partial
                // set removes itself) and the runner reports the interruption.
                let stop = crate::run::runner::interrupt_requested;
                let set = ProbeSet::define(&self.tracefs, &self.targets, &stop)?;
                self.anchors = Some(Anchors::open(&set, &stop)?);
                set
            }
        };
        Ok(self.set.insert(set))
    }
}

impl Instrument for Invocations {
    fn name(&self) -> &str {
        "uprobes"
    }

    fn prepare(&mut self, setup: &mut crate::run::instrument::ChildSetup) -> anyhow::Result<()> {
        self.define()?;
        if let Some(region) = &mut self.region {
            region.prepare(setup)?;
        }
        Ok(())
    }

    fn attach(&mut self, pid: Pid) -> anyhow::Result<()> {
        let in_region = self.region.is_some();
        let set = self.define()?;
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

    fn collect(&mut self, _outcome: &RunOutcome, out: &mut Vec<Sample>) -> anyhow::Result<()> {
        let Some(mut counters) = self.counters.take() else {
            anyhow::bail!(
                "internal error: no uprobe counters for this run (attach was not called)"
            );
        };
        let counts = counters.read()?;
        for p in &self.patterns {
            let details: Vec<(String, f64)> = p
                .rows
                .iter()
                .map(|(label, probes)| {
                    let n: u64 = probes.iter().map(|&i| counts[i]).sum();
                    (label.clone(), n as f64)
                })
                .collect();
            out.push(Sample {
                metric: p.metric.clone(),
                value: details.iter().map(|(_, v)| v).sum(),
                details,
            });
        }
        Ok(())
    }

    fn abort_run(&mut self) {
        self.counters = None;
        if let Some(region) = &mut self.region {
            region.abort();
        }
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.clone()
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
