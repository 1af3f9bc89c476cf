//! From the counter options of the command line to groups of runs: `--counters`,
//! `--no-multiplex`, `--counters-best-effort`, `--instructions`, and the
//! `--list-counters` table.
//!
//! Every requested event is probed on this machine first: an unsupported one is an error
//! naming it with the reason and the fix, unless best effort was asked for (then it is
//! dropped with a warning). Probing goes through a function parameter so the decisions
//! can be tested with a scripted machine.

use std::fmt::Write as _;

use anyhow::bail;
use sbs_probes::capability::{self, MachineFacts, Support};
use sbs_probes::counters::{
    find_event, parse_counter_list, plan_series, CounterRequest, PlanOptions,
};
use sbs_probes::valgrind;

use crate::run::spec::{GroupSpec, InstrumentSpec};

/// How instruction counts are obtained (`--instructions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstructionsMode {
    /// The PMU's `instructions` event (source `perf-hw`).
    Perf,
    /// valgrind's cachegrind (source `valgrind`).
    Valgrind,
    /// QEMU's user mode with our plugin (source `qemu:MODEL`).
    Qemu,
    /// The PMU if it works here, otherwise QEMU if installed, otherwise valgrind.
    Auto,
}

/// The counter options (`--counters`, `--no-multiplex`, `--counters-best-effort`,
/// `--instructions`).
#[derive(Debug, Clone, Default)]
pub struct CounterOptions {
    /// `--counters LIST`.
    pub counters: Option<String>,
    /// `--no-multiplex`.
    pub no_multiplex: bool,
    /// `--counters-best-effort`.
    pub best_effort: bool,
    /// `--instructions MODE`.
    pub instructions: Option<InstructionsMode>,
    /// A harnessed benchmark: perf counters count inside its measured region only.
    pub region: bool,
    /// `--qemu-cpu MODEL` (the default model otherwise).
    pub qemu_cpu: Option<String>,
}

/// Groups of runs for the counters, and the plan-time warnings (also handed to the first
/// group's instrument, which puts them in the report).
#[derive(Debug, Default)]
pub struct CounterGroups {
    /// `counters`, `counters-2`... then `valgrind`.
    pub groups: Vec<GroupSpec>,
    /// Dropped events (best effort), the mechanism `auto` chose...
    pub warnings: Vec<String>,
}

/// Which mechanism counts instructions, after probing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstructionSource {
    /// perf's hardware event.
    Perf,
    /// valgrind.
    Valgrind,
    /// QEMU with the counting plugin.
    Qemu,
}

/// Which instruction engines are installed here (PATH lookups), for [`resolve`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Engines {
    /// `valgrind` is on PATH.
    pub valgrind: bool,
    /// `qemu-x86_64` is on PATH.
    pub qemu: bool,
}

/// Decide the events and the instruction mechanism: pure, with `probe` and `engines`
/// standing for the machine.
///
/// `auto` takes the PMU where it counts instructions (native speed), then QEMU where
/// `qemu-x86_64` is installed (about half of cachegrind's cost, and the same count on
/// every x86-64 host: the CPU model is pinned), then valgrind.
pub fn resolve(
    opts: &CounterOptions,
    probe: &mut dyn FnMut(&CounterRequest) -> Support,
    engines: Engines,
    warnings: &mut Vec<String>,
) -> anyhow::Result<(Vec<CounterRequest>, Option<InstructionSource>)> {
    let valgrind_installed = engines.valgrind;
    let mut reqs = match &opts.counters {
        Some(list) => parse_counter_list(list)?,
        None => Vec::new(),
    };
    let has_perf_instructions =
        |reqs: &[CounterRequest]| reqs.iter().any(|r| r.event.name == "instructions");
    let instructions = match opts.instructions {
        None => None,
        Some(InstructionsMode::Valgrind) => Some(InstructionSource::Valgrind),
        Some(InstructionsMode::Perf) => Some(InstructionSource::Perf),
        Some(InstructionsMode::Qemu) => Some(InstructionSource::Qemu),
        Some(InstructionsMode::Auto) => {
            let ins = CounterRequest::new(find_event("instructions").expect("in catalogue"));
            match probe(&ins) {
                Support::Supported => {
                    warnings.push("--instructions auto: counting with the PMU (perf-hw)".into());
                    Some(InstructionSource::Perf)
                }
                Support::Unsupported { reason, .. } if engines.qemu => {
                    warnings.push(format!(
                        "--instructions auto: no PMU instruction counter ({reason}); counting \
                         with qemu (installed: faster than valgrind, and the same count on \
                         every x86-64 host), whose counts are not comparable with perf-hw or \
                         valgrind counts"
                    ));
                    Some(InstructionSource::Qemu)
                }
                Support::Unsupported { reason, .. } => {
                    if !valgrind_installed {
                        bail!(
                            "--instructions auto: the PMU cannot count instructions here ({reason}) \
                             and neither qemu-x86_64 nor valgrind is installed: install one with \
                             `{}` or `{}`",
                            crate::run::instruments::qemu::INSTALL_HINT,
                            valgrind::INSTALL_HINT
                        );
                    }
                    warnings.push(format!(
                        "--instructions auto: no PMU instruction counter ({reason}) and no \
                         qemu-x86_64 (Debian's qemu-user); counting with valgrind, whose counts \
                         are not comparable with perf-hw counts"
                    ));
                    Some(InstructionSource::Valgrind)
                }
            }
        }
    };
    if instructions == Some(InstructionSource::Perf) && !has_perf_instructions(&reqs) {
        reqs.insert(
            0,
            CounterRequest::new(find_event("instructions").expect("in catalogue")),
        );
    }
    if instructions == Some(InstructionSource::Valgrind) && !valgrind_installed {
        return Err(valgrind::ValgrindError::NotInstalled.into());
    }
    if instructions == Some(InstructionSource::Qemu) && !engines.qemu {
        return Err(crate::run::instruments::qemu::not_installed());
    }
    if let Some(cpu) = &opts.qemu_cpu {
        if instructions != Some(InstructionSource::Qemu) {
            bail!(
                "--qemu-cpu applies to the qemu engine: add --instructions qemu (this run counts \
                 with {})",
                match instructions {
                    Some(InstructionSource::Perf) => "the PMU",
                    Some(InstructionSource::Valgrind) => "valgrind",
                    _ => "no instruction engine",
                }
            );
        }
        crate::run::instruments::qemu::check_cpu(cpu)?;
    }
    let mut kept = Vec::with_capacity(reqs.len());
    for r in reqs {
        match probe(&r) {
            Support::Supported => kept.push(r),
            Support::Unsupported { reason, fix } => {
                if opts.best_effort {
                    warnings.push(format!(
                        "counter `{r}` skipped (--counters-best-effort): {reason}; fix: {fix}"
                    ));
                } else {
                    bail!(
                        "counter event `{r}` is not supported on this machine: {reason}; fix: \
                         {fix}; or pass --counters-best-effort to measure the supported events \
                         and skip the others"
                    );
                }
            }
        }
    }
    Ok((kept, instructions))
}

/// The counter groups the options ask for (none without counter options).
/// Plan-time warnings (dropped events, the mechanism `auto` chose) travel with the first
/// counter instrument into the report.
/// For a harnessed benchmark (`opts.region`), perf counters and valgrind count inside its
/// measured region.
pub fn groups(opts: &CounterOptions) -> anyhow::Result<Vec<GroupSpec>> {
    if opts.counters.is_none() && opts.instructions.is_none() {
        if opts.no_multiplex || opts.best_effort {
            bail!("--no-multiplex and --counters-best-effort apply to --counters: add --counters LIST");
        }
        return Ok(Vec::new());
    }
    let CounterGroups { groups, warnings } = probed_groups(opts)?;
    if groups.is_empty() {
        bail!(
            "none of the requested counter events can be counted on this machine ({}); run \
             `sbs-profile --list-counters` to see which can",
            warnings.join("; ")
        );
    }
    Ok(groups)
}

/// Build the groups of runs for the counter options, probing this machine.
pub fn probed_groups(opts: &CounterOptions) -> anyhow::Result<CounterGroups> {
    let facts = MachineFacts::read();
    let mut warnings = Vec::new();
    let engines = Engines {
        valgrind: valgrind::find_valgrind().is_ok(),
        qemu: crate::run::instruments::qemu::find_qemu().is_ok(),
    };
    let (reqs, instructions) = resolve(
        opts,
        &mut |r| capability::probe(r, &facts),
        engines,
        &mut warnings,
    )?;
    let groups = counter_groups(opts, &reqs, instructions, &warnings);
    Ok(CounterGroups { groups, warnings })
}

/// The groups of runs for resolved events: `counters`, `counters-2`... (one per series of
/// the plan; several only with `--no-multiplex`), then `valgrind`.
pub fn counter_groups(
    opts: &CounterOptions,
    reqs: &[CounterRequest],
    instructions: Option<InstructionSource>,
    warnings: &[String],
) -> Vec<GroupSpec> {
    let mut groups = Vec::new();
    let series = plan_series(
        reqs,
        PlanOptions {
            no_multiplex: opts.no_multiplex,
            ..PlanOptions::default()
        },
    );
    // Plan-time warnings go with the first instrument into the report.
    let mut notes = Some(warnings.to_vec());
    for (i, s) in series.into_iter().enumerate() {
        let name = if i == 0 {
            "counters".to_string()
        } else {
            format!("counters-{}", i + 1)
        };
        groups.push(GroupSpec {
            name,
            instruments: vec![InstrumentSpec::Counters {
                series: s,
                notes: notes.take().unwrap_or_default(),
                region: opts.region,
            }],
        });
    }
    if instructions == Some(InstructionSource::Valgrind) {
        groups.push(GroupSpec {
            name: "valgrind".into(),
            instruments: vec![InstrumentSpec::ValgrindInstructions {
                notes: notes.take().unwrap_or_default(),
                region: opts.region,
            }],
        });
    }
    if instructions == Some(InstructionSource::Qemu) {
        groups.push(GroupSpec {
            name: "qemu".into(),
            instruments: vec![InstrumentSpec::QemuInstructions {
                notes: notes.take().unwrap_or_default(),
                region: opts.region,
                cpu: opts
                    .qemu_cpu
                    .clone()
                    .unwrap_or_else(|| crate::run::instruments::qemu::DEFAULT_CPU.to_string()),
            }],
        });
    }
    groups
}

/// The `--list-counters` table: every event, whether it opens here, and if not, why and
/// the fix; then valgrind's instruction counter.
pub fn list_counters_table(
    facts: &MachineFacts,
    rows: &[(CounterRequest, Support)],
    valgrind: Result<std::path::PathBuf, String>,
) -> String {
    let mut lines = vec![(
        "event".to_string(),
        "source".to_string(),
        "supported",
        "reason / fix".to_string(),
    )];
    // A reason shared with the row before is named once.
    let mut last_reason: Option<(String, String)> = None;
    for (r, sup) in rows {
        let (supported, text) = match sup {
            Support::Supported => ("yes", format!("counted in scope :{}", r.scope.modifier())),
            Support::Unsupported { reason, fix } => {
                let why = format!("{reason}; fix: {fix}");
                let text = match &last_reason {
                    Some((first, prev)) if *prev == why => format!("as for {first}"),
                    _ => {
                        last_reason = Some((r.name(), why.clone()));
                        why
                    }
                };
                ("no", text)
            }
        };
        lines.push((r.name(), r.source().to_string(), supported, text));
    }
    let (supported, text) = match valgrind {
        Ok(path) => (
            "yes",
            format!("{} (--instructions valgrind)", path.display()),
        ),
        Err(e) => ("no", e),
    };
    lines.push((
        "instructions".into(),
        valgrind::SOURCE.into(),
        supported,
        text,
    ));

    let w = rows
        .iter()
        .map(|(r, _)| r.name().len())
        .max()
        .unwrap_or(5)
        .max(24);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "PMUs: {}    perf_event_paranoid: {}    root: {}",
        facts.pmus.join(", "),
        facts
            .paranoid
            .map(|p| p.to_string())
            .unwrap_or_else(|| "unknown".into()),
        if facts.root { "yes" } else { "no" }
    );
    for (event, source, supported, text) in lines {
        let _ = writeln!(s, "{event:<w$}  {source:<8}  {supported:<9}  {text}");
    }
    s
}

/// Probe this machine and render the `--list-counters` table.
pub fn list_counters() -> String {
    let facts = MachineFacts::read();
    let rows = capability::probe_all(&facts);
    let vg = valgrind::find_valgrind().map_err(|e| e.to_string());
    list_counters_table(&facts, &rows, vg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use nix::unistd::Pid;
    use sbs_probes::counters::{CounterBackend, EventClass, GroupReading, ScriptedBackend};

    use crate::run::instrument::{ExitKind, Instrument, RunOutcome, Sample};
    use crate::run::spec::perf_counters;

    const VG: Engines = Engines {
        valgrind: true,
        qemu: false,
    };
    const NONE: Engines = Engines {
        valgrind: false,
        qemu: false,
    };
    const BOTH: Engines = Engines {
        valgrind: true,
        qemu: true,
    };

    #[test]
    fn auto_prefers_the_pmu_then_qemu_then_valgrind_and_says_why() {
        let mut o = opts(None);
        o.instructions = Some(InstructionsMode::Auto);
        let mut w = Vec::new();
        let (_, ins) = resolve(&o, &mut no_pmu, BOTH, &mut w).unwrap();
        assert_eq!(ins, Some(InstructionSource::Qemu));
        assert!(w[0].contains("counting with qemu"), "{w:?}");
        let (_, ins) = resolve(&o, &mut |_| Support::Supported, BOTH, &mut Vec::new()).unwrap();
        assert_eq!(ins, Some(InstructionSource::Perf));
        let mut w = Vec::new();
        let (_, ins) = resolve(&o, &mut no_pmu, VG, &mut w).unwrap();
        assert_eq!(ins, Some(InstructionSource::Valgrind));
        assert!(w[0].contains("no qemu-x86_64"), "{w:?}");
        let e = resolve(&o, &mut no_pmu, NONE, &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("qemu-user") && e.contains("valgrind"), "{e}");
    }

    #[test]
    fn qemu_needs_qemu_and_the_model_option_needs_qemu() {
        let mut o = opts(None);
        o.instructions = Some(InstructionsMode::Qemu);
        let e = resolve(&o, &mut no_pmu, VG, &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("package qemu-user"), "{e}");
        o.qemu_cpu = Some("Nehalem-v1".into());
        let (_, ins) = resolve(&o, &mut no_pmu, BOTH, &mut Vec::new()).unwrap();
        assert_eq!(ins, Some(InstructionSource::Qemu));
        let groups = counter_groups(&o, &[], ins, &[]);
        assert!(matches!(
            &groups[0].instruments[0],
            InstrumentSpec::QemuInstructions { cpu, .. } if cpu == "Nehalem-v1"
        ));
        o.instructions = Some(InstructionsMode::Valgrind);
        let e = resolve(&o, &mut no_pmu, BOTH, &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("--qemu-cpu applies to the qemu engine"), "{e}");
        o.instructions = Some(InstructionsMode::Qemu);
        o.qemu_cpu = Some("x=1".into());
        assert!(resolve(&o, &mut no_pmu, BOTH, &mut Vec::new()).is_err());
    }

    fn no_pmu(r: &CounterRequest) -> Support {
        match r.event.class() {
            EventClass::Software => Support::Supported,
            EventClass::Hardware => Support::Unsupported {
                reason: "no CPU PMU".into(),
                fix: "bare metal".into(),
            },
        }
    }

    fn opts(list: Option<&str>) -> CounterOptions {
        CounterOptions {
            counters: list.map(str::to_string),
            ..CounterOptions::default()
        }
    }

    #[test]
    fn unsupported_event_is_an_error_naming_it() {
        let mut w = Vec::new();
        let e = resolve(&opts(Some("page-faults,cycles")), &mut no_pmu, VG, &mut w)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`cycles` is not supported"), "{e}");
        assert!(e.contains("no CPU PMU") && e.contains("bare metal"), "{e}");
        assert!(e.contains("--counters-best-effort"), "{e}");
    }

    #[test]
    fn best_effort_drops_with_a_warning() {
        let mut w = Vec::new();
        let mut o = opts(Some("page-faults,cycles"));
        o.best_effort = true;
        let (reqs, ins) = resolve(&o, &mut no_pmu, VG, &mut w).unwrap();
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].name(), "page-faults");
        assert_eq!(ins, None);
        assert!(w[0].contains("`cycles` skipped"), "{w:?}");
    }

    #[test]
    fn auto_falls_back_to_valgrind_without_pmu_and_uses_pmu_with_one() {
        let mut w = Vec::new();
        let mut o = opts(None);
        o.instructions = Some(InstructionsMode::Auto);
        let (reqs, ins) = resolve(&o, &mut no_pmu, VG, &mut w).unwrap();
        assert!(reqs.is_empty());
        assert_eq!(ins, Some(InstructionSource::Valgrind));
        assert!(w[0].contains("valgrind"), "{w:?}");

        let e = resolve(&o, &mut no_pmu, NONE, &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("apt-get install -y valgrind"), "{e}");

        let (reqs, ins) = resolve(&o, &mut |_| Support::Supported, NONE, &mut Vec::new()).unwrap();
        assert_eq!(ins, Some(InstructionSource::Perf));
        assert_eq!(reqs[0].name(), "instructions");
    }

    #[test]
    fn perf_instructions_without_pmu_is_an_error_and_valgrind_needs_valgrind() {
        let mut o = opts(None);
        o.instructions = Some(InstructionsMode::Perf);
        let e = resolve(&o, &mut no_pmu, VG, &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("`instructions` is not supported"), "{e}");
        o.instructions = Some(InstructionsMode::Valgrind);
        let e = resolve(&o, &mut no_pmu, NONE, &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("valgrind is not installed"), "{e}");
    }

    /// A scripted PMU with room for one hardware group at a time: with
    /// `hw_groups_this_run` groups in a run, each counts that share of the enabled time
    /// (software groups always count); every member reads 100.
    fn pmu(hw_groups_this_run: usize) -> Box<dyn CounterBackend> {
        Box::new(ScriptedBackend(move |_pid, members: &[CounterRequest]| {
            let hw = members[0].event.class() == EventClass::Hardware;
            GroupReading {
                time_enabled: 1000,
                time_running: if hw {
                    1000 / hw_groups_this_run as u64
                } else {
                    1000
                },
                values: vec![100; members.len()],
            }
        }))
    }

    /// Each counter group's instrument, counting through the scripted PMU, after one run.
    fn drive(
        groups: &[GroupSpec],
        hw_groups_this_run: usize,
    ) -> Vec<(String, Vec<Sample>, Vec<String>)> {
        let outcome = RunOutcome {
            pid: Pid::from_raw(1),
            wall: Duration::from_millis(1),
            user: Duration::ZERO,
            sys: Duration::ZERO,
            max_rss: 0,
            exit: ExitKind::Code(0),
            survivors: Vec::new(),
        };
        groups
            .iter()
            .map(|g| {
                let InstrumentSpec::Counters {
                    series,
                    notes,
                    region,
                } = &g.instruments[0]
                else {
                    panic!("{} counts no perf events", g.name);
                };
                let mut i = perf_counters(series, notes, *region, pmu(hw_groups_this_run));
                let mut out = Vec::new();
                i.attach(Pid::from_raw(5)).unwrap();
                i.collect(&outcome, &mut out).unwrap();
                (g.name.clone(), out, i.warnings())
            })
            .collect()
    }

    const SEVEN: &str =
        "instructions,cycles,branches,branch-misses,cache-references,cache-misses,page-faults";

    #[test]
    fn no_multiplex_gives_each_hardware_group_its_own_runs() {
        let mut o = opts(Some(SEVEN));
        o.no_multiplex = true;
        let (reqs, ins) = resolve(&o, &mut |_| Support::Supported, NONE, &mut Vec::new()).unwrap();
        // Each series opens one hardware group: it has the PMU to itself.
        let groups = counter_groups(&o, &reqs, ins, &[]);
        let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["counters", "counters-2"]);
        let results = drive(&groups, 1);
        let ids = |i: usize| -> Vec<String> {
            results[i].1.iter().map(|s| s.metric.id.clone()).collect()
        };
        assert_eq!(
            ids(0),
            [
                "counter.instructions",
                "counter.cycles",
                "counter.branches",
                "counter.branch-misses",
                "counter.page-faults"
            ]
        );
        assert_eq!(ids(1), ["counter.cache-references", "counter.cache-misses"]);
        for (_, samples, warnings) in &results {
            assert!(samples.iter().all(|s| s.value == 100.0));
            assert!(warnings.is_empty(), "{warnings:?}");
        }
    }

    #[test]
    fn multiplexed_groups_share_runs_and_are_scaled_and_reported() {
        let o = opts(Some(SEVEN));
        let (reqs, ins) = resolve(&o, &mut |_| Support::Supported, NONE, &mut Vec::new()).unwrap();
        // Two hardware groups in one run: the PMU rotates them, each counts half the time.
        let groups = counter_groups(&o, &reqs, ins, &["planned".into()]);
        assert_eq!(groups.len(), 1);
        let results = drive(&groups, 2);
        let (_, samples, warnings) = &results[0];
        let get = |id: &str| samples.iter().find(|s| s.metric.id == id).unwrap().value;
        assert_eq!(
            get("counter.instructions"),
            200.0,
            "scaled by enabled/running"
        );
        let ins = samples
            .iter()
            .find(|s| s.metric.id == "counter.instructions")
            .unwrap();
        assert_eq!(ins.details, vec![("running fraction".to_string(), 0.5)]);
        assert_eq!(
            get("counter.page-faults"),
            100.0,
            "software events never scaled"
        );
        assert_eq!(warnings[0], "planned", "plan-time warnings come first");
        assert_eq!(warnings.len(), 1 + 6, "{warnings:?}");
        assert!(
            warnings[1].contains("multiplexed in 1 of 1 runs"),
            "{warnings:?}"
        );
        assert!(warnings[1].contains("--no-multiplex"), "{warnings:?}");
    }

    #[test]
    fn table_lists_support_and_fixes() {
        let facts = MachineFacts {
            pmus: vec!["software".into()],
            paranoid: Some(2),
            root: true,
        };
        let rows: Vec<(CounterRequest, Support)> =
            ["instructions", "page-faults", "cycles", "LLC-loads"]
                .iter()
                .map(|n| {
                    let r = CounterRequest::new(find_event(n).unwrap());
                    let s = no_pmu(&r);
                    (r, s)
                })
                .collect();
        let t = list_counters_table(&facts, &rows, Err("valgrind is not installed".into()));
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("perf_event_paranoid: 2"), "{t}");
        assert!(
            lines[2].starts_with("instructions") && lines[2].contains(" no "),
            "{t}"
        );
        assert!(lines[2].contains("fix: bare metal"), "{t}");
        assert!(
            lines[3].starts_with("page-faults") && lines[3].contains(" yes "),
            "{t}"
        );
        assert!(lines[4].ends_with(" no         as for instructions"), "{t}");
        assert!(lines[5].starts_with("LLC-loads"), "{t}");
        assert!(lines[5].ends_with("as for instructions"), "{t}");
        assert!(
            lines[6].contains("valgrind") && lines[6].contains("not installed"),
            "{t}"
        );
    }
}
